"""The MetaX replay scenario fixtures/nodes/c500-8gpu-sgpu-slices/: its key figures against a
hand-written expected.json (independently of golden/), and its files against what
tests/fakelib/metax/replay.py writes from the fake library now (UPDATE_GOLDEN=1 rewrites them)."""

from __future__ import annotations

import filecmp
import json
import os
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import NODES, scenario_monitor
from tests.fakelib import metax as fake

NAME = "c500-8gpu-sgpu-slices"
ROOT = NODES / NAME
EXPECTED = json.loads((ROOT / "expected.json").read_text())
FIELDS = {
    "memoryTotalMiB": "memory_total_mib",
    "memoryUsedMiB": "memory_used_mib",
    "coresUtilizationPercent": "cores_utilization_percent",
    "temperatureCelsius": "temperature_celsius",
    "powerUsageWatts": "power_usage_watts",
}


@pytest.fixture(scope="module")
def published() -> Any:
    monitor = scenario_monitor(NAME)
    try:
        return monitor.run_round()
    finally:
        monitor.stop()


def samples(published: Any) -> dict[str, list[tuple[dict[str, str], float]]]:
    return {
        f.name: [(s.labels, s.value) for s in f.samples]
        for f in text_string_to_metric_families(published.metrics.plain.decode())
    }


def test_the_cards_and_the_ids_allocators_record(published: Any) -> None:
    doc = json.loads(published.snapshot_json)
    (group,) = doc["groups"]
    cards = group["accelerators"]
    assert len(cards) == EXPECTED["cards"]["count"]
    assert [c["index"] for c in cards] == EXPECTED["cards"]["indexes"]
    by_index = {str(c["index"]): c for c in cards}
    for index, aliases in EXPECTED["cards"]["aliases"].items():
        assert by_index[index]["aliases"] == aliases


@pytest.mark.parametrize(
    "expected", EXPECTED["entries"], ids=lambda e: f"{e['instance']}-{e['index']}"
)
def test_each_grant_reads_its_expected_figures(published: Any, expected: dict[str, Any]) -> None:
    got = samples(published)
    for field, family in FIELDS.items():
        values = [
            value
            for labels, value in got.get(f"gpustack_instance_accelerator_{family}", [])
            if labels["instance_name"] == expected["instance"]
            and labels["index"] == str(expected["index"])
        ]
        if expected[field] is None:
            assert values == [], f"{field} must be absent, not {values}"
        else:
            assert values == [pytest.approx(expected[field])], field
        modes = {
            labels["mode"]
            for labels, _ in got.get(f"gpustack_instance_accelerator_{family}", [])
            if labels["instance_name"] == expected["instance"]
            and labels["index"] == str(expected["index"])
        }
        assert modes <= {expected["mode"]}


def test_only_the_expected_grants_publish(published: Any) -> None:
    got = samples(published)
    seen = {
        (labels["instance_name"], int(labels["index"]))
        for labels, _ in got["gpustack_instance_accelerator_memory_total_mib"]
    }
    assert seen == {(e["instance"], e["index"]) for e in EXPECTED["entries"]}


def test_the_capability_gauge_says_per_process_compute_is_unsupported(published: Any) -> None:
    doc = json.loads(published.snapshot_json)
    index_of = {c["id"]: str(c["index"]) for c in doc["groups"][0]["accelerators"]}
    got: dict[str, dict[str, str]] = {}
    for labels, value in samples(published)["gpustack_accelerator_process_capability"]:
        got.setdefault(index_of[labels["id"]], {})[labels["entry_point"]] = labels["reason"]
        assert value == (1.0 if labels["reason"] == "" else 0.0)
    assert got == EXPECTED["capability"]


def test_the_scenario_is_what_the_fake_and_replay_py_write_now(tmp_path: Path) -> None:
    if why := fake.missing():
        pytest.skip(f"the fake libmxsml cannot be built here: {why}")
    from tests.fakelib.metax import replay

    if os.environ.get("UPDATE_GOLDEN") == "1":
        replay.write(ROOT, fake.built())
    replay.write(tmp_path, fake.built())
    compared = ["scenario.json", "pods.json", "vendors/metax.json"]
    compared += [
        str(p.relative_to(tmp_path)) for p in sorted((tmp_path / "proc").rglob("*")) if p.is_file()
    ]
    stale = [rel for rel in compared if not filecmp.cmp(tmp_path / rel, ROOT / rel, shallow=False)]
    assert stale == [], f"{stale} differ from replay.py's output; UPDATE_GOLDEN=1 rewrites them"
    shipped = {str(p.relative_to(ROOT)) for p in (ROOT / "proc").rglob("*") if p.is_file()}
    assert shipped == {rel for rel in compared if rel.startswith("proc/")}
