"""Rules of the cluster side no other test holds (issue 12; R-E3, R-F5, R-F7): the exporter role
is elected in the agent's own namespace only, `instance-metrics` reads the newest pod of an
Instance, and the kubelet summary cache expires.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devicemanager.kube.cache import SharedCache
from devicemanager.kube.role import exporter_role
from devicemanager.kube.sampler import InstanceSampler
from devicemanager.node.pods import PodIndex
from tests.kube_server import FakeApiServer
from tests.test_kube import agent_pod, client_for, kpod
from tests.world import accel, uid

pytestmark = pytest.mark.timeout(60)
OURS = "gpustack-system"


# -- R-E3: the exporter role ----------------------------------------------------------------------


def agent_in(namespace: str, manufacturer: str, ready: bool = True) -> dict[str, Any]:
    obj = agent_pod(manufacturer, ready=ready)
    obj["metadata"]["namespace"] = namespace
    obj["metadata"]["uid"] = uid(f"{namespace}/{manufacturer}")
    return obj


def test_an_agent_of_another_namespace_never_takes_the_role() -> None:
    # A second installation (another namespace) runs an AMD agent on the node; "amd" sorts
    # before "nvidia", but it is not one of ours.
    index = PodIndex.of([agent_in(OURS, "nvidia"), agent_in("other-gpu-stack", "amd")])
    role = exporter_role(index, OURS, "device-manager-nvidia-x1")
    assert (role.exporting, role.exporter) == (True, "nvidia")


def test_the_role_goes_to_the_first_manufacturer_of_our_namespace() -> None:
    index = PodIndex.of([agent_in(OURS, "nvidia"), agent_in(OURS, "amd")])
    nvidia = exporter_role(index, OURS, "device-manager-nvidia-x1")
    amd = exporter_role(index, OURS, "device-manager-amd-x1")
    assert (nvidia.exporting, nvidia.exporter, amd.exporting, amd.exporter) == (
        False,
        "amd",
        True,
        "amd",
    )


def test_a_pod_of_our_name_in_another_namespace_is_not_us() -> None:
    # Our own pod is looked up by namespace and name together.
    index = PodIndex.of([agent_in("other-gpu-stack", "nvidia")])
    role = exporter_role(index, OURS, "device-manager-nvidia-x1")
    assert role.exporting is False and "not in the node's pod index" in role.reason


def test_a_terminating_or_unready_agent_hands_the_role_on() -> None:
    going = agent_in(OURS, "amd")
    going["metadata"]["deletionTimestamp"] = "2026-11-20T09:00:00Z"
    index = PodIndex.of([agent_in(OURS, "nvidia"), going])
    assert exporter_role(index, OURS, "device-manager-nvidia-x1").exporting is True
    index = PodIndex.of([agent_in(OURS, "nvidia"), agent_in(OURS, "amd", ready=False)])
    assert exporter_role(index, OURS, "device-manager-nvidia-x1").exporting is True


def test_a_pod_without_the_component_label_is_no_agent() -> None:
    impostor = agent_in(OURS, "amd")
    del impostor["metadata"]["labels"]["app.kubernetes.io/component"]
    index = PodIndex.of([agent_in(OURS, "nvidia"), impostor])
    assert exporter_role(index, OURS, "device-manager-nvidia-x1").exporting is True


def test_no_ready_agent_exports_nothing() -> None:
    index = PodIndex.of([agent_in(OURS, "nvidia", ready=False)])
    role = exporter_role(index, OURS, "device-manager-nvidia-x1")
    assert (role.exporting, role.exporter) == (False, None)


# -- R-F7: instance-metrics reads the newest pod --------------------------------------------------


@pytest.fixture
def api(tmp_path: Path) -> Iterator[FakeApiServer]:
    server = FakeApiServer(tmp_path).start()
    yield server
    server.stop()


def incarnation(name: str, created: str, cpu: str, **extra: Any) -> dict[str, Any]:
    # Never started: the sample is its totals and zeros, and no upstream is called, so which
    # pod was read shows in the CPU total alone.
    return kpod(
        name,
        {"main": [accel(0, 1)]},
        instance="vllm",
        instance_uid=uid("vllm"),
        pod_uid=uid(f"{name}@{created}"),
        created=created,
        started=False,
        limits={"main": {"cpu": cpu}},
        **extra,
    )


def test_instance_metrics_reads_the_newest_pod_of_an_instance(
    api: FakeApiServer, tmp_path: Path
) -> None:
    api.add(incarnation("vllm-a", "2026-11-20T08:00:00Z", "4"))
    api.add(incarnation("vllm-b", "2026-11-20T09:00:00Z", "8"))
    api.add(incarnation("vllm-c", "2026-11-20T07:00:00Z", "2"))
    sampler = InstanceSampler(client_for(api, tmp_path), snapshot_url="https://127.0.0.1:1/x")
    assert sampler.sample("ns", "vllm").cpu_millicores.total == 8000  # vllm-b, the 09:00 one


def test_a_terminating_newer_pod_yields_to_the_live_one(api: FakeApiServer, tmp_path: Path) -> None:
    api.add(incarnation("vllm-a", "2026-11-20T08:00:00Z", "4"))
    going = incarnation("vllm-b", "2026-11-20T09:00:00Z", "8")
    going["metadata"]["deletionTimestamp"] = "2026-11-20T09:30:00Z"
    api.add(going)
    sampler = InstanceSampler(client_for(api, tmp_path), snapshot_url="https://127.0.0.1:1/x")
    assert sampler.sample("ns", "vllm").cpu_millicores.total == 4000


def test_pods_created_in_the_same_second_are_told_apart_by_name(
    api: FakeApiServer, tmp_path: Path
) -> None:
    api.add(incarnation("vllm-b", "2026-11-20T09:00:00Z", "8"))
    api.add(incarnation("vllm-a", "2026-11-20T09:00:00Z", "4"))
    sampler = InstanceSampler(client_for(api, tmp_path), snapshot_url="https://127.0.0.1:1/x")
    assert sampler.sample("ns", "vllm").cpu_millicores.total == 8000  # "vllm-b" sorts last


# -- R-F5: the kubelet summary cache --------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_kubelet_summary_cache_expires() -> None:
    clock = Clock()
    reads: list[str] = []
    lock = threading.Lock()

    def fetch(node: str) -> dict[str, Any]:
        with lock:
            reads.append(node)
            return {"read": len(reads)}

    cache = SharedCache(fetch, max_age=15, clock=clock)
    assert cache.get("n") == {"read": 1}
    clock.now += 15  # fifteen seconds old: still within the bound
    assert cache.get("n") == {"read": 1}
    clock.now += 0.5  # past it: read again
    assert cache.get("n") == {"read": 2}
    clock.now += 10  # the new read is ten seconds old
    assert cache.get("n") == {"read": 2}
    assert cache.get("n", max_age=5) == {"read": 3}  # a caller asking for fresher gets it
    assert cache.get("other") == {"read": 4}  # per node
    assert reads == ["n", "n", "n", "other"]


def test_a_bound_of_zero_never_serves_the_cache() -> None:
    clock = Clock()
    reads: list[str] = []
    cache = SharedCache(lambda node: reads.append(node) or len(reads), max_age=0, clock=clock)
    assert [cache.get("n"), cache.get("n")] == [1, 2]  # same instant, two reads


def test_a_failed_read_is_not_cached() -> None:
    clock = Clock()
    answers: list[Any] = [RuntimeError("kubelet 503"), {"ok": True}]

    def fetch(node: str) -> Any:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    cache = SharedCache(fetch, max_age=15, clock=clock)
    with pytest.raises(RuntimeError, match="kubelet 503"):
        cache.get("n")
    assert cache.get("n") == {"ok": True}  # the next caller reads again at once


def test_the_cache_holds_a_bounded_number_of_keys() -> None:
    clock = Clock()
    reads: list[str] = []

    def fetch(key: str) -> str:
        clock.now += 1  # each read a second after the last: an age order to drop by
        reads.append(key)
        return key

    cache = SharedCache(fetch, max_age=3600, clock=clock, max_entries=4)
    for key in "abcde":
        cache.get(key)
    # The fifth key made the cache drop its oldest half (a, b); c, d, e are still held.
    assert [cache.get(k) for k in "cde"] == ["c", "d", "e"] and len(reads) == 5
    cache.get("a")
    assert reads == ["a", "b", "c", "d", "e", "a"]
