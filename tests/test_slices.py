"""The slices section: its bounds, its reading by consumers, its JSON (R-S1, R-S2, R-S4)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from devicemanager.figures import slices
from devicemanager.figures.slices import (
    MAX_DEVICES,
    MAX_USAGES,
    Lookup,
    SliceDevice,
    SlicePartition,
    SliceSection,
    SliceUsage,
    build,
    figures,
    from_json,
    merge,
    to_json,
)
from devicemanager.grants.allocations import Mode
from devicemanager.grants.grants import Grant
from devicemanager.model import (
    MIB,
    Card,
    DeviceProcesses,
    PartitionReading,
    PodFault,
    ProcessRow,
    Reason,
    VendorReading,
)
from devicemanager.node.attribution import DeviceAttribution, Placement, RowCounts
from devicemanager.node.isolation import FIGURES

M = "nvidia"


def usage(device: str, pod: str, memory: int | None = 10, cores: float | None = 5.0) -> SliceUsage:
    return SliceUsage(M, pod, "main", device, memory, cores)


def test_consumer_rules_in_order() -> None:
    section = SliceSection(
        usages=(usage("GPU-a", "p1", 100, 20.0),),
        devices=(SliceDevice(M, "GPU-a"), SliceDevice(M, "GPU-b", cores_reason=Reason.UNSUPPORTED)),
        partitions=(
            SlicePartition(
                M, "p3", "main", "GPU-c", "MIG-1", 9856, 0, None, None, Reason.UNSUPPORTED
            ),
        ),
    )
    lookup = Lookup.of(section)
    assert figures(None, M, "p1", "main", "GPU-a") is None  # no section: could not measure
    f = figures(lookup, M, "p1", "main", "GPU-a")
    assert f is not None and (f.memory_used_mib, f.cores_percent) == (100, 20.0)
    # Measured and idle: zeros wherever the device answered, absent where it did not.
    idle = figures(lookup, M, "p2", "main", "GPU-b")
    assert idle is not None and (idle.memory_used_mib, idle.cores_percent) == (0, None)
    assert figures(lookup, M, "p1", "main", "GPU-z") is None  # not covered by the pass
    part = figures(lookup, M, "p3", "main", "GPU-c", partition_id="MIG-1")
    assert part is not None and (part.memory_total_mib, part.memory_used_mib) == (9856, 0)
    assert figures(lookup, M, "p3", "main", "GPU-c", partition_id="MIG-2") is None


def test_an_unknown_schema_version_answers_nothing_but_its_reason() -> None:
    lookup = Lookup.of(SliceSection(schema_version=2, devices=(SliceDevice(M, "GPU-a"),)))
    f = figures(lookup, M, "p1", "main", "GPU-a")
    assert f is not None and (f.memory_used_mib, f.cores_percent) == (None, None)
    assert f.memory_reason is Reason.VERSION_SKEW
    assert from_json({"schemaVersion": 7, "usages": [{"deviceID": "x"}]}) == SliceSection(
        schema_version=7
    )


def test_bounds_drop_a_device_whole_and_say_so() -> None:
    # 300 devices of 20 records each: 256 devices at most, 4096 records at most.
    devices = tuple(SliceDevice(M, f"GPU-{i:03d}") for i in range(300))
    usages = tuple(usage(f"GPU-{i:03d}", f"pod-{j}") for i in range(300) for j in range(20))
    merged = merge([SliceSection(usages=usages, devices=devices)])
    assert merged.truncated is True
    assert len(merged.devices) == MAX_DEVICES
    assert len(merged.usages) <= MAX_USAGES
    kept = {u.device_id for u in merged.usages}
    for d in merged.devices:
        if d.device_id in kept:
            assert d.memory_reason is None
            assert sum(u.device_id == d.device_id for u in merged.usages) == 20  # never in part
        else:
            assert (d.memory_reason, d.cores_reason) == (Reason.BOUNDED, Reason.BOUNDED)
    assert len(kept) == MAX_USAGES // 20
    # A consumer reading a bounded device gets no figures, not a measured zero.
    bounded = next(d for d in merged.devices if d.device_id not in kept)
    f = figures(Lookup.of(merged), M, "pod-0", "main", bounded.device_id)
    assert f is not None and (f.memory_used_mib, f.cores_percent) == (None, None)


def test_a_full_section_stays_under_4_mib() -> None:
    uid = "0123456789abcdef0123456789abcdef"
    devices = tuple(SliceDevice(M, f"GPU-{uid}-{i:04d}") for i in range(MAX_DEVICES))
    usages = tuple(
        SliceUsage(
            M,
            f"{uid[:8]}-{j:04d}-4000-8000-{uid[:12]}",
            "a-rather-long-container-name",
            f"GPU-{uid}-{i:04d}",
            81559,
            100.0,
        )
        for i in range(MAX_DEVICES)
        for j in range(MAX_USAGES // MAX_DEVICES)
    )
    merged = merge([SliceSection(usages=usages, devices=devices)])
    assert len(merged.usages) == MAX_USAGES and not merged.truncated
    assert len(json.dumps(to_json(merged)).encode()) < 4 << 20


def test_json_round_trip_and_omitted_fields() -> None:
    section = SliceSection(
        usages=(usage("GPU-a", "p1", None, 3.0),),
        devices=(SliceDevice(M, "GPU-a", memory_reason=Reason.UNSUPPORTED, rows_returned=2),),
    )
    doc = to_json(section)
    assert "truncated" not in doc and "partitions" not in doc
    assert (
        doc["devices"][0]["memoryReason"] == "unsupported"
        and "coresReason" not in doc["devices"][0]
    )
    assert from_json(json.loads(json.dumps(doc))) == section


def test_damaged_documents_are_read_defensively() -> None:
    assert from_json(None) is None and from_json({"schemaVersion": "1"}) is None
    section = from_json(
        {
            "schemaVersion": 1,
            "usages": ["x", {"memoryUsedMiB": "lots"}],
            "devices": [{"deviceID": "GPU-a", "memoryReason": "martian"}],
        }
    )
    assert section is not None
    assert section.usages[0].memory_used_mib is None
    # A reason this consumer does not know still keeps the figure absent.
    assert section.devices[0].memory_reason is Reason.VERSION_SKEW


# -- each holder's part behind the per-pod boundary ----------------------------------------------


def holders_section() -> tuple[VendorReading, list[DeviceAttribution], list[Grant]]:
    """Pod p holds a slice of GPU-a (main), one of GPU-b (side) and partition MIG-p of GPU-c;
    pod q a slice of GPU-a and partition MIG-q."""
    a = (ProcessRow(1, 3 * MIB, 5.0), ProcessRow(2, MIB, 2.0))
    b = (ProcessRow(3, 2 * MIB, 4.0),)
    reading = VendorReading(
        M,
        (Card("GPU-c", 2, memory_total_mib=81559),),
        (DeviceProcesses("GPU-a", a), DeviceProcesses("GPU-b", b)),
        (
            PartitionReading("MIG-p", "GPU-c", 9856, 100, 10.0),
            PartitionReading("MIG-q", "GPU-c", 19968, 200, 30.0),
        ),
    )
    verdicts = [
        DeviceAttribution(
            "GPU-a",
            None,
            ((a[0], Placement("p", "main")), (a[1], Placement("q", "main"))),
            RowCounts(2, 2),
        ),
        DeviceAttribution("GPU-b", None, ((b[0], Placement("p", "side")),), RowCounts(1, 1)),
    ]
    grants = [
        Grant(pod, ("main",), M, "GPU-c", 2, Mode.PARTITIONED, partition_id=f"MIG-{pod}")
        for pod in ("p", "q")
    ]
    return reading, verdicts, grants


def test_a_holder_whose_usage_raises_takes_only_its_own_pods_figures(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clean = build(*holders_section())
    real = slices._holder_usage

    def holder_usage(*args: Any) -> SliceUsage:
        if args[3] == ("p", "main"):
            raise KeyError("a row nobody foresaw")
        return real(*args)

    monkeypatch.setattr(slices, "_holder_usage", holder_usage)
    section = build(*holders_section())
    ((uid, fault),) = section.faults
    assert (uid, fault.stage) == ("p", FIGURES) and fault.error.startswith("KeyError")
    # p: no figures anywhere, even where its own part did not raise (GPU-b, MIG-p).
    assert [
        (u.pod_uid, u.container, u.device_id, u.memory_used_mib, u.cores_utilization_percent)
        for u in section.usages
    ] == [
        ("p", "main", "GPU-a", None, None),
        ("q", "main", "GPU-a", 1, 2.0),
        ("p", "side", "GPU-b", None, None),
    ]
    assert [p.id for p in section.partitions] == ["MIG-q"]
    # q: exactly what it had without the fault; the devices are untouched.
    assert [u for u in section.usages if u.pod_uid == "q"] == [
        u for u in clean.usages if u.pod_uid == "q"
    ]
    assert section.partitions == tuple(p for p in clean.partitions if p.pod_uid == "q")
    assert section.devices == clean.devices
    lookup = Lookup.of(section)
    absent = figures(lookup, M, "p", "side", "GPU-b")
    assert absent is not None and (absent.memory_used_mib, absent.cores_percent) == (None, None)
    assert figures(lookup, M, "p", "main", "GPU-c", partition_id="MIG-p") is None


def test_a_partition_entry_that_raises_takes_only_its_own_pods_figures(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clean = build(*holders_section())
    real = slices._partition_entry

    def partition_entry(
        manufacturer: str, grant: Grant, found: PartitionReading | None, parent: Card | None
    ) -> SlicePartition:
        if grant.pod_uid == "q":
            raise ValueError("a partition nobody foresaw")
        return real(manufacturer, grant, found, parent)

    monkeypatch.setattr(slices, "_partition_entry", partition_entry)
    section = build(*holders_section())
    assert [(uid, f.stage) for uid, f in section.faults] == [("q", FIGURES)]
    (mine,) = section.partitions
    assert (mine.id, mine.memory_total_mib, mine.memory_used_mib, mine.cores_percent) == (
        "MIG-p",
        9856,
        100,
        10.0,
    )
    assert [u for u in section.usages if u.pod_uid == "p"] == [
        u for u in clean.usages if u.pod_uid == "p"
    ]
    q = next(u for u in section.usages if u.pod_uid == "q")
    assert (q.memory_used_mib, q.cores_utilization_percent) == (None, None)


def test_merge_keeps_a_pods_fault_across_manufacturers_and_never_serves_it() -> None:
    fault = PodFault(FIGURES, "KeyError: 'a tenant said GPU-secret'")
    nvidia = SliceSection(
        usages=(usage("GPU-a", "p", None, None), usage("GPU-a", "q", 7, 1.0)),
        devices=(SliceDevice(M, "GPU-a"),),
        faults=(("p", fault),),
    )
    amd = SliceSection(
        usages=(SliceUsage("amd", "p", "main", "GPU-x", 50, 9.0),),
        devices=(SliceDevice("amd", "GPU-x"),),
        partitions=(SlicePartition("amd", "p", "main", "GPU-x", "XCP-1", 100, 1, 1.0),),
        faults=(("p", PodFault(FIGURES, "a later fault of the same pod")),),
    )
    merged = merge([nvidia, amd])
    assert merged.faults == (("p", fault),)  # the first of each pod
    assert [
        (u.manufacturer, u.pod_uid, u.memory_used_mib, u.cores_utilization_percent)
        for u in merged.usages
    ] == [
        ("amd", "p", None, None),  # no figures under another manufacturer either
        (M, "p", None, None),
        (M, "q", 7, 1.0),
    ]
    assert merged.partitions == ()
    text = json.dumps(to_json(merged))
    assert "GPU-secret" not in text and "fault" not in text


# -- a holder's compute from the partitions its processes run in (a MetaX sGPU) ----------------


def sgpu(id: str, cores: float | None, reason: Reason | None = None) -> PartitionReading:
    return PartitionReading(id, "GPU-s", 8192, 100, cores, cores_reason=reason, cores_of_card=True)


def holder_on_gpu_s(
    rows: tuple[ProcessRow, ...], partitions: tuple[PartitionReading, ...]
) -> SliceSection:
    """Pod p's container main runs `rows` on card GPU-s, which has no per-process compute."""
    reading = VendorReading(
        M,
        (Card("GPU-s", 0, memory_total_mib=65536),),
        (DeviceProcesses("GPU-s", rows, cores_reason=Reason.UNSUPPORTED),),
        partitions,
    )
    placed = tuple((r, Placement("p", "main")) for r in rows)
    verdict = DeviceAttribution("GPU-s", None, placed, RowCounts(len(rows), len(rows)))
    return build(reading, [verdict], [])


def test_a_holder_alone_in_its_sgpu_reads_the_partitions_compute() -> None:
    section = holder_on_gpu_s((ProcessRow(1, 2 * MIB, None, "sGPU-1"),), (sgpu("sGPU-1", 25.0),))
    assert section.usages == (SliceUsage(M, "p", "main", "GPU-s", 2, 25.0),)
    assert section.faults == ()


def test_a_holders_compute_over_several_sgpus_is_capped_at_the_whole_card() -> None:
    rows = (ProcessRow(1, MIB, None, "sGPU-1"), ProcessRow(2, MIB, None, "sGPU-2"))
    section = holder_on_gpu_s(rows, (sgpu("sGPU-1", 60.0), sgpu("sGPU-2", 50.0)))
    assert section.usages == (SliceUsage(M, "p", "main", "GPU-s", 2, 100.0),)  # 110, capped


def test_a_row_in_a_partition_nobody_read_leaves_compute_absent_and_memory_measured() -> None:
    section = holder_on_gpu_s((ProcessRow(1, 2 * MIB, None, "sGPU-2"),), (sgpu("sGPU-1", 25.0),))
    assert section.usages == (SliceUsage(M, "p", "main", "GPU-s", 2, None),)
    assert section.faults == ()


def test_a_row_naming_a_partition_on_a_card_with_none_read_leaves_compute_absent() -> None:
    section = holder_on_gpu_s((ProcessRow(1, 2 * MIB, None, "sGPU-1"),), ())
    assert section.usages == (SliceUsage(M, "p", "main", "GPU-s", 2, None),)
    assert section.faults == ()


@pytest.mark.parametrize(
    "partition",
    [
        sgpu("sGPU-1", 25.0, Reason.TRANSIENT_DRIVER_ERROR),  # a reason outweighs a number
        sgpu("sGPU-1", None),  # no figure, no reason given
    ],
)
def test_an_sgpu_without_a_compute_figure_leaves_the_holders_compute_absent(
    partition: PartitionReading,
) -> None:
    section = holder_on_gpu_s((ProcessRow(1, 2 * MIB, None, "sGPU-1"),), (partition,))
    assert section.usages == (SliceUsage(M, "p", "main", "GPU-s", 2, None),)
    assert section.faults == ()


# -- R-S4: a partition is refused only when bigger than its card ---------------------------------


def test_an_empty_partition_of_a_card_reporting_0_mib_is_not_bigger_than_it() -> None:
    reading = VendorReading(
        M,
        (Card("GPU-z", 0, memory_total_mib=0),),
        partitions=(PartitionReading("MIG-z", "GPU-z", 0, 0, 0.0),),
    )
    held = Grant("p", ("main",), M, "GPU-z", 0, Mode.PARTITIONED, partition_id="MIG-z")
    (record,) = build(reading, [], [held]).partitions
    assert (record.memory_reason, record.memory_total_mib, record.memory_used_mib) == (None, 0, 0)
