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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from devicemanager.model import MIB
from devicemanager.report.families import (
    BY_NAME,
    DEVICE_SETS,
    USAGE_FIGURES,
    Family,
    Figure,
    Scope,
    Surface,
    Unit,
    ignored_reason,
    labels_for,
)
from devicemanager.report.model import (
    KIND_ORDER,
    Container,
    Device,
    Finding,
    Kind,
    MigInstance,
    Namespace,
    Number,
    Quota,
    Report,
    SourceInfo,
    Totals,
)
from devicemanager.report.parse import LineKind, Parsed, Sample, parse

# Below this a "bytes" memory figure is not bytes: no GPU memory limit, allocation or use
# under 1 MiB is plausible, and HAMi-DRA publishes MiB under the byte-named legacy families.
SMALLEST_BYTES = MIB
# At or above this a "MiB" figure is bytes: 2^30 MiB is an exbibyte.
LARGEST_MIB = float(2**30)
TOLERANCE_MIB = 1.0
# This agent's grant modes whose figures are the card's, every tenant together
# (docs/grants-and-figures.md): summed over tenants they would count the card once each.
CARD_WIDE = ("Exclusive", "Shared")
# Labels only HAMi-DRA's series carry.
DRA_LABELS = ("devicebrand", "devicename")
# Findings of one sort listed one by one before the rest are counted.
MAX_LISTED = 20
FULL = 0.99  # a dimension at or above 99% of its limit leaves no room

F = Figure


def num(value: float | None) -> Number | None:
    """A figure as the report prints it: an integer when it is one, else two decimals."""
    if value is None or not math.isfinite(value):
        return None  # only sums of absurd inputs overflow; JSON has no infinity
    if float(value).is_integer():
        return int(value)
    return round(value, 2)


def percent(part: float | None, whole: float | None) -> Number | None:
    if part is None or whole is None or whole <= 0:
        return None
    return num(part * 100.0 / whole)


def _differs(a: float, b: float, absolute: float = TOLERANCE_MIB) -> bool:
    return abs(a - b) > max(absolute, 0.01 * max(abs(a), abs(b)))


def _index(text: str | None) -> int | str | None:
    if text is None:
        return None
    return int(text) if text.isdecimal() and len(text) <= 18 else text


@dataclass(frozen=True, slots=True)
class _Value:
    rank: int
    value: float
    family: str
    source: str


@dataclass(slots=True)
class _Device:
    node: str | None
    index: str | None
    uuid: str | None
    type: str | None
    figures: dict[Figure, list[_Value]] = field(default_factory=lambda: defaultdict(list))
    device_series: bool = False  # named by a device-level family, not only by containers
    mig: dict[tuple[str | None, ...], MigInstance] = field(default_factory=dict)
    # Which families named it (for the cut-off check), per source.
    families: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))

    def label(self) -> str:
        where = self.node or "node not present"
        index = "index not present" if self.index is None else f"#{self.index}"
        return f"{self.uuid or 'UUID not present'} ({where} {index})"


@dataclass(slots=True)
class _Row:
    """One container's figures on one device, as one surface names it."""

    namespace: str | None
    pod: str | None
    container: str | None
    container_index: str | None
    vdevice_index: str | None
    node: str | None
    uuid: str | None
    device: _Device | None
    mode: str | None = None
    figures: dict[Figure, list[_Value]] = field(default_factory=lambda: defaultdict(list))
    mig: MigInstance | None = None
    unresolved: list[tuple[str, str]] = field(default_factory=list)  # (source, series)

    def label(self) -> str:
        who = f"{self.namespace or '?'}/{self.pod or '?'}"
        if self.container:
            who += f"/{self.container}"
        elif self.container_index is not None:
            who += f" (container {self.container_index})"
        return who


@dataclass(slots=True)
class _State:
    findings: list[Finding] = field(default_factory=list)
    devices: list[_Device] = field(default_factory=list)
    rows: dict[tuple[object, ...], _Row] = field(default_factory=dict)
    quota: dict[tuple[str, str], dict[Figure, list[_Value]]] = field(default_factory=dict)
    unrecognised: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    ignored: set[str] = field(default_factory=set)
    surfaces: set[Surface] = field(default_factory=set)
    usage: bool = False
    container_families: bool = False
    container_allocation: bool = False
    unit_problems: dict[tuple[str, str, str], list[str]] = field(default_factory=dict)
    unattributed: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    disagreements: dict[tuple[str, str, str], list[str]] = field(default_factory=dict)

    by_uuid: dict[str, list[_Device]] = field(default_factory=dict)
    by_place: dict[tuple[str, str], list[_Device]] = field(default_factory=dict)

    def find(self, kind: Kind, message: str) -> None:
        self.findings.append(Finding(kind, message))

    def index(self, d: _Device) -> None:
        """Keep the look-ups by UUID and by place current as a device learns its names."""
        if d.uuid is not None:
            listed = self.by_uuid.setdefault(d.uuid, [])
            if all(x is not d for x in listed):
                listed.append(d)
        if d.node is not None and d.index is not None:
            listed = self.by_place.setdefault((d.node, d.index), [])
            if all(x is not d for x in listed):
                listed.append(d)


# --- Reading samples ---------------------------------------------------------------------


def _family_of(sample: Sample, declared: dict[str, str]) -> str:
    """The family a sample belongs to: its own name for gauges; the declared family for a
    counter's or histogram's suffixed samples."""
    if sample.name in BY_NAME or sample.name in declared:
        return sample.name
    for suffix in ("_total", "_bucket", "_sum", "_count", "_created", "_info"):
        base = sample.name.removesuffix(suffix)
        if base != sample.name and base in declared:
            return base
    return sample.name


def _normalise(
    state: _State,
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


def _where(sample: Sample, labels: dict[str, tuple[str, ...]]) -> str:
    uuid = _get(sample, labels, "uuid")
    node = _get(sample, labels, "node")
    pod = _get(sample, labels, "pod")
    namespace = _get(sample, labels, "namespace")
    parts = [p for p in (f"{namespace}/{pod}" if pod else None, uuid, node) if p]
    return " ".join(parts) or f"line {sample.line}"


def _get(sample: Sample, labels: dict[str, tuple[str, ...]], meaning: str) -> str | None:
    names = labels[meaning]
    value = sample.label(*(f"exported_{n}" for n in names))
    if value is None:
        value = sample.label(*names)
    return value if value != "" else None


def _figures(
    state: _State, family: Family, sample: Sample, source: str, figure: Figure | None = None
) -> list[tuple[Figure, float]]:
    """The figures one sample publishes: its value's (as `figure` where the caller knows
    better than the family), and those in its labels."""
    labels = labels_for(family)

    def where() -> str:
        return _where(sample, labels)

    out: list[tuple[Figure, float]] = []
    if family.unit is not Unit.ONE:
        own = figure or family.figure
        value = _normalise(state, family, own, family.unit, sample.value, source, where)
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
                (lf.figure, _normalise(state, family, lf.figure, lf.unit, raw, source, where))
            )
    return out


def _match(d: _Device, node: str | None, index: str | None, uuid: str | None) -> bool:
    if uuid is not None and d.uuid is not None and uuid != d.uuid:
        return False
    if node is not None and d.node is not None and node != d.node:
        return False
    if index is not None and d.index is not None and index != d.index:
        return False
    by_uuid = uuid is not None and uuid == d.uuid
    by_place = node is not None and index is not None and node == d.node and index == d.index
    return by_uuid or by_place


AMBIGUOUS_DEVICE = "could mean several devices"


def _resolve(
    state: _State,
    node: str | None,
    index: str | None,
    uuid: str | None,
    type_: str | None,
    what: str,
    source: str,
    defer: bool = False,
) -> _Device | None:
    """The one device a series names, made if none matches; None (and a finding) when the
    series could mean several devices or names none. With `defer`, a series that could mean
    several devices is left for the caller to settle (a container's pod may say which)."""
    if uuid is None and (node is None or index is None):
        state.unattributed.setdefault((source, "names no device"), []).append(what)
        return None
    near = state.by_uuid.get(uuid, []) if uuid is not None else []
    if node is not None and index is not None:
        near = near + state.by_place.get((node, index), [])
    candidates = list({id(d): d for d in near if _match(d, node, index, uuid)}.values())
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
        d = _Device(node=node, index=index, uuid=uuid, type=type_)
        state.devices.append(d)
    state.index(d)
    return d


def _mig(sample: Sample, labels: dict[str, tuple[str, ...]]) -> MigInstance:
    return MigInstance(
        uuid=_get(sample, labels, "mig_uuid"),
        profile=_get(sample, labels, "profile"),
        gpu_instance_id=_get(sample, labels, "gpu_instance_id"),
        compute_instance_id=_get(sample, labels, "compute_instance_id"),
    )


@dataclass(frozen=True, slots=True)
class _Observation:
    family: Family
    sample: Sample
    source: str
    scope: Scope


def _completeness(obs: _Observation) -> int:
    labels = labels_for(obs.family)
    return -sum(_get(obs.sample, labels, k) is not None for k in ("node", "index", "uuid"))


def _read_device(state: _State, obs: _Observation) -> None:
    family, sample = obs.family, obs.sample
    labels = labels_for(family)
    node = _get(sample, labels, "node")
    index = _get(sample, labels, "index")
    uuid = _get(sample, labels, "uuid")
    d = _resolve(
        state, node, index, uuid, _get(sample, labels, "type"), f"{family.name} line {sample.line}",
        obs.source,
    )  # fmt: skip
    if d is None:
        return
    d.device_series = True
    d.families[obs.source].add(family.name)
    if family.figure is F.MIG_PLACEMENT:
        m = _mig(sample, labels)
        d.mig[(m.uuid, m.profile, m.gpu_instance_id, m.compute_instance_id)] = m
        return
    for figure, value in _figures(state, family, sample, obs.source):
        d.figures[figure].append(_Value(family.rank, value, family.name, obs.source))


def _read_container(state: _State, obs: _Observation) -> None:
    family, sample = obs.family, obs.sample
    labels = labels_for(family)
    state.container_families = True
    node = _get(sample, labels, "node")
    uuid = _get(sample, labels, "uuid")
    index = _get(sample, labels, "index")  # HAMi-DRA's and this agent's name the device's
    mig_uuid = None
    if uuid is not None and uuid.startswith("MIG-") and family.figure is not F.MIG_INSTANCE:
        mig_uuid, uuid = uuid, None  # this agent names a partition by its own UUID
    what = f"{family.name} line {sample.line}"
    device = _resolve(state, node, index, uuid, None, what, obs.source, defer=True)
    namespace = _get(sample, labels, "namespace")
    pod = _get(sample, labels, "pod")
    container = _get(sample, labels, "container")
    container_index = _get(sample, labels, "container_index")
    vdevice = _get(sample, labels, "vdevice_index")
    key = (namespace, pod, container, container_index, vdevice, node, id(device), uuid, mig_uuid)
    row = state.rows.get(key)
    if row is None:
        row = _Row(namespace, pod, container, container_index, vdevice, node, uuid, device)
        state.rows[key] = row
    if device is None and uuid is not None:
        row.unresolved.append((obs.source, what))
    if mig_uuid is not None:
        row.mig = MigInstance(mig_uuid, None, None, None)
    mode = _get(sample, labels, "mode")
    row.mode = row.mode or mode
    if family.figure is F.MIG_INSTANCE:
        row.mig = _mig(sample, labels)
        return
    own: Figure | None = None
    if family.figure is F.CORES_USED and mode is not None and mode not in CARD_WIDE:
        # This agent states a slice's or partition's compute against its own allowance,
        # not the card's; it is kept apart from HAMi's percent of the card.
        own = F.CORES_USED_OF_LIMIT
    for figure, value in _figures(state, family, sample, obs.source, own):
        if family.surface is Surface.ALLOCATION:
            state.container_allocation = True
        row.figures[figure].append(_Value(family.rank, value, family.name, obs.source))


def _read_quota(state: _State, obs: _Observation) -> None:
    family, sample = obs.family, obs.sample
    labels = labels_for(family)
    namespace = _get(sample, labels, "namespace")
    resource = _get(sample, labels, "quota")
    if namespace is None or resource is None:
        state.unattributed.setdefault((obs.source, "names no namespace or quota"), []).append(
            f"{family.name} line {sample.line}"
        )
        return
    figures = state.quota.setdefault((namespace, resource), defaultdict(list))
    value = sample.value
    if _quota_kind(resource) == "memory" and value >= LARGEST_MIB:
        key = (obs.source, family.name, "quota memory is MiB; values this large look like bytes")
        state.unit_problems.setdefault(key, []).append(f"{num(value)} on {namespace} {resource}")
    figures[family.figure].append(_Value(family.rank, value, family.name, obs.source))
    if family.figure is F.QUOTA_USED:
        limit = _get(sample, labels, "limit")
        if limit is not None:
            try:
                limit_value = float(limit)
            except ValueError:
                return
            # "0" is HAMi's word for no limit set (hami_resource_quota_limit then has no
            # series); a limit is only what a quota states.
            if limit_value != 0 and math.isfinite(limit_value):
                figures[F.QUOTA_LIMIT].append(
                    _Value(family.rank + 5, limit_value, family.name, obs.source)
                )


def _quota_kind(resource: str) -> str | None:
    lowered = resource.lower()
    if "percentage" in lowered:
        return None
    if "mem" in lowered:
        return "memory"
    if "core" in lowered:
        return "cores"
    return None


# --- Choosing among families -------------------------------------------------------------


def _pick(
    state: _State, values: list[_Value], what: str, absolute: float = TOLERANCE_MIB
) -> float | None:
    """The figure from the best-ranked family; every other family's value is compared with it."""
    if not values:
        return None
    best = min(values, key=lambda v: v.rank)
    for other in values:
        if other is best or not _differs(best.value, other.value, absolute):
            continue
        if other.family == best.family:
            key = (best.family, other.family, "duplicate")
        else:
            key = (best.family, other.family, "disagree")
        state.disagreements.setdefault(key, []).append(
            f"{what}: {num(best.value)} vs {num(other.value)}"
            + (f" ({best.source} vs {other.source})" if best.source != other.source else "")
        )
    return best.value


# --- The checks --------------------------------------------------------------------------


def _listed(items: Sequence[str]) -> str:
    shown = "; ".join(items[:3])
    return shown + (f"; and {len(items) - 3} more" if len(items) > 3 else "")


def _partial_checks(state: _State, parsed: Parsed) -> None:
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
            f"(lines {_listed([str(n) for n in abbreviated])}); labels left out may name the "
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


def _flush_collected(state: _State) -> None:
    for (source, family, problem), where in state.unit_problems.items():
        state.find(
            Kind.UNIT,
            f"{family} ({source}): {len(where)} value(s): {problem}. E.g. {_listed(where)}",
        )
    for (source, why), what in state.unattributed.items():
        state.find(
            Kind.AMBIGUOUS,
            f"{source}: {len(what)} series {why} and were not attributed "
            f"({_listed(what)}); a device is named by node and index, or by a unique UUID",
        )
    for (best, other, how), items in state.disagreements.items():
        if how == "duplicate":
            state.find(
                Kind.DUPLICATE,
                f"{best} appears more than once with different values ({_listed(items)}); the "
                "first read is used",
            )
        else:
            state.find(
                Kind.INCONSISTENCY,
                f"{best} and {other} disagree on {len(items)} series ({_listed(items)}); "
                f"{best} is used",
            )


def _collisions(state: _State) -> None:
    by_uuid: dict[str, list[_Device]] = defaultdict(list)
    by_place: dict[tuple[str, str], list[_Device]] = defaultdict(list)
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


# --- Building the report -----------------------------------------------------------------


def _sum(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


@dataclass(slots=True)
class _Built:
    device: _Device
    cores_limit: float | None = None
    cores_allocated: float | None = None
    memory_limit: float | None = None
    memory_allocated: float | None = None
    shared: float | None = None
    ratio: float | None = None
    host_cores: float | None = None
    host_memory: float | None = None
    host_total: float | None = None
    rows: list[_Row] = field(default_factory=list)

    def fraction(self) -> float | None:
        parts = [
            a / lim
            for a, lim in (
                (self.cores_allocated, self.cores_limit),
                (self.memory_allocated, self.memory_limit),
            )
            if a is not None and lim is not None and lim > 0
        ]
        return min(1.0, max(parts)) if parts else None

    def usage_fraction(self) -> float | None:
        total = self.memory_limit if self.memory_limit is not None else self.host_total
        if self.host_memory is None or total is None or total <= 0:
            return None
        return min(1.0, self.host_memory / total)

    def state(self) -> str | None:
        dims = [
            (a, lim)
            for a, lim in (
                (self.cores_allocated, self.cores_limit),
                (self.memory_allocated, self.memory_limit),
            )
            if a is not None
        ]
        if not dims:
            return None
        if all(a == 0 for a, _ in dims):
            return "idle"
        if any(lim is not None and lim > 0 and a >= FULL * lim for a, lim in dims):
            return "full"
        return "partial"


def _tolerance(figure: Figure) -> float:
    """How far two families' values of one figure may differ before they disagree: 1 MiB of
    memory (rounding), nothing for counts, shares and percentages (beyond 1%)."""
    return TOLERANCE_MIB if figure.value.endswith("_mib") else 0.0


def _row_figure(state: _State, row: _Row, figure: Figure) -> float | None:
    values = row.figures.get(figure, [])
    return _pick(state, values, f"{row.label()} {figure.value}", _tolerance(figure))


@dataclass(slots=True)
class _RowOut:
    row: _Row
    cores_allocated: float | None
    memory_allocated: float | None
    memory_limit: float | None
    memory_used: float | None
    cores_used: float | None
    cores_of_limit: float | None
    last_kernel: float | None
    context: float | None
    module: float | None
    buffer: float | None

    def allocation(self) -> bool:
        return self.cores_allocated is not None or self.memory_allocated is not None


def _settle(state: _State) -> None:
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


def _merge_rows(state: _State) -> list[_Row]:
    """One row per container and device: the scheduler's row (by slot) and the monitor's
    (by name) for one pod on one device are one container when each is alone."""
    groups: dict[tuple[object, ...], list[_Row]] = defaultdict(list)
    for row in state.rows.values():
        groups[(row.namespace, row.pod, id(row.device) if row.device else row.uuid)].append(row)
    out: list[_Row] = []
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


def _container_checks(state: _State, r: _RowOut) -> None:
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


def _device_checks(state: _State, b: _Built, outs: list[_RowOut]) -> None:
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
            ("memory", b.memory_allocated, _sum(o.memory_allocated for o in alloc_rows), " MiB"),
            ("cores", b.cores_allocated, _sum(o.cores_allocated for o in alloc_rows), ""),
        ):
            if total is None:
                continue
            summed = figure_sum or 0.0
            if _differs(total, summed, TOLERANCE_MIB if unit else 0.5):
                state.find(
                    Kind.INCONSISTENCY,
                    f"{label}: {num(total)}{unit} {what} allocated on the device, "
                    f"{num(summed)}{unit} in its containers' allocations",
                )
    used = _own_used(outs)
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
            f"{label} appears only in container series ({_listed(pods)}); no device-level "
            "series names it, so its capacity and allocation are not present",
        )


def _own_used(outs: Iterable[_RowOut]) -> float | None:
    """Memory the containers use together. A card-wide figure (this agent's Shared grants
    publish the card's use for each tenant) counts once per device, not once per tenant."""
    total: list[float | None] = []
    card_wide: dict[int, float] = {}
    for o in outs:
        if o.memory_used is None:
            continue
        if o.row.mode == "Shared" and o.row.device is not None:
            key = id(o.row.device)
            card_wide[key] = max(card_wide.get(key, 0.0), o.memory_used)
        else:
            total.append(o.memory_used)
    return _sum([*total, *card_wide.values()])


def _totals(built: Sequence[_Built]) -> Totals:
    """Capacity over devices. Allocated, limit, free and percent of a dimension are summed
    over the devices that publish both its allocation and its limit, so that "a of b" is
    always of one set of devices; how many that is stands beside them."""
    with_cores = [b for b in built if b.cores_limit is not None and b.cores_allocated is not None]
    with_memory = [
        b for b in built if b.memory_limit is not None and b.memory_allocated is not None
    ]
    free_cores = [max(0.0, (b.cores_limit or 0) - (b.cores_allocated or 0)) for b in with_cores]
    free_memory = [max(0.0, (b.memory_limit or 0) - (b.memory_allocated or 0)) for b in with_memory]
    cores_limit = _sum(b.cores_limit for b in with_cores)
    cores_allocated = _sum(b.cores_allocated for b in with_cores)
    memory_limit = _sum(b.memory_limit for b in with_memory)
    memory_allocated = _sum(b.memory_allocated for b in with_memory)
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
        host_memory_used_mib=num(_sum(b.host_memory for b in built)),
    )


def _distribution(built: Sequence[_Built]) -> tuple[str | None, str | None, str | None]:
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
    state = _State()
    observations: list[_Observation] = []
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
            name = _family_of(sample, declared)
            family = BY_NAME.get(name)
            if family is None:
                if ignored_reason(name) is not None:
                    state.ignored.add(name)
                else:
                    state.unrecognised.setdefault(name, []).append((p.source, sample.line))
                continue
            if not math.isfinite(sample.value):
                nonfinite.append(f"{name} {p.source} line {sample.line}")
                continue
            key = (name, tuple(sorted(kv for kv in sample.labels if kv[0] != "zone")))
            earlier = seen.get(key)
            if earlier is not None:
                if _differs(earlier[0], sample.value, 0.0):
                    state.disagreements.setdefault((name, name, "duplicate"), []).append(
                        f"{earlier[1]} {num(earlier[0])} vs {p.source} line {sample.line} "
                        f"{num(sample.value)}"
                    )
                continue
            seen[key] = (sample.value, f"{p.source} line {sample.line}")
            scope = family.scope
            if scope is Scope.DEVICE_OR_CONTAINER:
                has_pod = _get(sample, labels_for(family), "pod") is not None
                scope = Scope.CONTAINER if has_pod else Scope.DEVICE
            observations.append(_Observation(family, sample, p.source, scope))
            state.surfaces.add(family.surface)
            if family.figure in USAGE_FIGURES:
                state.usage = True
    if nonfinite:
        state.find(
            Kind.UNIT,
            f"{len(nonfinite)} sample(s) are NaN or infinite and were not used as figures "
            f"({_listed(nonfinite)})",
        )
    devices = sorted((o for o in observations if o.scope is Scope.DEVICE), key=_completeness)
    for obs in devices:
        _read_device(state, obs)
    for obs in observations:
        if obs.scope is Scope.CONTAINER:
            _read_container(state, obs)
        elif obs.scope is Scope.QUOTA:
            _read_quota(state, obs)
    for p in parsed:
        _partial_checks(state, p)
    _collisions(state)

    _settle(state)
    rows = _merge_rows(state)
    outs: list[_RowOut] = []
    for row in rows:
        outs.append(
            _RowOut(
                row=row,
                cores_allocated=_row_figure(state, row, F.CORES_ALLOCATED),
                memory_allocated=_row_figure(state, row, F.MEMORY_ALLOCATED),
                memory_limit=_row_figure(state, row, F.MEMORY_LIMIT),
                memory_used=_row_figure(state, row, F.MEMORY_USED),
                cores_used=_row_figure(state, row, F.CORES_USED),
                cores_of_limit=_row_figure(state, row, F.CORES_USED_OF_LIMIT),
                last_kernel=_row_figure(state, row, F.LAST_KERNEL),
                context=_row_figure(state, row, F.MEMORY_CONTEXT),
                module=_row_figure(state, row, F.MEMORY_MODULE),
                buffer=_row_figure(state, row, F.MEMORY_BUFFER),
            )
        )
    by_device: dict[int, list[_RowOut]] = defaultdict(list)
    for o in outs:
        if o.row.device is not None:
            by_device[id(o.row.device)].append(o)

    def pick(d: _Device, figure: Figure) -> float | None:
        return _pick(
            state, d.figures.get(figure, []), f"{d.label()} {figure.value}", _tolerance(figure)
        )

    built: list[_Built] = []
    for d in state.devices:
        b = _Built(
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
        _device_checks(state, b, by_device.get(id(d), []))
    for o in outs:
        _container_checks(state, o)

    built.sort(key=_device_order)
    device_out = tuple(_device(b, state) for b in built)
    container_out = tuple(sorted((_container(o) for o in outs), key=_container_order))
    namespaces = _namespaces(state, outs)
    _flush_collected(state)
    for name, where in sorted(state.unrecognised.items()):
        close = difflib.get_close_matches(name, list(BY_NAME), n=1, cutoff=0.85)
        hint = f" (did you mean {close[0]}?)" if close else ""
        lines = _listed([f"{src} line {line}" for src, line in where])
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


def _device_order(b: _Built) -> tuple[str, int, str, str]:
    d = b.device
    index = _index(d.index)
    return (
        d.node or "\uffff",
        index if isinstance(index, int) else 1 << 30,
        str(index) if index is not None else "",
        d.uuid or "",
    )


def _device(b: _Built, state: _State) -> Device:
    d = b.device
    return Device(
        uuid=d.uuid,
        node=d.node,
        index=_index(d.index),
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
        mig_instances=tuple(d.mig[k] for k in sorted(d.mig, key=str)) if d.mig else None,
    )


def _container(o: _RowOut) -> Container:
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
        device_index=_index(d.index) if d else None,
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


def _namespaces(state: _State, outs: list[_RowOut]) -> dict[str, Namespace]:
    names = {o.row.namespace for o in outs if o.row.namespace is not None}
    names |= {ns for ns, _ in state.quota}
    raw: dict[str, dict[str, float | None]] = {}
    quotas: dict[str, dict[str, Quota]] = {}
    quota_by_ns: dict[str, list[tuple[str, dict[Figure, list[_Value]]]]] = defaultdict(list)
    for (quota_ns, resource), figures in sorted(state.quota.items()):
        quota_by_ns[quota_ns].append((resource, figures))
    by_ns: dict[str | None, list[_RowOut]] = defaultdict(list)
    for o in outs:
        by_ns[o.row.namespace].append(o)
    for ns in sorted(names):
        rows = by_ns[ns]
        raw[ns] = {
            "cores": _sum(o.cores_allocated for o in rows),
            "memory": _sum(o.memory_allocated for o in rows),
            "limit": _sum(o.memory_limit for o in rows),
            "used": _own_used(rows),
        }
        quotas[ns] = {}
        for resource, figures in quota_by_ns.get(ns, []):
            used = _pick(state, figures.get(F.QUOTA_USED, []), f"{ns} {resource} used", 0.0)
            limit = _pick(state, figures.get(F.QUOTA_LIMIT, []), f"{ns} {resource} limit", 0.0)
            quotas[ns][resource] = Quota(num(used), num(limit))
        _quota_checks(state, ns, quotas[ns], raw[ns])
    all_cores = _sum(v["cores"] for v in raw.values())
    all_memory = _sum(v["memory"] for v in raw.values())
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


def _quota_checks(
    state: _State, ns: str, quotas: dict[str, Quota], sums: dict[str, float | None]
) -> None:
    if not state.container_allocation:
        return
    for kind, key, unit in (("memory", "memory", " MiB"), ("cores", "cores", "")):
        resources = [r for r in quotas if _quota_kind(r) == kind and quotas[r].used is not None]
        if not resources:
            continue
        used = float(sum(quotas[r].used or 0 for r in resources))
        summed = sums[key] or 0.0
        if _differs(used, summed, TOLERANCE_MIB if unit else 0.5):
            state.find(
                Kind.INCONSISTENCY,
                f"namespace {ns}: quota used {num(used)}{unit} ({', '.join(resources)}) but its "
                f"pods' allocations add up to {num(summed)}{unit} (scrape timing, a stale "
                "scheduler cache, pods not yet reconciled, or a cut-off input)",
            )


def summarize_texts(texts: Sequence[tuple[str, str]]) -> Report:
    """Each (source name, text) parsed, then summarized together."""
    return summarize([parse(name, text) for name, text in texts])
