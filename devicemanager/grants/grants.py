"""From pods to grants: who holds what, as which Instance, with which quota (R-G2..R-G4, R-F6).

Pure. A grant is one entry users read: one per (card) or (partition) a pod holds, never one
per card when a pod holds two partitions of it, and one entry with no usage figures of its own
when two containers of a pod were separately granted the same card.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from devicemanager.grants.allocations import (
    UNITS_PER_CARD,
    Allocation,
    Mode,
    allocations_of,
    has_allocation_annotation,
    volcano_slots,
)
from devicemanager.model import Identities, ReadRequest
from devicemanager.node.pods import PodIndex, PodInfo

log = logging.getLogger("instance-accelerator-metrics")

INSTANCE_GROUP = "worker.gpustack.ai"
PART_OF = "app.kubernetes.io/part-of"
CORES_LIMIT_SUFFIX = ".sliced.cores-percentage"
CARVED = (Mode.SLICED, Mode.PARTITIONED)


@dataclass(frozen=True, slots=True)
class InstanceRef:
    namespace: str
    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class Grant:
    pod_uid: str
    containers: tuple[str, ...]  # the holders; two or more make the grant ambiguous
    manufacturer: str
    device_id: str  # the card; a partition's parent
    index: int | None
    mode: Mode
    units: int | None = None  # GPUStack slice share, summed over holders
    memory_mib: int | None = None  # HAMi slice quota, summed over holders
    cores_cap: float = 100.0  # percent of the card the holder may use
    partition_id: str | None = None
    profile: str | None = None
    # Where it was read (provenance, not identity: the same card from two sources is one grant):
    # the allocation's source, "gpustack", "hami", "volcano", "kai", "kubelet" or "dra".
    source: str = field(default="", compare=False)

    @property
    def container(self) -> str:
        return self.containers[0]

    @property
    def ambiguous(self) -> bool:
        return len(self.containers) > 1

    @property
    def entry_id(self) -> str:
        """The id an entry is keyed by: the partition's own, else the card's."""
        return self.partition_id or self.device_id

    def memory_quota_mib(self, card_total_mib: int | None) -> int | None:
        """A slice's memory ceiling: units * card MiB / 1,600,000, at least 1 MiB (R-G2)."""
        if self.memory_mib is not None:
            return self.memory_mib
        if self.units is None or card_total_mib is None:
            return None
        units = min(self.units, UNITS_PER_CARD)  # a slice is never more than its card
        return max(1, units * card_total_mib // UNITS_PER_CARD)


def owned_by_instance(pod: PodInfo) -> bool:
    """Whether a GPUStack Instance controls the pod and the pod carries its UID as part-of."""
    owner = pod.owner
    return (
        owner is not None
        and owner.kind == "Instance"
        and owner.api_version.partition("/")[0] == INSTANCE_GROUP
        and bool(owner.uid)
        and pod.labels.get(PART_OF) == owner.uid
    )


def instance_of(pod: PodInfo) -> InstanceRef:
    """A pod owned by a GPUStack Instance belongs to it; any other pod holding a grant is an
    Instance of its own (R-G4)."""
    if owned_by_instance(pod) and pod.owner is not None:
        return InstanceRef(pod.namespace, pod.owner.name, pod.owner.uid)
    return InstanceRef(pod.namespace, pod.name, pod.uid)


# A quantity as the API server writes a plain number: ASCII digits, an optional fraction.
# float() alone would also take "²", "٣", "1e3", "nan" and "inf".
_PERCENT = re.compile(r"[0-9]{1,3}(?:\.[0-9]{1,6})?")


def cores_cap(pod: PodInfo, container: str) -> float:
    """The compute cap from `<resource>.sliced.cores-percentage`; 100 (no cap) otherwise."""
    limits = pod.limits.get(container, {})
    caps = [v for k, v in limits.items() if k.endswith(CORES_LIMIT_SUFFIX)]
    if len(caps) != 1 or not _PERCENT.fullmatch(caps[0]):
        return 100.0
    cap = float(caps[0])
    return cap if 0 < cap <= 100 else 100.0


def _grant(pod: PodInfo, a: Allocation) -> Grant:
    # HAMi states the cap itself (0: none); otherwise the container's cores-percentage limit.
    cap = (
        float(min(a.cores_percent, 100))
        if a.cores_percent is not None and a.cores_percent > 0
        else cores_cap(pod, a.container)
    )
    # A partition's grant is keyed by it; so is a slice of the partition itself (a DRA share).
    partitioned = a.mode is Mode.PARTITIONED or (a.mode is Mode.SLICED and a.in_partition)
    return Grant(
        pod_uid=pod.uid,
        containers=(a.container,),
        manufacturer=a.manufacturer,
        device_id=a.device_id,
        index=a.index,
        mode=a.mode,
        units=a.units,
        memory_mib=a.memory_mib,
        cores_cap=cap,
        partition_id=a.partition_id if partitioned else None,
        profile=a.profile if partitioned else None,
        source=a.source,
    )


def merged(grants: Iterable[Grant]) -> tuple[Grant, ...]:
    """One grant per (card) or (partition) of one pod: holders of the same one are merged, and
    two or more of them make the grant ambiguous (R-G3). The first states mode, index and cap."""
    groups: dict[tuple[str, str, str | None, str | None], list[Grant]] = {}
    for g in grants:
        groups.setdefault((g.manufacturer, g.device_id, g.partition_id, g.profile), []).append(g)
    out = []
    for same in groups.values():
        first = same[0]
        if len(same) == 1:
            out.append(first)
            continue
        units = [g.units for g in same if g.units is not None]
        memory = [g.memory_mib for g in same if g.memory_mib is not None]
        out.append(
            replace(
                first,
                containers=tuple(dict.fromkeys(c for g in same for c in g.containers)),
                index=next((g.index for g in same if g.index is not None), None),
                units=sum(units) if units else None,
                memory_mib=sum(memory) if memory else None,
            )
        )
    return tuple(sorted(out, key=lambda g: (g.manufacturer, g.device_id, g.entry_id)))


def grants_of(pod: PodInfo) -> tuple[Grant, ...]:
    """A pod's grants; raises AllocationError when an annotation is malformed."""
    return grants_from(pod, allocations_of(pod.annotations, pod.slots, volcano_slots(pod.limits)))


def grants_from(pod: PodInfo, allocations: Iterable[Allocation]) -> tuple[Grant, ...]:
    """One entry per card or partition the pod's containers hold, whatever stated them."""
    return merged(
        _grant(pod, a)
        for a in allocations
        if a.mode is not Mode.VISIBILITY  # a sidecar that sees its sibling's card holds nothing
    )


def resolved(grants: Iterable[Grant], identities: Identities) -> tuple[Grant, ...]:
    """The grants with every card and partition named by its canonical id: an allocator that
    recorded an alias (`GPU-<ASIC serial>`, `DCU-3`) holds the card the library calls by its
    own id. Two grants that turn out to name one card merge, as if recorded alike."""
    out = []
    for g in grants:
        device = identities.canonical(g.manufacturer, g.device_id)
        partition = (
            None if g.partition_id is None else identities.canonical(g.manufacturer, g.partition_id)
        )
        if device != g.device_id or partition != g.partition_id:
            g = replace(g, device_id=device, partition_id=partition)
        out.append(g)
    return merged(out)


# Why an annotation's grant was refused: the kubelet's pod-resources answer (a device plugin's
# ids or a DRA claim) gives that card, partition or share to another pod and none of it to this.
HELD_BY_ANOTHER_POD = "held_by_another_pod"
# Why too: two or more pods' annotations claim one partition, and the kubelet named it to
# none of them by its own id, only its card (GPUStack's device plugin: `GPU-<uuid>::0` under
# `nvidia.com/mig-<profile>`): the one whose kubelet resource is the profile its annotation
# states is believed, and where none or several are, none is (`refuse_contested`).
CONTESTED_PARTITION = "contested_partition"
REFUSALS = (HELD_BY_ANOTHER_POD, CONTESTED_PARTITION)

# How many grants one pod, and all pods together, may hold (issue 30): each grant is a score of
# series and a snapshot record, and an annotation is the tenant's own text (64 KiB of HAMi's
# format names a thousand cards). A real pod holds a few: eight cards, or a handful of slices
# for each of its containers; a node, a few per card for each of its pods. Past either bound
# the excess is dropped whole, pod by pod, as a malformed annotation is: a line in the log and
# a count (`gpustack_accelerator_pod_errors{stage="grants"}`).
MAX_GRANTS_PER_POD = 128
MAX_GRANTS_PER_NODE = 4096


def _empty() -> Mapping[Any, Any]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class NodeGrants:
    """Every grant on the node by pod, and the pods whose allocations could not be read."""

    by_pod: Mapping[str, tuple[Grant, ...]]
    errors: Mapping[str, str]  # pod UID -> what was wrong
    # pod UID -> how the kubelet's device-plugin view differs from the pod's annotation
    disagreements: Mapping[str, Disagreement] = field(default_factory=_empty)
    # pod UID -> what the kubelet gave it (device plugins and DRA claims), annotated pods too:
    # what an annotation's grant is checked against.
    kubelet: Mapping[str, tuple[Grant, ...]] = field(default_factory=_empty)
    annotated: frozenset[str] = frozenset()  # pods whose grants come from their annotation
    # pod UID -> the annotation's grants refused (HELD_BY_ANOTHER_POD), left out of `by_pod`
    refused: Mapping[str, tuple[Grant, ...]] = field(default_factory=_empty)
    # pod UID -> the annotation's partitions refused as CONTESTED_PARTITION, left out too
    contested: Mapping[str, tuple[Grant, ...]] = field(default_factory=_empty)
    # (manufacturer, partition id) -> the pod believed of those that claimed it
    believed: Mapping[tuple[str, str], str] = field(default_factory=_empty)

    def all(self) -> Iterable[Grant]:
        for grants in self.by_pod.values():
            yield from grants

    def holders(self, manufacturer: str) -> dict[str, frozenset[str]]:
        """device id -> pods holding any grant on it."""
        out: dict[str, set[str]] = {}
        for g in self.all():
            if g.manufacturer == manufacturer:
                out.setdefault(g.device_id, set()).add(g.pod_uid)
        return {device: frozenset(pods) for device, pods in out.items()}

    def resolve(self, identities: Identities) -> NodeGrants:
        """Every grant named by canonical ids (see `resolved`); an annotation's alias of a card
        the kubelet gave another pod by its own id is refused now."""
        if not identities.by_manufacturer:
            return self
        by_pod = {uid: resolved(grants, identities) for uid, grants in self.by_pod.items()}
        kubelet = {uid: resolved(grants, identities) for uid, grants in self.kubelet.items()}
        # Two names of one card (the annotation's alias, the plugin's UUID) are no disagreement.
        differ = {uid: d for uid, d in self.disagreements.items() if d.resolve(identities).differs}
        kept, refused = refuse_borrowed(by_pod, kubelet, self.annotated)
        kept, contested, believed = refuse_contested(kept, kubelet, self.annotated)
        for uid, grants in self.refused.items():
            refused[uid] = (*resolved(grants, identities), *refused.get(uid, ()))
        for uid, grants in self.contested.items():
            contested[uid] = (*resolved(grants, identities), *contested.get(uid, ()))
        for (m, part), uid in self.believed.items():
            believed.setdefault((m, identities.canonical(m, part)), uid)
        return NodeGrants(
            MappingProxyType(kept),
            self.errors,
            MappingProxyType(differ),
            MappingProxyType(kubelet),
            self.annotated,
            MappingProxyType(refused),
            MappingProxyType(contested),
            MappingProxyType(believed),
        )

    def refused_count(self) -> dict[str, int]:
        """Refused grants by reason, every reason named (0 when none)."""
        return {
            HELD_BY_ANOTHER_POD: sum(len(g) for g in self.refused.values()),
            CONTESTED_PARTITION: sum(len(g) for g in self.contested.values()),
        }

    def request(self, manufacturer: str) -> ReadRequest:
        """Per-process queries only for carved cards (R-V3); partitions by recorded id (R-V4)."""
        mine = [g for g in self.all() if g.manufacturer == manufacturer and g.mode in CARVED]
        return ReadRequest(
            # "": a partition whose card is not known yet (a kubelet MIG id): none to query.
            carved_device_ids=frozenset(g.device_id for g in mine if g.device_id),
            partition_ids=frozenset(
                (g.device_id, g.partition_id) for g in mine if g.partition_id is not None
            ),
        )


def annotated(pod: PodInfo) -> bool:
    """Whether an allocation annotation describes the pod (then it is the pod's grant source)."""
    return has_allocation_annotation(pod.annotations)


@dataclass(frozen=True, slots=True)
class Disagreement:
    """The cards a pod's annotation names and those the kubelet's device plugins gave it, as
    each recorded them: (manufacturer, device id) pairs."""

    said: frozenset[tuple[str, str]]
    seen: frozenset[tuple[str, str]]

    @property
    def differs(self) -> bool:
        return self.said != self.seen

    def resolve(self, identities: Identities) -> Disagreement:
        """Both sides by canonical ids: what is left is a real difference."""

        def canonical(ids: frozenset[tuple[str, str]]) -> frozenset[tuple[str, str]]:
            return frozenset((m, identities.canonical(m, d)) for m, d in ids)

        return Disagreement(canonical(self.said), canonical(self.seen))

    def __str__(self) -> str:
        said = sorted(d for _, d in self.said)
        seen = sorted(d for _, d in self.seen)
        return f"annotation: {said}; kubelet: {seen}"


def disagreement(annotation: Iterable[Grant], kubelet: Iterable[Grant]) -> Disagreement | None:
    """How the kubelet's cards differ from the annotation's, or None. A kubelet partition whose
    card is not known yet says nothing either way."""
    said = frozenset((g.manufacturer, g.device_id) for g in annotation)
    seen = frozenset((g.manufacturer, g.device_id) for g in kubelet if g.device_id)
    if said == seen or not seen:
        return None
    return Disagreement(said, seen)


# What the kubelet's device plugins allocated one pod (R-X2), as a function of the pod, so
# that it runs inside the pod's own boundary; or already worked out, by pod UID.
KubeletGrants = Callable[[PodInfo], Sequence[Grant]] | Mapping[str, Sequence[Grant]]


class RememberedGrants:
    """`grants_of`, remembered per pod object: a pod's annotations are parsed again when the
    pod changed (the index then holds a new PodInfo), not every round. A malformed annotation
    is remembered as its error, raised again each round inside the pod's boundary."""

    def __init__(self) -> None:
        self._by_uid: dict[str, tuple[PodInfo, tuple[Grant, ...] | Exception]] = {}

    def __call__(self, pod: PodInfo) -> tuple[Grant, ...]:
        known = self._by_uid.get(pod.uid)
        if known is None or known[0] is not pod:
            try:
                outcome: tuple[Grant, ...] | Exception = grants_of(pod)
            except Exception as exc:
                outcome = exc
            known = self._by_uid[pod.uid] = (pod, outcome)
        if isinstance(known[1], Exception):
            # Without its old traceback: one raised again every round would grow it for ever.
            raise known[1].with_traceback(None)
        return known[1]

    def retain(self, index: PodIndex) -> None:
        """Forget pods the index no longer holds."""
        for uid in self._by_uid.keys() - index.pods.keys():
            del self._by_uid[uid]


def refuse_borrowed(
    by_pod: Mapping[str, tuple[Grant, ...]],
    kubelet: Mapping[str, Sequence[Grant]],
    annotated: frozenset[str],
) -> tuple[dict[str, tuple[Grant, ...]], dict[str, tuple[Grant, ...]]]:
    """An annotation's grant on a card, partition or share that the kubelet gives another pod
    is refused: a tenant who can edit its own pod's annotations would otherwise read another
    pod's figures as its own. A pod the kubelet gave part of the card keeps what its
    annotation says of it (the annotation is the finer word: which slice, which quota), but
    for a partition the kubelet named to another pod by its own id, and for the card's own
    figures (Exclusive, Shared: every holder's use among them) where the kubelet gave this pod
    only a partition or a slice of a card it gave others some of. Where the kubelet gives no
    pod the card, or did not answer, the annotation is trusted. Returns (kept by pod, refused
    by pod)."""
    cards: dict[tuple[str, str], set[str]] = {}  # any part of the card
    whole: dict[tuple[str, str], set[str]] = {}  # the card itself, not one of its partitions
    parts: dict[tuple[str, str], set[str]] = {}
    sees_card: set[tuple[str, str, str]] = set()  # (pod, card): given the card or a replica
    for uid, grants in kubelet.items():
        for g in grants:
            if g.device_id:
                cards.setdefault((g.manufacturer, g.device_id), set()).add(uid)
                if g.partition_id is None:
                    whole.setdefault((g.manufacturer, g.device_id), set()).add(uid)
                if g.mode not in CARVED:
                    sees_card.add((uid, g.manufacturer, g.device_id))
            if g.partition_id is not None:
                parts.setdefault((g.manufacturer, g.partition_id), set()).add(uid)
    if not cards and not parts:
        return dict(by_pod), {}

    def borrowed(uid: str, g: Grant) -> bool:
        card = (g.manufacturer, g.device_id)
        others = cards.get(card, set()) - {uid}
        if g.partition_id is not None:
            named = parts.get((g.manufacturer, g.partition_id), set())
            if uid in named:
                return False
            if named - {uid}:
                return True  # the kubelet named this partition to another pod
            if uid in cards.get(card, ()):
                return False  # one of its partitions: the annotation says which
            return bool(whole.get(card, set()) - {uid})
        if uid not in cards.get(card, ()):
            return bool(others)
        # Given part of the card: a slice refines it; the card's own figures need the card.
        return g.mode not in CARVED and (uid, *card) not in sees_card and bool(others)

    kept: dict[str, tuple[Grant, ...]] = {}
    refused: dict[str, tuple[Grant, ...]] = {}
    for uid, grants in by_pod.items():
        if uid not in annotated:
            kept[uid] = grants
            continue
        out = tuple(g for g in grants if borrowed(uid, g))
        if out:
            refused[uid] = out
        if mine := tuple(g for g in grants if not borrowed(uid, g)):
            kept[uid] = mine
    return kept, refused


def refuse_contested(
    by_pod: Mapping[str, tuple[Grant, ...]],
    kubelet: Mapping[str, Sequence[Grant]],
    annotated: frozenset[str],
) -> tuple[dict[str, tuple[Grant, ...]], dict[str, tuple[Grant, ...]], dict[tuple[str, str], str]]:
    """Two or more annotated pods claim one partition, and the kubelet gave each a partition of
    its card by the card's id alone (GPUStack's plugin: `GPU-<uuid>::0` under
    `nvidia.com/mig-3g.40gb`), naming no pod that partition by its own id: `refuse_borrowed`
    keeps them all, since each holds some of the card. Never the first in silence: the one pod
    whose kubelet resource is the profile its annotation states for the partition (the
    kubelet's word on which profile it gave; the annotation alone is the tenant's) is believed;
    where none or several are, none is, since a tenant's figures read by its neighbour are worse
    than a pod's figures missing for a while, and both are said. A sole claimant is not judged
    here. Returns (kept by pod, contested by pod, (manufacturer, partition) -> believed pod)."""
    named = {
        (g.manufacturer, g.partition_id)
        for grants in kubelet.values()
        for g in grants
        if g.partition_id is not None
    }
    given: dict[tuple[str, str, str], set[str]] = {}  # (pod, manufacturer, card) -> profiles
    for uid, grants in kubelet.items():
        for g in grants:
            if g.mode is Mode.PARTITIONED and g.partition_id is None and g.device_id:
                profiles = given.setdefault((uid, g.manufacturer, g.device_id), set())
                if g.profile:
                    profiles.add(g.profile.lower())
    if not given:
        return dict(by_pod), {}, {}
    claims: dict[tuple[str, str], list[tuple[str, Grant]]] = {}
    for uid, grants in by_pod.items():
        if uid not in annotated:
            continue
        for g in grants:
            if g.partition_id is None or (g.manufacturer, g.partition_id) in named:
                continue
            if (uid, g.manufacturer, g.device_id) in given:
                claims.setdefault((g.manufacturer, g.partition_id), []).append((uid, g))
    losing: set[tuple[str, Grant]] = set()
    believed: dict[tuple[str, str], str] = {}
    for part, claimants in claims.items():
        if len({uid for uid, _ in claimants}) < 2:
            continue
        fitting = {
            uid
            for uid, g in claimants
            if g.profile and g.profile.lower() in given[(uid, g.manufacturer, g.device_id)]
        }
        winner = next(iter(fitting)) if len(fitting) == 1 else None
        if winner is not None:
            believed[part] = winner
        losing.update((uid, g) for uid, g in claimants if uid != winner)
    if not losing:
        return dict(by_pod), {}, {}
    kept: dict[str, tuple[Grant, ...]] = {}
    contested: dict[str, tuple[Grant, ...]] = {}
    for uid, grants in by_pod.items():
        if out := tuple(g for g in grants if (uid, g) in losing):
            contested[uid] = out
        if mine := tuple(g for g in grants if (uid, g) not in losing):
            kept[uid] = mine
    return kept, contested, believed


def live(pod: PodInfo) -> bool:
    """Whether a pod's figures may be published: started (R-F6), not stopped or going."""
    return pod.started and not pod.terminating and pod.phase not in ("Succeeded", "Failed")


def ceil_restated(measured: float, cap: float) -> float:
    """A slice's compute against its own allowance: ceil(measured * 100 / cap) (R-F4).

    A cap that is not a positive percentage is no cap: HAMi writes `Cores` 0 for a slice
    without one, and a zero here would fail the whole round on a division.
    """
    allowance = cap if 0 < cap <= 100 else 100.0
    return float(math.ceil(round(measured * 100.0 / allowance, 9)))
