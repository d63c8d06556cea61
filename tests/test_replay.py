"""Replay scenarios: each says where it came from, and a broken one is refused clearly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from devicemanager.agent.replay import ReplayBackend, ScenarioError, load_recording, load_scenario
from devicemanager.model import ReadRequest
from tests.conftest import NODES, SCENARIOS


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_shipped_scenario_is_complete_and_says_its_provenance(name: str) -> None:
    scenario = load_scenario(NODES / name)
    assert scenario.provenance in ("recorded", "synthetic")
    assert len(scenario.description) > 80
    assert scenario.pods_file is not None and scenario.proc_root.is_dir()
    pods = json.loads(scenario.pods_file.read_text())
    assert pods["kind"] == "PodList" and pods["items"]
    assert all(p["spec"]["nodeName"] == scenario.node for p in pods["items"])
    for manufacturer, path in scenario.vendor_files.items():
        meta, _ = load_recording(path)
        assert meta["kind"] == scenario.provenance and meta["manufacturer"] == manufacturer


def test_replay_backend_hands_the_payload_to_the_vendors_own_parse() -> None:
    scenario = load_scenario(NODES / "h100-8gpu-mixed")
    backend = ReplayBackend("nvidia", scenario.vendor_files["nvidia"])
    backend.open()
    reading = backend.parse(backend.read(ReadRequest()))
    assert reading.manufacturer == "nvidia" and len(reading.cards) == 8
    assert reading.driver_version == "550.90.07"


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({}, "scenario.json"),
        ({"scenario.json": "{"}, "scenario.json"),
        ({"scenario.json": '{"provenance": "guessed"}'}, "provenance"),
        ({"scenario.json": '{"provenance": "synthetic"}'}, "no vendors"),
    ],
)
def test_broken_scenarios_are_refused(tmp_path: Path, files: dict[str, str], message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        load_scenario(write(tmp_path, files))


def test_a_recording_without_kind_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, {"x.json": '{"meta": {}, "payload": {}}'}) / "x.json"
    with pytest.raises(ScenarioError, match=r"meta\.kind"):
        load_recording(path)
