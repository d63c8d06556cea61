"""What does not add up, and what the input lacks: every finding but the unit and
recognition ones made while reading (seeds/hami-vgpu-metrics-summarizer.txt, step 10)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable

from devicemanager.report.families import (
    DEVICE_SETS,
)
from devicemanager.report.model import (
    Kind,
    Quota,
)
from devicemanager.report.parse import LineKind, Parsed
from devicemanager.report.read import (
    quota_kind,
)
from devicemanager.report.state import (
    DRA_LABELS,
    TOLERANCE_MIB,
    Built,
    DeviceAcc,
    RowOut,
    State,
    differs,
    listed,
    num,
    sum_of,
)


def partial_checks(state: State, parsed: Parsed) -> None:
    src = parsed.source
    by_family: dict[str, int] = defaultdict(int)
    for s in parsed.samples:
        by_family[s.name] += 1
    last_sample = max((s.line for s in parsed.samples), default=0)
    if parsed.last_kind is LineKind.UNREADABLE:
        last = parsed.unreadable[-1]
        state.find(
            Kind.PARTIAL,
            f"{src} ends mid-line: line {last.line} ({last.excerpt!r}) {last.reason}; the text "
            "was probably cut off there, and what followed is not in this report",
        )
    elif parsed.last_kind is LineKind.SAMPLE and not parsed.ends_with_newline:
        state.find(
            Kind.PARTIAL,
            f"{src} does not end with a newline: its last sample (line {last_sample}) may be "
            "cut short",
        )
    # Exposition writes HELP then TYPE; a text whose last line is a HELP was cut between
    # them. (A family declared with no samples is an empty family, not a cut.)
    if parsed.declared and parsed.last_kind is LineKind.COMMENT:
        name, what, line = parsed.declared[-1]
        if what == "HELP" and line > last_sample and by_family.get(name, 0) == 0:
            state.find(
                Kind.PARTIAL,
                f"{src} ends with the HELP of {name} (line {line}), before its TYPE and "
                "samples; the text may have been cut off there",
            )
    abbreviated = [s.line for s in parsed.samples if s.abbreviated]
    if abbreviated:
        state.find(
            Kind.PARTIAL,
            f"{src}: {len(abbreviated)} line(s) abbreviate their label set with an ellipsis "
            f"(lines {listed([str(n) for n in abbreviated])}); labels left out may name the "
            "device or pod",
        )
    dra = {
        s.name for s in parsed.samples if s.label(*DRA_LABELS) is not None
    }  # HAMi-DRA publishes no shared count
    for family_set in DEVICE_SETS:
        if dra & set(family_set):
            continue
        present = [n for n in family_set if by_family.get(n)]
        if present and len(present) < len(family_set):
            missing = [n for n in family_set if n not in present]
            state.find(
                Kind.PARTIAL,
                f"{src} has {', '.join(present)} but not {', '.join(missing)}, which are "
                "published together for every device; the text may have been cut off or "
                "filtered",
            )
        if len(present) < 2:
            continue
        for d in state.devices:
            named = d.families.get(src, set()) & set(present)
            if named and named != set(present):
                lacking = sorted(set(present) - named)
                state.find(
                    Kind.PARTIAL,
                    f"{src}: device {d.label()} has no {', '.join(lacking)} though other "
                    "devices do; the text may have been cut off inside that family",
                )


def flush_collected(state: State) -> None:
    for (source, family, problem), where in state.unit_problems.items():
        state.find(
            Kind.UNIT,
            f"{family} ({source}): {len(where)} value(s): {problem}. E.g. {listed(where)}",
        )
    for (source, why), what in state.unattributed.items():
        state.find(
            Kind.AMBIGUOUS,
            f"{source}: {len(what)} series {why} and were not attributed "
            f"({listed(what)}); a device is named by node and index, or by a unique UUID",
        )
    for (best, other, how), items in state.disagreements.items():
        if how == "duplicate":
            state.find(
                Kind.DUPLICATE,
                f"{best} appears more than once with different values ({listed(items)}); the "
                "first read is used",
            )
        else:
            state.find(
                Kind.INCONSISTENCY,
                f"{best} and {other} disagree on {len(items)} series ({listed(items)}); "
                f"{best} is used",
            )


def collisions(state: State) -> None:
    by_uuid: dict[str, list[DeviceAcc]] = defaultdict(list)
    by_place: dict[tuple[str, str], list[DeviceAcc]] = defaultdict(list)
    for d in state.devices:
        if d.uuid is not None:
            by_uuid[d.uuid].append(d)
        if d.node is not None and d.index is not None:
            by_place[(d.node, d.index)].append(d)
    for (node, index), devices in sorted(by_place.items()):
        if len(devices) > 1:
            uuids = ", ".join(d.uuid or "UUID not present" for d in devices)
            state.find(
                Kind.COLLISION,
                f"{len(devices)} devices with different UUIDs ({uuids}) are at {node} #{index}; "
                "they are kept apart (series from different times, or a relabelled node?)",
            )
    for uuid, devices in sorted(by_uuid.items()):
        if len(devices) > 1:
            places = ", ".join(
                f"{d.node or 'node not present'} #{d.index if d.index is not None else '?'}"
                for d in devices
            )
            state.find(
                Kind.COLLISION,
                f"{len(devices)} devices share the UUID {uuid} ({places}); a redacted UUID? "
                "They are kept apart by node and index; a series naming only the UUID is "
                "attributed through its pod where the scheduler places the pod on one of them",
            )


def container_checks(state: State, r: RowOut) -> None:
    label = r.row.label()
    device = r.row.device.label() if r.row.device else (r.row.uuid or "an unnamed device")
    parts = [p for p in (r.context, r.module, r.buffer) if p is not None]
    if parts and r.memory_used is not None and sum(parts) > r.memory_used + TOLERANCE_MIB:
        state.find(
            Kind.INCONSISTENCY,
            f"{label} on {device}: context, module and buffer memory add up to "
            f"{num(sum(parts))} MiB, more than the {num(r.memory_used)} MiB it uses in total",
        )
    if (
        r.memory_used is not None
        and r.memory_limit is not None
        and r.memory_used > r.memory_limit + TOLERANCE_MIB
    ):
        state.find(
            Kind.CAPACITY,
            f"{label} on {device} uses {num(r.memory_used)} MiB, above its limit of "
            f"{num(r.memory_limit)} MiB",
        )


def device_checks(state: State, b: Built, outs: list[RowOut]) -> None:
    d = b.device
    label = d.label()
    for what, alloc, limit, unit in (
        ("cores", b.cores_allocated, b.cores_limit, ""),
        ("memory", b.memory_allocated, b.memory_limit, " MiB"),
    ):
        if (
            alloc is not None
            and limit is not None
            and alloc > limit + (TOLERANCE_MIB if unit else 0)
        ):
            state.find(
                Kind.CAPACITY,
                f"{label}: {num(alloc)}{unit} {what} allocated of {num(limit)}{unit}: "
                "allocation above capacity (oversubscribed, or a stale scheduler cache)",
            )
    if b.ratio is not None and b.memory_allocated is not None and b.memory_limit:
        expected = b.memory_allocated / b.memory_limit
        if abs(b.ratio - expected) > 0.01 and abs(b.ratio - expected * 100) > 1:
            state.find(
                Kind.INCONSISTENCY,
                f"{label}: memory allocated ratio {num(b.ratio)} does not match "
                f"{num(b.memory_allocated)} / {num(b.memory_limit)} MiB ({round(expected, 4)})",
            )
    alloc_rows = [o for o in outs if o.allocation()]
    if state.container_allocation:
        if b.shared is not None and b.shared != len(alloc_rows):
            state.find(
                Kind.INCONSISTENCY,
                f"{label}: HAMi counts {num(b.shared)} container(s) sharing it, the input "
                f"holds {len(alloc_rows)} container allocation(s) on it",
            )
        for what, total, figure_sum, unit in (
            ("memory", b.memory_allocated, sum_of(o.memory_allocated for o in alloc_rows), " MiB"),
            ("cores", b.cores_allocated, sum_of(o.cores_allocated for o in alloc_rows), ""),
        ):
            if total is None:
                continue
            summed = figure_sum or 0.0
            if differs(total, summed, TOLERANCE_MIB if unit else 0.5):
                state.find(
                    Kind.INCONSISTENCY,
                    f"{label}: {num(total)}{unit} {what} allocated on the device, "
                    f"{num(summed)}{unit} in its containers' allocations",
                )
    used = own_used(outs)
    if used is not None and b.host_memory is not None and used > b.host_memory + TOLERANCE_MIB:
        state.find(
            Kind.INCONSISTENCY,
            f"{label}: its containers use {num(used)} MiB together, more than the "
            f"{num(b.host_memory)} MiB in use on the card",
        )
    if b.memory_allocated and b.cores_allocated == 0 and b.cores_limit:
        state.find(
            Kind.INVESTIGATE,
            f"{label}: {num(b.memory_allocated)} MiB allocated with no core share: its "
            "containers did not ask for gpucores and are not compute-capped",
        )
    if b.cores_allocated and b.memory_allocated == 0 and b.memory_limit:
        state.find(
            Kind.INVESTIGATE,
            f"{label}: {num(b.cores_allocated)} cores allocated with no memory",
        )
    if not d.device_series:
        pods = sorted({o.row.label() for o in outs})
        state.find(
            Kind.ORPHAN,
            f"{label} appears only in container series ({listed(pods)}); no device-level "
            "series names it, so its capacity and allocation are not present",
        )


def own_used(outs: Iterable[RowOut]) -> float | None:
    """Memory the containers use together. A card-wide figure (this agent's Shared grants
    publish the card's use for each tenant) counts once per device, not once per tenant."""
    return _card_wide_once(outs, lambda o: o.memory_used)


def own_limit(outs: Iterable[RowOut]) -> float | None:
    """The memory limits of the containers together. A Shared grant's limit is the whole
    card's, stated once per holder: it counts once per device, not once per holder (two
    holders of one 81,559 MiB card are 81,559 MiB, not 163,118)."""
    return _card_wide_once(outs, lambda o: o.memory_limit)


def _card_wide_once(
    outs: Iterable[RowOut], figure: Callable[[RowOut], float | None]
) -> float | None:
    total: list[float | None] = []
    card_wide: dict[int, float] = {}
    for o in outs:
        value = figure(o)
        if value is None:
            continue
        if o.row.mode == "Shared" and o.row.device is not None:
            key = id(o.row.device)
            card_wide[key] = max(card_wide.get(key, 0.0), value)
        else:
            total.append(value)
    return sum_of([*total, *card_wide.values()])


def quota_checks(
    state: State, ns: str, quotas: dict[str, Quota], sums: dict[str, float | None]
) -> None:
    if not state.container_allocation:
        return
    for kind, key, unit in (("memory", "memory", " MiB"), ("cores", "cores", "")):
        resources = [r for r in quotas if quota_kind(r) == kind and quotas[r].used is not None]
        if not resources:
            continue
        used = float(sum(quotas[r].used or 0 for r in resources))
        summed = sums[key] or 0.0
        if differs(used, summed, TOLERANCE_MIB if unit else 0.5):
            state.find(
                Kind.INCONSISTENCY,
                f"namespace {ns}: quota used {num(used)}{unit} ({', '.join(resources)}) but its "
                f"pods' allocations add up to {num(summed)}{unit} (scrape timing, a stale "
                "scheduler cache, pods not yet reconciled, or a cut-off input)",
            )
