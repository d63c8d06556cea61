"""Grants from the kubelet's device-plugin allocations (R-X2): what its pod-resources answer
names for each pod's containers, through grants/deviceplugins.py's reading of each
manufacturer's plugin ids. What the kubelet allocated; the grant source of a pod without an
allocation annotation. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from devicemanager.grants.deviceplugins import allocations, match_pods
from devicemanager.grants.grants import Grant, grants_from
from devicemanager.grants.sources import Found, NodeInput
from devicemanager.model import PodFault
from devicemanager.node.isolation import GRANTS, per_pod
from devicemanager.node.pods import PodInfo


@dataclass(frozen=True, slots=True)
class DevicePlugins:
    name: str = "kubelet"
    allocated: bool = True

    def found(self, node: NodeInput) -> Found:
        answer = node.kubelet
        if answer is None or answer.pods is None:
            return Found({})
        matched = match_pods(answer.pods, node.index)

        def of_pod(pod: PodInfo) -> tuple[Grant, ...]:
            return grants_from(pod, allocations(matched[pod.uid], node.aliases))

        faults: dict[str, PodFault] = {}
        pods = [p for p in node.index.pods.values() if p.uid in matched]
        done = per_pod(pods, lambda p: p.uid, of_pod, GRANTS, faults)
        return Found({pod.uid: grants for pod, grants in done if grants}, faults)
