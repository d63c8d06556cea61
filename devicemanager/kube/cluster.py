"""The cluster's part of a monitor round: the exporter role, and the kubelet's pod figures.

Only the exporting agent of a node uses the kubelet and publishes the pod-level families. The
summary is read beside the rounds (kubelet.SummaryPoller, on its own thread with its own
deadline); a round takes the newest reading without waiting, so a slow or hung kubelet never
delays the vendor figures. The reading's age, timing and verdict are the collector's
`source="kubelet"` self-report: a failed last read, or a reading older than `max_age` (a read
hung past its deadline), sets success to 0, keeps the accelerator families and the declared
totals, and drops only the measured pod-level figures (R-E4).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

from devicemanager.figures import exposition
from devicemanager.figures.figures import pod_level
from devicemanager.grants.grants import NodeGrants
from devicemanager.kube.kubelet import Reading, usage_from_summary
from devicemanager.kube.role import Role, exporter_role
from devicemanager.model import PodFault
from devicemanager.node.pods import PodIndex

log = logging.getLogger("devicemanager.kube.cluster")


class Summaries(Protocol):
    def latest(self) -> Reading: ...


class ClusterRound:
    def __init__(
        self,
        summaries: Summaries,
        node: str,
        namespace: str | None,
        pod_name: str | None,
        max_age: float,
        mono: Callable[[], float] = time.monotonic,
    ) -> None:
        self.summaries, self.node = summaries, node
        self.namespace, self.pod_name = namespace, pod_name
        self.max_age = max_age
        self._mono = mono
        self.role: Role | None = None
        self._kubelet_ok: bool | None = None

    def _verdict(self, reading: Reading, age: float | None) -> tuple[bool, str | None]:
        if reading.error is not None:
            return False, reading.error
        if reading.summary is None or age is None:
            return False, "no summary read yet"
        if age > self.max_age:
            return False, f"the newest summary is {age:.1f}s old (a read is hung)"
        return True, None

    def round(
        self,
        index: PodIndex | None,
        grants: NodeGrants | None,
        extras: exposition.Extras,
        faults: dict[str, PodFault] | None = None,
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
        reading = self.summaries.latest()  # never waits: the read runs beside the round
        age = None if reading.read_at is None else round(self._mono() - reading.read_at, 3)
        ok, error = self._verdict(reading, age)
        usage = None
        if ok:
            try:
                usage = usage_from_summary(reading.summary)
            except Exception as exc:
                ok, error = False, f"the summary could not be read: {type(exc).__name__}: {exc}"
        if ok != self._kubelet_ok:
            # One line when it turns bad and one when it recovers, not one per round.
            log.log(
                logging.INFO if ok else logging.WARNING,
                "kubelet summary %s",
                "fresh" if ok else "unusable; measured pod-level figures are absent",
                extra={"node": self.node, "error": error, "age_seconds": age},
            )
            self._kubelet_ok = ok
        return replace(
            extras,
            exporting=True,
            kubelet_success=ok,
            kubelet_duration=reading.duration,
            kubelet_age=age,
            pod_level=pod_level(index, grants, usage, faults),
        )
