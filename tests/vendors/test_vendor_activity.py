"""Every activity figure per manufacturer beyond NVIDIA's and T-Head's GPM (issue 41, R-X10):
each library's figure under the family whose meaning it has, a busy time published as busy
time, and every figure the library cannot state absent with `unsupported`, never the cores'
busy time in its place.

- AMD: `amdsmi_get_gpu_activity`'s `umc_activity`, the memory controller's busy share, is
  `memory_busy_percent` (not bandwidth); nothing GPM states has an amdsmi counterpart.
- Ascend: `dcmi_get_device_utilization_rate` input type 10 (HBM bandwidth) is
  `memory_bandwidth_utilization_percent`, input type 12 (AI Vector) `vector_core_busy_percent`.
- NVIDIA and T-Head beside GPM: `…DeviceGetUtilizationRates().memory`, the time global memory
  was read or written, is `memory_busy_percent`; no vector unit.
- Hygon: `rsmi_dev_memory_busy_percent_get`, "the percentage of time that any device memory is
  being used", is `memory_busy_percent`; no activity figure (its CU figures sample inside the
  call or at one instant).
- MetaX: no activity figure at all.

The values are the scenarios' own, written by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from devicemanager.model import Card, CardHealth, HealthFigure, ReadRequest, Reason
from tests.conftest import NODES
from tests.fakelib import amd as fake_amd
from tests.fakelib import ascend as fake_dcmi
from tests.fakelib.amd import scenarios as amd_scenarios
from vendors import _amd_smi
from vendors._common import EVERY_ACTIVITY, GPM_ACTIVITY
from vendors.amd import AmdBackend
from vendors.ascend import HBM_BANDWIDTH, VECTOR_CORE, AscendBackend, parse_activity
from vendors.hygon import HygonBackend
from vendors.metax import MetaxBackend
from vendors.nvidia import NvidiaBackend

pytestmark = pytest.mark.timeout(60)

H = HealthFigure


def replayed(scenario: str, manufacturer: str, backend: Any) -> dict[str, Card]:
    doc = json.loads((NODES / scenario / "vendors" / f"{manufacturer}.json").read_text())
    return {c.id: c for c in backend.parse(doc.get("payload", doc)).cards}


def health(card: Card) -> CardHealth:
    assert card.health is not None, card.id
    return card.health


# -- NVIDIA ---------------------------------------------------------------------------------------


def test_nvml_memory_busy_time_from_the_recorded_h200_and_the_mig_card() -> None:
    (h200,) = replayed("h200-recorded", "nvidia", NvidiaBackend()).values()
    # The H200's nvmlDeviceGetUtilizationRates answered gpu 99, memory 24 (vendors/nvidia.json).
    assert h200.cores_utilization_percent == 99
    assert health(h200).number(H.MEMORY_BUSY) == 24
    # Nothing to state for a vector unit apart from the SMs: not read, so no row at all.
    assert H.VECTOR_CORE_BUSY not in health(h200).held()
    assert health(h200).reason(H.VECTOR_CORE_BUSY) is None
    cards = sorted(
        replayed("h100-mig-gpm", "nvidia", NvidiaBackend()).values(), key=lambda c: c.index
    )
    assert health(cards[0]).number(H.MEMORY_BUSY) == 51
    # Card 1 is in MIG mode: NVML answers NOT_SUPPORTED for the whole card's rates.
    assert health(cards[1]).number(H.MEMORY_BUSY) is None
    assert health(cards[1]).reason(H.MEMORY_BUSY) is Reason.UNSUPPORTED


# -- AMD ------------------------------------------------------------------------------------------


def test_amds_memory_controller_busy_time_from_the_replayed_mi300x() -> None:
    cards = replayed("mi300x-8gpu-cpx-mixed", "amd", AmdBackend())
    # Card 0's processor answered umc_activity 48 (vendors/amd.json).
    card0 = next(c for c in cards.values() if c.index == 0 and c.parent_id is None)
    assert health(card0).number(H.MEMORY_BUSY) == 48.0
    # The CPX card's board: its XCP 0 answered "N/A" for the memory controller.
    board = health(cards["GPU-0bb0eaf141ffd1a9"])
    assert board.number(H.MEMORY_BUSY) is None
    assert board.reason(H.MEMORY_BUSY) is Reason.UNSUPPORTED
    for card in (card0, cards["GPU-0bb0eaf141ffd1a9"]):
        # Nothing GPM states, and no vector unit: unsupported, never the GFX busy time.
        for figure in GPM_ACTIVITY | {H.VECTOR_CORE_BUSY}:
            assert health(card).number(figure) is None
            assert health(card).reason(figure) is Reason.UNSUPPORTED, figure


def test_amds_umc_activity_through_the_real_wheel_and_the_fake(
    rocm_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = amd_scenarios.spx_pair()
    doc["devices"][0]["activity"]["umc"] = 37
    doc["devices"][1]["activity"]["umc"] = fake_amd.NA16  # the library's "not available"
    path = fake_amd.write(tmp_path / "scenario.txt", doc)
    monkeypatch.setenv(fake_amd.SCENARIO_ENV, str(path))
    sysfs = fake_amd.sysfs(tmp_path / "sys", doc["devices"])
    backend = AmdBackend({"amd_smi": str(rocm_root)}, sysfs=sysfs)
    backend.open()
    try:
        payload = backend.read(ReadRequest())
    finally:
        backend.close()
    card0, card1 = sorted(AmdBackend().parse(payload).cards, key=lambda c: c.index)
    assert health(card0).number(H.MEMORY_BUSY) == 37
    assert card0.cores_utilization_percent == 87  # the GFX busy time stays the cores figure
    assert health(card1).reason(H.MEMORY_BUSY) is Reason.UNSUPPORTED


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ({"gfx_activity": 5, "umc_activity": 12}, (12, None)),
        ({"gfx_activity": 5, "umc_activity": "N/A"}, (None, Reason.UNSUPPORTED)),
        ({"gfx_activity": 5, "umc_activity": 101}, (None, Reason.INVALID_DATA)),
        ({"gfx_activity": 5, "umc_activity": -1}, (None, Reason.INVALID_DATA)),
        ({"error": "AMDSMI_STATUS_NOT_SUPPORTED", "code": 2}, (None, Reason.UNSUPPORTED)),
    ],
)
def test_why_amds_memory_busy_time_is_absent(answer: Any, expected: Any) -> None:
    found = _amd_smi.activity({"amdsmi_get_gpu_activity": answer})
    assert found[H.MEMORY_BUSY] == expected


def test_a_payload_without_amds_activity_call_states_no_memory_busy_time() -> None:
    assert H.MEMORY_BUSY not in _amd_smi.activity({})


# -- Ascend ---------------------------------------------------------------------------------------


def test_ascends_hbm_bandwidth_and_vector_cores_from_the_replayed_atlas() -> None:
    cards = sorted(
        replayed("atlas800t-a2-8npu-vnpu-mixed", "ascend", AscendBackend()).values(),
        key=lambda c: c.index,
    )
    # tests/fakelib/ascend/node.py's ACTIVITY: NPU 0 (64, 17), NPU 5 (88, 35), NPU 6 idle.
    assert [health(c).number(H.MEMORY_BANDWIDTH_UTILIZATION) for c in cards[:7]] == [
        64,
        66,
        41,
        22,
        12,
        88,
        0,
    ]
    assert [health(c).number(H.VECTOR_CORE_BUSY) for c in cards[:7]] == [17, 18, 9, 5, 3, 35, 0]
    # The AI Cores' busy time stays the cores figure (NPU 0: 78), apart from the vector cores.
    assert cards[0].cores_utilization_percent == 78
    # NPU 7's driver answers neither: unsupported, as every GPM figure and memory busy time.
    seventh = health(cards[7])
    for figure in EVERY_ACTIVITY:
        assert seventh.number(figure) is None
        assert seventh.reason(figure) is Reason.UNSUPPORTED, figure


def test_ascends_utilization_input_types_through_our_ctypes_and_the_fake(
    libdcmi: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    devices = [
        fake_dcmi.device(0, 0, hbm=(65536, 9000), aicore=40, hbm_bandwidth=55, vector_core=7),
        fake_dcmi.device(1, 0, hbm=(65536, 3432), aicore=0),
    ]
    path = fake_dcmi.write(tmp_path / "scenario.txt", devices)
    monkeypatch.setenv(fake_dcmi.SCENARIO_ENV, str(path))
    backend = AscendBackend({"dcmi": str(libdcmi)})
    backend.open()
    try:
        payload = backend.read(ReadRequest())
    finally:
        backend.close()
    first, second = payload["devices"][:2]
    # Recorded under their own keys, so `record` keeps them and a replay reads them.
    assert (first[HBM_BANDWIDTH], first[VECTOR_CORE]) == (55, 7)
    assert second[HBM_BANDWIDTH]["code"] == fake_dcmi.NOT_SUPPORTED
    card0, card1 = sorted(AscendBackend().parse(payload).cards, key=lambda c: c.index)
    assert health(card0).number(H.MEMORY_BANDWIDTH_UTILIZATION) == 55
    assert health(card0).number(H.VECTOR_CORE_BUSY) == 7
    assert card0.cores_utilization_percent == 40
    assert health(card1).reason(H.MEMORY_BANDWIDTH_UTILIZATION) is Reason.UNSUPPORTED
    assert health(card1).reason(H.VECTOR_CORE_BUSY) is Reason.UNSUPPORTED


def test_ascend_out_of_range_is_refused_and_an_older_payload_states_neither() -> None:
    found = parse_activity({HBM_BANDWIDTH: 140, VECTOR_CORE: 3})
    assert found[H.MEMORY_BANDWIDTH_UTILIZATION] == (None, Reason.INVALID_DATA)
    assert found[H.VECTOR_CORE_BUSY] == (3, None)
    older = parse_activity({})
    # Not asked when it was recorded: neither stated nor explained; what DCMI has no call for
    # is unsupported whatever the payload.
    assert H.MEMORY_BANDWIDTH_UTILIZATION not in older and H.VECTOR_CORE_BUSY not in older
    assert older[H.MEMORY_BUSY] == (None, Reason.UNSUPPORTED)
    assert older[H.SM_ACTIVITY] == (None, Reason.UNSUPPORTED)


# -- Hygon and MetaX ------------------------------------------------------------------------------


def test_hygons_memory_busy_time_and_no_activity_from_the_replayed_k100ai() -> None:
    cards = sorted(
        replayed("k100ai-8dcu-whole-and-vdcu", "hygon", HygonBackend()).values(),
        key=lambda c: c.index,
    )
    # The scenario's memory busy percents beside the cores' (tests/fakelib/hygon/scenarios.py).
    assert [health(c).number(H.MEMORY_BUSY) for c in cards] == [46, 39, 9, 14, 0, 8, 0, 0]
    assert [c.cores_utilization_percent for c in cards[:2]] == [97, 88]
    for card in cards:
        assert not (EVERY_ACTIVITY - {H.MEMORY_BUSY}) & health(card).held().keys()
        assert {health(card).reason(f) for f in EVERY_ACTIVITY - {H.MEMORY_BUSY}} == {
            Reason.UNSUPPORTED
        }


@pytest.mark.parametrize(
    ("scenario", "manufacturer", "backend"),
    [("c500-8gpu-sgpu-slices", "metax", MetaxBackend())],
)
def test_metax_states_no_activity_and_says_unsupported(
    scenario: str, manufacturer: str, backend: Any
) -> None:
    cards = replayed(scenario, manufacturer, backend)
    assert cards
    for card in cards.values():
        held = health(card).held()
        assert not EVERY_ACTIVITY & held.keys()
        assert {health(card).reason(f) for f in EVERY_ACTIVITY} == {Reason.UNSUPPORTED}
        # The cores' busy time is still there, under its own name.
        assert card.cores_utilization_percent is not None
