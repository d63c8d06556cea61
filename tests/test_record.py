"""`devicemanager record`: what a real backend's read() returns, ready to drop into a scenario."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from devicemanager.replay import load_recording
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
    assert json.loads(result.stdout)["payload"]["cards"][0]["used"] == 1
    absent = run("record", "tests.fakes:UnavailableBackend")
    assert absent.returncode == 1  # the thing asked about is absent on this node
    assert "not available here" in absent.stderr and "libabsent" in absent.stderr
    unknown = run("record", "voodoo")
    assert unknown.returncode == 2 and "unknown manufacturer 'voodoo'" in unknown.stderr
