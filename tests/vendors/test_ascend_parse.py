"""Ascend's pure parse(): payloads as read() records them, identity spelled as each allocator
spells it, units turned once, and no payload shape that makes it raise."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devicemanager.model import Reason
from tests.vendors.shapes import parsed_or_refused
from vendors import ascend

MIB = 1048576
WORDS = [0xE0F4EE64, 0x0140C979, 0x6A691492, 0x89528485, 0x104301E3]
CANONICAL = "E0F4EE64 140C979 6A691492 89528485 104301E3"


def err(code: int, name: str = "dcmi_x") -> dict[str, Any]:
    return {"error": name, "code": code}


def npu(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "card": 0,
        "device": 0,
        "dcmi_get_device_type": 0,
        "dcmi_get_device_logic_id": 0,
        "dcmi_get_device_phyid_from_logicid": 0,
        "dcmi_get_device_die_v2": WORDS,
        "dcmi_get_device_chip_info": {
            "chip_type": "Ascend",
            "chip_name": "910B2",
            "chip_ver": "V1",
            "aicore_cnt": 24,
        },
        "dcmi_get_device_hbm_info": {"memory_size": 65536, "memory_usage": 3432},
        "dcmi_get_device_utilization_rate": 37,
        "dcmi_get_device_temperature": 47,
        "dcmi_get_device_power_info": 1013,
        "dcmi_get_device_health": 0,
    }
    base.update(fields)
    return base


def parse(*devices: dict[str, Any], **top: Any) -> Any:
    return ascend.parse({"devices": list(devices), **top})


def processes(entries: list[tuple[int, int]], **answer: Any) -> dict[str, Any]:
    """A process answer as read() records it; rows=None leaves the rows out."""
    doc: dict[str, Any] = {
        "count": len(entries),
        "capacity": 32,
        "guard_written": False,
        "rows": [{"proc_id": p, "proc_mem_usage": m} for p, m in entries],
    }
    doc.update(answer)
    return {k: v for k, v in doc.items() if v is not None}


# -- identity -------------------------------------------------------------------------------------


def test_the_die_as_gpustack_and_hami_record_it() -> None:
    # GPUStack: hex(word)[2:].upper() joined by spaces (its detector sample: "E281A66C 140C979 …").
    assert ascend.gpustack_id(WORDS) == CANONICAL
    # HAMi's plugin, through Huawei's Go DcGetDieID: %08s per word, upper-case, joined by '-'.
    assert ascend.hami_id(WORDS) == "E0F4EE64-0140C979-6A691492-89528485-104301E3"
    assert ascend.gpustack_id([0, 1, 2, 3, 4]) == "0 1 2 3 4"
    assert ascend.hami_id([0, 1, 2, 3, 4]).startswith("00000000-00000001-")


@pytest.mark.parametrize(
    ("chip", "family"),
    [
        ("910B2", "Ascend910"),
        ("910B4", "Ascend910"),
        ("910_9391", "Ascend910"),
        ("310P3", "Ascend310P"),
        ("310", "Ascend310"),
        ("610", None),
        ("", None),
        (None, None),
    ],
)
def test_the_device_plugins_family_name(chip: str | None, family: str | None) -> None:
    assert ascend.plugin_family(chip) == family


def test_card_figures_units_and_address() -> None:
    (card,) = parse(
        npu(card=3, dcmi_get_device_logic_id=5, dcmi_get_device_phyid_from_logicid=6)
    ).cards
    assert card.id == CANONICAL and card.index == 5
    assert card.aliases == ("E0F4EE64-0140C979-6A691492-89528485-104301E3", "Ascend910-6")
    assert card.address == (("card", 3), ("device", 0), ("logic", 5), ("phy", 6))
    assert (card.memory_total_mib, card.memory_used_mib) == (65536, 3432)
    assert card.memory_utilization_percent == 5.24
    assert (card.cores_utilization_percent, card.temperature_celsius) == (37.0, 47.0)
    assert card.power_usage_watts == 101.3  # 0.1 W


@pytest.mark.parametrize(
    ("fields", "check"),
    [
        ({"dcmi_get_device_power_info": -1}, lambda c: c.power_usage_watts is None),
        (
            {"dcmi_get_device_utilization_rate": 4294967295},
            lambda c: c.cores_utilization_percent is None,
        ),
        ({"dcmi_get_device_temperature": err(-8255)}, lambda c: c.temperature_celsius is None),
        (
            {"dcmi_get_device_hbm_info": {"memory_size": 65536, "memory_usage": 70000}},
            lambda c: (c.memory_total_mib, c.memory_used_mib) == (65536, None),
        ),
        (
            {"dcmi_get_device_chip_info": err(-8005)},
            lambda c: c.name is None and c.aliases[-1].startswith("E0F4EE64-"),
        ),
        ({"dcmi_get_device_phyid_from_logicid": err(-8005)}, lambda c: len(c.address) == 3),
    ],
)
def test_figures_the_driver_did_not_give_are_absent(fields: dict[str, Any], check: Any) -> None:
    (card,) = parse(npu(**fields)).cards
    assert check(card)


def test_npus_that_cannot_be_named_are_left_out() -> None:
    assert parse(npu(dcmi_get_device_die_v2=err(-8005))).cards == ()
    assert parse(npu(dcmi_get_device_die_v2=[1, 2, 3])).cards == ()
    assert parse(npu(dcmi_get_device_type=1)).cards == ()  # the card's MCU
    # Two entries with one die: the second is a duplicate, never a second card.
    assert len(parse(npu(), npu(device=1)).cards) == 1


def test_the_v1_die_answers_where_v2_is_not_served() -> None:
    (card,) = parse(
        npu(dcmi_get_device_die_v2=err(-99998), dcmi_get_device_die=[1, 2, 3, 4, 5])
    ).cards
    assert card.id == "1 2 3 4 5"


def test_a_lost_npu_is_named_by_what_it_answered_before() -> None:
    lost = {
        k: err(-8008, k) for k in npu() if k.startswith("dcmi_") and k != "dcmi_get_device_type"
    }
    known = {"die": WORDS, "logic": 2, "phy": 2, "chip": npu()["dcmi_get_device_chip_info"]}
    (card,) = parse(npu(**lost, known=known)).cards
    assert (card.id, card.index, card.unhealthy_reason) == (CANONICAL, 2, "device_lost")
    assert card.aliases[-1] == "Ascend910-2"


@pytest.mark.parametrize(
    ("value", "vdev"),
    [
        ("100", 100),
        ("1123", 1123),
        ("99", None),
        ("1124", None),
        ("vdavinci100", 100),
        ("/dev/vdavinci205", 205),
        ("Ascend910-4c-100-0", 100),
        ("Ascend910-5c.1cpu.16g-131-7", 131),
        ("Ascend310P-2c.1cpu-100-1", 100),
        ("Ascend910-0", None),
        ("MIG-0a1b", None),
        ("vdavinci", None),
        ("\u0661\u0660\u0660", None),  # 100 in Arabic-Indic digits: not what a driver writes
        ("", None),
    ],
)
def test_the_forms_a_vnpu_is_recorded_in(value: str, vdev: int | None) -> None:
    assert ascend.vdev_of(value) == vdev


def test_a_plugin_id_names_a_vnpu_only_on_its_own_npu() -> None:
    assert ascend.names_vnpu("Ascend910-4c-100-0", 100, "Ascend910", 0)
    assert not ascend.names_vnpu("Ascend910-4c-100-3", 100, "Ascend910", 0)
    assert not ascend.names_vnpu("Ascend310P-4c-100-0", 100, "Ascend910", 0)
    assert ascend.names_vnpu("100", 100, None, None)


# -- per-process memory -------------------------------------------------------------------------

WORKER = 57280 * MIB  # npu-smi's "Process memory(MB): 57280" for one vLLM worker on a 910B2


def test_both_readings_of_the_process_unit_against_the_card() -> None:
    # A driver answering bytes: plausible as bytes, terabytes as MB.
    assert ascend.readings_fit([WORKER], 65536) == {"bytes": True, "MB": False}
    # A driver answering MB: 56 KiB per worker as bytes (a live process holds whole MBs of
    # device memory, its device-side OS share alone), plausible as MB.
    assert ascend.readings_fit([57280], 65536) == {"bytes": False, "MB": True}
    # Two workers that together exceed the card fit neither way.
    assert ascend.readings_fit([WORKER, WORKER], 65536) == {"bytes": False, "MB": False}
    # No rows, or rows of 0, are plausible either way: an idle NPU.
    assert ascend.readings_fit([], 65536) == {"bytes": True, "MB": True}
    assert ascend.readings_fit([0], None) == {"bytes": True, "MB": True}


def test_process_rows_are_bytes_and_cores_are_never_measured() -> None:
    (answer,) = parse(
        npu(dcmi_get_device_resource_info=processes([(899293, WORKER), (12, 0)]))
    ).processes
    assert [(r.pid, r.memory_bytes) for r in answer.rows] == [(899293, WORKER), (12, 0)]
    assert (answer.memory_reason, answer.cores_reason) == (None, Reason.UNSUPPORTED)
    assert answer.device_id == CANONICAL


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (processes([(1, MIB)], guard_written=True, rows=None), Reason.TRUNCATED),
        (processes([], count=40, rows=None), Reason.TRUNCATED),
        ({"count": 1, "capacity": 32}, Reason.TRUNCATED),  # no word on the guard: not trusted
        (processes([(0, MIB)]), Reason.TRANSIENT_DRIVER_ERROR),  # a PID <= 0
        (processes([(-5, MIB)]), Reason.TRANSIENT_DRIVER_ERROR),
        (processes([(7, MIB)], count=2), Reason.TRANSIENT_DRIVER_ERROR),
        (processes([(7, MIB)], count=-1), Reason.TRANSIENT_DRIVER_ERROR),
        (processes([(7, -1)]), Reason.TRANSIENT_DRIVER_ERROR),
        (processes([(7, 57280)]), Reason.INVALID_DATA),  # reads as MB, not bytes
        (processes([(7, WORKER), (8, WORKER)]), Reason.INVALID_DATA),  # more than the card
        (err(-8255), Reason.UNSUPPORTED),
        (err(-8013), Reason.UNSUPPORTED),
        (err(-99998), Reason.UNSUPPORTED),
        (err(-8002), Reason.PERMISSION),
        (err(-8012), Reason.TRANSIENT_DRIVER_ERROR),
        ("junk", Reason.TRANSIENT_DRIVER_ERROR),
    ],
)
def test_a_process_answer_that_is_not_a_whole_list_publishes_no_rows(
    answer: Any, reason: Reason
) -> None:
    (got,) = parse(npu(dcmi_get_device_resource_info=answer)).processes
    assert (got.rows, got.memory_reason) == ((), reason)
    assert got.reads_truncated == int(reason is Reason.TRUNCATED)


def test_no_process_answer_where_none_was_asked() -> None:
    assert parse(npu()).processes == ()


# -- vNPUs ----------------------------------------------------------------------------------------


def vnpu_device(activity: Any, **fields: Any) -> dict[str, Any]:
    vnpus: dict[str, Any] = {
        ascend.VDEV_TOTAL: {"vdev_num": 1, "vdev_id": [100]},
        "vnpus": [
            {
                "vdev_id": 100,
                ascend.VDEV_RESOURCE: {"vdev_id": 100, "name": "vir04", "memory_size": 16384},
                ascend.VDEV_ACTIVITY: activity,
            }
        ],
    }
    return npu(**{**vnpus, **fields})


def partitions(device: dict[str, Any], *wanted: str) -> dict[str, Any]:
    got = ascend.parse(
        {"devices": [device], "request": {"partitions": [[CANONICAL, w] for w in wanted]}}
    ).partitions
    return {p.id: p for p in got}


def activity(util: int, total_kb: int, free_kb: int) -> dict[str, int]:
    return {
        "vdev_id": 100,
        "vdev_aicore_utilization": util,
        "vdev_memory_total": total_kb,
        "vdev_memory_free": free_kb,
    }


def test_a_vnpu_reads_its_own_memory_in_kb_and_its_ai_cores() -> None:
    got = partitions(vnpu_device(activity(40, 16384 * 1024, 4096 * 1024)), "100", "vdavinci100")
    (p,) = got.values()  # two recorded forms, one vNPU
    assert (p.id, p.parent_id) == ("vdavinci100", CANONICAL)
    assert (p.memory_total_mib, p.memory_used_mib, p.cores_percent) == (16384, 12288, 40.0)
    assert p.aliases == ("100", "Ascend910-4c-100-0")


@pytest.mark.parametrize(
    ("answer", "memory", "cores"),
    [
        (activity(40, 1024, 2048), Reason.INVALID_DATA, None),  # free past total
        (activity(40, 0, 0), Reason.INVALID_DATA, None),
        (activity(140, 1024, 0), None, Reason.INVALID_DATA),  # not a percent
        (err(-8001), Reason.TRANSIENT_DRIVER_ERROR, Reason.TRANSIENT_DRIVER_ERROR),
        (err(-8002), Reason.PERMISSION, Reason.PERMISSION),
        ("junk", Reason.TRANSIENT_DRIVER_ERROR, Reason.TRANSIENT_DRIVER_ERROR),
    ],
)
def test_a_vnpu_answer_the_driver_contradicts_is_refused(
    answer: Any, memory: Reason | None, cores: Reason | None
) -> None:
    (p,) = partitions(vnpu_device(answer), "100").values()
    assert (p.memory_reason, p.cores_reason) == (memory, cores)
    if memory is not None:
        assert (p.memory_total_mib, p.memory_used_mib) == (None, None)


@pytest.mark.parametrize("code", [-8255, -8013, -99998])
def test_a_vnpu_without_the_activity_query_keeps_its_template_memory(code: int) -> None:
    (p,) = partitions(vnpu_device(err(code)), "100").values()
    # memory_size 16384 is DCMI's MB, 2^20 bytes each: 16384 MiB as it stands, not 16000.
    assert (p.memory_total_mib, p.memory_used_mib, p.cores_percent) == (16384, None, None)
    assert (p.memory_reason, p.cores_reason) == (None, Reason.UNSUPPORTED)


@pytest.mark.parametrize(
    "resource",
    [
        err(-8255),
        {"vdev_id": 100, "name": "vir04", "memory_size": 0},
        {"vdev_id": 100, "name": "vir04"},
        {"vdev_id": 100, "name": "vir04", "memory_size": "16384"},
    ],
)
def test_without_activity_or_a_template_size_the_memory_is_absent(resource: Any) -> None:
    device = vnpu_device(err(-8255))
    device["vnpus"][0][ascend.VDEV_RESOURCE] = resource
    (p,) = partitions(device, "100").values()
    assert (p.memory_total_mib, p.memory_reason, p.cores_reason) == (
        None,
        Reason.UNSUPPORTED,
        Reason.UNSUPPORTED,
    )


def test_a_vnpu_list_longer_than_its_array_is_not_trusted() -> None:
    device = vnpu_device(activity(40, 1024, 0))
    device[ascend.VDEV_TOTAL] = {"vdev_num": 33, "vdev_id": [100]}
    (p,) = partitions(device, "100").values()
    assert (p.id, p.memory_reason) == ("100", Reason.TRANSIENT_DRIVER_ERROR)


# -- totality -----------------------------------------------------------------------------------

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**64), max_value=2**64)
    | st.integers(min_value=10**300, max_value=10**320)
    | st.floats()
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=24,
)
KEYS = [*sorted(npu()), ascend.PROCESSES, ascend.VDEV_TOTAL, "vnpus", "known"]


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(st.sampled_from(KEYS), JSON, max_size=8),
    st.lists(st.tuples(st.text(max_size=30), st.text(max_size=30)), max_size=3),
)
def test_no_payload_shape_makes_parse_raise(damage: dict[str, Any], wanted: list[Any]) -> None:
    device = vnpu_device(activity(40, 1024, 0), **damage)
    payload = {
        "devices": [device, damage, "junk"],
        "request": {"partitions": [list(w) for w in wanted] + [[CANONICAL, "100"], "x"]},
        "dcmi_get_driver_version": damage.get("known"),
    }
    ascend.parse(payload)


@settings(max_examples=200, deadline=None)
@given(JSON)
def test_no_top_level_shape_makes_parse_raise(payload: Any) -> None:
    parsed_or_refused(ascend.parse, payload if isinstance(payload, dict) else {"devices": payload})


@settings(max_examples=200, deadline=None)
@given(JSON, JSON, JSON)
def test_no_damaged_topology_makes_parse_raise(node: Any, kind: Any, entry: Any) -> None:
    """(R-X3) A topology of any shape is links and NUMA nodes or none, never a raise."""
    other = npu(card=1, **{"dcmi_get_device_die_v2": [w + 1 for w in WORDS]})
    topology = {
        "readAt": 1.0,
        "devices": [{"npu": [0, 0], "sysfsNumaNode": node}, {"npu": [1, 0]}, entry],
        "pairs": [{"a": [0, 0], "b": [1, 0], "dcmi_get_topo_info_by_device_id": kind}, entry],
    }
    for c in parse(npu(), other, topology=topology).cards:
        assert c.links is None or len(c.links) <= 1
        assert c.numa_node is None or 0 <= c.numa_node < 4096


@pytest.mark.parametrize(
    ("kind", "link"),
    [
        (0, None),  # SELF: no pair
        (1, "system"),
        (2, "pcie_host_bridge"),
        (3, "hccs"),
        (4, "pcie_switches"),
        (5, "pcie_switch"),
        (6, None),  # SIO in the newer header, BUTT ("unknown") in the older reference
        (7, "hccs_switch"),
        (8, None),  # UB: no kind here
        (9, None),  # BUTT
        ({"error": "dcmi_get_topo_info_by_device_id", "code": -8255}, None),
        ("3", None),
    ],
)
def test_each_topology_type_is_its_kind_or_places_nothing(kind: Any, link: str | None) -> None:
    """(R-X3) DCMI_TOPO_TYPE_* as the kinds `nvidia-smi topo -m` names alike (SYS, PHB, PXB,
    PIX) and HCCS, direct or through a switch; a type without one meaning, a failed call and a
    value that is not a number place the pair nowhere, never "pcie". NUMA nodes from sysfs's
    text; -1 (no affinity) is none."""
    other = npu(card=1, **{"dcmi_get_device_die_v2": [w + 1 for w in WORDS]})
    topology = {
        "readAt": 1.0,
        "devices": [
            {"npu": [0, 0], "sysfsNumaNode": "1\n"},
            {"npu": [1, 0], "sysfsNumaNode": "-1\n"},
        ],
        "pairs": [{"a": [0, 0], "b": [1, 0], "dcmi_get_topo_info_by_device_id": kind}],
    }
    first, second = parse(npu(), other, topology=topology).cards
    assert [x.link for x in first.links or ()] == ([] if link is None else [link])
    assert [x.peer_id for x in second.links or ()] == ([] if link is None else [first.id])
    assert (first.numa_node, second.numa_node) == (1, None)
    (before,) = parse(npu()).cards
    assert (before.links, before.numa_node) == (None, None)


# -- the NPU's health beyond one bit (R-X7) ----------------------------------------------------

ECC_ON = {
    "enable_flag": 1,
    "single_bit_error_cnt": 5,
    "double_bit_error_cnt": 0,
    "total_single_bit_error_cnt": 50,
    "total_double_bit_error_cnt": 1,
    "single_bit_isolated_pages_cnt": 4,
    "double_bit_isolated_pages_cnt": 1,
    "single_bit_next_isolated_pages_cnt": 0,
    "double_bit_next_isolated_pages_cnt": 0,
}
NS = -8255  # device ID / function not supported


def npu_health(**fields: Any) -> Any:
    (card,) = parse(npu(**fields)).cards
    return card.health


def test_an_ascend_payload_recorded_before_the_health_reads_has_no_health() -> None:
    """(R-X7) A recording without the ECC and frequency calls parses to the NPU it parsed to
    before: no health figures, no capability rows."""
    assert npu_health() is None


@pytest.mark.parametrize(
    ("fields", "figure", "value", "reason"),
    [
        # ECC of the HBM: counts now and in total, isolated pages for each kind of error.
        ({"dcmi_get_device_ecc_info": {"hbm": ECC_ON}}, "ecc_corrected_volatile", 5, None),
        ({"dcmi_get_device_ecc_info": {"hbm": ECC_ON}}, "ecc_uncorrected_aggregate", 1, None),
        ({"dcmi_get_device_ecc_info": {"hbm": ECC_ON}}, "remapped_rows_correctable", 4, None),
        ({"dcmi_get_device_ecc_info": {"hbm": ECC_ON}}, "remapped_rows_uncorrectable", 1, None),
        ({"dcmi_get_device_ecc_info": {"hbm": ECC_ON}}, "remapped_rows_pending", 0, None),
        (
            {
                "dcmi_get_device_ecc_info": {
                    "hbm": {**ECC_ON, "single_bit_next_isolated_pages_cnt": 3}
                }
            },
            "remapped_rows_pending",
            1,
            None,
        ),
        (
            {"dcmi_get_device_ecc_info": {"hbm": {**ECC_ON, "double_bit_error_cnt": 0xFFFFFFFE}}},
            "ecc_uncorrected_volatile",
            0xFFFFFFFE,
            None,
        ),
        (
            {"dcmi_get_device_ecc_info": {"hbm": {**ECC_ON, "double_bit_error_cnt": 0xFFFFFFFF}}},
            "ecc_uncorrected_volatile",
            None,
            Reason.INVALID_DATA,
        ),
        (
            {"dcmi_get_device_ecc_info": {"hbm": {**ECC_ON, "single_bit_error_cnt": -1}}},
            "ecc_corrected_volatile",
            None,
            Reason.INVALID_DATA,
        ),
        (  # ECC off: every ECC figure unsupported, not zero
            {"dcmi_get_device_ecc_info": {"hbm": {**ECC_ON, "enable_flag": 0}}},
            "ecc_corrected_volatile",
            None,
            Reason.UNSUPPORTED,
        ),
        (  # no HBM (a DDR part): the DDR's answer
            {"dcmi_get_device_ecc_info": {"hbm": err(NS), "ddr": ECC_ON}},
            "ecc_corrected_aggregate",
            50,
            None,
        ),
        (
            {"dcmi_get_device_ecc_info": {"hbm": err(NS), "ddr": err(NS)}},
            "remapped_rows_uncorrectable",
            None,
            Reason.UNSUPPORTED,
        ),
        (
            {"dcmi_get_device_ecc_info": {"hbm": err(-8002)}},
            "ecc_uncorrected_volatile",
            None,
            Reason.PERMISSION,
        ),
        (
            {"dcmi_get_device_ecc_info": {"hbm": ECC_ON}},
            "remapped_rows_failed",
            None,
            Reason.UNSUPPORTED,
        ),
        # Frequencies in MHz: the AI cores' as the SM clock, HBM (else DDR) as memory.
        ({"dcmi_get_device_frequency": {"aicore": 1800}}, "clock_sm_hz", 1_800_000_000, None),
        ({"dcmi_get_device_frequency": {"aicore": 100_000}}, "clock_sm_hz", 10**11, None),
        (
            {"dcmi_get_device_frequency": {"aicore": 100_001}},
            "clock_sm_hz",
            None,
            Reason.INVALID_DATA,
        ),
        (
            {"dcmi_get_device_frequency": {"aicore": 0xFFFFFFFF}},
            "clock_sm_hz",
            None,
            Reason.INVALID_DATA,
        ),
        (
            {"dcmi_get_device_frequency": {"hbm": err(NS), "ddr": 3200}},
            "clock_memory_hz",
            3_200_000_000,
            None,
        ),
        (
            {"dcmi_get_device_frequency": {"hbm": 1600, "ddr": 3200}},
            "clock_memory_hz",
            1_600_000_000,
            None,
        ),
        (
            {"dcmi_get_device_frequency": {"aicore": err(-99998)}},
            "clock_sm_hz",
            None,
            Reason.UNSUPPORTED,
        ),
        # No DCMI call answers these.
        ({"dcmi_get_device_frequency": {}}, "energy_joules", None, Reason.UNSUPPORTED),
        ({"dcmi_get_device_frequency": {}}, "throttle_reasons", None, Reason.UNSUPPORTED),
        ({"dcmi_get_device_frequency": {}}, "pcie_replays", None, Reason.UNSUPPORTED),
        ({"dcmi_get_device_frequency": {}}, "clock_graphics_hz", None, Reason.UNSUPPORTED),
    ],
)
def test_each_ascend_health_figure_is_range_checked_and_says_why_it_is_absent(
    fields: dict[str, Any], figure: str, value: Any, reason: Reason | None
) -> None:
    """(R-X7) Each figure from its DCMI answer, with the header's units (MHz) and sentinels:
    in range it is published in base units; a failure is its code's reason; all ones, a
    negative or above 100 GHz is `invalid_data`; ECC off and a figure no call answers are
    `unsupported`, never 0."""
    health = npu_health(**fields)
    assert health is not None
    assert (health.get(figure), health.reason(figure)) == (value, reason)


@pytest.mark.parametrize(
    ("answer", "codes", "reason"),
    [
        ({"count": 2, "codes": [0x40F84E00, 7]}, ("0x40F84E00", "0x00000007"), None),
        ({"count": 0, "codes": []}, (), None),
        ({"count": 2, "codes": [5, 5]}, ("0x00000005",), None),
        (err(-8255), None, Reason.UNSUPPORTED),
        ({"count": -1, "codes": []}, None, Reason.INVALID_DATA),
        ({"count": 129, "codes": [1]}, None, Reason.INVALID_DATA),
        ({"count": 2, "codes": [1]}, None, Reason.INVALID_DATA),
        ({"count": 1, "codes": [0x1_0000_0000]}, None, Reason.INVALID_DATA),
        ({"count": 1, "codes": [True]}, None, Reason.INVALID_DATA),
        ([1, 2], None, Reason.INVALID_DATA),
    ],
)
def test_error_codes_as_hex_once_each_or_refused(
    answer: Any, codes: tuple[str, ...] | None, reason: Reason | None
) -> None:
    """(R-X7) dcmi_get_device_errorcode_v2's answer: each code once, as eight hex digits, in
    DCMI's order; a refused call is its code's reason; a negative count, one past the header's
    128, one the list does not match, a code past 32 bits or no number is `invalid_data`."""
    got = ascend.parse_error_codes(answer)
    assert got == (codes, reason)
    (card,) = ascend.parse({"devices": [npu(dcmi_get_device_errorcode_v2=answer)]}).cards
    assert card.health is not None
    assert (card.health.error_codes, card.health.reason("error_codes")) == (codes, reason)
