"""NVIDIA payloads under fixtures/vendors/nvidia/: parse() table tests that need no compiler,
and a check that each file is still exactly what read() records from the fake library
(UPDATE_GOLDEN=1 re-records them). A file recorded over two rounds (GPM needs the previous
round's sample) is the second round's payload, with times from a fixed clock."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from devicemanager.agent.replay import load_recording
from devicemanager.model import HealthFigure as H
from devicemanager.model import ReadRequest, Reason
from tests.conftest import FIXTURES
from tests.fakelib import nvidia as fake_nvml
from tests.fakelib.nvidia import scenarios
from tests.fakelib.nvml_family import write_sysfs
from tests.vendors.conftest import ManualClock
from tests.world import gpu
from vendors import nvidia
from vendors._nvml_family import GPM_MIN_INTERVAL

DIR = FIXTURES / "vendors" / "nvidia"
CARVED = ReadRequest(carved_device_ids=frozenset({gpu(2), gpu(3)}))

MIG_SMALL = ReadRequest(
    partition_ids=frozenset({(gpu(1), scenarios.mig_uuid(1)), (gpu(1), scenarios.mig_uuid(2))})
)
# Rounds read() makes before the one recorded (GPM compares with the previous round).
ROUNDS = {"h100-mig-gpm": 2, "a100-mig-without-gpm": 2}

# name -> (scenario, what read() is asked for, the facts parse() must find)
GPM_UNSUPPORTED = ("unsupported",) * 14
TABLE: dict[str, tuple[Callable[[], list[dict[str, Any]]], ReadRequest, dict[str, Any]]] = {
    "h100-mig-1g10gb": (
        scenarios.h100_mig,
        MIG_SMALL,
        {
            "cards": 2,
            "partitions": {
                scenarios.mig_uuid(1): (9856, 1400, None, Reason.NO_BASELINE),
                scenarios.mig_uuid(2): (9856, 0, None, Reason.NO_BASELINE),
            },
        },
    ),
    "h100-mig-gpm": (
        scenarios.h100_mig,
        MIG_SMALL,
        {
            "cards": 2,
            "partitions": {
                scenarios.mig_uuid(1): (9856, 1400, 12.5, None),
                scenarios.mig_uuid(2): (9856, 0, 0.0, None),
            },
        },
    ),
    "a100-mig-without-gpm": (
        scenarios.a100_mig_without_gpm,
        ReadRequest(partition_ids=frozenset({(gpu(5), scenarios.mig_uuid(5))})),
        {
            "cards": 1,
            "partitions": {scenarios.mig_uuid(5): (9856, 3900, None, Reason.UNSUPPORTED)},
        },
    ),
    "a100-two-slices-one-busy": (
        scenarios.a100_two_slices,
        CARVED,
        {
            "cards": 1,
            "rows": [(7101, 20 << 30, 36.0), (7201, 3 << 30, 0.0)],
            "reasons": (None, None),
        },
    ),
    "b200-per-process-not-supported": (
        scenarios.per_process_not_supported,
        CARVED,
        {"cards": 2, "rows": [], "reasons": (Reason.UNSUPPORTED, Reason.UNSUPPORTED)},
    ),
    "a100-memory-sentinel": (
        scenarios.memory_sentinel,
        CARVED,
        {"cards": 1, "rows": [(7101, 4 << 30, 10.0), (7201, None, 0.0)], "reasons": (None, None)},
    ),
    "a100-process-list-truncated": (
        lambda: scenarios.process_list_grows("always"),
        CARVED,
        {"cards": 1, "rows": [(7101, None, 40.0)], "reasons": (Reason.TRUNCATED, None)},
    ),
    # Issue 29's figures; written down by hand from scenarios.h100_health: card 0 every figure
    # (123,456,789 mJ = 123,456.789 J; 1755 MHz), card 1 none (unsupported), card 2 sentinels.
    "h100-health": (
        scenarios.h100_health,
        ReadRequest(),
        {
            "cards": 3,
            "health": {
                # The fake's cards serve no GPM: the 14 activity figures `unsupported` (issue 41).
                gpu(20): ((12, 1, 345, 2), 123_456.789, 1_755_000_000, 7, GPM_UNSUPPORTED),
                gpu(21): (
                    (None,) * 4,
                    None,
                    1_980_000_000,
                    None,
                    ("unsupported",) * 12 + GPM_UNSUPPORTED,
                ),
                gpu(22): (
                    (None, 0, 0, 0),
                    None,
                    None,
                    None,
                    ("invalid_data",) * 4 + GPM_UNSUPPORTED,
                ),
            },
        },
    ),
    # R-X3's links and placement; by hand from scenarios.h100_links: cards 30/31 four NVLinks
    # and one PCIe switch, 32/33 two links each into an NVSwitch and one host bridge, 30/31
    # against 32/33 across NUMA nodes; card 34 placed against none. Every NUMA node is sysfs's
    # (the scenario's `numa`); card 30's nvmlDeviceGetNumaNodeId answers 4 (a coherent card's own
    # memory node), which is not its node (issue 43).
    "h100-links": (
        scenarios.h100_links,
        ReadRequest(),
        {
            "cards": 5,
            "links": {
                gpu(30): (
                    0,
                    (
                        (gpu(31), "nvlink", 4),
                        (gpu(31), "pcie_switch", None),
                        (gpu(32), "system", None),
                        (gpu(33), "system", None),
                    ),
                ),
                gpu(31): (
                    0,
                    (
                        (gpu(30), "nvlink", 4),
                        (gpu(30), "pcie_switch", None),
                        (gpu(32), "system", None),
                        (gpu(33), "system", None),
                    ),
                ),
                gpu(32): (
                    1,
                    (
                        (gpu(30), "system", None),
                        (gpu(31), "system", None),
                        (gpu(33), "nvswitch", 2),
                        (gpu(33), "pcie_host_bridge", None),
                    ),
                ),
                gpu(33): (
                    1,
                    (
                        (gpu(30), "system", None),
                        (gpu(31), "system", None),
                        (gpu(32), "nvswitch", 2),
                        (gpu(32), "pcie_host_bridge", None),
                    ),
                ),
                gpu(34): (1, ()),
            },
        },
    ),
}


# What a lambda in TABLE builds, for the fixture's provenance line.
SCENARIO_NAMES = {"a100-process-list-truncated": "process_list_grows(always)"}


def recorded(name: str) -> dict[str, Any]:
    meta, payload = load_recording(DIR / f"{name}.json")
    assert meta["kind"] == "synthetic" and "fake_nvml" in meta["source"]
    return payload


@pytest.mark.parametrize("name", sorted(TABLE))
def test_parse_over_the_fixture(name: str) -> None:
    _, _, facts = TABLE[name]
    reading = nvidia.parse(recorded(name))
    assert len(reading.cards) == facts["cards"]
    if "rows" in facts:
        (answer,) = reading.processes
        assert [(r.pid, r.memory_bytes, r.cores_percent) for r in answer.rows] == facts["rows"]
        assert (answer.memory_reason, answer.cores_reason) == facts["reasons"]
    if "partitions" in facts:
        got = {
            p.id: (p.memory_total_mib, p.memory_used_mib, p.cores_percent, p.cores_reason)
            for p in reading.partitions
        }
        assert got == facts["partitions"]
    for card in reading.cards if "links" in facts else ():
        assert card.links is not None
        links = tuple((x.peer_id, x.link, x.count) for x in card.links)
        numa, wanted = facts["links"][card.id]
        assert (card.numa_node, set(links)) == (numa, set(wanted))
        assert [x[0] for x in links] == sorted(x[0] for x in links)  # by peer
    for card in reading.cards if "health" in facts else ():
        h = card.health
        assert h is not None
        assert (
            (
                h.number(H.ECC_CORRECTED_VOLATILE),
                h.number(H.ECC_UNCORRECTED_VOLATILE),
                h.number(H.ECC_CORRECTED_AGGREGATE),
                h.number(H.ECC_UNCORRECTED_AGGREGATE),
            ),
            h.number(H.ENERGY_JOULES),
            h.number(H.CLOCK_SM_HZ),
            h.number(H.PCIE_REPLAYS),
            tuple(r.value for _, r in h.reasons),
        ) == facts["health"][card.id]


@pytest.mark.parametrize("name", sorted(TABLE))
def test_the_fixture_is_what_read_records_from_the_fake(
    name: str, libnvml: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build, request, _ = TABLE[name]
    lib = libnvml
    cards = build()
    monkeypatch.setenv(
        "FAKE_NVML_SCENARIO", str(fake_nvml.write(tmp_path / "s.txt", "580.95.05", cards))
    )
    clock = ManualClock()
    # A sysfs root of the scenario's own (each card's `numa`, none where it has none): the same
    # answer on every machine.
    write_sysfs(tmp_path / "sys", cards)
    backend = nvidia.NvidiaBackend({"nvml": str(lib)}, clock=clock, sysfs=tmp_path / "sys")
    backend.open()
    try:
        for _ in range(ROUNDS.get(name, 1) - 1):
            backend.read(request)
            time.sleep(GPM_MIN_INTERVAL * 1.5)  # the fake, like the driver, needs 100 ms
            clock.advance()
        payload = backend.read(request)
    finally:
        backend.close()
    path = DIR / f"{name}.json"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        meta = {
            "kind": "synthetic",
            "manufacturer": "nvidia",
            "driver": "580.95.05",
            "sdk": "nvidia-ml-py",
            "source": f"devicemanager read() over tests/fakelib/nvidia/fake_nvml.c, "
            f"scenario {SCENARIO_NAMES.get(name, build.__name__)}, round {ROUNDS.get(name, 1)}",
        }
        path.write_text(
            json.dumps({"meta": meta, "payload": payload}, indent=1, sort_keys=True) + "\n"
        )
    assert payload == recorded(name), f"{path} is stale; UPDATE_GOLDEN=1 re-records it"
