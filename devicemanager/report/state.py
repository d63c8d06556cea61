"""What the report accumulates while it reads, and the small rules every part shares: how a
figure is rounded, when two values differ, which family's value of a figure wins."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from devicemanager.model import MIB
from devicemanager.report.families import (
    Figure,
    Surface,
)
from devicemanager.report.model import (
    Finding,
    Kind,
    MigInstance,
    Number,
)

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
AMBIGUOUS_DEVICE = "could mean several devices"

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


def differs(a: float, b: float, absolute: float = TOLERANCE_MIB) -> bool:
    return abs(a - b) > max(absolute, 0.01 * max(abs(a), abs(b)))


def index_of(text: str | None) -> int | str | None:
    if text is None:
        return None
    return int(text) if text.isdecimal() and len(text) <= 18 else text


@dataclass(frozen=True, slots=True)
class Value:
    rank: int
    value: float
    family: str
    source: str


@dataclass(slots=True)
class DeviceAcc:
    node: str | None
    index: str | None
    uuid: str | None
    type: str | None
    figures: dict[Figure, list[Value]] = field(default_factory=lambda: defaultdict(list))
    device_series: bool = False  # named by a device-level family, not only by containers
    # MIG instances placed on it, per family that named them ((rank, family name)): the
    # best-ranked family's list is the device's, the others are compared with it.
    mig: dict[tuple[int, str], dict[tuple[str | None, ...], MigInstance]] = field(
        default_factory=dict
    )
    # Which families named it (for the cut-off check), per source.
    families: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))

    def label(self) -> str:
        where = self.node or "node not present"
        index = "index not present" if self.index is None else f"#{self.index}"
        return f"{self.uuid or 'UUID not present'} ({where} {index})"


@dataclass(slots=True)
class Row:
    """One container's figures on one device, as one surface names it."""

    namespace: str | None
    pod: str | None
    container: str | None
    container_index: str | None
    vdevice_index: str | None
    node: str | None
    uuid: str | None
    device: DeviceAcc | None
    mode: str | None = None
    figures: dict[Figure, list[Value]] = field(default_factory=lambda: defaultdict(list))
    mig: MigInstance | None = None
    mig_from: tuple[int, str] | None = None  # (rank, family) of the MIG identity kept
    unresolved: list[tuple[str, str]] = field(default_factory=list)  # (source, series)

    def label(self) -> str:
        who = f"{self.namespace or '?'}/{self.pod or '?'}"
        if self.container:
            who += f"/{self.container}"
        elif self.container_index is not None:
            who += f" (container {self.container_index})"
        return who


@dataclass(slots=True)
class State:
    findings: list[Finding] = field(default_factory=list)
    devices: list[DeviceAcc] = field(default_factory=list)
    rows: dict[tuple[object, ...], Row] = field(default_factory=dict)
    quota: dict[tuple[str, str], dict[Figure, list[Value]]] = field(default_factory=dict)
    unrecognised: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    ignored: set[str] = field(default_factory=set)
    surfaces: set[Surface] = field(default_factory=set)
    usage: bool = False
    container_families: bool = False
    container_allocation: bool = False
    unit_problems: dict[tuple[str, str, str], list[str]] = field(default_factory=dict)
    unattributed: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    disagreements: dict[tuple[str, str, str], list[str]] = field(default_factory=dict)

    # Physical cards this agent names as the parent of partitions it lists as devices (AMD
    # XCPs): the partitions are the devices allocators hand out; the board is not one more.
    boards: set[str] = field(default_factory=set)

    by_uuid: dict[str, list[DeviceAcc]] = field(default_factory=dict)
    by_place: dict[tuple[str, str], list[DeviceAcc]] = field(default_factory=dict)

    def find(self, kind: Kind, message: str) -> None:
        self.findings.append(Finding(kind, message))

    def index(self, d: DeviceAcc) -> None:
        """Keep the look-ups by UUID and by place current as a device learns its names."""
        if d.uuid is not None:
            known = self.by_uuid.setdefault(d.uuid, [])
            if all(x is not d for x in known):
                known.append(d)
        if d.node is not None and d.index is not None:
            known = self.by_place.setdefault((d.node, d.index), [])
            if all(x is not d for x in known):
                known.append(d)


def pick_value(
    state: State, values: list[Value], what: str, absolute: float = TOLERANCE_MIB
) -> float | None:
    """The figure from the best-ranked family; every other family's value is compared with it."""
    if not values:
        return None
    best = min(values, key=lambda v: v.rank)
    for other in values:
        if other is best or not differs(best.value, other.value, absolute):
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


def listed(items: Sequence[str]) -> str:
    shown = "; ".join(items[:3])
    return shown + (f"; and {len(items) - 3} more" if len(items) > 3 else "")


def sum_of(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


@dataclass(slots=True)
class Built:
    device: DeviceAcc
    cores_limit: float | None = None
    cores_allocated: float | None = None
    memory_limit: float | None = None
    memory_allocated: float | None = None
    shared: float | None = None
    ratio: float | None = None
    host_cores: float | None = None
    host_memory: float | None = None
    host_total: float | None = None
    rows: list[Row] = field(default_factory=list)

    def fraction(self) -> float | None:
        # A negative allocation is no share of the device, as a limit of 0 or less is none
        # (and over a tiny limit it would overflow to minus infinity).
        parts = [
            a / lim
            for a, lim in (
                (self.cores_allocated, self.cores_limit),
                (self.memory_allocated, self.memory_limit),
            )
            if a is not None and lim is not None and a >= 0 and lim > 0
        ]
        return min(1.0, max(parts)) if parts else None

    def usage_fraction(self) -> float | None:
        total = self.memory_limit if self.memory_limit is not None else self.host_total
        if self.host_memory is None or self.host_memory < 0 or total is None or total <= 0:
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


def tolerance(figure: Figure) -> float:
    """How far two families' values of one figure may differ before they disagree: 1 MiB of
    memory (rounding), nothing for counts, shares and percentages (beyond 1%)."""
    return TOLERANCE_MIB if figure.value.endswith("_mib") else 0.0


def row_figure(state: State, row: Row, figure: Figure) -> float | None:
    values = row.figures.get(figure, [])
    return pick_value(state, values, f"{row.label()} {figure.value}", tolerance(figure))


@dataclass(slots=True)
class RowOut:
    row: Row
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
