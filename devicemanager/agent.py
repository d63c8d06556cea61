"""Wiring for `devicemanager serve`: backends, the monitor loop, certificates and uvicorn."""

from __future__ import annotations

import logging
import platform
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from devicemanager import __version__, logs
from devicemanager.attribution import Attributor
from devicemanager.backend import Backend, create_backend, sdk_versions
from devicemanager.config import Settings, default_node_name
from devicemanager.kube.client import KubeClient, config_from
from devicemanager.kube.cluster import ClusterRound
from devicemanager.kube.informer import PodInformer
from devicemanager.kube.kubelet import SummaryCache
from devicemanager.kube.podresources import (
    DEFAULT_SOCKET,
    PodResourcesClient,
    RecordedPodResources,
)
from devicemanager.monitor import BackendWorker, Monitor
from devicemanager.pods import PodIndex, PodsFile
from devicemanager.replay import ReplayBackend, Scenario, load_scenario
from devicemanager.serve.app import create_app
from devicemanager.serve.tls import Certificates

log = logging.getLogger("devicemanager")


@dataclass(frozen=True, slots=True)
class Node:
    """What the agent runs on: live libraries and /proc, or a recorded scenario."""

    name: str
    backends: tuple[Backend, ...]
    proc_root: Path
    pods_file: Path | None = None
    scenario: Scenario | None = None


def resolve_node(settings: Settings) -> Node:
    if settings.replay is not None:
        scenario = load_scenario(settings.replay)
        return Node(
            name=settings.node_name or scenario.node,
            backends=tuple(ReplayBackend(m, path) for m, path in scenario.vendor_files.items()),
            proc_root=settings.proc_root or scenario.proc_root,
            pods_file=settings.pods_file or scenario.pods_file,
            scenario=scenario,
        )
    return Node(
        name=settings.node_name or default_node_name(),
        backends=tuple(
            create_backend(m, settings.vendor_libraries.get(m)) for m in settings.manufacturers
        ),
        proc_root=settings.proc_root or Path("/proc"),
        pods_file=settings.pods_file,
    )


@dataclass
class Cluster:
    """The API server, when there is one: the node's pods by watch, and the kubelet."""

    client: KubeClient
    informer: PodInformer
    round: ClusterRound


def connect(settings: Settings, node: Node) -> Cluster | None:
    """In a pod, or given --kubeconfig, and not replaying a recorded node: the live cluster."""
    if node.scenario is not None or node.pods_file is not None:
        return None
    config = config_from(settings.kubeconfig, settings.service_account_dir)
    if config is None:
        log.warning(
            "no cluster configured (not in a pod, no --kubeconfig): the node's pods are "
            "unknown and per-grant figures absent"
        )
        return None
    client = KubeClient(config)
    informer = PodInformer(client, node.name)
    summaries = SummaryCache(client.stats_summary, max_age=0)
    return Cluster(
        client,
        informer,
        ClusterRound(summaries, node.name, settings.pod_namespace, settings.pod_name),
    )


def pod_resources(
    settings: Settings, node: Node, cluster: Cluster | None
) -> PodResourcesClient | RecordedPodResources | None:
    """Where the kubelet's device-plugin allocations come from (R-X2): the socket named, the
    scenario's recording in replay, the kubelet's own socket in a cluster; else nowhere."""
    choice = settings.pod_resources_socket
    if choice == "none":
        return None
    if choice:
        return PodResourcesClient(Path(choice), settings.pod_resources_timeout)
    if node.scenario is not None:
        recording = node.scenario.podresources_file
        return RecordedPodResources(recording) if recording is not None else None
    if cluster is not None:
        return PodResourcesClient(DEFAULT_SOCKET, settings.pod_resources_timeout)
    return None


def build_monitor(
    settings: Settings,
    node: Node,
    wall: Callable[[], float] = time.time,
    mono: Callable[[], float] = time.monotonic,
    cluster: Cluster | None = None,
    kubelet: PodResourcesClient | RecordedPodResources | None = None,
    build: tuple[tuple[str, str], ...] = (),
) -> Monitor:
    """The monitor `serve` runs; tests pass frozen clocks."""
    pods: Callable[[], PodIndex | None] | None = None
    if cluster is not None:
        pods = cluster.informer
    elif node.pods_file is not None:
        pods = PodsFile(node.pods_file)
    if kubelet is None:
        kubelet = pod_resources(settings, node, cluster)
    return Monitor(
        [BackendWorker(b) for b in node.backends],
        period=settings.monitor_period,
        deadline=settings.backend_timeout,
        liveness_timeout=settings.liveness_timeout,
        node=node.name,
        pods=pods,
        # A recorded /proc tree's start times are not this machine's: no recycled-PID check.
        attributor=Attributor(node.proc_root, recycled_check=node.scenario is None),
        cluster=cluster.round if cluster is not None else None,
        podresources=kubelet,
        build=build,
        wall=wall,
        mono=mono,
    )


def build_labels(node: Node) -> tuple[tuple[str, str], ...]:
    """gpustack_device_manager_build_info's labels for this agent."""
    manufacturers = [b.manufacturer for b in node.backends]
    return (
        ("version", __version__),
        ("python", platform.python_version()),
        ("sdk", ", ".join(sdk_versions(manufacturers))),
    )


def serve(settings: Settings) -> int:
    import uvicorn  # only the serving command needs the server stack

    logs.configure(settings.log_level, settings.log_format)
    node = resolve_node(settings)
    build = build_labels(node)
    # The first line says what runs: the version, and over what.
    log.info(
        "devicemanager %s starting",
        __version__,
        extra={
            **dict(build),
            "node": node.name,
            "backends": [b.manufacturer for b in node.backends],
            "replay": str(node.scenario.root) if node.scenario else None,
            "provenance": node.scenario.provenance if node.scenario else None,
        },
    )
    cluster = connect(settings, node)
    kubelet = pod_resources(settings, node, cluster)
    monitor = build_monitor(settings, node, cluster=cluster, kubelet=kubelet, build=build)
    hosts = ["localhost", "127.0.0.1", "::1", node.name, default_node_name()]
    certs = Certificates(settings.cert_dir, hosts=hosts)

    def ssl_context(
        _config: uvicorn.Config, _default: Callable[[], ssl.SSLContext]
    ) -> ssl.SSLContext:
        return certs.context()

    config = uvicorn.Config(
        create_app(monitor),
        host=settings.bind_address,
        port=settings.secure_port,
        ssl_context_factory=ssl_context,
        log_config=None,
        access_log=False,
        lifespan="off",
        timeout_keep_alive=75,  # longer than a 60 s scrape interval: one connection per scraper
    )
    log.info(
        "serving",
        extra={
            "period_seconds": settings.monitor_period,
            "address": f"https://{settings.bind_address}:{settings.secure_port}",
            "self_signed": certs.self_signed,
        },
    )
    if cluster is not None:
        cluster.informer.start()
    monitor.start()
    if settings.cert_dir is not None:
        certs.watch()
    try:
        uvicorn.Server(config).run()
    finally:
        monitor.stop()
        if kubelet is not None:
            kubelet.close()
        certs.close()
        if cluster is not None:
            cluster.informer.stop()
            cluster.client.close()
    return 0
