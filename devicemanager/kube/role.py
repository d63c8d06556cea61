"""Which agent of a node publishes the pod-level families (R-E3).

Among the Ready agent pods of this node in the agent's namespace (label
`app.kubernetes.io/component=device-manager`), the manufacturer that sorts first, read from each
pod's own `gpustack.ai/manufacturer` label, exports. No lease, no shared state: the role moves by
itself when that pod stops being Ready (a period may be published twice across two targets).
Pure: the node's pod index in, a verdict out.
"""

from __future__ import annotations

from dataclasses import dataclass

from devicemanager.node.pods import PodIndex

COMPONENT_LABEL = "app.kubernetes.io/component"
COMPONENT = "device-manager"
MANUFACTURER_LABEL = "gpustack.ai/manufacturer"


@dataclass(frozen=True, slots=True)
class Role:
    exporting: bool
    reason: str
    exporter: str | None = None  # the manufacturer that exports, if any


def exporter_role(index: PodIndex, namespace: str | None, pod_name: str | None) -> Role:
    if not namespace or not pod_name:
        return Role(False, "own pod name and namespace unknown (downward API not set)")
    me = next(
        (p for p in index.pods.values() if p.namespace == namespace and p.name == pod_name), None
    )
    if me is None:
        return Role(False, "own pod is not in the node's pod index")
    mine = me.labels.get(MANUFACTURER_LABEL)
    if not mine:
        return Role(False, f"own pod has no {MANUFACTURER_LABEL} label")
    ready = sorted(
        p.labels[MANUFACTURER_LABEL]
        for p in index.pods.values()
        if p.namespace == namespace
        and p.labels.get(COMPONENT_LABEL) == COMPONENT
        and p.labels.get(MANUFACTURER_LABEL)
        and p.ready
        and not p.terminating
    )
    if not ready:
        return Role(False, "no agent pod of this node is Ready")
    first = ready[0]
    if first == mine:
        return Role(True, "first Ready manufacturer", first)
    return Role(False, f"{first} exports for this node", first)
