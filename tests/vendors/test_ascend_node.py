"""The replay scenario fixtures/nodes/atlas800t-a2-8npu-vnpu-mixed/: its key figures, written by
hand in expected.json and checked here independently of the goldens; and the scenario itself,
which must still be exactly what tests/fakelib/ascend/node.py writes (read() over the fake)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import NODES, scenario_monitor
from tests.fakelib import ascend as fake_dcmi
from tests.fakelib.ascend import node

ROOT = NODES / node.NAME
FIELDS = ("memory_total_mib", "memory_used_mib", "cores_utilization_percent")


@pytest.fixture(scope="module")
def published() -> Any:
    monitor = scenario_monitor(node.NAME)
    try:
        return monitor.run_round()
    finally:
        monitor.stop()


def expected() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((ROOT / "expected.json").read_text())
    return doc


def test_the_cards_are_as_expected(published: Any) -> None:
    want = expected()["cards"]
    (group,) = published.snapshot.groups
    cards = group.cards
    assert len(cards) == want["count"]
    assert [c.index for c in cards] == want["index"]
    assert {c.memory_total_mib for c in cards} == {want["memory_total_mib"]}
    assert [c.memory_used_mib for c in cards] == want["memory_used_mib"]
    assert [c.power_usage_watts for c in cards] == want["power_watts"]
    assert {str(c.index): c.unhealthy_reason for c in cards if c.unhealthy} == want["unhealthy"]
    assert list(cards[3].aliases) == want["aliases_of_npu_3"]


def test_every_instance_reads_its_own_grant(published: Any) -> None:
    got: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}
    for family in text_string_to_metric_families(published.metrics.plain.decode()):
        field = family.name.removeprefix("gpustack_instance_accelerator_")
        if field not in FIELDS:
            continue
        for sample in family.samples:
            labels = sample.labels
            entry = got.setdefault(labels["instance_name"], {}).setdefault(
                (labels["id"], labels["index"]),
                {"id": labels["id"], "index": int(labels["index"]), "mode": labels["mode"]},
            )
            entry[field] = sample.value
    want = expected()["instances"]
    assert set(got) == set(want)
    for name, entries in want.items():
        have = sorted(got[name].values(), key=lambda e: e["index"])
        assert len(have) == len(entries), name
        for actual, wanted in zip(have, entries, strict=True):
            for key, value in wanted.items():
                # null in expected.json: no sample at all, never a zero.
                assert actual.get(key) == value, (name, key, actual)


def test_the_scenario_is_what_read_records_over_the_fake(tmp_path: Path) -> None:
    if why := fake_dcmi.missing():
        pytest.skip(f"the fake libdcmi cannot be built here: {why}")
    lib = fake_dcmi.build(tmp_path / "lib")
    fresh = tmp_path / "scenario"
    node.write(fresh, lib)
    written = sorted(p.relative_to(fresh) for p in fresh.rglob("*") if p.is_file())
    assert written, "node.write wrote nothing"
    for rel in written:
        committed = ROOT / rel
        rerun = "run .venv/bin/python -m tests.fakelib.ascend.node"
        assert committed.exists(), f"{committed} is missing; {rerun}"
        assert committed.read_text() == (fresh / rel).read_text(), f"{committed} is stale; {rerun}"
