"""Each replay scenario's hand-written figures, checked independently of the goldens (issue 12).

`fixtures/nodes/<scenario>/expected.json` lists, with the arithmetic behind each, what a round
over the scenario must publish: every card, every grant's entry (an absent figure is null and
is named when it is not absent, or present when it should be), the Instances that publish
nothing, and the per-process diagnostics. A scenario's `health` section (NVIDIA, AMD and
T-Head so far) pins each listed card's health and placement (R-X7, R-X3: ECC counts, memory
repair, energy, throttle reasons, clocks, PCIe replays, error events by code, the unhealthy
reason, links, NUMA node), worked out from the scenario's inputs with the arithmetic in its
`why`. The goldens are rewritten by the code under test (UPDATE_GOLDEN=1); these are not.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import NODES, SCENARIOS, scenario_monitor

# expected.json's field -> the family that publishes it.
ENTRY_FAMILIES = {
    "memoryTotalMiB": "gpustack_instance_accelerator_memory_total_mib",
    "memoryUsedMiB": "gpustack_instance_accelerator_memory_used_mib",
    "memoryUtilizationPercent": "gpustack_instance_accelerator_memory_utilization_percent",
    "coresUtilizationPercent": "gpustack_instance_accelerator_cores_utilization_percent",
    "temperatureCelsius": "gpustack_instance_accelerator_temperature_celsius",
    "powerUsageWatts": "gpustack_instance_accelerator_power_usage_watts",
    "unhealthy": "gpustack_instance_accelerator_unhealthy",
}
CARD_FIELDS = (
    "id",
    "memory",
    "memoryUsage",
    "memoryUtilization",
    "coresUtilization",
    "temperature",
    "powerUsage",
    "unhealthy",
)


def expected(scenario: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((NODES / scenario / "expected.json").read_text())
    return doc


@cache
def round_of(scenario: str) -> tuple[dict[str, Any], list[tuple[str, dict[str, str], float]]]:
    monitor = scenario_monitor(scenario)
    published = monitor.run_round()
    monitor.stop()
    samples = [
        (s.name, s.labels, s.value)
        for f in text_string_to_metric_families(published.metrics.plain.decode())
        for s in f.samples
    ]
    return json.loads(published.snapshot_json), samples


# The scenarios whose expected.json this file reads. The vendor scenarios carry expected.json
# of their own shape, checked by their own tests (tests/vendors/test_*_node*.py,
# test_fake_scenarios.py, test_deviceplugins.py); every scenario has one.
CHECKED_HERE = [s for s in SCENARIOS if "notPublished" in expected(s)]


def test_every_scenario_has_its_hand_written_figures() -> None:
    for scenario in SCENARIOS:
        doc = expected(scenario)
        assert doc.get("about") or doc.get("note"), (
            f"{scenario}: expected.json says nothing of itself"
        )
        assert len(doc) > 1, scenario
    assert {"h100-8gpu-mixed", "b200-per-process-unsupported"} <= set(CHECKED_HERE)
    for scenario in CHECKED_HERE:
        doc = expected(scenario)
        assert doc["cards"] and doc["entries"], scenario
        assert all(e.get("why") for e in doc["entries"]), f"{scenario}: an entry without its why"


@pytest.mark.parametrize("scenario", CHECKED_HERE)
def test_the_cards_read_as_written_by_hand(scenario: str) -> None:
    document, _ = round_of(scenario)
    (group,) = document["groups"]
    got = {c["index"]: {k: c[k] for k in CARD_FIELDS} for c in group["accelerators"]}
    want = {c["index"]: {k: c[k] for k in CARD_FIELDS} for c in expected(scenario)["cards"]}
    assert got == want


@pytest.mark.parametrize("scenario", CHECKED_HERE)
def test_every_grant_publishes_the_figures_written_by_hand(scenario: str) -> None:
    _, samples = round_of(scenario)
    published: dict[tuple[str, str], dict[str, Any]] = {}
    for name, labels, value in samples:
        if name in ENTRY_FAMILIES.values():
            key = (labels["instance_name"], labels["id"])
            # `unhealthy` alone carries the card's reason beside the grant's labels (issue 29):
            # empty while the card is healthy, which a parser reads back as ""; else the same.
            if name == ENTRY_FAMILIES["unhealthy"]:
                assert (labels.pop("reason") == "") == (value == 0), key
            entry = published.setdefault(key, {"labels": labels, "figures": {}})
            assert labels == entry["labels"], f"{key}: one grant, one label set"
            entry["figures"][name] = value
    want = {(e["instance"], e["id"]): e for e in expected(scenario)["entries"]}
    assert sorted(published) == sorted(want)
    for key, e in want.items():
        labels, figures = published[key]["labels"], published[key]["figures"]
        assert labels["instance_uid"] == e["instanceUID"], key
        assert labels["namespace"] == e["namespace"], key
        assert (labels["index"], labels["mode"]) == (str(e["index"]), e["mode"]), key
        absent = {f for f, family in ENTRY_FAMILIES.items() if family not in figures}
        # Named, not counted: which figure is absent is the rule.
        assert absent == {f for f in ENTRY_FAMILIES if e[f] is None}, (key, "absent", absent)
        for field, family in ENTRY_FAMILIES.items():
            if e[field] is not None:
                assert figures[family] == e[field], (key, field, figures[family], e[field])


@pytest.mark.parametrize("scenario", CHECKED_HERE)
def test_instances_that_must_publish_nothing_do_not(scenario: str) -> None:
    _, samples = round_of(scenario)
    for quiet in expected(scenario)["notPublished"]:
        found = [(n, ls) for n, ls, _ in samples if ls.get("instance_name") == quiet["instance"]]
        assert found == [], quiet["why"]


@pytest.mark.parametrize("scenario", CHECKED_HERE)
def test_the_per_process_diagnostics_read_as_written_by_hand(scenario: str) -> None:
    document, samples = round_of(scenario)
    want = expected(scenario)
    # A round that asked no per-process figure (nothing carved) publishes no section at all.
    section = document.get("slices", {})
    devices = {d["deviceID"]: d for d in section.get("devices", [])}
    assert sorted(devices) == sorted(d["deviceID"] for d in want["devices"])
    for d in want["devices"]:
        got = devices[d["deviceID"]]
        assert (got.get("memoryReason"), got.get("coresReason")) == (
            d["memoryReason"],
            d["coresReason"],
        ), d["why"]
        assert (got["rowsReturned"], got["rowsAttributed"]) == (
            d["rowsReturned"],
            d["rowsAttributed"],
        ), d["why"]
        capability = {
            ls["entry_point"]: (ls["reason"], v)
            for n, ls, v in samples
            if n == "gpustack_accelerator_process_capability" and ls["id"] == d["deviceID"]
        }
        assert capability == {
            "memory": (d["memoryReason"] or "", 0.0 if d["memoryReason"] else 1.0),
            "cores": (d["coresReason"] or "", 0.0 if d["coresReason"] else 1.0),
        }
    partitions = {p["id"]: p for p in section.get("partitions", [])}
    assert sorted(partitions) == sorted(p["id"] for p in want["partitions"])
    for p in want["partitions"]:
        got = partitions[p["id"]]
        assert {k: got.get(k) for k in p} == p


# -- the card's health and placement (issue 29) ---------------------------------------------------

# The scenarios whose expected.json pins each card's health and placement by hand.
HEALTH_CHECKED = [s for s in SCENARIOS if "health" in expected(s)]


def _sample_key(key: str) -> tuple[str, dict[str, str]]:
    """`family{label=value,…}` (the family after gpustack_accelerator_) into its sample name and
    the labels it must carry beside the card's."""
    family, _, rest = key.partition("{")
    labels = dict(pair.split("=", 1) for pair in rest.rstrip("}").split(",") if pair)
    return f"gpustack_accelerator_{family}", labels


def _within(want: Any, got: Any, where: str) -> None:
    """Every key `want` names holds in `got`, recursively; other keys of `got` are not pinned."""
    if isinstance(want, dict) and want:
        assert isinstance(got, dict), (where, got)
        for key, value in want.items():
            assert key in got, (where, key, sorted(got))
            _within(value, got[key], f"{where}.{key}")
    else:
        assert got == want, (where, got, want)


def _links(links: list[dict[str, Any]] | None) -> dict[str, list[list[Any]]] | None:
    if links is None:
        return None
    out: dict[str, list[list[Any]]] = {}
    for link in links:
        out.setdefault(link["peerID"], []).append([link["link"], link["count"]])
    return {peer: sorted(kinds, key=str) for peer, kinds in out.items()}


def test_the_health_pins_cover_nvidia_amd_and_thead() -> None:
    assert {"h100-mig-gpm", "mi300x-8gpu-cpx-mixed", "ppu-zw810e-mixed"} <= set(HEALTH_CHECKED)
    for scenario in HEALTH_CHECKED:
        pins = expected(scenario)["health"]
        assert pins["about"] and pins["cards"], scenario
        assert all(c.get("why") for c in pins["cards"]), f"{scenario}: a card without its why"


@pytest.mark.parametrize("scenario", HEALTH_CHECKED)
def test_each_cards_health_and_placement_read_as_worked_out_by_hand(scenario: str) -> None:
    """(R-X7, R-X3) ECC counts, memory repair, energy in joules, clocks in hertz, throttle
    reasons, PCIe replays, error events by code, the unhealthy reason, links and the NUMA node
    of each pinned card, worked out by hand from the scenario's inputs, against one replayed
    round's /metrics samples (a null pin: no sample for that card, never a zero) and its
    snapshot (each key pinned; `links` by peer)."""
    document, samples = round_of(scenario)
    cards = {c["id"]: c for g in document["groups"] for c in g["accelerators"]}
    for pin in expected(scenario)["health"]["cards"]:
        card_id = pin["id"]
        assert card_id in cards, (scenario, card_id, sorted(cards))
        card = cards[card_id]
        assert card["index"] == pin["index"], card_id
        for key, value in pin["samples"].items():
            name, labels = _sample_key(key)
            found = [
                v
                for n, ls, v in samples
                if n == name
                and ls.get("id") == card_id
                and all(ls.get(k) == want for k, want in labels.items())
            ]
            if value is None:
                assert found == [], (card_id, key, found)
            else:
                assert found == [value], (card_id, key, found, value)
        for key, value in pin["snapshot"].items():
            got = _links(card.get("links")) if key == "links" else card.get(key)
            _within(value, got, f"{card_id}.{key}")
