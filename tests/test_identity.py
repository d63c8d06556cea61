"""Identity with aliases, structured addresses and physical parents (issue 13): a grant recorded
under any id a card answers to reaches that card, and the snapshot and /metrics always show the
canonical id; a partition enumerated as a device reads its board's temperature and power."""

from __future__ import annotations

import json
from pathlib import Path

from devicemanager.figures.snapshot import encode, from_json
from devicemanager.grants.allocations import Mode
from devicemanager.grants.grants import Grant, resolved
from devicemanager.model import (
    Card,
    DeviceProcesses,
    Identities,
    PartitionReading,
    ProcessRow,
    identity_map,
)
from tests.world import GIB, accel, card, gpu, pod, process, run

SERIAL = "GPU-7f3b1c2d9e8a4455"  # how an allocator recorded card 3 (an ASIC serial form)
HAMI = "DCU-3"


def aliased(n: int, *aliases: str, **extra: object) -> Card:
    base = card(n)
    return Card(**{**{f: getattr(base, f) for f in base.__slots__}, "aliases": aliases, **extra})  # type: ignore[arg-type]


def test_every_alias_names_its_card_and_a_canonical_id_names_itself() -> None:
    a = Card(id="GPU-a", index=0, aliases=("SER-a", "DCU-0"))
    b = Card(id="GPU-b", index=1, aliases=("SER-b", "DCU-0", "GPU-a"))
    mig = PartitionReading(id="MIG-1", parent_id="GPU-a", aliases=("GPU-a/1/0",))
    assert dict(identity_map([a, b, mig])) == {
        "GPU-a": "GPU-a",  # b claims it as an alias too: the canonical id wins
        "SER-a": "GPU-a",
        "GPU-b": "GPU-b",
        "SER-b": "GPU-b",
        "MIG-1": "MIG-1",
        "GPU-a/1/0": "MIG-1",
        # "DCU-0" is claimed by both cards: it names neither.
    }


def test_grants_recorded_under_aliases_are_resolved_and_merged() -> None:
    ids = Identities().updated("amd", [Card(id="GPU-a", index=0, aliases=(SERIAL,))])
    recorded = (
        Grant("p", ("main",), "amd", SERIAL, 0, Mode.SLICED, units=400_000),
        Grant("p", ("main",), "amd", "GPU-a", None, Mode.SLICED, units=400_000),
        Grant("p", ("side",), "nvidia", SERIAL, 1, Mode.EXCLUSIVE),  # another manufacturer
    )
    merged, other = resolved(recorded, ids)
    # The same container named the card twice: one grant of both shares, not an ambiguous one.
    assert (merged.device_id, merged.containers, merged.units, merged.index) == (
        "GPU-a",
        ("main",),
        800_000,
        0,
    )
    assert (other.manufacturer, other.device_id) == ("nvidia", SERIAL)  # untouched


def test_a_sliced_grant_recorded_by_alias_gets_its_figures(tmp_path: Path) -> None:
    pods = [
        pod("llm", {"main": [{**accel(3, 3, 800_000), "id": SERIAL}]}),
        pod("hami", annotations={"hami.io/vgpu-devices-allocated": f"{HAMI},NVIDIA,4096,50:;"}),
    ]
    process(tmp_path / "proc", 4001, "llm")
    process(tmp_path / "proc", 4002, "hami")
    rows = DeviceProcesses(
        gpu(3), (ProcessRow(4001, 6 * GIB, 20.0), ProcessRow(4002, 2 * GIB, 10.0))
    )
    result = run(tmp_path, [aliased(3, SERIAL, HAMI)], pods, processes=(rows,))
    # Canonical everywhere users look.
    llm = result.entry("llm")
    assert (llm.id, llm.memory_used_mib, llm.cores_utilization_percent) == (gpu(3), 6144, 20.0)
    assert llm.memory_total_mib == 40779  # half of 81,559 MiB, rounded down
    hami = result.entry("hami")
    # 10% of the card against a 50% cap is 20% of the slice's own allowance.
    assert (hami.id, hami.memory_total_mib, hami.cores_utilization_percent) == (gpu(3), 4096, 20.0)
    ids = {s["id"] for s, _ in result.series["gpustack_instance_accelerator_memory_used_mib"]}
    assert ids == {gpu(3)}
    doc = json.loads(result.published.snapshot_json)
    (accelerator,) = doc["groups"][0]["accelerators"]
    assert accelerator["aliases"] == [SERIAL, HAMI]
    (device,) = doc["slices"]["devices"]
    assert device["deviceID"] == gpu(3) and device["rowsAttributed"] == 2
    # The per-process query was asked for the card by the ids it knew at the time: the alias in
    # the first round of an agent that had never read the library.
    (request,) = result.backend.requests
    assert request.carved_device_ids == frozenset({SERIAL, HAMI})


def test_a_partition_enumerated_as_a_device_reads_its_boards_temperature_and_power(
    tmp_path: Path,
) -> None:
    board = card(0)
    xcp = Card(
        id="GPU-xcp-5",
        index=5,
        memory_total_mib=24_000,
        memory_used_mib=1_000,
        cores_utilization_percent=30.0,
        parent_id=board.id,
        address=(("socket", 0), ("partition", 5)),
    )
    pods = [pod("p", {"main": [{"id": "GPU-xcp-5", "index": 5, "mode": 1}]})]
    result = run(tmp_path, [board, xcp], pods)
    got = result.entry("p")
    assert (got.memory_total_mib, got.cores_utilization_percent) == (24_000, 30.0)
    assert (got.temperature_celsius, got.power_usage_watts) == (40.0, 100.0)  # card 0's board
    doc = json.loads(result.published.snapshot_json)
    listed = {a["id"]: a for a in doc["groups"][0]["accelerators"]}
    assert listed["GPU-xcp-5"]["parentID"] == board.id
    assert listed["GPU-xcp-5"]["address"] == {"socket": 0, "partition": 5}
    assert "parentID" not in listed[board.id] and "aliases" not in listed[board.id]


def test_identity_survives_the_snapshot_round_trip(tmp_path: Path) -> None:
    result = run(tmp_path, [aliased(1, "SER-1", address=(("card", 0), ("device", 1)))], [])
    (again,) = from_json(json.loads(result.published.snapshot_json)).groups[0].cards
    assert again.aliases == ("SER-1",) and again.address == (("card", 0), ("device", 1))
    assert encode(result.snapshot) == result.published.snapshot_json
