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
import logging
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from devicemanager.agent.monitor import BackendWorker, Monitor
from devicemanager.figures import figures, slices
from devicemanager.figures.published import Published
from devicemanager.grants.allocations import (
    GPUSTACK_KEY,
    HAMI_KEY,
    HAMI_MIG_KEY,
    MAX_ANNOTATION_CHARS,
    AllocationError,
    parse_hami,
)
from devicemanager.grants.grants import Grant, cores_cap, grants_of
from devicemanager.grants.node import node_grants
from devicemanager.kube.cluster import ClusterRound
from devicemanager.kube.kubelet import Reading
from devicemanager.model import (
    Card,
    DeviceProcesses,
    PartitionReading,
    PodFault,
    ProcessRow,
    VendorReading,
    as_number,
    finite_reading,
)
from devicemanager.node.attribution import Attributor
from devicemanager.node.isolation import FIGURES
from devicemanager.node.pods import PodIndex, PodInfo
from tests.kube_server import summary_for
from tests.world import GIB, ReadingBackend, accel, card, gpu, pod, process, rows, run, uid

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

    def entry(grant: Grant, view: figures.View, alone: bool = True) -> figures.AcceleratorEntry:
        if grant.device_id == cards[1].id:
            raise ZeroDivisionError("a figure nobody foresaw")
        return real(grant, view, alone)

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
    # Past 64 KiB, within the API server's 256 KiB for all of a pod's annotations (past that
    # the pod is refused as it enters the index: tests/test_pods.py).
    index = PodIndex.of([pod("big", None, annotations={GPUSTACK_KEY: " " * (128 << 10)})])
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
    from devicemanager.grants import grants as grants_module
    from devicemanager.grants.grants import RememberedGrants

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
    from devicemanager.grants.grants import RememberedGrants

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


# -- the boundary, for each pod's part of the per-grant section ----------------------------------


def but(series: dict[str, list[tuple[dict[str, str], float]]], name: str) -> set[Any]:
    """Every accelerator series of every Instance but `name`, and every card's."""
    return {
        (family, tuple(sorted(labels.items())), value)
        for family, samples in series.items()
        if family.startswith(("gpustack_instance_accelerator_", "gpustack_accelerator_"))
        and not family.startswith(
            (
                "gpustack_accelerator_allocation",
                "gpustack_accelerator_pod",
                "gpustack_accelerator_backend_read_duration",  # a timing, not a figure
            )
        )
        for labels, value in samples
        if labels.get("instance_name") != name
    }


def named(series: dict[str, list[tuple[dict[str, str], float]]], name: str) -> list[str]:
    return [
        f for f, samples in series.items() for ls, _ in samples if ls.get("instance_name") == name
    ]


def metrics_of(published: Published) -> dict[str, list[tuple[dict[str, str], float]]]:
    return {
        f.name: [(s.labels, s.value) for s in f.samples]
        for f in text_string_to_metric_families(published.metrics.plain.decode())
    }


def monitor_of(
    tmp: Path,
    cards: list[Card],
    pods: list[dict[str, Any]],
    readings: tuple[DeviceProcesses, ...] = (),
    cluster: ClusterRound | None = None,
) -> Monitor:
    """The monitor `tests.world.run` builds, kept for more than one round."""
    reading = VendorReading("nvidia", tuple(cards), readings, (), "550.90.07")
    index = PodIndex.of(pods)
    return Monitor(
        [BackendWorker(ReadingBackend(reading))],
        period=15,
        deadline=5,
        liveness_timeout=60,
        node="node-1",
        pods=lambda: index,
        attributor=Attributor(tmp / "proc"),
        cluster=cluster,
    )


def test_one_pods_usage_that_raises_is_that_pods_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    pods, readings, cards = tenants(tmp_path)
    baseline = run(tmp_path, cards, pods, readings)
    busy = uid("busy")
    real = slices._holder_usage

    def holder_usage(*args: Any) -> slices.SliceUsage:
        if args[3] == (busy, "main"):  # (pod UID, container)
            raise ZeroDivisionError("a row nobody foresaw")
        return real(*args)

    monkeypatch.setattr(slices, "_holder_usage", holder_usage)
    monitor = monitor_of(tmp_path, cards, pods, readings)
    with caplog.at_level(logging.ERROR, logger="devicemanager.isolation"):
        first, second = monitor.run_round(), monitor.run_round()
    monitor.stop()
    for published in (first, second):
        got = metrics_of(published)
        # idle, on the same card, keeps what it had: 2 GiB = 2048 MiB, 0% of its 40% cap; and
        # whole keeps card 1's figures.
        assert but(got, "busy") == but(baseline.series, "busy")
        idle = [
            v
            for ls, v in got["gpustack_instance_accelerator_memory_used_mib"]
            if ls["instance_name"] == "idle"
        ]
        assert idle == [2048.0]
        assert named(got, "busy") == [] and named(baseline.series, "busy") != []
        assert [
            v for ls, v in got["gpustack_accelerator_pod_errors"] if ls["stage"] == "figures"
        ] == [1.0]
    logged = [r for r in caplog.records if getattr(r, "pod_uid", None) == busy]
    assert len(logged) == 1 and logged[0].stage == FIGURES  # type: ignore[attr-defined]
    assert "ZeroDivisionError" in logged[0].error  # type: ignore[attr-defined]
    # Served without figures, so a consumer of the snapshot reads them as absent, not as zero;
    # the error's text stays in the log.
    doc = json.loads(second.snapshot_json)
    usages = {u["podUID"]: u for u in doc["slices"]["usages"]}
    assert (usages[busy]["memoryUsedMiB"], usages[busy]["coresUtilizationPercent"]) == (None, None)
    assert (
        usages[uid("idle")]["memoryUsedMiB"],
        usages[uid("idle")]["coresUtilizationPercent"],
    ) == (
        2048,
        0.0,
    )
    assert "nobody foresaw" not in second.snapshot_json.decode()
    read = slices.figures(
        slices.Lookup.of(slices.from_json(doc["slices"]) or slices.SliceSection()),
        "nvidia",
        busy,
        "main",
        cards[0].id,
    )
    assert read is not None and (read.memory_used_mib, read.cores_percent) == (None, None)


def test_one_pods_partition_that_raises_is_that_pods_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pods, readings, cards = tenants(tmp_path)
    holders = [
        pod("mig-a", {"main": [accel(2, 4, 200_000, allocatedPhysicalID="MIG-a")]}, instance="a"),
        pod("mig-b", {"main": [accel(2, 4, 400_000, allocatedPhysicalID="MIG-b")]}, instance="b"),
    ]
    parts = (
        PartitionReading("MIG-a", gpu(2), 9856, 4100, 20.0),
        PartitionReading("MIG-b", gpu(2), 19968, 1024, 55.0),
    )
    everything = [*cards, card(2)]
    baseline = run(tmp_path, everything, [*pods, *holders], readings, parts)
    a = baseline.entry("a")
    assert (a.memory_total_mib, a.memory_used_mib, a.cores_utilization_percent) == (
        9856,
        4100,
        20.0,
    )
    real = slices._partition_entry

    def partition_entry(
        manufacturer: str, grant: Grant, found: PartitionReading | None, parent: Card | None
    ) -> slices.SlicePartition:
        if grant.pod_uid == uid("mig-a"):
            raise IndexError("a partition nobody foresaw")
        return real(manufacturer, grant, found, parent)

    monkeypatch.setattr(slices, "_partition_entry", partition_entry)
    result = run(tmp_path, everything, [*pods, *holders], readings, parts)
    b = result.entry("b")  # its own partition's figures, as read
    assert (b.memory_total_mib, b.memory_used_mib, b.cores_utilization_percent) == (
        19968,
        1024,
        55.0,
    )
    assert but(result.series, "a") == but(baseline.series, "a")
    assert sorted(i.instance.name for i in result.instances) == ["b", "busy", "idle", "whole"]
    assert named(result.series, "a") == []
    assert result.values("gpustack_accelerator_pod_errors", stage="figures") == [1.0]
    assert [p.id for p in (result.snapshot.slices or slices.SliceSection()).partitions] == ["MIG-b"]


# -- the boundary, for the pod-level figures -------------------------------------------------------


class Summary:
    """The kubelet's newest summary, as the poller beside the round would hand it over."""

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.reading = Reading(summary_for(pods), read_at=time.monotonic(), duration=0.01)

    def latest(self) -> Reading:
        return self.reading


def test_one_pods_pod_level_figures_that_raise_are_that_pods_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    me = pod("device-manager-nvidia-x1", None, containers=["device-manager"])
    me["metadata"]["namespace"] = "gpustack-system"
    me["metadata"]["labels"].update(
        {"app.kubernetes.io/component": "device-manager", "gpustack.ai/manufacturer": "nvidia"}
    )
    me["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    limits = {"main": {"cpu": "2", "memory": "8Gi", "ephemeral-storage": "10Gi"}}
    pods = [
        me,
        pod("busy", {"main": [accel(0, 1)]}, instance="busy", limits=limits),
        pod("idle", {"main": [accel(1, 1)]}, instance="idle", limits=limits),
    ]
    cards = [card(0), card(1)]

    def one_round() -> dict[str, list[tuple[dict[str, str], float]]]:
        cluster = ClusterRound(
            Summary(pods), "node-1", "gpustack-system", me["metadata"]["name"], 30
        )
        monitor = monitor_of(tmp_path, cards, pods, cluster=cluster)
        published = monitor.run_round()
        monitor.stop()
        return metrics_of(published)

    baseline = one_round()
    real = figures.totals

    def totals(info: PodInfo | None) -> tuple[int, int, int]:
        if info is not None and info.name == "busy":
            raise ValueError("a limit nobody foresaw")
        return real(info)

    monkeypatch.setattr(figures, "totals", totals)
    got = one_round()

    def pod_families(
        series: dict[str, list[tuple[dict[str, str], float]]],
    ) -> dict[tuple[str, str], float]:
        return {
            (family, ls["instance_name"]): v
            for family, samples in series.items()
            if family.startswith(
                (
                    "gpustack_instance_cpu_",
                    "gpustack_instance_memory_",
                    "gpustack_instance_storage_",
                )
            )
            for ls, v in samples
        }

    # idle's by hand: 2 CPUs = 2000 millicores, 8Gi = 8192 MiB, 10Gi = 10240 MiB declared;
    # the summary's 250 millicores, 900 MiB and 40 MiB measured.
    idle = {k: v for k, v in pod_families(got).items() if k[1] == "idle"}
    assert idle == {
        ("gpustack_instance_cpu_total_millicores", "idle"): 2000.0,
        ("gpustack_instance_cpu_used_millicores", "idle"): 250.0,
        ("gpustack_instance_memory_total_mib", "idle"): 8192.0,
        ("gpustack_instance_memory_used_mib", "idle"): 900.0,
        ("gpustack_instance_storage_total_mib", "idle"): 10240.0,
        ("gpustack_instance_storage_used_mib", "idle"): 40.0,
    }
    assert {k: v for k, v in pod_families(baseline).items() if k[1] == "idle"} == idle
    assert [k for k in pod_families(got) if k[1] == "busy"] == []
    assert len([k for k in pod_families(baseline) if k[1] == "busy"]) == 6
    # Left out of that stage only: its accelerator figures and every other series stay.
    assert but(got, "") == but(baseline, "")
    errors = {ls["stage"]: v for ls, v in got["gpustack_accelerator_pod_errors"]}
    assert errors == {"grants": 0.0, "figures": 0.0, "pod_level": 1.0}


# -- the property, for HAMi's per-vendor keys ------------------------------------------------------

# hami.io/<word>-devices-allocated for each vendor HAMi writes one for (allocations.py): Hygon,
# AMD, MetaX whole cards and sGPUs, Ascend, and a word we do not map (Cambricon's).
HAMI_VENDOR_KEYS = [
    f"hami.io/{word}-devices-allocated"
    for word in ("dcu", "amd", "metax-gpu", "metax-sgpu", "Ascend910B", "Ascend310P", "mlu")
]
VENDOR_SHAPED = st.builds(
    lambda uuid, kind, mem, cores, tail: f"{uuid},{kind},{mem},{cores}:{tail}",
    # Our own cards' ids too: under another vendor's key they name no card of ours.
    st.one_of(st.text(max_size=12), st.sampled_from([gpu(0), gpu(1), "DCU-0", "NPU-0", "MIG-0"])),
    st.sampled_from(["DCU", "Ascend910B", "MXC500", "AMD", "NVIDIA", ""]),
    st.text(alphabet="0123456789" + OTHER_DIGITS + "-+. e", max_size=8),
    st.text(alphabet="0123456789" + OTHER_DIGITS + "-+. ", max_size=6),
    st.sampled_from(["", ";", ";;", ":;", ";x"]),
)


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(key=st.sampled_from(HAMI_VENDOR_KEYS), text=st.one_of(ANY_TEXT, VENDOR_SHAPED))
def test_a_pod_poisoned_under_a_hami_vendor_key_never_moves_another_pods_series(
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
    assert result.values("gpustack_accelerator_allocation_errors") in ([0.0], [1.0])
    assert result.values("gpustack_accelerator_pod_errors", stage="figures") == [0.0]


def test_the_property_s_vendor_keys_are_read_as_hami_keys() -> None:
    # Each key the property samples is one the parsers read: a malformed value under it is the
    # pod's allocation error, so the property test poisons what it says it poisons.
    for key in HAMI_VENDOR_KEYS:
        index = PodIndex.of([pod("poisoned", None, annotations={key: "x,DCU,²,0:;"})])
        (error,) = node_grants(index).errors.values()
        assert key in error
