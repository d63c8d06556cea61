"""The two synthetic K100_AI replay scenarios: their inputs are what read() records over the
fake Hygon libraries and what tests/fakelib/hygon/nodes.py writes (UPDATE_GOLDEN=1 re-renders
them), and a replayed round shows what each hand-written expected.json says."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import NODES, scenario_monitor
from tests.fakelib import hygon as fake
from tests.fakelib.hygon import nodes

SCENARIOS = sorted(nodes.NODE_TABLE)
FIGURES = ("memory_total_mib", "memory_used_mib", "cores_utilization_percent", "unhealthy")


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_scenario_is_what_read_records_over_the_fakes(name: str, tmp_path: Path) -> None:
    if why := fake.missing():
        pytest.skip(f"the fake Hygon libraries cannot be built here: {why}")
    root = NODES / name
    if os.environ.get("UPDATE_GOLDEN") == "1":
        nodes.render(name, root)
    nodes.render(name, tmp_path / name)
    fresh, shipped = nodes.inputs(tmp_path / name), nodes.inputs(root)
    assert sorted(fresh) == sorted(shipped), f"{root}: files differ; UPDATE_GOLDEN=1 re-renders"
    for path, text in fresh.items():
        assert shipped[path] == text, f"{root / path} is stale; UPDATE_GOLDEN=1 re-renders it"


@pytest.mark.parametrize("name", SCENARIOS)
def test_a_replayed_round_shows_what_expected_json_says(name: str) -> None:
    expected = json.loads((NODES / name / "expected.json").read_text())
    monitor = scenario_monitor(name)
    published = monitor.run_round()
    monitor.stop()
    found: dict[tuple[str, ...], dict[str, float]] = {}
    for family in text_string_to_metric_families(published.metrics.plain.decode()):
        for s in family.samples:
            if s.name.startswith("gpustack_instance_accelerator_"):
                key = tuple(
                    s.labels[k] for k in ("namespace", "instance_name", "id", "index", "mode")
                )
                found.setdefault(key, {})[s.name.removeprefix("gpustack_instance_accelerator_")] = (
                    s.value
                )
    want = {
        (e["namespace"], e["instance"], e["id"], e["index"], e["mode"]): {f: e[f] for f in FIGURES}
        for e in expected["entries"]
    }
    assert set(found) == set(want)
    for key, figures in want.items():
        for figure, value in figures.items():
            if value is None:  # absent: no series at all, never a 0 standing in for it
                assert figure not in found[key], (key, figure, found[key][figure])
            else:
                assert found[key].get(figure) == value, (key, figure, found[key].get(figure))
    doc = json.loads(published.snapshot_json)
    (backend,) = doc["backends"]
    assert backend["state"] == "ok"
