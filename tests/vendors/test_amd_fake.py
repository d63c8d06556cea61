"""The amd backend end to end: the real `amdsmi` wheel (loading the fake libamd_smi.so through
its own loader, nothing of it patched), our ctypes ROCm SMI fallback, our read() and parse(),
over the fake ROCm install of tests/fakelib/amd driven by the scenarios there (R-V1..R-V6).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from devicemanager.backend import BackendUnavailable
from devicemanager.figures.ranges import plausible_reading
from devicemanager.model import Card, ReadRequest, Reason, VendorReading
from devicemanager.model import HealthFigure as H
from tests.conftest import REPO, agent_env
from tests.fakelib import amd as fake
from tests.fakelib.amd import GIB, scenarios
from tests.vendors import kit
from tests.vendors.conftest import links_of, serve_fake_library
from vendors._amd_smi import AMD_ACTIVITY_UNSTATED
from vendors.amd import VIA_AMDSMI, VIA_ROCM_SMI, VIA_WITHHELD, AmdBackend

pytestmark = pytest.mark.timeout(90)

PERIOD = 15.0


class Clock:
    """Monotonic seconds that advance one monitor period at each read."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start - PERIOD

    def __call__(self) -> float:
        self.now += PERIOD
        return self.now


@pytest.fixture
def node(rocm_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """Write a scenario where the fakes read it; returns a factory of backends on it."""

    def _node(doc: dict[str, Any], **libraries: str) -> AmdBackend:
        path = fake.write(tmp_path / "scenario.txt", doc)
        monkeypatch.setenv(fake.SCENARIO_ENV, str(path))
        sysfs = fake.sysfs(tmp_path / "sys", doc["devices"])
        return AmdBackend({"amd_smi": str(rocm_root), **libraries}, clock=Clock(), sysfs=sysfs)

    return _node


def rounds(backend: AmdBackend, request: ReadRequest, n: int) -> list[dict[str, Any]]:
    backend.open()
    try:
        return [backend.read(request) for _ in range(n)]
    finally:
        backend.close()


def carved(*ids: str) -> ReadRequest:
    return ReadRequest(carved_device_ids=frozenset(ids))


def by_id(reading: VendorReading) -> dict[str, Card]:
    return {c.id: c for c in reading.cards}


# -- cards -----------------------------------------------------------------------------------------


def test_whole_cards_through_the_real_wheel(node) -> None:  # type: ignore[no-untyped-def]
    (payload,) = rounds(node(scenarios.spx_pair()), ReadRequest(), 1)
    reading = AmdBackend().parse(payload)
    busy, idle = reading.cards
    assert (busy.id, busy.index, busy.name) == (fake.uuid_of(0), 0, "AMD Instinct MI300X")
    assert (busy.memory_total_mib, busy.memory_used_mib) == (196_592, 61_440)  # MiB as given
    assert (busy.cores_utilization_percent, busy.temperature_celsius, busy.power_usage_watts) == (
        87.0,
        71.0,
        612.0,
    )
    assert (busy.unhealthy, busy.parent_id) == (False, None)
    # GPUStack's GPU-<ASIC serial> and the AMD device plugin's PCI address; HAMi's AMD plugin
    # registers the amdsmi UUID, the canonical id itself.
    assert busy.aliases == (fake.gpustack_id(0), "0000:05:00.0")
    assert idle.cores_utilization_percent == 0.0  # measured idle, not absent
    assert reading.driver_version == "6.12.12" and reading.via == VIA_AMDSMI
    # The wheel's own answer about itself is kept; no card was carved, so no process list.
    assert payload["amdsmi_get_lib_version"]["major"] == 26
    assert all(
        "amdsmi_get_gpu_process_list" not in d for s in payload["sockets"] for d in s["processors"]
    )


# The figures no amdsmi call answers, `unsupported` on every board.
NO_AMD_CALL = dict.fromkeys(
    (
        "ecc_corrected_volatile",  # amdsmi's counts are "total" (issue 43)
        "ecc_uncorrected_volatile",
        "ecc_corrected_aggregate",
        "ecc_uncorrected_aggregate",
        "remapped_rows_correctable",
        "pcie_replays",  # amdsmi's replay counter counts NAKs: pcie_naks (issue 43)
        # No SM-level, tensor, pipe, bandwidth or link counter and no vector unit (issue 41).
        *AMD_ACTIVITY_UNSTATED,
    ),
    Reason.UNSUPPORTED,
)


def test_energy_clocks_and_replays_through_the_real_wheel(node) -> None:  # type: ignore[no-untyped-def]
    """(R-X7) The energy counter times its resolution (µJ) in joules, clocks in Hz, the PCIe
    replay counter; NOT_SUPPORTED is that figure absent with `unsupported`; the wheel's "N/A"
    and UINT64_MAX are `invalid_data`, never published; amdsmi has no SM clock domain, so the
    SM clock is `unsupported` rather than the graphics clock twice."""
    (payload,) = rounds(node(scenarios.health_figures()), ReadRequest(), 1)
    full, blind, odd = (c.health for c in AmdBackend().parse(payload).cards)
    assert full is not None and blind is not None and odd is not None
    assert full.number(H.ENERGY_JOULES) == pytest.approx(
        15.3, abs=1e-5
    )  # 1,000,000 counts of 15.3 µJ
    assert (
        full.number(H.CLOCK_GRAPHICS_HZ),
        full.number(H.CLOCK_MEMORY_HZ),
        full.number(H.PCIE_NAKS),
    ) == (
        2_100_000_000,
        1_300_000_000,
        4,
    )
    # No SM domain, and no error events by code (issue 29): both `unsupported`.
    assert dict(full.reasons) == {
        "clock_sm_hz": Reason.UNSUPPORTED,
        "xid_errors": Reason.UNSUPPORTED,
        **NO_AMD_CALL,
    }
    assert dict(blind.reasons) == {
        "energy_joules": Reason.UNSUPPORTED,
        "clock_memory_hz": Reason.UNSUPPORTED,
        "clock_sm_hz": Reason.UNSUPPORTED,
        "pcie_naks": Reason.UNSUPPORTED,
        "xid_errors": Reason.UNSUPPORTED,
        **NO_AMD_CALL,
    }
    assert (
        blind.number(H.ENERGY_JOULES),
        blind.number(H.CLOCK_MEMORY_HZ),
        blind.number(H.PCIE_NAKS),
    ) == (None, None, None)
    assert blind.number(H.CLOCK_GRAPHICS_HZ) == 2_100_000_000
    assert dict(odd.reasons) == {
        "clock_graphics_hz": Reason.INVALID_DATA,
        "clock_memory_hz": Reason.INVALID_DATA,  # 0xFFFF: ROCm SMI's "absent" (issue 43)
        "clock_sm_hz": Reason.UNSUPPORTED,
        "pcie_naks": Reason.INVALID_DATA,
        "xid_errors": Reason.UNSUPPORTED,
        **NO_AMD_CALL,
    }
    assert (
        odd.number(H.CLOCK_GRAPHICS_HZ),
        odd.number(H.PCIE_NAKS),
        odd.number(H.ENERGY_JOULES),
    ) == (None, None, 0.0)


def test_cpx_card_eight_xcps_under_their_physical_card(node) -> None:  # type: ignore[no-untyped-def]
    (payload,) = rounds(node(scenarios.cpx_eight_xcps()), ReadRequest(), 1)
    cards = by_id(AmdBackend().parse(payload))
    physical = cards[fake.gpustack_id(1)]
    xcps = [cards[fake.uuid_of(1, k)] for k in range(8)]
    assert len(cards) == 1 + 1 + 8 and len({c.id for c in xcps}) == 8
    # Board figures on the physical card only, read on XCP 0; never on a partition's entry.
    assert (physical.temperature_celsius, physical.power_usage_watts) == (55.0, 402.0)
    assert (physical.memory_total_mib, physical.cores_utilization_percent) == (None, None)
    assert dict(physical.address) == {"socket": 1, "compute_partition": "CPX"}
    assert all(x.parent_id == physical.id for x in xcps)
    assert all(x.temperature_celsius is None and x.power_usage_watts is None for x in xcps)
    # Each XCP's own memory, and its own GFX busy from the card's GPU metrics table (its
    # `xcp_stats` entry), where its handle answers "N/A" for gfx_activity (issue 41).
    assert (xcps[0].memory_used_mib, xcps[0].cores_utilization_percent) == (20_480, 91.0)
    assert [x.cores_utilization_percent for x in xcps[1:]] == [0.0, 64.0] + [0.0] * 5
    assert [x.memory_used_mib for x in xcps[:3]] == [20_480, 12, 9_216]
    assert [x.index for x in xcps] == list(range(1, 9))
    # XCP 0 is the PCI device the AMD device plugin names; the others its amdgpu_xcp_<N>.
    assert "0000:65:00.0" in xcps[0].aliases
    assert [x.aliases[-1] for x in xcps[1:]] == [f"amdgpu_xcp_{n}" for n in range(7)]
    # The power and temperature calls were made on the first XCP only.
    processors = payload["sockets"][1]["processors"]
    assert ["amdsmi_get_power_info" in p for p in processors] == [True] + [False] * 7


def test_partitions_found_by_the_recorded_id(node) -> None:  # type: ignore[no-untyped-def]
    parent = fake.gpustack_id(1)
    wanted = {
        (parent, fake.uuid_of(1, 0)),
        (parent, "amdgpu_xcp_1"),  # the device plugin's name for XCP 2
        (parent, fake.uuid_of(1, 5)),
        (parent, "not-a-partition"),
        (fake.gpustack_id(0), fake.uuid_of(0)),  # a whole card is no partition
    }
    (payload,) = rounds(
        node(scenarios.cpx_eight_xcps()), ReadRequest(partition_ids=frozenset(wanted)), 1
    )
    got = {p.id: p for p in AmdBackend().parse(payload).partitions}
    busy, second, idle = got[fake.uuid_of(1, 0)], got[fake.uuid_of(1, 2)], got[fake.uuid_of(1, 5)]
    assert (busy.parent_id, busy.memory_total_mib, busy.memory_used_mib) == (parent, 24_574, 20_480)
    assert (busy.cores_percent, busy.cores_reason) == (91.0, None)
    assert "amdgpu_xcp_1" in second.aliases and second.memory_used_mib == 9_216
    assert (second.cores_percent, second.cores_reason) == (64.0, None)
    # A secondary XCP answers its memory (idle: measured 0) and the table its GFX busy, 0.
    assert (idle.memory_used_mib, idle.memory_reason) == (0, None)
    assert (idle.cores_percent, idle.cores_reason) == (0.0, None)
    assert got["not-a-partition"].memory_reason is Reason.TRANSIENT_DRIVER_ERROR
    assert got[fake.uuid_of(0)].memory_reason is Reason.UNSUPPORTED


def _cpx_partitions(node, doc: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:  # type: ignore[no-untyped-def]
    """One read of `doc` asking for XCPs 0, 1 and 2 of card 1 as partitions: the payload and
    the partitions by id."""
    parent = fake.gpustack_id(1)
    wanted = frozenset((parent, fake.uuid_of(1, k)) for k in range(3))
    (payload,) = rounds(node(doc), ReadRequest(partition_ids=wanted), 1)
    return payload, {p.id: p for p in AmdBackend().parse(payload).partitions}


def test_the_gpu_metrics_table_is_read_once_a_card_on_its_board(node) -> None:  # type: ignore[no-untyped-def]
    """The wheel's answer is kept bounded: the card's averages and each XCP's XCC figures, the
    XCC slots no partition has as the wheel's "N/A" (0xFFFFFFFF), never 4294967295."""
    payload, _ = _cpx_partitions(node, scenarios.cpx_eight_xcps())
    whole = payload["sockets"][0]["processors"][0]["amdsmi_get_gpu_metrics_info"]
    assert whole["average_gfx_activity"] == 3 and whole["average_umc_activity"] == 1
    processors = payload["sockets"][1]["processors"]
    assert ["amdsmi_get_gpu_metrics_info" in p for p in processors] == [True] + [False] * 7
    table = processors[0]["amdsmi_get_gpu_metrics_info"]
    assert table["num_partition"] == 8
    assert [row[0] for row in table["xcp_stats.gfx_busy_inst"]] == [91, 0, 64, 0, 0, 0, 0, 0]
    assert all(row[1:] == ["N/A"] * 7 for row in table["xcp_stats.gfx_busy_inst"])
    assert set(table) == {
        "average_gfx_activity",
        "average_umc_activity",
        "average_mm_activity",
        "num_partition",
        "xcp_stats.gfx_busy_inst",
    }


def test_an_xcp_is_the_mean_of_its_own_xccs_never_the_boards_average(node) -> None:  # type: ignore[no-untyped-def]
    doc = scenarios.cpx_eight_xcps()
    xcps = [d for d in doc["devices"] if d["socket"] == 1]
    xcps[0]["xcc_busy"] = [90, 41]  # a DPX-like XCP of two XCCs
    xcps[1]["xcc_busy"] = [0xFFFFFFFF, 30]  # one XCC the firmware left unfilled
    xcps[2]["xcc_busy"] = []  # no XCC answered: absent, not 0
    _, got = _cpx_partitions(node, doc)
    assert (got[fake.uuid_of(1, 0)].cores_percent, got[fake.uuid_of(1, 0)].cores_reason) == (
        65.5,
        None,
    )
    assert got[fake.uuid_of(1, 1)].cores_percent == 30.0
    assert (got[fake.uuid_of(1, 2)].cores_percent, got[fake.uuid_of(1, 2)].cores_reason) == (
        None,
        Reason.UNSUPPORTED,
    )


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"faults": {"amdsmi_get_gpu_metrics_info": fake.NOT_SUPPORTED}}, Reason.UNSUPPORTED),
        ({"faults": {"amdsmi_get_gpu_metrics_info": fake.NO_PERM}}, Reason.PERMISSION),
        ({"metrics_revision": 5}, Reason.UNSUPPORTED),  # before the per-XCP stats (v1.6)
    ],
)
def test_a_table_that_does_not_state_the_xcp_leaves_it_absent_with_its_reason(  # type: ignore[no-untyped-def]
    node, change: dict[str, Any], reason: Reason
) -> None:
    """XCP 0's handle answers gfx_activity 91 (the board's average_gfx_activity, as amdsmi reads
    it from the same table): never published as the partition's own."""
    doc = scenarios.cpx_eight_xcps()
    next(d for d in doc["devices"] if d["socket"] == 1).update(change)
    payload, got = _cpx_partitions(node, doc)
    assert [(p.cores_percent, p.cores_reason) for p in got.values()] == [(None, reason)] * 3
    cards = by_id(AmdBackend().parse(payload))
    assert [cards[fake.uuid_of(1, k)].cores_utilization_percent for k in range(8)] == [None] * 8
    assert cards[fake.uuid_of(0)].cores_utilization_percent == 3.0  # a whole card: unchanged


def test_a_device_lost_mid_read_keeps_its_name_and_is_unhealthy(node) -> None:  # type: ignore[no-untyped-def]
    first, second = rounds(node(scenarios.device_lost_mid_read()), ReadRequest(), 2)
    parse = AmdBackend().parse
    assert [c.unhealthy for c in parse(first).cards] == [False] * 4
    cards = parse(second).cards
    lost = cards[2]
    assert (lost.id, lost.index, lost.unhealthy_reason) == (fake.uuid_of(2), 2, "device_lost")
    assert (lost.memory_total_mib, lost.cores_utilization_percent) == (None, None)
    assert fake.gpustack_id(2) in lost.aliases  # still matched by what allocators recorded
    assert [c.unhealthy for i, c in enumerate(cards) if i != 2] == [False] * 3


def test_a_device_lost_inside_one_read_is_lost_with_its_figures_absent(node) -> None:  # type: ignore[no-untyped-def]
    # Card 1 answers its UUID in the second read, then NOT_FOUND to the rest of that read;
    # card 2 does the same in the first read. Both are carved (their processes asked for).
    wanted = carved(fake.uuid_of(0), fake.gpustack_id(1), fake.uuid_of(2))
    first, second = rounds(node(scenarios.device_lost_within_read()), wanted, 2)
    parse = AmdBackend().parse
    before = by_id(parse(first))
    assert before[fake.uuid_of(1)].unhealthy is False
    assert before[fake.uuid_of(1)].memory_used_mib == 2_000
    cards = by_id(parse(second))
    lost = cards[fake.uuid_of(1)]
    assert (lost.index, lost.unhealthy, lost.unhealthy_reason) == (1, True, "device_lost")
    figures = (
        lost.memory_total_mib,
        lost.memory_used_mib,
        lost.cores_utilization_percent,
        lost.temperature_celsius,
        lost.power_usage_watts,
    )
    assert figures == (None,) * 5
    # What it said of itself the round before survives the read it fell off in: its name and
    # the ids allocators recorded, so its grant still finds it (and sees it unhealthy).
    assert lost.name == "AMD Instinct MI300X"
    assert lost.aliases == (fake.gpustack_id(1), "0000:15:00.0")
    processor = second["sockets"][1]["processors"][0]
    assert processor["amdsmi_get_gpu_device_uuid"] == fake.uuid_of(1)
    assert processor["amdsmi_get_gpu_asic_info"] == {"error": "AmdSmiLibraryException", "code": 31}
    # Lost in its first read: only its UUID was ever answered.
    never = cards[fake.uuid_of(2)]
    assert (never.unhealthy_reason, never.name, never.aliases) == ("device_lost", None, ())
    assert (never.memory_total_mib, never.cores_utilization_percent) == (None, None)
    assert parse(first).cards[2].unhealthy_reason == "device_lost"
    # Its process list answered NOT_FOUND: "could not", never an empty list.
    answers = {a.device_id: a for a in parse(second).processes}
    assert answers[fake.uuid_of(1)].rows == ()
    assert answers[fake.uuid_of(1)].memory_reason is Reason.TRANSIENT_DRIVER_ERROR
    assert [r.pid for r in answers[fake.uuid_of(0)].rows] == [9500]
    assert cards[fake.uuid_of(0)].unhealthy is False


def test_ecc_bad_pages_and_throttling_through_the_real_wheel(node) -> None:  # type: ignore[no-untyped-def]
    """(R-X7) ECC counts as volatile (assumed: amdsmi says "accumulated", no lifetime) with no
    aggregate, from the total call, else the enabled blocks summed (a block without a counter
    adds nothing); bad pages as memory repair (reserved as uncorrectable rows, pending and
    failed as flags) and a page that could not be retired making the card unhealthy; throttle
    reasons from the violation status's flags, a reason none of whose flags answers left out;
    NOT_SUPPORTED is `unsupported`, a sentinel is `invalid_data`, never a count, and a count
    past any counter is refused by the range check as `invalid_data`."""
    (payload,) = rounds(node(scenarios.ecc_pages_throttle()), ReadRequest(), 1)
    reading, refused = plausible_reading(AmdBackend().parse(payload))
    full, blind, blocks, odd = reading.cards
    assert full.health is not None and blind.health is not None
    assert blocks.health is not None and odd.health is not None
    assert (
        full.health.number(H.ECC_CORRECTED_TOTAL),
        full.health.number(H.ECC_UNCORRECTED_TOTAL),
    ) == (12, 0)
    assert (
        full.health.number(H.REMAPPED_ROWS_UNCORRECTABLE),
        full.health.number(H.REMAPPED_ROWS_PENDING),
        full.health.number(H.REMAPPED_ROWS_FAILED),
    ) == (2, 1, 0)
    assert full.health.throttle_reasons == (
        ("sw_power_cap", True),
        ("sw_thermal_slowdown", True),  # the HBM's thermal limit, the socket's not
        ("hw_thermal_slowdown", False),
    )
    assert dict(full.health.reasons) == {
        "clock_sm_hz": Reason.UNSUPPORTED,
        "xid_errors": Reason.UNSUPPORTED,
        **NO_AMD_CALL,
    }
    assert (full.unhealthy, full.unhealthy_reason) == (False, None)  # pending is no failure
    # The wheel's own answers, recorded under the C names: the scalar flags, each page's status.
    board = payload["sockets"][0]["processors"][0]
    assert board["amdsmi_get_violation_status"]["active_vr_thrm"] is True  # recorded, not mapped
    assert [p["status"] for p in board["amdsmi_get_gpu_bad_page_info"]] == [0, 0, 1]
    assert sorted(board["amdsmi_get_gpu_ecc_count"]) == ["GFX", "MMHUB", "SDMA", "UMC", "XGMI_WAFL"]
    assert board["amdsmi_get_gpu_total_ecc_count"]["deferred_count"] == 3
    for figure in (
        "ecc_corrected_total",
        "ecc_uncorrected_total",
        "remapped_rows_uncorrectable",
        "remapped_rows_pending",
        "remapped_rows_failed",
        "throttle_reasons",
    ):
        assert blind.health.reason(figure) is Reason.UNSUPPORTED, figure
        assert blind.health.get(figure) is None, figure
    # The total not served: UMC 5 + GFX 2, SDMA without a counter.
    assert (
        blocks.health.number(H.ECC_CORRECTED_TOTAL),
        blocks.health.number(H.ECC_UNCORRECTED_TOTAL),
    ) == (7, 0)
    assert blocks.health.number(H.REMAPPED_ROWS_FAILED) == 1
    assert (blocks.unhealthy, blocks.unhealthy_reason) == (True, "retired_pages_unreservable")
    assert blocks.health.throttle_reasons is None
    assert blocks.health.reason("throttle_reasons") is Reason.UNSUPPORTED  # all UINT8_MAX
    # UINT64_MAX is a sentinel (and makes no card unhealthy); 2^63 + 1 is past any counter.
    assert odd.health.number(H.ECC_UNCORRECTED_TOTAL) is None
    assert odd.health.reason("ecc_uncorrected_total") is Reason.INVALID_DATA
    assert odd.health.number(H.ECC_CORRECTED_TOTAL) is None
    assert odd.health.reason("ecc_corrected_total") is Reason.INVALID_DATA
    assert "cards[3].health.ecc_corrected_total" in refused
    assert (odd.unhealthy, odd.unhealthy_reason) == (False, None)
    assert odd.health.reason("remapped_rows_uncorrectable") is Reason.INVALID_DATA


def test_the_violation_status_is_asked_at_most_every_five_seconds(
    rocm_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(R-X7) The violation status costs its card 100 ms inside the library: read one second
    apart, a board's answer is read at the first round and carried, with when it was read,
    until 5 s have passed; the other figures are read every round. At the default 15 s period
    (the other tests' clock) every round asks again."""
    doc = scenarios.ecc_pages_throttle()
    monkeypatch.setenv(fake.SCENARIO_ENV, str(fake.write(tmp_path / "s.txt", doc)))
    ticks = iter(1000.0 + i for i in range(7))
    backend = AmdBackend({"amd_smi": str(rocm_root)}, clock=lambda: next(ticks), sysfs=tmp_path)
    payloads = rounds(backend, ReadRequest(), 7)
    boards = [p["sockets"][0]["processors"][0] for p in payloads]
    assert [b["violationReadAt"] for b in boards] == [1000.0] * 5 + [1005.0] * 2
    assert all(b["amdsmi_get_violation_status"]["active_ppt_pwr"] is True for b in boards)
    throttled = [AmdBackend().parse(p).cards[0].health for p in payloads]
    assert all(
        h is not None and ("sw_power_cap", True) in (h.throttle_reasons or ()) for h in throttled
    )


def test_uncorrectable_ecc_makes_the_card_or_its_board_unhealthy(node) -> None:  # type: ignore[no-untyped-def]
    (payload,) = rounds(node(scenarios.ecc_uncorrectable()), ReadRequest(), 1)
    cards = by_id(AmdBackend().parse(payload))
    assert (cards[fake.uuid_of(0)].unhealthy, cards[fake.uuid_of(0)].unhealthy_reason) == (
        True,
        "ecc_uncorrectable",
    )
    # Correctable errors alone are no fault of the card.
    assert (cards[fake.uuid_of(1)].unhealthy, cards[fake.uuid_of(1)].unhealthy_reason) == (
        False,
        None,
    )
    # CPX: the board's count is read on XCP 0, and the physical card carries the verdict (a
    # grant on any of its XCPs reads its board's health).
    physical = cards[fake.gpustack_id(2)]
    assert (physical.unhealthy, physical.unhealthy_reason) == (True, "ecc_uncorrectable")
    assert cards[fake.uuid_of(2, 0)].unhealthy_reason == "ecc_uncorrectable"
    assert [cards[fake.uuid_of(2, k)].unhealthy for k in range(1, 8)] == [False] * 7
    processors = payload["sockets"][2]["processors"]
    assert processors[0]["amdsmi_get_gpu_total_ecc_count"]["uncorrectable_count"] == 1
    assert ["amdsmi_get_gpu_total_ecc_count" in p for p in processors] == [True] + [False] * 7
    # A count on a secondary XCP is never read: the board answers on XCP 0 alone.
    assert cards[fake.gpustack_id(3)].unhealthy is False


def test_a_card_that_leaves_enumeration_is_gone_next_round(node) -> None:  # type: ignore[no-untyped-def]
    doc = scenarios.spx_pair()
    doc["devices"][0]["gone_after"] = 1  # round one's enumeration, then gone
    first, second = rounds(node(doc), ReadRequest(), 2)
    assert len(AmdBackend().parse(first).cards) == 2
    assert [c.id for c in AmdBackend().parse(second).cards] == [fake.uuid_of(1)]


def test_a_node_without_cards_reads_none(node) -> None:  # type: ignore[no-untyped-def]
    (payload,) = rounds(node(fake.scenario([])), ReadRequest(), 1)
    assert AmdBackend().parse(payload).cards == ()


def test_a_driver_that_is_not_loaded_makes_the_backend_unavailable(node) -> None:  # type: ignore[no-untyped-def]
    backend = node(fake.scenario([fake.card(0)], init=34))  # AMDSMI_STATUS_DRIVER_NOT_LOADED
    with pytest.raises(BackendUnavailable, match="initialised: AMDSMI_STATUS_DRIVER_NOT_LOADED"):
        backend.open()


# -- per-process -------------------------------------------------------------------------------


def test_engine_time_between_two_rounds_and_no_baseline_first(node) -> None:  # type: ignore[no-untyped-def]
    first, second = rounds(node(scenarios.engine_time_advancing()), carved(fake.uuid_of(0)), 2)
    (before,) = AmdBackend().parse(first).processes
    assert before.cores_reason is Reason.NO_BASELINE
    assert [r.cores_percent for r in before.rows] == [None, None]  # absent, never 0
    assert [r.memory_bytes for r in before.rows] == [30 * GIB, 12 * GIB]  # memory answers
    (after,) = AmdBackend().parse(second).processes
    assert after.cores_reason is None
    # 6 s and 1.5 s of engine time over a 15 s round.
    assert [(r.pid, r.cores_percent) for r in after.rows] == [(7101, 40.0), (7102, 10.0)]
    assert (
        second["sockets"][0]["processors"][0]["processPreviousAt"]
        == first["sockets"][0]["processors"][0]["processAt"]
    )


def test_cu_occupancy_invalid_on_one_row_alone(node) -> None:  # type: ignore[no-untyped-def]
    _, second = rounds(node(scenarios.cu_occupancy_invalid()), carved(fake.uuid_of(0)), 2)
    listed = second["sockets"][0]["processors"][0]["amdsmi_get_gpu_process_list"]
    assert [p["cu_occupancy"] for p in listed] == [100, "N/A", 38]  # as the wheel says it
    (answer,) = AmdBackend().parse(second).processes
    # KFD processes: the engine counter never moves, so the CUs they occupy of 304 answer.
    assert [(r.pid, r.cores_percent) for r in answer.rows] == [
        (6101, 32.89),
        (6102, None),
        (6103, 12.5),
    ]
    assert [r.memory_bytes for r in answer.rows] == [10 * GIB, 10 * GIB, 8 * GIB]
    assert (answer.memory_reason, answer.cores_reason) == (None, None)


def test_out_of_resources_is_truncated_never_complete(node) -> None:  # type: ignore[no-untyped-def]
    (payload,) = rounds(node(scenarios.out_of_resources()), carved(fake.uuid_of(0)), 1)
    listed = payload["sockets"][0]["processors"][0]["amdsmi_get_gpu_process_list"]
    assert listed == {"error": "AmdSmiLibraryException", "code": 15}
    (answer,) = AmdBackend().parse(payload).processes
    assert (answer.memory_reason, answer.cores_reason) == (Reason.TRUNCATED, Reason.TRUNCATED)
    assert answer.rows == () and answer.reads_truncated == 1


def test_a_partitioned_card_asked_for_whole_lists_every_xcp(node) -> None:  # type: ignore[no-untyped-def]
    whole = fake.gpustack_id(1)
    _, second = rounds(node(scenarios.cpx_eight_xcps()), carved(whole), 2)
    answers = {a.device_id: a for a in AmdBackend().parse(second).processes}
    rows = answers[whole].rows
    assert [(r.pid, r.partition_id) for r in rows] == [
        (5101, fake.uuid_of(1, 0)),
        (5301, fake.uuid_of(1, 2)),
    ]
    # 38 of an XCP's 38 CUs is 12.5% of the card's 304; on its own XCP, 100%.
    assert [r.cores_percent for r in rows] == [12.5, 6.25]
    assert [r.cores_percent for r in answers[fake.uuid_of(1, 0)].rows] == [100.0]


# -- ROCm 7.2.0: ROCm SMI answers ----------------------------------------------------------------


def test_rocm_720_reads_processes_through_rocm_smi(node, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "calls.log"
    wanted = carved(fake.uuid_of(0), fake.uuid_of(1), fake.uuid_of(2, 0))
    (payload,) = rounds(node(scenarios.rocm_720(call_log=str(log))), wanted, 1)
    reading = AmdBackend().parse(payload)
    assert reading.via == VIA_ROCM_SMI and payload["rocmVersion"] == "7.2.0"
    # ROCm SMI initialised before amdsmi (GPUStack saw the other order abort).
    assert log.read_text().split() == ["rsmi_init", "amdsmi_init"]
    answers = {a.device_id: a for a in reading.processes}
    # Each device's own processes, though amdsmi here lists every process under every device;
    # rsmi's cu_occupancy is already a percent of the device's CUs; 0xFFFFFFFF absent alone.
    assert [(r.pid, r.memory_bytes, r.cores_percent) for r in answers[fake.uuid_of(0)].rows] == [
        (9101, 30 * GIB, 50.0),
        (9102, 2 * GIB, None),
    ]
    assert [(r.pid, r.cores_percent) for r in answers[fake.uuid_of(1)].rows] == [(9201, 25.0)]
    assert [(r.pid, r.cores_percent) for r in answers[fake.uuid_of(2, 0)].rows] == [(9301, 50.0)]
    # No baseline is needed: cu_occupancy is an instant figure.
    assert all(a.cores_reason is None for a in answers.values())
    assert all("amdsmi_get_gpu_process_list" not in d for d in payload["sockets"][0]["processors"])


def test_rocm_720_a_pid_that_exits_between_the_calls_is_no_row(node) -> None:  # type: ignore[no-untyped-def]
    (payload,) = rounds(node(scenarios.rocm_720(rsmi_exited=[9102])), carved(fake.uuid_of(0)), 1)
    (answer,) = [a for a in AmdBackend().parse(payload).processes if a.device_id == fake.uuid_of(0)]
    assert [r.pid for r in answer.rows] == [9101] and answer.memory_reason is None


def test_rocm_720_without_rocm_smi_withholds_the_process_list(node) -> None:  # type: ignore[no-untyped-def]
    backend = node(scenarios.rocm_720(), rocm_smi="/nonexistent/librocm_smi64.so.7")
    (payload,) = rounds(backend, carved(fake.uuid_of(0)), 1)
    reading = AmdBackend().parse(payload)
    assert reading.via == VIA_WITHHELD
    (answer,) = reading.processes
    assert (answer.memory_reason, answer.cores_reason) == (Reason.UNSUPPORTED, Reason.UNSUPPORTED)
    assert answer.rows == ()
    assert len(reading.cards) == 2 + 1 + 8  # card figures still come from amdsmi


def test_an_unknown_rocm_release_reads_amdsmi(node) -> None:  # type: ignore[no-untyped-def]
    backend = node(scenarios.spx_pair(), rocm_core="/nonexistent/librocm-core.so.1")
    (payload,) = rounds(backend, ReadRequest(), 1)
    assert payload["rocmVersion"] is None and payload["processPath"] == VIA_AMDSMI


# -- through the monitor round ------------------------------------------------------------------


def sliced_round(backend: AmdBackend, tmp: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """One monitor round over `backend` with two GPUStack slices on card 0 (PIDs 9601, 9602):
    the snapshot as served, and each Instance's per-grant figures as /metrics publishes them."""
    from tests.world import pod, process

    key = "device.gpustack.ai/accelerator.allocated"
    slot = {"id": fake.gpustack_id(0), "index": 0, "mode": 3, "allocated": 800_000}
    pods = [
        pod(name, instance=name, annotations={key: gpustack("amd", [slot])})
        for name in ("big", "even")
    ]
    process(tmp / "proc", 9601, "big")
    process(tmp / "proc", 9602, "even")
    published = kit.one_round(backend, tmp / "proc", pods)
    figures: dict[str, Any] = {}
    for family in text_string_to_metric_families(published.metrics.plain.decode()):
        if family.name.startswith("gpustack_instance_accelerator_"):
            field = family.name.removeprefix("gpustack_instance_accelerator_")
            for sample in family.samples:
                figures.setdefault(sample.labels["instance_name"], {})[field] = sample.value
    return json.loads(published.snapshot_json), figures


@pytest.mark.parametrize(
    ("rocm", "rocm_smi", "via"),
    [
        ("7.0.2", None, "amdsmi"),
        ("7.2.0", None, "rocm_smi"),
        ("7.2.0", "/nonexistent/librocm_smi64.so.7", "amdsmi; process list withheld"),
    ],
)
def test_the_snapshot_says_which_path_answered_and_mib_round_up(
    node, tmp_path: Path, rocm: str, rocm_smi: str | None, via: str
) -> None:  # type: ignore[no-untyped-def]
    libraries = {"rocm_smi": rocm_smi} if rocm_smi else {}
    backend = node(scenarios.unaligned_process_bytes(rocm=rocm), **libraries)
    snap, figures = sliced_round(backend, tmp_path)
    (status,) = snap["backends"]
    assert (status["manufacturer"], status["state"], status["via"]) == ("amd", "ok", via)
    if via == "amdsmi; process list withheld":
        # The broken list is not read: the slices' memory is absent, never 0 or a guess.
        assert "memory_used_mib" not in figures["big"]
        assert "memory_used_mib" not in figures["even"]
        return
    # 10 GiB and one byte is 10,241 MiB (rounded up, once); exactly 2 GiB stays 2,048 MiB.
    assert figures["big"]["memory_used_mib"] == 10_241.0
    assert figures["even"]["memory_used_mib"] == 2_048.0


# -- the library, once per process ---------------------------------------------------------------

# Each runs in a fresh interpreter: the wheel binds its library at its first import, for good.
PROBE = """
import sys
from devicemanager.backend import BackendUnavailable
from devicemanager.figures.ranges import plausible_reading
from devicemanager.model import ReadRequest
from vendors.amd import AmdBackend
for path in sys.argv[1:]:
    try:
        backend = AmdBackend({"amd_smi": path} if path != "-" else None)
        backend.open()
        print("open", len(backend.parse(backend.read(ReadRequest())).cards))
        backend.close()
    except BackendUnavailable as exc:
        print("unavailable:", exc)
"""


def probe(*paths: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PROBE, *paths],
        capture_output=True,
        text=True,
        env=agent_env(env),
        cwd=REPO,
        check=True,
        timeout=60,
    )


@pytest.fixture
def scenario_file(tmp_path: Path) -> Iterator[Path]:
    yield fake.write(tmp_path / "scenario.txt", scenarios.spx_pair())


def test_without_its_library_the_wheel_says_nothing_and_the_backend_is_unavailable(
    tmp_path: Path,
) -> None:
    # No ROCm anywhere: the wheel prints two lines and raises KeyError at import.
    out = probe("-", "/nonexistent/lib/libamd_smi.so", env={"ROCM_PATH": str(tmp_path)})
    assert out.stdout.splitlines() == [
        "unavailable: libamd_smi.so cannot be loaded",
        "unavailable: libamd_smi.so cannot be loaded",
    ]
    assert "Unable to find" not in out.stdout + out.stderr and "/nonexistent" not in out.stdout


def test_the_wheel_binds_one_library_per_process(
    rocm_root: Path, tmp_path: Path, scenario_file: Path
) -> None:
    other = fake.build(tmp_path / "other-rocm", only=["amd_smi"])
    env = {fake.SCENARIO_ENV: str(scenario_file)}
    # The configured directory is a ROCm root, its lib/, or the file itself: all one library.
    lib = rocm_root / "lib"
    out = probe(str(rocm_root), str(lib), str(lib / "libamd_smi.so"), str(other), env=env)
    assert out.stdout.splitlines() == [
        "open 2",
        "open 2",
        "open 2",
        "unavailable: the amdsmi package is already bound to another libamd_smi.so in this "
        "process (it loads its library once); restart the agent to load another",
    ]
    assert out.stderr == ""


def test_a_library_older_than_the_wheel_is_named_as_skew(tmp_path: Path) -> None:
    from tests.fakelib import FakeLibrary

    # The fake without its generated stubs: the wheel finds a symbol missing at import.
    FakeLibrary(
        source=fake.AMDSMI_SOURCE,
        soname="libamd_smi.so",
        scenario_env=fake.SCENARIO_ENV,
        includes=(fake.HERE,),
    ).build(tmp_path / "old" / "lib")
    out = probe(str(tmp_path / "old"))
    (line,) = out.stdout.splitlines()
    assert line.startswith("unavailable: libamd_smi.so lacks amdsmi_")
    assert line.endswith("which the amdsmi package binds (version skew)")


def test_a_library_file_of_any_name_is_handed_to_the_wheel(
    rocm_root: Path, tmp_path: Path, scenario_file: Path
) -> None:
    # Not under <root>/lib/libamd_smi.so: the backend gives the wheel a private ROCm root.
    renamed = tmp_path / "vendor" / "libamd_smi.so.26.0.2"
    renamed.parent.mkdir()
    renamed.write_bytes((rocm_root / "lib" / "libamd_smi.so").read_bytes())
    out = probe(str(renamed), env={fake.SCENARIO_ENV: str(scenario_file)})
    assert out.stdout.splitlines() == ["open 2"]


# -- the whole agent ---------------------------------------------------------------------------


def gpustack(manufacturer: str, accelerators: list[dict[str, Any]]) -> str:
    return json.dumps(
        {
            "main": {
                "devices": {
                    "groups": [
                        {"id": 0, "manufacturer": manufacturer, "accelerators": accelerators}
                    ]
                }
            }
        }
    )


def test_the_whole_agent_on_the_fake_rocm(rocm_root: Path, tmp_path: Path, launch) -> None:  # type: ignore[no-untyped-def]
    from tests.world import pod, process

    doc = scenarios.cpx_eight_xcps()
    scenario_path = fake.write(tmp_path / "scenario.txt", doc)
    physical = fake.gpustack_id(1)
    pods = [
        pod(
            "whole",
            annotations={
                "device.gpustack.ai/accelerator.allocated": gpustack(
                    "amd", [{"id": fake.gpustack_id(0), "index": 0, "mode": 1}]
                )
            },
            instance="whole",
        ),
        pod(
            "xcp0",
            annotations={
                "device.gpustack.ai/accelerator.allocated": gpustack(
                    "amd",
                    [
                        {
                            "id": physical,
                            "index": 1,
                            "mode": 4,
                            "allocatedPhysicalID": fake.uuid_of(1, 0),
                            "allocatedPhysicalProfile": "cpx",
                        }
                    ],
                )
            },
            instance="xcp0",
        ),
    ]
    for p in pods:
        p["spec"]["nodeName"] = "n1"
    process(tmp_path / "proc", 5101, "xcp0")
    agent = serve_fake_library(
        launch, "amd", rocm_root, tmp_path, env={fake.SCENARIO_ENV: str(scenario_path)}, pods=pods
    )
    with agent.client() as client:
        snap = client.get("/monitor/snapshot").json()
        text = client.get("/metrics").text
    (backend,) = snap["backends"]
    assert (backend["manufacturer"], backend["state"], backend.get("via")) == (
        "amd",
        "ok",
        "amdsmi",
    )
    (group,) = snap["groups"]
    cards = {c["id"]: c for c in group["accelerators"]}
    assert cards[fake.uuid_of(1, 3)]["parentID"] == physical
    assert (
        cards[physical]["temperature"] == 55.0 and cards[fake.uuid_of(1, 3)]["temperature"] is None
    )
    got = {
        f.name: [(s.labels, s.value) for s in f.samples]
        for f in text_string_to_metric_families(text)
    }

    def figure(name: str, instance: str) -> list[float]:
        return [
            v
            for ls, v in got[f"gpustack_instance_accelerator_{name}"]
            if ls["instance_name"] == instance
        ]

    # The whole card by GPUStack's id; the partition by its own capacity, its board's
    # temperature, compute read on its own handle.
    assert figure("memory_total_mib", "whole") == [196_592.0]
    assert figure("memory_total_mib", "xcp0") == [24_574.0]
    assert figure("temperature_celsius", "xcp0") == [55.0]
    assert figure("cores_utilization_percent", "xcp0") == [91.0]


# -- links and placement (R-X3) ------------------------------------------------------------------


def test_links_and_numa_nodes_through_the_real_wheel(node) -> None:  # type: ignore[no-untyped-def]
    """(R-X3) Per pair of physical cards the link amdsmi names (xGMI or PCIe, no count: amdsmi
    gives hops, not links), read between the sockets' board processors, so a CPX card's links
    and NUMA node are on its physical card and none on its XCPs; a link type amdsmi does not
    name as one of the two, and a NOT_SUPPORTED answer, place the pair nowhere (never "pcie");
    a NUMA node the library does not give is absent, not node 0."""
    (payload,) = rounds(node(scenarios.links_and_numa()), ReadRequest(), 1)
    cards = by_id(AmdBackend().parse(payload))
    one, two, four = fake.uuid_of(0), fake.uuid_of(1), fake.uuid_of(3)
    (board,) = [
        c.id for c in cards.values() if c.parent_id is None and c.id not in {one, two, four}
    ]

    def links(card_id: str) -> set[tuple[str, str, int | None]]:
        return links_of(cards[card_id])

    assert links(one) == {(two, "xgmi", None), (board, "xgmi", None), (four, "pcie", None)}
    assert links(two) == {(one, "xgmi", None)}
    assert links(board) == {(one, "xgmi", None)}
    assert links(four) == {(one, "pcie", None)}
    assert [cards[c].numa_node for c in (one, two, board, four)] == [0, 0, 1, None]
    xcps = [c for c in cards.values() if c.parent_id == board]
    assert len(xcps) == 8 and all((x.links, x.numa_node) == (None, None) for x in xcps)
    # One call per pair of sockets, not per XCP: four boards, six pairs.
    assert len(payload["topology"]["pairs"]) == 6


def test_amd_links_are_read_once_a_minute(node) -> None:  # type: ignore[no-untyped-def]
    """(R-X3) The backend's clock advances one 15 s period a round: the topology read in the
    first round is carried by the next three and read again in the fifth, 60 s later."""
    payloads = rounds(node(scenarios.links_and_numa()), ReadRequest(), 5)
    assert [p["topology"]["readAt"] for p in payloads] == [1000.0] * 4 + [1060.0]
