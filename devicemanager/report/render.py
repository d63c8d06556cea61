"""The report for people (text) and for scripts (JSON)."""

from __future__ import annotations

import json

from devicemanager.report.model import Container, Device, Number, Report, Totals

ABSENT = "not present"


def to_json(report: Report) -> str:
    return json.dumps(report.to_json(), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def _v(value: Number | str | None, unit: str = "") -> str:
    return ABSENT if value is None else f"{value}{unit}"


def _of(part: Number | None, whole: Number | None, unit: str, pct: Number | None) -> str:
    """ "a of b (p%)", saying which side is not present."""
    if part is None and whole is None:
        return ABSENT
    if part is None:
        return f"{ABSENT} (capacity {whole}{unit})"
    if whole is None:
        return f"{part}{unit} (capacity {ABSENT})"
    return f"{part}{unit} of {whole}{unit}" + (f" ({pct}%)" if pct is not None else "")


def _share(value: Number | None, unit: str, pct: Number | None) -> str:
    if value is None:
        return ABSENT
    return f"{value}{unit}" + (f" ({pct}% of all)" if pct is not None else "")


def _basis_line(report: Report) -> str:
    if report.basis == "allocation":
        return (
            "Basis: allocation only (HAMi scheduler families). Utilization here is "
            "allocation-based: what the scheduler reserved, not measured compute."
        )
    if report.basis == "usage":
        return (
            "Basis: measured usage only (no scheduler allocation families): allocation, "
            "free capacity and namespace quotas cannot be judged from this input."
        )
    if report.basis == "both":
        return (
            "Basis: allocation and measured usage. Allocation is what the scheduler "
            "reserved; usage is what the monitor or this agent measured."
        )
    return "Basis: the input holds no allocation or usage families."


def _on(counted: int, devices: int) -> str:
    if counted == devices:
        return ""
    return f" on the {counted} of {devices} devices publishing both"


def _totals_lines(t: Totals, indent: str) -> list[str]:
    cores = (
        f"{t.cores_allocated} of {t.cores_limit} ({_v(t.core_allocation_percent, '%')}); "
        f"free {t.cores_free}{_on(t.cores_devices, t.devices)}"
        if t.cores_devices
        else ABSENT
    )
    memory = (
        f"{t.memory_allocated_mib} MiB of {t.memory_limit_mib} MiB "
        f"({_v(t.memory_allocation_percent, '%')}); free {t.memory_free_mib} MiB"
        f"{_on(t.memory_devices, t.devices)}"
        if t.memory_devices
        else ABSENT
    )
    lines = [
        f"{indent}cores allocated   {cores}",
        f"{indent}memory allocated  {memory}",
    ]
    if t.idle_devices is not None:
        lines.append(
            f"{indent}devices           {t.idle_devices} idle, {t.full_devices} full, "
            f"{t.partial_devices} partly allocated"
        )
    if t.largest_free_cores is not None or t.largest_free_memory_mib is not None:
        lines.append(
            f"{indent}largest free      cores {_v(t.largest_free_cores)}, memory "
            f"{_v(t.largest_free_memory_mib, ' MiB')} (on one device)"
        )
    if t.host_memory_used_mib is not None:
        lines.append(f"{indent}memory in use     {t.host_memory_used_mib} MiB (measured)")
    return lines


def _device_lines(d: Device) -> list[str]:
    index = "index not present" if d.index is None else f"#{d.index}"
    head = f"  {d.node or 'node not present'} {index}  {d.uuid or 'UUID not present'}"
    if d.type:
        head += f"  {d.type}"
    if d.state:
        head += f"  [{d.state}]"
    lines = [
        head,
        f"    cores allocated   "
        f"{_of(d.cores_allocated, d.cores_limit, '', d.core_allocation_percent)}",
        f"    memory allocated  "
        f"{_of(d.memory_allocated_mib, d.memory_limit_mib, ' MiB', d.memory_allocation_percent)}",
        f"    sharing           HAMi's count {_v(d.shared_containers)}; containers seen "
        f"{_v(d.containers)}",
        f"    measured          utilization {_v(d.host_cores_utilization_percent, '%')}; "
        f"memory in use {_v(d.host_memory_used_mib, ' MiB')}",
    ]
    for m in d.mig_instances or ():
        lines.append(
            f"    MIG instance      {m.profile or 'profile not present'} "
            f"GI {_v(m.gpu_instance_id)} CI {_v(m.compute_instance_id)} {m.uuid or ''}".rstrip()
        )
    return lines


def _container_lines(c: Container) -> list[str]:
    who = f"{c.namespace or 'namespace not present'}/{c.pod or 'pod not present'}"
    if c.container:
        who += f" container {c.container}"
    if c.container_index is not None:
        who += f" (slot {c.container_index})"
    where = f"{c.device or 'device not present'}"
    if c.device_index is not None or c.node:
        where += f" ({c.node or 'node not present'} #{_v(c.device_index)})"
    if c.vdevice_index is not None:
        where += f", seen as its device {c.vdevice_index}"
    lines = [f"  {who} on {where}"]
    if c.mode:
        # This agent's Exclusive and Shared grants publish the card's figures, not their own.
        card_wide = ", the card's figures" if c.mode in ("Exclusive", "Shared") else ""
        lines[0] += f"  [{c.mode}{card_wide}]"
    lines.append(
        f"    allocated  cores {_v(c.cores_allocated)}, memory {_v(c.memory_allocated_mib, ' MiB')}"
    )
    used = (
        f"    measured   memory used {_v(c.memory_used_mib, ' MiB')}, limit "
        f"{_v(c.memory_limit_mib, ' MiB')}, utilization {_v(c.cores_used_percent, '%')}"
    )
    if c.cores_used_percent_of_limit is not None:
        used += f" ({c.cores_used_percent_of_limit}% of its own allowance)"
    if c.last_kernel_seconds is not None:
        used += f", last kernel {c.last_kernel_seconds}s ago"
    lines.append(used)
    if c.mig_instance is not None:
        m = c.mig_instance
        lines.append(f"    MIG        {m.profile or 'profile not present'} {m.uuid or ''}".rstrip())
    return lines


def _sources_lines(report: Report) -> list[str]:
    """Sources found in the cluster (R-X9), by node: each one answered, or why not."""
    answered = sum(1 for s in report.sources if s.answered)
    lines = [f"Sources: {answered} of {len(report.sources)} answered"]
    by_node = sorted(report.sources, key=lambda s: (s.node is not None, s.node or ""))
    for s in by_node:
        where = f"node {s.node}" if s.node is not None else "cluster"
        said = f"answered, {s.samples} sample(s)" if s.answered else f"did not answer: {s.error}"
        lines.append(f"  {where:<18} {s.kind or 'source':<9} {s.name}: {said}")
    return lines


def to_text(report: Report) -> str:
    if any(s.kind is not None for s in report.sources):  # found in the cluster
        answered = sum(1 for s in report.sources if s.answered)
        head = f"Accelerator summary of the cluster ({answered} of {len(report.sources)} sources)"
        lines = [head, _basis_line(report), "", *_sources_lines(report), ""]
    else:
        sources = ", ".join(s.name for s in report.sources) or "no source"
        lines = [f"Accelerator summary of {sources}", _basis_line(report), ""]
    c = report.capacity
    lines.append(f"Cluster: {len(report.nodes)} node(s), {c.devices} device(s)")
    lines.extend(_totals_lines(c, "  "))
    if report.distribution is not None:
        lines.append(
            f"  distribution      {report.distribution} (by {report.distribution_basis}): "
            f"{report.distribution_reason}"
        )
    else:
        why = f" ({report.distribution_reason})" if report.distribution_reason else ""
        lines.append(f"  distribution      {ABSENT}{why}")
    for node, totals in sorted(report.per_node.items()):
        lines.append("")
        lines.append(f"Node {node}: {totals.devices} device(s)")
        lines.extend(_totals_lines(totals, "  "))
    if report.devices:
        lines.append("")
        lines.append("Devices")
        for d in report.devices:
            lines.extend(_device_lines(d))
    if report.containers:
        lines.append("")
        lines.append("Containers")
        for ct in report.containers:
            lines.extend(_container_lines(ct))
    if report.namespaces:
        lines.append("")
        lines.append("Namespaces")
        for name, ns in report.namespaces.items():
            lines.append(f"  {name}: pods {_v(ns.pods)}")
            lines.append(
                f"    allocated  cores {_share(ns.cores_allocated, '', ns.core_share_percent)}, "
                f"memory {_share(ns.memory_allocated_mib, ' MiB', ns.memory_share_percent)}"
            )
            lines.append(
                f"    measured   memory used {_v(ns.memory_used_mib, ' MiB')}, limit "
                f"{_v(ns.memory_limit_mib, ' MiB')}"
            )
            for resource, q in ns.quota.items():
                limit = (
                    "limit not set (or not published)" if q.limit is None else f"limit {q.limit}"
                )
                lines.append(f"    quota {resource}: used {_v(q.used)}, {limit}")
    lines.append("")
    lines.append(f"Findings: {len(report.findings)}")
    for f in report.findings:
        lines.append(f"  [{f.kind.value}] {f.message}")
    if report.unrecognised:
        lines.append("")
        lines.append(f"Unrecognised families ({len(report.unrecognised)}), not summarized:")
        lines.append("  " + ", ".join(report.unrecognised))
    if report.ignored:
        lines.append("")
        lines.append(f"Known families not summarized ({len(report.ignored)}):")
        lines.append("  " + ", ".join(report.ignored))
    return "\n".join(lines) + "\n"
