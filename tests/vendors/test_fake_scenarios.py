"""Replay scenarios whose vendor payload is recorded from a fake library (fixtures/
fake_scenarios.py): each `vendors/<manufacturer>.json` must be exactly what the backend's read()
records over `fake/<manufacturer>.json`, asked what the monitor asks of the scenario's pods
(UPDATE_GOLDEN=1 re-records it), and each scenario's hand-written `expected.json` of key
figures must hold for one replayed round, independently of the goldens."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from devicemanager.agent.replay import load_recording
from devicemanager.grants.node import node_grants
from devicemanager.node.pods import PodIndex
from tests.conftest import NODES, scenario_monitor
from tests.fakelib import nvidia as fake_nvml
from tests.fakelib import thead as fake_hgml
from tests.fakelib import write_scenario
from tests.fakelib.nvml_family import write_sysfs
from tests.vendors.conftest import ManualClock
from vendors._nvml_family import GPM_MIN_INTERVAL, NvmlFamilyBackend
from vendors.nvidia import NvidiaBackend
from vendors.thead import TheadBackend

pytestmark = pytest.mark.timeout(60)

FAKES = sorted(
    (scenario.name, path.stem)
    for scenario in NODES.iterdir()
    for path in (scenario / "fake").glob("*.json")
)
# manufacturer -> (backend, the fake's environment variable, the fixture compiling it)
BACKENDS: dict[str, tuple[type[NvmlFamilyBackend], str, str]] = {
    "nvidia": (NvidiaBackend, fake_nvml.SCENARIO_ENV, "libnvml"),
    "thead": (TheadBackend, fake_hgml.SCENARIO_ENV, "libhgml"),
}


def _generator() -> Any:
    """fixtures/fake_scenarios.py as a module (it imports fixtures/synthesize.py beside it)."""
    fixtures = NODES.parent
    sys.path.insert(0, str(fixtures))
    try:
        spec = importlib.util.spec_from_file_location(
            "fake_scenarios", fixtures / "fake_scenarios.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(fixtures))
    return module


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_the_generator_reproduces_the_committed_scenarios_byte_for_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(R-V6) Running fixtures/fake_scenarios.py writes exactly what is committed for each
    scenario it makes (the fake's document with h100-mig-gpm's NVLinks, NUMA nodes and PCIe
    ancestors, pods, /proc, scenario.json): nothing in them is edited by hand, so a change to
    the generator shows up here, not as a silent loss the next time someone runs it."""
    generator = _generator()
    monkeypatch.setattr(generator, "ROOT", tmp_path)
    generator.ppu_mixed()
    generator.h100_mig_gpm()
    made = sorted(p.name for p in tmp_path.iterdir())
    assert made == ["h100-mig-gpm", "ppu-zw810e-mixed"]
    for name in made:
        written = _tree(tmp_path / name)
        committed = {k: v for k, v in _tree(NODES / name).items() if k in written}
        assert set(committed) == set(written), name
        for path, data in written.items():
            assert committed[path] == data, f"{name}/{path} differs from what the generator writes"
    devices = json.loads((tmp_path / "h100-mig-gpm" / "fake" / "nvidia.json").read_text())
    assert [d.get("numa") for d in devices["library"]["devices"]] == [0, 0, 1, 1]
    assert all(len(d["nvlinks"]) == 18 for d in devices["library"]["devices"])


def test_every_fake_recorded_scenario_is_covered() -> None:
    assert {"ppu-zw810e-mixed", "h100-mig-gpm"} <= {name for name, _ in FAKES}
    assert {m for _, m in FAKES} <= set(BACKENDS)


@pytest.mark.parametrize(("name", "manufacturer"), FAKES)
def test_the_payload_is_what_read_records_from_the_fake(
    name: str,
    manufacturer: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    root = NODES / name
    doc = json.loads((root / "fake" / f"{manufacturer}.json").read_text())
    backend_class, env, fixture = BACKENDS[manufacturer]
    lib: Path = request.getfixturevalue(fixture)
    monkeypatch.setenv(env, str(write_scenario(tmp_path / "s.txt", doc["library"])))
    index = PodIndex.from_list(json.loads((root / "pods.json").read_text()))
    asked = node_grants(index).request(manufacturer)  # what the live monitor asks
    clock = ManualClock()
    # A sysfs root of the scenario's own (the NUMA node each card is attached to, its `numa`):
    # the same answer on every machine.
    write_sysfs(tmp_path / "sys", doc["library"]["devices"])
    backend = backend_class(
        {backend_class.libraries[0].name: str(lib)}, clock=clock, sysfs=tmp_path / "sys"
    )
    backend.open()
    try:
        for _ in range(doc["rounds"] - 1):
            backend.read(asked)
            time.sleep(GPM_MIN_INTERVAL * 1.5)  # the fake, like the driver, needs 100 ms
            clock.advance()
        payload = backend.read(asked)
    finally:
        backend.close()
    path = root / "vendors" / f"{manufacturer}.json"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(exist_ok=True)
        meta = {
            "kind": "synthetic",
            "manufacturer": manufacturer,
            "driver": doc["library"]["driver"],
            "sdk": getattr(backend_class, "sdk", None),
            "source": f"devicemanager read() over the fake library of tests/fakelib/ from "
            f"fake/{manufacturer}.json, round {doc['rounds']}",
        }
        path.write_text(
            json.dumps({"meta": meta, "payload": payload}, indent=1, sort_keys=True) + "\n"
        )
    meta, recorded = load_recording(path)
    assert meta["kind"] == "synthetic" and "fake library" in meta["source"]
    assert payload == recorded, f"{path} is stale; UPDATE_GOLDEN=1 re-records it"


def figures(name: str) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """One replayed round's card figures by index, and grant figures by "instance/index"."""
    monitor = scenario_monitor(name)
    published = monitor.run_round()
    monitor.stop()
    cards: dict[str, dict[str, float]] = {}
    grants: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(published.metrics.plain.decode()):
        for sample in family.samples:
            labels = sample.labels
            if family.name.startswith("gpustack_instance_accelerator_"):
                key = f"{labels['instance_name']}/{labels['index']}"
                field = family.name.removeprefix("gpustack_instance_accelerator_")
                grants.setdefault(key, {})[field] = sample.value
            elif family.name.startswith("gpustack_accelerator_") and "index" in labels:
                field = family.name.removeprefix("gpustack_accelerator_")
                cards.setdefault(labels["index"], {})[field] = sample.value
    return cards, grants


@pytest.mark.parametrize("name", sorted({name for name, _ in FAKES}))
def test_the_key_figures_a_person_wrote_down(name: str) -> None:
    expected: dict[str, Any] = json.loads((NODES / name / "expected.json").read_text())
    cards, grants = figures(name)
    for kind, got in (("cards", cards), ("grants", grants)):
        for key, want in expected[kind].items():
            assert key in got, (kind, key, sorted(got))
            for field, value in want.items():
                if value is None:  # not measured: no sample at all, never a zero
                    assert field not in got[key], (kind, key, field, got[key])
                else:
                    assert got[key].get(field) == value, (kind, key, field, got[key])
