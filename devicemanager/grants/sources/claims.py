"""Grants from DRA claims (R-X6): the claims the kubelet's pod-resources answer names for each
pod's containers, resolved through the node's ResourceSlices (grants/dra.py). What the kubelet
allocated, as the device plugins' grants are: the two are one word (grants/node.py). Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from devicemanager.grants import dra
from devicemanager.grants.deviceplugins import match_pods
from devicemanager.grants.grants import Grant, grants_from
from devicemanager.grants.sources import Found, NodeInput
from devicemanager.model import PodFault
from devicemanager.node.isolation import GRANTS, per_pod
from devicemanager.node.pods import PodInfo


@dataclass(frozen=True, slots=True)
class Claims:
    name: str = "dra"
    allocated: bool = True

    def found(self, node: NodeInput) -> Found:
        answer = node.kubelet
        if answer is None or answer.pods is None:
            return Found({})
        matched = {uid: d for uid, d in match_pods(answer.pods, node.index).items() if d.claims}

        def of_pod(pod: PodInfo) -> tuple[Grant, ...]:
            claims = matched[pod.uid].claims
            held = dra.pod_allocations(claims, node.dra, node.aliases, pod.uid).allocations
            return grants_from(pod, held)

        faults: dict[str, PodFault] = {}
        pods = [p for p in node.index.pods.values() if p.uid in matched]
        done = per_pod(pods, lambda p: p.uid, of_pod, GRANTS, faults)
        return Found({pod.uid: grants for pod, grants in done if grants}, faults)
