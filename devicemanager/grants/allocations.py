"""Pure parsers of the pod annotations that say which container holds which accelerator (R-G1).

GPUStack: `device.gpustack.ai/accelerator.allocated`, JSON, container name -> device groups ->
accelerators {id, index, mode, allocated units (1,600,000 = one card), allocatedPhysical*}.
HAMi: `hami.io/vgpu-devices-allocated`, `UUID,Type,MemMiB,Cores` per device ended by ':', one
`;`-ended slot per container (init containers first; an empty slot keeps its place), and
`hami.io/vgpu-mig-allocations`, a JSON list of MIG placements. HAMi's other vendors write the
same encoding under `hami.io/<word>-devices-allocated` (`dcu` Hygon, `amd`, `metax-gpu` and
`metax-sgpu` MetaX, `Ascend910B`, `Ascend310P`, … Ascend), with the device ids each of them uses
(`DCU-<index>` or `HCU-<serial>` for Hygon); backends list those forms as card aliases.
Volcano: `volcano.sh/vgpu-ids-new`, written by Volcano's scheduler for its vGPU device plugin
(`volcano-vgpu-device-plugin`), in HAMi's encoding, but one `;`-separated slot per container
that asks for `volcano.sh/vgpu-number` or `volcano.sh/vgpu-memory` (regular containers only,
in the pod's order), and a MIG placement written `<card UUID>[<geometry group>-<position>]`.

Each parser raises AllocationError and nothing else on any input: a malformed annotation
yields no grants for its pod and never touches another pod. A string decoded from an
annotation's JSON (where `\ud800` escapes make lone surrogates) is made encodable
(`model.utf8_text`) as it is read, like every other text of a pod (node/pods.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from devicemanager.model import utf8_text

GPUSTACK_KEY = "device.gpustack.ai/accelerator.allocated"
HAMI_KEY = "hami.io/vgpu-devices-allocated"
HAMI_MIG_KEY = "hami.io/vgpu-mig-allocations"
VOLCANO_KEY = "volcano.sh/vgpu-ids-new"
# The resources that give a container a slot of VOLCANO_KEY (Volcano's `resourcereqs`: a
# container limiting either one, in pod.spec.containers order).
VOLCANO_RESOURCES = ("volcano.sh/vgpu-number", "volcano.sh/vgpu-memory")
UNITS_PER_CARD = 1_600_000
# HAMi's per-vendor keys: hami.io/<common word>-devices-allocated (pkg/device/*/device.go).
_HAMI_VENDOR_KEY = re.compile(r"hami\.io/([A-Za-z0-9][A-Za-z0-9.-]{0,62})-devices-allocated")
# The common word -> our manufacturer name; `vgpu` reads the manufacturer off each device's
# Type field instead (NVIDIA, and the NVML-shaped vendors HAMi runs through its vGPU path).
_HAMI_WORDS = {"dcu": "hygon", "amd": "amd", "metax-gpu": "metax", "metax-sgpu": "metax"}
# Words whose devices are whole cards rather than slices.
_HAMI_WHOLE = frozenset({"metax-gpu"})
# Far above any real allocation (a few hundred bytes per card); the API server caps all of a
# pod's annotations together at 256 KiB, but a pods file or a buggy writer has no such cap.
MAX_ANNOTATION_CHARS = 64 * 1024


class AllocationError(ValueError):
    """An allocation annotation that cannot be read."""


class Mode(StrEnum):
    """How a container holds a card. A name everywhere, never the wire's number (R-G2)."""

    EXCLUSIVE = "Exclusive"
    SHARED = "Shared"
    SLICED = "Sliced"
    PARTITIONED = "Partitioned"
    VISIBILITY = "Visibility"  # sees a sibling's card: not a grant


# The GPUStack enum on the wire: 0 None, 1 Exclusive, 2 Shared, 3 Sliced, 4 Partitioned,
# 5 Visibility. Releases before partitions used 4 for Visibility; see _mode().
_MODES = {
    1: Mode.EXCLUSIVE,
    2: Mode.SHARED,
    3: Mode.SLICED,
    4: Mode.PARTITIONED,
    5: Mode.VISIBILITY,
}
_PHYSICAL = ("allocatedPhysicalID", "allocatedPhysicalProfile", "allocatedPhysicalPlacements")


@dataclass(frozen=True, slots=True)
class Allocation:
    """One accelerator one container was allocated, as the annotation states it."""

    container: str
    manufacturer: str
    device_id: str  # the card's UUID (the parent, for a partition)
    index: int | None
    mode: Mode
    units: int | None = None  # GPUStack slices: share of the card, 1,600,000 = whole
    memory_mib: int | None = None  # HAMi slices: the memory quota itself
    cores_percent: int | None = None  # HAMi slices: the compute cap
    partition_id: str | None = None  # the id recorded at allocation, e.g. MIG-<uuid>
    profile: str | None = None  # e.g. 1g.10gb
    source: str = "gpustack"
    # A slice of the partition itself (a DRA share of a MIG device several claims share): the
    # grant is keyed by the partition, its quota a part of it. Any other slice's recorded
    # partition (GPUStack's `allocatedPhysicalID`) says where it runs, not what it holds.
    in_partition: bool = False


def _mode(value: Any, accelerator: Mapping[str, Any]) -> Mode | None:
    if isinstance(value, str):
        try:
            return Mode(value)
        except ValueError:
            raise AllocationError(f"unknown mode {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise AllocationError(f"mode must be a number or a name, not {value!r}")
    if value == 0:
        return None  # "None": nothing held
    if value not in _MODES:
        raise AllocationError(f"unknown mode {value}")
    if value == 4 and not any(accelerator.get(k) for k in _PHYSICAL):
        # An older release's Visibility: a partition always records its physical placement.
        return Mode.VISIBILITY
    return _MODES[value]


def _optional_int(value: Any, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise AllocationError(f"{what} must be a non-negative integer, not {value!r}")
    return value


def _optional_str(value: Any, what: str) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise AllocationError(f"{what} must be a string, not {value!r}")
    return utf8_text(value)


def _bounded(key: str, text: str) -> str:
    if len(text) > MAX_ANNOTATION_CHARS:
        raise AllocationError(f"{key}: {len(text)} characters, more than {MAX_ANNOTATION_CHARS}")
    return text


def parse_gpustack(text: str) -> tuple[Allocation, ...]:
    _bounded(GPUSTACK_KEY, text)
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise AllocationError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise AllocationError("expected an object of containers")
    out: list[Allocation] = []
    for container, entry in sorted(doc.items()):
        if not isinstance(entry, dict):
            raise AllocationError(f"container {container!r}: expected an object")
        devices = entry.get("devices", {})
        groups = devices.get("groups", []) if isinstance(devices, dict) else None
        if not isinstance(groups, list):
            raise AllocationError(f"container {container!r}: devices.groups must be a list")
        for group in groups:
            if not isinstance(group, dict):
                raise AllocationError(f"container {container!r}: a group must be an object")
            manufacturer = group.get("manufacturer")
            accelerators = group.get("accelerators", [])
            if not isinstance(manufacturer, str) or not isinstance(accelerators, list):
                raise AllocationError(f"container {container!r}: group without manufacturer")
            for acc in accelerators:
                if not isinstance(acc, dict) or not isinstance(acc.get("id"), str) or not acc["id"]:
                    raise AllocationError(f"container {container!r}: accelerator without id")
                mode = _mode(acc.get("mode"), acc)
                if mode is None:
                    continue
                out.append(
                    Allocation(
                        container=utf8_text(container),
                        manufacturer=utf8_text(manufacturer.lower()),
                        device_id=utf8_text(acc["id"]),
                        index=_optional_int(acc.get("index"), "index"),
                        mode=mode,
                        units=_optional_int(acc.get("allocated"), "allocated"),
                        partition_id=_optional_str(
                            acc.get("allocatedPhysicalID"), "allocatedPhysicalID"
                        ),
                        profile=_optional_str(
                            acc.get("allocatedPhysicalProfile"), "allocatedPhysicalProfile"
                        ),
                    )
                )
    return tuple(out)


# A MIG device in HAMi's older encoding: the parent UUID with [gi-ci] appended (HAMi #1043).
_HAMI_OLD_MIG = re.compile(r"(.+)\[([0-9]+)-([0-9]+)\]")
# ASCII digits only: str.isdigit() also accepts "²" and "٣", which int() then refuses or reads.
_HAMI_NUMBER = re.compile(r"[0-9]{1,9}")


def _hami_int(field: str, what: str) -> int:
    if not _HAMI_NUMBER.fullmatch(field):
        raise AllocationError(f"{what} must be a non-negative integer, not {field[:20]!r}")
    return int(field)


def _hami_device(device: str) -> tuple[str, str, int, int]:
    """One device of HAMi's encoding: (UUID, Type, MemMiB, Cores)."""
    fields = device.split(",")
    if len(fields) != 4 or not fields[0]:
        raise AllocationError(f"device {device!r} is not UUID,Type,MemMiB,Cores")
    uuid, kind, mem, cores = fields
    return uuid, kind, _hami_int(mem, "MemMiB"), _hami_int(cores, "Cores")


def _hami_slots(text: str, slots: Sequence[str]) -> list[tuple[str, list[str]]]:
    """(container, its devices) per `;`-separated slot, the terminator after the last kept."""
    parts = text.split(";")
    if parts and parts[-1].strip() == "":
        parts = parts[:-1]  # the terminator after the last slot
    if len(parts) > len(slots):
        raise AllocationError(f"{len(parts)} container slots for {len(slots)} containers")
    return [
        (container, [d for d in (d.strip() for d in slot.split(":")) if d])
        for container, slot in zip(slots, parts, strict=False)
    ]


def hami_manufacturer(word: str, kind: str) -> str:
    """Our manufacturer name for a device of HAMi's `word` key with Type `kind`."""
    if word == "vgpu":
        return kind.split("-")[0].lower() or "nvidia"
    if word.lower().startswith("ascend"):
        return "ascend"
    return _HAMI_WORDS.get(word, word.split("-")[0].lower())


def parse_hami(
    text: str, slots: Sequence[str], mig_text: str | None = None, word: str = "vgpu"
) -> tuple[Allocation, ...]:
    """`slots` are the pod's container names in HAMi's order: init containers, then regular.
    `word` is the key's common word (`vgpu` for hami.io/vgpu-devices-allocated)."""
    _bounded(HAMI_KEY if word == "vgpu" else f"hami.io/{word}-devices-allocated", text)
    migs = parse_hami_mig(mig_text, slots) if mig_text else ()
    claimed = {(m.container, m.device_id) for m in migs}
    out: list[Allocation] = list(migs)
    for container, devices in _hami_slots(text, slots):
        for device in devices:
            uuid, kind, memory, cap = _hami_device(device)
            manufacturer = hami_manufacturer(word, kind)
            if word in _HAMI_WHOLE:
                out.append(
                    Allocation(container, manufacturer, uuid, None, Mode.EXCLUSIVE, source="hami")
                )
                continue
            if old := _HAMI_OLD_MIG.fullmatch(uuid):
                if (container, old.group(1)) in claimed:
                    continue  # the same partition, better described by the MIG annotation
                # A partition allocated before HAMi recorded its UUID: found by nothing.
                out.append(
                    Allocation(
                        container, manufacturer, old.group(1), None, Mode.PARTITIONED, source="hami"
                    )
                )
                continue
            out.append(_sliced(container, manufacturer, uuid, memory, cap, "hami"))
    return tuple(out)


def _sliced(
    container: str, manufacturer: str, uuid: str, memory: int | None, cap: int | None, by: str
) -> Allocation:
    """A device of HAMi's encoding (HAMi's own annotation or Volcano's): a Sliced grant with
    its memory quota and core cap as written."""
    return Allocation(
        container, manufacturer, uuid, None, Mode.SLICED, memory_mib=memory, cores_percent=cap,
        source=by,
    )  # fmt: skip


# Volcano's MIG placement: the card's UUID, then [<geometry group>-<position in the group>]
# (volcano-sh/volcano pkg/scheduler/api/devices/nvidia/vgpu/mig.go, encodeMIGID). Which
# partition that is, only the device plugin's config knows: no partition id is read from it.
_VOLCANO_MIG = re.compile(r"(.+)\[([^\[\]]+)-([0-9]+)\]")


def parse_volcano(text: str, slots: Sequence[str]) -> tuple[Allocation, ...]:
    """`volcano.sh/vgpu-ids-new`. `slots` are the containers Volcano gave a slot to, in order
    (`volcano_slots`): HAMi's encoding without init containers or containers asking for no
    vGPU. A device is a Sliced grant with its memory quota and cap as written (`Usedmem` in
    MiB, Volcano's default `gpuMemoryFactor` of 1; `Usedcores` 0 is no cap); a MIG placement
    is a partition of the card, which one not known."""
    _bounded(VOLCANO_KEY, text)
    out: list[Allocation] = []
    for container, devices in _hami_slots(text, slots):
        for device in devices:
            uuid, kind, memory, cap = _hami_device(device)
            manufacturer = hami_manufacturer("vgpu", kind)
            if mig := _VOLCANO_MIG.fullmatch(uuid):
                out.append(
                    Allocation(
                        container,
                        manufacturer,
                        mig.group(1),
                        None,
                        Mode.PARTITIONED,
                        source="volcano",
                    )
                )
                continue
            out.append(_sliced(container, manufacturer, uuid, memory, cap, "volcano"))
    return tuple(out)


def volcano_slots(limits: Mapping[str, Mapping[str, str]]) -> tuple[str, ...]:
    """The containers Volcano's scheduler gives a slot of VOLCANO_KEY, in the pod's order:
    those whose limits name one of VOLCANO_RESOURCES (`limits`: regular containers only)."""
    return tuple(c for c, held in limits.items() if any(r in held for r in VOLCANO_RESOURCES))


def parse_hami_mig(text: str, slots: Sequence[str]) -> tuple[Allocation, ...]:
    _bounded(HAMI_MIG_KEY, text)
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise AllocationError(f"{HAMI_MIG_KEY}: not JSON: {exc}") from None
    if not isinstance(doc, list):
        raise AllocationError(f"{HAMI_MIG_KEY}: expected a list")
    out = []
    for item in doc:
        if not isinstance(item, dict):
            raise AllocationError(f"{HAMI_MIG_KEY}: an entry must be an object")
        slot = item.get("containerIndex")
        parent = item.get("gpuUUID")
        if isinstance(slot, bool) or not isinstance(slot, int) or not 0 <= slot < len(slots):
            raise AllocationError(f"{HAMI_MIG_KEY}: containerIndex {slot!r} names no container")
        if not isinstance(parent, str) or not parent:
            raise AllocationError(f"{HAMI_MIG_KEY}: entry without gpuUUID")
        out.append(
            Allocation(
                container=slots[slot],
                manufacturer="nvidia",
                device_id=utf8_text(parent),
                index=None,
                mode=Mode.PARTITIONED,
                partition_id=_optional_str(item.get("migUUID"), "migUUID"),
                profile=_optional_str(item.get("profile"), "profile"),
                source="hami",
            )
        )
    return tuple(out)


def has_allocation_annotation(annotations: Mapping[str, str]) -> bool:
    """Whether an allocator's annotation describes the pod (GPUStack's, HAMi's, Volcano's). An
    empty Volcano annotation names no device: it is no word on the pod, and the kubelet's
    stands."""
    return any(
        key in (GPUSTACK_KEY, HAMI_KEY, HAMI_MIG_KEY)
        or (key == VOLCANO_KEY and value.strip() != "")
        or _HAMI_VENDOR_KEY.fullmatch(key)
        for key, value in annotations.items()
    )


def allocations_of(
    annotations: Mapping[str, str], slots: Sequence[str], volcano: Sequence[str] = ()
) -> tuple[Allocation, ...]:
    """Every allocation a pod's annotations state; raises AllocationError if one is malformed.
    `slots` are HAMi's container slots, `volcano` Volcano's (`volcano_slots`)."""
    out: list[Allocation] = []
    if VOLCANO_KEY in annotations:
        try:
            out.extend(parse_volcano(annotations[VOLCANO_KEY], volcano))
        except AllocationError as exc:
            raise AllocationError(f"{VOLCANO_KEY}: {exc}") from None
    if GPUSTACK_KEY in annotations:
        out.extend(parse_gpustack(annotations[GPUSTACK_KEY]))
    if HAMI_KEY in annotations or HAMI_MIG_KEY in annotations:
        out.extend(parse_hami(annotations.get(HAMI_KEY, ""), slots, annotations.get(HAMI_MIG_KEY)))
    for key, value in sorted(annotations.items()):
        match = _HAMI_VENDOR_KEY.fullmatch(key)
        if match is None or key == HAMI_KEY:
            continue
        try:
            out.extend(parse_hami(value, slots, word=match.group(1)))
        except AllocationError as exc:
            raise AllocationError(f"{key}: {exc}") from None
    return tuple(out)
