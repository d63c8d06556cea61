"""Parsed Prometheus text → the operator's report (R-X1): pure functions, no I/O.

Reading follows the seed's workflow (seeds/hami-vgpu-metrics-summarizer.txt): identify the
families (families.py), normalise units, build devices, containers and namespaces, then check
what should add up. Several sources merge: a scheduler scrape and monitor scrapes, or this
agent's /metrics from several nodes.

Devices are told apart by node and index, then by UUID: two devices that share a (redacted)
UUID stay two devices, and a series that names only the UUID is attributed through its pod
when the scheduler places the pod on one of them, else reported (a finding, not a guess).
Where two families publish one figure, the current name wins over the legacy one and the two
are compared.
"""

from __future__ import annotations

import difflib
import math
from collections import defaultdict
from collections.abc import Sequence

from devicemanager.report.checks import (
    collisions,
    container_checks,
    device_checks,
    flush_collected,
    own_limit,
    own_used,
    partial_checks,
    quota_checks,
)
from devicemanager.report.families import (
    BY_NAME,
    USAGE_FIGURES,
    Figure,
    Scope,
    Surface,
    ignored_reason,
)
from devicemanager.report.model import (
    KIND_ORDER,
    Container,
    Device,
    Kind,
    Namespace,
    Quota,
    Report,
    SourceInfo,
    Totals,
)
from devicemanager.report.parse import Parsed, parse
from devicemanager.report.read import (
    Observation,
    completeness,
    family_of,
    merge_rows,
    mig_placements,
    read_container,
    read_device,
    read_quota,
    scope_of,
    settle,
)
from devicemanager.report.state import (
    FULL,
    MAX_LISTED,
    Built,
    DeviceAcc,
    F,
    RowOut,
    State,
    Value,
    differs,
    index_of,
    listed,
    num,
    percent,
    pick_value,
    row_figure,
    sum_of,
    tolerance,
)


def _totals(built: Sequence[Built]) -> Totals:
    """Capacity over devices. Allocated, limit, free and percent of a dimension are summed
    over the devices that publish both its allocation and its limit, so that "a of b" is
    always of one set of devices; how many that is stands beside them."""
    with_cores = [b for b in built if b.cores_limit is not None and b.cores_allocated is not None]
    with_memory = [
        b for b in built if b.memory_limit is not None and b.memory_allocated is not None
    ]
    free_cores = [max(0.0, (b.cores_limit or 0) - (b.cores_allocated or 0)) for b in with_cores]
    free_memory = [max(0.0, (b.memory_limit or 0) - (b.memory_allocated or 0)) for b in with_memory]
    cores_limit = sum_of(b.cores_limit for b in with_cores)
    cores_allocated = sum_of(b.cores_allocated for b in with_cores)
    memory_limit = sum_of(b.memory_limit for b in with_memory)
    memory_allocated = sum_of(b.memory_allocated for b in with_memory)
    states = [b.state() for b in built]
    known = [s for s in states if s is not None]
    return Totals(
        devices=len(built),
        cores_devices=len(with_cores),
        cores_limit=num(cores_limit),
        cores_allocated=num(cores_allocated),
        cores_free=num(sum(free_cores)) if free_cores else None,
        core_allocation_percent=percent(cores_allocated, cores_limit),
        memory_devices=len(with_memory),
        memory_limit_mib=num(memory_limit),
        memory_allocated_mib=num(memory_allocated),
        memory_free_mib=num(sum(free_memory)) if free_memory else None,
        memory_allocation_percent=percent(memory_allocated, memory_limit),
        idle_devices=states.count("idle") if known else None,
        full_devices=states.count("full") if known else None,
        partial_devices=states.count("partial") if known else None,
        largest_free_cores=num(max(free_cores)) if free_cores else None,
        largest_free_memory_mib=num(max(free_memory)) if free_memory else None,
        host_memory_used_mib=num(sum_of(b.host_memory for b in built)),
    )


def _distribution(built: Sequence[Built]) -> tuple[str | None, str | None, str | None]:
    """How use spreads over the devices: idle, even, concentrated or fragmented, by
    allocation where the input has it, else by memory in use."""
    basis = "allocation"
    fractions = [f for f in (b.fraction() for b in built) if f is not None]
    if not fractions:
        basis = "usage"
        fractions = [f for f in (b.usage_fraction() for b in built) if f is not None]
    if not fractions:
        return None, None, None
    n = len(fractions)
    if n < 2:
        return None, basis, "only one device has the figures to judge a spread by"
    judged = "" if n == len(built) else f" (judged on the {n} of {len(built)} devices with figures)"
    in_use = [f for f in fractions if f > 0]
    partial = [f for f in fractions if 0 < f < FULL]
    idle = n - len(in_use)
    free = sum(1 - f for f in fractions)
    what = "allocated" if basis == "allocation" else "in use"
    if not in_use:
        return "idle", basis, f"nothing is {what} on any of the {n} devices{judged}"
    if len(partial) >= 2 and idle == 0 and free >= 1:
        return (
            "fragmented",
            basis,
            f"{len(partial)} of {n} devices are partly {what} and none is free: "
            f"{round(free, 2)} devices' worth of capacity is left only in pieces, so small "
            f"requests fit and whole-device ones may not{judged}",
        )
    spread = max(fractions) - min(fractions)
    if spread <= 0.25:
        return (
            "even",
            basis,
            f"every device is within 25 points of the others ({round(min(fractions) * 100)}%"
            f" to {round(max(fractions) * 100)}% {what}){judged}",
        )
    return (
        "concentrated",
        basis,
        f"{len(in_use)} of {n} devices carry the load ({idle} with nothing {what}); "
        f"from {round(min(fractions) * 100)}% to {round(max(fractions) * 100)}% {what}{judged}",
    )


def summarize(parsed: Sequence[Parsed]) -> Report:
    state = State()
    observations: list[Observation] = []
    nonfinite: list[str] = []
    seen: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[float, str]] = {}
    for p in parsed:
        for u in p.unreadable[:MAX_LISTED]:
            state.find(Kind.UNPARSEABLE, f"{p.source} line {u.line}: {u.reason}: {u.excerpt!r}")
        if len(p.unreadable) > MAX_LISTED:
            state.find(
                Kind.UNPARSEABLE,
                f"{p.source}: {len(p.unreadable) - MAX_LISTED} more unreadable line(s)",
            )
        declared = dict(p.types)
        declared.update({name: "" for name, _, _ in p.declared if name not in declared})
        for sample in p.samples:
            name = family_of(sample, declared)
            family = BY_NAME.get(name)
            if family is None:
                if ignored_reason(name) is not None:
                    state.ignored.add(name)
                else:
                    state.unrecognised.setdefault(name, []).append((p.source, sample.where()))
                continue
            if not math.isfinite(sample.value):
                nonfinite.append(f"{name} {p.source} {sample.where()}")
                continue
            key = (name, tuple(sorted(kv for kv in sample.labels if kv[0] != "zone")))
            earlier = seen.get(key)
            if earlier is not None:
                if differs(earlier[0], sample.value, 0.0):
                    state.disagreements.setdefault((name, name, "duplicate"), []).append(
                        f"{earlier[1]} {num(earlier[0])} vs {p.source} {sample.where()} "
                        f"{num(sample.value)}"
                    )
                continue
            seen[key] = (sample.value, f"{p.source} {sample.where()}")
            observations.append(Observation(family, sample, p.source, scope_of(family, sample)))
            state.surfaces.add(family.surface)
            if family.figure in USAGE_FIGURES:
                state.usage = True
    if nonfinite:
        state.find(
            Kind.UNIT,
            f"{len(nonfinite)} sample(s) are NaN or infinite and were not used as figures "
            f"({listed(nonfinite)})",
        )
    for obs in observations:
        if obs.family.figure is F.DEVICE_INFO and (parent := obs.sample.label("parent_id")):
            state.boards.add(parent)
    devices = sorted((o for o in observations if o.scope is Scope.DEVICE), key=completeness)
    for obs in devices:
        read_device(state, obs)
    for obs in observations:
        if obs.scope is Scope.CONTAINER:
            read_container(state, obs)
        elif obs.scope is Scope.QUOTA:
            read_quota(state, obs)
    for p in parsed:
        partial_checks(state, p)
    collisions(state)

    settle(state)
    rows = merge_rows(state)
    outs: list[RowOut] = []
    for row in rows:
        outs.append(
            RowOut(
                row=row,
                cores_allocated=row_figure(state, row, F.CORES_ALLOCATED),
                memory_allocated=row_figure(state, row, F.MEMORY_ALLOCATED),
                memory_limit=row_figure(state, row, F.MEMORY_LIMIT),
                memory_used=row_figure(state, row, F.MEMORY_USED),
                cores_used=row_figure(state, row, F.CORES_USED),
                cores_of_limit=row_figure(state, row, F.CORES_USED_OF_LIMIT),
                last_kernel=row_figure(state, row, F.LAST_KERNEL),
                context=row_figure(state, row, F.MEMORY_CONTEXT),
                module=row_figure(state, row, F.MEMORY_MODULE),
                buffer=row_figure(state, row, F.MEMORY_BUFFER),
            )
        )
    by_device: dict[int, list[RowOut]] = defaultdict(list)
    for o in outs:
        if o.row.device is not None:
            by_device[id(o.row.device)].append(o)

    def pick(d: DeviceAcc, figure: Figure) -> float | None:
        return pick_value(
            state, d.figures.get(figure, []), f"{d.label()} {figure.value}", tolerance(figure)
        )

    built: list[Built] = []
    for d in state.devices:
        b = Built(
            device=d,
            cores_limit=pick(d, F.CORES_LIMIT),
            cores_allocated=pick(d, F.CORES_ALLOCATED),
            memory_limit=pick(d, F.MEMORY_LIMIT),
            memory_allocated=pick(d, F.MEMORY_ALLOCATED),
            shared=pick(d, F.SHARED),
            ratio=pick(d, F.MEMORY_ALLOCATED_RATIO),
            host_cores=pick(d, F.HOST_CORES),
            host_memory=pick(d, F.HOST_MEMORY_USED),
            host_total=pick(d, F.HOST_MEMORY_TOTAL),
            rows=[o.row for o in by_device.get(id(d), [])],
        )
        built.append(b)
        device_checks(state, b, by_device.get(id(d), []))
    for o in outs:
        container_checks(state, o)

    built.sort(key=_device_order)
    device_out = tuple(_device(b, state) for b in built)
    container_out = tuple(sorted((_container(o) for o in outs), key=_container_order))
    namespaces = _namespaces(state, outs)
    flush_collected(state)
    for name, where in sorted(state.unrecognised.items()):
        close = difflib.get_close_matches(name, list(BY_NAME), n=1, cutoff=0.85)
        hint = f" (did you mean {close[0]}?)" if close else ""
        lines = listed([f"{src} {line}" for src, line in where])
        state.find(
            Kind.UNRECOGNISED,
            f"{name}: {len(where)} sample(s) of a family this report does not know, not "
            f"summarized{hint}: {lines}",
        )
    nodes = tuple(sorted({d.node for d in state.devices if d.node is not None}))
    per_node = {node: _totals([b for b in built if b.device.node == node]) for node in nodes}
    distribution, distribution_basis, reason = _distribution(built)
    allocation = Surface.ALLOCATION in state.surfaces
    basis = (
        "both" if allocation and state.usage
        else "allocation" if allocation
        else "usage" if state.usage
        else None
    )  # fmt: skip
    findings = sorted(state.findings, key=lambda f: KIND_ORDER[f.kind])
    return Report(
        basis=basis,
        nodes=nodes,
        devices=device_out,
        containers=container_out,
        namespaces=namespaces,
        capacity=_totals(built),
        per_node=per_node,
        distribution=distribution,
        distribution_basis=distribution_basis,
        distribution_reason=reason,
        findings=tuple(findings),
        unrecognised=tuple(sorted(state.unrecognised)),
        ignored=tuple(sorted(state.ignored)),
        sources=tuple(
            SourceInfo(p.source, p.lines, len(p.samples), len(p.unreadable)) for p in parsed
        ),
    )


def _device_order(b: Built) -> tuple[str, int, str, str]:
    d = b.device
    index = index_of(d.index)
    return (
        d.node or "\uffff",
        index if isinstance(index, int) else 1 << 30,
        str(index) if index is not None else "",
        d.uuid or "",
    )


def _device(b: Built, state: State) -> Device:
    d = b.device
    return Device(
        uuid=d.uuid,
        node=d.node,
        index=index_of(d.index),
        type=d.type,
        cores_limit=num(b.cores_limit),
        cores_allocated=num(b.cores_allocated),
        memory_limit_mib=num(b.memory_limit if b.memory_limit is not None else b.host_total),
        memory_allocated_mib=num(b.memory_allocated),
        shared_containers=num(b.shared),
        containers=len(b.rows) if state.container_families else None,
        host_cores_utilization_percent=num(b.host_cores),
        host_memory_used_mib=num(b.host_memory),
        state=b.state(),
        core_allocation_percent=percent(b.cores_allocated, b.cores_limit),
        memory_allocation_percent=percent(b.memory_allocated, b.memory_limit),
        mig_instances=mig_placements(state, d),
    )


def _container(o: RowOut) -> Container:
    r = o.row
    d = r.device
    return Container(
        namespace=r.namespace,
        pod=r.pod,
        container=r.container,
        node=r.node or (d.node if d else None),
        device=(d.uuid if d else None) or r.uuid,
        vdevice_index=r.vdevice_index,
        cores_allocated=num(o.cores_allocated),
        memory_allocated_mib=num(o.memory_allocated),
        memory_limit_mib=num(o.memory_limit),
        memory_used_mib=num(o.memory_used),
        cores_used_percent=num(o.cores_used),
        container_index=r.container_index,
        device_index=index_of(d.index) if d else None,
        cores_used_percent_of_limit=num(o.cores_of_limit),
        last_kernel_seconds=num(o.last_kernel),
        mode=r.mode,
        mig_instance=r.mig,
    )


def _container_order(c: Container) -> tuple[str, ...]:
    return (
        c.namespace or "",
        c.pod or "",
        c.container or "",
        c.container_index or "",
        c.node or "",
        str(c.device_index or ""),
        c.device or "",
        c.vdevice_index or "",
    )


def _namespaces(state: State, outs: list[RowOut]) -> dict[str, Namespace]:
    names = {o.row.namespace for o in outs if o.row.namespace is not None}
    names |= {ns for ns, _ in state.quota}
    raw: dict[str, dict[str, float | None]] = {}
    quotas: dict[str, dict[str, Quota]] = {}
    quota_by_ns: dict[str, list[tuple[str, dict[Figure, list[Value]]]]] = defaultdict(list)
    for (quota_ns, resource), figures in sorted(state.quota.items()):
        quota_by_ns[quota_ns].append((resource, figures))
    by_ns: dict[str | None, list[RowOut]] = defaultdict(list)
    for o in outs:
        by_ns[o.row.namespace].append(o)
    for ns in sorted(names):
        rows = by_ns[ns]
        raw[ns] = {
            "cores": sum_of(o.cores_allocated for o in rows),
            "memory": sum_of(o.memory_allocated for o in rows),
            "limit": own_limit(rows),
            "used": own_used(rows),
        }
        quotas[ns] = {}
        for resource, figures in quota_by_ns.get(ns, []):
            used = pick_value(state, figures.get(F.QUOTA_USED, []), f"{ns} {resource} used", 0.0)
            limit = pick_value(state, figures.get(F.QUOTA_LIMIT, []), f"{ns} {resource} limit", 0.0)
            quotas[ns][resource] = Quota(num(used), num(limit))
        quota_checks(state, ns, quotas[ns], raw[ns])
    all_cores = sum_of(v["cores"] for v in raw.values())
    all_memory = sum_of(v["memory"] for v in raw.values())
    out: dict[str, Namespace] = {}
    for ns in sorted(names):
        rows = by_ns[ns]
        out[ns] = Namespace(
            pods=len({o.row.pod for o in rows}) if state.container_families else None,
            cores_allocated=num(raw[ns]["cores"]),
            memory_allocated_mib=num(raw[ns]["memory"]),
            memory_limit_mib=num(raw[ns]["limit"]),
            memory_used_mib=num(raw[ns]["used"]),
            quota=quotas[ns],
            core_share_percent=percent(raw[ns]["cores"], all_cores),
            memory_share_percent=percent(raw[ns]["memory"], all_memory),
        )
    return out


def summarize_texts(texts: Sequence[tuple[str, str]]) -> Report:
    """Each (source name, text) parsed, then summarized together."""
    return summarize([parse(name, text) for name, text in texts])
