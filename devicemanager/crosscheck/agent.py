"""The agent's reading as crosscheck figures: each card's published values under the names the
tools' parsers use, the names the agent knows each card by, and its process rows.

The figures are the backend's pure `parse` of one payload: what the agent publishes for that
round (`/metrics` and the snapshot render these fields, scaled: Hz, watts, MiB).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from devicemanager.crosscheck.model import Value
from devicemanager.figures.ranges import plausible_reading
from devicemanager.figures.snapshot import card_from_json
from devicemanager.model import (
    MIB,
    Card,
    CardFigure,
    CardHealth,
    HealthFigure,
    VendorReading,
    finite_reading,
)

# CardHealth's counters, by the crosscheck figure each is.
COUNTS: dict[HealthFigure, str] = {
    HealthFigure.ECC_CORRECTED_VOLATILE: "ecc.corrected.volatile",
    HealthFigure.ECC_UNCORRECTED_VOLATILE: "ecc.uncorrected.volatile",
    HealthFigure.ECC_CORRECTED_AGGREGATE: "ecc.corrected.aggregate",
    HealthFigure.ECC_UNCORRECTED_AGGREGATE: "ecc.uncorrected.aggregate",
    HealthFigure.REMAPPED_ROWS_CORRECTABLE: "remapped_rows.correctable",
    HealthFigure.REMAPPED_ROWS_UNCORRECTABLE: "remapped_rows.uncorrectable",
    HealthFigure.ECC_CORRECTED_TOTAL: "ecc.corrected.total",
    HealthFigure.ECC_UNCORRECTED_TOTAL: "ecc.uncorrected.total",
    HealthFigure.PCIE_REPLAYS: "pcie.replays",
    HealthFigure.PCIE_NAKS: "pcie.naks",
}
# Counted in the model, a yes or no in the tools (nvidia-smi's `remapped_row_pending: Yes`).
FLAGS: dict[HealthFigure, str] = {
    HealthFigure.REMAPPED_ROWS_PENDING: "remapped_rows.pending",
    HealthFigure.REMAPPED_ROWS_FAILED: "remapped_rows.failed",
}
CLOCKS: dict[HealthFigure, str] = {
    HealthFigure.CLOCK_SM_HZ: "clock.sm_mhz",
    HealthFigure.CLOCK_GRAPHICS_HZ: "clock.graphics_mhz",
    HealthFigure.CLOCK_MEMORY_HZ: "clock.memory_mhz",
}


# Card's own figures, by the crosscheck figure each is.
CARD: dict[CardFigure, str] = {
    CardFigure.MEMORY_TOTAL_MIB: "memory.total_mib",
    CardFigure.MEMORY_USED_MIB: "memory.used_mib",
    CardFigure.CORES_UTILIZATION_PERCENT: "utilization_percent",
    CardFigure.TEMPERATURE_CELSIUS: "temperature",
    CardFigure.POWER_USAGE_WATTS: "power_watts",
}


def as_published(reading: VendorReading) -> VendorReading:
    """The parse as a round publishes it: figures that are no number, or outside what the
    hardware can hold, refused (the monitor's own two steps, R-V2)."""
    finite, _ = finite_reading(reading)
    plausible, _ = plausible_reading(finite)
    return plausible


@dataclass(frozen=True, slots=True)
class AgentCard:
    id: str
    keys: frozenset[str]
    figures: Mapping[str, Value]
    why_absent: Mapping[str, str]  # figure -> the agent's own reason it is absent
    partitioned: bool = False  # its partitions are cards of their own (AMD's CPX)


@dataclass(frozen=True, slots=True)
class AgentProcess:
    card: str  # the card's id
    pid: int
    memory_bytes: int | None


def normal_key(key: str) -> str:
    """Bus ids compare lower-case with a four-digit domain (nvidia-smi prints eight)."""
    key = key.strip().lower()
    head, sep, rest = key.partition(":")
    if sep and len(head) == 8 and head.startswith("0000") and rest.count(":") == 1:
        return head[4:] + ":" + rest
    return key


def card_keys(card: Card) -> frozenset[str]:
    keys = {card.id, *card.aliases, f"index:{card.index}"}
    address = dict(card.address)
    if isinstance(address.get("bdf"), str):
        keys.add(str(address["bdf"]))
    if "card" in address and "device" in address:  # Ascend: npu-smi's NPU and Chip
        keys.add(f"npu:{address['card']}:{address['device']}")
    return frozenset(normal_key(k) for k in keys)


def _health(health: CardHealth, out: dict[str, Value], why: dict[str, str]) -> None:
    reasons = dict(health.reasons)
    # Counts as whole numbers, repair flags as yes or no, clocks from Hz to the tools' MHz.
    read: tuple[tuple[dict[HealthFigure, str], Callable[[float], Value]], ...] = (
        (COUNTS, int),
        (FLAGS, bool),
        (CLOCKS, lambda hz: hz / 1e6),
    )
    for figures, convert in read:
        for field, figure in figures.items():
            value = health.number(field)
            if value is not None:
                out[figure] = convert(value)
            elif field in reasons:
                why[figure] = f"the agent's reading: {reasons[field]}"
    if health.throttle_reasons is not None:
        for reason, active in health.throttle_reasons:
            out[f"throttle.{reason}"] = bool(active)


def agent_card(card: Card, partitioned: bool = False) -> AgentCard:
    figures: dict[str, Value] = {}
    why: dict[str, str] = {}
    for field, figure in CARD.items():
        value = getattr(card, field)
        if value is not None:
            figures[figure] = value
    for refused in card.invalid:  # refused as out of range (R-V2): the agent publishes none
        why[CARD.get(CardFigure(refused), refused)] = "the agent refused its value as out of range"
    if card.health is not None:
        _health(card.health, figures, why)
    return AgentCard(card.id, card_keys(card), figures, why, partitioned)


def agent_cards(reading: VendorReading) -> tuple[AgentCard, ...]:
    parents = {c.parent_id for c in reading.cards if c.parent_id is not None}
    return tuple(agent_card(c, c.id in parents) for c in reading.cards)


def snapshot_cards(doc: Mapping[str, object], manufacturer: str) -> tuple[AgentCard, ...]:
    """A served snapshot's cards of one manufacturer, read back as the worker reads them."""
    groups = doc.get("groups")
    cards = tuple(
        card
        for group in (groups if isinstance(groups, list) else ())
        if isinstance(group, dict) and group.get("manufacturer") == manufacturer
        for item in (group.get("accelerators") or ())
        if isinstance(item, dict) and (card := card_from_json(item)) is not None
    )
    return agent_cards(VendorReading(manufacturer, cards))


def agent_processes(reading: VendorReading) -> tuple[AgentProcess, ...]:
    return tuple(
        # A device whose memory answer was refused publishes no row's memory.
        AgentProcess(device.device_id, row.pid, None if device.memory_reason else row.memory_bytes)
        for device in reading.processes
        for row in device.rows
    )


def whole_mib(memory_bytes: int) -> int:
    """Bytes in whole MiB as the tools print them (nvidia-smi divides and drops the rest)."""
    return memory_bytes // MIB
