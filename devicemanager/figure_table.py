"""Every card figure declared once (issue 40): its name, unit, kind, bounds, where the snapshot
holds it, its /metrics family and label values, HELP, and the name the capability gauge gives it.

The rest is derived from these rows: figures/ranges.py's bounds, figures/snapshot.py's JSON
(both ways), figures/exposition.py's card, health and capability families, report/families.py's
list of the agent's families, and tests/test_docs.py's check of docs/metrics.md. Vendors return
health figures keyed by `HealthFigure` (an enum, so mypy checks every key), and each vendor's
"unsupported" set is a frozenset of its members. Adding a figure is one row here (and its
member) plus the vendor reads that produce it.

Two tables: a card's own figures (fields of `model.Card`, each also the figure of a per-grant
family), and its health figures (error counters, energy, clocks, link retries, error events:
`model.CardHealth`, keyed by `HealthFigure`). Imports nothing of the package: `model.py`
imports it and hands it on as part of the vocabulary.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass, field
from enum import StrEnum
from typing import cast

PREFIX = "gpustack_accelerator_"  # a card family's name: PREFIX + its suffix
GRANT_PREFIX = "gpustack_instance_accelerator_"  # a per-grant family's name
ACTIVITY = "activity"  # the snapshot object an activity figure is held under (issue 41)
# The per-grant activity families' HELP, before the card family's (issue 41): time-sliced
# tenants' activity cannot be told apart, so only a tenant the hardware measures alone has one.
GRANT_ACTIVITY_HELP = (
    "The grant's own activity, where the hardware measures its holder alone (a partition, "
    "or a whole card one Instance holds); absent on a slice or a shared card. "
)


class Kind(StrEnum):
    """A family's TYPE: a counter's family name ends in `_total`."""

    GAUGE = "gauge"
    COUNTER = "counter"


class Shape(StrEnum):
    """How a health figure is held, shown and published."""

    NUMBER = "number"  # one number: a JSON number, one sample with the row's label values
    FLAGS = "flags"  # (label value, bool) per reason: a JSON object of booleans, 1/0 samples
    COUNTS = "counts"  # (label value, count): a JSON object of counts, one sample each
    CODES = "codes"  # label values active now: a JSON list, a 1 sample each


class CardFigure(StrEnum):
    """A card's own figures: each is the name of a `model.Card` field (or property)."""

    MEMORY_TOTAL_MIB = "memory_total_mib"
    MEMORY_USED_MIB = "memory_used_mib"
    MEMORY_UTILIZATION_PERCENT = "memory_utilization_percent"
    CORES_UTILIZATION_PERCENT = "cores_utilization_percent"
    TEMPERATURE_CELSIUS = "temperature_celsius"
    POWER_USAGE_WATTS = "power_usage_watts"


class HealthFigure(StrEnum):
    """A card's health figures (issue 29), in the order they are shown."""

    ECC_CORRECTED_VOLATILE = "ecc_corrected_volatile"
    ECC_UNCORRECTED_VOLATILE = "ecc_uncorrected_volatile"
    ECC_CORRECTED_AGGREGATE = "ecc_corrected_aggregate"
    ECC_UNCORRECTED_AGGREGATE = "ecc_uncorrected_aggregate"
    ECC_CORRECTED_TOTAL = "ecc_corrected_total"
    ECC_UNCORRECTED_TOTAL = "ecc_uncorrected_total"
    REMAPPED_ROWS_CORRECTABLE = "remapped_rows_correctable"
    REMAPPED_ROWS_UNCORRECTABLE = "remapped_rows_uncorrectable"
    REMAPPED_ROWS_PENDING = "remapped_rows_pending"
    REMAPPED_ROWS_FAILED = "remapped_rows_failed"
    ENERGY_JOULES = "energy_joules"
    THROTTLE_REASONS = "throttle_reasons"
    CLOCK_SM_HZ = "clock_sm_hz"
    CLOCK_MEMORY_HZ = "clock_memory_hz"
    CLOCK_GRAPHICS_HZ = "clock_graphics_hz"
    PCIE_REPLAYS = "pcie_replays"
    PCIE_NAKS = "pcie_naks"
    XID_ERRORS = "xid_errors"
    ERROR_CODES = "error_codes"
    # Activity (issue 41): what share of the hardware worked over the round period, from
    # NVML's and HGML's GPM; busy time (cores_utilization_percent) is another figure.
    SM_ACTIVITY = "sm_activity_percent"
    SM_OCCUPANCY = "sm_occupancy_percent"
    TENSOR_ACTIVITY = "tensor_activity_percent"
    TENSOR_ACTIVITY_DFMA = "tensor_activity_dfma_percent"
    TENSOR_ACTIVITY_HMMA = "tensor_activity_hmma_percent"
    TENSOR_ACTIVITY_IMMA = "tensor_activity_imma_percent"
    MEMORY_BANDWIDTH_UTILIZATION = "memory_bandwidth_utilization_percent"
    PIPE_FP64_ACTIVITY = "pipe_fp64_activity_percent"
    PIPE_FP32_ACTIVITY = "pipe_fp32_activity_percent"
    PIPE_FP16_ACTIVITY = "pipe_fp16_activity_percent"
    PCIE_TX_BYTES_PER_SECOND = "pcie_tx_bytes_per_second"
    PCIE_RX_BYTES_PER_SECOND = "pcie_rx_bytes_per_second"
    NVLINK_TX_BYTES_PER_SECOND = "nvlink_tx_bytes_per_second"
    NVLINK_RX_BYTES_PER_SECOND = "nvlink_rx_bytes_per_second"
    # Busy times beside the cores' (issue 41): a vendor figure that is busy time, published as
    # busy time under a family of its own.
    MEMORY_BUSY = "memory_busy_percent"
    VECTOR_CORE_BUSY = "vector_core_busy_percent"


# The clock-throttle reasons a card can report, named as NVML's clocks-event reasons (its
# nvmlClocksEventReason* bits, 0x1 to 0x400 in this order) so every manufacturer's throttle
# status maps onto one label set. BoardLimit (0x200) and Reliability (0x400) came with CUDA 13's
# nvml.h (issue 43).
THROTTLE_REASONS: tuple[str, ...] = (
    "gpu_idle",
    "applications_clocks_setting",
    "sw_power_cap",
    "hw_slowdown",
    "sync_boost",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "display_clock_setting",
    "board_limit",  # nvmlClocksEventReasonBoardLimit
    "reliability",  # nvmlClocksEventReasonReliability
)

MAX_MIB = 16 << 20  # 16 TiB: past any card made
COUNTER = (0, 2**63)


@dataclass(frozen=True, slots=True)
class Family:
    """One /metrics family of card figures: the rows that name it are its samples."""

    suffix: str  # the family's name after PREFIX
    kind: Kind
    help: str  # the HELP text, before "Sampled every …"
    labels: tuple[str, ...] = ()  # label names beyond the card's (node, manufacturer, id, index)

    @property
    def name(self) -> str:
        return PREFIX + self.suffix


@dataclass(frozen=True, slots=True)
class FigureSpec:
    """One figure, declared once."""

    name: StrEnum  # a CardFigure or HealthFigure: the capability gauge's `figure` label too
    unit: str
    family: Family
    json: tuple[str, ...]  # where the snapshot holds it: the key under the card (or `health`)
    labels: tuple[str, ...] = ()  # NUMBER: its values of the family's labels; FLAGS: every one
    bounds: tuple[float, float] | None = None  # what the hardware can hold (figures/ranges.py)
    integer: bool = True  # a count (a JSON integer) or a measure (a JSON number)
    shape: Shape = Shape.NUMBER
    # Written in the snapshot only where the backend reads it (issue 29's error codes, issue
    # 43's total ECC counts): every other card's health object is the one it was before.
    json_only_when_read: bool = False
    derived: bool = False  # computed from other figures: never read, refused or read back
    grant_help: str | None = None  # a card figure's per-grant family (GRANT_PREFIX), its HELP
    # A busy time held beside the activity figures (the memory's, Ascend's vector cores'): it
    # says how long, not how much, so it has no per-grant family (issue 41).
    busy_time: bool = False

    @property
    def capability(self) -> str:
        """The name the capability gauge and `absentReasons` give the figure."""
        return self.name.value

    @property
    def activity(self) -> bool:
        """An activity figure (issue 41): how much of the hardware worked, held under the
        snapshot's `activity` object; a grant the hardware measures alone has its own."""
        return self.json[0] == ACTIVITY and not self.busy_time

    @property
    def kind(self) -> Kind:
        return self.family.kind


@dataclass(frozen=True, slots=True)
class FigureTable:
    card: tuple[FigureSpec, ...]
    health: tuple[FigureSpec, ...]
    # Worked out once from the rows: every vendor's parse and every rendering asks them of each
    # card each round (issue 41's figures made that a scan of dozens of rows per value).
    _by_name: dict[str, FigureSpec] = field(init=False, repr=False, compare=False)
    _families: tuple[tuple[Family, tuple[FigureSpec, ...]], ...] = field(
        init=False, repr=False, compare=False
    )
    _shapes: tuple[tuple[HealthFigure, Shape], ...] = field(init=False, repr=False, compare=False)
    _grant_activity: tuple[tuple[Family, tuple[FigureSpec, ...]], ...] = field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        by_name: dict[str, FigureSpec] = {}
        for spec in self.health:
            by_name.setdefault(spec.name, spec)  # the first row of a name, as a scan finds it
        order: dict[Family, list[FigureSpec]] = {}
        for spec in self.health:
            order.setdefault(spec.family, []).append(spec)
        object.__setattr__(self, "_by_name", by_name)
        families = tuple((family, tuple(specs)) for family, specs in order.items())
        object.__setattr__(self, "_families", families)
        shapes = tuple((cast(HealthFigure, s.name), s.shape) for s in self.health)
        object.__setattr__(self, "_shapes", shapes)
        object.__setattr__(self, "_grant_activity", self._grant_activity_families())

    def health_spec(self, name: str) -> FigureSpec | None:
        return self._by_name.get(name)

    def health_shapes(self) -> tuple[tuple[HealthFigure, Shape], ...]:
        """Each health row's figure and shape, in the table's order."""
        return self._shapes

    def health_names(self) -> Set[str]:
        """The names of the health rows."""
        return self._by_name.keys()

    def health_families(self) -> tuple[tuple[Family, tuple[FigureSpec, ...]], ...]:
        """Each health family with its rows, in the order the rows first name them."""
        return self._families

    def activity_rows(self) -> tuple[FigureSpec, ...]:
        """The activity figures, in the table's order: a grant's own where measured alone."""
        return tuple(s for s in self.health if s.activity)

    def grant_activity_families(self) -> tuple[tuple[Family, tuple[FigureSpec, ...]], ...]:
        """Each activity family with its rows, as the per-grant family (GRANT_PREFIX) that
        states the grant's own activity (issue 41): the card family's suffix, kind and labels,
        and its HELP said of the grant. Made once per table: every rendering asks."""
        return self._grant_activity

    def _grant_activity_families(self) -> tuple[tuple[Family, tuple[FigureSpec, ...]], ...]:
        return tuple(
            (
                Family(
                    family.suffix,
                    family.kind,
                    GRANT_ACTIVITY_HELP + family.help,
                    family.labels,
                ),
                specs,
            )
            for family, specs in self.health_families()
            if all(s.activity for s in specs)
        )

    def family_names(self) -> tuple[str, ...]:
        """Every family the rows declare: the card's, each per-grant one, the health ones."""
        card = [s.family.name for s in self.card]
        grant = [GRANT_PREFIX + s.name.value for s in self.card if s.grant_help is not None]
        activity = [GRANT_PREFIX + f.suffix for f, _ in self.grant_activity_families()]
        health = [family.name for family, _ in self.health_families()]
        return tuple(dict.fromkeys([*card, *grant, *activity, *health]))


def _card(
    name: CardFigure,
    unit: str,
    json: str,
    help_text: str,
    grant_help: str,
    bounds: tuple[float, float] | None,
    *,
    integer: bool = False,
    derived: bool = False,
) -> FigureSpec:
    family = Family(name.value, Kind.GAUGE, help_text)
    return FigureSpec(
        name, unit, family, (json,), (), bounds, integer, derived=derived, grant_help=grant_help
    )


# A card's own figures, in the order the snapshot and /metrics show them.
CARD: tuple[FigureSpec, ...] = (
    _card(
        CardFigure.MEMORY_TOTAL_MIB,
        "MiB",
        "memory",
        "Physical memory of the card, MiB.",
        "The grant's memory: the whole card, a slice's quota, or a partition's own capacity, MiB.",
        (1, MAX_MIB),
        integer=True,
    ),
    _card(
        CardFigure.MEMORY_USED_MIB,
        "MiB",
        "memoryUsage",
        "Memory in use on the card by every tenant, MiB.",
        "Memory the Instance uses of its grant, MiB; may exceed the total, never "
        "clamped; absent when unmeasured.",
        (0, MAX_MIB),
        integer=True,
    ),
    _card(
        CardFigure.MEMORY_UTILIZATION_PERCENT,
        "percent",
        "memoryUtilization",
        "Card memory used over total, percent.",
        "Memory used over the grant's total, percent.",
        None,
        derived=True,
    ),
    _card(
        CardFigure.CORES_UTILIZATION_PERCENT,
        "percent",
        "coresUtilization",
        "Busy time: the share of the sample period in which any kernel ran on the card, "
        "percent (NVML's utilization.gpu); not how much of the card worked: see "
        "gpustack_accelerator_sm_activity_percent.",
        "Compute used against the Instance's own allowance, percent; "
        "may exceed 100; absent when unmeasured.",
        (0.0, 100.0),
    ),
    _card(
        CardFigure.TEMPERATURE_CELSIUS,
        "celsius",
        "temperature",
        "Card temperature, degrees Celsius.",
        "Temperature of the card the grant is on, degrees Celsius.",
        (-100.0, 200.0),
    ),
    _card(
        CardFigure.POWER_USAGE_WATTS,
        "watts",
        "powerUsage",
        "Card power draw, watts.",
        "Power draw of the card the grant is on, watts.",
        (0.0, 100_000.0),
    ),
)

_ECC = Family(
    "ecc_errors_total",
    Kind.COUNTER,
    "Memory ECC errors the card's library counted: error corrected or uncorrected; counter "
    "volatile (since the driver loaded), aggregate (over the card's life) or total (the "
    "library's total, its lifetime not stated).",
    ("error", "counter"),
)
_ROWS = Family(
    "remapped_rows",
    Kind.GAUGE,
    "Memory rows remapped by the card's repair, by state: correctable and uncorrectable "
    "count rows; pending and failed are NVML's flags (1: at least one; pending: a reset "
    "is needed; failed: the card should be replaced).",
    ("state",),
)
_ENERGY = Family(
    "energy_joules_total",
    Kind.COUNTER,
    "Energy the card consumed since its driver loaded, joules.",
)
_THROTTLE = Family(
    "clock_throttle_active",
    Kind.GAUGE,
    "1 while the reason holds the card's clocks down (reasons named as NVML's clocks event "
    "reasons), 0 while it does not.",
    ("reason",),
)
_CLOCKS = Family(
    "clock_hertz",
    Kind.GAUGE,
    "The card's current clock, hertz: clock sm, memory or graphics.",
    ("clock",),
)
_REPLAYS = Family(
    "pcie_replays_total",
    Kind.COUNTER,
    "PCIe replays the card counted since its driver loaded.",
)
_NAKS = Family(
    "pcie_naks_total",
    Kind.COUNTER,
    "PCIe NAKs the card received plus those it generated, since its driver loaded (the count "
    "AMD's and Hygon's libraries name a replay counter).",
)
_XIDS = Family(
    "xid_errors_total",
    Kind.COUNTER,
    "Critical error events (NVML XIDs) the card raised since the agent started, by "
    "code, application XIDs included; at most 64 codes per card, later ones as "
    'xid="other".',
    ("xid",),
)
_CODES = Family(
    "error_code_active",
    Kind.GAUGE,
    "1 per error code the card reports now (Ascend's error codes, hex); at most 64 per card.",
    ("code",),
)

# Activity over the round period (issue 41): GPM's figures between this round's sample and the
# previous round's, on NVIDIA Hopper and newer and on T-Head.
_PERCENT = (0.0, 100.0)
_THROUGHPUT = (0.0, 1e14)  # 100 TB/s: past any link made
_SM_ACTIVITY = Family(
    "sm_activity_percent",
    Kind.GAUGE,
    "SM activity over the round period: the share of the card's SMs that were busy, "
    "averaged over the period, percent (GPM's SM_UTIL; one SM of 132 busy all the time "
    "reads 0.76); not busy time.",
)
_SM_OCCUPANCY = Family(
    "sm_occupancy_percent",
    Kind.GAUGE,
    "SM occupancy over the round period: warps resident over the most the SMs can hold, "
    "percent (GPM's SM_OCCUPANCY).",
)
_TENSOR = Family(
    "tensor_activity_percent",
    Kind.GAUGE,
    "Tensor-core activity over the round period, percent: kind any (GPM's ANY_TENSOR_UTIL), "
    "or one kind of tensor instruction (dfma, hmma, imma).",
    ("kind",),
)
_BANDWIDTH = Family(
    "memory_bandwidth_utilization_percent",
    Kind.GAUGE,
    "Device-memory bandwidth used, percent of the peak: over the round period from GPM's "
    "DRAM_BW_UTIL (NVIDIA, T-Head), over the driver's own sample period from DCMI's HBM "
    "bandwidth utilization (Ascend).",
)
_PIPE = Family(
    "pipe_activity_percent",
    Kind.GAUGE,
    "Floating-point pipe activity over the round period, percent, by pipe: fp64, fp32, fp16 "
    "(GPM's FP64_UTIL, FP32_UTIL, FP16_UTIL).",
    ("pipe",),
)
_PCIE_THROUGHPUT = Family(
    "pcie_throughput_bytes_per_second",
    Kind.GAUGE,
    "PCIe traffic over the round period, bytes per second: direction tx (from the card) or rx "
    "(to it) (GPM's PCIE_TX_PER_SEC and PCIE_RX_PER_SEC).",
    ("direction",),
)
_NVLINK_THROUGHPUT = Family(
    "nvlink_throughput_bytes_per_second",
    Kind.GAUGE,
    "NVLink traffic over every link of the card over the round period, bytes per second: "
    "direction tx or rx (GPM's NVLINK_TOTAL_TX_PER_SEC and NVLINK_TOTAL_RX_PER_SEC).",
    ("direction",),
)

# Busy times other manufacturers state beside the cores' (issue 41): the share of the period in
# which a unit did anything, not how much of it worked.
_MEMORY_BUSY = Family(
    "memory_busy_percent",
    Kind.GAUGE,
    "Memory busy time: the share of the sample period in which the card's memory controller "
    "was reading or writing device memory, percent (NVML's utilization.memory, AMD's UMC "
    "activity); not bandwidth: see "
    "gpustack_accelerator_memory_bandwidth_utilization_percent.",
)
_VECTOR_CORE_BUSY = Family(
    "vector_core_busy_percent",
    Kind.GAUGE,
    "Vector-core busy time: the share of the sample period in which the card's vector cores "
    "ran, percent (Ascend's AI Vector utilization); the AI Cores' is "
    "gpustack_accelerator_cores_utilization_percent.",
)


def _activity(
    name: HealthFigure,
    family: Family,
    key: str,
    labels: tuple[str, ...] = (),
    bounds: tuple[float, float] = _PERCENT,
    unit: str = "percent",
    *,
    busy_time: bool = False,
) -> FigureSpec:
    return FigureSpec(
        name,
        unit,
        family,
        (ACTIVITY, key),
        labels,
        bounds,
        False,
        json_only_when_read=True,
        busy_time=busy_time,
    )


def _ecc(
    name: HealthFigure, error: str, counter: str, *, only_when_read: bool = False
) -> FigureSpec:
    return FigureSpec(
        name,
        "errors",
        _ECC,
        ("eccErrors", error, counter),
        (error, counter),
        COUNTER,
        json_only_when_read=only_when_read,
    )


def _rows(name: HealthFigure, state: str) -> FigureSpec:
    return FigureSpec(name, "rows", _ROWS, ("remappedRows", state), (state,), COUNTER)


def _clock(name: HealthFigure, clock: str) -> FigureSpec:
    return FigureSpec(name, "hertz", _CLOCKS, ("clocksHz", clock), (clock,), (0, 1e11))


H = HealthFigure
# A card's health figures, in the order the snapshot, /metrics and the capability gauge show
# them (a family's place is where its first row is).
HEALTH: tuple[FigureSpec, ...] = (
    _ecc(H.ECC_CORRECTED_VOLATILE, "corrected", "volatile"),
    _ecc(H.ECC_UNCORRECTED_VOLATILE, "uncorrected", "volatile"),
    _ecc(H.ECC_CORRECTED_AGGREGATE, "corrected", "aggregate"),
    _ecc(H.ECC_UNCORRECTED_AGGREGATE, "uncorrected", "aggregate"),
    # A library's "total" count whose header says no more (amdsmi "the total number of ECC
    # errors", ROCm SMI's "accumulated", MXSML's "total"): labelled as what is known (issue 43).
    # In the snapshot only where read, so a card of a library that splits its counts by
    # lifetime (NVML, HGML, DCMI) keeps the health object it had.
    _ecc(H.ECC_CORRECTED_TOTAL, "corrected", "total", only_when_read=True),
    _ecc(H.ECC_UNCORRECTED_TOTAL, "uncorrected", "total", only_when_read=True),
    _rows(H.REMAPPED_ROWS_CORRECTABLE, "correctable"),
    _rows(H.REMAPPED_ROWS_UNCORRECTABLE, "uncorrectable"),
    _rows(H.REMAPPED_ROWS_PENDING, "pending"),  # NVML's flag: 1 = at least one
    _rows(H.REMAPPED_ROWS_FAILED, "failed"),
    # 100 kW for three centuries.
    FigureSpec(H.ENERGY_JOULES, "joules", _ENERGY, ("energyJoules",), (), (0.0, 1e15), False),
    FigureSpec(
        H.THROTTLE_REASONS,
        "flag",
        _THROTTLE,
        ("clockThrottleReasons",),
        THROTTLE_REASONS,
        shape=Shape.FLAGS,
    ),
    _clock(H.CLOCK_SM_HZ, "sm"),
    _clock(H.CLOCK_MEMORY_HZ, "memory"),
    _clock(H.CLOCK_GRAPHICS_HZ, "graphics"),
    FigureSpec(H.PCIE_REPLAYS, "replays", _REPLAYS, ("pcieReplays",), (), COUNTER),
    # amdsmi's and ROCm SMI's "replay counter" is "the sum of the number of NAK's received by
    # the GPU and the NAK's generated by the GPU" (their headers): a figure of its own (issue
    # 43), in the snapshot only where read.
    FigureSpec(H.PCIE_NAKS, "naks", _NAKS, ("pcieNaks",), (), COUNTER, json_only_when_read=True),
    # Critical error events by code (NVML's XIDs), counted since the agent started.
    FigureSpec(
        H.XID_ERRORS,
        "events",
        _XIDS,
        ("xidErrors",),
        shape=Shape.COUNTS,
        json_only_when_read=True,
    ),
    # Error codes the card reports now (Ascend's dcmi_get_device_errorcode_v2), as hex text.
    FigureSpec(
        H.ERROR_CODES,
        "codes",
        _CODES,
        ("errorCodes",),
        shape=Shape.CODES,
        json_only_when_read=True,
    ),
    # Activity (issue 41), in the snapshot under `activity` only where read.
    _activity(H.SM_ACTIVITY, _SM_ACTIVITY, "smActivityPercent"),
    _activity(H.SM_OCCUPANCY, _SM_OCCUPANCY, "smOccupancyPercent"),
    _activity(H.TENSOR_ACTIVITY, _TENSOR, "tensorActivityPercent", ("any",)),
    _activity(H.TENSOR_ACTIVITY_DFMA, _TENSOR, "tensorDfmaActivityPercent", ("dfma",)),
    _activity(H.TENSOR_ACTIVITY_HMMA, _TENSOR, "tensorHmmaActivityPercent", ("hmma",)),
    _activity(H.TENSOR_ACTIVITY_IMMA, _TENSOR, "tensorImmaActivityPercent", ("imma",)),
    _activity(H.MEMORY_BANDWIDTH_UTILIZATION, _BANDWIDTH, "memoryBandwidthUtilizationPercent"),
    _activity(H.PIPE_FP64_ACTIVITY, _PIPE, "fp64PipeActivityPercent", ("fp64",)),
    _activity(H.PIPE_FP32_ACTIVITY, _PIPE, "fp32PipeActivityPercent", ("fp32",)),
    _activity(H.PIPE_FP16_ACTIVITY, _PIPE, "fp16PipeActivityPercent", ("fp16",)),
    _activity(
        H.PCIE_TX_BYTES_PER_SECOND,
        _PCIE_THROUGHPUT,
        "pcieTxBytesPerSecond",
        ("tx",),
        _THROUGHPUT,
        "bytes/s",
    ),
    _activity(
        H.PCIE_RX_BYTES_PER_SECOND,
        _PCIE_THROUGHPUT,
        "pcieRxBytesPerSecond",
        ("rx",),
        _THROUGHPUT,
        "bytes/s",
    ),
    _activity(
        H.NVLINK_TX_BYTES_PER_SECOND,
        _NVLINK_THROUGHPUT,
        "nvlinkTxBytesPerSecond",
        ("tx",),
        _THROUGHPUT,
        "bytes/s",
    ),
    _activity(
        H.NVLINK_RX_BYTES_PER_SECOND,
        _NVLINK_THROUGHPUT,
        "nvlinkRxBytesPerSecond",
        ("rx",),
        _THROUGHPUT,
        "bytes/s",
    ),
    _activity(H.MEMORY_BUSY, _MEMORY_BUSY, "memoryBusyPercent", busy_time=True),
    _activity(H.VECTOR_CORE_BUSY, _VECTOR_CORE_BUSY, "vectorCoreBusyPercent", busy_time=True),
)
del H

FIGURES = FigureTable(card=CARD, health=HEALTH)
