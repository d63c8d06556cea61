"""The T-Head backend end to end: our ctypes declarations, the shared NVML-family read() and
parse(), against a fake libhgml.so compiled by the test from tests/fakelib/thead/ (R-V1..R-V6,
R-X5). Most cases run the monitor round in-process; one runs the whole agent."""

from __future__ import annotations

import ctypes
import json
import time
from pathlib import Path
from typing import Any

import pytest

from devicemanager.agent.monitor import Monitor
from devicemanager.model import HealthFigure as H
from devicemanager.model import ReadRequest, Reason
from tests.conftest import assert_promtool_accepts
from tests.fakelib import thead as fake
from tests.fakelib.thead import scenarios
from tests.vendors import kit
from tests.vendors.conftest import ManualClock, serve_fake_library
from tests.vendors.kit import series
from tests.world import GIB, accel, pod, process
from tests.world import gpu as card_id
from vendors import _thead_lib as hgml
from vendors._nvml_family import GPM_CARD_METRICS, GPM_MIN_INTERVAL
from vendors.thead import TheadBackend

pytestmark = pytest.mark.timeout(90)

CAP = {"main": {"alibabacloud.com/ppu.sliced.cores-percentage": "50"}}


@pytest.fixture
def scenario(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    def _write(devices: list[dict[str, Any]]) -> Path:
        path = fake.write(tmp_path / "scenario.txt", devices)
        monkeypatch.setenv(fake.SCENARIO_ENV, str(path))
        return path

    return _write


def thead_pod(name: str, grants: dict[str, list[dict[str, Any]]], **kw: Any) -> dict[str, Any]:
    """tests.world.pod with its GPUStack allocation naming the thead manufacturer."""
    doc = pod(name, grants, **kw)
    key = "device.gpustack.ai/accelerator.allocated"
    allocation = json.loads(doc["metadata"]["annotations"][key])
    for container in allocation.values():
        for group in container["devices"]["groups"]:
            group["manufacturer"] = "thead"
    doc["metadata"]["annotations"][key] = json.dumps(allocation)
    return doc


def read(lib: Path, request: ReadRequest, rounds: int = 1, gap: float = 0.0) -> list[Any]:
    backend = TheadBackend({"hgml": str(lib)})
    backend.open()
    try:
        out = []
        for i in range(rounds):
            if i:
                time.sleep(gap)
            out.append(backend.read(request))
        return out
    finally:
        backend.close()


def monitor(lib: Path, tmp: Path, pods: list[dict[str, Any]]) -> Monitor:
    return kit.monitor(TheadBackend({"hgml": str(lib)}), tmp / "proc", pods)


def entries(text: bytes) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for name, samples in series(text).items():
        if name.startswith("gpustack_instance_accelerator_"):
            for labels, value in samples:
                field = name.removeprefix("gpustack_instance_accelerator_")
                out.setdefault(labels["instance_name"], {})[field] = value
    return out


# -- cards ---------------------------------------------------------------------------------------


def test_card_figures_through_our_declarations(libhgml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.ppu_mixed())
    (payload,) = read(libhgml, ReadRequest())
    reading = TheadBackend().parse(payload)
    assert reading.manufacturer == "thead" and reading.driver_version == fake.DRIVER
    busy, _, mig, idle = reading.cards
    assert (busy.id, busy.index, busy.name) == (card_id(40), 0, "PPU-ZW810E")
    assert (busy.memory_total_mib, busy.memory_used_mib) == (97920, 88_100)
    assert (busy.cores_utilization_percent, busy.temperature_celsius) == (91.0, 58.0)
    assert busy.power_usage_watts == 372.0  # HGML answers milliwatts
    assert (idle.cores_utilization_percent, idle.unhealthy) == (0.0, False)  # a measured idle
    assert mig.cores_utilization_percent is None  # NOT_SUPPORTED on a MIG-enabled card
    # Keyed by HGML's own entry points; nothing asked per process without a carved card.
    assert payload["hgmlDeviceGetCount"] == 4
    assert all("hgmlDeviceGetComputeRunningProcesses_v3" not in d for d in payload["devices"])


def test_memory_v1_where_the_driver_does_not_serve_v2(libhgml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario(
        [
            scenarios.whole(
                40, used_mib=1000, reserved=512 << 20, errors={"hgmlDeviceGetMemoryInfo_v2": 13}
            )
        ]
    )
    (payload,) = read(libhgml, ReadRequest())
    (card,) = TheadBackend().parse(payload).cards
    assert card.memory_used_mib == 1512  # v1 counts the driver's reservation as used


def test_a_lost_card_keeps_its_name_and_is_unhealthy(libhgml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.lost_one_of_four())
    first, second = read(libhgml, ReadRequest(), rounds=2)
    assert [c.unhealthy for c in TheadBackend().parse(first).cards] == [False] * 4
    cards = TheadBackend().parse(second).cards
    lost = cards[2]
    assert (lost.id, lost.index, lost.unhealthy_reason) == (card_id(42), 2, "gpu_is_lost")
    assert (lost.memory_total_mib, lost.temperature_celsius, lost.power_usage_watts) == (
        None,
        None,
        None,
    )
    assert [c.unhealthy for i, c in enumerate(cards) if i != 2] == [False] * 3


# -- the card's health beyond one bit (R-X7) ---------------------------------------------------

NOT_ANSWERED = (
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


def test_xid_events_counted_through_our_declarations_without_a_verdict(
    libhgml: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(R-X7) HGML's event set through our declarations (hgmlEventSetCreate,
    hgmlDeviceRegisterEvents, hgmlEventSetWait_v2, hgmlEventData_t): every XID counted by code
    since the agent started, the count growing with the next round's events; none makes the
    card unhealthy, since nobody published which XIDs are a PPU application's. A driver that
    refuses the event set leaves the counts absent with `unsupported`, never 0."""
    cards = [fake.device(card_id(0), xids=[79, 13, 79]), fake.device(card_id(1))]
    path = fake.write(tmp_path / "scenario.txt", cards)
    monkeypatch.setenv(fake.SCENARIO_ENV, str(path))
    first, second = read(libhgml, ReadRequest(), rounds=2)
    for payload in (first, second):
        busy, quiet = TheadBackend().parse(payload).cards
        assert busy.health is not None and quiet.health is not None
        assert busy.health.xid_errors == (("13", 1), ("79", 2))
        assert quiet.health.xid_errors == ()
        assert not busy.unhealthy and not quiet.unhealthy
        assert "xidCriticalErrors" not in payload["devices"][0]
    path = fake.write(
        tmp_path / "scenario.txt", cards, faults={"hgmlEventSetCreate": 3}
    )  # HGML_ERROR_NOT_SUPPORTED
    (refused,) = read(libhgml, ReadRequest())
    for card in TheadBackend().parse(refused).cards:
        assert card.health is not None
        assert (card.health.xid_errors, card.health.reason("xid_errors")) == (
            None,
            Reason.UNSUPPORTED,
        )


def test_card_health_through_our_declarations(libhgml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    """(R-X7) ECC, remapped rows, energy, clocks-event reasons, clocks and PCIe replays as
    HGML answers them through our ctypes declarations, in base units (mJ to J, MHz to Hz);
    each NOT_SUPPORTED answer is that figure absent with `unsupported`; a type's all-ones "not
    available" is `invalid_data`; the older throttle call answers where the clocks-event call
    is missing; the versioned temperature call answers where the plain one is missing."""
    scenario(scenarios.ppu_health())
    (payload,) = read(libhgml, ReadRequest())
    cards = TheadBackend().parse(payload).cards
    full, blind, old = (c.health for c in cards)
    assert full is not None and blind is not None and old is not None
    assert (
        full.number(H.ECC_CORRECTED_VOLATILE),
        full.number(H.ECC_UNCORRECTED_VOLATILE),
        full.number(H.ECC_CORRECTED_AGGREGATE),
        full.number(H.ECC_UNCORRECTED_AGGREGATE),
    ) == (5, 1, 210, 3)
    assert (
        full.number(H.REMAPPED_ROWS_CORRECTABLE),
        full.number(H.REMAPPED_ROWS_UNCORRECTABLE),
        full.number(H.REMAPPED_ROWS_PENDING),
        full.number(H.REMAPPED_ROWS_FAILED),
    ) == (2, 1, 1, 0)
    assert full.number(H.ENERGY_JOULES) == 98_765.432  # 98,765,432 mJ
    assert full.throttle_reasons is not None
    assert [r for r, on in full.throttle_reasons if on] == ["sw_power_cap", "hw_slowdown"]
    assert (
        full.number(H.CLOCK_SM_HZ),
        full.number(H.CLOCK_MEMORY_HZ),
        full.number(H.CLOCK_GRAPHICS_HZ),
    ) == (
        1_450_000_000,
        1_600_000_000,
        1_450_000_000,
    )
    # Every health figure answered; the card serves no GPM, so its activity (issue 41) is not.
    assert full.number(H.PCIE_REPLAYS) == 3
    assert {why for _, why in full.reasons} == {Reason.UNSUPPORTED}
    assert {figure for figure, _ in full.reasons} == {f for _, f, _ in GPM_CARD_METRICS}
    assert full.xid_errors == ()  # the event set answered; the card raised none
    assert (blind.number(H.CLOCK_SM_HZ), blind.number(H.CLOCK_GRAPHICS_HZ)) == (
        1_500_000_000,
        1_500_000_000,
    )
    # The fake's cards here serve no GPM: their activity figures (issue 41) are absent too.
    gpm = {figure: Reason.UNSUPPORTED for _, figure, _ in GPM_CARD_METRICS}
    assert dict(blind.reasons) == {name: Reason.UNSUPPORTED for name in NOT_ANSWERED} | gpm
    assert (
        dict(old.reasons)
        == {
            "ecc_corrected_volatile": Reason.INVALID_DATA,
            "energy_joules": Reason.INVALID_DATA,
            "clock_sm_hz": Reason.INVALID_DATA,
            "pcie_replays": Reason.INVALID_DATA,
        }
        | gpm
    )
    assert old.throttle_reasons is not None and dict(old.throttle_reasons)["gpu_idle"] is True
    devices = payload["devices"]
    assert "hgmlDeviceGetCurrentClocksThrottleReasons" in devices[2]
    assert "hgmlDeviceGetCurrentClocksThrottleReasons" not in devices[0]
    # The plain temperature call missing on card 1 only: the versioned one answered there.
    assert [c.temperature_celsius for c in cards] == [52.0, 44.0, 35.0]
    assert ["hgmlDeviceGetTemperatureV" in d for d in devices] == [False, True, False]
    assert (cards[0].unhealthy_reason, cards[1].unhealthy, cards[2].unhealthy) == (
        "row_remap_pending",
        False,
        False,
    )


def test_a_wrong_temperature_struct_version_is_refused_by_the_fake(libhgml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    """(R-X7) The fake checks hgmlTemperature_v1's version, so our declaration's is the one
    the header defines: any other answers ARGUMENT_VERSION_MISMATCH (25)."""
    scenario([scenarios.whole(40)])
    lib = ctypes.CDLL(str(libhgml))
    lib.hgmlDeviceGetTemperatureV.argtypes = (
        hgml.hgmlDevice_t,
        ctypes.POINTER(hgml.hgmlTemperature_v1_t),
    )
    handle = hgml.hgmlDevice_t()
    assert lib.hgmlInitWithFlags(0) == 0
    try:
        assert lib.hgmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) == 0
        wrong = hgml.hgmlTemperature_v1_t(version=hgml.Hgml.hgmlTemperature_v1 + 1)
        assert lib.hgmlDeviceGetTemperatureV(handle, ctypes.byref(wrong)) == 25
        right = hgml.hgmlTemperature_v1_t(version=hgml.Hgml.hgmlTemperature_v1)
        assert lib.hgmlDeviceGetTemperatureV(handle, ctypes.byref(right)) == 0
        assert right.temperature == 35  # the fake's default reading
    finally:
        lib.hgmlShutdown()


def test_the_whole_agent_publishes_ppu_health(
    libhgml: Path, scenario, tmp_path: Path, launch
) -> None:  # type: ignore[no-untyped-def]
    """(R-X7) Over real HTTPS on a PPU node: counters typed counter ending in `_total`, in
    base units; an unsupported figure has no sample and its capability says why; the
    unhealthy card's reason is a label; promtool takes the text with nothing to say."""
    path = scenario(scenarios.ppu_health())
    agent = serve_fake_library(
        launch, "thead", libhgml, tmp_path, env={fake.SCENARIO_ENV: str(path)}
    )
    with agent.client() as client:
        text = client.get("/metrics").content
        doc = client.get("/monitor/snapshot").json()
    lines = text.decode().splitlines()
    for name in ("ecc_errors", "energy_joules", "pcie_replays"):
        assert f"# TYPE gpustack_accelerator_{name}_total counter" in lines
    got = series(text)

    def by_card(name: str, **match: str) -> dict[str, float]:
        return {
            ls["id"]: v
            for ls, v in got.get(name, [])
            if all(ls.get(k) == want for k, want in match.items())
        }

    pre = "gpustack_accelerator_"
    assert by_card(f"{pre}energy_joules") == {card_id(40): 98_765.432}
    assert by_card(f"{pre}pcie_replays") == {card_id(40): 3.0}
    assert by_card(f"{pre}ecc_errors", error="uncorrected", counter="aggregate") == {
        card_id(40): 3.0,
        card_id(42): 0.0,
    }
    assert by_card(f"{pre}clock_hertz", clock="sm") == {card_id(40): 1.45e9, card_id(41): 1.5e9}
    assert by_card(f"{pre}figure_capability", figure="pcie_replays", reason="unsupported") == {
        card_id(41): 0.0
    }
    assert by_card(f"{pre}temperature_celsius") == {
        card_id(40): 52.0,
        card_id(41): 44.0,
        card_id(42): 35.0,
    }
    ((labels, value),) = got[f"{pre}unhealthy_reason"]
    assert (labels["id"], labels["reason"], value) == (card_id(40), "row_remap_pending", 1.0)
    assert_promtool_accepts(text)
    blind = doc["groups"][0]["accelerators"][1]["health"]
    assert blind["absentReasons"]["energy_joules"] == "unsupported"


# -- per process ---------------------------------------------------------------------------------


def test_several_samples_per_pid_the_newest_counts_and_a_listed_pid_without_one_is_idle(
    libhgml: Path, scenario
) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.ppu_mixed())
    request = ReadRequest(carved_device_ids=frozenset({card_id(41), card_id(43)}))
    (payload,) = read(libhgml, request)
    samples = payload["devices"][1]["hgmlDeviceGetProcessUtilization"]
    assert [s["pid"] for s in samples] == [8101, 8101, 8101]  # three rows for one PID
    slices, idle = TheadBackend().parse(payload).processes
    assert [(r.pid, r.memory_bytes, r.cores_percent) for r in slices.rows] == [
        (8101, 40 * GIB, 55.0),  # the newest sample, not the largest (70)
        (8201, 6 * GIB, 0.0),
    ]
    # No sample newer than asked: NOT_FOUND, which is a measured idle, not an error.
    assert idle.device_id == card_id(43)
    assert payload["devices"][3]["hgmlDeviceGetProcessUtilization"]["code"] == 6
    assert (idle.cores_reason, idle.rows[0].cores_percent) == (None, 0.0)
    # The newer call is never asked of HGML (it answers NOT_SUPPORTED where it exists at all).
    assert all("hgmlDeviceGetProcessesUtilizationInfo" not in d for d in payload["devices"])


def test_permission_refused_is_permission_never_idle_nor_transient(libhgml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    listing, samples = "hgmlDeviceGetComputeRunningProcesses_v3", "hgmlDeviceGetProcessUtilization"
    refused = {"error": "HGML_ERROR_NO_PERMISSION", "code": scenarios.NO_PERMISSION}
    both = scenarios.slices_one_busy()
    both["faults"] = dict.fromkeys((listing, samples), scenarios.NO_PERMISSION)
    scenario([both])
    (payload,) = read(libhgml, ReadRequest(carved_device_ids=frozenset({card_id(41)})))
    assert payload["devices"][0][listing] == refused
    (answer,) = TheadBackend().parse(payload).processes
    assert (answer.memory_reason, answer.cores_reason) == (Reason.PERMISSION, Reason.PERMISSION)
    assert answer.rows == ()
    # Only the samples refused: memory is still each process's, compute is `permission`.
    only = scenarios.slices_one_busy()
    only["faults"] = {samples: scenarios.NO_PERMISSION}
    scenario([only])
    (payload,) = read(libhgml, ReadRequest(carved_device_ids=frozenset({card_id(41)})))
    assert payload["devices"][0][samples] == refused
    (answer,) = TheadBackend().parse(payload).processes
    assert (answer.memory_reason, answer.cores_reason) == (None, Reason.PERMISSION)
    assert [(r.pid, r.memory_bytes, r.cores_percent) for r in answer.rows] == [
        (8101, 40 * GIB, None),
        (8201, 6 * GIB, None),
    ]
    # Card figures do not depend on per-process permission.
    assert TheadBackend().parse(payload).cards[0].cores_utilization_percent == 55.0


def test_the_memory_sentinel_is_absent_not_zero(libhgml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.memory_sentinel())
    (payload,) = read(libhgml, ReadRequest(carved_device_ids=frozenset({card_id(41)})))
    (answer,) = TheadBackend().parse(payload).processes
    assert [(r.pid, r.memory_bytes) for r in answer.rows] == [(8101, 4 * GIB), (8201, None)]


@pytest.mark.parametrize(
    ("mode", "rows", "reason"), [("once", 12, None), ("always", 1, "truncated")]
)
def test_a_process_list_that_grows_between_probe_and_read(
    libhgml: Path, scenario, mode: str, rows: int, reason: str | None
) -> None:  # type: ignore[no-untyped-def]
    doc = scenarios.whole(41, processes=[(8101, GIB), (8201, GIB)], samples=[(8101, 5, 40, 5)])
    doc.update(grow=10 if mode == "once" else 1, grow_always=mode == "always")
    scenario([doc])
    (payload,) = read(libhgml, ReadRequest(carved_device_ids=frozenset({card_id(41)})))
    (answer,) = TheadBackend().parse(payload).processes
    # Asked again when the list outgrew the buffer; never a partial list published as whole.
    assert len(answer.rows) == rows
    assert answer.memory_reason == (None if reason is None else Reason(reason))


def test_slices_through_the_monitor_with_their_cap(libhgml: Path, scenario, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.ppu_mixed())
    pods = [
        thead_pod(name, {"main": [accel(41, 3, 800_000)]}, instance=name, limits=CAP)
        for name in ("busy", "idle")
    ]
    process(tmp_path / "proc", 8101, "busy")
    process(tmp_path / "proc", 8201, "idle")
    m = monitor(libhgml, tmp_path, pods)
    m.run_round()
    m.stop()
    got = entries(m.current.metrics.plain)
    assert got["busy"]["memory_used_mib"] == 40960 and got["busy"]["memory_total_mib"] == 48960
    assert got["busy"]["cores_utilization_percent"] == 110.0  # 55% of the card, a 50% cap
    assert (got["idle"]["memory_used_mib"], got["idle"]["cores_utilization_percent"]) == (6144, 0)


# -- PIDs ----------------------------------------------------------------------------------------


def init_on_the_host(proc: Path) -> None:
    d = proc / "1"
    d.mkdir(parents=True)
    (d / "cgroup").write_text("0::/init.scope\n")
    (d / "comm").write_text("systemd\n")
    (d / "stat").write_text("1 (systemd) S 0 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 1 " + "0 " * 30)


@pytest.mark.parametrize(
    ("pid", "make_proc", "reason"),
    [
        (8101, lambda proc: None, Reason.EXITED),  # a PID that does not exist on the host
        # PID 1, as a process sees itself inside its container: on the host it is init.
        (1, init_on_the_host, Reason.NO_POD_COMPONENT),
    ],
)
def test_a_pid_that_is_not_a_pods_on_the_host_gets_its_reason(
    libhgml: Path, scenario, tmp_path: Path, pid: int, make_proc: Any, reason: Reason
) -> None:  # type: ignore[no-untyped-def]
    # HGML is assumed to report host PIDs (the agent runs with hostPID). A PID from another
    # namespace names nothing, or another process, on the host: a reason, never a guess.
    scenario([scenarios.whole(41, processes=[(pid, 40 * GIB), (8201, 6 * GIB)])])
    pods = [thead_pod("busy", {"main": [accel(41, 3, 800_000)]}, instance="busy", limits=CAP)]
    make_proc(tmp_path / "proc")
    process(tmp_path / "proc", 8201, "busy")
    m = monitor(libhgml, tmp_path, pods)
    published = m.run_round()
    m.stop()
    assert published.snapshot.slices is not None
    (device,) = published.snapshot.slices.devices
    assert device.memory_reason is reason and device.cores_reason is reason
    assert "memory_used_mib" not in entries(published.metrics.plain)["busy"]


# -- MIG and GPM ---------------------------------------------------------------------------------

WANTED = frozenset(
    {
        (card_id(42), scenarios.mig_uuid(0)),
        (card_id(42), scenarios.mig_uuid(1)),
        (card_id(42), "MIG-not-there"),
        (card_id(40), "MIG-on-a-card-without-mig"),
    }
)


def test_mig_partitions_by_recorded_id_over_an_empty_slot(libhgml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.ppu_mixed())
    (payload,) = read(libhgml, ReadRequest(partition_ids=WANTED))
    migs = payload["devices"][2]["migDevices"]
    assert [m["hgmlDeviceGetMigDeviceHandleByIndex"] for m in migs] == [0, 2]  # slot 1 empty
    # A MIG handle is asked for its identity and memory only: no temperature, no power.
    assert all(
        "hgmlDeviceGetTemperature" not in m and "hgmlDeviceGetPowerUsage" not in m for m in migs
    )
    got = {p.id: p for p in TheadBackend().parse(payload).partitions}
    busy, idle = got[scenarios.mig_uuid(0)], got[scenarios.mig_uuid(1)]
    assert (busy.memory_total_mib, busy.memory_used_mib) == (24_192, 20_512)
    assert (idle.memory_total_mib, idle.memory_used_mib, idle.memory_reason) == (12_032, 0, None)
    assert got["MIG-not-there"].memory_reason is Reason.TRANSIENT_DRIVER_ERROR
    assert got["MIG-on-a-card-without-mig"].memory_reason is Reason.UNSUPPORTED
    # One GPM sample per partition so far: nothing to compare it with.
    assert busy.cores_reason is Reason.NO_BASELINE and busy.cores_percent is None


def test_gpm_measures_a_partitions_compute_from_the_second_round(libhgml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.ppu_mixed())
    request = ReadRequest(carved_device_ids=frozenset({card_id(42)}), partition_ids=WANTED)
    first, second = read(libhgml, request, rounds=2, gap=GPM_MIN_INTERVAL * 1.5)
    parse = TheadBackend().parse
    assert {p.cores_reason for p in parse(first).partitions if p.memory_reason is None} == {
        Reason.NO_BASELINE
    }
    got = {p.id: p for p in parse(second).partitions}
    assert (got[scenarios.mig_uuid(0)].cores_percent, got[scenarios.mig_uuid(0)].cores_reason) == (
        64.5,
        None,
    )
    assert got[scenarios.mig_uuid(1)].cores_percent == 0.0  # idle: a measured zero
    # The process rows of the MIG card name their partition by GPU instance.
    (answer,) = parse(second).processes
    assert [(r.pid, r.partition_id) for r in answer.rows] == [(8301, scenarios.mig_uuid(0))]


@pytest.mark.parametrize(("accepted", "recorded"), [(2, 2), (1, 1)])
def test_gpm_support_is_asked_in_the_version_the_driver_accepts(
    libhgml: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, accepted: int, recorded: int
) -> None:
    """(R-X5) hgmlGpmSupport_t is asked as the header's version 2, and as version 1 (what
    GPUStack's binding sends) where the driver answers ARGUMENT_VERSION_MISMATCH to 2: either
    way the partition's compute is measured, and the payload records which version answered."""
    path = fake.write(tmp_path / "s.txt", [scenarios.mig_card()], gpm_support_version=accepted)
    monkeypatch.setenv(fake.SCENARIO_ENV, str(path))
    request = ReadRequest(partition_ids=WANTED)
    _, second = read(libhgml, request, rounds=2, gap=GPM_MIN_INTERVAL * 1.5)
    (device,) = second["devices"]
    assert device["hgmlGpmQueryDeviceSupport"] == {"isSupportedDevice": 1, "version": recorded}
    got = {p.id: p.cores_percent for p in TheadBackend().parse(second).partitions}
    assert got[scenarios.mig_uuid(0)] == 64.5


def test_a_driver_accepting_neither_gpm_support_version_leaves_compute_unsupported(
    libhgml: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(R-X5) Neither version accepted: the mismatch is recorded and the partition's compute
    is absent with `unsupported`, never a guess."""
    path = fake.write(tmp_path / "s.txt", [scenarios.mig_card()], gpm_support_version=3)
    monkeypatch.setenv(fake.SCENARIO_ENV, str(path))
    _, second = read(libhgml, ReadRequest(partition_ids=WANTED), rounds=2)
    (device,) = second["devices"]
    assert device["hgmlGpmQueryDeviceSupport"]["code"] == 25  # ARGUMENT_VERSION_MISMATCH
    reasons = {p.id: p.cores_reason for p in TheadBackend().parse(second).partitions}
    assert reasons[scenarios.mig_uuid(0)] is Reason.UNSUPPORTED


def test_a_ppu_without_gpm_leaves_partition_compute_unsupported(libhgml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario([scenarios.mig_card(gpm=False)])
    request = ReadRequest(partition_ids=frozenset({(card_id(42), scenarios.mig_uuid(0))}))
    _, second = read(libhgml, request, rounds=2, gap=GPM_MIN_INTERVAL * 1.5)
    assert second["devices"][0]["hgmlGpmQueryDeviceSupport"] == {
        "isSupportedDevice": 0,
        "version": 2,
    }
    (p,) = TheadBackend().parse(second).partitions
    assert (p.memory_total_mib, p.cores_percent, p.cores_reason) == (
        24_192,
        None,
        Reason.UNSUPPORTED,
    )


def test_recorded_times_come_from_the_backends_clock(libhgml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario([scenarios.mig_card()])
    clock = ManualClock()
    backend = TheadBackend({"hgml": str(libhgml)}, clock=clock)
    backend.open()
    request = ReadRequest(partition_ids=frozenset({(card_id(42), scenarios.mig_uuid(0))}))
    try:
        backend.read(request)
        time.sleep(GPM_MIN_INTERVAL * 1.5)
        clock.advance(15.0)
        payload = backend.read(request)
    finally:
        backend.close()
    (mig, _) = payload["devices"][0]["migDevices"]
    assert mig["hgmlGpmMigSampleGet"] == {"at": 115.0, "previousAt": 100.0}
    metrics = mig["hgmlGpmMetricsGet"]
    assert metrics.pop("HGML_GPM_METRIC_SM_UTIL") == 64.5
    # Every other id is asked of the GPU instance too (issue 41); this one serves none of them.
    assert len(metrics) == len(GPM_CARD_METRICS) - 1
    assert {m["error"] for m in metrics.values()} == {"HGML_ERROR_NOT_SUPPORTED"}


# -- the whole agent -----------------------------------------------------------------------------


def test_the_whole_agent_on_a_fake_ppu_node(
    libhgml: Path, scenario, tmp_path: Path, launch
) -> None:  # type: ignore[no-untyped-def]
    path = scenario(scenarios.ppu_mixed())
    mig = {"allocatedPhysicalProfile": "2g.24gb", "allocatedPhysicalID": scenarios.mig_uuid(0)}
    pods = [
        thead_pod("qwen", {"main": [accel(40, 1)]}, instance="qwen"),
        thead_pod("busy", {"main": [accel(41, 3, 800_000)]}, instance="busy", limits=CAP),
        thead_pod("idle", {"main": [accel(41, 3, 800_000)]}, instance="idle", limits=CAP),
        thead_pod("mig", {"main": [accel(42, 4, 400_000, **mig)]}, instance="mig"),
    ]
    for pid, owner in ((8101, "busy"), (8201, "idle"), (8301, "mig")):
        process(tmp_path / "proc", pid, owner)
    agent = serve_fake_library(
        launch, "thead", libhgml, tmp_path, env={fake.SCENARIO_ENV: str(path)}, pods=pods
    )
    deadline = time.monotonic() + 20
    with agent.client() as client:
        while True:
            doc = client.get("/monitor/snapshot").json()
            parts = {p["id"]: p for p in doc["slices"].get("partitions", [])}
            if parts.get(scenarios.mig_uuid(0), {}).get("coresPercent") is not None:
                break
            assert time.monotonic() < deadline, doc
            time.sleep(0.2)
        text = client.get("/metrics").content
    (backend,) = doc["backends"]
    assert (backend["manufacturer"], backend["state"]) == ("thead", "ok")
    assert [c["id"] for c in doc["groups"][0]["accelerators"]] == [
        card_id(n) for n in range(40, 44)
    ]
    assert parts[scenarios.mig_uuid(0)]["memoryTotalMiB"] == 24_192
    got = entries(text)
    assert got["busy"]["cores_utilization_percent"] == 110.0
    assert got["idle"]["cores_utilization_percent"] == 0.0
    assert got["mig"]["cores_utilization_percent"] == 64.5  # measured by GPM, never restated
    assert got["mig"]["memory_total_mib"] == 24_192


# -- links and placement (R-X3) -----------------------------------------------------------------


def test_icn_links_and_numa_nodes_through_our_declarations(
    libhgml: Path, scenario, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """(R-X3) Per card pair the link type and count and each card's NUMA node, through HGML's
    ICN-link calls and our hgmlPciInfo_t: direct ICN links counted by their remote end's bus id
    (a link that is down not counted) as `icnlink`, links into an ICN switch as `icnswitch`,
    the PCIe path from the common ancestor (NVML's levels); a pair HGML cannot place has no
    PCIe kind (not "PCIe"); the NUMA node from sysfs (HGML has no call for it), absent where
    sysfs has none."""
    scenario(scenarios.ppu_links())
    for n, node in ((0, "0\n"), (1, "0\n"), (2, "1\n")):
        pci = tmp_path / "sys" / "bus" / "pci" / "devices" / f"0000:{0x10 + n:02x}:00.0"
        pci.mkdir(parents=True)
        (pci / "numa_node").write_text(node)
    backend = TheadBackend({"hgml": str(libhgml)}, sysfs=tmp_path / "sys")
    backend.open()
    try:
        payload = backend.read(ReadRequest())
    finally:
        backend.close()
    cards = {c.id: c for c in TheadBackend().parse(payload).cards}
    a, b, c, d = (card_id(n) for n in range(50, 54))

    def links(card: str) -> set[tuple[str, str, int | None]]:
        found = cards[card].links
        assert found is not None
        return {(link.peer_id, link.link, link.count) for link in found}

    assert links(a) == {(b, "icnlink", 3), (b, "pcie_switch", None), (c, "system", None)}
    assert links(b) == {
        (a, "icnlink", 3),
        (a, "pcie_switch", None),
        (c, "system", None),
        (d, "system", None),
    }
    assert links(d) == {(c, "icnswitch", 2), (c, "pcie_host_bridge", None), (b, "system", None)}
    assert [cards[x].numa_node for x in (a, b, c, d)] == [0, 0, 1, None]
    entry = payload["topology"]["devices"][0]
    assert "hgmlDeviceGetNumaNodeId" not in entry and entry["sysfsNumaNode"] == "0\n"
    assert entry["hgmlDeviceGetPciInfo_v3"] == {"busId": "00000000:10:00.0"}
