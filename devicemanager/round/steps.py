"""One round as pure steps around the shell's I/O (agent/monitor.py does the I/O):

    memory ──plan──> Plan: the grants, and what to ask each library
           (shell: the vendor reads, each on its thread, with the deadline)
           ──learn──> Learned: the alias map with this round's readings, the grants named
                      with it, the readings with lost cards, what /proc must place
           (shell: /proc attribution, the cluster's part)
           ──settle──> (memory', Round): the snapshot, /metrics' extras, the log events

Attribution stays in the shell because it reads /proc, and its PID cache and pidfds are
state of the host, not of the round; it needs the grants named with this round's aliases (a
partition's card learned this round is carved this round), so it runs between `learn` and
`settle`, which take its verdicts as an input. No step reads a clock, does I/O or logs: times
and everything the world answered come in as values, and the lines to log go out as values.

Which generation of the alias map each step sees is in the signatures: `plan` names the grants
with `memory.ids` (last round's), `learn` with this round's (`Learned.ids`), and only when the
readings changed it are the grants gathered and named again: once per round in steady state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from devicemanager.figures import slices, snapshot
from devicemanager.figures.actions import Action, action_for
from devicemanager.figures.exposition import Extras, GaugeFamily
from devicemanager.figures.figures import View, exported
from devicemanager.figures.snapshot import BackendResult
from devicemanager.grants import deviceplugins, dra
from devicemanager.grants.deviceplugins import KubeletAnswer
from devicemanager.grants.dra import DraInventory, KubeletSays
from devicemanager.grants.grants import NodeGrants
from devicemanager.grants.ids import Ids
from devicemanager.grants.node import SOURCES, gather
from devicemanager.grants.sources import GrantSource, NodeInput
from devicemanager.model import Card, DeviceProcesses, PodFault, ReadRequest, SliceSection, Snapshot
from devicemanager.node import isolation, pcibus
from devicemanager.node.attribution import DeviceAttribution
from devicemanager.node.pcibus import BusScan
from devicemanager.node.pods import PodIndex
from devicemanager.round import said as says
from devicemanager.round.said import LogEvent, Said

# The cards each manufacturer's library listed in this run, remembered so that one it stops
# listing is reported `not_enumerated` whatever the kubelet says; far above any node's count.
MAX_CARDS_SEEN = 1024


def _empty_cards() -> Mapping[str, Mapping[str, Card]]:
    return MappingProxyType({})


def _empty_bus() -> Mapping[str, Mapping[str, str]]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Memory:
    """All one round hands to the next."""

    ids: Ids = field(default_factory=Ids)  # the one alias map
    cards_seen: Mapping[str, Mapping[str, Card]] = field(default_factory=_empty_cards)
    said: Said = field(default_factory=Said)  # what the log last said of each condition
    rounds: int = 0  # completed
    rounds_failed: int = 0
    # Per manufacturer, bus id -> the card the library named there in this run: a card gone
    # from the bus and the library is lost by its bus id (node/pcibus.py).
    bus_seen: Mapping[str, Mapping[str, str]] = field(default_factory=_empty_bus)


@dataclass(frozen=True, slots=True)
class Plan:
    """What the cluster answered, the grants it gives, and what to ask each library."""

    index: PodIndex | None
    kubelet: KubeletAnswer | None
    dra: DraInventory | None
    # The kubelet's word on devices its pods hold that are not healthy (KEP-4680), by card.
    kubelet_health: Mapping[tuple[str, str], KubeletSays]
    recorded: NodeGrants | None  # as the sources named them
    grants: NodeGrants | None  # named by canonical ids (memory.ids)
    requests: Mapping[str, ReadRequest]  # by manufacturer; absent: nothing beyond the cards
    sources: tuple[GrantSource, ...] = SOURCES


def plan(
    memory: Memory,
    index: PodIndex | None,
    kubelet: KubeletAnswer | None,
    inventory: DraInventory | None,
    sources: Sequence[GrantSource] = SOURCES,
) -> Plan:
    aliases = memory.ids.cards
    # The kubelet names a DRA device's health by its first CDI device name where the driver
    # gave any: pod-resources says which device each name is.
    cdi = dra.cdi_index(
        c for pod in (kubelet.pods or () if kubelet is not None else ()) for c in pod.claims
    )
    health = (
        dra.kubelet_health(
            (r for pod in index.pods.values() for r in pod.device_health), inventory, aliases, cdi
        )
        if index is not None
        else {}
    )
    recorded = (
        gather(NodeInput(index, kubelet, inventory, aliases), sources)
        if index is not None
        else None
    )
    grants = recorded.resolve(memory.ids.identities) if recorded is not None else None
    requests = (
        {m: grants.request(m) for m in sorted({g.manufacturer for g in grants.all()})}
        if grants is not None
        else {}
    )
    return Plan(index, kubelet, inventory, health, recorded, grants, requests, tuple(sources))


@dataclass(frozen=True, slots=True)
class Ask:
    """What /proc must place for one manufacturer: its carved devices' process rows and who
    holds a grant on each device."""

    manufacturer: str
    devices: tuple[DeviceProcesses, ...]
    holders: Mapping[str, frozenset[str]]


@dataclass(frozen=True, slots=True)
class Learned:
    plan: Plan
    ids: Ids  # this round's alias map
    cards_seen: Mapping[str, Mapping[str, Card]]
    grants: NodeGrants | None  # named with `ids`
    results: tuple[BackendResult, ...]  # with lost cards, and DRA's and the kubelet's health
    asks: tuple[Ask, ...]  # nothing where no pods or no carved grant
    bus_seen: Mapping[str, Mapping[str, str]] = field(default_factory=_empty_bus)


def learn(
    memory: Memory,
    planned: Plan,
    results: Sequence[BackendResult],
    bus: BusScan | None = None,
) -> Learned:
    """`bus`: the PCI bus as last read (once a minute), None where it is not read."""
    readings = [r.reading for r in results if r.reading is not None]
    ids = memory.ids.learned(readings)
    seen = dict(memory.cards_seen)
    on_bus = dict(memory.bus_seen)
    lost: dict[str, Mapping[str, str | None]] = {}
    for reading in readings:
        m = reading.manufacturer
        # What the bus shows against what the library enumerates now, and where earlier
        # rounds saw each card (before this round's names are remembered).
        functions = bus.of(m) if bus is not None else None
        lost[m] = pcibus.lost(reading, functions, memory.bus_seen.get(m, {}))
        on_bus[m] = pcibus.remembered_after(memory.bus_seen.get(m, {}), reading, MAX_CARDS_SEEN)
        cards = {**seen.get(m, {}), **{c.id: c for c in reading.cards}}
        if len(cards) > MAX_CARDS_SEEN:  # a library inventing ids: remember what it lists now
            cards = {c.id: c for c in reading.cards}
        seen[m] = MappingProxyType(cards)
    recorded, grants = planned.recorded, planned.grants
    if (
        ids.cards is not memory.ids.cards
        and planned.kubelet is not None
        and planned.index is not None
    ):
        # A partition's card or an index became known this round: this round's grants name
        # it already.
        node = NodeInput(planned.index, planned.kubelet, planned.dra, ids.cards)
        recorded = gather(node, planned.sources)
    if recorded is not None and (
        recorded is not planned.recorded or ids.identities != memory.ids.identities
    ):
        grants = recorded.resolve(ids.identities)
    final = tuple(
        _with_missing_cards(r, planned, ids, seen, lost.get(r.status.manufacturer, {}))
        for r in results
    )
    asks: list[Ask] = []
    if grants is not None:  # none without the node's pods
        for read in (r.reading for r in final if r.reading is not None):
            carved = grants.request(read.manufacturer).carved_device_ids
            if carved:
                rows = tuple(p for p in read.processes if p.device_id in carved)
                asks.append(Ask(read.manufacturer, rows, grants.holders(read.manufacturer)))
    return Learned(
        planned, ids, MappingProxyType(seen), grants, final, tuple(asks), MappingProxyType(on_bus)
    )


def _with_missing_cards(
    result: BackendResult,
    planned: Plan,
    ids: Ids,
    seen: Mapping[str, Mapping[str, Card]],
    lost: Mapping[str, str | None],
) -> BackendResult:
    """A card the kubelet allocates and the library does not list is unhealthy; so is one the
    PCI bus shows and the library cannot see, or that left both (`lost`, by bus id), one the
    node's DRA driver tainted, or the kubelet says is not healthy."""
    reading = result.reading
    if reading is None:
        return result
    allocatable = deviceplugins.allocatable_cards(planned.kubelet, reading.manufacturer, ids.cards)
    # A card the node's DRA slices offer is the kubelet's to give as much.
    offered = dra.inventory_cards(planned.dra, reading.manufacturer, ids.cards)
    if offered is not None:
        allocatable = offered | (allocatable or frozenset())
    missing = deviceplugins.missing_cards(reading, allocatable, seen.get(reading.manufacturer, {}))
    if missing:
        reading = replace(reading, cards=reading.cards + missing)
    known = seen.get(reading.manufacturer, {})
    supersedes = frozenset({deviceplugins.NOT_ENUMERATED})
    reading = pcibus.with_lost(reading, lost, known, supersedes)
    if reading is not result.reading:
        result = replace(result, reading=reading)
    reading = deviceplugins.with_dra_health(reading, planned.dra, ids.cards, planned.kubelet_health)
    if reading is not result.reading:
        result = replace(result, reading=reading)
    return result


@dataclass(frozen=True, slots=True)
class Inputs:
    """What the shell gathered for `settle`: times, the reads' side facts, /proc's verdicts,
    the cluster's part, and the agent's own report."""

    now: float  # unix time the snapshot is stamped with
    took: float  # seconds the round took until its figures were in
    period: float
    node: str | None
    manufacturers: tuple[str, ...]  # every backend's, read or not
    # each backend's error as the log shows it (the snapshot's leaves out host paths)
    raw_errors: Mapping[str, str | None] = field(default_factory=dict)
    # (nan | range, manufacturer, figures) of each reading parsed this round
    left_out: tuple[tuple[str, str, tuple[str, ...]], ...] = ()
    pods_asked: bool = False  # whether a pod reader exists
    pods_error: BaseException | None = None  # why it raised
    # /proc's verdicts by manufacturer (Learned.asks), or what attribution raised; None: no
    # attribution on this node, so no per-grant section
    verdicts: Mapping[str, tuple[DeviceAttribution, ...] | BaseException] | None = None
    # The cluster's part (kube/cluster.py): the exporter role, the kubelet's figures, the
    # pod-level figures and the pods whose pod-level figures raised; None: no cluster.
    cluster: Extras | None = None
    cluster_faults: Mapping[str, PodFault] = field(default_factory=dict)
    skipped_lines: Mapping[str, int] | None = None
    build: tuple[tuple[str, str], ...] = ()
    own: tuple[GaugeFamily, ...] = ()


@dataclass(frozen=True, slots=True)
class PodRef:
    uid: str
    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class UnhealthyCard:
    """A card the round found unhealthy, and the pods holding a grant on it (or on one of its
    partitions): what an Event or a node condition names."""

    manufacturer: str
    card_id: str
    reason: str | None
    pods: tuple[PodRef, ...]
    index: int = -1  # the card's ordinal, as nvidia-smi shows it; -1 when never seen
    # what its manufacturer documents to do about the reason (figures/actions.py, R-X11)
    action: str = Action.UNKNOWN.value


@dataclass(frozen=True, slots=True)
class Round:
    """What a round's outputs consume."""

    snapshot: Snapshot
    extras: Extras  # what /metrics adds to the snapshot
    grants: NodeGrants | None  # named by canonical ids; None: the node's pods are not known
    events: tuple[LogEvent, ...]  # the lines to log, from what the log said before
    unhealthy: tuple[UnhealthyCard, ...]


# An output of the round: the published snapshot and /metrics, an Event writer, ...
Output = Callable[[Round], None]


def settle(memory: Memory, learned: Learned, inputs: Inputs) -> tuple[Memory, Round]:
    planned, grants, index = learned.plan, learned.grants, learned.plan.index
    said, events = memory.said, []

    def note(step: tuple[Said, list[LogEvent]]) -> None:
        nonlocal said
        said, new = step
        events.extend(new)

    if inputs.pods_asked:
        if inputs.pods_error is not None:
            note(
                says.failed(
                    said,
                    "pods",
                    _describe(inputs.pods_error),
                    "the node's pods could not be read; per-grant figures are absent",
                    level=logging.ERROR,
                    exc=inputs.pods_error,
                )
            )
        else:
            note(says.recovered(said, "pods", "the node's pods are read again"))
    note(says.kubelet_said(said, planned.kubelet))
    note(says.dra_said(said, planned.dra))
    note(says.left_out_said(said, inputs.left_out))
    note(says.backends_said(said, learned.results, inputs.raw_errors))
    note(says.grants_said(said, grants, index))

    built = _sections(learned, inputs.verdicts)
    for manufacturer, outcome in built.items():
        key = f"slices:{manufacturer}"
        if isinstance(outcome, Exception):
            # What is no one pod's (attribution, a device's own entry) raised: this
            # manufacturer's per-grant figures are absent this round (its devices are missing
            # from the section: "could not measure"); cards and others go on.
            note(
                says.failed(
                    said,
                    key,
                    _describe(outcome),
                    "per-grant figures of %s could not be built",
                    manufacturer,
                    level=logging.ERROR,
                    exc=outcome,
                    extra={"manufacturer": manufacturer},
                )
            )
        else:
            note(
                says.recovered(
                    said,
                    key,
                    "per-grant figures of %s are built again",
                    manufacturer,
                    manufacturer=manufacturer,
                )
            )
    good = [s for s in built.values() if not isinstance(s, Exception)]
    section = slices.merge(good) if good else None

    faults: dict[str, PodFault] = {}
    if grants is not None:
        faults.update(
            (uid, PodFault(isolation.GRANTS, error)) for uid, error in grants.errors.items()
        )
    snap = snapshot.assemble(
        now=inputs.now,
        period=inputs.period,
        node=inputs.node,
        results=learned.results,
        round_duration=inputs.took,
        slices=section,
    )
    kubelet, inventory = planned.kubelet, planned.dra
    extras = Extras(
        instances=exported(index, grants, View.of(snap), inputs.manufacturers, faults),
        allocation_errors=len(grants.errors) if grants is not None else 0,
        grants_refused=grants.refused_count() if grants is not None else {},
        podresources_success=kubelet.ok if kubelet is not None else None,
        podresources_duration=kubelet.duration_seconds if kubelet is not None else None,
        dra_success=None if inventory is None else inventory.error is None,
        dra_unresolved=deviceplugins.count_unresolved(kubelet, index, learned.ids.cards, inventory)
        if inventory is not None and index is not None
        else {},
        build=inputs.build,
        skipped_lines=dict(inputs.skipped_lines) if inputs.skipped_lines is not None else None,
    )
    if inputs.cluster is not None:
        c = inputs.cluster
        extras = replace(
            extras,
            exporting=c.exporting,
            kubelet_success=c.kubelet_success,
            kubelet_duration=c.kubelet_duration,
            kubelet_age=c.kubelet_age,
            pod_level=c.pod_level,
        )
        for uid, fault in inputs.cluster_faults.items():
            faults.setdefault(uid, fault)
    note(says.faults_said(said, faults, index))
    extras = replace(extras, pod_errors=isolation.count_by_stage(faults), own=inputs.own)
    note(says.recovered(said, "round", "monitor rounds complete again"))
    after = Memory(
        learned.ids,
        learned.cards_seen,
        said,
        memory.rounds + 1,
        memory.rounds_failed,
        learned.bus_seen,
    )
    done = Round(snap, extras, grants, tuple(events), unhealthy_cards(snap, grants, index))
    return after, done


def _sections(
    learned: Learned, verdicts: Mapping[str, tuple[DeviceAttribution, ...] | BaseException] | None
) -> dict[str, SliceSection | Exception]:
    """Each asked manufacturer's part of the per-grant section, or what raised building it;
    none where no pods, no carved grant or no attribution."""
    grants = learned.grants
    if grants is None or verdicts is None:
        return {}
    readings = {r.reading.manufacturer: r.reading for r in learned.results if r.reading}
    out: dict[str, SliceSection | Exception] = {}
    for ask in learned.asks:
        try:
            answered = verdicts[ask.manufacturer]
            if isinstance(answered, BaseException):
                raise answered
            # Each holder's part is behind the per-pod boundary inside `build`: a pod whose
            # part raises is in the section's faults (counted and logged with the round's).
            out[ask.manufacturer] = slices.build(readings[ask.manufacturer], answered, grants.all())
        except Exception as exc:
            out[ask.manufacturer] = exc
    return out


def round_failed(memory: Memory, exc: BaseException) -> tuple[Memory, tuple[LogEvent, ...]]:
    """A round that raised: counted, and logged when it starts failing or fails otherwise (the
    last good snapshot stays published)."""
    said, events = says.failed(
        memory.said,
        "round",
        _describe(exc),
        "monitor round failed",
        level=logging.ERROR,
        exc=exc,
    )
    return replace(memory, said=said, rounds_failed=memory.rounds_failed + 1), tuple(events)


def unhealthy_cards(
    snap: Snapshot, grants: NodeGrants | None, index: PodIndex | None
) -> tuple[UnhealthyCard, ...]:
    """Every unhealthy card of the snapshot with the pods holding a grant on it or on one of
    its partitions, by canonical ids."""
    holding: dict[tuple[str, str], dict[str, None]] = {}
    for g in grants.all() if grants is not None else ():
        for device in {g.device_id, g.partition_id}:
            if device:
                holding.setdefault((g.manufacturer, device), {})[g.pod_uid] = None
    out = []
    for group in snap.groups:
        for card in group.cards:
            if not card.unhealthy:
                continue
            refs = []
            for uid in holding.get((group.manufacturer, card.id), {}):
                pod = index.get(uid) if index is not None else None
                refs.append(PodRef(uid, pod.namespace if pod else "", pod.name if pod else ""))
            refs.sort(key=lambda r: (r.namespace, r.name, r.uid))
            why = card.unhealthy_reason
            out.append(
                UnhealthyCard(
                    group.manufacturer,
                    card.id,
                    why,
                    tuple(refs),
                    card.index,
                    action_for(group.manufacturer, why).value,
                )
            )
    return tuple(out)


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
