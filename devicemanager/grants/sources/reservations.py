"""Grants of cards another pod reserved: KAI Scheduler's (and Run:ai's) GPU fractions, read by
grants/reservations.py. The fractional pods' own word (their share, their GPU group), and the
reservation pod's (the UUID of the card it holds), checked against what the kubelet gave the
reservation pod; the rule that hands that card on to the fractional pods runs in
grants/node.py (`HANDED_ON`). Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from devicemanager.grants import reservations
from devicemanager.grants.grants import Grant, grants_from
from devicemanager.grants.sources import Found, NodeInput
from devicemanager.model import PodFault
from devicemanager.node.isolation import GRANTS, per_pod
from devicemanager.node.pods import PodInfo


@dataclass(frozen=True, slots=True)
class Reservations:
    name: str = reservations.SOURCE
    allocated: bool = False

    def found(self, node: NodeInput) -> Found:
        pods = node.index.pods.values()
        reservers = [p for p in pods if reservations.is_reservation_pod(p)]
        if not reservers:
            return Found({})
        cards = reservations.reserved_cards(node.index)

        def of_pod(pod: PodInfo) -> tuple[Grant, ...]:
            if reservations.is_reservation_pod(pod):
                return grants_from(pod, reservations.reservation_allocations(pod))
            return grants_from(pod, reservations.tenant_allocations(pod, cards))

        faults: dict[str, PodFault] = {}
        reserving = {p.uid for p in reservers}
        speaking = [p for p in pods if p.uid in reserving or reservations.is_fractional(p)]
        done = per_pod(speaking, lambda p: p.uid, of_pod, GRANTS, faults)
        # A pod whose group no reservation pod here named yet says nothing: the kubelet's word
        # (none, for a fractional pod) stands.
        return Found({pod.uid: grants for pod, grants in done if grants}, faults)
