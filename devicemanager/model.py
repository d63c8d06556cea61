"""The agent's data model: frozen dataclasses shared by the core and every vendor backend.

`None` means absent everywhere: a figure nobody measured is `None` here, `null` in JSON and
no sample in /metrics. Never a zero, never NaN, never a vendor sentinel.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any, TypeVar, cast

# The figure table (figure_table.py), handed on as part of the vocabulary.
from devicemanager.figure_table import FIGURES as FIGURES
from devicemanager.figure_table import THROTTLE_REASONS as THROTTLE_REASONS
from devicemanager.figure_table import CardFigure as CardFigure
from devicemanager.figure_table import FigureSpec as FigureSpec
from devicemanager.figure_table import FigureTable as FigureTable
from devicemanager.figure_table import HealthFigure as HealthFigure
from devicemanager.figure_table import Kind as Kind
from devicemanager.figure_table import Shape as Shape

# What a vendor library answered, keyed by entry point, as JSON-able values.
Payload = dict[str, Any]

# Where the backend finds a device, beyond the index users see: ordered (name, value) pairs,
# e.g. (("card", 0), ("device", 1), ("logic", 1), ("phy", 1)) for an Ascend NPU, or
# (("socket", 0), ("partition", 3)) for an AMD compute partition. Shown in the snapshot; never a
# label, never used to match a grant.
Address = tuple[tuple[str, int | str], ...]

MIB = 1048576


class Reason(StrEnum):
    """Why a figure is absent (SPEC §3, §6). The token is what users see in gauges and logs."""

    # The device's own query.
    UNSUPPORTED = "unsupported"
    PERMISSION = "permission"
    TRANSIENT_DRIVER_ERROR = "transient_driver_error"
    TRUNCATED = "truncated"
    # A rate from a cumulative counter (or a figure from two samples) in the first round after
    # start or after a re-init: there is nothing to take the difference from yet.
    NO_BASELINE = "no_baseline"
    # Section level.
    INVALID_DATA = "invalid_data"
    BOUNDED = "bounded"
    VERSION_SKEW = "version_skew"
    # Attribution (R-A2).
    NO_POD_COMPONENT = "no_pod_component"
    AMBIGUOUS_POD = "ambiguous_pod"
    NO_CONTAINER_COMPONENT = "no_container_component"
    AMBIGUOUS_CONTAINER = "ambiguous_container"
    UNKNOWN_POD = "unknown_pod"
    UNKNOWN_CONTAINER = "unknown_container"
    EXITED = "exited"
    UNREADABLE = "unreadable"
    ZOMBIE = "zombie"
    UNSTABLE = "unstable"
    MEDIATED = "mediated"
    PID_NAMESPACE_INVISIBLE = "pid_namespace_invisible"


class BackendState(StrEnum):
    """How a backend's part of a round ended."""

    OK = "ok"
    UNAVAILABLE = "unavailable"  # library or driver not on this node; open() is retried
    ERROR = "error"  # read() or parse() raised
    TIMEOUT = "timeout"  # read() ran past its deadline this round
    STUCK = "stuck"  # an earlier read() has still not returned; no new call was made


# A card's health figures as they are held: a number, (reason, active) flags, (code, count)
# counts, or the codes active now.
Flags = tuple[tuple[str, bool], ...]
Counts = tuple[tuple[str, int], ...]
Codes = tuple[str, ...]
HealthValue = float | Flags | Counts | Codes
# What a vendor made of one health figure: its value, or None and why it is absent.
Answer = tuple[HealthValue | None, Reason | None]
# A partition's or a grant's own activity figures (issue 41): (figure, value) for each of the
# table's activity rows measured, in the table's order; () none.
Activity = tuple[tuple[HealthFigure, float], ...]


@dataclass(frozen=True, slots=True)
class CardHealth:
    """A card's error counters, energy, clocks and link retries (issue 29), as its library gives
    them, in base units, keyed by the table's `HealthFigure` (figure_table.py says each one's
    unit, bounds, JSON key and family). Every figure is optional: one not held is absent, and
    `reasons` says why for each absent one it knows about, in the order the backend said so
    (`throttle_reasons` for the throttle mask, `remapped_rows_*` one each for the
    remapped-rows call). A card whose backend does not read these has no CardHealth at all
    (`Card.health` is None). Made by `CardHealth.of`, which keeps each part in the table's
    order, so two readings of the same figures are equal."""

    numbers: tuple[tuple[HealthFigure, float], ...] = ()
    # (reason, active) for every reason of THROTTLE_REASONS the library reports.
    flags: tuple[tuple[HealthFigure, Flags], ...] = ()
    # Critical error events by code (NVML's XIDs), counted since the agent started: (code,
    # count), codes as decimal text in numeric order, at most MAX_ERROR_CODES of them, then
    # ERROR_CODE_OTHER for every event past that bound. () none seen.
    counts: tuple[tuple[HealthFigure, Counts], ...] = ()
    # Error codes the card reports now (Ascend's dcmi_get_device_errorcode_v2), as hex text,
    # at most MAX_ERROR_CODES of them. () none.
    codes: tuple[tuple[HealthFigure, Codes], ...] = ()
    reasons: tuple[tuple[HealthFigure, Reason], ...] = ()

    @classmethod
    def of(
        cls,
        values: Mapping[HealthFigure, HealthValue | None] = MappingProxyType({}),
        reasons: Iterable[tuple[HealthFigure, Reason]] = (),
        table: FigureTable = FIGURES,
    ) -> CardHealth:
        """The figures `values` holds (None: not held), each where its row's shape says, and
        why the absent ones are absent. A value of the wrong shape for its row is a TypeError:
        a vendor's mistake, found by its tests."""
        numbers: list[tuple[HealthFigure, float]] = []
        flags: list[tuple[HealthFigure, Flags]] = []
        counts: list[tuple[HealthFigure, Counts]] = []
        codes: list[tuple[HealthFigure, Codes]] = []
        for name, shape in table.health_shapes():
            value = values.get(name)
            if value is None:
                continue
            if shape is Shape.NUMBER:
                # A float or int settled at once (bool is a type of its own, refused below).
                if type(value) not in (float, int) and (
                    not isinstance(value, (int, float)) or isinstance(value, bool)
                ):
                    raise TypeError(f"{name}: {value!r} is not a number")
                numbers.append((name, cast(float, value)))
                continue
            if not isinstance(value, tuple):
                raise TypeError(f"{name}: {value!r} is not a {shape} figure")
            if shape is Shape.FLAGS:
                flags.append((name, cast(Flags, value)))
            elif shape is Shape.COUNTS:
                counts.append((name, cast(Counts, value)))
            else:
                codes.append((name, cast(Codes, value)))
        unknown = values.keys() - table.health_names()
        if unknown:
            raise TypeError(f"no row of the figure table: {sorted(unknown)}")
        return cls(tuple(numbers), tuple(flags), tuple(counts), tuple(codes), tuple(reasons))

    @classmethod
    def answered(
        cls, found: Mapping[HealthFigure, Answer], table: FigureTable = FIGURES
    ) -> CardHealth:
        """From a vendor's answers, figure by figure: a value where no reason is given, the
        reasons in the order the vendor found them."""
        values = {name: value for name, (value, why) in found.items() if why is None}
        why = tuple((name, r) for name, (_, r) in found.items() if r is not None)
        return cls.of(values, why, table)

    def number(self, figure: HealthFigure) -> float | None:
        return next((v for name, v in self.numbers if name == figure), None)

    def get(self, figure: HealthFigure) -> HealthValue | None:
        """The figure's value, whatever its shape; None when absent."""
        for held in (self.numbers, self.flags, self.counts, self.codes):
            for name, value in held:
                if name == figure:
                    return value
        return None

    def reason(self, figure: HealthFigure) -> Reason | None:
        return next((r for name, r in self.reasons if name == figure), None)

    def held(self) -> dict[HealthFigure, HealthValue]:
        """Every figure held, whatever its shape: for a reader that asks of each row."""
        held: dict[HealthFigure, HealthValue] = dict(self.numbers)
        for part in (self.flags, self.counts, self.codes):
            if part:
                held.update(part)
        return held

    # The structured figures, typed.
    @property
    def throttle_reasons(self) -> Flags | None:
        return next((v for name, v in self.flags if name == HealthFigure.THROTTLE_REASONS), None)

    @property
    def xid_errors(self) -> Counts | None:
        return next((v for name, v in self.counts if name == HealthFigure.XID_ERRORS), None)

    @property
    def error_codes(self) -> Codes | None:
        return next((v for name, v in self.codes if name == HealthFigure.ERROR_CODES), None)


def unsupported(
    figures: Iterable[HealthFigure], table: FigureTable = FIGURES
) -> dict[HealthFigure, Answer]:
    """A vendor's set of figures no call of its library answers, as answers absent with
    `unsupported`, in the table's order (a set has none, and `absentReasons` keeps the order
    the answers are given in)."""
    named = set(figures)
    return {
        cast(HealthFigure, s.name): (None, Reason.UNSUPPORTED)
        for s in table.health
        if s.name in named
    }


# How many distinct error codes one card's figures name (a label value each); events past it
# are counted under ERROR_CODE_OTHER, so a driver that invents codes cannot grow /metrics.
MAX_ERROR_CODES = 64
ERROR_CODE_OTHER = "other"


# How one card is joined to another (R-X3), by what its library says: a direct link (`nvlink`,
# `xgmi`, T-Head's ICN link `icnlink`, Hygon's `hsl`, Huawei's `hccs`, MetaX's `metaxlink`), a
# link through a switch fabric (`nvswitch`; ICN links through a switch `icnswitch`; HCCS through
# a switch `hccs_switch`), or the PCIe path between them as `nvidia-smi topo -m` names it (PIX
# `pcie_switch`, PXB `pcie_switches`, PHB `pcie_host_bridge`, NODE `numa_node`, SYS `system`;
# `pcie_board`: one board, e.g. a dual-GPU card), or `pcie` where the library says PCIe and not
# which path. A pair the library does not place has none.
LINK_KINDS: tuple[str, ...] = (
    "nvlink",
    "nvswitch",
    "xgmi",
    "icnlink",
    "icnswitch",
    "hsl",
    "hccs",
    "hccs_switch",
    "metaxlink",
    "pcie_board",
    "pcie_switch",
    "pcie_switches",
    "pcie_host_bridge",
    "numa_node",
    "system",
    "pcie",
)


@dataclass(frozen=True, slots=True)
class CardLink:
    """One way a card is joined to a peer card of its node (R-X3)."""

    peer_id: str  # the peer's canonical id
    link: str  # one of LINK_KINDS
    # How many links of this kind run from this card to the peer (NVLink: active links; through
    # NVSwitch: this card's active links into the fabric); None where the library gives no count.
    count: int | None = None


@dataclass(frozen=True, slots=True)
class CardTaint:
    """A taint on one of a card's DRA devices (KEP-5055), from its driver's ResourceSlice or an
    admin's DeviceTaintRule: key, value (may be empty) and effect as Kubernetes spells it."""

    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class Card:
    """One accelerator's own figures (R-V2), as its library enumerates it.

    Identity: `id` is the canonical id the library gives (shown everywhere); `aliases` are the
    other ids allocators record for the same device (GPUStack's `GPU-<ASIC serial>` for AMD,
    HAMi's `DCU-<index>` for Hygon, …). A grant matches on any of them.

    Physical grouping: where a library enumerates each hardware partition as a device of its
    own (AMD CPX/DPX: every XCP a processor with its own UUID), `parent_id` names the physical
    card it is part of. Board figures (temperature, power) then belong to the card whose
    `parent_id` is None and are never read off a partition's entry, so they count once.
    """

    id: str  # vendor UUID, e.g. GPU-…
    index: int  # the ordinal the vendor's own tool shows (nvidia-smi -i)
    name: str | None = None
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    cores_utilization_percent: float | None = None  # busy share of the whole card
    temperature_celsius: float | None = None
    power_usage_watts: float | None = None
    unhealthy: bool = False
    unhealthy_reason: str | None = None  # e.g. "gpu_is_lost", "xid:79"
    aliases: tuple[str, ...] = ()
    address: Address = ()
    parent_id: str | None = None  # the physical card of a partition enumerated as a device
    # Error counters, energy, clocks (issue 29); None where the backend does not read them.
    health: CardHealth | None = None
    # The card's own figures the library answered outside what the hardware can hold, refused
    # (absent, reason `invalid_data`) by figures/ranges.py: field names, e.g. power_usage_watts.
    invalid: tuple[str, ...] = ()
    # Links and placement (R-X3), read once a minute: every link to a peer the library placed
    # (None: the backend does not read links; () it read them and placed no pair), and the NUMA
    # node the card is attached to (None: not read, or no affinity).
    links: tuple[CardLink, ...] | None = None
    numa_node: int | None = None
    # What Kubernetes says of the card beside `unhealthy` (issue 42): every taint on its DRA
    # devices, whatever the effect (a `NoSchedule`/`NoExecute` one also makes it unhealthy; a
    # `None` one is information only), and the kubelet's word on its devices where it is not
    # `Healthy`: `Unhealthy` (also in unhealthy_reason) or `Unknown` (the driver does not say).
    device_taints: tuple[CardTaint, ...] = ()
    kubelet_health: str | None = None

    @property
    def memory_utilization_percent(self) -> float | None:
        return utilization_percent(self.memory_used_mib, self.memory_total_mib)

    @property
    def ids(self) -> tuple[str, ...]:
        """Every id the card answers to, canonical first."""
        return (self.id, *self.aliases)


@dataclass(frozen=True, slots=True)
class ProcessRow:
    """One per-process row a vendor returned for one device (R-V3)."""

    pid: int
    memory_bytes: int | None = None  # None: the driver said "value not available"
    cores_percent: float | None = None  # share of the whole card; None: entry point has no answer
    # The partition the process runs in, where the library says (a MIG UUID, a MetaX sGPU);
    # None: the whole card, or the library does not say.
    partition_id: str | None = None


@dataclass(frozen=True, slots=True)
class DeviceProcesses:
    """A device's per-process answer. A reason is set when that entry point did not answer."""

    device_id: str
    rows: tuple[ProcessRow, ...] = ()
    memory_reason: Reason | None = None
    cores_reason: Reason | None = None
    reads_truncated: int = 0  # entry points that could not deliver a complete list


@dataclass(frozen=True, slots=True)
class PartitionReading:
    """A hardware partition read on its own handle, found by its recorded id (R-V4)."""

    id: str  # e.g. MIG-<uuid>
    parent_id: str
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    cores_percent: float | None = None
    memory_reason: Reason | None = None
    cores_reason: Reason | None = None
    aliases: tuple[str, ...] = ()  # other ids allocators record for this partition
    # Whether `cores_percent` is a share of the whole card (a MetaX sGPU's usage) rather than of
    # the partition's own compute (a MIG instance's SM activity): only then may it stand for a
    # slice's processes on the card.
    cores_of_card: bool = False
    # The partition's own activity figures (issue 41: every GPM figure a MIG GPU instance
    # answers, an AMD XCP's GFX and memory-controller activity), each absent with its reason,
    # keyed by the table's activity rows as a card's are; None where the backend reads none.
    activity: CardHealth | None = None

    @property
    def ids(self) -> tuple[str, ...]:
        return (self.id, *self.aliases)


@dataclass(frozen=True, slots=True)
class VendorReading:
    """Everything one backend's parse() made of one payload."""

    manufacturer: str
    cards: tuple[Card, ...] = ()
    processes: tuple[DeviceProcesses, ...] = ()
    partitions: tuple[PartitionReading, ...] = ()
    driver_version: str | None = None
    # Which of a backend's libraries or entry-point paths answered, where it has more than one
    # (AMD: "amdsmi", or "rocm_smi" where amdsmi's process list is known broken).
    via: str | None = None
    # card id -> the PCI bus id the backend read for it, where no alias or address carries it
    # (NVML's and HGML's, from the topology read once a minute): how the lost-card rule finds
    # each card on the bus (node/pcibus.py). Not shown in the snapshot.
    bus_ids: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, slots=True)
class Identities:
    """Which canonical id each id a manufacturer's devices answer to stands for.

    Built from the last reading of each manufacturer, so grants recorded under an alias are
    matched to the card the library names. Identity is not a figure: keeping the previous
    round's map never carries a measurement forward.
    """

    by_manufacturer: Mapping[str, Mapping[str, str]] = field(
        default_factory=lambda: MappingProxyType({})
    )

    def canonical(self, manufacturer: str, device_id: str) -> str:
        """The canonical id for `device_id`, or `device_id` itself when nothing claims it."""
        return self.by_manufacturer.get(manufacturer, {}).get(device_id, device_id)

    def updated(self, manufacturer: str, devices: Iterable[Card | PartitionReading]) -> Identities:
        """These identities with one manufacturer's replaced by what its devices say."""
        return Identities(
            MappingProxyType({**self.by_manufacturer, manufacturer: identity_map(devices)})
        )


def identity_map(devices: Iterable[Card | PartitionReading]) -> Mapping[str, str]:
    """alias -> canonical id (and each canonical id to itself) for one manufacturer's devices.
    An alias two devices claim names neither: a grant recorded under it stays unmatched rather
    than charged to the wrong card."""
    claims: dict[str, set[str]] = {}
    devices = list(devices)
    for device in devices:
        for alias in device.ids:
            claims.setdefault(alias, set()).add(device.id)
    out = {alias: next(iter(ids)) for alias, ids in claims.items() if len(ids) == 1}
    for device in devices:
        out[device.id] = device.id  # a canonical id always names itself
    return MappingProxyType(out)


@dataclass(frozen=True, slots=True)
class ReadRequest:
    """What a round asks a backend for beyond the card figures.

    Per-process queries are made only for carved devices (R-V3) and partitions are read only
    by the id their allocation recorded (R-V4), so an idle node costs no per-process call.
    """

    carved_device_ids: frozenset[str] = frozenset()
    partition_ids: frozenset[tuple[str, str]] = frozenset()  # (parent card id, partition id)


@dataclass(frozen=True, slots=True)
class BackendStatus:
    manufacturer: str
    state: BackendState
    duration_seconds: float | None = None  # None when no call was made this round
    error: str | None = None
    last_success: float | None = None  # unix time of the last good read, if any
    via: str | None = None  # VendorReading.via of this round's reading


@dataclass(frozen=True, slots=True)
class Group:
    """One manufacturer's cards as read in one round."""

    manufacturer: str
    timestamp: float  # unix time the read completed
    cards: tuple[Card, ...]
    driver_version: str | None = None


# -- the per-grant section's records (built by figures/slices.py) --------------------------------


@dataclass(frozen=True, slots=True)
class PodFault:
    """What one pod's own data did to a stage of a round (node/isolation.py): that pod's alone."""

    stage: str
    error: str


SCHEMA_VERSION = 1  # of the snapshot's `slices` section


@dataclass(frozen=True, slots=True)
class SliceUsage:
    manufacturer: str
    pod_uid: str
    container: str
    device_id: str
    memory_used_mib: int | None
    cores_utilization_percent: float | None  # share of the whole card, capped at 100


@dataclass(frozen=True, slots=True)
class SliceDevice:
    manufacturer: str
    device_id: str
    memory_reason: Reason | None = None
    cores_reason: Reason | None = None
    rows_returned: int = 0
    rows_attributed: int = 0
    rows_non_instance: int = 0
    rows_unreadable: int = 0
    rows_ambiguous: int = 0
    reads_truncated: int = 0


@dataclass(frozen=True, slots=True)
class SlicePartition:
    manufacturer: str
    pod_uid: str
    container: str
    device_id: str  # the parent card
    id: str  # the partition's own id; "" when its allocation recorded none
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    cores_percent: float | None = None
    memory_reason: Reason | None = None
    cores_reason: Reason | None = None
    # The partition's own activity figures (issue 41), where its backend reads them.
    activity: CardHealth | None = None


@dataclass(frozen=True, slots=True)
class SliceSection:
    schema_version: int = SCHEMA_VERSION
    truncated: bool = False
    usages: tuple[SliceUsage, ...] = ()
    devices: tuple[SliceDevice, ...] = ()
    partitions: tuple[SlicePartition, ...] = ()
    # Pods whose own part raised while the section was built (the first fault of each), by pod
    # UID: their usages carry no figures and their partitions no record. The round counts and
    # logs them; never served (an error's text may quote the tenant's input).
    faults: tuple[tuple[str, PodFault], ...] = ()


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What the agent publishes after a round. Immutable; swapped in whole."""

    timestamp: float  # unix time the round was stored; 0.0 before the first round
    period_seconds: int
    node: str | None = None
    groups: tuple[Group, ...] = ()
    backends: tuple[BackendStatus, ...] = ()
    round_duration_seconds: float | None = None
    slices: SliceSection | None = None  # per-grant usage; absent means "could not measure"


# A lone surrogate: a code point UTF-8 cannot encode. JSON's `\ud800` escape makes one, and so
# does `surrogateescape` decoding of bytes that are not UTF-8.
_SURROGATE = re.compile("[\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def utf8_text(text: str) -> str:
    """`text` with each code point UTF-8 cannot encode replaced by U+FFFD, so that what a tenant
    wrote always encodes (JSON, /metrics, logs); the same string when nothing is wrong."""
    return text if text.isascii() else _SURROGATE.sub(REPLACEMENT, text)


def as_int(value: Any) -> int | None:
    """A JSON integer as itself, anything else as absent (a bool is not a count)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def as_number(value: Any) -> float | None:
    """A JSON number as a float, anything else as absent. Python's json reads `NaN` and
    `Infinity`; they are not numbers anyone measured, so they are absent too."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
        return number if math.isfinite(number) else None
    return None


_Node = TypeVar("_Node")
# Each dataclass's field names, looked up once per class: the check runs over every process
# row of every round, where dataclasses.fields() per row costs more than the check itself.
_FIELD_NAMES: dict[type, tuple[str, ...] | None] = {}


def _field_names(cls: type) -> tuple[str, ...] | None:
    try:
        return _FIELD_NAMES[cls]
    except KeyError:
        dataclass_ = dataclasses.is_dataclass(cls)
        names = tuple(f.name for f in dataclasses.fields(cls)) if dataclass_ else None
        _FIELD_NAMES[cls] = names
        return names


def _all_finite(node: object) -> bool:
    """Whether no float anywhere in `node` is NaN or infinite: the common case, checked without
    building a path per value."""
    kind = type(node)
    if kind is float:
        return math.isfinite(node)  # type: ignore[arg-type]
    if kind is CardHealth:
        # Its only floats are numbers (flags hold bools, counts ints, codes and reasons text):
        # a card's dozens of (figure, value) pairs checked without a call for each.
        numbers = node.numbers  # type: ignore[attr-defined]
        return all(type(v) is not float or math.isfinite(v) for _, v in numbers)
    if kind is tuple:
        return all(map(_all_finite, node))  # type: ignore[call-overload]
    names = _field_names(kind)
    if names is None:
        return True
    for name in names:
        value = getattr(node, name)
        if type(value) is float:
            if not math.isfinite(value):
                return False
        elif value is not None and not _all_finite(value):
            return False
    return True


def _finite_health(health: CardHealth, path: str, dropped: list[str]) -> CardHealth:
    """A health figure that is no finite number is dropped and named as its figure (its only
    floats are numbers: flags, counts and codes hold none)."""
    bad = [name for name, v in health.numbers if isinstance(v, float) and not math.isfinite(v)]
    if not bad:
        return health
    dropped.extend(f"{path}.{name}" for name in bad)
    numbers = tuple((name, v) for name, v in health.numbers if name not in bad)
    return dataclasses.replace(health, numbers=numbers)


def _finite_node(node: _Node, path: str, dropped: list[str]) -> _Node:
    if isinstance(node, CardHealth):
        return _finite_health(node, path, dropped)  # type: ignore[return-value]
    if isinstance(node, float) and not math.isfinite(node):
        dropped.append(path)
        return None  # type: ignore[return-value]
    if isinstance(node, tuple):
        items = [_finite_node(item, f"{path}[{i}]", dropped) for i, item in enumerate(node)]
        if all(new is old for new, old in zip(items, node, strict=True)):
            return node
        return tuple(items)  # type: ignore[return-value]
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        changes = {}
        for f in dataclasses.fields(node):
            value = getattr(node, f.name)
            fixed = _finite_node(value, f"{path}.{f.name}" if path else f.name, dropped)
            if fixed is not value:
                changes[f.name] = fixed
        return dataclasses.replace(node, **changes) if changes else node
    return node


def finite_reading(reading: VendorReading) -> tuple[VendorReading, tuple[str, ...]]:
    """The one place a vendor's floats are checked: NaN and ±Infinity anywhere in a reading (a
    card, a process row, a partition) become absent (None), whatever the vendor or its parser.
    Returns the reading and the paths of the figures dropped, e.g. `cards[2].power_usage_watts`.

    The monitor applies it to every reading a backend's parse() returns, so no vendor module
    has to remember it and an encoder never meets a float JSON cannot carry."""
    if _all_finite(reading):
        return reading, ()
    dropped: list[str] = []
    fixed = _finite_node(reading, "", dropped)
    return fixed, tuple(dropped)


def utilization_percent(used: float | None, total: float | None) -> float | None:
    """used/total in percent, absent when either side is absent or the total is not positive."""
    if used is None or total is None or total <= 0:
        return None
    return round(used * 100.0 / total, 2)


def mib_from_bytes(value: float | None) -> int | None:
    """Bytes to MiB, converted once and rounded up: 0 < x < 1 MiB reads 1, never 0 (R-F2)."""
    if value is None:
        return None
    return math.ceil(value / MIB)
