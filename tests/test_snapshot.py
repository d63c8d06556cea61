"""Pure assembly and JSON of the snapshot (R-S1, R-S3): nothing carried forward, absent is null."""

from __future__ import annotations

import dataclasses
import json

from devicemanager.figures import snapshot
from devicemanager.figures.snapshot import BackendResult
from devicemanager.model import (
    BackendState,
    BackendStatus,
    Card,
    CardHealth,
    CardLink,
    HealthFigure,
    HealthValue,
    Reason,
    VendorReading,
)

CARD = Card(
    id="GPU-1",
    index=1,
    name="X",
    memory_total_mib=100,
    memory_used_mib=25,
    cores_utilization_percent=None,
    temperature_celsius=40.0,
)


def ok(manufacturer: str, *cards: Card) -> BackendResult:
    return BackendResult(
        status=BackendStatus(manufacturer, BackendState.OK, 0.01, last_success=10.0),
        reading=VendorReading(manufacturer=manufacturer, cards=cards, driver_version="1"),
        read_at=10.0,
    )


def test_before_the_first_round_the_document_is_empty_with_go_zero_time() -> None:
    doc = snapshot.to_json(snapshot.empty(15.0, "n"))
    assert doc == {
        "timestamp": "0001-01-01T00:00:00Z",
        "periodSeconds": 15,
        "node": "n",
        "groups": [],
        "backends": [],
    }


def test_period_is_rounded_up_to_whole_seconds() -> None:
    assert snapshot.period_seconds(15.0) == 15
    assert snapshot.period_seconds(15.2) == 16
    assert snapshot.period_seconds(0.1) == 1


def test_only_backends_that_answered_this_round_have_a_group() -> None:
    failed = BackendResult(
        status=BackendStatus("amd", BackendState.TIMEOUT, 10.0, "no answer", last_success=5.0)
    )
    snap = snapshot.assemble(20.0, 15.0, "n", [failed, ok("nvidia", CARD)])
    assert [g.manufacturer for g in snap.groups] == ["nvidia"]
    doc = snapshot.to_json(snap)
    assert doc["backends"] == [
        {
            "manufacturer": "amd",
            "state": "timeout",
            "durationSeconds": 10.0,
            "error": "no answer",
            "lastSuccess": "1970-01-01T00:00:05.000Z",
        },
        {
            "manufacturer": "nvidia",
            "state": "ok",
            "durationSeconds": 0.01,
            "error": None,
            "lastSuccess": "1970-01-01T00:00:10.000Z",
        },
    ]


def test_card_fields_keep_reference_names_and_absent_is_null() -> None:
    doc = snapshot.to_json(snapshot.assemble(20.0, 15.0, "n", [ok("nvidia", CARD)]))
    (card,) = doc["groups"][0]["accelerators"]
    assert card == {
        "id": "GPU-1",
        "index": 1,
        "name": "X",
        "memory": 100,
        "memoryUsage": 25,
        "memoryUtilization": 25.0,
        "coresUtilization": None,
        "temperature": 40.0,
        "powerUsage": None,
        "unhealthy": False,
        "unhealthyReason": None,
    }


def test_cards_are_ordered_by_index_and_encoding_is_strict_json() -> None:
    second = Card(id="GPU-0", index=0)
    snap = snapshot.assemble(20.0, 15.0, "n", [ok("nvidia", CARD, second)])
    doc = json.loads(snapshot.encode(snap))
    assert [c["index"] for c in doc["groups"][0]["accelerators"]] == [0, 1]
    assert doc["groups"][0]["accelerators"][0]["memoryUtilization"] is None


def test_a_served_address_reads_back_its_numbers_and_names_and_nothing_else() -> None:
    # An Ascend NPU's structured address, as an agent serves it, beside what no backend writes:
    # a boolean (JSON true is not the number 1), a float, a null, a list.
    npu = {
        "id": "NPU-0",
        "index": 0,
        "address": {
            "card": 0,
            "device": 1,
            "bus": "0000:c1:00.0",
            "virtual": True,
            "ratio": 0.5,
            "logic": None,
            "phy": [1],
        },
    }
    card = snapshot.card_from_json(npu)
    assert card is not None
    assert card.address == (("card", 0), ("device", 1), ("bus", "0000:c1:00.0"))


H = HealthFigure
FIGURES: dict[HealthFigure, HealthValue | None] = {
    H.ECC_CORRECTED_VOLATILE: 0,
    H.ECC_UNCORRECTED_AGGREGATE: 2,
    H.REMAPPED_ROWS_PENDING: 1,
    H.ENERGY_JOULES: 1.5,
    H.THROTTLE_REASONS: (("gpu_idle", True), ("sw_power_cap", False)),
    H.CLOCK_SM_HZ: 1_980_000_000,
}
HEALTH = CardHealth.of(
    FIGURES,
    reasons=((H.PCIE_REPLAYS, Reason.UNSUPPORTED), (H.CLOCK_MEMORY_HZ, Reason.INVALID_DATA)),
)


def test_a_card_without_health_is_the_schema_of_before() -> None:
    """(R-X7) A card whose backend reads no health figures has no `health` key: consumers of the
    schema before issue 29 meet the same object (the field list is pinned above)."""
    doc = snapshot.to_json(snapshot.assemble(20.0, 15.0, "n", [ok("amd", CARD)]))
    assert "health" not in doc["groups"][0]["accelerators"][0]


def test_card_health_in_the_snapshot_is_null_when_absent_and_reads_back() -> None:
    """(R-X7) Every health figure is there, null when absent (a measured 0 stays 0), the reason
    for each absent one the library explained is given, and the object reads back whole."""
    card = dataclasses.replace(CARD, health=HEALTH)
    doc = json.loads(snapshot.encode(snapshot.assemble(20.0, 15.0, "n", [ok("nvidia", card)])))
    (served,) = doc["groups"][0]["accelerators"]
    assert served["health"] == {
        "eccErrors": {
            "corrected": {"volatile": 0, "aggregate": None},
            "uncorrected": {"volatile": None, "aggregate": 2},
        },
        "remappedRows": {"correctable": None, "uncorrectable": None, "pending": 1, "failed": None},
        "energyJoules": 1.5,
        "clockThrottleReasons": {"gpu_idle": True, "sw_power_cap": False},
        "clocksHz": {"sm": 1_980_000_000, "memory": None, "graphics": None},
        "pcieReplays": None,
        "absentReasons": {"pcie_replays": "unsupported", "clock_memory_hz": "invalid_data"},
    }
    back = snapshot.card_from_json(served)
    assert back is not None and back.health == HEALTH
    # What no agent writes is absent, never a figure: a boolean count, an unknown reason.
    served["health"]["pcieReplays"] = True
    served["health"]["absentReasons"]["energy_joules"] = "because"
    served["health"]["clockThrottleReasons"]["gpu_idle"] = 1
    odd = snapshot.card_from_json(served)
    assert odd is not None and odd.health is not None
    assert odd.health.number(H.PCIE_REPLAYS) is None and odd.health.reason(H.ENERGY_JOULES) is None
    assert odd.health.throttle_reasons == (("sw_power_cap", False),)


# -- links and placement (R-X3) ------------------------------------------------------------------


def test_a_card_without_links_has_neither_key_and_one_with_them_reads_back() -> None:
    """(R-X3) `links` and `numaNode` are optional: a card whose backend reads no topology has
    neither key (consumers of today's schema meet the same object); one that does lists each
    link with its peer, kind and count (null where none is given), and reads back whole; a read
    that placed no pair is an empty list, not an absent one."""
    doc = snapshot.to_json(snapshot.assemble(20.0, 15.0, "n", [ok("amd", CARD)]))
    assert {"links", "numaNode"}.isdisjoint(doc["groups"][0]["accelerators"][0])
    links = (CardLink("GPU-2", "nvlink", 18), CardLink("GPU-2", "pcie_switch"))
    placed = dataclasses.replace(CARD, links=links, numa_node=0)
    alone = dataclasses.replace(CARD, id="GPU-3", index=3, links=())
    doc = json.loads(
        snapshot.encode(snapshot.assemble(20.0, 15.0, "n", [ok("nvidia", placed, alone)]))
    )
    served, empty = doc["groups"][0]["accelerators"]
    assert served["links"] == [
        {"peerID": "GPU-2", "link": "nvlink", "count": 18},
        {"peerID": "GPU-2", "link": "pcie_switch", "count": None},
    ]
    assert served["numaNode"] == 0  # node 0 is a node, not absent
    assert (empty["links"], "numaNode" in empty) == ([], False)
    back = snapshot.card_from_json(served)
    assert back is not None and (back.links, back.numa_node) == (links, 0)
    # What no agent writes is left out: an unknown kind, a link without its peer.
    served["links"] += [{"peerID": "GPU-4", "link": "carrier_pigeon"}, {"link": "nvlink"}]
    odd = snapshot.card_from_json(served)
    assert odd is not None and odd.links == links


def test_error_codes_in_the_snapshot_only_where_read_and_read_back() -> None:
    """(R-X7) `health.xidErrors` ({code: count}) and `health.errorCodes` (hex codes active
    now) are there only for a card whose backend reads them, so the health object of every
    other card is the one before; both read back whole, `other` included."""
    codes = CardHealth.of(
        {
            **FIGURES,
            H.XID_ERRORS: (("13", 2), ("79", 1), ("other", 4)),
            H.ERROR_CODES: ("0x40F84E00",),
        },
        HEALTH.reasons,
    )
    doc = json.loads(
        snapshot.encode(
            snapshot.assemble(
                20.0, 15.0, "n", [ok("nvidia", dataclasses.replace(CARD, health=codes))]
            )
        )
    )
    (served,) = doc["groups"][0]["accelerators"]
    assert served["health"]["xidErrors"] == {"13": 2, "79": 1, "other": 4}
    assert served["health"]["errorCodes"] == ["0x40F84E00"]
    back = snapshot.card_from_json(served)
    assert back is not None and back.health == codes
    plain = snapshot.to_json(
        snapshot.assemble(20.0, 15.0, "n", [ok("nvidia", dataclasses.replace(CARD, health=HEALTH))])
    )
    health = plain["groups"][0]["accelerators"][0]["health"]
    assert "xidErrors" not in health and "errorCodes" not in health


def test_what_kubernetes_says_of_a_card_is_in_the_snapshot_only_where_said() -> None:
    """(R-X11) `deviceTaints` (every taint on the card's DRA devices, whatever its effect) and
    `kubeletHealth` (`Unknown` or `Unhealthy`) appear only on a card they name, so every other
    card's object is the one before, and both read back whole."""
    from devicemanager.model import CardTaint

    taints = (
        CardTaint("gpu.nvidia.com/xid", "43", "None"),
        CardTaint("example.com/maintenance", "hbm-rma", "NoExecute"),
    )
    said = dataclasses.replace(CARD, device_taints=taints, kubelet_health="Unknown")
    plain = dataclasses.replace(CARD, id="GPU-3", index=3)
    doc = json.loads(
        snapshot.encode(snapshot.assemble(20.0, 15.0, "n", [ok("nvidia", said, plain)]))
    )
    served, other = doc["groups"][0]["accelerators"]
    assert served["deviceTaints"] == [
        {"key": "gpu.nvidia.com/xid", "value": "43", "effect": "None"},
        {"key": "example.com/maintenance", "value": "hbm-rma", "effect": "NoExecute"},
    ]
    assert served["kubeletHealth"] == "Unknown"
    assert {"deviceTaints", "kubeletHealth"}.isdisjoint(other)
    back = snapshot.card_from_json(served)
    assert back is not None and (back.device_taints, back.kubelet_health) == (taints, "Unknown")
    served["deviceTaints"].append({"key": "x", "effect": "None"})  # no value: not ours
    served["kubeletHealth"] = 3
    odd = snapshot.card_from_json(served)
    assert odd is not None and (odd.device_taints, odd.kubelet_health) == (taints, None)
