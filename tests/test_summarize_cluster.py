"""`devicemanager summarize --live/--kubeconfig/--context` (R-X9): the cluster's sources,
asked through the API server, give the report the same texts give as files.

The fake API server (tests/kube_server.py) plays the cluster over real TLS with its own CA and
a bearer token: the pod lists of HAMi's device-plugin DaemonSet and of this agent's, and the
service and pod proxies answering the recorded texts (fixtures/summarize/ pastes of HAMi's
scheduler and monitor, and a scenario's golden /metrics for this agent). A proxy path asked
with the wrong scheme or port is not served, so the paths themselves are checked. The command
runs as a user runs it, a subprocess with a kubeconfig.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devicemanager.report import summarize_texts, to_json
from devicemanager.report.cluster import kubeconfig_files
from tests.conftest import FIXTURES, NODES, REPO, agent_env
from tests.kube_server import FakeApiServer

pytestmark = pytest.mark.timeout(120)
SUMMARIZE = FIXTURES / "summarize"
MONITOR = {"app.kubernetes.io/component": "hami-device-plugin"}
AGENT = {"app.kubernetes.io/name": "gpustack-device-manager"}
SCHEDULER_NAME = "service kube-system/hami-scheduler:31993"
MONITOR_A = "pod kube-system/hami-device-plugin-a:9394"
MONITOR_B = "pod kube-system/hami-device-plugin-b:9394"
AGENT_1 = "pod gpustack-system/https:dm-1:32443"
AGENT_2 = "pod gpustack-system/https:dm-2:32443"
# What each answering source serves, as the files the same report is made of.
TEXTS = {
    SCHEDULER_NAME: SUMMARIZE / "synthetic-cluster-scheduler.prom",
    MONITOR_A: SUMMARIZE / "synthetic-cluster-monitor-gpu-a.prom",
    AGENT_1: NODES / "h100-8gpu-mixed" / "golden" / "metrics.txt",
}


@pytest.fixture
def api(tmp_path: Path) -> Iterator[FakeApiServer]:
    """A cluster: HAMi's scheduler, its monitor on gpu-a (gpu-b's fails with 500), this agent
    on gpu-h100-07 and one agent pod still Pending on gpu-x."""
    server = FakeApiServer(tmp_path).start()
    server.proxied["kube-system/services/hami-scheduler:31993"] = TEXTS[SCHEDULER_NAME].read_text()
    server.add_pod("kube-system", "hami-device-plugin-a", "gpu-a", MONITOR)
    server.add_pod("kube-system", "hami-device-plugin-b", "gpu-b", MONITOR)
    server.add_pod("kube-system", "hami-scheduler-7d9", "master-1", {"app": "hami-scheduler"})
    server.proxied["kube-system/pods/hami-device-plugin-a:9394"] = TEXTS[MONITOR_A].read_text()
    server.proxy_failures["kube-system/pods/hami-device-plugin-b:9394"] = 500
    server.add_pod("gpustack-system", "dm-1", "gpu-h100-07", AGENT)
    server.add_pod("gpustack-system", "dm-2", "gpu-x", AGENT, phase="Pending")
    server.proxied["gpustack-system/pods/https:dm-1:32443"] = TEXTS[AGENT_1].read_text()
    yield server
    server.stop()


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "devicemanager", "summarize", *args],
        capture_output=True,
        text=True,
        env=env or agent_env(),
        cwd=REPO,
        timeout=60,
        check=False,
    )


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def live(api: FakeApiServer, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return cli("--kubeconfig", str(api.kubeconfig(tmp / "kubeconfig")), *args)


def sources(d: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in d["sources"]}


def test_the_live_report_is_the_report_of_the_same_texts(
    api: FakeApiServer, tmp_path: Path
) -> None:
    """(R-X9) The scheduler through the service proxy, each monitor and agent pod through the
    pod proxy (http on 9394, https on 32443): the report is `summarize` of the same texts, as
    files and in-process alike, but for the sources it names."""
    result = live(api, tmp_path, "--format", "json")
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout)
    same = json.loads(to_json(summarize_texts([(n, p.read_text()) for n, p in TEXTS.items()])))
    files = cli(*(str(p) for p in TEXTS.values()), "--format", "json")
    assert files.returncode == 0, files.stderr
    as_files = files.stdout
    for name, path in TEXTS.items():  # findings cite their source by name
        as_files = as_files.replace(str(path), name)
    for d in (got, same, f := json.loads(as_files)):
        d.pop("sources")
    assert got == same == f
    assert got["nodes"] == ["gpu-a", "gpu-b", "gpu-h100-07"]
    assert sorted(p for p in api.proxy_paths if "/services/" in p) == [
        "/api/v1/namespaces/kube-system/services/hami-scheduler:31993/proxy/metrics"
    ]
    assert "/api/v1/namespaces/gpustack-system/pods/https:dm-1:32443/proxy/metrics" in (
        api.proxy_paths
    )
    assert not any("dm-2" in p for p in api.proxy_paths)  # Pending: not asked


def test_each_source_answered_or_not_per_node(api: FakeApiServer, tmp_path: Path) -> None:
    """(R-X9) Every source asked is in `sources` with its kind, its node, whether it answered
    and why not; one that fails (500) or was not asked (a Pending pod) does not fail the
    report (exit 0), and the text's Sources section says the same per node."""
    result = live(api, tmp_path, "--format", "json")
    assert result.returncode == 0, result.stderr
    by_name = sources(json.loads(result.stdout))
    assert set(by_name) == {SCHEDULER_NAME, MONITOR_A, MONITOR_B, AGENT_1, AGENT_2}
    assert by_name[SCHEDULER_NAME] | {"lines": None} == {
        "name": SCHEDULER_NAME, "lines": None, "samples": 45, "unparseable": 0,
        "kind": "scheduler", "node": None, "answered": True, "error": None,
    }  # fmt: skip
    assert (by_name[MONITOR_A]["node"], by_name[MONITOR_A]["answered"]) == ("gpu-a", True)
    failed = by_name[MONITOR_B]
    assert (failed["kind"], failed["node"], failed["answered"]) == ("monitor", "gpu-b", False)
    assert failed["error"].startswith("HTTP 500") and failed["samples"] is None
    assert by_name[AGENT_1]["kind"] == "agent" and by_name[AGENT_1]["samples"] > 100
    pending = by_name[AGENT_2]
    assert (pending["node"], pending["error"]) == ("gpu-x", "not asked: the pod is Pending")
    text = live(api, tmp_path).stdout
    assert text.startswith("Accelerator summary of the cluster (3 of 5 sources)\n")
    section = text.split("Sources: 3 of 5 answered\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert [line.split()[:3] for line in section] == [
        ["cluster", "scheduler", "service"],
        ["node", "gpu-a", "monitor"],
        ["node", "gpu-b", "monitor"],
        ["node", "gpu-h100-07", "agent"],
        ["node", "gpu-x", "agent"],
    ]
    assert "did not answer: HTTP 500" in section[2]


def test_a_source_that_does_not_answer_in_time_or_answers_too_much(
    api: FakeApiServer, tmp_path: Path
) -> None:
    """(R-X9) --timeout bounds each source: a monitor that stalls is reported as not
    answering and the report is printed from the rest; --max-bytes bounds each answer."""
    api.proxy_delays["kube-system/pods/hami-device-plugin-a:9394"] = 5
    result = live(api, tmp_path, "--format", "json", "--timeout", "1")
    assert result.returncode == 0, result.stderr
    d = json.loads(result.stdout)
    slow = sources(d)[MONITOR_A]
    assert slow["answered"] is False and "within 1 s" in slow["error"], slow
    assert sources(d)[SCHEDULER_NAME]["answered"] is True
    # Without gpu-a's monitor, no container is measured: its usage is gone from the report.
    assert all(c["memory_used_mib"] is None for c in d["containers"] if c["node"] == "gpu-a")
    api.proxy_delays.clear()
    small = live(api, tmp_path, "--format", "json", "--max-bytes", "4096")
    d = json.loads(small.stdout)
    assert "larger than 4096 bytes" in sources(d)[SCHEDULER_NAME]["error"]
    assert sources(d)[MONITOR_A]["answered"] is True  # 3.6 KB: within the bound


def test_nothing_answering_is_exit_3(api: FakeApiServer, tmp_path: Path) -> None:
    """(R-X9) Only when no source answered does the command fail: one line, exit 3; more pods
    than --max-pods is refused (exit 3), not cut."""
    api.proxied.clear()
    result = live(api, tmp_path)
    assert result.returncode == 3
    assert "no source answered" in one_line(result) and SCHEDULER_NAME in result.stderr
    many = live(api, tmp_path, "--max-pods", "1")
    assert many.returncode == 3 and "more than 1 pods match" in one_line(many)
    # Credentials that fail on each request (a token file gone) are each source's error.
    kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
    doc = json.loads(kubeconfig.read_text())
    doc["users"][0]["user"] = {"tokenFile": str(tmp_path / "gone")}
    kubeconfig.write_text(json.dumps(doc))
    gone = cli("--kubeconfig", str(kubeconfig))
    assert gone.returncode == 3 and "the context's credentials: " in one_line(gone)


def test_node_asks_only_that_nodes_pods(api: FakeApiServer, tmp_path: Path) -> None:
    """(R-X9) --node lists the pods of that node only (a field selector), and narrows the
    report as it narrows text; the selectors and namespaces are flags ('' skips a kind)."""
    result = live(api, tmp_path, "--format", "json", "--node", "gpu-a")
    assert result.returncode == 0, result.stderr
    d = json.loads(result.stdout)
    assert set(sources(d)) == {SCHEDULER_NAME, MONITOR_A}
    assert d["nodes"] == ["gpu-a"]
    lists = [q for kind, q in api.requests if kind == "namespaced-list"]
    assert lists and all(q["fieldSelector"] == ["spec.nodeName=gpu-a"] for q in lists)
    api.add_pod("hami", "monitor-x", "gpu-b", {"role": "vgpu-monitor"})
    api.proxied["hami/pods/monitor-x:9100"] = TEXTS[MONITOR_A].read_text()
    other = live(api, tmp_path, "--format", "json", "--hami-namespace", "hami",
                 "--hami-monitor-selector", "role=vgpu-monitor", "--hami-monitor-port", "9100",
                 "--hami-scheduler-service", "", "--agent-selector", "")  # fmt: skip
    assert other.returncode == 0, other.stderr
    assert list(sources(json.loads(other.stdout))) == ["pod hami/monitor-x:9100"]


def test_kubeconfig_as_kubectl_finds_it(api: FakeApiServer, tmp_path: Path) -> None:
    """(R-X9) $KUBECONFIG is a colon-separated list merged as kubectl merges it (first wins,
    relative paths against their own file), ~/.kube/config otherwise; --list-contexts prints
    the contexts found and exits 0; --context picks one; --live uses the current one."""
    (tmp_path / "one").mkdir()  # no ca.crt beside it: the other file's relative one is its own
    first = api.kubeconfig(tmp_path / "one" / "first.json")
    other = tmp_path / "other"
    other.mkdir()
    (other / "ca.crt").write_bytes(api.ca.read_bytes())
    (other / "config").write_text(
        json.dumps(
            {
                "current-context": "second",  # the first file's current-context wins
                "clusters": [
                    {"name": "second", "cluster": {"server": api.url,
                                                   "certificate-authority": "ca.crt"}},
                    {"name": "test", "cluster": {"server": "https://127.0.0.1:1"}},
                ],
                "users": [{"name": "second", "user": {"token": next(iter(api.tokens))}}],
                "contexts": [{"name": "second", "context": {"cluster": "second",
                                                            "user": "second"}}],
            }
        )
    )  # fmt: skip
    env = agent_env({"KUBECONFIG": os.pathsep.join([str(first), str(other / "config")])})
    listed = cli("--list-contexts", env=env)
    assert listed.returncode == 0, listed.stderr
    rows = [line.split() for line in listed.stdout.splitlines()]
    assert rows == [
        ["CURRENT", "NAME", "CLUSTER", "USER", "NAMESPACE"],
        ["second", "second", "second"],
        ["*", "test", "test", "agent", "gpustack-system"],
    ]
    as_json = json.loads(cli("--list-contexts", "--format", "json", env=env).stdout)
    assert [(c["name"], c["current"]) for c in as_json] == [("second", None), ("test", "*")]
    # The second file's relative CA is its own folder's; the first's "test" cluster won.
    for args in (("--context", "second"), ("--live",)):
        result = cli(*args, "--format", "json", env=env)
        assert result.returncode == 0, result.stderr
        assert sources(json.loads(result.stdout))[SCHEDULER_NAME]["answered"]
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    api.kubeconfig(home / ".kube" / "config")
    assert kubeconfig_files(None, {"HOME": str(home)}) == (
        (home / ".kube" / "config",), "~/.kube/config"
    )  # fmt: skip
    assert kubeconfig_files(None, {"KUBECONFIG": f"{tmp_path}/none:{first}"})[0] == (first,)
    at_home = cli("--live", "--format", "json", env=agent_env({"HOME": str(home)}))
    assert at_home.returncode == 0, at_home.stderr


def test_in_a_pod_its_service_account(api: FakeApiServer, tmp_path: Path) -> None:
    """(R-X9) With no kubeconfig, inside a pod (KUBERNETES_SERVICE_HOST and a mounted service
    account): the service account's token and CA, as the agent's own client uses them."""
    account = api.service_account(tmp_path / "account")
    env = agent_env(
        {
            "HOME": str(tmp_path / "nohome"),
            "KUBECONFIG": "",
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(api.port),
            "DEVICEMANAGER_SERVICE_ACCOUNT_DIR": str(account),
        }
    )
    result = cli("--live", "--format", "json", env=env)
    assert result.returncode == 0, result.stderr
    assert sources(json.loads(result.stdout))[AGENT_1]["answered"] is True
    (account / "token").write_text("not-a-token")
    refused = cli("--live", env=env)
    assert refused.returncode == 3 and "HTTP 401" in one_line(refused)


def test_usage_errors(api: FakeApiServer, tmp_path: Path) -> None:
    """(R-X9) A context the kubeconfig does not hold, a kubeconfig that is not one, SOURCEs or
    --prometheus beside the cluster, --cacert, and the cluster's flags without it: exit 2, one
    line naming what to fix."""
    kubeconfig = str(api.kubeconfig(tmp_path / "kubeconfig"))
    (tmp_path / "garbage").write_text("- just\n- a list\n")
    cases = [
        (("--kubeconfig", kubeconfig, "--context", "nope"), "no context 'nope' (the contexts: "),
        (("--kubeconfig", str(tmp_path / "garbage")), "cannot be used"),
        (("--kubeconfig", str(tmp_path / "absent")), "is not a file"),
        (("--kubeconfig", kubeconfig, "file.prom"), "instead of SOURCEs"),
        (("--live", "--prometheus", "http://127.0.0.1:9"), "instead of SOURCEs or --prometheus"),
        (("--kubeconfig", kubeconfig, "--cacert", kubeconfig), "--cacert is for SOURCEs"),
        (("--max-pods", "3", "file.prom"), "--max-pods is for the cluster"),
        (("--agent-selector", "a=b"), "--agent-selector is for the cluster"),
    ]  # fmt: skip
    for args, said in cases:
        result = cli(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert said in one_line(result), (args, result.stderr)
    nowhere = cli("--live", env=agent_env({"HOME": str(tmp_path), "KUBECONFIG": ""}))
    assert nowhere.returncode == 2 and "no cluster" in one_line(nowhere)
