"""The per-Instance sample as the worker serves it (R-F7): one Instance's CPU, memory, storage
and accelerators, from the kubelet (or metrics.k8s.io), and from the Device Manager snapshot of
the node the Instance runs on. The figures are computed by figures.instance_metrics, the code
the exporter uses.

A worker samples many Instances a second, most of them on a few nodes, so what one sample reads
is shared by the next ones for a short while (`kube.cache.SharedCache`): an agent's snapshot for
`snapshot_max_age` seconds (it changes once a monitor period anyway; the snapshot's own
freshness check still applies), a namespace's pods and a node's agents for `pods_max_age`, a
node's kubelet summary for `summary_max_age`. Snapshots are fetched over one keep-alive client
per sampler, gzip-compressed by the agent: no TLS handshake per sample.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import httpx

from devicemanager.figures import slices
from devicemanager.figures.figures import InstanceMetrics, PodUsage, View, instance_metrics
from devicemanager.figures.snapshot import fresh, from_json
from devicemanager.grants.allocations import AllocationError
from devicemanager.grants.grants import Grant, grants_of, instance_of
from devicemanager.kube.cache import SharedCache
from devicemanager.kube.client import KubeClient
from devicemanager.kube.kubelet import usage_from_pod_metrics, usage_from_summary
from devicemanager.kube.role import COMPONENT, COMPONENT_LABEL, MANUFACTURER_LABEL
from devicemanager.model import Card, Identities
from devicemanager.node.pods import PodInfo, pod_info

log = logging.getLogger("instance-metrics")

SNAPSHOT_MAX_BYTES = 4 << 20  # a full slices section stays well inside this


def agent_client(timeout: float = 5.0) -> httpx.Client:
    """The keep-alive client a sampler fetches snapshots with. An agent's certificate is
    self-signed unless it was given one, so it is not verified, as the reference worker does."""
    return httpx.Client(
        verify=False,
        timeout=timeout,
        limits=httpx.Limits(max_connections=64, max_keepalive_connections=32),
    )


def fetch_snapshot(url: str, client: httpx.Client | None = None, token: str | None = None) -> Any:
    """A Device Manager's snapshot; at most 4 MiB are read, once decompressed. `token` is sent
    as a bearer token, for agents with --access-control=kubernetes."""
    headers = {"Accept-Encoding": "gzip"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    with contextlib.ExitStack() as stack:
        if client is None:
            client = stack.enter_context(agent_client())
        with client.stream("GET", url, headers=headers) as response:
            response.raise_for_status()
            chunks, size = [], 0
            for chunk in response.iter_bytes():
                chunks.append(chunk)
                size += len(chunk)
                if size > SNAPSHOT_MAX_BYTES:
                    raise ValueError(f"{url}: the snapshot is larger than 4 MiB")
    return json.loads(b"".join(chunks))


def merged_view(documents: list[Any], now: float) -> View | None:
    """One view over the snapshots of a node's agents; stale or unreadable ones say nothing."""
    cards: dict[tuple[str, str], Card] = {}
    sections = []
    manufacturers: set[str] = set()
    for doc in documents:
        try:
            snap = from_json(doc)
        except ValueError:
            continue
        if not fresh(snap, now):
            continue
        view = View.of(snap)
        cards.update(view.cards)
        manufacturers |= view.manufacturers
        if snap.slices is not None:
            sections.append(snap.slices)
    if not manufacturers:
        return None
    lookup = slices.Lookup.of(slices.merge(sections)) if sections else None
    identities = Identities()
    for manufacturer in sorted(manufacturers):
        identities = identities.updated(
            manufacturer, [c for (m, _), c in cards.items() if m == manufacturer]
        )
    return View(cards, lookup, frozenset(manufacturers), identities)


class InstanceSampler:
    def __init__(
        self,
        client: KubeClient,
        *,
        agent_namespace: str = "gpustack-system",
        agent_port: int = 32443,
        snapshot_url: str | None = None,
        summary_max_age: float = 15.0,
        snapshot_max_age: float = 2.0,
        pods_max_age: float = 2.0,
        fetch: Callable[[str], Any] | None = None,
        token: Callable[[str], str | None] | None = None,
        clock: Callable[[], float] = time.time,
        mono: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.agent_namespace, self.agent_port = agent_namespace, agent_port
        self.snapshot_url = snapshot_url
        self._http: httpx.Client | None = None
        # The bearer token for one agent's URL, or None: whom a token may be sent to is the
        # caller's to say (the command sends the pod's own only to agents it trusts).
        self._token = token
        self._fetch = fetch or self._fetch_over_keep_alive
        self._clock = clock
        self.summaries = SharedCache(client.stats_summary, max_age=summary_max_age, clock=mono)
        self.snapshots = SharedCache(self._fetch, max_age=snapshot_max_age, clock=mono)
        self.pods = SharedCache(self._list_pods, max_age=pods_max_age, clock=mono)

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
            self._http = None

    def __enter__(self) -> InstanceSampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _fetch_over_keep_alive(self, url: str) -> Any:
        if self._http is None:
            self._http = agent_client()
        return fetch_snapshot(url, self._http, self._token(url) if self._token else None)

    def _list_pods(self, key: str) -> list[PodInfo]:
        """`namespace` or `namespace?labelSelector`: the pods, read once per pods_max_age."""
        namespace, _, labels = key.partition("?")
        objects = self.client.list_namespaced_pods(namespace, labels or None)
        return [p for p in map(pod_info, objects) if p]

    def _pod(self, namespace: str, name: str) -> PodInfo | None:
        pods: list[PodInfo] = self.pods.get(namespace)
        mine = [p for p in pods if instance_of(p).name == name]
        if not mine:
            return None
        # The newest pod that is not going away; a previous incarnation only if nothing else.
        mine.sort(key=lambda p: (not p.terminating, p.created or "", p.name))
        return mine[-1]

    def _usage(self, pod: PodInfo) -> PodUsage | list[str]:
        failures = []
        try:
            summary = self.summaries.get(pod.node or "")
            usage = usage_from_summary(summary).get((pod.namespace, pod.name, pod.uid))
            if usage is not None:
                return usage
            failures.append("kubelet: the pod is not in its node's summary yet")
        except Exception as exc:
            failures.append(f"kubelet: {exc}")
        try:
            return usage_from_pod_metrics(
                self.client.pod_metrics(pod.namespace, pod.name), pod.created
            )
        except Exception as exc:
            failures.append(f"metrics.k8s.io: {exc}")
        return failures

    def _agent_urls(self, pod: PodInfo, grants: list[Grant]) -> list[str]:
        if self.snapshot_url:
            return [self.snapshot_url]
        urls = []
        for manufacturer in sorted({g.manufacturer for g in grants}):
            labels = f"{COMPONENT_LABEL}={COMPONENT},{MANUFACTURER_LABEL}={manufacturer}"
            agents = [
                a
                for a in self.pods.get(f"{self.agent_namespace}?{labels}")
                if a.node == pod.node and a.ready and a.ip
            ]
            if not agents:
                log.warning(
                    "no Ready %s Device Manager on %s: accelerators are absent",
                    manufacturer,
                    pod.node,
                    extra={"instance": pod.name, "manufacturer": manufacturer},
                )
            urls += [f"https://{a.ip}:{self.agent_port}/monitor/snapshot" for a in agents[:1]]
        return urls

    def _view(self, pod: PodInfo, grants: list[Grant]) -> View | None:
        documents = []
        for url in self._agent_urls(pod, grants):
            try:
                documents.append(self.snapshots.get(url))
            except Exception as exc:
                log.warning(
                    "Device Manager unreachable: accelerators are absent",
                    extra={"url": url, "error": str(exc)},
                )
        view = merged_view(documents, self._clock()) if documents else None
        if documents and view is None:
            log.warning("Device Manager snapshot stale (over three periods): accelerators absent")
        return view

    def sample(self, namespace: str, name: str) -> InstanceMetrics:
        """Raises LookupError for an Instance with no pod at all, InstanceMetricsUnavailable when
        something started and no source could measure it."""
        pod = self._pod(namespace, name)
        if pod is None:
            raise LookupError(f"no pod of Instance {namespace}/{name}")
        try:
            grants = list(grants_of(pod))
        except AllocationError as exc:
            log.error(
                "allocation annotation cannot be read", extra={"pod": pod.name, "error": str(exc)}
            )
            grants = []
        ref = instance_of(pod)
        if not pod.started:
            # Nothing has run: totals and zeros, and no upstream call at all.
            return instance_metrics(ref, pod, grants, None, None)
        return instance_metrics(ref, pod, grants, self._usage(pod), self._view(pod, grants))
