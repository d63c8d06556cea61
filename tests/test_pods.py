"""The pod index from pod objects as the API server returns them (R-A4, R-F6)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from devicemanager.node import jsonlist
from devicemanager.node.pods import (
    MAX_POD_BYTES,
    MAX_PODS_FILE_BYTES,
    PodIndex,
    PodsFile,
    has_started,
    pod_info,
    strip_scheme,
)
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


# -- a pods file is read pod by pod (issue 44, item 7) ------------------------------------------

H100 = NODES / "h100-8gpu-mixed"
BGE = "bge-m3-0"  # shares its sliced card with llama-3-8b-0


def published_series(
    pods_file: Path,
) -> dict[str, set[tuple[str, tuple[tuple[str, str], ...], float]]]:
    """Every per-grant sample of one round of the agent replaying the H100 node with these pods,
    by the pod it is of."""
    from prometheus_client.parser import text_string_to_metric_families

    from devicemanager.agent.config import parse_serve
    from devicemanager.agent.wiring import build_monitor, resolve_node
    from tests.conftest import FIXED_TIME

    settings = parse_serve(["--replay", str(H100), "--pods-file", str(pods_file)], env={})
    monitor = build_monitor(
        settings, resolve_node(settings), wall=lambda: FIXED_TIME, mono=lambda: 0.0
    )
    try:
        text = monitor.run_round().metrics.plain.decode("utf-8", "strict")
    finally:
        monitor.stop()
    out: dict[str, set[tuple[str, tuple[tuple[str, str], ...], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.startswith("gpustack_instance_accelerator_"):
                sample = (s.name, tuple(sorted(s.labels.items())), s.value)
                out.setdefault(s.labels["pod"], set()).add(sample)
    return out


def pods_doc() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((H100 / "pods.json").read_text())
    return doc


def poisoned(doc: dict[str, Any], poison: Any) -> bytes:
    """The PodList with bge-m3-0's object changed by `poison` (which may edit the JSON text of
    that one pod as bytes)."""
    items = []
    for pod in doc["items"]:
        text = json.dumps(pod).encode()
        if pod["metadata"]["name"] == BGE:
            text = poison(pod, text)
        items.append(text)
    return b'{"kind": "PodList", "apiVersion": "v1", "items": [' + b", ".join(items) + b"]}"


def invalid_utf8(pod: dict[str, Any], text: bytes) -> bytes:
    return text.replace(b'"app.kubernetes.io/name": "', b'"app.kubernetes.io/name": "\xff', 1)


def unreadable_statuses(pod: dict[str, Any], text: bytes) -> bytes:
    pod["status"]["containerStatuses"] = "not a list"
    return json.dumps(pod).encode()


def huge_annotation(pod: dict[str, Any], text: bytes) -> bytes:
    pod["metadata"]["annotations"]["note"] = "x" * (300 << 10)  # the API server allows 256 KiB
    return json.dumps(pod).encode()


def long_name(pod: dict[str, Any], text: bytes) -> bytes:
    pod["metadata"]["name"] = "bge-" + "m" * (1 << 20)
    return json.dumps(pod).encode()


def too_deep(pod: dict[str, Any], text: bytes) -> bytes:
    return text.replace(
        b'"labels": {', b'"labels": {"deep": ' + b"[" * 100_000 + b"]" * 100_000 + b", ", 1
    )


@pytest.mark.parametrize(
    "poison", [invalid_utf8, unreadable_statuses, long_name, huge_annotation, too_deep]
)
def test_one_pod_the_file_cannot_give_whole_costs_that_pod_alone(
    tmp_path: Path, poison: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """(R-A4) One invalid UTF-8 byte in one pod used to drop every pod's figures; nesting too
    deep for the decoder did too; a pod whose container statuses could not be read left its
    processes unknown on the card it shares, blanking llama-3-8b-0's figures there; a name of
    a MiB was copied into every series (44 MiB that stayed). Each pod is now decoded alone
    and held to the API server's bounds: the one pod is refused, logged with its reason,
    indexed by its identity so its processes are its own, and every other pod's series are
    exactly what they were."""
    doc = pods_doc()
    clean = tmp_path / "clean.json"
    clean.write_bytes(poisoned(doc, lambda pod, text: text))
    before = published_series(clean)
    assert BGE in before and "llama-3-8b-0" in before
    bad = tmp_path / "pods.json"
    bad.write_bytes(poisoned(pods_doc(), poison))
    caplog.set_level(logging.WARNING, "devicemanager.node.pods")
    after = published_series(bad)
    assert {pod: s for pod, s in before.items() if pod != BGE} == after
    said = [r for r in caplog.records if "pods file was refused" in r.getMessage()]
    assert len(said) == 1 and getattr(said[0], "reason", "")
    index = PodsFile(bad)()
    (refused,) = [p for p in index.pods.values() if p.refused is not None]
    assert refused.uid == "1bfadf8c-f844-01fb-f718-152b6c4a233c" and refused.name == ""
    assert len(index.pods) == len(doc["items"])


def test_a_pods_file_past_its_bound_or_no_list_is_refused_whole(tmp_path: Path) -> None:
    path = tmp_path / "pods.json"
    path.write_bytes(b'{"items": [' + b" " * MAX_PODS_FILE_BYTES + b"]}")
    with pytest.raises(ValueError, match="over"):
        PodsFile(path)()
    path.write_bytes(b'{"items": "nope"}')
    with pytest.raises(ValueError, match="no list of items"):
        PodsFile(path)()
    path.write_bytes(
        b'{"items": [{"metadata": {"uid": "u"}}, ' + b'{"x": "' + b"y" * MAX_POD_BYTES + b'"}]}'
    )
    assert list(PodsFile(path)().pods) == ["u"]  # the one past 4 MiB is refused by its length


def test_a_list_is_split_into_its_items_each_decoded_alone() -> None:
    doc = (
        b'{"kind": "PodList", "metadata": {"continue": "c"}, '
        b'"items": [{"a": "]}"}, 5, {"b": "\xff"}, {"c": 1' + b"0" * 5000 + b"}]}"
    )
    split = jsonlist.split_list(doc)
    assert split.head == {"kind": "PodList", "metadata": {"continue": "c"}}
    assert split.items == ({"a": "]}"},)
    assert [(r.index, r.reason) for r in split.refused] == [
        (1, jsonlist.NOT_AN_OBJECT),
        (2, jsonlist.INVALID_UTF8),
        (3, jsonlist.INVALID_JSON),
    ]
    # a JSON escape of a lone surrogate is no invalid byte: the pod is read (as U+FFFD later)
    assert jsonlist.split_list(b'{"items": [{"a": "\\udc80"}]}').items == ({"a": "\udc80"},)
    for junk in (b"", b"[]", b"{", b'{"items": 5}', b'{"items": [1,}', b'{"items": []} x'):
        with pytest.raises(jsonlist.ListError):
            jsonlist.split_list(junk)
