"""MetaX payloads under fixtures/vendors/metax/: parse() table tests that need no compiler, and a
check that each file is still exactly what read() records from the fake library
(UPDATE_GOLDEN=1 re-records them)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from devicemanager.agent.replay import load_recording
from devicemanager.model import ReadRequest, Reason
from tests.conftest import FIXTURES
from tests.fakelib import metax as fake
from tests.fakelib.metax import scenarios
from tests.fakelib.metax.scenarios import sgpu_uuid
from tests.world import gpu
from vendors import metax
from vendors.metax import MetaxBackend

DIR = FIXTURES / "vendors" / "metax"
GIB = 1 << 30
MIB = 1 << 20
Scenario = Callable[[], tuple[list[dict[str, Any]], list[dict[str, Any]]]]


@dataclass(frozen=True)
class Case:
    scenario: Scenario
    request: ReadRequest
    facts: dict[str, Any]
    variant: str = ""
    rounds: int = 1  # the payload recorded is the last round's
    note: str = field(default="")


def carved(*ids: str, partitions: frozenset[tuple[str, str]] = frozenset()) -> ReadRequest:
    return ReadRequest(carved_device_ids=frozenset(ids), partition_ids=partitions)


def sgpu_off_request() -> ReadRequest:
    return carved(gpu(40), gpu(41), partitions=frozenset({(gpu(40), "GPU-requested-sgpu")}))


TABLE: dict[str, Case] = {
    "c500-whole-cards": Case(
        scenarios.whole_cards,
        carved(gpu(20), gpu(21), gpu(22)),
        {
            "cards": [
                (gpu(20), 0, 59_963, 87.0, 52.43, 308.8),
                (gpu(21), 1, 826, 0.0, 36.0, 57.0),
                (gpu(22), 2, 9_000, 12.0, 36.0, 90.0),
            ],
            "rows": {
                gpu(20): [(7001, 40 * GIB, None)],
                gpu(21): [],
                gpu(22): [(7001, 8 * GIB, None)],
            },
        },
    ),
    "c500-two-sgpus": Case(
        scenarios.two_sgpus,
        carved(gpu(31)),
        {
            "rows": {
                gpu(31): [
                    (7101, 15_020 * MIB, sgpu_uuid(31, 0)),
                    (7201, 1_203 * MIB, sgpu_uuid(31, 2)),
                ]
            },
            "partitions": {
                sgpu_uuid(31, 0): (16384, 15_020, 28.75),
                sgpu_uuid(31, 2): (8192, 1_203, 0.0),
            },
            "via": "mxSmlGetSingleGpuProcess_v3",
        },
    ),
    "c500-two-sgpus-without-v3": Case(
        scenarios.two_sgpus,
        carved(gpu(31)),
        {
            "rows": {gpu(31): [(7101, 15_020 * MIB, None), (7201, 1_203 * MIB, None)]},
            "via": "mxSmlGetSingleGpuProcess_v2",
        },
        variant="no_v3",
    ),
    "c500-sgpu-off": Case(
        scenarios.sgpu_off,
        sgpu_off_request(),
        {
            "rows": {gpu(40): [(7301, 11_000 * MIB, None)], gpu(41): [(7302, 2_000 * MIB, None)]},
            "partitions": {"GPU-requested-sgpu": (None, None, None)},
            "partition_reason": Reason.UNSUPPORTED,
        },
    ),
    "c500-vf-in-list": Case(
        scenarios.vf_in_list,
        carved(gpu(53)),
        {"indexes": [0, 3], "rows": {gpu(53): [(7501, 6 * GIB, None)]}},
    ),
    "c500-card-lost": Case(
        scenarios.card_lost,
        carved(gpu(62)),
        {
            "unhealthy": [None, None, "device_lost", None],
            "reasons": {gpu(62): Reason.TRANSIENT_DRIVER_ERROR},
        },
        rounds=2,
    ),
    "c500-process-list-truncated": Case(
        lambda: scenarios.list_grows("always"),
        carved(gpu(70)),
        {"rows": {gpu(70): []}, "reasons": {gpu(70): Reason.TRUNCATED}},
    ),
    "c500-health": Case(
        scenarios.health,
        ReadRequest(),
        {
            "health": {
                gpu(90): {
                    "ecc_corrected_total": 7,  # SRAM 2 + DRAM 5
                    "ecc_uncorrected_total": 1,
                    "ecc_corrected_aggregate": Reason.UNSUPPORTED,
                    "remapped_rows_uncorrectable": 3,
                    "remapped_rows_pending": Reason.UNSUPPORTED,
                    "throttle_active": [
                        "sw_power_cap",
                        "sw_thermal_slowdown",  # HBM over-temperature, 0x20
                        "hw_power_brake_slowdown",
                    ],
                    "clock_sm_hz": 1_500_000_000,
                    "clock_memory_hz": 1_800_000_000,
                    "clock_graphics_hz": Reason.UNSUPPORTED,
                    "energy_joules": Reason.UNSUPPORTED,
                    "pcie_replays": Reason.UNSUPPORTED,
                },
                gpu(91): {
                    "ecc_corrected_total": Reason.UNSUPPORTED,
                    "remapped_rows_uncorrectable": Reason.UNSUPPORTED,
                    "throttle_reasons": Reason.UNSUPPORTED,
                    "clock_sm_hz": 1_600_000_000,  # the fake's default
                    "clock_memory_hz": Reason.UNSUPPORTED,
                },
                gpu(92): {
                    "ecc_corrected_total": 0,
                    "ecc_uncorrected_total": Reason.INVALID_DATA,
                    "throttle_reasons": Reason.INVALID_DATA,
                    "clock_sm_hz": Reason.INVALID_DATA,
                },
            }
        },
    ),
}


def recorded(name: str) -> dict[str, Any]:
    meta, payload = load_recording(DIR / f"{name}.json")
    assert meta["kind"] == "synthetic" and "fake_mxsml" in meta["source"]
    return payload


@pytest.mark.parametrize("name", sorted(TABLE))
def test_parse_over_the_fixture(name: str) -> None:
    facts = TABLE[name].facts
    reading = metax.parse(recorded(name))
    assert reading.manufacturer == "metax" and reading.driver_version == fake.DRIVER
    if "cards" in facts:
        got = [
            (
                c.id,
                c.index,
                c.memory_used_mib,
                c.cores_utilization_percent,
                c.temperature_celsius,
                c.power_usage_watts,
            )
            for c in reading.cards
        ]
        assert got == facts["cards"]
    if "indexes" in facts:
        assert [c.index for c in reading.cards] == facts["indexes"]
    if "unhealthy" in facts:
        assert [c.unhealthy_reason for c in reading.cards] == facts["unhealthy"]
    answers = {p.device_id: p for p in reading.processes}
    for device, rows in facts.get("rows", {}).items():
        assert [(r.pid, r.memory_bytes, r.partition_id) for r in answers[device].rows] == rows
        assert answers[device].cores_reason is Reason.UNSUPPORTED
    for device, reason in facts.get("reasons", {}).items():
        assert answers[device].memory_reason is reason
    if "partitions" in facts:
        got_parts = {
            p.id: (p.memory_total_mib, p.memory_used_mib, p.cores_percent)
            for p in reading.partitions
        }
        assert got_parts == facts["partitions"]
    if "partition_reason" in facts:
        assert {p.memory_reason for p in reading.partitions} == {facts["partition_reason"]}
    if "via" in facts:
        assert reading.via == facts["via"]
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
                continue
            pair = (None, value) if isinstance(value, Reason) else (value, None)
            assert (health.get(figure), health.reason(figure)) == pair, (card.id, figure)


@pytest.mark.parametrize("name", sorted(TABLE))
def test_the_fixture_is_what_read_records_from_the_fake(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if why := fake.missing():
        pytest.skip(f"the fake libmxsml cannot be built here: {why}")
    case = TABLE[name]
    devices, processes = case.scenario()
    monkeypatch.setenv(fake.SCENARIO_ENV, str(fake.write(tmp_path / "s.txt", devices, processes)))
    backend = MetaxBackend(
        {"mxsml": str(fake.built(case.variant))},
        node_name="c500-node-1",
        clock=lambda: 1000.0,  # the topology's `readAt`, the same on every recording
        sysfs="/nonexistent",  # no NUMA node: the read's failure is recorded
    )
    backend.open()
    try:
        payload = [backend.read(case.request) for _ in range(case.rounds)][-1]
    finally:
        backend.close()
    path = DIR / f"{name}.json"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        DIR.mkdir(parents=True, exist_ok=True)
        scenario = getattr(case.scenario, "__name__", name)
        meta = {
            "kind": "synthetic",
            "manufacturer": "metax",
            "driver": fake.DRIVER,
            "sdk": None,
            "source": "devicemanager read() over tests/fakelib/metax/fake_mxsml.c"
            + (f" (variant {case.variant})" if case.variant else "")
            + f", scenario {scenario if scenario != '<lambda>' else name}"
            + (f", round {case.rounds}" if case.rounds > 1 else ""),
        }
        path.write_text(
            json.dumps({"meta": meta, "payload": payload}, indent=1, sort_keys=True) + "\n"
        )
    assert payload == recorded(name), f"{path} is stale; UPDATE_GOLDEN=1 re-records it"
