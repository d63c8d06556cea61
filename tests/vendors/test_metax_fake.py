"""The metax backend end to end: our ctypes declarations, read() and parse(), against a fake
libmxsml.so compiled by the test from tests/fakelib/metax/fake_mxsml.c (R-V1..R-V6), then the
monitor round (grants, attribution, slices, figures) and the whole agent on top.

The situations of issue 17: the count returned directly, a count-0 probe with a one-row buffer,
a missing `_v3` symbol, sGPU off, sGPU id -1, a VF device in the list, a lost device; and the
sGPU slices matched to the grants that hold them.
"""

from __future__ import annotations

import ctypes
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from devicemanager.agent.monitor import Monitor
from devicemanager.model import HealthFigure as H
from devicemanager.model import ReadRequest, Reason, VendorReading
from tests.conftest import REPO, agent_env, assert_promtool_accepts
from tests.fakelib import metax as fake
from tests.fakelib.metax import scenarios
from tests.fakelib.metax.scenarios import sgpu_uuid
from tests.vendors import kit
from tests.vendors.conftest import ManualClock, links_of, serve_fake_library, topology_reads
from tests.vendors.kit import series
from tests.world import gpu, pod, process, uid
from vendors import _metax_lib as mx
from vendors._common import EVERY_ACTIVITY
from vendors.metax import MetaxBackend, error

pytestmark = pytest.mark.timeout(90)
GIB = 1 << 30
MIB = 1 << 20


@pytest.fixture(scope="module")
def libmxsml() -> Path:
    why = fake.missing()
    if why:
        pytest.skip(f"the fake libmxsml cannot be built here: {why}")
    return fake.built()


@pytest.fixture
def scenario(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    def _write(devices: list[dict[str, Any]], processes: Any = (), **top: Any) -> Path:
        path = fake.write(tmp_path / "scenario.txt", devices, processes, **top)
        monkeypatch.setenv(fake.SCENARIO_ENV, str(path))
        return path

    return _write


def read(lib: Path, request: ReadRequest, n: int = 1) -> list[dict[str, Any]]:
    backend = MetaxBackend({"mxsml": str(lib)}, node_name="n1")
    backend.open()
    try:
        return [backend.read(request) for _ in range(n)]
    finally:
        backend.close()


def parse(payload: dict[str, Any]) -> VendorReading:
    return MetaxBackend(node_name="n1").parse(payload)


def carved(*ids: str, partitions: frozenset[tuple[str, str]] = frozenset()) -> ReadRequest:
    return ReadRequest(carved_device_ids=frozenset(ids), partition_ids=partitions)


# -- cards ------------------------------------------------------------------------------------


def test_the_count_comes_back_as_the_return_value_and_units_are_turned_once(
    libmxsml: Path, scenario
) -> None:  # type: ignore[no-untyped-def]
    scenario(*scenarios.whole_cards())
    (payload,) = read(libmxsml, ReadRequest())
    # mxSmlGetDeviceCount() returns the count: no out-parameter to read garbage from.
    assert payload["mxSmlGetDeviceCount"] == 3 and len(payload["devices"]) == 3
    busy, idle, _ = parse(payload).cards
    assert (busy.id, busy.index, busy.name) == (gpu(20), 0, "MXC500")
    # KB -> MiB, x100 -> degrees C, three 12 V rails in mW summed -> W, Xcore percent.
    assert (busy.memory_total_mib, busy.memory_used_mib) == (65536, 59_963)
    assert busy.temperature_celsius == 52.43 and busy.power_usage_watts == 308.8
    assert busy.cores_utilization_percent == 87.0 and idle.cores_utilization_percent == 0.0
    assert busy.memory_utilization_percent == 91.5
    # The other ids allocators record: HAMi's `<node>-metax-<index>`; where it sits on the bus.
    assert busy.aliases == ("n1-metax-0",) and dict(busy.address) == {"bdf": "0000:0e:00.0"}
    assert parse(payload).driver_version == fake.DRIVER
    # No carved card asked for: no per-process or sGPU query was made at all (R-V3).
    assert not any(
        k.startswith("mxSmlGetSingleGpuProcess") or k == "sgpu"
        for d in payload["devices"]
        for k in d
    )


def test_an_n_class_card_reads_its_compute_off_the_dla(libmxsml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario(*scenarios.n_class())
    (payload,) = read(libmxsml, ReadRequest())
    (card,) = parse(payload).cards
    assert (card.name, card.memory_total_mib, card.cores_utilization_percent) == (
        "MXN100",
        16384,
        17.0,
    )


def test_a_vf_in_the_list_is_skipped_and_indexes_stay_sequence_indexes(
    libmxsml: Path, scenario
) -> None:  # type: ignore[no-untyped-def]
    scenario(*scenarios.vf_in_list())
    (payload,) = read(libmxsml, carved(gpu(53)))
    reading = parse(payload)
    assert payload["mxSmlGetDeviceCount"] == 4
    assert [(c.id, c.index) for c in reading.cards] == [(gpu(50), 0), (gpu(53), 3)]
    # Nothing but its identity was asked of a virtual function.
    assert [sorted(d) for d in payload["devices"][1:3]] == [["deviceId", "mxSmlGetDeviceInfo"]] * 2
    (answer,) = reading.processes
    assert [(r.pid, r.memory_bytes) for r in answer.rows] == [(7501, 6 * GIB)]


def test_process_rows_are_matched_on_the_sequence_index_not_the_drivers_gpu_id(
    libmxsml: Path, scenario
) -> None:  # type: ignore[no-untyped-def]
    scenario(*scenarios.whole_cards())
    (payload,) = read(libmxsml, carved(gpu(20), gpu(21), gpu(22)))
    infos = [d["mxSmlGetDeviceInfo"]["gpuId"] for d in payload["devices"]]
    assert infos == [1, 2, 3]  # DeviceInfo.gpuId: the driver's id, one off from the index
    rows = {
        p.device_id: [(r.pid, r.memory_bytes) for r in p.rows] for p in parse(payload).processes
    }
    # PID 7001's row lists cards 0 and 2; each card reads only its own entry.
    assert rows == {gpu(20): [(7001, 40 * GIB)], gpu(21): [], gpu(22): [(7001, 8 * GIB)]}


def test_a_lost_card_keeps_its_name_and_is_unhealthy(libmxsml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario(*scenarios.card_lost())
    first, second = read(libmxsml, carved(gpu(62)), n=2)
    assert [c.unhealthy for c in parse(first).cards] == [False] * 4
    reading = parse(second)
    assert [c.id for c in reading.cards] == [gpu(60 + i) for i in range(4)]
    lost = reading.cards[2]
    assert (lost.index, lost.unhealthy, lost.unhealthy_reason) == (2, True, "device_lost")
    assert (lost.memory_used_mib, lost.cores_utilization_percent, lost.power_usage_watts) == (
        None,
        None,
        None,
    )
    (answer,) = reading.processes
    assert answer.rows == () and answer.memory_reason is Reason.TRANSIENT_DRIVER_ERROR
    assert [c.unhealthy for i, c in enumerate(reading.cards) if i != 2] == [False] * 3


def test_a_card_lost_before_the_agent_started_is_left_out(libmxsml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    cards, processes = scenarios.card_lost()
    cards[2].pop("lost_after")
    cards[2]["lost"] = 1
    scenario(cards, processes)
    (payload,) = read(libmxsml, ReadRequest())
    assert [c.index for c in parse(payload).cards] == [0, 1, 3]


def test_a_reopen_looks_for_cards_again(libmxsml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario([fake.card(gpu(0))])
    backend = MetaxBackend({"mxsml": str(libmxsml)}, node_name="n1")
    backend.open()
    first = backend.parse(backend.read(ReadRequest()))
    backend.close()  # what the monitor does after a failed round
    scenario([fake.card(gpu(0)), fake.card(gpu(1))])  # a card came back after a driver reload
    lib = mx.Mxsml(ctypes.CDLL(str(libmxsml), mode=ctypes.RTLD_LOCAL))
    lib.function("mxSmlInit")()
    assert lib.function("mxSmlGetDeviceCount")() == 1  # a plain init keeps what it found
    backend.open()
    second = backend.parse(backend.read(ReadRequest()))
    backend.close()
    assert [c.id for c in first.cards] == [gpu(0)]
    assert [c.id for c in second.cards] == [gpu(0), gpu(1)]


# -- per process ------------------------------------------------------------------------------


def test_the_probe_is_a_count_0_call_with_a_one_row_buffer(libmxsml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario(*scenarios.two_sgpus())
    lib = mx.Mxsml(ctypes.CDLL(str(libmxsml), mode=ctypes.RTLD_LOCAL))
    assert lib.function("mxSmlInitWithFlags")(mx.INIT_FLAG_REINIT) == mx.SUCCESS
    fn = lib.function("mxSmlGetSingleGpuProcess_v3")
    count = ctypes.c_uint(0)
    # Why a buffer is passed at all: the library refuses a NULL one.
    assert fn(1, ctypes.byref(count), None) == mx.INVALID_INPUT
    one = (mx.ProcessInfoV3 * 1)()
    assert fn(1, ctypes.byref(count), one) == mx.SUCCESS
    assert count.value == 2 and one[0].processId == 0  # the count; nothing written
    # The backend does exactly that, then reads them all.
    (payload,) = read(libmxsml, carved(gpu(30), gpu(31)))
    idle, sliced = payload["devices"]
    assert idle["mxSmlGetSingleGpuProcess_v3"] == []  # a measured empty list, not a failure
    assert [r["processId"] for r in sliced["mxSmlGetSingleGpuProcess_v3"]] == [7101, 7201]


def test_a_library_that_answers_insufficient_size_to_the_probe(libmxsml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    cards, processes = scenarios.two_sgpus()
    cards[1]["insufficient"] = 1
    scenario(cards, processes)
    (payload,) = read(libmxsml, carved(gpu(31)))
    (answer,) = parse(payload).processes
    assert answer.memory_reason is None and [r.pid for r in answer.rows] == [7101, 7201]


def test_v3_rows_name_the_sgpu_and_minus_one_is_the_whole_card(libmxsml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    cards, processes = scenarios.two_sgpus()
    processes.append(fake.process(7301, (1, 700 * MIB)))  # sGPU id -1: outside any slice
    scenario(cards, processes)
    (payload,) = read(libmxsml, carved(gpu(31)))
    reading = parse(payload)
    (answer,) = reading.processes
    assert [(r.pid, r.partition_id) for r in answer.rows] == [
        (7101, sgpu_uuid(31, 0)),
        (7201, sgpu_uuid(31, 2)),
        (7301, None),
    ]
    assert all(r.cores_percent is None for r in answer.rows)
    assert answer.cores_reason is Reason.UNSUPPORTED  # MXSML has no per-process utilization
    assert reading.via == "mxSmlGetSingleGpuProcess_v3"


@pytest.mark.parametrize(
    ("variant", "answered"),
    [("no_v3", "mxSmlGetSingleGpuProcess_v2"), ("v1_only", "mxSmlGetSingleGpuProcess")],
)
def test_a_missing_v3_symbol_falls_back_to_the_older_call(
    scenario, variant: str, answered: str
) -> None:  # type: ignore[no-untyped-def]
    if why := fake.missing():
        pytest.skip(why)
    scenario(*scenarios.two_sgpus())
    (payload,) = read(fake.built(variant), carved(gpu(31)))
    device = payload["devices"][1]
    assert device["mxSmlGetSingleGpuProcess_v3"] == {"error": "FunctionNotFound", "code": 999}
    assert answered in device
    reading = parse(payload)
    assert reading.via == answered
    (answer,) = reading.processes
    # The same processes and memory; an older row cannot say which sGPU it runs in.
    assert [(r.pid, r.memory_bytes, r.partition_id) for r in answer.rows] == [
        (7101, 15_020 * MIB, None),
        (7201, 1_203 * MIB, None),
    ]
    assert answer.memory_reason is None


# -- sGPU -------------------------------------------------------------------------------------


def test_sgpus_are_read_on_their_own_with_their_units_turned(libmxsml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario(*scenarios.two_sgpus())
    (payload,) = read(libmxsml, carved(gpu(31)))
    sliced = payload["devices"][1]["sgpu"]
    assert sliced["mxSmlGetSgpuToggle"] == 1 and [s["sgpuId"] for s in sliced["sgpus"]] == [0, 2]
    busy, idle = parse(payload).partitions
    assert (busy.id, busy.parent_id) == (sgpu_uuid(31, 0), gpu(31))
    # 2,875 ten-thousandths of the card; bytes -> MiB.
    assert (busy.cores_percent, busy.memory_total_mib, busy.memory_used_mib) == (
        28.75,
        16384,
        15_020,
    )
    assert busy.aliases == (f"{gpu(31)}::sgpu-0",)  # the id MetaX's device plugin registered
    assert (idle.cores_percent, idle.memory_used_mib, idle.cores_reason) == (0.0, 1_203, None)


def test_sgpu_off_leaves_the_figures_absent_not_zero(libmxsml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario(*scenarios.sgpu_off())
    wanted = frozenset({(gpu(40), "GPU-some-sgpu"), (gpu(41), "GPU-another")})
    (payload,) = read(libmxsml, carved(gpu(40), gpu(41), partitions=wanted))
    off, unsupported = (d["sgpu"] for d in payload["devices"])
    assert off == {"mxSmlGetSgpuToggle": 0}  # mode off: no slot was asked
    assert unsupported == {"mxSmlGetSgpuToggle": {"error": "OperationNotSupport", "code": 3}}
    reading = parse(payload)
    assert {
        (p.id, p.memory_reason, p.cores_reason, p.cores_percent) for p in reading.partitions
    } == {
        ("GPU-some-sgpu", Reason.UNSUPPORTED, Reason.UNSUPPORTED, None),
        ("GPU-another", Reason.UNSUPPORTED, Reason.UNSUPPORTED, None),
    }
    for answer in reading.processes:
        assert all(r.partition_id is None for r in answer.rows)


def test_a_failing_sgpu_figure_is_absent_with_its_reason(libmxsml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    cards, processes = scenarios.two_sgpus()
    cards[1]["sgpus"][0]["faults"] = {"mxSmlGetSgpuUsage": fake.SYSFS_ERROR}
    cards[1]["sgpus"][1]["faults"] = {"mxSmlGetSgpuMemory": fake.NOT_SUPPORTED}
    scenario(cards, processes)
    (payload,) = read(libmxsml, carved(gpu(31)))
    busy, idle = parse(payload).partitions
    assert (busy.cores_percent, busy.cores_reason) == (None, Reason.TRANSIENT_DRIVER_ERROR)
    assert busy.memory_used_mib == 15_020
    assert (idle.memory_used_mib, idle.memory_reason, idle.cores_percent) == (
        None,
        Reason.UNSUPPORTED,
        0.0,
    )


# -- the monitor round: sGPU slices matched to the grants that hold them ---------------------


def hami_sgpu(name: str, card: str, mem: int, cores: int) -> dict[str, Any]:
    return pod(
        name,
        containers=["main"],
        annotations={"hami.io/metax-sgpu-devices-allocated": f"{card},Metax-SGPU,{mem},{cores}:;"},
    )


def gpustack(name: str, accelerators: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    doc = {
        "main": {
            "devices": {
                "groups": [{"id": 0, "manufacturer": "metax", "accelerators": accelerators}]
            }
        }
    }
    return pod(
        name,
        containers=["main"],
        instance=name,
        annotations={"device.gpustack.ai/accelerator.allocated": json.dumps(doc)},
        **extra,
    )


def monitor(lib: Path, tmp: Path, pods: list[dict[str, Any]]) -> Monitor:
    return kit.monitor(MetaxBackend({"mxsml": str(lib)}, node_name="n1"), tmp / "proc", pods)


def entries(m: Monitor) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for name, samples in series(m.current.metrics.plain).items():
        if name.startswith("gpustack_instance_accelerator_"):
            for labels, value in samples:
                field = name.removeprefix("gpustack_instance_accelerator_")
                out.setdefault(labels["instance_name"], {})[field] = value
    return out


def test_hami_sgpu_slices_read_their_own_sgpus(libmxsml: Path, scenario, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    scenario(*scenarios.two_sgpus())
    pods = [hami_sgpu("busy", gpu(31), 16384, 30), hami_sgpu("idle", gpu(31), 8192, 20)]
    process(tmp_path / "proc", 7101, "busy")
    process(tmp_path / "proc", 7201, "idle")
    m = monitor(libmxsml, tmp_path, pods)
    published = m.run_round()
    m.stop()
    got = entries(m)
    # Memory: the slice's processes; compute: its sGPU's own usage, 28.75% of the card, which
    # is 96% of a 30% quota.
    assert got["busy"]["memory_total_mib"] == 16384 and got["busy"]["memory_used_mib"] == 15_020
    assert got["busy"]["cores_utilization_percent"] == math.ceil(28.75 * 100 / 30)
    assert got["idle"]["cores_utilization_percent"] == 0.0  # its sGPU measured idle
    # The per-process entry point still says what it cannot do.
    capability = {
        (labels["entry_point"], labels["reason"]): value
        for labels, value in series(published.metrics.plain)[
            "gpustack_accelerator_process_capability"
        ]
    }
    assert capability == {("memory", ""): 1.0, ("cores", "unsupported"): 0.0}


def test_an_sgpu_two_holders_run_in_gives_neither_its_usage(
    libmxsml: Path, scenario, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    cards, processes = scenarios.two_sgpus()
    processes.append(fake.process(7102, (1, 100 * MIB, 0)))  # idle's second process, in sGPU 0
    scenario(cards, processes)
    pods = [hami_sgpu("busy", gpu(31), 16384, 30), hami_sgpu("idle", gpu(31), 8192, 20)]
    for pid, owner in ((7101, "busy"), (7201, "idle"), (7102, "idle")):
        process(tmp_path / "proc", pid, owner)
    m = monitor(libmxsml, tmp_path, pods)
    m.run_round()
    m.stop()
    got = entries(m)
    # sGPU 0 runs processes of both pods: its usage is neither's. Memory is still per process.
    assert got["busy"]["memory_used_mib"] == 15_020 and got["idle"]["memory_used_mib"] == 1_303
    assert "cores_utilization_percent" not in got["busy"]
    assert "cores_utilization_percent" not in got["idle"]


def test_sgpu_off_and_whole_card_processes_leave_slice_compute_absent(
    libmxsml: Path, scenario, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    scenario(*scenarios.sgpu_off())
    pods = [gpustack("timeshared", [{"id": gpu(40), "index": 0, "mode": 3, "allocated": 800_000}])]
    process(tmp_path / "proc", 7301, "timeshared")
    m = monitor(libmxsml, tmp_path, pods)
    published = m.run_round()
    m.stop()
    got = entries(m)["timeshared"]
    assert got["memory_used_mib"] == 11_000 and got["memory_total_mib"] == 32768
    assert "cores_utilization_percent" not in got  # absent, never a plausible 0
    (usage,) = published.snapshot.slices.usages
    assert usage.cores_utilization_percent is None


def test_a_partition_grant_naming_the_sgpu_reads_it_directly(
    libmxsml: Path, scenario, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    scenario(*scenarios.two_sgpus())
    by_uuid = {
        "id": gpu(31),
        "index": 1,
        "mode": 4,
        "allocated": 400_000,
        "allocatedPhysicalProfile": "sgpu",
        "allocatedPhysicalID": sgpu_uuid(31, 0),
    }
    # The same sGPU recorded under the id MetaX's device plugin registered it with.
    by_plugin = dict(by_uuid, allocatedPhysicalID=f"{gpu(31)}::sgpu-0")
    pods = [gpustack("direct", [by_uuid]), gpustack("plugin", [by_plugin])]
    m = monitor(libmxsml, tmp_path, pods)
    first, second = m.run_round().snapshot, m.run_round().snapshot
    m.stop()

    def figures(snap: Any) -> set[tuple[Any, ...]]:
        return {
            (
                p.pod_uid,
                p.id,
                p.memory_total_mib,
                p.memory_used_mib,
                p.cores_percent,
                p.memory_reason,
            )
            for p in snap.slices.partitions
        }

    # A partition's own figures, never restated against a cap.
    measured = (sgpu_uuid(31, 0), 16384, 15_020, 28.75, None)
    # The plugin's id is one of the sGPU's aliases: the sGPUs of the card a grant names are
    # read whole, so even the first round resolves it.
    assert (
        figures(first)
        == figures(second)
        == {(uid("direct"), *measured), (uid("plugin"), *measured)}
    )


# -- the whole agent --------------------------------------------------------------------------


# -- the card's health beyond one bit (R-X7) ---------------------------------------------------


def test_card_health_through_our_ctypes(libmxsml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    """(R-X7) ECC (SRAM and DRAM) and retired pages, the throttle mask in MetaX's own bits and
    the Xcore and memory clocks as MXSML answers them through our declarations: in base units;
    OperationNotSupport is `unsupported`; all ones is `invalid_data`; energy, PCIe replays,
    aggregate ECC and the graphics clock have no call (`unsupported`)."""
    scenario(*scenarios.health())
    (payload,) = read(libmxsml, ReadRequest())
    full, blind, odd = (c.health for c in parse(payload).cards)
    assert full is not None and blind is not None and odd is not None
    assert (
        full.number(H.ECC_CORRECTED_TOTAL),
        full.number(H.ECC_UNCORRECTED_TOTAL),
        full.number(H.REMAPPED_ROWS_UNCORRECTABLE),
    ) == (7, 1, 3)
    assert full.throttle_reasons is not None
    assert [r for r, on in full.throttle_reasons if on] == [
        "sw_power_cap",
        "sw_thermal_slowdown",  # HBM over-temperature, 0x20 (issue 43)
        "hw_power_brake_slowdown",
    ]
    assert (full.number(H.CLOCK_SM_HZ), full.number(H.CLOCK_MEMORY_HZ)) == (
        1_500_000_000,
        1_800_000_000,
    )
    never = {
        "ecc_corrected_volatile",  # the header's count is "total" (issue 43)
        "ecc_uncorrected_volatile",
        "ecc_corrected_aggregate",
        "ecc_uncorrected_aggregate",
        "remapped_rows_correctable",
        "remapped_rows_pending",
        "remapped_rows_failed",
        "energy_joules",
        "clock_graphics_hz",
        "pcie_replays",
        "pcie_naks",  # no NAK counter either (issue 43)
        "xid_errors",
        # No activity figure, nor memory or vector busy time, in these scenarios (issue 41).
        *EVERY_ACTIVITY,
    }
    assert dict(full.reasons) == dict.fromkeys(never, Reason.UNSUPPORTED)
    assert {k for k, r in blind.reasons if r is Reason.UNSUPPORTED} == never | {
        "ecc_corrected_total",
        "ecc_uncorrected_total",
        "remapped_rows_uncorrectable",
        "throttle_reasons",
        "clock_memory_hz",
    }
    assert {k: r for k, r in odd.reasons if r is not Reason.UNSUPPORTED} == {
        "ecc_uncorrected_total": Reason.INVALID_DATA,
        "throttle_reasons": Reason.INVALID_DATA,
        "clock_sm_hz": Reason.INVALID_DATA,
    }
    # The domain's clocks as the library filled them.
    assert payload["devices"][0]["mxSmlGetClocks"]["xcore"] == [1500, 1500]


def test_the_whole_agent_publishes_c500_health(
    libmxsml: Path, scenario, tmp_path: Path, launch
) -> None:  # type: ignore[no-untyped-def]
    """(R-X7) Over real HTTPS on a C500 node: ECC counters in `_total`, retired pages under the
    remapped-rows family, throttle reasons 0/1, clocks in Hz, energy with no sample and its
    capability saying `unsupported`; promtool takes the text with nothing to say."""
    path = scenario(*scenarios.health())
    agent = serve_fake_library(
        launch,
        "metax",
        libmxsml,
        tmp_path,
        env={fake.SCENARIO_ENV: str(path), "KUBERNETES_NODE_NAME": "n1"},
    )
    with agent.client() as client:
        text = client.get("/metrics").content
    assert "# TYPE gpustack_accelerator_ecc_errors_total counter" in text.decode().splitlines()
    got = series(text)

    def by_card(name: str, **match: str) -> dict[str, float]:
        return {
            ls["id"]: v
            for ls, v in got.get(name, [])
            if all(ls.get(k) == want for k, want in match.items())
        }

    pre = "gpustack_accelerator_"
    assert by_card(f"{pre}ecc_errors", error="corrected", counter="total") == {
        gpu(90): 7.0,
        gpu(92): 0.0,
    }
    assert by_card(f"{pre}remapped_rows", state="uncorrectable") == {gpu(90): 3.0, gpu(92): 0.0}
    assert by_card(f"{pre}clock_throttle_active", reason="sw_power_cap") == {gpu(90): 1.0}
    assert by_card(f"{pre}clock_throttle_active", reason="sw_thermal_slowdown") == {gpu(90): 1.0}
    assert by_card(f"{pre}clock_throttle_active", reason="hw_slowdown") == {gpu(90): 0.0}
    assert by_card(f"{pre}clock_throttle_active", reason="hw_thermal_slowdown") == {}
    assert by_card(f"{pre}clock_hertz", clock="sm") == {gpu(90): 1.5e9, gpu(91): 1.6e9}
    assert by_card(f"{pre}energy_joules") == {}
    assert by_card(f"{pre}figure_capability", figure="pcie_replays", reason="unsupported") == {
        gpu(n): 0.0 for n in (90, 91, 92)
    }
    assert_promtool_accepts(text)


def test_the_whole_agent_on_the_fake_c500_with_sgpu_slices(
    libmxsml: Path, scenario, tmp_path: Path, launch
) -> None:  # type: ignore[no-untyped-def]
    path = scenario(*scenarios.two_sgpus())
    pods = [
        hami_sgpu("busy", gpu(31), 16384, 30),
        hami_sgpu("idle", gpu(31), 8192, 20),
        # HAMi's whole card, named after the node.
        pod(
            "whole",
            containers=["main"],
            annotations={"hami.io/metax-gpu-devices-allocated": "n1-metax-0,Metax-GPU,65536,100:;"},
        ),
    ]
    process(tmp_path / "proc", 7101, "busy")
    process(tmp_path / "proc", 7201, "idle")
    agent = serve_fake_library(
        launch,
        "metax",
        libmxsml,
        tmp_path,
        env={fake.SCENARIO_ENV: str(path), "KUBERNETES_NODE_NAME": "n1"},
        pods=pods,
    )
    with agent.client() as client:
        doc = client.get("/monitor/snapshot").json()
        text = client.get("/metrics").content
    (backend,) = doc["backends"]
    assert (backend["state"], backend.get("via")) == ("ok", "mxSmlGetSingleGpuProcess_v3")
    (group,) = doc["groups"]
    assert [(c["id"], c["aliases"]) for c in group["accelerators"]] == [
        (gpu(30), ["n1-metax-0"]),
        (gpu(31), ["n1-metax-1"]),
    ]
    got = series(text)
    cores = {
        ls["instance_name"]: v
        for ls, v in got["gpustack_instance_accelerator_cores_utilization_percent"]
    }
    assert cores == {"busy": 96.0, "idle": 0.0, "whole": 64.0}
    whole = [
        ls["id"]
        for ls, _ in got["gpustack_instance_accelerator_memory_used_mib"]
        if ls["instance_name"] == "whole"
    ]
    assert whole == [gpu(30)]  # the alias resolved to the card's own id


def test_record_writes_what_the_live_backend_reads(
    libmxsml: Path, scenario, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    path = scenario(*scenarios.two_sgpus())
    out = tmp_path / "c500.json"
    command = ["record", "metax", "--library", str(libmxsml), "-o", str(out)]
    result = subprocess.run(
        [sys.executable, "-m", "devicemanager", *command],
        capture_output=True,
        text=True,
        env=agent_env({fake.SCENARIO_ENV: str(path), "KUBERNETES_NODE_NAME": "c500-node"}),
        cwd=REPO,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(out.read_text())
    meta, payload = doc["meta"], doc["payload"]
    # A library given by path is a stand-in until the operator vouches for it (--kind).
    assert (meta["kind"], meta["driver"], meta["cards"]) == ("synthetic", fake.DRIVER, ["MXC500"])
    assert payload["node"] == "c500-node"
    # Every card carved: per-process and sGPU answers for each, ready to become a scenario.
    assert all("mxSmlGetSingleGpuProcess_v3" in d and "sgpu" in d for d in payload["devices"])
    assert len(parse(payload).partitions) == 2


# -- links and placement (R-X3) ------------------------------------------------------------------


def test_links_and_numa_nodes_through_our_ctypes(libmxsml: Path, scenario, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """(R-X3) Per pair of cards the topology level MXSML names (`mxSmlGetDeviceTopology`:
    MetaXLink, the PCIe paths; no count), and each card's NUMA node from its PCI device in
    sysfs (DeviceInfo.bdfId names it); a level with no kind here (ETH) and an
    OperationNotSupport answer place the pair nowhere (never "pcie"), and a card whose sysfs
    gives no node has none, the failure in the payload. A VF is in no pair."""
    scenario(*scenarios.links())
    sysfs = tmp_path / "sys"
    for name, text in (("0000:0e:00.0", "0\n"), ("0000:0f:00.0", "0\n"), ("0000:10:00.0", "1\n")):
        (sysfs / "bus" / "pci" / "devices" / name).mkdir(parents=True)
        (sysfs / "bus" / "pci" / "devices" / name / "numa_node").write_text(text)
    backend = MetaxBackend({"mxsml": str(libmxsml)}, node_name="n1", sysfs=sysfs)
    backend.open()
    try:
        payload = backend.read(ReadRequest())
    finally:
        backend.close()
    cards = {c.id: c for c in parse(payload).cards}
    a, b, c, d = (gpu(80 + n) for n in range(4))

    def links(card_id: str) -> set[tuple[str, str, int | None]]:
        return links_of(cards[card_id])

    assert links(a) == {(b, "metaxlink", None), (c, "numa_node", None)}
    assert links(b) == {(a, "metaxlink", None)}
    assert links(c) == {(a, "numa_node", None)}
    assert links(d) == set()
    assert [cards[x].numa_node for x in (a, b, c, d)] == [0, 0, 1, None]
    topology = payload["topology"]
    assert len(topology["pairs"]) == 6
    assert topology["devices"][3]["sysfsNumaNode"]["error"] == "FileNotFoundError"
    (refused,) = [p for p in topology["pairs"] if (p["a"], p["b"]) == (2, 3)]
    assert refused["mxSmlGetDeviceTopology"] == error(3)  # OperationNotSupport
    (eth,) = [p for p in topology["pairs"] if (p["a"], p["b"]) == (1, 2)]
    assert eth["mxSmlGetDeviceTopology"] == 7

    scenario(*scenarios.vf_in_list())
    backend.open()
    try:
        payload = backend.read(ReadRequest())
    finally:
        backend.close()
    assert [e["deviceId"] for e in payload["topology"]["devices"]] == [0, 3]
    assert [(p["a"], p["b"]) for p in payload["topology"]["pairs"]] == [(0, 3)]


def test_metax_links_are_read_once_a_minute(libmxsml: Path, scenario, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """(R-X3) One 15 s period a round on the backend's clock: the topology read in the first
    round is carried by the next three and read again in the fifth, 60 s later; a card that
    leaves enumeration has it read again at once."""

    def read_at(cards: list[dict[str, Any]], n: int) -> list[tuple[float, int]]:
        scenario(cards)
        clock = ManualClock(1000.0)
        backend = MetaxBackend(
            {"mxsml": str(libmxsml)}, node_name="n1", clock=clock, sysfs=tmp_path
        )
        return topology_reads(backend, clock, n)

    cards, _ = scenarios.links()
    assert read_at(cards, 5) == [(1000.0, 4)] * 4 + [(1060.0, 4)]
    cards, _ = scenarios.links()
    cards[3]["gone_after"] = 1
    assert read_at(cards, 2) == [(1000.0, 4), (1015.0, 3)]


def test_the_whole_agent_publishes_c500_links(
    libmxsml: Path, scenario, tmp_path: Path, launch
) -> None:  # type: ignore[no-untyped-def]
    """(R-X3) Over real HTTPS: `link_info` per card, peer and kind (`metaxlink`, `numa_node`),
    no `links` count (MXSML counts none), no series for the pairs MXSML does not place;
    promtool takes the text. (NUMA nodes come from the host's /sys here: not asserted.)"""
    path = scenario(*scenarios.links())
    agent = serve_fake_library(
        launch,
        "metax",
        libmxsml,
        tmp_path,
        env={fake.SCENARIO_ENV: str(path), "KUBERNETES_NODE_NAME": "n1"},
    )
    with agent.client() as client:
        text = client.get("/metrics").content
    got = series(text)
    a, b, c = (gpu(80 + n) for n in range(3))
    pairs = {
        (ls["id"], ls["peer_id"], ls["link"]) for ls, _ in got["gpustack_accelerator_link_info"]
    }
    assert pairs == {
        (a, b, "metaxlink"),
        (b, a, "metaxlink"),
        (a, c, "numa_node"),
        (c, a, "numa_node"),
    }
    assert "gpustack_accelerator_links" not in got
    assert_promtool_accepts(text)
