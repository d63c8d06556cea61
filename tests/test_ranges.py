"""Figures outside what the hardware can hold are refused figure by figure (issue 30): the
sentinels a library answers for "not supported" (UINT32_MAX watts, -1e30 degrees, a negative
size) are absent with `invalid_data`, never published as measured, and a figure in range beside
them is untouched."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from devicemanager.agent.monitor import BackendWorker, Monitor
from devicemanager.figures.ranges import CARD, plausible_reading
from devicemanager.figures.snapshot import card_from_json, card_json
from devicemanager.model import (
    MIB,
    Card,
    CardHealth,
    DeviceProcesses,
    PartitionReading,
    ProcessRow,
    Reason,
    VendorReading,
)
from devicemanager.model import HealthFigure as H
from tests.world import ReadingBackend, card, gpu

UINT32_MAX = 4294967295


def reading(*cards: Card, **rest: Any) -> VendorReading:
    return VendorReading("nvidia", cards, **rest)


@pytest.mark.parametrize(
    ("figure", "value"),
    [
        ("power_usage_watts", float(UINT32_MAX)),  # amdsmi's "unsupported"
        ("power_usage_watts", 100_000.5),
        ("power_usage_watts", -1.0),
        ("temperature_celsius", -1e30),
        ("temperature_celsius", 65535.0),
        ("cores_utilization_percent", 101.0),
        ("cores_utilization_percent", -0.5),
        ("memory_total_mib", 0),
        ("memory_total_mib", -1),
        ("memory_used_mib", -1),
        ("memory_used_mib", (16 << 20) + 1),
    ],
)
def test_a_card_figure_out_of_range_is_absent_and_the_others_kept(figure: str, value: Any) -> None:
    """(R-V2) One figure refused, its name in `invalid`; every other figure as answered."""
    good = card(0)
    bad = replace(good, **{figure: value})
    fixed, refused = plausible_reading(reading(bad))
    (out,) = fixed.cards
    assert getattr(out, figure) is None and out.invalid == (figure,)
    assert refused == (f"cards[0].{figure}",)
    for other in CARD:
        if other != figure:
            assert getattr(out, other) == getattr(good, other)


@pytest.mark.parametrize(
    ("figure", "value"),
    [
        ("power_usage_watts", 100_000.0),
        ("power_usage_watts", 0.0),
        ("temperature_celsius", -100.0),
        ("temperature_celsius", 200.0),
        ("cores_utilization_percent", 100.0),
        ("memory_total_mib", 16 << 20),
        ("memory_used_mib", 0),
    ],
)
def test_the_bounds_themselves_are_in_range(figure: str, value: Any) -> None:
    good = card(0)
    edge = replace(good, **{figure: value})
    fixed, refused = plausible_reading(reading(edge))
    assert refused == () and fixed.cards == (edge,)


def test_an_in_range_reading_is_returned_as_it_is() -> None:
    answer = reading(card(0), card(1))
    fixed, refused = plausible_reading(answer)
    assert fixed is answer and refused == ()


def test_health_figures_out_of_range_get_invalid_data_as_their_reason() -> None:
    """(R-X7) A negative counter, an energy past any card's life, a clock of 1 THz: each absent
    with `invalid_data` in the health's reasons, a reason given before for it replaced."""
    health = CardHealth.of(
        {
            H.ECC_CORRECTED_VOLATILE: -1,
            H.ECC_UNCORRECTED_VOLATILE: 3,
            H.ENERGY_JOULES: 1e18,
            H.CLOCK_SM_HZ: 10**12,
            H.CLOCK_MEMORY_HZ: 1_593_000_000,
            H.PCIE_REPLAYS: 0,
        },
        reasons=((H.ENERGY_JOULES, Reason.UNSUPPORTED),),
    )
    bad = Card(id=gpu(0), index=0, health=health)
    fixed, refused = plausible_reading(reading(bad))
    out = fixed.cards[0].health
    assert out is not None
    assert (
        out.number(H.ECC_CORRECTED_VOLATILE),
        out.number(H.ENERGY_JOULES),
        out.number(H.CLOCK_SM_HZ),
    ) == (None, None, None)
    assert (
        out.number(H.ECC_UNCORRECTED_VOLATILE),
        out.number(H.CLOCK_MEMORY_HZ),
        out.number(H.PCIE_REPLAYS),
    ) == (
        3,
        1_593_000_000,
        0,
    )
    assert dict(out.reasons) == {
        "ecc_corrected_volatile": Reason.INVALID_DATA,
        "energy_joules": Reason.INVALID_DATA,
        "clock_sm_hz": Reason.INVALID_DATA,
    }
    assert len(refused) == 3


def test_partitions_and_process_rows_out_of_range_lose_that_entry_point() -> None:
    """(R-V3, R-V4) A partition's memory past 16 TiB, a row of negative bytes, a row at 250 %:
    that entry point is `invalid_data` for the partition or the whole device (a partial sum is
    never the whole), the other entry point kept."""
    part = PartitionReading(
        "MIG-1", gpu(0), memory_total_mib=-5, memory_used_mib=10, cores_percent=40.0
    )
    rows = (ProcessRow(10, -MIB, 20.0), ProcessRow(11, MIB, 250.0))
    device = DeviceProcesses(gpu(0), rows)
    fixed, refused = plausible_reading(reading(card(0), partitions=(part,), processes=(device,)))
    (p,) = fixed.partitions
    assert (p.memory_total_mib, p.memory_used_mib, p.memory_reason) == (
        None,
        None,
        Reason.INVALID_DATA,
    )
    assert p.cores_percent == 40.0 and p.cores_reason is None
    (d,) = fixed.processes
    assert d.memory_reason is Reason.INVALID_DATA and d.cores_reason is Reason.INVALID_DATA
    assert set(refused) == {
        "partitions[0].memory",
        "processes[0].memory_bytes",
        "processes[0].cores_percent",
    }


SIZES = st.none() | st.integers(-(2**40), 2**40)
FIGURES = st.one_of(
    st.none(),
    st.integers(-(2**40), 2**40),
    st.floats(-1e31, 1e31, allow_nan=False, allow_infinity=False),
)


@given(
    st.fixed_dictionaries(
        {f: FIGURES for f in ("cores_utilization_percent", "temperature_celsius")}
        | {"power_usage_watts": FIGURES}
        | {
            f: st.none() | st.integers(-(2**40), 2**40)
            for f in ("memory_total_mib", "memory_used_mib")
        }
    )
)
def test_whatever_a_library_answers_what_is_kept_is_in_range(figures: dict[str, Any]) -> None:
    """(R-V2) Any value in any card figure: what survives is within its bounds, what does not
    is None and named, and the snapshot's JSON carries the reason and reads back the same."""
    fixed, _ = plausible_reading(reading(Card(id=gpu(0), index=0, **figures)))
    (out,) = fixed.cards
    for name, (low, high) in CARD.items():
        value = getattr(out, name)
        if name in out.invalid:
            assert value is None and figures[name] is not None
        else:
            assert value == figures[name]
            assert value is None or low <= value <= high
    doc = json.loads(json.dumps(card_json(out)))
    assert card_from_json(doc) == out


def test_the_monitor_refuses_a_sentinel_and_metrics_say_why() -> None:
    """(R-V2) Through the monitor: amdsmi's UINT32_MAX watts is no power sample, the capability
    family says `invalid_data` for it, and the snapshot's card carries the reason."""
    bad = replace(card(0), power_usage_watts=float(UINT32_MAX))
    monitor = Monitor(
        [BackendWorker(ReadingBackend(reading(bad, card(1))))],
        period=15,
        deadline=5,
        liveness_timeout=60,
        node="n",
    )
    published = monitor.run_round()
    monitor.stop()
    series = {
        f.name: [(s.labels, s.value) for s in f.samples]
        for f in text_string_to_metric_families(published.metrics.plain.decode())
    }
    power = {ls["id"]: v for ls, v in series["gpustack_accelerator_power_usage_watts"]}
    assert gpu(0) not in power and gpu(1) in power
    capability = {
        "node": "n",
        "manufacturer": "nvidia",
        "id": gpu(0),
        "figure": "power_usage_watts",
        "reason": "invalid_data",
    }
    assert (capability, 0.0) in series["gpustack_accelerator_figure_capability"]
    doc = json.loads(published.snapshot_json)
    (entry,) = [c for c in doc["groups"][0]["accelerators"] if c["id"] == gpu(0)]
    assert entry["powerUsage"] is None
    assert entry["absentReasons"] == {"powerUsage": "invalid_data"}
    (other,) = [c for c in doc["groups"][0]["accelerators"] if c["id"] == gpu(1)]
    assert "absentReasons" not in other  # today's schema where nothing was refused
