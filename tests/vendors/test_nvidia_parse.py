"""NVIDIA's pure parse(): payloads as read() records them, quirks spelled as NVML writes them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from devicemanager.model import ProcessRow, Reason
from vendors import nvidia

MIB = 1048576
UUID = "GPU-11111111-2222-3333-4444-555555555555"


def err(code: int) -> dict[str, Any]:
    return {"error": f"NVMLError_{code}", "code": code}


def card(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "nvmlDeviceGetIndex": 0,
        "nvmlDeviceGetUUID": UUID,
        "nvmlDeviceGetName": "NVIDIA A100-SXM4-40GB",
        "nvmlDeviceGetMemoryInfo_v2": {
            "total": 40960 * MIB,
            "reserved": 512 * MIB,
            "used": 1024 * MIB + 1,
            "free": 0,
        },
        "nvmlDeviceGetUtilizationRates": {"gpu": 40, "memory": 7},
        "nvmlDeviceGetTemperature": 51,
        "nvmlDeviceGetPowerUsage": 250_500,
        "nvmlDeviceGetMigMode": {"current": 0, "pending": 0},
    }
    base.update(fields)
    return base


def parse_card(**fields: Any) -> Any:
    return nvidia.parse({"devices": [card(**fields)]}).cards


def test_card_figures_and_units() -> None:
    (c,) = parse_card()
    assert (c.id, c.index, c.name) == (UUID, 0, "NVIDIA A100-SXM4-40GB")
    assert c.memory_total_mib == 40960
    assert c.memory_used_mib == 1025  # bytes rounded up once, never down to a plausible lower
    assert c.cores_utilization_percent == 40.0
    assert c.temperature_celsius == 51.0
    assert c.power_usage_watts == 250.5  # NVML answers milliwatts
    assert c.unhealthy is False


def test_memory_v1_is_used_only_where_v2_is_not_served() -> None:
    (c,) = parse_card(
        nvmlDeviceGetMemoryInfo_v2=err(nvidia.ERROR_FUNCTION_NOT_FOUND),
        nvmlDeviceGetMemoryInfo={"total": 16 * 1024 * MIB, "used": 300 * MIB, "free": 0},
    )
    assert (c.memory_total_mib, c.memory_used_mib) == (16384, 300)
    (none,) = parse_card(nvmlDeviceGetMemoryInfo_v2=err(3), nvmlDeviceGetMemoryInfo=err(3))
    assert (none.memory_total_mib, none.memory_used_mib, none.memory_utilization_percent) == (
        None,
        None,
        None,
    )


@pytest.mark.parametrize(
    ("field", "absent"),
    [
        ("nvmlDeviceGetUtilizationRates", "cores_utilization_percent"),
        ("nvmlDeviceGetTemperature", "temperature_celsius"),
        ("nvmlDeviceGetPowerUsage", "power_usage_watts"),
    ],
)
def test_a_failed_entry_point_is_absent_not_zero(field: str, absent: str) -> None:
    (c,) = parse_card(**{field: err(nvidia.ERROR_NOT_SUPPORTED)})
    figures = ("cores_utilization_percent", "temperature_celsius", "power_usage_watts")
    # Which figure is absent, by name: the one whose entry point failed, and only that one.
    assert {f for f in figures if getattr(c, f) is None} == {absent}


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"nvmlDeviceGetTemperature": err(nvidia.ERROR_GPU_IS_LOST)}, "gpu_is_lost"),
        ({"xidCriticalErrors": [79]}, "xid_79"),
        (
            {"nvmlDeviceGetRemappedRows": {"isPending": 0, "failureOccurred": 1}},
            "row_remap_failure",
        ),
        (
            {"nvmlDeviceGetRemappedRows": {"isPending": 1, "failureOccurred": 0}},
            "row_remap_pending",
        ),
        ({"nvmlDeviceGetRetiredPagesPendingStatus": 1}, "retired_pages_pending"),
    ],
)
def test_unhealthy_signals(fields: dict[str, Any], reason: str) -> None:
    (c,) = parse_card(**fields)
    assert c.unhealthy is True and c.unhealthy_reason == reason


def test_application_xids_leave_the_card_healthy() -> None:
    # XID 13 (graphics engine exception) and 43 (GPU stopped processing) are a program's fault.
    (c,) = parse_card(xidCriticalErrors=[13, 43])
    assert c.unhealthy is False


def test_a_card_without_identity_is_dropped_not_invented() -> None:
    reading = nvidia.parse(
        {"devices": [card(nvmlDeviceGetUUID=err(15)), card(nvmlDeviceGetIndex=None)]}
    )
    assert reading.cards == ()


def test_garbage_payload_shapes_never_raise() -> None:
    for payload in (
        {},
        {"devices": None},
        {"devices": ["x", 3, None]},
        {"devices": [{}]},
        {"request": "x", "devices": [card(nvmlDeviceGetUtilizationRates="busy")]},
    ):
        parsed_or_refused(nvidia.parse, payload)


# -- per-process --------------------------------------------------------------------------------


def proc(pid: int, used: int | None) -> dict[str, Any]:
    return {
        "pid": pid,
        "usedGpuMemory": used,
        "gpuInstanceId": 4294967295,
        "computeInstanceId": 4294967295,
    }


def sample(pid: int, stamp: int, sm: int) -> dict[str, Any]:
    return {"pid": pid, "timeStamp": stamp, "smUtil": sm, "memUtil": 0}


def processes(**fields: Any) -> Any:
    (answer,) = nvidia.parse({"devices": [card(**fields)]}).processes
    return answer


def test_two_slices_one_busy_newest_sample_per_pid_counts() -> None:
    answer = processes(
        nvmlDeviceGetComputeRunningProcesses_v3=[
            proc(10, 30 * 1024 * MIB),
            proc(20, 2 * 1024 * MIB),
        ],
        nvmlDeviceGetProcessUtilization=[
            sample(10, 100, 90),
            sample(10, 200, 35),
            sample(10, 150, 5),
        ],
    )
    assert answer.memory_reason is None and answer.cores_reason is None
    assert answer.rows == (
        ProcessRow(pid=10, memory_bytes=30 * 1024 * MIB, cores_percent=35.0),
        ProcessRow(
            pid=20, memory_bytes=2 * 1024 * MIB, cores_percent=0.0
        ),  # listed, no sample: idle
    )


def test_not_found_from_process_utilization_means_idle() -> None:
    answer = processes(
        nvmlDeviceGetComputeRunningProcesses_v3=[proc(10, MIB)],
        nvmlDeviceGetProcessUtilization=err(nvidia.ERROR_NOT_FOUND),
    )
    assert answer.cores_reason is None and answer.rows[0].cores_percent == 0.0


def test_value_not_available_memory_is_absent_not_zero() -> None:
    answer = processes(
        nvmlDeviceGetComputeRunningProcesses_v3=[proc(10, None)],
        nvmlDeviceGetProcessUtilization=err(nvidia.ERROR_NOT_FOUND),
    )
    assert answer.rows[0].memory_bytes is None


def test_a_pid_seen_only_in_samples_has_exited() -> None:
    answer = processes(
        nvmlDeviceGetComputeRunningProcesses_v3=[proc(10, MIB)],
        nvmlDeviceGetProcessUtilization=[sample(10, 5, 20), sample(99, 6, 70)],
    )
    assert [r.pid for r in answer.rows] == [10]


def test_fallback_to_processes_utilization_info_when_the_older_call_is_not_served() -> None:
    answer = processes(
        nvmlDeviceGetComputeRunningProcesses_v3=[proc(10, MIB)],
        nvmlDeviceGetProcessUtilization=err(nvidia.ERROR_NOT_SUPPORTED),
        nvmlDeviceGetProcessesUtilizationInfo=[sample(10, 5, 12)],
    )
    assert answer.cores_reason is None and answer.rows[0].cores_percent == 12.0


@pytest.mark.parametrize(
    ("fields", "memory_reason", "cores_reason"),
    [
        (
            {
                "nvmlDeviceGetComputeRunningProcesses_v3": err(3),
                "nvmlDeviceGetProcessUtilization": err(3),
                "nvmlDeviceGetProcessesUtilizationInfo": err(3),
            },
            Reason.UNSUPPORTED,
            Reason.UNSUPPORTED,
        ),
        (
            {
                "nvmlDeviceGetComputeRunningProcesses_v3": err(4),
                "nvmlDeviceGetProcessUtilization": err(4),
            },
            Reason.PERMISSION,
            Reason.PERMISSION,
        ),
        (
            {
                "nvmlDeviceGetComputeRunningProcesses_v3": err(7),
                "nvmlDeviceGetProcessUtilization": err(10),
            },
            Reason.TRUNCATED,
            Reason.TRANSIENT_DRIVER_ERROR,
        ),
        (
            {
                "nvmlDeviceGetComputeRunningProcesses_v3": [],
                "nvmlDeviceGetProcessUtilization": err(13),
            },
            None,
            Reason.UNSUPPORTED,
        ),
    ],
)
def test_error_codes_map_to_reasons(
    fields: dict[str, Any], memory_reason: Reason | None, cores_reason: Reason | None
) -> None:
    answer = processes(**fields)
    assert (answer.memory_reason, answer.cores_reason) == (memory_reason, cores_reason)
    assert answer.reads_truncated == int(memory_reason is Reason.TRUNCATED)


def test_rows_come_from_samples_when_the_process_list_failed() -> None:
    answer = processes(
        nvmlDeviceGetComputeRunningProcesses_v3=err(999),
        nvmlDeviceGetProcessUtilization=[sample(7, 1, 50)],
    )
    assert answer.memory_reason is Reason.TRANSIENT_DRIVER_ERROR
    assert answer.rows == (ProcessRow(pid=7, memory_bytes=None, cores_percent=50.0),)


def test_no_process_query_no_answer() -> None:
    assert nvidia.parse({"devices": [card()]}).processes == ()


# -- MIG partitions -----------------------------------------------------------------------------

MIG = "MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"


def mig_card(*migs: dict[str, Any], mode: Any = None) -> dict[str, Any]:
    return card(
        nvmlDeviceGetMigMode=mode or {"current": 1, "pending": 1},
        nvmlDeviceGetUtilizationRates=err(3),
        migDevices=list(migs),
    )


def mig(uuid: str = MIG, total: int = 9856 * MIB, used: int = 0) -> dict[str, Any]:
    return {"nvmlDeviceGetUUID": uuid, "nvmlDeviceGetMemoryInfo_v2": {"total": total, "used": used}}


def partitions(*devices: dict[str, Any], wanted: list[list[str]] | None = None) -> Any:
    payload = {"request": {"partitions": wanted or [[UUID, MIG]]}, "devices": list(devices)}
    return nvidia.parse(payload).partitions


def test_a_partition_reads_its_own_capacity_and_an_idle_one_is_a_measured_zero() -> None:
    (p,) = partitions(mig_card(mig()))
    assert (p.id, p.parent_id) == (MIG, UUID)
    assert (p.memory_total_mib, p.memory_used_mib, p.memory_reason) == (9856, 0, None)
    assert p.cores_percent is None and p.cores_reason is Reason.UNSUPPORTED


@pytest.mark.parametrize(
    ("device", "reason"),
    [
        (mig_card(mig(uuid="MIG-other")), Reason.TRANSIENT_DRIVER_ERROR),  # id the driver lacks
        (mig_card(mig(), mig()), Reason.INVALID_DATA),  # one UUID claimed by two handles
        (mig_card(mig(), mode={"current": 0, "pending": 0}), Reason.UNSUPPORTED),  # MIG off
        (mig_card(mig(), mode=err(3)), Reason.UNSUPPORTED),  # no MIG on this card at all
    ],
)
def test_partition_reasons(device: dict[str, Any], reason: Reason) -> None:
    (p,) = partitions(device)
    assert (p.memory_total_mib, p.memory_reason, p.cores_reason) == (None, reason, reason)


def test_a_partition_on_a_card_the_driver_no_longer_lists() -> None:
    (p,) = partitions(card(nvmlDeviceGetUUID="GPU-gone"))
    assert p.memory_reason is Reason.TRANSIENT_DRIVER_ERROR


# -- damaged payloads -----------------------------------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.vendors.shapes import parsed_or_refused  # noqa: E402

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
FIELDS = [
    *sorted(card()),
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetProcessUtilization",
    "migDevices",
    "xidCriticalErrors",
    "xidErrorCounts",
    "nvmlDeviceGetRemappedRows",
]


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=6), json_values)
def test_no_damaged_payload_makes_parse_raise(fields: dict[str, Any], request: Any) -> None:
    reading = nvidia.parse({"request": request, "devices": [card(**fields), fields]})
    for c in reading.cards:
        assert isinstance(c.id, str) and isinstance(c.index, int)


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_no_top_level_shape_makes_parse_raise(devices: Any) -> None:
    parsed_or_refused(nvidia.parse, {"devices": devices, "nvmlSystemGetDriverVersion": devices})


# -- the card's health beyond one bit (R-X7) ---------------------------------------------------


def test_a_payload_recorded_before_the_health_reads_has_no_health() -> None:
    """(R-X7) Remapped rows alone (read for `unhealthy` since before) make no health figures:
    a recording without the new entry points parses to the card it parsed to before."""
    rows = {"corrRows": 0, "uncRows": 0, "isPending": 0, "failureOccurred": 0}
    (c,) = parse_card(nvmlDeviceGetRemappedRows=rows)
    assert c.health is None


@pytest.mark.parametrize(
    ("answers", "figure", "value", "reason"),
    [
        # Clocks: 100 GHz is the last plausible clock; above it, and UINT32_MAX, is refused.
        ({"nvmlDeviceGetClockInfo": {"sm": 100_000}}, "clock_sm_hz", 100_000_000_000, None),
        ({"nvmlDeviceGetClockInfo": {"sm": 100_001}}, "clock_sm_hz", None, Reason.INVALID_DATA),
        ({"nvmlDeviceGetClockInfo": err(3)}, "clock_memory_hz", None, Reason.UNSUPPORTED),
        ({"nvmlDeviceGetClockInfo": {}}, "clock_graphics_hz", None, Reason.INVALID_DATA),
        # Counters: the type's all-ones value is "not available"; one below it is a count.
        (
            {"nvmlDeviceGetPcieReplayCounter": 0xFFFFFFFE},
            "pcie_replays",
            0xFFFFFFFE,
            None,
        ),
        ({"nvmlDeviceGetPcieReplayCounter": -1}, "pcie_replays", None, Reason.INVALID_DATA),
        ({"nvmlDeviceGetPcieReplayCounter": True}, "pcie_replays", None, Reason.INVALID_DATA),
        ({"nvmlDeviceGetPcieReplayCounter": err(4)}, "pcie_replays", None, Reason.PERMISSION),
        ({"nvmlDeviceGetTotalEnergyConsumption": 1}, "energy_joules", 0.001, None),
        ({"nvmlDeviceGetTotalEnergyConsumption": 2.5}, "energy_joules", None, Reason.INVALID_DATA),
        # ECC: the whole call failing before any counter is every counter's reason.
        (
            {"nvmlDeviceGetTotalEccErrors": err(15)},
            "ecc_uncorrected_aggregate",
            None,
            Reason.TRANSIENT_DRIVER_ERROR,
        ),
        (
            {"nvmlDeviceGetTotalEccErrors": {"corrected_volatile": 0}},
            "ecc_corrected_volatile",
            0,
            None,
        ),
        (
            {"nvmlDeviceGetTotalEccErrors": {"corrected_volatile": 0}},
            "ecc_corrected_aggregate",
            None,
            Reason.INVALID_DATA,
        ),
        # NVML's remap flags are 0 or 1; anything else is no flag.
        (
            {
                "nvmlDeviceGetTotalEnergyConsumption": 0,
                "nvmlDeviceGetRemappedRows": {
                    "corrRows": 1,
                    "uncRows": 0,
                    "isPending": 2,
                    "failureOccurred": 0,
                },
            },
            "remapped_rows_pending",
            None,
            Reason.INVALID_DATA,
        ),
        (
            {"nvmlDeviceGetCurrentClocksEventReasons": 0xFFFFFFFFFFFFFFFF},
            "throttle_reasons",
            None,
            Reason.INVALID_DATA,
        ),
    ],
)
def test_each_health_figure_is_range_checked_and_says_why_it_is_absent(
    answers: dict[str, Any], figure: str, value: Any, reason: Reason | None
) -> None:
    """(R-X7) Each figure from its own answer: in range it is published in base units; a
    failure is its code's reason; out of range, negative, a boolean or a fraction of a count
    is `invalid_data`, never a figure."""
    (c,) = parse_card(**answers)
    health = c.health
    assert health is not None
    assert (health.get(figure), health.reason(figure)) == (value, reason)


def test_the_older_throttle_call_answers_only_where_the_newer_failed() -> None:
    """(R-X7) Both recorded: the newer call's mask wins when it answered; its failure hands the
    figure to the older call's answer (the bits are the same: 0x8 is hw_slowdown)."""
    both = {"nvmlDeviceGetCurrentClocksThrottleReasons": 0x8}
    (n,) = parse_card(nvmlDeviceGetCurrentClocksEventReasons=0x1, **both)
    (o,) = parse_card(nvmlDeviceGetCurrentClocksEventReasons=err(13), **both)
    newer, older = n.health, o.health
    assert newer is not None and older is not None and newer.throttle_reasons is not None
    assert [r for r, on in newer.throttle_reasons if on] == ["gpu_idle"]
    assert older.throttle_reasons is not None
    assert [r for r, on in older.throttle_reasons if on] == ["hw_slowdown"]


# -- links and placement (R-X3) ------------------------------------------------------------------


def topo_card(uuid: str, bus: Any, numa: Any = 0, links: Any = (), **more: Any) -> dict[str, Any]:
    return {
        "uuid": uuid,
        "nvmlDeviceGetPciInfo_v3": {"busId": bus},
        "nvmlDeviceGetNumaNodeId": numa,
        "nvlinks": list(links),
        **more,
    }


def link(remote: Any, state: int = 1, kind: Any = 0) -> dict[str, Any]:
    return {
        "nvmlDeviceGetNvLinkState": state,
        "nvmlDeviceGetNvLinkRemotePciInfo_v2": remote
        if isinstance(remote, dict)
        else {"busId": remote},
        "nvmlDeviceGetNvLinkRemoteDeviceType": kind,
    }


def placed(devices: list[dict[str, Any]], pairs: tuple[tuple[str, str, Any], ...] = ()) -> Any:
    """Cards A and B of a payload, with the topology given."""
    payload = {
        "devices": [card(), card(nvmlDeviceGetUUID="GPU-b", nvmlDeviceGetIndex=1)],
        "topology": {
            "readAt": 1.0,
            "devices": devices,
            "pairs": [
                {"a": a, "b": b, "nvmlDeviceGetTopologyCommonAncestor": level}
                for a, b, level in pairs
            ],
        },
    }
    return {c.id: c for c in nvidia.parse(payload).cards}


def kinds(c: Any) -> set[tuple[str, str, int | None]]:
    return {(x.peer_id, x.link, x.count) for x in c.links}


@pytest.mark.parametrize(
    ("level", "wanted"),
    [
        (0, "pcie_board"),
        (10, "pcie_switch"),
        (20, "pcie_switches"),
        (30, "pcie_host_bridge"),
        (40, "numa_node"),
        (50, "system"),
    ],
)
def test_each_ancestor_level_is_its_pcie_kind_both_ways(level: int, wanted: str) -> None:
    """(R-X3) nvmlGpuTopologyLevel_t as `nvidia-smi topo -m` names it, on both cards of a pair."""
    cards = placed(
        [topo_card(UUID, "00000000:07:00.0"), topo_card("GPU-b", "00000000:08:00.0")],
        ((UUID, "GPU-b", level),),
    )
    assert kinds(cards[UUID]) == {("GPU-b", wanted, None)}
    assert kinds(cards["GPU-b"]) == {(UUID, wanted, None)}


@pytest.mark.parametrize("level", [err(3), 35, 60, -1, True, "10", None])
def test_a_pair_nvml_cannot_place_has_no_link_not_pcie(level: Any) -> None:
    """(R-X3) A failed ancestor call, or a level the header does not define, places the pair
    nowhere: no link at all, never a guessed PCIe path."""
    cards = placed(
        [topo_card(UUID, "00000000:07:00.0"), topo_card("GPU-b", "00000000:08:00.0")],
        ((UUID, "GPU-b", level),),
    )
    assert cards[UUID].links == () and cards["GPU-b"].links == ()


def test_nvlinks_count_by_the_far_ends_bus_id_in_either_spelling() -> None:
    """(R-X3) An active link counts for the card whose bus id is at its far end, NVML's legacy
    4-digit domain and any case included; a link that is down, whose far end failed or names no
    card, or names this card itself, does not count."""
    a_links = [
        link("00000000:08:00.0"),
        link("0000:08:00.0"),
        link("00000000:08:00.0".lower()),
        link("00000000:08:00.0", state=0),
        link(err(3)),
        link("00000000:99:00.0"),
        link("00000000:07:00.0"),
        link("garbage"),
    ]
    cards = placed(
        [
            topo_card(UUID, "00000000:07:00.0", links=a_links),
            topo_card("GPU-b", "00000000:08:00.0", links=[link("00000000:07:00.0")]),
        ]
    )
    assert kinds(cards[UUID]) == {("GPU-b", "nvlink", 3)}
    assert kinds(cards["GPU-b"]) == {(UUID, "nvlink", 1)}


def test_nvswitch_needs_both_cards_in_the_fabric_and_counts_each_cards_own_links() -> None:
    """(R-X3) Links into an NVSwitch join two cards only when both have one; each side counts
    its own active links into the fabric."""
    switch = link("00000000:C0:00.0", kind=2)
    both = placed(
        [
            topo_card(UUID, "00000000:07:00.0", links=[switch] * 3),
            topo_card("GPU-b", "00000000:08:00.0", links=[switch] * 2),
        ]
    )
    assert kinds(both[UUID]) == {("GPU-b", "nvswitch", 3)}
    assert kinds(both["GPU-b"]) == {(UUID, "nvswitch", 2)}
    one = placed(
        [
            topo_card(UUID, "00000000:07:00.0", links=[switch] * 3),
            topo_card("GPU-b", "00000000:08:00.0"),
        ]
    )
    assert one[UUID].links == () and one["GPU-b"].links == ()


@pytest.mark.parametrize(
    ("numa", "sysfs", "wanted"),
    [
        (err(3), "1\n", 1),  # x86: NVML answers NOT_SUPPORTED (the recorded H200), sysfs the node
        (err(3), "-1\n", None),  # no affinity (the recorded H200's VM)
        (err(3), "x", None),
        (err(3), None, None),
        (err(3), f"{1 << 12}\n", None),
        (0, "1\n", 1),  # a coherent card (GH200): NVML names its memory's own node, not this one
        (2, "0\n", 0),
        (0, None, None),  # NVML's answer alone is never the node the card is attached to
        (3, "-1\n", None),
    ],
)
def test_the_numa_node_is_sysfs_never_nvml_numa_node_id_and_no_affinity_is_absent(
    numa: Any, sysfs: Any, wanted: int | None
) -> None:
    """(R-X3, issue 43) The NUMA node the card is attached to is its PCI function's `numa_node`
    in sysfs; nvmlDeviceGetNumaNodeId ("only applies to platforms where the GPUs are NUMA
    nodes": a GH200's own memory node) never stands in for it. -1 (no affinity), a number past
    any node count, or text that is no number is absent, never node 0."""
    more = {} if sysfs is None else {"sysfsNumaNode": sysfs}
    cards = placed([topo_card(UUID, "00000000:07:00.0", numa=numa, **more)])
    assert cards[UUID].numa_node == wanted
    assert cards["GPU-b"].links is None and cards["GPU-b"].numa_node is None  # not in the read


@pytest.mark.parametrize(
    "topology",
    [None, [], "x", {"devices": "x"}, {"devices": [None, {"uuid": 7}], "pairs": [None, {}]}],
)
def test_a_damaged_or_missing_topology_never_raises_and_places_nothing(topology: Any) -> None:
    """(R-X3) A payload without a topology (recorded before it was read) or a damaged one: the
    cards have no links and no NUMA node, and parse() does not raise."""
    payload: dict[str, Any] = {"devices": [card()]}
    if topology is not None:
        payload["topology"] = topology
    (only,) = nvidia.parse(payload).cards
    assert (only.links, only.numa_node) == (None, None)


@pytest.mark.parametrize(
    ("counts", "figure", "reason"),
    [
        (
            {"79": 2, "13": 1, "other": 3, "100": 1},
            (("13", 1), ("79", 2), ("100", 1), ("other", 3)),
            None,
        ),
        ({}, (), None),
        (err(3), None, Reason.UNSUPPORTED),
        (err(4), None, Reason.PERMISSION),
        ({"79": 0}, None, Reason.INVALID_DATA),
        ({"79": 2**64}, None, Reason.INVALID_DATA),
        ({"79": True}, None, Reason.INVALID_DATA),
        ({"-1": 1}, None, Reason.INVALID_DATA),
        ({"0x4f": 1}, None, Reason.INVALID_DATA),
        ({str(c): 1 for c in range(66)}, None, Reason.INVALID_DATA),
        ([79, 79], None, Reason.INVALID_DATA),
    ],
)
def test_xid_counts_parse_in_numeric_order_or_are_refused(
    counts: Any, figure: Any, reason: Reason | None
) -> None:
    """(R-X7) The XID counts read() recorded: codes in numeric order, `other` last; the event
    set's failure is its reason; a zero, boolean, negative or 64-bit-overflowing count, a code
    that is not decimal digits, more codes than the bound, anything but an object is
    `invalid_data`, never a figure; a payload recorded before the counts has none and says
    nothing."""
    (c,) = parse_card(nvmlDeviceGetPcieReplayCounter=0, xidErrorCounts=counts)
    assert c.health.xid_errors == figure
    assert c.health.reason("xid_errors") == reason
    (old,) = parse_card(nvmlDeviceGetPcieReplayCounter=0)
    assert old.health.xid_errors is None and old.health.reason("xid_errors") is None


@pytest.mark.parametrize("prefix", ["nvml", "hgml"])
def test_a_link_that_answers_an_error_is_skipped_not_the_links_after_it(
    prefix: str, tmp_path: Path
) -> None:
    """(R-X3, issue 43) Six links to the peer, link 2 answering NOT_SUPPORTED: the reader asks
    every link up to NVML_NVLINK_MAX_LINKS, as NVIDIA's go-gpuallocator does, so the pair has
    five links (b42776a stopped at link 2 and published two), for NVML and HGML alike; each
    error is recorded with the links that answered it."""
    from vendors._nvml_topology import INTERCONNECTS, MAX_NVLINKS, parse_topology, read_topology

    calls = INTERCONNECTS[prefix].calls
    buses = {0: "00000000:07:00.0", 1: "00000000:08:00.0"}

    def call(name: str, *args: Any) -> Any:
        if name == "DeviceGetHandleByIndex":
            return args[0]
        if name == "DeviceGetUUID":
            return f"GPU-{args[0]}"
        if name == "DeviceGetPciInfo_v3":
            return _Pci(buses[args[0]])
        if name == f"DeviceGet{calls}State":
            _, link = args
            if link == 2 or link >= 6:
                return (
                    {"error": "NotSupported", "code": 3} if link == 2 else {"error": "x", "code": 2}
                )
            return 1
        if name == f"DeviceGet{calls}RemotePciInfo":
            return _Pci(buses[1 - args[0]])
        if name == f"DeviceGet{calls}RemoteDeviceType":
            return 0
        return {"error": "NotSupported", "code": 3}

    raw = read_topology(call, lambda n: prefix + n, 2, tmp_path, 1.0, links=INTERCONNECTS[prefix])
    out = parse_topology({"topology": raw}, prefix)
    direct = INTERCONNECTS[prefix].direct
    assert [(x.peer_id, x.link, x.count) for x in out["GPU-0"][0]] == [("GPU-1", direct, 5)]
    errors = raw["devices"][0]["nvlinkErrors"]
    assert sorted(n for e in errors for n in e["links"]) == [2, *range(6, MAX_NVLINKS)]


class _Pci:
    """What the binding's remote-PCI call returns: a struct with a `busId`."""

    def __init__(self, bus: str) -> None:
        self.busId = bus.encode()


@pytest.mark.parametrize(
    ("mask", "active"),
    [
        (0x200, ["board_limit"]),
        (0x400, ["reliability"]),
        (0x600, ["board_limit", "reliability"]),
        (0x4 | 0x400, ["sw_power_cap", "reliability"]),
    ],
)
def test_board_limit_and_reliability_are_throttle_reasons(mask: int, active: list[str]) -> None:
    """(R-X7, issue 43) CUDA 13's nvml.h adds nvmlClocksEventReasonBoardLimit (0x200) and
    …Reliability (0x400): a card held down only by them reads throttled by them, not "not
    throttled" (b42776a published all nine reasons False for 0x200)."""
    (c,) = parse_card(nvmlDeviceGetCurrentClocksEventReasons=mask)
    assert c.health is not None and c.health.throttle_reasons is not None
    assert [r for r, on in c.health.throttle_reasons if on] == active
    assert len(c.health.throttle_reasons) == 11
