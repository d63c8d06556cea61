"""Huawei Ascend NPUs through DCMI (`libdcmi.so`), by our own ctypes declarations
(vendors/_ascend_lib.py).

`read()` walks the cards DCMI lists and the NPUs on each (two NPUs can share one card: an
Atlas 300I Duo carries two 310P3 chips), and writes down what each entry point answered under
its C name; a failed call is {"error": <name>, "code": <negative DCMI code>}. `parse()` is pure.

Identity. DCMI addresses an NPU by (card, device); the driver also numbers it by a logic id
(0..N-1 across the node) and a physical id (its device node, /dev/davinci<phy>). The card's
canonical id is its VDIE die id as GPUStack records it (five 32-bit words, upper-case hex,
unpadded, space-separated: "E0F4EE64 802061B1 …"). Aliases: HAMi's Ascend device plugin records
the same die through Huawei's Go wrapper (each word zero-padded to eight digits, joined by "-");
Huawei's Kubernetes device plugin names the NPU `Ascend910-<phy>` (`Ascend310P-<phy>`,
`Ascend310-<phy>`). `Card.index` is the logic id: the one integer the driver gives every NPU,
distinct even where two share a card, and what `npu-smi info -m` lists as "Chip Logic ID"
(npu-smi's `-i`/`-c` take the card and device, which are in `Card.address`).

vNPUs (vdev ids 100..1123, /dev/vdavinci<id>, carved from an NPU by a template such as vir04)
are hardware partitions: read on their own (the VDEV_MNG queries of dcmi_get_device_info),
found only by the id an allocation recorded (R-V4). Their canonical id is `vdavinci<id>`, with
aliases `<id>` and the device plugin's `Ascend910-<type>-<id>-<phy>`.

Facts used here: ../shared/reference/vendors.md §6 and §12, reference-implementation.md (Ascend).
"""

from __future__ import annotations

import dataclasses
import os
import re
import time
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

from devicemanager.backend import BackendUnavailable, Library
from devicemanager.model import (
    ERROR_CODE_OTHER,
    MAX_ERROR_CODES,
    MIB,
    Address,
    Answer,
    Card,
    CardHealth,
    CardLink,
    DeviceProcesses,
    HealthFigure,
    PartitionReading,
    Payload,
    ProcessRow,
    ReadRequest,
    Reason,
    VendorReading,
    as_int,
    mib_from_bytes,
    unsupported,
)
from vendors._ascend_lib import (
    DCMI,
    ECC_DDR,
    ECC_HBM,
    FREQ_AICORE_CURRENT,
    FREQ_DDR,
    FREQ_HBM,
    INPUT_TYPE_HBM_BANDWIDTH,
    INPUT_TYPE_VECTORCORE,
    MAX_ERROR_CODE_COUNT,
    Dcmi,
)
from vendors._common import GPM_ACTIVITY, failed, listing, percent_answer, reasons
from vendors._common import error_code as _error
from vendors._placement import SYSFS_NUMA, due, numa_node, parse_pairs, sysfs_name, sysfs_numa

MANUFACTURER = "ascend"

# DCMI's return codes (Huawei's API reference; mind-cluster's dcmiErrMap).
SUCCESS = 0
ERROR_INVALID_PARAMETER = -8001
ERROR_PERMISSION = -8002
ERROR_MEMORY_OPERATION = -8003
ERROR_SECURE_FUNCTION = -8004
ERROR_INTERNAL = -8005
ERROR_TIMEOUT = -8006
ERROR_INVALID_DEVICE_ID = -8007
ERROR_DEVICE_NOT_EXIST = -8008
ERROR_IOCTL = -8009
ERROR_SEND_MESSAGE = -8010
ERROR_RECEIVE_MESSAGE = -8011
ERROR_NOT_READY = -8012  # "not ready yet, please try again"
ERROR_NOT_SUPPORTED_IN_CONTAINER = -8013
ERROR_FILE_OPERATION = -8014
ERROR_RESET_FAILED = -8015
ERROR_RESET_CANCELLED = -8016
ERROR_UPGRADING = -8017
ERROR_RESOURCE_OCCUPIED = -8020
ERROR_PARTITION_INCONSISTENT = -8022
ERROR_CONFIG_MISSING = -8023
ERROR_NOT_SUPPORTED = -8255  # "device ID/function is not supported"
ERROR_FUNCTION_NOT_FOUND = -99998  # our binding's answer for a symbol the library lacks

# "Cannot" is kept apart from "could not": the driver or the environment serves no such query
# (not supported; not supported from inside a container, which is how the agent runs; a call
# the installed library does not export) is permanent; a refused caller is `permission`; every
# other code (-8001 and its neighbours, -8012 "not ready", timeouts, ioctl failures, a reset or
# upgrade in progress) is transient and asked again next round.
UNSUPPORTED_CODES = frozenset(
    {ERROR_NOT_SUPPORTED, ERROR_NOT_SUPPORTED_IN_CONTAINER, ERROR_FUNCTION_NOT_FOUND}
)
reason_for = reasons(unsupported=UNSUPPORTED_CODES, permission=frozenset({ERROR_PERMISSION}))

# A device that answers these after it was enumerated has fallen off.
LOST_CODES = frozenset({ERROR_DEVICE_NOT_EXIST, ERROR_INVALID_DEVICE_ID})

NPU_TYPE = 0
# Devices of one card read at most: an NPU or two, its MCU and CPU. A larger count is garbage.
MAX_DEVICES_IN_CARD = 16
# dcmi_get_device_health: 0 healthy; 1, 2, 3 an alarm of rising severity; 0xFFFFFFFF the device
# is absent or not started. HAMi's and Huawei's plugins treat anything but 0 as unhealthy.
HEALTH_REASONS = {
    1: "alarm_minor",
    2: "alarm_major",
    3: "alarm_critical",
    0xFFFFFFFF: "not_started",
}

# vNPU ids (mind-cluster: MinVDevID 100, MaxVDevID 1124 exclusive).
VDEV_MIN, VDEV_MAX = 100, 1123
# vNPU template -> the type Huawei's device plugin puts in the vNPU's Kubernetes device id
# (ascend-device-plugin GetTemplateName2DeviceTypeMap).
TEMPLATE_TYPES: Mapping[str, str] = {
    "vir01": "1c",
    "vir02": "2c",
    "vir02_1c": "2c.1cpu",
    "vir03_1c_8g": "3c.1cpu.8g",
    "vir04": "4c",
    "vir04_3c": "4c.3cpu",
    "vir04_4c_dvpp": "4c.4cpu.dvpp",
    "vir04_3c_ndvpp": "4c.3cpu.ndvpp",
    "vir05_1c_8g": "5c.1cpu.8g",
    "vir05_1c_16g": "5c.1cpu.16g",
    "vir06_1c_16g": "6c.1cpu.16g",
    "vir08": "8c",
    "vir10_3c_16g": "10c.3cpu.16g",
    "vir10_3c_16g_nm": "10c.3cpu.16g.ndvpp",
    "vir10_3c_32g": "10c.3cpu.32g",
    "vir10_4c_16g_m": "10c.4cpu.16g.dvpp",
    "vir12_3c_32g": "12c.3cpu.32g",
    "vir16": "16c",
}

# Payload keys of the VDEV_MNG sub-commands of dcmi_get_device_info.
VDEV_TOTAL = "dcmi_get_device_info/vdev_total"
VDEV_RESOURCE = "dcmi_get_device_info/vdev_resource"
VDEV_ACTIVITY = "dcmi_get_device_info/vdev_activity"
PROCESSES = "dcmi_get_device_resource_info"


def _int(value: Any) -> int | None:
    """A JSON integer within what DCMI's C types can hold (int32 to uint64); anything else,
    including a number no library could have written, is absent."""
    number = as_int(value)
    return number if number is not None and -(2**63) <= number < 2**64 else None


# -- identity (pure; read() uses it too, to match a request recorded under any alias) ----------


def die_words(value: Any) -> list[int] | None:
    """Five unsigned 32-bit words, or None for anything else a payload may hold."""
    if not isinstance(value, list) or len(value) != 5:
        return None
    words = [_int(w) for w in value]
    if any(w is None or not 0 <= w <= 0xFFFFFFFF for w in words):
        return None
    return [w for w in words if w is not None]


def gpustack_id(words: Sequence[int]) -> str:
    """The die as GPUStack records it: upper-case hex words, unpadded, joined by spaces."""
    return " ".join(f"{w:X}" for w in words)


def hami_id(words: Sequence[int]) -> str:
    """The die as HAMi's Ascend plugin records it (Huawei's Go DcGetDieID): eight digits a word,
    upper-case, joined by '-'."""
    return "-".join(f"{w:08X}" for w in words)


def plugin_family(chip_name: str | None) -> str | None:
    """The name Huawei's device plugin gives this chip's devices (`Ascend910` for 910, 910B and
    910_93 parts), or None for a chip it does not name."""
    if not chip_name:
        return None
    if chip_name.startswith("910"):
        return "Ascend910"
    if chip_name.startswith("310P"):
        return "Ascend310P"
    if chip_name.startswith("310"):
        return "Ascend310"
    return None


def card_ids(words: Sequence[int], chip_name: str | None, phy: int | None) -> tuple[str, ...]:
    """Every id the NPU answers to, canonical first."""
    ids = [gpustack_id(words), hami_id(words)]
    family = plugin_family(chip_name)
    if family is not None and phy is not None:
        ids.append(f"{family}-{phy}")
    return tuple(dict.fromkeys(ids))


_VDEV_NODE = re.compile(r"(?:/dev/)?vdavinci([0-9]{1,4})|([0-9]{1,4})")
# Huawei's device plugin: <family>-<template type>-<vdev id>-<phy id>, e.g. Ascend910-4c-100-0.
_PLUGIN_VNPU = re.compile(r"(Ascend[0-9A-Za-z]+)-([0-9a-z.]+)-([0-9]{1,4})-([0-9]{1,4})")


def vdev_of(partition_id: str) -> int | None:
    """The vNPU id a recorded partition id names, in any of the forms allocators record:
    `vdavinci<id>` (its device node), the bare `<id>`, or the device plugin's id."""
    node = _VDEV_NODE.fullmatch(partition_id)
    plugin = _PLUGIN_VNPU.fullmatch(partition_id)
    if node is not None:
        vdev = int(node.group(1) or node.group(2))
    elif plugin is not None:
        vdev = int(plugin.group(3))
    else:
        return None
    return vdev if VDEV_MIN <= vdev <= VDEV_MAX else None


def names_vnpu(partition_id: str, vdev: int, family: str | None, phy: int | None) -> bool:
    """Whether a recorded id names this vNPU: a plugin id must agree on family and NPU too,
    so an id naming another NPU is never taken as an alias of this one."""
    plugin = _PLUGIN_VNPU.fullmatch(partition_id)
    if plugin is None:
        return vdev_of(partition_id) == vdev
    return (
        int(plugin.group(3)) == vdev
        and plugin.group(1) == family
        and phy is not None
        and int(plugin.group(4)) == phy
    )


def vnpu_id(vdev: int) -> str:
    return f"vdavinci{vdev}"


# -- parse: cards ---------------------------------------------------------------------------------


def _entries(value: Any) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _known(device: Mapping[str, Any]) -> Mapping[str, Any]:
    known = device.get("known")
    return known if isinstance(known, Mapping) else {}


def _answer(device: Mapping[str, Any], key: str, known_key: str | None = None) -> Any:
    """What an entry point answered, else what the device answered in an earlier round."""
    value = device.get(key)
    if _error(value) is None and value is not None:
        return value
    return _known(device).get(known_key or key)


def _words(device: Mapping[str, Any]) -> list[int] | None:
    for key in ("dcmi_get_device_die_v2", "dcmi_get_device_die"):
        words = die_words(device.get(key))
        if words is not None:
            return words
    return die_words(_known(device).get("die"))


def _chip(device: Mapping[str, Any]) -> Mapping[str, Any]:
    chip = _answer(device, "dcmi_get_device_chip_info", "chip")
    return chip if isinstance(chip, Mapping) else {}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def identity(device: Mapping[str, Any]) -> tuple[tuple[str, ...], int, Address] | None:
    """(ids, index, address) of an NPU entry, or None when it cannot be named."""
    kind = device.get("dcmi_get_device_type")
    if _int(kind) is not None and kind != NPU_TYPE:
        return None  # the card's MCU or CPU: not an accelerator
    words = _words(device)
    logic = _int(_answer(device, "dcmi_get_device_logic_id", "logic"))
    card, dev = _int(device.get("card")), _int(device.get("device"))
    if words is None or logic is None or card is None or dev is None:
        # Without its die an NPU cannot be named as any allocator names it.
        return None
    phy = _int(_answer(device, "dcmi_get_device_phyid_from_logicid", "phy"))
    address: list[tuple[str, int | str]] = [("card", card), ("device", dev), ("logic", logic)]
    if phy is not None:
        address.append(("phy", phy))
    return card_ids(words, _text(_chip(device).get("chip_name")), phy), logic, tuple(address)


def _memory(device: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """(total MiB, used MiB): HBM where the NPU has it, else the general memory query.

    DCMI's "MB" is 2**20 bytes (a 64 GiB 910B2 answers 65536), so MB figures are MiB as they
    stand; a figure past its total is refused rather than clamped."""
    hbm = device.get("dcmi_get_device_hbm_info")
    if isinstance(hbm, Mapping) and _error(hbm) is None:
        total, used = _int(hbm.get("memory_size")), _int(hbm.get("memory_usage"))
        if total is not None and total > 0:
            return total, used if used is not None and 0 <= used <= total else None
    general = device.get("dcmi_get_device_memory_info_v3")
    if isinstance(general, Mapping) and _error(general) is None:
        total, free = _int(general.get("memory_size")), _int(general.get("memory_available"))
        if total is not None and total > 0:
            used = total - free if free is not None and 0 <= free <= total else None
            return total, used
    return None, None


def _percent(value: Any) -> float | None:
    number = _int(value)
    return float(number) if number is not None and 0 <= number <= 100 else None


def _unhealthy(device: Mapping[str, Any]) -> str | None:
    """Why the NPU is unusable, or None; a device that fell off first, then its own alarm."""
    # The NPU's own calls, not the optional vNPU queries, whose codes for a vdev id the driver
    # does not know are not documented.
    if any(
        _error(v) in LOST_CODES
        for k, v in device.items()
        if isinstance(k, str) and not k.startswith("dcmi_get_device_info")
    ):
        return "device_lost"
    health = _int(device.get("dcmi_get_device_health"))
    if health is None or health == 0:
        return None
    return HEALTH_REASONS.get(health, f"health_{health}")


ECC = "dcmi_get_device_ecc_info"
FREQUENCY = "dcmi_get_device_frequency"
ERROR_CODES = "dcmi_get_device_errorcode_v2"
# dcmi_get_device_utilization_rate asked for the HBM's bandwidth and the vector cores (issue 41),
# each answer under its own key as the VDEV_MNG sub-commands are.
HBM_BANDWIDTH = "dcmi_get_device_utilization_rate/hbm_bandwidth"
VECTOR_CORE = "dcmi_get_device_utilization_rate/vector_core"
# DCMI states the AI Cores' busy time (the cores figure), the vector cores' busy time and the
# HBM's bandwidth utilization; no SM-level activity, tensor, pipe or link throughput, and no
# memory busy time apart from bandwidth (issue 41).
ASCEND_ACTIVITY_UNSTATED = (GPM_ACTIVITY - {HealthFigure.MEMORY_BANDWIDTH_UTILIZATION}) | {
    HealthFigure.MEMORY_BUSY
}
UINT32_MAX = 0xFFFFFFFF
MAX_CLOCK_MHZ = 100_000  # 100 GHz: no clock is near it
# struct dcmi_ecc_info's fields by CardHealth figure: the error counts now and in total, the
# pages isolated for single-bit (correctable) and double-bit (uncorrectable) errors.
H = HealthFigure
ECC_FIGURES = (
    (H.ECC_CORRECTED_VOLATILE, "single_bit_error_cnt"),
    (H.ECC_UNCORRECTED_VOLATILE, "double_bit_error_cnt"),
    (H.ECC_CORRECTED_AGGREGATE, "total_single_bit_error_cnt"),
    (H.ECC_UNCORRECTED_AGGREGATE, "total_double_bit_error_cnt"),
    (H.REMAPPED_ROWS_CORRECTABLE, "single_bit_isolated_pages_cnt"),
    (H.REMAPPED_ROWS_UNCORRECTABLE, "double_bit_isolated_pages_cnt"),
)
NEXT_ISOLATED = ("single_bit_next_isolated_pages_cnt", "double_bit_next_isolated_pages_cnt")
# Figures no DCMI call answers (no energy counter, throttle reasons, PCIe replay counter or
# graphics clock is declared; a failed isolation is not reported): absent, `unsupported`.
ASCEND_UNSUPPORTED = frozenset(
    {
        H.ECC_CORRECTED_TOTAL,  # DCMI's counts are split by lifetime: volatile and aggregate
        H.ECC_UNCORRECTED_TOTAL,
        H.REMAPPED_ROWS_FAILED,
        H.ENERGY_JOULES,
        H.THROTTLE_REASONS,
        H.CLOCK_GRAPHICS_HZ,
        H.PCIE_REPLAYS,
        H.PCIE_NAKS,
        H.XID_ERRORS,  # no XIDs: DCMI's error codes are `error_codes`
    }
)


def _count(value: Any) -> tuple[int | None, Reason | None]:
    """An unsigned int DCMI answered, or why it is absent; all ones is `invalid_data`."""
    if (code := _error(value)) is not None:
        return None, reason_for(code)
    number = _int(value)
    if number is None or not 0 <= number < UINT32_MAX:
        return None, Reason.INVALID_DATA
    return number, None


def _first_answer(answers: Any, kinds: Sequence[str]) -> Any:
    """Of one call asked per memory kind (HBM, then DDR where HBM is not served), the first
    answer; the first failure where none answered."""
    if not isinstance(answers, Mapping):
        return answers
    asked = [answers[k] for k in kinds if k in answers]
    return next((a for a in asked if _error(a) is None), asked[0] if asked else None)


def parse_error_codes(value: Any) -> tuple[tuple[str, ...] | None, Reason | None]:
    """The error codes the NPU reports now (R-X7), as hex text in the order DCMI gave them,
    each once; at most MAX_ERROR_CODES, then ERROR_CODE_OTHER for the rest. A count outside
    0..MAX_ERROR_CODE_COUNT, a count the list does not match, or a code that is no unsigned
    32-bit number is `invalid_data`: no code is published from such an answer."""
    if (code := _error(value)) is not None:
        return None, reason_for(code)
    if not isinstance(value, Mapping):
        return None, Reason.INVALID_DATA
    count, codes = _int(value.get("count")), value.get("codes")
    if count is None or not 0 <= count <= MAX_ERROR_CODE_COUNT:
        return None, Reason.INVALID_DATA
    if not isinstance(codes, list) or len(codes) != count:
        return None, Reason.INVALID_DATA
    numbers = [_int(c) for c in codes]
    if any(n is None or not 0 <= n <= UINT32_MAX for n in numbers):
        return None, Reason.INVALID_DATA
    named = list(dict.fromkeys(f"0x{n:08X}" for n in numbers if n is not None))
    if len(named) > MAX_ERROR_CODES:
        named = [*named[:MAX_ERROR_CODES], ERROR_CODE_OTHER]
    return tuple(named), None


def parse_health(device: Mapping[str, Any]) -> CardHealth | None:
    """The NPU's ECC counts, isolated pages and frequencies (R-X7), in base units, each absent
    with its reason; None where the payload was recorded before they were read."""
    if ECC not in device and FREQUENCY not in device and ERROR_CODES not in device:
        return None
    found: dict[HealthFigure, Answer] = {}
    if ERROR_CODES in device:
        found[H.ERROR_CODES] = parse_error_codes(device[ERROR_CODES])
    ecc = _first_answer(device.get(ECC), ("hbm", "ddr"))
    names = [figure for figure, _ in ECC_FIGURES] + [H.REMAPPED_ROWS_PENDING]
    if ecc is not None:
        if (code := _error(ecc)) is not None:
            found.update(dict.fromkeys(names, (None, reason_for(code))))
        elif not isinstance(ecc, Mapping):
            found.update(dict.fromkeys(names, (None, Reason.INVALID_DATA)))
        elif _int(ecc.get("enable_flag")) == 0:
            found.update(dict.fromkeys(names, (None, Reason.UNSUPPORTED)))  # ECC is off
        else:
            for figure, key in ECC_FIGURES:
                found[figure] = _count(ecc.get(key))
            pending = [_count(ecc.get(key)) for key in NEXT_ISOLATED]
            bad = next((r for _, r in pending if r is not None), None)
            flag = None if bad else int(any(n for n, _ in pending))
            found[H.REMAPPED_ROWS_PENDING] = (flag, bad)  # 1: pages wait to be isolated
    freq = device.get(FREQUENCY)
    if freq is not None:
        for figure, kinds in ((H.CLOCK_SM_HZ, ("aicore",)), (H.CLOCK_MEMORY_HZ, ("hbm", "ddr"))):
            mhz, reason = _count(_first_answer(freq, kinds))
            if mhz is not None and mhz > MAX_CLOCK_MHZ:
                mhz, reason = None, Reason.INVALID_DATA
            found[figure] = (None if mhz is None else mhz * 1_000_000, reason)
    found.update(unsupported(ASCEND_UNSUPPORTED))
    found.update(parse_activity(device))
    return CardHealth.answered(found)


def parse_activity(device: Mapping[str, Any]) -> dict[HealthFigure, Answer]:
    """What DCMI states of an NPU's activity (issue 41), each under the family whose meaning it
    has: the HBM bandwidth utilization (input type 10) is bandwidth used over the peak, as
    GPM's DRAM_BW_UTIL; the vector cores' utilization (input type 12) is their busy time,
    as the AI Cores' (input type 2, the cores figure) is. A payload recorded before these
    were asked states neither; every other activity figure is `unsupported`."""
    found: dict[HealthFigure, Answer] = {}
    if HBM_BANDWIDTH in device:
        found[H.MEMORY_BANDWIDTH_UTILIZATION] = percent_answer(device[HBM_BANDWIDTH], reason_for)
    if VECTOR_CORE in device:
        found[H.VECTOR_CORE_BUSY] = percent_answer(device[VECTOR_CORE], reason_for)
    found.update(unsupported(ASCEND_ACTIVITY_UNSTATED))
    return found


def parse_card(device: Mapping[str, Any]) -> Card | None:
    named = identity(device)
    if named is None:
        return None
    ids, index, address = named
    chip = _chip(device)
    chip_type, chip_name = _text(chip.get("chip_type")), _text(chip.get("chip_name"))
    name = f"{chip_type or ''}{chip_name or ''}" or None
    total, used = _memory(device)
    temperature = _int(device.get("dcmi_get_device_temperature"))  # °C
    power = _int(device.get("dcmi_get_device_power_info"))  # 0.1 W
    reason = _unhealthy(device)
    return Card(
        id=ids[0],
        index=index,
        name=name,
        memory_total_mib=total,
        memory_used_mib=used,
        cores_utilization_percent=_percent(device.get("dcmi_get_device_utilization_rate")),
        temperature_celsius=float(temperature) if temperature is not None else None,
        power_usage_watts=round(power / 10.0, 1) if power is not None and power >= 0 else None,
        unhealthy=reason is not None,
        unhealthy_reason=reason,
        aliases=ids[1:],
        address=address,
        health=parse_health(device),
    )


# -- parse: per process ---------------------------------------------------------------------------


def readings_fit(values: Sequence[int], total_mib: int | None) -> dict[str, bool]:
    """Whether the process rows fit the card read as bytes and read as MB.

    Public sources disagree on the unit of `proc_mem_usage`. Both headers and Huawei's API
    reference say bytes (and that the figure includes the device-side OS memory of the process,
    so a live process holds whole megabytes); one design note reads MB off npu-smi's display.
    As bytes, a row must be 0 or at least 1 MiB and the rows must fit the card; as MB, the rows
    must fit the card. A driver that answered in MB gives rows of a few tens of thousands, which
    read as bytes are under 1 MiB: implausible. One that answers in bytes gives rows in the
    billions, which read as MB are terabytes: implausible. parse() publishes the bytes reading
    and refuses a device whose rows only fit as MB (`invalid_data`)."""
    total_bytes = None if total_mib is None else total_mib * MIB
    summed = sum(values)
    as_bytes = all(v == 0 or v >= MIB for v in values) and (
        total_bytes is None or summed <= total_bytes
    )
    as_mb = total_mib is None or summed <= total_mib
    return {"bytes": as_bytes, "MB": as_mb}


def _process_rows(
    answer: Any, total_mib: int | None
) -> tuple[tuple[ProcessRow, ...], Reason | None]:
    code = _error(answer)
    if code is not None:
        return (), reason_for(code)
    if not isinstance(answer, Mapping):
        return (), Reason.TRANSIENT_DRIVER_ERROR
    count, capacity = _int(answer.get("count")), _int(answer.get("capacity"))
    if answer.get("guard_written") is not False or (
        count is not None and capacity is not None and count > capacity
    ):
        # More processes than the read accepts: the rows that fit are not the list.
        return (), Reason.TRUNCATED
    rows = answer.get("rows")
    if count is None or count < 0 or not isinstance(rows, list) or len(rows) != count:
        return (), Reason.TRANSIENT_DRIVER_ERROR
    out: list[ProcessRow] = []
    for row in rows:
        pid = _int(row.get("proc_id")) if isinstance(row, Mapping) else None
        used = _int(row.get("proc_mem_usage")) if isinstance(row, Mapping) else None
        if pid is None or pid <= 0 or used is None or used < 0:
            # A row that names no process makes the list unusable, not shorter.
            return (), Reason.TRANSIENT_DRIVER_ERROR
        out.append(ProcessRow(pid=pid, memory_bytes=used))
    if not readings_fit([r.memory_bytes or 0 for r in out], total_mib)["bytes"]:
        return (), Reason.INVALID_DATA
    return tuple(out), None


def parse_processes(device: Mapping[str, Any], card: Card | None) -> DeviceProcesses | None:
    """The per-process answer for a carved NPU; None when read() did not ask for this one."""
    if card is None or PROCESSES not in device:
        return None
    rows, reason = _process_rows(device[PROCESSES], card.memory_total_mib)
    return DeviceProcesses(
        device_id=card.id,
        rows=rows,
        memory_reason=reason,
        # DCMI has no per-process utilization entry point at all.
        cores_reason=Reason.UNSUPPORTED,
        reads_truncated=int(reason is Reason.TRUNCATED),
    )


# -- parse: vNPUs ---------------------------------------------------------------------------------


def _vnpu_reading(
    vdev: int, entry: Mapping[str, Any], parent: Card, family: str | None, wanted: Iterable[str]
) -> PartitionReading:
    phy = _int(dict(parent.address).get("phy"))
    aliases = [str(vdev)]
    resource = entry.get(VDEV_RESOURCE)
    template = resource.get("name") if isinstance(resource, Mapping) else None
    kind = TEMPLATE_TYPES.get(template) if isinstance(template, str) else None
    if family is not None and kind is not None and phy is not None:
        aliases.append(f"{family}-{kind}-{vdev}-{phy}")
    aliases += [w for w in wanted if w != vnpu_id(vdev) and names_vnpu(w, vdev, family, phy)]
    base = PartitionReading(
        id=vnpu_id(vdev), parent_id=parent.id, aliases=tuple(dict.fromkeys(aliases))
    )
    activity = entry.get(VDEV_ACTIVITY)
    code = _error(activity)
    if code is not None or not isinstance(activity, Mapping):
        # Where the driver does not serve the activity query, used memory and AI cores have no
        # source: process rows carry no vNPU id, so they cannot stand in for it.
        reason = reason_for(code) if code is not None else Reason.TRANSIENT_DRIVER_ERROR
        template = _template_mib(resource)
        if reason is Reason.UNSUPPORTED and template is not None:
            # The vNPU's capacity is still its template's, which the resource query gave
            # (`memory_size`, DCMI's MB: 2^20 bytes, MiB as they stand). Used stays absent; a
            # memory reason would void the total too, so none is given (it is this driver's
            # standing answer, as the cores' `unsupported` says).
            return PartitionReading(
                id=base.id,
                parent_id=base.parent_id,
                memory_total_mib=template,
                cores_reason=reason,
                aliases=base.aliases,
            )
        return _absent(base, reason, reason)
    total_kb = _int(activity.get("vdev_memory_total"))  # KB
    free_kb = _int(activity.get("vdev_memory_free"))  # KB
    memory_reason = None
    total = used = None
    if total_kb is None or free_kb is None or total_kb <= 0 or not 0 <= free_kb <= total_kb:
        memory_reason = Reason.INVALID_DATA  # the driver's own pair contradicts itself
    else:
        total = mib_from_bytes(total_kb * 1024)
        used = mib_from_bytes((total_kb - free_kb) * 1024)
    cores = _percent(activity.get("vdev_aicore_utilization"))
    return PartitionReading(
        id=base.id,
        parent_id=base.parent_id,
        memory_total_mib=total,
        memory_used_mib=used,
        cores_percent=cores,
        memory_reason=memory_reason,
        cores_reason=None if cores is not None else Reason.INVALID_DATA,
        aliases=base.aliases,
    )


def _template_mib(resource: Any) -> int | None:
    """The vNPU's memory as its template gives it (the resource query's `memory_size`, MB of
    2^20 bytes), or None where that query failed or answered no size."""
    if not isinstance(resource, Mapping) or _error(resource) is not None:
        return None
    size = _int(resource.get("memory_size"))
    return size if size is not None and size > 0 else None


def _absent(p: PartitionReading, memory: Reason, cores: Reason) -> PartitionReading:
    return PartitionReading(
        id=p.id, parent_id=p.parent_id, memory_reason=memory, cores_reason=cores, aliases=p.aliases
    )


def _requested(payload: Mapping[str, Any], key: str) -> list[Any]:
    request = payload.get("request")
    value = request.get(key) if isinstance(request, Mapping) else None
    return value if isinstance(value, list) else []


def parse_partitions(
    payload: Mapping[str, Any], cards: Mapping[int, tuple[Mapping[str, Any], Card]]
) -> tuple[PartitionReading, ...]:
    """Answer every vNPU read() was asked for, found only by its recorded id (R-V4)."""
    by_id = {i: card for _, card in cards.values() for i in card.ids}
    hosts: dict[int, tuple[Mapping[str, Any], Mapping[str, Any], Card]] = {}
    for device, card in cards.values():
        total = device.get(VDEV_TOTAL)
        if not isinstance(total, Mapping):
            continue
        listed = total.get("vdev_id")
        if not isinstance(listed, list) or _int(total.get("vdev_num")) != len(listed):
            continue  # a count past the list the library can fill: not a list to trust
        for entry in _entries(device.get("vnpus")):
            vdev = _int(entry.get("vdev_id"))
            if vdev is not None and vdev in listed:
                hosts.setdefault(vdev, (device, entry, card))
    answered: dict[str, PartitionReading] = {}
    wanted: dict[int, list[str]] = {}
    pairs = [
        (item[0], item[1])
        for item in _requested(payload, "partitions")
        if isinstance(item, list) and len(item) == 2 and all(isinstance(s, str) for s in item)
    ]
    for _, partition_id in pairs:
        vdev = vdev_of(partition_id)
        if vdev is not None:
            wanted.setdefault(vdev, []).append(partition_id)
    for parent_id, partition_id in pairs:
        parent = by_id.get(parent_id)
        vdev = vdev_of(partition_id)
        if vdev is not None and vdev in hosts:
            device, entry, host = hosts[vdev]
            family = plugin_family(_text(_chip(device).get("chip_name")))
            reading = _vnpu_reading(vdev, entry, host, family, wanted[vdev])
            answered.setdefault(reading.id, reading)
            continue
        # Not found: say why, from the NPU the allocation named.
        reason = Reason.TRANSIENT_DRIVER_ERROR  # an id the driver does not know (destroyed?)
        if parent is not None:
            device = next(d for d, c in cards.values() if c.id == parent.id)
            code = _error(device.get(VDEV_TOTAL))
            if code is not None:
                reason = reason_for(code)  # no vNPU support on this NPU: `unsupported`
        missing = PartitionReading(
            id=partition_id, parent_id=parent.id if parent is not None else parent_id
        )
        answered.setdefault(partition_id, _absent(missing, reason, reason))
    return tuple(answered.values())


# -- links and placement (R-X3) -------------------------------------------------------------------

TOPO = "dcmi_get_topo_info_by_device_id"
PCIE_INFO = "dcmi_get_device_pcie_info_v2"
# DCMI_TOPO_TYPE_* (Huawei's API reference; the newer dcmi_interface_api.h in Huawei's driver
# sources, verylucky01/driver src/custom/include/): SYS, PHB, PXB and PIX are the PCIe paths
# `nvidia-smi topo -m` names alike, HCCS a direct link, HCCS_SW HCCS through a switch. SELF (0)
# is no pair; 6 is SIO in the newer header and BUTT ("unknown") in the reference's list, so it
# places nothing; UB (8) and BUTT have no kind here: not placed.
ASCEND_LINKS = {
    1: "system",
    2: "pcie_host_bridge",
    3: "hccs",
    4: "pcie_switches",
    5: "pcie_switch",
    7: "hccs_switch",
}


def _npu(value: Any) -> Hashable | None:
    """An NPU as the topology names it: [card, device]."""
    if not isinstance(value, list) or len(value) != 2:
        return None
    card, device = as_int(value[0]), as_int(value[1])
    return None if card is None or device is None else (card, device)


def parse_topology(
    payload: Mapping[str, Any],
) -> Mapping[Hashable, tuple[tuple[tuple[Hashable, str], ...], int | None]]:
    """Per (card, device), its links ((peer, kind)) and its NUMA node (the `numa_node` sysfs
    gives the NPU's PCI device); empty where the payload has no topology."""
    return parse_pairs(
        payload,
        "npu",
        _npu,
        lambda e: numa_node(e.get(SYSFS_NUMA)),
        lambda p: (
            ASCEND_LINKS.get(as_int(p.get(TOPO)) or 0) if _error(p.get(TOPO)) is None else None
        ),
    )


def _placed(
    named: Mapping[int, tuple[Mapping[str, Any], Card]],
    topology: Mapping[Hashable, tuple[tuple[tuple[Hashable, str], ...], int | None]],
) -> dict[int, tuple[Mapping[str, Any], Card]]:
    """Each NPU with its links to the others, by their canonical ids, and its NUMA node."""
    ids = {_npu([d.get("card"), d.get("device")]): c.id for d, c in named.values()}
    out = {}
    for n, (device, card) in named.items():
        me = _npu([device.get("card"), device.get("device")])
        if me is None or me not in topology:
            out[n] = (device, card)
            continue
        links, node = topology[me]
        found = tuple(CardLink(ids[peer], kind) for peer, kind in links if peer in ids)
        out[n] = (device, dataclasses.replace(card, links=found, numa_node=node))
    return out


# -- parse ----------------------------------------------------------------------------------------


def parse(payload: Payload) -> VendorReading:
    devices = listing(payload, "devices")
    named: dict[int, tuple[Mapping[str, Any], Card]] = {}
    for n, device in enumerate(devices):
        card = parse_card(device)
        if card is not None and card.id not in {c.id for _, c in named.values()}:
            named[n] = (device, card)
    named = _placed(named, parse_topology(payload))
    cards = tuple(card for _, card in named.values())
    processes = tuple(
        p for p in (parse_processes(d, c) for d, c in named.values()) if p is not None
    )
    driver = payload.get("dcmi_get_driver_version")
    return VendorReading(
        manufacturer=MANUFACTURER,
        cards=cards,
        processes=processes,
        partitions=parse_partitions(payload, named),
        driver_version=driver if isinstance(driver, str) and driver else None,
    )


# -- the backend ----------------------------------------------------------------------------------


class DcmiError(RuntimeError):
    """DCMI could not list the node's cards this round: nothing can be read, so nothing is."""


class AscendBackend:
    """Reads DCMI through vendors._ascend_lib. The library is loaded in open(), never at import."""

    manufacturer = MANUFACTURER
    libraries: ClassVar[tuple[Library, ...]] = (DCMI,)

    def __init__(
        self,
        libraries: Mapping[str, str] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sysfs: str | os.PathLike[str] = "/sys",
    ) -> None:
        self.configured = dict(libraries or {})
        self._clock = clock
        self._sysfs = sysfs
        self._dcmi: Dcmi | None = None
        # The node's links and NUMA nodes, last read (R-X3), and the NPUs they were read for.
        self._topology: dict[str, Any] | None = None
        self._topology_npus: tuple[Any, ...] = ()
        # Identity an NPU gave in an earlier round, by (card, device): a device that fell off
        # stops answering even its die, and its grant should see it unhealthy, not vanish.
        self._known: dict[tuple[int, int], dict[str, Any]] = {}

    def open(self) -> None:
        dcmi = Dcmi.load(self.configured)
        code = dcmi.init()
        if code != SUCCESS:
            raise BackendUnavailable(f"DCMI could not be initialised: dcmi_init answered {code}")
        self._dcmi = dcmi

    @property
    def _lib(self) -> Dcmi:
        if self._dcmi is None:
            raise BackendUnavailable("read() before open()")
        return self._dcmi

    def _answer(self, name: str, code: int, value: Any) -> Any:
        return value if code == SUCCESS else failed(name, code)

    def _identity(self, card: int, dev: int) -> dict[str, Any]:
        dcmi = self._lib
        out: dict[str, Any] = {}
        code, logic = dcmi.logic_id(card, dev)
        out["dcmi_get_device_logic_id"] = self._answer("dcmi_get_device_logic_id", code, logic)
        if logic is not None:
            code, phy = dcmi.phy_id(logic)
            out["dcmi_get_device_phyid_from_logicid"] = self._answer(
                "dcmi_get_device_phyid_from_logicid", code, phy
            )
        code, words = dcmi.die_v2(card, dev)
        out["dcmi_get_device_die_v2"] = self._answer("dcmi_get_device_die_v2", code, words)
        if code in UNSUPPORTED_CODES:
            # Older drivers serve the VDIE only through the call that takes no die type.
            code, words = dcmi.die_v1(card, dev)
            out["dcmi_get_device_die"] = self._answer("dcmi_get_device_die", code, words)
        code, chip = dcmi.chip_info(card, dev)
        out["dcmi_get_device_chip_info"] = self._answer("dcmi_get_device_chip_info", code, chip)
        known = self._known.get((card, dev))
        phy = _int(out.get("dcmi_get_device_phyid_from_logicid"))
        if die_words(words) is not None and logic is not None and phy is not None and chip:
            self._known[(card, dev)] = {"die": words, "logic": logic, "phy": phy, "chip": chip}
        elif known is not None:
            out["known"] = known
        return out

    def _memory(self, card: int, dev: int) -> dict[str, Any]:
        dcmi = self._lib
        code, hbm = dcmi.hbm_info(card, dev)
        out: dict[str, Any] = {
            "dcmi_get_device_hbm_info": self._answer("dcmi_get_device_hbm_info", code, hbm)
        }
        if code in UNSUPPORTED_CODES or (hbm is not None and hbm["memory_size"] == 0):
            # DDR parts (310P) serve no HBM query; any other failure is not a reason to read a
            # different memory (on a 910 the general query answers the control CPU's DDR).
            code, general = dcmi.memory_info_v3(card, dev)
            out["dcmi_get_device_memory_info_v3"] = self._answer(
                "dcmi_get_device_memory_info_v3", code, general
            )
        return out

    def _vnpus(self, card: int, dev: int, wanted: set[int]) -> dict[str, Any]:
        dcmi = self._lib
        code, total = dcmi.vdev_total(card, dev)
        out: dict[str, Any] = {VDEV_TOTAL: self._answer(VDEV_TOTAL, code, total)}
        if total is None:
            return out
        entries = []
        for vdev in total["vdev_id"]:
            if vdev not in wanted:
                continue  # only the vNPUs an allocation recorded are read (R-V4)
            code, resource = dcmi.vdev_resource(card, dev, vdev)
            entry: dict[str, Any] = {
                "vdev_id": vdev,
                VDEV_RESOURCE: self._answer(VDEV_RESOURCE, code, resource),
            }
            code, activity = dcmi.vdev_activity(card, dev, vdev)
            entry[VDEV_ACTIVITY] = self._answer(VDEV_ACTIVITY, code, activity)
            entries.append(entry)
        out["vnpus"] = entries
        return out

    def _health(self, card: int, dev: int) -> dict[str, Any]:
        """The answers CardHealth is parsed from (R-X7): ECC and frequencies, each of HBM and,
        where HBM is not served (a DDR part such as the 310P), of DDR."""
        dcmi = self._lib
        code, hbm = dcmi.ecc_info(card, dev, ECC_HBM)
        ecc: dict[str, Any] = {"hbm": self._answer(ECC, code, hbm)}
        if code in UNSUPPORTED_CODES:
            ecc["ddr"] = self._answer(ECC, *dcmi.ecc_info(card, dev, ECC_DDR))
        freq: dict[str, Any] = {
            "aicore": self._answer(FREQUENCY, *dcmi.frequency(card, dev, FREQ_AICORE_CURRENT))
        }
        code, mhz = dcmi.frequency(card, dev, FREQ_HBM)
        freq["hbm"] = self._answer(FREQUENCY, code, mhz)
        if code in UNSUPPORTED_CODES:
            freq["ddr"] = self._answer(FREQUENCY, *dcmi.frequency(card, dev, FREQ_DDR))
        return {
            ECC: ecc,
            FREQUENCY: freq,  # MHz
            ERROR_CODES: self._answer(ERROR_CODES, *dcmi.error_codes(card, dev)),
            HBM_BANDWIDTH: self._answer(
                HBM_BANDWIDTH, *dcmi.utilization(card, dev, INPUT_TYPE_HBM_BANDWIDTH)
            ),
            VECTOR_CORE: self._answer(
                VECTOR_CORE, *dcmi.utilization(card, dev, INPUT_TYPE_VECTORCORE)
            ),
        }

    def _device(self, card: int, dev: int, request: ReadRequest) -> dict[str, Any]:
        dcmi = self._lib
        device: dict[str, Any] = {"card": card, "device": dev}
        code, kind = dcmi.device_type(card, dev)
        device["dcmi_get_device_type"] = self._answer("dcmi_get_device_type", code, kind)
        if kind is not None and kind != NPU_TYPE:
            return device  # the card's MCU or CPU
        device.update(self._identity(card, dev))
        device.update(self._memory(card, dev))
        for name, (code, value) in (
            ("dcmi_get_device_utilization_rate", dcmi.aicore_utilization(card, dev)),
            ("dcmi_get_device_temperature", dcmi.temperature(card, dev)),
            ("dcmi_get_device_power_info", dcmi.power(card, dev)),
            ("dcmi_get_device_health", dcmi.health(card, dev)),
        ):
            device[name] = self._answer(name, code, value)
        device.update(self._health(card, dev))
        named = identity(device)
        ids = set(named[0]) if named is not None else set()
        if ids & request.carved_device_ids:
            code, answer = dcmi.resource_info(card, dev)
            device[PROCESSES] = self._answer(PROCESSES, code, answer)
        return device

    def _read_vnpus(self, devices: list[dict[str, Any]], request: ReadRequest) -> None:
        """vNPUs only on request (R-V4), only on the NPUs the requests name as parents (under any
        of their ids), and only the vdev ids requested: every recorded form names its vdev id,
        which is unique on the node (it names /dev/vdavinci<id>). A request whose parent names
        no NPU here (recorded under a form we do not know) has its vNPU looked for on all."""
        wanted: dict[str, set[int]] = {}
        for parent, partition in request.partition_ids:
            if (vdev := vdev_of(partition)) is not None:
                wanted.setdefault(parent, set()).add(vdev)
        if not wanted:
            return
        named = [(d, set(n[0]) if (n := identity(d)) is not None else set()) for d in devices]
        known = set().union(*(ids for _, ids in named))
        anywhere = {v for parent, vdevs in wanted.items() if parent not in known for v in vdevs}
        for device, ids in named:
            vdevs = anywhere.union(*(wanted.get(i, set()) for i in ids))
            if vdevs and ids:
                device.update(self._vnpus(device["card"], device["device"], vdevs))

    def read(self, request: ReadRequest) -> Payload:
        dcmi = self._lib
        now = self._clock()
        code, card_list = dcmi.card_list()
        if card_list is None:
            raise DcmiError(f"dcmi_get_card_list answered {code}")
        devices: list[dict[str, Any]] = []
        counts: dict[str, Any] = {}
        for card in card_list:
            code, num = dcmi.device_num_in_card(card)
            counts[str(card)] = self._answer("dcmi_get_device_num_in_card", code, num)
            for dev in range(max(0, min(num or 0, MAX_DEVICES_IN_CARD))):
                devices.append(self._device(card, dev, request))
        self._read_vnpus(devices, request)
        topology = self._topology_of(devices, now)
        code, version = dcmi.driver_version()
        return {
            "dcmi_get_driver_version": self._answer("dcmi_get_driver_version", code, version),
            "dcmi_get_card_list": card_list,
            "dcmi_get_device_num_in_card": counts,
            "request": {
                "carved": sorted(request.carved_device_ids),
                "partitions": [list(p) for p in sorted(request.partition_ids)],
            },
            "devices": devices,
            "topology": topology,
        }

    def _topology_of(self, devices: list[dict[str, Any]], now: float) -> Any:
        """Each NPU's NUMA node and the topology type of each pair of NPUs (R-X3): read when none
        is held, once TOPOLOGY_PERIOD has passed since the last read, or when the NPUs changed;
        else the last read, whose `readAt` says when it was made."""
        npus = tuple(
            (d["card"], d["device"], named[0][0])
            for d in devices
            if (named := identity(d)) is not None
        )
        if not due(self._topology, npus, self._topology_npus, now):
            return self._topology
        dcmi = self._lib
        entries = []
        for card, dev, _ in npus:
            code, pcie = dcmi.pcie_info(card, dev)
            entry: dict[str, Any] = {
                "npu": [card, dev],
                PCIE_INFO: self._answer(PCIE_INFO, code, pcie),
            }
            if pcie is not None:
                name = sysfs_name(
                    pcie["domain"] & 0xFFFF,
                    pcie["bdf_busid"] & 0xFF,
                    pcie["bdf_deviceid"] & 0x1F,
                    pcie["bdf_funcid"] & 0x7,
                )
                entry[SYSFS_NUMA] = sysfs_numa(self._sysfs, name)
            entries.append(entry)
        pairs = []
        for k, (c1, d1, _) in enumerate(npus):
            for c2, d2, _ in npus[k + 1 :]:
                code, kind = dcmi.topo(c1, d1, c2, d2)
                pairs.append({"a": [c1, d1], "b": [c2, d2], TOPO: self._answer(TOPO, code, kind)})
        topology: dict[str, Any] = {"readAt": now, "devices": entries, "pairs": pairs}
        self._topology, self._topology_npus = topology, npus
        return topology

    def parse(self, payload: Payload) -> VendorReading:
        return parse(payload)

    def close(self) -> None:
        # DCMI has no shutdown entry point; dropping the handle is all there is to do.
        self._dcmi = None
