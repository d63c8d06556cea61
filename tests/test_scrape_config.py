"""The shipped scrape configurations, run by a real Prometheus scraping the real agent (issue 12,
issue 31; R-O6, R-E6).

Debian's Prometheus is built without Kubernetes discovery, so each job's `relabel_configs` are
fed, through `file_sd_configs`, targets carrying the `__meta_kubernetes_*` labels that
discovery sets on an agent's pod (names as the Prometheus documentation lists them). Prometheus
applies the rules, its /api/v1/targets says what became of each target, and the kept one is
scraped; the series it stored are then queried.

- deploy/prometheus-scrape.yaml (`role: endpoints`): its relabelling taken verbatim.
- deploy/podmonitor.yaml: the job prometheus-operator generates for this PodMonitor, as its
  v0.93.0 writes one (pkg/prometheus/testdata/PodMonitorObjectWithMatchLabelSelector.golden):
  the phase drop, the keep on the container port's name, `namespace`, `container` and `pod`
  from the pod, `job` = `<namespace>/<name>`, `endpoint` = the port's name, the sharding rules
  with the shard the config reloader substitutes (0), and the PodMonitor's own honorLabels,
  path, scheme and TLS setting. The operator selects pods by label in its `kubernetes_sd_configs`
  (`selectors`), which file_sd has not: the targets here are the pods it would have selected.

Both scrape with honor_labels: the tenant series keep their own namespace, pod and container,
and the agent's own series get the target's.

Not checked here: that a real cluster's discovery produces those labels from the manifests,
the job's `namespaces` restriction, and the PodMonitor's bearer token (the agent here runs
without access control; tests/test_deploy.py scrapes with a token).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.conftest import NODES, REPO, Agent, free_port

pytestmark = pytest.mark.timeout(120)
DEPLOY = REPO / "deploy"
META = "__meta_kubernetes_"
AGENT_POD = "gpustack-device-manager-nvidia-x8v2p"  # the agent's own pod in the H100 scenario


def endpoint(address: str, **annotations: str) -> dict[str, Any]:
    """One target group as endpoints discovery would describe an agent pod's endpoint."""
    labels = {
        f"{META}namespace": "gpustack-system",
        f"{META}service_name": "gpustack-device-manager",
        f"{META}pod_name": AGENT_POD,
        f"{META}pod_container_name": "device-manager",
        f"{META}pod_node_name": "gpu-h100-07",
        f"{META}pod_label_gpustack_ai_manufacturer": "nvidia",
        f"{META}endpoint_port_name": "https",
    }
    for key, value in annotations.items():
        labels[f"{META}service_annotation_prometheus_io_{key}"] = value
        labels[f"{META}service_annotationpresent_prometheus_io_{key}"] = "true"
    return {"targets": [address], "labels": labels}


@pytest.fixture
def prometheus(tmp_path: Path, launch, run_prometheus) -> tuple[str, Agent]:  # type: ignore[no-untyped-def]
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
    return run_prometheus(config), agent


@pytest.fixture
def run_prometheus(tmp_path: Path) -> Iterator[Callable[[dict[str, Any]], str]]:
    """Starts a real Prometheus on a config, checked by promtool first; its URL. Each one
    started is stopped when the test ends."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("prometheus is not installed (Debian package prometheus; .ci/run installs it)")
    started: list[subprocess.Popen[bytes]] = []

    def start(config: dict[str, Any]) -> str:
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
        started.append(
            subprocess.Popen(
                [
                    binary,
                    f"--config.file={tmp_path / 'prometheus.yml'}",
                    f"--storage.tsdb.path={tmp_path / 'data'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        return f"http://127.0.0.1:{port}"

    yield start
    for proc in started:
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


def the_scrape_alerts_see(url: str, instance: str) -> None:
    """The expressions of DeviceManagerDown and DeviceManagerAbsent (deploy/prometheus-rules.yaml),
    evaluated by the Prometheus scraping the agent: its `up` is selected, at 1, so neither fires."""
    doc = yaml.safe_load((DEPLOY / "prometheus-rules.yaml").read_text())
    exprs = {r["alert"]: r["expr"] for g in doc["groups"] for r in g["rules"] if "alert" in r}
    down, absent = exprs["DeviceManagerDown"], exprs["DeviceManagerAbsent"]
    (up,) = query(url, down.removesuffix(" == 0"))
    assert (up["metric"]["instance"], up["value"][1]) == (instance, "1"), up
    assert query(url, down) == [] and query(url, absent) == []


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
        "namespace": "gpustack-system",
        "pod": AGENT_POD,
        "container": "device-manager",
        "kubernetes_node": "gpu-h100-07",
        "manufacturer_agent": "nvidia",
    }
    dropped = sorted(t["discoveredLabels"]["__address__"] for t in data["droppedTargets"])
    assert dropped == ["127.0.0.2:9100", "127.0.0.3:9100"]
    # What was scraped keeps the agent's own labels (honor_labels): a tenant's series its
    # namespace, pod and container, nothing renamed; the target's `instance` is Prometheus's.
    phi = series_when(url, 'gpustack_instance_accelerator_memory_total_mib{instance_name="phi-4"}')
    assert (phi["namespace"], phi["pod"], phi["container"]) == (
        "gpustack-workloads",
        "phi-4-0",
        "main",
    )
    assert phi["instance"] == f"127.0.0.1:{agent.port}" and phi["job"] == "gpustack-instances"
    assert phi["kubernetes_node"] == "gpu-h100-07" and phi["node"] == "gpu-h100-07"
    assert not [k for k in phi if k.startswith("exported_")], phi
    # The agent's own series are the target's: its namespace, pod and container.
    card = series_when(url, 'gpustack_accelerator_info{index="0"}')
    assert (card["namespace"], card["pod"], card["container"]) == (
        "gpustack-system",
        AGENT_POD,
        "device-manager",
    )
    # The alerts on the scrape itself watch this job (R-O6).
    the_scrape_alerts_see(url, f"127.0.0.1:{agent.port}")


# -- the PodMonitor, through prometheus-operator's relabelling (R-O6, R-E6) ---------------------

OPERATOR = "v0.93.0"  # the prometheus-operator release whose generated job is mirrored below


def operator_job(monitor: dict[str, Any], targets: Path) -> dict[str, Any]:
    """The scrape job prometheus-operator v0.93.0 generates for `monitor`'s one endpoint
    (pkg/prometheus/testdata/PodMonitorObjectWithMatchLabelSelector.golden of that release),
    with file_sd in place of its `kubernetes_sd_configs` (role: pod, selected by label)."""
    namespace, name = monitor["metadata"]["namespace"], monitor["metadata"]["name"]
    (endpoint_,) = monitor["spec"]["podMetricsEndpoints"]
    port = endpoint_["port"]
    return {
        "job_name": f"podMonitor/{namespace}/{name}/0",
        "honor_labels": endpoint_["honorLabels"],
        "scrape_interval": "1s",
        "metrics_path": endpoint_["path"],
        "scheme": endpoint_["scheme"],
        "tls_config": {"insecure_skip_verify": endpoint_["tlsConfig"]["insecureSkipVerify"]},
        "file_sd_configs": [{"files": [str(targets)]}],
        "relabel_configs": [
            {"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"},
            {
                "action": "drop",
                "source_labels": [f"{META}pod_phase"],
                "regex": "(Failed|Succeeded)",
            },
            {"action": "keep", "source_labels": [f"{META}pod_container_port_name"], "regex": port},
            {"source_labels": [f"{META}namespace"], "target_label": "namespace"},
            {"source_labels": [f"{META}pod_container_name"], "target_label": "container"},
            {"source_labels": [f"{META}pod_name"], "target_label": "pod"},
            {"target_label": "job", "replacement": f"{namespace}/{name}"},
            {"target_label": "endpoint", "replacement": port},
            {
                "source_labels": ["__address__", "__tmp_hash"],
                "target_label": "__tmp_hash",
                "regex": "(.+);",
                "replacement": "$1",
                "action": "replace",
            },
            {
                "source_labels": ["__tmp_hash"],
                "target_label": "__tmp_hash",
                "modulus": 1,
                "action": "hashmod",
            },
            {
                "source_labels": ["__tmp_hash", "__tmp_disable_sharding"],
                # $(SHARD), as the operator's config reloader substitutes it for shard 0
                "regex": "0;|.+;.+",
                "action": "keep",
            },
        ],
    }


def pod_target(address: str, port_name: str) -> dict[str, Any]:
    """The agent's pod as `role: pod` discovery describes one of its container ports."""
    return {
        "targets": [address],
        "labels": {
            f"{META}namespace": "gpustack-system",
            f"{META}pod_name": AGENT_POD,
            f"{META}pod_container_name": "device-manager",
            f"{META}pod_container_port_name": port_name,
            f"{META}pod_phase": "Running",
            f"{META}pod_node_name": "gpu-h100-07",
            f"{META}pod_label_app_kubernetes_io_name": "gpustack-device-manager",
        },
    }


def two_holder_scenario(tmp_path: Path) -> Path:
    """The H100 node, where the plain Job pod's second container `evaluator` is granted card 2
    beside `trainer`: a grant no one container holds."""
    node = tmp_path / "node"
    shutil.copytree(NODES / "h100-8gpu-mixed", node)
    doc = json.loads((node / "pods.json").read_text())
    (pod,) = [p for p in doc["items"] if p["metadata"]["name"] == "resnet-train-7x2kq"]
    key = "device.gpustack.ai/accelerator.allocated"
    allocated = json.loads(pod["metadata"]["annotations"][key])
    allocated["evaluator"] = allocated["trainer"]
    pod["metadata"]["annotations"][key] = json.dumps(allocated)
    (trainer,) = pod["spec"]["containers"]
    pod["spec"]["containers"].append({**trainer, "name": "evaluator"})
    (status,) = pod["status"]["containerStatuses"]
    pod["status"]["containerStatuses"].append({**status, "name": "evaluator"})
    (node / "pods.json").write_text(json.dumps(doc))
    return node


def query(url: str, expr: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{url}/api/v1/query", params={"query": expr}, timeout=5).json()
    assert answer["status"] == "success", (expr, answer)
    return answer["data"]["result"]  # type: ignore[no-any-return]


def test_through_the_podmonitor_tenant_series_keep_their_namespace_and_the_agents_get_its_own(
    tmp_path: Path,
    launch,  # type: ignore[no-untyped-def]
    run_prometheus: Callable[[dict[str, Any]], str],
) -> None:
    """Issue 31: the PodMonitor's honorLabels, under the relabelling prometheus-operator v0.93.0
    generates for it. Every Instance series keeps its tenant's namespace and names its holder
    (`pod`, and `container` where one container holds the grant); none is renamed
    `exported_*`; the agent's own series get the target's namespace, pod and container; the
    dashboard's namespace list is the tenants'; and the Shared query of docs/metrics.md counts
    the shared card once per namespace."""
    agent: Agent = launch("--replay", str(two_holder_scenario(tmp_path)), "--monitor-period", "1")
    agent.wait_for("/readyz", 200)
    docs = list(yaml.safe_load_all((DEPLOY / "podmonitor.yaml").read_text()))
    (monitor,) = [d for d in docs if d and d["kind"] == "PodMonitor"]
    targets = tmp_path / "targets.yaml"
    targets.write_text(
        yaml.safe_dump(
            [
                pod_target(f"127.0.0.1:{agent.port}", "https"),
                pod_target("127.0.0.2:9090", "profiling"),  # another port: not this endpoint
            ]
        )
    )
    url = run_prometheus(
        {"global": {"scrape_interval": "1s"}, "scrape_configs": [operator_job(monitor, targets)]}
    )
    data = targets_when(
        url,
        lambda d: (
            len(d["droppedTargets"]) + len(d["activeTargets"]) == 2
            and all(t["health"] != "unknown" for t in d["activeTargets"])
        ),
    )
    (active,) = data["activeTargets"]
    assert (active["health"], active["lastError"]) == ("up", "")
    assert active["labels"] == {
        "instance": f"127.0.0.1:{agent.port}",
        "job": "gpustack-system/gpustack-device-manager",
        "namespace": "gpustack-system",
        "pod": AGENT_POD,
        "container": "device-manager",
        "endpoint": "https",
    }
    target = {
        "instance": f"127.0.0.1:{agent.port}",
        "job": "gpustack-system/gpustack-device-manager",
        "endpoint": "https",
    }

    # A tenant's series: its own namespace, its holder pod and container; the target's
    # instance, job and endpoint.
    phi = series_when(url, 'gpustack_instance_accelerator_memory_total_mib{instance_name="phi-4"}')
    assert (phi["namespace"], phi["pod"], phi["container"]) == (
        "gpustack-workloads",
        "phi-4-0",
        "main",
    )
    assert {k: phi[k] for k in target} == target
    # Two containers hold card 2: the series names the pod and no container, not the agent's.
    resnet = series_when(
        url, 'gpustack_instance_accelerator_memory_total_mib{instance_name="resnet-train-7x2kq"}'
    )
    assert (resnet["namespace"], resnet["pod"]) == ("ml-research", "resnet-train-7x2kq")
    assert "container" not in resnet, resnet
    # The agent's own series: the target's namespace, pod and container.
    for selector in (
        'gpustack_accelerator_info{index="0"}',
        'gpustack_instance_metrics_collector_success{source="snapshot"}',
        'gpustack_accelerator_backend_up{manufacturer="nvidia"}',
    ):
        own = series_when(url, selector)
        assert {k: own[k] for k in ("namespace", "pod", "container", *target)} == {
            **target,
            "namespace": "gpustack-system",
            "pod": AGENT_POD,
            "container": "device-manager",
        }, own
    # The alerts on the scrape itself watch this job too (R-O6).
    the_scrape_alerts_see(url, f"127.0.0.1:{agent.port}")
    # Nothing renamed, anywhere.
    labels = httpx.get(
        f"{url}/api/v1/labels", params={"match[]": '{__name__=~"gpustack_.+"}'}, timeout=5
    ).json()["data"]
    assert "namespace" in labels and not [n for n in labels if n.startswith("exported_")], labels
    # The dashboard's namespace list, from its own variable: the tenants', not the agent's.
    dashboard = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    (variable,) = [v for v in dashboard["templating"]["list"] if v["name"] == "namespace"]
    listed = re.fullmatch(r"label_values\((.+), *namespace\)", variable["query"]["query"])
    assert listed, variable
    namespaces = {r["metric"]["namespace"] for r in query(url, listed.group(1))}
    assert namespaces == {"gpustack-workloads", "ml-research", "notebooks"}

    # docs/metrics.md's Shared query: card 5, 81,559 MiB, held by two notebooks, counts once;
    # summed per holder it would read twice the card.
    (shared,) = query(url, SHARED_TOTAL)
    assert (shared["metric"], float(shared["value"][1])) == ({"namespace": "notebooks"}, 81559.0)
    (naive,) = query(
        url,
        'sum by (namespace) (gpustack_instance_accelerator_memory_total_mib{mode="Shared"})',
    )
    assert float(naive["value"][1]) == 2 * 81559.0
    (used,) = query(url, SHARED_USED)
    assert float(used["value"][1]) == 11338.0


def metrics_md_query(first_words: str) -> str:
    """The PromQL line of docs/metrics.md that follows the comment starting `first_words`."""
    lines = (REPO / "docs" / "metrics.md").read_text().splitlines()
    (at,) = [i for i, line in enumerate(lines) if line.startswith(f"# {first_words}")]
    return lines[at + 1].strip()


SHARED_TOTAL = metrics_md_query("A Shared card's memory, once per namespace")
SHARED_USED = metrics_md_query("A Shared card's memory in use, once per namespace")
