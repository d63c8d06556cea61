"""Small rules of the pure core, each pinned where a one-line break would otherwise go unnoticed
(issue 12; found by scripts/mutate). Expected values are written by hand from the rule.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from devicemanager.figures import exposition, slices, snapshot
from devicemanager.figures.figures import (
    Pair,
    PodLevel,
    PodUsage,
    View,
    exported,
    instance_metrics,
    metrics_json,
    newest_pods,
    pod_level,
    totals,
)
from devicemanager.figures.snapshot import BackendResult
from devicemanager.grants.allocations import (
    AllocationError,
    Mode,
    allocations_of,
    parse_gpustack,
    parse_hami,
    parse_hami_mig,
)
from devicemanager.grants.grants import (
    Grant,
    InstanceRef,
    ceil_restated,
    cores_cap,
    grants_of,
    instance_of,
)
from devicemanager.grants.node import node_grants
from devicemanager.grants.quantity import parse_quantity
from devicemanager.model import (
    MIB,
    BackendState,
    BackendStatus,
    Card,
    DeviceProcesses,
    Group,
    ProcessRow,
    Reason,
    SliceDevice,
    SliceSection,
    Snapshot,
    VendorReading,
)
from devicemanager.node import cgroup
from devicemanager.node.attribution import (
    DeviceAttribution,
    Identified,
    LogLimiter,
    Placement,
    RowCounts,
    place,
)
from devicemanager.node.cgroup import CgroupIdentity
from devicemanager.node.pods import PodIndex, PodInfo, PodsFile, has_started, pod_info
from tests.world import accel, pod, uid

# -- grants (R-G2, R-F4) --------------------------------------------------------------------------


def slice_grant(**extra: object) -> Grant:
    return Grant("u1", ("main",), "nvidia", "GPU-a", 0, Mode.SLICED, **extra)  # type: ignore[arg-type]


def test_a_grant_made_without_a_cap_may_use_the_whole_card() -> None:
    assert slice_grant().cores_cap == 100.0


def test_a_gpustack_slice_states_no_quota_without_its_cards_memory() -> None:
    assert slice_grant(units=640_000).memory_quota_mib(None) is None
    assert slice_grant().memory_quota_mib(81559) is None  # no units recorded
    assert slice_grant(units=640_000).memory_quota_mib(81559) == 32623  # 32623.6, floored
    # HAMi states the quota itself; the card's size does not enter into it.
    assert slice_grant(memory_mib=4096).memory_quota_mib(None) == 4096
    assert slice_grant(memory_mib=4096, units=640_000).memory_quota_mib(81559) == 4096


def limit_pod(*values: str) -> object:
    limits = {f"vendor{i}.com/gpu.sliced.cores-percentage": value for i, value in enumerate(values)}
    info = pod_info(
        {
            "metadata": {"uid": "u1", "name": "p", "namespace": "ns"},
            "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]},
        }
    )
    assert info is not None
    return info


@pytest.mark.parametrize(
    ("limit", "cap"),
    [
        ("40", 40.0),
        ("0.5", 0.5),  # a fraction of one percent is still a cap
        ("1", 1.0),
        ("100", 100.0),
        ("100.5", 100.0),  # more than the card: the card
        ("150", 100.0),
        ("0", 100.0),  # no share at all is no cap, never a division by zero
        ("-5", 100.0),
        ("lots", 100.0),
    ],
)
def test_a_cores_percentage_limit_reads_as_a_cap(limit: str, cap: float) -> None:
    assert cores_cap(limit_pod(limit), "main") == cap  # type: ignore[arg-type]


def test_two_cores_percentage_limits_are_no_cap() -> None:
    assert cores_cap(limit_pod("40", "30"), "main") == 100.0  # type: ignore[arg-type]
    assert cores_cap(limit_pod(), "main") == 100.0  # type: ignore[arg-type]


def test_hami_cores_1_is_a_1_percent_cap() -> None:
    info = pod_info(
        {
            "metadata": {
                "uid": "u1",
                "name": "p",
                "namespace": "ns",
                "annotations": {"hami.io/vgpu-devices-allocated": "GPU-a,NVIDIA,1000,1:;"},
            },
            "spec": {"containers": [{"name": "main"}]},
        }
    )
    assert info is not None
    (grant,) = grants_of(info)
    assert grant.cores_cap == 1.0


@pytest.mark.parametrize(
    ("measured", "cap", "restated"),
    [
        (1.0, 0.5, 200.0),  # 1% of the card against half a percent
        (50.5, 0.0, 51.0),  # no cap: the figure itself, rounded up
        (50.5, 100.0, 51.0),
        (100.5, 100.5, 101.0),  # a cap over 100 is the whole card: 100.5 -> 101
        (1.1, 10.0, 11.0),  # 11% exactly, though 1.1 * 100 / 10 is 11.000000000000002 in binary
        (36.0, 40.0, 90.0),
        (10.0, 30.0, 34.0),  # 33.3...: up, not to nearest
    ],
)
def test_compute_restated_against_a_cap(measured: float, cap: float, restated: float) -> None:
    assert ceil_restated(measured, cap) == restated


def test_1_600_000_units_are_one_whole_card() -> None:
    assert slice_grant(units=1_600_000).memory_quota_mib(81559) == 81559
    assert slice_grant(units=3_200_000).memory_quota_mib(81559) == 81559  # never more


# -- allocations (R-G1) ---------------------------------------------------------------------------


def gpustack_group(group: dict[str, object]) -> str:
    return json.dumps({"main": {"devices": {"groups": [group]}}})


@pytest.mark.parametrize(
    "group",
    [
        {"manufacturer": "nvidia", "accelerators": {}},  # not a list, though empty
        {"manufacturer": 5, "accelerators": []},
        {"accelerators": [{"id": "GPU-a", "mode": 1}]},
    ],
)
def test_a_group_needs_a_manufacturer_and_a_list_of_accelerators(
    group: dict[str, object],
) -> None:
    with pytest.raises(AllocationError, match="group without manufacturer"):
        parse_gpustack(gpustack_group(group))


def test_a_hami_annotation_without_its_last_terminator_keeps_its_last_slot() -> None:
    (a,) = parse_hami("GPU-a,NVIDIA,1000,10:", ["main"])
    assert (a.container, a.device_id, a.memory_mib) == ("main", "GPU-a", 1000)


@pytest.mark.parametrize(
    ("kind", "manufacturer"),
    [("NVIDIA", "nvidia"), ("Hygon-DCU", "hygon"), ("", "nvidia"), ("-x", "nvidia")],
)
def test_the_hami_device_type_names_the_manufacturer(kind: str, manufacturer: str) -> None:
    (a,) = parse_hami(f"GPU-a,{kind},1000,10:;", ["main"])
    assert a.manufacturer == manufacturer


def mig(index: object, parent: object = "GPU-p") -> str:
    return json.dumps([{"containerIndex": index, "gpuUUID": parent, "migUUID": "MIG-x"}])


def test_hami_mig_container_indexes_run_from_0_to_the_last_container() -> None:
    assert [a.container for a in parse_hami_mig(mig(0), ["a", "b"])] == ["a"]
    assert [a.container for a in parse_hami_mig(mig(1), ["a", "b"])] == ["b"]
    for wrong in (2, -1, True, "0"):
        with pytest.raises(AllocationError, match="names no container"):
            parse_hami_mig(mig(wrong), ["a", "b"])


@pytest.mark.parametrize("parent", ["", None, 7])
def test_a_hami_mig_entry_needs_its_parent_card(parent: object) -> None:
    with pytest.raises(AllocationError, match="without gpuUUID"):
        parse_hami_mig(mig(0, parent), ["a"])


def test_a_pod_with_only_the_hami_mig_annotation_holds_its_partition() -> None:
    (a,) = allocations_of({"hami.io/vgpu-mig-allocations": mig(0)}, ["main"])
    assert (a.container, a.device_id, a.partition_id, a.mode) == (
        "main",
        "GPU-p",
        "MIG-x",
        Mode.PARTITIONED,
    )
    assert allocations_of({}, ["main"]) == ()


# -- attribution (R-A2, R-A3, R-O5) ---------------------------------------------------------------

UID = "11111111-1111-4111-8111-111111111111"
CID = "a" * 64
INDEX = PodIndex.of(
    [
        {
            "metadata": {"uid": UID, "name": "p", "namespace": "ns"},
            "status": {
                "containerStatuses": [{"name": "main", "containerID": f"containerd://{CID}"}]
            },
        }
    ]
)


def test_empty_row_counts_count_nothing() -> None:
    assert RowCounts() == RowCounts(0, 0, 0, 0, 0)
    assert (RowCounts().returned, RowCounts().attributed, RowCounts().ambiguous) == (0, 0, 0)
    assert (RowCounts().non_instance, RowCounts().unreadable) == (0, 0)


@pytest.mark.parametrize(
    "reason",
    [Reason.NO_CONTAINER_COMPONENT, Reason.AMBIGUOUS_CONTAINER, Reason.AMBIGUOUS_POD],
)
def test_a_cgroup_reason_is_kept_even_for_a_known_pod(reason: Reason) -> None:
    identity = CgroupIdentity(pod_uid=UID, reason=reason)
    assert place(Identified(identity), INDEX).reason is reason


def test_an_incomplete_identity_without_a_reason_is_never_placed() -> None:
    assert place(Identified(CgroupIdentity(pod_uid=UID)), INDEX).reason is (Reason.NO_POD_COMPONENT)
    placed = place(Identified(CgroupIdentity(pod_uid=UID, container_id=CID)), INDEX)
    assert placed.placement == Placement(UID, "main") and placed.reason is None


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_log_line_per_key_once_every_ten_minutes() -> None:
    clock = Clock(1000.0)
    limiter = LogLimiter(clock=clock)
    key = ("nvidia", "GPU-a", "exited")
    assert limiter.allow(key) == (True, 0)
    clock.now = 1050.0
    assert limiter.allow(key) == (False, 0)
    assert limiter.allow(("nvidia", "GPU-b", "exited")) == (True, 0)  # per key
    clock.now = 1599.9
    assert limiter.allow(key) == (False, 0)
    clock.now = 1600.0  # ten minutes after the first line
    assert limiter.allow(key) == (True, 2)  # two were held back
    clock.now = 2200.0
    assert limiter.allow(key) == (True, 0)


# -- cgroup (R-A1) --------------------------------------------------------------------------------


def test_a_hex_segment_above_the_pod_is_not_a_container() -> None:
    identity = cgroup.parse(f"0::/kubepods/0123456789abcdef/pod{UID}/{CID}\n")
    assert (identity.pod_uid, identity.container_id, identity.reason) == (UID, CID, None)


def test_a_colon_in_the_path_is_part_of_the_path() -> None:
    identity = cgroup.parse(f"0::/odd:dir/kubepods/pod{UID}/{CID}\n")
    assert (identity.pod_uid, identity.container_id) == (UID, CID)


# -- exposition (R-E1..R-E5) ----------------------------------------------------------------------


def snap(timestamp: float = 1000.0, **extra: object) -> Snapshot:
    return Snapshot(timestamp=timestamp, period_seconds=15, node="n1", **extra)  # type: ignore[arg-type]


def samples(metrics: object) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = exposition.render(metrics).decode()  # type: ignore[arg-type]
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def kubelet(got: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> float | None:
    return got.get(("gpustack_instance_metrics_collector_success", (("source", "kubelet"),)))


@pytest.mark.parametrize(
    ("fresh", "read", "success"),
    [(True, True, 1.0), (True, False, 0.0), (False, True, 0.0), (False, False, 0.0)],
)
def test_the_kubelet_verdict_is_1_only_for_a_fresh_round_that_read_it(
    fresh: bool, read: bool, success: float
) -> None:
    extras = exposition.Extras(exporting=True, kubelet_success=read)
    assert kubelet(samples(exposition.collector_families(snap(), fresh, extras))) == success


def test_an_exporter_that_has_not_read_the_kubelet_says_so() -> None:
    got = samples(exposition.collector_families(snap(), True, exposition.Extras(exporting=True)))
    assert kubelet(got) == 0.0
    duration = ("gpustack_instance_metrics_collector_duration_seconds", (("source", "kubelet"),))
    assert duration not in got  # no read, no duration
    timed = exposition.Extras(exporting=True, kubelet_success=True, kubelet_duration=0.25)
    assert samples(exposition.collector_families(snap(), True, timed))[duration] == 0.25
    # Not exporting: no kubelet verdict at all, and the role gauge says 0.
    quiet = samples(exposition.collector_families(snap(), True, exposition.Extras(exporting=False)))
    assert kubelet(quiet) is None
    assert quiet[("gpustack_instance_metrics_exporter", (("node", "n1"),))] == 0.0
    assert got[("gpustack_instance_metrics_exporter", (("node", "n1"),))] == 1.0


def test_before_the_first_round_the_snapshot_verdict_is_0_and_no_figure_publishes() -> None:
    got = samples(exposition.families(snap(timestamp=0.0), fresh=True))
    assert got[("gpustack_instance_metrics_collector_success", (("source", "snapshot"),))] == 0.0
    assert not any(name == "gpustack_accelerator_allocation_errors" for name, _ in got)
    # Not even declared: a family with no round behind it is not offered to Prometheus.
    text = exposition.render(exposition.families(snap(timestamp=0.0), fresh=True)).decode()
    declared = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")}
    assert declared == {
        "gpustack_instance_metrics_collector_success",
        "gpustack_instance_metrics_collector_duration_seconds",
        "gpustack_accelerator_backend_up",
        "gpustack_accelerator_backend_read_duration_seconds",
        "gpustack_accelerator_allocation_errors",
        "gpustack_accelerator_pod_errors",
        "gpustack_accelerator_grants_refused",
    }


def test_the_compressed_metrics_carry_no_timestamp() -> None:
    # RFC 1952: MTIME 0 means none. The bytes depend on the text alone, and claim no time.
    gzipped = exposition.Exposition.of(b"# TYPE x gauge\nx 1.0\n").gzipped
    assert gzipped[:3] == b"\x1f\x8b\x08" and gzipped[4:8] == b"\x00\x00\x00\x00"


def test_a_fresh_round_states_its_allocation_errors_even_when_there_are_none() -> None:
    got = samples(exposition.families(snap(timestamp=1.0)))  # the default is a fresh round
    assert got[("gpustack_accelerator_allocation_errors", ())] == 0.0
    assert got[("gpustack_instance_metrics_collector_success", (("source", "snapshot"),))] == 1.0
    counted = exposition.families(snap(), extras=exposition.Extras(allocation_errors=2))
    assert samples(counted)[("gpustack_accelerator_allocation_errors", ())] == 2.0


def test_a_backend_is_up_only_when_it_answered_in_a_fresh_round() -> None:
    backends = (
        BackendStatus("nvidia", BackendState.OK, 0.5),
        BackendStatus("amd", BackendState.TIMEOUT, None),
    )
    up = "gpustack_accelerator_backend_up"
    fresh = samples(exposition.collector_families(snap(backends=backends), True))
    assert fresh[(up, (("manufacturer", "nvidia"), ("node", "n1")))] == 1.0
    assert fresh[(up, (("manufacturer", "amd"), ("node", "n1")))] == 0.0
    read = "gpustack_accelerator_backend_read_duration_seconds"
    assert [k for k in fresh if k[0] == read] == [
        (read, (("manufacturer", "nvidia"), ("node", "n1")))
    ]
    stale = samples(exposition.collector_families(snap(backends=backends), False))
    assert stale[(up, (("manufacturer", "nvidia"), ("node", "n1")))] == 0.0


def pod_row(used: int | None) -> PodLevel:
    ref = InstanceRef("ns", "vllm", "i-1")
    return PodLevel(ref, Pair(4000, used), Pair(16384, used), Pair(20480, None), pod="vllm-0")


def test_pod_families_publish_totals_always_and_used_only_when_measured() -> None:
    got = samples(exposition.pod_families(snap(), [pod_row(250)]))
    # The pod's own figures: its name, and an empty container (the whole pod's, none of its
    # containers'), so a scrape with honor_labels attaches neither of the agent's own.
    labels = (
        ("container", ""),
        ("instance_name", "vllm"),
        ("instance_uid", "i-1"),
        ("namespace", "ns"),
        ("node", "n1"),
        ("pod", "vllm-0"),
    )
    assert got == {
        ("gpustack_instance_cpu_total_millicores", labels): 4000.0,
        ("gpustack_instance_cpu_used_millicores", labels): 250.0,
        ("gpustack_instance_memory_total_mib", labels): 16384.0,
        ("gpustack_instance_memory_used_mib", labels): 250.0,
        ("gpustack_instance_storage_total_mib", labels): 20480.0,
    }
    unmeasured = samples(exposition.pod_families(snap(), [pod_row(None)]))
    assert sorted(name for name, _ in unmeasured) == [
        "gpustack_instance_cpu_total_millicores",
        "gpustack_instance_memory_total_mib",
        "gpustack_instance_storage_total_mib",
    ]


def test_pod_families_say_their_unit_in_their_help() -> None:
    text = exposition.render(exposition.pod_families(snap(), [])).decode()
    helps = {line.split()[2]: line for line in text.splitlines() if line.startswith("# HELP")}
    assert helps["gpustack_instance_cpu_total_millicores"].endswith("limits, millicores.")
    assert helps["gpustack_instance_memory_total_mib"].endswith("limits, MiB.")


# -- figures (R-F5..R-F7, R-E2) -------------------------------------------------------------------


def test_a_view_of_no_round_or_a_stale_one_says_nothing() -> None:
    card = Card("GPU-a", 0, memory_total_mib=100)
    group = Group("nvidia", 1.0, (card,))
    assert View.of(None).cards == {}
    assert View.of(snap(timestamp=0.0, groups=(group,))).cards == {}
    assert View.of(snap(groups=(group,)), fresh=False).cards == {}
    assert View.of(snap(timestamp=1.0, groups=(group,))).cards == {("nvidia", "GPU-a"): card}


def instance_pod(name: str, instance: str, instance_uid: str, created: str, **extra: object):  # type: ignore[no-untyped-def]
    return pod(
        name,
        {"main": [accel(0, 1)]},
        instance=instance,
        instance_uid=instance_uid,
        created=created,
        **extra,  # type: ignore[arg-type]
    )


def test_the_newest_pod_of_an_instance_is_its_newest_by_creation_not_by_name() -> None:
    index = PodIndex.of(
        [
            instance_pod("model-b", "model", "i-1", "2026-11-20T08:00:00Z"),
            instance_pod("model-a", "model", "i-1", "2026-11-20T09:00:00Z"),
            instance_pod("model-c", "model", "i-1", "2026-11-20T07:00:00Z"),
        ]
    )
    chosen = newest_pods(index, node_grants(index))
    assert [(ref.uid, p.name) for ref, p in chosen.values()] == [("i-1", "model-a")]


def test_pods_of_an_instance_created_in_one_second_are_told_apart_by_pod_name() -> None:
    index = PodIndex.of(
        [
            instance_pod("model-b", "model", "i-1", "2026-11-20T08:00:00Z"),
            instance_pod("model-a", "model", "i-1", "2026-11-20T08:00:00Z"),
        ]
    )
    chosen = newest_pods(index, node_grants(index))
    assert [p.name for _, p in chosen.values()] == ["model-b"]


def test_exported_instances_are_ordered_by_instance_name_then_uid() -> None:
    index = PodIndex.of(
        [
            instance_pod("a-0", "zeta", "i-9", "2026-11-20T08:00:00Z"),
            instance_pod("z-0", "alpha", "i-5", "2026-11-20T08:00:00Z"),
            # Its pod's UID sorts after the other alpha pod's: the Instance's UID decides.
            instance_pod(
                "b-0",
                "alpha",
                "i-2",
                "2026-11-20T08:00:00Z",
                pod_uid="ffffffff-ffff-4fff-8fff-ffffffffffff",
            ),
        ]
    )
    grants = node_grants(index)
    got = [(i.instance.name, i.instance.uid) for i in exported(index, grants, View(), ["nvidia"])]
    assert got == [("alpha", "i-2"), ("alpha", "i-5"), ("zeta", "i-9")]
    levels = [p.instance.name for p in pod_level(index, grants, None)]
    assert levels == ["alpha", "alpha", "zeta"]


def test_without_pods_or_grants_there_is_nothing_to_export() -> None:
    index = PodIndex.of([instance_pod("a-0", "a", "i-1", "2026-11-20T08:00:00Z")])
    grants = node_grants(index)
    for i, g in ((None, None), (index, None), (None, grants)):
        assert exported(i, g, View(), ["nvidia"]) == ()
        assert pod_level(i, g, None) == ()


def test_pod_level_figures_follow_the_kubelet() -> None:
    limits = {"main": {"cpu": "4", "memory": "16Gi"}}
    obj = pod("vllm-0", {"main": [accel(0, 1)]}, instance="vllm", limits=limits)
    index = PodIndex.of([obj])
    grants = node_grants(index)
    key = ("ns", "vllm-0", uid("vllm-0"))
    # The kubelet could not be read: the declared totals, nothing measured.
    (unread,) = pod_level(index, grants, None)
    assert (unread.cpu_millicores, unread.memory_mib, unread.storage_mib) == (
        Pair(4000, None),
        Pair(16384, None),
        Pair(0, None),
    )
    # Read, but the pod is not in the summary yet: left out, not shown as idle.
    assert pod_level(index, grants, {}) == ()
    (read,) = pod_level(index, grants, {key: PodUsage(250, 900, 40)})
    assert (read.cpu_millicores, read.memory_mib, read.storage_mib) == (
        Pair(4000, 250),
        Pair(16384, 900),
        Pair(0, 40),
    )


def test_no_pod_declares_nothing() -> None:
    assert totals(None) == (0, 0, 0)


def test_the_sample_keeps_the_kubelets_time_and_spells_its_units() -> None:
    obj = pod("vllm-0", {"main": [accel(0, 1)]}, instance="vllm", limits={"main": {"cpu": "2"}})
    info = pod_info(obj)
    assert info is not None
    ref = instance_of(info)
    measured = PodUsage(250, None, 40, timestamp="2026-11-20T09:00:00Z")
    sample = instance_metrics(ref, info, grants_of(info), measured, None, "2026-11-20T09:00:05Z")
    assert sample.timestamp == "2026-11-20T09:00:00Z"
    untimed = PodUsage(250, None, 40)
    later = instance_metrics(ref, info, grants_of(info), untimed, None, "2026-11-20T09:00:05Z")
    assert later.timestamp == "2026-11-20T09:00:05Z"
    doc = metrics_json(sample)["sample"]
    assert doc == {
        "timestamp": "2026-11-20T09:00:00Z",
        "cpuTotalMillicores": 2000,
        "cpuUsedMillicores": 250,
        "memoryTotalMiB": 0,
        "storageTotalMiB": 0,
        "storageUsedMiB": 40,
    }  # memory unmeasured: left out; no agent read: no accelerators


# -- pods (R-A4, R-F6) ----------------------------------------------------------------------------


def test_a_pod_known_by_its_uid_alone_has_not_started() -> None:
    info = PodInfo("u", "ns", "p")
    assert (info.started, info.ready, info.terminating) == (False, False, False)
    assert PodIndex.of_infos([info]).skipped == 0


def test_one_restart_is_a_start() -> None:
    assert has_started({"restartCount": 1, "state": {"waiting": {}}}) is True
    assert has_started({"restartCount": 0, "state": {"waiting": {}}}) is False


@pytest.mark.parametrize("bad", ["", 5, None])
def test_a_pod_without_a_string_uid_is_skipped(bad: object) -> None:
    assert pod_info({"metadata": {"uid": bad, "name": "p"}}) is None


@pytest.mark.parametrize(
    ("conditions", "ready"),
    [
        ([{"type": "Ready", "status": "True"}], True),
        ([{"type": "Ready", "status": "False"}], False),
        ([{"type": "PodScheduled", "status": "True"}], False),
        ([{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}], True),
        ([], False),
    ],
)
def test_ready_is_the_ready_condition(conditions: list[dict[str, str]], ready: bool) -> None:
    info = pod_info({"metadata": {"uid": "u"}, "status": {"conditions": conditions}})
    assert info is not None and info.ready is ready


def test_container_names_by_runtime_id() -> None:
    assert INDEX.container_name(UID, CID) == "main"
    assert INDEX.container_name(UID, "b" * 64) is None
    assert INDEX.container_name("22222222-2222-4222-8222-222222222222", CID) is None


def test_a_pods_file_is_read_again_only_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "pods.json"
    path.write_text(json.dumps({"items": [{"metadata": {"uid": "a"}}]}))
    pods = PodsFile(path)
    first = pods()
    assert pods() is first  # unchanged: the same index, not a second read
    path.write_text(json.dumps({"items": [{"metadata": {"uid": "a"}}, {"metadata": {"uid": "b"}}]}))
    assert sorted(pods().pods) == ["a", "b"]


# -- quantity -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1Ki", 1024),
        ("1Mi", 1048576),
        ("1Gi", 1073741824),
        ("1Ti", 1099511627776),
        ("1Pi", 1125899906842624),
        ("1Ei", 1152921504606846976),
    ],
)
def test_binary_suffixes(text: str, value: int) -> None:
    assert parse_quantity(text) == value


# -- slices (R-S1, R-S2, R-S4) --------------------------------------------------------------------

M = "nvidia"


def test_only_schema_version_1_is_read() -> None:
    for version in (0, 2):
        doc = {"schemaVersion": version, "devices": [{"deviceID": "GPU-a"}]}
        assert slices.from_json(doc) == SliceSection(schema_version=version)
        lookup = slices.Lookup.of(
            SliceSection(schema_version=version, devices=(SliceDevice(M, "GPU-a"),))
        )
        f = slices.figures(lookup, M, "u", "main", "GPU-a")
        assert f is not None and f.memory_reason is Reason.VERSION_SKEW
    assert slices.from_json({"schemaVersion": 1}) == SliceSection()


def test_an_empty_device_entry_counts_nothing_and_has_no_reason() -> None:
    d = SliceDevice(M, "GPU-a")
    counts = (
        d.rows_returned,
        d.rows_attributed,
        d.rows_non_instance,
        d.rows_unreadable,
        d.rows_ambiguous,
        d.reads_truncated,
    )
    assert counts == (0, 0, 0, 0, 0, 0) and (d.memory_reason, d.cores_reason) == (None, None)


def device_section(
    rows: tuple[ProcessRow, ...], cards: tuple[Card, ...] = (), memory_reason: Reason | None = None
) -> SliceSection:
    verdict = DeviceAttribution(
        "GPU-a",
        None,
        tuple((r, Placement(UID, "main")) for r in rows),
        RowCounts(len(rows), len(rows), 0, 0, 0),
    )
    reading = VendorReading(
        M, cards, (DeviceProcesses("GPU-a", rows, memory_reason=memory_reason),)
    )
    return slices.build(reading, [verdict], [])


def test_rows_of_a_card_the_vendor_did_not_describe_are_still_summed() -> None:
    section = device_section((ProcessRow(1, 3 * MIB, 5.0), ProcessRow(2, MIB, 2.0)))
    (usage,) = section.usages
    assert (usage.memory_used_mib, usage.cores_utilization_percent) == (4, 7.0)
    assert section.devices[0].memory_reason is None


def test_a_vendor_reason_is_not_overwritten_by_the_capacity_check() -> None:
    card = Card("GPU-a", 0, memory_total_mib=100)
    section = device_section((ProcessRow(1, 500 * MIB, 5.0),), (card,), Reason.UNSUPPORTED)
    assert section.devices[0].memory_reason is Reason.UNSUPPORTED


def test_a_row_without_memory_adds_nothing_to_the_capacity_check() -> None:
    # 100 MiB on a 100 MiB card, and a row whose memory the driver could not say: not a
    # contradiction; the holder's memory is absent because one row is, not because of R-S4.
    card = Card("GPU-a", 0, memory_total_mib=100)
    section = device_section((ProcessRow(1, 100 * MIB, 5.0), ProcessRow(2, None, 1.0)), (card,))
    assert section.devices[0].memory_reason is None
    assert section.usages[0].memory_used_mib is None


def partition_grant(partition_id: str | None) -> Grant:
    return Grant(UID, ("main",), M, "GPU-a", 0, Mode.PARTITIONED, partition_id=partition_id)


def test_a_partition_the_driver_did_not_answer_for_is_absent_with_its_reason() -> None:
    reading = VendorReading(M, (Card("GPU-a", 0, memory_total_mib=81559),))
    for recorded, shown in (("MIG-a", "MIG-a"), (None, "")):
        (p,) = slices.build(reading, [], [partition_grant(recorded)]).partitions
        assert (p.id, p.memory_total_mib, p.memory_used_mib) == (shown, None, None)
        assert (p.memory_reason, p.cores_reason) == (
            Reason.TRANSIENT_DRIVER_ERROR,
            Reason.TRANSIENT_DRIVER_ERROR,
        )


# -- snapshot (R-S1, R-S3) ------------------------------------------------------------------------


def test_the_period_is_at_least_a_second() -> None:
    assert snapshot.period_seconds(0.0) == 1
    assert snapshot.period_seconds(0.2) == 1


def test_a_groups_time_is_when_its_backend_answered() -> None:
    def result(read_at: float | None) -> BackendResult:
        return BackendResult(
            BackendStatus(M, BackendState.OK, 0.1), VendorReading(M), read_at=read_at
        )

    (answered,) = snapshot.assemble(20.0, 15.0, "n", [result(12.5)]).groups
    (unknown,) = snapshot.assemble(20.0, 15.0, "n", [result(None)]).groups
    assert (answered.timestamp, unknown.timestamp) == (12.5, 20.0)


def test_only_no_time_at_all_is_go_zero_time() -> None:
    assert snapshot.rfc3339(0.0) == "0001-01-01T00:00:00Z"
    assert snapshot.rfc3339(-1.0) == "0001-01-01T00:00:00Z"
    assert snapshot.rfc3339(1.0) == "1970-01-01T00:00:01.000Z"
    assert snapshot.rfc3339(None) is None


def test_a_nan_figure_is_refused_not_encoded() -> None:
    group = Group(M, 1.0, (Card("GPU-a", 0, cores_utilization_percent=float("nan")),))
    with pytest.raises(ValueError):
        snapshot.encode(snap(groups=(group,)))


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("1970-01-01T00:00:10Z", 10.0),
        ("0001-01-01T00:00:00Z", 0.0),
        ("yesterday", 0.0),
        (5, 0.0),
        (None, 0.0),
    ],
)
def test_times_read_back(value: object, seconds: float) -> None:
    assert snapshot.parse_time(value) == seconds


def test_a_served_snapshot_reads_back_defensively() -> None:
    doc = {
        "timestamp": "1970-01-01T00:16:40Z",
        "periodSeconds": 15,
        "groups": [
            "junk",
            {"manufacturer": 5, "accelerators": []},
            {
                "manufacturer": M,
                "accelerators": [{"index": 0}, {"id": "GPU-x"}, {"id": "GPU-a", "index": 0}],
            },
        ],
        "backends": [
            "junk",
            {"state": "ok"},
            {"manufacturer": "amd", "state": "martian"},
            {"manufacturer": M, "state": "ok", "lastSuccess": "1970-01-01T00:16:30Z"},
            {"manufacturer": "hygon", "state": "timeout"},
        ],
    }
    back = snapshot.from_json(doc)
    assert (back.timestamp, back.period_seconds) == (1000.0, 15)
    assert [(g.manufacturer, [c.id for c in g.cards]) for g in back.groups] == [(M, ["GPU-a"])]
    assert [(b.manufacturer, b.state, b.last_success) for b in back.backends] == [
        (M, BackendState.OK, 990.0),
        ("hygon", BackendState.TIMEOUT, None),
    ]
    assert snapshot.from_json({}).period_seconds == 0  # the producer did not say


@pytest.mark.parametrize(
    ("timestamp", "period", "now", "fresh"),
    [
        (1000.0, 10, 1030.0, True),  # exactly three periods
        (1000.0, 10, 1030.5, False),
        (1000.0, 0, 1045.0, True),  # unsaid: three times the 15 s default
        (1000.0, 0, 1045.5, False),
        (1.0, 10, 5.0, True),  # any time after the epoch is a round
        (0.0, 10, 0.0, False),  # Go's zero time: no round yet
    ],
)
def test_the_consumers_freshness_rule(
    timestamp: float, period: int, now: float, fresh: bool
) -> None:
    doc = Snapshot(timestamp=timestamp, period_seconds=period)
    assert snapshot.fresh(doc, now) is fresh
