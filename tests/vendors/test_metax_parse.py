"""The metax backend's pure parse(): units, sentinels and damaged payloads, table by table, and a
hypothesis search that no payload shape makes it raise; then the core's rule that lets an sGPU's
own usage stand for the one slice that runs in it."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devicemanager.agent.replay import load_recording
from devicemanager.model import (
    DeviceProcesses,
    PartitionReading,
    ProcessRow,
    Reason,
    VendorReading,
)
from tests.conftest import FIXTURES
from tests.vendors.shapes import parsed_or_refused
from tests.world import accel, card, gpu, pod, process, run
from vendors import _metax_lib as mx
from vendors import metax

DIR = FIXTURES / "vendors" / "metax"
NOT_SUPPORTED = {"error": "OperationNotSupport", "code": 3}


def device(index: int = 0, **entries: Any) -> dict[str, Any]:
    """One device of a payload with every card figure answered, then `entries` on top."""
    doc: dict[str, Any] = {
        "deviceId": index,
        "mxSmlGetDeviceInfo": {
            "deviceId": index,
            "uuid": f"GPU-{index}",
            "deviceName": "MXC500",
            "bdfId": "0000:0e:00.0",
            "gpuId": index + 1,
            "brand": mx.BRAND_C,
            "mode": mx.MODE_NONE,
        },
        "mxSmlGetDeviceVersion": "3.6.11",
        "mxSmlGetDeviceState": 1,
        "mxSmlGetMemoryInfo": {"vramTotal": 67_108_864, "vramUse": 845_824},
        "mxSmlGetDeviceIpUsage": 7,
        "mxSmlGetTemperatureInfo": 3650,
        "mxSmlGetBoardPowerInfo": [{"power": 19_000}, {"power": 19_100}, {"power": 18_900}],
    }
    doc.update(entries)
    return doc


def reading(*devices: dict[str, Any], **top: Any) -> VendorReading:
    return metax.parse({"node": "n1", "devices": list(devices), **top})


def only_card(**entries: Any) -> Any:
    (c,) = reading(device(**entries)).cards
    return c


# -- cards ------------------------------------------------------------------------------------


def test_units_are_turned_once() -> None:
    c = only_card()
    assert (c.memory_total_mib, c.memory_used_mib) == (65536, 826)  # KB -> MiB
    assert c.temperature_celsius == 36.5  # hundredths of a degree
    assert c.power_usage_watts == 57.0  # three rails of mW, summed
    assert c.cores_utilization_percent == 7.0 and c.aliases == ("n1-metax-0",)


@pytest.mark.parametrize(
    ("entries", "field", "expected"),
    [
        ({"mxSmlGetMemoryInfo": {"vramTotal": 1, "vramUse": 1}}, "memory_used_mib", 1),  # up
        ({"mxSmlGetMemoryInfo": {"vramTotal": 1024, "vramUse": -1}}, "memory_used_mib", None),
        ({"mxSmlGetMemoryInfo": NOT_SUPPORTED}, "memory_total_mib", None),
        ({"mxSmlGetDeviceIpUsage": 101}, "cores_utilization_percent", None),
        ({"mxSmlGetDeviceIpUsage": -1}, "cores_utilization_percent", None),
        ({"mxSmlGetDeviceIpUsage": True}, "cores_utilization_percent", None),
        ({"mxSmlGetTemperatureInfo": math.nan}, "temperature_celsius", None),
        ({"mxSmlGetTemperatureInfo": NOT_SUPPORTED}, "temperature_celsius", None),
        ({"mxSmlGetBoardPowerInfo": []}, "power_usage_watts", None),
        ({"mxSmlGetBoardPowerInfo": [{"power": 1}, {"volts": 2}]}, "power_usage_watts", None),
        ({"mxSmlGetDeviceState": 0}, "unhealthy_reason", "device_unavailable"),
        (
            {"mxSmlGetMemoryInfo": {"error": "NoDevice", "code": 2}},
            "unhealthy_reason",
            "device_lost",
        ),
    ],
)
def test_card_figures_absent_rather_than_invented(
    entries: dict[str, Any], field: str, expected: Any
) -> None:
    assert getattr(only_card(**entries), field) == expected


def test_cards_that_cannot_be_named_or_are_virtual_functions_are_left_out() -> None:
    vf = device(1)
    vf["mxSmlGetDeviceInfo"]["mode"] = mx.MODE_VF
    nameless = device(2)
    nameless["mxSmlGetDeviceInfo"]["uuid"] = ""
    failed = device(3, mxSmlGetDeviceInfo={"error": "SysfsError", "code": 4})
    known = device(4, mxSmlGetDeviceInfo={"error": "SysfsError", "code": 4})
    known["known"] = {"uuid": "GPU-4", "deviceName": "MXC500", "mode": 0}
    got = reading(device(0), vf, nameless, failed, known).cards
    assert [(c.id, c.index, c.unhealthy) for c in got] == [("GPU-0", 0, False), ("GPU-4", 4, False)]


def test_without_a_node_name_there_is_no_hami_alias() -> None:
    (c,) = metax.parse({"devices": [device()]}).cards
    assert c.aliases == ()


# -- per process --------------------------------------------------------------------------------


def row(pid: int, *gpus: dict[str, Any]) -> dict[str, Any]:
    return {"processId": pid, "gpuNumber": len(gpus), "processGpuInfo": list(gpus)}


def gpu_entry(gpu_id: int, memory: Any, sgpu: int | None = None, die: int = 0) -> dict[str, Any]:
    out: dict[str, Any] = {"gpuId": gpu_id, "gpuMemoryUsage": memory, "dieId": die}
    if sgpu is not None:
        out["sgpuId"] = sgpu
    return out


def processes_of(listed: Any, **entries: Any) -> Any:
    (answer,) = reading(device(1, mxSmlGetSingleGpuProcess_v3=listed, **entries)).processes
    return answer


def test_a_row_counts_only_this_cards_entries_by_sequence_index() -> None:
    answer = processes_of(
        [
            row(7, gpu_entry(2, 999), gpu_entry(1, 100, -1)),  # gpuId 2 is DeviceInfo.gpuId here
            row(8, gpu_entry(1, 50, 3, die=0), gpu_entry(1, 70, 3, die=1)),  # two dies: summed
            row(9, gpu_entry(0, 10)),  # another card's process only
            row(7, gpu_entry(1, 1)),  # the same PID again: counted once
        ]
    )
    assert [(r.pid, r.memory_bytes, r.partition_id) for r in answer.rows] == [
        (7, 100, None),
        (8, 120, "GPU-1/sgpu3"),  # an sGPU the payload has no record of: still named
    ]
    assert answer.memory_reason is None and answer.cores_reason is Reason.UNSUPPORTED


@pytest.mark.parametrize(
    ("listed", "entries", "reason"),
    [
        ({"error": "PermissionDenied", "code": 8}, {}, Reason.PERMISSION),
        ({"error": "InsufficientSize", "code": 10}, {}, Reason.TRUNCATED),
        ({"error": "SysfsError", "code": 4}, {}, Reason.TRANSIENT_DRIVER_ERROR),
        ({"error": "FunctionNotFound", "code": 999}, {}, Reason.UNSUPPORTED),
        (
            {"error": "FunctionNotFound", "code": 999},
            {"mxSmlGetSingleGpuProcess_v2": {"error": "SysfsError", "code": 4}},
            Reason.TRANSIENT_DRIVER_ERROR,
        ),
        ("not a list", {}, Reason.INVALID_DATA),
    ],
)
def test_a_process_call_that_did_not_answer_says_why(
    listed: Any, entries: dict[str, Any], reason: Reason
) -> None:
    answer = processes_of(listed, **entries)
    assert answer.rows == () and answer.memory_reason is reason


def test_memory_a_row_does_not_state_is_absent_not_zero() -> None:
    answer = processes_of([row(7, gpu_entry(1, None)), row(8, gpu_entry(1, -5))])
    assert [(r.pid, r.memory_bytes) for r in answer.rows] == [(7, None), (8, None)]


def test_rows_in_two_sgpus_at_once_name_none() -> None:
    answer = processes_of([row(7, gpu_entry(1, 1, 0, die=0), gpu_entry(1, 1, 2, die=1))])
    assert answer.rows[0].partition_id is None


# -- sGPU ---------------------------------------------------------------------------------------


def sgpu_block(*slots: dict[str, Any], toggle: Any = 1) -> dict[str, Any]:
    return {"mxSmlGetSgpuToggle": toggle, "sgpus": list(slots)}


def slot(number: int, uuid: str = "", **entries: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "sgpuId": number,
        "mxSmlGetSgpuInfo": {"sgpuId": number, "uuid": uuid, "vramQuota": 8192},
        "mxSmlGetSgpuUsage": 1234,
        "mxSmlGetSgpuMemory": {"total": 8 << 30, "used": 1 << 30, "free": 7 << 30},
        "mxSmlGetSgpuAlias": "",
        "mxSmlGetSgpuAnnotationsId": "",
    }
    doc.update(entries)
    return doc


def partitions(block: dict[str, Any], **top: Any) -> list[PartitionReading]:
    return list(reading(device(1, sgpu=block), **top).partitions)


def test_an_sgpu_reads_usage_in_ten_thousandths_and_memory_in_bytes() -> None:
    (p,) = partitions(sgpu_block(slot(0, "GPU-s0", mxSmlGetSgpuAlias="tenant-a")))
    assert (p.id, p.parent_id, p.aliases) == ("GPU-s0", "GPU-1", ("tenant-a",))
    assert (p.cores_percent, p.memory_total_mib, p.memory_used_mib) == (12.34, 8192, 1024)


@pytest.mark.parametrize(
    ("entries", "cores", "cores_reason", "memory_reason"),
    [
        ({"mxSmlGetSgpuUsage": 10_001}, None, Reason.INVALID_DATA, None),
        ({"mxSmlGetSgpuUsage": NOT_SUPPORTED}, None, Reason.UNSUPPORTED, None),
        ({"mxSmlGetSgpuMemory": {"used": 5}}, 12.34, None, Reason.INVALID_DATA),
        (
            {"mxSmlGetSgpuMemory": {"error": "SysfsError", "code": 4}},
            12.34,
            None,
            Reason.TRANSIENT_DRIVER_ERROR,
        ),
        (
            {"mxSmlGetSgpuInfo": {"error": "SysfsError", "code": 4}},
            None,
            Reason.TRANSIENT_DRIVER_ERROR,
            Reason.TRANSIENT_DRIVER_ERROR,
        ),
    ],
)
def test_an_sgpu_figure_that_cannot_be_read_is_absent_with_why(
    entries: dict[str, Any], cores: Any, cores_reason: Any, memory_reason: Any
) -> None:
    (p,) = partitions(sgpu_block(slot(0, **entries)))
    assert (p.cores_percent, p.cores_reason, p.memory_reason) == (
        cores,
        cores_reason,
        memory_reason,
    )
    assert p.id == "GPU-1/sgpu0"  # no UUID given: named after the card and slot


@pytest.mark.parametrize(
    ("toggle", "reason"),
    [
        (0, Reason.UNSUPPORTED),
        (NOT_SUPPORTED, Reason.UNSUPPORTED),
        ({"error": "FunctionNotFound", "code": 999}, Reason.UNSUPPORTED),
        ({"error": "SysfsError", "code": 4}, Reason.TRANSIENT_DRIVER_ERROR),
    ],
)
def test_sgpu_mode_off_reads_no_slice_and_answers_requests_with_why(
    toggle: Any, reason: Reason
) -> None:
    request = {"partitions": [["GPU-1", "GPU-wanted"], ["GPU-elsewhere", "GPU-x"]]}
    got = partitions(sgpu_block(slot(0, "GPU-s0"), toggle=toggle), request=request)
    assert [(p.id, p.memory_reason, p.cores_reason, p.cores_percent) for p in got] == [
        ("GPU-wanted", reason, reason, None),
        ("GPU-x", Reason.TRANSIENT_DRIVER_ERROR, Reason.TRANSIENT_DRIVER_ERROR, None),
    ]


def test_a_requested_sgpu_is_found_by_any_of_its_ids() -> None:
    block = sgpu_block(slot(0, "GPU-s0", mxSmlGetSgpuAnnotationsId="plugin-7"), slot(1, "GPU-s1"))
    request = {"partitions": [["GPU-1", "plugin-7"], ["GPU-1", "GPU-s1"], ["GPU-1", "GPU-gone"]]}
    got = {p.id: p.memory_reason for p in partitions(block, request=request)}
    assert got == {"GPU-s0": None, "GPU-s1": None, "GPU-gone": Reason.TRANSIENT_DRIVER_ERROR}


def test_rows_name_the_sgpu_by_its_id() -> None:
    listed = [row(7, gpu_entry(1, 10, 4)), row(8, gpu_entry(1, 10, -1))]
    r = reading(device(1, mxSmlGetSingleGpuProcess_v3=listed, sgpu=sgpu_block(slot(4, "GPU-s4"))))
    assert [x.partition_id for x in r.processes[0].rows] == ["GPU-s4", None]


# -- no payload shape makes parse() raise --------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from([10**400, -(10**400), 1 << 64, -1])
    | st.floats()
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


def paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += paths(v, (*prefix, i))
    return out


FIXTURE_PAYLOADS = [load_recording(p)[1] for p in sorted(DIR.glob("*.json"))]


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_no_damage_to_a_recorded_payload_makes_parse_raise(data: st.DataObject) -> None:
    payload = copy.deepcopy(data.draw(st.sampled_from(FIXTURE_PAYLOADS)))
    for _ in range(data.draw(st.integers(1, 4))):
        where = data.draw(st.sampled_from(paths(payload)))
        replacement = data.draw(json_values)
        if not where:
            payload = replacement
            continue
        parent = payload
        for key in where[:-1]:
            parent = parent[key]
        parent[where[-1]] = replacement
    result = parsed_or_refused(
        metax.parse, payload if isinstance(payload, dict) else {"devices": payload}
    )
    for c in (
        result.cards if result is not None else ()
    ):  # whatever was read is a figure, never NaN or a negative size
        for value in (c.memory_total_mib, c.memory_used_mib, c.power_usage_watts):
            assert value is None or (value >= 0 and value == value)


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_no_json_at_all_makes_parse_raise(doc: Any) -> None:
    parsed_or_refused(metax.parse, doc if isinstance(doc, dict) else {"devices": doc})


@pytest.mark.parametrize(
    ("level", "link"),
    [
        (0, "pcie_board"),
        (1, "pcie_switch"),
        (2, "pcie_switches"),
        (3, "pcie_host_bridge"),
        (4, "numa_node"),
        (5, "metaxlink"),
        (6, "system"),
        (7, None),  # ETH: no kind here
        (8, None),  # UNDEFINED
        ({"error": 3, "code": 3}, None),
        (-1, None),
    ],
)
def test_each_topology_level_is_its_kind_or_places_nothing(level: Any, link: str | None) -> None:
    """(R-X3) mxSmlGpuTopologyLevel_t as the kinds `nvidia-smi topo -m` names alike, and
    MetaXLink; ETH, UNDEFINED, a failed call and a value the enum does not have place the pair
    nowhere, never "pcie". NUMA nodes from sysfs's text; -1 (no affinity) is none; a payload
    recorded before links were read has none."""
    topology = {
        "readAt": 1.0,
        "devices": [
            {"deviceId": 0, "sysfsNumaNode": "1\n"},
            {"deviceId": 1, "sysfsNumaNode": "-1\n"},
        ],
        "pairs": [{"a": 0, "b": 1, "mxSmlGetDeviceTopology": level}],
    }
    payload = {"node": "n1", "devices": [device(0), device(1)], "topology": topology}
    first, second = metax.parse(payload).cards
    assert [(x.peer_id, x.link) for x in first.links or ()] == (
        [] if link is None else [(second.id, link)]
    )
    assert [(x.peer_id, x.link) for x in second.links or ()] == (
        [] if link is None else [(first.id, link)]
    )
    assert (first.numa_node, second.numa_node) == (1, None)
    (before,) = metax.parse({"node": "n1", "devices": [device(0)]}).cards
    assert (before.links, before.numa_node) == (None, None)


def test_numbers_no_c_field_could_hold_are_absent() -> None:
    huge = 10**400  # valid JSON; float() of it would raise
    c = only_card(
        mxSmlGetMemoryInfo={"vramTotal": huge, "vramUse": huge},
        mxSmlGetDeviceIpUsage=huge,
        mxSmlGetTemperatureInfo=-huge,
        mxSmlGetBoardPowerInfo=[{"power": huge}],
    )
    assert (c.memory_total_mib, c.cores_utilization_percent, c.temperature_celsius) == (
        None,
        None,
        None,
    )
    assert c.power_usage_watts is None
    answer = processes_of([row(huge, gpu_entry(1, 5)), row(7, gpu_entry(1, huge))])
    assert [(r.pid, r.memory_bytes) for r in answer.rows] == [(7, None)]
    (p,) = partitions(sgpu_block(slot(0, mxSmlGetSgpuUsage=huge)))
    assert p.cores_percent is None


def test_the_fixtures_are_there_for_the_search() -> None:
    assert len(FIXTURE_PAYLOADS) >= 7
    assert json.loads((DIR / "c500-two-sgpus.json").read_text())["meta"]["kind"] == "synthetic"


# -- the core's rule: a partition's own compute for its sole holder ------------------------------


def sgpu_reading(parent: int, sgpu: str, cores: float | None, **kw: Any) -> PartitionReading:
    return PartitionReading(sgpu, gpu(parent), 8192, 1000, cores, cores_of_card=True, **kw)


def slices_run(tmp: Path, pids: dict[int, tuple[str | None, str | None]], parts: Any) -> Any:
    """Two GPUStack quarter slices of card 3 (cap 50%), processes placed as `pids` says
    (pid -> (pod, sGPU)), the vendor measuring no per-process compute."""
    cap = {"main": {"metax-tech.com/gpu.sliced.cores-percentage": "50"}}
    pods = [pod(n, {"main": [accel(3, 3, 400_000)]}, instance=n, limits=cap) for n in ("a", "b")]
    for pid, (owner, _) in pids.items():
        process(tmp / "proc", pid, owner)
    vendor = DeviceProcesses(
        gpu(3),
        tuple(ProcessRow(pid, 1 << 20, None, sgpu) for pid, (_, sgpu) in pids.items()),
        cores_reason=Reason.UNSUPPORTED,
    )
    return run(tmp, [card(3)], pods, (vendor,), parts)


def test_a_holder_alone_in_its_partitions_reads_their_compute(tmp_path: Path) -> None:
    parts = (sgpu_reading(3, "S0", 12.5), sgpu_reading(3, "S1", 3.0), sgpu_reading(3, "S2", 40.0))
    result = slices_run(tmp_path, {701: ("a", "S0"), 702: ("a", "S1"), 801: ("b", "S2")}, parts)
    # a: 12.5 + 3 of the card against a 50% cap; b: 40 of 50.
    assert result.entry("a").cores_utilization_percent == 31.0
    assert result.entry("b").cores_utilization_percent == 80.0
    (device,) = result.snapshot.slices.devices
    assert device.cores_reason is Reason.UNSUPPORTED  # still what the per-process call says


def test_a_partitions_own_share_never_stands_for_a_slice_of_the_card(tmp_path: Path) -> None:
    # A MIG instance's SM activity is a share of the instance, not of the card: a slice of
    # the card whose processes run in it reads no compute from it.
    parts = (PartitionReading("S0", gpu(3), 8192, 1000, 12.5),)
    result = slices_run(tmp_path, {701: ("a", "S0")}, parts)
    assert result.entry("a").cores_utilization_percent is None


@pytest.mark.parametrize(
    ("pids", "parts"),
    [
        # b runs in a's partition too.
        ({701: ("a", "S0"), 801: ("b", "S0")}, (sgpu_reading(3, "S0", 12.5),)),
        # one of a's processes runs on the whole card.
        ({701: ("a", "S0"), 702: ("a", None)}, (sgpu_reading(3, "S0", 12.5),)),
        # the partition's compute could not be read.
        (
            {701: ("a", "S0")},
            (sgpu_reading(3, "S0", None, cores_reason=Reason.TRANSIENT_DRIVER_ERROR),),
        ),
        # no reading of that partition, or one on another card.
        ({701: ("a", "S0")}, (sgpu_reading(4, "S0", 12.5),)),
    ],
)
def test_otherwise_the_holder_has_no_compute_figure(
    tmp_path: Path, pids: dict[int, tuple[str | None, str | None]], parts: Any
) -> None:
    result = slices_run(tmp_path, pids, parts)
    assert result.entry("a").cores_utilization_percent is None
    assert result.entry("a").memory_used_mib is not None  # memory is still per process


# -- the card's health beyond one bit (R-X7) ---------------------------------------------------

ECC = {"sramCE": 1, "sramUE": 0, "dramCE": 4, "dramUE": 2, "retiredPage": 6}


def card_health(**entries: Any) -> Any:
    (c,) = reading(device(**entries)).cards
    return c.health


def test_a_metax_payload_recorded_before_the_health_reads_has_no_health() -> None:
    """(R-X7) A recording without the ECC, throttle and clock calls parses to the card it
    parsed to before: no health figures, no capability rows."""
    assert card_health() is None


@pytest.mark.parametrize(
    ("entries", "figure", "value", "reason"),
    [
        # ECC: the SRAM's and the DRAM's together, as NVML's total counts are.
        ({"mxSmlGetTotalEccErrors": ECC}, "ecc_corrected_total", 5, None),
        ({"mxSmlGetTotalEccErrors": ECC}, "ecc_uncorrected_total", 2, None),
        ({"mxSmlGetTotalEccErrors": ECC}, "remapped_rows_uncorrectable", 6, None),
        (
            {"mxSmlGetTotalEccErrors": {**ECC, "sramUE": 0xFFFFFFFF}},
            "ecc_uncorrected_total",
            None,
            Reason.INVALID_DATA,
        ),
        (
            {"mxSmlGetTotalEccErrors": {**ECC, "dramCE": 0xFFFFFFFE, "sramCE": 0}},
            "ecc_corrected_total",
            0xFFFFFFFE,
            None,
        ),
        (
            {"mxSmlGetTotalEccErrors": {**ECC, "retiredPage": -1}},
            "remapped_rows_uncorrectable",
            None,
            Reason.INVALID_DATA,
        ),
        (
            {"mxSmlGetTotalEccErrors": NOT_SUPPORTED},
            "ecc_corrected_total",
            None,
            Reason.UNSUPPORTED,
        ),
        (
            {"mxSmlGetTotalEccErrors": {"error": "FunctionNotFound", "code": 999}},
            "remapped_rows_uncorrectable",
            None,
            Reason.UNSUPPORTED,
        ),
        ({"mxSmlGetTotalEccErrors": ECC}, "ecc_uncorrected_aggregate", None, Reason.UNSUPPORTED),
        ({"mxSmlGetTotalEccErrors": ECC}, "remapped_rows_pending", None, Reason.UNSUPPORTED),
        # Clocks in MHz, the domain's first clock.
        ({"mxSmlGetClocks": {"xcore": [1500, 1400]}}, "clock_sm_hz", 1_500_000_000, None),
        ({"mxSmlGetClocks": {"xcore": [100_000]}}, "clock_sm_hz", 10**11, None),
        ({"mxSmlGetClocks": {"xcore": [100_001]}}, "clock_sm_hz", None, Reason.INVALID_DATA),
        ({"mxSmlGetClocks": {"xcore": []}}, "clock_sm_hz", None, Reason.INVALID_DATA),
        ({"mxSmlGetClocks": {"mc0": [0xFFFFFFFF]}}, "clock_memory_hz", None, Reason.INVALID_DATA),
        ({"mxSmlGetClocks": {"mc0": NOT_SUPPORTED}}, "clock_memory_hz", None, Reason.UNSUPPORTED),
        (
            {"mxSmlGetClocks": {"mc0": {"error": "PermissionDenied", "code": 8}}},
            "clock_memory_hz",
            None,
            Reason.PERMISSION,
        ),
        ({"mxSmlGetClocks": {"mc0": [1800]}}, "clock_graphics_hz", None, Reason.UNSUPPORTED),
        # No call: energy, PCIe replays.
        ({"mxSmlGetClocks": {}}, "energy_joules", None, Reason.UNSUPPORTED),
        ({"mxSmlGetClocks": {}}, "pcie_replays", None, Reason.UNSUPPORTED),
        # The throttle mask: all ones is no mask.
        (
            {"mxSmlGetCurrentClocksThrottleReason": 0xFFFFFFFFFFFFFFFF},
            "throttle_reasons",
            None,
            Reason.INVALID_DATA,
        ),
        (
            {"mxSmlGetCurrentClocksThrottleReason": NOT_SUPPORTED},
            "throttle_reasons",
            None,
            Reason.UNSUPPORTED,
        ),
    ],
)
def test_each_metax_health_figure_is_range_checked_and_says_why_it_is_absent(
    entries: dict[str, Any], figure: str, value: Any, reason: Reason | None
) -> None:
    """(R-X7) Each figure from its MXSML answer, with the header's units (MHz) and sentinels:
    in range it is published in base units; a failure is its code's reason; all ones, a
    negative, no clock at all or above 100 GHz is `invalid_data`; a figure no call answers is
    `unsupported`, never 0."""
    health = card_health(**entries)
    assert health is not None
    assert (health.get(figure), health.reason(figure)) == (value, reason)


@pytest.mark.parametrize(
    ("mask", "active"),
    [
        (0x0, []),
        (0x1, ["gpu_idle"]),
        (0x2 | 0x40, ["applications_clocks_setting", "sw_thermal_slowdown"]),
        (0x4 | 0x100, ["sw_power_cap", "hw_power_brake_slowdown"]),
        # Chip, VR and HBM over-temperature are thermal throttling (b42776a read them as no
        # reason at all: an HBM-throttled card read sw_thermal_slowdown False; issue 43).
        (0x8, ["sw_thermal_slowdown"]),
        (0x10, ["sw_thermal_slowdown"]),
        (0x20, ["sw_thermal_slowdown"]),
        # Peak current control and di/dt: NVML's HW slowdown (power draw too high, fast trigger).
        (0x80, ["hw_slowdown"]),
        (0x200, ["hw_slowdown"]),
        # "Dynamic" and the catch-all "other" name no one reason: none turns on for them.
        (0x400 | 0x80000000, []),
    ],
)
def test_metax_throttle_bits_map_onto_the_reasons_metax_maps_them_to(
    mask: int, active: list[str]
) -> None:
    """(R-X7, issue 43) mxsmlClocksThrottleReason* bits are MetaX's own, not NVML's: each is
    read as the NVML reason MetaX's own compatibility header maps it to, or, for the bits it
    leaves out, the reason whose meaning it has; only those reasons are reported (a reason
    MetaX cannot tell apart is absent, not 0)."""
    health = card_health(mxSmlGetCurrentClocksThrottleReason=mask)
    assert health is not None and health.throttle_reasons is not None
    assert [r for r, on in health.throttle_reasons if on] == active
    assert [r for r, _ in health.throttle_reasons] == [
        "gpu_idle",
        "applications_clocks_setting",
        "sw_power_cap",
        "hw_slowdown",
        "sw_thermal_slowdown",
        "hw_power_brake_slowdown",
    ]
