"""Figures outside what the hardware can hold are refused, figure by figure (issue 30).

A library's "not supported" is often a sentinel rather than an error: amdsmi's UINT32_MAX
watts, NVML's 0xFFFFFFFF, a temperature of -1e30 from a half-initialised driver. A parser that
misses one would publish it as measured. So the monitor passes every reading through here
after the NaN check, whatever the vendor: a figure outside its physical range becomes absent
with the reason `invalid_data` (a card's own figure listed in `Card.invalid`, a health figure
in its `reasons`, a partition's or a device's per-process entry point in its `*_reason`), and
the paths refused are returned for the log. Pure.

The bounds are wide on purpose: far past any card made (16 TiB of memory, 100 kW, 100 GHz),
tight only where the figure is a share (0..100 %) or cannot be negative.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from devicemanager.model import (
    FIGURES,
    MIB,
    Card,
    CardFigure,
    CardHealth,
    DeviceProcesses,
    FigureTable,
    PartitionReading,
    Reason,
    VendorReading,
)

# The bounds are the figure table's (model.FIGURES), figure by figure.
CARD: dict[str, tuple[float, float]] = {
    s.name.value: s.bounds for s in FIGURES.card if s.bounds is not None and not s.derived
}
MAX_MIB = int(CARD[CardFigure.MEMORY_TOTAL_MIB][1])
PARTITION_MEMORY = (CardFigure.MEMORY_TOTAL_MIB.value, CardFigure.MEMORY_USED_MIB.value)
ROW_MEMORY = (0, MAX_MIB * MIB)
SHARE = (0.0, 100.0)


def _outside(value: Any, bounds: tuple[float, float]) -> bool:
    return value is not None and not bounds[0] <= value <= bounds[1]


def _any_outside(values: list[Any], bounds: tuple[float, float]) -> bool:
    """Whether any of `values` (None for a figure not read) falls outside `bounds`: min and max
    over every row, the per-row test of a round of thousands of processes done in C. No NaN
    reaches here: the monitor applies model.finite_reading first."""
    present = [v for v in values if v is not None]
    return bool(present) and (min(present) < bounds[0] or max(present) > bounds[1])


def _card(card: Card, path: str, refused: list[str], table: FigureTable = FIGURES) -> Card:
    invalid = tuple(name for name, b in CARD.items() if _outside(getattr(card, name), b))
    health = card.health
    if health is not None:
        health = _health(health, f"{path}.health", refused, table)
    if not invalid and health is card.health:
        return card
    refused.extend(f"{path}.{name}" for name in invalid)
    changes: dict[str, Any] = dict.fromkeys(invalid)
    return replace(card, **changes, health=health, invalid=(*card.invalid, *invalid))


def _health(
    health: CardHealth, path: str, refused: list[str], table: FigureTable = FIGURES
) -> CardHealth:
    # Only the numbers the card holds, each against its row's bounds (looked up, not scanned
    # for: issue 41's activity made the table long enough that a pass over every row showed in
    # the round); CardHealth keeps them in the table's order, so `invalid` is in it too.
    invalid = [
        name
        for name, value in health.numbers
        if (spec := table.health_spec(name)) is not None
        and spec.bounds is not None
        and not spec.bounds[0] <= value <= spec.bounds[1]
    ]
    if not invalid:
        return health
    refused.extend(f"{path}.{name}" for name in invalid)
    kept = tuple((name, r) for name, r in health.reasons if name not in invalid)
    reasons = (*kept, *((name, Reason.INVALID_DATA) for name in invalid))
    numbers = tuple((name, v) for name, v in health.numbers if name not in invalid)
    return replace(health, numbers=numbers, reasons=reasons)


def _partition(part: PartitionReading, path: str, refused: list[str]) -> PartitionReading:
    memory = (
        any(_outside(getattr(part, name), CARD[name]) for name in PARTITION_MEMORY)
        and part.memory_reason is None
    )
    cores = _outside(part.cores_percent, SHARE) and part.cores_reason is None
    if not memory and not cores:
        return part
    changes: dict[str, Any] = {}
    if memory:
        refused.append(f"{path}.memory")
        changes.update(
            memory_total_mib=None, memory_used_mib=None, memory_reason=Reason.INVALID_DATA
        )
    if cores:
        refused.append(f"{path}.cores_percent")
        changes.update(cores_percent=None, cores_reason=Reason.INVALID_DATA)
    return replace(part, **changes)


def _device(answer: DeviceProcesses, path: str, refused: list[str]) -> DeviceProcesses:
    """One row out of range makes that entry point's figures absent for the whole device, as
    any row that cannot be used does: a partial sum is never published as the whole."""
    memory = answer.memory_reason is None and _any_outside(
        [r.memory_bytes for r in answer.rows], ROW_MEMORY
    )
    cores = answer.cores_reason is None and _any_outside(
        [r.cores_percent for r in answer.rows], SHARE
    )
    if not memory and not cores:
        return answer
    changes: dict[str, Any] = {}
    if memory:
        refused.append(f"{path}.memory_bytes")
        changes["memory_reason"] = Reason.INVALID_DATA
    if cores:
        refused.append(f"{path}.cores_percent")
        changes["cores_reason"] = Reason.INVALID_DATA
    return replace(answer, **changes)


def plausible_reading(
    reading: VendorReading, table: FigureTable = FIGURES
) -> tuple[VendorReading, tuple[str, ...]]:
    """The reading with every figure outside its physical range refused, and the paths
    refused (`cards[2].` and the figure's name, its row's in the figure table). The common case
    returns the reading itself."""
    refused: list[str] = []
    cards = tuple(_card(c, f"cards[{i}]", refused, table) for i, c in enumerate(reading.cards))
    partitions = tuple(
        _partition(p, f"partitions[{i}]", refused) for i, p in enumerate(reading.partitions)
    )
    processes = tuple(
        _device(d, f"processes[{i}]", refused) for i, d in enumerate(reading.processes)
    )
    if not refused:
        return reading, ()
    return replace(reading, cards=cards, partitions=partitions, processes=processes), tuple(refused)
