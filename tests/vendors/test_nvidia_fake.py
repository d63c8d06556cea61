"""The NVIDIA backend end to end: real pynvml, our read() and parse(), against a fake
libnvidia-ml.so.1 compiled by the test from tests/fakelib/nvidia/fake_nvml.c and the real nvml.h
(R-V1..R-V6). Most cases run the monitor round in-process; two run the whole agent.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from devicemanager.agent.monitor import Monitor
from devicemanager.backend import BackendUnavailable
from devicemanager.model import HealthFigure as H
from devicemanager.model import ReadRequest, Reason
from tests.conftest import REPO, Agent, agent_env, assert_promtool_accepts
from tests.fakelib import nvidia as fake_nvml
from tests.fakelib.nvidia import scenarios
from tests.fakelib.nvml_family import write_sysfs
from tests.vendors import kit
from tests.vendors.kit import series
from tests.world import accel, gpu, pod, process
from vendors._nvml_family import GPM_CARD_METRICS
from vendors.nvidia import NvidiaBackend

# The fake's cards here serve no GPM: their activity figures (issue 41) are absent with this.
GPM_UNSUPPORTED = {figure: Reason.UNSUPPORTED for _, figure, _ in GPM_CARD_METRICS}

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def scenario(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    def _write(devices: list[dict[str, Any]], driver: str = "550.90.07") -> Path:
        path = fake_nvml.write(tmp_path / "scenario.txt", driver, devices)
        monkeypatch.setenv("FAKE_NVML_SCENARIO", str(path))
        return path

    return _write


def monitor(lib: Path, tmp: Path, pods: list[dict[str, Any]]) -> Monitor:
    return kit.monitor(NvidiaBackend({"nvml": str(lib)}), tmp / "proc", pods)


def read_payload(lib: Path, request: ReadRequest, rounds: int = 1) -> list[dict[str, Any]]:
    backend = NvidiaBackend({"nvml": str(lib)})
    backend.open()
    try:
        return [backend.read(request) for _ in range(rounds)]
    finally:
        backend.close()


# -- card figures ------------------------------------------------------------------------------


def test_card_figures_through_real_pynvml(libnvml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.h100_mig())
    (payload,) = read_payload(libnvml, ReadRequest())
    reading = NvidiaBackend().parse(payload)
    whole, mig = reading.cards
    assert (whole.id, whole.index, whole.name) == (gpu(0), 0, "NVIDIA H100 80GB HBM3")
    assert (whole.memory_total_mib, whole.memory_used_mib) == (81559, 60_000)  # v2: no reservation
    assert (
        whole.cores_utilization_percent,
        whole.temperature_celsius,
        whole.power_usage_watts,
    ) == (
        80.0,
        55.0,
        500.0,
    )
    assert mig.cores_utilization_percent is None  # NOT_SUPPORTED on a MIG-enabled card
    assert payload["nvmlDeviceGetCount"] == 2 and reading.driver_version == "550.90.07"
    # No carved card asked for: no per-process query was made at all (R-V3).
    assert all("nvmlDeviceGetComputeRunningProcesses_v3" not in d for d in payload["devices"])


def test_memory_v1_where_the_driver_does_not_serve_v2(libnvml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario(
        [
            fake_nvml.device(
                gpu(2),
                used_mib=1000,
                reserved=512 << 20,
                errors={"nvmlDeviceGetMemoryInfo_v2": scenarios.FUNCTION_NOT_FOUND},
            )
        ]
    )
    (payload,) = read_payload(libnvml, ReadRequest())
    assert "nvmlDeviceGetMemoryInfo" in payload["devices"][0]  # said which version answered
    (card,) = NvidiaBackend().parse(payload).cards
    assert card.memory_used_mib == 1512  # v1 counts the driver's reservation as used


def test_gpu_is_lost_on_one_card_of_eight(libnvml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.gpu_lost_one_of_eight())
    first, second = read_payload(libnvml, ReadRequest(), rounds=2)
    parse = NvidiaBackend().parse
    assert [c.unhealthy for c in parse(first).cards] == [False] * 8
    cards = parse(second).cards
    assert len(cards) == 8
    lost = cards[5]
    # Named by what it answered before; every figure absent, and unhealthy.
    assert (lost.id, lost.index, lost.unhealthy, lost.unhealthy_reason) == (
        gpu(15),
        5,
        True,
        "gpu_is_lost",
    )
    assert (lost.memory_total_mib, lost.cores_utilization_percent, lost.temperature_celsius) == (
        None,
        None,
        None,
    )
    assert [c.unhealthy for i, c in enumerate(cards) if i != 5] == [False] * 7


def test_a_card_lost_before_the_agent_started_is_left_out_not_invented(
    libnvml: Path, scenario
) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.gpu_lost_one_of_eight(lost_at_start=True))
    (payload,) = read_payload(libnvml, ReadRequest())
    cards = NvidiaBackend().parse(payload).cards
    assert [c.index for c in cards] == [0, 1, 2, 3, 4, 6, 7]


@pytest.mark.parametrize(("xid", "reason"), [(79, "xid_79"), (13, None)])
def test_an_xid_from_the_event_set(libnvml: Path, scenario, xid: int, reason: str | None) -> None:  # type: ignore[no-untyped-def]
    scenario([fake_nvml.device(gpu(2), xid=xid)])
    first, second = read_payload(libnvml, ReadRequest(), rounds=2)
    for payload in (first, second):  # kept once seen: a fatal XID does not heal by itself
        (card,) = NvidiaBackend().parse(payload).cards
        assert card.unhealthy_reason == reason


def test_xid_events_counted_by_code_application_ones_included(libnvml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    """(R-X7) Every XID the event set delivers is counted by its code since the agent started,
    the application XIDs (13, 43) too, which leave the card healthy; the count carries over
    rounds and grows with the next event; a card that raised none has counts, all of them
    none, rather than no figure."""
    scenario([fake_nvml.device(gpu(0), xids=[13, 79, 13, 43]), fake_nvml.device(gpu(1))])
    backend = NvidiaBackend({"nvml": str(libnvml)})
    backend.open()
    try:
        first = backend.parse(backend.read(ReadRequest())).cards
        second = backend.parse(backend.read(ReadRequest())).cards
        backend._record_xid(gpu(0), 79)  # the next event, as _round_started records it
        third = backend.parse(backend.read(ReadRequest())).cards
    finally:
        backend.close()
    for cards in (first, second):
        busy, quiet = cards
        assert busy.health is not None and quiet.health is not None
        assert busy.health.xid_errors == (("13", 2), ("43", 1), ("79", 1))
        assert busy.unhealthy_reason == "xid_79"
        assert quiet.health.xid_errors == ()
        assert not quiet.unhealthy
    assert third[0].health is not None
    assert third[0].health.xid_errors == (("13", 2), ("43", 1), ("79", 2))


def test_xid_codes_per_card_are_bounded_past_them_other(libnvml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    """(R-X7) At most 64 distinct codes per card are named; every event past that bound is
    counted under `other`, so a driver inventing codes cannot grow /metrics without end. A
    fatal XID after 64 application codes still makes the card unhealthy."""
    codes = [*range(1000, 1064), 2000, 2001, 2000]
    scenario([fake_nvml.device(gpu(0), xids=codes)])
    (payload,) = read_payload(libnvml, ReadRequest())
    (card,) = NvidiaBackend().parse(payload).cards
    assert card.health is not None and card.health.xid_errors is not None
    named = dict(card.health.xid_errors)
    assert len(named) == 65
    assert named["other"] == 3
    assert all(named[str(c)] == 1 for c in range(1000, 1064))
    assert card.health.xid_errors[-1] == ("other", 3)  # numeric order, `other` last
    assert card.unhealthy_reason == "xid_1000"


def test_xid_counts_absent_with_the_reason_without_an_event_set(
    libnvml: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(R-X7) A driver that refuses the event set (NOT_SUPPORTED) leaves the XID counts
    absent with `unsupported`, never 0; a card whose registration failed (NO_PERMISSION) has
    its own reason while its neighbour is counted."""
    cards = [
        fake_nvml.device(gpu(0), xids=[79]),
        fake_nvml.device(gpu(1), errors={"nvmlDeviceRegisterEvents": 4}),
    ]
    for faults, expected in (
        ({"nvmlEventSetCreate": 3}, [(None, Reason.UNSUPPORTED)] * 2),
        ({}, [((("79", 1),), None), (None, Reason.PERMISSION)]),
    ):
        path = fake_nvml.write(tmp_path / "scenario.txt", "550.90.07", cards, faults=faults)
        monkeypatch.setenv("FAKE_NVML_SCENARIO", str(path))
        (payload,) = read_payload(libnvml, ReadRequest())
        got = [
            (c.health.xid_errors, c.health.reason("xid_errors"))
            for c in NvidiaBackend().parse(payload).cards
            if c.health is not None
        ]
        assert got == expected


# -- the card's health beyond one bit (R-X7) ---------------------------------------------------


def test_card_health_through_real_pynvml(libnvml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    """(R-X7) ECC, remapped rows, energy, throttle reasons, clocks and PCIe replays as NVML
    answers them through pynvml, in base units (mJ to J, MHz to Hz); each NOT_SUPPORTED answer
    is that figure absent with `unsupported`; a type's all-ones "not available" is
    `invalid_data`, never published; where the clocks-event call is missing from the driver
    the older throttle call answers the same mask."""
    scenario(scenarios.h100_health())
    (payload,) = read_payload(libnvml, ReadRequest())
    full, blind, old = (c.health for c in NvidiaBackend().parse(payload).cards)
    assert full is not None and blind is not None and old is not None
    assert (
        full.number(H.ECC_CORRECTED_VOLATILE),
        full.number(H.ECC_UNCORRECTED_VOLATILE),
        full.number(H.ECC_CORRECTED_AGGREGATE),
        full.number(H.ECC_UNCORRECTED_AGGREGATE),
    ) == (12, 1, 345, 2)
    assert (
        full.number(H.REMAPPED_ROWS_CORRECTABLE),
        full.number(H.REMAPPED_ROWS_UNCORRECTABLE),
        full.number(H.REMAPPED_ROWS_PENDING),
        full.number(H.REMAPPED_ROWS_FAILED),
    ) == (3, 1, 1, 0)
    assert full.number(H.ENERGY_JOULES) == 123_456.789  # 123,456,789 mJ
    assert full.throttle_reasons is not None
    assert [r for r, on in full.throttle_reasons if on] == [
        "sw_power_cap",
        "hw_thermal_slowdown",
        "reliability",  # 0x400, CUDA 13's nvml.h (issue 43)
    ]
    assert (
        full.number(H.CLOCK_SM_HZ),
        full.number(H.CLOCK_MEMORY_HZ),
        full.number(H.CLOCK_GRAPHICS_HZ),
    ) == (
        1_755_000_000,
        2_619_000_000,
        1_755_000_000,
    )
    # Every health figure answered; the card serves no GPM, so its activity (issue 41) is not.
    assert full.number(H.PCIE_REPLAYS) == 7
    assert {why for _, why in full.reasons} == {Reason.UNSUPPORTED}
    assert {figure for figure, _ in full.reasons} == {f for _, f, _ in GPM_CARD_METRICS}
    # Card 1: nothing but two clock domains answered; every other figure says why.
    assert (blind.number(H.CLOCK_SM_HZ), blind.number(H.CLOCK_GRAPHICS_HZ)) == (
        1_980_000_000,
        1_980_000_000,
    )
    assert (
        dict(blind.reasons)
        == {
            name: Reason.UNSUPPORTED
            for name in (
                "ecc_corrected_volatile",
                "ecc_uncorrected_volatile",
                "ecc_corrected_aggregate",
                "ecc_uncorrected_aggregate",
                "remapped_rows_correctable",
                "remapped_rows_uncorrectable",
                "remapped_rows_pending",
                "remapped_rows_failed",
                "energy_joules",
                "throttle_reasons",
                "clock_memory_hz",
                "pcie_replays",
            )
        }
        | GPM_UNSUPPORTED
    )
    assert (
        blind.number(H.ENERGY_JOULES),
        blind.throttle_reasons,
        blind.number(H.PCIE_REPLAYS),
    ) == (None, None, None)
    # Card 2: the sentinels refused, the older throttle call read.
    assert (
        dict(old.reasons)
        == {
            "ecc_corrected_volatile": Reason.INVALID_DATA,
            "energy_joules": Reason.INVALID_DATA,
            "clock_sm_hz": Reason.INVALID_DATA,
            "pcie_replays": Reason.INVALID_DATA,
        }
        | GPM_UNSUPPORTED
    )
    assert (
        old.number(H.ECC_CORRECTED_VOLATILE),
        old.number(H.ENERGY_JOULES),
        old.number(H.CLOCK_SM_HZ),
    ) == (None, None, None)
    assert old.throttle_reasons is not None and dict(old.throttle_reasons)["gpu_idle"] is True
    assert "nvmlDeviceGetCurrentClocksThrottleReasons" in payload["devices"][2]
    assert "nvmlDeviceGetCurrentClocksThrottleReasons" not in payload["devices"][0]


def test_the_whole_agent_publishes_card_health(
    libnvml: Path, scenario, tmp_path: Path, launch
) -> None:  # type: ignore[no-untyped-def]
    """(R-X7) Over real HTTPS: the counters are typed counter and end in `_total`, every figure
    in base units, an unsupported figure has no sample and its capability says why, the
    unhealthy card's reason is a label beside an unchanged `unhealthy`, and promtool takes the
    text with nothing to say; the snapshot's cards carry the same figures, null when absent."""
    (tmp_path / "proc").mkdir()
    agent = serve_on_fake(launch, libnvml, scenario(scenarios.h100_health()), tmp_path, [])
    with agent.client() as client:
        text = client.get("/metrics").content
        doc = client.get("/monitor/snapshot").json()
    lines = text.decode().splitlines()
    for name in ("ecc_errors", "energy_joules", "pcie_replays"):
        assert f"# TYPE gpustack_accelerator_{name}_total counter" in lines
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:  # by the sample's name: a counter's ends in _total
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))

    def by_card(name: str, **match: str) -> dict[str, float]:
        return {
            ls["id"]: v
            for ls, v in samples.get(name, [])
            if all(ls.get(k) == want for k, want in match.items())
        }

    pre = "gpustack_accelerator_"
    assert by_card(f"{pre}energy_joules_total") == {gpu(20): 123_456.789}
    assert by_card(f"{pre}ecc_errors_total", error="uncorrected", counter="aggregate") == {
        gpu(20): 2.0,
        gpu(22): 0.0,
    }
    assert by_card(f"{pre}ecc_errors_total", error="corrected", counter="volatile") == {
        gpu(20): 12.0
    }
    assert by_card(f"{pre}pcie_replays_total") == {gpu(20): 7.0}
    assert by_card(f"{pre}clock_hertz", clock="sm") == {gpu(20): 1.755e9, gpu(21): 1.98e9}
    assert by_card(f"{pre}clock_throttle_active", reason="hw_thermal_slowdown") == {
        gpu(20): 1.0,
        gpu(22): 0.0,
    }
    assert by_card(f"{pre}clock_throttle_active", reason="reliability") == {
        gpu(20): 1.0,
        gpu(22): 0.0,
    }
    assert by_card(f"{pre}remapped_rows", state="pending") == {gpu(20): 1.0, gpu(22): 0.0}
    assert by_card(f"{pre}figure_capability", figure="energy_joules", reason="unsupported") == {
        gpu(21): 0.0
    }
    assert by_card(f"{pre}figure_capability", figure="energy_joules", reason="invalid_data") == {
        gpu(22): 0.0
    }
    assert by_card(f"{pre}figure_capability", figure="energy_joules", reason="") == {gpu(20): 1.0}
    assert by_card(f"{pre}unhealthy") == {gpu(20): 1.0, gpu(21): 0.0, gpu(22): 0.0}
    ((labels, value),) = samples[f"{pre}unhealthy_reason"]
    assert (labels["id"], labels["index"], labels["reason"], value) == (
        gpu(20),
        "0",
        "row_remap_pending",
        1.0,
    )
    assert_promtool_accepts(text)
    full, blind, old = (c["health"] for c in doc["groups"][0]["accelerators"])
    assert full["eccErrors"] == {
        "corrected": {"volatile": 12, "aggregate": 345},
        "uncorrected": {"volatile": 1, "aggregate": 2},
    }
    assert full["clocksHz"] == {
        "sm": 1_755_000_000,
        "memory": 2_619_000_000,
        "graphics": 1_755_000_000,
    }
    assert full["clockThrottleReasons"]["sw_power_cap"] is True
    # Only the activity figures are absent (issue 41): this card serves no GPM.
    assert full["absentReasons"] == {f.value: "unsupported" for _, f, _ in GPM_CARD_METRICS}
    assert (blind["energyJoules"], blind["clockThrottleReasons"], blind["pcieReplays"]) == (
        None,
        None,
        None,
    )
    assert blind["absentReasons"]["pcie_replays"] == "unsupported"
    assert old["absentReasons"] == {
        "ecc_corrected_volatile": "invalid_data",
        "energy_joules": "invalid_data",
        "clock_sm_hz": "invalid_data",
        "pcie_replays": "invalid_data",
    } | {name: reason.value for name, reason in GPM_UNSUPPORTED.items()}


# -- per-process --------------------------------------------------------------------------------

CAP_50 = {"main": {"nvidia.com/gpu.sliced.cores-percentage": "50"}}


def slice_pods(tmp: Path, *pids: tuple[int, str]) -> list[dict[str, Any]]:
    pods = [
        pod(name, {"main": [accel(2, 3, 800_000)]}, instance=name, limits=CAP_50)
        for name in ("busy", "idle")
    ]
    for pid, owner in pids:
        process(tmp / "proc", pid, owner)
    return pods


def entries(m: Monitor) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, samples in series(m.current.metrics.plain).items():
        if name.startswith("gpustack_instance_accelerator_"):
            for labels, value in samples:
                field = name.removeprefix("gpustack_instance_accelerator_")
                out.setdefault(labels["instance_name"], {})[field] = value
    return out


def test_two_slices_on_an_a100_with_one_busy(libnvml: Path, scenario, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.a100_two_slices())
    m = monitor(libnvml, tmp_path, slice_pods(tmp_path, (7101, "busy"), (7201, "idle")))
    m.run_round()
    m.stop()
    got = entries(m)
    assert got["busy"]["memory_used_mib"] == 20480 and got["busy"]["memory_total_mib"] == 20480
    assert got["busy"]["cores_utilization_percent"] == 72.0  # newest sample 36% of a 50% cap
    assert got["idle"]["memory_used_mib"] == 3072
    assert got["idle"]["cores_utilization_percent"] == 0.0  # listed, no sample: idle, measured


def test_per_process_calls_not_supported(libnvml: Path, scenario, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.per_process_not_supported())
    pods = [pod("q", {"main": [accel(3, 3, 800_000)]}, instance="q")]
    m = monitor(libnvml, tmp_path, pods)
    published = m.run_round()
    m.stop()
    (device,) = published.snapshot.slices.devices
    assert (device.memory_reason, device.cores_reason) == (Reason.UNSUPPORTED, Reason.UNSUPPORTED)
    got = series(published.metrics.plain)
    assert sorted(
        (ls["entry_point"], ls["reason"], v)
        for ls, v in got["gpustack_accelerator_process_capability"]
    ) == [
        ("cores", "unsupported", 0.0),
        ("memory", "unsupported", 0.0),
    ]
    assert entries(m)["q"].keys() >= {"memory_total_mib", "temperature_celsius"}
    assert "memory_used_mib" not in entries(m)["q"]


def test_the_newer_utilization_call_answers_where_the_older_is_not_served(
    libnvml: Path, scenario
) -> None:  # type: ignore[no-untyped-def]
    scenario(
        [
            fake_nvml.device(
                gpu(2),
                processes=[(7101, 1 << 30)],
                samples=[(7101, 9, 42, 1)],
                errors={"nvmlDeviceGetProcessUtilization": scenarios.NOT_SUPPORTED},
            )
        ]
    )
    (payload,) = read_payload(libnvml, ReadRequest(carved_device_ids=frozenset({gpu(2)})))
    assert "nvmlDeviceGetProcessesUtilizationInfo" in payload["devices"][0]
    (answer,) = NvidiaBackend().parse(payload).processes
    assert answer.cores_reason is None and answer.rows[0].cores_percent == 42.0


def test_permission_refused_is_permission(libnvml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    errors = dict.fromkeys(scenarios.PER_PROCESS, scenarios.NO_PERMISSION)
    scenario([fake_nvml.device(gpu(2), errors=errors)])
    (payload,) = read_payload(libnvml, ReadRequest(carved_device_ids=frozenset({gpu(2)})))
    (answer,) = NvidiaBackend().parse(payload).processes
    assert (answer.memory_reason, answer.cores_reason) == (Reason.PERMISSION, Reason.PERMISSION)


def test_the_memory_sentinel_is_absent_not_zero(libnvml: Path, scenario, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.memory_sentinel())
    m = monitor(libnvml, tmp_path, slice_pods(tmp_path, (7101, "busy"), (7201, "idle")))
    published = m.run_round()
    m.stop()
    usages = {u.pod_uid: u for u in published.snapshot.slices.usages}
    from tests.world import uid

    assert usages[uid("busy")].memory_used_mib == 4096
    assert usages[uid("idle")].memory_used_mib is None  # NVML_VALUE_NOT_AVAILABLE
    assert "memory_used_mib" not in entries(m)["idle"]


def test_a_process_list_that_grows_between_probe_and_read(libnvml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.process_list_grows("once"))
    (payload,) = read_payload(libnvml, ReadRequest(carved_device_ids=frozenset({gpu(2)})))
    (answer,) = NvidiaBackend().parse(payload).processes
    # pynvml's own buffer (2n+5 = 9) was too small; read() asked again and got all twelve.
    assert answer.memory_reason is None and len(answer.rows) == 12


def test_a_process_list_that_keeps_growing_is_truncated_not_partial(
    libnvml: Path, scenario
) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.process_list_grows("always"))
    (payload,) = read_payload(libnvml, ReadRequest(carved_device_ids=frozenset({gpu(2)})))
    (answer,) = NvidiaBackend().parse(payload).processes
    assert answer.memory_reason is Reason.TRUNCATED and answer.reads_truncated == 1
    # Without a complete list the rows are the sampled PIDs, their memory unknown; compute is
    # still whole, since a process without a sample ran nothing.
    assert [(r.pid, r.memory_bytes, r.cores_percent) for r in answer.rows] == [(7101, None, 40.0)]


def test_a_pid_that_exits_mid_round(libnvml: Path, scenario, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.pid_exits_mid_round())
    m = monitor(libnvml, tmp_path, slice_pods(tmp_path, (7101, "busy")))  # 7301 has no /proc
    published = m.run_round()
    m.stop()
    (device,) = published.snapshot.slices.devices
    # 7401 was only in the samples: it had exited, and is not a row at all.
    assert device.rows_returned == 2
    assert (device.memory_reason, device.rows_unreadable) == (Reason.EXITED, 1)
    assert "memory_used_mib" not in entries(m)["busy"]  # never a partial sum


def test_mig_partitions_by_recorded_id(libnvml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.h100_mig())
    wanted = frozenset(
        {
            (gpu(1), scenarios.mig_uuid(1)),
            (gpu(1), scenarios.mig_uuid(2)),
            (gpu(1), "MIG-not-there"),
            (gpu(0), "MIG-on-a-card-without-mig"),
        }
    )
    (payload,) = read_payload(libnvml, ReadRequest(partition_ids=wanted))
    got = {p.id: p for p in NvidiaBackend().parse(payload).partitions}
    small, idle = got[scenarios.mig_uuid(1)], got[scenarios.mig_uuid(2)]
    assert (small.memory_total_mib, small.memory_used_mib) == (9856, 1400)
    assert (idle.memory_used_mib, idle.memory_reason) == (0, None)  # measured 0
    # GPM has one sample of each so far (R-X5): measured from the next round, see test_gpm.py.
    assert small.cores_reason is Reason.NO_BASELINE and small.cores_percent is None
    assert got["MIG-not-there"].memory_reason is Reason.TRANSIENT_DRIVER_ERROR
    assert got["MIG-on-a-card-without-mig"].memory_reason is Reason.UNSUPPORTED
    # MIG handles were walked only on the card a partition was asked for.
    assert "migDevices" not in payload["devices"][0]


def test_process_rows_of_a_mig_card_name_their_partition(libnvml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.h100_mig())
    request = ReadRequest(
        carved_device_ids=frozenset({gpu(1)}),
        partition_ids=frozenset({(gpu(1), scenarios.mig_uuid(0))}),
    )
    (payload,) = read_payload(libnvml, request)
    (answer,) = NvidiaBackend().parse(payload).processes
    # PID 7001 runs in GPU instance 1, the 3g.40gb in slot 0.
    assert [(r.pid, r.partition_id) for r in answer.rows] == [(7001, scenarios.mig_uuid(0))]


def test_a_partition_asked_for_by_its_own_id_alone_finds_its_card(libnvml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    """A MIG device the kubelet allocated is named by its UUID only (R-X2): every MIG card is
    walked, and the card that lists it is its parent."""
    scenario(scenarios.h100_mig())
    wanted = frozenset({("", scenarios.mig_uuid(1)), ("", "MIG-not-there")})
    (payload,) = read_payload(libnvml, ReadRequest(partition_ids=wanted))
    got = {p.id: p for p in NvidiaBackend().parse(payload).partitions}
    found = got[scenarios.mig_uuid(1)]
    assert (found.parent_id, found.memory_total_mib, found.memory_used_mib) == (gpu(1), 9856, 1400)
    missing = got["MIG-not-there"]
    assert (missing.parent_id, missing.memory_reason) == ("", Reason.TRANSIENT_DRIVER_ERROR)


# -- the library missing ----------------------------------------------------------------------


def test_a_library_that_is_not_there_is_unavailable_not_a_crash() -> None:
    with pytest.raises(BackendUnavailable, match=r"libnvidia-ml\.so\.1 cannot be loaded") as info:
        NvidiaBackend({"nvml": "/nonexistent/libnvidia-ml.so.1"}).open()
    # What failed, not where it was looked for: backends[] is served to every reader.
    assert "/nonexistent" not in str(info.value)
    # In a clean interpreter, with no library anywhere on the linker's path.
    code = (
        "from vendors.nvidia import NvidiaBackend\n"
        "from devicemanager.backend import BackendUnavailable\n"
        "try:\n    NvidiaBackend().open()\n"
        "except BackendUnavailable as e:\n    print('unavailable', e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=agent_env({"LD_LIBRARY_PATH": "/nonexistent"}),
        cwd=REPO,
        check=True,
    )
    assert out.stdout.startswith("unavailable")


# -- the whole agent --------------------------------------------------------------------------


def serve_on_fake(
    launch, lib: Path, scenario_file: Path, tmp: Path, pods: list[dict[str, Any]]
) -> Agent:  # type: ignore[no-untyped-def]
    """`devicemanager serve` on the fake library, with these pods and tmp/proc, once ready."""
    (tmp / "pods.json").write_text(json.dumps({"kind": "PodList", "items": pods}))
    agent: Agent = launch(
        "--manufacturer",
        "nvidia",
        "--vendor-library",
        f"nvidia={lib}",
        "--pods-file",
        str(tmp / "pods.json"),
        "--proc-root",
        str(tmp / "proc"),
        "--monitor-period",
        "0.5",
        env={"FAKE_NVML_SCENARIO": str(scenario_file)},
    )
    agent.wait_for("/readyz", 200)
    return agent


def test_the_whole_agent_on_the_fake_h100_with_mig(
    libnvml: Path, scenario, tmp_path: Path, launch
) -> None:  # type: ignore[no-untyped-def]
    path = scenario(scenarios.h100_mig())
    mig = {"allocatedPhysicalProfile": "1g.10gb"}
    pods = [
        pod("qwen", {"main": [accel(0, 1)]}, instance="qwen"),
        pod(
            "mistral",
            {
                "main": [
                    accel(
                        1,
                        4,
                        800_000,
                        allocatedPhysicalProfile="3g.40gb",
                        allocatedPhysicalID=scenarios.mig_uuid(0),
                    )
                ]
            },
            instance="mistral",
        ),
        pod(
            "whisper",
            {"main": [accel(1, 4, 200_000, **mig, allocatedPhysicalID=scenarios.mig_uuid(1))]},
            instance="whisper",
        ),
        pod(
            "idle",
            {"main": [accel(1, 4, 200_000, **mig, allocatedPhysicalID=scenarios.mig_uuid(2))]},
            instance="idle",
        ),
    ]
    process(tmp_path / "proc", 7001, "mistral")
    agent = serve_on_fake(launch, libnvml, path, tmp_path, pods)
    deadline = time.monotonic() + 20
    with agent.client() as client:
        # GPM compares a partition's sample with the previous round's: measured from round two.
        while True:
            doc = client.get("/monitor/snapshot").json()
            parts = {p["id"]: p for p in doc["slices"]["partitions"]}
            if all(p.get("coresPercent") is not None for p in parts.values()):
                break
            assert time.monotonic() < deadline, parts
            time.sleep(0.2)
        text = client.get("/metrics").content
    assert [c["id"] for c in doc["groups"][0]["accelerators"]] == [gpu(0), gpu(1)]
    assert parts[scenarios.mig_uuid(1)]["memoryTotalMiB"] == 9856
    assert parts[scenarios.mig_uuid(2)]["memoryUsedMiB"] == 0
    got = series(text)
    whisper = {
        ls["id"]: v
        for ls, v in got["gpustack_instance_accelerator_memory_total_mib"]
        if ls["instance_name"] == "whisper"
    }
    assert whisper == {scenarios.mig_uuid(1): 9856.0}
    cores = {
        ls["instance_name"]: v
        for ls, v in got["gpustack_instance_accelerator_cores_utilization_percent"]
        if ls["mode"] == "Partitioned"
    }
    # Each partition's own SM activity from GPM, never restated against a cap (R-X5).
    assert cores == {"mistral": 87.25, "whisper": 12.5, "idle": 0.0}


def test_the_whole_agent_on_two_a100_slices_and_record(
    libnvml: Path, scenario, tmp_path: Path, launch
) -> None:  # type: ignore[no-untyped-def]
    path = scenario(scenarios.a100_two_slices())
    pods = slice_pods(tmp_path, (7101, "busy"), (7201, "idle"))
    agent = serve_on_fake(launch, libnvml, path, tmp_path, pods)
    with agent.client() as client:
        got = series(client.get("/metrics").content)
    cores = {
        ls["instance_name"]: v
        for ls, v in got["gpustack_instance_accelerator_cores_utilization_percent"]
    }
    assert cores == {"busy": 72.0, "idle": 0.0}

    out = tmp_path / "recorded.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "devicemanager",
            "record",
            "nvidia",
            "--library",
            str(libnvml),
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=agent_env({"FAKE_NVML_SCENARIO": str(path)}),
        cwd=REPO,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(out.read_text())
    # Recorded from the fake library: it says so (issue 12), and names the library.
    assert doc["meta"]["kind"] == "synthetic" and doc["meta"]["driver"] == "550.90.07"
    assert doc["meta"]["source"].endswith(f"--library {libnvml}")
    assert doc["meta"]["sdk"].startswith("nvidia-ml-py ")
    (device,) = doc["payload"]["devices"]
    assert [p["pid"] for p in device["nvmlDeviceGetComputeRunningProcesses_v3"]] == [7101, 7201]


# -- links and placement (R-X3) ------------------------------------------------------------------


def test_links_and_numa_nodes_through_real_pynvml(  # type: ignore[no-untyped-def]
    libnvml: Path, scenario, tmp_path: Path
) -> None:
    """(R-X3) Per card pair the link type and count, and each card's NUMA node, as NVML answers
    them through pynvml: direct NVLinks counted by their remote end's bus id (a link that is down
    not counted), NVLink through an NVSwitch, the PCIe path from the common ancestor; a pair
    NVML cannot place has no link at all (not "PCIe"); the NUMA node from sysfs, under the root
    given, never nvmlDeviceGetNumaNodeId's answer (card 0's 4: a coherent GPU's own memory
    node, issue 43)."""
    cards = scenarios.h100_links()
    scenario(cards)
    write_sysfs(tmp_path / "sys", cards)
    backend = NvidiaBackend({"nvml": str(libnvml)}, sysfs=tmp_path / "sys")
    backend.open()
    try:
        payload = backend.read(ReadRequest())
    finally:
        backend.close()
    cards = {c.id: c for c in NvidiaBackend().parse(payload).cards}
    a, b, c, d, e = (gpu(n) for n in range(30, 35))

    def links(card: str) -> set[tuple[str, str, int | None]]:
        found = cards[card].links
        assert found is not None
        return {(link.peer_id, link.link, link.count) for link in found}

    assert links(a) == {
        (b, "nvlink", 4),
        (b, "pcie_switch", None),
        (c, "system", None),
        (d, "system", None),
    }
    assert links(b) == {
        (a, "nvlink", 4),
        (a, "pcie_switch", None),
        (c, "system", None),
        (d, "system", None),
    }
    assert links(c) == {
        (d, "nvswitch", 2),
        (d, "pcie_host_bridge", None),
        (a, "system", None),
        (b, "system", None),
    }
    assert links(e) == set()  # read, and placed against no card
    assert [cards[x].numa_node for x in (a, b, c, d, e)] == [0, 0, 1, 1, 1]
    assert payload["topology"]["devices"][4]["sysfsNumaNode"] == "1\n"
    assert payload["topology"]["devices"][0]["nvmlDeviceGetNumaNodeId"] == 4  # recorded, not used


def test_links_are_read_once_a_minute_and_carried_between(  # type: ignore[no-untyped-def]
    libnvml: Path, scenario
) -> None:
    """(R-X3) The topology is read on the first round and again only once 60 s have passed on
    the backend's monotonic clock; the rounds between carry the same answer (its `readAt`) and
    make no topology call, so the families stay while the library is not asked."""
    scenario(scenarios.h100_links())
    now = [100.0]
    backend = NvidiaBackend({"nvml": str(libnvml)}, clock=lambda: now[0])
    backend.open()
    calls: list[str] = []
    real = backend._call

    def counting(name: str, *args: Any) -> Any:
        calls.append(name)
        return real(name, *args)

    backend._call = counting  # type: ignore[method-assign]
    try:
        reads = []
        for at in (100.0, 130.0, 159.9, 160.0):
            now[0] = at
            calls.clear()
            payload = backend.read(ReadRequest())
            reads.append(
                (payload["topology"]["readAt"], "DeviceGetTopologyCommonAncestor" in calls)
            )
    finally:
        backend.close()
    assert reads == [(100.0, True), (100.0, False), (100.0, False), (160.0, True)]
    cards = NvidiaBackend().parse(payload).cards
    assert cards[0].links is not None and len(cards[0].links) == 4


def test_the_whole_agent_publishes_links_and_who_a_fatal_xid_hit(
    libnvml: Path, scenario, tmp_path: Path, launch
) -> None:  # type: ignore[no-untyped-def]
    """(R-X3) Over real HTTPS, from the fake through pynvml: `link_info` per card, peer and
    kind, `links` with the NVLink count, `numa_node`, and the snapshot's optional `links` and
    `numaNode`; promtool takes the text. (R-X7) A fatal XID on a card an Instance holds puts the
    reason on that grant's `gpustack_instance_accelerator_unhealthy`, as AcceleratorFatalError
    selects it; the healthy grant's series has no reason; every XID is counted by code in
    `gpustack_accelerator_xid_errors_total` and the snapshot's `health.xidErrors`."""
    cards = scenarios.h100_links()
    cards[0]["xid"] = 79
    cards[0]["xids"] = [13, 79]
    # The agent reads the host's /sys: every card on a PCI domain no machine has, so no NUMA node
    # is known here or anywhere, and card 0's nvmlDeviceGetNumaNodeId (4, a coherent GPU's own
    # memory node) is never published as one (issue 43).
    for position, one in enumerate(cards):
        one["bus_id"] = str(one.get("bus_id", scenarios.bus(position))).replace(
            "00000000:", "0000FFFF:"
        )
        for end in one.get("nvlinks", ()):
            if "remote" in end:  # a gap (an error) names no far end
                end["remote"] = end["remote"].replace("00000000:", "0000FFFF:")
    (tmp_path / "proc").mkdir()
    pods = [
        pod("llama", {"main": [accel(30, 1)]}, instance="llama"),
        pod("qwen", {"main": [accel(32, 1)]}, instance="qwen"),
    ]
    agent = serve_on_fake(launch, libnvml, scenario(cards), tmp_path, pods)
    with agent.client() as client:
        text = client.get("/metrics").content.decode()
        doc = client.get("/monitor/snapshot").json()
    got: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            got.setdefault(s.name, []).append((s.labels, s.value))
    a, b, c, d = (gpu(n) for n in range(30, 34))
    info = {
        (ls["id"], ls["peer_id"], ls["link"]) for ls, _ in got["gpustack_accelerator_link_info"]
    }
    assert {(a, b, "nvlink"), (a, b, "pcie_switch"), (c, d, "nvswitch"), (a, c, "system")} <= info
    assert not {x for x in info if gpu(34) in x[:2]}  # a card NVML cannot place: no series
    counts = {(ls["id"], ls["peer_id"]): v for ls, v in got["gpustack_accelerator_links"]}
    assert (counts[(a, b)], counts[(c, d)]) == (4.0, 2.0)
    assert not got.get("gpustack_accelerator_numa_node")  # sysfs names no node for any card
    unhealthy = {
        ls["instance_name"]: (ls.get("reason", ""), v)
        for ls, v in got["gpustack_instance_accelerator_unhealthy"]
    }
    assert unhealthy == {"llama": ("xid_79", 1.0), "qwen": ("", 0.0)}
    xids = {(ls["id"], ls["xid"]): v for ls, v in got["gpustack_accelerator_xid_errors_total"]}
    assert xids == {(a, "13"): 1.0, (a, "79"): 2.0}
    assert_promtool_accepts(text.encode())
    served = {card["id"]: card for card in doc["groups"][0]["accelerators"]}
    assert served[a]["health"]["xidErrors"] == {"13": 1, "79": 2}
    assert served[b]["health"]["xidErrors"] == {}
    assert {"peerID": b, "link": "nvlink", "count": 4} in served[a]["links"]
    assert not any("numaNode" in one for one in served.values())
    assert served[gpu(34)]["links"] == []
