"""Partition compute through GPM (R-X5), on NVIDIA through real pynvml and the fake
libnvidia-ml (its GPM entry points declared by the real nvml.h), and the pure parse both
NVML-family backends share.

The two samples GPM needs are taken in consecutive rounds: the first round after start has
`no_baseline`, the next is measured over the whole period, and a read never waits the 100 ms
between samples, so GPM adds no wait to a round and cannot push it past its deadline."""

from __future__ import annotations

import ctypes
import time
from pathlib import Path
from typing import Any

import pytest

from devicemanager.model import BackendState, ReadRequest, Reason
from tests.fakelib import nvidia as fake
from tests.fakelib.nvidia import scenarios
from tests.vendors import kit
from tests.world import accel, gpu, pod
from vendors import _nvml_family as family
from vendors._nvml_family import GPM_MIN_INTERVAL
from vendors.nvidia import NvidiaBackend

pytestmark = pytest.mark.timeout(60)

GAP = GPM_MIN_INTERVAL * 1.5
SMALL, IDLE, BUSY = scenarios.mig_uuid(1), scenarios.mig_uuid(2), scenarios.mig_uuid(0)
WANTED = frozenset({(gpu(1), SMALL), (gpu(1), IDLE)})


@pytest.fixture
def scenario(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    def _write(devices: list[dict[str, Any]], **top: Any) -> Path:
        path = fake.write(tmp_path / "scenario.txt", "570.133.20", devices, **top)
        monkeypatch.setenv(fake.SCENARIO_ENV, str(path))
        return path

    return _write


def live_samples(lib: Path) -> int:
    """GPM sample buffers the fake has handed out and not had back."""
    count: int = ctypes.CDLL(str(lib)).fake_gpm_live_samples()
    return count


def cores(backend: NvidiaBackend, payload: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    return {p.id: (p.cores_percent, p.cores_reason) for p in backend.parse(payload).partitions}


def rounds(lib: Path, request: ReadRequest, n: int, gap: float = GAP) -> list[dict[str, Any]]:
    backend = NvidiaBackend({"nvml": str(lib)})
    backend.open()
    try:
        out = []
        for i in range(n):
            if i:
                time.sleep(gap)
            out.append(backend.read(request))
        return out
    finally:
        backend.close()


def test_a_partitions_compute_is_measured_from_the_second_round(libnvml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.h100_mig())
    first, second = rounds(libnvml, ReadRequest(partition_ids=WANTED), 2)
    parse = NvidiaBackend().parse
    assert cores(NvidiaBackend(), first) == {
        SMALL: (None, Reason.NO_BASELINE),
        IDLE: (None, Reason.NO_BASELINE),
    }
    # The 1g.10gb's own SM activity; the idle one a measured zero, not an absence.
    assert cores(NvidiaBackend(), second) == {SMALL: (12.5, None), IDLE: (0.0, None)}
    assert second["devices"][1]["nvmlGpmQueryDeviceSupport"] == {"isSupportedDevice": 1}
    # GPM is asked only of the partitions a grant names, on the card that holds them.
    migs = {m["nvmlDeviceGetUUID"]: m for m in second["devices"][1]["migDevices"]}
    assert "nvmlGpmMigSampleGet" not in migs[BUSY]
    # The whole card 0 is sampled by itself (issue 41), never through a partition's call.
    assert "nvmlGpmMigSampleGet" not in second["devices"][0]
    assert "nvmlGpmSampleGet" in second["devices"][0]
    assert parse(second).partitions[0].memory_total_mib == 9856


@pytest.mark.parametrize(
    ("devices", "why"),
    [
        (scenarios.h100_mig(gpm=False), "the driver says the device has no GPM"),
        (scenarios.a100_mig_without_gpm(), "Ampere: no GPM"),
    ],
)
def test_where_gpm_is_not_served_partition_compute_stays_unsupported(
    libnvml: Path, scenario, devices: list[dict[str, Any]], why: str
) -> None:  # type: ignore[no-untyped-def]
    scenario(devices)
    parent = devices[-1]["uuid"]
    wanted = frozenset({(parent, m["uuid"]) for m in devices[-1]["migs"]})
    backend = NvidiaBackend({"nvml": str(libnvml)})
    backend.open()
    try:
        for _ in range(2):
            payload = backend.read(ReadRequest(partition_ids=wanted))
            time.sleep(GAP)
            assert live_samples(libnvml) == 0, why  # nothing sampled, nothing held
    finally:
        backend.close()
    got = backend.parse(payload).partitions
    assert got and all(p.cores_reason is Reason.UNSUPPORTED for p in got), why
    assert all(p.memory_reason is None for p in got)  # memory is still read on the handle


@pytest.mark.parametrize(
    ("code", "reason"),
    [(scenarios.NOT_SUPPORTED, Reason.UNSUPPORTED), (999, Reason.TRANSIENT_DRIVER_ERROR)],
)
def test_a_sample_the_driver_refuses_is_a_reason(
    libnvml: Path, scenario, code: int, reason: Reason
) -> None:  # type: ignore[no-untyped-def]
    devices = scenarios.h100_mig()
    devices[1]["migs"][1]["faults"]["nvmlGpmMigSampleGet"] = code
    scenario(devices)
    _, second = rounds(libnvml, ReadRequest(partition_ids=WANTED), 2)
    assert cores(NvidiaBackend(), second) == {SMALL: (None, reason), IDLE: (0.0, None)}


def test_a_failed_metrics_request_is_transient(libnvml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.h100_mig(), faults={"nvmlGpmMetricsGet": 999})
    _, second = rounds(libnvml, ReadRequest(partition_ids=WANTED), 2)
    assert set(cores(NvidiaBackend(), second).values()) == {(None, Reason.TRANSIENT_DRIVER_ERROR)}


@pytest.mark.parametrize("value", ["nan", 150])
def test_a_value_outside_0_to_100_is_refused_not_clamped(
    libnvml: Path, scenario, value: Any
) -> None:  # type: ignore[no-untyped-def]
    devices = scenarios.h100_mig()
    devices[1]["migs"][1]["sm"] = value
    scenario(devices)
    _, second = rounds(libnvml, ReadRequest(partition_ids=WANTED), 2)
    assert cores(NvidiaBackend(), second)[SMALL] == (None, Reason.INVALID_DATA)


def test_samples_closer_than_100ms_are_never_compared(libnvml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.h100_mig())
    request = ReadRequest(partition_ids=WANTED)
    backend = NvidiaBackend({"nvml": str(libnvml)})
    backend.open()
    try:
        backend.read(request)
        soon = backend.read(request)  # microseconds later
        time.sleep(GAP)
        later = backend.read(request)
    finally:
        backend.close()
    # Too soon: no metric asked (the fake would answer NOT_READY), the first sample kept ...
    assert cores(backend, soon) == {
        SMALL: (None, Reason.NO_BASELINE),
        IDLE: (None, Reason.NO_BASELINE),
    }
    mig = next(m for m in soon["devices"][1]["migDevices"] if m["nvmlDeviceGetUUID"] == SMALL)
    first_at = mig["nvmlGpmMigSampleGet"]["previousAt"]
    # ... so the next round compares with it, over the longer interval.
    mig = next(m for m in later["devices"][1]["migDevices"] if m["nvmlDeviceGetUUID"] == SMALL)
    assert mig["nvmlGpmMigSampleGet"]["previousAt"] == first_at
    assert cores(backend, later)[SMALL] == (12.5, None)


def samples_taken(lib: Path) -> int:
    count: int = ctypes.CDLL(str(lib)).fake_gpm_samples_taken()
    return count


def test_a_read_takes_one_sample_per_partition_and_never_waits_for_a_second(
    libnvml: Path, scenario, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """Both GPM samples inside one read would cost every round the 100 ms between them. The
    reader takes one per partition per round and compares it with the previous round's, so a
    round's length owes nothing to GPM. Shown by count, not by a clock: the fake counts the
    samples taken, and refuses (per metric) two samples closer than 100 ms, so a reader that
    took both in one read without waiting could not produce the figure either."""
    scenario(scenarios.h100_mig())
    holder = pod(
        "whisper",
        {"main": [accel(1, 4, 200_000, allocatedPhysicalID=SMALL)]},
        instance="whisper",
    )
    m = kit.monitor(
        NvidiaBackend({"nvml": str(libnvml)}), tmp_path / "proc", [holder], period=1, deadline=5
    )
    snapshots, taken = [], []
    try:
        for _ in range(3):
            before = samples_taken(libnvml)
            snapshots.append(m.run_round().snapshot)
            taken.append(samples_taken(libnvml) - before)
            time.sleep(GAP)
    finally:
        m.stop()
    assert [s.backends[0].state for s in snapshots] == [BackendState.OK] * 3
    # One sample of the one partition held and one of the whole card 0 (issue 41), each round.
    assert taken == [2, 2, 2]
    parts = [s.slices.partitions[0] for s in snapshots if s.slices is not None]
    assert [(p.cores_percent, p.cores_reason) for p in parts] == [
        (None, Reason.NO_BASELINE),
        (12.5, None),
        (12.5, None),
    ]


def test_samples_are_freed_when_released_and_on_close(libnvml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.h100_mig())
    backend = NvidiaBackend({"nvml": str(libnvml)})
    backend.open()
    try:
        for _ in range(3):
            backend.read(ReadRequest(partition_ids=WANTED))
            time.sleep(GAP)
        # Per partition and for the whole card 0, the previous sample and the spare the next
        # is taken into (no allocation each round), no more.
        assert live_samples(libnvml) == 6
        backend.read(ReadRequest(partition_ids=frozenset({(gpu(1), SMALL)})))
        assert live_samples(libnvml) == 4  # the released partition let go of both its buffers
    finally:
        backend.close()
    assert live_samples(libnvml) == 0


def test_after_two_rounds_each_sample_is_taken_into_the_buffer_it_replaced(  # type: ignore[no-untyped-def]
    libnvml: Path, scenario
) -> None:
    """Buffers are allocated the first two rounds (the first sample, then the first spare);
    from the third on, each card and partition takes its sample into the buffer the last one
    replaced: no allocation, the live buffers two per instance, and the figures measured."""
    scenario(scenarios.h100_mig())
    lib = ctypes.CDLL(str(libnvml))
    backend = NvidiaBackend({"nvml": str(libnvml)})
    backend.open()
    before = lib.fake_gpm_samples_allocated()  # counted since the library was loaded
    allocated, live, payloads = [], [], []
    try:
        for i in range(4):
            if i:
                time.sleep(GAP)
            payloads.append(backend.read(ReadRequest(partition_ids=WANTED)))
            allocated.append(lib.fake_gpm_samples_allocated() - before)
            live.append(live_samples(libnvml))
    finally:
        backend.close()
    assert allocated[0] == 3 and allocated[1] == 6  # two partitions and the whole card 0
    assert allocated[2:] == [6, 6]
    assert live == [3, 6, 6, 6]
    assert cores(backend, payloads[3]) == cores(backend, payloads[1])
    assert all(v[0] is not None for v in cores(backend, payloads[3]).values())


def test_a_reinitialised_library_starts_without_a_baseline(libnvml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.h100_mig())
    backend = NvidiaBackend({"nvml": str(libnvml)})
    request = ReadRequest(partition_ids=WANTED)
    backend.open()
    backend.read(request)
    backend.close()  # what the worker does after a failed read; a driver may reload here
    time.sleep(GAP)
    backend.open()
    try:
        payload = backend.read(request)
    finally:
        backend.close()
    assert set(cores(backend, payload).values()) == {(None, Reason.NO_BASELINE)}


# -- the pure parse both backends share -----------------------------------------------------


def err(code: int) -> dict[str, Any]:
    return {"error": f"E{code}", "code": code}


SAMPLED = {"at": 115.0, "previousAt": 100.0}


@pytest.mark.parametrize("p", ["nvml", "hgml"])
@pytest.mark.parametrize(
    ("parent", "mig", "expected"),
    [
        ({}, {}, (None, Reason.UNSUPPORTED)),  # recorded before GPM was read
        ({"S": err(13)}, {}, (None, Reason.UNSUPPORTED)),  # a driver without the symbol
        ({"S": err(4)}, {}, (None, Reason.PERMISSION)),
        ({"S": {"isSupportedDevice": 0}}, {}, (None, Reason.UNSUPPORTED)),
        ({"S": {"isSupportedDevice": 1}}, {"A": err(20)}, (None, Reason.TRANSIENT_DRIVER_ERROR)),
        ({"S": {"isSupportedDevice": 1}}, {"G": err(3)}, (None, Reason.UNSUPPORTED)),
        ({"S": {"isSupportedDevice": 1}}, {}, (None, Reason.TRANSIENT_DRIVER_ERROR)),
        ({"S": {"isSupportedDevice": 1}}, {"G": SAMPLED}, (None, Reason.NO_BASELINE)),
        (
            {"S": {"isSupportedDevice": 1}},
            {"G": SAMPLED, "M": err(999)},
            (None, Reason.TRANSIENT_DRIVER_ERROR),
        ),
        (
            {"S": {"isSupportedDevice": 1}},
            {"G": SAMPLED, "M": {"V": err(27)}},
            (None, Reason.TRANSIENT_DRIVER_ERROR),
        ),
        ({"S": {"isSupportedDevice": 1}}, {"G": SAMPLED, "M": {"V": 41.256}}, (41.26, None)),
        ({"S": {"isSupportedDevice": 1}}, {"G": SAMPLED, "M": {"V": 0}}, (0.0, None)),
        (
            {"S": {"isSupportedDevice": 1}},
            {"G": SAMPLED, "M": {"V": -1}},
            (None, Reason.INVALID_DATA),
        ),
        (
            {"S": {"isSupportedDevice": 1}},
            {"G": SAMPLED, "M": {"V": "nan"}},
            (None, Reason.INVALID_DATA),
        ),
        ({"S": {"isSupportedDevice": 1}}, {"G": SAMPLED, "M": "x"}, (None, Reason.INVALID_DATA)),
        (
            {"S": {"isSupportedDevice": True}},
            {"G": SAMPLED, "M": {"V": 5}},
            (None, Reason.UNSUPPORTED),
        ),
    ],
)
def test_gpm_answers_and_their_reasons(
    p: str, parent: dict[str, Any], mig: dict[str, Any], expected: tuple[Any, Any]
) -> None:
    names = {
        "S": f"{p}GpmQueryDeviceSupport",
        "A": f"{p}GpmSampleAlloc",
        "G": f"{p}GpmMigSampleGet",
        "M": f"{p}GpmMetricsGet",
        "V": f"{p.upper()}_GPM_METRIC_SM_UTIL",
    }

    def keyed(doc: Any) -> Any:
        if isinstance(doc, dict) and "error" not in doc:
            return {names.get(k, k): keyed(v) for k, v in doc.items()}
        return doc

    assert family.parse_gpm(keyed(parent), keyed(mig), p) == expected


def _without_nvml_only_reasons(card: Any) -> Any:
    """An NVIDIA card as a PPU's parse would read it: no board_limit or reliability reason."""
    import dataclasses

    if card.health is None:
        return card
    flags = tuple(
        (name, tuple((r, on) for r, on in value if r not in ("board_limit", "reliability")))
        for name, value in card.health.flags
    )
    return dataclasses.replace(card, health=dataclasses.replace(card.health, flags=flags))


def test_one_parse_serves_both_prefixes(libnvml: Path) -> None:
    """An NVML payload with every `nvml` key renamed `hgml` reads the same through T-Head's
    parse: the two backends share the code, not a copy of it."""
    import json

    from tests.conftest import FIXTURES
    from vendors import nvidia, thead

    doc = (FIXTURES / "vendors" / "nvidia" / "h100-mig-gpm.json").read_text()
    payload = json.loads(doc)["payload"]
    renamed = json.loads(doc.replace('"nvml', '"hgml').replace('"NVML_', '"HGML_'))["payload"]
    a, b = nvidia.parse(payload), thead.parse(renamed)
    assert (a.manufacturer, b.manufacturer) == ("nvidia", "thead")
    # Except the clocks-event bits hgml.h does not define (NVML's 0x200 and 0x400, issue 43).
    assert (
        tuple(map(_without_nvml_only_reasons, a.cards)),
        a.processes,
        a.partitions,
        a.driver_version,
    ) == (
        b.cards,
        b.processes,
        b.partitions,
        b.driver_version,
    )
    assert any(p.cores_percent == 12.5 for p in b.partitions)


def test_record_with_a_partition_records_its_measured_compute(
    libnvml: Path, scenario, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """How a Hopper node is recorded for a scenario: the second of record's reads, a quarter of
    a second after the first, carries the partition's GPM figure."""
    import subprocess
    import sys

    from devicemanager.agent.replay import load_recording
    from tests.conftest import REPO, agent_env

    path = scenario(scenarios.h100_mig())
    out = tmp_path / "h100.json"
    partition = f"{gpu(1)}:{SMALL}"
    command = ["record", "nvidia", "--library", str(libnvml), "--no-processes"]
    result = subprocess.run(
        [sys.executable, "-m", "devicemanager", *command, "--partition", partition, "-o", str(out)],
        capture_output=True,
        text=True,
        env=agent_env({fake.SCENARIO_ENV: str(path)}),
        cwd=REPO,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    _, payload = load_recording(out)
    assert cores(NvidiaBackend(), payload) == {SMALL: (12.5, None)}
