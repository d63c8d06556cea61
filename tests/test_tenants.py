"""Bounded against tenants, and against the API server and the libraries (issue 30): what one
pod carries, names or streams is that pod's problem, and a card the library stops listing is
not forgotten.

Each section holds the rule in process (the real monitor round, `tests.world.run`) and shows
it where a user sees it: the real agent (`devicemanager serve` in a subprocess, real TLS)
over a pods file, the fake API server (`tests.kube_server`) or the fake kubelet.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from devicemanager.agent.monitor import BackendWorker, Monitor
from devicemanager.grants.allocations import GPUSTACK_KEY, Mode
from devicemanager.grants.deviceplugins import (
    ContainerDevices,
    KubeletAnswer,
    PodDevices,
    pod_kubelet_grants,
)
from devicemanager.grants.dra import inventory_of
from devicemanager.grants.node import node_grants
from devicemanager.model import PartitionReading, VendorReading
from devicemanager.node.attribution import Attributor
from devicemanager.node.pods import PodIndex, PodInfo
from tests.conftest import NODES, Agent
from tests.kube_server import FakeApiServer
from tests.test_dra import ALIASES, nv_gpu, on
from tests.test_dra import claim as dra_claim
from tests.test_faults import NODE, agent_pod, in_cluster
from tests.world import CARD_MIB, ReadingBackend, Result, accel, card, gpu, pod, run, uid

pytestmark = pytest.mark.timeout(120)

H100 = NODES / "h100-8gpu-mixed"
REPLACEMENT = "\ufffd"

Series = dict[str, list[tuple[dict[str, str], float]]]


def strictly_encoded(result: Result) -> None:
    """The round's two documents are UTF-8 through and through: /metrics decodes strictly, and
    every string of the snapshot encodes (its JSON escapes would otherwise carry a surrogate)."""
    text = result.published.metrics.plain.decode("utf-8", "strict")
    list(text_string_to_metric_families(text))
    doc = json.loads(result.published.snapshot_json)
    json.dumps(doc, ensure_ascii=False).encode("utf-8", "strict")


# -- text that cannot be encoded is its pod's alone (R-A4, R-G1) ----------------------------------

# Any text, lone surrogates (what JSON's `\ud800` escape decodes to) among ordinary characters.
UNENCODABLE = st.builds(
    lambda head, surrogates, tail: head + "".join(surrogates) + tail,
    st.text(max_size=6),
    st.lists(st.characters(categories=["Cs"]), min_size=1, max_size=3),
    st.text(max_size=6),
)
FIELDS = ["name", "namespace", "label", "owner", "owner_uid", "annotation", "container"]


def with_text(field: str, text: str) -> dict[str, Any]:
    """A pod holding card 2 whole, `text` in one of its fields."""
    obj = pod("poisoned", {"main": [accel(2, 1)]}, instance="poisoned")
    meta = obj["metadata"]
    if field == "container":  # in the spec, the status and the allocation annotation
        obj["spec"]["containers"][0]["name"] = text
        obj["status"]["containerStatuses"][0]["name"] = text
        allocated = json.loads(meta["annotations"][GPUSTACK_KEY])
        meta["annotations"][GPUSTACK_KEY] = json.dumps({text: allocated["main"]})
    if field in ("name", "namespace"):
        meta[field] = text
    elif field == "label":
        meta["labels"][text] = text
    elif field == "owner":
        meta["ownerReferences"][0]["name"] = text
    elif field == "owner_uid":
        meta["ownerReferences"][0]["uid"] = text
        meta["labels"]["app.kubernetes.io/part-of"] = text
    elif field == "annotation":
        meta["annotations"][f"tenant.example/{text}"] = text
    return obj


def tenants() -> tuple[list[dict[str, Any]], list[Any]]:
    return [
        pod("a", {"main": [accel(0, 1)]}, instance="a"),
        pod("b", {"main": [accel(1, 3, 800_000)]}, instance="b"),
    ], [card(0), card(1), card(2)]


def not_card_2(series: Series) -> set[Any]:
    """Every series but the Instance series on card 2 (the poisoned pod's) and the counters."""
    return {
        (name, tuple(sorted(labels.items())), value)
        for name, samples in series.items()
        if not name.startswith(("gpustack_accelerator_allocation", "gpustack_accelerator_pod"))
        and "duration" not in name
        for labels, value in samples
        if not (name.startswith("gpustack_instance_") and labels.get("id") == gpu(2))
    }


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(field=st.sampled_from(FIELDS), text=UNENCODABLE)
def test_text_that_cannot_be_encoded_is_replaced_and_costs_no_pod_its_figures(
    tmp_path: Path, field: str, text: str
) -> None:
    """(R-A4) Text no UTF-8 can carry, in any field of one pod, is U+FFFD in the index: the
    round completes, the snapshot and /metrics encode, every other pod's series are what they
    were, and the pod itself still publishes its card."""
    pods, cards = tenants()
    baseline = run(tmp_path, cards, pods)
    result = run(tmp_path, cards, [*pods, with_text(field, text)])
    strictly_encoded(result)
    assert result.snapshot.timestamp > 0
    assert not_card_2(result.series) == not_card_2(baseline.series)
    assert result.values("gpustack_instance_accelerator_memory_total_mib", id=gpu(2)) == [CARD_MIB]
    assert result.values("gpustack_accelerator_pod_errors", stage="figures") == [0.0]


GPUSTACK_TEXT = st.builds(
    lambda container, device, profile: json.dumps(
        {
            container: {
                "devices": {
                    "groups": [
                        {
                            "manufacturer": "nvidia",
                            "accelerators": [
                                {
                                    "id": device,
                                    "mode": 4,
                                    "allocated": 400_000,
                                    "allocatedPhysicalID": device,
                                    "allocatedPhysicalProfile": profile,
                                }
                            ],
                        }
                    ]
                }
            }
        }
    ),
    st.one_of(st.just("main"), UNENCODABLE),
    st.one_of(st.just(gpu(2)), UNENCODABLE),
    UNENCODABLE,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(annotation=GPUSTACK_TEXT)
def test_surrogate_escapes_inside_an_allocation_annotation_are_that_pods_alone(
    tmp_path: Path, annotation: str
) -> None:
    """(R-G1) The annotation's JSON is ASCII, but its `\\ud800` escapes decode to lone
    surrogates as container names, card and partition ids: read as U+FFFD, they encode."""
    pods, cards = tenants()
    baseline = run(tmp_path, cards, pods)
    poisoned = pod("poisoned", None, annotations={GPUSTACK_KEY: annotation})
    result = run(tmp_path, cards, [*pods, poisoned])
    strictly_encoded(result)
    assert not_card_2(result.series) == not_card_2(baseline.series)
    assert result.values("gpustack_accelerator_allocation_errors") == [0.0]


def test_a_pod_built_with_unencodable_text_is_left_out_at_its_boundary(tmp_path: Path) -> None:
    """(R-G1) A PodInfo that reached the round without passing the index's repair (any other
    way in) is that pod's fault at the figures stage, never a round that fails to render."""
    pods, cards = tenants()
    index = PodIndex.of(pods)
    broken = PodInfo(
        uid=uid("broken"),
        namespace="ns\ud800",
        name="broken",
        annotations=pod("broken", {"main": [accel(2, 1)]})["metadata"]["annotations"],
        containers={"c": "main"},
        started=True,
        phase="Running",
        slots=("main",),
    )
    both = PodIndex.of_infos([*index.pods.values(), broken])
    monitor = Monitor(
        [BackendWorker(ReadingBackend(VendorReading("nvidia", tuple(cards))))],
        period=15,
        deadline=5,
        liveness_timeout=60,
        node="node-1",
        pods=lambda: both,
        attributor=Attributor(tmp_path / "proc"),
    )
    published = monitor.run_round()
    monitor.stop()
    text = published.metrics.plain.decode("utf-8", "strict")
    samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
    errors = {
        s.labels["stage"]: s.value for s in samples if s.name == "gpustack_accelerator_pod_errors"
    }
    assert errors["figures"] == 1.0 and errors["grants"] == 0.0
    held = {
        s.labels["instance_name"]
        for s in samples
        if s.name == "gpustack_instance_accelerator_memory_total_mib"
    }
    assert held == {"a", "b"}


def test_a_namespace_json_cannot_encode_keeps_the_node_ready(launch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """(R-A4) The issue's case against the real agent: a pods file whose one namespace is
    `"ml-research\\ud800"` (the API server's JSON can carry it) used to fail every round for
    the whole node, /readyz 503. Now the pod publishes under `ml-research\ufffd` and every other
    series is what it was."""
    pods = json.loads((H100 / "pods.json").read_text())
    pods_file = tmp_path / "pods.json"
    pods_file.write_text(json.dumps(pods))
    agent: Agent = launch(
        "--replay", str(H100), "--pods-file", str(pods_file), "--monitor-period", "0.3"
    )
    agent.wait_for("/readyz", 200)
    before = series(agent)
    poisoned = copy.deepcopy(pods)
    (resnet,) = [p for p in poisoned["items"] if p["metadata"]["name"] == "resnet-train-7x2kq"]
    resnet["metadata"]["namespace"] = "ml-research\ud800"
    text = json.dumps(poisoned)
    assert '"ml-research\\ud800"' in text  # the JSON escape, as the API server would send it
    pods_file.write_text(text)
    fixed = f"ml-research{REPLACEMENT}"

    def moved() -> bool:
        return any(dict(labels).get("namespace") == fixed for _, labels, _ in series(agent))

    wait(moved)
    after = series(agent)
    assert {s for s in after if dict(s[1]).get("namespace") != fixed} == {
        s for s in before if dict(s[1]).get("namespace") != "ml-research"
    }
    with agent.client() as client:
        assert client.get("/readyz").status_code == 200
        doc = client.get("/monitor/snapshot").json()
    json.dumps(doc, ensure_ascii=False).encode("utf-8", "strict")
    assert "monitor round failed" not in agent.logs()


def held_by_another_pod(agent: Agent) -> list[float]:
    """The agent's count of grants refused because another pod holds what they name."""
    with agent.client() as client:
        text = client.get("/metrics").text
    return [
        s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "gpustack_accelerator_grants_refused"
        and s.labels["reason"] == "held_by_another_pod"
    ]


def series(agent: Agent) -> set[tuple[str, tuple[tuple[str, str], ...], float]]:
    """Every gpustack_ sample but timings and round counters, from the real agent."""
    with agent.client() as client:
        raw = client.get("/metrics").content
    return {
        (s.name, tuple(sorted(s.labels.items())), s.value)
        for f in text_string_to_metric_families(raw.decode("utf-8", "strict"))
        for s in f.samples
        if s.name.startswith("gpustack_instance_accelerator_")
        or s.name.startswith("gpustack_accelerator_memory_total")
    }


def wait(predicate: Any, timeout: float = 15.0, step: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(step)
    raise AssertionError("condition never held")


# -- an annotation that names another pod's card (R-X2, R-X6) -------------------------------------


MIG_A, MIG_B = f"MIG-{uid('mig a')}", f"MIG-{uid('mig b')}"


def kubelet_gives(*pods: tuple[str, str, list[str]]) -> KubeletAnswer:
    """The kubelet's answer: each (pod name, resource, device ids) in namespace `ns`."""
    return KubeletAnswer(
        pods=tuple(
            PodDevices("ns", name, (ContainerDevices("main", resource, tuple(ids)),))
            for name, resource, ids in pods
        ),
        allocatable=(),
    )


def borrowing_node(
    tmp: Path, answer: KubeletAnswer | None, with_thieves: bool = True
) -> tuple[Result, Series]:
    """Card 0 the kubelet's whole card for `owner`; card 1 a slice of `slice`, whom the kubelet
    gave a replica of it; partition MIG-a of card 2 the kubelet's for `mig-a`. `thief` names
    card 0 and card 1 in its annotation, `mig-thief` names MIG-a, `mig-b` names MIG-b, which the
    kubelet gave nobody."""
    pods = [
        pod("owner", None),
        pod("slice", {"main": [accel(1, 3, 400_000)]}),
        pod("mig-a", None),
        pod("mig-b", {"main": [accel(2, 4, 200_000, allocatedPhysicalID=MIG_B)]}),
    ]
    if with_thieves:
        pods += [
            pod("thief", {"main": [accel(0, 1), accel(1, 3, 400_000)]}),
            pod("mig-thief", {"main": [accel(2, 4, 200_000, allocatedPhysicalID=MIG_A)]}),
        ]
    parts = (
        PartitionReading(MIG_A, gpu(2), 9856, 4100, 20.0),
        PartitionReading(MIG_B, gpu(2), 9856, 1024, 55.0),
    )
    reading = VendorReading("nvidia", (card(0), card(1), card(2)), (), parts, "550.90.07")
    index = PodIndex.of(pods)
    monitor = Monitor(
        [BackendWorker(ReadingBackend(reading))],
        period=15,
        deadline=5,
        liveness_timeout=60,
        node="node-1",
        pods=lambda: index,
        attributor=Attributor(tmp / "proc"),
        podresources=None if answer is None else (lambda: answer),
    )
    published = monitor.run_round()
    monitor.stop()
    series = {
        f.name: [(s.labels, s.value) for s in f.samples]
        for f in text_string_to_metric_families(published.metrics.plain.decode())
    }
    return Result(published, published.snapshot, (), ReadingBackend(reading), series), series


def held(series: Series) -> dict[tuple[str, str], float]:
    """(instance, entry id) -> memory total, for every grant the round published."""
    return {
        (ls["instance_name"], ls["id"]): v
        for ls, v in series["gpustack_instance_accelerator_memory_total_mib"]
    }


def figures_of(series: Series) -> set[Any]:
    return {
        (name, tuple(sorted(labels.items())), value)
        for name, samples in series.items()
        if name != "gpustack_accelerator_grants_refused" and "duration" not in name
        for labels, value in samples
    }


ANSWER = kubelet_gives(
    ("owner", "nvidia.com/gpu", [gpu(0)]),
    ("slice", "nvidia.com/gpu", [f"{gpu(1)}::0"]),
    ("mig-a", "nvidia.com/mig-1g.10gb", [MIG_A]),
)


def test_an_annotation_naming_what_the_kubelet_gave_another_pod_is_refused(
    tmp_path: Path,
) -> None:
    """(R-X2) `thief` writes card 0 (the kubelet's for `owner`) and a slice of card 1 (the
    kubelet gave `slice` a replica of it) into its own annotation; `mig-thief` writes the
    partition the kubelet gave `mig-a`. Each is refused with its reason and counted; `owner`,
    `slice` and `mig-a` keep exactly the figures they had without them, and `mig-b`, whose
    partition the kubelet gave nobody, keeps its annotation's word."""
    baseline, before = borrowing_node(tmp_path, ANSWER, with_thieves=False)
    result, after = borrowing_node(tmp_path, ANSWER)
    assert (
        held(after)
        == held(before)
        == {
            ("owner", gpu(0)): float(CARD_MIB),
            ("slice", gpu(1)): float(CARD_MIB * 400_000 // 1_600_000),
            ("mig-a", MIG_A): 9856.0,
            ("mig-b", MIG_B): 9856.0,
        }
    )
    assert figures_of(after) == figures_of(before)  # every series of every holder
    assert result.values("gpustack_accelerator_grants_refused", reason="held_by_another_pod") == [
        3.0
    ]
    assert baseline.values("gpustack_accelerator_grants_refused") == [0.0, 0.0]
    # The per-process queries are not asked for the refused grants' cards on their word.
    doc = json.loads(result.published.snapshot_json)
    assert {u["podUID"] for u in doc["slices"]["usages"]} <= {uid("slice"), uid("mig-b")}


def test_a_pod_the_kubelet_gave_part_of_the_card_keeps_its_annotations_word(
    tmp_path: Path,
) -> None:
    """(R-X2) Two slices of one card, each pod given a replica by the kubelet: both are
    holders, as their annotations say; none is refused."""
    answer = kubelet_gives(
        ("owner", "nvidia.com/gpu", [gpu(0)]),
        ("slice", "nvidia.com/gpu", [f"{gpu(1)}::0"]),
        ("thief", "nvidia.com/gpu", [f"{gpu(1)}::1"]),
        ("mig-a", "nvidia.com/mig-1g.10gb", [MIG_A]),
    )
    result, after = borrowing_node(tmp_path, answer)
    assert ("thief", gpu(1)) in held(after) and ("slice", gpu(1)) in held(after)
    assert ("thief", gpu(0)) not in held(after)  # card 0 stays owner's alone
    assert result.values("gpustack_accelerator_grants_refused", reason="held_by_another_pod") == [
        2.0
    ]


def test_without_the_kubelets_answer_an_annotation_is_trusted(tmp_path: Path) -> None:
    """(R-X2) No pod-resources answer: nothing contradicts an annotation, and the docs say so."""
    result, after = borrowing_node(tmp_path, None)
    assert ("thief", gpu(0)) in held(after) and ("mig-thief", MIG_A) in held(after)
    assert result.values("gpustack_accelerator_grants_refused") == [0.0, 0.0]


def test_an_annotation_naming_a_card_another_pods_dra_claim_holds_is_refused() -> None:
    """(R-X6) `plain` holds card 3 through a DRA claim the kubelet names; `thief`'s annotation
    names card 3 whole and card 1, which no claim or plugin gives anyone: card 3 is refused,
    card 1 kept on the annotation's word, and `plain` holds its card as before."""
    plain = pod("plain", None)
    thief = pod("thief", {"main": [accel(3, 1), accel(1, 1)]})
    index = PodIndex.of([plain, thief])
    answer = KubeletAnswer(
        pods=(PodDevices("ns", "plain", (), (dra_claim("main", "c1", on("gpu-3")),)),)
    )
    inventory = inventory_of([nv_gpu("gpu-3", 3)])
    grants = node_grants(index, pod_kubelet_grants(answer, index, ALIASES, inventory))
    assert [(g.device_id, g.mode) for g in grants.by_pod[uid("plain")]] == [
        (gpu(3), Mode.EXCLUSIVE)
    ]
    assert [g.device_id for g in grants.by_pod[uid("thief")]] == [gpu(1)]
    assert [g.device_id for g in grants.refused[uid("thief")]] == [gpu(3)]
    assert grants.refused_count() == {"held_by_another_pod": 1, "contested_partition": 0}


DEVICE_PLUGIN_ONLY = NODES / "a100-device-plugin-only"


def test_a_tenant_naming_another_pods_card_reads_nothing_of_it(launch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """(R-X2) Against the real agent over the device-plugin node: a tenant's pod whose
    annotation names the card the kubelet gave `ml-training/train-llm-0` publishes nothing on
    it, the refusal is counted and logged once, and train-llm-0's series are what they were."""
    pods = json.loads((DEVICE_PLUGIN_ONLY / "pods.json").read_text())
    pods_file = tmp_path / "pods.json"
    pods_file.write_text(json.dumps(pods))
    agent: Agent = launch(
        "--replay",
        str(DEVICE_PLUGIN_ONLY),
        "--pods-file",
        str(pods_file),
        "--monitor-period",
        "0.3",
    )
    agent.wait_for("/readyz", 200)
    before = series(agent)
    card = "GPU-95be5928-15cb-4373-1907-dd7f996c73a8"  # the kubelet's for train-llm-0
    assert any(
        ("instance_name", "train-llm-0") in labels and ("id", card) in labels
        for _, labels, _ in before
    )
    thief = pod("thief", None)
    thief["metadata"]["namespace"] = "tenant-b"
    thief["metadata"]["annotations"][GPUSTACK_KEY] = json.dumps(
        {
            "main": {
                "devices": {
                    "groups": [
                        {
                            "manufacturer": "nvidia",
                            "accelerators": [{"id": card, "index": 0, "mode": 1}],
                        }
                    ]
                }
            }
        }
    )
    pods_file.write_text(json.dumps({**pods, "items": [*pods["items"], thief]}))

    wait(lambda: held_by_another_pod(agent) == [1.0])
    assert series(agent) == before
    time.sleep(1.0)
    lines = [line for line in agent.logs().splitlines() if "tenant-b/thief" in line]
    assert len(lines) == 1 and "refused" in lines[0], lines


MIXED = NODES / "h100-8gpu-mixed"


def test_a_forged_partition_or_slice_on_the_mixed_node_reads_nothing_of_it(
    launch, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """(issue 44) Against the real agent over h100-8gpu-mixed, whose device plugin gives card 4's
    MIG pods only the parent card (`GPU-641877a3…::0` under `nvidia.com/mig-3g.40gb`) and card
    3's slices as `nvidia.com/gpu.sliced`: a tenant's pod naming mistral-small-24b-0's 3g.40gb
    partition, and another naming a slice of card 3, publish nothing on them; both refusals are
    counted and logged once, and every other series is what it was."""
    pods = json.loads((MIXED / "pods.json").read_text())
    pods_file = tmp_path / "pods.json"
    pods_file.write_text(json.dumps(pods))
    agent: Agent = launch(
        "--replay", str(MIXED), "--pods-file", str(pods_file), "--monitor-period", "0.3"
    )
    agent.wait_for("/readyz", 200)
    before = series(agent)
    partition = "MIG-b167ea09-62c5-25ea-14a4-00a849298dce"  # mistral-small-24b-0's
    assert any(("id", partition) in labels for _, labels, _ in before)
    card3, card4 = (
        "GPU-da0a3442-34af-5b36-ecd5-4257d0eb2ac9",
        "GPU-641877a3-0fe7-f856-fc93-30f42be9ea97",
    )
    forged = {
        "mig-forger": {
            "id": card4,
            "index": 4,
            "mode": 4,
            "allocated": 800000,
            "allocatedPhysicalID": partition,
            "allocatedPhysicalProfile": "3g.40gb",
            "allocatedPhysicalPlacements": [{"start": 4, "length": 4}],
        },
        "slice-forger": {"id": card3, "index": 3, "mode": 3, "allocated": 640000},
    }
    forgers = []
    for name, accelerator in forged.items():
        forger = pod(name, None)
        forger["metadata"]["namespace"] = "tenant-b"
        forger["metadata"]["annotations"][GPUSTACK_KEY] = json.dumps(
            {
                "main": {
                    "devices": {
                        "groups": [{"manufacturer": "nvidia", "accelerators": [accelerator]}]
                    }
                }
            }
        )
        forgers.append(forger)
    pods_file.write_text(json.dumps({**pods, "items": [*pods["items"], *forgers]}))

    wait(lambda: held_by_another_pod(agent) == [2.0])
    assert series(agent) == before
    time.sleep(1.0)
    for name in forged:
        lines = [line for line in agent.logs().splitlines() if f"tenant-b/{name}" in line]
        assert len(lines) == 1 and "refused" in lines[0], lines


# -- one malformed line in the pod watch stream (R-A4) --------------------------------------------


@pytest.fixture
def api(tmp_path: Path) -> Iterator[FakeApiServer]:
    (tmp_path / "api").mkdir()
    server = FakeApiServer(tmp_path / "api").start()
    yield server
    server.stop()


def fake_card_pod(name: str) -> dict[str, Any]:
    """A pod holding the StaticBackend's one card whole, on the agent's node."""
    obj = pod(name, None)
    obj["metadata"]["annotations"][GPUSTACK_KEY] = json.dumps(
        {
            "main": {
                "devices": {
                    "groups": [
                        {"manufacturer": "fake", "accelerators": [{"id": "FAKE-0", "mode": 2}]}
                    ]
                }
            }
        }
    )
    obj["spec"]["nodeName"] = NODE
    return obj


def test_a_line_of_the_pod_watch_that_is_no_event_is_skipped_and_the_watch_goes_on(
    api: FakeApiServer,
    tmp_path: Path,
    launch,  # type: ignore[no-untyped-def]
) -> None:
    """(R-A4) The fake API server writes a line that is not JSON into the pod watch, then a pod
    that holds the card. The agent skips the line, counts it and logs it once, and indexes the
    pod from the same watch: its series appear with no relist. Before, the watch failed on the
    line, resumed before it, met it again, and the index stayed frozen."""
    api.add(agent_pod())
    agent: Agent = launch(
        "--manufacturer",
        "tests.fakes:StaticBackend",
        "--monitor-period",
        "0.3",
        env=in_cluster(api, tmp_path),
    )
    agent.wait_for("/readyz", 200)
    api.wait_for_watchers()
    watches = api.count("watch")

    def holders() -> set[str]:
        with agent.client() as client:
            text = client.get("/metrics").text
        return {
            s.labels["instance_name"]
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if s.name == "gpustack_instance_accelerator_memory_total_mib"
        }

    assert holders() == set()
    api.garbage(b'{"type": "ADDED", "object": {"metadata": {"uid": ')  # cut mid-object
    api.add(fake_card_pod("first"))
    wait(lambda: holders() == {"first"}, timeout=10)
    api.garbage(b"<html>502 Bad Gateway</html>")
    api.add(fake_card_pod("second"))
    wait(lambda: holders() == {"first", "second"}, timeout=10)
    assert api.count("list") == 1 and api.count("watch") == watches  # the same watch throughout
    lines = [line for line in agent.logs().splitlines() if "not an event was skipped" in line]
    assert len(lines) == 1, lines
    with agent.client() as client:
        text = client.get("/metrics").text
    skipped = {
        s.labels["source"]: s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "gpustack_instance_metrics_collector_skipped_lines"
    }
    assert skipped == {"pods": 2.0, "resourceslices": 0.0}


# -- a card that leaves the library's enumeration mid-run (R-V2) ----------------------------------


def test_a_card_the_library_stops_listing_is_unhealthy_with_or_without_the_kubelet(
    tmp_path: Path,
) -> None:
    """(R-V2) Card 1 listed, then gone: reported unhealthy, `not_enumerated`, with the index,
    name and memory total it last had, whether the kubelet does not answer, answers without
    saying what it can allocate, or answers with card 0 only; the card that stays is as it was.
    A partition listed as a card of its own whose card is still listed is not missed."""
    xcp = replace(card(2), id="XCP-2-1", index=9, parent_id=gpu(2))
    both = VendorReading("nvidia", (card(0), card(1), card(2), xcp))
    left = VendorReading("nvidia", (card(0), card(2)))
    answers: list[KubeletAnswer | None] = [
        None,
        KubeletAnswer(pods=()),
        KubeletAnswer(pods=(), allocatable=(ContainerDevices("", "nvidia.com/gpu", (gpu(0),)),)),
    ]
    for answer in answers:
        backend = ReadingBackend(both)  # answers what `reading` is set to, round by round
        monitor = Monitor(
            [BackendWorker(backend)],
            period=15,
            deadline=5,
            liveness_timeout=60,
            node="node-1",
            pods=lambda: PodIndex(),
            attributor=Attributor(tmp_path / "proc"),
            podresources=None if answer is None else (lambda a=answer: a),
        )
        first = monitor.run_round()
        backend.reading = left
        second, third = monitor.run_round(), monitor.run_round()
        monitor.stop()
        (group,) = first.snapshot.groups
        assert [(c.id, c.unhealthy) for c in group.cards] == [
            (gpu(0), False),
            (gpu(1), False),
            (gpu(2), False),
            ("XCP-2-1", False),
        ]
        for published in (second, third):
            (group,) = published.snapshot.groups
            by_id = {c.id: c for c in group.cards}
            assert set(by_id) == {gpu(0), gpu(1), gpu(2)}, answer
            lost = by_id[gpu(1)]
            assert (lost.unhealthy, lost.unhealthy_reason) == (True, "not_enumerated")
            assert (lost.index, lost.name, lost.memory_total_mib) == (1, card(1).name, CARD_MIB)
            assert lost.memory_used_mib is None  # nothing measured of a card not listed
            assert by_id[gpu(0)] == card(0)


def test_a_card_gone_mid_run_is_reported_by_the_real_agent(launch) -> None:  # type: ignore[no-untyped-def]
    """(R-V2) The agent over a backend whose second card stops being listed after two reads,
    with no kubelet at all: /metrics says the card is unhealthy and the snapshot says why."""
    agent: Agent = launch(
        "--manufacturer",
        "tests.fakes:VanishingBackend",
        "--monitor-period",
        "0.3",
        env={"DM_TEST_VANISH_AFTER": "3"},
    )
    agent.wait_for("/readyz", 200)

    def cards() -> dict[str, Any]:
        with agent.client() as client:
            doc = client.get("/monitor/snapshot").json()
        return {c["id"]: c for g in doc["groups"] for c in g["accelerators"]}

    wait(lambda: cards().get("FAKE-1", {}).get("unhealthyReason") == "not_enumerated")
    lost = cards()["FAKE-1"]
    assert (lost["unhealthy"], lost["index"]) == (True, 1)
    assert cards()["FAKE-0"]["unhealthy"] is False
    with agent.client() as client:
        text = client.get("/metrics").text
    unhealthy = {
        s.labels["id"]: s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "gpustack_accelerator_unhealthy"
    }
    assert unhealthy == {"FAKE-0": 0.0, "FAKE-1": 1.0}


def hog(name: str, grants: int, created: str = "2026-11-20T08:00:00Z") -> dict[str, Any]:
    """A pod whose HAMi annotation names `grants` MIG partitions of card 0, none of them real:
    each is a grant of its own (a partition that is gone still says who held it)."""
    migs = [
        {
            "containerIndex": 0,
            "gpuUUID": gpu(0),
            "migUUID": f"MIG-{i:08x}-7a1c-5e2f-9d3b-{name.encode().hex()[:12]:0<12}",
            "profile": "1g.10gb",
        }
        for i in range(grants)
    ]
    annotations = {"hami.io/vgpu-mig-allocations": json.dumps(migs)}
    return pod(name, None, annotations=annotations, containers=["main"], created=created)


def test_a_pod_past_the_per_pod_bound_of_grants_is_left_out_whole(tmp_path: Path) -> None:
    """(R-G1, issue 30) An annotation is the tenant's own text: one naming 129 cards would be
    thousands of series. The pod is left out whole (no series, counted as a grants error, the
    reason in the log), a pod naming exactly 128 is published, and the pod beside them keeps
    its card's figures."""
    victim = pod("victim", {"main": [accel(0, 1)]})
    result = run(tmp_path, [card(0)], [victim, hog("hog", 129), hog("edge", 128)])
    pods_in = {ls.get("pod") for family in result.series.values() for ls, _ in family}
    assert "hog" not in pods_in and {"victim", "edge"} <= pods_in
    partitions = {
        ls["id"]
        for ls, _ in result.series["gpustack_instance_accelerator_unhealthy"]
        if ls["pod"] == "edge"
    }
    assert len(partitions) == 128
    assert result.values("gpustack_instance_accelerator_memory_total_mib", pod="victim") == [
        CARD_MIB
    ]
    assert result.values("gpustack_accelerator_pod_errors", stage="grants") == [1.0]


def test_grants_past_the_node_bound_are_dropped_pod_by_pod_the_newest_first() -> None:
    """(R-G1, issue 30) 40 pods of 128 grants each: the 32 oldest fit the node's 4,096 and are
    kept whole, the 8 newest are left out whole with their reason, and no pod is cut in part."""
    pods = [hog(f"p{i:02d}", 128, created=f"2026-11-20T08:{i:02d}:00Z") for i in range(40)]
    index = PodIndex.of(list(reversed(pods)))  # the index's order is not the age order
    grants = node_grants(index)
    kept = sorted(index.get(u).name for u in grants.by_pod)  # type: ignore[union-attr]
    assert kept == [f"p{i:02d}" for i in range(32)]
    assert all(len(g) == 128 for g in grants.by_pod.values())
    assert sum(len(g) for g in grants.by_pod.values()) == 4096
    dropped = {index.get(u).name: e for u, e in grants.errors.items()}  # type: ignore[union-attr]
    assert sorted(dropped) == [f"p{i:02d}" for i in range(32, 40)]
    assert all("4096 a node publishes" in e for e in dropped.values())
