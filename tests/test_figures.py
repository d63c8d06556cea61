"""One honest entry per grant, named after the situations users meet (R-G2..R-G4, R-F1..R-F6).

Each case builds a node and runs the real monitor round over it: grants from annotations,
attribution through a /proc tree, the slices section, the figures, and /metrics.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from devicemanager.figures import figures
from devicemanager.grants.grants import Grant
from devicemanager.grants.node import node_grants
from devicemanager.model import Card, PartitionReading, PodFault, Reason
from devicemanager.node.isolation import FIGURES, POD_LEVEL
from devicemanager.node.pods import PodIndex, PodInfo
from tests.world import CARD_MIB, GIB, MIB, accel, card, gpu, pod, process, rows, run, uid

SLICE_40 = 640_000  # 40% of 1,600,000 units
QUOTA_40 = SLICE_40 * CARD_MIB // 1_600_000  # 32623 MiB, the reference's H100 figure
CAP_40 = {"main": {"nvidia.com/gpu.sliced.cores-percentage": "40"}}


def two_slices(tmp: Path, busy: tuple[int, int | None, float | None], idle_pid: int = 202):
    pods = [
        pod("busy", {"main": [accel(0, 3, SLICE_40)]}, instance="busy", limits=CAP_40),
        pod("idle", {"main": [accel(0, 3, SLICE_40)]}, instance="idle", limits=CAP_40),
    ]
    process(tmp / "proc", busy[0], "busy")
    process(tmp / "proc", idle_pid, "idle")
    return run(
        tmp, [card(0, used=34_000, cores=36.0)], pods, (rows(0, busy, (idle_pid, 2 * GIB, 0.0)),)
    )


def test_two_40_percent_slices_on_one_card_one_busy(tmp_path: Path) -> None:
    result = two_slices(tmp_path, (101, 31 * GIB + 1, 36.0))
    busy, idle = result.entry("busy"), result.entry("idle")
    assert (busy.memory_total_mib, busy.memory_used_mib) == (QUOTA_40, 31 * 1024 + 1)
    assert busy.cores_utilization_percent == 90.0  # 36% of the card is 90% of a 40% cap
    assert (idle.memory_total_mib, idle.memory_used_mib, idle.cores_utilization_percent) == (
        QUOTA_40,
        2048,
        0.0,
    )
    # Neither slice reads the card's own 34,000 MiB: that is every tenant's.
    assert busy.memory_used_mib != 34_000
    assert result.backend.requests[0].carved_device_ids == {gpu(0)}
    assert result.values(
        "gpustack_instance_accelerator_cores_utilization_percent",
        instance_name="busy",
        mode="Sliced",
    ) == [90.0]


def test_a_slice_bursting_past_its_cap_reads_over_100(tmp_path: Path) -> None:
    result = two_slices(tmp_path, (101, GIB, 58.0))
    assert result.entry("busy").cores_utilization_percent == 145.0  # ceil(58 * 100 / 40)
    assert result.values(
        "gpustack_instance_accelerator_cores_utilization_percent", instance_name="busy"
    ) == [145.0]


def test_a_leaking_quota_reads_used_over_total_unclamped(tmp_path: Path) -> None:
    """Used may exceed total and is never clamped: an anomaly to investigate (R-F3)."""
    result = two_slices(tmp_path, (101, 40_000 * MIB, 10.0))
    busy = result.entry("busy")
    assert busy.memory_used_mib == 40_000 > busy.memory_total_mib == QUOTA_40
    assert busy.memory_utilization_percent == round(40_000 * 100 / QUOTA_40, 2)


def mig_world(tmp: Path, *partitions: PartitionReading, holders: dict[str, list[tuple[str, str]]]):
    pods = [
        pod(
            name,
            {
                c: [
                    accel(
                        4, 4, 200_000, allocatedPhysicalProfile="1g.10gb", allocatedPhysicalID=pid
                    )
                ]
                for c, pid in grants
            },
            instance=name,
        )
        for name, grants in holders.items()
    ]
    return run(tmp, [card(4, used=9_000, cores=None)], pods, partitions=partitions)


def test_a_1g_10gb_partition_reads_its_own_9856_mib(tmp_path: Path) -> None:
    part = PartitionReading("MIG-a", gpu(4), 9856, 4_100, None, None, Reason.UNSUPPORTED)
    result = mig_world(tmp_path, part, holders={"whisper": [("main", "MIG-a")]})
    e = result.entry("whisper")
    assert (e.id, e.index, e.mode.value) == ("MIG-a", 4, "Partitioned")
    assert (e.memory_total_mib, e.memory_used_mib) == (9856, 4_100)
    assert e.cores_utilization_percent is None  # NVIDIA answers no compute for a partition
    assert result.backend.requests[0].partition_ids == {(gpu(4), "MIG-a")}
    assert result.values("gpustack_instance_accelerator_cores_utilization_percent") == []


def test_an_idle_partition_is_a_measured_zero(tmp_path: Path) -> None:
    part = PartitionReading("MIG-a", gpu(4), 9856, 0, None, None, Reason.UNSUPPORTED)
    e = mig_world(tmp_path, part, holders={"whisper": [("main", "MIG-a")]}).entry("whisper")
    assert e.memory_used_mib == 0


def test_two_partitions_held_by_one_pod_are_two_entries(tmp_path: Path) -> None:
    parts = (
        PartitionReading("MIG-a", gpu(4), 9856, 100, None, None, Reason.UNSUPPORTED),
        PartitionReading("MIG-b", gpu(4), 9856, 200, None, None, Reason.UNSUPPORTED),
    )
    result = mig_world(tmp_path, *parts, holders={"pair": [("a", "MIG-a"), ("b", "MIG-b")]})
    assert {e.id: e.memory_used_mib for i in result.instances for e in i.entries} == {
        "MIG-a": 100,
        "MIG-b": 200,
    }


def test_a_partition_recorded_without_its_id_is_absent_not_the_parents(tmp_path: Path) -> None:
    part = PartitionReading("MIG-a", gpu(4), 9856, 100, None, None, Reason.UNSUPPORTED)
    result = mig_world(tmp_path, part, holders={"old": [("main", "")]})
    e = result.entry("old")
    assert (e.memory_total_mib, e.memory_used_mib) == (None, None)
    (record,) = result.snapshot.slices.partitions
    assert record.memory_reason is Reason.TRANSIENT_DRIVER_ERROR


def test_one_card_granted_separately_to_two_containers_of_one_pod(tmp_path: Path) -> None:
    pods = [pod("twins", {"a": [accel(1, 1)], "b": [accel(1, 1)]}, instance="twins")]
    result = run(tmp_path, [card(1, used=5_000, cores=70.0)], pods)
    (e,) = [e for i in result.instances for e in i.entries]
    assert (e.memory_used_mib, e.cores_utilization_percent) == (None, None)
    assert (e.temperature_celsius, e.power_usage_watts, e.unhealthy) == (41.0, 101.0, False)
    assert result.values(
        "gpustack_instance_accelerator_temperature_celsius", instance_name="twins"
    ) == [41.0]
    assert (
        result.values("gpustack_instance_accelerator_memory_used_mib", instance_name="twins") == []
    )


def test_an_unplaceable_row_poisons_its_device(tmp_path: Path) -> None:
    pods = [
        pod("busy", {"main": [accel(0, 3, SLICE_40)]}, instance="busy", limits=CAP_40),
        pod("idle", {"main": [accel(0, 3, SLICE_40)]}, instance="idle", limits=CAP_40),
    ]
    process(tmp_path / "proc", 101, "busy")
    # 303 is listed by the driver but already gone from /proc.
    result = run(tmp_path, [card(0)], pods, (rows(0, (101, GIB, 30.0), (303, GIB, 5.0)),))
    for name in ("busy", "idle"):  # the idle one must not read a plausible measured zero
        e = result.entry(name)
        assert (e.memory_used_mib, e.cores_utilization_percent) == (None, None)
        assert e.memory_total_mib == QUOTA_40  # the total is the allocation's: still stated
    (device,) = result.snapshot.slices.devices
    assert (device.memory_reason, device.cores_reason) == (Reason.EXITED, Reason.EXITED)
    assert (device.rows_returned, device.rows_attributed, device.rows_unreadable) == (2, 1, 1)
    assert result.values(
        "gpustack_accelerator_process_capability", entry_point="memory", reason="exited"
    ) == [0.0]


def test_a_host_process_on_the_card(tmp_path: Path) -> None:
    pods = [pod("busy", {"main": [accel(0, 3, SLICE_40)]}, instance="busy", limits=CAP_40)]
    process(tmp_path / "proc", 101, "busy")
    process(tmp_path / "proc", 7, None, comm="nvidia-persiste")
    result = run(tmp_path, [card(0)], pods, (rows(0, (101, GIB, 30.0), (7, 300 * MIB, 0.0)),))
    assert result.entry("busy").memory_used_mib is None
    (device,) = result.snapshot.slices.devices
    assert device.memory_reason is Reason.NO_POD_COMPONENT and device.rows_ambiguous == 1


def test_a_process_of_another_known_pod_is_excluded_harmlessly(tmp_path: Path) -> None:
    pods = [
        pod("busy", {"main": [accel(0, 3, SLICE_40)]}, instance="busy", limits=CAP_40),
        pod("bystander", None, containers=["main"]),
    ]
    process(tmp_path / "proc", 101, "busy")
    process(tmp_path / "proc", 102, "bystander")
    result = run(tmp_path, [card(0)], pods, (rows(0, (101, GIB, 30.0), (102, GIB, 9.0)),))
    assert result.entry("busy").memory_used_mib == 1024
    (device,) = result.snapshot.slices.devices
    assert device.memory_reason is None and device.rows_non_instance == 1


def test_a_recreated_instance_never_reads_its_predecessor(tmp_path: Path) -> None:
    old = pod(
        "model-0",
        {"main": [accel(0, 3, SLICE_40)]},
        instance="model",
        instance_uid=uid("first"),
        pod_uid=uid("old-pod"),
    )
    old["metadata"]["deletionTimestamp"] = "2026-11-20T09:00:00Z"
    new = pod(
        "model-0",
        {"main": [accel(0, 3, SLICE_40)]},
        instance="model",
        instance_uid=uid("second"),
        pod_uid=uid("new-pod"),
        created="2026-11-20T09:00:05Z",
    )
    process(tmp_path / "proc", 101, "model-0", pod_uid=uid("old-pod"))  # still exiting
    result = run(tmp_path, [card(0)], [old, new], (rows(0, (101, 20 * GIB, 50.0)),))
    assert [i.instance.uid for i in result.instances] == [uid("second")]
    e = result.entry("model")
    # The old pod's 20 GiB are its own: the new incarnation ran nothing yet.
    assert (e.memory_used_mib, e.cores_utilization_percent) == (0, 0.0)
    assert (
        result.values("gpustack_instance_accelerator_memory_used_mib", instance_uid=uid("first"))
        == []
    )


def test_a_never_started_instance_publishes_nothing_on_the_exporter(tmp_path: Path) -> None:
    pods = [pod("pulling", {"main": [accel(6, 1)]}, instance="pulling", started=False)]
    result = run(tmp_path, [card(6)], pods)
    assert result.instances == ()
    assert not any(
        ls.get("instance_name") == "pulling"
        for samples in result.series.values()
        for ls, _ in samples
    )


def test_a_shared_card_reads_the_cards_own_figures(tmp_path: Path) -> None:
    pods = [pod("alice", {"main": [accel(5, 2)]}), pod("bob", {"main": [accel(5, 2)]})]
    result = run(tmp_path, [card(5, used=11_338, cores=7.0)], pods)
    for name in ("alice", "bob"):
        e = result.entry(name)
        assert (
            e.mode.value,
            e.memory_total_mib,
            e.memory_used_mib,
            e.cores_utilization_percent,
        ) == (
            "Shared",
            CARD_MIB,
            11_338,
            7.0,
        )
    assert result.backend.requests[0].carved_device_ids == frozenset()  # no per-process query


def test_a_visibility_sidecar_is_not_a_grant(tmp_path: Path) -> None:
    pods = [pod("qwen", {"main": [accel(0, 1)], "sshd": [accel(0, 5, 0)]}, instance="qwen")]
    result = run(tmp_path, [card(0, used=70_000, cores=90.0)], pods)
    (e,) = [e for i in result.instances for e in i.entries]
    assert (e.mode.value, e.memory_used_mib) == ("Exclusive", 70_000)  # not made ambiguous


def test_a_plain_pod_holding_a_grant_is_its_own_instance(tmp_path: Path) -> None:
    result = run(tmp_path, [card(2)], [pod("train-7x2kq", {"trainer": [accel(2, 1)]})])
    (item,) = result.instances
    assert (item.instance.name, item.instance.uid) == ("train-7x2kq", uid("train-7x2kq"))


def test_a_malformed_annotation_costs_only_its_own_pod(tmp_path: Path) -> None:
    broken = pod(
        "broken",
        None,
        annotations={
            "device.gpustack.ai/accelerator.allocated": '{"main": {"devices": {"groups": "no"}}}'
        },
    )
    result = run(tmp_path, [card(2), card(3)], [broken, pod("fine", {"main": [accel(3, 1)]})])
    assert [i.instance.name for i in result.instances] == ["fine"]
    assert result.values("gpustack_accelerator_allocation_errors") == [1.0]


def test_summed_rows_over_the_cards_capacity_are_refused(tmp_path: Path) -> None:
    pods = [pod("busy", {"main": [accel(0, 3, SLICE_40)]}, instance="busy", limits=CAP_40)]
    process(tmp_path / "proc", 101, "busy")
    result = run(tmp_path, [card(0)], pods, (rows(0, (101, (CARD_MIB + 1) * MIB, 30.0)),))
    e = result.entry("busy")
    assert e.memory_used_mib is None and e.cores_utilization_percent == 75.0
    assert result.snapshot.slices.devices[0].memory_reason is Reason.INVALID_DATA


def test_the_mps_daemon_is_mediated(tmp_path: Path) -> None:
    pods = [pod("busy", {"main": [accel(0, 3, SLICE_40)]}, instance="busy", limits=CAP_40)]
    process(tmp_path / "proc", 101, "busy", comm="nvidia-cuda-mps")
    result = run(tmp_path, [card(0)], pods, (rows(0, (101, GIB, 30.0)),))
    assert result.snapshot.slices.devices[0].memory_reason is Reason.MEDIATED


def test_no_pods_known_means_no_section_and_no_instance_series(tmp_path: Path) -> None:
    result = run(tmp_path, [card(0)], [])
    assert result.snapshot.slices is None  # could not measure: absent, not empty
    assert "slices" not in result.published.snapshot_json.decode()


def test_a_partition_enumerated_as_a_device_is_unhealthy_when_it_or_its_board_is(
    tmp_path: Path,
) -> None:
    # An XCP-like partition: a device of its own whose parentID names its board (R-V2). The
    # entry's health is the partition's or its board's; temperature and power are the board's.
    board = card(7)
    xcp = Card(id="GPU-xcp-7-1", index=8, memory_total_mib=20_000, parent_id=board.id)
    held = [pod("xcp", {"main": [{"id": xcp.id, "index": 8, "mode": 1, "allocated": 1_600_000}]})]
    # Its reason (issue 29, shown on the grant's `unhealthy` series): the partition's own first.
    sick = replace(board, unhealthy=True, unhealthy_reason="ecc_uncorrectable")
    cases = [
        (replace(xcp, unhealthy=True, unhealthy_reason="gpu_is_lost"), board, True, "gpu_is_lost"),
        (xcp, replace(board, unhealthy=True, unhealthy_reason="gpu_is_lost"), True, "gpu_is_lost"),
        (replace(xcp, unhealthy=True, unhealthy_reason="device_lost"), sick, True, "device_lost"),
        (xcp, sick, True, "ecc_uncorrectable"),
        (xcp, board, False, None),
    ]
    for part, parent, unhealthy, reason in cases:
        e = run(tmp_path, [parent, part], held).entry("xcp")
        assert (e.id, e.temperature_celsius, e.power_usage_watts) == (xcp.id, 47.0, 107.0)
        assert (e.unhealthy, e.unhealthy_reason) == (unhealthy, reason)


def test_an_instances_figures_fault_is_recorded_under_its_pods_uid(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The fault log and the pod_errors count name the pod by this key (index.get(uid)), so it
    # is the pod's UID, never its Instance's.
    pods = [
        pod("busy", {"main": [accel(0, 1)]}, instance="busy"),
        pod("whole", {"main": [accel(1, 1)]}, instance="whole"),
    ]
    real = figures.entry

    def entry(grant: Grant, view: figures.View, alone: bool = True) -> figures.AcceleratorEntry:
        if grant.device_id == gpu(1):
            raise ZeroDivisionError("a figure nobody foresaw")
        return real(grant, view, alone)

    monkeypatch.setattr(figures, "entry", entry)
    index = PodIndex.of(pods)
    faults: dict[str, PodFault] = {}
    got = figures.exported(index, node_grants(index), figures.View(), ["nvidia"], faults)
    assert [i.instance.uid for i in got] == [uid("instance/busy")]
    assert faults == {uid("whole"): PodFault(FIGURES, "ZeroDivisionError: a figure nobody foresaw")}


def test_an_instances_pod_level_fault_is_recorded_under_its_pods_uid(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pods = [
        pod("busy", {"main": [accel(0, 1)]}, instance="busy"),
        pod("idle", {"main": [accel(1, 1)]}, instance="idle"),
    ]
    real = figures.totals

    def totals(info: PodInfo | None) -> tuple[int, int, int]:
        if info is not None and info.name == "busy":
            raise ValueError("a limit nobody foresaw")
        return real(info)

    monkeypatch.setattr(figures, "totals", totals)
    index = PodIndex.of(pods)
    faults: dict[str, PodFault] = {}
    got = figures.pod_level(index, node_grants(index), None, faults)
    assert [p.instance.uid for p in got] == [uid("instance/idle")]
    assert faults == {uid("busy"): PodFault(POD_LEVEL, "ValueError: a limit nobody foresaw")}
