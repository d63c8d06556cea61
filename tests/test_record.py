"""`devicemanager record`: what a real backend's read() returns, ready to drop into a scenario."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from devicemanager.agent.replay import load_recording
from devicemanager.backend import backend_class
from devicemanager.model import VendorReading
from tests.conftest import REPO, agent_env


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "devicemanager", *args],
        capture_output=True,
        text=True,
        env=agent_env(),
        cwd=REPO,
        check=False,
        timeout=60,
    )


def test_record_writes_meta_and_payload_that_replay_loads(tmp_path: Path) -> None:
    out = tmp_path / "fake.json"
    result = run("record", "tests.fakes:StaticBackend", "--output", str(out))
    assert result.returncode == 0, result.stderr
    meta, payload = load_recording(out)
    # A module:Class backend is a stand-in: its recording never claims to be from hardware.
    assert meta["kind"] == "synthetic" and meta["manufacturer"] == "fake"
    assert meta["source"] == "devicemanager record tests.fakes:StaticBackend"
    assert meta["driver"] == "0.0" and meta["cards"] == ["Fake Card"]
    assert meta["recordedAt"].endswith("+00:00")
    # The second read, with every card carved, is the one kept.
    assert payload == {"cards": [{"id": "FAKE-0", "index": 0, "total": 1024, "used": 2}]}


def test_record_to_stdout_and_unavailable_vendor_is_a_clear_error() -> None:
    result = run("record", "tests.fakes:StaticBackend", "--no-processes")
    # Two reads, the second kept, even without processes: GPM compares them (issue 41).
    assert json.loads(result.stdout)["payload"]["cards"][0]["used"] == 2
    absent = run("record", "tests.fakes:UnavailableBackend")
    assert absent.returncode == 1  # the thing asked about is absent on this node
    assert "not available here" in absent.stderr and "libabsent" in absent.stderr
    unknown = run("record", "voodoo")
    assert unknown.returncode == 2 and "unknown manufacturer 'voodoo'" in unknown.stderr


# -- the CLI over each vendor's fake library (issue 12: a fake's recording says `synthetic`) ----


def record(vendor: str, library: str, scenario_env: str, scenario: Path, out: Path) -> Any:
    """`devicemanager record <vendor> --library <library> -o <out>` over a fake: exit 0, and
    the document it wrote."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "devicemanager",
            "record",
            vendor,
            "--library",
            library,
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=agent_env({scenario_env: str(scenario)}),
        cwd=REPO,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(out.read_text())


def pids(reading: VendorReading) -> list[list[int]]:
    """Each device's process PIDs, in the order the reading lists the devices."""
    return [sorted(r.pid for r in d.rows) for d in reading.processes]


def test_record_amd_over_the_fake_rocm_install(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    from tests.fakelib import amd as fake
    from tests.fakelib.amd import scenarios

    if why := fake.missing():
        pytest.skip(f"the fake ROCm libraries cannot be built here: {why}")
    root = fake.build(tmp_path_factory.mktemp("rocm"))
    scenario = fake.write(tmp_path / "scenario.txt", scenarios.spx_pair())
    out = tmp_path / "amd.json"
    doc = record("amd", f"amd_smi={root}", fake.SCENARIO_ENV, scenario, out)
    meta = doc["meta"]
    # A library given by path is a stand-in until the operator vouches for it (--kind).
    assert (meta["kind"], meta["manufacturer"], meta["cards"]) == (
        "synthetic",
        "amd",
        ["AMD Instinct MI300X"],
    )
    assert meta["source"] == f"devicemanager record amd --library amd_smi={root}"
    assert meta["sdk"].startswith("amdsmi ")  # the wheel that loaded the fake
    meta_read, payload = load_recording(out)
    assert meta_read == meta
    # The second read, every card carved: card 0's two processes (spx_pair: 4101, 4102).
    reading = backend_class("amd")().parse(payload)
    assert [c.id for c in reading.cards] == [fake.uuid_of(0), fake.uuid_of(1)]
    assert pids(reading) == [[4101, 4102], []]
    # Each card's GPU metrics table is kept (issue 41): the next real node recorded keeps what
    # its XCPs' own busy figures are parsed from.
    tables = [s["processors"][0]["amdsmi_get_gpu_metrics_info"] for s in payload["sockets"]]
    assert [t["average_gfx_activity"] for t in tables] == [87, 0]
    assert [len(t["xcp_stats.gfx_busy_inst"]) for t in tables] == [1, 1]  # SPX: one partition


def test_record_ascend_over_the_fake_libdcmi(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    from tests.fakelib import ascend as fake
    from tests.fakelib.ascend import scenarios

    if why := fake.missing():
        pytest.skip(f"the fake libdcmi cannot be built here: {why}")
    lib = fake.build(tmp_path_factory.mktemp("dcmi"))
    devices = scenarios.busy_worker(processes=2)
    devices[0].update(hbm_bandwidth=61, vector_core=14)  # issue 41's utilization input types
    scenario = fake.write(tmp_path / "scenario.txt", devices)
    out = tmp_path / "ascend.json"
    doc = record("ascend", str(lib), fake.SCENARIO_ENV, scenario, out)
    meta = doc["meta"]
    assert (meta["kind"], meta["manufacturer"], meta["driver"], meta["sdk"]) == (
        "synthetic",
        "ascend",
        "25.5.1",  # the scenario's driver
        None,  # ctypes: no Python binding
    )
    assert meta["source"] == f"devicemanager record ascend --library {lib}"
    _, payload = load_recording(out)
    reading = backend_class("ascend")().parse(payload)
    # busy_worker(2): one 910B2 with workers 899293 and 899294.
    assert pids(reading) == [[899293, 899294]]
    # The recording keeps the HBM bandwidth and vector-core answers (issue 41).
    from devicemanager.model import HealthFigure

    (card,) = reading.cards
    assert card.health is not None
    assert card.health.number(HealthFigure.MEMORY_BANDWIDTH_UTILIZATION) == 61
    assert card.health.number(HealthFigure.VECTOR_CORE_BUSY) == 14


def test_record_thead_over_the_fake_libhgml(libhgml: Path, tmp_path: Path) -> None:
    from tests.fakelib import thead as fake
    from tests.fakelib.thead import scenarios

    scenario = fake.write(tmp_path / "scenario.txt", [scenarios.slices_one_busy()])
    out = tmp_path / "thead.json"
    doc = record("thead", str(libhgml), fake.SCENARIO_ENV, scenario, out)
    meta = doc["meta"]
    assert (meta["kind"], meta["manufacturer"], meta["driver"], meta["cards"]) == (
        "synthetic",
        "thead",
        fake.DRIVER,
        ["PPU-ZW810E"],
    )
    assert meta["source"] == f"devicemanager record thead --library {libhgml}"
    _, payload = load_recording(out)
    reading = backend_class("thead")().parse(payload)
    # slices_one_busy: PIDs 8101 and 8201 on the one PPU.
    assert pids(reading) == [[8101, 8201]]


def test_record_keeps_a_whole_cards_gpm_activity(libhgml: Path, tmp_path: Path) -> None:
    """Issue 41: the recording's second read compares its GPM sample with the first's, so the
    next real node recorded keeps the card's activity, not only `no_baseline`."""
    from devicemanager.model import HealthFigure
    from tests.fakelib import thead as fake
    from tests.fakelib.thead import scenarios

    card = scenarios.whole(41, gpm=1, gpm_metrics={2: 21.1868, 5: 20.1394})
    scenario = fake.write(tmp_path / "scenario.txt", [card])
    out = tmp_path / "thead.json"
    record("thead", str(libhgml), fake.SCENARIO_ENV, scenario, out)
    _, payload = load_recording(out)
    (device,) = payload["devices"]
    assert "hgmlGpmSampleGet" in device and "hgmlGpmMetricsGet" in device
    (parsed,) = backend_class("thead")().parse(payload).cards
    assert parsed.health is not None
    assert parsed.health.number(HealthFigure.SM_ACTIVITY) == 21.19
    assert parsed.health.number(HealthFigure.TENSOR_ACTIVITY) == 20.14
