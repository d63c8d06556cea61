"""Ascend payloads under fixtures/vendors/ascend/: parse() table tests that need no compiler,
and a check that each file is still exactly what read() records from the fake library
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
from tests.fakelib import ascend as fake_dcmi
from tests.fakelib.ascend import scenarios
from vendors import ascend

DIR = FIXTURES / "vendors" / "ascend"
MIB = 1048576


def npu(n: int) -> str:
    return ascend.gpustack_id(fake_dcmi.die(n))


def carved(*n: int) -> ReadRequest:
    return ReadRequest(carved_device_ids=frozenset(npu(i) for i in n))


def vnpus(*pairs: tuple[int, str]) -> ReadRequest:
    return ReadRequest(
        carved_device_ids=frozenset(npu(n) for n, _ in pairs),
        partition_ids=frozenset((npu(n), p) for n, p in pairs),
    )


# name -> (scenario, what read() is asked for, rounds read, the facts parse() must find)
TABLE: dict[str, tuple[Callable[[], list[dict[str, Any]]], ReadRequest, int, dict[str, Any]]] = {
    "910b2-eight-npus": (
        scenarios.eight_910b2,
        ReadRequest(),
        1,
        {"cards": 8, "memory": (65536, 3432), "unhealthy": []},
    ),
    "310p3-duo-two-npus-one-card-no-hbm": (
        scenarios.two_devices_on_one_card,
        ReadRequest(),
        1,
        {"cards": 2, "memory": (44280, 41731), "unhealthy": []},
    ),
    "910b2-worker-process-memory": (
        lambda: scenarios.busy_worker(processes=2),
        carved(0),
        1,
        {
            "cards": 1,
            "rows": [(899293, 28640 * MIB), (899294, 28640 * MIB)],
            "reasons": (None, Reason.UNSUPPORTED),
        },
    ),
    "910b2-process-list-overrun": (
        scenarios.process_list_overruns,
        carved(0),
        1,
        {"cards": 1, "rows": [], "reasons": (Reason.TRUNCATED, Reason.UNSUPPORTED)},
    ),
    "910b2-process-memory-in-mb": (
        scenarios.megabytes_for_bytes,
        carved(0),
        1,
        {"cards": 1, "rows": [], "reasons": (Reason.INVALID_DATA, Reason.UNSUPPORTED)},
    ),
    "910b2-vnpus-with-activity": (
        scenarios.vnpus,
        vnpus((0, "100"), (0, "Ascend910-4c-101-0"), (1, "vdavinci102")),
        1,
        {
            "cards": 2,
            "partitions": {
                "vdavinci100": (16384, 12000, 62.0, None),
                "vdavinci101": (16384, 0, 0.0, None),
                "vdavinci102": (32768, 9500, 18.0, None),
            },
        },
    ),
    "910b2-vnpus-without-activity": (
        lambda: scenarios.vnpus(activity=False),
        vnpus((0, "100")),
        1,
        # The template's 16384 MB (2^20 bytes) from the resource query; used has no source.
        {"cards": 2, "partitions": {"vdavinci100": (16384, None, None, None)}},
    ),
    "910b2-one-of-eight-lost": (
        scenarios.lost_one_of_eight,
        ReadRequest(),
        2,
        {"cards": 8, "memory": (65536, 3432), "unhealthy": [(5, "device_lost")]},
    ),
    "910b2-health": (
        scenarios.health_910b2,
        ReadRequest(),
        1,
        {
            "cards": 3,
            "health": {
                0: {
                    "ecc_corrected_volatile": 3,
                    "ecc_uncorrected_volatile": 1,
                    "ecc_corrected_aggregate": 40,
                    "ecc_uncorrected_aggregate": 2,
                    "remapped_rows_correctable": 2,
                    "remapped_rows_uncorrectable": 1,
                    "remapped_rows_pending": 1,
                    "remapped_rows_failed": Reason.UNSUPPORTED,
                    "energy_joules": Reason.UNSUPPORTED,
                    "throttle_reasons": Reason.UNSUPPORTED,
                    "clock_sm_hz": 1_650_000_000,
                    "clock_memory_hz": 1_600_000_000,
                    "clock_graphics_hz": Reason.UNSUPPORTED,
                    "pcie_replays": Reason.UNSUPPORTED,
                },
                1: {
                    "ecc_corrected_volatile": Reason.UNSUPPORTED,
                    "remapped_rows_pending": Reason.UNSUPPORTED,
                    "clock_sm_hz": Reason.UNSUPPORTED,
                    "clock_memory_hz": Reason.UNSUPPORTED,
                },
                2: {
                    "ecc_corrected_volatile": 0,
                    "ecc_corrected_aggregate": Reason.INVALID_DATA,
                    "remapped_rows_pending": 0,
                    "clock_sm_hz": Reason.INVALID_DATA,
                    "clock_memory_hz": Reason.INVALID_DATA,
                },
            },
        },
    ),
}


def recorded(name: str) -> dict[str, Any]:
    meta, payload = load_recording(DIR / f"{name}.json")
    assert meta["kind"] == "synthetic" and "fake_dcmi" in meta["source"]
    return payload


@pytest.mark.parametrize("name", sorted(TABLE))
def test_parse_over_the_fixture(name: str) -> None:
    facts = TABLE[name][3]
    reading = ascend.parse(recorded(name))
    assert len(reading.cards) == facts["cards"]
    if "memory" in facts:
        first = reading.cards[0]
        assert (first.memory_total_mib, first.memory_used_mib) == facts["memory"]
        assert [(c.index, c.unhealthy_reason) for c in reading.cards if c.unhealthy] == facts[
            "unhealthy"
        ]
    if "rows" in facts:
        (answer,) = reading.processes
        assert [(r.pid, r.memory_bytes) for r in answer.rows] == facts["rows"]
        assert (answer.memory_reason, answer.cores_reason) == facts["reasons"]
    if "partitions" in facts:
        got = {
            p.id: (p.memory_total_mib, p.memory_used_mib, p.cores_percent, p.memory_reason)
            for p in reading.partitions
        }
        assert got == facts["partitions"]
    for card in reading.cards:
        want = facts.get("health", {}).get(card.index)
        if want is None:
            continue
        assert card.health is not None, card.index
        for figure, value in want.items():
            pair = (None, value) if isinstance(value, Reason) else (value, None)
            assert (card.health.get(figure), card.health.reason(figure)) == pair, (
                card.index,
                figure,
            )


@pytest.mark.parametrize("name", sorted(TABLE))
def test_the_fixture_is_what_read_records_from_the_fake(
    name: str, libdcmi: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build, request, rounds, _ = TABLE[name]
    monkeypatch.setenv(
        fake_dcmi.SCENARIO_ENV, str(fake_dcmi.write(tmp_path / "s.txt", build(), "25.5.1"))
    )
    backend = ascend.AscendBackend(
        {"dcmi": str(libdcmi)},
        clock=lambda: 1000.0,  # the topology's `readAt`, the same on every recording
        sysfs=tmp_path / "no-sysfs",  # no NUMA node: the read's failure is recorded
    )
    backend.open()
    try:
        for _ in range(rounds):
            payload = backend.read(request)
    finally:
        backend.close()
    path = DIR / f"{name}.json"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        meta = {
            "kind": "synthetic",
            "manufacturer": "ascend",
            "driver": "25.5.1",
            "sdk": None,
            "source": f"devicemanager read() over tests/fakelib/ascend/fake_dcmi.c, scenario "
            f"{name}" + (f", round {rounds}" if rounds > 1 else ""),
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            json.dumps({"meta": meta, "payload": payload}, indent=1, sort_keys=True) + "\n"
        )
    assert payload == recorded(name), f"{path} is stale; UPDATE_GOLDEN=1 re-records it"
