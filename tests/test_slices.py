"""The slices section: its bounds, its reading by consumers, its JSON (R-S1, R-S2, R-S4)."""

from __future__ import annotations

import json

from devicemanager.model import Reason
from devicemanager.slices import (
    MAX_DEVICES,
    MAX_USAGES,
    Lookup,
    SliceDevice,
    SlicePartition,
    SliceSection,
    SliceUsage,
    figures,
    from_json,
    merge,
    to_json,
)

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
