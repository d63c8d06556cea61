"""Grants of cards another pod reserved (KAI Scheduler's and Run:ai's GPU fractions) and Volcano's
vGPU annotation (issue 47, R-X12): the node's grants from real pod objects and the kubelet's
answer, and the replay scenarios `h100-kai-fractions` and `a100-volcano-vgpu`.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from devicemanager.grants.allocations import (
    UNITS_PER_CARD,
    VOLCANO_KEY,
    AllocationError,
    Mode,
    allocations_of,
    volcano_slots,
)
from devicemanager.grants.deviceplugins import ContainerDevices, KubeletAnswer, PodDevices
from devicemanager.grants.grants import grants_of
from devicemanager.grants.node import gather
from devicemanager.grants.reservations import share_of
from devicemanager.grants.sources import NodeInput
from devicemanager.node.pods import PodIndex, pod_info
from devicemanager.report.summary import summarize_texts
from tests.conftest import NODES

G0 = "GPU-5c1e6ab4-0d55-2c7b-6f03-a1d6e0b1c001"
G1 = "GPU-5c1e6ab4-0d55-2c7b-6f03-a1d6e0b1c002"
RESERVING = "kai-resource-reservation"


def pod(
    namespace: str,
    name: str,
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    containers: tuple[tuple[str, dict[str, str]], ...] = (("main", {}),),
    phase: str = "Running",
) -> dict[str, Any]:
    return {
        "metadata": {
            "uid": name,
            "namespace": namespace,
            "name": name,
            "labels": labels or {},
            "annotations": annotations or {},
        },
        "spec": {
            "containers": [{"name": c, "resources": {"limits": lim}} for c, lim in containers]
        },
        "status": {"phase": phase},
    }


def reservation(name: str, group: str, card: str | None, namespace: str = RESERVING) -> Any:
    annotations = {"run.ai/reserve_for_gpu_index": card} if card is not None else {}
    return pod(
        namespace,
        name,
        labels={"app": namespace, "runai-gpu-group": group},
        annotations=annotations,
        containers=(("resource-reservation", {"nvidia.com/gpu": "1"}),),
    )


def tenant(name: str, group: str, namespace: str = "team-a", **share: str) -> Any:
    annotations = {k.replace("_", "-"): v for k, v in share.items()}
    return pod(namespace, name, labels={"runai-gpu-group": group}, annotations=annotations)


def held(name: str, card: str, namespace: str = RESERVING) -> PodDevices:
    container = "resource-reservation" if namespace in (RESERVING, "runai-reservation") else "main"
    return PodDevices(namespace, name, (ContainerDevices(container, "nvidia.com/gpu", (card,)),))


def grants_on(objects: list[Any], answer: KubeletAnswer | None = None):  # type: ignore[no-untyped-def]
    return gather(NodeInput(PodIndex.of(objects), answer))


def test_two_fractional_pods_get_their_share_of_the_card_their_reservation_pod_holds() -> None:
    """R-X12: the reservation pod's card goes to the pods of its GPU group, each a Sliced grant
    with its own quota (gpu-fraction of the card's memory, or gpu-memory in MiB) and no compute
    cap; the reservation pod holds nothing, and no refusal fights the rule."""
    objects = [
        reservation("gpu-reservation-n1-abcde", "g-0", G0),
        tenant("qwen", "g-0", gpu_fraction="0.5"),
        tenant("dana", "g-0", namespace="team-b", gpu_memory="20480"),
    ]
    grants = grants_on(objects, KubeletAnswer(pods=(held("gpu-reservation-n1-abcde", G0),)))
    assert "gpu-reservation-n1-abcde" not in grants.by_pod
    (qwen,) = grants.by_pod["qwen"]
    (dana,) = grants.by_pod["dana"]
    assert (qwen.device_id, qwen.mode, qwen.source) == (G0, Mode.SLICED, "kai")
    assert qwen.units == UNITS_PER_CARD // 2 and qwen.memory_mib is None
    assert qwen.memory_quota_mib(81559) == 40779
    assert (dana.device_id, dana.memory_mib, dana.units) == (G0, 20480, None)
    assert qwen.cores_cap == dana.cores_cap == 100.0
    assert grants.refused_count() == {"held_by_another_pod": 0, "contested_partition": 0}
    # The kubelet's record of the card is now the tenants': the reservation pod gave it on.
    assert set(grants.kubelet) == {"qwen", "dana"}
    assert dict(grants.errors) == {} and dict(grants.disagreements) == {}


def test_the_card_is_the_kubelets_and_an_annotation_naming_another_is_a_disagreement() -> None:
    """R-X12: the reservation pod's UUID annotation is its own word, checked against what the
    kubelet gave it: a difference is noted (logged once, like any pod's), and its tenants' grant
    on a card the kubelet gave another pod is refused, as any annotation's would be."""
    objects = [
        reservation("res", "g-0", G1),
        tenant("qwen", "g-0", gpu_fraction="0.25"),
        pod("other", "other", containers=(("main", {"nvidia.com/gpu": "1"}),)),
    ]
    answer = KubeletAnswer(pods=(held("res", G0), held("other", G1, namespace="other")))
    grants = grants_on(objects, answer)
    assert set(grants.disagreements) == {"res"}
    assert "qwen" not in grants.by_pod
    assert [g.device_id for g in grants.refused["qwen"]] == [G1]
    assert [g.device_id for g in grants.by_pod["other"]] == [G1]


def test_runai_namespace_multi_card_groups_and_no_kubelet() -> None:
    """R-X12: Run:ai's `runai-reservation` is read as KAI's namespace; a pod fractional on two
    cards (`runai-gpu-group/<group>` labels) holds a slice of each; without the kubelet's answer
    (a replay without one) the reservation pod's annotation names the card."""
    objects = [
        reservation("res-a", "g-a", G0, namespace="runai-reservation"),
        reservation("res-b", "g-b", G1, namespace="runai-reservation"),
        pod(
            "team-a",
            "wide",
            labels={
                "runai-gpu-group": "g-a",
                "runai-gpu-group/g-a": "g-a",
                "runai-gpu-group/g-b": "g-b",
            },
            annotations={"gpu-fraction": ".3", "gpu-fraction-num-devices": "2"},
        ),
    ]
    grants = grants_on(objects)
    assert sorted((g.device_id, g.units) for g in grants.by_pod["wide"]) == [
        (G0, 480_000),
        (G1, 480_000),
    ]
    assert set(grants.by_pod) == {"wide"}


def test_what_is_not_a_reservation_or_not_yet_bound_holds_nothing_of_it() -> None:
    """R-X12: a pod that labels itself with a group but sits outside the reservation namespaces
    is no reservation pod (only KAI's account writes there), so it hands nobody its card; a
    fractional pod whose group no reservation pod here names yet holds nothing; a reservation
    pod without tenants still holds no figures and keeps the kubelet's record of its card."""
    objects = [
        reservation("fake", "g-0", G0, namespace="team-a"),
        tenant("qwen", "g-0", gpu_fraction="0.5"),
        reservation("lonely", "g-1", G1),
    ]
    answer = KubeletAnswer(pods=(held("fake", G0, namespace="team-a"), held("lonely", G1)))
    grants = grants_on(objects, answer)
    assert "qwen" not in grants.by_pod and "qwen" not in grants.errors
    assert [g.device_id for g in grants.by_pod["fake"]] == [G0]  # a plain pod's card
    assert "lonely" not in grants.by_pod
    assert [g.device_id for g in grants.kubelet["lonely"]] == [G1]


@pytest.mark.parametrize(
    "annotations, why",
    [
        ({"gpu-fraction": "1.5"}, "no number in (0, 1)"),
        ({"gpu-fraction": "0"}, "no number in (0, 1)"),
        ({"gpu-fraction": "nan"}, "no number in (0, 1)"),
        ({"gpu-memory": "0"}, "no positive MiB"),
        ({"gpu-memory": "2Gi"}, "no positive MiB"),
        ({"gpu-fraction": "0.5", "gpu-memory": "100"}, "KAI takes one"),
        ({"gpu-fraction": "0.5", "gpu-fraction-container-name": "ghost"}, "no container"),
    ],
)
def test_a_malformed_share_is_the_pods_fault_alone(annotations: dict[str, str], why: str) -> None:
    """R-X12: a share KAI's validator would refuse leaves that pod without grants and with its
    error (counted in pod_errors{stage="grants"}), never its neighbours on the card."""
    objects = [
        reservation("res", "g-0", G0),
        pod("team-a", "bad", labels={"runai-gpu-group": "g-0"}, annotations=annotations),
        tenant("good", "g-0", gpu_fraction="0.5"),
    ]
    grants = grants_on(objects, KubeletAnswer(pods=(held("res", G0),)))
    assert why in grants.errors["bad"] and "bad" not in grants.by_pod
    assert [g.device_id for g in grants.by_pod["good"]] == [G0]


def test_the_named_container_holds_the_share() -> None:
    """R-X12: `gpu-fraction-container-name` names the holder, else the first container."""
    obj = pod(
        "team-a",
        "two",
        labels={"runai-gpu-group": "g"},
        annotations={"gpu-memory": "4096", "gpu-fraction-container-name": "worker"},
        containers=(("sidecar", {}), ("worker", {})),
    )
    info = pod_info(obj)
    assert info is not None and share_of(info).container == "worker"
    del obj["metadata"]["annotations"]["gpu-fraction-container-name"]
    info = pod_info(obj)
    assert info is not None and share_of(info).container == "sidecar"


# -- Volcano ---------------------------------------------------------------------------------


def test_volcano_slots_are_the_containers_asking_for_a_vgpu() -> None:
    """R-X12: Volcano gives a slot to each container limiting volcano.sh/vgpu-number or -memory,
    in order: a sidecar asking for none has no slot; memory and cores as Volcano wrote them."""
    limits = {
        "sidecar": {"cpu": "1"},
        "a": {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-cores": "30"},
        "b": {"volcano.sh/vgpu-memory": "2048"},
    }
    assert volcano_slots(limits) == ("a", "b")
    text = f"{G0},NVIDIA,3000,30:;{G1},NVIDIA,2048,0:{G0},NVIDIA,1024,0:"
    got = allocations_of({VOLCANO_KEY: text}, ["sidecar", "a", "b"], volcano_slots(limits))
    assert [(a.container, a.device_id, a.memory_mib, a.cores_percent, a.source) for a in got] == [
        ("a", G0, 3000, 30, "volcano"),
        ("b", G1, 2048, 0, "volcano"),
        ("b", G0, 1024, 0, "volcano"),
    ]
    assert all(a.mode is Mode.SLICED for a in got)


def test_a_volcano_mig_placement_is_a_partition_of_its_card() -> None:
    """R-X12: Volcano's MIG mode writes `<UUID>[<group>-<position>]`: a partition of the card,
    which one not known (never a card whose id carries the brackets)."""
    (a,) = allocations_of({VOLCANO_KEY: f"{G0}[group2-3],NVIDIA,10240,0:"}, [], ("main",))
    assert (a.device_id, a.mode, a.partition_id) == (G0, Mode.PARTITIONED, None)


@pytest.mark.parametrize(
    "text", [f"{G0},NVIDIA,3000:", f"{G0},NVIDIA,x,0:", f"{G0},NVIDIA,1,0:;{G1},NVIDIA,1,0:"]
)
def test_a_malformed_volcano_annotation_raises(text: str) -> None:
    """R-X12: the pod's own fault, named by the key (one slot too many included)."""
    with pytest.raises(AllocationError, match=VOLCANO_KEY):
        allocations_of({VOLCANO_KEY: text}, ["main"], ("main",))


def test_a_volcano_pod_is_annotated_and_its_cap_restates_compute() -> None:
    """R-X12: the annotation makes the pod's grants its own word; Cores is the slice's cap."""
    obj = pod(
        "team-a",
        "v",
        annotations={VOLCANO_KEY: f"{G0},NVIDIA,3000,50:"},
        containers=(("cuda", {"volcano.sh/vgpu-number": "1"}),),
    )
    info = pod_info(obj)
    assert info is not None
    (g,) = grants_of(info)
    assert (g.mode, g.memory_mib, g.cores_cap, g.source) == (Mode.SLICED, 3000, 50.0, "volcano")


# -- the replay scenarios --------------------------------------------------------------------


def samples(scenario: str, family: str) -> dict[str, float]:
    text = (NODES / scenario / "golden" / "metrics.txt").read_text()
    return {
        s.labels["instance_name"]: s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == family
    }


def test_the_kai_scenario_gives_each_tenant_its_series_and_the_reservation_pod_none() -> None:
    """R-X12, issue 47's done-when: on the KAI node two fractional pods on one card each publish
    their own Instance series, with their quota and their own processes' memory; the
    reservation pods publish none; each namespace counts what its pods hold once."""
    scenario = "h100-kai-fractions"
    total = samples(scenario, "gpustack_instance_accelerator_memory_total_mib")
    used = samples(scenario, "gpustack_instance_accelerator_memory_used_mib")
    assert total == {
        "vllm-qwen-0": 40779,
        "notebook-dana-0": 20480,
        "embed-0": 20389,
        "train-llm-0": 81559,
    }
    assert used == {
        "vllm-qwen-0": 30208,
        "notebook-dana-0": 11776,
        "embed-0": 8960,
        "train-llm-0": 71002,
    }
    report = summarize_texts(
        [("metrics", (NODES / scenario / "golden" / "metrics.txt").read_text())]
    ).to_json()
    namespaces = report["namespaces"]
    assert "kai-resource-reservation" not in namespaces and "runai-reservation" not in namespaces
    assert namespaces["team-b"]["memory_limit_mib"] == 20480 + 20389
    assert namespaces["team-b"]["memory_used_mib"] == 11776 + 8960
    assert namespaces["team-a"]["memory_used_mib"] == 30208
    snapshot = json.loads((NODES / scenario / "golden" / "snapshot.json").read_text())
    holders = {u["container"] for u in snapshot["slices"]["usages"]}
    assert holders == {"vllm", "notebook", "embed"}


def test_the_volcano_scenario_reads_memory_and_cores_as_volcano_wrote_them() -> None:
    """R-X12: each vGPU is a Sliced Instance with Volcano's memory quota; a capped one's compute
    is restated against its cap (44% of the card under a 50% cap is 88%)."""
    scenario = "a100-volcano-vgpu"
    total = samples(scenario, "gpustack_instance_accelerator_memory_total_mib")
    cores = samples(scenario, "gpustack_instance_accelerator_cores_utilization_percent")
    assert total == {"cuda-job-0": 3000, "llm-infer-0": 20000, "trainer-0": 10240}
    assert cores == {"cuda-job-0": 88, "llm-infer-0": 68, "trainer-0": 35}


def test_labelling_oneself_into_a_group_reads_no_neighbours_figures() -> None:
    """R-X12: a pod may label itself into another's GPU group (labels are its namespace's to
    edit); it is handed a slice at most, its own processes' figures. Its own allocation
    annotation naming the card whole wins over KAI's labels, and is refused as any annotation
    naming a card the kubelet gave another pod."""
    whole = json.dumps(
        {
            "main": {
                "devices": {
                    "groups": [
                        {
                            "manufacturer": "nvidia",
                            "accelerators": [{"id": G0, "index": 0, "mode": 1, "allocated": 1}],
                        }
                    ]
                }
            }
        }
    )
    objects = [
        reservation("res", "g-0", G0),
        tenant("qwen", "g-0", gpu_fraction="0.5"),
        pod(
            "team-x",
            "nosy",
            labels={"runai-gpu-group": "g-0"},
            annotations={"gpu-fraction": "0.1", "device.gpustack.ai/accelerator.allocated": whole},
        ),
    ]
    grants = grants_on(objects, KubeletAnswer(pods=(held("res", G0),)))
    assert "nosy" not in grants.by_pod
    assert [(g.device_id, g.mode) for g in grants.refused["nosy"]] == [(G0, Mode.EXCLUSIVE)]
    assert all(g.mode is Mode.SLICED for g in grants.kubelet["qwen"])
    assert [g.source for g in grants.by_pod["qwen"]] == ["kai"]


def test_an_empty_volcano_annotation_leaves_the_kubelets_word() -> None:
    """R-X12: `volcano.sh/vgpu-ids-new` with no device allocates nothing, so a pod's device-plugin
    card is still its grant; with a device it is the pod's own word."""
    from devicemanager.grants.allocations import has_allocation_annotation

    assert not has_allocation_annotation({VOLCANO_KEY: ""})
    assert has_allocation_annotation({VOLCANO_KEY: f"{G0},NVIDIA,1,0:"})
    objects = [
        pod(
            "team-a",
            "plain",
            annotations={VOLCANO_KEY: ""},
            containers=(("main", {"nvidia.com/gpu": "1"}),),
        )
    ]
    grants = grants_on(objects, KubeletAnswer(pods=(held("plain", G0, namespace="team-a"),)))
    assert [(g.device_id, g.source) for g in grants.by_pod["plain"]] == [(G0, "kubelet")]
