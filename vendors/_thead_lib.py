"""ctypes declarations for HGML (`libhgml.so`), T-Head's NVML clone for its PPU.

Our own declarations, written from the facts of the public `hgml.h` (HGML_API_VERSION 13, as
carried by gpustack/gpustack-operator `binding/hgml/`): only the entry points the backend
calls, the structs they fill, and the constants they take. There is no Python binding to
use. Calls follow pynvml's convention (a value returned, a failure raised as `HGMLError`
carrying the `hgmlReturn_t` in `.value`, a missing symbol as FUNCTION_NOT_FOUND at call time),
so one reader in vendors/_nvml_family.py serves NVML and HGML alike.

ABI notes from the header: `hgmlDevice_t` and `hgmlGpmSample_t` are one-pointer structs
passed by value; process rows are 24 bytes, utilization samples 32; HGML's GPM request
carries room for HGML_GPM_METRIC_MAX (2052) metrics, where NVML's carries its own maximum.
Each struct is asserted against gcc by the tests (tests/vendors/test_thead_kit.py).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from ctypes import (
    POINTER,
    Structure,
    byref,
    c_char,
    c_char_p,
    c_double,
    c_int,
    c_uint,
    c_ulonglong,
    c_void_p,
    sizeof,
)
from dataclasses import dataclass
from typing import Any

# hgmlReturn_t: the values NVML uses, name for name.
HGML_SUCCESS = 0
_RETURN_NAMES = {
    1: "UNINITIALIZED",
    2: "INVALID_ARGUMENT",
    3: "NOT_SUPPORTED",
    4: "NO_PERMISSION",
    5: "ALREADY_INITIALIZED",
    6: "NOT_FOUND",
    7: "INSUFFICIENT_SIZE",
    8: "INSUFFICIENT_POWER",
    9: "DRIVER_NOT_LOADED",
    10: "TIMEOUT",
    11: "IRQ_ISSUE",
    12: "LIBRARY_NOT_FOUND",
    13: "FUNCTION_NOT_FOUND",
    14: "CORRUPTED_INFOROM",
    15: "GPU_IS_LOST",
    16: "RESET_REQUIRED",
    17: "OPERATING_SYSTEM",
    18: "LIB_RM_VERSION_MISMATCH",
    19: "IN_USE",
    20: "MEMORY",
    21: "NO_DATA",
    22: "VGPU_ECC_NOT_SUPPORTED",
    23: "INSUFFICIENT_RESOURCES",
    24: "FREQ_NOT_SUPPORTED",
    25: "ARGUMENT_VERSION_MISMATCH",
    26: "DEPRECATED",
    27: "NOT_READY",
    28: "GPU_NOT_FOUND",
    29: "INVALID_STATE",
    30: "RESET_TYPE_NOT_SUPPORTED",
    999: "UNKNOWN",
}
HGML_ERROR_NOT_FOUND = 6
HGML_ERROR_INSUFFICIENT_SIZE = 7
HGML_ERROR_FUNCTION_NOT_FOUND = 13

HGML_VALUE_NOT_AVAILABLE = 0xFFFF_FFFF_FFFF_FFFF  # (-1) in an unsigned long long field
HGML_TEMPERATURE_GPU = 0
HGML_DEVICE_UUID_V2_BUFFER_SIZE = 96
HGML_DEVICE_NAME_V2_BUFFER_SIZE = 96
HGML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE = 80

HGML_GPM_METRIC_SM_UTIL = 2
# The card-level metric ids read (issue 41): HGML clones NVML's GPM, and these are nvml.h's
# values; the project's header notes record only SM_UTIL, so an id a driver does not know
# answers its own per-metric failure, which parse() publishes as the reason.
HGML_GPM_METRIC_IDS: dict[str, int] = {
    "SM_OCCUPANCY": 3,
    "ANY_TENSOR_UTIL": 5,
    "DFMA_TENSOR_UTIL": 6,
    "HMMA_TENSOR_UTIL": 7,
    "IMMA_TENSOR_UTIL": 9,
    "DRAM_BW_UTIL": 10,
    "FP64_UTIL": 11,
    "FP32_UTIL": 12,
    "FP16_UTIL": 13,
    "PCIE_TX_PER_SEC": 20,
    "PCIE_RX_PER_SEC": 21,
    "NVLINK_TOTAL_RX_PER_SEC": 60,
    "NVLINK_TOTAL_TX_PER_SEC": 61,
}
HGML_GPM_METRIC_MAX = 2052
HGML_GPM_METRICS_GET_VERSION = 1
HGML_GPM_SUPPORT_VERSION = 2
# The versions of hgmlGpmSupport_t tried, in order: the header's, then the one GPUStack's
# binding sends (1), for a driver that answers ARGUMENT_VERSION_MISMATCH to the header's.
HGML_GPM_SUPPORT_VERSIONS = (HGML_GPM_SUPPORT_VERSION, 1)
HGML_ERROR_ARGUMENT_VERSION_MISMATCH = 25

# Room for processes that start between the size probe and the read.
_PROCESS_ROOM = 8


HGML_EVENT_TYPE_XID_CRITICAL_ERROR = 0x8  # hgmlEventTypeXidCriticalError, as NVML's


class HGMLError(Exception):
    """An hgmlReturn_t other than success; `value` is the code, `name` its header name."""

    def __init__(self, value: int) -> None:
        self.value = value
        self.name = f"HGML_ERROR_{_RETURN_NAMES.get(value, str(value))}"
        super().__init__(self.name)


class hgmlDevice_t(Structure):
    _fields_ = (("handle", c_void_p),)


class hgmlGpmSample_t(Structure):
    _fields_ = (("handle", c_void_p),)


class hgmlMemory_t(Structure):
    _fields_ = (("total", c_ulonglong), ("free", c_ulonglong), ("used", c_ulonglong))


class hgmlMemory_v2_t(Structure):
    _fields_ = (
        ("version", c_uint),
        ("total", c_ulonglong),
        ("reserved", c_ulonglong),
        ("free", c_ulonglong),
        ("used", c_ulonglong),
    )


def _struct_version(struct: type[Structure], version: int) -> int:
    """HGML_STRUCT_VERSION: the struct's size with its version in the top byte."""
    return sizeof(struct) | (version << 24)


class hgmlTemperature_v1_t(Structure):
    """What hgmlDeviceGetTemperatureV fills: a signed reading in °C (12 bytes)."""

    _fields_ = (("version", c_uint), ("sensorType", c_int), ("temperature", c_int))


class hgmlUtilization_t(Structure):
    _fields_ = (("gpu", c_uint), ("memory", c_uint))


class hgmlProcessInfo_t(Structure):
    """hgmlProcessInfo_v2_t, the row of the _v3 process calls (24 bytes)."""

    _fields_ = (
        ("pid", c_uint),
        ("usedGpuMemory", c_ulonglong),
        ("gpuInstanceId", c_uint),
        ("computeInstanceId", c_uint),
    )


HGML_DEVICE_PCI_BUS_ID_BUFFER_SIZE = 32 - 4  # the header leaves 4 bytes for globalPpuId
HGML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE = 16


class hgmlPciInfo_t(Structure):
    """hgml.h's PCI information: NVML's nvmlPciInfo_t with a shorter busId and a trailing
    globalPpuId."""

    _fields_ = (
        ("busIdLegacy", c_char * HGML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE),
        ("domain", c_uint),
        ("bus", c_uint),
        ("device", c_uint),
        ("pciDeviceId", c_uint),
        ("pciSubSystemId", c_uint),
        ("busId", c_char * HGML_DEVICE_PCI_BUS_ID_BUFFER_SIZE),
        ("globalPpuId", c_uint),
    )


class hgmlEventData_t(Structure):
    """What hgmlEventSetWait_v2 fills: NVML's nvmlEventData_t, field for field."""

    _fields_ = (
        ("device", hgmlDevice_t),
        ("eventType", c_ulonglong),
        ("eventData", c_ulonglong),  # the XID of an hgmlEventTypeXidCriticalError event
        ("gpuInstanceId", c_uint),
        ("computeInstanceId", c_uint),
    )


class hgmlProcessUtilizationSample_t(Structure):
    _fields_ = (
        ("pid", c_uint),
        ("timeStamp", c_ulonglong),  # CPU time stamp, µs
        ("smUtil", c_uint),
        ("memUtil", c_uint),
        ("encUtil", c_uint),
        ("decUtil", c_uint),
    )


class hgmlGpmSupport_t(Structure):
    _fields_ = (("version", c_uint), ("isSupportedDevice", c_uint))


class hgmlGpmMetricInfo_t(Structure):
    _fields_ = (("shortName", c_char_p), ("longName", c_char_p), ("unit", c_char_p))


class hgmlGpmMetric_t(Structure):
    _fields_ = (
        ("metricId", c_uint),
        ("hgmlReturn", c_int),
        ("value", c_double),
        ("metricInfo", hgmlGpmMetricInfo_t),
    )


class hgmlGpmMetricsGet_t(Structure):
    _fields_ = (
        ("version", c_uint),
        ("numMetrics", c_uint),
        ("sample1", hgmlGpmSample_t),
        ("sample2", hgmlGpmSample_t),
        ("metrics", hgmlGpmMetric_t * HGML_GPM_METRIC_MAX),
    )


def _available(used: int) -> int | None:
    return None if used == HGML_VALUE_NOT_AVAILABLE else used


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    """One row of hgmlDeviceGetComputeRunningProcesses_v3; memory None for the sentinel."""

    pid: int
    usedGpuMemory: int | None  # bytes
    gpuInstanceId: int
    computeInstanceId: int


# entry point -> argument types (every one returns hgmlReturn_t).
_PROTOTYPES: dict[str, tuple[Any, ...]] = {
    "hgmlInitWithFlags": (c_uint,),
    "hgmlShutdown": (),
    "hgmlSystemGetDriverVersion": (POINTER(c_char), c_uint),
    "hgmlDeviceGetCount_v2": (POINTER(c_uint),),
    "hgmlDeviceGetHandleByIndex_v2": (c_uint, POINTER(hgmlDevice_t)),
    "hgmlDeviceGetUUID": (hgmlDevice_t, POINTER(c_char), c_uint),
    "hgmlDeviceGetName": (hgmlDevice_t, POINTER(c_char), c_uint),
    "hgmlDeviceGetIndex": (hgmlDevice_t, POINTER(c_uint)),
    "hgmlDeviceGetMemoryInfo": (hgmlDevice_t, POINTER(hgmlMemory_t)),
    "hgmlDeviceGetMemoryInfo_v2": (hgmlDevice_t, POINTER(hgmlMemory_v2_t)),
    "hgmlDeviceGetUtilizationRates": (hgmlDevice_t, POINTER(hgmlUtilization_t)),
    "hgmlDeviceGetTemperature": (hgmlDevice_t, c_int, POINTER(c_uint)),
    "hgmlDeviceGetTemperatureV": (hgmlDevice_t, POINTER(hgmlTemperature_v1_t)),
    "hgmlDeviceGetPowerUsage": (hgmlDevice_t, POINTER(c_uint)),
    # The card's health figures (issue 29), NVML's shapes under HGML's prefix.
    "hgmlDeviceGetTotalEccErrors": (hgmlDevice_t, c_int, c_int, POINTER(c_ulonglong)),
    "hgmlDeviceGetTotalEnergyConsumption": (hgmlDevice_t, POINTER(c_ulonglong)),
    "hgmlDeviceGetCurrentClocksEventReasons": (hgmlDevice_t, POINTER(c_ulonglong)),
    "hgmlDeviceGetCurrentClocksThrottleReasons": (hgmlDevice_t, POINTER(c_ulonglong)),
    "hgmlDeviceGetClockInfo": (hgmlDevice_t, c_int, POINTER(c_uint)),
    "hgmlDeviceGetPcieReplayCounter": (hgmlDevice_t, POINTER(c_uint)),
    "hgmlDeviceGetRemappedRows": (
        hgmlDevice_t,
        POINTER(c_uint),
        POINTER(c_uint),
        POINTER(c_uint),
        POINTER(c_uint),
    ),
    "hgmlDeviceGetRetiredPagesPendingStatus": (hgmlDevice_t, POINTER(c_int)),
    "hgmlDeviceGetMigMode": (hgmlDevice_t, POINTER(c_uint), POINTER(c_uint)),
    "hgmlDeviceGetMaxMigDeviceCount": (hgmlDevice_t, POINTER(c_uint)),
    "hgmlDeviceGetMigDeviceHandleByIndex": (hgmlDevice_t, c_uint, POINTER(hgmlDevice_t)),
    "hgmlDeviceGetGpuInstanceId": (hgmlDevice_t, POINTER(c_uint)),
    "hgmlDeviceGetComputeRunningProcesses_v3": (
        hgmlDevice_t,
        POINTER(c_uint),
        POINTER(hgmlProcessInfo_t),
    ),
    "hgmlDeviceGetProcessUtilization": (
        hgmlDevice_t,
        POINTER(hgmlProcessUtilizationSample_t),
        POINTER(c_uint),
        c_ulonglong,
    ),
    "hgmlGpmQueryDeviceSupport": (hgmlDevice_t, POINTER(hgmlGpmSupport_t)),
    "hgmlGpmSampleAlloc": (POINTER(hgmlGpmSample_t),),
    "hgmlGpmSampleFree": (hgmlGpmSample_t,),
    "hgmlGpmMigSampleGet": (hgmlDevice_t, c_uint, hgmlGpmSample_t),
    "hgmlGpmSampleGet": (hgmlDevice_t, hgmlGpmSample_t),
    "hgmlGpmMetricsGet": (POINTER(hgmlGpmMetricsGet_t),),
    # Links and placement (R-X3), as the header and GPUStack's pyhgml declare them.
    "hgmlDeviceGetPciInfo_v3": (hgmlDevice_t, POINTER(hgmlPciInfo_t)),
    "hgmlDeviceGetTopologyCommonAncestor": (hgmlDevice_t, hgmlDevice_t, POINTER(c_int)),
    "hgmlDeviceGetIcnLinkState": (hgmlDevice_t, c_uint, POINTER(c_uint)),
    "hgmlDeviceGetIcnLinkRemotePciInfo_v2": (hgmlDevice_t, c_uint, POINTER(hgmlPciInfo_t)),
    "hgmlDeviceGetIcnLinkRemoteDeviceType": (hgmlDevice_t, c_uint, POINTER(c_int)),
    # XID events (R-X7): hgmlEventSet_t is an opaque pointer.
    "hgmlEventSetCreate": (POINTER(c_void_p),),
    "hgmlDeviceRegisterEvents": (hgmlDevice_t, c_ulonglong, c_void_p),
    "hgmlEventSetWait_v2": (c_void_p, POINTER(hgmlEventData_t), c_uint),
    "hgmlEventSetFree": (c_void_p,),
}


class Hgml:
    """The entry points of one loaded libhgml.so, called the way pynvml calls NVML's."""

    # Constants the shared reader looks up by prefix.
    hgmlMemory_v2 = _struct_version(hgmlMemory_v2_t, 2)
    hgmlTemperature_v1 = _struct_version(hgmlTemperature_v1_t, 1)
    HGML_GPM_METRIC_SM_UTIL = HGML_GPM_METRIC_SM_UTIL
    HGML_GPM_METRICS_GET_VERSION = HGML_GPM_METRICS_GET_VERSION
    HGML_GPM_METRIC_SM_OCCUPANCY = HGML_GPM_METRIC_IDS["SM_OCCUPANCY"]
    HGML_GPM_METRIC_ANY_TENSOR_UTIL = HGML_GPM_METRIC_IDS["ANY_TENSOR_UTIL"]
    HGML_GPM_METRIC_DFMA_TENSOR_UTIL = HGML_GPM_METRIC_IDS["DFMA_TENSOR_UTIL"]
    HGML_GPM_METRIC_HMMA_TENSOR_UTIL = HGML_GPM_METRIC_IDS["HMMA_TENSOR_UTIL"]
    HGML_GPM_METRIC_IMMA_TENSOR_UTIL = HGML_GPM_METRIC_IDS["IMMA_TENSOR_UTIL"]
    HGML_GPM_METRIC_DRAM_BW_UTIL = HGML_GPM_METRIC_IDS["DRAM_BW_UTIL"]
    HGML_GPM_METRIC_FP64_UTIL = HGML_GPM_METRIC_IDS["FP64_UTIL"]
    HGML_GPM_METRIC_FP32_UTIL = HGML_GPM_METRIC_IDS["FP32_UTIL"]
    HGML_GPM_METRIC_FP16_UTIL = HGML_GPM_METRIC_IDS["FP16_UTIL"]
    HGML_GPM_METRIC_PCIE_TX_PER_SEC = HGML_GPM_METRIC_IDS["PCIE_TX_PER_SEC"]
    HGML_GPM_METRIC_PCIE_RX_PER_SEC = HGML_GPM_METRIC_IDS["PCIE_RX_PER_SEC"]
    HGML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC = HGML_GPM_METRIC_IDS["NVLINK_TOTAL_RX_PER_SEC"]
    HGML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC = HGML_GPM_METRIC_IDS["NVLINK_TOTAL_TX_PER_SEC"]

    def __init__(self, lib: ctypes.CDLL) -> None:
        self._lib = lib
        self._functions: dict[str, Callable[..., int]] = {}

    def _fn(self, name: str) -> Callable[..., int]:
        """The C function, typed by our prototype; resolved at first call, like pynvml."""
        function = self._functions.get(name)
        if function is None:
            try:
                found = getattr(self._lib, name)
            except AttributeError:
                raise HGMLError(HGML_ERROR_FUNCTION_NOT_FOUND) from None
            found.argtypes = _PROTOTYPES[name]
            found.restype = c_int
            function = self._functions[name] = found
        return function

    def _check(self, name: str, *args: Any) -> None:
        code = self._fn(name)(*args)
        if code != HGML_SUCCESS:
            raise HGMLError(code)

    def _string(self, name: str, size: int, *handle: Any) -> str:
        buffer = ctypes.create_string_buffer(size)
        self._check(name, *handle, buffer, size)
        return buffer.value.decode(errors="replace")

    def _uint(self, name: str, *args: Any) -> int:
        value = c_uint()
        self._check(name, *args, byref(value))
        return value.value

    def _ull(self, name: str, *args: Any) -> int:
        value = c_ulonglong()
        self._check(name, *args, byref(value))
        return value.value

    # -- library ---------------------------------------------------------------------------

    def hgmlInitWithFlags(self, flags: int) -> None:
        self._check("hgmlInitWithFlags", flags)

    def hgmlShutdown(self) -> None:
        self._check("hgmlShutdown")

    # -- links and placement (R-X3) ------------------------------------------------------------

    def hgmlDeviceGetPciInfo_v3(self, handle: hgmlDevice_t) -> hgmlPciInfo_t:
        info = hgmlPciInfo_t()
        self._check("hgmlDeviceGetPciInfo_v3", handle, byref(info))
        return info

    def hgmlDeviceGetTopologyCommonAncestor(self, a: hgmlDevice_t, b: hgmlDevice_t) -> int:
        level = c_int()  # hgmlGpuTopologyLevel_t: NVML's levels, 0 … 50
        self._check("hgmlDeviceGetTopologyCommonAncestor", a, b, byref(level))
        return level.value

    def hgmlDeviceGetIcnLinkState(self, handle: hgmlDevice_t, link: int) -> int:
        return self._uint("hgmlDeviceGetIcnLinkState", handle, link)  # 1: active

    def hgmlDeviceGetIcnLinkRemotePciInfo(self, handle: hgmlDevice_t, link: int) -> hgmlPciInfo_t:
        """What the link reaches; the C entry point's _v2, as pyhgml calls it."""
        info = hgmlPciInfo_t()
        self._check("hgmlDeviceGetIcnLinkRemotePciInfo_v2", handle, link, byref(info))
        return info

    def hgmlDeviceGetIcnLinkRemoteDeviceType(self, handle: hgmlDevice_t, link: int) -> int:
        kind = c_int()  # hgmlIntIcnLinkDeviceType_t: PPU 0, SWITCH 2, UNKNOWN 0xFF
        self._check("hgmlDeviceGetIcnLinkRemoteDeviceType", handle, link, byref(kind))
        return kind.value

    # -- XID events (R-X7), as GPUStack's pyhgml binds them --------------------------------------

    hgmlEventTypeXidCriticalError = HGML_EVENT_TYPE_XID_CRITICAL_ERROR

    def hgmlEventSetCreate(self) -> c_void_p:
        events = c_void_p()
        self._check("hgmlEventSetCreate", byref(events))
        return events

    def hgmlDeviceRegisterEvents(self, handle: hgmlDevice_t, types: int, events: c_void_p) -> None:
        self._check("hgmlDeviceRegisterEvents", handle, types, events)

    def hgmlEventSetWait(self, events: c_void_p, timeout_ms: int) -> hgmlEventData_t:
        """The next queued event; HGMLError(TIMEOUT) when none came within the timeout."""
        data = hgmlEventData_t()
        self._check("hgmlEventSetWait_v2", events, byref(data), timeout_ms)
        return data

    def hgmlEventSetFree(self, events: c_void_p) -> None:
        self._check("hgmlEventSetFree", events)

    def hgmlSystemGetDriverVersion(self) -> str:
        return self._string("hgmlSystemGetDriverVersion", HGML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE)

    # -- devices ---------------------------------------------------------------------------

    def hgmlDeviceGetCount(self) -> int:
        return self._uint("hgmlDeviceGetCount_v2")

    def hgmlDeviceGetHandleByIndex(self, index: int) -> hgmlDevice_t:
        handle = hgmlDevice_t()
        self._check("hgmlDeviceGetHandleByIndex_v2", index, byref(handle))
        return handle

    def hgmlDeviceGetUUID(self, handle: hgmlDevice_t) -> str:
        return self._string("hgmlDeviceGetUUID", HGML_DEVICE_UUID_V2_BUFFER_SIZE, handle)

    def hgmlDeviceGetName(self, handle: hgmlDevice_t) -> str:
        return self._string("hgmlDeviceGetName", HGML_DEVICE_NAME_V2_BUFFER_SIZE, handle)

    def hgmlDeviceGetIndex(self, handle: hgmlDevice_t) -> int:
        return self._uint("hgmlDeviceGetIndex", handle)

    def hgmlDeviceGetMemoryInfo(
        self, handle: hgmlDevice_t, version: int | None = None
    ) -> hgmlMemory_t | hgmlMemory_v2_t:
        """v1 without a version; `hgmlMemory_v2` asks the versioned call."""
        if version is None:
            memory = hgmlMemory_t()
            self._check("hgmlDeviceGetMemoryInfo", handle, byref(memory))
            return memory
        memory_v2 = hgmlMemory_v2_t(version=version)
        self._check("hgmlDeviceGetMemoryInfo_v2", handle, byref(memory_v2))
        return memory_v2

    def hgmlDeviceGetUtilizationRates(self, handle: hgmlDevice_t) -> hgmlUtilization_t:
        rates = hgmlUtilization_t()
        self._check("hgmlDeviceGetUtilizationRates", handle, byref(rates))
        return rates

    def hgmlDeviceGetTemperature(self, handle: hgmlDevice_t, sensor: int) -> int:
        return self._uint("hgmlDeviceGetTemperature", handle, sensor)  # °C

    def hgmlDeviceGetTemperatureV(self, handle: hgmlDevice_t, sensor: int) -> int:
        """The versioned reading (hgmlTemperature_v1_t), where the plain call is gone."""
        reading = hgmlTemperature_v1_t(version=self.hgmlTemperature_v1, sensorType=sensor)
        self._check("hgmlDeviceGetTemperatureV", handle, byref(reading))
        return int(reading.temperature)  # °C, signed

    def hgmlDeviceGetPowerUsage(self, handle: hgmlDevice_t) -> int:
        return self._uint("hgmlDeviceGetPowerUsage", handle)  # mW

    # -- the card's health (issue 29) ----------------------------------------------------

    def hgmlDeviceGetTotalEccErrors(self, handle: hgmlDevice_t, error: int, counter: int) -> int:
        """hgmlMemoryErrorType_t CORRECTED 0 / UNCORRECTED 1, hgmlEccCounterType_t VOLATILE 0 /
        AGGREGATE 1; NOT_SUPPORTED with ECC off."""
        return self._ull("hgmlDeviceGetTotalEccErrors", handle, error, counter)

    def hgmlDeviceGetTotalEnergyConsumption(self, handle: hgmlDevice_t) -> int:
        return self._ull("hgmlDeviceGetTotalEnergyConsumption", handle)  # mJ

    def hgmlDeviceGetCurrentClocksEventReasons(self, handle: hgmlDevice_t) -> int:
        return self._ull("hgmlDeviceGetCurrentClocksEventReasons", handle)  # the mask

    def hgmlDeviceGetCurrentClocksThrottleReasons(self, handle: hgmlDevice_t) -> int:
        return self._ull("hgmlDeviceGetCurrentClocksThrottleReasons", handle)

    def hgmlDeviceGetClockInfo(self, handle: hgmlDevice_t, clock: int) -> int:
        return self._uint("hgmlDeviceGetClockInfo", handle, clock)  # MHz

    def hgmlDeviceGetPcieReplayCounter(self, handle: hgmlDevice_t) -> int:
        return self._uint("hgmlDeviceGetPcieReplayCounter", handle)

    def hgmlDeviceGetRemappedRows(self, handle: hgmlDevice_t) -> tuple[int, int, int, int]:
        corr, unc, pending, failure = c_uint(), c_uint(), c_uint(), c_uint()
        self._check(
            "hgmlDeviceGetRemappedRows",
            handle,
            byref(corr),
            byref(unc),
            byref(pending),
            byref(failure),
        )
        return corr.value, unc.value, pending.value, failure.value

    def hgmlDeviceGetRetiredPagesPendingStatus(self, handle: hgmlDevice_t) -> int:
        state = c_int()
        self._check("hgmlDeviceGetRetiredPagesPendingStatus", handle, byref(state))
        return state.value

    def hgmlDeviceGetMigMode(self, handle: hgmlDevice_t) -> list[int]:
        current, pending = c_uint(), c_uint()
        self._check("hgmlDeviceGetMigMode", handle, byref(current), byref(pending))
        return [current.value, pending.value]

    def hgmlDeviceGetMaxMigDeviceCount(self, handle: hgmlDevice_t) -> int:
        return self._uint("hgmlDeviceGetMaxMigDeviceCount", handle)

    def hgmlDeviceGetMigDeviceHandleByIndex(self, handle: hgmlDevice_t, index: int) -> hgmlDevice_t:
        mig = hgmlDevice_t()
        self._check("hgmlDeviceGetMigDeviceHandleByIndex", handle, index, byref(mig))
        return mig

    def hgmlDeviceGetGpuInstanceId(self, handle: hgmlDevice_t) -> int:
        return self._uint("hgmlDeviceGetGpuInstanceId", handle)

    # -- processes -------------------------------------------------------------------------

    def hgmlDeviceGetComputeRunningProcesses_v3(self, handle: hgmlDevice_t) -> list[ProcessInfo]:
        """Probe the count (SUCCESS: none), then read into a buffer with some room to spare.
        A list that outgrew it answers INSUFFICIENT_SIZE, raised for the caller to ask again."""
        name = "hgmlDeviceGetComputeRunningProcesses_v3"
        count = c_uint(0)
        code = self._fn(name)(handle, byref(count), None)
        if code == HGML_SUCCESS:
            return []
        if code != HGML_ERROR_INSUFFICIENT_SIZE:
            raise HGMLError(code)
        capacity = count.value + _PROCESS_ROOM
        rows = (hgmlProcessInfo_t * capacity)()
        count = c_uint(capacity)
        self._check(name, handle, byref(count), rows)
        return [
            ProcessInfo(
                pid=r.pid,
                # The sentinel is "not available": unknown, never a plausible number.
                usedGpuMemory=_available(r.usedGpuMemory),
                gpuInstanceId=r.gpuInstanceId,
                computeInstanceId=r.computeInstanceId,
            )
            for r in rows[: min(count.value, capacity)]
        ]

    def hgmlDeviceGetProcessUtilization(
        self, handle: hgmlDevice_t, last_seen: int
    ) -> list[hgmlProcessUtilizationSample_t]:
        """Samples newer than `last_seen` (µs; 0: all the driver holds). NOT_FOUND, raised, is
        the driver's "no sample in the window": idle, which the parser knows."""
        name = "hgmlDeviceGetProcessUtilization"
        count = c_uint(0)
        code = self._fn(name)(handle, None, byref(count), last_seen)
        if code == HGML_SUCCESS:
            return []
        if code != HGML_ERROR_INSUFFICIENT_SIZE:
            raise HGMLError(code)
        capacity = count.value + _PROCESS_ROOM
        samples = (hgmlProcessUtilizationSample_t * capacity)()
        count = c_uint(capacity)
        self._check(name, handle, samples, byref(count), last_seen)
        return list(samples[: min(count.value, capacity)])

    # -- GPM -------------------------------------------------------------------------------

    def hgmlGpmQueryDeviceSupport(self, handle: hgmlDevice_t) -> hgmlGpmSupport_t:
        """The header's struct version first, then GPUStack's; the answer carries the version
        the driver accepted (the reader records it)."""
        for version in HGML_GPM_SUPPORT_VERSIONS:
            support = hgmlGpmSupport_t(version=version)
            code = self._fn("hgmlGpmQueryDeviceSupport")(handle, byref(support))
            if code == HGML_SUCCESS:
                support.version = version
                return support
            if code != HGML_ERROR_ARGUMENT_VERSION_MISMATCH:
                break
        raise HGMLError(code)

    def hgmlGpmSampleAlloc(self) -> hgmlGpmSample_t:
        sample = hgmlGpmSample_t()
        self._check("hgmlGpmSampleAlloc", byref(sample))
        return sample

    def hgmlGpmSampleFree(self, sample: hgmlGpmSample_t) -> None:
        self._check("hgmlGpmSampleFree", sample)

    def hgmlGpmMigSampleGet(
        self, handle: hgmlDevice_t, gpu_instance: int, sample: hgmlGpmSample_t
    ) -> hgmlGpmSample_t:
        self._check("hgmlGpmMigSampleGet", handle, gpu_instance, sample)
        return sample

    def hgmlGpmSampleGet(self, handle: hgmlDevice_t, sample: hgmlGpmSample_t) -> hgmlGpmSample_t:
        self._check("hgmlGpmSampleGet", handle, sample)
        return sample

    def hgmlGpmMetricsGet(self, request: hgmlGpmMetricsGet_t) -> hgmlGpmMetricsGet_t:
        self._check("hgmlGpmMetricsGet", byref(request))
        return request
