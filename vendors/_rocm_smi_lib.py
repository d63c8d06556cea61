"""Our ctypes declarations for AMD's upstream ROCm SMI library (`librocm_smi64`), written from
the facts of ROCm/rocm_smi_lib `include/rocm_smi/rocm_smi.h` (never copied from it).

Only what the amd backend's process-list fallback needs: init/shutdown, the device count, each
device's PCI id (to find the amdsmi processor it is), and the three compute-process queries.
Self-contained on purpose: Hygon ships a fork of this library with extensions of its own, and
its backend keeps its own declarations.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

# rsmi_status_t (rocm_smi.h): an enum counted from 0.
SUCCESS = 0
INVALID_ARGS = 1
NOT_SUPPORTED = 2
FILE_ERROR = 3
PERMISSION = 4
OUT_OF_RESOURCES = 5
INTERNAL_EXCEPTION = 6
INPUT_OUT_OF_BOUNDS = 7
INIT_ERROR = 8
NOT_YET_IMPLEMENTED = 9
NOT_FOUND = 10
INSUFFICIENT_SIZE = 11
INTERRUPT = 12
UNEXPECTED_SIZE = 13
NO_DATA = 14
UNEXPECTED_DATA = 15
BUSY = 16
REFCOUNT_OVERFLOW = 17
SETTING_UNAVAILABLE = 18
AMDGPU_RESTART_ERR = 19
UNKNOWN_ERROR = 0xFFFFFFFF

# The cu_occupancy value of a process on a GFX revision that gives none (CU_OCCUPANCY_INVALID).
CU_OCCUPANCY_INVALID = 0xFFFFFFFF


class RsmiProcessInfo(ctypes.Structure):
    """rsmi_process_info_t: natural alignment, 32 bytes on LP64 (4 bytes of padding after
    `pasid` and at the end). `vram_usage` in bytes, `sdma_usage` in microseconds,
    `cu_occupancy` a percent of the device's compute units, or CU_OCCUPANCY_INVALID."""

    _fields_ = (
        ("process_id", ctypes.c_uint32),
        ("pasid", ctypes.c_uint32),
        ("vram_usage", ctypes.c_uint64),
        ("sdma_usage", ctypes.c_uint64),
        ("cu_occupancy", ctypes.c_uint32),
    )


class RsmiError(Exception):
    """An rsmi call answered something other than RSMI_STATUS_SUCCESS."""

    def __init__(self, name: str, code: int) -> None:
        super().__init__(f"{name} answered {code}")
        self.name = name
        self.code = code


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    pid: int
    pasid: int
    vram_bytes: int
    sdma_us: int
    cu_occupancy: int


def _info(raw: RsmiProcessInfo) -> ProcessInfo:
    return ProcessInfo(
        int(raw.process_id),
        int(raw.pasid),
        int(raw.vram_usage),
        int(raw.sdma_usage),
        int(raw.cu_occupancy),
    )


_U32P = ctypes.POINTER(ctypes.c_uint32)
_U64P = ctypes.POINTER(ctypes.c_uint64)
_INFOP = ctypes.POINTER(RsmiProcessInfo)

# name -> (argtypes); every entry point returns rsmi_status_t (uint32).
PROTOTYPES: dict[str, tuple[object, ...]] = {
    "rsmi_init": (ctypes.c_uint64,),
    "rsmi_shut_down": (),
    "rsmi_num_monitor_devices": (_U32P,),
    "rsmi_dev_pci_id_get": (ctypes.c_uint32, _U64P),
    "rsmi_compute_process_info_get": (_INFOP, _U32P),
    "rsmi_compute_process_gpus_get": (ctypes.c_uint32, _U32P, _U32P),
    "rsmi_compute_process_info_by_device_get": (ctypes.c_uint32, ctypes.c_uint32, _INFOP),
}

# How many times a list is asked again when it grew between the size probe and the read.
ATTEMPTS = 3
# Room for processes that start between the size probe and the read.
SLACK = 8


class RocmSmi:
    """librocm_smi64 through our declarations. Every method raises RsmiError on a failed call."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self._lib = lib
        self._fn = {}
        for name, argtypes in PROTOTYPES.items():
            fn = getattr(lib, name)  # AttributeError: the library lacks an entry point we need
            fn.argtypes = list(argtypes)
            fn.restype = ctypes.c_uint32
            self._fn[name] = fn

    def _call(self, name: str, *args: object) -> None:
        code = int(self._fn[name](*args))
        if code != SUCCESS:
            raise RsmiError(name, code)

    def init(self) -> None:
        self._call("rsmi_init", ctypes.c_uint64(0))

    def shut_down(self) -> None:
        self._call("rsmi_shut_down")

    def device_count(self) -> int:
        count = ctypes.c_uint32(0)
        self._call("rsmi_num_monitor_devices", ctypes.byref(count))
        return int(count.value)

    def pci_id(self, device: int) -> int:
        """The device's BDFID: domain, bus, device, function, and (bits 31:28) the partition."""
        value = ctypes.c_uint64(0)
        self._call("rsmi_dev_pci_id_get", ctypes.c_uint32(device), ctypes.byref(value))
        return int(value.value)

    def processes(self) -> list[ProcessInfo]:
        """Every process with the KFD open, host-wide: a size probe, then the read, asked again
        when the list outgrew the buffer in between (INSUFFICIENT_SIZE after ATTEMPTS)."""
        name = "rsmi_compute_process_info_get"
        code = INSUFFICIENT_SIZE
        for _ in range(ATTEMPTS):
            count = ctypes.c_uint32(0)
            self._call(name, None, ctypes.byref(count))
            room = int(count.value) + SLACK
            buffer = (RsmiProcessInfo * room)()
            count = ctypes.c_uint32(room)
            code = int(self._fn[name](buffer, ctypes.byref(count)))
            if code == SUCCESS:
                return [_info(buffer[i]) for i in range(min(int(count.value), room))]
            if code != INSUFFICIENT_SIZE:
                break
        raise RsmiError(name, code)

    def gpus_of(self, pid: int) -> list[int]:
        """The device indices a process holds."""
        name = "rsmi_compute_process_gpus_get"
        count = ctypes.c_uint32(0)
        self._call(name, ctypes.c_uint32(pid), None, ctypes.byref(count))
        room = int(count.value) + SLACK
        indices = (ctypes.c_uint32 * room)()
        count = ctypes.c_uint32(room)
        self._call(name, ctypes.c_uint32(pid), indices, ctypes.byref(count))
        return [int(indices[i]) for i in range(min(int(count.value), room))]

    def process_on(self, pid: int, device: int) -> ProcessInfo:
        """One process's figures on one device only."""
        raw = RsmiProcessInfo()
        self._call(
            "rsmi_compute_process_info_by_device_get",
            ctypes.c_uint32(pid),
            ctypes.c_uint32(device),
            ctypes.byref(raw),
        )
        return _info(raw)
