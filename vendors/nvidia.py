"""NVIDIA through NVML, by way of the `pynvml` module of the `nvidia-ml-py` distribution.

`read()` asks NVML and writes down what each entry point answered, keyed by the entry point's
C name; an entry point that failed is recorded as {"error": <name>, "code": <nvmlReturn_t>}.
`parse()` is pure and turns such a payload into the model, so recorded payloads exercise the
same code the live agent runs. Facts used here: ../shared/reference/vendors.md §1.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar

from devicemanager.backend import BackendUnavailable, Library
from devicemanager.model import (
    Card,
    DeviceProcesses,
    PartitionReading,
    Payload,
    ProcessRow,
    ReadRequest,
    Reason,
    VendorReading,
    as_int,
    as_number,
    mib_from_bytes,
)
from vendors._common import error_code as _error
from vendors._common import load

# nvmlReturn_t codes (nvml.h).
SUCCESS = 0
ERROR_NOT_SUPPORTED = 3
ERROR_NO_PERMISSION = 4
ERROR_NOT_FOUND = 6
ERROR_INSUFFICIENT_SIZE = 7
ERROR_FUNCTION_NOT_FOUND = 13
ERROR_GPU_IS_LOST = 15
ERROR_ARGUMENT_VERSION_MISMATCH = 25
ERROR_DEPRECATED = 26

# The driver serves no such query: a property of the node, permanent.
_UNSUPPORTED_CODES = frozenset(
    {
        ERROR_NOT_SUPPORTED,
        ERROR_FUNCTION_NOT_FOUND,
        ERROR_ARGUMENT_VERSION_MISMATCH,
        ERROR_DEPRECATED,
    }
)

# XIDs that report an application fault rather than a broken card; the NVIDIA device plugin
# leaves a card healthy on these (k8s-device-plugin, internal/rm/health.go).
_APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})

MIG_ENABLED = 1
# How many times read() asks again when a process list grew between NVML's probe and its read.
PROCESS_LIST_ATTEMPTS = 3

MANUFACTURER = "nvidia"


def reason_for(code: int) -> Reason:
    """Why a figure is absent, from an NVML return code; "cannot" is kept apart from "could not"."""
    if code in _UNSUPPORTED_CODES:
        return Reason.UNSUPPORTED
    if code == ERROR_NO_PERMISSION:
        return Reason.PERMISSION
    if code == ERROR_INSUFFICIENT_SIZE:
        return Reason.TRUNCATED
    # Timeouts, a lost GPU, unknown errors: the next round asks again.
    return Reason.TRANSIENT_DRIVER_ERROR


def _memory(device: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """(total MiB, used MiB) from v2 where the driver served it, else v1."""
    for key in ("nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetMemoryInfo"):
        info = device.get(key)
        if isinstance(info, Mapping) and _error(info) is None:
            total = as_int(info.get("total"))  # bytes
            used = as_int(info.get("used"))  # bytes; v2 excludes the driver's reservation
            return mib_from_bytes(total), mib_from_bytes(used)
    return None, None


def _unhealthy(device: Mapping[str, Any]) -> str | None:
    """Why the card is unusable, or None. First match wins; the order is most to least severe."""
    if any(_error(v) == ERROR_GPU_IS_LOST for v in device.values()):
        return "gpu_is_lost"
    xids = device.get("xidCriticalErrors")
    for xid in xids if isinstance(xids, list) else ():
        if isinstance(xid, int) and xid not in _APPLICATION_XIDS:
            return f"xid_{xid}"
    rows = device.get("nvmlDeviceGetRemappedRows")
    if isinstance(rows, Mapping) and _error(rows) is None:
        if rows.get("failureOccurred"):
            return "row_remap_failure"
        if rows.get("isPending"):
            return "row_remap_pending"
    if device.get("nvmlDeviceGetRetiredPagesPendingStatus") == 1:
        return "retired_pages_pending"
    return None


def parse_card(device: Mapping[str, Any]) -> Card | None:
    # A card that stopped answering is still named by what it answered earlier (`known*`,
    # recorded by read()), so its grant shows it unhealthy instead of silently losing it.
    uuid = device.get("nvmlDeviceGetUUID")
    if not isinstance(uuid, str):
        uuid = device.get("knownUUID")
    index = as_int(device.get("nvmlDeviceGetIndex"))
    if index is None:
        index = as_int(device.get("knownIndex"))
    if not isinstance(uuid, str) or index is None:
        # Without its identity a card cannot be named in any figure.
        return None
    total, used = _memory(device)
    rates = device.get("nvmlDeviceGetUtilizationRates")
    gpu = as_number(rates.get("gpu")) if isinstance(rates, Mapping) and not _error(rates) else None
    power_mw = as_number(device.get("nvmlDeviceGetPowerUsage"))  # mW
    name = device.get("nvmlDeviceGetName")
    if not isinstance(name, str):
        name = device.get("knownName")
    reason = _unhealthy(device)
    return Card(
        id=uuid,
        index=index,
        name=name if isinstance(name, str) else None,
        memory_total_mib=total,
        memory_used_mib=used,
        cores_utilization_percent=gpu,
        temperature_celsius=as_number(device.get("nvmlDeviceGetTemperature")),  # °C
        power_usage_watts=None if power_mw is None else round(power_mw / 1000.0, 3),
        unhealthy=reason is not None,
        unhealthy_reason=reason,
    )


def _newest_samples(samples: Iterable[Any]) -> dict[int, float]:
    """Per PID, the SM share of its newest sample: older rows for one PID are history."""
    newest: dict[int, tuple[int, float]] = {}
    for sample in samples:
        if not isinstance(sample, Mapping):
            continue
        pid, stamp, sm = (
            as_int(sample.get("pid")),
            as_int(sample.get("timeStamp")),
            sample.get("smUtil"),
        )
        util = as_number(sm)
        if pid is None or stamp is None or util is None:
            continue
        if pid not in newest or stamp > newest[pid][0]:
            newest[pid] = (stamp, util)
    return {pid: util for pid, (_, util) in newest.items()}


def _cores_answer(device: Mapping[str, Any]) -> tuple[dict[int, float] | None, Reason | None]:
    """Per-PID SM share, or the reason there is none.

    NOT_FOUND means no process had a sample in the window: every process is idle, which is an
    answer. The newer nvmlDeviceGetProcessesUtilizationInfo is used only where read() had to
    fall back to it because the older call is not served.
    """
    reason: Reason | None = Reason.UNSUPPORTED
    for key in ("nvmlDeviceGetProcessUtilization", "nvmlDeviceGetProcessesUtilizationInfo"):
        if key not in device:
            continue
        value = device[key]
        code = _error(value)
        if code is None:
            return _newest_samples(_entries(value)), None
        if code == ERROR_NOT_FOUND:
            return {}, None
        reason = reason_for(code)
        if reason is not Reason.UNSUPPORTED:
            return None, reason
    return None, reason


def parse_processes(device: Mapping[str, Any]) -> DeviceProcesses | None:
    """The per-process answer for a carved card; None when read() did not ask for this card."""
    uuid = device.get("nvmlDeviceGetUUID")
    key = "nvmlDeviceGetComputeRunningProcesses_v3"
    if not isinstance(uuid, str) or key not in device:
        return None
    listed = device[key]
    code = _error(listed)
    samples, cores_reason = _cores_answer(device)
    memory_reason = None if code is None else reason_for(code)
    truncated = int(memory_reason is Reason.TRUNCATED) + int(cores_reason is Reason.TRUNCATED)
    # A row of a MIG-enabled card names its GPU instance; the MIG handles read this round say
    # which partition that is (0xFFFFFFFF, MIG off, matches none).
    partitions = {
        as_int(m.get("nvmlDeviceGetGpuInstanceId")): m.get("nvmlDeviceGetUUID")
        for m in _entries(device.get("migDevices"))
        if isinstance(m.get("nvmlDeviceGetUUID"), str)
    }
    rows: list[ProcessRow] = []
    if code is None and isinstance(listed, list):
        for proc in listed:
            pid = as_int(proc.get("pid")) if isinstance(proc, Mapping) else None
            if pid is None:
                continue
            # usedGpuMemory null is NVML_VALUE_NOT_AVAILABLE: unknown, never 0.
            used = as_int(proc.get("usedGpuMemory"))
            # A listed PID with no sample ran nothing in the window: idle, measured.
            cores = None if samples is None else samples.get(pid, 0.0)
            partition = partitions.get(as_int(proc.get("gpuInstanceId")))
            rows.append(
                ProcessRow(
                    pid=pid,
                    memory_bytes=used,
                    cores_percent=cores,
                    partition_id=partition if isinstance(partition, str) else None,
                )
            )
    elif samples is not None:
        # No process list: the sampled PIDs are the rows we have, their memory unknown.
        rows = [ProcessRow(pid=pid, cores_percent=util) for pid, util in sorted(samples.items())]
    # A PID seen only in samples and not in a good process list has exited: dropped above.
    return DeviceProcesses(
        device_id=uuid,
        rows=tuple(rows),
        memory_reason=memory_reason,
        cores_reason=cores_reason,
        reads_truncated=truncated,
    )


def _entries(value: Any) -> list[Mapping[str, Any]]:
    """The objects of a JSON list, skipping anything else a damaged payload may hold."""
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def parse_partitions(payload: Mapping[str, Any]) -> tuple[PartitionReading, ...]:
    """Answer every partition read() was asked for, found only by its recorded id (R-V4)."""
    request = payload.get("request")
    wanted = request.get("partitions") if isinstance(request, Mapping) else None
    devices = _entries(payload.get("devices"))
    by_uuid = {
        d["nvmlDeviceGetUUID"]: d for d in devices if isinstance(d.get("nvmlDeviceGetUUID"), str)
    }
    handles: dict[str, list[Mapping[str, Any]]] = {}
    parents: dict[str, list[str]] = {}  # partition id -> the cards listing it
    for device in devices:
        for mig in _entries(device.get("migDevices")):
            if isinstance(mig.get("nvmlDeviceGetUUID"), str):
                handles.setdefault(mig["nvmlDeviceGetUUID"], []).append(mig)
                if isinstance(device.get("nvmlDeviceGetUUID"), str):
                    parents.setdefault(mig["nvmlDeviceGetUUID"], []).append(
                        device["nvmlDeviceGetUUID"]
                    )
    out: list[PartitionReading] = []
    for item in wanted if isinstance(wanted, list) else ():
        if not (
            isinstance(item, list) and len(item) == 2 and all(isinstance(s, str) for s in item)
        ):
            continue
        parent_id, partition_id = item
        if not parent_id:
            # Asked for by its own id alone (a MIG device the kubelet allocated): its card is
            # the one that lists it, when exactly one does.
            listed = parents.get(partition_id, [])
            parent_id = listed[0] if len(listed) == 1 else ""
        parent = by_uuid.get(parent_id)
        found = handles.get(partition_id, [])
        mode = parent.get("nvmlDeviceGetMigMode") if parent is not None else None
        mode_code = _error(mode)
        if parent is None:
            reason = Reason.TRANSIENT_DRIVER_ERROR
        elif mode_code is not None:
            reason = reason_for(mode_code)
        elif not (isinstance(mode, Mapping) and mode.get("current") == MIG_ENABLED):
            # A partition named on a card whose MIG mode is off cannot be read as one.
            reason = Reason.UNSUPPORTED
        elif len(found) > 1:
            # Two handles claim one UUID: neither answer can be trusted as this partition's.
            reason = Reason.INVALID_DATA
        elif not found:
            reason = Reason.TRANSIENT_DRIVER_ERROR
        else:
            total, used = _memory(found[0])
            memory_reason = None if total is not None else Reason.TRANSIENT_DRIVER_ERROR
            out.append(
                PartitionReading(
                    id=partition_id,
                    parent_id=parent_id,
                    memory_total_mib=total,
                    memory_used_mib=used,
                    memory_reason=memory_reason,
                    # NVML documents no utilization on MIG handles (R-V4).
                    cores_reason=Reason.UNSUPPORTED,
                )
            )
            continue
        out.append(
            PartitionReading(
                id=partition_id, parent_id=parent_id, memory_reason=reason, cores_reason=reason
            )
        )
    return tuple(out)


def parse(payload: Payload) -> VendorReading:
    devices = _entries(payload.get("devices"))
    cards = tuple(c for c in map(parse_card, devices) if c is not None)
    processes = tuple(p for p in map(parse_processes, devices) if p is not None)
    driver = payload.get("nvmlSystemGetDriverVersion")
    return VendorReading(
        manufacturer=MANUFACTURER,
        cards=cards,
        processes=processes,
        partitions=parse_partitions(payload),
        driver_version=driver if isinstance(driver, str) else None,
    )


NVML = Library("nvml", ("libnvidia-ml.so.1",), env="DEVICEMANAGER_NVML_LIBRARY")


class NvidiaBackend:
    """Reads NVML through pynvml. The module is imported in open(), never at import time."""

    manufacturer = MANUFACTURER
    libraries: ClassVar[tuple[Library, ...]] = (NVML,)
    sdk: ClassVar[str] = "nvidia-ml-py"  # the distribution `record` names in its provenance

    def __init__(self, libraries: Mapping[str, str] | None = None) -> None:
        # Where libnvidia-ml is configured; by default pynvml has the dynamic linker find it.
        self.configured = dict(libraries or {})
        self._nvml: Any = None
        self._events: Any = None
        self._xids: dict[str, list[int]] = {}
        # Identity a card gave in an earlier round, by enumeration index: a lost card stops
        # answering even nvmlDeviceGetUUID.
        self._known: dict[int, dict[str, Any]] = {}

    def open(self) -> None:
        try:
            import pynvml
        except ImportError as exc:  # nvidia-ml-py not installed
            raise BackendUnavailable(f"pynvml is not importable: {exc}") from exc
        if NVML.locate(self.configured.get(NVML.name)) != NVML.sonames[0]:
            lib = load(NVML, self.configured)
            if getattr(pynvml.nvmlLib, "_handle", None) != lib._handle:
                # pynvml caches symbols of the library it loaded first; another library's
                # would otherwise be called through the first one's pointers.
                pynvml._nvmlGetFunctionPointer_cache.clear()
                pynvml.nvmlLib = lib
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise BackendUnavailable(f"NVML could not be initialised: {exc}") from exc
        self._nvml = pynvml
        self._events = self._register_xid_events()

    def _register_xid_events(self) -> Any:
        nvml = self._nvml
        try:
            events = nvml.nvmlEventSetCreate()
        except nvml.NVMLError:
            return None  # no event support on this driver: health falls back to the other signals
        for index in range(nvml.nvmlDeviceGetCount()):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, events)
            except nvml.NVMLError:
                continue
        return events

    def _drain_xids(self) -> None:
        """Collect the XIDs raised since the last round without blocking (timeout 0)."""
        nvml = self._nvml
        while self._events is not None:
            try:
                data = nvml.nvmlEventSetWait(self._events, 0)
            except nvml.NVMLError:
                return  # NVML_ERROR_TIMEOUT: nothing queued
            try:
                uuid = nvml.nvmlDeviceGetUUID(data.device)
            except nvml.NVMLError:
                continue
            # Kept for the agent's lifetime: a card that raised a fatal XID stays unhealthy
            # until someone restarts the agent after fixing it, as the device plugin does.
            self._xids.setdefault(uuid, []).append(int(data.eventData))

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        nvml = self._nvml
        try:
            return fn(*args)
        except nvml.NVMLError as exc:
            return {"error": type(exc).__name__, "code": int(exc.value)}

    def _processes(self, handle: Any) -> Any:
        nvml = self._nvml
        for _ in range(PROCESS_LIST_ATTEMPTS):
            value = self._call(nvml.nvmlDeviceGetComputeRunningProcesses_v3, handle)
            if _error(value) != ERROR_INSUFFICIENT_SIZE:
                break
            # The list grew past pynvml's oversized buffer between its probe and its read.
        if _error(value) is not None:
            return value
        return [
            {
                "pid": p.pid,
                "usedGpuMemory": p.usedGpuMemory,  # bytes; None is NVML_VALUE_NOT_AVAILABLE
                "gpuInstanceId": p.gpuInstanceId,
                "computeInstanceId": p.computeInstanceId,
            }
            for p in value
        ]

    def _samples(self, handle: Any) -> dict[str, Any]:
        """Per-process SM samples, from the older call and else from its successor."""
        nvml = self._nvml
        out: dict[str, Any] = {}
        value = self._call(nvml.nvmlDeviceGetProcessUtilization, handle, 0)
        if _error(value) is None:
            out["nvmlDeviceGetProcessUtilization"] = [
                {"pid": s.pid, "timeStamp": s.timeStamp, "smUtil": s.smUtil, "memUtil": s.memUtil}
                for s in value
            ]
            return out
        out["nvmlDeviceGetProcessUtilization"] = value
        if reason_for(_error(value) or 0) is not Reason.UNSUPPORTED:
            return out
        value = self._call(nvml.nvmlDeviceGetProcessesUtilizationInfo, handle, 0)
        if _error(value) is None:
            value = [
                {"pid": s.pid, "timeStamp": s.timeStamp, "smUtil": s.smUtil, "memUtil": s.memUtil}
                for s in value
            ]
        out["nvmlDeviceGetProcessesUtilizationInfo"] = value
        return out

    def _memory_info(self, handle: Any) -> dict[str, Any]:
        nvml = self._nvml
        value = self._call(nvml.nvmlDeviceGetMemoryInfo, handle, nvml.nvmlMemory_v2)
        if _error(value) is None:
            return {
                "nvmlDeviceGetMemoryInfo_v2": {
                    "total": value.total,
                    "reserved": value.reserved,
                    "free": value.free,
                    "used": value.used,
                }
            }
        v1 = self._call(nvml.nvmlDeviceGetMemoryInfo, handle)
        if _error(v1) is None:
            v1 = {"total": v1.total, "free": v1.free, "used": v1.used}
        return {"nvmlDeviceGetMemoryInfo_v2": value, "nvmlDeviceGetMemoryInfo": v1}

    def _mig_devices(self, handle: Any) -> list[dict[str, Any]]:
        nvml = self._nvml
        count = self._call(nvml.nvmlDeviceGetMaxMigDeviceCount, handle)
        if not isinstance(count, int):
            return []
        out: list[dict[str, Any]] = []
        for slot in range(count):
            mig = self._call(nvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, slot)
            if _error(mig) is not None:
                continue  # NOT_FOUND: an empty slot
            entry: dict[str, Any] = {
                "nvmlDeviceGetMigDeviceHandleByIndex": slot,
                "nvmlDeviceGetUUID": self._call(nvml.nvmlDeviceGetUUID, mig),
                "nvmlDeviceGetGpuInstanceId": self._call(nvml.nvmlDeviceGetGpuInstanceId, mig),
            }
            entry.update(self._memory_info(mig))
            out.append(entry)
        return out

    def _device(self, index: int, request: ReadRequest, mig_parents: set[str]) -> dict[str, Any]:
        nvml = self._nvml
        handle = self._call(nvml.nvmlDeviceGetHandleByIndex, index)
        known = self._known.get(index, {})
        if _error(handle) is not None:
            return {"nvmlDeviceGetHandleByIndex": handle, **known}
        uuid = self._call(nvml.nvmlDeviceGetUUID, handle)
        device: dict[str, Any] = {
            "nvmlDeviceGetIndex": self._call(nvml.nvmlDeviceGetIndex, handle),
            "nvmlDeviceGetUUID": uuid,
            "nvmlDeviceGetName": self._call(nvml.nvmlDeviceGetName, handle),
        }
        if isinstance(uuid, str) and isinstance(device["nvmlDeviceGetIndex"], int):
            self._known[index] = {
                "knownUUID": uuid,
                "knownIndex": device["nvmlDeviceGetIndex"],
                "knownName": device["nvmlDeviceGetName"],
            }
        elif known:
            device.update(known)
            uuid = known["knownUUID"]
        device.update(self._memory_info(handle))
        rates = self._call(nvml.nvmlDeviceGetUtilizationRates, handle)
        if _error(rates) is None:
            rates = {"gpu": rates.gpu, "memory": rates.memory}  # percent of the sample period
        device["nvmlDeviceGetUtilizationRates"] = rates
        device["nvmlDeviceGetTemperature"] = self._call(
            nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU
        )
        device["nvmlDeviceGetPowerUsage"] = self._call(nvml.nvmlDeviceGetPowerUsage, handle)
        rows = self._call(nvml.nvmlDeviceGetRemappedRows, handle)
        if _error(rows) is None:
            corr, unc, pending, failure = rows
            rows = {
                "corrRows": corr,
                "uncRows": unc,
                "isPending": pending,
                "failureOccurred": failure,
            }
        device["nvmlDeviceGetRemappedRows"] = rows
        device["nvmlDeviceGetRetiredPagesPendingStatus"] = self._call(
            nvml.nvmlDeviceGetRetiredPagesPendingStatus, handle
        )
        mode = self._call(nvml.nvmlDeviceGetMigMode, handle)
        if _error(mode) is None:
            mode = {"current": mode[0], "pending": mode[1]}
        device["nvmlDeviceGetMigMode"] = mode
        if isinstance(uuid, str):
            device["xidCriticalErrors"] = list(self._xids.get(uuid, ()))
            if uuid in request.carved_device_ids:
                device["nvmlDeviceGetComputeRunningProcesses_v3"] = self._processes(handle)
                device.update(self._samples(handle))
            # "" asks for a partition whose card is not known: every MIG card is listed.
            wanted = uuid in mig_parents or "" in mig_parents
            if wanted and isinstance(mode, dict) and mode["current"] == MIG_ENABLED:
                device["migDevices"] = self._mig_devices(handle)
        return device

    def read(self, request: ReadRequest) -> Payload:
        nvml = self._nvml
        if nvml is None:
            raise BackendUnavailable("read() before open()")
        self._drain_xids()
        count = nvml.nvmlDeviceGetCount()
        mig_parents = {parent for parent, _ in request.partition_ids}
        return {
            "nvmlSystemGetDriverVersion": self._call(nvml.nvmlSystemGetDriverVersion),
            "nvmlDeviceGetCount": count,
            "request": {
                "carved": sorted(request.carved_device_ids),
                "partitions": [list(p) for p in sorted(request.partition_ids)],
            },
            "devices": [self._device(i, request, mig_parents) for i in range(count)],
        }

    def parse(self, payload: Payload) -> VendorReading:
        return parse(payload)

    def close(self) -> None:
        nvml, self._nvml = self._nvml, None
        if nvml is None:
            return
        if self._events is not None:
            self._call(nvml.nvmlEventSetFree, self._events)
            self._events = None
        self._call(nvml.nvmlShutdown)
