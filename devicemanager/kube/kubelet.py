"""Pod CPU, memory and storage as the kubelet measures them (R-F5), and metrics.k8s.io as the
fallback for CPU and memory.

The kubelet's /stats/summary is read through the API server's node proxy: no kubelet TLS or
token on our side, only `nodes/proxy` RBAC. Per node, a summary is cached for a freshness bound
and concurrent readers of one node share a single in-flight read, so a console polling many
Instances of a node costs the kubelet one request. The exporter asks with a bound of 0: it
already samples on a period, and a cache on top would serve the previous round back.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from datetime import datetime
from typing import Any

from devicemanager.figures import PodUsage
from devicemanager.model import MIB, as_number, mib_from_bytes
from devicemanager.quantity import parse_quantity

PodKey = tuple[str, str, str]  # namespace, name, uid


def _section(pod: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = pod.get(key)
    return value if isinstance(value, Mapping) else {}


def usage_from_summary(summary: Any) -> dict[PodKey, PodUsage]:
    """Per pod: CPU usageNanoCores in millicores, memory working set, and storage as the
    pod-level ephemeral aggregate the kubelet evicts on (writable layers, logs, emptyDir)."""
    out: dict[PodKey, PodUsage] = {}
    pods = summary.get("pods") if isinstance(summary, Mapping) else None
    for pod in pods if isinstance(pods, list) else ():
        if not isinstance(pod, Mapping) or not isinstance(pod.get("podRef"), Mapping):
            continue
        ref = pod["podRef"]
        cpu, memory, storage = (_section(pod, k) for k in ("cpu", "memory", "ephemeral-storage"))
        nano = as_number(cpu.get("usageNanoCores"))
        key = (str(ref.get("namespace", "")), str(ref.get("name", "")), str(ref.get("uid", "")))
        out[key] = PodUsage(
            cpu_millicores=None if nano is None else math.ceil(nano / 1e6),
            memory_mib=mib_from_bytes(as_number(memory.get("workingSetBytes"))),
            storage_mib=mib_from_bytes(as_number(storage.get("usedBytes"))),
            timestamp=cpu.get("time") if isinstance(cpu.get("time"), str) else None,
            source="kubelet",
        )
    return out


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def usage_from_pod_metrics(doc: Any, pod_created: str | None) -> PodUsage:
    """A PodMetrics object summed over containers; no storage figure. Raises ValueError when it
    cannot be used, including an entry measured before the pod existed (a predecessor's)."""
    if not isinstance(doc, Mapping):
        raise ValueError("not a PodMetrics object")
    measured, created = _time(doc.get("timestamp")), _time(pod_created)
    if measured is not None and created is not None and measured < created:
        raise ValueError("the entry predates the pod")
    cpu = memory = None
    for container in doc.get("containers") or ():
        usage = container.get("usage") if isinstance(container, Mapping) else None
        if not isinstance(usage, Mapping):
            continue
        if isinstance(usage.get("cpu"), str):
            cpu = (cpu or 0) + parse_quantity(usage["cpu"]) * 1000
        if isinstance(usage.get("memory"), str):
            memory = (memory or 0) + parse_quantity(usage["memory"])
    return PodUsage(
        cpu_millicores=None if cpu is None else math.ceil(cpu),
        memory_mib=None if memory is None else math.ceil(memory / MIB),
        storage_mib=None,
        timestamp=doc.get("timestamp") if isinstance(doc.get("timestamp"), str) else None,
        source="metrics.k8s.io",
    )


class SummaryCache:
    """Per-node summaries, cached for `max_age` seconds; one read in flight per node."""

    def __init__(
        self,
        fetch: Callable[[str], Any],
        max_age: float = 15.0,
        clock: Callable[[], float] = time.monotonic,
        timeout: float = 10.0,
    ) -> None:
        self._fetch, self.max_age, self._clock, self.timeout = fetch, max_age, clock, timeout
        self._lock = threading.Lock()
        self._cached: dict[str, tuple[float, Any]] = {}
        self._inflight: dict[str, Future[Any]] = {}
        self.reads = 0

    def get(self, node: str, max_age: float | None = None) -> Any:
        bound = self.max_age if max_age is None else max_age
        with self._lock:
            hit = self._cached.get(node)
            if hit is not None and self._clock() - hit[0] <= bound and bound > 0:
                return hit[1]
            flight = self._inflight.get(node)
            leader = flight is None
            if flight is None:
                flight = self._inflight[node] = Future()
        if leader:
            # Read on its own thread with its own deadline, detached from any one caller.
            threading.Thread(target=self._read, args=(node, flight), daemon=True).start()
        return flight.result(timeout=self.timeout + 1)

    def _read(self, node: str, flight: Future[Any]) -> None:
        self.reads += 1
        try:
            value = self._fetch(node)
        except BaseException as exc:
            with self._lock:
                self._inflight.pop(node, None)
            flight.set_exception(exc)
            return
        with self._lock:
            self._cached[node] = (self._clock(), value)
            self._inflight.pop(node, None)
        flight.set_result(value)
