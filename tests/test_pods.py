"""The pod index from pod objects as the API server returns them (R-A4, R-F6)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from devicemanager.node.pods import PodIndex, has_started, pod_info, strip_scheme
from tests.conftest import NODES


def test_scenario_pod_lists_index_every_pod_with_its_container_ids() -> None:
    doc = json.loads((NODES / "h100-8gpu-mixed" / "pods.json").read_text())
    index = PodIndex.from_list(doc)
    assert len(index.pods) == len(doc["items"]) and index.skipped == 0
    qwen = next(p for p in index.pods.values() if p.name == "qwen3-32b-0")
    assert sorted(qwen.containers.values()) == ["main", "sshd"]
    assert all(len(cid) == 64 for cid in qwen.containers)
    assert qwen.owner is not None and qwen.owner.kind == "Instance"
    assert qwen.labels["app.kubernetes.io/part-of"] == qwen.owner.uid
    assert qwen.limits["main"]["nvidia.com/gpu"] == "2"
    assert qwen.started is True
    pulling = next(p for p in index.pods.values() if p.name == "deepseek-r1-distill-0")
    assert pulling.started is False and dict(pulling.containers) == {}
    crio = PodIndex.from_list(
        json.loads((NODES / "b200-per-process-unsupported" / "pods.json").read_text())
    )
    assert all(p.containers for p in crio.pods.values())


@pytest.mark.parametrize(
    ("raw", "stripped"),
    [
        ("containerd://ABC123", "abc123"),
        ("cri-o://abc", "abc"),
        ("docker://abc", "abc"),
        ("abc", "abc"),
    ],
)
def test_runtime_schemes_are_stripped(raw: str, stripped: str) -> None:
    assert strip_scheme(raw) == stripped


def test_init_regular_and_ephemeral_statuses_all_map_to_names() -> None:
    info = pod_info(
        {
            "metadata": {"uid": "U", "name": "p", "namespace": "n"},
            "status": {
                "initContainerStatuses": [
                    {
                        "name": "init",
                        "containerID": "containerd://01",
                        "state": {"terminated": {"exitCode": 0}},
                    }
                ],
                "containerStatuses": [
                    {"name": "main", "containerID": "containerd://02", "state": {"running": {}}}
                ],
                "ephemeralContainerStatuses": [
                    {"name": "debugger", "containerID": "containerd://03", "state": {"running": {}}}
                ],
            },
        }
    )
    assert info is not None and info.uid == "u"
    assert dict(info.containers) == {"01": "init", "02": "main", "03": "debugger"}


@pytest.mark.parametrize(
    ("status", "started"),
    [
        ({"state": {"waiting": {"reason": "ContainerCreating"}}}, False),
        ({"state": {"waiting": {"reason": "CrashLoopBackOff"}}, "restartCount": 3}, True),
        ({"state": {"waiting": {}}, "lastState": {"terminated": {"exitCode": 1}}}, True),
        ({"state": {"running": {}}, "ready": False}, True),  # running but not ready: started
        ({"started": True}, True),
        ({}, False),
    ],
)
def test_the_gate_is_has_started_not_is_ready(status: dict[str, Any], started: bool) -> None:
    assert has_started(status) is started


def test_damaged_pod_objects_are_skipped_or_read_defensively() -> None:
    index = PodIndex.of(
        [
            None,
            "pod",
            {},
            {"metadata": {"name": "no-uid"}},
            {
                "metadata": {"uid": "ok", "labels": "x", "ownerReferences": "y"},
                "spec": [],
                "status": {"containerStatuses": [None, {"containerID": 5}, {"name": "m"}]},
            },
        ]
    )
    assert index.skipped == 4 and list(index.pods) == ["ok"]
    assert PodIndex.from_list({"items": "nope"}).pods == {}
    assert PodIndex.from_list([]).pods == {}
