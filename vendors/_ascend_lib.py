"""Our own ctypes declarations for Huawei's DCMI (`libdcmi.so`), written from the facts of the
public header `dcmi_interface_api.h` (Ascend/mind-cluster `component/ascend-common/devmanager/
dcmi/`, and the trimmed copy in Syllo/nvtop `include/ascend/`) and Huawei's API reference. Only
what the ascend backend calls is declared; the header itself is not copied.

Every entry point answers an `int`: 0 for success, a negative DCMI code otherwise (-8001…-8255).
A symbol the installed library does not export is answered here with FUNCTION_NOT_FOUND
(-99998, the code Huawei's own Go wrapper uses for it), so an older driver that lacks one call
costs that figure only, never the backend.

Layouts are LP64 (x86-64 and aarch64, the platforms DCMI ships for); the tests assert every
struct below against gcc's sizeof/offsetof on a header written from the same facts.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping
from ctypes import (
    POINTER,
    Structure,
    byref,
    c_char,
    c_float,
    c_int,
    c_ubyte,
    c_uint,
    c_ulong,
    c_ulonglong,
    c_ushort,
    c_void_p,
    sizeof,
)
from typing import Any

from devicemanager.backend import BackendUnavailable, Library
from vendors._common import load

SUCCESS = 0
# Our answer for a symbol the library does not export (Huawei's Go wrapper: FUNCTION_NOT_FOUND).
FUNCTION_NOT_FOUND = -99998

MAX_CARD_NUM = 64  # dcmi_get_card_list's documented maximum
MAX_CHIP_NAME_LEN = 32
DIE_ID_COUNT = 5
# dcmi_get_device_errorcode_v2's list length: the most error codes the API reports at once
# (Huawei's samples' ERROR_CODE_MAX_NUM, the driver's own bound).
MAX_ERROR_CODE_COUNT = 128
VDEV_RES_NAME_LEN = 16
VDEV_FOR_RESERVE = 32
VDEV_SIZE = 20
SOC_SPLIT_MAX = 32  # vNPUs one NPU can be split into
DRIVER_VERSION_LEN = 64

NPU_TYPE = 0  # enum dcmi_unit_type: NPU 0, MCU 1, CPU 2
VDIE = 1  # enum dcmi_die_type: NDIE 0, VDIE 1 (the chip's own identity)
INPUT_TYPE_AICORE = 2  # dcmi_get_device_utilization_rate's input_type for AI cores
# The same call's input types for the HBM's bandwidth and the vector cores (issue 41; the
# header's input types: DDR 1, AICORE 2, AICPU 3, CTRLCPU 4, DDR_BANDWIDTH 5, HBM 6,
# HBM_BANDWIDTH 10, VECTORCORE 12).
INPUT_TYPE_HBM_BANDWIDTH = 10
INPUT_TYPE_VECTORCORE = 12
# enum dcmi_device_type of dcmi_get_device_ecc_info: which memory's ECC.
ECC_DDR = 0
ECC_HBM = 2
# enum dcmi_freq_type of dcmi_get_device_frequency (MHz): DDR, HBM, the AI cores' current.
FREQ_DDR = 1
FREQ_HBM = 6
FREQ_AICORE_CURRENT = 7
MAIN_CMD_VDEV_MNG = 52  # enum dcmi_main_cmd: DCMI_MAIN_CMD_VDEV_MNG
VDEV_SUB_RESOURCE = 0  # one vNPU's template and resources (dcmi_vdev_query_stru)
VDEV_SUB_TOTAL = 1  # the vNPUs an NPU is split into (dcmi_soc_total_resource)
# One vNPU's activity (AI-core utilization, memory total/free). Huawei's own Go wrapper uses 5;
# the enum in another public copy of the header evaluates to 4. We follow Huawei's code.
VDEV_SUB_ACTIVITY = 5

# The process list: Huawei documents at most 32 processes per NPU, and the library writes as
# many rows as it has whatever the caller's count says. The read leaves a guard tail after the
# 32 rows it accepts, filled with a pattern; a library that writes into it had more processes
# than the read accepts (`truncated`), and its overrun lands in memory this module owns.
PROCESS_ROWS = 32
GUARD_ROWS = 480
GUARD_BYTE = 0xA5


class ChipInfo(Structure):
    _fields_ = (
        ("chip_type", c_char * MAX_CHIP_NAME_LEN),  # "Ascend"
        ("chip_name", c_char * MAX_CHIP_NAME_LEN),  # "910B2", "310P3"
        ("chip_ver", c_char * MAX_CHIP_NAME_LEN),
        ("aicore_cnt", c_uint),
    )


class DieId(Structure):
    _fields_ = (("soc_die", c_uint * DIE_ID_COUNT),)


class EccInfo(Structure):
    """struct dcmi_ecc_info: whether ECC is on, single- and double-bit error counts (now and in
    total), pages isolated for each and pages to be isolated next (36 bytes)."""

    _fields_ = (
        ("enable_flag", c_int),
        ("single_bit_error_cnt", c_uint),
        ("double_bit_error_cnt", c_uint),
        ("total_single_bit_error_cnt", c_uint),
        ("total_double_bit_error_cnt", c_uint),
        ("single_bit_isolated_pages_cnt", c_uint),
        ("double_bit_isolated_pages_cnt", c_uint),
        ("single_bit_next_isolated_pages_cnt", c_uint),
        ("double_bit_next_isolated_pages_cnt", c_uint),
    )


class HbmInfo(Structure):
    _fields_ = (
        ("memory_size", c_ulonglong),  # MB
        ("freq", c_uint),  # MHz
        ("memory_usage", c_ulonglong),  # MB
        ("temp", c_int),  # °C
        ("bandwith_util_rate", c_uint),  # percent (the header's spelling)
    )


class MemoryInfoV3(Structure):
    _fields_ = (
        ("memory_size", c_ulonglong),  # MB
        ("memory_available", c_ulonglong),  # MB: free + hugepages_free * hugepagesize
        ("freq", c_uint),
        ("hugepagesize", c_ulong),  # KB
        ("hugepages_total", c_ulong),
        ("hugepages_free", c_ulong),
        ("utiliza", c_uint),  # percent
        ("reserve", c_ubyte * 60),  # the header's comment says 96 bytes in all; LP64 makes 112
    )


class ProcMemInfo(Structure):
    _fields_ = (
        ("proc_id", c_int),  # host PID
        ("proc_mem_usage", c_ulong),  # bytes, per the header and Huawei's API reference
    )


class BaseResource(Structure):
    _fields_ = (
        ("token", c_ulonglong),
        ("token_max", c_ulonglong),
        ("task_timeout", c_ulonglong),
        ("vfg_id", c_uint),
        ("vip_mode", c_ubyte),
        ("reserved", c_ubyte * (VDEV_FOR_RESERVE - 1)),
    )


class ComputingResource(Structure):
    _fields_ = (
        ("aic", c_float),
        ("aiv", c_float),
        ("dsa", c_ushort),
        ("rtsq", c_ushort),
        ("acsq", c_ushort),
        ("cdqm", c_ushort),
        ("c_core", c_ushort),
        ("ffts", c_ushort),
        ("sdma", c_ushort),
        ("pcie_dma", c_ushort),
        ("memory_size", c_ulonglong),  # MB
        ("event_id", c_uint),
        ("notify_id", c_uint),
        ("stream_id", c_uint),
        ("model_id", c_uint),
        ("topic_schedule_aicpu", c_ushort),
        ("host_ctrl_cpu", c_ushort),
        ("host_aicpu", c_ushort),
        ("device_aicpu", c_ushort),
        ("topic_ctrl_cpu_slot", c_ushort),
        ("vdev_aicore_utilization", c_uint),  # percent of the vNPU's own AI cores
        ("vdev_memory_total", c_ulonglong),  # KB
        ("vdev_memory_free", c_ulonglong),  # KB
        ("reserved", c_ubyte * (VDEV_FOR_RESERVE - VDEV_SIZE)),
    )


class MediaResource(Structure):
    _fields_ = (
        ("jpegd", c_float),
        ("jpege", c_float),
        ("vpc", c_float),
        ("vdec", c_float),
        ("pngd", c_float),
        ("venc", c_float),
        ("reserved", c_ubyte * VDEV_FOR_RESERVE),
    )


class VdevQueryInfo(Structure):
    _fields_ = (
        ("name", c_char * VDEV_RES_NAME_LEN),  # the template, e.g. "vir04"
        ("status", c_uint),
        ("is_container_used", c_uint),
        ("vfid", c_uint),
        ("vfg_id", c_uint),
        ("container_id", c_ulonglong),
        ("base", BaseResource),
        ("computing", ComputingResource),
        ("media", MediaResource),
    )


class VdevQuery(Structure):
    """dcmi_vdev_query_stru: vdev_id in, the vNPU's facts out (264 bytes on LP64)."""

    _fields_ = (("vdev_id", c_uint), ("query_info", VdevQueryInfo))


class SocTotalResource(Structure):
    _fields_ = (
        ("vdev_num", c_uint),
        ("vdev_id", c_uint * SOC_SPLIT_MAX),
        ("vfg_num", c_uint),
        ("vfg_bitmap", c_uint),
        ("base", BaseResource),
        ("computing", ComputingResource),
        ("media", MediaResource),
    )


class PcieInfoAll(Structure):
    """dcmi_pcie_info_all: the NPU's PCI ids and its address (domain, bus, device, function),
    then reserved room (64 bytes, as the header's comment says)."""

    _fields_ = [
        ("venderid", c_uint),
        ("subvenderid", c_uint),
        ("deviceid", c_uint),
        ("subdeviceid", c_uint),
        ("domain", c_int),
        ("bdf_busid", c_uint),
        ("bdf_deviceid", c_uint),
        ("bdf_funcid", c_uint),
        ("reserve", ctypes.c_ubyte * 32),
    ]


P = POINTER
# name -> argtypes; every entry point returns int.
PROTOTYPES: Mapping[str, tuple[Any, ...]] = {
    "dcmi_init": (),
    "dcmi_get_driver_version": (ctypes.c_char_p, c_uint),
    "dcmi_get_card_list": (P(c_int), P(c_int), c_int),
    "dcmi_get_device_num_in_card": (c_int, P(c_int)),
    "dcmi_get_device_type": (c_int, c_int, P(c_int)),
    "dcmi_get_device_logic_id": (P(c_int), c_int, c_int),
    "dcmi_get_device_phyid_from_logicid": (c_uint, P(c_uint)),
    "dcmi_get_device_die_v2": (c_int, c_int, c_int, P(DieId)),
    "dcmi_get_device_die": (c_int, c_int, P(DieId)),
    "dcmi_get_device_chip_info": (c_int, c_int, P(ChipInfo)),
    "dcmi_get_device_hbm_info": (c_int, c_int, P(HbmInfo)),
    "dcmi_get_device_memory_info_v3": (c_int, c_int, P(MemoryInfoV3)),
    "dcmi_get_device_utilization_rate": (c_int, c_int, c_int, P(c_uint)),
    "dcmi_get_device_temperature": (c_int, c_int, P(c_int)),
    "dcmi_get_device_power_info": (c_int, c_int, P(c_int)),
    "dcmi_get_device_health": (c_int, c_int, P(c_uint)),
    "dcmi_get_device_errorcode_v2": (c_int, c_int, P(c_int), P(c_uint), c_uint),
    "dcmi_get_device_ecc_info": (c_int, c_int, c_int, P(EccInfo)),
    "dcmi_get_device_frequency": (c_int, c_int, c_int, P(c_uint)),
    "dcmi_get_device_resource_info": (c_int, c_int, P(ProcMemInfo), P(c_int)),
    "dcmi_get_device_info": (c_int, c_int, c_int, c_uint, c_void_p, P(c_uint)),
    # Links and placement (R-X3).
    "dcmi_get_device_pcie_info_v2": (c_int, c_int, P(PcieInfoAll)),
    "dcmi_get_topo_info_by_device_id": (c_int, c_int, c_int, c_int, P(c_int)),
}

DCMI = Library(
    "dcmi",
    ("libdcmi.so",),
    directories=(
        "/usr/local/Ascend/driver/lib64/driver",
        "/usr/local/Ascend/driver/lib64",
        "/usr/local/dcmi",
    ),
)


def _text(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


class Dcmi:
    """The entry points of one loaded libdcmi.so. Each call answers (code, value); value is
    None unless code is SUCCESS. Nothing here raises for a DCMI error."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self._lib = lib
        self._fns: dict[str, Any] = {}
        for name, argtypes in PROTOTYPES.items():
            fn = getattr(lib, name, None)
            if fn is not None:
                fn.restype = c_int
                fn.argtypes = argtypes
            self._fns[name] = fn

    @classmethod
    def load(cls, configured: Mapping[str, str]) -> Dcmi:
        dcmi = cls(load(DCMI, configured))
        if dcmi._fns["dcmi_init"] is None or dcmi._fns["dcmi_get_card_list"] is None:
            raise BackendUnavailable("libdcmi.so exports no dcmi_init or dcmi_get_card_list")
        return dcmi

    def exports(self, name: str) -> bool:
        return self._fns.get(name) is not None

    def _call(self, name: str, *args: Any) -> int:
        fn = self._fns[name]
        if fn is None:
            return FUNCTION_NOT_FOUND
        return int(fn(*args))

    # -- library -------------------------------------------------------------------------------

    def init(self) -> int:
        return self._call("dcmi_init")

    def driver_version(self) -> tuple[int, str | None]:
        buf = ctypes.create_string_buffer(DRIVER_VERSION_LEN)
        code = self._call("dcmi_get_driver_version", buf, DRIVER_VERSION_LEN)
        return code, _text(buf.raw) if code == SUCCESS else None

    # -- enumeration ---------------------------------------------------------------------------

    def card_list(self) -> tuple[int, list[int] | None]:
        num, cards = c_int(0), (c_int * MAX_CARD_NUM)()
        code = self._call("dcmi_get_card_list", byref(num), cards, MAX_CARD_NUM)
        if code != SUCCESS:
            return code, None
        # A count beyond the list the library was given is clipped: it cannot have written more.
        return code, list(cards[: max(0, min(num.value, MAX_CARD_NUM))])

    def _int_out(self, name: str, *args: Any, unsigned: bool = False) -> tuple[int, int | None]:
        out = c_uint(0) if unsigned else c_int(0)
        code = self._call(name, *args, byref(out))
        return code, int(out.value) if code == SUCCESS else None

    def device_num_in_card(self, card: int) -> tuple[int, int | None]:
        return self._int_out("dcmi_get_device_num_in_card", card)

    def device_type(self, card: int, device: int) -> tuple[int, int | None]:
        return self._int_out("dcmi_get_device_type", card, device)

    def logic_id(self, card: int, device: int) -> tuple[int, int | None]:
        out = c_int(0)
        code = self._call("dcmi_get_device_logic_id", byref(out), card, device)
        return code, int(out.value) if code == SUCCESS else None

    def phy_id(self, logic: int) -> tuple[int, int | None]:
        return self._int_out("dcmi_get_device_phyid_from_logicid", logic, unsigned=True)

    # -- identity ------------------------------------------------------------------------------

    def die_v2(self, card: int, device: int) -> tuple[int, list[int] | None]:
        die = DieId()
        code = self._call("dcmi_get_device_die_v2", card, device, VDIE, byref(die))
        return code, list(die.soc_die) if code == SUCCESS else None

    def die_v1(self, card: int, device: int) -> tuple[int, list[int] | None]:
        die = DieId()
        code = self._call("dcmi_get_device_die", card, device, byref(die))
        return code, list(die.soc_die) if code == SUCCESS else None

    def chip_info(self, card: int, device: int) -> tuple[int, dict[str, Any] | None]:
        info = ChipInfo()
        code = self._call("dcmi_get_device_chip_info", card, device, byref(info))
        if code != SUCCESS:
            return code, None
        return code, {
            "chip_type": _text(info.chip_type),
            "chip_name": _text(info.chip_name),
            "chip_ver": _text(info.chip_ver),
            "aicore_cnt": int(info.aicore_cnt),
        }

    # -- figures -------------------------------------------------------------------------------

    def hbm_info(self, card: int, device: int) -> tuple[int, dict[str, Any] | None]:
        info = HbmInfo()
        code = self._call("dcmi_get_device_hbm_info", card, device, byref(info))
        if code != SUCCESS:
            return code, None
        return code, {
            "memory_size": int(info.memory_size),
            "memory_usage": int(info.memory_usage),
            "freq": int(info.freq),
            "temp": int(info.temp),
            "bandwith_util_rate": int(info.bandwith_util_rate),
        }

    def memory_info_v3(self, card: int, device: int) -> tuple[int, dict[str, Any] | None]:
        info = MemoryInfoV3()
        code = self._call("dcmi_get_device_memory_info_v3", card, device, byref(info))
        if code != SUCCESS:
            return code, None
        return code, {
            "memory_size": int(info.memory_size),
            "memory_available": int(info.memory_available),
            "freq": int(info.freq),
            "hugepagesize": int(info.hugepagesize),
            "hugepages_total": int(info.hugepages_total),
            "hugepages_free": int(info.hugepages_free),
            "utiliza": int(info.utiliza),
        }

    def aicore_utilization(self, card: int, device: int) -> tuple[int, int | None]:
        return self.utilization(card, device, INPUT_TYPE_AICORE)

    def utilization(self, card: int, device: int, input_type: int) -> tuple[int, int | None]:
        return self._int_out(
            "dcmi_get_device_utilization_rate", card, device, input_type, unsigned=True
        )

    def temperature(self, card: int, device: int) -> tuple[int, int | None]:
        return self._int_out("dcmi_get_device_temperature", card, device)

    def power(self, card: int, device: int) -> tuple[int, int | None]:
        return self._int_out("dcmi_get_device_power_info", card, device)

    def health(self, card: int, device: int) -> tuple[int, int | None]:
        return self._int_out("dcmi_get_device_health", card, device, unsigned=True)

    def error_codes(self, card: int, device: int) -> tuple[int, dict[str, Any] | None]:
        """The error codes the NPU reports now (at most MAX_ERROR_CODE_COUNT, the header's
        list length) and the count the library answered, which may say more or be negative."""
        count = c_int(0)
        codes = (c_uint * MAX_ERROR_CODE_COUNT)()
        code = self._call(
            "dcmi_get_device_errorcode_v2", card, device, byref(count), codes, MAX_ERROR_CODE_COUNT
        )
        if code != SUCCESS:
            return code, None
        written = max(0, min(count.value, MAX_ERROR_CODE_COUNT))
        return code, {"count": int(count.value), "codes": [int(c) for c in codes[:written]]}

    def ecc_info(self, card: int, device: int, kind: int) -> tuple[int, dict[str, Any] | None]:
        info = EccInfo()
        code = self._call("dcmi_get_device_ecc_info", card, device, kind, byref(info))
        if code != SUCCESS:
            return code, None
        return code, {name: int(getattr(info, name)) for name, _ in EccInfo._fields_}

    def frequency(self, card: int, device: int, kind: int) -> tuple[int, int | None]:
        return self._int_out("dcmi_get_device_frequency", card, device, kind, unsigned=True)  # MHz

    # -- links and placement (R-X3) ---------------------------------------------------------

    def pcie_info(self, card: int, device: int) -> tuple[int, dict[str, Any] | None]:
        """The NPU's PCI address, as the card's PCI device in sysfs is named by it."""
        info = PcieInfoAll()
        code = self._call("dcmi_get_device_pcie_info_v2", card, device, byref(info))
        if code != SUCCESS:
            return code, None
        return code, {
            name: int(getattr(info, name))
            for name in (
                "venderid",
                "deviceid",
                "domain",
                "bdf_busid",
                "bdf_deviceid",
                "bdf_funcid",
            )
        }

    def topo(self, card1: int, dev1: int, card2: int, dev2: int) -> tuple[int, int | None]:
        """How two NPUs are joined: a DCMI_TOPO_TYPE_* value."""
        return self._int_out("dcmi_get_topo_info_by_device_id", card1, dev1, card2, dev2)

    # -- per process ---------------------------------------------------------------------------

    def resource_info(self, card: int, device: int) -> tuple[int, dict[str, Any] | None]:
        """The device's processes, read into PROCESS_ROWS rows followed by a guard tail.

        Answers {count, capacity, guard_written, rows}: `rows` only when the list is complete
        (0 <= count <= capacity and the guard untouched), so a partial list never leaves here
        looking like a whole one."""
        rows = (ProcMemInfo * (PROCESS_ROWS + GUARD_ROWS))()
        ctypes.memset(rows, GUARD_BYTE, sizeof(rows))
        count = c_int(PROCESS_ROWS)  # the library treats this as output only
        code = self._call("dcmi_get_device_resource_info", card, device, rows, byref(count))
        if code != SUCCESS:
            return code, None
        offset = PROCESS_ROWS * sizeof(ProcMemInfo)
        guard = ctypes.string_at(ctypes.addressof(rows) + offset, GUARD_ROWS * sizeof(ProcMemInfo))
        written = guard != bytes([GUARD_BYTE]) * len(guard)
        n = int(count.value)
        answer: dict[str, Any] = {
            "count": n,
            "capacity": PROCESS_ROWS,
            "guard_written": written,
        }
        if not written and 0 <= n <= PROCESS_ROWS:
            answer["rows"] = [
                {"proc_id": int(r.proc_id), "proc_mem_usage": int(r.proc_mem_usage)}
                for r in rows[:n]
            ]
        return code, answer

    # -- vNPU ----------------------------------------------------------------------------------

    def _device_info(self, card: int, device: int, sub: int, buf: Structure) -> int:
        size = c_uint(sizeof(buf))
        return self._call(
            "dcmi_get_device_info", card, device, MAIN_CMD_VDEV_MNG, sub, byref(buf), byref(size)
        )

    def vdev_total(self, card: int, device: int) -> tuple[int, dict[str, Any] | None]:
        total = SocTotalResource()
        code = self._device_info(card, device, VDEV_SUB_TOTAL, total)
        if code != SUCCESS:
            return code, None
        n = int(total.vdev_num)
        # A count past the array is recorded as the library said it; parse() refuses it.
        return code, {
            "vdev_num": n,
            "vdev_id": [int(v) for v in total.vdev_id[: max(0, min(n, SOC_SPLIT_MAX))]],
        }

    def vdev_resource(self, card: int, device: int, vdev: int) -> tuple[int, dict[str, Any] | None]:
        query = VdevQuery(vdev_id=vdev)
        code = self._device_info(card, device, VDEV_SUB_RESOURCE, query)
        if code != SUCCESS:
            return code, None
        info = query.query_info
        return code, {
            "vdev_id": int(query.vdev_id),
            "name": _text(info.name),
            "status": int(info.status),
            "is_container_used": int(info.is_container_used),
            "aic": float(info.computing.aic),
            "memory_size": int(info.computing.memory_size),  # MB
        }

    def vdev_activity(self, card: int, device: int, vdev: int) -> tuple[int, dict[str, Any] | None]:
        query = VdevQuery(vdev_id=vdev)
        code = self._device_info(card, device, VDEV_SUB_ACTIVITY, query)
        if code != SUCCESS:
            return code, None
        computing = query.query_info.computing
        return code, {
            "vdev_id": int(query.vdev_id),
            "vdev_aicore_utilization": int(computing.vdev_aicore_utilization),
            "vdev_memory_total": int(computing.vdev_memory_total),  # KB
            "vdev_memory_free": int(computing.vdev_memory_free),  # KB
        }
