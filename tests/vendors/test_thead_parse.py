"""T-Head's pure parse(): table tests over fixtures/vendors/thead/ (what read() records from the
fake libhgml.so; a test re-records each and fails when one is stale, UPDATE_GOLDEN=1 rewrites
them), HGML's quirks spelled as the library writes them, and no damaged payload making parse()
raise."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devicemanager.agent.replay import load_recording
from devicemanager.model import ReadRequest, Reason
from tests.conftest import FIXTURES
from tests.fakelib import thead as fake
from tests.fakelib.thead import scenarios
from tests.vendors.conftest import ManualClock
from tests.vendors.shapes import parsed_or_refused
from tests.world import GIB, gpu
from vendors import thead
from vendors._nvml_family import GPM_MIN_INTERVAL

DIR = FIXTURES / "vendors" / "thead"
MIXED = ReadRequest(
    carved_device_ids=frozenset({gpu(41), gpu(42), gpu(43)}),
    partition_ids=frozenset({(gpu(42), scenarios.mig_uuid(0)), (gpu(42), scenarios.mig_uuid(1))}),
)
MIG_ONLY = ReadRequest(partition_ids=MIXED.partition_ids)
ONE = ReadRequest(carved_device_ids=frozenset({gpu(41)}))


def grows_always() -> list[dict[str, Any]]:
    doc = scenarios.whole(41, processes=[(8101, GIB), (8201, GIB)], samples=[(8101, 5, 40, 5)])
    doc.update(grow=1, grow_always=True)
    return [doc]


def without_gpm() -> list[dict[str, Any]]:
    return [scenarios.mig_card(gpm=False)]


# name -> (scenario, request, rounds read (the last is recorded), the facts parse() must find)
TABLE: dict[str, tuple[Callable[[], list[dict[str, Any]]], ReadRequest, int, dict[str, Any]]] = {
    "ppu-mixed-gpm": (
        scenarios.ppu_mixed,
        MIXED,
        2,
        {
            "cards": [
                (97920, 88_100, 91.0),
                (97920, 46_200, 55.0),
                (97920, 20_600, None),  # MIG on: no utilization for the card
                (97920, 1_030, 0.0),
            ],
            "rows": {
                gpu(41): [(8101, 40 * GIB, 55.0), (8201, 6 * GIB, 0.0)],
                gpu(42): [(8301, 20 * GIB, None)],
                gpu(43): [(8401, GIB, 0.0)],
            },
            "partitions": {
                scenarios.mig_uuid(0): (24_192, 20_512, 64.5, None),
                scenarios.mig_uuid(1): (12_032, 0, 0.0, None),
            },
        },
    ),
    "ppu-mig-first-round": (
        scenarios.ppu_mixed,
        MIG_ONLY,
        1,
        {
            "partitions": {
                scenarios.mig_uuid(0): (24_192, 20_512, None, Reason.NO_BASELINE),
                scenarios.mig_uuid(1): (12_032, 0, None, Reason.NO_BASELINE),
            },
        },
    ),
    "ppu-mig-without-gpm": (
        without_gpm,
        ReadRequest(partition_ids=frozenset({(gpu(42), scenarios.mig_uuid(0))})),
        2,
        {"partitions": {scenarios.mig_uuid(0): (24_192, 20_512, None, Reason.UNSUPPORTED)}},
    ),
    "ppu-lost-card": (
        scenarios.lost_one_of_four,
        ReadRequest(),
        2,
        {"unhealthy": {gpu(42): "gpu_is_lost"}},
    ),
    "ppu-memory-sentinel": (
        scenarios.memory_sentinel,
        ONE,
        1,
        {"rows": {gpu(41): [(8101, 4 * GIB, 10.0), (8201, None, 0.0)]}},
    ),
    "ppu-process-list-truncated": (
        grows_always,
        ONE,
        1,
        {"rows": {gpu(41): [(8101, None, 40.0)]}, "memory_reason": Reason.TRUNCATED},
    ),
    "ppu-health": (
        scenarios.ppu_health,
        ReadRequest(),
        1,
        {
            "temperatures": [52.0, 44.0, 35.0],  # card 1's from hgmlDeviceGetTemperatureV
            "unhealthy": {gpu(40): "row_remap_pending"},
            "health": {
                gpu(40): {
                    "ecc_corrected_volatile": 5,
                    "ecc_uncorrected_volatile": 1,
                    "ecc_corrected_aggregate": 210,
                    "ecc_uncorrected_aggregate": 3,
                    "remapped_rows_correctable": 2,
                    "remapped_rows_uncorrectable": 1,
                    "remapped_rows_pending": 1,
                    "remapped_rows_failed": 0,
                    "energy_joules": 98_765.432,
                    "throttle_active": ["sw_power_cap", "hw_slowdown"],
                    "clock_sm_hz": 1_450_000_000,
                    "clock_memory_hz": 1_600_000_000,
                    "clock_graphics_hz": 1_450_000_000,
                    "pcie_replays": 3,
                },
                gpu(41): {
                    "ecc_corrected_volatile": Reason.UNSUPPORTED,
                    "ecc_uncorrected_aggregate": Reason.UNSUPPORTED,
                    "remapped_rows_pending": Reason.UNSUPPORTED,
                    "energy_joules": Reason.UNSUPPORTED,
                    "throttle_reasons": Reason.UNSUPPORTED,
                    "clock_sm_hz": 1_500_000_000,
                    "clock_memory_hz": Reason.UNSUPPORTED,
                    "pcie_replays": Reason.UNSUPPORTED,
                },
                gpu(42): {
                    "ecc_corrected_volatile": Reason.INVALID_DATA,
                    "ecc_uncorrected_volatile": 0,
                    "energy_joules": Reason.INVALID_DATA,
                    "throttle_active": ["gpu_idle"],  # from the older throttle call
                    "clock_sm_hz": Reason.INVALID_DATA,
                    "clock_graphics_hz": 1_500_000_000,
                    "pcie_replays": Reason.INVALID_DATA,
                },
            },
        },
    ),
}


def recorded(name: str) -> dict[str, Any]:
    meta, payload = load_recording(DIR / f"{name}.json")
    assert meta["kind"] == "synthetic" and "fake_hgml" in meta["source"]
    assert meta["manufacturer"] == "thead"
    return payload


@pytest.mark.parametrize("name", sorted(TABLE))
def test_parse_over_the_fixture(name: str) -> None:
    facts = TABLE[name][3]
    reading = thead.parse(recorded(name))
    assert reading.manufacturer == "thead" and reading.driver_version == fake.DRIVER
    if "cards" in facts:
        got = [
            (c.memory_total_mib, c.memory_used_mib, c.cores_utilization_percent)
            for c in reading.cards
        ]
        assert got == facts["cards"]
    if "rows" in facts:
        got_rows = {
            p.device_id: [(r.pid, r.memory_bytes, r.cores_percent) for r in p.rows]
            for p in reading.processes
        }
        assert got_rows == facts["rows"]
    if "memory_reason" in facts:
        assert [p.memory_reason for p in reading.processes] == [facts["memory_reason"]]
    if "partitions" in facts:
        got_parts = {
            p.id: (p.memory_total_mib, p.memory_used_mib, p.cores_percent, p.cores_reason)
            for p in reading.partitions
        }
        assert got_parts == facts["partitions"]
    if "unhealthy" in facts:
        assert {c.id: c.unhealthy_reason for c in reading.cards if c.unhealthy} == facts[
            "unhealthy"
        ]
    if "temperatures" in facts:
        assert [c.temperature_celsius for c in reading.cards] == facts["temperatures"]
    for card in reading.cards:
        want = facts.get("health", {}).get(card.id)
        if want is None:
            continue
        health = card.health
        assert health is not None, card.id
        for figure, value in want.items():
            if figure == "throttle_active":
                assert health.throttle_reasons is not None, card.id
                assert [r for r, on in health.throttle_reasons if on] == value, card.id
            elif isinstance(value, Reason):
                assert (health.get(figure), health.reason(figure)) == (None, value), (
                    card.id,
                    figure,
                )
            else:
                assert (health.get(figure), health.reason(figure)) == (value, None), (
                    card.id,
                    figure,
                )


@pytest.mark.parametrize("name", sorted(TABLE))
def test_the_fixture_is_what_read_records_from_the_fake(
    name: str, libhgml: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build, request, rounds, _ = TABLE[name]
    monkeypatch.setenv(fake.SCENARIO_ENV, str(fake.write(tmp_path / "s.txt", build())))
    clock = ManualClock()
    # An empty sysfs root: the NUMA node HGML has no call for records the same on any machine.
    backend = thead.TheadBackend({"hgml": str(libhgml)}, clock=clock, sysfs=tmp_path / "sys")
    backend.open()
    try:
        for _ in range(rounds - 1):
            backend.read(request)
            time.sleep(GPM_MIN_INTERVAL * 1.5)  # the fake, like the driver, needs 100 ms
            clock.advance()
        payload = backend.read(request)
    finally:
        backend.close()
    path = DIR / f"{name}.json"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        DIR.mkdir(parents=True, exist_ok=True)
        meta = {
            "kind": "synthetic",
            "manufacturer": "thead",
            "driver": fake.DRIVER,
            "sdk": None,
            "source": f"devicemanager read() over tests/fakelib/thead/fake_hgml.c, "
            f"scenario {build.__name__}, round {rounds}",
        }
        path.write_text(
            json.dumps({"meta": meta, "payload": payload}, indent=1, sort_keys=True) + "\n"
        )
    assert payload == recorded(name), f"{path} is stale; UPDATE_GOLDEN=1 re-records it"


# -- quirks as HGML writes them -------------------------------------------------------------


def test_not_found_from_process_utilization_is_idle_and_unsupported_is_not() -> None:
    base = {
        "hgmlDeviceGetUUID": gpu(41),
        "hgmlDeviceGetIndex": 1,
        "hgmlDeviceGetComputeRunningProcesses_v3": [
            {"pid": 7, "usedGpuMemory": GIB, "gpuInstanceId": 4294967295}
        ],
    }
    idle = {**base, "hgmlDeviceGetProcessUtilization": {"error": "HGML_ERROR_NOT_FOUND", "code": 6}}
    refused = {
        **base,
        "hgmlDeviceGetProcessUtilization": {"error": "HGML_ERROR_NOT_SUPPORTED", "code": 3},
    }
    (a,) = thead.parse({"devices": [idle]}).processes
    (b,) = thead.parse({"devices": [refused]}).processes
    assert (a.cores_reason, a.rows[0].cores_percent) == (None, 0.0)
    assert (b.cores_reason, b.rows[0].cores_percent) == (Reason.UNSUPPORTED, None)


def test_an_nvml_key_means_nothing_to_the_thead_parse() -> None:
    reading = thead.parse({"devices": [{"nvmlDeviceGetUUID": gpu(1), "nvmlDeviceGetIndex": 0}]})
    assert reading.cards == ()


# -- the card's health beyond one bit (R-X7) ---------------------------------------------------


def err(code: int) -> dict[str, Any]:
    return {"error": f"HGML_ERROR_{code}", "code": code}


def parse_card(**answers: Any) -> Any:
    device = {"hgmlDeviceGetUUID": gpu(41), "hgmlDeviceGetIndex": 1, **answers}
    return thead.parse({"devices": [device]}).cards


def test_a_ppu_payload_recorded_before_the_health_reads_has_no_health() -> None:
    """(R-X7) The fixtures recorded before HGML's health reads (remapped rows alone, read for
    `unhealthy` since before) parse to cards without health figures, as they did."""
    rows = {"corrRows": 0, "uncRows": 0, "isPending": 0, "failureOccurred": 0}
    (c,) = parse_card(hgmlDeviceGetRemappedRows=rows)
    assert c.health is None


@pytest.mark.parametrize(
    ("answers", "figure", "value", "reason"),
    [
        # Clocks in MHz: 100 GHz is the last plausible clock; above it, and UINT32_MAX, refused.
        ({"hgmlDeviceGetClockInfo": {"sm": 100_000}}, "clock_sm_hz", 100_000_000_000, None),
        ({"hgmlDeviceGetClockInfo": {"sm": 100_001}}, "clock_sm_hz", None, Reason.INVALID_DATA),
        (
            {"hgmlDeviceGetClockInfo": {"sm": 0xFFFFFFFF}},
            "clock_sm_hz",
            None,
            Reason.INVALID_DATA,
        ),
        ({"hgmlDeviceGetClockInfo": {"memory": 0}}, "clock_memory_hz", 0, None),
        ({"hgmlDeviceGetClockInfo": err(3)}, "clock_memory_hz", None, Reason.UNSUPPORTED),
        (
            {"hgmlDeviceGetClockInfo": {"graphics": err(4)}},
            "clock_graphics_hz",
            None,
            Reason.PERMISSION,
        ),
        # The replay counter is an unsigned int: all-ones is "not available", one below counts.
        ({"hgmlDeviceGetPcieReplayCounter": 0xFFFFFFFE}, "pcie_replays", 0xFFFFFFFE, None),
        (
            {"hgmlDeviceGetPcieReplayCounter": 0xFFFFFFFF},
            "pcie_replays",
            None,
            Reason.INVALID_DATA,
        ),
        ({"hgmlDeviceGetPcieReplayCounter": -1}, "pcie_replays", None, Reason.INVALID_DATA),
        ({"hgmlDeviceGetPcieReplayCounter": err(13)}, "pcie_replays", None, Reason.UNSUPPORTED),
        # Energy in mJ, an unsigned long long.
        ({"hgmlDeviceGetTotalEnergyConsumption": 1}, "energy_joules", 0.001, None),
        (
            {"hgmlDeviceGetTotalEnergyConsumption": 0xFFFFFFFFFFFFFFFF},
            "energy_joules",
            None,
            Reason.INVALID_DATA,
        ),
        ({"hgmlDeviceGetTotalEnergyConsumption": 2.5}, "energy_joules", None, Reason.INVALID_DATA),
        (
            {"hgmlDeviceGetTotalEnergyConsumption": err(3)},
            "energy_joules",
            None,
            Reason.UNSUPPORTED,
        ),
        # ECC: NOT_SUPPORTED (ECC off) or a lost card before any counter is every counter's.
        (
            {"hgmlDeviceGetTotalEccErrors": err(3)},
            "ecc_uncorrected_volatile",
            None,
            Reason.UNSUPPORTED,
        ),
        (
            {"hgmlDeviceGetTotalEccErrors": err(15)},
            "ecc_corrected_aggregate",
            None,
            Reason.TRANSIENT_DRIVER_ERROR,
        ),
        (
            {"hgmlDeviceGetTotalEccErrors": {"uncorrected_aggregate": 0xFFFFFFFFFFFFFFFE}},
            "ecc_uncorrected_aggregate",
            0xFFFFFFFFFFFFFFFE,
            None,
        ),
        (
            {"hgmlDeviceGetTotalEccErrors": {"uncorrected_aggregate": True}},
            "ecc_uncorrected_aggregate",
            None,
            Reason.INVALID_DATA,
        ),
        # The clocks-event mask: all-ones is no mask.
        (
            {"hgmlDeviceGetCurrentClocksEventReasons": 0xFFFFFFFFFFFFFFFF},
            "throttle_reasons",
            None,
            Reason.INVALID_DATA,
        ),
    ],
)
def test_each_ppu_health_figure_is_range_checked_and_says_why_it_is_absent(
    answers: dict[str, Any], figure: str, value: Any, reason: Reason | None
) -> None:
    """(R-X7) Each HGML figure from its own answer, with NVML's units and sentinels: in range
    it is published in base units; a failure is its code's reason; the type's all-ones value,
    a negative, a boolean or a fraction of a count is `invalid_data`, never a figure."""
    (c,) = parse_card(**answers)
    health = c.health
    assert health is not None
    assert (health.get(figure), health.reason(figure)) == (value, reason)


def test_the_ppus_older_throttle_call_answers_only_where_the_newer_failed() -> None:
    """(R-X7) The newer clocks-event mask wins when it answered; where it failed, the older
    throttle call's mask is the figure (0x4 is sw_power_cap)."""
    both = {"hgmlDeviceGetCurrentClocksThrottleReasons": 0x4}
    (n,) = parse_card(hgmlDeviceGetCurrentClocksEventReasons=0x100, **both)
    (o,) = parse_card(hgmlDeviceGetCurrentClocksEventReasons=err(13), **both)
    assert n.health is not None and n.health.throttle_reasons is not None
    assert [r for r, on in n.health.throttle_reasons if on] == ["display_clock_setting"]
    assert o.health is not None and o.health.throttle_reasons is not None
    assert [r for r, on in o.health.throttle_reasons if on] == ["sw_power_cap"]


@pytest.mark.parametrize(
    ("answers", "celsius"),
    [
        ({"hgmlDeviceGetTemperature": 61}, 61.0),
        # The plain call answered: the versioned one is not looked at.
        ({"hgmlDeviceGetTemperature": 61, "hgmlDeviceGetTemperatureV": 12}, 61.0),
        # The plain call gone: the versioned one's signed reading, a negative one included.
        ({"hgmlDeviceGetTemperature": err(13), "hgmlDeviceGetTemperatureV": 47}, 47.0),
        ({"hgmlDeviceGetTemperature": err(13), "hgmlDeviceGetTemperatureV": -5}, -5.0),
        ({"hgmlDeviceGetTemperature": err(13), "hgmlDeviceGetTemperatureV": err(3)}, None),
        ({"hgmlDeviceGetTemperature": err(13)}, None),
    ],
)
def test_the_versioned_temperature_answers_where_the_plain_call_is_gone(
    answers: dict[str, Any], celsius: float | None
) -> None:
    """(R-X7) hgmlDeviceGetTemperatureV is the temperature only where the plain call failed;
    its failure leaves the figure absent, never 0."""
    (c,) = parse_card(**answers)
    assert c.temperature_celsius == celsius


# -- damaged payloads -----------------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
FIELDS = sorted(
    {
        key
        for name in TABLE
        if (DIR / f"{name}.json").exists()
        for device in recorded(name)["devices"]
        for key in device
    }
    | {"migDevices", "hgmlGpmQueryDeviceSupport"}
)
MIG_FIELDS = [
    "hgmlDeviceGetUUID",
    "hgmlDeviceGetGpuInstanceId",
    "hgmlDeviceGetMemoryInfo_v2",
    "hgmlGpmSampleAlloc",
    "hgmlGpmMigSampleGet",
    "hgmlGpmMetricsGet",
]


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=6),
    st.dictionaries(st.sampled_from(MIG_FIELDS), json_values, max_size=6),
    json_values,
)
def test_no_damaged_payload_makes_parse_raise(
    fields: dict[str, Any], mig: dict[str, Any], request: Any
) -> None:
    payload = recorded("ppu-mixed-gpm")
    device = {**payload["devices"][2], **fields}
    device["migDevices"] = [{**payload["devices"][2]["migDevices"][0], **mig}, mig, fields]
    # None stands for the recorded request, so the partitions are looked up too.
    wanted = payload["request"] if request is None else request
    reading = thead.parse({"request": wanted, "devices": [device, fields, *payload["devices"]]})
    for card in reading.cards:
        assert isinstance(card.id, str) and isinstance(card.index, int)
    for p in reading.partitions:
        assert p.cores_percent is None or 0.0 <= p.cores_percent <= 100.0


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_no_top_level_shape_makes_parse_raise(devices: Any) -> None:
    parsed_or_refused(
        thead.parse,
        {"devices": devices, "hgmlSystemGetDriverVersion": devices, "request": devices},
    )


def test_hgml_reports_no_board_limit_or_reliability_its_header_does_not_define() -> None:
    """(issue 43) hgml.h's clocks-event bits stop at 0x100: NVML's BoardLimit (0x200) and
    Reliability (0x400) are not reported for a PPU at all, rather than "not active"."""
    (c,) = parse_card(hgmlDeviceGetCurrentClocksEventReasons=0x600)
    assert c.health is not None and c.health.throttle_reasons is not None
    names = [r for r, _ in c.health.throttle_reasons]
    assert "board_limit" not in names and "reliability" not in names and len(names) == 9
    assert not any(on for _, on in c.health.throttle_reasons)
