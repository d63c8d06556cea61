"""Grants from a pod's own allocation annotation: GPUStack's and HAMi's (grants/allocations.py).
The pod's own word, the finer one (which slice, which quota): where a pod carries one, it is the
pod's grant source, checked against what the kubelet allocated (grants/node.py). Pure, given a
pure `parse` (a RememberedGrants only remembers what `grants_of` said of the same pod object).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from devicemanager.grants.allocations import AllocationError
from devicemanager.grants.grants import MAX_GRANTS_PER_POD, Grant, annotated, grants_of
from devicemanager.grants.sources import Found, NodeInput
from devicemanager.model import PodFault
from devicemanager.node.isolation import GRANTS, per_pod
from devicemanager.node.pods import PodInfo


@dataclass(frozen=True, slots=True)
class Annotations:
    parse: Callable[[PodInfo], tuple[Grant, ...]] = grants_of
    name: str = "annotation"
    allocated: bool = False

    def found(self, node: NodeInput) -> Found:
        def of_pod(pod: PodInfo) -> tuple[Grant, ...]:
            grants = self.parse(pod)
            if len(grants) > MAX_GRANTS_PER_POD:
                raise AllocationError(
                    f"the pod's allocation annotation states {len(grants)} grants, more than"
                    f" the {MAX_GRANTS_PER_POD} one pod may hold: none of them is published"
                )
            return grants

        faults: dict[str, PodFault] = {}
        pods = [p for p in node.index.pods.values() if annotated(p)]
        done = per_pod(pods, lambda p: p.uid, of_pod, GRANTS, faults)
        return Found({pod.uid: grants for pod, grants in done}, faults)
