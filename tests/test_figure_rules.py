"""Rules of the figures that no golden can pin, each named after the situation it covers
(issue 12; R-F4, R-G2, R-G3, R-S2, R-S4, R-E5).

Every expected value is written by hand from the rule, with its arithmetic beside it: never
computed by the code's own formulas.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from devicemanager.figures import exposition, snapshot
from devicemanager.figures.slices import from_json, merge
from devicemanager.figures.snapshot import BackendResult
from devicemanager.grants.allocations import Mode
from devicemanager.grants.grants import ceil_restated, grants_of
from devicemanager.model import (
    BackendState,
    BackendStatus,
    DeviceProcesses,
    PartitionReading,
    ProcessRow,
    Reason,
    SliceDevice,
    SliceSection,
    VendorReading,
)
from devicemanager.node.pods import pod_info
from tests.world import GIB, MIB, accel, card, gpu, pod, process, rows, run

HAMI = "hami.io/vgpu-devices-allocated"
HAMI_MIG = "hami.io/vgpu-mig-allocations"


def capped(percent: str, container: str = "main") -> dict[str, dict[str, str]]:
    return {container: {"nvidia.com/gpu.sliced.cores-percentage": percent}}


def one_slice(
    tmp: Path, cap: str, *entries: tuple[int, int | None, float | None], units: int = 640_000
):  # type: ignore[no-untyped-def]
    pods = [pod("solo", {"main": [accel(0, 3, units)]}, instance="solo", limits=capped(cap))]
    for pid, _, _ in entries:
        process(tmp / "proc", pid, "solo")
    return run(tmp, [card(0)], pods, (rows(0, *entries),))


# -- R-F4: the restatement against the cap --------------------------------------------------------


def test_a_fractional_restatement_rounds_up_not_to_nearest(tmp_path: Path) -> None:
    # 10% of the card against a 30% cap is 33.33...% of the allowance: 34, not 33.
    result = one_slice(tmp_path, "30", (101, GIB, 10.0))
    assert result.entry("solo").cores_utilization_percent == 34.0
    assert result.values(
        "gpustack_instance_accelerator_cores_utilization_percent", instance_name="solo"
    ) == [34.0]


def test_an_exact_restatement_is_not_rounded_past_itself(tmp_path: Path) -> None:
    # 12% against a 40% cap is exactly 30%: not 31.
    assert one_slice(tmp_path, "40", (101, GIB, 12.0)).entry("solo").cores_utilization_percent == 30
    # A restatement a hair above a whole number still rounds up: 10.5% of 35% is 30.0000...
    assert ceil_restated(10.5, 35.0) == 30.0
    assert ceil_restated(10.6, 35.0) == 31.0  # 30.29 -> 31


def test_a_cards_per_process_compute_is_capped_at_100_before_restatement(tmp_path: Path) -> None:
    # Two processes of the holder read 70% and 60% of the card: 130% is impossible, so the
    # card's share is 100%, and against a 50% cap that is 200%, not 260%.
    result = one_slice(tmp_path, "50", (101, GIB, 70.0), (102, GIB, 60.0))
    assert result.entry("solo").cores_utilization_percent == 200.0
    (usage,) = result.snapshot.slices.usages
    assert usage.cores_utilization_percent == 100.0  # the section states the card's share


def test_exactly_100_percent_of_the_card_is_kept_as_it_is(tmp_path: Path) -> None:
    result = one_slice(tmp_path, "50", (101, GIB, 60.0), (102, GIB, 40.0))
    assert result.snapshot.slices.usages[0].cores_utilization_percent == 100.0
    assert result.entry("solo").cores_utilization_percent == 200.0


def test_a_cap_over_100_or_unreadable_is_no_cap(tmp_path: Path) -> None:
    # "150" is not a percentage of one card: the cap is the whole card, 45% reads 45%.
    assert (
        one_slice(tmp_path, "150", (101, GIB, 45.0)).entry("solo").cores_utilization_percent == 45
    )
    assert ceil_restated(45.0, 0.0) == 45.0  # a zero cap is no cap, never a division by zero
    assert ceil_restated(45.0, -5.0) == 45.0
    assert ceil_restated(45.0, 100.0) == 45.0
    assert ceil_restated(45.0, 90.0) == 50.0  # 45 / 90 = 50%: a cap of 90 is a cap


def test_a_cap_of_exactly_100_is_the_whole_card(tmp_path: Path) -> None:
    assert (
        one_slice(tmp_path, "100", (101, GIB, 45.0)).entry("solo").cores_utilization_percent == 45
    )


def test_a_partition_is_never_restated_against_a_cap(tmp_path: Path) -> None:
    # A container that holds a partition and (oddly) also carries a 50% cores limit: the
    # partition's own compute is published as read, 30%, never 60%.
    holder = pod(
        "hygon",
        {"main": [accel(4, 4, 200_000, allocatedPhysicalID="PART-a")]},
        instance="hygon",
        limits=capped("50"),
    )
    part = PartitionReading("PART-a", gpu(4), 8192, 1024, 30.0)
    result = run(tmp_path, [card(4)], [holder], partitions=(part,))
    e = result.entry("hygon")
    assert (e.memory_total_mib, e.memory_used_mib, e.cores_utilization_percent) == (
        8192,
        1024,
        30.0,
    )
    assert e.memory_utilization_percent == 12.5  # 1024 / 8192


# -- HAMi -----------------------------------------------------------------------------------------


def hami_pod(
    name: str,
    annotation: str,
    containers: list[str],
    init: list[str] | None = None,
    mig: str | None = None,
) -> dict[str, Any]:
    obj = pod(name, None, containers=containers, annotations={HAMI: annotation})
    if mig is not None:
        obj["metadata"]["annotations"][HAMI_MIG] = mig
    if init:
        obj["spec"]["initContainers"] = [{"name": n} for n in init]
    return obj


def test_hami_cores_0_is_no_cap_and_the_round_completes(tmp_path: Path) -> None:
    pods = [hami_pod("finetune", f"{gpu(0)},NVIDIA,20480,0:;", ["train"])]
    process(tmp_path / "proc", 101, "finetune", container="train")
    result = run(tmp_path, [card(0)], pods, (rows(0, (101, 10 * GIB, 45.0)),))
    assert result.snapshot.timestamp > 0  # the round published
    e = result.entry("finetune")
    # Quota 20480 MiB as HAMi wrote it, 10 GiB used, 45% of the card against no cap = 45%.
    assert (e.mode, e.memory_total_mib, e.memory_used_mib) == (Mode.SLICED, 20480, 10240)
    assert e.cores_utilization_percent == 45.0
    (grant,) = grants_of(pod_info(pods[0]))  # type: ignore[arg-type]
    assert grant.cores_cap == 100.0


def test_hami_cores_30_caps_the_slice(tmp_path: Path) -> None:
    pods = [hami_pod("finetune", f"{gpu(0)},NVIDIA,20480,30:;", ["train"])]
    process(tmp_path / "proc", 101, "finetune", container="train")
    result = run(tmp_path, [card(0)], pods, (rows(0, (101, GIB, 45.0)),))
    assert result.entry("finetune").cores_utilization_percent == 150.0  # 45 / 30


def test_hami_cores_over_100_is_the_whole_card() -> None:
    info = pod_info(hami_pod("big", "GPU-x,NVIDIA,1000,250:;", ["main"]))
    assert info is not None
    (grant,) = grants_of(info)
    assert grant.cores_cap == 100.0


def test_hami_slots_count_init_containers_first(tmp_path: Path) -> None:
    # Containers setup (init), main, side: slot 0 is setup's, slot 1 main's, slot 2 side's.
    info = pod_info(
        hami_pod(
            "slots",
            f"GPU-a,NVIDIA,1000,10:;{gpu(0)},NVIDIA,3000,25:;GPU-c,NVIDIA,5000,50:;",
            ["main", "side"],
            init=["setup"],
        )
    )
    assert info is not None
    held = {g.device_id: (g.containers, g.memory_mib, g.cores_cap) for g in grants_of(info)}
    assert held == {
        "GPU-a": (("setup",), 1000, 10.0),
        gpu(0): (("main",), 3000, 25.0),
        "GPU-c": (("side",), 5000, 50.0),
    }


def test_a_hami_slice_is_measured_on_the_container_its_slot_names(tmp_path: Path) -> None:
    obj = hami_pod("slots", f";{gpu(0)},NVIDIA,3000,25:;;", ["main", "side"], init=["setup"])
    process(tmp_path / "proc", 101, "slots", container="main")
    result = run(tmp_path, [card(0)], [obj], (rows(0, (101, 2 * GIB, 20.0)),))
    e = result.entry("slots")
    # main's own 2 GiB and 20% of the card against its 25% cap = 80%.
    assert (e.memory_total_mib, e.memory_used_mib, e.cores_utilization_percent) == (3000, 2048, 80)


def test_hami_mig_container_index_counts_init_containers_first() -> None:
    mig = json.dumps([{"containerIndex": 2, "gpuUUID": "GPU-p", "migUUID": "MIG-x"}])
    info = pod_info(hami_pod("mig", ";;;", ["main", "side"], init=["setup"], mig=mig))
    assert info is not None
    (grant,) = grants_of(info)
    assert (grant.containers, grant.partition_id, grant.mode) == (
        ("side",),
        "MIG-x",
        Mode.PARTITIONED,
    )


# -- R-G3: two containers of one pod on one grant -------------------------------------------------


def test_two_containers_of_one_pod_holding_one_card_as_sliced_get_no_usage(tmp_path: Path) -> None:
    pods = [
        pod(
            "twins",
            {"a": [accel(0, 3, 640_000)], "b": [accel(0, 3, 640_000)]},
            instance="twins",
            limits={**capped("40", "a"), **capped("40", "b")},
        )
    ]
    process(tmp_path / "proc", 101, "twins", container="a")
    process(tmp_path / "proc", 102, "twins", container="b")
    result = run(tmp_path, [card(0)], pods, (rows(0, (101, 4 * GIB, 10.0), (102, 6 * GIB, 20.0)),))
    (e,) = [e for i in result.instances for e in i.entries]
    # One entry: the two slices' quota, 1,280,000 units of 81559 MiB = 65247.2 -> 65247; no usage
    # of its own (whose would it be?), the card's temperature and power still.
    assert (e.id, e.mode, e.memory_total_mib) == (gpu(0), Mode.SLICED, 65247)
    assert (e.memory_used_mib, e.cores_utilization_percent) == (None, None)
    assert (e.temperature_celsius, e.power_usage_watts, e.unhealthy) == (40.0, 100.0, False)
    published = {
        name.removeprefix("gpustack_instance_accelerator_")
        for name, samples in result.series.items()
        if name.startswith("gpustack_instance_accelerator_")
        and any(ls.get("instance_name") == "twins" for ls, _ in samples)
    }
    assert published == {
        "memory_total_mib",
        "temperature_celsius",
        "power_usage_watts",
        "unhealthy",
    }


def test_two_containers_of_one_pod_holding_one_partition_get_no_figures(tmp_path: Path) -> None:
    mig = {"allocatedPhysicalProfile": "1g.10gb", "allocatedPhysicalID": "MIG-a"}
    pods = [
        pod(
            "twins",
            {"a": [accel(4, 4, 200_000, **mig)], "b": [accel(4, 4, 200_000, **mig)]},
            instance="twins",
        )
    ]
    part = PartitionReading("MIG-a", gpu(4), 9856, 4_100, None, None, Reason.UNSUPPORTED)
    result = run(tmp_path, [card(4)], pods, partitions=(part,))
    (e,) = [e for i in result.instances for e in i.entries]
    assert (e.id, e.mode) == ("MIG-a", Mode.PARTITIONED)
    assert (e.memory_total_mib, e.memory_used_mib, e.cores_utilization_percent) == (
        None,
        None,
        None,
    )
    assert (e.temperature_celsius, e.power_usage_watts) == (44.0, 104.0)
    assert result.snapshot.slices.partitions == ()  # dropped for both holders


# -- R-S4: a partition bigger than its card -------------------------------------------------------


def partition_result(tmp: Path, total: int | None, used: int | None):  # type: ignore[no-untyped-def]
    holder = pod(
        "whisper",
        {"main": [accel(4, 4, 200_000, allocatedPhysicalID="MIG-a")]},
        instance="whisper",
    )
    part = PartitionReading("MIG-a", gpu(4), total, used, None, None, Reason.UNSUPPORTED)
    return run(tmp, [card(4)], [holder], partitions=(part,))


def test_a_partition_larger_than_its_parent_card_is_refused(tmp_path: Path) -> None:
    result = partition_result(tmp_path, 90_000, 10)  # the card has 81559 MiB
    e = result.entry("whisper")
    assert (e.memory_total_mib, e.memory_used_mib) == (None, None)
    (record,) = result.snapshot.slices.partitions
    assert (record.memory_reason, record.memory_total_mib) == (Reason.INVALID_DATA, None)
    assert result.values("gpustack_instance_accelerator_memory_total_mib") == []


def test_a_partition_using_more_than_its_parent_card_is_refused(tmp_path: Path) -> None:
    result = partition_result(tmp_path, 9856, 81_560)  # one MiB more than the whole card
    (record,) = result.snapshot.slices.partitions
    assert (record.memory_reason, record.memory_used_mib) == (Reason.INVALID_DATA, None)


def test_a_partition_the_size_of_its_card_is_accepted(tmp_path: Path) -> None:
    e = partition_result(tmp_path, 81_559, 81_559).entry("whisper")
    assert (e.memory_total_mib, e.memory_used_mib) == (81_559, 81_559)


def test_rows_summing_exactly_to_the_cards_capacity_are_accepted(tmp_path: Path) -> None:
    # Refused only when over capacity (R-S4): 81559 MiB exactly is a full card, not a lie.
    e = one_slice(tmp_path, "40", (101, 81_559 * MIB, 10.0)).entry("solo")
    assert e.memory_used_mib == 81_559


# -- R-S2: the truncated flag ---------------------------------------------------------------------


def served(section: SliceSection) -> dict[str, Any]:
    result = BackendResult(
        status=BackendStatus("nvidia", BackendState.OK, 0.1),
        reading=VendorReading("nvidia"),
        read_at=1.0,
    )
    doc: dict[str, Any] = json.loads(
        snapshot.encode(snapshot.assemble(2.0, 15.0, "n", [result], slices=section))
    )
    return doc


def test_the_truncated_flag_of_the_slices_section_reaches_the_json() -> None:
    # 257 devices: one past the 256 a section holds.
    devices = tuple(SliceDevice("nvidia", f"GPU-{i:03d}") for i in range(257))
    doc = served(merge([SliceSection(devices=devices)]))
    assert doc["slices"]["truncated"] is True
    assert len(doc["slices"]["devices"]) == 256
    assert from_json(doc["slices"]).truncated is True  # type: ignore[union-attr]


def test_a_section_within_bounds_says_nothing_of_truncation() -> None:
    devices = tuple(SliceDevice("nvidia", f"GPU-{i:03d}") for i in range(256))
    doc = served(merge([SliceSection(devices=devices)]))
    assert "truncated" not in doc["slices"] and len(doc["slices"]["devices"]) == 256


# -- R-E5: the capability gauge -------------------------------------------------------------------


def test_the_capability_gauge_never_repeats_a_label_set() -> None:
    # Two diagnostics entries for one device (e.g. two sections merged by a consumer): the
    # gauge keeps the first and never publishes a duplicate series, which fails a whole scrape.
    section = SliceSection(
        devices=(
            SliceDevice("nvidia", "GPU-a", memory_reason=Reason.UNSUPPORTED),
            SliceDevice("nvidia", "GPU-a"),
            SliceDevice("nvidia", "GPU-b", cores_reason=Reason.EXITED),
        )
    )
    snap = snapshot.assemble(2.0, 15.0, "n", [], slices=section)
    text = exposition.render(exposition.capability_family(snap)).decode()
    (family,) = text_string_to_metric_families(text)
    got = sorted(
        (s.labels["id"], s.labels["entry_point"], s.labels["reason"], s.value)
        for s in family.samples
    )
    assert got == [
        ("GPU-a", "cores", "", 1.0),
        ("GPU-a", "memory", "unsupported", 0.0),
        ("GPU-b", "cores", "exited", 0.0),
        ("GPU-b", "memory", "", 1.0),
    ]


def test_a_device_without_rows_is_a_measured_idle_zero_for_every_holder(tmp_path: Path) -> None:
    pods = [pod("solo", {"main": [accel(0, 3, 640_000)]}, instance="solo", limits=capped("40"))]
    result = run(tmp_path, [card(0)], pods, (DeviceProcesses(gpu(0)),))
    e = result.entry("solo")
    assert (e.memory_used_mib, e.cores_utilization_percent) == (0, 0.0)


def test_a_row_without_memory_makes_only_memory_absent(tmp_path: Path) -> None:
    result = one_slice(tmp_path, "40", (101, None, 20.0), (102, GIB, 4.0))
    e = result.entry("solo")
    assert (e.memory_used_mib, e.cores_utilization_percent) == (None, 60.0)  # 24 / 40


def test_a_row_without_compute_makes_only_compute_absent(tmp_path: Path) -> None:
    result = one_slice(tmp_path, "40", (101, GIB, None), (102, GIB, 4.0))
    e = result.entry("solo")
    assert (e.memory_used_mib, e.cores_utilization_percent) == (2048, None)


def test_process_rows_of_one_holder_are_summed_in_bytes_then_rounded_up(tmp_path: Path) -> None:
    # Two rows of half a MiB: exactly 1 MiB in all (rounding each row first would say 2).
    result = one_slice(tmp_path, "40", (101, MIB // 2, 1.0), (102, MIB // 2, 1.0))
    assert result.entry("solo").memory_used_mib == 1
    # One byte over a whole MiB is the next MiB (R-F2): 3 MiB + 1 byte reads 4.
    assert one_slice(tmp_path, "40", (103, 3 * MIB + 1, 1.0)).entry("solo").memory_used_mib == 4


def test_an_exclusive_holder_reads_the_cards_own_figures_beside_process_rows(
    tmp_path: Path,
) -> None:
    # An Exclusive holder reads the card's own figures even when rows exist for the card.
    pods = [pod("whole", {"main": [accel(0, 1)]}, instance="whole")]
    process(tmp_path / "proc", 101, "whole")
    result = run(
        tmp_path,
        [card(0, used=7_000, cores=55.0)],
        pods,
        (DeviceProcesses(gpu(0), (ProcessRow(101, GIB, 10.0),)),),
    )
    e = result.entry("whole")
    assert (e.memory_total_mib, e.memory_used_mib, e.cores_utilization_percent) == (
        81559,
        7_000,
        55.0,
    )
    assert result.backend.requests[0].carved_device_ids == frozenset()
