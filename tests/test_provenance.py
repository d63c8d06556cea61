"""Every recording says where it came from, and nothing read from a fake claims hardware
(issue 12; fixtures/README.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from devicemanager.agent.replay import load_recording, load_scenario
from devicemanager.cli import provenance
from tests.conftest import FIXTURES, NODES, REPO, SCENARIOS, agent_env

RECORDINGS = sorted(
    [*(FIXTURES / "vendors").rglob("*.json"), *(NODES.glob("*/vendors/*.json"))],
    key=str,
)


def test_a_shipped_backend_on_the_system_library_is_a_recording() -> None:
    assert provenance("nvidia", {}, None) == {"kind": "recorded"}


def test_a_library_given_by_path_or_a_test_backend_is_synthetic() -> None:
    assert provenance("nvidia", {"": "/tmp/x/libnvidia-ml.so.1"}, None) == {
        "kind": "synthetic",
        "source": "devicemanager record nvidia --library /tmp/x/libnvidia-ml.so.1",
    }
    assert provenance("tests.fakes:StaticBackend", {}, None) == {
        "kind": "synthetic",
        "source": "devicemanager record tests.fakes:StaticBackend",
    }


def test_the_operator_may_vouch_for_a_library_at_a_path() -> None:
    assert provenance("nvidia", {"nvml": "/opt/nvidia/libnvidia-ml.so.1"}, "recorded") == {
        "kind": "recorded",
        "source": "devicemanager record nvidia --library nvml=/opt/nvidia/libnvidia-ml.so.1",
    }


def test_record_with_kind_writes_what_it_was_told(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "devicemanager",
            "record",
            "tests.fakes:StaticBackend",
            "--kind",
            "recorded",
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=agent_env(),
        cwd=REPO,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(out.read_text())["meta"]["kind"] == "recorded"


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_no_fixture_made_from_a_fake_claims_to_be_recorded(path: Path) -> None:
    meta, _ = load_recording(path)
    told = " ".join(str(meta.get(k, "")) for k in ("source", "note")).lower()
    assert told, f"{path}: meta names no source or note"
    if "fake" in told or "synthes" in told or "hand-built" in told:
        assert meta["kind"] == "synthetic", f"{path}: {meta}"
    assert "<lambda>" not in told  # a provenance line names what made the file


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_scenario_and_its_payloads_agree_on_provenance(scenario: str) -> None:
    loaded = load_scenario(NODES / scenario)
    for path in loaded.vendor_files.values():
        meta, _ = load_recording(path)
        assert meta["kind"] == loaded.provenance
