"""AMD Instinct through amdsmi (the `amdsmi` wheel over libamd_smi.so), with ROCm SMI
(librocm_smi64, our own ctypes declarations) answering the per-process query on the ROCm
release where amdsmi's process list is publicly known to be wrong.

`read()` asks the libraries and writes down what each entry point answered under its C name
(the wheel's Python names are the C names); a failed call is {"error": <exception>, "code":
<amdsmi_status_t>}. The wheel's "N/A" strings are kept as they come. `parse()` is pure.

Model (amdsmi docs, conceptual/partition.md): a socket is a physical card; each compute
partition (XCP) of a CPX/DPX/… card is a processor handle of its own with its own UUID
(ROCm 7). A socket with one processor is a whole card. A socket with several becomes one
physical card (board figures only: temperature, power, health, read on its first XCP) and one
card per XCP whose `parent_id` names it (memory and utilization, read on its own handle), so
nothing is counted twice. Facts: ../shared/reference/vendors.md §3, §12.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from devicemanager.backend import BackendUnavailable, Library
from devicemanager.model import (
    Address,
    Card,
    DeviceProcesses,
    PartitionReading,
    Payload,
    ProcessRow,
    ReadRequest,
    Reason,
    VendorReading,
    as_int,
)
from vendors._amd_lib import import_amdsmi, processors_of, rocm_version
from vendors._common import Baseline, Sample, error_code, failed, finite, load, rate_percent
from vendors._rocm_smi_lib import CU_OCCUPANCY_INVALID, RocmSmi, RsmiError
from vendors._rocm_smi_lib import INSUFFICIENT_SIZE as RSMI_INSUFFICIENT_SIZE
from vendors._rocm_smi_lib import NOT_FOUND as RSMI_NOT_FOUND
from vendors._rocm_smi_lib import NOT_SUPPORTED as RSMI_NOT_SUPPORTED
from vendors._rocm_smi_lib import NOT_YET_IMPLEMENTED as RSMI_NOT_YET_IMPLEMENTED
from vendors._rocm_smi_lib import PERMISSION as RSMI_PERMISSION

MANUFACTURER = "amd"

# amdsmi_status_t (amdsmi.h).
NOT_SUPPORTED = 2
NOT_YET_IMPLEMENTED = 3
FAIL_LOAD_SYMBOL = 5
NO_PERM = 10
OUT_OF_RESOURCES = 15
NOT_FOUND = 31
INSUFFICIENT_SIZE = 41

NA = "N/A"  # the wheel's word for a sentinel (0xFFFF, UINT32_MAX, an empty string)

# The ROCm releases whose amdsmi per-process list is publicly known to be wrong, where ROCm SMI
# answers instead. ROCm 7.2.0: the per-device list ignores the processor handle (every process
# under every GPU) and drops processes the caller cannot inspect (ROCm/rocm-systems#8396,
# merged after 7.2.0), and keeps exited PIDs once all processes end (ROCm/rocm-systems#7331);
# GPUStack measured the per-process calls broken on this release and reads ROCm SMI there.
BROKEN_PROCESS_LIST = frozenset({"7.2.0"})

# Which path answered the per-process query (VendorReading.via, shown in backends[]).
VIA_AMDSMI = "amdsmi"
VIA_ROCM_SMI = "rocm_smi"
VIA_WITHHELD = "amdsmi; process list withheld"

ROCM_LIB = "/opt/rocm/lib"
AMD_SMI = Library("amd_smi", ("libamd_smi.so",), (ROCM_LIB,))
ROCM_SMI = Library("rocm_smi", ("librocm_smi64.so.7", "librocm_smi64.so"), (ROCM_LIB,))
ROCM_CORE = Library("rocm_core", ("librocm-core.so.1", "librocm-core.so"), (ROCM_LIB,))

# At most this many XCP platform devices are read from sysfs (eight cards of eight XCPs is 56).
MAX_XCP_PLATFORM_DEVICES = 1024


# -- reasons --------------------------------------------------------------------------------------


def reason_for(code: int) -> Reason:
    """Why a figure is absent, from an amdsmi_status_t: "cannot" apart from "could not"."""
    if code in (NOT_SUPPORTED, NOT_YET_IMPLEMENTED, FAIL_LOAD_SYMBOL):
        return Reason.UNSUPPORTED
    if code == NO_PERM:
        return Reason.PERMISSION
    if code in (OUT_OF_RESOURCES, INSUFFICIENT_SIZE):
        return Reason.TRUNCATED
    # RETRY, TIMEOUT, BUSY, a lost device, anything unknown: the next round asks again.
    return Reason.TRANSIENT_DRIVER_ERROR


def rsmi_reason_for(code: int) -> Reason:
    """The same for an rsmi_status_t (the ROCm SMI fallback)."""
    if code in (RSMI_NOT_SUPPORTED, RSMI_NOT_YET_IMPLEMENTED):
        return Reason.UNSUPPORTED
    if code == RSMI_PERMISSION:
        return Reason.PERMISSION
    if code == RSMI_INSUFFICIENT_SIZE:
        return Reason.TRUNCATED
    return Reason.TRANSIENT_DRIVER_ERROR


# -- identity (shared by read() and parse()) -----------------------------------------------------


def _text(value: Any) -> str | None:
    """A string the library gave, or None for the wheel's "N/A" and anything not a string."""
    return value if isinstance(value, str) and value and value != NA else None


def _number(value: Any) -> float | None:
    """A finite number the library gave; the wheel's "N/A" strings are absent."""
    return finite(value)


def _mapping(value: Any) -> Mapping[str, Any]:
    """An entry point's answer when it answered with an object, else empty."""
    if isinstance(value, Mapping) and error_code(value) is None:
        return value
    return {}


def _entries(value: Any) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def serial_id(asic: Mapping[str, Any]) -> str | None:
    """GPUStack's id for an AMD card: `GPU-` + the ASIC serial in lower-case hex, without the
    wheel's `0x` (also the HSA agent UUID rocminfo shows). Every XCP of a partitioned card
    shares it, so it names the physical card."""
    serial = _text(asic.get("asic_serial"))
    if serial is None:
        return None
    digits = serial.lower().removeprefix("0x")
    if not digits or any(c not in "0123456789abcdef" for c in digits):
        return None
    return f"GPU-{digits}"


def _identity(device: Mapping[str, Any]) -> Mapping[str, Any]:
    """What the device answered about itself this round, else what it answered before."""
    known = device.get("known")
    return known if isinstance(known, Mapping) else {}


def device_uuid(device: Mapping[str, Any]) -> str | None:
    uuid = _text(device.get("amdsmi_get_gpu_device_uuid"))
    return uuid if uuid is not None else _text(_identity(device).get("uuid"))


def _asic(device: Mapping[str, Any]) -> Mapping[str, Any]:
    asic = _mapping(device.get("amdsmi_get_gpu_asic_info"))
    return asic or _mapping(_identity(device).get("asic"))


def _bdf(device: Mapping[str, Any]) -> str | None:
    bdf = _text(device.get("amdsmi_get_gpu_device_bdf"))
    return bdf if bdf is not None else _text(_identity(device).get("bdf"))


def _render_minor(device: Mapping[str, Any]) -> int | None:
    info = _mapping(device.get("amdsmi_get_gpu_enumeration_info"))
    info = info or _mapping(_identity(device).get("enumeration"))
    return as_int(info.get("drm_render"))


def device_aliases(
    device: Mapping[str, Any], platform: Mapping[str, Any], whole: bool
) -> tuple[str, ...]:
    """The other ids allocators record for one processor: GPUStack's `GPU-<ASIC serial>` (a
    whole card only: an XCP shares it with its siblings), the PCI address the AMD device
    plugin names a card (and a partitioned card's first XCP) by, and the `amdgpu_xcp_<N>`
    platform device it names every other XCP by. HAMi's AMD device plugin registers the
    amdsmi UUID itself, the canonical id."""
    out: list[str] = []
    if whole and (serial := serial_id(_asic(device))) is not None:
        out.append(serial)
    if (bdf := _bdf(device)) is not None:
        out.append(bdf)
    minor = _render_minor(device)
    name = platform.get(str(minor)) if minor is not None else None
    if isinstance(name, str) and name:
        out.append(name)
    uuid = device_uuid(device)
    return tuple(dict.fromkeys(a for a in out if a != uuid))


def physical_id(socket: Mapping[str, Any], devices: Sequence[Mapping[str, Any]]) -> str | None:
    """The id of a partitioned card: its ASIC serial as GPUStack records it, else the socket
    as amdsmi names it."""
    for device in devices:
        if (serial := serial_id(_asic(device))) is not None:
            return serial
    info = _text(socket.get("amdsmi_get_socket_info"))
    return f"socket-{info}" if info is not None else None


def _board(devices: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The XCP that answers for the board: the one read() marked, else the first."""
    for device in devices:
        if device.get("board") is True:
            return device
    return devices[0] if devices else None


# -- card figures ---------------------------------------------------------------------------------


def _lost(device: Mapping[str, Any]) -> bool:
    """The processor stopped answering for itself: "Device Not found" to its identity calls
    (a sensor or feature that is missing answers NOT_SUPPORTED, not this)."""
    return any(
        error_code(device.get(key)) == NOT_FOUND
        for key in ("amdsmi_get_gpu_device_uuid", "amdsmi_get_gpu_asic_info")
    )


def _temperature(device: Mapping[str, Any]) -> float | None:
    """Hotspot (junction) first, as MI300 has no edge sensor; edge elsewhere. °C."""
    temps = device.get("amdsmi_get_temp_metric")
    if not isinstance(temps, Mapping):
        return None
    for sensor in ("HOTSPOT", "EDGE"):
        value = _number(temps.get(sensor))
        if value is not None:
            return value
    return None


def _power(device: Mapping[str, Any]) -> float | None:
    """Watts: MI300 and later answer current_socket_power; older cards average_socket_power."""
    info = _mapping(device.get("amdsmi_get_power_info"))
    for key in ("current_socket_power", "average_socket_power"):
        value = _number(info.get(key))
        if value is not None:
            return value
    return None


def _memory(device: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """(total, used) MiB: amdsmi_get_gpu_vram_usage answers MiB (amdsmi.h "MegaBytes", computed
    by dividing bytes by 1024 * 1024), so no conversion is made."""
    usage = _mapping(device.get("amdsmi_get_gpu_vram_usage"))
    return as_int(usage.get("vram_total")), as_int(usage.get("vram_used"))


def _utilization(device: Mapping[str, Any]) -> float | None:
    """GFX activity in percent; "N/A" (a secondary XCP on some stacks) and nonsense absent."""
    value = _number(_mapping(device.get("amdsmi_get_gpu_activity")).get("gfx_activity"))
    return value if value is not None and 0.0 <= value <= 100.0 else None


def _unhealthy(device: Mapping[str, Any]) -> str | None:
    if _lost(device):
        return "device_lost"
    ecc = _mapping(device.get("amdsmi_get_gpu_total_ecc_count"))
    uncorrectable = as_int(ecc.get("uncorrectable_count"))
    if uncorrectable is not None and uncorrectable > 0:
        return "ecc_uncorrectable"
    return None


def _address(socket: int, device: Mapping[str, Any] | None) -> Address:
    if device is None:
        return (("socket", socket),)
    kfd = _mapping(device.get("amdsmi_get_gpu_kfd_info"))
    partition = as_int(kfd.get("current_partition_id"))
    return (("socket", socket),) if partition is None else (("socket", socket), ("xcp", partition))


def _card(
    device: Mapping[str, Any],
    socket: int,
    platform: Mapping[str, Any],
    *,
    whole: bool,
    parent: str | None = None,
) -> Card | None:
    uuid = device_uuid(device)
    index = as_int(device.get("index"))
    if uuid is None or index is None:
        return None  # without its identity a device can be named in no figure
    total, used = _memory(device)
    reason = _unhealthy(device)
    return Card(
        id=uuid,
        index=index,
        name=_text(_asic(device).get("market_name")),
        memory_total_mib=total,
        memory_used_mib=used,
        cores_utilization_percent=_utilization(device),
        # A partition's board figures are its physical card's, never its own entry's.
        temperature_celsius=_temperature(device) if whole else None,
        power_usage_watts=_power(device) if whole else None,
        unhealthy=reason is not None,
        unhealthy_reason=reason,
        aliases=device_aliases(device, platform, whole),
        address=_address(socket, None if whole else device),
        parent_id=parent,
    )


def _physical_card(
    socket_doc: Mapping[str, Any], socket: int, devices: list[Mapping[str, Any]]
) -> Card | None:
    """A partitioned card's own entry: board temperature, power and health from its first XCP
    only; memory and utilization are its XCPs' and stay on them."""
    pid = physical_id(socket_doc, devices)
    board = _board(devices)
    index = as_int(board.get("index")) if board is not None else None
    if pid is None or board is None or index is None:
        return None
    reason = _unhealthy(board) or next(("device_lost" for d in devices if _lost(d)), None)
    mode = _text(board.get("amdsmi_get_gpu_compute_partition"))
    address: Address = (("socket", socket),) + ((("compute_partition", mode),) if mode else ())
    return Card(
        id=pid,
        index=index,
        name=_text(_asic(board).get("market_name")),
        temperature_celsius=_temperature(board),
        power_usage_watts=_power(board),
        unhealthy=reason is not None,
        unhealthy_reason=reason,
        address=address,
    )


# -- per-process ----------------------------------------------------------------------------------


def occupancy_percent(cu: Any, compute_units: int | None) -> float | None:
    """A CU count as a percent of the device's compute units; "N/A" (0xFFFFFFFF), a count
    above the device's units, or an unknown unit count are absent."""
    count = as_int(cu)
    if count is None or count == CU_OCCUPANCY_INVALID or not compute_units:
        return None
    if count < 0 or count > compute_units:
        return None
    return round(count * 100.0 / compute_units, 2)


def _compute_units(device: Mapping[str, Any]) -> int | None:
    units = as_int(_asic(device).get("num_compute_units"))
    return units if units is not None and units > 0 else None


Rows = tuple[list[ProcessRow], Reason | None, Reason | None]


def _scaled(value: float | None, scale: float | None) -> float | None:
    """A device-share percent restated as a share of a larger whole (None: cannot be)."""
    if value is None or scale is None:
        return None
    return round(value * scale, 2)


def _amdsmi_rows(device: Mapping[str, Any], partition: str | None, scale: float | None) -> Rows:
    """Rows from amdsmi_get_gpu_process_list. Memory: VRAM bytes. Compute: the process's GFX
    engine time between this round and the last, as a percent of the wall time between them
    (first round: `no_baseline`). A process whose engine counter did not move is not shown
    idle on that evidence alone: ROCm compute queues run through the KFD and never advance the
    DRM engine counter (ROCm/amdsmi#130), so its KFD `cu_occupancy` answers instead, as a
    share of the device's compute units, and is absent for that row where invalid."""
    listed = device["amdsmi_get_gpu_process_list"]
    code = error_code(listed)
    if code is not None:
        reason = reason_for(code)
        return [], reason, reason
    at = _number(device.get("processAt"))
    previous_at = _number(device.get("processPreviousAt"))
    previous = device.get("processPrevious")
    previous = previous if isinstance(previous, Mapping) else {}
    units = _compute_units(device)
    first = previous_at is None
    rows: list[ProcessRow] = []
    for proc in _entries(listed):
        pid = as_int(proc.get("pid"))
        if pid is None:
            continue
        vram = as_int(_mapping(proc.get("memory_usage")).get("vram_mem"))  # bytes
        cores = None
        gfx = _number(_mapping(proc.get("engine_usage")).get("gfx"))  # cumulative ns
        before = _number(previous.get(str(pid)))
        if not first and gfx is not None and before is not None:
            rate, _ = rate_percent(
                {"value": before, "at": previous_at}, {"value": gfx, "at": at}, scale=1e-9
            )
            if rate is not None and rate > 0:
                cores = rate
            elif rate is not None:
                cores = occupancy_percent(proc.get("cu_occupancy"), units)
        rows.append(
            ProcessRow(
                pid=pid,
                memory_bytes=vram,
                cores_percent=_scaled(cores, scale),
                partition_id=partition,
            )
        )
    return rows, None, Reason.NO_BASELINE if first else None


def _rsmi_rows(
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
    for proc in _entries(listed):
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
            cores = _scaled(float(cu), scale)
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


def _rows(
    device: Mapping[str, Any],
    payload: Mapping[str, Any],
    partition: str | None,
    scale: float | None,
) -> Rows | None:
    """One device's rows by the path that answered, or None when none was asked for."""
    path = payload.get("processPath")
    if path == VIA_ROCM_SMI and "rocm_smi" in device:
        return _rsmi_rows(device, payload, partition, scale)
    if path == VIA_WITHHELD and device.get("processesAsked") is True:
        return [], Reason.UNSUPPORTED, Reason.UNSUPPORTED
    if "amdsmi_get_gpu_process_list" in device:
        return _amdsmi_rows(device, partition, scale)
    return None


def _answer(device_id: str, parts: Iterable[Rows]) -> DeviceProcesses:
    rows: list[ProcessRow] = []
    memory_reason: Reason | None = None
    cores_reason: Reason | None = None
    truncated = 0
    for part_rows, memory, cores in parts:
        rows.extend(part_rows)
        memory_reason = memory_reason or memory
        cores_reason = cores_reason or cores
        # One entry point answers both figures: a list too long for its buffer is one read.
        truncated += int(memory is Reason.TRUNCATED or cores is Reason.TRUNCATED)
    if memory_reason is not None:
        rows = []  # never a partial list published as if complete
    return DeviceProcesses(
        device_id=device_id,
        rows=tuple(rows),
        memory_reason=memory_reason,
        cores_reason=cores_reason,
        reads_truncated=truncated,
    )


# -- partitions -----------------------------------------------------------------------------------


def _partition_reading(
    parent_id: str, device: Mapping[str, Any], platform: Mapping[str, Any]
) -> PartitionReading:
    uuid = device_uuid(device) or ""
    total, used = _memory(device)
    cores = _utilization(device)
    activity = device.get("amdsmi_get_gpu_activity")
    if cores is not None:
        cores_reason = None
    elif error_code(activity) is not None:
        cores_reason = reason_for(error_code(activity) or -1)
    else:
        cores_reason = Reason.UNSUPPORTED  # "N/A" on this handle: a secondary XCP on this stack
    vram = device.get("amdsmi_get_gpu_vram_usage")
    memory_reason = None
    if total is None:
        code = error_code(vram)
        memory_reason = reason_for(code) if code is not None else Reason.TRANSIENT_DRIVER_ERROR
    return PartitionReading(
        id=uuid,
        parent_id=parent_id,
        memory_total_mib=total,
        memory_used_mib=used,
        cores_percent=cores,
        memory_reason=memory_reason,
        cores_reason=cores_reason,
        aliases=device_aliases(device, platform, whole=False),
    )


# -- the whole payload ----------------------------------------------------------------------------


class _Socket:
    """One socket of a payload, with its devices' ids worked out once."""

    def __init__(self, position: int, doc: Mapping[str, Any], platform: Mapping[str, Any]):
        self.position = position
        self.doc = doc
        self.devices = _entries(doc.get("processors"))
        self.partitioned = len(self.devices) > 1
        self.physical = physical_id(doc, self.devices) if self.partitioned else None
        self.ids: list[tuple[str, ...]] = []
        for device in self.devices:
            uuid = device_uuid(device)
            aliases = device_aliases(device, platform, whole=not self.partitioned)
            self.ids.append(((uuid,) if uuid else ()) + aliases)


def _sockets(payload: Mapping[str, Any]) -> list[_Socket]:
    platform = payload.get("xcpPlatformDevices")
    platform = platform if isinstance(platform, Mapping) else {}
    return [_Socket(i, s, platform) for i, s in enumerate(_entries(payload.get("sockets")))]


def _request(payload: Mapping[str, Any], key: str) -> list[Any]:
    request = payload.get("request")
    value = request.get(key) if isinstance(request, Mapping) else None
    return value if isinstance(value, list) else []


def parse_partitions(
    payload: Mapping[str, Any], sockets: list[_Socket], platform: Mapping[str, Any]
) -> tuple[PartitionReading, ...]:
    """Answer each (card, partition) read() was asked for, found only by the id the
    allocation recorded (R-V4) among the XCPs of the card it names."""
    out: list[PartitionReading] = []
    for item in _request(payload, "partitions"):
        if not (
            isinstance(item, list) and len(item) == 2 and all(isinstance(s, str) for s in item)
        ):
            continue
        parent, partition = item
        hits = [
            (s, d)
            for s in sockets
            for d, ids in zip(s.devices, s.ids, strict=True)
            if partition in ids
        ]
        reason: Reason | None = None
        if len(hits) > 1:
            reason = Reason.INVALID_DATA  # two processors claim one id: neither is trusted
        elif not hits:
            reason = Reason.TRANSIENT_DRIVER_ERROR
        else:
            ((socket, device),) = hits
            if not socket.partitioned or socket.physical is None:
                reason = Reason.UNSUPPORTED  # a whole card: not in a partition mode
            elif parent != socket.physical:
                reason = Reason.TRANSIENT_DRIVER_ERROR  # not under the card it was recorded on
            else:
                out.append(_partition_reading(socket.physical, device, platform))
                continue
        out.append(
            PartitionReading(
                id=partition, parent_id=parent, memory_reason=reason, cores_reason=reason
            )
        )
    return tuple(out)


def parse_processes(
    payload: Mapping[str, Any], sockets: list[_Socket]
) -> tuple[DeviceProcesses, ...]:
    """Each device whose process list read() fetched answers for itself, its compute a share of
    that device. A partitioned card asked for whole answers with every XCP's rows, each naming
    its partition, compute restated as a share of the whole card's compute units."""
    carved = {c for c in _request(payload, "carved") if isinstance(c, str)}
    out: list[DeviceProcesses] = []
    for socket in sockets:
        whole = socket.partitioned and socket.physical is not None and socket.physical in carved
        units_total = sum(_compute_units(d) or 0 for d in socket.devices)
        parts: list[Rows] = []
        for device, ids in zip(socket.devices, socket.ids, strict=True):
            if not ids:
                continue
            own = _rows(device, payload, None, 1.0)
            if own is not None:
                out.append(_answer(ids[0], [own]))
            if whole:
                units = _compute_units(device)
                share = units / units_total if units and units_total else None
                part = _rows(device, payload, ids[0], share)
                failed_part: Rows = (
                    [],
                    Reason.TRANSIENT_DRIVER_ERROR,
                    Reason.TRANSIENT_DRIVER_ERROR,
                )
                parts.append(part if part is not None else failed_part)
        if whole and socket.physical is not None:
            out.append(_answer(socket.physical, parts))
    return tuple(out)


def parse(payload: Payload) -> VendorReading:
    platform = payload.get("xcpPlatformDevices")
    platform = platform if isinstance(platform, Mapping) else {}
    sockets = _sockets(payload)
    cards: list[Card] = []
    for socket in sockets:
        if not socket.partitioned:
            for device in socket.devices:
                if (card := _card(device, socket.position, platform, whole=True)) is not None:
                    cards.append(card)
            continue
        physical = _physical_card(socket.doc, socket.position, socket.devices)
        if physical is not None:
            cards.append(physical)
        for device in socket.devices:
            card = _card(
                device,
                socket.position,
                platform,
                whole=False,
                parent=physical.id if physical is not None else None,
            )
            if card is not None:
                cards.append(card)
    driver = None
    for socket in sockets:
        for device in socket.devices:
            driver = driver or _text(
                _mapping(device.get("amdsmi_get_gpu_driver_info")).get("driver_version")
            )
    path = payload.get("processPath")
    return VendorReading(
        manufacturer=MANUFACTURER,
        cards=tuple(cards),
        processes=parse_processes(payload, sockets),
        partitions=parse_partitions(payload, sockets, platform),
        driver_version=driver,
        via=path if isinstance(path, str) else None,
    )


# -- the backend ----------------------------------------------------------------------------------


def rocm_lib_directories(environ: Mapping[str, str] = os.environ) -> tuple[str, ...]:
    """Where a ROCm install keeps its libraries, in the order the amdsmi wheel looks:
    $ROCM_HOME/lib, $ROCM_PATH/lib, then /opt/rocm/lib."""
    dirs = [os.path.join(environ[v], "lib") for v in ("ROCM_HOME", "ROCM_PATH") if environ.get(v)]
    return tuple(dict.fromkeys([*dirs, ROCM_LIB]))


def xcp_platform_devices(sysfs: str | os.PathLike[str]) -> dict[str, str]:
    """Render minor -> `amdgpu_xcp_<N>`: the platform devices the amdgpu driver creates for the
    XCPs beyond the first, by which the AMD device plugin names them (it reads the same
    /sys/devices/platform/amdgpu_xcp_*/drm/renderD*). Empty where there are none."""
    out: dict[str, str] = {}
    base = Path(sysfs) / "devices" / "platform"
    try:
        candidates = sorted(base.glob("amdgpu_xcp_*"))[:MAX_XCP_PLATFORM_DEVICES]
        for platform in candidates:
            for node in sorted((platform / "drm").glob("renderD*")):
                minor = node.name.removeprefix("renderD")
                if minor.isdigit():
                    out[str(int(minor))] = platform.name
    except OSError:
        return {}
    return out


# What a processor answers about itself, kept across rounds: the name each has in `known`.
_IDENTITY = {
    "uuid": "amdsmi_get_gpu_device_uuid",
    "bdf": "amdsmi_get_gpu_device_bdf",
    "asic": "amdsmi_get_gpu_asic_info",
    "enumeration": "amdsmi_get_gpu_enumeration_info",
}


class AmdBackend:
    """amdsmi through the `amdsmi` wheel, imported in open() only; ROCm SMI through our ctypes
    declarations where amdsmi's process list is known broken (BROKEN_PROCESS_LIST)."""

    manufacturer = MANUFACTURER
    libraries: ClassVar[tuple[Library, ...]] = (AMD_SMI, ROCM_SMI, ROCM_CORE)
    sdk: ClassVar[str] = "amdsmi"  # the distribution `record` names in its provenance

    def __init__(
        self,
        libraries: Mapping[str, str] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sysfs: str | os.PathLike[str] = "/sys",
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.configured = dict(libraries or {})
        self._clock = clock
        self._sysfs = sysfs
        self._environ = environ if environ is not None else os.environ
        self._smi: Any = None
        self._rsmi: RocmSmi | None = None
        self._path = VIA_AMDSMI
        self._rocm_version: str | None = None
        self._platform: dict[str, str] = {}
        self._baseline = Baseline()
        # What each processor answered about itself, by (socket, position): a lost device
        # stops answering even its UUID, and its grant should show it unhealthy, not vanish.
        self._known: dict[tuple[int, int], dict[str, Any]] = {}

    # -- locating -------------------------------------------------------------------------

    def _library(self, library: Library, near: str | None = None) -> tuple[Library, dict[str, str]]:
        """`library` searched in `near` (the directory libamd_smi came from) and the ROCm
        directories; a configured ROCm root (a directory with lib/<soname>) means its lib/."""
        directories = ((near,) if near else ()) + rocm_lib_directories(self._environ)
        located = Library(library.name, library.sonames, tuple(dict.fromkeys(directories)))
        configured = dict(self.configured)
        path = configured.get(library.name)
        if path and os.path.isdir(path):
            own = any(os.path.exists(os.path.join(path, s)) for s in library.sonames)
            root = any(os.path.exists(os.path.join(path, "lib", s)) for s in library.sonames)
            if root and not own:
                configured[library.name] = os.path.join(path, "lib")
        return located, configured

    def _locate(self, library: Library, near: str | None = None) -> str:
        located, configured = self._library(library, near)
        return located.locate(configured.get(library.name), self._environ)

    def _read_rocm_version(self, near: str | None) -> str | None:
        located, configured = self._library(ROCM_CORE, near)
        try:
            return rocm_version(load(located, configured))
        except (BackendUnavailable, OSError, AttributeError):
            return None  # no rocm-core: the release is unknown, and amdsmi answers

    # -- open / close ---------------------------------------------------------------------

    def open(self) -> None:
        target = self._locate(AMD_SMI)
        near = os.path.dirname(target) if os.sep in target else None
        self._rocm_version = self._read_rocm_version(near)
        self._path = VIA_AMDSMI
        if self._rocm_version in BROKEN_PROCESS_LIST:
            # ROCm SMI is initialised before amdsmi: GPUStack saw the other order abort.
            self._path = VIA_WITHHELD
            located, configured = self._library(ROCM_SMI, near)
            try:
                rsmi = RocmSmi(load(located, configured))
                rsmi.init()
            except (BackendUnavailable, AttributeError, RsmiError):
                pass  # no fallback here: the per-process figures are withheld, with a reason
            else:
                self._rsmi = rsmi
                self._path = VIA_ROCM_SMI
        try:
            smi = import_amdsmi(target)
            try:
                smi.amdsmi_init(smi.AmdSmiInitFlags.INIT_AMD_GPUS)
            except smi.AmdSmiException as exc:
                info = getattr(exc, "get_error_info", None)
                why = info(detailed=False) if callable(info) else type(exc).__name__
                raise BackendUnavailable(f"amdsmi could not be initialised: {why}") from None
        except BackendUnavailable:
            self._close_rsmi()
            raise
        self._smi = smi
        self._baseline = Baseline()  # a rate never spans a re-init
        self._known = {}
        self._platform = xcp_platform_devices(self._sysfs)

    def _close_rsmi(self) -> None:
        rsmi, self._rsmi = self._rsmi, None
        if rsmi is not None:
            with contextlib.suppress(RsmiError):
                rsmi.shut_down()

    def close(self) -> None:
        smi, self._smi = self._smi, None
        if smi is not None:
            with contextlib.suppress(smi.AmdSmiException):
                smi.amdsmi_shut_down()
        self._close_rsmi()

    # -- reading --------------------------------------------------------------------------

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        smi = self._smi
        try:
            return fn(*args)
        except smi.AmdSmiException as exc:
            code = getattr(exc, "get_error_code", None)
            return failed(type(exc).__name__, int(code()) if callable(code) else -1)

    def _identity(self, handle: Any) -> dict[str, Any]:
        smi = self._smi
        return {
            "amdsmi_get_gpu_device_uuid": self._call(smi.amdsmi_get_gpu_device_uuid, handle),
            "amdsmi_get_gpu_device_bdf": self._call(smi.amdsmi_get_gpu_device_bdf, handle),
            "amdsmi_get_gpu_bdf_id": self._call(smi.amdsmi_get_gpu_bdf_id, handle),
            "amdsmi_get_gpu_kfd_info": self._call(smi.amdsmi_get_gpu_kfd_info, handle),
            "amdsmi_get_gpu_enumeration_info": self._call(
                smi.amdsmi_get_gpu_enumeration_info, handle
            ),
            "amdsmi_get_gpu_asic_info": self._call(smi.amdsmi_get_gpu_asic_info, handle),
        }

    def _remember(self, key: tuple[int, int], device: dict[str, Any]) -> None:
        """Keep what the processor answered about itself, field by field: one that falls off
        the bus between two calls of a read answers its UUID and then NOT_FOUND, and the
        identity it gave before (its serial, its PCI address) must survive that read. A
        processor whose identity call failed carries what was known of it (`known`)."""
        uuid = _text(device["amdsmi_get_gpu_device_uuid"])
        known = self._known.get(key, {})
        if uuid is not None and _text(known.get("uuid")) != uuid:
            known = {}  # another processor at this position: nothing of the old one is its
        answered = {
            name: device[entry]
            for name, entry in _IDENTITY.items()
            if error_code(device[entry]) is None
        }
        if uuid is not None:
            known = {**known, **answered}
            self._known[key] = known
        if known and len(answered) < len(_IDENTITY):
            device["known"] = known

    def _figures(self, handle: Any, device: dict[str, Any], board: bool) -> None:
        smi = self._smi
        device["amdsmi_get_gpu_compute_partition"] = self._call(
            smi.amdsmi_get_gpu_compute_partition, handle
        )
        device["amdsmi_get_gpu_vram_usage"] = self._call(smi.amdsmi_get_gpu_vram_usage, handle)
        device["amdsmi_get_gpu_activity"] = self._call(smi.amdsmi_get_gpu_activity, handle)
        device["amdsmi_get_gpu_driver_info"] = self._call(smi.amdsmi_get_gpu_driver_info, handle)
        if not board:
            return  # board figures are read on the first XCP only
        device["board"] = True
        device["amdsmi_get_power_info"] = self._call(smi.amdsmi_get_power_info, handle)
        kinds, metric = smi.AmdSmiTemperatureType, smi.AmdSmiTemperatureMetric.CURRENT
        device["amdsmi_get_temp_metric"] = {
            name: self._call(smi.amdsmi_get_temp_metric, handle, getattr(kinds, name), metric)
            for name in ("HOTSPOT", "EDGE")
        }
        device["amdsmi_get_gpu_total_ecc_count"] = self._call(
            smi.amdsmi_get_gpu_total_ecc_count, handle
        )

    def _processes(self, handle: Any, device: dict[str, Any], uuid: str, now: float) -> set[str]:
        """The process list of one device, with the previous round's engine time per PID."""
        smi = self._smi
        if self._path == VIA_WITHHELD:
            device["processesAsked"] = True
            return set()
        if self._path == VIA_ROCM_SMI:
            return set()  # answered host-wide in _rocm_smi()
        listed = self._call(smi.amdsmi_get_gpu_process_list, handle)
        device["amdsmi_get_gpu_process_list"] = listed
        device["processAt"] = now
        seen = {f"{uuid}|"}
        previous_at = self._baseline.exchange(f"{uuid}|", Sample(0.0, now))
        device["processPreviousAt"] = previous_at.at if previous_at is not None else None
        previous: dict[str, float] = {}
        for proc in _entries(listed):
            pid = as_int(proc.get("pid"))
            gfx = finite(_mapping(proc.get("engine_usage")).get("gfx"))
            if pid is None or gfx is None:
                continue
            key = f"{uuid}|{pid}"
            seen.add(key)
            before = self._baseline.exchange(key, Sample(gfx, now))
            if before is not None:
                previous[str(pid)] = before.value
        device["processPrevious"] = previous
        return seen

    def _rocm_smi(self, payload: dict[str, Any], carved: list[dict[str, Any]]) -> None:
        """ROCm SMI's answer for the carved devices: which rsmi device each one is (by PCI id,
        partition bits included), the host-wide list, each PID's devices, its figures there."""
        rsmi = self._rsmi
        if rsmi is None:
            return
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

    def read(self, request: ReadRequest) -> Payload:
        smi = self._smi
        if smi is None:
            raise BackendUnavailable("read() before open()")
        now = self._clock()
        wanted = set(request.carved_device_ids)
        sockets = smi.amdsmi_get_socket_handles()
        payload: dict[str, Any] = {
            "amdsmi_get_lib_version": self._call(smi.amdsmi_get_lib_version),
            "rocmVersion": self._rocm_version,
            "processPath": self._path,
            "request": {
                "carved": sorted(request.carved_device_ids),
                "partitions": [list(p) for p in sorted(request.partition_ids)],
            },
            "xcpPlatformDevices": dict(self._platform),
            "sockets": [],
        }
        carved_devices: list[dict[str, Any]] = []
        seen: set[str] = set()
        index = 0
        for s, socket in enumerate(sockets):
            doc: dict[str, Any] = {
                "amdsmi_get_socket_info": self._call(smi.amdsmi_get_socket_info, socket)
            }
            handles = self._call(processors_of, smi, socket)
            if error_code(handles) is not None:
                doc["amdsmi_get_processor_handles"] = handles
                payload["sockets"].append(doc)
                continue
            devices = []
            for p, handle in enumerate(handles):
                device: dict[str, Any] = {"index": index, **self._identity(handle)}
                index += 1
                self._remember((s, p), device)
                devices.append(device)
            partitioned = len(devices) > 1
            board = 0
            for p, device in enumerate(devices):
                kfd = _mapping(device["amdsmi_get_gpu_kfd_info"])
                if as_int(kfd.get("current_partition_id")) == 0:
                    board = p
                    break
            physical = physical_id(doc, devices) if partitioned else None
            for p, (handle, device) in enumerate(zip(handles, devices, strict=True)):
                self._figures(handle, device, board=p == board)
                uuid = device_uuid(device)
                ids = {uuid, *device_aliases(device, self._platform, whole=not partitioned)}
                if uuid is not None and (
                    ids & wanted or (physical is not None and physical in wanted)
                ):
                    seen |= self._processes(handle, device, uuid, now)
                    carved_devices.append(device)
            doc["processors"] = devices
            payload["sockets"].append(doc)
        if self._path == VIA_ROCM_SMI and carved_devices:
            self._rocm_smi(payload, carved_devices)
        self._baseline.keep_only(seen)
        return payload

    def parse(self, payload: Payload) -> VendorReading:
        return parse(payload)
