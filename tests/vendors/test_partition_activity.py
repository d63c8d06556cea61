"""A partition's own activity (issue 41, R-X10): every GPM figure a MIG GPU instance answers
over the round period, not only its SM activity, through real pynvml and the fake
libnvidia-ml, the pure parse, and the snapshot's slices section; absent with its reason where
the instance does not answer (an A100's partitions: `unsupported`, the first round:
`no_baseline`). The values below are the scenarios' own, written by hand."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from devicemanager.figures import slices
from devicemanager.model import (
    CardHealth,
    HealthFigure,
    PartitionReading,
    ReadRequest,
    Reason,
    SlicePartition,
    SliceSection,
)
from tests.conftest import NODES
from tests.fakelib import nvidia as fake
from tests.fakelib.nvidia import scenarios
from tests.world import gpu
from vendors._nvml_family import GPM_CARD_METRICS, GPM_MIN_INTERVAL
from vendors.nvidia import NvidiaBackend

pytestmark = pytest.mark.timeout(60)

H = HealthFigure
GPM_FIGURES = tuple(figure for _, figure, _ in GPM_CARD_METRICS)
LINKS = (
    H.PCIE_TX_BYTES_PER_SECOND,
    H.PCIE_RX_BYTES_PER_SECOND,
    H.NVLINK_TX_BYTES_PER_SECOND,
    H.NVLINK_RX_BYTES_PER_SECOND,
)


def replayed(scenario: str) -> dict[str, PartitionReading]:
    doc = json.loads((NODES / scenario / "vendors" / "nvidia.json").read_text())
    reading = NvidiaBackend().parse(doc.get("payload", doc))
    return {p.id: p for p in reading.partitions}


def test_every_gpm_figure_of_a_hopper_partition_from_the_replayed_payload() -> None:
    # h100-mig-gpm's 3g.40gb (fixtures/fake_scenarios.py: GPM_MIG_IDS served to GI 2).
    part = replayed("h100-mig-gpm")["MIG-849abfbc-8dc0-be56-c7f1-524cca9cafec"]
    activity = part.activity
    assert activity is not None
    assert part.cores_percent == activity.number(H.SM_ACTIVITY) == 87.25
    assert activity.number(H.SM_OCCUPANCY) == 41.3
    assert activity.number(H.TENSOR_ACTIVITY) == 79.8
    assert activity.number(H.TENSOR_ACTIVITY_HMMA) == 79.8
    assert activity.number(H.TENSOR_ACTIVITY_DFMA) == 0.0
    assert activity.number(H.MEMORY_BANDWIDTH_UTILIZATION) == 35.2
    assert activity.number(H.PIPE_FP32_ACTIVITY) == 3.1
    # The card-wide link counters are not served to an instance: NOT_SUPPORTED, unsupported.
    assert {activity.reason(f) for f in LINKS} == {Reason.UNSUPPORTED}
    assert all(activity.number(f) is None for f in LINKS)


def test_an_a100s_partitions_state_no_activity_and_say_unsupported() -> None:
    parts = replayed("a100-dra-only")
    assert parts
    for part in parts.values():
        assert part.activity is not None
        assert part.activity.numbers == ()
        assert {part.activity.reason(f) for f in GPM_FIGURES} == {Reason.UNSUPPORTED}


def test_a_partition_is_measured_from_the_second_round_on_the_fake(
    libnvml: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    devices = scenarios.h100_mig()
    busy = devices[1]["migs"][0]
    busy["gpm_metrics"] = {"3": 40.5, "5": 71.0, "10": 33.3, "13": 2.5}
    path = fake.write(tmp_path / "s.txt", "570.133.20", devices)
    monkeypatch.setenv(fake.SCENARIO_ENV, str(path))
    request = ReadRequest(partition_ids=frozenset({(gpu(1), scenarios.mig_uuid(0))}))
    backend = NvidiaBackend({"nvml": str(libnvml)})
    backend.open()
    try:
        first = backend.read(request)
        time.sleep(GPM_MIN_INTERVAL * 1.5)  # the fake refuses samples closer than 100 ms
        second = backend.read(request)
    finally:
        backend.close()
    (part,) = NvidiaBackend().parse(first).partitions
    assert part.activity is not None
    assert {part.activity.reason(f) for f in GPM_FIGURES} == {Reason.NO_BASELINE}
    (part,) = NvidiaBackend().parse(second).partitions
    activity = part.activity
    assert activity is not None
    assert activity.number(H.SM_ACTIVITY) == part.cores_percent == 87.25
    assert activity.number(H.SM_OCCUPANCY) == 40.5
    assert activity.number(H.TENSOR_ACTIVITY) == 71.0
    assert activity.number(H.MEMORY_BANDWIDTH_UTILIZATION) == 33.3
    assert activity.number(H.PIPE_FP16_ACTIVITY) == 2.5
    # An id the instance does not serve answers NOT_SUPPORTED for itself, never a zero.
    assert activity.number(H.PIPE_FP64_ACTIVITY) is None
    assert activity.reason(H.PIPE_FP64_ACTIVITY) is Reason.UNSUPPORTED


def section(activity: CardHealth | None) -> SliceSection:
    part = SlicePartition(
        "nvidia", "uid-1", "main", gpu(1), "MIG-a", 9856, 100, 12.5, activity=activity
    )
    return SliceSection(partitions=(part,))


def test_the_slices_section_carries_a_partitions_activity_and_reads_it_back() -> None:
    activity = CardHealth.of(
        {H.SM_ACTIVITY: 12.5, H.TENSOR_ACTIVITY: 3.0},
        [(H.PCIE_TX_BYTES_PER_SECOND, Reason.UNSUPPORTED)],
    )
    doc = slices.to_json(section(activity))
    (written,) = doc["partitions"]
    assert written["activity"] == {"smActivityPercent": 12.5, "tensorActivityPercent": 3.0}
    assert written["activityAbsentReasons"] == {"pcie_tx_bytes_per_second": "unsupported"}
    back = slices.from_json(json.loads(json.dumps(doc)))
    assert back is not None
    assert back.partitions[0].activity == activity


def test_a_partition_whose_backend_reads_no_activity_is_written_as_before() -> None:
    (written,) = slices.to_json(section(None))["partitions"]
    assert "activity" not in written and "activityAbsentReasons" not in written
    back = slices.from_json(slices.to_json(section(None)))
    assert back is not None and back.partitions[0].activity is None
