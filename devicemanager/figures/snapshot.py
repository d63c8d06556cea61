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
from typing import Any, cast

from devicemanager.figures import slices as slice_section
from devicemanager.figures.actions import action_for
from devicemanager.model import (
    FIGURES,
    LINK_KINDS,
    BackendState,
    BackendStatus,
    Card,
    CardHealth,
    CardLink,
    CardTaint,
    FigureSpec,
    FigureTable,
    Group,
    HealthFigure,
    HealthValue,
    Reason,
    Shape,
    SliceSection,
    Snapshot,
    VendorReading,
    as_int,
    as_number,
)

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
    slices: SliceSection | None = None,
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


# How the health object is written, row by row: (figure, shape, the keys above its own, its
# key, written only where read). Made once for the shipped table; a snapshot has a health
# object per card, every round.
_JsonPlan = tuple[tuple[HealthFigure, Shape, tuple[str, ...], str, bool], ...]


def _json_plan(table: FigureTable) -> _JsonPlan:
    return tuple(
        (cast(HealthFigure, s.name), s.shape, s.json[:-1], s.json[-1], s.json_only_when_read)
        for s in table.health
    )


_PLAN = _json_plan(FIGURES)


def health_json(health: CardHealth, table: FigureTable = FIGURES) -> dict[str, Any]:
    """A card's error counters, energy, clocks and PCIe replays (issue 29): every figure is
    there, null when absent, where its row of the figure table says (a figure read only by some
    backends only where it was read), and `absentReasons` says why for those the library
    explained."""
    doc: dict[str, Any] = {}
    held: dict[HealthFigure, Any] = health.held()
    for figure, shape, parents, key, only_when_read in (
        _PLAN if table is FIGURES else _json_plan(table)
    ):
        value = held.get(figure)
        if value is None:
            if only_when_read:
                continue
        elif shape is Shape.FLAGS or shape is Shape.COUNTS:
            value = dict(value)
        elif shape is Shape.CODES:
            value = list(value)
        place = doc
        for parent in parents:
            place = place.setdefault(parent, {})
        place[key] = value
    doc["absentReasons"] = {name: reason.value for name, reason in health.reasons}
    return doc


def _read_back(spec: FigureSpec, doc: Any) -> HealthValue | None:
    """One health figure back from its JSON; None where it is not of its row's shape."""
    if spec.shape is Shape.NUMBER:
        return as_int(doc) if spec.integer else as_number(doc)
    if spec.shape is Shape.CODES:
        return tuple(c for c in doc if isinstance(c, str)) if isinstance(doc, list) else None
    if not isinstance(doc, dict):
        return None
    if spec.shape is Shape.FLAGS:  # the row's reasons, in its order
        return tuple((r, doc[r]) for r in spec.labels if isinstance(doc.get(r), bool))
    # Counts: `{code: count}` back, in the order written.
    counts = [(code, as_int(count)) for code, count in doc.items()]
    return tuple((c, n) for c, n in counts if isinstance(c, str) and n is not None)


def health_from_json(doc: Any, table: FigureTable = FIGURES) -> CardHealth | None:
    """The health object back; anything unreadable in it is absent."""
    if not isinstance(doc, dict):
        return None
    values: dict[HealthFigure, HealthValue | None] = {}
    for spec in table.health:
        place: Any = doc
        for key in spec.json:
            place = place.get(key) if isinstance(place, dict) else None
        values[cast(HealthFigure, spec.name)] = _read_back(spec, place)
    absent = doc.get("absentReasons")
    known = set(Reason)
    reasons = []
    for name, value in absent.items() if isinstance(absent, dict) else ():
        row = table.health_spec(name)
        if row is not None and value in known:
            reasons.append((cast(HealthFigure, row.name), Reason(value)))
    return CardHealth.of(values, reasons, table)


def card_json(card: Card, manufacturer: str = "") -> dict[str, Any]:
    # Field names follow the reference implementation's AcceleratorMetrics, so its worker reads
    # ours unchanged; units: MiB, percent, °C, W. Identity beyond the id is added only where a
    # card has it (omitempty, as the reference marshals optional fields).
    extra: dict[str, Any] = {}
    if card.aliases:
        extra["aliases"] = list(card.aliases)
    if card.address:
        extra["address"] = dict(card.address)
    if card.parent_id is not None:
        extra["parentID"] = card.parent_id
    if card.health is not None:
        # Only where the backend reads them: a consumer of the schema before issue 29 meets the
        # same objects as before on every other card.
        extra["health"] = health_json(card.health)
    if card.invalid:
        # Only where a figure was refused (issue 30): its key is null above, and this says why.
        extra["absentReasons"] = {
            _CARD_KEYS[name]: Reason.INVALID_DATA.value for name in card.invalid
        }
    if card.links is not None:
        # Links and placement (R-X3), likewise only where the backend reads them.
        extra["links"] = [
            {"peerID": link.peer_id, "link": link.link, "count": link.count} for link in card.links
        ]
    if card.numa_node is not None:
        extra["numaNode"] = card.numa_node
    if card.unhealthy:
        # What the manufacturer says to do about it (R-X11, figures/actions.py).
        extra["unhealthyAction"] = action_for(manufacturer, card.unhealthy_reason).value
    if card.device_taints:
        # What Kubernetes says of the card (issue 42), likewise only where it says anything.
        extra["deviceTaints"] = [
            {"key": t.key, "value": t.value, "effect": t.effect} for t in card.device_taints
        ]
    if card.kubelet_health is not None:
        extra["kubeletHealth"] = card.kubelet_health
    return {
        "id": card.id,
        "index": card.index,
        "name": card.name,
        **{key: getattr(card, name) for key, name in _CARD_JSON},
        "unhealthy": card.unhealthy,
        "unhealthyReason": card.unhealthy_reason,
        **extra,
    }


def backend_json(status: BackendStatus) -> dict[str, Any]:
    doc = {
        "manufacturer": status.manufacturer,
        "state": status.state.value,
        "durationSeconds": status.duration_seconds,
        "error": status.error,
        "lastSuccess": rfc3339(status.last_success),
    }
    if status.via is not None:
        doc["via"] = status.via  # which of the backend's library paths answered
    return doc


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
                "accelerators": [card_json(c, g.manufacturer) for c in g.cards],
            }
            for g in snapshot.groups
        ],
        "backends": [backend_json(s) for s in snapshot.backends],
    }
    if snapshot.slices is not None:
        doc["slices"] = slice_section.to_json(snapshot.slices)
    return doc


def encode(snapshot: Snapshot) -> bytes:
    return json.dumps(to_json(snapshot), separators=(",", ":"), allow_nan=False).encode()


# -- reading a served snapshot back (the worker's side) ------------------------------------------


def parse_time(value: Any) -> float:
    """RFC 3339 to unix time; Go's zero time and anything unreadable are 0 (no round yet)."""
    if not isinstance(value, str) or value.startswith("0001-"):
        return 0.0
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


# A card's own figures (the figure table's card rows): (JSON key, field) in the order shown,
# and by field as the snapshot names them.
_CARD_JSON = tuple((spec.json[0], spec.name.value) for spec in FIGURES.card)
_CARD_KEYS = {spec.name.value: spec.json[0] for spec in FIGURES.card if not spec.derived}
_CARD_FIELDS = {key: name for name, key in _CARD_KEYS.items()}


def _card_figures(doc: dict[str, Any]) -> dict[str, Any]:
    """A card's own figures back, by field: a count as an integer, a measure as a number."""
    return {
        spec.name.value: (as_int if spec.integer else as_number)(doc.get(spec.json[0]))
        for spec in FIGURES.card
        if not spec.derived
    }


def card_from_json(doc: dict[str, Any]) -> Card | None:
    if not isinstance(doc.get("id"), str) or as_int(doc.get("index")) is None:
        return None
    name = doc.get("name")
    reason = doc.get("unhealthyReason")
    aliases = doc.get("aliases")
    address = doc.get("address")
    parent = doc.get("parentID")
    absent = doc.get("absentReasons")
    return Card(
        id=doc["id"],
        index=doc["index"],
        name=name if isinstance(name, str) else None,
        **_card_figures(doc),
        unhealthy=doc.get("unhealthy") is True,
        unhealthy_reason=reason if isinstance(reason, str) else None,
        aliases=tuple(a for a in aliases if isinstance(a, str))
        if isinstance(aliases, list)
        else (),
        address=tuple(
            (k, v)
            for k, v in (address.items() if isinstance(address, dict) else ())
            if isinstance(v, int | str) and not isinstance(v, bool)
        ),
        parent_id=parent if isinstance(parent, str) else None,
        health=health_from_json(doc.get("health")),
        invalid=tuple(
            _CARD_FIELDS[key]
            for key, why in (absent.items() if isinstance(absent, dict) else ())
            if key in _CARD_FIELDS and why == Reason.INVALID_DATA.value
        ),
        links=links_from_json(doc.get("links")),
        numa_node=as_int(doc.get("numaNode")),
        device_taints=taints_from_json(doc.get("deviceTaints")),
        kubelet_health=kubelet if isinstance(kubelet := doc.get("kubeletHealth"), str) else None,
    )


def taints_from_json(doc: Any) -> tuple[CardTaint, ...]:
    """A card's DRA device taints back; an entry without its three strings is left out."""
    if not isinstance(doc, list):
        return ()
    return tuple(
        CardTaint(item["key"], item["value"], item["effect"])
        for item in doc
        if isinstance(item, dict)
        and all(isinstance(item.get(k), str) for k in ("key", "value", "effect"))
    )


def links_from_json(doc: Any) -> tuple[CardLink, ...] | None:
    """A card's links back; an entry without its peer or a known kind is left out."""
    if not isinstance(doc, list):
        return None
    return tuple(
        CardLink(item["peerID"], item["link"], as_int(item.get("count")))
        for item in doc
        if isinstance(item, dict)
        and isinstance(item.get("peerID"), str)
        and item.get("link") in LINK_KINDS
    )


def from_json(doc: Any) -> Snapshot:
    """A snapshot document as an agent served it; what cannot be read is left out."""
    if not isinstance(doc, dict):
        raise ValueError("a snapshot is a JSON object")
    groups = []
    for g in doc.get("groups") or ():
        if not isinstance(g, dict) or not isinstance(g.get("manufacturer"), str):
            continue
        cards = tuple(
            c
            for c in (card_from_json(a) for a in g.get("accelerators") or () if isinstance(a, dict))
            if c is not None
        )
        driver = g.get("driverVersion")
        groups.append(
            Group(
                g["manufacturer"],
                parse_time(g.get("timestamp")),
                cards,
                driver if isinstance(driver, str) else None,
            )
        )
    backends = []
    for b in doc.get("backends") or ():
        if isinstance(b, dict) and isinstance(b.get("manufacturer"), str):
            try:
                state = BackendState(str(b.get("state")))
            except ValueError:
                continue
            error = b.get("error")
            via = b.get("via")
            last = parse_time(b.get("lastSuccess"))
            backends.append(
                BackendStatus(
                    b["manufacturer"],
                    state,
                    as_number(b.get("durationSeconds")),
                    error if isinstance(error, str) else None,
                    last or None,
                    via if isinstance(via, str) else None,
                )
            )
    node = doc.get("node")
    return Snapshot(
        timestamp=parse_time(doc.get("timestamp")),
        period_seconds=as_int(doc.get("periodSeconds")) or 0,
        node=node if isinstance(node, str) else None,
        groups=tuple(groups),
        backends=tuple(backends),
        slices=slice_section.from_json(doc.get("slices")),
    )


def fresh(snap: Snapshot, now: float, default_period: int = 15) -> bool:
    """The consumer's rule: older than three periods is a failing monitor (R-S3). A producer
    that did not say its period is held to three times the 15 s default."""
    if snap.timestamp <= 0:
        return False
    period = snap.period_seconds or default_period
    return now - snap.timestamp <= 3 * period
