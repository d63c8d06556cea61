"""Hygon's virtual DCUs (vDCU) through `libhydmi.so`, by our ctypes declarations
(vendors/_hygon_lib.py): reading a vDCU and parsing what it answered.

Apart from vendors/hygon.py (the backend, its ROCm SMI cards and per-process rows) because it
is another library with its own status codes, and an optional one: a node without libhydmi has
no vDCU, and its cards are read all the same. The backend loads it and hands the bound library
to read_vdcu(); its parse_partitions() asks vdcu_reading() for every partition id VDCU matches.

A vDCU is `vDCU-<index>`: its node-global index, what libhydmi reads it by; alias `vdev<index>`,
the name of the configuration file the device plugins mount.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from ctypes import byref, c_int
from typing import Any

from devicemanager.model import (
    Answer,
    CardHealth,
    HealthFigure,
    PartitionReading,
    Reason,
    as_int,
    mib_from_bytes,
    unsupported,
)
from vendors import _hygon_lib as lib
from vendors._common import EVERY_ACTIVITY, failed, reasons
from vendors._common import error_code as _error

dmi_reason = reasons(
    unsupported=frozenset(
        {lib.DMI_NOT_SUPPORTED, lib.DMI_DEVICE_NOT_SUPPORT, lib.DMI_NOT_YET_IMPLEMENTED}
    ),
    permission=frozenset({lib.DMI_PERMISSION}),
    truncated=frozenset({24}),
)

# Where a call is refused because the library does not export it: libhydmi's own "not
# supported" code, so the reason is `unsupported` (the mark each of Hygon's libraries writes).
NOT_EXPORTED = "NOT_EXPORTED"

# A partition id that names a vDCU, by either spelling.
VDCU = re.compile(r"(?:vDCU-|vdev)(\d{1,6})", re.IGNORECASE)


def _entries(value: Any) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


# -- read: libhydmi ---------------------------------------------------------------------------


def read_vdcu(dmi: lib.Bound, numbers: list[int]) -> list[dict[str, Any]]:
    """Each vDCU asked for, by its index: its info (memory, its physical card) and busy percent."""
    out = []
    for number in numbers:
        entry: dict[str, Any] = {"index": number}
        info_fn = dmi.get("dmiGetVDeviceInfo")
        info = lib.DmiDeviceInfo()
        rc = None if info_fn is None else int(info_fn(number, byref(info)))
        if rc == lib.DMI_SUCCESS:
            entry["dmiGetVDeviceInfo"] = {
                "name": lib.c_text(info.name),
                "compute_unit_count": info.compute_unit_count,
                "global_mem_size": info.global_mem_size,  # bytes
                "usage_mem_size": info.usage_mem_size,  # bytes
                "container_id": info.container_id,
                "device_id": info.device_id,  # the physical card's index
            }
        else:
            code = lib.DMI_NOT_SUPPORTED if rc is None else rc
            entry["dmiGetVDeviceInfo"] = failed(
                NOT_EXPORTED if rc is None else lib.dmi_status_name(code), code
            )
        busy_fn = dmi.get("dmiGetVDevBusyPercent")
        busy = c_int()
        rc = None if busy_fn is None else int(busy_fn(number, byref(busy)))
        if rc == lib.DMI_SUCCESS:
            entry["dmiGetVDevBusyPercent"] = busy.value  # percent of the vDCU, 0-100
        else:
            code = lib.DMI_NOT_SUPPORTED if rc is None else rc
            entry["dmiGetVDevBusyPercent"] = failed(
                NOT_EXPORTED if rc is None else lib.dmi_status_name(code), code
            )
        out.append(entry)
    return out


# -- parse: pure ------------------------------------------------------------------------------


def _activity(reason: Reason) -> CardHealth:
    """A vDCU's activity figures (issue 41), every one absent with `reason`: libhydmi states a
    vDCU's busy percent and nothing else of its compute (dmi_virtual.h declares
    dmiGetVDevBusyPercent alone per vDCU; the ROCm SMI fork's CU figures take a physical card's
    index), so its busy time is its cores' figure and no activity is read, nor the card's put
    in its place."""
    found: dict[HealthFigure, Answer] = {f: (None, reason) for f in unsupported(EVERY_ACTIVITY)}
    return CardHealth.answered(found)


def vdcu_reading(
    wanted: str,
    number: int,
    parent: str,
    payload: Mapping[str, Any],
    devices: Mapping[int, tuple[str, ...]],
    parent_ids: tuple[str, ...] | None,
) -> PartitionReading:
    """A virtual DCU read on its own index: memory (bytes) and its busy percent."""
    canonical = f"vDCU-{number}"

    def absent(reason: Reason, parent_id: str = parent) -> PartitionReading:
        return PartitionReading(
            id=wanted,
            parent_id=parent_id,
            memory_reason=reason,
            cores_reason=reason,
            activity=_activity(reason),
        )

    libraries = payload.get("libraries")
    if not (isinstance(libraries, Mapping) and libraries.get("hydmi") is True):
        return absent(Reason.UNSUPPORTED)  # no vDCU library on this node
    entry = next(
        (v for v in _entries(payload.get("vdcu")) if as_int(v.get("index")) == number), None
    )
    if entry is None:
        return absent(Reason.TRANSIENT_DRIVER_ERROR)
    info = entry.get("dmiGetVDeviceInfo")
    code = _error(info)
    if code is not None or not isinstance(info, Mapping):
        # VDEV_NOT_EXIST: destroyed under a live allocation, or not created yet.
        return absent(dmi_reason(code) if code is not None else Reason.TRANSIENT_DRIVER_ERROR)
    physical = as_int(info.get("device_id"))
    card = devices.get(physical) if physical is not None else None
    if card is None:
        return absent(Reason.TRANSIENT_DRIVER_ERROR)  # its card is not enumerated
    if parent and parent_ids is not None and card[0] != parent_ids[0]:
        # The allocation names another card: not the vDCU it was given.
        return absent(Reason.TRANSIENT_DRIVER_ERROR)
    total = mib_from_bytes(as_int(info.get("global_mem_size")))
    used = mib_from_bytes(as_int(info.get("usage_mem_size")))
    memory_reason = None if total is not None and used is not None else Reason.INVALID_DATA
    busy = entry.get("dmiGetVDevBusyPercent")
    b_code = _error(busy)
    busy_value = as_int(busy) if b_code is None else None
    cores = float(busy_value) if busy_value is not None else None
    cores_reason = None
    if cores is None:
        cores_reason = dmi_reason(b_code) if b_code is not None else Reason.INVALID_DATA
    aliases = tuple(dict.fromkeys(a for a in (f"vdev{number}", wanted) if a != canonical))
    return PartitionReading(
        id=canonical,
        parent_id=card[0],
        memory_total_mib=None if memory_reason else total,
        memory_used_mib=None if memory_reason else used,
        cores_percent=cores,
        memory_reason=memory_reason,
        cores_reason=cores_reason,
        aliases=aliases,
        activity=_activity(Reason.UNSUPPORTED),
    )
