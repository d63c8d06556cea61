"""The agent's cluster side against a local HTTPS API server with recorded objects: the pod watch,
the exporter role, the kubelet's figures and the per-Instance sample (R-A4, R-E3, R-E4, R-F5..F7).
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from devicemanager.figures import exposition
from devicemanager.figures.figures import InstanceMetricsUnavailable
from devicemanager.figures.snapshot import from_json
from devicemanager.grants.node import node_grants
from devicemanager.kube.cache import SharedCache
from devicemanager.kube.client import MAX_POD_EVENT_BYTES, KubeClient, KubeError, config_from
from devicemanager.kube.cluster import ClusterRound
from devicemanager.kube.informer import PodInformer
from devicemanager.kube.kubelet import (
    KubeletClient,
    KubeletError,
    SummaryPoller,
    kubelet_tls,
    usage_from_pod_metrics,
    usage_from_summary,
)
from devicemanager.kube.role import exporter_role
from devicemanager.kube.sampler import InstanceSampler
from devicemanager.node.pods import PodIndex
from tests.conftest import NODES, REPO, Agent, agent_env
from tests.kube_server import FakeApiServer, FakeKubelet, summary_for
from tests.world import accel, pod, uid

pytestmark = pytest.mark.timeout(60)
NODE = "node-1"


def kpod(
    name: str,
    *args: Any,
    node: str = NODE,
    ready: bool = True,
    namespace: str | None = None,
    labels: dict[str, str] | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    obj = pod(name, *args, **kwargs)
    obj["spec"]["nodeName"] = node
    obj["status"]["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
    obj["status"]["podIP"] = "10.0.0.9"
    if namespace:
        obj["metadata"]["namespace"] = namespace
    obj["metadata"]["labels"].update(labels or {})
    return obj


def agent_pod(manufacturer: str, ready: bool = True) -> dict[str, Any]:
    return kpod(
        f"device-manager-{manufacturer}-x1",
        None,
        containers=["device-manager"],
        namespace="gpustack-system",
        ready=ready,
        labels={
            "app.kubernetes.io/component": "device-manager",
            "gpustack.ai/manufacturer": manufacturer,
        },
    )


@pytest.fixture
def api(tmp_path: Path) -> Iterator[FakeApiServer]:
    server = FakeApiServer(tmp_path).start()
    yield server
    server.stop()


def client_for(api: FakeApiServer, tmp: Path) -> KubeClient:
    config = config_from(api.kubeconfig(tmp / "kubeconfig"))
    assert config is not None
    client = KubeClient(config, timeout=5)
    api.closers.append(client.close)
    return client


def wait(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError("condition never held")


def names(informer: PodInformer) -> set[str]:
    index = informer()
    return set() if index is None else {p.name for p in index.pods.values() if not p.terminating}


@pytest.fixture
def informer(api: FakeApiServer, tmp_path: Path) -> Iterator[PodInformer]:
    inf = PodInformer(
        client_for(api, tmp_path),
        NODE,
        backoff=(0.05, 0.2),
        watch_timeout=30,
        tombstone_seconds=0.5,
    )
    yield inf
    inf.stop()
    api.cut()
    if inf._thread is not None:
        inf._thread.join(5)


def test_list_then_watch_follows_the_node_and_only_it(
    api: FakeApiServer, informer: PodInformer
) -> None:
    api.add(kpod("a", None))
    api.add(kpod("elsewhere", None, node="node-2"))
    assert informer() is None  # nothing known before the first list
    informer.start()
    wait(lambda: names(informer) == {"a"})
    api.wait_for_watchers()
    b = kpod("b", None)
    api.add(b)
    wait(lambda: names(informer) == {"a", "b"})
    changed = copy.deepcopy(b)
    changed["metadata"]["labels"]["x"] = "y"
    api.modify(changed)
    wait(lambda: informer().get(uid("b")).labels.get("x") == "y")  # type: ignore[union-attr]
    api.delete(uid("a"))
    wait(lambda: names(informer) == {"b"})
    # Deleted, but kept a while as terminating: its processes are its own, not unknown_pod.
    gone = informer().get(uid("a"))  # type: ignore[union-attr]
    assert gone is not None and gone.terminating
    wait(lambda: informer().get(uid("a")) is None)  # type: ignore[union-attr]
    assert api.count("list") == 1  # one list, then only the watch
    ((_, query),) = [r for r in api.requests if r[0] == "list"]
    assert query["fieldSelector"] == ["spec.nodeName=node-1"]


def test_a_pod_event_past_its_bound_is_dropped_and_the_watch_goes_on(
    api: FakeApiServer, informer: PodInformer
) -> None:
    """R-A4: one pod's watch event is read up to 4 MiB and its envelope; a longer line is
    dropped as it arrives (counted as malformed), the pod keeps its last version and the
    watch goes on to the next event, with no new list."""
    a = kpod("a", None)
    api.add(a)
    informer.start()
    wait(lambda: names(informer) == {"a"})
    api.wait_for_watchers()
    huge = copy.deepcopy(a)
    huge["metadata"]["annotations"] = {"big": "x" * MAX_POD_EVENT_BYTES}
    huge["metadata"]["labels"]["x"] = "huge"
    api.modify(huge)
    wait(lambda: informer.malformed == 1)
    assert informer().get(uid("a")).labels.get("x") is None  # type: ignore[union-attr]
    fine = copy.deepcopy(a)
    fine["metadata"]["labels"]["x"] = "fine"
    api.modify(fine)
    wait(lambda: informer().get(uid("a")).labels.get("x") == "fine")  # type: ignore[union-attr]
    assert api.count("list") == 1


def test_bookmarks_cuts_and_410(api: FakeApiServer, informer: PodInformer) -> None:
    api.add(kpod("a", None))
    informer.start()
    api.wait_for_watchers()
    api.bookmark()
    wait(lambda: informer.version == str(api.version))
    bookmarked = informer.version
    before = api.count("watch")
    api.cut()  # a connection dropped mid-stream: resume from the last version, no relist
    api.rewatched(before)
    watches = [q for k, q in api.requests if k == "watch"]
    assert watches[-1]["resourceVersion"] == [bookmarked]
    assert watches[-1]["allowWatchBookmarks"] == ["true"]
    assert api.count("list") == 1
    api.add(kpod("b", None))
    wait(lambda: "b" in names(informer))
    before = api.count("watch")
    api.expire()  # 410 Gone: the gap is lost, so list again
    wait(lambda: api.count("list") == 2)
    api.rewatched(before)
    api.add(kpod("c", None))
    wait(lambda: names(informer) == {"a", "b", "c"})


def test_api_errors_back_off_and_the_last_index_keeps_serving(
    api: FakeApiServer, informer: PodInformer
) -> None:
    api.add(kpod("a", None))
    informer.start()
    api.wait_for_watchers()
    api.failures["watch"] = [500, 500, 503]
    api.cut()
    wait(lambda: api.count("watch") >= 4)
    assert names(informer) == {"a"}  # served throughout
    api.rewatched(4)
    api.add(kpod("b", None))
    wait(lambda: names(informer) == {"a", "b"})
    assert api.count("list") == 1


def test_the_first_list_is_retried_until_it_succeeds(api: FakeApiServer, tmp_path: Path) -> None:
    api.failures["list"] = [500, 403]
    api.add(kpod("a", None))
    inf = PodInformer(client_for(api, tmp_path), NODE, backoff=(0.05, 0.1))
    inf.start()
    try:
        wait(lambda: names(inf) == {"a"})
        assert api.count("list") == 3
    finally:
        inf.stop()


def test_250_pods_listed_in_pages(api: FakeApiServer, tmp_path: Path) -> None:
    for i in range(250):
        api.add(kpod(f"p{i}", {"main": [accel(i % 8, 1)]}))
    client = client_for(api, tmp_path)
    items, version = client.list_pods(NODE, chunk=100)
    assert len(items) == 250 and version == str(api.version)
    assert api.count("list") == 3
    inf = PodInformer(client, NODE)
    inf.replace_all(items, version)
    index = inf()
    assert index is not None and len(index.pods) == 250
    assert len(node_grants(index).by_pod) == 250


def test_the_service_account_token_is_read_again_when_it_rotates(
    api: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    account = api.service_account(tmp_path / "sa")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(api.port))
    config = config_from(None, account)
    assert config is not None
    client = KubeClient(config, timeout=5)
    api.closers.append(client.close)
    api.add(kpod("a", None))
    assert len(client.list_pods(NODE)[0]) == 1
    # The kubelet rotates the projected token; the old one stops being accepted.
    api.tokens = {"token-2"}
    (account / "token").write_text("token-2")
    assert len(client.list_pods(NODE)[0]) == 1
    unauthorized = [k for k, _ in api.requests].count("list") - 2
    assert unauthorized == 1  # one 401, then the re-read token


def test_a_wrong_token_is_an_error_not_a_hang(api: FakeApiServer, tmp_path: Path) -> None:
    config = config_from(api.kubeconfig(tmp_path / "kc", token="wrong"))
    assert config is not None
    client = KubeClient(config, timeout=5)
    api.closers.append(client.close)
    with pytest.raises(KubeError) as caught:
        client.list_pods(NODE)
    assert caught.value.status == 401


# -- the exporter role ------------------------------------------------------------------------


def test_role_hands_over_when_the_first_manufacturer_turns_not_ready(
    api: FakeApiServer, informer: PodInformer
) -> None:
    api.add(agent_pod("amd"))
    api.add(agent_pod("nvidia"))
    informer.start()
    wait(lambda: len(names(informer)) == 2)
    index = informer()
    assert index is not None
    ns = "gpustack-system"
    assert exporter_role(index, ns, "device-manager-amd-x1").exporting is True
    nvidia = exporter_role(index, ns, "device-manager-nvidia-x1")
    assert (nvidia.exporting, nvidia.exporter) == (False, "amd")
    api.modify(agent_pod("amd", ready=False))
    wait(lambda: exporter_role(informer(), ns, "device-manager-nvidia-x1").exporting)  # type: ignore[arg-type]
    assert exporter_role(informer(), ns, "device-manager-amd-x1").exporting is False  # type: ignore[arg-type]


def test_role_needs_to_know_itself() -> None:
    index = PodIndex.of([agent_pod("nvidia")])
    assert exporter_role(index, None, None).exporting is False
    assert "not in the node's pod index" in exporter_role(index, "gpustack-system", "other").reason
    unlabelled = agent_pod("nvidia")
    del unlabelled["metadata"]["labels"]["gpustack.ai/manufacturer"]
    assert not exporter_role(
        PodIndex.of([unlabelled]), "gpustack-system", "device-manager-nvidia-x1"
    ).exporting


# -- the kubelet, through ClusterRound ---------------------------------------------------------


def instance_pods() -> list[dict[str, Any]]:
    limits = {"main": {"cpu": "4", "memory": "16Gi", "ephemeral-storage": "20Gi"}}
    return [
        agent_pod("nvidia"),
        kpod("vllm-0", {"main": [accel(0, 1)]}, instance="vllm", limits=limits),
        kpod("pulling-0", {"main": [accel(1, 1)]}, instance="pulling", started=False),
    ]


@pytest.fixture
def kubelet(api: FakeApiServer, tmp_path: Path) -> Iterator[FakeKubelet]:
    """This node's kubelet, its serving certificate signed by the cluster CA (TLS bootstrap)."""
    server = FakeKubelet(tmp_path / "kubelet", set(api.tokens), ca=api.authority).start()
    yield server
    server.stop()


def kubelet_client(api: FakeApiServer, kubelet: FakeKubelet, timeout: float = 5) -> KubeletClient:
    client = KubeletClient(
        "127.0.0.1",
        lambda: next(iter(api.tokens)),
        port=kubelet.port,
        verify=kubelet_tls(api.ca, insecure=False),
        timeout=timeout,
    )
    api.closers.append(client.close)
    return client


def cluster_round(poller: SummaryPoller, max_age: float = 30) -> ClusterRound:
    return ClusterRound(poller, NODE, "gpustack-system", "device-manager-nvidia-x1", max_age)


def run_round(
    api: FakeApiServer, kubelet: FakeKubelet, objects: list[dict[str, Any]]
) -> exposition.Extras:
    """One read beside the round, then the round itself, which takes that reading."""
    index = PodIndex.of(objects)
    poller = SummaryPoller(kubelet_client(api, kubelet).summary, interval=15)
    poller.read_once()
    return cluster_round(poller).round(index, node_grants(index), exposition.Extras())


def test_the_exporter_reads_its_kubelet_on_the_secure_port(
    api: FakeApiServer, kubelet: FakeKubelet
) -> None:
    objects = instance_pods()
    kubelet.summary = summary_for(objects[1:2])
    extras = run_round(api, kubelet, objects)
    assert extras.exporting and extras.kubelet_success and extras.kubelet_duration is not None
    assert extras.kubelet_age is not None and extras.kubelet_age < 5
    (vllm,) = extras.pod_level  # the never-started Instance publishes nothing
    assert (vllm.cpu_millicores.total, vllm.cpu_millicores.used) == (4000, 250)
    assert (vllm.memory_mib.total, vllm.memory_mib.used) == (16384, 900)
    assert (vllm.storage_mib.total, vllm.storage_mib.used) == (20480, 40)
    run_round(api, kubelet, objects)
    # Straight to the kubelet with the service account's token (nodes/stats), never through
    # the API server's node proxy (nodes/proxy).
    assert kubelet.requests == 2 and kubelet.unauthorized == 0
    assert api.count("summary") == 0


def test_a_kubelet_certificate_not_signed_by_the_cluster_ca_is_refused(
    api: FakeApiServer, tmp_path: Path
) -> None:
    rogue = FakeKubelet(tmp_path / "rogue", set(api.tokens)).start()  # self-signed
    try:
        rogue.summary = summary_for([])
        checked = kubelet_client(api, rogue)
        with pytest.raises(KubeletError, match="not signed by the cluster CA"):
            checked.summary()
        assert rogue.requests == 0  # no request, so the token was never sent to it
        lax = KubeletClient(
            "127.0.0.1",
            lambda: next(iter(api.tokens)),
            port=rogue.port,
            verify=kubelet_tls(None, insecure=True),
        )
        assert lax.summary() == summary_for([])  # --kubelet-insecure-tls, documented
        lax.close()
    finally:
        rogue.stop()


def test_kubelet_down_keeps_totals_drops_only_measurements(
    api: FakeApiServer, kubelet: FakeKubelet
) -> None:
    extras = run_round(api, kubelet, instance_pods())  # no summary served: 404
    assert extras.exporting and not extras.kubelet_success
    (vllm,) = extras.pod_level
    assert (vllm.cpu_millicores.total, vllm.cpu_millicores.used) == (4000, None)
    from devicemanager.model import Snapshot

    snap = Snapshot(timestamp=1.0, period_seconds=15, node=NODE)
    text = exposition.render(exposition.families(snap, True, extras)).decode()
    got = {f.name: f.samples for f in text_string_to_metric_families(text)}
    success = {
        s.labels["source"]: s.value for s in got["gpustack_instance_metrics_collector_success"]
    }
    assert success == {"kubelet": 0.0, "snapshot": 1.0}
    assert [s.value for s in got["gpustack_instance_cpu_total_millicores"]] == [4000.0]
    assert got["gpustack_instance_cpu_used_millicores"] == []


def test_a_hung_kubelet_never_holds_a_round(api: FakeApiServer, kubelet: FakeKubelet) -> None:
    objects = instance_pods()
    kubelet.summary = summary_for(objects[1:2])
    index = PodIndex.of(objects)
    poller = SummaryPoller(kubelet_client(api, kubelet, timeout=0.5).summary, interval=0.2)
    cluster = cluster_round(poller, max_age=1.0)
    poller.start()
    try:
        wait(lambda: cluster.round(index, node_grants(index), exposition.Extras()).kubelet_success)
        kubelet.delay = 3.0  # every read now hangs past its deadline
        slowest = 0.0
        deadline = time.monotonic() + 3
        extras = exposition.Extras()
        while time.monotonic() < deadline:
            started = time.monotonic()
            extras = cluster.round(index, node_grants(index), exposition.Extras())
            slowest = max(slowest, time.monotonic() - started)
            time.sleep(0.05)
        assert slowest < 0.1  # the round takes the newest reading; it never waits for one
        assert extras.exporting and not extras.kubelet_success  # and says it is not fresh
        assert extras.pod_level[0].cpu_millicores.used is None
    finally:
        poller.stop()


def test_a_pod_recreated_under_the_same_name_never_reads_its_predecessor(
    api: FakeApiServer, kubelet: FakeKubelet
) -> None:
    old = kpod(
        "vllm-0",
        {"main": [accel(0, 1)]},
        instance="vllm",
        instance_uid=uid("v1"),
        pod_uid=uid("old"),
    )
    new = kpod(
        "vllm-0",
        {"main": [accel(0, 1)]},
        instance="vllm",
        instance_uid=uid("v2"),
        pod_uid=uid("new"),
    )
    kubelet.summary = summary_for([old])  # the kubelet still reports the old pod only
    extras = run_round(api, kubelet, [agent_pod("nvidia"), new])
    assert extras.pod_level == ()  # not the predecessor's figures under the new Instance


def test_a_non_exporting_agent_never_calls_the_kubelet(
    api: FakeApiServer, kubelet: FakeKubelet
) -> None:
    objects = [agent_pod("amd"), *instance_pods()]
    kubelet.summary = summary_for(objects)
    index = PodIndex.of(objects)
    poller = SummaryPoller(kubelet_client(api, kubelet).summary, interval=0.1)
    cluster = cluster_round(poller)
    poller.start()
    try:
        for _ in range(5):
            extras = cluster.round(index, node_grants(index), exposition.Extras())
            assert extras.exporting is False and extras.pod_level == ()
            time.sleep(0.1)
    finally:
        poller.stop()
    assert kubelet.requests == 0


def test_summary_cache_shares_one_read_between_concurrent_callers() -> None:
    started = threading.Event()
    release = threading.Event()
    calls = []

    def fetch(node: str) -> dict[str, Any]:
        calls.append(node)
        started.set()
        release.wait(5)
        return {"pods": []}

    cache = SharedCache(fetch, max_age=15)
    results: list[Any] = []
    threads = [threading.Thread(target=lambda: results.append(cache.get("n"))) for _ in range(8)]
    for t in threads:
        t.start()
    started.wait(5)
    time.sleep(0.1)
    release.set()
    for t in threads:
        t.join(5)
    assert calls == ["n"] and len(results) == 8
    cache.get("n")
    assert calls == ["n"]  # within the 15 s bound: cached
    cache.get("n", max_age=0)
    assert calls == ["n", "n"]


def test_pod_metrics_fallback_and_an_entry_older_than_the_pod() -> None:
    doc = {
        "timestamp": "2026-11-20T09:00:00Z",
        "window": "30s",
        "containers": [
            {"name": "a", "usage": {"cpu": "250m", "memory": "1Gi"}},
            {"name": "b", "usage": {"cpu": "1500000n", "memory": "512Ki"}},
        ],
    }
    usage = usage_from_pod_metrics(doc, "2026-11-20T08:00:00Z")
    assert (usage.cpu_millicores, usage.memory_mib, usage.storage_mib) == (252, 1025, None)
    with pytest.raises(ValueError, match="predates"):
        usage_from_pod_metrics(doc, "2026-11-20T09:30:00Z")


@pytest.mark.parametrize(
    "answer",
    [
        [],
        "summary",
        {"pods": "x"},
        {"items": []},  # a list of another API
        {"node": {}, "pods": [{"name": "vllm-0"}]},  # no podRef
        {"pods": [{"podRef": {"name": "a", "namespace": "n"}}]},  # no uid
        {"pods": [{"podRef": {"name": "a", "namespace": "n", "uid": "u"}, "cpu": "x"}]},
    ],
)
def test_a_summary_of_another_shape_is_no_success(
    api: FakeApiServer, kubelet: FakeKubelet, answer: Any
) -> None:
    """(issue 44, item 8) The kubelet answering a summary of the wrong shape used to be read as
    a node with no pods: `collector_success{source="kubelet"} 1` while every used figure was
    dropped. Now it is a failed read, saying what is wrong with the answer."""
    objects = instance_pods()
    kubelet.summary = answer
    extras = run_round(api, kubelet, objects)
    assert extras.exporting and not extras.kubelet_success
    (vllm,) = extras.pod_level
    assert (vllm.cpu_millicores.total, vllm.cpu_millicores.used) == (4000, None)
    with pytest.raises(ValueError, match="summary"):
        usage_from_summary(answer)
    kubelet.summary = summary_for(objects[1:2])  # the kubelet answers a summary again
    assert run_round(api, kubelet, objects).kubelet_success


def test_summary_parsing_is_defensive() -> None:
    got = usage_from_summary(
        {
            "pods": [
                {
                    "podRef": {"name": "a", "namespace": "n", "uid": "u"},
                    "cpu": {"usageNanoCores": 1},
                    "memory": {"workingSetBytes": "x"},
                }
            ]
        }
    )
    assert got[("n", "a", "u")].cpu_millicores == 1 and got[("n", "a", "u")].memory_mib is None


# -- the per-Instance sample -----------------------------------------------------------------


def scenario_objects(name: str = "h100-8gpu-mixed") -> list[dict[str, Any]]:
    objects = json.loads((NODES / name / "pods.json").read_text())["items"]
    for obj in objects:
        obj["status"]["podIP"] = "10.0.0.7"
    return objects


def test_a_never_started_instance_costs_no_upstream_call(
    api: FakeApiServer, tmp_path: Path
) -> None:
    for obj in scenario_objects():
        api.add(obj)
    sampler = InstanceSampler(client_for(api, tmp_path), snapshot_url="https://127.0.0.1:1/x")
    sample = sampler.sample("gpustack-workloads", "deepseek-r1-distill")
    assert (sample.cpu_millicores.total, sample.cpu_millicores.used) == (8000, 0)
    assert api.count("summary") == 0 and api.count("podmetrics") == 0


def test_both_sources_down_is_unavailable_naming_each(api: FakeApiServer, tmp_path: Path) -> None:
    for obj in scenario_objects():
        api.add(obj)
    sampler = InstanceSampler(client_for(api, tmp_path), snapshot_url="https://127.0.0.1:1/x")
    with pytest.raises(InstanceMetricsUnavailable) as caught:
        sampler.sample("gpustack-workloads", "llama-3-8b")
    assert "kubelet: GET /api/v1/nodes/gpu-h100-07/proxy/stats/summary: 503" in str(caught.value)
    assert "metrics.k8s.io:" in str(caught.value)
    with pytest.raises(LookupError):
        sampler.sample("gpustack-workloads", "nobody")


def test_metrics_api_answers_when_the_kubelet_does_not(api: FakeApiServer, tmp_path: Path) -> None:
    objects = scenario_objects()
    for obj in objects:
        api.add(obj)
    api.pod_metrics[("gpustack-workloads", "llama-3-8b-0")] = {
        "timestamp": "2026-11-20T09:00:00Z",
        "containers": [{"name": "main", "usage": {"cpu": "3", "memory": "8Gi"}}],
    }
    sampler = InstanceSampler(client_for(api, tmp_path), snapshot_url="https://127.0.0.1:1/x")
    sample = sampler.sample("gpustack-workloads", "llama-3-8b")
    assert (sample.cpu_millicores.used, sample.memory_mib.used, sample.storage_mib.used) == (
        3000,
        8192,
        None,
    )
    assert sample.accelerators is None  # the agent could not be reached


def test_instance_metrics_command_against_a_replay_agent(
    api: FakeApiServer, tmp_path: Path, launch
) -> None:  # type: ignore[no-untyped-def]
    objects = scenario_objects()
    for obj in objects:
        api.add(obj)
    api.summaries["gpu-h100-07"] = summary_for(objects)
    agent: Agent = launch("--replay", str(NODES / "h100-8gpu-mixed"), "--monitor-period", "1")
    agent.wait_for("/readyz", 200)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "devicemanager",
            "instance-metrics",
            "gpustack-workloads",
            "llama-3-8b",
            "--kubeconfig",
            str(api.kubeconfig(tmp_path / "kc")),
            "--snapshot-url",
            agent.url("/monitor/snapshot"),
        ],
        capture_output=True,
        text=True,
        env=agent_env(),
        cwd=REPO,
        check=False,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["kind"] == "InstanceMetrics" and doc["metadata"]["name"] == "llama-3-8b"
    sample = doc["sample"]
    assert (sample["cpuTotalMillicores"], sample["cpuUsedMillicores"]) == (8000, 250)
    (acc,) = sample["accelerators"]
    assert (
        acc["mode"],
        acc["memoryTotalMiB"],
        acc["memoryUsedMiB"],
        acc["coresUtilizationPercent"],
    ) == (
        "Sliced",
        32623,
        31745,
        90.0,
    )
    # The same figure the agent's own exporter publishes for this Instance.
    with agent.client() as client:
        text = client.get("/metrics").text
    line = next(
        s
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "gpustack_instance_accelerator_cores_utilization_percent"
        and s.labels["instance_name"] == "llama-3-8b"
    )
    assert line.value == acc["coresUtilizationPercent"]


def test_the_whole_agent_in_a_cluster(
    api: FakeApiServer, kubelet: FakeKubelet, tmp_path: Path, launch
) -> None:  # type: ignore[no-untyped-def]
    objects = [agent_pod("fake"), *instance_pods()[1:]]
    for obj in objects:
        api.add(obj)
    kubelet.summary = summary_for([o for o in objects if o["metadata"]["name"] == "vllm-0"])
    agent: Agent = launch(
        "--manufacturer",
        "tests.fakes:StaticBackend",
        "--kubeconfig",
        str(api.kubeconfig(tmp_path / "kc")),
        "--node-name",
        NODE,
        "--pod-name",
        "device-manager-fake-x1",
        "--pod-namespace",
        "gpustack-system",
        "--monitor-period",
        "0.3",
        "--kubelet-host",
        "127.0.0.1",
        "--kubelet-port",
        str(kubelet.port),
    )

    def series() -> dict[str, list[Any]]:
        with agent.client() as client:
            text = client.get("/metrics").text
        return {f.name: f.samples for f in text_string_to_metric_families(text)}

    wait(
        lambda: (
            [s.value for s in series().get("gpustack_instance_cpu_used_millicores", [])] == [250.0]
        ),
        timeout=20,
    )
    got = series()
    assert [s.value for s in got["gpustack_instance_metrics_exporter"]] == [1.0]
    assert {
        s.labels["source"]: s.value
        for s in got["gpustack_instance_metrics_collector_success"]
        # No kubelet pod-resources socket on this machine: that source reports its failure, and the
        # annotation grants go on. The API server serves resource.k8s.io/v1 and the node's
        # (empty) slices are read: the DRA source succeeds (R-X6).
    } == {"backends": 1.0, "dra": 1.0, "kubelet": 1.0, "podresources": 0.0, "snapshot": 1.0}
    assert got["gpustack_instance_memory_total_mib"][0].labels["instance_name"] == "vllm"
    assert api.count("summary") == 0  # the kubelet itself (nodes/stats), not the node proxy
    # The kubelet goes away: its measurements go, the totals stay, the verdict says so.
    kubelet.summary = None
    wait(lambda: series()["gpustack_instance_cpu_used_millicores"] == [], timeout=20)
    got = series()
    assert [s.value for s in got["gpustack_instance_cpu_total_millicores"]] == [4000.0]
    assert {
        s.labels["source"]: s.value for s in got["gpustack_instance_metrics_collector_success"]
    } == {"backends": 1.0, "dra": 1.0, "kubelet": 0.0, "podresources": 0.0, "snapshot": 1.0}
    assert agent.proc.poll() is None


class CountingAgent:
    """An HTTPS server serving one snapshot, counting connections, requests and gzip asks."""

    def __init__(self, tmp: Path, document: bytes) -> None:
        import gzip as gzip_module
        import ssl
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        from devicemanager.serve.mint import self_signed

        self.connections = self.requests = self.gzipped = 0
        counter = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                counter.connections += 1
                super().setup()

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                counter.requests += 1
                body = document
                self.send_response(200)
                if "gzip" in self.headers.get("Accept-Encoding", ""):
                    counter.gzipped += 1
                    body = gzip_module.compress(document)
                    self.send_header("Content-Encoding", "gzip")
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        cert, key = self_signed(["127.0.0.1"])
        (tmp / "agent.crt").write_bytes(cert)
        (tmp / "agent.key").write_bytes(key)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(tmp / "agent.crt", tmp / "agent.key")
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.server.server_address[1]}/monitor/snapshot"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_worker_sampling_many_instances_reads_each_source_once_per_bound(
    api: FakeApiServer, tmp_path: Path
) -> None:
    objects = scenario_objects()
    for obj in objects:
        api.add(obj)
    api.summaries["gpu-h100-07"] = summary_for(objects)
    golden = (NODES / "h100-8gpu-mixed" / "golden" / "snapshot.json").read_bytes()
    timestamp = from_json(json.loads(golden)).timestamp
    agent = CountingAgent(tmp_path, golden)
    names = ["llama-3-8b", "qwen3-32b", "phi-4"]
    try:
        with InstanceSampler(
            client_for(api, tmp_path), snapshot_url=agent.url, clock=lambda: timestamp + 1
        ) as sampler:
            for _ in range(10):
                for name in names:
                    assert sampler.sample("gpustack-workloads", name).accelerators
        # Thirty samples within every bound: one list of the namespace, one summary of the
        # node, one snapshot, gzip-compressed.
        assert (api.count("namespaced-list"), api.count("summary")) == (1, 1)
        assert (agent.requests, agent.connections, agent.gzipped) == (1, 1, 1)
        with InstanceSampler(
            client_for(api, tmp_path),
            snapshot_url=agent.url,
            snapshot_max_age=0,
            clock=lambda: timestamp + 1,
        ) as sampler:
            for name in names * 4:
                sampler.sample("gpustack-workloads", name)
        # A snapshot per sample now, all over the one keep-alive connection.
        assert (agent.requests, agent.connections) == (1 + 12, 1 + 1)
    finally:
        agent.stop()
