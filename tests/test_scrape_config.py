"""The example scrape configuration's relabelling, run by a real Prometheus (issue 12; R-O6).

Debian's Prometheus is built without Kubernetes discovery, so the job's `relabel_configs` are
taken verbatim from deploy/prometheus-scrape.yaml and fed, through `file_sd_configs`, targets
carrying the `__meta_kubernetes_*` labels that `role: endpoints` discovery sets on an agent's
endpoint (names as the Prometheus documentation lists them). Prometheus applies the rules,
and its /api/v1/targets says what became of each target; the kept one is then scraped.

Not checked here: that a real cluster's endpoints discovery produces those labels from
daemonset.yaml's Service, and the job's `namespaces` restriction (both belong to the
Kubernetes discovery this build lacks).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.conftest import NODES, REPO, Agent, free_port

pytestmark = pytest.mark.timeout(120)
DEPLOY = REPO / "deploy"
META = "__meta_kubernetes_"


def endpoint(address: str, **annotations: str) -> dict[str, Any]:
    """One target group as endpoints discovery would describe an agent pod's endpoint."""
    labels = {
        f"{META}namespace": "gpustack-system",
        f"{META}service_name": "gpustack-device-manager",
        f"{META}pod_name": "gpustack-device-manager-nvidia-x8v2p",
        f"{META}pod_node_name": "gpu-h100-07",
        f"{META}pod_label_gpustack_ai_manufacturer": "nvidia",
        f"{META}endpoint_port_name": "https",
    }
    for key, value in annotations.items():
        labels[f"{META}service_annotation_prometheus_io_{key}"] = value
        labels[f"{META}service_annotationpresent_prometheus_io_{key}"] = "true"
    return {"targets": [address], "labels": labels}


@pytest.fixture
def prometheus(tmp_path: Path, launch) -> Iterator[tuple[str, Agent]]:  # type: ignore[no-untyped-def]
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("prometheus is not installed (Debian package prometheus; .ci/run installs it)")
    agent: Agent = launch("--replay", str(NODES / "h100-8gpu-mixed"), "--monitor-period", "1")
    agent.wait_for("/readyz", 200)
    (job,) = yaml.safe_load((DEPLOY / "prometheus-scrape.yaml").read_text())["scrape_configs"]
    targets = [
        # The agent: the endpoint's own address names another port (as a Service's named port
        # might); the prometheus.io/port annotation must win.
        endpoint(
            "127.0.0.1:9",
            scrape="true",
            scheme="https",
            path="/metrics",
            port=str(agent.port),
        ),
        # A Service that does not ask to be scraped.
        endpoint("127.0.0.2:9100", scrape="false", port="9100"),
        # A Service without the annotation at all.
        endpoint("127.0.0.3:9100"),
    ]
    (tmp_path / "targets.yaml").write_text(yaml.safe_dump(targets))
    kept = {k: v for k, v in job.items() if k != "kubernetes_sd_configs"}
    # Prometheus sends its service account token (access control); here a token of our own.
    if "authorization" in kept:
        (tmp_path / "token").write_text("scraper-token\n")
        kept["authorization"] = {
            **kept["authorization"],
            "credentials_file": str(tmp_path / "token"),
        }
    config = {
        "global": {"scrape_interval": "1s"},
        "scrape_configs": [
            {
                **kept,
                "scrape_interval": "1s",
                "file_sd_configs": [{"files": [str(tmp_path / "targets.yaml")]}],
            }
        ],
    }
    assert kept["relabel_configs"] == job["relabel_configs"]  # verbatim
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    promtool = shutil.which("promtool")
    if promtool is not None:
        check = subprocess.run(
            [promtool, "check", "config", str(tmp_path / "prometheus.yml")],
            capture_output=True,
            text=True,
            check=False,
        )
        assert check.returncode == 0, check.stdout + check.stderr
    port = free_port()
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield f"http://127.0.0.1:{port}", agent
    finally:
        proc.terminate()
        proc.wait(15)


def targets_when(url: str, ready: Any, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = httpx.get(f"{url}/api/v1/targets", params={"state": "any"}, timeout=5).json()
            if last.get("status") == "success" and ready(last["data"]):
                return last["data"]  # type: ignore[no-any-return]
        except (httpx.HTTPError, ValueError):
            pass  # Prometheus answers 503 while it starts
        time.sleep(0.3)
    raise AssertionError(f"targets never settled: {last}")


def series_when(url: str, selector: str, timeout: float = 30) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while True:
        found = httpx.get(f"{url}/api/v1/series", params={"match[]": selector}, timeout=5).json()
        if found["data"] or time.monotonic() > deadline:
            (only,) = found["data"]
            return only  # type: ignore[no-any-return]
        time.sleep(0.5)


def test_the_relabelling_keeps_the_agent_and_points_at_its_port_path_and_scheme(
    prometheus: tuple[str, Agent],
) -> None:
    url, agent = prometheus
    # Settled: all three targets discovered, and each kept one scraped at least once.
    data = targets_when(
        url,
        lambda d: (
            len(d["droppedTargets"]) + len(d["activeTargets"]) == 3
            and all(t["health"] != "unknown" for t in d["activeTargets"])
        ),
    )
    (active,) = data["activeTargets"]
    assert (active["health"], active["lastError"]) == ("up", "")
    assert active["scrapeUrl"] == f"https://127.0.0.1:{agent.port}/metrics"
    assert active["labels"] == {
        "instance": f"127.0.0.1:{agent.port}",
        "job": "gpustack-instances",
        "kubernetes_node": "gpu-h100-07",
        "manufacturer_agent": "nvidia",
    }
    dropped = sorted(t["discoveredLabels"]["__address__"] for t in data["droppedTargets"])
    assert dropped == ["127.0.0.2:9100", "127.0.0.3:9100"]
    # What was scraped keeps the agent's own labels: instance_name is not renamed, and the
    # target's `instance` is Prometheus's (honor_labels: false).
    phi = series_when(url, 'gpustack_instance_accelerator_memory_total_mib{instance_name="phi-4"}')
    assert phi["instance"] == f"127.0.0.1:{agent.port}"
    assert phi["kubernetes_node"] == "gpu-h100-07" and phi["node"] == "gpu-h100-07"
    assert "exported_instance" not in phi
