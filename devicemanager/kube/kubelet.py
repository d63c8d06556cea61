"""Pod CPU, memory and storage as the kubelet measures them (R-F5), and metrics.k8s.io as the
fallback for CPU and memory.

Two ways to the kubelet's /stats/summary:

- The agent reads its own node's kubelet directly on the kubelet's secure port (10250), with
  the service account's token (`KubeletClient`). The kubelet authorizes that as `get` on
  `nodes/stats`, which is all the agent is granted; the alternative, the API server's node
  proxy, needs `nodes/proxy`, which also allows exec into any container of the node. The
  kubelet's serving certificate is verified against the cluster CA (it is signed by it when
  the kubelet bootstraps its serving certificate, `serverTLSBootstrap: true`); where kubelets
  serve self-signed certificates, `--kubelet-insecure-tls` skips that check, as metrics-server's
  flag of the same name does. `SummaryPoller` reads it on a thread of its own with its own
  deadline, beside the monitor rounds, which only take the latest answer and its age: a hung
  kubelet never delays a round.
- The per-Instance sampler, which runs off the node, reads any node's summary through the API
  server's node proxy (`KubeClient.stats_summary`), cached per node for a freshness bound, with
  concurrent readers of one node sharing a single in-flight read (`kube.cache.SharedCache`).
"""

from __future__ import annotations

import json
import logging
import math
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from devicemanager.figures.figures import PodUsage
from devicemanager.grants.quantity import parse_quantity
from devicemanager.kube.http import Http, HttpError
from devicemanager.model import MIB, as_number, mib_from_bytes

log = logging.getLogger("devicemanager.kube.kubelet")

PodKey = tuple[str, str, str]  # namespace, name, uid

KUBELET_PORT = 10250
# A summary is a few KiB per pod; 250 pods with their containers and volumes stay near 1 MiB.
MAX_SUMMARY_BYTES = 32 << 20


_SECTIONS = ("cpu", "memory", "ephemeral-storage")


def _section(pod: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = pod.get(key)
    return value if isinstance(value, Mapping) else {}


def _pod_ref(pod: Any) -> Mapping[str, Any] | None:
    """An entry's `podRef` when it names a pod (namespace, name and uid as strings), else None."""
    ref = pod.get("podRef") if isinstance(pod, Mapping) else None
    if not isinstance(ref, Mapping):
        return None
    return ref if all(isinstance(ref.get(k), str) for k in ("namespace", "name", "uid")) else None


def summary_error(summary: Any) -> str | None:
    """Why an answer is no summary the agent can use, or None when it is one: an object whose
    `pods` is a list, with every pod entry naming its pod. An answer of another shape (a proxy's
    page, another API's object) is a failed read, never a summary of a node with no pods."""
    if not isinstance(summary, Mapping):
        return "the answer is not a summary (not a JSON object)"
    pods = summary.get("pods")
    if not isinstance(pods, list):
        return "the answer is not a summary (no list of pods)"
    unnamed = sum(1 for pod in pods if _pod_ref(pod) is None)
    if unnamed:
        return f"the summary has {unnamed} of {len(pods)} pod entries naming no pod"
    # A section the kubelet has not measured yet is absent; one that is there is an object.
    shapeless = sum(
        1 for pod in pods if any(k in pod and not isinstance(pod[k], Mapping) for k in _SECTIONS)
    )
    if shapeless:
        return f"the summary has {shapeless} of {len(pods)} pod entries with a figure not an object"
    return None


def usage_from_summary(summary: Any) -> dict[PodKey, PodUsage]:
    """Per pod: CPU usageNanoCores in millicores, memory working set, and storage as the
    pod-level ephemeral aggregate the kubelet evicts on (writable layers, logs, emptyDir).
    Raises ValueError for an answer that is no summary (`summary_error`): its figures are not
    used, and the read is not a success."""
    error = summary_error(summary)
    if error is not None:
        raise ValueError(error)
    out: dict[PodKey, PodUsage] = {}
    for pod in summary["pods"]:
        ref = _pod_ref(pod)
        assert ref is not None  # summary_error said every entry names its pod
        cpu, memory, storage = (_section(pod, k) for k in _SECTIONS)
        nano = as_number(cpu.get("usageNanoCores"))
        key = (ref["namespace"], ref["name"], ref["uid"])
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


class KubeletError(Exception):
    """The kubelet did not answer with a summary; the message says what went wrong."""


def kubelet_tls(ca_file: Path | None, insecure: bool) -> ssl.SSLContext | bool:
    """How the kubelet's serving certificate is checked: against `ca_file` (the cluster CA), or
    not at all when `insecure` (a kubelet with a self-signed certificate)."""
    if insecure:
        return False
    context = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


class KubeletClient:
    """The node's own kubelet: `GET https://<host>:10250/stats/summary` with a bearer token."""

    def __init__(
        self,
        host: str,
        token: Callable[[], str | None],
        *,
        port: int = KUBELET_PORT,
        verify: ssl.SSLContext | bool = True,
        timeout: float = 5.0,
    ) -> None:
        bracketed = f"[{host}]" if ":" in host and not host.startswith("[") else host
        self.url = f"https://{bracketed}:{port}/stats/summary"
        self._token = token
        self.verify_tls = verify is not False
        self.timeout = timeout
        if verify is False:
            tls = ssl.create_default_context()
            tls.check_hostname = False
            tls.verify_mode = ssl.CERT_NONE
        else:
            tls = verify if isinstance(verify, ssl.SSLContext) else ssl.create_default_context()
        self._http = Http(f"https://{bracketed}:{port}", tls, timeout)

    def close(self) -> None:
        self._http.close()

    def summary(self) -> Any:
        """The summary, within `timeout` for the whole answer (the client's own timeouts are
        per operation, so a kubelet that drips a byte at a time would otherwise never time out)."""
        started = time.monotonic()
        token = self._token()
        headers = {"Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        try:
            with self._http.stream("GET", "/stats/summary", headers=headers) as response:
                if response.status_code != 200:
                    text = response.read(200)[:200].decode("utf-8", "replace")
                    raise KubeletError(f"{self.url}: {response.status_code} {text.strip()}")
                body = bytearray()
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > MAX_SUMMARY_BYTES:
                        raise KubeletError(f"{self.url}: the summary is over {MAX_SUMMARY_BYTES}")
                    if time.monotonic() - started > self.timeout:
                        raise KubeletError(f"{self.url}: no whole answer in {self.timeout}s")
        except HttpError as exc:
            cause = _certificate_error(exc)
            if cause is not None and self.verify_tls:
                raise KubeletError(
                    f"{self.url}: the kubelet's serving certificate is not signed by the cluster "
                    f"CA ({cause.verify_message}); enable serverTLSBootstrap on the kubelets, or "
                    "pass --kubelet-insecure-tls"
                ) from exc
            raise KubeletError(f"{self.url}: {exc}") from exc
        try:
            summary = json.loads(body)
        except ValueError as exc:
            raise KubeletError(f"{self.url}: the answer is not JSON") from exc
        error = summary_error(summary)
        if error is not None:
            raise KubeletError(f"{self.url}: {error}")
        return summary


def _certificate_error(exc: BaseException) -> ssl.SSLCertVerificationError | None:
    seen: BaseException | None = exc
    for _ in range(8):  # HttpError wraps ssl's
        if seen is None:
            return None
        if isinstance(seen, ssl.SSLCertVerificationError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


@dataclass(frozen=True, slots=True)
class Reading:
    """The newest summary read, and when; or why the newest attempt failed."""

    summary: Any = None
    read_at: float | None = None  # monotonic time the summary was read
    duration: float | None = None  # how long that read took
    error: str | None = None  # the last attempt's failure, None when it succeeded


class SummaryPoller:
    """Reads the kubelet summary every `interval` seconds on a thread of its own.

    The fetch carries its own deadline (the client's timeout); a round never calls it, only
    `latest()`, which returns at once. One read at a time: a kubelet that hangs past the
    deadline costs this thread, never a round, and the next read starts when it returns.
    """

    def __init__(
        self,
        fetch: Callable[[], Any],
        interval: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fetch, self.interval, self._clock = fetch, interval, clock
        self._lock = threading.Lock()
        self._latest = Reading()
        self._asked_at: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.reads = 0

    def latest(self) -> Reading:
        """The newest reading. Non-blocking; reads go on while someone keeps asking."""
        self._asked_at = self._clock()
        with self._lock:
            return self._latest

    def read_once(self) -> Reading:
        started = self._clock()
        self.reads += 1
        try:
            summary = self._fetch()
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            with self._lock:
                self._latest = Reading(
                    self._latest.summary, self._latest.read_at, self._latest.duration, error
                )
                return self._latest
        done = self._clock()
        with self._lock:
            self._latest = Reading(summary, done, round(done - started, 6), None)
            return self._latest

    def _loop(self) -> None:
        # Reads happen while rounds ask (only the exporting agent's do): an agent that does not
        # export never calls the kubelet, and one that stops exporting stops calling it.
        while not self._stop.is_set():
            asked = self._asked_at
            if asked is None or self._clock() - asked > 2 * self.interval + 1:
                self._stop.wait(min(0.5, self.interval))
                continue
            started = self._clock()
            self.read_once()
            self._stop.wait(max(0.0, self.interval - (self._clock() - started)))

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="kubelet-summary", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
