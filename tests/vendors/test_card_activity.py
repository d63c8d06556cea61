"""A whole card's activity from GPM over the round period (issue 41), on NVIDIA
through real pynvml and the fake libnvidia-ml, on T-Head through our HGML declarations and the
fake libhgml, and the pure parse both share: SM activity, SM occupancy, tensor activity, DRAM
bandwidth, pipe activity, PCIe and NVLink throughput, each absent with its reason where it
cannot be stated, never busy time in its place.

The H200's own answers (fixtures/nodes/h200-recorded/gpm-readings.json, copied from the
session's recording: two GPM samples 2 s apart around four known workloads) are pinned through
the real parse: one SM of 132 kept 30% busy is 26% busy time and 0.2% SM activity. R-X10 in
part: per card on NVIDIA and T-Head; per partition beyond SM activity, the other manufacturers,
per Instance and idle by activity are issue 41's rest."""

from __future__ import annotations

import copy
import json
import math
import time
from pathlib import Path
from typing import Any

import pytest

from devicemanager.figures import exposition, snapshot
from devicemanager.figures.snapshot import BackendResult
from devicemanager.model import (
    BackendState,
    BackendStatus,
    Card,
    HealthFigure,
    ReadRequest,
    Reason,
    VendorReading,
)
from tests.conftest import NODES
from tests.fakelib import nvidia as fake
from tests.fakelib import thead as fake_hgml
from tests.fakelib.nvidia import scenarios
from tests.fakelib.nvidia.scenarios import GPM_QUARTER_DUTY
from tests.fakelib.thead import scenarios as thead_scenarios
from tests.world import gpu
from vendors import _nvml_family as family
from vendors._nvml_family import GPM_CARD_METRICS, GPM_MIN_INTERVAL, parse_card_gpm
from vendors.nvidia import NvidiaBackend
from vendors.thead import TheadBackend

pytestmark = pytest.mark.timeout(60)

H = HealthFigure
MIB = 1 << 20
GAP = GPM_MIN_INTERVAL * 1.5
GPM_FIGURES = tuple(figure for _, figure, _ in GPM_CARD_METRICS)
READINGS = NODES / "h200-recorded" / "gpm-readings.json"


def recorded_h200_card() -> dict[str, Any]:
    """The H200's card as `devicemanager record` captured it (no GPM answers in it)."""
    doc = json.loads((NODES / "h200-recorded" / "vendors" / "nvidia.json").read_text())
    payload = doc.get("payload", doc)
    (device,) = payload["devices"]
    return dict(device)


def with_gpm(device: dict[str, Any], gpm: dict[str, float], busy: int) -> dict[str, Any]:
    """The card's payload carrying GPM's answers as read() records them: support, this round's
    sample after the previous one, the metrics between them by constant name."""
    out = copy.deepcopy(device)
    out["nvmlDeviceGetUtilizationRates"] = {"gpu": busy, "memory": 0}
    out["nvmlGpmQueryDeviceSupport"] = {"isSupportedDevice": 1}
    out["nvmlGpmSampleGet"] = {"at": 102.0, "previousAt": 100.0}
    out["nvmlGpmMetricsGet"] = {f"NVML_GPM_METRIC_{name}": v for name, v in gpm.items()}
    return out


def card_of(payload: dict[str, Any]) -> Card:
    (card,) = NvidiaBackend().parse(payload).cards
    return card


def test_the_h200s_gpm_readings_pin_through_the_real_parse() -> None:
    """Issue 41's pin: 0.2 (one SM at 30%) and 21.2 (quarter duty) SM activity, 20.1 tensor
    activity, within rounding; busy time stays what NVML's utilization said, a figure apart."""
    readings = {r["workload"]: r for r in json.loads(READINGS.read_text())["readings"]}
    device = recorded_h200_card()
    got: dict[str, Card] = {}
    for workload, reading in readings.items():
        busy = reading["nvmlDeviceGetUtilizationRates.gpu"]
        payload = {"nvmlDeviceGetCount": 1, "devices": [with_gpm(device, reading["gpm"], busy)]}
        got[workload] = card_of(payload)
    one_sm, quarter = got["one_sm_30pct_duty"], got["bf16_matmul_quarter_duty"]
    assert one_sm.health is not None and quarter.health is not None
    assert one_sm.cores_utilization_percent == 26  # busy time: the share of time a kernel ran
    assert one_sm.health.number(H.SM_ACTIVITY) == pytest.approx(0.2, abs=0.01)
    assert quarter.cores_utilization_percent == 51
    assert quarter.health.number(H.SM_ACTIVITY) == pytest.approx(21.2, abs=0.05)
    assert quarter.health.number(H.TENSOR_ACTIVITY) == pytest.approx(20.1, abs=0.05)
    assert quarter.health.number(H.TENSOR_ACTIVITY_HMMA) == pytest.approx(20.1, abs=0.05)
    assert quarter.health.number(H.MEMORY_BANDWIDTH_UTILIZATION) == pytest.approx(5.35)
    # PCIe in bytes per second: nvml.h's MiB/s times 2^20.
    assert quarter.health.number(H.PCIE_RX_BYTES_PER_SECOND) == pytest.approx(8.2348 * MIB)
    full = got["bf16_matmul_full"].health
    assert full is not None and full.number(H.SM_ACTIVITY) == pytest.approx(92.93)
    idle = got["idle"].health
    assert idle is not None and idle.number(H.SM_ACTIVITY) == 0.0  # measured zero, not absent
    for card in got.values():
        assert card.health is not None and not card.health.reasons


def test_the_recorded_h200_payload_reads_every_activity_figure_absent_as_unsupported() -> None:
    """The hardware recording has no GPM answers (made before they were read): every activity
    figure is absent with `unsupported`, and the busy time is not put in SM activity's place."""
    card = card_of({"nvmlDeviceGetCount": 1, "devices": [recorded_h200_card()]})
    assert card.health is not None
    for figure in GPM_FIGURES:
        assert card.health.get(figure) is None
        assert card.health.reason(figure) is Reason.UNSUPPORTED


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda d: d.pop("nvmlGpmSampleGet"), Reason.UNSUPPORTED),  # not sampled (MIG mode)
        (
            lambda d: d.update(nvmlGpmQueryDeviceSupport={"isSupportedDevice": 0}),
            Reason.UNSUPPORTED,  # before Hopper
        ),
        (lambda d: d.pop("nvmlGpmMetricsGet"), Reason.NO_BASELINE),  # the first round
        (
            lambda d: d.update(nvmlGpmSampleGet={"error": "NVMLError_GpuIsLost", "code": 15}),
            Reason.TRANSIENT_DRIVER_ERROR,
        ),
        (
            lambda d: d.update(nvmlGpmMetricsGet={"error": "NVMLError_NoPermission", "code": 4}),
            Reason.PERMISSION,
        ),
    ],
)
def test_why_a_cards_activity_is_absent(change: Any, reason: Reason) -> None:
    device = with_gpm({}, {"SM_UTIL": 10.0}, 50)
    assert parse_card_gpm(device, "nvml")[H.SM_ACTIVITY] == (10.0, None)
    change(device)
    found = parse_card_gpm(device, "nvml")
    assert found[H.SM_ACTIVITY] == (None, reason)
    assert {why for _, why in found.values()} == {reason}


def test_a_metric_out_of_range_or_refused_is_absent_with_its_own_reason() -> None:
    device = with_gpm({}, {"SM_UTIL": 100.5, "SM_OCCUPANCY": 12.0}, 50)
    metrics = device["nvmlGpmMetricsGet"]
    metrics["NVML_GPM_METRIC_ANY_TENSOR_UTIL"] = repr(math.nan)  # read() writes NaN as text
    metrics["NVML_GPM_METRIC_DRAM_BW_UTIL"] = {"error": "NVMLError_InvalidArgument", "code": 2}
    metrics["NVML_GPM_METRIC_PCIE_TX_PER_SEC"] = -1.0
    found = parse_card_gpm(device, "nvml")
    assert found[H.SM_ACTIVITY] == (None, Reason.INVALID_DATA)  # never clamped to 100
    assert found[H.SM_OCCUPANCY] == (12.0, None)
    assert found[H.TENSOR_ACTIVITY] == (None, Reason.INVALID_DATA)
    # An id the driver does not serve: INVALID_ARGUMENT every round, a property of the card.
    assert found[H.MEMORY_BANDWIDTH_UTILIZATION] == (None, Reason.UNSUPPORTED)
    assert found[H.PCIE_TX_BYTES_PER_SECOND] == (None, Reason.INVALID_DATA)
    assert found[H.NVLINK_RX_BYTES_PER_SECOND] == (None, Reason.UNSUPPORTED)  # not recorded


# -- read() over the fakes ----------------------------------------------------------------------


def two_rounds(backend: Any, request: ReadRequest) -> list[dict[str, Any]]:
    backend.open()
    try:
        first = backend.read(request)
        time.sleep(GAP)  # the fake refuses samples closer than the header's 100 ms
        return [first, backend.read(request)]
    finally:
        backend.close()


def test_a_hopper_card_is_measured_from_the_second_round(
    libnvml: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    devices = scenarios.h100_mig()
    del devices[0]["gpm_metrics"][3]  # a driver that does not serve SM occupancy
    path = fake.write(tmp_path / "s.txt", "570.133.20", devices)
    monkeypatch.setenv(fake.SCENARIO_ENV, str(path))
    first, second = two_rounds(NvidiaBackend({"nvml": str(libnvml)}), ReadRequest())
    card0 = NvidiaBackend().parse(first).cards[0]
    assert card0.health is not None
    assert {card0.health.reason(f) for f in GPM_FIGURES} == {Reason.NO_BASELINE}
    card0, card1 = NvidiaBackend().parse(second).cards
    assert card0.health is not None and card1.health is not None
    q = GPM_QUARTER_DUTY
    assert card0.health.number(H.SM_ACTIVITY) == round(q[2], 2)
    assert card0.health.number(H.TENSOR_ACTIVITY) == round(q[5], 2)
    assert card0.health.number(H.MEMORY_BANDWIDTH_UTILIZATION) == round(q[10], 2)
    assert card0.health.number(H.PCIE_TX_BYTES_PER_SECOND) == round(q[20] * MIB, 2)
    assert card0.health.number(H.NVLINK_RX_BYTES_PER_SECOND) == 0.0
    # The id the driver does not serve: the real library's INVALID_ARGUMENT, recorded as such.
    metrics = second["devices"][0]["nvmlGpmMetricsGet"]
    assert metrics["NVML_GPM_METRIC_SM_OCCUPANCY"]["code"] == family.ERROR_INVALID_ARGUMENT
    assert card0.health.reason(H.SM_OCCUPANCY) is Reason.UNSUPPORTED
    # Card 1 is in MIG mode: its partitions carry the figure, the card is not sampled whole.
    assert "nvmlGpmSampleGet" not in second["devices"][1]
    assert card1.health.reason(H.SM_ACTIVITY) is Reason.UNSUPPORTED


def served(card: Card) -> str:
    result = BackendResult(
        status=BackendStatus("nvidia", BackendState.OK, 0.5),
        reading=VendorReading(manufacturer="nvidia", cards=(card,)),
        read_at=1.0,
    )
    snap = snapshot.assemble(1.0, 15.0, "node-a", [result])
    return exposition.render(exposition.health_families(snap)).decode()


def test_on_an_a100_the_families_are_absent_and_the_capability_gauge_says_unsupported(
    libnvml: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = fake.write(tmp_path / "s.txt", "570.133.20", scenarios.a100_two_slices())
    monkeypatch.setenv(fake.SCENARIO_ENV, str(path))
    _, second = two_rounds(NvidiaBackend({"nvml": str(libnvml)}), ReadRequest())
    (device,) = second["devices"]
    # Asked whether it serves GPM (Ampere: no), and never sampled.
    assert device["nvmlGpmQueryDeviceSupport"] == {"isSupportedDevice": 0}
    assert "nvmlGpmSampleGet" not in device and "nvmlGpmSampleAlloc" not in device
    (card,) = NvidiaBackend().parse(second).cards
    assert card.cores_utilization_percent == 36  # busy time, as before
    text = served(card)
    for name in (
        "sm_activity_percent",
        "sm_occupancy_percent",
        "tensor_activity_percent",
        "memory_bandwidth_utilization_percent",
        "pipe_activity_percent",
        "pcie_throughput_bytes_per_second",
    ):
        assert f"gpustack_accelerator_{name}{{" not in text
    for figure in GPM_FIGURES:
        assert (
            f'gpustack_accelerator_figure_capability{{figure="{figure.value}",id="{gpu(2)}",'
            'manufacturer="nvidia",node="node-a",reason="unsupported"} 0.0\n'
        ) in text


def test_a_ppu_whole_card_is_measured_by_hgmls_gpm(
    libhgml: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    card = thead_scenarios.whole(41, gpm=1, gpm_metrics={2: 37.5, 5: 12.25, 21: 2.0})
    path = fake_hgml.write(tmp_path / "s.txt", [card, thead_scenarios.whole(42)])
    monkeypatch.setenv(fake_hgml.SCENARIO_ENV, str(path))
    first, second = two_rounds(TheadBackend({"hgml": str(libhgml)}), ReadRequest())
    measured, older = TheadBackend().parse(second).cards
    assert measured.health is not None and older.health is not None
    assert measured.health.number(H.SM_ACTIVITY) == 37.5
    assert measured.health.number(H.TENSOR_ACTIVITY) == 12.25
    assert measured.health.number(H.PCIE_RX_BYTES_PER_SECOND) == 2.0 * MIB
    # Ids the driver does not serve answer INVALID_ARGUMENT: absent, `unsupported`.
    assert measured.health.reason(H.SM_OCCUPANCY) is Reason.UNSUPPORTED
    # A PPU whose driver serves no GPM.
    assert {older.health.reason(f) for f in GPM_FIGURES} == {Reason.UNSUPPORTED}
    (first_card, _) = TheadBackend().parse(first).cards
    assert first_card.health is not None
    assert first_card.health.reason(H.SM_ACTIVITY) is Reason.NO_BASELINE
