"""The cluster's part of a monitor round: the exporter role, and the kubelet's pod figures.

Only the exporting agent of a node reads the kubelet, afresh each round through the API
server's node proxy, and publishes the pod-level families; its timing and verdict are the
collector's `source="kubelet"` self-report. A failed read keeps the accelerator families and the
declared totals and drops only the measured pod-level figures (R-E4).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace

from devicemanager import exposition
from devicemanager.figures import pod_level
from devicemanager.grants import NodeGrants
from devicemanager.kube.kubelet import SummaryCache, usage_from_summary
from devicemanager.kube.role import Role, exporter_role
from devicemanager.pods import PodIndex

log = logging.getLogger("devicemanager.kube.cluster")


class ClusterRound:
    def __init__(
        self,
        summaries: SummaryCache,
        node: str,
        namespace: str | None,
        pod_name: str | None,
        mono: Callable[[], float] = time.monotonic,
    ) -> None:
        self.summaries, self.node = summaries, node
        self.namespace, self.pod_name = namespace, pod_name
        self._mono = mono
        self.role: Role | None = None
        self._kubelet_ok: bool | None = None

    def round(
        self, index: PodIndex | None, grants: NodeGrants | None, extras: exposition.Extras
    ) -> exposition.Extras:
        role = (
            exporter_role(index, self.namespace, self.pod_name)
            if index is not None
            else Role(False, "the node's pods are not known yet")
        )
        if self.role is None or role.exporting != self.role.exporting:
            log.info(
                "exporter role: %s (%s)",
                "exporting" if role.exporting else "not exporting",
                role.reason,
                extra={"node": self.node, "exporter": role.exporter},
            )
        self.role = role
        if not role.exporting:
            return replace(extras, exporting=False)
        started = self._mono()
        try:
            usage = usage_from_summary(self.summaries.get(self.node, max_age=0))
            ok, error = True, None
        except Exception as exc:
            usage, ok, error = None, False, f"{type(exc).__name__}: {exc}"
        took = round(self._mono() - started, 6)
        if ok != self._kubelet_ok:
            level = logging.INFO if ok else logging.WARNING
            log.log(
                level,
                "kubelet summary %s",
                "read" if ok else "could not be read",
                extra={"node": self.node, "error": error},
            )
            self._kubelet_ok = ok
        return replace(
            extras,
            exporting=True,
            kubelet_success=ok,
            kubelet_duration=took,
            pod_level=pod_level(index, grants, usage),
        )
