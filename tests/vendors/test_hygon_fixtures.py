"""Hygon payloads under fixtures/vendors/hygon/: parse() table tests that need no compiler, and
a check that each file is still exactly what read() records from the three fake libraries
(UPDATE_GOLDEN=1 re-records them)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from devicemanager.agent.replay import load_recording
from devicemanager.model import ReadRequest, Reason
from tests.conftest import FIXTURES
from tests.fakelib import hygon as fake
from tests.fakelib.hygon import GIB, MIB, scenarios
from tests.fakelib.hygon.scenarios import dcu, mig_uuid
from vendors import hygon

DIR = FIXTURES / "vendors" / "hygon"
CARD0 = ReadRequest(carved_device_ids=frozenset({dcu(0)}))
NO_REGISTRY: list[tuple[int, int, int, str]] = []

# name -> (scenario, what read() is asked for, the MIG registry, the facts parse() must find)
TABLE: dict[
    str,
    tuple[
        Callable[[], dict[str, Any]],
        ReadRequest,
        list[tuple[int, int, int, str]],
        dict[str, Any],
    ],
] = {
    "k100ai-8dcu-cards": (
        scenarios.k100ai_whole_and_slices,
        ReadRequest(),
        NO_REGISTRY,
        {"cards": 8},
    ),
    "k100ai-null-probe-insufficient-size": (
        scenarios.null_probe_insufficient,
        CARD0,
        NO_REGISTRY,
        {"cards": 1, "rows": [(4101, 6 * GIB, 25.0), (4102, 2 * GIB, 5.0)], "reason": None},
    ),
    "k100ai-cu-occupancy-invalid": (
        scenarios.cu_occupancy_invalid,
        CARD0,
        NO_REGISTRY,
        {"cards": 1, "rows": [(4101, 6 * GIB, None), (4102, 2 * GIB, 12.0)], "reason": None},
    ),
    "k100ai-process-list-truncated": (
        lambda: scenarios.list_grows("always"),
        CARD0,
        NO_REGISTRY,
        {"cards": 1, "rows": [], "reason": Reason.TRUNCATED},
    ),
    "k100ai-v2-rows-in-mib": (
        scenarios.by_device_not_supported,
        CARD0,
        NO_REGISTRY,
        {"cards": 2, "rows": [(4101, 6144 * MIB, 25.5), (4102, None, 5.0)], "reason": None},
    ),
    "k100ai-vdcu": (
        scenarios.vdcu_calls,
        ReadRequest(partition_ids=frozenset({(dcu(1), "vDCU-0"), (dcu(0), "vDCU-3")})),
        NO_REGISTRY,
        {"cards": 2, "partitions": {"vDCU-0": (16384, 10240, 71.0), "vDCU-3": (8192, 2048, None)}},
    ),
    "k100ai-mig-2g15gb": (
        scenarios.k100ai_mig,
        ReadRequest(
            partition_ids=frozenset(
                {(dcu(0), f"MIG-{mig_uuid(0)}"), (dcu(0), f"MIG-{mig_uuid(2)}")}
            )
        ),
        scenarios.mig_registry(),
        {
            "cards": 8,
            "partitions": {
                f"MIG-{dcu(0)}/3/0": (16380, 12288, 93.0),
                f"MIG-{dcu(0)}/5/0": (16380, 0, 0.0),
            },
        },
    ),
    "k100ai-health": (
        scenarios.k100ai_health,
        ReadRequest(),
        NO_REGISTRY,
        {
            "cards": 3,
            "health": {
                dcu(0): {
                    "ecc_corrected_total": 4,
                    "ecc_uncorrected_total": 1,
                    "ecc_corrected_aggregate": Reason.UNSUPPORTED,
                    "ecc_uncorrected_aggregate": Reason.UNSUPPORTED,
                    "remapped_rows_correctable": Reason.UNSUPPORTED,
                    "remapped_rows_uncorrectable": 2,
                    "remapped_rows_pending": 1,
                    "remapped_rows_failed": 0,
                    "energy_joules": 15.3,  # 1,000,000 counts x 15.3 µJ
                    "throttle_reasons": Reason.UNSUPPORTED,
                    "clock_graphics_hz": 1_500_000_000,
                    "clock_memory_hz": 1_600_000_000,
                    "clock_sm_hz": Reason.UNSUPPORTED,
                    "pcie_naks": 9,
                },
                dcu(1): {
                    "ecc_corrected_total": Reason.UNSUPPORTED,
                    "remapped_rows_pending": Reason.UNSUPPORTED,
                    "energy_joules": Reason.UNSUPPORTED,
                    "clock_graphics_hz": 1_500_000_000,  # the fake's default top level
                    "clock_memory_hz": Reason.UNSUPPORTED,
                    "pcie_naks": Reason.UNSUPPORTED,
                },
                dcu(2): {
                    "ecc_corrected_total": Reason.INVALID_DATA,
                    "ecc_uncorrected_total": 0,
                    "remapped_rows_uncorrectable": 0,
                    "remapped_rows_failed": 1,
                    "clock_graphics_hz": Reason.INVALID_DATA,
                    "pcie_naks": Reason.INVALID_DATA,
                },
            },
        },
    ),
}


def recorded(name: str) -> dict[str, Any]:
    meta, payload = load_recording(DIR / f"{name}.json")
    assert meta["kind"] == "synthetic" and "tests/fakelib/hygon" in meta["source"]
    return payload


@pytest.mark.parametrize("name", sorted(TABLE))
def test_parse_over_the_fixture(name: str) -> None:
    facts = TABLE[name][3]
    reading = hygon.parse(recorded(name))
    assert len(reading.cards) == facts["cards"]
    if "rows" in facts:
        (answer,) = reading.processes
        assert [(r.pid, r.memory_bytes, r.cores_percent) for r in answer.rows] == facts["rows"]
        assert (answer.memory_reason, answer.cores_reason) == (facts["reason"], facts["reason"])
    if "partitions" in facts:
        got = {
            p.id: (p.memory_total_mib, p.memory_used_mib, p.cores_percent)
            for p in reading.partitions
        }
        assert got == facts["partitions"]
    for card in reading.cards:
        want = facts.get("health", {}).get(card.id)
        if want is None:
            continue
        assert card.health is not None, card.id
        for figure, value in want.items():
            pair = (None, value) if isinstance(value, Reason) else (value, None)
            got_pair = (card.health.get(figure), card.health.reason(figure))
            if figure == "energy_joules" and got_pair[0] is not None:
                got_pair = (round(got_pair[0], 3), got_pair[1])  # a float32 resolution
            assert got_pair == pair, (card.id, figure)


@pytest.mark.parametrize("name", sorted(TABLE))
def test_the_fixture_is_what_read_records_from_the_fakes(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if why := fake.missing():
        pytest.skip(f"the fake Hygon libraries cannot be built here: {why}")
    build, request, registry, _ = TABLE[name]
    libs = {k: str(v) for k, v in fake.build(tmp_path.parent / "hygon-fixture-libs").items()}
    for key, value in fake.write(tmp_path / "scenario", build()).items():
        monkeypatch.setenv(key, value)
    backend = hygon.HygonBackend(
        libs,
        mig_config=fake.registry(tmp_path / "dmi_mig_config", registry),
        clock=lambda: 1000.0,  # the topology's `readAt`, the same on every recording
    )
    backend.open()
    try:
        payload = backend.read(request)
    finally:
        backend.close()
    path = DIR / f"{name}.json"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        scenario = build.__name__ if build.__name__ != "<lambda>" else name
        meta = {
            "kind": "synthetic",
            "manufacturer": "hygon",
            "driver": payload.get("rsmi_version_str_get"),
            "sdk": None,
            "source": "devicemanager read() over tests/fakelib/hygon (fake_rsmi.c, fake_dmi.c, "
            f"fake_dmi_mig.c), scenario {scenario}",
        }
        path.write_text(
            json.dumps({"meta": meta, "payload": payload}, indent=1, sort_keys=True) + "\n"
        )
    assert payload == recorded(name), f"{path} is stale; UPDATE_GOLDEN=1 re-records it"
