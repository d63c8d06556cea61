"""The figures users read: one entry per grant, the Instance's own, whatever the allocation did
to the card (R-F1..R-F4, R-F7). One calculation for both surfaces: the exporter's series and the
per-Instance sample (`InstanceMetrics`) are made by the functions here from the same inputs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from devicemanager.figures.slices import Lookup, activity_json, figures
from devicemanager.grants.allocations import Mode
from devicemanager.grants.grants import (
    Grant,
    InstanceRef,
    NodeGrants,
    ceil_restated,
    instance_of,
    live,
    owned_by_instance,
    resolved,
)
from devicemanager.grants.quantity import parse_quantity
from devicemanager.model import FIGURES as TABLE
from devicemanager.model import (
    MIB,
    Activity,
    Card,
    HealthFigure,
    Identities,
    PodFault,
    Snapshot,
    utilization_percent,
)
from devicemanager.node.isolation import FIGURES, POD_LEVEL, encodable, per_pod
from devicemanager.node.pods import PodIndex, PodInfo


@dataclass(frozen=True, slots=True)
class AcceleratorEntry:
    """One grant's figures, as `accelerators[]` of the sample and the accelerator families."""

    manufacturer: str
    id: str  # the card's UUID, or the partition's own id
    index: int | None  # the ordinal the vendor's tool shows (the parent's, for a partition)
    mode: Mode
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    cores_utilization_percent: float | None = None
    temperature_celsius: float | None = None
    power_usage_watts: float | None = None
    unhealthy: bool | None = None
    # Why the card the grant is on is unhealthy (its own reason, else its board's); None when
    # it is healthy or not read. Shown in /metrics beside `unhealthy` (issue 29).
    unhealthy_reason: str | None = None
    # The one container of the pod that holds the grant; None when two or more do (R-G3).
    holder: str | None = None
    # The grant's own activity (issue 41), only where the hardware measures its holder alone:
    # a partition's, or a whole card's that one Instance holds. () on a slice or a shared card,
    # whose tenants' activities cannot be told apart (time-sliced), and where none was measured.
    activity: Activity = ()

    @property
    def memory_utilization_percent(self) -> float | None:
        return utilization_percent(self.memory_used_mib, self.memory_total_mib)


@dataclass(frozen=True, slots=True)
class View:
    """What one snapshot says, indexed for lookups. A stale snapshot says nothing (R-S3)."""

    cards: Mapping[tuple[str, str], Card] = field(default_factory=dict)
    lookup: Lookup | None = None
    manufacturers: frozenset[str] = frozenset()  # whose cards this snapshot holds
    identities: Identities = field(default_factory=Identities)  # aliases of those cards

    @classmethod
    def of(cls, snapshot: Snapshot | None, fresh: bool = True) -> View:
        if snapshot is None or not fresh or snapshot.timestamp <= 0:
            return cls()
        cards = {(g.manufacturer, c.id): c for g in snapshot.groups for c in g.cards}
        lookup = Lookup.of(snapshot.slices) if snapshot.slices is not None else None
        identities = Identities()
        for g in snapshot.groups:
            identities = identities.updated(g.manufacturer, g.cards)
        return cls(cards, lookup, frozenset(g.manufacturer for g in snapshot.groups), identities)


def view_of_document(doc: Any, now: float) -> View | None:
    """The view a consumer gets from a fetched /monitor/snapshot document: None when it cannot
    be read or is older than three periods (a failing monitor: no accelerator figures)."""
    from devicemanager.figures.snapshot import fresh, from_json

    try:
        snap = from_json(doc)
    except ValueError:
        return None
    return View.of(snap) if fresh(snap, now) else None


def _unhealthy_reason(card: Card | None, board: Card | None) -> str | None:
    """Why the grant's card is unhealthy: the card's own reason first, else its board's."""
    for source in (card, board):
        if source is not None and source.unhealthy:
            return source.unhealthy_reason or ""
    return None


_ACTIVITY_ROWS = tuple(HealthFigure(spec.name) for spec in TABLE.activity_rows())


def card_activity(card: Card | None) -> Activity:
    """A whole card's activity figures, as its library measured them this round."""
    if card is None or card.health is None:
        return ()
    held = dict(card.health.numbers)
    return tuple((figure, held[figure]) for figure in _ACTIVITY_ROWS if figure in held)


def entry(grant: Grant, view: View, alone: bool = True) -> AcceleratorEntry:
    """One grant's figures. `alone`: no other pod holds any part of the grant's card, so a
    whole card's activity is its holder's own (the exporter knows every pod's grants; the
    per-Instance sample knows its own, and an Exclusive grant is its pod's alone)."""
    (grant,) = resolved((grant,), view.identities)  # the card as its library names it
    card = view.cards.get((grant.manufacturer, grant.device_id))
    total_card = card.memory_total_mib if card is not None else None
    # Temperature, power and health are the physical card's, in every mode: a partition the
    # library enumerates as a device of its own reads its board's (R-V2).
    # A partition its library also enumerates as a device (an AMD XCP) is shown at its own
    # index; any other is shown at its card's.
    shown = card
    if grant.partition_id is not None:
        shown = view.cards.get((grant.manufacturer, grant.partition_id), card)
    board = card
    if card is not None and card.parent_id is not None:
        board = view.cards.get((grant.manufacturer, card.parent_id))
    common: dict[str, Any] = {
        "manufacturer": grant.manufacturer,
        "id": grant.entry_id,
        # The ordinal the vendor's tool shows for the card today; the allocator's record only
        # where the card is not read (its index may be stale, or counted another way).
        "index": shown.index if shown is not None else grant.index,
        "mode": grant.mode,
        "temperature_celsius": board.temperature_celsius if board else None,
        "power_usage_watts": board.power_usage_watts if board else None,
        "unhealthy": (card.unhealthy or bool(board and board.unhealthy)) if card else None,
        "unhealthy_reason": _unhealthy_reason(card, board),
        "holder": None if grant.ambiguous else grant.container,
    }
    if grant.mode in (Mode.EXCLUSIVE, Mode.SHARED):
        if grant.ambiguous:  # two containers of one pod, one card: no figures of its own
            return AcceleratorEntry(**common, memory_total_mib=total_card)
        # Activity only where the card is this one holder's: time-sliced tenants' (Shared)
        # cannot be told apart.
        whole = grant.mode is Mode.EXCLUSIVE and alone
        return AcceleratorEntry(
            **common,
            memory_total_mib=total_card,
            memory_used_mib=card.memory_used_mib if card else None,
            cores_utilization_percent=card.cores_utilization_percent if card else None,
            activity=card_activity(card) if whole else (),
        )
    if grant.mode is Mode.SLICED:
        quota = grant.memory_quota_mib(total_card)
        if grant.ambiguous:
            return AcceleratorEntry(**common, memory_total_mib=quota)
        f = figures(
            view.lookup, grant.manufacturer, grant.pod_uid, grant.container, grant.device_id
        )
        used = f.memory_used_mib if f is not None else None
        measured = f.cores_percent if f is not None else None
        cores = None if measured is None else ceil_restated(measured, grant.cores_cap)
        return AcceleratorEntry(
            **common, memory_total_mib=quota, memory_used_mib=used, cores_utilization_percent=cores
        )
    # Partitioned: the partition's own record, never restated against any cap.
    if grant.ambiguous:
        return AcceleratorEntry(**common)
    f = figures(
        view.lookup,
        grant.manufacturer,
        grant.pod_uid,
        grant.container,
        grant.device_id,
        partition_id=grant.partition_id or "",
    )
    if f is None:
        return AcceleratorEntry(**common)
    return AcceleratorEntry(
        **common,
        memory_total_mib=f.memory_total_mib,
        memory_used_mib=f.memory_used_mib,
        cores_utilization_percent=f.cores_percent,
        activity=f.activity,  # the partition's own, measured on its handle
    )


@dataclass(frozen=True, slots=True)
class InstanceEntries:
    instance: InstanceRef
    pod: PodInfo
    entries: tuple[AcceleratorEntry, ...]


def newest_pods(index: PodIndex, grants: NodeGrants) -> dict[str, tuple[InstanceRef, PodInfo]]:
    """Per Instance UID, its newest live pod (ties: by name). An Instance is a pod a GPUStack
    Instance owns, or any pod holding a grant."""
    chosen: dict[str, tuple[InstanceRef, PodInfo]] = {}
    for pod in index.pods.values():
        if not live(pod) or not (pod.uid in grants.by_pod or owned_by_instance(pod)):
            continue
        ref = instance_of(pod)
        current = chosen.get(ref.uid)
        if current is None or (pod.created or "", pod.name) > (
            current[1].created or "",
            current[1].name,
        ):
            chosen[ref.uid] = (ref, pod)
    return chosen


def exported(
    index: PodIndex | None,
    grants: NodeGrants | None,
    view: View,
    manufacturers: Iterable[str],
    faults: MutableMapping[str, PodFault] | None = None,
) -> tuple[InstanceEntries, ...]:
    """Every Instance of the node with an accelerator of ours, for the exporter (R-E2, R-E3).

    A never-started, stopped or terminating pod publishes nothing; the predecessor of a
    recreated Instance is a different pod and a different Instance UID, so it never lends its
    figures to the new one. Each Instance is computed behind its own boundary: one whose
    figures raise is left out and recorded in `faults`; the others are unaffected. So is one
    whose part of the per-grant section raised while it was built (the section's `faults`).
    """
    if index is None or grants is None:
        return ()
    faults = {} if faults is None else faults
    broken = dict(view.lookup.section.faults) if view.lookup is not None else {}
    for uid, fault in broken.items():
        faults.setdefault(uid, fault)
    ours = set(manufacturers)
    ordered = sorted(
        (rp for rp in newest_pods(index, grants).values() if rp[1].uid not in broken),
        key=lambda rp: (rp[0].namespace, rp[0].name, rp[0].uid),
    )

    # Which pods hold any part of each card (by the id its library gives it): a whole card's
    # activity is its holder's only where no other pod holds any of it.
    def card_of(g: Grant) -> tuple[str, str]:
        return g.manufacturer, view.identities.canonical(g.manufacturer, g.device_id)

    holders: dict[tuple[str, str], set[str]] = {}
    for g in grants.all():
        holders.setdefault(card_of(g), set()).add(g.pod_uid)

    def alone(g: Grant) -> bool:
        return holders.get(card_of(g), set()) <= {g.pod_uid}

    def entries(ref_pod: tuple[InstanceRef, PodInfo]) -> tuple[AcceleratorEntry, ...]:
        ref, pod = ref_pod
        mine = [g for g in grants.by_pod.get(pod.uid, ()) if g.manufacturer in ours]
        # The texts its series carry as labels: one that cannot be encoded is this pod's fault.
        encodable(
            ref.namespace,
            ref.name,
            ref.uid,
            pod.name,
            *(text for g in mine for text in (*g.containers, g.entry_id, g.manufacturer)),
        )
        return tuple(entry(g, view, alone(g)) for g in mine)

    done = per_pod(ordered, lambda rp: rp[1].uid, entries, FIGURES, faults)
    return tuple(InstanceEntries(ref, pod, found) for (ref, pod), found in done if found)


# -- the per-Instance sample ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Pair:
    total: int
    used: int | None  # None: no source measured it


@dataclass(frozen=True, slots=True)
class PodUsage:
    """A pod's measured CPU, memory and storage, from the kubelet or metrics.k8s.io."""

    cpu_millicores: int | None
    memory_mib: int | None
    storage_mib: int | None  # metrics.k8s.io has none
    timestamp: str | None = None
    source: str = "kubelet"


class InstanceMetricsUnavailable(Exception):
    """Something did start and no source could measure it; the message names each failure."""


@dataclass(frozen=True, slots=True)
class InstanceMetrics:
    instance: InstanceRef
    timestamp: str | None
    cpu_millicores: Pair
    memory_mib: Pair
    storage_mib: Pair
    accelerators: tuple[AcceleratorEntry, ...] | None  # None: the agent could not be read


def _limit_sum(pod: PodInfo | None, resource: str, scale: Decimal) -> int:
    """The sum of regular containers' limits for a resource; undeclared contributes nothing."""
    if pod is None:
        return 0
    total = Decimal(0)
    for limits in pod.limits.values():
        raw = limits.get(resource)
        if raw is None:
            continue
        try:
            total += parse_quantity(raw)
        except ValueError:
            continue  # the API server validates quantities; a bad one is not ours to guess
    return math.ceil(total * scale)


def totals(pod: PodInfo | None) -> tuple[int, int, int]:
    """(CPU millicores, memory MiB, storage MiB) the pod declared (init containers excluded)."""
    return (
        _limit_sum(pod, "cpu", Decimal(1000)),
        _limit_sum(pod, "memory", Decimal(1) / MIB),
        _limit_sum(pod, "ephemeral-storage", Decimal(1) / MIB),
    )


def _never_started(entry: AcceleratorEntry) -> AcceleratorEntry:
    # Nothing has run, so nothing was used: totals and zeros; the card's own readings are not
    # this Instance's measurements.
    return AcceleratorEntry(
        entry.manufacturer,
        entry.id,
        entry.index,
        entry.mode,
        entry.memory_total_mib,
        0,
        0.0,
        holder=entry.holder,
    )


def instance_metrics(
    instance: InstanceRef,
    pod: PodInfo | None,
    grants: Sequence[Grant],
    usage: PodUsage | Sequence[str] | None,
    view: View | None,
    timestamp: str | None = None,
) -> InstanceMetrics:
    """One Instance's sample (R-F7). `usage` is what the kubelet (or metrics.k8s.io) measured,
    or the failures of every source tried; `view` is None when no agent snapshot could be
    read or it was stale."""
    cpu, memory, storage = totals(pod)
    if pod is None or not pod.started:
        # Unscheduled, pulling, stopped: an answer, not a failure (R-F6).
        base = View() if view is None else view
        zeros = tuple(_never_started(entry(g, base)) for g in grants)
        return InstanceMetrics(
            instance, timestamp, Pair(cpu, 0), Pair(memory, 0), Pair(storage, 0), zeros
        )
    if usage is None or not isinstance(usage, PodUsage):
        failures = "; ".join(usage or ["no source was configured"])
        raise InstanceMetricsUnavailable(
            f"no source could measure {instance.namespace}/{instance.name}: {failures}"
        )
    accelerators = None if view is None else tuple(entry(g, view) for g in grants)
    return InstanceMetrics(
        instance,
        usage.timestamp or timestamp,
        Pair(cpu, usage.cpu_millicores),
        Pair(memory, usage.memory_mib),
        Pair(storage, usage.storage_mib),
        accelerators,
    )


def entry_json(e: AcceleratorEntry) -> dict[str, Any]:
    return {
        "id": e.id,
        "mode": e.mode.value,
        "memoryTotalMiB": e.memory_total_mib,
        "memoryUsedMiB": e.memory_used_mib,
        "memoryUtilizationPercent": e.memory_utilization_percent,
        "coresUtilizationPercent": e.cores_utilization_percent,
        "temperatureCelsius": e.temperature_celsius,
        "powerUsageWatts": e.power_usage_watts,
        "unhealthy": e.unhealthy,
        # The grant's own activity (issue 41), as the snapshot holds a card's; absent: left out.
        "activity": activity_json(e.activity) if e.activity else None,
    }


def metrics_json(m: InstanceMetrics) -> dict[str, Any]:
    """The sample as the worker's API serves it; an absent figure is left out (omitempty)."""
    sample: dict[str, Any] = {"timestamp": m.timestamp}
    for name, pair in (
        ("cpu", m.cpu_millicores),
        ("memory", m.memory_mib),
        ("storage", m.storage_mib),
    ):
        unit = "Millicores" if name == "cpu" else "MiB"
        sample[f"{name}Total{unit}"] = pair.total
        if pair.used is not None:
            sample[f"{name}Used{unit}"] = pair.used
    if m.accelerators is not None:
        sample["accelerators"] = [
            {k: v for k, v in entry_json(e).items() if v is not None} for e in m.accelerators
        ]
    return {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "InstanceMetrics",
        "metadata": {
            "namespace": m.instance.namespace,
            "name": m.instance.name,
            "uid": m.instance.uid,
        },
        "sample": sample,
    }


@dataclass(frozen=True, slots=True)
class PodLevel:
    """An Instance's CPU, memory and storage for the exporter (R-F5), and the one pod they are
    the figures of (the Instance's newest live pod on the node)."""

    instance: InstanceRef
    cpu_millicores: Pair
    memory_mib: Pair
    storage_mib: Pair
    pod: str = ""


def pod_level(
    index: PodIndex | None,
    grants: NodeGrants | None,
    usage: Mapping[tuple[str, str, str], PodUsage] | None,
    faults: MutableMapping[str, PodFault] | None = None,
) -> tuple[PodLevel, ...]:
    """Every live, started Instance of the node. `usage` is None when the kubelet could not be
    read: the declared totals still publish, the measured figures do not (R-E4). A pod the
    kubelet did not report is left out rather than shown as idle. One pod whose figures raise
    is left out and recorded in `faults`."""
    if index is None or grants is None:
        return ()
    ordered = sorted(
        newest_pods(index, grants).values(), key=lambda rp: (rp[0].namespace, rp[0].name)
    )

    def level(ref_pod: tuple[InstanceRef, PodInfo]) -> PodLevel | None:
        ref, pod = ref_pod
        encodable(ref.namespace, ref.name, ref.uid, pod.name)
        cpu, memory, storage = totals(pod)
        measured = None
        if usage is not None:
            measured = usage.get((pod.namespace, pod.name, pod.uid))
            if measured is None:
                return None
        return PodLevel(
            ref,
            Pair(cpu, measured.cpu_millicores if measured else None),
            Pair(memory, measured.memory_mib if measured else None),
            Pair(storage, measured.storage_mib if measured else None),
            pod=pod.name,
        )

    done = per_pod(
        ordered, lambda rp: rp[1].uid, level, POD_LEVEL, {} if faults is None else faults
    )
    return tuple(found for _, found in done if found is not None)
