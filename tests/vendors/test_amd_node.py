"""The MI300X replay scenario (fixtures/nodes/mi300x-8gpu-cpx-mixed/): its files are still what
tests/fakelib/amd/node.py writes from read() over the fake ROCm install (UPDATE_GOLDEN=1
rewrites them), and one replayed round shows the key figures of its hand-written
expected.json, independently of golden/."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import NODES, scenario_monitor
from tests.fakelib.amd import node

ROOT = NODES / node.NAME
EXPECTED = json.loads((ROOT / "expected.json").read_text())


def files(root: Path) -> dict[str, str]:
    wanted = [root / "scenario.json", root / "pods.json", root / "vendors" / "amd.json"]
    wanted += sorted((root / "proc").rglob("*"))
    return {str(p.relative_to(root)): p.read_text() for p in wanted if p.is_file()}


def test_the_scenario_is_what_the_generator_records(rocm_root: Path, tmp_path: Path) -> None:
    target = ROOT if os.environ.get("UPDATE_GOLDEN") == "1" else tmp_path / node.NAME
    node.write(target, rocm_root, tmp_path)
    assert files(tmp_path / node.NAME if target != ROOT else ROOT) == files(ROOT), (
        f"{ROOT} is stale; UPDATE_GOLDEN=1 pytest {__file__} rewrites it"
    )


@pytest.fixture(scope="module")
def replayed() -> tuple[dict[str, Any], dict[str, dict[str, list[float]]]]:
    monitor = scenario_monitor(node.NAME)
    published = monitor.run_round()
    monitor.stop()
    figures: dict[str, dict[str, list[float]]] = {}
    for family in text_string_to_metric_families(published.metrics.plain.decode()):
        if not family.name.startswith("gpustack_instance_accelerator_"):
            continue
        field = family.name.removeprefix("gpustack_instance_accelerator_")
        for sample in family.samples:
            by_instance = figures.setdefault(sample.labels["instance_name"], {})
            by_instance.setdefault(field, []).append(sample.value)
    return json.loads(published.snapshot_json), figures


def test_the_backend_and_the_cards(replayed) -> None:  # type: ignore[no-untyped-def]
    snap, _ = replayed
    (backend,) = snap["backends"]
    assert {k: backend[k] for k in EXPECTED["backend"]} == EXPECTED["backend"]
    (group,) = snap["groups"]
    assert len(group["accelerators"]) == EXPECTED["accelerators"]
    want = EXPECTED["physical"]
    cards = {a["id"]: a for a in group["accelerators"]}
    physical = cards[want["id"]]
    assert (physical["temperature"], physical["powerUsage"], physical["memory"]) == (
        want["temperature"],
        want["powerUsage"],
        want["memory"],
    )
    partitions = [a for a in group["accelerators"] if a.get("parentID") == want["id"]]
    assert len(partitions) == want["partitions"]
    # Board figures are counted once: on the physical card, never on its partitions.
    assert all(a["temperature"] is None and a["powerUsage"] is None for a in partitions)


def test_the_truncated_list_is_never_published_as_complete(replayed) -> None:  # type: ignore[no-untyped-def]
    snap, _ = replayed
    want = EXPECTED["truncated"]
    (device,) = [d for d in snap["slices"]["devices"] if d["deviceID"] == want["deviceID"]]
    assert {k: device.get(k) for k in want} == want


@pytest.mark.parametrize("instance", sorted(EXPECTED["instances"]))
def test_key_figures_per_instance(replayed, instance: str) -> None:  # type: ignore[no-untyped-def]
    _, figures = replayed
    for field, values in EXPECTED["instances"][instance].items():
        assert sorted(figures.get(instance, {}).get(field, [])) == sorted(values), field
