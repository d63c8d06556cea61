"""One boundary per pod (issue 10): whatever one tenant's data does, every other pod's figures are
what they would have been without it, and the round completes.

The property test puts arbitrary text (any Unicode, digits of other scripts, HAMi- and
GPUStack-shaped strings, nested JSON) into one pod's allocation annotations and runs the real
monitor round over a node whose other pods hold slices with measured processes; their series
must not move. The unit tests show the boundary holds for a grant source that is not ours (the
kubelet's pod-resources, for one) and for the per-Instance figures, and the parser fixes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devicemanager import figures
from devicemanager.allocations import (
    GPUSTACK_KEY,
    HAMI_KEY,
    HAMI_MIG_KEY,
    MAX_ANNOTATION_CHARS,
    AllocationError,
    parse_hami,
)
from devicemanager.grants import Grant, cores_cap, grants_of, node_grants
from devicemanager.isolation import FIGURES, PodFault
from devicemanager.model import (
    Card,
    DeviceProcesses,
    PartitionReading,
    ProcessRow,
    VendorReading,
    as_number,
    finite_reading,
)
from devicemanager.pods import PodIndex, PodInfo
from tests.world import GIB, accel, card, pod, process, rows, run

SLICE_40 = 640_000
CAP_40 = {"main": {"nvidia.com/gpu.sliced.cores-percentage": "40"}}
OTHER_DIGITS = "²³¹٣۴߅०১੧୨௩౪೫൬๗໘༩၁႒០᠑１"


def tenants(tmp: Path) -> tuple[list[dict[str, Any]], tuple[DeviceProcesses, ...], list[Card]]:
    pods = [
        pod("busy", {"main": [accel(0, 3, SLICE_40)]}, instance="busy", limits=CAP_40),
        pod("idle", {"main": [accel(0, 3, SLICE_40)]}, instance="idle", limits=CAP_40),
        pod("whole", {"main": [accel(1, 1)]}, instance="whole"),
    ]
    process(tmp / "proc", 101, "busy")
    process(tmp / "proc", 202, "idle")
    readings = (rows(0, (101, 31 * GIB, 36.0), (202, 2 * GIB, 0.0)),)
    return pods, readings, [card(0, used=34_000, cores=36.0), card(1, used=70_000, cores=90.0)]


def others(series: dict[str, list[tuple[dict[str, str], float]]]) -> set[Any]:
    return {
        (name, tuple(sorted(labels.items())), value)
        for name, samples in series.items()
        if name.startswith(("gpustack_instance_accelerator_", "gpustack_accelerator_"))
        and not name.startswith(
            (
                "gpustack_accelerator_allocation",
                "gpustack_accelerator_pod",
                "gpustack_accelerator_backend_read_duration",  # a timing, not a figure
            )
        )
        for labels, value in samples
        if labels.get("instance_name") != "poisoned"
    }


HAMI_SHAPED = st.builds(
    lambda uuid, kind, mem, cores, tail: f"{uuid},{kind},{mem},{cores}:{tail}",
    st.text(max_size=12),
    st.sampled_from(["NVIDIA", "nvidia-x", "", "MLU"]),
    st.text(alphabet="0123456789" + OTHER_DIGITS + "-+. e", max_size=8),
    st.text(alphabet="0123456789" + OTHER_DIGITS + "-+. ", max_size=6),
    st.sampled_from(["", ";", ";;", ":;", ";x"]),
)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
GPUSTACK_SHAPED = st.builds(
    lambda accs: json.dumps(
        {"main": {"devices": {"groups": [{"manufacturer": "nvidia", "accelerators": accs}]}}}
    ),
    st.lists(st.dictionaries(st.sampled_from(["id", "index", "mode", "allocated"]), JSON_VALUES)),
)
ANY_TEXT = st.one_of(
    st.text(max_size=300),
    HAMI_SHAPED,
    GPUSTACK_SHAPED,
    JSON_VALUES.map(lambda v: json.dumps(v, allow_nan=True)),
)


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(key=st.sampled_from([GPUSTACK_KEY, HAMI_KEY, HAMI_MIG_KEY]), text=ANY_TEXT)
def test_a_poisoned_pod_never_moves_another_pods_series(
    tmp_path: Path, key: str, text: str
) -> None:
    pods, readings, cards = tenants(tmp_path)
    baseline = run(tmp_path, cards, pods, readings)
    poisoned = pod("poisoned", None, containers=["main", "side"], annotations={key: text})
    result = run(tmp_path, cards, [*pods, poisoned], readings)
    assert baseline.values(
        "gpustack_instance_accelerator_cores_utilization_percent", instance_name="busy"
    ) == [90.0]  # the others are measured, so there is something to move
    assert others(result.series) == others(baseline.series)
    assert result.snapshot.timestamp > 0  # the round completed and was published
    errors = result.values("gpustack_accelerator_allocation_errors")
    assert errors in ([0.0], [1.0])


def test_the_issue_s_poisoned_hami_annotation(tmp_path: Path) -> None:
    pods, readings, cards = tenants(tmp_path)
    baseline = run(tmp_path, cards, pods, readings)
    poisoned = pod("poisoned", None, annotations={HAMI_KEY: "GPU-x,NVIDIA,²,0:;"})
    result = run(tmp_path, cards, [*pods, poisoned], readings)
    assert others(result.series) == others(baseline.series)
    assert result.values("gpustack_accelerator_allocation_errors") == [1.0]
    assert result.values("gpustack_accelerator_pod_errors", stage="grants") == [1.0]


# -- the boundary, for a grant source that is not ours ---------------------------------------------


def test_any_exception_in_the_kubelets_grants_is_that_pods_alone() -> None:
    index = PodIndex.of([pod("a", {"main": [accel(0, 1)]}), pod("b", {"main": [accel(1, 1)]})])
    b = next(p for p in index.pods.values() if p.name == "b")

    def pod_resources(info: PodInfo) -> tuple[Grant, ...]:
        if info.uid == b.uid:
            raise KeyError("a device id the kubelet listed twice")
        return ()

    grants = node_grants(index, pod_resources)
    assert [g.device_id for g in grants.all()] == [
        g.device_id for g in grants_of(next(p for p in index.pods.values() if p.name == "a"))
    ]
    assert list(grants.errors) == [b.uid] and "KeyError" in grants.errors[b.uid]


def test_an_instance_whose_figures_raise_is_left_out_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pods, readings, cards = tenants(tmp_path)
    real = figures.entry

    def entry(grant: Grant, view: figures.View) -> figures.AcceleratorEntry:
        if grant.device_id == cards[1].id:
            raise ZeroDivisionError("a figure nobody foresaw")
        return real(grant, view)

    monkeypatch.setattr(figures, "entry", entry)
    result = run(tmp_path, cards, pods, readings)
    assert sorted(i.instance.name for i in result.instances) == ["busy", "idle"]
    assert result.values("gpustack_accelerator_pod_errors", stage="figures") == [1.0]
    faults: dict[str, PodFault] = {}
    index = PodIndex.of(pods)
    figures.exported(index, node_grants(index), figures.View(), ["nvidia"], faults)
    assert [f.stage for f in faults.values()] == [FIGURES]


# -- the parsers ----------------------------------------------------------------------------------


@pytest.mark.parametrize("digit", list(OTHER_DIGITS))
def test_hami_numbers_are_ascii_digits_only(digit: str) -> None:
    with pytest.raises(AllocationError, match="MemMiB"):
        parse_hami(f"GPU-x,NVIDIA,{digit},0:;", ["main"])
    with pytest.raises(AllocationError, match="Cores"):
        parse_hami(f"GPU-x,NVIDIA,1024,{digit}:;", ["main"])


def test_annotations_are_bounded() -> None:
    huge = "GPU-x,NVIDIA,1,0:" * (MAX_ANNOTATION_CHARS // 10)
    with pytest.raises(AllocationError, match="characters"):
        parse_hami(huge + ";", ["main"])
    index = PodIndex.of([pod("big", None, annotations={GPUSTACK_KEY: " " * (1 << 20)})])
    assert len(node_grants(index).errors) == 1


@pytest.mark.parametrize("cap", ["٤٠", "4e1", "nan", "inf", "-5", "40.0000001x", "²"])
def test_a_cores_cap_that_is_not_a_plain_number_means_no_cap(cap: str) -> None:
    info = PodInfo(
        uid="u",
        namespace="n",
        name="p",
        limits={"main": {"nvidia.com/gpu.sliced.cores-percentage": cap}},
    )
    assert cores_cap(info, "main") == 100.0


# -- every float from a vendor is finite or absent ------------------------------------------------


def test_finite_reading_drops_every_non_finite_float_and_says_where() -> None:
    reading = VendorReading(
        "x",
        cards=(Card("GPU-a", 0, memory_total_mib=80, cores_utilization_percent=float("nan")),),
        processes=(DeviceProcesses("GPU-a", (ProcessRow(1, 10, float("inf")),)),),
        partitions=(PartitionReading("MIG-a", "GPU-a", cores_percent=float("-inf")),),
    )
    fixed, dropped = finite_reading(reading)
    assert fixed.cards[0].cores_utilization_percent is None
    assert fixed.cards[0].memory_total_mib == 80
    assert fixed.processes[0].rows[0].cores_percent is None
    assert fixed.processes[0].rows[0].memory_bytes == 10
    assert fixed.partitions[0].cores_percent is None
    assert dropped == (
        "cards[0].cores_utilization_percent",
        "processes[0].rows[0].cores_percent",
        "partitions[0].cores_percent",
    )
    clean = VendorReading("x", cards=(Card("GPU-a", 0, cores_utilization_percent=5.0),))
    assert finite_reading(clean) == (clean, ())
    assert finite_reading(clean)[0] is clean  # nothing copied when nothing is wrong


def test_json_nan_and_infinity_are_not_numbers() -> None:
    doc = json.loads('{"a": NaN, "b": Infinity, "c": -Infinity, "d": 1.5}')
    assert [as_number(doc[k]) for k in "abcd"] == [None, None, None, 1.5]


# -- a pod's annotations are parsed again only when the pod changed -------------------------------


def test_remembered_grants_parse_a_pod_once_and_again_when_it_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from devicemanager import grants as grants_module
    from devicemanager.grants import RememberedGrants

    calls: list[str] = []
    real = grants_module.grants_of

    def counted(info: PodInfo) -> tuple[Grant, ...]:
        calls.append(info.uid)
        return real(info)

    monkeypatch.setattr(grants_module, "grants_of", counted)
    first = PodIndex.of([pod("a", {"main": [accel(0, 3, 400_000)]})])
    remembered = RememberedGrants()
    (info,) = first.pods.values()
    (grant,) = remembered(info)
    assert remembered(info) == (grant,) and calls == [info.uid]  # the same pod: not parsed again
    changed = PodIndex.of([pod("a", {"main": [accel(0, 3, 800_000)]})])
    (new_info,) = changed.pods.values()
    (new_grant,) = remembered(new_info)
    assert (grant.units, new_grant.units) == (400_000, 800_000) and len(calls) == 2
    remembered.retain(PodIndex())
    remembered(new_info)
    assert len(calls) == 3  # forgotten with its pod


def test_a_remembered_malformed_annotation_fails_its_pod_every_round_alike() -> None:
    from devicemanager.grants import RememberedGrants

    bad = pod("bad", {})
    bad["metadata"]["annotations"] = {HAMI_KEY: "GPU-x,NVIDIA,²,0:;"}
    (info,) = PodIndex.of([bad]).pods.values()
    remembered = RememberedGrants()
    depths = []
    for _ in range(3):
        with pytest.raises(AllocationError) as raised:
            remembered(info)
        depth, tb = 0, raised.value.__traceback__
        while tb is not None:
            depth, tb = depth + 1, tb.tb_next
        depths.append(depth)
    assert depths[0] == depths[1] == depths[2]  # raised again, its traceback never growing
    grants = node_grants(PodIndex.of([bad, pod("good", {"main": [accel(1, 1)]})]), None, remembered)
    assert set(grants.errors) == {info.uid} and len(grants.by_pod) == 1
