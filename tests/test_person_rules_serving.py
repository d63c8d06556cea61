"""Rules of serving and of the exporter's pod figures that a person's slip would break, each with
a hand-written expectation (issue "Tests that notice the bugs a person would make"):

- route-level access control reviews a guarded route by the path the router serves: every
  disguised spelling of `/metrics` and `/monitor/snapshot` is refused, redirected to the plain
  spelling, or 404, never 200 without a valid token (R-X4);
- a connection that sends nothing has a deadline from its first moment: after the TLS
  handshake, `--http-request-timeout`; before it (no ClientHello), the handshake deadline
  (R-O1; the bounds themselves are docs/endpoints.md's and docs/configuration.md's);
- a kubelet summary older than two periods and the read deadline is not current, and a failed
  kubelet read drops only the measured pod-level families, never the accelerator families or
  the declared totals (R-E4, R-F5).

The serving tests speak HTTP/1.1 over `ssl` and `socket` by hand: an HTTP client library
normalises some spellings of a path before it sends them, and the point is what the agent does
with the bytes a client may send.
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from prometheus_client.parser import text_string_to_metric_families

from devicemanager.agent.config import parse_serve
from devicemanager.agent.monitor import BackendWorker, Monitor
from devicemanager.agent.wiring import connect, resolve_node
from devicemanager.kube.cluster import ClusterRound
from devicemanager.kube.kubelet import Reading, SummaryPoller
from devicemanager.model import VendorReading
from devicemanager.node.attribution import Attributor
from devicemanager.node.pods import PodIndex
from tests.conftest import NODES, Agent
from tests.kube_server import FakeApiServer, summary_for
from tests.test_kube import agent_pod
from tests.world import ReadingBackend, accel, card, pod

pytestmark = pytest.mark.timeout(60)

H100 = str(NODES / "h100-8gpu-mixed")
PROMETHEUS = "system:serviceaccount:monitoring:prometheus-k8s"


# -- raw HTTP/1.1 over TLS -------------------------------------------------------------------------


def _context() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    return context


def _read_all(conn: socket.socket) -> bytes:
    """Everything until the agent closes the connection (each request asks it to)."""
    data = b""
    while True:
        try:
            chunk = conn.recv(65536)
        except (ssl.SSLEOFError, ConnectionResetError):
            return data
        if not chunk:
            return data
        data += chunk


def raw_get(port: int, target: str, token: str | None = None) -> tuple[int, dict[str, str], bytes]:
    """`GET <target>` with the request line exactly as written: status, headers, body."""
    lines = [f"GET {target} HTTP/1.1", "Host: agent", "Connection: close"]
    if token is not None:
        lines.append(f"Authorization: Bearer {token}")
    with _context().wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10)) as tls:
        tls.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        answer = _read_all(tls)
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *fields = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (f.partition(":") for f in fields)}
    return int(status_line.split()[1]), headers, body


# -- 1. access control reviews the path the router serves (R-X4) ----------------------------------


@pytest.fixture
def api(tmp_path: Path) -> Iterator[FakeApiServer]:
    server = FakeApiServer(tmp_path).start()
    server.identities = {
        "prometheus-token": {"username": PROMETHEUS, "groups": ["system:serviceaccounts"]},
        "tenant-token": {"username": "alice", "groups": ["system:authenticated"]},
    }
    server.allowed = {(PROMETHEUS, "/metrics")}  # Prometheus may read /metrics, nothing else
    yield server
    server.stop()


@pytest.fixture
def guarded(api: FakeApiServer, tmp_path: Path, launch) -> Agent:  # type: ignore[no-untyped-def]
    agent: Agent = launch(
        "--replay",
        H100,
        "--monitor-period",
        "0.5",
        "--kubeconfig",
        str(api.kubeconfig(tmp_path / "kubeconfig")),
        "--access-control",
        "kubernetes",
    )
    agent.wait_for("/readyz", 200)
    return agent


# spelling -> (no token, the tenant's token, Prometheus's token: allowed /metrics only).
# 401/403 mean "reviewed as the guarded route"; 200 only with the token RBAC lets read that
# route; 307 is the router's trailing-slash redirect to the plain spelling (no content; the plain
# spelling is then reviewed); 404 is a path the router does not serve.
SPELLINGS: dict[str, tuple[int, int, int]] = {
    "/metrics": (401, 403, 200),
    "/%6detrics": (401, 403, 200),  # percent-encoded letter: the router decodes it
    "/%6Detrics": (401, 403, 200),  # upper-case hex digits
    "/%6d%65%74%72%69%63%73": (401, 403, 200),  # every letter encoded
    "/metrics?x": (401, 403, 200),  # a query string is not part of the path
    "/metrics?": (401, 403, 200),
    "/metrics#x": (401, 403, 200),  # a fragment, which no client should send, is dropped
    "https://agent/metrics": (401, 403, 200),  # absolute-form request target
    "http://elsewhere/metrics": (401, 403, 200),
    "/monitor/snapshot": (401, 403, 403),  # Prometheus may not read the snapshot
    "/monitor/%73napshot": (401, 403, 403),
    "/monitor%2Fsnapshot": (401, 403, 403),  # an encoded slash decodes to the route
    "/%6donitor/snapshot": (401, 403, 403),
    "/metrics/": (307, 307, 307),
    "/metrics%2F": (307, 307, 307),
    "/monitor/snapshot/": (307, 307, 307),
    "//metrics": (404, 404, 404),
    "/./metrics": (404, 404, 404),
    "/%2e/metrics": (404, 404, 404),
    "/x/../metrics": (404, 404, 404),
    "/metrics/.": (404, 404, 404),
    "/metrics/..": (404, 404, 404),
    "/%2Fmetrics": (404, 404, 404),
    "/%256detrics": (404, 404, 404),  # decoded once only
    "/METRICS": (404, 404, 404),  # the router is case-sensitive
    "/Metrics": (404, 404, 404),
    "/MONITOR/SNAPSHOT": (404, 404, 404),
    "/Monitor/snapshot": (404, 404, 404),
    "/monitor//snapshot": (404, 404, 404),
    "/monitor/./snapshot": (404, 404, 404),
    "/metrics;x": (404, 404, 404),
    "/metrics%00": (404, 404, 404),
    "/metrics%20": (404, 404, 404),
}


def test_every_spelling_of_a_guarded_route_is_reviewed_as_that_route(
    api: FakeApiServer, guarded: Agent
) -> None:
    """(R-X4) A guarded route is reviewed by the path the router serves, so no disguised
    spelling of /metrics or /monitor/snapshot answers 200 without a token RBAC lets read it."""
    answers = {
        spelling: [raw_get(guarded.port, spelling, t) for t in (None, "tenant-token")]
        + [raw_get(guarded.port, spelling, "prometheus-token")]
        for spelling in SPELLINGS
    }
    got = {spelling: tuple(s for s, _, _ in each) for spelling, each in answers.items()}
    assert got == SPELLINGS
    for spelling, each in answers.items():
        for status, headers, body in each:
            if status == 200:
                assert body.startswith(b"# HELP "), spelling  # the metrics themselves
                continue
            # A refusal, a redirect or a 404 carries none of the guarded content.
            assert b"gpustack_" not in body and b'"groups"' not in body, (spelling, status)
            if status == 307:
                assert urlsplit(headers["location"]).path in ("/metrics", "/monitor/snapshot")
            if status == 401:
                assert headers["www-authenticate"] == 'Bearer realm="devicemanager"'
    # Every review the API server received named a route as the router serves it, never the
    # spelling a client sent.
    paths = {
        spec["nonResourceAttributes"]["path"]
        for kind, spec in api.reviews
        if kind == "subjectaccessreview"
    }
    assert paths == {"/metrics", "/monitor/snapshot"}


# -- 2. a silent connection has a deadline from its first moment (R-O1) ----------------------------

REQUEST_TIMEOUT = 1.5  # --http-request-timeout below


@pytest.fixture
def bounded(launch) -> Agent:  # type: ignore[no-untyped-def]
    agent: Agent = launch(
        "--replay",
        H100,
        "--monitor-period",
        "0.5",
        "--http-request-timeout",
        str(REQUEST_TIMEOUT),
    )
    agent.wait_for("/readyz", 200)
    return agent


def _closed_after(conn: socket.socket, started: float) -> tuple[bytes, float]:
    """What the agent sent before closing, and the seconds from `started` to the close."""
    data = _read_all(conn)
    return data, time.monotonic() - started


def test_a_tls_connection_that_sends_nothing_is_closed_at_the_request_deadline(
    bounded: Agent,
) -> None:
    """(R-O1; docs/configuration.md --http-request-timeout: "... and a new connection to send
    one") Handshake done, not one byte sent: closed 1.5 s after connecting, with nothing said."""
    started = time.monotonic()
    raw = socket.create_connection(("127.0.0.1", bounded.port), timeout=6)
    with _context().wrap_socket(raw) as tls:
        data, took = _closed_after(tls, started)
    assert data == b""  # nothing to answer: a plain close
    assert 1.3 <= took <= 2.5, took


def test_a_first_request_is_due_within_the_deadline_of_the_connect_not_of_its_first_byte(
    bounded: Agent,
) -> None:
    """(R-O1) A client that waits 1 s before it begins a request, then never finishes it, is
    answered 408 1.5 s after it connected (a deadline armed only at the first byte would give
    it until 2.5 s)."""
    started = time.monotonic()
    raw = socket.create_connection(("127.0.0.1", bounded.port), timeout=6)
    with _context().wrap_socket(raw) as tls:
        time.sleep(1.0)
        tls.sendall(b"GET /metrics HTTP/1.1\r\nHost: agent\r\n")  # headers never end
        data, took = _closed_after(tls, started)
    assert data.startswith(b"HTTP/1.1 408 "), data[:80]
    assert 1.3 <= took <= 2.2, took


def test_a_tcp_connection_that_never_sends_a_client_hello_is_closed_at_the_handshake_deadline(
    bounded: Agent,
) -> None:
    """(R-O1; serve/http.py HANDSHAKE_TIMEOUT, 10 s, instead of asyncio's 60 s) Before the TLS
    handshake the request deadline does not apply (the connection has not reached the HTTP
    protocol yet); the handshake deadline closes it 10 s after the connect."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", bounded.port), timeout=15) as tcp:
        data, took = _closed_after(tcp, started)
    assert data == b""
    assert 9.5 <= took <= 12.5, took


# -- 3. the exporter's pod figures: stale and failed kubelet reads (R-E4, R-F5) --------------------

PERIOD = 15.0
MAX_AGE = 2 * PERIOD + 5  # docs/kubernetes.md: "older than two periods and the deadline" (5 s)

# The round's accelerator families: the card's and the Instance's grant, whatever the kubelet did.
ACCELERATOR = {
    "gpustack_accelerator_backend_up",
    "gpustack_accelerator_backend_read_duration_seconds",
    "gpustack_accelerator_info",
    "gpustack_accelerator_memory_total_mib",
    "gpustack_accelerator_memory_used_mib",
    "gpustack_accelerator_memory_utilization_percent",
    "gpustack_accelerator_cores_utilization_percent",
    "gpustack_accelerator_temperature_celsius",
    "gpustack_accelerator_power_usage_watts",
    "gpustack_accelerator_unhealthy",
    "gpustack_instance_accelerator_memory_total_mib",
    "gpustack_instance_accelerator_memory_used_mib",
    "gpustack_instance_accelerator_memory_utilization_percent",
    "gpustack_instance_accelerator_cores_utilization_percent",
    "gpustack_instance_accelerator_temperature_celsius",
    "gpustack_instance_accelerator_power_usage_watts",
    "gpustack_instance_accelerator_unhealthy",
}
# The round's own bookkeeping and the collector's self-report.
BOOKKEEPING = {
    "gpustack_accelerator_allocation_errors",
    "gpustack_accelerator_pod_errors",
    "gpustack_accelerator_grants_refused",
    "gpustack_instance_metrics_exporter",
    "gpustack_instance_metrics_collector_success",
    "gpustack_instance_metrics_collector_duration_seconds",
    "gpustack_instance_metrics_collector_age_seconds",
}
TOTALS = {
    "gpustack_instance_cpu_total_millicores",
    "gpustack_instance_memory_total_mib",
    "gpustack_instance_storage_total_mib",
}
MEASURED = {
    "gpustack_instance_cpu_used_millicores",
    "gpustack_instance_memory_used_mib",
    "gpustack_instance_storage_used_mib",
}

ME = agent_pod("nvidia")  # device-manager-nvidia-x1 in gpustack-system, Ready: the exporter
LIMITS = {"main": {"cpu": "4", "memory": "16Gi", "ephemeral-storage": "20Gi"}}
VLLM = pod("vllm-0", {"main": [accel(0, 1)]}, instance="vllm", limits=LIMITS)
INDEX = PodIndex.of([ME, VLLM])


class Latest:
    """What the poller beside the rounds hands over: one reading, set by the test."""

    def __init__(self, reading: Reading) -> None:
        self.reading = reading

    def latest(self) -> Reading:
        return self.reading


@pytest.fixture
def wired(tmp_path: Path) -> Iterator[Callable[[], ClusterRound]]:
    """The cluster round `serve` builds (wiring.connect), with the monitor period of 15 s."""
    server = FakeApiServer(tmp_path).start()
    made: list[Any] = []

    def build() -> ClusterRound:
        settings = parse_serve(
            [
                "--manufacturer",
                "tests.fakes:StaticBackend",
                "--node-name",
                "node-1",
                "--pod-namespace",
                "gpustack-system",
                "--pod-name",
                "device-manager-nvidia-x1",
                "--kubeconfig",
                str(server.kubeconfig(tmp_path / "kubeconfig")),
                "--kubelet-host",
                "127.0.0.1",
                "--monitor-period",
                str(PERIOD),
            ],
            env={},
        )
        cluster = connect(settings, resolve_node(settings))
        assert cluster is not None
        made.append(cluster)
        return cluster.round

    yield build
    for cluster in made:
        cluster.client.close()
        if cluster.kubelet_client is not None:
            cluster.kubelet_client.close()
    server.stop()


def publish_round(
    tmp: Path, cluster: ClusterRound
) -> dict[str, list[tuple[dict[str, str], float]]]:
    """One monitor round of one H100 held whole by Instance vllm, with `cluster` as its cluster
    part: /metrics as families with samples, by name."""
    reading = VendorReading("nvidia", (card(0),), (), (), "550.90.07")
    monitor = Monitor(
        [BackendWorker(ReadingBackend(reading))],
        period=PERIOD,
        deadline=5,
        liveness_timeout=60,
        node="node-1",
        pods=lambda: INDEX,
        attributor=Attributor(tmp / "proc"),
        cluster=cluster,
    )
    try:
        published = monitor.run_round()
    finally:
        monitor.stop()
    return {
        f.name: [(s.labels, s.value) for s in f.samples]
        for f in text_string_to_metric_families(published.metrics.plain.decode())
        if f.samples
    }


def by_source(series: dict[str, list[tuple[dict[str, str], float]]]) -> dict[str, float]:
    return {ls["source"]: v for ls, v in series["gpustack_instance_metrics_collector_success"]}


def pod_figures(series: dict[str, list[tuple[dict[str, str], float]]]) -> dict[str, float]:
    return {
        name: value
        for name in TOTALS | MEASURED
        for labels, value in series.get(name, [])
        if labels["instance_name"] == "vllm"
    }


def test_a_kubelet_summary_older_than_two_periods_and_the_deadline_is_not_current(
    tmp_path: Path, wired: Callable[[], ClusterRound]
) -> None:
    """(R-E4, R-F5) With a 15 s period the newest summary is current up to 35 s old (two periods
    and the 5 s read deadline); one 36 s old is a hung read: its figures are not published, the
    kubelet's success is 0, and the accelerator families and declared totals stay."""
    cluster = wired()
    summary = summary_for([VLLM])  # 250m CPU, 900 MiB working set, 40 MiB storage

    cluster.summaries = Latest(Reading(summary, read_at=time.monotonic() - 34.0, duration=0.02))
    current = publish_round(tmp_path, cluster)
    assert set(current) == ACCELERATOR | BOOKKEEPING | TOTALS | MEASURED
    assert pod_figures(current) == {
        "gpustack_instance_cpu_total_millicores": 4000.0,
        "gpustack_instance_cpu_used_millicores": 250.0,
        "gpustack_instance_memory_total_mib": 16384.0,
        "gpustack_instance_memory_used_mib": 900.0,
        "gpustack_instance_storage_total_mib": 20480.0,
        "gpustack_instance_storage_used_mib": 40.0,
    }
    assert by_source(current) == {"backends": 1.0, "kubelet": 1.0, "snapshot": 1.0}

    cluster.summaries = Latest(Reading(summary, read_at=time.monotonic() - 36.0, duration=0.02))
    stale = publish_round(tmp_path, cluster)
    assert set(stale) == ACCELERATOR | BOOKKEEPING | TOTALS  # no measured pod figure at all
    assert pod_figures(stale) == {
        "gpustack_instance_cpu_total_millicores": 4000.0,
        "gpustack_instance_memory_total_mib": 16384.0,
        "gpustack_instance_storage_total_mib": 20480.0,
    }
    assert by_source(stale) == {"backends": 1.0, "kubelet": 0.0, "snapshot": 1.0}
    (age,) = stale["gpustack_instance_metrics_collector_age_seconds"]
    assert age[0] == {"source": "kubelet"} and 36.0 <= age[1] < 40.0
    # The accelerator figures are the round's own, kubelet or not.
    assert [v for _, v in stale["gpustack_accelerator_memory_used_mib"]] == [1000.0]
    assert [v for _, v in stale["gpustack_instance_accelerator_memory_used_mib"]] == [1000.0]


def test_a_failed_kubelet_read_drops_only_the_measured_pod_families(
    tmp_path: Path, wired: Callable[[], ClusterRound]
) -> None:
    """(R-E4) Read, fail, read again, a round after each: after the failure the measured
    pod-level families are gone (never the previous read's figures carried forward), the
    accelerator families and the declared totals are all there; after the recovery the new
    read's figures, not the old."""
    answers: list[Any] = [
        summary_for([VLLM], cpu_nano=250_000_000),
        RuntimeError("kubelet answered 503"),
        summary_for([VLLM], cpu_nano=1_500_000_000, working_set=2048 * 1048576),
    ]

    def fetch() -> Any:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    poller = SummaryPoller(fetch, interval=PERIOD)
    cluster = wired()
    cluster.summaries = poller

    poller.read_once()
    first = publish_round(tmp_path, cluster)
    assert set(first) == ACCELERATOR | BOOKKEEPING | TOTALS | MEASURED
    assert pod_figures(first)["gpustack_instance_cpu_used_millicores"] == 250.0

    poller.read_once()  # fails
    failed = publish_round(tmp_path, cluster)
    assert set(failed) == ACCELERATOR | BOOKKEEPING | TOTALS
    assert set(failed) & MEASURED == set()
    assert pod_figures(failed) == {
        "gpustack_instance_cpu_total_millicores": 4000.0,
        "gpustack_instance_memory_total_mib": 16384.0,
        "gpustack_instance_storage_total_mib": 20480.0,
    }
    assert by_source(failed) == {"backends": 1.0, "kubelet": 0.0, "snapshot": 1.0}
    for family in ACCELERATOR:  # every accelerator series of the round, as before the failure
        assert [ls for ls, _ in failed[family]] == [ls for ls, _ in first[family]], family
        if not family.endswith("_seconds"):  # a read's duration is the one figure that moves
            assert failed[family] == first[family], family

    poller.read_once()  # answers again, with other figures
    again = publish_round(tmp_path, cluster)
    assert set(again) == ACCELERATOR | BOOKKEEPING | TOTALS | MEASURED
    assert pod_figures(again) == {
        "gpustack_instance_cpu_total_millicores": 4000.0,
        "gpustack_instance_cpu_used_millicores": 1500.0,
        "gpustack_instance_memory_total_mib": 16384.0,
        "gpustack_instance_memory_used_mib": 2048.0,
        "gpustack_instance_storage_total_mib": 20480.0,
        "gpustack_instance_storage_used_mib": 40.0,
    }
    assert by_source(again) == {"backends": 1.0, "kubelet": 1.0, "snapshot": 1.0}
