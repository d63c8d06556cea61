"""Golden snapshot and /metrics per replay scenario. UPDATE_GOLDEN=1 rewrites them.

Reviewers read the diff of fixtures/nodes/<scenario>/golden/ when a change moves a figure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import NODES, SCENARIOS, scenario_monitor

UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"


def check(path, actual: str) -> None:  # type: ignore[no-untyped-def]
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual)
    assert path.exists(), f"{path} is missing; run UPDATE_GOLDEN=1 pytest {__file__}"
    assert actual == path.read_text(), f"{path} differs; if intended, UPDATE_GOLDEN=1"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_golden_snapshot_and_metrics(scenario: str) -> None:
    monitor = scenario_monitor(scenario)
    published = monitor.run_round()
    monitor.stop()
    golden = NODES / scenario / "golden"
    doc = json.loads(published.snapshot_json)
    check(golden / "snapshot.json", json.dumps(doc, indent=2) + "\n")
    text = published.metrics.plain.decode()
    check(golden / "metrics.txt", text)
    # Parsed back, every sample is a finite number: nothing absent slipped in as NaN.
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            assert sample.value == sample.value, sample


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_golden_metrics_pass_promtool(scenario: str) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:  # .ci/run installs Debian's prometheus package, which carries it
        pytest.skip("promtool is not installed")
    metrics = (NODES / scenario / "golden" / "metrics.txt").read_bytes()
    result = subprocess.run(
        [promtool, "check", "metrics"], input=metrics, capture_output=True, check=False
    )
    # promtool exits 0 when the text parses; lint findings (if any) are printed, not fatal,
    # so treat any output as a failure too: the project's names follow its own spec (§7).
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode().strip() == "" and result.stderr.decode().strip() == "", (
        result.stdout.decode() + result.stderr.decode()
    )


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_instance_label_is_instance_name_never_instance(scenario: str) -> None:
    """R-E6: `instance` is Prometheus's target label; a series of ours that carried it would be
    renamed `exported_instance` on scrape, or overwrite the target's. Every per-Instance series
    names its Instance in `instance_name`, and no series of any scenario carries `instance`."""
    text = (NODES / scenario / "golden" / "metrics.txt").read_text()
    per_instance = 0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            assert "instance" not in sample.labels, sample
            if family.name.startswith("gpustack_instance_accelerator_"):
                per_instance += 1
                assert sample.labels.get("instance_name"), sample
    if scenario != "b200-per-process-unsupported":
        assert per_instance > 0  # the check above ran over real per-Instance series
