"""ctypes declarations of the three Hygon libraries the hygon backend reads: Hygon's fork of ROCm
SMI (`librocm_smi64.so`), its device management interface (`libhydmi.so`, virtual DCUs) and its
multi-instance library (`libhydmi_mig.so`, which exports NVML's symbol names).

Written by this project from the facts of Hygon's public headers (HYGON-AI/hcu-dcgm,
`pkg/dcgm/include/`: `rocm_smi.h`, `dmi_error.h`, `dmi_virtual.h`, `dmi_mig.h`); never copied.
The fork is not upstream ROCm SMI: its error-count struct is 64 bytes, it has its own
per-process `_v2` struct with VRAM in MiB, and it answers for DCUs only, so these declarations
stay Hygon's own. Every struct here is asserted against gcc on the test headers
(tests/fakelib/hygon/include/) in tests/vendors/test_hygon_kit.py.

A symbol a library does not export is bound as None, so an older fork missing an entry point is
"unsupported" for that entry point, never an AttributeError.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Mapping, Sequence
from ctypes import (
    POINTER,
    Structure,
    c_bool,
    c_char,
    c_char_p,
    c_float,
    c_int,
    c_int64,
    c_size_t,
    c_uint32,
    c_uint64,
    c_void_p,
)
from typing import Any

# -- ROCm SMI (Hygon's fork) --------------------------------------------------------------------

# rsmi_status_t: a sequential enum from 0, and 0xFFFFFFFF for an unknown error.
RSMI_STATUS = (
    "SUCCESS",
    "INVALID_ARGS",
    "NOT_SUPPORTED",
    "FILE_ERROR",
    "PERMISSION",
    "OUT_OF_RESOURCES",
    "INTERNAL_EXCEPTION",
    "INPUT_OUT_OF_BOUNDS",
    "INIT_ERROR",
    "NOT_YET_IMPLEMENTED",
    "NOT_FOUND",
    "INSUFFICIENT_SIZE",
    "INTERRUPT",
    "UNEXPECTED_SIZE",
    "NO_DATA",
    "UNEXPECTED_DATA",
    "BUSY",
    "REFCOUNT_OVERFLOW",
    "SETTING_UNAVAILABLE",
    "AMDGPU_RESTART_ERR",
)
RSMI_SUCCESS = 0
RSMI_INVALID_ARGS = 1
RSMI_NOT_SUPPORTED = 2
RSMI_PERMISSION = 4
RSMI_NOT_YET_IMPLEMENTED = 9
RSMI_NOT_FOUND = 10
RSMI_INSUFFICIENT_SIZE = 11
RSMI_UNKNOWN_ERROR = 0xFFFFFFFF

RSMI_MEM_TYPE_VRAM = 0
RSMI_TEMP_TYPE_EDGE = 0
RSMI_TEMP_TYPE_JUNCTION = 1
RSMI_TEMP_CURRENT = 0
RSMI_SW_COMP_DRIVER = 0
RSMI_GPU_BLOCK_UMC = 0x1
# rsmi_clk_type_t: the system (graphics) clock and the memory clock.
RSMI_CLK_TYPE_SYS = 0
RSMI_CLK_TYPE_MEM = 4
RSMI_MAX_NUM_FREQUENCIES = 33
# rsmi_memory_page_status_t of a retired page.
RSMI_MEM_PAGE_STATUS_RESERVED = 0
RSMI_MEM_PAGE_STATUS_PENDING = 1
RSMI_MEM_PAGE_STATUS_UNRESERVABLE = 2
CU_OCCUPANCY_INVALID = 0xFFFFFFFF  # the kernel gives no cu_occupancy for this GFX revision


def rsmi_status_name(code: int) -> str:
    if 0 <= code < len(RSMI_STATUS):
        return f"RSMI_STATUS_{RSMI_STATUS[code]}"
    return "RSMI_STATUS_UNKNOWN_ERROR"


class ProcessInfo(Structure):
    """rsmi_process_info_t: VRAM in bytes, SDMA in microseconds, CU use in percent."""

    _fields_ = (
        ("process_id", c_uint32),
        ("pasid", c_uint32),
        ("vram_usage", c_uint64),
        ("sdma_usage", c_uint64),
        ("cu_occupancy", c_uint32),
    )


class ProcessInfoV2(Structure):
    """rsmi_process_info_v2_t (Hygon only): the process's VRAM in MiB, a usage rate per GPU."""

    _fields_ = (
        ("processId", c_uint32),
        ("vramUsageSize", c_uint64),
        ("vramUsageRate", c_float),
        ("usedGpus", c_int),
        ("gpuIndex", c_int * 16),
        ("gpuUsageRate", c_float * 16),
    )


class ErrorCount(Structure):
    """rsmi_error_count_t as Hygon lays it out: a deferred count and reserved room (64 bytes)."""

    _fields_ = (
        ("correctable_err", c_uint64),
        ("uncorrectable_err", c_uint64),
        ("deferred_err", c_uint64),
        ("reserved", c_uint64 * 5),
    )


class Frequencies(Structure):
    """rsmi_frequencies_t as Hygon's fork lays it out (upstream's newer one): a deep-sleep flag,
    the count of supported levels, the current level's index, the levels in Hz (280 bytes)."""

    _fields_ = (
        ("has_deep_sleep", c_bool),
        ("num_supported", c_uint32),
        ("current", c_uint32),
        ("frequency", c_uint64 * RSMI_MAX_NUM_FREQUENCIES),
    )


class RetiredPage(Structure):
    """rsmi_retired_page_record_t: a retired (bad) page's address, size and state (24 bytes)."""

    _fields_ = (("page_address", c_uint64), ("page_size", c_uint64), ("status", c_uint32))


_U32P = POINTER(c_uint32)
_U64P = POINTER(c_uint64)

# name -> argument types; every entry point returns rsmi_status_t (an unsigned int).
RSMI_PROTOTYPES: Mapping[str, Sequence[Any]] = {
    "rsmi_init": (c_uint64,),
    "rsmi_shut_down": (),
    "rsmi_num_monitor_devices": (_U32P,),
    "rsmi_version_str_get": (c_uint32, c_char_p, c_uint32),
    "rsmi_dev_unique_id_get": (c_uint32, _U64P),
    "rsmi_dev_pci_id_get": (c_uint32, _U64P),
    "rsmi_dev_name_get": (c_uint32, c_char_p, c_size_t),
    "rsmi_dev_serial_number_get": (c_uint32, c_char_p, c_uint32),
    "rsmi_dev_memory_total_get": (c_uint32, c_uint32, _U64P),
    "rsmi_dev_memory_usage_get": (c_uint32, c_uint32, _U64P),
    "rsmi_dev_busy_percent_get": (c_uint32, _U32P),
    # "the percentage of time that any device memory is being used" (rocm_smi.h): busy time.
    "rsmi_dev_memory_busy_percent_get": (c_uint32, _U32P),
    "rsmi_dev_temp_metric_get": (c_uint32, c_uint32, c_uint32, POINTER(c_int64)),
    "rsmi_dev_power_get": (c_uint32, _U64P, _U32P),
    "rsmi_dev_power_ave_get": (c_uint32, c_uint32, _U64P),
    # rsmi_gpu_block_t holds 1 << 63, so the compiler makes it 8 bytes wide.
    "rsmi_dev_ecc_count_get": (c_uint32, c_uint64, POINTER(ErrorCount)),
    # The card's health figures (issue 29).
    "rsmi_dev_energy_count_get": (c_uint32, _U64P, POINTER(c_float), _U64P),
    "rsmi_dev_gpu_clk_freq_get": (c_uint32, c_uint32, POINTER(Frequencies)),
    "rsmi_dev_pci_replay_counter_get": (c_uint32, _U64P),
    "rsmi_dev_memory_reserved_pages_get": (c_uint32, _U32P, POINTER(RetiredPage)),
    # Links and placement (R-X3); RSMI_IO_LINK_TYPE holds 0xFFFFFFFF, so 4 bytes, unsigned.
    "rsmi_topo_get_numa_node_number": (c_uint32, _U32P),
    "rsmi_topo_get_link_type": (c_uint32, c_uint32, _U64P, _U32P),
    "rsmi_compute_process_info_get": (POINTER(ProcessInfo), _U32P),
    "rsmi_compute_process_gpus_get": (c_uint32, _U32P, _U32P),
    "rsmi_compute_process_info_by_device_get": (c_uint32, c_uint32, POINTER(ProcessInfo)),
    "rsmi_compute_process_info_by_pid_get_v2": (c_uint32, POINTER(ProcessInfoV2)),
}

# -- libhydmi (virtual DCUs) -------------------------------------------------------------------

DMI_NAME_SIZE = 256
DMI_SUCCESS = 0
DMI_NOT_SUPPORTED = 6
DMI_DEVICE_NOT_SUPPORT = 14
DMI_VDEV_NOT_EXIST = 15
DMI_PERMISSION = 19
DMI_NOT_FOUND = 23
DMI_NOT_YET_IMPLEMENTED = 31
DMI_STATUS: Mapping[int, str] = {
    0: "SUCCESS",
    1: "ERROR",
    2: "NO_MEMORY",
    3: "OPEN_MKFD_FAILED",
    4: "MKFD_ALREADY_OPENED",
    5: "SYS_NODE_NOT_EXIST",
    6: "NOT_SUPPORTED",
    7: "MKFD_NOT_OPENED",
    10: "INVALID_ARGUMENTS",
    12: "QUERY_VDEV_INFO_FAILED",
    13: "ERROR_NOT_INITIALIZED",
    14: "DEVICE_NOT_SUPPORT",
    15: "VDEV_NOT_EXIST",
    17: "DEVICE_BUSY",
    18: "FILE_ERROR",
    19: "PERMISSION",
    23: "NOT_FOUND",
    24: "INSUFFICIENT_SIZE",
    31: "NOT_YET_IMPLEMENTED",
    32: "UNKNOWN_ERROR",
}


def dmi_status_name(code: int) -> str:
    return f"DMI_STATUS_{DMI_STATUS.get(code, 'UNKNOWN_ERROR')}"


class DmiDeviceInfo(Structure):
    """dmiDeviceInfo: memory in bytes; for a virtual device, its bound container and the index
    of the physical card it is carved from."""

    _fields_ = (
        ("name", c_char * DMI_NAME_SIZE),
        ("compute_unit_count", c_int),
        ("global_mem_size", c_size_t),
        ("usage_mem_size", c_size_t),
        ("container_id", c_uint64),
        ("device_id", c_int),
    )


_INTP = POINTER(c_int)

DMI_PROTOTYPES: Mapping[str, Sequence[Any]] = {
    "dmiGetDeviceCount": (_INTP,),
    "dmiGetVDeviceCount": (_INTP,),
    "dmiGetVDeviceInfo": (c_int, POINTER(DmiDeviceInfo)),
    "dmiGetVDevBusyPercent": (c_int, _INTP),
}

# -- libhydmi_mig (multi-instance, NVML-named) --------------------------------------------------

MIG_SUCCESS = 0
MIG_INVALID_ARGUMENT = 2
MIG_NOT_SUPPORTED = 3
MIG_NO_PERMISSION = 4
MIG_NOT_FOUND = 6
MIG_INSUFFICIENT_SIZE = 7
MIG_FUNCTION_NOT_FOUND = 13
MIG_DEPRECATED = 26
MIG_ENABLE = 1
PCI_BUS_ID_BUFFER_SIZE = 32


def mig_status_name(code: int) -> str:
    names = {
        0: "SUCCESS",
        1: "UNINITIALIZED",
        2: "INVALID_ARGUMENT",
        3: "NOT_SUPPORTED",
        4: "NO_PERMISSION",
        6: "NOT_FOUND",
        7: "INSUFFICIENT_SIZE",
        9: "DRIVER_NOT_LOADED",
        13: "FUNCTION_NOT_FOUND",
        999: "UNKNOWN",
    }
    return f"DMI_MIG_{names.get(code, 'ERROR_' + str(code))}"


class MigPciInfo(Structure):
    """Hygon's nvmlPciInfo: four numbers, then the bus id (not NVML's layout)."""

    _fields_ = (
        ("pci_domain", c_uint32),
        ("pci_bus", c_uint32),
        ("pci_device", c_uint32),
        ("pci_function", c_uint32),
        ("bus_id", c_char * PCI_BUS_ID_BUFFER_SIZE),
    )


class MigMemory(Structure):
    """nvmlMemory_t as NVML lays it out, in bytes (the entry point is undeclared by Hygon)."""

    _fields_ = (("total", c_uint64), ("free", c_uint64), ("used", c_uint64))


class MigUtilization(Structure):
    """nvmlUtilization_t: percent of the sample period (undeclared by Hygon, exported)."""

    _fields_ = (("gpu", c_uint32), ("memory", c_uint32))


_HANDLE = c_void_p
_UINTP = POINTER(c_uint32)

MIG_PROTOTYPES: Mapping[str, Sequence[Any]] = {
    "nvmlGetSystemMigMode": (_UINTP, _UINTP),
    "nvmlDeviceGetCount": (_UINTP,),
    "nvmlDeviceGetHandleByPciBusId": (c_char_p, POINTER(_HANDLE)),
    "nvmlDeviceGetIndex": (_HANDLE, _UINTP),
    "nvmlDeviceGetPciInfo": (_HANDLE, POINTER(MigPciInfo)),
    "nvmlDeviceGetMaxMigDeviceCount": (_HANDLE, _UINTP),
    "nvmlDeviceGetMigDeviceHandleByIndex": (_HANDLE, c_uint32, POINTER(_HANDLE)),
    "nvmlDeviceGetGpuInstanceId": (_HANDLE, _UINTP),
    "nvmlDeviceGetComputeInstanceId": (_HANDLE, _UINTP),
    "nvmlDeviceGetMemoryInfo": (_HANDLE, POINTER(MigMemory)),
    "nvmlDeviceGetUtilizationRates": (_HANDLE, POINTER(MigUtilization)),
}


class Bound:
    """One loaded library's entry points, each a ctypes function or None when not exported.

    Functions are looked up on this library's own handle (it was dlopened RTLD_LOCAL, and
    libhydmi_mig RTLD_DEEPBIND too, so its own internal calls stay its own), so a name another
    library in the process also exports (libhydmi_mig's `nvml*`) is always this library's."""

    def __init__(self, lib: ctypes.CDLL, prototypes: Mapping[str, Sequence[Any]]) -> None:
        self.lib = lib
        self._fns: dict[str, Callable[..., int] | None] = {}
        for name, argtypes in prototypes.items():
            try:
                fn = getattr(lib, name)
            except AttributeError:
                self._fns[name] = None
                continue
            fn.argtypes = list(argtypes)
            fn.restype = c_uint32
            self._fns[name] = fn

    def get(self, name: str) -> Callable[..., int] | None:
        return self._fns.get(name)


def c_text(buffer: Any) -> str:
    """A NUL-terminated C string from a char array, decoded leniently (a vendor's bytes)."""
    raw = bytes(buffer).split(b"\0", 1)[0]
    return raw.decode("utf-8", "replace")
