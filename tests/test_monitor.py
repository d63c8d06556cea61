"""The monitor loop in-process: deadlines, stuck backends, atomic swaps, probes (R-O2, R-O3)."""

from __future__ import annotations

import threading
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from devicemanager.agent.monitor import BackendWorker, Monitor
from devicemanager.model import BackendState, ReadRequest
from tests.fakes import (
    FailingBackend,
    GarbageBackend,
    HangingBackend,
    StaticBackend,
    UnavailableBackend,
)

pytestmark = pytest.mark.timeout(30)


def monitor(
    *backends: object, deadline: float = 0.2, liveness: float = 60.0, period: float = 0.1
) -> Monitor:
    return Monitor(
        [BackendWorker(b) for b in backends],  # type: ignore[arg-type]
        period=period,
        deadline=deadline,
        liveness_timeout=liveness,
        node="n1",
    )


def states(m: Monitor) -> dict[str, BackendState]:
    return {s.manufacturer: s.state for s in m.current.snapshot.backends}


def test_a_round_publishes_one_snapshot_with_the_backends_reading() -> None:
    m = monitor(StaticBackend())
    assert m.current.snapshot.timestamp == 0
    published = m.run_round()
    assert m.current is published
    snap = published.snapshot
    assert snap.timestamp > 0 and snap.node == "n1"
    (group,) = snap.groups
    assert group.manufacturer == "fake" and group.cards[0].memory_used_mib == 1
    assert states(m) == {"fake": BackendState.OK}
    assert b'"memoryUsage":1' in published.snapshot_json
    m.stop()


def test_each_failure_is_data_and_the_healthy_backend_still_publishes() -> None:
    static = StaticBackend()
    m = monitor(static, FailingBackend(), UnavailableBackend(), GarbageBackend())
    m.run_round()
    assert states(m) == {
        "fake": BackendState.OK,
        "broken": BackendState.ERROR,
        "absent": BackendState.UNAVAILABLE,
        "garbage": BackendState.ERROR,
    }
    statuses = {s.manufacturer: s for s in m.current.snapshot.backends}
    assert "driver said no" in (statuses["broken"].error or "")
    assert "cannot open shared object" in (statuses["absent"].error or "")
    assert "could not be parsed" in (statuses["garbage"].error or "")
    assert [g.manufacturer for g in m.current.snapshot.groups] == ["fake"]
    m.stop()


def test_a_failed_read_reopens_the_library_next_round() -> None:
    broken = FailingBackend()
    m = monitor(broken)
    m.run_round()
    m.run_round()
    assert broken.opened == 2 and broken.closed == 2
    m.stop()


def test_unavailable_library_is_retried_every_round() -> None:
    absent = UnavailableBackend()
    m = monitor(absent)
    for _ in range(3):
        m.run_round()
    assert absent.opened == 3
    assert states(m) == {"absent": BackendState.UNAVAILABLE}
    m.stop()


def test_a_hung_backend_times_out_then_is_stuck_and_never_called_twice() -> None:
    hung, static = HangingBackend(), StaticBackend()
    m = monitor(hung, static, deadline=0.1)
    started = time.monotonic()
    m.run_round()
    assert time.monotonic() - started < 2  # the deadline held the round, not the hang
    assert states(m) == {"hung": BackendState.TIMEOUT, "fake": BackendState.OK}
    m.run_round()
    assert states(m) == {"hung": BackendState.STUCK, "fake": BackendState.OK}
    assert hung.reads == 1 and static.reads == 2
    # Its group is gone: nothing from the hung backend is carried forward.
    assert [g.manufacturer for g in m.current.snapshot.groups] == ["fake"]


def test_liveness_fails_when_a_call_outlives_the_liveness_timeout() -> None:
    m = monitor(HangingBackend(), deadline=0.05, liveness=0.3)
    m.run_round()
    assert m.liveness()[0] is True
    time.sleep(0.4)
    m.run_round()  # the loop itself is still turning...
    ok, detail = m.liveness()
    assert ok is False and "backend hung" in detail  # ...but a restart is the only way out


def test_liveness_fails_when_the_loop_stops_finishing_rounds() -> None:
    m = monitor(StaticBackend(), liveness=0.3)
    m.run_round()
    assert m.liveness() == (True, "ok")
    time.sleep(0.4)
    ok, detail = m.liveness()
    assert ok is False and "has not finished a round" in detail


def test_readiness_needs_a_completed_fresh_round() -> None:
    m = monitor(StaticBackend(), period=0.1)
    assert m.readiness()[0] is False
    m.run_round()
    assert m.readiness() == (True, "ok")
    time.sleep(0.35)  # more than three periods
    ok, detail = m.readiness()
    assert ok is False and "older than three periods" in detail
    m.stop()


def test_a_stale_round_serves_the_verdict_and_no_figures() -> None:
    m = monitor(StaticBackend(), period=0.1)
    published = m.run_round()
    fresh = {f.name for f in text_string_to_metric_families(published.metrics.plain.decode())}
    stale_text = published.stale_metrics.plain.decode()
    stale = {f.name: f for f in text_string_to_metric_families(stale_text)}
    assert "gpustack_accelerator_memory_used_mib" in fresh
    assert stale["gpustack_instance_metrics_collector_success"].samples[0].value == 0.0
    assert "gpustack_accelerator_memory_used_mib" not in stale
    m.stop()


def test_the_loop_runs_rounds_on_its_period_and_swaps_whole_snapshots() -> None:
    static = StaticBackend()
    m = monitor(static, period=0.05)
    seen: list[bytes] = []
    stop = threading.Event()

    def reader() -> None:
        # A reader only ever sees a complete published round: JSON and metrics from one round.
        while not stop.is_set():
            current = m.current
            if current.snapshot.timestamp:
                used = current.snapshot.groups[0].cards[0].memory_used_mib
                assert f'"memoryUsage":{used}'.encode() in current.snapshot_json
                assert ("} " + str(float(used))).encode() in current.metrics.plain
                seen.append(current.snapshot_json)

    thread = threading.Thread(target=reader)
    thread.start()
    m.start()
    deadline = time.monotonic() + 5
    while m.rounds < 5 and time.monotonic() < deadline:
        time.sleep(0.02)
    stop.set()
    thread.join()
    m.stop()
    assert m.rounds >= 5 and len(set(seen)) >= 2
    assert static.requests[0] == ReadRequest()


def test_a_round_that_raises_keeps_the_last_good_snapshot_and_fails_liveness() -> None:
    m = monitor(StaticBackend(), period=0.05, liveness=0.5)
    good = m.run_round()

    def explode(requests: object) -> list[object]:
        raise RuntimeError("collecting failed")

    m._collect = explode  # type: ignore[method-assign,assignment]
    m.start()
    time.sleep(0.2)
    assert m.current is good
    assert m._thread is not None and m._thread.is_alive()
    assert m.liveness()[0] is True
    time.sleep(0.5)
    # A loop that turns but never completes a round is as good as dead.
    assert m.liveness()[0] is False
    m.stop()


@pytest.mark.parametrize(
    "payload",
    [{}, {"devices": None}, {"devices": {"error": "nvmlDeviceGetCount", "code": 999}}, []],
    ids=["no-devices", "devices-null", "enumeration-failed", "not-an-object"],
)
def test_a_payload_of_the_wrong_shape_is_a_failed_read_not_a_node_without_cards(
    payload: object,
) -> None:
    """(R-O2, issue 30) NVIDIA's real parse over payloads read() never writes: the backend is
    `error` with the shape named, never `ok` with no cards (which a node without GPUs is)."""
    from vendors import nvidia

    class WrongShape(StaticBackend):
        manufacturer = "nvidia"

        def read(self, request: ReadRequest) -> object:
            return payload

        def parse(self, answer: object) -> object:
            return nvidia.parse(answer)  # type: ignore[arg-type]

    m = monitor(WrongShape())
    m.run_round()
    (status,) = m.current.snapshot.backends
    assert status.state is BackendState.ERROR
    assert status.error is not None and "payload could not be parsed" in status.error
    m.stop()
