"""Our ctypes declarations of the MXSML (`libmxsml.so`) entry points the metax backend calls.

Written for this project from the layouts MetaX documents for MXSML 2.3.1 (entry points, field
order, types and units; the project's reference notes, vendors.md §5 and §12); MetaX's header
carries a proprietary notice and is not copied. The structs are asserted against gcc's layout
of our C declarations in tests/fakelib/metax/mxsml.h (process rows 3,144 bytes, 3,656 with
`_v2`/`_v3`, on x86-64).

Only `open()` and `read()` of vendors/metax.py touch the library. An entry point a library does
not export is None here (`Mxsml.function`), so the backend falls back or records it as
unsupported instead of failing to load.
"""

from __future__ import annotations

import ctypes
from ctypes import POINTER, c_char, c_char_p, c_int, c_long, c_uint, c_ulong
from typing import Any

# mxSmlReturn_t: sequential from 0.
SUCCESS = 0
FAILURE = 1
NO_DEVICE = 2
OPERATION_NOT_SUPPORTED = 3
SYSFS_ERROR = 4
INVALID_DEVICE_ID = 6
PERMISSION_DENIED = 8
INVALID_INPUT = 9
INSUFFICIENT_SIZE = 10
LOAD_DLL_FAILURE = 26
# Not a library code: what a payload records for an entry point this library does not export
# (the number pymxsml uses for the same situation).
FUNCTION_NOT_FOUND = 999

# mxSmlDeviceVirtualizationMode_t
MODE_NONE = 0
MODE_PF = 1
MODE_VF = 2
# mxSmlDeviceBrand_t
BRAND_N = 1
BRAND_C = 2
# mxSmlUsageIp_t
USAGE_DLA = 0  # compute on N-class cards
USAGE_XCORE = 4  # compute on C-class cards (the C500 family)
# mxSmlTemperatureSensors_t
TEMPERATURE_HOTSPOT = 0  # the chip's hottest point, in hundredths of a degree
# mxSmlVersionUnit_t
VERSION_DRIVER = 1
INIT_FLAG_REINIT = 1
# mxSmlClockIp_t of mxSmlGetClocks (MHz): the memory controller and the compute cores of a
# C-class card; mxSmlGetClocks fills the domain's clocks, the first being the one nvtop shows.
CLOCK_MC0 = 3
CLOCK_XCORE = 11
MAX_CLOCKS = 16  # the header says at most 9 per domain

BDF_LEN = 32
UUID_LEN = 96
NAME_LEN = 32
PROCESS_NAME_LEN = 64
GPUS_PER_PROCESS = 64  # a process row lists at most this many GPUs
MAX_SGPU = 16  # slots per card
VERSION_LEN = 64
ALIAS_LEN = 96


class DeviceInfo(ctypes.Structure):
    _fields_ = [
        ("deviceId", c_uint),
        ("type", c_uint),  # deprecated
        ("bdfId", c_char * BDF_LEN),
        ("gpuId", c_uint),  # the driver's own id of the card: not the enumeration index
        ("nodeId", c_uint),
        ("uuid", c_char * UUID_LEN),
        ("brand", c_uint),
        ("mode", c_uint),
        ("deviceName", c_char * NAME_LEN),
    ]


class MemoryInfo(ctypes.Structure):
    """Device memory in KB."""

    _fields_ = [
        ("visVramTotal", c_long),
        ("visVramUse", c_long),
        ("vramTotal", c_long),
        ("vramUse", c_long),
        ("xttTotal", c_long),
        ("xttUse", c_long),
    ]


class BoardWayElectricInfo(ctypes.Structure):
    """One supply rail: mV, mA, mW."""

    _fields_ = [("voltage", c_uint), ("current", c_uint), ("power", c_uint)]


class ProcessGpuInfo(ctypes.Structure):
    """One GPU a process uses; gpuId is the enumeration (sequence) index; memory in bytes."""

    _fields_ = [("bdfId", c_char * BDF_LEN), ("gpuId", c_uint), ("gpuMemoryUsage", c_ulong)]


class ProcessGpuInfoV2(ctypes.Structure):
    _fields_ = [*ProcessGpuInfo._fields_, ("dieId", c_uint)]


class ProcessGpuInfoV3(ctypes.Structure):
    _fields_ = [*ProcessGpuInfoV2._fields_, ("sgpuId", c_int)]  # -1: the whole card


def _process_row(gpu: type[ctypes.Structure], name: str) -> type[ctypes.Structure]:
    fields = [
        ("processId", c_uint),
        ("processName", c_char * PROCESS_NAME_LEN),
        ("gpuNumber", c_uint),
        ("processGpuInfo", gpu * GPUS_PER_PROCESS),
    ]
    return type(name, (ctypes.Structure,), {"_fields_": fields})


ProcessInfo = _process_row(ProcessGpuInfo, "ProcessInfo")
ProcessInfoV2 = _process_row(ProcessGpuInfoV2, "ProcessInfoV2")
ProcessInfoV3 = _process_row(ProcessGpuInfoV3, "ProcessInfoV3")


class SgpuInfo(ctypes.Structure):
    """A slice GPU: quotas in MB and percent."""

    _fields_ = [
        ("parentDeviceId", c_uint),
        ("sgpuId", c_uint),
        ("vramQuota", c_uint),
        ("swQueuePriority", c_uint),
        ("computeQuota", c_uint),
        ("minor", c_uint),
        ("deviceQueuePriority", c_uint),
        ("uuid", c_char * UUID_LEN),
    ]


class EccErrorCount(ctypes.Structure):
    """mxSmlEccErrorCount_t: corrected and uncorrected errors of the SRAM and of the DRAM, and
    the retired pages (20 bytes)."""

    _fields_ = (
        ("sramCE", c_uint),
        ("sramUE", c_uint),
        ("dramCE", c_uint),
        ("dramUE", c_uint),
        ("retiredPage", c_uint),
    )


class SgpuMemoryInfo(ctypes.Structure):
    """A slice GPU's memory in bytes."""

    _fields_ = [("total", c_long), ("used", c_long), ("free", c_long)]


_U = POINTER(c_uint)
# name -> (restype, argtypes). Every entry point but the two counts answers an mxSmlReturn_t.
PROTOTYPES: dict[str, tuple[Any, list[Any]]] = {
    "mxSmlInit": (c_uint, []),
    # REINIT looks for cards again; a second plain mxSmlInit keeps what the first one found.
    "mxSmlInitWithFlags": (c_uint, [c_uint]),
    # The count is the return value: there is no out-parameter (a tool that passes one reads
    # garbage).
    "mxSmlGetDeviceCount": (c_uint, []),
    "mxSmlGetDeviceInfo": (c_uint, [c_uint, POINTER(DeviceInfo)]),
    "mxSmlGetDeviceVersion": (c_uint, [c_uint, c_uint, c_char_p, _U]),
    "mxSmlGetDeviceState": (c_uint, [c_uint, POINTER(c_int)]),
    "mxSmlGetMemoryInfo": (c_uint, [c_uint, POINTER(MemoryInfo)]),
    "mxSmlGetDeviceIpUsage": (c_uint, [c_uint, c_uint, POINTER(c_int)]),
    "mxSmlGetTemperatureInfo": (c_uint, [c_uint, c_uint, POINTER(c_int)]),
    "mxSmlGetBoardPowerInfo": (c_uint, [c_uint, _U, POINTER(BoardWayElectricInfo)]),
    "mxSmlGetSingleGpuProcess": (c_uint, [c_uint, _U, POINTER(ProcessInfo)]),
    "mxSmlGetSingleGpuProcess_v2": (c_uint, [c_uint, _U, POINTER(ProcessInfoV2)]),
    "mxSmlGetSingleGpuProcess_v3": (c_uint, [c_uint, _U, POINTER(ProcessInfoV3)]),
    "mxSmlGetSgpuToggle": (c_uint, [c_uint, _U]),
    "mxSmlGetSgpuCount": (c_uint, [c_uint]),  # 0 on any error, as documented
    "mxSmlGetSgpuInfo": (c_uint, [c_uint, c_uint, POINTER(SgpuInfo)]),
    "mxSmlGetSgpuUsage": (c_uint, [c_uint, c_uint, POINTER(c_int)]),
    "mxSmlGetSgpuMemory": (c_uint, [c_uint, c_uint, POINTER(SgpuMemoryInfo)]),
    "mxSmlGetSgpuAlias": (c_uint, [c_uint, c_uint, c_char_p, _U]),
    # Newer libraries: the id MetaX's device plugin registered the sGPU under with the kubelet.
    "mxSmlGetSgpuAnnotationsId": (c_uint, [c_uint, c_uint, c_char_p, _U]),
    "mxSmlGetErrorString": (c_char_p, [c_uint]),
    # The card's health figures (issue 29).
    "mxSmlGetTotalEccErrors": (c_uint, [c_uint, POINTER(EccErrorCount)]),
    "mxSmlGetCurrentClocksThrottleReason": (c_uint, [c_uint, POINTER(ctypes.c_ulonglong)]),
    "mxSmlGetClocks": (c_uint, [c_uint, c_uint, _U, POINTER(c_uint)]),
    # Links and placement (R-X3): mxSmlGpuTopologyLevel_t, an unsigned enum.
    "mxSmlGetDeviceTopology": (c_uint, [c_uint, c_uint, POINTER(c_uint)]),
}
REQUIRED = ("mxSmlInit", "mxSmlGetDeviceCount", "mxSmlGetDeviceInfo")

# The per-device process entry points, newest first, with the row each one fills.
PROCESS_CALLS: tuple[tuple[str, type[ctypes.Structure]], ...] = (
    ("mxSmlGetSingleGpuProcess_v3", ProcessInfoV3),
    ("mxSmlGetSingleGpuProcess_v2", ProcessInfoV2),
    ("mxSmlGetSingleGpuProcess", ProcessInfo),
)


class Mxsml:
    """A loaded libmxsml with our prototypes applied to the entry points it exports."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib
        self._functions: dict[str, Any] = {}
        for name, (restype, argtypes) in PROTOTYPES.items():
            try:
                fn = getattr(lib, name)
            except AttributeError:
                continue  # an older library: the backend falls back or says unsupported
            fn.restype, fn.argtypes = restype, argtypes
            self._functions[name] = fn

    def missing(self) -> list[str]:
        """The entry points the backend cannot work without that this library lacks."""
        return [name for name in REQUIRED if name not in self._functions]

    def function(self, name: str) -> Any:
        """The entry point, or None when this library does not export it."""
        return self._functions.get(name)


def text(value: bytes) -> str:
    """A fixed-size C string field as text (NUL-terminated, undecodable bytes replaced)."""
    return value.split(b"\0", 1)[0].decode("utf-8", "replace")
