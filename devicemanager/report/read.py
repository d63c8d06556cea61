"""Samples into devices, containers and quotas: label names resolved, units normalised, a
series matched to the one device it names (or reported when it names none or several)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from devicemanager.model import MIB
from devicemanager.report.families import (
    BY_NAME,
    Family,
    Figure,
    Scope,
    Surface,
    Unit,
    labels_for,
)
from devicemanager.report.model import (
    MigInstance,
)
from devicemanager.report.parse import Sample
from devicemanager.report.state import (
    AMBIGUOUS_DEVICE,
    CARD_WIDE,
    LARGEST_MIB,
    SMALLEST_BYTES,
    DeviceAcc,
    F,
    Row,
    State,
    Value,
    num,
)


def family_of(sample: Sample, declared: dict[str, str]) -> str:
    """The family a sample belongs to: its own name for gauges; the declared family for a
    counter's or histogram's suffixed samples."""
    if sample.name in BY_NAME or sample.name in declared:
        return sample.name
    for suffix in ("_total", "_bucket", "_sum", "_count", "_created", "_info"):
        base = sample.name.removesuffix(suffix)
        if base != sample.name and base in declared:
            return base
    return sample.name


def normalise(
    state: State,
    family: Family,
    figure: Figure,
    unit: Unit,
    value: float,
    source: str,
    where: Callable[[], str],
) -> float:
    """The value in the report's unit (MiB for memory). A value whose unit is implausible
    for its family stays as published, with a finding."""
    problem: str | None = None
    out = value
    if unit is Unit.BYTES:
        if 0 < value < SMALLEST_BYTES:
            problem = (
                "values below 1 MiB cannot be bytes of GPU memory; they are taken to be MiB "
                "(as HAMi-DRA and some releases publish them) and shown as published"
            )
        else:
            out = value / MIB
    elif unit is Unit.MIB:
        if value >= LARGEST_MIB:
            problem = "values this large cannot be MiB (they look like bytes); shown as published"
    elif unit is Unit.SHARE and figure is F.CORES_LIMIT and value > 100:
        problem = (
            "a core limit above 100 is not on HAMi's share scale (100 = one card); it may be "
            "compute units (AMD in legacy names) or a core scaling; shown as published"
        )
    elif unit is Unit.PERCENT and value > 100 and figure is not F.CORES_USED_OF_LIMIT:
        problem = (
            "a utilization above 100%: HAMi sums per-process samples for a container; "
            "shown as published"
        )
    elif unit is Unit.FRACTION and value > 1:
        problem = "a 0 to 1 ratio above 1: this one looks like a percentage; shown as published"
    if problem is not None:
        key = (source, family.name, problem)
        state.unit_problems.setdefault(key, []).append(f"{num(value)} on {where()}")
    return out


def where_of(sample: Sample, labels: dict[str, tuple[str, ...]]) -> str:
    uuid = label_of(sample, labels, "uuid")
    node = label_of(sample, labels, "node")
    pod = label_of(sample, labels, "pod")
    namespace = label_of(sample, labels, "namespace")
    parts = [p for p in (f"{namespace}/{pod}" if pod else None, uuid, node) if p]
    return " ".join(parts) or sample.where()


def label_of(sample: Sample, labels: dict[str, tuple[str, ...]], meaning: str) -> str | None:
    names = labels[meaning]
    value = sample.label(*(f"exported_{n}" for n in names))
    if value is None:
        value = sample.label(*names)
    return value if value != "" else None


def figures_of(
    state: State, family: Family, sample: Sample, source: str, figure: Figure | None = None
) -> list[tuple[Figure, float]]:
    """The figures one sample publishes: its value's (as `figure` where the caller knows
    better than the family), and those in its labels."""
    labels = labels_for(family)

    def where() -> str:
        return where_of(sample, labels)

    out: list[tuple[Figure, float]] = []
    if family.unit is not Unit.ONE:
        own = figure or family.figure
        value = normalise(state, family, own, family.unit, sample.value, source, where)
        out.append((own, value))
    for lf in family.label_figures:
        text = sample.label(lf.label)
        if text is None:
            continue
        try:
            raw = float(text)
        except ValueError:
            continue
        if math.isfinite(raw):
            out.append(
                (lf.figure, normalise(state, family, lf.figure, lf.unit, raw, source, where))
            )
    return out


def matches(d: DeviceAcc, node: str | None, index: str | None, uuid: str | None) -> bool:
    if uuid is not None and d.uuid is not None and uuid != d.uuid:
        return False
    if node is not None and d.node is not None and node != d.node:
        return False
    if index is not None and d.index is not None and index != d.index:
        return False
    by_uuid = uuid is not None and uuid == d.uuid
    by_place = node is not None and index is not None and node == d.node and index == d.index
    return by_uuid or by_place


def resolve(
    state: State,
    node: str | None,
    index: str | None,
    uuid: str | None,
    type_: str | None,
    what: str,
    source: str,
    defer: bool = False,
) -> DeviceAcc | None:
    """The one device a series names, made if none matches; None (and a finding) when the
    series could mean several devices or names none. With `defer`, a series that could mean
    several devices is left for the caller to settle (a container's pod may say which)."""
    if uuid is None and (node is None or index is None):
        state.unattributed.setdefault((source, "names no device"), []).append(what)
        return None
    near = state.by_uuid.get(uuid, []) if uuid is not None else []
    if node is not None and index is not None:
        near = near + state.by_place.get((node, index), [])
    candidates = list({id(d): d for d in near if matches(d, node, index, uuid)}.values())
    if len(candidates) > 1:
        if not defer:
            state.unattributed.setdefault((source, AMBIGUOUS_DEVICE), []).append(what)
        return None
    if candidates:
        d = candidates[0]
        d.node = d.node or node
        d.index = d.index if d.index is not None else index
        d.uuid = d.uuid or uuid
        d.type = d.type or type_
    else:
        d = DeviceAcc(node=node, index=index, uuid=uuid, type=type_)
        state.devices.append(d)
    state.index(d)
    return d


def mig_of(sample: Sample, labels: dict[str, tuple[str, ...]]) -> MigInstance:
    return MigInstance(
        uuid=label_of(sample, labels, "mig_uuid"),
        profile=label_of(sample, labels, "profile"),
        gpu_instance_id=label_of(sample, labels, "gpu_instance_id"),
        compute_instance_id=label_of(sample, labels, "compute_instance_id"),
    )


@dataclass(frozen=True, slots=True)
class Observation:
    family: Family
    sample: Sample
    source: str
    scope: Scope


def scope_of(family: Family, sample: Sample) -> Scope:
    """A family's scope for one sample: a name that is device-level early and per pod in
    HAMi-DRA is a container's where the series names a pod."""
    if family.scope is Scope.DEVICE_OR_CONTAINER:
        has_pod = label_of(sample, labels_for(family), "pod") is not None
        return Scope.CONTAINER if has_pod else Scope.DEVICE
    return family.scope


def completeness(obs: Observation) -> int:
    labels = labels_for(obs.family)
    return -sum(label_of(obs.sample, labels, k) is not None for k in ("node", "index", "uuid"))


def read_device(state: State, obs: Observation) -> None:
    family, sample = obs.family, obs.sample
    labels = labels_for(family)
    node = label_of(sample, labels, "node")
    index = label_of(sample, labels, "index")
    uuid = label_of(sample, labels, "uuid")
    if uuid is not None and uuid in state.boards:
        return  # a board whose partitions are listed as devices of their own
    what = f"{family.name} {sample.where()}"
    d = resolve(state, node, index, uuid, label_of(sample, labels, "type"), what, obs.source)
    if d is None:
        return
    d.device_series = True
    d.families[obs.source].add(family.name)
    if family.figure is F.MIG_PLACEMENT:
        placed = d.mig.setdefault((family.rank, family.name), {})
        # Releases before the runtime identity published one series per MIG template slot,
        # 1 in use and 0 free; a free slot is not an instance placed on the device.
        if sample.value != 0:
            m = mig_of(sample, labels)
            placed[(m.uuid, m.profile, m.gpu_instance_id, m.compute_instance_id)] = m
        return
    for figure, value in figures_of(state, family, sample, obs.source):
        d.figures[figure].append(Value(family.rank, value, family.name, obs.source))


def read_container(state: State, obs: Observation) -> None:
    family, sample = obs.family, obs.sample
    labels = labels_for(family)
    state.container_families = True
    node = label_of(sample, labels, "node")
    uuid = label_of(sample, labels, "uuid")
    index = label_of(sample, labels, "index")  # HAMi-DRA's and this agent's name the device's
    mig_uuid = None
    mode = label_of(sample, labels, "mode")
    partition = mode == "Partitioned" or (uuid is not None and uuid.startswith("MIG-"))
    if uuid is not None and partition and family.figure is not F.MIG_INSTANCE:
        # This agent names a partition (a MIG instance, a vNPU, an XCP) by its own id, and
        # its card by the index: the partition is not a device of its own.
        mig_uuid, uuid = uuid, None
    what = f"{family.name} {sample.where()}"
    device = resolve(state, node, index, uuid, None, what, obs.source, defer=True)
    namespace = label_of(sample, labels, "namespace")
    pod = label_of(sample, labels, "pod")
    container = label_of(sample, labels, "container")
    container_index = label_of(sample, labels, "container_index")
    vdevice = label_of(sample, labels, "vdevice_index")
    key = (namespace, pod, container, container_index, vdevice, node, id(device), uuid, mig_uuid)
    row = state.rows.get(key)
    if row is None:
        row = Row(namespace, pod, container, container_index, vdevice, node, uuid, device)
        state.rows[key] = row
    if device is None and uuid is not None:
        row.unresolved.append((obs.source, what))
    if mig_uuid is not None:
        row.mig = MigInstance(mig_uuid, None, None, None)
    row.mode = row.mode or mode
    if family.figure is F.MIG_INSTANCE:
        keep_mig(state, row, mig_of(sample, labels), (family.rank, family.name))
        return
    own: Figure | None = None
    if family.figure is F.CORES_USED and mode is not None and mode not in CARD_WIDE:
        # This agent states a slice's or partition's compute against its own allowance,
        # not the card's; it is kept apart from HAMi's percent of the card.
        own = F.CORES_USED_OF_LIMIT
    for figure, value in figures_of(state, family, sample, obs.source, own):
        if family.surface is Surface.ALLOCATION:
            state.container_allocation = True
        row.figures[figure].append(Value(family.rank, value, family.name, obs.source))


def keep_mig(state: State, row: Row, m: MigInstance, origin: tuple[int, str]) -> None:
    """A container's MIG identity: the best-ranked family's (the current one names the MIG
    UUID and profile, the legacy one only the GPU instance), completed from the others; a
    GPU instance two families name differently is a disagreement."""
    if row.mig is None or row.mig_from is None:
        row.mig, row.mig_from = m, origin
        return
    better, worse = (m, row.mig) if origin < row.mig_from else (row.mig, m)
    best_origin, other_origin = min(origin, row.mig_from), max(origin, row.mig_from)
    if (
        better.gpu_instance_id is not None
        and worse.gpu_instance_id is not None
        and better.gpu_instance_id != worse.gpu_instance_id
    ):
        how = "duplicate" if best_origin[1] == other_origin[1] else "disagree"
        state.disagreements.setdefault((best_origin[1], other_origin[1], how), []).append(
            f"{row.label()} MIG GPU instance: {better.gpu_instance_id} vs {worse.gpu_instance_id}"
        )
    row.mig = MigInstance(
        better.uuid or worse.uuid,
        better.profile or worse.profile,
        better.gpu_instance_id or worse.gpu_instance_id,
        better.compute_instance_id or worse.compute_instance_id,
    )
    row.mig_from = best_origin


def mig_placements(state: State, d: DeviceAcc) -> tuple[MigInstance, ...] | None:
    """The MIG instances placed on a device, as its best-ranked family lists them; another
    family that counts a different number in use is a disagreement."""
    if not d.mig:
        return None
    best = min(d.mig)
    for other in sorted(d.mig):
        if other != best and len(d.mig[other]) != len(d.mig[best]):
            state.disagreements.setdefault((best[1], other[1], "disagree"), []).append(
                f"{d.label()} MIG instances in use: {len(d.mig[best])} vs {len(d.mig[other])}"
            )
    chosen = d.mig[best]
    return tuple(chosen[k] for k in sorted(chosen, key=str))  # () when every slot is free


def read_quota(state: State, obs: Observation) -> None:
    family, sample = obs.family, obs.sample
    labels = labels_for(family)
    namespace = label_of(sample, labels, "namespace")
    resource = label_of(sample, labels, "quota")
    if namespace is None or resource is None:
        state.unattributed.setdefault((obs.source, "names no namespace or quota"), []).append(
            f"{family.name} {sample.where()}"
        )
        return
    figures = state.quota.setdefault((namespace, resource), defaultdict(list))
    value = sample.value
    if quota_kind(resource) == "memory" and value >= LARGEST_MIB:
        key = (obs.source, family.name, "quota memory is MiB; values this large look like bytes")
        state.unit_problems.setdefault(key, []).append(f"{num(value)} on {namespace} {resource}")
    figures[family.figure].append(Value(family.rank, value, family.name, obs.source))
    if family.figure is F.QUOTA_USED:
        limit = label_of(sample, labels, "limit")
        if limit is not None:
            try:
                limit_value = float(limit)
            except ValueError:
                return
            # "0" is HAMi's word for no limit set (hami_resource_quota_limit then has no
            # series); a limit is only what a quota states.
            if limit_value != 0 and math.isfinite(limit_value):
                figures[F.QUOTA_LIMIT].append(
                    Value(family.rank + 5, limit_value, family.name, obs.source)
                )


def quota_kind(resource: str) -> str | None:
    lowered = resource.lower()
    if "percentage" in lowered:
        return None
    if "mem" in lowered:
        return "memory"
    if "core" in lowered:
        return "cores"
    return None


def settle(state: State) -> None:
    """A container series whose UUID several devices share is its pod's device when the pod
    is on exactly one of them (the scheduler's series name the node); else it is reported."""
    placed: dict[tuple[str | None, str | None], set[int]] = defaultdict(set)
    devices = {id(d): d for d in state.devices}
    for row in state.rows.values():
        if row.device is not None:
            placed[(row.namespace, row.pod)].add(id(row.device))
    for row in state.rows.values():
        if row.device is not None or not row.unresolved:
            continue
        options = [
            devices[i]
            for i in sorted(placed.get((row.namespace, row.pod), set()))
            if devices[i].uuid == row.uuid
        ]
        if len(options) == 1 and row.pod is not None:
            row.device = options[0]
            continue
        for source, what in row.unresolved:
            state.unattributed.setdefault((source, AMBIGUOUS_DEVICE), []).append(what)


def merge_rows(state: State) -> list[Row]:
    """One row per container and device: the scheduler's row (by slot) and the monitor's
    (by name) for one pod on one device are one container when each is alone."""
    groups: dict[tuple[object, ...], list[Row]] = defaultdict(list)
    for row in state.rows.values():
        groups[(row.namespace, row.pod, id(row.device) if row.device else row.uuid)].append(row)
    out: list[Row] = []
    for rows in groups.values():
        named = [r for r in rows if r.container is not None]
        slots = [r for r in rows if r.container is None and r.container_index is not None]
        if len(named) == 1 and len(slots) == 1:
            merged, slot = named[0], slots[0]
            merged.container_index = slot.container_index
            merged.node = merged.node or slot.node
            for figure, values in slot.figures.items():
                merged.figures[figure].extend(values)
            out.append(merged)
            out.extend(r for r in rows if r is not merged and r is not slot)
        else:
            out.extend(rows)
    return out
