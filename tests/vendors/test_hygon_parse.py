"""Hygon's pure parse(): payloads as read() records them, quirks spelled as the libraries write
them (R-V5), and no payload shape that makes it raise."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devicemanager.model import HealthFigure, PartitionReading, Reason, identity_map
from tests.vendors.shapes import parsed_or_refused
from vendors import hygon
from vendors._common import EVERY_ACTIVITY

MIB = 1048576
GIB = 1024 * MIB
UID = 0x1A2B3C4D5E6F7081
CARD = f"GPU-{UID:x}"


def err(name: str, code: int) -> dict[str, Any]:
    return {"error": name, "code": code}


def device(index: int = 0, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "index": index,
        "rsmi_dev_unique_id_get": UID + index,
        "rsmi_dev_pci_id_get": (0x03 + 0x20 * index) << 8,
        "rsmi_dev_name_get": "K100_AI",
        "rsmi_dev_serial_number_get": f"HCU{index:04d}",
        "rsmi_dev_memory_total_get": 65520 * MIB,
        "rsmi_dev_memory_usage_get": 1024 * MIB + 1,
        "rsmi_dev_busy_percent_get": 40,
        "rsmi_dev_temp_metric_get": {"edge": 51_500},
        "rsmi_dev_power_get": {"power": 250_500_000, "type": 1},
        "rsmi_dev_ecc_count_get": {"correctable_err": 3, "uncorrectable_err": 0},
    }
    base.update(fields)
    return base


def payload(*devices: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {
        "rsmi_version_str_get": "6.3.8-V1.11.0",
        "libraries": {"rocm_smi": True, "hydmi": True, "hydmi_mig": True},
        "devices": list(devices) or [device()],
        **top,
    }


# -- cards --------------------------------------------------------------------------------------


def test_card_figures_units_and_identity() -> None:
    reading = hygon.parse(payload())
    (c,) = reading.cards
    assert (c.id, c.index, c.name) == (CARD, 0, "K100_AI")
    # HAMi's DCU-<index> and HCU-<serial>, and the bus id the Hygon device plugin registers.
    assert c.aliases == ("DCU-0", "HCU-HCU0000", "0000:03:00.0")
    assert (c.memory_total_mib, c.memory_used_mib) == (65520, 1025)  # bytes, rounded up once
    assert c.cores_utilization_percent == 40.0
    assert c.temperature_celsius == 51.5  # millidegrees
    assert c.power_usage_watts == 250.5  # microwatts
    assert not c.unhealthy
    assert (reading.driver_version, reading.via) == ("6.3.8-V1.11.0", "rocm_smi,hydmi,hydmi_mig")


def test_junction_temperature_where_edge_is_not_served() -> None:
    temps = {"edge": err("RSMI_STATUS_NOT_SUPPORTED", 2), "junction": 63_000}
    (c,) = hygon.parse(payload(device(rsmi_dev_temp_metric_get=temps))).cards
    assert c.temperature_celsius == 63.0


def test_power_falls_back_to_the_average_and_an_invalid_type_is_absent() -> None:
    ave = device(rsmi_dev_power_get=err("NOT_EXPORTED", 2), rsmi_dev_power_ave_get=90_000_000)
    invalid = device(rsmi_dev_power_get={"power": 0, "type": 0xFFFFFFFF})
    assert hygon.parse(payload(ave)).cards[0].power_usage_watts == 90.0
    assert hygon.parse(payload(invalid)).cards[0].power_usage_watts is None


def test_unanswered_figures_are_absent_not_zero() -> None:
    down = err("RSMI_STATUS_FILE_ERROR", 3)
    (c,) = hygon.parse(
        payload(
            device(
                rsmi_dev_busy_percent_get=down,
                rsmi_dev_memory_usage_get=down,
                rsmi_dev_temp_metric_get={"edge": down, "junction": down},
            )
        )
    ).cards
    assert (c.cores_utilization_percent, c.memory_used_mib, c.temperature_celsius) == (
        None,
        None,
        None,
    )
    assert c.memory_total_mib == 65520 and not c.unhealthy


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"rsmi_dev_ecc_count_get": {"uncorrectable_err": 2}}, "ecc_uncorrectable"),
        (
            {
                "rsmi_dev_unique_id_get": err("RSMI_STATUS_FILE_ERROR", 3),
                "rsmi_dev_memory_total_get": err("RSMI_STATUS_FILE_ERROR", 3),
                "known": {"unique_id": UID, "bdf": 0x0300},
            },
            "unreachable",
        ),
        # Refused (no permission) is not a broken card.
        (
            {
                "rsmi_dev_unique_id_get": err("RSMI_STATUS_PERMISSION", 4),
                "rsmi_dev_memory_total_get": err("RSMI_STATUS_PERMISSION", 4),
            },
            None,
        ),
    ],
)
def test_health(fields: dict[str, Any], reason: str | None) -> None:
    (c,) = hygon.parse(payload(device(**fields))).cards
    assert (c.unhealthy, c.unhealthy_reason) == (reason is not None, reason)
    assert c.id == CARD or "rsmi_dev_unique_id_get" in fields


PAGES = "rsmi_dev_memory_reserved_pages_get"


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({PAGES: [0, 2]}, "retired_pages_unreservable"),
        ({PAGES: [2, 2, 1]}, "retired_pages_unreservable"),
        # Retired or waiting to be: the repair works; the card is healthy.
        ({PAGES: [0, 1]}, None),
        ({PAGES: []}, None),
        # No answer or one nobody can read says nothing of the card.
        ({PAGES: err("RSMI_STATUS_NOT_SUPPORTED", 2)}, None),
        ({PAGES: [2, 7]}, None),
        ({PAGES: "2"}, None),
        # The more severe reason first.
        (
            {PAGES: [2], "rsmi_dev_ecc_count_get": {"uncorrectable_err": 1}},
            "ecc_uncorrectable",
        ),
    ],
)
def test_a_page_that_could_not_be_retired_makes_the_card_unhealthy(
    fields: dict[str, Any], reason: str | None
) -> None:
    """(R-X7) A retired-page record in the UNRESERVABLE state is a page the driver could not
    retire: bad memory left in use, so the card is unhealthy `retired_pages_unreservable`
    (NVML's failed row remap); reserved and pending pages are repair at work; a refused or
    unreadable answer leaves `unhealthy` to the other signals."""
    (c,) = hygon.parse(payload(device(**fields))).cards
    assert (c.unhealthy, c.unhealthy_reason) == (reason is not None, reason)


def test_a_unique_id_two_cards_report_names_neither_and_the_bus_id_does() -> None:
    twins = payload(device(0), device(1, rsmi_dev_unique_id_get=UID))
    ids = [c.id for c in hygon.parse(twins).cards]
    assert ids == ["0000:03:00.0", "0000:23:00.0"]
    assert f"GPU-{UID:x}" not in identity_map(hygon.parse(twins).cards)


def test_a_card_with_no_identity_at_all_is_left_out() -> None:
    nothing = err("RSMI_STATUS_FILE_ERROR", 3)
    cards = hygon.parse(
        payload(device(0), device(1, rsmi_dev_unique_id_get=nothing, rsmi_dev_pci_id_get=nothing))
    ).cards
    assert [c.index for c in cards] == [0]


def test_the_bus_id_from_a_bdfid_with_domain_device_and_function() -> None:
    value = (0x1 << 32) | (0xC3 << 8) | (0x1F << 3) | 0x7
    assert hygon.bus_id_of(value) == "0001:c3:1f.7"
    assert hygon.bus_id_of(-1) is None and hygon.bus_id_of("03") is None


# -- per-process --------------------------------------------------------------------------------


def listing(rows: Any, gpus: dict[int, Any]) -> dict[str, Any]:
    return {
        "rsmi_compute_process_info_get": rows,
        "attempts": 1,
        "rsmi_compute_process_gpus_get": [{"pid": p, "devices": d} for p, d in gpus.items()],
    }


def listed(*pids: int) -> list[dict[str, Any]]:
    return [{"process_id": p, "vram_usage": GIB, "cu_occupancy": 1} for p in pids]


def by_device(pid: int, vram: int, cu: int) -> dict[str, Any]:
    return {
        "pid": pid,
        "rsmi_compute_process_info_by_device_get": {"vram_usage": vram, "cu_occupancy": cu},
    }


def test_rows_in_bytes_and_cu_occupancy_invalid_is_absent_for_that_row_only() -> None:
    p = payload(
        device(processes=[by_device(11, 6 * GIB, 35), by_device(12, 2 * GIB, 0xFFFFFFFF)]),
        processes=listing(listed(11, 12, 13), {11: [0], 12: [0, 1], 13: [1]}),
    )
    (answer,) = hygon.parse(p).processes
    assert [(r.pid, r.memory_bytes, r.cores_percent) for r in answer.rows] == [
        (11, 6 * GIB, 35.0),
        (12, 2 * GIB, None),  # CU_OCCUPANCY_INVALID: absent, memory unaffected
    ]
    assert (answer.device_id, answer.memory_reason, answer.cores_reason) == (CARD, None, None)


def test_a_truncated_list_is_truncated_never_partial() -> None:
    p = payload(
        device(processes=[]),
        processes=listing(err("RSMI_STATUS_INSUFFICIENT_SIZE", 11), {}),
    )
    (answer,) = hygon.parse(p).processes
    assert (answer.rows, answer.memory_reason, answer.reads_truncated) == ((), Reason.TRUNCATED, 1)


@pytest.mark.parametrize(
    ("gpus", "row", "expected"),
    [
        # Exited between the list and the per-process calls: no row, no reason.
        ({11: err("RSMI_STATUS_NOT_FOUND", 10)}, None, (0, None)),
        (
            {11: [0]},
            {"pid": 11, "rsmi_compute_process_info_by_device_get": err("NOT_FOUND", 10)},
            (0, None),
        ),
        # Which devices it uses could not be read: the card's list cannot be complete.
        ({11: err("RSMI_STATUS_FILE_ERROR", 3)}, None, (0, Reason.TRANSIENT_DRIVER_ERROR)),
        ({11: err("RSMI_STATUS_PERMISSION", 4)}, None, (0, Reason.PERMISSION)),
        (
            {11: [0]},
            {"pid": 11, "rsmi_compute_process_info_by_device_get": err("BUSY", 16)},
            (0, Reason.TRANSIENT_DRIVER_ERROR),
        ),
    ],
)
def test_per_process_answers_that_fail(
    gpus: dict[int, Any], row: dict[str, Any] | None, expected: tuple[int, Reason | None]
) -> None:
    p = payload(device(processes=[row] if row else []), processes=listing(listed(11), gpus))
    (answer,) = hygon.parse(p).processes
    assert (len(answer.rows), answer.memory_reason) == expected
    assert answer.cores_reason == expected[1]


def test_the_v2_row_in_mib_is_used_where_the_per_device_row_is_not_served() -> None:
    refused = err("RSMI_STATUS_NOT_SUPPORTED", 2)

    def v2(pid: int, mib: int, gpus: list[int], rates: list[float]) -> dict[str, Any]:
        return {
            "pid": pid,
            "rsmi_compute_process_info_by_device_get": refused,
            "rsmi_compute_process_info_by_pid_get_v2": {
                "vramUsageSize": mib,
                "usedGpus": len(gpus),
                "gpuIndex": gpus,
                "gpuUsageRate": rates,
            },
        }

    p = payload(
        device(processes=[v2(11, 6144, [0], [25.5]), v2(12, 2048, [1, 0], [9.0, 5.0])]),
        processes=listing(listed(11, 12), {11: [0], 12: [1, 0]}),
    )
    (answer,) = hygon.parse(p).processes
    # MiB for the whole process: this card's only when the process uses it alone.
    assert [(r.pid, r.memory_bytes, r.cores_percent) for r in answer.rows] == [
        (11, 6144 * MIB, 25.5),
        (12, None, 5.0),
    ]


def test_no_per_process_answer_for_a_card_read_did_not_ask_about() -> None:
    assert hygon.parse(payload(processes=listing(listed(11), {11: [0]}))).processes == ()


# -- partitions ---------------------------------------------------------------------------------


def request(*pairs: tuple[str, str]) -> dict[str, Any]:
    return {"carved": [], "partitions": [list(p) for p in pairs]}


def vdcu(index: int, **info: Any) -> dict[str, Any]:
    busy = info.pop("busy", 40)
    base = {
        "name": "K100_AI",
        "compute_unit_count": 30,
        "global_mem_size": 8 * GIB,
        "usage_mem_size": GIB,
        "container_id": 0,
        "device_id": 0,
    }
    base.update(info)
    return {"index": index, "dmiGetVDeviceInfo": base, "dmiGetVDevBusyPercent": busy}


def test_a_vdcu_is_read_on_its_node_global_index_and_named_by_its_card() -> None:
    p = payload(
        device(0),
        device(1),
        request=request(("DCU-1", "vDCU-4"), (CARD, "vdev2")),
        vdcu=[vdcu(4, device_id=1, busy=71), vdcu(2, busy=err("DMI_STATUS_NOT_SUPPORTED", 6))],
    )
    got = {p.id: p for p in hygon.parse(p).partitions}
    four = got["vDCU-4"]
    assert (four.parent_id, four.memory_total_mib, four.memory_used_mib) == (
        f"GPU-{UID + 1:x}",
        8192,
        1024,
    )
    assert (four.cores_percent, four.aliases) == (71.0, ("vdev4",))
    two = got["vDCU-2"]  # asked for as vdev2: answered under its canonical id, alias kept
    assert (two.parent_id, two.cores_percent, two.cores_reason) == (CARD, None, Reason.UNSUPPORTED)
    assert two.memory_used_mib == 1024 and two.aliases == ("vdev2",)


@pytest.mark.parametrize(
    ("entry", "libraries", "reason"),
    [
        (vdcu(4, device_id=0), {"hydmi": False}, Reason.UNSUPPORTED),
        ({"index": 4, "dmiGetVDeviceInfo": err("VDEV_NOT_EXIST", 15)}, {}, "transient"),
        (vdcu(4, device_id=5), {}, "transient"),  # its card is not enumerated
        (vdcu(4, device_id=1), {}, "transient"),  # the allocation names another card
    ],
)
def test_vdcu_answers_without_figures(
    entry: dict[str, Any], libraries: dict[str, bool], reason: Any
) -> None:
    p = payload(device(0), device(1), request=request((CARD, "vDCU-4")), vdcu=[entry])
    p["libraries"].update(libraries)
    (answer,) = hygon.parse(p).partitions
    expected = Reason.TRANSIENT_DRIVER_ERROR if reason == "transient" else reason
    assert (answer.id, answer.memory_reason, answer.cores_reason) == ("vDCU-4", expected, expected)
    assert answer.memory_used_mib is None
    assert answer.activity is not None and not answer.activity.held()
    assert {why for _, why in answer.activity.reasons} == {expected}


def mig_payload(**changes: Any) -> dict[str, Any]:
    instance = {
        "nvmlDeviceGetMigDeviceHandleByIndex": 0,
        "nvmlDeviceGetGpuInstanceId": 3,
        "nvmlDeviceGetComputeInstanceId": 0,
        "nvmlDeviceGetMemoryInfo": {"total": 16380 * MIB, "free": 0, "used": 12 * GIB},
        "nvmlDeviceGetUtilizationRates": {"gpu": 93, "memory": 0},
    }
    card = {
        "index": 0,
        "id": CARD,
        "busId": "0000:03:00.0",
        "nvmlDeviceGetHandleByPciBusId": "0000:03:00.0",
        "nvmlDeviceGetIndex": 0,
        "nvmlDeviceGetPciInfo": "",
        "nvmlDeviceGetMaxMigDeviceCount": 4,
        "migDevices": [instance],
    }
    mig = {
        "nvmlGetSystemMigMode": {"current": 1, "pending": 1},
        "nvmlDeviceGetCount": 1,
        "registry": {"dev0gi3ci0": "9f1c0d2e-aaaa"},
        "cards": [card],
    }
    for key, value in changes.items():
        target = instance if key.startswith("nvmlDeviceGet") and key in instance else card
        target = mig if key in mig else target
        target[key] = value
    return mig


def test_a_mig_partition_without_a_uuid_in_the_library_is_found_by_the_registrys_uuid() -> None:
    p = payload(request=request((CARD, "MIG-9f1c0d2e-aaaa")), mig=mig_payload())
    (part,) = hygon.parse(p).partitions
    # Canonical: synthesized from the card and the instance pair; the driver's UUID an alias.
    assert (part.id, part.parent_id, part.aliases) == (
        f"MIG-{CARD}/3/0",
        CARD,
        ("MIG-9f1c0d2e-aaaa",),
    )
    assert (part.memory_total_mib, part.memory_used_mib, part.cores_percent) == (16380, 12288, 93.0)
    assert (part.memory_reason, part.cores_reason) == (None, None)


def test_the_same_partition_under_both_names_and_any_case_is_one_reading() -> None:
    p = payload(
        request=request(
            (CARD, "MIG-9F1C0D2E-AAAA"), (CARD, f"MIG-{CARD}/3/0"), ("", "9f1c0d2e-aaaa")
        ),
        mig=mig_payload(),
    )
    (part,) = hygon.parse(p).partitions
    assert part.id == f"MIG-{CARD}/3/0"
    # Every spelling an allocation recorded resolves to it through the core's identity map.
    assert set(part.aliases) >= {"MIG-9f1c0d2e-aaaa", "MIG-9F1C0D2E-AAAA", "9f1c0d2e-aaaa"}


def test_without_the_registry_the_synthesized_id_still_finds_the_partition() -> None:
    p = payload(
        request=request((CARD, f"MIG-{CARD}/3/0"), (CARD, "MIG-9f1c0d2e-aaaa")),
        mig=mig_payload(registry={}),
    )
    got = {p.id: p for p in hygon.parse(p).partitions}
    assert got[f"MIG-{CARD}/3/0"].memory_total_mib == 16380
    assert got["MIG-9f1c0d2e-aaaa"].memory_reason is Reason.TRANSIENT_DRIVER_ERROR


@pytest.mark.parametrize(
    ("changes", "libraries", "reason"),
    [
        ({}, {"hydmi_mig": False}, Reason.UNSUPPORTED),
        ({"nvmlGetSystemMigMode": {"current": 0, "pending": 0}}, {}, Reason.UNSUPPORTED),
        ({"nvmlGetSystemMigMode": err("NO_PERMISSION", 4)}, {}, Reason.PERMISSION),
        ({"nvmlDeviceGetPciInfo": "0000:43:00.0"}, {}, Reason.INVALID_DATA),  # another card's
        ({"nvmlDeviceGetHandleByPciBusId": err("NOT_FOUND", 6)}, {}, Reason.TRANSIENT_DRIVER_ERROR),
        ({"migDevices": err("UNKNOWN", 999)}, {}, Reason.TRANSIENT_DRIVER_ERROR),
        ({"registry": {"dev0gi9ci0": "9f1c0d2e-aaaa"}}, {}, Reason.TRANSIENT_DRIVER_ERROR),
    ],
)
def test_mig_answers_without_figures(
    changes: dict[str, Any], libraries: dict[str, bool], reason: Reason
) -> None:
    p = payload(request=request((CARD, "MIG-9f1c0d2e-aaaa")), mig=mig_payload(**changes))
    p["libraries"].update(libraries)
    (part,) = hygon.parse(p).partitions
    assert (part.memory_reason, part.cores_reason, part.memory_used_mib) == (reason, reason, None)
    # Its activity figures are absent for the same reason, none of them the card's.
    assert part.activity is not None and not part.activity.held()
    assert dict(part.activity.reasons) == dict.fromkeys(EVERY_ACTIVITY, reason)


def test_an_empty_pci_string_from_the_mig_library_is_its_known_quirk_not_a_mismatch() -> None:
    p = payload(request=request((CARD, "MIG-9f1c0d2e-aaaa")), mig=mig_payload())
    assert p["mig"]["cards"][0]["nvmlDeviceGetPciInfo"] == ""
    (part,) = hygon.parse(p).partitions
    assert part.memory_reason is None


def test_two_handles_claiming_one_instance_are_neither() -> None:
    mig = mig_payload()
    mig["cards"][0]["migDevices"].append(dict(mig["cards"][0]["migDevices"][0]))
    (part,) = hygon.parse(payload(request=request((CARD, "MIG-9f1c0d2e-aaaa")), mig=mig)).partitions
    assert part.memory_reason is Reason.INVALID_DATA


def test_partition_utilization_not_served_is_unsupported_and_memory_still_measured() -> None:
    mig = mig_payload(nvmlDeviceGetUtilizationRates=err("NOT_EXPORTED", 13))
    (part,) = hygon.parse(payload(request=request((CARD, "MIG-9f1c0d2e-aaaa")), mig=mig)).partitions
    assert (part.cores_percent, part.cores_reason, part.memory_used_mib) == (
        None,
        Reason.UNSUPPORTED,
        12288,
    )


# -- partitions' activity (issue 41) ------------------------------------------------------------


def absent_activity(part: PartitionReading) -> dict[HealthFigure, Reason]:
    assert part.activity is not None
    return dict(part.activity.reasons)


def test_a_mig_partition_states_its_memorys_busy_time_and_no_activity_figure() -> None:
    # The card's cores are 40% busy; the instance's own handle answers 93% and its memory 37%.
    mig = mig_payload(nvmlDeviceGetUtilizationRates={"gpu": 93, "memory": 37})
    p = payload(request=request((CARD, "MIG-9f1c0d2e-aaaa")), mig=mig)
    reading = hygon.parse(p)
    (part,) = reading.partitions
    assert part.activity is not None
    # The memory's busy time (the same call's `memory`) is the one figure held, as busy time.
    assert part.activity.held() == {HealthFigure.MEMORY_BUSY: 37.0}
    assert part.cores_percent == 93.0  # the compute's busy time, its cores' figure
    # dmi_mig.h declares no GPM and no other per-instance measure: every activity figure is
    # absent `unsupported`, and the card's 40% busy is never stated as the partition's.
    absent = absent_activity(part)
    assert set(absent) == EVERY_ACTIVITY - {HealthFigure.MEMORY_BUSY}
    assert set(absent.values()) == {Reason.UNSUPPORTED}
    (card,) = reading.cards
    assert card.cores_utilization_percent == 40.0
    assert 40.0 not in part.activity.held().values()


@pytest.mark.parametrize(
    ("util", "memory_busy", "cores"),
    [
        ({"gpu": 93, "memory": 0}, (0.0, None), 93.0),  # idle memory is measured, not absent
        ({"gpu": 93, "memory": 101}, (None, Reason.INVALID_DATA), 93.0),  # never clamped
        ({"gpu": 93}, (None, Reason.INVALID_DATA), 93.0),
        (err("DMI_MIG_NOT_SUPPORTED", 3), (None, Reason.UNSUPPORTED), None),
        (err("NOT_EXPORTED", 13), (None, Reason.UNSUPPORTED), None),
        (err("DMI_MIG_NO_PERMISSION", 4), (None, Reason.PERMISSION), None),
        (err("DMI_MIG_UNKNOWN", 999), (None, Reason.TRANSIENT_DRIVER_ERROR), None),
    ],
)
def test_a_mig_partitions_memory_busy_time_answer_by_answer(
    util: Any, memory_busy: tuple[float | None, Reason | None], cores: float | None
) -> None:
    mig = mig_payload(nvmlDeviceGetUtilizationRates=util)
    (part,) = hygon.parse(payload(request=request((CARD, "MIG-9f1c0d2e-aaaa")), mig=mig)).partitions
    assert part.activity is not None
    value, why = memory_busy
    assert part.activity.number(HealthFigure.MEMORY_BUSY) == value
    assert part.activity.reason(HealthFigure.MEMORY_BUSY) is why
    assert part.cores_percent == cores
    assert part.activity.reason(HealthFigure.SM_ACTIVITY) is Reason.UNSUPPORTED


def test_a_vdcu_states_its_busy_time_and_no_activity_figure() -> None:
    # libhydmi answers a vDCU's busy percent alone (dmi_virtual.h): its cores' figure, busy time.
    p = payload(
        device(0),
        request=request((CARD, "vDCU-4"), (CARD, "vdev4")),
        vdcu=[vdcu(4, busy=71)],
    )
    (part,) = hygon.parse(p).partitions  # two spellings, one reading
    assert (part.id, part.cores_percent, part.aliases) == ("vDCU-4", 71.0, ("vdev4",))
    assert part.activity is not None and not part.activity.held()
    assert absent_activity(part) == dict.fromkeys(EVERY_ACTIVITY, Reason.UNSUPPORTED)


# -- damaged payloads ---------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
FIELDS = [*sorted(device()), "processes", "known"]
TOP = [
    "devices",
    "processes",
    "request",
    "vdcu",
    "mig",
    "libraries",
    "rsmi_version_str_get",
    "topology",
]


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=6), json_values)
def test_no_damaged_device_makes_parse_raise(fields: dict[str, Any], anything: Any) -> None:
    p = payload({**device(), **fields}, fields, request=anything, processes=anything, mig=anything)
    reading = hygon.parse(p)
    for c in reading.cards:
        assert isinstance(c.id, str) and isinstance(c.index, int)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(TOP), json_values, max_size=7))
def test_no_top_level_shape_makes_parse_raise(top: dict[str, Any]) -> None:
    parsed_or_refused(hygon.parse, top)


@settings(max_examples=200, deadline=None)
@given(json_values, json_values, json_values)
def test_no_damaged_mig_or_vdcu_answer_makes_parse_raise(card: Any, instance: Any, v: Any) -> None:
    mig = mig_payload()
    mig["cards"].append(card)
    mig["cards"][0]["migDevices"].append(instance)
    mig["registry"] = instance
    p = payload(
        request=request((CARD, "MIG-9f1c0d2e-aaaa"), ("", "vDCU-1"), ("x", "vdev2")),
        mig=mig,
        vdcu=[v, {"index": 1, "dmiGetVDeviceInfo": v, "dmiGetVDevBusyPercent": v}],
    )
    hygon.parse(p)


@settings(max_examples=200, deadline=None)
@given(json_values, json_values, json_values)
def test_no_damaged_topology_makes_parse_raise(node: Any, link: Any, entry: Any) -> None:
    """(R-X3) A topology of any shape is links and NUMA nodes or none, never a raise."""
    topology = {
        "readAt": 1.0,
        "devices": [{"index": 0, "rsmi_topo_get_numa_node_number": node}, {"index": 1}, entry],
        "pairs": [{"a": 0, "b": 1, "rsmi_topo_get_link_type": link}, entry],
    }
    for c in hygon.parse(payload(device(0), device(1), topology=topology)).cards:
        assert c.links is None or all(x.link in ("hsl", "pcie") for x in c.links)
        assert c.numa_node is None or 0 <= c.numa_node < 4096


def test_links_and_numa_nodes_from_the_recorded_topology() -> None:
    """(R-X3) Type 2 (the header's XGMI, Hygon's HSL) and 1 (PCIe) place a pair, by the peers'
    canonical ids; type 0 (UNDEFINED), a type the header does not define and a failed call
    place it nowhere; a NUMA node that failed or is past any node count is absent; a payload
    recorded before links were read has none (None, not an empty tuple)."""
    ids = [f"GPU-{UID + n:x}" for n in range(4)]
    topology = {
        "readAt": 5.0,
        "devices": [
            {"index": 0, "rsmi_topo_get_numa_node_number": 1},
            {"index": 1, "rsmi_topo_get_numa_node_number": err("RSMI_STATUS_NOT_SUPPORTED", 2)},
            {"index": 2, "rsmi_topo_get_numa_node_number": 0xFFFFFFFF},
            {"index": 3, "rsmi_topo_get_numa_node_number": 0},
        ],
        "pairs": [
            {"a": 0, "b": 1, "rsmi_topo_get_link_type": {"hops": 1, "type": 2}},
            {"a": 0, "b": 2, "rsmi_topo_get_link_type": {"hops": 3, "type": 1}},
            {"a": 0, "b": 3, "rsmi_topo_get_link_type": {"hops": 1, "type": 0}},
            {"a": 1, "b": 2, "rsmi_topo_get_link_type": {"hops": 1, "type": 7}},
            {"a": 1, "b": 3, "rsmi_topo_get_link_type": err("RSMI_STATUS_NOT_SUPPORTED", 2)},
        ],
    }
    cards = hygon.parse(payload(*(device(n) for n in range(4)), topology=topology)).cards
    links = {c.id: {(x.peer_id, x.link, x.count) for x in c.links or ()} for c in cards}
    assert links == {
        ids[0]: {(ids[1], "hsl", None), (ids[2], "pcie", None)},
        ids[1]: {(ids[0], "hsl", None)},
        ids[2]: {(ids[0], "pcie", None)},
        ids[3]: set(),
    }
    assert [c.numa_node for c in cards] == [1, None, None, 0]
    (before,) = hygon.parse(payload(device(0))).cards
    assert (before.links, before.numa_node) == (None, None)


# -- the card's health beyond one bit (R-X7) ---------------------------------------------------

LEVELS = {"num_supported": 3, "current": 2, "frequency": [300_000_000, 10**9, 1_500_000_000]}


def health(**fields: Any) -> Any:
    (c,) = hygon.parse(payload(device(**fields))).cards
    return c.health


def test_a_hygon_payload_recorded_before_the_health_reads_has_no_health() -> None:
    """(R-X7) The ECC count alone (read for `unhealthy` since before) makes no health figures:
    a recording without the new entry points parses to the card it parsed to before."""
    assert health() is None


@pytest.mark.parametrize(
    ("fields", "figure", "value", "reason"),
    [
        # Energy: the counter times its resolution in µJ, in J.
        (
            {"rsmi_dev_energy_count_get": {"counter": 2_000_000, "resolution": 1.5}},
            "energy_joules",
            3.0,
            None,
        ),
        (
            {"rsmi_dev_energy_count_get": {"counter": 0, "resolution": 15.3}},
            "energy_joules",
            0.0,
            None,
        ),
        (
            {"rsmi_dev_energy_count_get": {"counter": 5, "resolution": 0.0}},
            "energy_joules",
            None,
            Reason.INVALID_DATA,
        ),
        (
            {"rsmi_dev_energy_count_get": {"counter": 2**64 - 1, "resolution": 15.3}},
            "energy_joules",
            None,
            Reason.INVALID_DATA,
        ),
        (
            {"rsmi_dev_energy_count_get": err("RSMI_STATUS_NOT_SUPPORTED", 2)},
            "energy_joules",
            None,
            Reason.UNSUPPORTED,
        ),
        # Clocks: the current level of the list, Hz; 100 GHz is the last plausible one.
        ({"rsmi_dev_gpu_clk_freq_get": {"sys": LEVELS}}, "clock_graphics_hz", 1_500_000_000, None),
        (
            {"rsmi_dev_gpu_clk_freq_get": {"mem": {**LEVELS, "frequency": [0, 0, 10**11]}}},
            "clock_memory_hz",
            10**11,
            None,
        ),
        (
            {"rsmi_dev_gpu_clk_freq_get": {"mem": {**LEVELS, "frequency": [0, 0, 10**11 + 1]}}},
            "clock_memory_hz",
            None,
            Reason.INVALID_DATA,
        ),
        (  # no current level (all ones)
            {"rsmi_dev_gpu_clk_freq_get": {"sys": {**LEVELS, "current": 0xFFFFFFFF}}},
            "clock_graphics_hz",
            None,
            Reason.INVALID_DATA,
        ),
        (  # an index past the levels the library says it filled
            {"rsmi_dev_gpu_clk_freq_get": {"sys": {**LEVELS, "num_supported": 2}}},
            "clock_graphics_hz",
            None,
            Reason.INVALID_DATA,
        ),
        (
            {"rsmi_dev_gpu_clk_freq_get": {"sys": err("RSMI_STATUS_PERMISSION", 4)}},
            "clock_graphics_hz",
            None,
            Reason.PERMISSION,
        ),
        ({"rsmi_dev_gpu_clk_freq_get": {"sys": LEVELS}}, "clock_sm_hz", None, Reason.UNSUPPORTED),
        # PCIe replays: a uint64 counter; all ones is "not available".
        ({"rsmi_dev_pci_replay_counter_get": 2**64 - 2}, "pcie_naks", 2**64 - 2, None),
        ({"rsmi_dev_pci_replay_counter_get": 2**64 - 1}, "pcie_naks", None, Reason.INVALID_DATA),
        ({"rsmi_dev_pci_replay_counter_get": -3}, "pcie_naks", None, Reason.INVALID_DATA),
        (
            {"rsmi_dev_pci_replay_counter_get": err("NOT_EXPORTED", 2)},
            "pcie_naks",
            None,
            Reason.UNSUPPORTED,
        ),
        # ECC (UMC): counts since the driver loaded; no aggregate call.
        ({"rsmi_dev_pci_replay_counter_get": 0}, "ecc_corrected_total", 3, None),
        ({"rsmi_dev_pci_replay_counter_get": 0}, "ecc_uncorrected_total", 0, None),
        (
            {"rsmi_dev_pci_replay_counter_get": 0},
            "ecc_uncorrected_aggregate",
            None,
            Reason.UNSUPPORTED,
        ),
        (
            {
                "rsmi_dev_pci_replay_counter_get": 0,
                "rsmi_dev_ecc_count_get": err("RSMI_STATUS_NOT_SUPPORTED", 2),
            },
            "ecc_uncorrected_total",
            None,
            Reason.UNSUPPORTED,
        ),
        (
            {
                "rsmi_dev_pci_replay_counter_get": 0,
                "rsmi_dev_ecc_count_get": {"correctable_err": 2**64 - 1, "uncorrectable_err": 0},
            },
            "ecc_corrected_total",
            None,
            Reason.INVALID_DATA,
        ),
        # Retired pages: reserved ones count, pending and unreservable are flags.
        ({"rsmi_dev_memory_reserved_pages_get": [0, 0, 1]}, "remapped_rows_uncorrectable", 2, None),
        ({"rsmi_dev_memory_reserved_pages_get": [0, 0, 1]}, "remapped_rows_pending", 1, None),
        ({"rsmi_dev_memory_reserved_pages_get": [0, 1, 1]}, "remapped_rows_pending", 1, None),
        ({"rsmi_dev_memory_reserved_pages_get": []}, "remapped_rows_failed", 0, None),
        ({"rsmi_dev_memory_reserved_pages_get": [2]}, "remapped_rows_failed", 1, None),
        (
            {"rsmi_dev_memory_reserved_pages_get": [0, 7]},
            "remapped_rows_uncorrectable",
            None,
            Reason.INVALID_DATA,
        ),
        (
            {"rsmi_dev_memory_reserved_pages_get": err("RSMI_STATUS_INSUFFICIENT_SIZE", 11)},
            "remapped_rows_pending",
            None,
            Reason.TRUNCATED,
        ),
        (
            {"rsmi_dev_memory_reserved_pages_get": []},
            "remapped_rows_correctable",
            None,
            Reason.UNSUPPORTED,
        ),
        # No call of ROCm SMI answers the throttle reasons.
        ({"rsmi_dev_pci_replay_counter_get": 0}, "throttle_reasons", None, Reason.UNSUPPORTED),
        # The memory's busy time, a percent of the sample period (issue 41), never clamped; a
        # payload recorded before it was read keeps it `unsupported`, and no activity figure
        # is ever the fork's (its CU figures sample inside the call, or at one instant).
        ({"rsmi_dev_memory_busy_percent_get": 35}, "memory_busy_percent", 35.0, None),
        ({"rsmi_dev_memory_busy_percent_get": 0}, "memory_busy_percent", 0.0, None),
        (
            {"rsmi_dev_memory_busy_percent_get": 101},
            "memory_busy_percent",
            None,
            Reason.INVALID_DATA,
        ),
        (
            {"rsmi_dev_memory_busy_percent_get": err("RSMI_STATUS_NOT_SUPPORTED", 2)},
            "memory_busy_percent",
            None,
            Reason.UNSUPPORTED,
        ),
        (
            {"rsmi_dev_memory_busy_percent_get": err("RSMI_STATUS_FILE_ERROR", 3)},
            "memory_busy_percent",
            None,
            Reason.TRANSIENT_DRIVER_ERROR,
        ),
        ({"rsmi_dev_pci_replay_counter_get": 0}, "memory_busy_percent", None, Reason.UNSUPPORTED),
        ({"rsmi_dev_memory_busy_percent_get": 35}, "sm_activity_percent", None, Reason.UNSUPPORTED),
    ],
)
def test_each_hygon_health_figure_is_range_checked_and_says_why_it_is_absent(
    fields: dict[str, Any], figure: str, value: Any, reason: Reason | None
) -> None:
    """(R-X7) Each figure from its own ROCm SMI answer, with the header's units (energy
    counts x µJ, clocks in Hz, a uint64 replay counter) and sentinels: in range it is
    published; a failure is its status's reason; all ones, a negative, a level the list does
    not hold or above 100 GHz is `invalid_data`; a figure no call answers is `unsupported`."""
    got = health(**fields)
    assert got is not None
    assert (got.get(figure), got.reason(figure)) == (value, reason)
