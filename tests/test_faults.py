"""The fault suite of issue 10: a tenant, a client or a dependency tries to take the node's
monitoring down, each against the real agent (`devicemanager serve` in a subprocess, real TLS,
real sockets) and, where the cluster is involved, the local API server and kubelet.

Each numbered test reproduces one defect the issue found on the code before it (they fail
there) and shows it fixed. New settings are passed as environment variables, which an agent
without them ignores, so that each test fails on the old code for the defect itself, not for
an unknown flag.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import select
import signal
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import NODES, Agent
from tests.kube_server import FakeApiServer, FakeKubelet, summary_for
from tests.world import accel, pod

pytestmark = pytest.mark.timeout(120)

H100 = NODES / "h100-8gpu-mixed"
MIB = 1048576
NODE = "node-1"


def tls_socket(port: int, timeout: float = 10.0) -> ssl.SSLSocket:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    raw = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    return ctx.wrap_socket(raw)


def answer(sock: ssl.SSLSocket, timeout: float = 10.0) -> bytes:
    """Whatever the server sends before it closes or `timeout` passes."""
    sock.settimeout(timeout)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (TimeoutError, ssl.SSLError, OSError):
        pass
    return data


def livez(sock: ssl.SSLSocket) -> bytes:
    """One keep-alive request and its whole answer (the body is "ok\\n")."""
    sock.sendall(b"GET /livez HTTP/1.1\r\nHost: agent\r\n\r\n")
    sock.settimeout(5)
    data = b""
    while not data.endswith(b"ok\n"):
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def series(agent: Agent, family_prefix: str) -> set[tuple[str, tuple[tuple[str, str], ...], float]]:
    with agent.client() as client:
        text = client.get("/metrics").text
    return {
        (s.name, tuple(sorted(s.labels.items())), s.value)
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name.startswith(family_prefix)
    }


def gauge(agent: Agent, name: str) -> list[float]:
    with agent.client() as client:
        text = client.get("/metrics").text
    return [
        s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name
    ]


def wait(predicate: Any, timeout: float = 15.0, step: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(step)
    raise AssertionError("condition never held")


# -- 1. a tenant's annotation ---------------------------------------------------------------------


def poisoned_pod(annotations: dict[str, str], name: str = "poisoned") -> dict[str, Any]:
    obj = pod(name, None, containers=["main"], annotations=annotations)
    obj["metadata"]["namespace"] = "tenant-b"
    obj["spec"]["nodeName"] = "gpu-h100-07"
    return obj


def test_1_a_non_ascii_digit_in_one_annotation_touches_no_other_pod(launch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    pods = json.loads((H100 / "pods.json").read_text())
    pods_file = tmp_path / "pods.json"
    pods_file.write_text(json.dumps(pods))
    agent: Agent = launch(
        "--replay", str(H100), "--pods-file", str(pods_file), "--monitor-period", "0.3"
    )
    agent.wait_for("/readyz", 200)
    before = series(agent, "gpustack_instance_accelerator_")
    cards = series(agent, "gpustack_accelerator_memory_total_mib")
    assert before and len(cards) == 8

    # One tenant's HAMi annotation with a superscript two as its memory.
    poisoned = copy.deepcopy(pods)
    poisoned["items"].append(poisoned_pod({"hami.io/vgpu-devices-allocated": "GPU-x,NVIDIA,²,0:;"}))
    pods_file.write_text(json.dumps(poisoned))
    wait(lambda: gauge(agent, "gpustack_accelerator_allocation_errors") == [1.0])
    with agent.client() as client:
        assert client.get("/readyz").status_code == 200
        assert client.get("/livez").status_code == 200
    # Every other pod's series and every card are exactly what they were.
    assert series(agent, "gpustack_instance_accelerator_") == before
    assert series(agent, "gpustack_accelerator_memory_total_mib") == cards
    # Logged once, naming the pod, not once per round.
    time.sleep(1.0)
    lines = [line for line in agent.logs().splitlines() if "tenant-b/poisoned" in line]
    assert len(lines) == 1 and "MemMiB" in lines[0], lines


# -- 2. an unfinished, ever-growing header --------------------------------------------------------


def test_2_an_endless_header_is_431_and_costs_no_memory(launch) -> None:  # type: ignore[no-untyped-def]
    agent: Agent = launch("--replay", str(H100), "--monitor-period", "0.5")
    agent.wait_for("/readyz", 200)
    process = psutil.Process(agent.proc.pid)
    rss_before = process.memory_info().rss
    sock = tls_socket(agent.port)
    sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: agent\r\nX-Filler: ")
    sent, reply = 0, b""
    chunk = b"a" * 65536
    try:
        while sent < 64 * MIB:
            sock.sendall(chunk)
            sent += len(chunk)
            if select.select([sock], [], [], 0)[0]:
                break
    except OSError:
        pass  # the server closed the connection on us: what it said is read below
    reply = answer(sock, 5)
    sock.close()
    assert reply.startswith(b"HTTP/1.1 431"), (sent, reply[:200])
    assert sent < 8 * MIB  # refused long before the client was done
    assert process.memory_info().rss - rss_before < 24 * MIB
    with agent.client() as client:
        assert client.get("/readyz").status_code == 200


@pytest.mark.parametrize("write", (64 * 1024, 16 * 1024, 1024, 97))
def test_2_the_header_bound_holds_whatever_the_read_sizes(launch, write: int) -> None:  # type: ignore[no-untyped-def]
    """(R-O1) A whole header section of 40 KiB is 431 whether it arrives in one read or in
    many; one of 31 KiB is answered. (Counting reads alone let a section that arrived in one
    read, or ended one, through up to 64 KiB.)"""
    agent: Agent = launch("--replay", str(H100), "--monitor-period", "0.5")
    agent.wait_for("/readyz", 200)

    def status(pad: int) -> bytes:
        request = b"GET /livez HTTP/1.1\r\nHost: agent\r\nConnection: close\r\nX-Pad: "
        request += b"a" * pad + b"\r\n\r\n"
        with tls_socket(agent.port) as sock:
            for at in range(0, len(request), write):
                sock.sendall(request[at : at + write])
            return answer(sock, 3)[:12]

    assert status(40 * 1024) == b"HTTP/1.1 431"
    assert status(31 * 1024) == b"HTTP/1.1 200"


def test_2_a_client_that_pipelines_and_never_reads_costs_no_memory(launch) -> None:  # type: ignore[no-untyped-def]
    """(R-O1) Tens of thousands of pipelined GET /metrics on one connection that never reads:
    the fast path stops writing into a buffer nobody drains, the queue behind it is bounded, and
    past it the connection is aborted and counted; the agent's memory stays flat and it goes on
    answering others. (Before: every answer was written into the transport's buffer, +100 MiB
    in 8 s.)"""
    agent: Agent = launch("--replay", str(H100), "--monitor-period", "0.3")
    agent.wait_for("/readyz", 200)
    process = psutil.Process(agent.proc.pid)
    rss_before = process.memory_info().rss
    sock = tls_socket(agent.port)
    sock.setblocking(False)
    burst = b"GET /metrics HTTP/1.1\r\nHost: agent\r\n\r\n" * 1000
    sent, aborted = 0, False
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline and not aborted:
        try:
            sock.send(burst)
            sent += 1000
        except (ssl.SSLWantWriteError, ssl.SSLWantReadError, BlockingIOError):
            time.sleep(0.01)
        except OSError:
            aborted = True
    rss_after = process.memory_info().rss
    # What the connection got before it ended: a few answers, not thousands.
    sock.setblocking(True)
    sock.settimeout(2)
    received = 0
    try:
        while received < 64 * MIB and (chunk := sock.recv(65536)):
            received += len(chunk)
    except OSError:
        aborted = True
    sock.close()
    assert aborted and received < 8 * MIB, (sent, received)
    assert rss_after - rss_before < 24 * MIB
    refused = "gpustack_device_manager_http_refused_total"

    wait(lambda: (refused, (("reason", "pipelined"),), 1.0) in series(agent, refused))
    with agent.client() as client:
        assert client.get("/metrics").status_code == 200


def test_2_connections_that_never_start_tls_count_against_the_bound(launch) -> None:  # type: ignore[no-untyped-def]
    """(R-O1) 1,500 TCP connections that never send a ClientHello: each counts against
    --http-max-connections from its accept, past it the one in its handshake the longest is
    aborted (counted), so the agent holds at most the bound's worth, its memory stays flat, and
    a real client is answered meanwhile. (Before: none counted, +157 MiB for 3,000.)"""
    agent: Agent = launch("--replay", str(H100), "--monitor-period", "0.3")
    agent.wait_for("/readyz", 200)
    process = psutil.Process(agent.proc.pid)
    rss_before = process.memory_info().rss
    bare = []
    try:
        for _ in range(1500):
            bare.append(socket.create_connection(("127.0.0.1", agent.port), timeout=5))
        time.sleep(0.5)
        assert process.num_fds() < 128 + 40, process.num_fds()
        assert process.memory_info().rss - rss_before < 24 * MIB
        with agent.client() as client:
            assert client.get("/livez").status_code == 200
    finally:
        for sock in bare:
            sock.close()
    refused = "gpustack_device_manager_http_refused_total"
    shed = [v for n, labels, v in series(agent, refused) if dict(labels)["reason"] == "handshakes"]
    assert shed and shed[0] >= 1500 - 128


def test_2_too_many_header_fields_is_431(launch) -> None:  # type: ignore[no-untyped-def]
    agent: Agent = launch("--replay", str(H100), "--monitor-period", "0.5")
    agent.wait_for("/readyz", 200)
    fields = b"".join(b"X-Field-%d: 1\r\n" % i for i in range(500))
    with tls_socket(agent.port) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: agent\r\n" + fields + b"\r\n")
        assert answer(sock).startswith(b"HTTP/1.1 431")


# -- 3. half-sent requests held open --------------------------------------------------------------


class Slow:
    """Connections each holding half a request, and what the agent answers each, read as it
    arrives: `seen[i]` is the number of the poll that first saw connection i's answer, so the
    order the agent answered them in is known however long opening them took."""

    def __init__(self) -> None:
        self.socks: list[ssl.SSLSocket] = []
        self.replies: list[bytes] = []
        self.seen: list[int] = []  # 0: nothing yet
        self.open: dict[ssl.SSLSocket, int] = {}
        self.polls = 0

    def add(self, sock: ssl.SSLSocket) -> None:
        sock.setblocking(False)
        self.open[sock] = len(self.socks)
        self.socks.append(sock)
        self.replies.append(b"")
        self.seen.append(0)

    def poll(self, timeout: float = 0.0) -> None:
        self.polls += 1
        if not self.open:
            time.sleep(timeout)
            return
        ready, _, _ = select.select(list(self.open), [], [], timeout)
        for sock in ready:
            i = self.open[sock]
            while True:
                try:
                    chunk = sock.recv(65536)
                except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                    break  # a session ticket, or a record not yet whole
                except OSError:
                    chunk = b""
                if not chunk:  # closed by the agent: give its descriptor back at once
                    del self.open[sock]
                    sock.close()
                    break
                self.seen[i] = self.seen[i] or self.polls
                self.replies[i] += chunk

    def poll_for(self, seconds: float, until_closed: bool = False) -> None:
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0 and not (until_closed and not self.open):
            self.poll(min(0.05, left))

    def statuses(self) -> list[bytes]:
        return [r.split(b" ", 2)[1] if r else b"" for r in self.replies]

    def close(self) -> None:
        for sock in self.socks:
            sock.close()


def test_3_slow_clients_are_timed_out_shed_and_probes_keep_answering(launch) -> None:  # type: ignore[no-untyped-def]
    cap, deadline = 24, 3.0
    agent: Agent = launch(
        "--replay",
        str(H100),
        "--monitor-period",
        "0.5",
        env={
            "DEVICEMANAGER_HTTP_MAX_CONNECTIONS": str(cap),
            "DEVICEMANAGER_HTTP_REQUEST_TIMEOUT": str(deadline),
        },
    )
    agent.wait_for("/readyz", 200)
    process = psutil.Process(agent.proc.pid)
    fds_before = process.num_fds()
    slow = Slow()
    probes: list[int] = []
    try:
        began = time.monotonic()
        for i in range(150):
            sock = tls_socket(agent.port)
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: agent\r\n")  # and never the rest
            slow.add(sock)
            slow.poll()
            if i % 25 == 0:
                with httpx.Client(verify=False, timeout=5) as client:
                    probes.append(client.get(agent.url("/readyz")).status_code)
        with httpx.Client(verify=False, timeout=5) as client:
            probes.append(client.get(agent.url("/readyz")).status_code)
        # Every slow connection was accepted before this probe was answered: the span in which
        # they arrived, however slowly this machine opened them.
        span = time.monotonic() - began
        slow.poll_for(2.5)  # a shed TLS connection is given 2 s to acknowledge the close
        held = process.num_fds() - fds_before
        # The cap holds: the agent keeps at most `cap` of them (plus the odd one in flight).
        assert held <= cap + 8, held
        with httpx.Client(verify=False, timeout=5) as client:
            probes += [client.get(agent.url(p)).status_code for p in ("/readyz", "/livez")]
        assert probes == [200] * len(probes)
        slow.poll_for(deadline + 6, until_closed=True)
        statuses = slow.statuses()
        # Each was answered: shed with 503, or 408 at its deadline if it was still held then.
        assert set(statuses) <= {b"503", b"408"} and b"408" in statuses, statuses
        # A 408 means its connection was held for the whole deadline, so all the 408s accepted
        # within one deadline-long window were held at once: at most `cap` per window of the
        # span (just `cap` where the 150 were opened within one deadline), the rest shed.
        windows = max(1, math.ceil(span / deadline))
        timed_out = statuses.count(b"408")
        assert timed_out <= cap * windows, (timed_out, span)
        assert statuses.count(b"503") >= len(statuses) - cap * windows
        # The oldest were shed first: a connection was shed only once every older one had been
        # answered (shed, or timed out), so no older answer came after a 503.
        out_of_turn = [
            i
            for i, status in enumerate(statuses)
            if status == b"503" and max(slow.seen[: i + 1]) > slow.seen[i]
        ]
        assert not out_of_turn, (out_of_turn, slow.seen)
    finally:
        slow.close()
    # The monitor never starved: its own /proc reads and rounds went on.
    with agent.client() as client:
        doc = client.get("/monitor/snapshot").json()
    assert doc["slices"]["devices"] and not any(
        d.get("memoryReason") for d in doc["slices"]["devices"]
    )


def test_3_at_the_cap_the_longest_idle_connection_makes_room(launch) -> None:  # type: ignore[no-untyped-def]
    agent: Agent = launch(
        "--replay",
        str(H100),
        "--monitor-period",
        "0.5",
        env={"DEVICEMANAGER_HTTP_MAX_CONNECTIONS": "3"},
    )
    agent.wait_for("/readyz", 200)
    idle = []
    for _ in range(3):  # three scrapers, each keeping its connection open between scrapes
        sock = tls_socket(agent.port)
        assert livez(sock).startswith(b"HTTP/1.1 200")
        idle.append(sock)
        time.sleep(0.1)
    try:
        with httpx.Client(verify=False, timeout=5) as newcomer:
            assert newcomer.get(agent.url("/metrics")).status_code == 200
        # The oldest idle one was closed to make room; the younger ones were left alone.
        assert answer(idle[0], 2) == b""
        assert livez(idle[1]).startswith(b"HTTP/1.1 200")
    finally:
        for sock in idle:
            sock.close()


# -- 4. a hung kubelet ----------------------------------------------------------------------------


@pytest.fixture
def api(tmp_path: Path) -> Iterator[FakeApiServer]:
    (tmp_path / "api").mkdir()
    server = FakeApiServer(tmp_path / "api").start()
    yield server
    server.stop()


def agent_pod() -> dict[str, Any]:
    obj = pod("device-manager-fake-x1", None, containers=["device-manager"])
    obj["metadata"]["namespace"] = "gpustack-system"
    obj["metadata"]["labels"].update(
        {"app.kubernetes.io/component": "device-manager", "gpustack.ai/manufacturer": "fake"}
    )
    obj["spec"]["nodeName"] = NODE
    obj["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    return obj


def instance_pod() -> dict[str, Any]:
    obj = pod(
        "vllm-0",
        {"main": [accel(0, 1)]},
        instance="vllm",
        limits={"main": {"cpu": "4", "memory": "16Gi"}},
    )
    obj["spec"]["nodeName"] = NODE
    return obj


def in_cluster(api: FakeApiServer, tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of an agent pod: service account, downward API, the API server."""
    account = api.service_account(tmp_path / "sa")
    return {
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(api.port),
        "DEVICEMANAGER_SERVICE_ACCOUNT_DIR": str(account),
        "KUBERNETES_NODE_NAME": NODE,
        "KUBERNETES_POD_NAME": "device-manager-fake-x1",
        "KUBERNETES_POD_NAMESPACE": "gpustack-system",
        **extra,
    }


def test_4_a_hung_kubelet_never_delays_a_round(api: FakeApiServer, tmp_path: Path, launch) -> None:  # type: ignore[no-untyped-def]
    api.add(agent_pod())
    api.add(instance_pod())
    kubelet = FakeKubelet(tmp_path / "kubelet", set(api.tokens), ca=api.authority).start()
    try:
        kubelet.summary = summary_for([instance_pod()])
        # Hung both ways the agent might reach it: on its own port and through the API server.
        api.summaries[NODE] = summary_for([instance_pod()])
        kubelet.delay = api.delays["summary"] = 30.0
        period = 0.5
        agent: Agent = launch(
            "--manufacturer",
            "tests.fakes:StaticBackend",
            "--monitor-period",
            str(period),
            env=in_cluster(
                api,
                tmp_path,
                KUBERNETES_HOST_IP="127.0.0.1",
                DEVICEMANAGER_KUBELET_PORT=str(kubelet.port),
            ),
        )
        agent.wait_for("/readyz", 200)
        stamps: list[str] = []
        seen_at: list[float] = []
        deadline = time.monotonic() + 5
        with agent.client() as client:
            while time.monotonic() < deadline:
                stamp = client.get("/monitor/snapshot").json()["timestamp"]
                if not stamps or stamp != stamps[-1]:
                    stamps.append(stamp)
                    seen_at.append(time.monotonic())
                assert client.get("/readyz").status_code == 200
                time.sleep(0.05)
        gaps = [b - a for a, b in itertools.pairwise(seen_at)]
        assert len(stamps) >= 7 and max(gaps) < 3 * period, (len(stamps), gaps)
        # The card figures are published on time, and the kubelet's absence is reported.
        assert gauge(agent, "gpustack_accelerator_memory_total_mib") == [1024.0]
        with agent.client() as client:
            text = client.get("/metrics").text
        assert 'gpustack_instance_metrics_collector_success{source="kubelet"} 0.0' in text
        assert any(
            line.startswith("gpustack_instance_cpu_total_millicores{")
            and 'instance_name="vllm"' in line
            for line in text.splitlines()
        )
        assert "gpustack_instance_cpu_used_millicores{" not in text
    finally:
        kubelet.stop()


# -- 5. a watch that answers 410 every time -------------------------------------------------------


def test_5_repeated_410s_are_backed_off(api: FakeApiServer, tmp_path: Path, launch) -> None:  # type: ignore[no-untyped-def]
    api.add(agent_pod())
    api.compacted = 10**12  # every watch, from any version, is too old: 410
    agent: Agent = launch(
        "--manufacturer",
        "tests.fakes:StaticBackend",
        "--monitor-period",
        "0.5",
        env=in_cluster(api, tmp_path),
    )
    agent.wait_for("/readyz", 200)
    wait(lambda: api.count("list") >= 1)
    started, lists = time.monotonic(), api.count("list")
    time.sleep(6)
    rate = (api.count("list") - lists) / (time.monotonic() - started)
    assert rate < 1.5, f"{rate:.1f} lists a second"  # capped exponential backoff with jitter
    assert api.count("list") >= 3  # and it does keep trying
    # The index from the lists still serves: the agent knows its own pod.
    assert gauge(agent, "gpustack_instance_metrics_exporter") == [1.0]


# -- 6. NaN and Infinity from a vendor ------------------------------------------------------------


def test_6_non_finite_vendor_figures_are_absent_not_a_failed_round(launch) -> None:  # type: ignore[no-untyped-def]
    agent: Agent = launch("--manufacturer", "tests.fakes:NanBackend", "--monitor-period", "0.3")
    agent.wait_for("/readyz", 200)
    with agent.client() as client:
        doc = client.get("/monitor/snapshot").json()
        text = client.get("/metrics").text
    (card,) = doc["groups"][0]["accelerators"]
    assert card["coresUtilization"] is None and card["temperature"] is None
    assert card["powerUsage"] is None and card["memory"] == 1024
    names = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    assert "gpustack_accelerator_memory_total_mib" in names
    assert "gpustack_accelerator_temperature_celsius" not in names
    assert "NaN" not in text and "Inf" not in text
    assert "not finite" in agent.logs()


# -- 7. SIGTERM and SIGINT ------------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_7_a_signal_drains_closes_backends_and_removes_key_material(
    sig: signal.Signals, launch, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    marker = tmp_path / "closed"
    agent: Agent = launch(
        "--manufacturer",
        "tests.fakes:ClosingBackend",
        "--monitor-period",
        "0.3",
        env={"TMPDIR": str(tmp), "DM_TEST_CLOSE_MARKER": str(marker)},
    )
    agent.wait_for("/readyz", 200)
    # Idle keep-alive clients, as Prometheus keeps one per target.
    clients = [httpx.Client(verify=False, timeout=10) for _ in range(5)]
    try:
        for client in clients:
            assert client.get(agent.url("/metrics")).status_code == 200
        started = time.monotonic()
        agent.proc.send_signal(sig)
        code = agent.proc.wait(15)
        took = time.monotonic() - started
    finally:
        for client in clients:
            client.close()
    assert took < 8, took  # well inside a 30 s termination grace period
    assert code in (0, -sig, 128 + sig), code
    assert marker.read_text() == "closed\n"  # the vendor library was shut down, once
    assert list(tmp.iterdir()) == []  # no self-signed key left behind
    assert '"stopped"' in agent.logs()


def test_7_the_self_signed_key_is_on_disk_only_while_it_is_loaded(launch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    agent: Agent = launch(
        "--replay", str(H100), "--monitor-period", "0.5", env={"TMPDIR": str(tmp)}
    )
    agent.wait_for("/readyz", 200)
    assert list(tmp.iterdir()) == []  # so even SIGKILL or the OOM killer leaves none
    agent.proc.kill()
    agent.proc.wait(10)
    assert list(tmp.iterdir()) == []


# -- 8. TRACE and CONNECT -------------------------------------------------------------------------


def test_8_every_method_but_get_and_head_is_405(launch) -> None:  # type: ignore[no-untyped-def]
    agent: Agent = launch("--replay", str(H100), "--monitor-period", "0.5")
    agent.wait_for("/readyz", 200)
    with agent.client() as client:
        for method in ("TRACE", "OPTIONS", "POST"):
            for path in ("/monitor/snapshot", "/metrics", "/readyz", "/livez"):
                response = client.request(method, path)
                assert response.status_code == 405, (method, path)
                assert response.headers["allow"] == "GET, HEAD", (method, path)
    with tls_socket(agent.port) as sock:
        sock.sendall(b"CONNECT 127.0.0.1:443 HTTP/1.1\r\nHost: 127.0.0.1:443\r\n\r\n")
        reply = answer(sock, 5)
    assert reply.startswith(b"HTTP/1.1 405"), reply[:100]
    assert b"\r\nallow: GET, HEAD\r\n" in reply


# -- 9. host paths in backends[].error ------------------------------------------------------------


def test_9_backend_errors_name_what_failed_not_where_it_lives(launch) -> None:  # type: ignore[no-untyped-def]
    agent: Agent = launch(
        "--manufacturer", "tests.fakes:HostPathBackend", "--monitor-period", "0.3"
    )
    (backend,) = agent.wait_for_round()["backends"]
    assert backend["state"] == "unavailable"
    assert backend["error"] == (
        "libhostpath.so.1: cannot open shared object file: No such file or directory"
    )
    # Operators on the node still get the full path from the log.
    assert "/usr/lib/x86_64-linux-gnu/libhostpath.so.1" in agent.logs()
