"""Pure assembly of one round's results into a Snapshot, and its JSON form (R-S1..R-S3).

Nothing here reads a clock, a file or a vendor library: times and readings come in as
arguments, so the same inputs always give the same bytes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from devicemanager.model import BackendStatus, Card, Group, Snapshot, VendorReading

# What Go's zero time.Time marshals to: the worker tells "no round yet" by it.
ZERO_TIME = "0001-01-01T00:00:00Z"


@dataclass(frozen=True, slots=True)
class BackendResult:
    """One backend's part of a round: its verdict and, when it answered, its reading."""

    status: BackendStatus
    reading: VendorReading | None = None
    read_at: float | None = None  # unix time read() returned


def period_seconds(period: float) -> int:
    """The period rounded up to whole seconds, so a consumer never under-estimates it."""
    return max(1, math.ceil(period))


def empty(period: float, node: str | None) -> Snapshot:
    """What is served before the first round: no groups and a zero timestamp."""
    return Snapshot(timestamp=0.0, period_seconds=period_seconds(period), node=node)


def assemble(
    now: float,
    period: float,
    node: str | None,
    results: Sequence[BackendResult],
    round_duration: float | None = None,
    slices: Any = None,
) -> Snapshot:
    """Only what was read in this round becomes a group: a backend that failed or hung has no
    group (its status says why), so a figure is never carried forward from an earlier round."""
    groups = tuple(
        Group(
            manufacturer=r.reading.manufacturer,
            timestamp=r.read_at if r.read_at is not None else now,
            cards=tuple(sorted(r.reading.cards, key=lambda c: (c.index, c.id))),
            driver_version=r.reading.driver_version,
        )
        for r in sorted(results, key=lambda r: r.status.manufacturer)
        if r.reading is not None
    )
    return Snapshot(
        timestamp=now,
        period_seconds=period_seconds(period),
        node=node,
        groups=groups,
        backends=tuple(sorted((r.status for r in results), key=lambda s: s.manufacturer)),
        round_duration_seconds=round_duration,
        slices=slices,
    )


def rfc3339(timestamp: float | None) -> str | None:
    if timestamp is None:
        return None
    if timestamp <= 0:
        return ZERO_TIME
    moment = datetime.fromtimestamp(timestamp, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def card_json(card: Card) -> dict[str, Any]:
    # Field names follow the reference implementation's AcceleratorMetrics, so its worker reads
    # ours unchanged; units: MiB, percent, °C, W.
    return {
        "id": card.id,
        "index": card.index,
        "name": card.name,
        "memory": card.memory_total_mib,
        "memoryUsage": card.memory_used_mib,
        "memoryUtilization": card.memory_utilization_percent,
        "coresUtilization": card.cores_utilization_percent,
        "temperature": card.temperature_celsius,
        "powerUsage": card.power_usage_watts,
        "unhealthy": card.unhealthy,
        "unhealthyReason": card.unhealthy_reason,
    }


def backend_json(status: BackendStatus) -> dict[str, Any]:
    return {
        "manufacturer": status.manufacturer,
        "state": status.state.value,
        "durationSeconds": status.duration_seconds,
        "error": status.error,
        "lastSuccess": rfc3339(status.last_success),
    }


def to_json(snapshot: Snapshot) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "timestamp": rfc3339(snapshot.timestamp),
        "periodSeconds": snapshot.period_seconds,
        "node": snapshot.node,
        "groups": [
            {
                "manufacturer": g.manufacturer,
                "timestamp": rfc3339(g.timestamp),
                "driverVersion": g.driver_version,
                "accelerators": [card_json(c) for c in g.cards],
            }
            for g in snapshot.groups
        ],
        "backends": [backend_json(s) for s in snapshot.backends],
    }
    if snapshot.slices is not None:
        doc["slices"] = snapshot.slices
    return doc


def encode(snapshot: Snapshot) -> bytes:
    return json.dumps(to_json(snapshot), separators=(",", ":"), allow_nan=False).encode()
