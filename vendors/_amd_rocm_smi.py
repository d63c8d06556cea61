"""ROCm SMI beside amdsmi for AMD Instinct: `librocm_smi64` through our ctypes declarations
(vendors/_rocm_smi_lib.py), reading the per-process query and parsing what it answered.

Apart from vendors/amd.py (the backend and its amdsmi path) because it is another library, with
its own status codes, asked for one thing only: the per-process rows on the ROCm releases where
amdsmi's process list is publicly known to be wrong (BROKEN_PROCESS_LIST in vendors/amd.py).
The backend loads and initialises it (before amdsmi) and hands it to read_processes(); its
parse asks rsmi_rows() for each device ROCm SMI answered for, rows in the form the amdsmi path
gives them (Rows, vendors/_amd_smi.py). An rsmi device is matched to its amdsmi processor by
PCI id (partition bits included), never by order.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from devicemanager.model import ProcessRow, Reason, as_int
from vendors._amd_smi import Rows, entries, scaled
from vendors._common import error_code, failed
from vendors._rocm_smi_lib import CU_OCCUPANCY_INVALID, RocmSmi, RsmiError
from vendors._rocm_smi_lib import INSUFFICIENT_SIZE as RSMI_INSUFFICIENT_SIZE
from vendors._rocm_smi_lib import NOT_FOUND as RSMI_NOT_FOUND
from vendors._rocm_smi_lib import NOT_SUPPORTED as RSMI_NOT_SUPPORTED
from vendors._rocm_smi_lib import NOT_YET_IMPLEMENTED as RSMI_NOT_YET_IMPLEMENTED
from vendors._rocm_smi_lib import PERMISSION as RSMI_PERMISSION

# -- parse: pure ---------------------------------------------------------------------------------


def rsmi_reason_for(code: int) -> Reason:
    """Why a figure is absent, from an rsmi_status_t (the ROCm SMI fallback): as reason_for()
    in vendors/_amd_smi.py does for amdsmi, "cannot" apart from "could not"."""
    if code in (RSMI_NOT_SUPPORTED, RSMI_NOT_YET_IMPLEMENTED):
        return Reason.UNSUPPORTED
    if code == RSMI_PERMISSION:
        return Reason.PERMISSION
    if code == RSMI_INSUFFICIENT_SIZE:
        return Reason.TRUNCATED
    return Reason.TRANSIENT_DRIVER_ERROR


def rsmi_rows(
    device: Mapping[str, Any],
    payload: Mapping[str, Any],
    partition: str | None,
    scale: float | None,
) -> Rows:
    """Rows from ROCm SMI: the host-wide list, the devices each PID holds, and the PID's
    figures on this device alone. Memory: VRAM bytes. Compute: `cu_occupancy`, which ROCm SMI
    already gives as a percent of the device's compute units; CU_OCCUPANCY_INVALID is absent
    for that row alone. A PID that exited between the calls (NOT_FOUND) is no row."""
    rsmi = device.get("rocm_smi")
    if not isinstance(rsmi, Mapping) or error_code(rsmi) is not None:
        return [], Reason.TRANSIENT_DRIVER_ERROR, Reason.TRANSIENT_DRIVER_ERROR
    listed = payload.get("rsmi_compute_process_info_get")
    code = error_code(listed)
    if code is not None:
        refused = rsmi_reason_for(code)
        return [], refused, refused
    index = as_int(rsmi.get("index"))
    gpus = payload.get("rsmi_compute_process_gpus_get")
    gpus = gpus if isinstance(gpus, Mapping) else {}
    mine = rsmi.get("rsmi_compute_process_info_by_device_get")
    mine = mine if isinstance(mine, Mapping) else {}
    rows: list[ProcessRow] = []
    reason: Reason | None = None
    for proc in entries(listed):
        pid = as_int(proc.get("process_id"))
        if pid is None:
            continue
        held = gpus.get(str(pid))
        held_code = error_code(held)
        if held_code == RSMI_NOT_FOUND:
            continue  # exited since the host-wide list
        if held_code is not None:
            reason = reason or rsmi_reason_for(held_code)
            continue
        if not isinstance(held, list) or index not in held:
            continue  # on other devices only
        info = mine.get(str(pid))
        info_code = error_code(info)
        if info_code == RSMI_NOT_FOUND:
            continue
        if info_code is not None or not isinstance(info, Mapping):
            reason = reason or rsmi_reason_for(info_code if info_code is not None else -1)
            continue
        cu = as_int(info.get("cu_occupancy"))
        cores = None
        if cu is not None and cu != CU_OCCUPANCY_INVALID and 0 <= cu <= 100:
            cores = scaled(float(cu), scale)
        rows.append(
            ProcessRow(
                pid=pid,
                memory_bytes=as_int(info.get("vram_usage")),
                cores_percent=cores,
                partition_id=partition,
            )
        )
    if reason is not None:
        return [], reason, reason
    return rows, None, None


# -- read: librocm_smi64 -------------------------------------------------------------------------


def read_processes(rsmi: RocmSmi, payload: dict[str, Any], carved: list[dict[str, Any]]) -> None:
    """ROCm SMI's answer for the carved devices: which rsmi device each one is (by PCI id,
    partition bits included), the host-wide list, each PID's devices, its figures there."""
    try:
        indices = {rsmi.pci_id(i): i for i in range(rsmi.device_count())}
    except RsmiError as exc:
        for device in carved:
            device["rocm_smi"] = failed(exc.name, exc.code)
        return
    try:
        listed = [
            {
                "process_id": p.pid,
                "pasid": p.pasid,
                "vram_usage": p.vram_bytes,
                "sdma_usage": p.sdma_us,
                "cu_occupancy": p.cu_occupancy,
            }
            for p in rsmi.processes()
        ]
    except RsmiError as exc:
        payload["rsmi_compute_process_info_get"] = failed(exc.name, exc.code)
        for device in carved:
            bdf_id = as_int(device.get("amdsmi_get_gpu_bdf_id"))
            device["rocm_smi"] = {"index": indices.get(bdf_id) if bdf_id is not None else None}
        return
    payload["rsmi_compute_process_info_get"] = listed
    held: dict[str, Any] = {}
    for proc in listed:
        try:
            held[str(proc["process_id"])] = rsmi.gpus_of(proc["process_id"])
        except RsmiError as exc:
            held[str(proc["process_id"])] = failed(exc.name, exc.code)
    payload["rsmi_compute_process_gpus_get"] = held
    for device in carved:
        bdf_id = as_int(device.get("amdsmi_get_gpu_bdf_id"))
        index = indices.get(bdf_id) if bdf_id is not None else None
        if index is None:
            device["rocm_smi"] = failed("no rsmi device with this PCI id", -1)
            continue
        mine: dict[str, Any] = {}
        for pid, devices in held.items():
            if isinstance(devices, list) and index in devices:
                try:
                    p = rsmi.process_on(int(pid), index)
                except RsmiError as exc:
                    mine[pid] = failed(exc.name, exc.code)
                    continue
                mine[pid] = {
                    "process_id": p.pid,
                    "pasid": p.pasid,
                    "vram_usage": p.vram_bytes,
                    "sdma_usage": p.sdma_us,
                    "cu_occupancy": p.cu_occupancy,
                }
        device["rocm_smi"] = {
            "index": index,
            "rsmi_compute_process_info_by_device_get": mine,
        }
