"""The agent's report on itself (R-X8), and the collector's word when nothing can be measured.

Against the real server: the process figures match what /proc says of the agent's process, each
answer is counted by route and code whichever path served it (the fast path, the ASGI app, a
bound's refusal), and the rounds count up. The families are made when a round ends: a scrape
reads what the last round rendered.
"""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from devicemanager.agent.monitor import BackendWorker, Monitor
from devicemanager.agent.selfmetrics import SelfMetrics
from devicemanager.figures import exposition, snapshot
from devicemanager.serve.counters import REASONS, HttpCounters
from tests.conftest import NODES, Agent
from tests.fakes import StaticBackend

H100 = str(NODES / "h100-8gpu-mixed")


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def types(text: str) -> dict[str, str]:
    return {
        line.split()[2]: line.split()[3] for line in text.splitlines() if line.startswith("# TYPE ")
    }


def after_next_round(agent: Agent, client: httpx.Client) -> str:
    """/metrics as rendered by a round that ended after this call."""
    first = samples(client.get("/metrics").text)[("gpustack_device_manager_rounds_total", ())]
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        text = client.get("/metrics").text
        if samples(text)[("gpustack_device_manager_rounds_total", ())] > first:
            return text
        time.sleep(0.05)
    raise AssertionError(f"no round ended\n{agent.logs()}")


def oversized_request(port: int) -> bytes:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw) as tls,
    ):
        tls.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 40_000 + b"\r\n\r\n")
        return tls.recv(200)


@pytest.fixture
def running(launch) -> Agent:  # type: ignore[no-untyped-def]
    agent: Agent = launch("--replay", H100, "--monitor-period", "0.2")
    agent.wait_for("/readyz", 200)
    return agent


def test_the_process_figures_are_the_agents_own_as_proc_reads_them(running: Agent) -> None:
    """(R-X8) process_* as prometheus_client's process collector names them, with the values
    /proc gives for the agent's PID: resident memory, start time, descriptors, CPU."""
    with running.client() as client:
        text = after_next_round(running, client)
    process = psutil.Process(running.proc.pid)
    got = samples(text)
    rss = got[("process_resident_memory_bytes", ())]
    assert abs(rss - process.memory_info().rss) < 32 * 2**20, (rss, process.memory_info().rss)
    assert abs(got[("process_start_time_seconds", ())] - process.create_time()) < 1.5
    fds = got[("process_open_fds", ())]
    assert 3 <= fds <= process.num_fds() + 16, (fds, process.num_fds())
    assert got[("process_max_fds", ())] == process.rlimit(psutil.RLIMIT_NOFILE)[0]
    cpu = process.cpu_times()
    assert 0 < got[("process_cpu_seconds_total", ())] <= cpu.user + cpu.system + 0.5
    assert types(text)["process_cpu_seconds_total"] == "counter"


def test_each_answer_is_counted_by_route_and_code_whichever_path_sent_it(
    running: Agent,
) -> None:
    """(R-X8) The fast path's 200s, the app's HEAD, 404 and 405, and a bound's 431 with its
    refusal: each lands in its counter by the next round."""
    with running.client() as client:
        before = samples(after_next_round(running, client))
        for _ in range(3):
            assert client.get("/metrics").status_code == 200
        assert client.head("/metrics").status_code == 200
        assert client.get("/nowhere").status_code == 404
        assert client.post("/metrics").status_code == 405
        assert oversized_request(running.port).startswith(b"HTTP/1.1 431")
        text = after_next_round(running, client)
    after = samples(text)

    def grew(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    requests = "gpustack_device_manager_http_requests_total"
    # 3 GETs, the HEAD, and the two reads of after_next_round at least
    assert grew(requests, route="/metrics", code="200") >= 5
    assert grew(requests, route="other", code="404") == 1
    assert grew(requests, route="/metrics", code="405") == 1
    assert grew(requests, route="/metrics", code="431") == 1
    refused = "gpustack_device_manager_http_refused_total"
    assert grew(refused, reason="oversized") == 1
    assert grew(refused, reason="connections") == 0
    # every reason is a series from the start, so rate() has a 0 to start from
    assert {r for (n, labels), _ in after.items() if n == refused for _, r in labels} == set(
        REASONS
    )
    assert types(text)[requests] == "counter"
    assert after[("gpustack_device_manager_rounds_failed_total", ())] == 0


def test_the_exposition_with_the_agents_own_families_passes_promtool(running: Agent) -> None:
    """(R-X8) Counters are typed counter and end in _total: promtool's linter agrees."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (scripts/bootstrap test installs it)")
    with running.client() as client:
        text = after_next_round(running, client)
    assert "gpustack_device_manager_rounds_total" in text
    done = subprocess.run(
        [promtool, "check", "metrics"], input=text.encode(), capture_output=True, check=False
    )
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()


class BrokenRounds:
    """A cluster step that raises for its first `times` rounds: the round fails whole."""

    def __init__(self, times: int) -> None:
        self.left = times

    def round(self, index, grants, extras, faults):  # type: ignore[no-untyped-def]
        if self.left > 0:
            self.left -= 1
            raise RuntimeError("assembly broke")
        return extras


@pytest.fixture
def monitor_with(request: pytest.FixtureRequest) -> Iterator[Monitor]:
    counters = HttpCounters()
    monitor = Monitor(
        [BackendWorker(StaticBackend())],
        period=0.02,
        deadline=2.0,
        liveness_timeout=30.0,
        node="n1",
        cluster=BrokenRounds(request.param),
        own=SelfMetrics(counters).families,
    )
    monitor.start()
    yield monitor
    monitor.stop()


@pytest.mark.parametrize("monitor_with", [3], indirect=True)
def test_failed_rounds_are_counted_and_published_by_the_next_good_round(
    monitor_with: Monitor,
) -> None:
    """(R-X8) Three rounds that raise publish nothing; the round after them says 3 failed and 1
    completed."""
    deadline = time.monotonic() + 10
    while monitor_with.rounds < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    text = monitor_with.current.metrics.plain.decode()
    got = samples(text)
    assert got[("gpustack_device_manager_rounds_failed_total", ())] == 3
    assert got[("gpustack_device_manager_rounds_total", ())] >= 1


def test_a_stale_round_still_says_how_the_process_is() -> None:
    """(R-X8, R-E4) A stale round publishes its verdict and no figures, and the agent's own
    families still: they describe the process, not the round."""
    own = SelfMetrics(HttpCounters()).families(7, 2)
    rendered = exposition.Rendered.of(snapshot.empty(15, "n1"), exposition.Extras(own=own))
    stale = samples(rendered.stale.plain.decode())
    assert stale[("gpustack_device_manager_rounds_total", ())] == 7
    assert stale[("gpustack_device_manager_rounds_failed_total", ())] == 2
    assert ("process_resident_memory_bytes", ()) in stale
    # and a round without a server (goldens, replays in tests) has none of them
    plain = exposition.Rendered.of(snapshot.empty(15, "n1")).fresh.plain.decode()
    assert "process_" not in plain and "rounds_total" not in plain


# -- a node where no library answers (R-O2, R-X8) ------------------------------------------------


def test_with_every_library_failing_the_collector_says_so_and_the_agent_stays_ready(
    launch, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """(R-O2) Every backend failing: collector_success{source="backends"} is 0 (the alerts'
    signal), while /readyz stays 200 (a vendor that is down is data, not unreadiness); when the
    library answers again, 1."""
    fault = tmp_path / "fault"
    fault.write_text("driver said no\n")
    agent: Agent = launch(
        "--manufacturer",
        "tests.test_operations:ScriptedBackend",
        "--monitor-period",
        "0.1",
        env={"DM_TEST_FAULT_FILE": str(fault)},
    )
    agent.wait_for("/readyz", 200)
    key = ("gpustack_instance_metrics_collector_success", (("source", "backends"),))
    with agent.client() as client:
        got = samples(client.get("/metrics").text)
    assert got[key] == 0
    assert got[("gpustack_instance_metrics_collector_success", (("source", "snapshot"),))] == 1
    staged = tmp_path / "fault.next"
    staged.write_text("ok\n")
    staged.replace(fault)
    deadline = time.monotonic() + 10
    with agent.client() as client:
        while samples(client.get("/metrics").text)[key] != 1:
            assert time.monotonic() < deadline, "the answering library never counted"
            time.sleep(0.05)


def test_the_monitors_copy_of_the_counters_never_goes_backwards() -> None:
    """(R-X8) Counting is a dict increment on the event loop's thread, without a lock; the
    monitor's copy, taken while another thread counts, never sees a count shrink."""
    counters = HttpCounters()
    stop = threading.Event()

    def count() -> None:
        while not stop.is_set():
            counters.answered("/metrics", 200)

    worker = threading.Thread(target=count)
    worker.start()
    try:
        seen = []
        for _ in range(200):
            requests, _ = counters.snapshot()
            seen.append(requests.get(("/metrics", 200), 0))
    finally:
        stop.set()
        worker.join()
    assert seen == sorted(seen) and seen[-1] > 0
