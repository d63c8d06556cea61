"""Allocation annotations: GPUStack's and HAMi's formats into grants (R-G1, R-G2)."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devicemanager.grants.allocations import (
    HAMI_KEY,
    Allocation,
    AllocationError,
    Mode,
    allocations_of,
    parse_gpustack,
    parse_hami,
    parse_hami_mig,
)
from devicemanager.grants.grants import (
    Disagreement,
    Grant,
    cores_cap,
    disagreement,
    grants_from,
    grants_of,
    instance_of,
)
from devicemanager.grants.node import node_grants
from devicemanager.node.pods import PodIndex, pod_info
from tests.world import pod, uid


def gpustack(**containers: list[dict[str, Any]]) -> str:
    return json.dumps(
        {
            c: {
                "devices": {"groups": [{"id": 0, "manufacturer": "NVIDIA", "accelerators": a}]},
                "deviceIDs": ["x"],
            }
            for c, a in containers.items()
        }
    )


def test_the_reference_example_a_40_percent_slice() -> None:
    (a,) = parse_gpustack(
        gpustack(main=[{"id": "GPU-1", "index": 3, "mode": 3, "allocated": 640000}])
    )
    assert (a.container, a.manufacturer, a.device_id, a.index, a.mode, a.units) == (
        "main",
        "nvidia",
        "GPU-1",
        3,
        Mode.SLICED,
        640000,
    )


@pytest.mark.parametrize(
    ("entry", "mode"),
    [
        ({"mode": 1}, Mode.EXCLUSIVE),
        ({"mode": 2}, Mode.SHARED),
        ({"mode": 3}, Mode.SLICED),
        (
            {"mode": 4, "allocatedPhysicalID": "MIG-1", "allocatedPhysicalProfile": "1g.10gb"},
            Mode.PARTITIONED,
        ),
        # An older release numbered Visibility 4; a partition always records its placement.
        ({"mode": 4}, Mode.VISIBILITY),
        ({"mode": 5}, Mode.VISIBILITY),
        ({"mode": "Sliced"}, Mode.SLICED),
    ],
)
def test_modes_are_names(entry: dict[str, Any], mode: Mode) -> None:
    (a,) = parse_gpustack(gpustack(main=[{"id": "GPU-1", **entry}]))
    assert a.mode is mode


def test_mode_none_holds_nothing() -> None:
    assert parse_gpustack(gpustack(main=[{"id": "GPU-1", "mode": 0}])) == ()


@pytest.mark.parametrize(
    "text",
    [
        "",
        "null",
        "[]",
        '{"main": 1}',
        '{"main": {"devices": {"groups": {}}}}',
        gpustack(main=[{"mode": 1}]),
        gpustack(main=[{"id": "GPU-1", "mode": 9}]),
        gpustack(main=[{"id": "GPU-1", "mode": 3, "allocated": -5}]),
        gpustack(main=[{"id": "GPU-1", "mode": True}]),
        "[" * 5000,
    ],
)
def test_malformed_gpustack_annotations_raise_allocation_error(text: str) -> None:
    with pytest.raises(AllocationError):
        parse_gpustack(text)


def test_hami_slots_follow_containers_and_empty_ones_keep_their_place() -> None:
    text = "GPU-a,NVIDIA,3000,20:;;GPU-a,NVIDIA,5000,0:GPU-b,NVIDIA,1000,100:;"
    out = parse_hami(text, ["init", "main", "side"])
    assert [(a.container, a.device_id, a.memory_mib, a.cores_percent) for a in out] == [
        ("init", "GPU-a", 3000, 20),
        ("side", "GPU-a", 5000, 0),
        ("side", "GPU-b", 1000, 100),
    ]
    assert all(a.mode is Mode.SLICED and a.source == "hami" for a in out)


def test_hami_mig_placements_and_the_older_encoding() -> None:
    mig = json.dumps(
        [
            {
                "containerIndex": 1,
                "deviceIndex": 0,
                "gpuUUID": "GPU-p",
                "profile": "1g.10gb",
                "migUUID": "MIG-x",
                "gpuInstanceID": 9,
                "computeInstanceID": 0,
            }
        ]
    )
    # Slot b's partition is also in the MIG annotation, which names its UUID: taken from there.
    # Slot a's is only in the older encoding: a partition no UUID was recorded for.
    out = parse_hami("GPU-q[1-0],NVIDIA,9856,0:;GPU-p[9-0],NVIDIA,9856,0:;", ["a", "b"], mig)
    assert sorted((a.container, a.device_id, a.partition_id) for a in out) == [
        ("a", "GPU-q", None),
        ("b", "GPU-p", "MIG-x"),
    ]
    assert all(a.mode is Mode.PARTITIONED for a in out)
    (only,) = parse_hami_mig(mig, ["a", "b"])
    assert (only.container, only.partition_id, only.profile) == ("b", "MIG-x", "1g.10gb")


@pytest.mark.parametrize(
    "text",
    [
        "GPU-a,NVIDIA,x,1:;",
        "GPU-a,NVIDIA,1:;",
        ",NVIDIA,1,1:;",
        "GPU-a,NVIDIA,1,1:;GPU-b,NVIDIA,1,1:;",
    ],
)
def test_malformed_hami_annotations_raise_allocation_error(text: str) -> None:
    with pytest.raises(AllocationError):
        parse_hami(text, ["only"])


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=200))
def test_no_text_makes_the_parsers_raise_anything_else(text: str) -> None:
    for parse in (
        lambda: parse_gpustack(text),
        lambda: parse_hami(text, ["a", "b"]),
        lambda: parse_hami_mig(text, ["a"]),
    ):
        with contextlib.suppress(AllocationError):
            parse()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=15,
)
keys = st.sampled_from(
    [
        "id",
        "index",
        "mode",
        "allocated",
        "allocatedPhysicalID",
        "allocatedPhysicalProfile",
        "allocatedPhysicalPlacements",
    ]
)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(keys, json_values), json_values, json_values)
def test_no_json_shape_makes_the_gpustack_parser_raise_anything_else(
    accelerator: dict[str, Any], group_extra: Any, container_extra: Any
) -> None:
    for doc in (
        {
            "main": {
                "devices": {"groups": [{"manufacturer": "nvidia", "accelerators": [accelerator]}]}
            }
        },
        {"main": {"devices": {"groups": [group_extra]}}},
        {"main": container_extra},
        container_extra,
    ):
        with contextlib.suppress(AllocationError):
            parse_gpustack(json.dumps(doc))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.dictionaries(
            st.sampled_from(["containerIndex", "gpuUUID", "migUUID", "profile"]), json_values
        ),
        max_size=3,
    )
)
def test_no_json_shape_makes_the_hami_mig_parser_raise_anything_else(doc: list[Any]) -> None:
    with contextlib.suppress(AllocationError):
        parse_hami_mig(json.dumps(doc), ["a", "b"])


# -- grants of a pod ------------------------------------------------------------------------


def pod_with(
    annotations: dict[str, str],
    limits: dict[str, dict[str, str]] | None = None,
    owner: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
):
    meta: dict[str, Any] = {
        "uid": "u1",
        "name": "p-0",
        "namespace": "ns",
        "annotations": annotations,
        "labels": labels or {},
    }
    if owner:
        meta["ownerReferences"] = [owner]
    info = pod_info(
        {
            "metadata": meta,
            "spec": {
                "containers": [
                    {"name": c, "resources": {"limits": lim}}
                    for c, lim in (limits or {"main": {}}).items()
                ]
            },
        }
    )
    assert info is not None
    return info


def test_the_cap_comes_from_the_containers_cores_percentage_limit() -> None:
    info = pod_with(
        {},
        {
            "main": {"nvidia.com/gpu.sliced.cores-percentage": "25"},
            "other": {},
            "bad": {"x.sliced.cores-percentage": "lots"},
        },
    )
    assert (cores_cap(info, "main"), cores_cap(info, "other"), cores_cap(info, "bad")) == (
        25.0,
        100.0,
        100.0,
    )


def test_a_slice_quota_is_units_of_the_card_floored_at_one_mib() -> None:
    text = gpustack(
        main=[{"id": "GPU-1", "mode": 3, "allocated": 640000}],
        tiny=[{"id": "GPU-2", "mode": 3, "allocated": 1}],
        huge=[{"id": "GPU-3", "mode": 3, "allocated": 9_000_000}],
    )
    info = pod_with(
        {"device.gpustack.ai/accelerator.allocated": text}, {"main": {}, "tiny": {}, "huge": {}}
    )
    quotas = {g.container: g.memory_quota_mib(81559) for g in grants_of(info)}
    assert quotas == {"main": 32623, "tiny": 1, "huge": 81559}


def test_instance_identity_needs_the_owner_and_the_part_of_label() -> None:
    owner = {
        "apiVersion": "worker.gpustack.ai/v1",
        "kind": "Instance",
        "name": "qwen",
        "uid": "i-1",
        "controller": True,
    }
    assert (
        instance_of(pod_with({}, owner=owner, labels={"app.kubernetes.io/part-of": "i-1"})).name
        == "qwen"
    )
    # Without the label (or with another Instance's UID) the pod is its own Instance.
    assert instance_of(pod_with({}, owner=owner)).name == "p-0"
    assert (
        instance_of(pod_with({}, owner=owner, labels={"app.kubernetes.io/part-of": "i-2"})).uid
        == "u1"
    )
    other = {**owner, "apiVersion": "example.com/v1"}
    assert (
        instance_of(pod_with({}, owner=other, labels={"app.kubernetes.io/part-of": "i-1"})).uid
        == "u1"
    )


def test_hamis_other_vendors_keys_are_grants_of_their_manufacturers() -> None:
    annotations = {
        "hami.io/dcu-devices-allocated": "DCU-3,DCU,16384,50:;;",
        "hami.io/Ascend910B-devices-allocated": ";NPU-7f3e,Ascend910B,16384,25:;",
        "hami.io/metax-sgpu-devices-allocated": "GPU-m1,MXC500,8192,30:;;",
        "hami.io/metax-gpu-devices-allocated": ";GPU-m2,MXC500,65536,100:;",
        "hami.io/vgpu-devices-allocated": "GPU-n1,NVIDIA,1000,10:;;",
        "hami.io/dcu-devices-to-allocate": "garbage that is not ours to read",
    }
    got = {
        (a.container, a.manufacturer, a.device_id, a.mode, a.memory_mib, a.cores_percent)
        for a in allocations_of(annotations, ["init", "main"])
    }
    assert got == {
        ("init", "hygon", "DCU-3", Mode.SLICED, 16384, 50),
        ("main", "ascend", "NPU-7f3e", Mode.SLICED, 16384, 25),
        ("init", "metax", "GPU-m1", Mode.SLICED, 8192, 30),
        ("main", "metax", "GPU-m2", Mode.EXCLUSIVE, None, None),  # HAMi's whole-card MetaX
        ("init", "nvidia", "GPU-n1", Mode.SLICED, 1000, 10),
    }


def test_a_malformed_vendor_key_names_itself_and_another_pod_keeps_its_grants() -> None:
    bad = {"hami.io/dcu-devices-allocated": "DCU-3,DCU,²,50:;"}
    with pytest.raises(AllocationError, match=r"hami\.io/dcu-devices-allocated"):
        allocations_of(bad, ["main"])
    # The pod with the bad key (and a good one beside it) has no grants and its error; a pod on
    # the same node under the same key keeps exactly the grants it has alone.
    poisoned = pod("poisoned", None, annotations={**bad, HAMI_KEY: "GPU-n1,NVIDIA,1000,10:;"})
    good = pod("good", None, annotations={"hami.io/dcu-devices-allocated": "DCU-2,DCU,8192,25:;"})
    grants = node_grants(PodIndex.of([poisoned, good]))
    assert list(grants.errors) == [uid("poisoned")]
    assert "hami.io/dcu-devices-allocated" in grants.errors[uid("poisoned")]
    assert uid("poisoned") not in grants.by_pod
    (mine,) = grants.by_pod[uid("good")]
    assert (mine.manufacturer, mine.device_id, mine.mode, mine.memory_mib, mine.cores_cap) == (
        "hygon",
        "DCU-2",
        Mode.SLICED,
        8192,
        25.0,
    )
    assert grants.by_pod[uid("good")] == node_grants(PodIndex.of([good])).by_pod[uid("good")]


# -- the size bound: 64 KiB of annotation, not one character more ------------------------------


def exactly_64_kib_of_hami() -> str:
    """One slice, padded with blanks to 65,536 characters (64 * 1024) in all."""
    slot = "GPU-a,NVIDIA,1024,30:"
    return slot + " " * (65_536 - len(slot) - 1) + ";"


def test_an_annotation_of_exactly_64_kib_is_read() -> None:
    text = exactly_64_kib_of_hami()
    assert len(text) == 65_536
    (a,) = parse_hami(text, ["main"])
    assert (a.container, a.device_id, a.mode, a.memory_mib, a.cores_percent) == (
        "main",
        "GPU-a",
        Mode.SLICED,
        1024,
        30,
    )


def test_an_annotation_one_character_over_64_kib_is_refused_and_names_its_key() -> None:
    text = " " + exactly_64_kib_of_hami()
    with pytest.raises(AllocationError) as vgpu:
        parse_hami(text, ["main"])
    assert str(vgpu.value) == "hami.io/vgpu-devices-allocated: 65537 characters, more than 65536"
    # Another vendor's key is named as itself, not as HAMi's vGPU key.
    with pytest.raises(AllocationError) as dcu:
        parse_hami(text, ["main"], word="dcu")
    assert str(dcu.value) == "hami.io/dcu-devices-allocated: 65537 characters, more than 65536"


# -- merged holders, and the kubelet's view beside the annotation (R-G3, R-X2) -----------------


def test_two_holders_of_one_card_take_the_index_of_the_first_that_states_one() -> None:
    info = pod_with({}, {"init": {}, "main": {}})
    held = [
        # HAMi states no index; GPUStack does.
        Allocation("init", "nvidia", "GPU-a", None, Mode.SLICED, memory_mib=1000, source="hami"),
        Allocation("main", "nvidia", "GPU-a", 3, Mode.SLICED, units=400_000),
    ]
    (g,) = grants_from(info, held)
    assert (g.containers, g.index, g.mode, g.units, g.memory_mib) == (
        ("init", "main"),
        3,
        Mode.SLICED,
        400_000,
        1000,
    )
    assert g.ambiguous


def whole(*devices: str) -> list[Grant]:
    return [Grant("u1", ("main",), "nvidia", d, None, Mode.EXCLUSIVE) for d in devices]


def test_the_kubelet_disagrees_only_when_it_names_other_cards() -> None:
    assert disagreement(whole("GPU-a"), whole("GPU-a")) is None
    # A kubelet MIG device whose card is not known yet says nothing either way.
    assert disagreement(whole("GPU-a"), whole("")) is None
    differs = disagreement(whole("GPU-a"), whole("GPU-b"))
    assert differs == Disagreement(
        frozenset({("nvidia", "GPU-a")}), frozenset({("nvidia", "GPU-b")})
    )
    assert differs is not None and differs.differs
    assert not Disagreement(differs.said, differs.said).differs
