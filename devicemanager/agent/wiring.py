"""Wiring for `devicemanager serve`: backends, the monitor loop, the cluster's readers,
certificates, access control and the bounded HTTP server, and how it all stops.

Start: what cannot work is refused before anything starts (`check_start`), naming the flag.

Signals (`Signals`, installed for the whole life of `serve`): SIGTERM and SIGINT stop the
server, which stops accepting, closes idle keep-alive connections at once and gives requests
in flight `--shutdown-timeout` seconds; then the monitor stops, every backend's library is
closed on its own thread, the cluster's readers stop, the self-signed key material is removed,
and `serve` returns 0: a clean stop is not a failure, so the process exits 0 (uvicorn's own
handling would re-raise the signal and end the process killed by it). SIGHUP, which would end
the process at once by default, never stops the agent: it re-reads the `--cert-dir` pair at
once (the one thing a reload can mean here; flags are read once) and logs what it did.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import platform
import resource
import signal
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import anyio
import uvicorn

from devicemanager import __version__
from devicemanager.agent import logs
from devicemanager.agent.config import Settings, default_node_name, serving_hosts
from devicemanager.agent.monitor import BackendWorker, BusWatch, Monitor
from devicemanager.agent.replay import ReplayBackend, Scenario, load_scenario
from devicemanager.agent.selfmetrics import SelfMetrics
from devicemanager.backend import Backend, create_backend, sdk_versions
from devicemanager.node.attribution import Attributor
from devicemanager.node.pods import PodIndex, PodsFile
from devicemanager.round.steps import Output
from devicemanager.serve import CERT_FILE, KEY_FILE
from devicemanager.serve.access import Reviewer
from devicemanager.serve.app import Routes, create_app
from devicemanager.serve.counters import HttpCounters
from devicemanager.serve.http import Limits, protocol_for
from devicemanager.serve.tls import Certificates, Minting, server_context, why_refused

if TYPE_CHECKING:
    from devicemanager.kube.client import KubeClient
    from devicemanager.kube.cluster import ClusterRound
    from devicemanager.kube.config import KubeConfig
    from devicemanager.kube.dra import DraSource, RecordedDra
    from devicemanager.kube.events import EventWriter
    from devicemanager.kube.informer import PodInformer
    from devicemanager.kube.kubelet import KubeletClient, Reading, SummaryPoller
    from devicemanager.kube.podresources import PodResourcesPoller, RecordedPodResources

# The cluster's clients (kube/client.py over kube/http.py, kube/podresources.py over
# kube/h2grpc.py) are imported where the path that needs them starts (`connect`,
# `pod_resources`, `access_reviewer`): a replayed node or one without a cluster starts without
# them. None is ever imported on the scrape path.

log = logging.getLogger("devicemanager")

SWITCH_INTERVAL = 0.0002  # seconds; see serve()


def settle_interpreter() -> None:
    """What the process does once before its first round, so that rounds and scrapes share the
    interpreter well (bench/round.py and bench/scrape.py measure it as `serve` runs it)."""
    # The round and the server share one interpreter lock. A thread that wants it back waits
    # up to the switch interval (5 ms by default) each time, and a scrape needs it several
    # times while a round runs; 0.2 ms shortens each wait (bench/scrape.py).
    sys.setswitchinterval(SWITCH_INTERVAL)
    # Everything imported and built so far lives as long as the process: out of the cyclic
    # collector's sight, whose full passes over it took 30 ms with the lock held (a scrape's
    # p99 during rounds), 0.5 ms after (docs/performance.md).
    # `serve` starts with the collector off (cli._cmd_serve). A full pass here would take 15
    # to 25 ms to free 54 KB (the classes `dataclass(slots=True)` replaced): frozen as it is,
    # as the gc module's documentation advises, then collected as usual (tests/test_start.py).
    gc.freeze()
    gc.enable()


@dataclass(frozen=True, slots=True)
class Node:
    """What the agent runs on: live libraries and /proc, or a recorded scenario."""

    name: str
    backends: tuple[Backend, ...]
    proc_root: Path
    pods_file: Path | None = None
    scenario: Scenario | None = None
    sysfs_root: Path | None = None  # whose PCI bus the lost-card rule reads; None: not read


def check_start(settings: Settings) -> None:
    """What cannot work, refused before anything starts with the flag named (ValueError, which
    `serve` reports as a usage error, exit 2): a --proc-root or --pods-file that is not there,
    a --cert-dir without a readable pair that loads. --manufacturer beside --replay is checked
    against the scenario in `resolve_node`."""
    if settings.proc_root is not None and not settings.proc_root.is_dir():
        raise ValueError(f"--proc-root: {settings.proc_root} is not a directory")
    if settings.pods_file is not None:
        if not settings.pods_file.is_file():
            raise ValueError(f"--pods-file: {settings.pods_file} is not a file")
        _readable("--pods-file", settings.pods_file)
    if settings.cert_dir is not None:
        check_cert_dir(settings.cert_dir)


def _readable(flag: str, path: Path) -> None:
    try:
        with path.open("rb") as f:
            f.read(1)
    except OSError as exc:
        raise ValueError(f"{flag}: {path} cannot be read: {exc.strerror or exc}") from None


def check_cert_dir(cert_dir: Path) -> None:
    """--cert-dir holds tls.crt and tls.key, both readable, and they load as a pair."""
    for name in (CERT_FILE, KEY_FILE):
        path = cert_dir / name
        if not path.is_file():
            raise ValueError(
                f"--cert-dir: {cert_dir} has no {name} (it needs {CERT_FILE} and {KEY_FILE})"
            )
        _readable("--cert-dir", path)
    cert, key = cert_dir / CERT_FILE, cert_dir / KEY_FILE
    try:
        server_context(cert, key)
    except (OSError, ssl.SSLError):
        raise ValueError(f"--cert-dir: {cert_dir}: {why_refused(cert, key)}") from None


def resolve_node(settings: Settings) -> Node:
    if settings.replay is not None:
        scenario = load_scenario(settings.replay)
        recorded = sorted(scenario.vendor_files)
        if settings.manufacturers_given and sorted(set(settings.manufacturers)) != recorded:
            raise ValueError(
                f"--manufacturer: {','.join(settings.manufacturers)} beside --replay, but the "
                f"scenario {scenario.root.name} records {','.join(recorded)}; give those or "
                "leave --manufacturer out"
            )
        return Node(
            name=settings.node_name or scenario.node,
            backends=tuple(ReplayBackend(m, path) for m, path in scenario.vendor_files.items()),
            proc_root=settings.proc_root or scenario.proc_root,
            pods_file=settings.pods_file or scenario.pods_file,
            scenario=scenario,
            sysfs_root=settings.sysfs_root or scenario.sys_root,
        )
    return Node(
        name=settings.node_name or default_node_name(),
        backends=tuple(
            create_backend(m, settings.vendor_libraries.get(m)) for m in settings.manufacturers
        ),
        proc_root=settings.proc_root or Path("/proc"),
        pods_file=settings.pods_file,
        sysfs_root=settings.sysfs_root or Path("/sys"),
    )


KUBELET_TIMEOUT = 5.0


@dataclass
class Cluster:
    """The API server, when there is one: the node's pods by watch, and the kubelet."""

    client: KubeClient
    informer: PodInformer
    round: ClusterRound
    kubelet: SummaryPoller | None = None
    kubelet_client: KubeletClient | None = None
    dra: DraSource | None = None  # the node's ResourceSlices and its pods' claims (R-X6)


class _NoKubelet:
    """Stands in for the kubelet reader when its address is unknown: always a missing answer."""

    def __init__(self, why: str) -> None:
        from devicemanager.kube.kubelet import Reading

        self._reading = Reading(error=why)

    def latest(self) -> Reading:
        return self._reading


def kubelet_client(settings: Settings, config: KubeConfig) -> KubeletClient | None:
    """The node's kubelet on its secure port, with this agent's own credentials: the token
    (re-read each time, the kubelet rotates it) and the cluster CA of its configuration."""
    if not settings.kubelet_host:
        return None
    from devicemanager.kube.kubelet import KubeletClient, kubelet_tls

    single = config.get()
    user = single.user if single is not None else None
    token_file = user.token_file if user is not None else None
    static = user.token if user is not None else None

    def token() -> str | None:
        if token_file:
            try:
                return Path(token_file).read_text().strip()
            except OSError:
                return static
        return static

    ca = settings.kubelet_ca
    if ca is None and single is not None and single.cluster.certificate_auth:
        ca = Path(single.abs_file(single.cluster.certificate_auth))
    return KubeletClient(
        settings.kubelet_host,
        token,
        port=settings.kubelet_port,
        verify=kubelet_tls(ca, settings.kubelet_insecure_tls),
        timeout=KUBELET_TIMEOUT,
    )


def connect(settings: Settings, node: Node) -> Cluster | None:
    """In a pod, or given --kubeconfig, and not replaying a recorded node: the live cluster."""
    if node.scenario is not None or node.pods_file is not None:
        return None
    from devicemanager.kube.client import KubeClient, config_from
    from devicemanager.kube.cluster import ClusterRound
    from devicemanager.kube.dra import DraSource
    from devicemanager.kube.informer import PodInformer
    from devicemanager.kube.kubelet import SummaryPoller

    config = config_from(settings.kubeconfig, settings.service_account_dir)
    if config is None:
        log.warning(
            "no cluster configured (not in a pod, no --kubeconfig): the node's pods are "
            "unknown and per-grant figures absent"
        )
        return None
    client = KubeClient(config)
    informer = PodInformer(client, node.name)
    kubelet = kubelet_client(settings, config)
    poller = (
        SummaryPoller(kubelet.summary, interval=settings.monitor_period)
        if kubelet is not None
        else None
    )
    summaries = poller or _NoKubelet(
        "the kubelet's address is unknown: set --kubelet-host (status.hostIP)"
    )
    # A reading older than two periods and a read deadline means a read is hung: stale.
    max_age = 2 * settings.monitor_period + KUBELET_TIMEOUT
    return Cluster(
        client,
        informer,
        ClusterRound(summaries, node.name, settings.pod_namespace, settings.pod_name, max_age),
        poller,
        kubelet,
        DraSource(client, node.name),
    )


def pod_resources(
    settings: Settings, node: Node, cluster: Cluster | None
) -> PodResourcesPoller | RecordedPodResources | None:
    """Where the kubelet's device-plugin allocations come from (R-X2): the socket named, the
    scenario's recording in replay, the kubelet's own socket in a cluster; else nowhere. A
    socket is read beside the rounds, every period, so a round never waits on the kubelet."""
    choice = settings.pod_resources_socket
    if choice == "none":
        return None
    if node.scenario is not None and not choice:
        recording = node.scenario.podresources_file
        if recording is None:
            return None
        from devicemanager.kube.podresources import RecordedPodResources

        return RecordedPodResources(recording)
    if not choice and cluster is None:
        return None
    from devicemanager.kube.podresources import (
        DEFAULT_SOCKET,
        PodResourcesClient,
        PodResourcesPoller,
    )

    socket = Path(choice) if choice else DEFAULT_SOCKET
    return PodResourcesPoller(
        PodResourcesClient(socket, settings.pod_resources_timeout), settings.monitor_period
    )


def access_reviewer(
    settings: Settings, counters: HttpCounters | None = None
) -> tuple[Reviewer, KubeClient] | None:
    """The reviewer of bearer tokens for --access-control=kubernetes, with a client of its own
    (so a pod watch never queues behind a review, or the reverse). Refuses to start without a
    cluster to ask: failing closed starts with configuration."""
    if settings.access_control == "off":
        return None
    from devicemanager.kube.client import KubeClient, config_from

    config = config_from(settings.kubeconfig, settings.service_account_dir)
    if config is None:
        raise SystemExit(
            "--access-control=kubernetes needs the API server: run in a pod or give --kubeconfig"
        )
    client = KubeClient(config, timeout=KUBELET_TIMEOUT)
    reviewer = Reviewer(
        client,
        ttl=settings.access_review_ttl,
        timeout=KUBELET_TIMEOUT,
        refused=counters.refuse if counters is not None else None,
    )
    return reviewer, client


def build_monitor(
    settings: Settings,
    node: Node,
    wall: Callable[[], float] = time.time,
    mono: Callable[[], float] = time.monotonic,
    cluster: Cluster | None = None,
    kubelet: PodResourcesPoller | RecordedPodResources | None = None,
    build: tuple[tuple[str, str], ...] = (),
    own: SelfMetrics | None = None,
    outputs: Sequence[Output] = (),
) -> Monitor:
    """The monitor `serve` runs; tests pass frozen clocks. Each round goes to the published
    snapshot and /metrics (the monitor's own first output), then to each of `outputs`."""
    pods: Callable[[], PodIndex | None] | None = None
    if cluster is not None:
        pods = cluster.informer
    elif node.pods_file is not None:
        pods = PodsFile(node.pods_file)
    if kubelet is None:
        kubelet = pod_resources(settings, node, cluster)
    dra: DraSource | RecordedDra | None = cluster.dra if cluster is not None else None
    skipped: Callable[[], dict[str, int]] | None = None
    if cluster is not None:
        informer, source = cluster.informer, cluster.dra

        def skipped() -> dict[str, int]:
            out = {"pods": informer.malformed}
            if source is not None:
                out["resourceslices"] = sum(r.malformed for r in source.reflectors)
            return out

    scenario = node.scenario
    if scenario is not None and scenario.slices_file is not None:
        from devicemanager.kube.dra import RecordedDra

        dra = RecordedDra(
            node.name, scenario.slices_file, scenario.claims_file, scenario.rules_file
        )
    return Monitor(
        [BackendWorker(b) for b in node.backends],
        period=settings.monitor_period,
        deadline=settings.backend_timeout,
        liveness_timeout=settings.liveness_timeout,
        node=node.name,
        pods=pods,
        # A recorded /proc tree's start times are not this machine's: no recycled-PID check.
        attributor=Attributor(
            node.proc_root,
            recycled_check=node.scenario is None,
            # A pidfd names a PID of this namespace: only where proc_root is our own /proc.
            pidfds=node.scenario is None and node.proc_root.resolve() == Path("/proc"),
        ),
        cluster=cluster.round if cluster is not None else None,
        podresources=kubelet,
        dra=dra,
        build=build,
        own=own.families if own is not None else None,
        skipped_lines=skipped,
        wall=wall,
        mono=mono,
        outputs=outputs,
        bus=BusWatch(str(node.sysfs_root), mono=mono) if node.sysfs_root is not None else None,
    )


def round_outputs(
    settings: Settings, writer: EventWriter | None, node: str | None
) -> tuple[Output, ...]:
    """What each round is handed to after the published snapshot and /metrics (the monitor's
    own first output): the Events and node condition of unhealthy cards (`Round.unhealthy`,
    each with the pods on it; R-X11), where a cluster and the node's name are known."""
    if writer is None or node is None:
        return ()
    from devicemanager.agent.acting import Acting

    return (Acting(writer, node, events=settings.events, condition=settings.node_condition),)


def event_writer(
    settings: Settings, cluster: Cluster | None, node: str | None
) -> EventWriter | None:
    """The writer of Events and the node condition, on the cluster's client (each request on a
    connection of its own, never behind the pods' watch), or None: no cluster, no node name, or
    neither asked for."""
    if cluster is None or node is None or not (settings.events or settings.node_condition):
        return None
    from devicemanager.kube.events import EventWriter

    return EventWriter(cluster.client, node)


def build_labels(node: Node) -> tuple[tuple[str, str], ...]:
    """gpustack_device_manager_build_info's labels for this agent."""
    manufacturers = [b.manufacturer for b in node.backends]
    return (
        ("version", __version__),
        ("python", platform.python_version()),
        ("sdk", ", ".join(sdk_versions(manufacturers))),
    )


@dataclass
class Stoppable:
    """What `serve` started, stopped once, in order, whichever way the server ends."""

    monitor: Monitor
    certs: Certificates | None  # None until made, which the first round does not wait for
    cluster: Cluster | None = None
    access_client: KubeClient | None = None
    podresources: PodResourcesPoller | RecordedPodResources | None = None
    events: EventWriter | None = None
    _done: threading.Event = field(default_factory=threading.Event)

    def stop(self, timeout: float) -> None:
        if self._done.is_set():
            return
        self._done.set()
        started = time.monotonic()
        if self.cluster is not None:
            self.cluster.informer.stop()
            if self.cluster.dra is not None:
                self.cluster.dra.stop()
            if self.cluster.kubelet is not None:
                self.cluster.kubelet.stop()
        closed = self.monitor.stop(timeout=timeout)
        if self.certs is not None:  # the self-signed key directory goes first after the monitor
            self.certs.close()
        if self.events is not None:  # what the last rounds saw, written before the client closes
            self.events.stop(min(timeout, 2.0))
        if self.cluster is not None:
            self.cluster.client.close()
            if self.cluster.kubelet_client is not None:
                self.cluster.kubelet_client.close()
        if self.access_client is not None:
            self.access_client.close()
        if self.podresources is not None:
            self.podresources.close()
        log.info(
            "stopped",
            extra={
                "seconds": round(time.monotonic() - started, 3),
                "backends_closed": closed,
            },
        )


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Signals:
    """The agent's signal handlers, from the start of `serve` to its end. SIGTERM and SIGINT ask
    the server to stop (or, before it runs, make it stop as soon as it does); SIGHUP calls
    `hangup` on a thread of its own, never in the handler (it logs, and may load files)."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self.server: uvicorn.Server | None = None
        self.hangup: Callable[[], None] | None = None
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signals reach the main thread only: serve() run by a test's thread
        for sig in STOP_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._stop)
        self._previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, self._hup)

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def attach(self, server: uvicorn.Server) -> None:
        self.server = server
        if self.received:  # asked to stop while starting: stop as soon as it serves
            server.should_exit = True

    def _stop(self, sig: int, frame: FrameType | None) -> None:
        self.received.append(sig)
        if self.server is not None:
            self.server.handle_exit(sig, frame)  # a second SIGINT forces the exit, as uvicorn's

    def _hup(self, sig: int, frame: FrameType | None) -> None:
        hangup = self.hangup or _no_reload
        threading.Thread(target=hangup, name="sighup", daemon=True).start()


def _no_reload() -> None:
    log.info("SIGHUP: nothing to reload; the agent goes on", extra={"signal": "SIGHUP"})


def reload_on_hangup(certs: Certificates, cert_dir: Path | None) -> Callable[[], None]:
    """What SIGHUP does: re-read the --cert-dir pair now rather than at the next check."""

    def hangup() -> None:
        if cert_dir is None:
            log.info(
                "SIGHUP: nothing to reload (self-signed certificate; flags are read once); "
                "the agent goes on",
                extra={"signal": "SIGHUP"},
            )
            return
        try:
            changed = certs.reload_if_changed()
        except Exception as exc:  # whatever the files hold, a hangup never ends the agent
            changed = False
            log.error("SIGHUP: the certificates could not be checked", extra={"error": str(exc)})
        log.info(
            "SIGHUP: certificates checked",
            extra={"signal": "SIGHUP", "cert_dir": str(cert_dir), "reloaded": changed},
        )

    return hangup


class AgentServer(uvicorn.Server):
    """uvicorn's server, whose shutdown also stops the agent (after connections were drained).
    Its signals are the agent's (`Signals`): uvicorn's own would re-raise a caught SIGTERM once
    serving has ended, ending the process killed by the signal instead of with status 0.

    Its main loop sleeps until it is asked to stop. uvicorn's polls ten times a second, to see
    `should_exit`, renew the date header and count requests against a limit: here setting
    `should_exit` wakes the loop, the protocol renews the date header when a request arrives
    (serve/http.py), and no request limit is set."""

    def __init__(
        self, config: uvicorn.Config, stoppable: Stoppable, timeout: float, signals: Signals
    ) -> None:
        self._exit_asked = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        super().__init__(config)
        self._stoppable, self._timeout = stoppable, timeout
        signals.attach(self)

    @property
    def should_exit(self) -> bool:
        return self._exit_asked

    @should_exit.setter
    def should_exit(self, value: bool) -> None:
        self._exit_asked = value
        loop, wake = self._loop, self._wake
        if value and loop is not None and wake is not None:
            # From a signal handler or another thread: wakes the loop where it sleeps.
            with contextlib.suppress(RuntimeError):  # the loop has closed: nothing to wake
                loop.call_soon_threadsafe(wake.set)

    async def main_loop(self) -> None:
        self._wake = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        while not self._exit_asked:
            await self._wake.wait()
            self._wake.clear()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # Signals routes SIGTERM and SIGINT to handle_exit; nothing is re-raised

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await super().shutdown(sockets)
        await anyio.to_thread.run_sync(self._stoppable.stop, self._timeout)


def raise_descriptor_limit() -> None:
    """The soft descriptor limit up to the hard one, as Go programs do at start: a runtime may
    hand containers a soft limit of 1,024, and the agent holds a pidfd per GPU process
    (devicemanager.node.pidfds) beside its connections."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (OSError, ValueError):
            log.debug("the descriptor limit stays at %d", soft)


def serve(settings: Settings, minting: Minting | None = None) -> int:
    """Run the agent until a stop signal. `minting`: the self-signed pair, already being minted
    (`devicemanager serve` starts it before importing this module), for the hosts it names."""
    try:
        check_start(settings)
        signals = Signals()
        signals.install()
        try:
            return _serve(settings, signals, minting)
        finally:
            signals.restore()
    finally:
        if minting is not None:
            minting.abandon()  # nothing left once the server has loaded the pair


def _serve(settings: Settings, signals: Signals, minting: Minting | None = None) -> int:
    logs.configure(settings.log_level, settings.log_format)
    node = resolve_node(settings)
    hosts = serving_hosts(node.name)
    if minting is not None:
        minting.name(hosts)  # its child has been importing cryptography meanwhile
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
    raise_descriptor_limit()
    # What the server counts (answers, refusals), read by the monitor when a round ends (R-X8).
    counters = HttpCounters()
    review = access_reviewer(settings, counters)
    cluster = connect(settings, node)
    kubelet = pod_resources(settings, node, cluster)
    writer = event_writer(settings, cluster, node.name)
    monitor = build_monitor(
        settings,
        node,
        cluster=cluster,
        kubelet=kubelet,
        build=build,
        own=SelfMetrics(counters, events=writer.counts if writer is not None else None),
        outputs=round_outputs(settings, writer, node.name),
    )
    stoppable = Stoppable(monitor, None, cluster, review[1] if review else None, kubelet, writer)
    if writer is not None:
        writer.start()
    # The first round starts as soon as what it reads is there: it runs while the rest of the
    # start (the self-signed certificate, minted by a child process; the server) goes on.
    if cluster is not None:
        cluster.informer.start()
        if cluster.dra is not None:
            cluster.dra.start()
        if cluster.kubelet is not None:
            cluster.kubelet.start()
    if kubelet is not None:
        from devicemanager.kube.podresources import PodResourcesPoller  # loaded: kubelet is one

        if isinstance(kubelet, PodResourcesPoller):
            kubelet.start()
    settle_interpreter()
    monitor.start()
    try:
        certs = stoppable.certs = Certificates(settings.cert_dir, hosts=hosts, minting=minting)
        signals.hangup = reload_on_hangup(certs, settings.cert_dir)

        def ssl_context(
            _config: uvicorn.Config, _default: Callable[[], ssl.SSLContext]
        ) -> ssl.SSLContext:
            return certs.context()

        limits = Limits(
            max_connections=settings.http_max_connections,
            request_timeout=settings.http_request_timeout,
            max_header_bytes=settings.http_max_header_bytes,
            max_headers=settings.http_max_headers,
        )
        routes = Routes(monitor, review[0] if review else None)
        protocol, _ = protocol_for(limits, routes, counters)
        config = uvicorn.Config(
            create_app(monitor, review[0] if review else None, counters),
            host=settings.bind_address,
            port=settings.secure_port,
            ssl_context_factory=ssl_context,
            http=protocol,
            ws="none",  # no WebSocket route: neither websockets nor wsproto is imported
            loop="devicemanager.serve.http:new_event_loop",
            log_config=None,
            access_log=False,
            lifespan="off",
            server_header=False,
            timeout_keep_alive=75,  # longer than a 60 s scrape interval: one per scraper
            timeout_graceful_shutdown=max(1, round(settings.shutdown_timeout)),
        )
        log.info(
            "serving",
            extra={
                "period_seconds": settings.monitor_period,
                "address": f"https://{settings.bind_address}:{settings.secure_port}",
                "self_signed": certs.self_signed,
                "access_control": settings.access_control,
                "kubelet": cluster.kubelet_client.url
                if cluster is not None and cluster.kubelet_client is not None
                else None,
            },
        )
        if settings.cert_dir is not None:
            certs.watch()
        AgentServer(config, stoppable, settings.shutdown_timeout, signals).run()
    finally:
        stoppable.stop(settings.shutdown_timeout)
        _, refused = counters.snapshot()
        if any(refused.values()):
            applied = {reason: n for reason, n in refused.items() if n}
            log.info("connection limits applied", extra={"counts": applied})
    if signals.received:
        log.info(
            "exiting after %s",
            signal.Signals(signals.received[0]).name,
            extra={"signal": signal.Signals(signals.received[0]).name, "exit_code": 0},
        )
    return 0
