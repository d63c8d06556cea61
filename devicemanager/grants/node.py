"""The node's grants: the sources in precedence order, and the steps between sources and grants.
Pure.

1. Every source reads every pod behind the pod's own boundary (grants/sources/). A pod whose
   data raised in any source holds nothing this round (R-G1): the kubelet's view does not stand
   in for a malformed annotation, which it cannot tell from a whole card.
2. Precedence: a pod's grants are the word of the first source in `SOURCES` that speaks for it.
   The sources the kubelet allocated through (device plugins, DRA claims) are one word, what
   the kubelet gave the pod, and come last: a pod's own annotation is the finer word. An
   allocator's annotation (GPUStack, HAMi, Volcano) comes before a reservation-pod scheduler's
   labels (KAI): it names the card and the quota itself, where KAI's names a group.
3. The node's bound (MAX_GRANTS_PER_NODE), the oldest pods first.
4. The cross-pod rules, in order: `HANDED_ON` (a reservation pod's card to the pods that run
   on it), then `refuse_borrowed`, then `refuse_contested` (one partition two pods claim, the
   kubelet naming only its card).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from devicemanager.grants import reservations
from devicemanager.grants.grants import (
    MAX_GRANTS_PER_NODE,
    Disagreement,
    Grant,
    KubeletGrants,
    NodeGrants,
    disagreement,
    grants_of,
    merged,
    refuse_borrowed,
    refuse_contested,
)
from devicemanager.grants.sources import Found, GrantSource, NodeInput
from devicemanager.grants.sources.annotations import Annotations
from devicemanager.grants.sources.claims import Claims
from devicemanager.grants.sources.device_plugins import DevicePlugins
from devicemanager.grants.sources.reservations import Reservations
from devicemanager.model import PodFault
from devicemanager.node.isolation import GRANTS, per_pod
from devicemanager.node.pods import PodIndex, PodInfo


def sources(
    parse: Callable[[PodInfo], tuple[Grant, ...]] = grants_of,
) -> tuple[GrantSource, ...]:
    """The grant sources in precedence order; `parse` reads a pod's annotations (`grants_of`,
    or the shell's RememberedGrants)."""
    return (Annotations(parse), Reservations(), DevicePlugins(), Claims())


SOURCES = sources()


@dataclass(frozen=True, slots=True)
class Gathered:
    """The node's grants between the sources and the cross-pod rules."""

    index: PodIndex
    by_pod: Mapping[str, tuple[Grant, ...]]
    # What the kubelet gave each pod (device plugins and DRA claims), annotated pods too: what
    # a pod's own word is checked against. A pod gone or going holds nothing any longer.
    kubelet: Mapping[str, tuple[Grant, ...]]
    annotated: frozenset[str]  # pods whose grants are their own word


# A rule that gives one pod's card to other pods: a reservation pod's card given to the pods
# that run on it (KAI's GPU fractions, issue 47). It runs before `refuse_borrowed` and rewrites
# both the grants and the kubelet's record of who holds the card (the reservation pod's grant
# to the pods it reserved for), so the refusal sees the card as theirs rather than fighting
# the rule.
CrossPodRule = Callable[[Gathered], Gathered]


def reserved_for_others(gathered: Gathered) -> Gathered:
    """KAI's reservation pods hold no figures; the kubelet's record of their cards goes to the
    fractional pods of their GPU group (grants/reservations.py)."""
    by_pod, kubelet = reservations.hand_on(gathered.by_pod, gathered.kubelet, gathered.index)
    return Gathered(gathered.index, by_pod, kubelet, gathered.annotated)


HANDED_ON: tuple[CrossPodRule, ...] = (reserved_for_others,)


def gather(node: NodeInput, ranked: Sequence[GrantSource] = SOURCES) -> NodeGrants:
    """Every pod's grants from `ranked` sources (precedence order) and the cross-pod rules."""
    return combine(node.index, [(s, s.found(node)) for s in ranked])


def combine(index: PodIndex, found: Sequence[tuple[GrantSource, Found]]) -> NodeGrants:
    first: dict[str, PodFault] = {}
    for _, f in found:
        for uid, fault in f.faults.items():
            first.setdefault(uid, fault)
    # in the index's order, as the pods were read: the order their faults are logged in
    faults = {uid: first[uid] for uid in index.pods if uid in first}
    own = [f for s, f in found if not s.allocated]
    allocated = [f for s, f in found if s.allocated]
    broken_kubelet = {uid for f in allocated for uid in f.faults}
    kubelet_of: dict[str, tuple[Grant, ...]] = {}
    for pod in index.pods.values():
        given = [g for f in allocated for g in f.by_pod.get(pod.uid, ())]
        if given and pod.uid not in broken_kubelet:
            kubelet_of[pod.uid] = merged(given) if len(allocated) > 1 else tuple(given)
    by_pod: dict[str, tuple[Grant, ...]] = {}
    annotated: set[str] = set()
    disagreements: dict[str, Disagreement] = {}
    for pod in index.pods.values():
        uid = pod.uid
        speaking = [f for f in own if uid in f.by_pod or uid in f.faults]
        if speaking:
            annotated.add(uid)
        if uid in faults:
            continue
        if not speaking:
            if uid in kubelet_of:
                by_pod[uid] = kubelet_of[uid]
            continue
        word = speaking[0].by_pod[uid]
        plugin = kubelet_of.get(uid, ())
        if plugin and (differs := disagreement(word, plugin)):
            disagreements[uid] = differs
        if word:
            by_pod[uid] = word
    errors = {uid: fault.error for uid, fault in faults.items()}
    by_pod = _within_node_bound(by_pod, index, errors)
    holding = {
        uid: grants
        for uid, grants in kubelet_of.items()
        if (held := index.get(uid)) is not None and not _released(held)
    }
    gathered = Gathered(index, by_pod, holding, frozenset(annotated))
    for rule in HANDED_ON:
        gathered = rule(gathered)
    kept, refused = refuse_borrowed(gathered.by_pod, gathered.kubelet, gathered.annotated)
    kept, contested, believed = refuse_contested(kept, gathered.kubelet, gathered.annotated)
    return NodeGrants(
        MappingProxyType(kept),
        MappingProxyType(errors),
        MappingProxyType(disagreements),
        MappingProxyType(dict(gathered.kubelet)),
        gathered.annotated,
        MappingProxyType(refused),
        MappingProxyType(contested),
        MappingProxyType(believed),
    )


@dataclass(frozen=True, slots=True)
class _Given:
    """What the kubelet allocated, already worked out (by pod, or as a function of one pod)."""

    kubelet: KubeletGrants | None
    name: str = "kubelet"
    allocated: bool = True

    def found(self, node: NodeInput) -> Found:
        kubelet = self.kubelet
        if kubelet is None:
            return Found({})

        def of_pod(pod: PodInfo) -> tuple[Grant, ...]:
            assert kubelet is not None
            return tuple(kubelet(pod) if callable(kubelet) else kubelet.get(pod.uid, ()))

        faults: dict[str, PodFault] = {}
        done = per_pod(node.index.pods.values(), lambda p: p.uid, of_pod, GRANTS, faults)
        return Found({pod.uid: grants for pod, grants in done if grants}, faults)


def node_grants(
    index: PodIndex,
    kubelet: KubeletGrants | None = None,
    annotation_grants: Callable[[PodInfo], tuple[Grant, ...]] = grants_of,
) -> NodeGrants:
    """Every pod's grants from its annotation (`annotation_grants`: `grants_of`, or a
    RememberedGrants) and what the kubelet allocated it, already worked out (`kubelet`: by pod
    UID, or a function of one pod that runs inside the pod's boundary). `gather` is the same
    with the kubelet's answer read by the sources themselves."""
    ranked: tuple[GrantSource, ...] = (Annotations(annotation_grants), _Given(kubelet))
    return gather(NodeInput(index), ranked)


def _within_node_bound(
    by_pod: dict[str, tuple[Grant, ...]], index: PodIndex, errors: dict[str, str]
) -> dict[str, tuple[Grant, ...]]:
    """The pods' grants up to MAX_GRANTS_PER_NODE, the oldest pods first (a new pod cannot push
    out the figures of pods that were there before it); a pod that does not fit is left out
    whole, with its reason in `errors`."""
    if sum(len(g) for g in by_pod.values()) <= MAX_GRANTS_PER_NODE:
        return by_pod

    def age(uid: str) -> tuple[str, str]:
        pod = index.get(uid)
        # RFC 3339 in UTC sorts as text; a pod without a timestamp goes last
        return ((pod.created if pod is not None else None) or "~", uid)

    kept: dict[str, tuple[Grant, ...]] = {}
    held = 0
    for uid in sorted(by_pod, key=age):
        grants = by_pod[uid]
        if held + len(grants) > MAX_GRANTS_PER_NODE:
            errors[uid] = (
                f"the node's pods already hold {held} grants: this pod's {len(grants)} would pass"
                f" the {MAX_GRANTS_PER_NODE} a node publishes, and are left out"
            )
            continue
        kept[uid] = grants
        held += len(grants)
    return kept


def _released(pod: PodInfo) -> bool:
    return pod.terminating or pod.phase in ("Succeeded", "Failed")
