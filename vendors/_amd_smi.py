"""What amdsmi answered for AMD Instinct, parsed: the pure part of the amdsmi path, whose
reading (through the `amdsmi` wheel) is the backend's, in vendors/amd.py.

Apart from vendors/amd.py (the backend, its amdsmi reading and the whole payload's parse) so
that each can be read on its own: here is what one processor's answers mean (its identity, the
ids allocators know it by, its card figures, its amdsmi process rows, its reading as a
partition), there how a payload's sockets become cards, partitions and process answers. The
identity helpers are shared by read() and parse(). What ROCm SMI answers where amdsmi's process
list is known broken is in vendors/_amd_rocm_smi.py, and gives its rows in the form here (Rows).

A failed call is {"error": <exception>, "code": <amdsmi_status_t>}; the wheel's "N/A" strings
are kept in the payload as they come and are absent figures here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from devicemanager.model import (
    Address,
    Answer,
    Card,
    CardHealth,
    HealthFigure,
    PartitionReading,
    ProcessRow,
    Reason,
    as_int,
    unsupported,
)
from vendors._common import GPM_ACTIVITY, error_code, finite, percent_answer, rate_percent
from vendors._rocm_smi_lib import CU_OCCUPANCY_INVALID

# amdsmi_status_t (amdsmi.h).
NOT_SUPPORTED = 2
NOT_YET_IMPLEMENTED = 3
FAIL_LOAD_SYMBOL = 5
NO_PERM = 10
OUT_OF_RESOURCES = 15
NOT_FOUND = 31
INSUFFICIENT_SIZE = 41

NA = "N/A"  # the wheel's word for a sentinel (0xFFFF, UINT32_MAX, an empty string)


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


# -- identity (shared by read() and parse()) -----------------------------------------------------


def text(value: Any) -> str | None:
    """A string the library gave, or None for the wheel's "N/A" and anything not a string."""
    return value if isinstance(value, str) and value and value != NA else None


def _number(value: Any) -> float | None:
    """A finite number the library gave; the wheel's "N/A" strings are absent."""
    return finite(value)


def mapping(value: Any) -> Mapping[str, Any]:
    """An entry point's answer when it answered with an object, else empty."""
    if isinstance(value, Mapping) and error_code(value) is None:
        return value
    return {}


def entries(value: Any) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def serial_id(asic: Mapping[str, Any]) -> str | None:
    """GPUStack's id for an AMD card: `GPU-` + the ASIC serial in lower-case hex, without the
    wheel's `0x` (also the HSA agent UUID rocminfo shows). Every XCP of a partitioned card
    shares it, so it names the physical card."""
    serial = text(asic.get("asic_serial"))
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
    uuid = text(device.get("amdsmi_get_gpu_device_uuid"))
    return uuid if uuid is not None else text(_identity(device).get("uuid"))


def _asic(device: Mapping[str, Any]) -> Mapping[str, Any]:
    asic = mapping(device.get("amdsmi_get_gpu_asic_info"))
    return asic or mapping(_identity(device).get("asic"))


def _bdf(device: Mapping[str, Any]) -> str | None:
    bdf = text(device.get("amdsmi_get_gpu_device_bdf"))
    return bdf if bdf is not None else text(_identity(device).get("bdf"))


def _render_minor(device: Mapping[str, Any]) -> int | None:
    info = mapping(device.get("amdsmi_get_gpu_enumeration_info"))
    info = info or mapping(_identity(device).get("enumeration"))
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
    info = text(socket.get("amdsmi_get_socket_info"))
    return f"socket-{info}" if info is not None else None


def board_of(devices: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
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
    info = mapping(device.get("amdsmi_get_power_info"))
    for key in ("current_socket_power", "average_socket_power"):
        value = _number(info.get(key))
        if value is not None:
            return value
    return None


def _memory(device: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """(total, used) MiB: amdsmi_get_gpu_vram_usage answers MiB (amdsmi.h "MegaBytes", computed
    by dividing bytes by 1024 * 1024), so no conversion is made."""
    usage = mapping(device.get("amdsmi_get_gpu_vram_usage"))
    return as_int(usage.get("vram_total")), as_int(usage.get("vram_used"))


def _utilization(device: Mapping[str, Any]) -> float | None:
    """GFX activity in percent; "N/A" (a secondary XCP on some stacks) and nonsense absent."""
    value = _number(mapping(device.get("amdsmi_get_gpu_activity")).get("gfx_activity"))
    return value if value is not None and 0.0 <= value <= 100.0 else None


def _unhealthy(device: Mapping[str, Any]) -> str | None:
    """Why the board is unusable, or None; the first match, most severe first: lost; an
    uncorrectable ECC error; a bad page the driver could not retire (UNRESERVABLE: bad memory
    left in use, as NVML's failed row remap and Hygon's unreservable page)."""
    if _lost(device):
        return "device_lost"
    uncorrectable, _ = ecc_counts(device)[H.ECC_UNCORRECTED_TOTAL]  # never a sentinel
    if uncorrectable is not None and uncorrectable > 0:
        return "ecc_uncorrectable"
    if BAD_PAGES in device and bad_pages(device[BAD_PAGES])[H.REMAPPED_ROWS_FAILED] == (1, None):
        return "retired_pages_unreservable"
    return None


# CardHealth's clock figures by amdsmi's clock domain (AmdSmiClkType): the graphics engines'
# clock is the one compute runs on; amdsmi has no separate SM domain, so `clock_sm_hz` is
# `unsupported` on AMD rather than a copy of the graphics clock.
H = HealthFigure
AMD_CLOCKS = {H.CLOCK_GRAPHICS_HZ: "GFX", H.CLOCK_MEMORY_HZ: "MEM"}
UINT64_MAX = 0xFFFFFFFFFFFFFFFF
MAX_CLOCK_MHZ = 100_000  # as NVML's: above 100 GHz is no clock
# Each unsigned type's maximum, the mark ROCm SMI writes into a field it does not have
# (`init_max_uint_types`): amdsmi_get_clock_info copies the 16-bit GPU-metrics fields
# (current_gfxclk, current_uclk), so an absent clock arrives as 0xFFFF, which the wheel (it
# filters UINT32_MAX only) hands on as 65,535 MHz, under the 100 GHz bound (issue 43).
TYPE_MAXIMA = frozenset({0xFFFF, 0xFFFFFFFF, UINT64_MAX})


def _counted(value: Any, ceiling: int) -> tuple[int | None, Reason | None]:
    """An unsigned figure amdsmi answered, or why it is absent: a failure's reason; the wheel's
    "N/A" (its UINT32_MAX), a type's all-ones value or anything not an integer in range is
    `invalid_data`."""
    if (code := error_code(value)) is not None:
        return None, reason_for(code)
    number = as_int(value)
    if number is None or not 0 <= number < ceiling:
        return None, Reason.INVALID_DATA
    return number, None


# -- ECC, bad pages and throttling (R-X7) ---------------------------------------------------------

TOTAL_ECC = "amdsmi_get_gpu_total_ecc_count"
ECC_ENABLED = "amdsmi_get_gpu_ecc_enabled"
ECC_BLOCKS_CALL = "amdsmi_get_gpu_ecc_count"
BAD_PAGES = "amdsmi_get_gpu_bad_page_info"
VIOLATIONS = "amdsmi_get_violation_status"
# amdsmi_gpu_block_t: one bit per block (amdsmi.h, AMDSMI_GPU_BLOCK_UMC 0x1 … MPIO 0x40000), the
# bits amdsmi_get_gpu_ecc_enabled answers; read() asks each enabled one for its counts by name.
ECC_BLOCKS: tuple[tuple[str, int], ...] = tuple(
    (name, 1 << bit)
    for bit, name in enumerate(
        (
            "UMC",
            "SDMA",
            "GFX",
            "MMHUB",
            "ATHUB",
            "PCIE_BIF",
            "HDP",
            "XGMI_WAFL",
            "DF",
            "SMN",
            "SEM",
            "MP0",
            "MP1",
            "FUSE",
            "MCA",
            "VCN",
            "JPEG",
            "IH",
            "MPIO",
        )
    )
)
# amdsmi_memory_page_status_t (amdsmi.h): reserved (retired, no longer used), pending (marked
# bad, retired at the next window), unreservable (could not be retired).
PAGE_RESERVED, PAGE_PENDING, PAGE_UNRESERVABLE = 0, 1, 2
MAX_BAD_PAGES = 4096  # bad-page records one read keeps; more is `truncated`
# CardHealth's throttle reasons from amdsmi_violation_status_t's `active_*` flags (1 active, 0
# not, UINT8_MAX "unsupported", which the wheel answers as "N/A"), where a flag means what the
# NVML reason it is named by means: package power tracking (PVIOL) holds the clocks under the
# power cap; the socket's and HBM's thermal limits are the firmware's thermal slowdown (TVIOL);
# PROCHOT is the hardware's thermal signal. The voltage regulator's thermal flag and the newer
# per-XCP "GFX clock below host limit" and "low utilization" flags name no NVML reason: not read.
AMD_THROTTLE: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("sw_power_cap", ("active_ppt_pwr",)),
    ("sw_thermal_slowdown", ("active_socket_thrm", "active_hbm_thrm")),
    ("hw_thermal_slowdown", ("active_prochot_thrm",)),
)
VIOLATION_FLAGS = tuple(flag for _, flags in AMD_THROTTLE for flag in flags)
# Figures no amdsmi call answers: the header says "the total number of ECC errors" and no
# more, so the counts are published as `total`, neither volatile nor aggregate (issue 43); no
# correctable-error repair count.
AMD_UNSUPPORTED = frozenset(
    {
        H.ECC_CORRECTED_VOLATILE,
        H.ECC_UNCORRECTED_VOLATILE,
        H.ECC_CORRECTED_AGGREGATE,
        H.ECC_UNCORRECTED_AGGREGATE,
        H.REMAPPED_ROWS_CORRECTABLE,
        H.PCIE_REPLAYS,  # the replay counter counts NAKs: pcie_naks
    }
)


def _ecc_by_blocks(device: Mapping[str, Any], key: str) -> tuple[int | None, Reason | None]:
    """One ECC count summed over the blocks amdsmi_get_gpu_ecc_enabled lists (the total the
    header's amdsmi_get_gpu_total_ecc_count gives): a block whose counter the kernel does not
    serve (NOT_SUPPORTED: "a block may be enabled" without one) adds nothing; any other failure
    or an out-of-range count is that figure's reason; no block answering is `unsupported`."""
    mask, reason = _counted(device.get(ECC_ENABLED), UINT64_MAX + 1)
    if reason is not None or mask is None:
        return None, reason
    blocks = device.get(ECC_BLOCKS_CALL)
    blocks = blocks if isinstance(blocks, Mapping) else {}
    total, answered = 0, 0
    for name, bit in ECC_BLOCKS:
        if not mask & bit:
            continue
        answer = blocks.get(name)
        if (code := error_code(answer)) is not None and reason_for(code) is Reason.UNSUPPORTED:
            continue
        count, why = _counted(mapping(answer).get(key, answer), UINT64_MAX)
        if why is not None or count is None:
            return None, why or Reason.INVALID_DATA
        total, answered = total + count, answered + 1
    return (total, None) if answered else (None, Reason.UNSUPPORTED)


def ecc_counts(device: Mapping[str, Any]) -> dict[HealthFigure, tuple[int | None, Reason | None]]:
    """Corrected and uncorrected ECC errors (`total`: the header gives no lifetime; issue 43):
    amdsmi_get_gpu_total_ecc_count,
    else, where it did not answer, the enabled blocks' amdsmi_get_gpu_ecc_count summed. Deferred
    errors (the UMC's poison, consumed later) are no NVML figure: recorded, not published."""
    out: dict[HealthFigure, tuple[int | None, Reason | None]] = {}
    total = device.get(TOTAL_ECC)
    for figure, key in (
        (H.ECC_CORRECTED_TOTAL, "correctable_count"),
        (H.ECC_UNCORRECTED_TOTAL, "uncorrectable_count"),
    ):
        found = _counted(mapping(total).get(key, total), UINT64_MAX)
        if found[1] is not None and error_code(total) is not None and ECC_ENABLED in device:
            by_blocks = _ecc_by_blocks(device, key)
            found = by_blocks if by_blocks[1] is None else found
        out[figure] = found
    return out


def bad_pages(answer: Any) -> dict[HealthFigure, tuple[int | None, Reason | None]]:
    """Bad pages as memory repair, as Hygon's retired pages: reserved pages count as rows
    remapped for uncorrectable errors; `pending` and `failed` are flags, as NVML's: 1 when a
    page waits to be retired, or could not be. read() records each record's status."""
    names = (H.REMAPPED_ROWS_UNCORRECTABLE, H.REMAPPED_ROWS_PENDING, H.REMAPPED_ROWS_FAILED)
    if (code := error_code(answer)) is not None:
        return dict.fromkeys(names, (None, reason_for(code)))
    if not isinstance(answer, list):
        return dict.fromkeys(names, (None, Reason.INVALID_DATA))
    statuses = [mapping(r).get("status", r) for r in answer]
    known = (PAGE_RESERVED, PAGE_PENDING, PAGE_UNRESERVABLE)
    if any(isinstance(s, bool) or as_int(s) not in known for s in statuses):
        return dict.fromkeys(names, (None, Reason.INVALID_DATA))
    found = [as_int(s) for s in statuses]
    return {
        H.REMAPPED_ROWS_UNCORRECTABLE: (found.count(PAGE_RESERVED), None),
        H.REMAPPED_ROWS_PENDING: (int(PAGE_PENDING in found), None),
        H.REMAPPED_ROWS_FAILED: (int(PAGE_UNRESERVABLE in found), None),
    }


def throttle(answer: Any) -> tuple[tuple[tuple[str, bool], ...] | None, Reason | None]:
    """The throttle reasons a violation status names, each active when any of its flags is. A
    flag answering the wheel's "N/A" (UINT8_MAX, "unsupported" in amdsmi.h) or missing from the
    answer is not reported, and a reason with no flag answering is left out; none answering is
    `unsupported`; a flag neither a boolean nor "N/A" is `invalid_data` for the whole mask."""
    if (code := error_code(answer)) is not None:
        return None, reason_for(code)
    if not isinstance(answer, Mapping):
        return None, Reason.INVALID_DATA
    active: list[tuple[str, bool]] = []
    for reason, flags in AMD_THROTTLE:
        values = [answer.get(flag) for flag in flags]
        if any(v is not None and v != NA and not isinstance(v, bool) for v in values):
            return None, Reason.INVALID_DATA
        answered = [v for v in values if isinstance(v, bool)]
        if answered:
            active.append((reason, any(answered)))
    return (tuple(active), None) if active else (None, Reason.UNSUPPORTED)


# The entry points whose answers make a board's CardHealth; a payload recorded before they were
# read has none of them (the total ECC count alone was read for health only), and its cards have
# no CardHealth (absent, as before).
HEALTH_KEYS = (
    "amdsmi_get_energy_count",
    "amdsmi_get_clock_info",
    "amdsmi_get_gpu_pci_replay_counter",
    ECC_ENABLED,
    BAD_PAGES,
    VIOLATIONS,
)


def health(device: Mapping[str, Any]) -> CardHealth | None:
    """A board's ECC counts, bad pages, throttle reasons, energy, clocks and PCIe replays
    (R-X7), from its first processor; None where the payload was recorded before they were
    read. The energy counter times its resolution (µJ per count, amdsmi.h) is joules; clocks
    answer MHz."""
    if not any(key in device for key in HEALTH_KEYS):
        return None
    found: dict[HealthFigure, Answer] = {}
    if TOTAL_ECC in device or ECC_ENABLED in device:
        found.update(ecc_counts(device))
    if BAD_PAGES in device:
        found.update(bad_pages(device[BAD_PAGES]))
    if VIOLATIONS in device:
        found[H.THROTTLE_REASONS] = throttle(device[VIOLATIONS])
    energy = device.get("amdsmi_get_energy_count")
    count, reason = _counted(mapping(energy).get("energy_accumulator", energy), UINT64_MAX)
    resolution = finite(mapping(energy).get("counter_resolution"))
    if count is not None and (resolution is None or resolution <= 0):
        count, reason = None, Reason.INVALID_DATA
    if reason is not None:
        found[H.ENERGY_JOULES] = (None, reason)
    elif count is not None and resolution is not None:
        found[H.ENERGY_JOULES] = (round(count * resolution / 1e6, 6), None)
    clocks = device.get("amdsmi_get_clock_info")
    for figure, domain in AMD_CLOCKS.items():
        answer = clocks.get(domain) if isinstance(clocks, Mapping) else None
        mhz, reason = _counted(mapping(answer).get("clk", answer), MAX_CLOCK_MHZ + 1)
        if mhz in TYPE_MAXIMA:  # a field ROCm SMI marked absent: no clock, never 65.5 GHz
            mhz, reason = None, Reason.INVALID_DATA
        found[figure] = (None if mhz is None else mhz * 1_000_000, reason)
    found[H.CLOCK_SM_HZ] = (None, Reason.UNSUPPORTED)
    # amdsmi's event notifications (VM faults, resets, throttling) and CPER records are no
    # error codes by number: not read (issue 29).
    found[H.XID_ERRORS] = (None, Reason.UNSUPPORTED)
    # "The sum of the number of NAK's received by the GPU and the NAK's generated by the GPU"
    # (amdsmi.h): NAKs, not NVML's replays (issue 43).
    found[H.PCIE_NAKS] = _counted(device.get("amdsmi_get_gpu_pci_replay_counter"), UINT64_MAX)
    found.update(unsupported(AMD_UNSUPPORTED))
    found.update(activity(device))
    return CardHealth.answered(found)


# amdsmi states no SM-level activity, tensor, pipe or link-throughput counter, and no vector
# unit apart from its compute units (issue 41).
AMD_ACTIVITY_UNSTATED = GPM_ACTIVITY | {H.VECTOR_CORE_BUSY}


def activity(device: Mapping[str, Any]) -> dict[HealthFigure, Answer]:
    """What amdsmi states of a card's activity (issue 41), each under the family whose meaning
    it has: `amdsmi_get_gpu_activity`'s `umc_activity` is the memory controller's busy time
    (the GPU metrics table's `average_umc_activity`, which rocm-smi shows as memory busy
    percent), not bandwidth; `gfx_activity`, the GFX engine's busy time, is the card's
    cores figure. Every GPM figure is `unsupported`."""
    found: dict[HealthFigure, Answer] = {}
    if "amdsmi_get_gpu_activity" in device:
        answer = device["amdsmi_get_gpu_activity"]
        umc = answer if error_code(answer) is not None else mapping(answer).get("umc_activity")
        found[H.MEMORY_BUSY] = percent_answer(umc, reason_for)
    found.update(unsupported(AMD_ACTIVITY_UNSTATED))
    return found


# -- the GPU metrics table: each XCP's own GFX busy time (issue 41) --------------------------------

METRICS = "amdsmi_get_gpu_metrics_info"
XCP_BUSY = "xcp_stats.gfx_busy_inst"  # the wheel's key: one list of XCC figures per XCP
# What read() keeps of the table: the card's averages (the same figures amdsmi_get_gpu_activity
# answers from it), the partition count and the per-XCP busy figures; the rest (clocks, power,
# the accumulators, the media engines' busy) is read by other calls or published by none.
METRICS_KEPT = (
    "average_gfx_activity",
    "average_umc_activity",
    "average_mm_activity",
    "num_partition",
)
# amdsmi.h's AMDSMI_MAX_NUM_XCP and AMDSMI_MAX_NUM_XCC: the table has no more.
MAX_XCP = 8
MAX_XCC = 8


def metrics_kept(answer: Any) -> Any:
    """What read() records of amdsmi_get_gpu_metrics_info's answer: a failure as it came;
    else the kept fields and the per-XCP lists of the card's partitions (`num_partition` of
    them where it is one to MAX_XCP: the wheel always answers eight), at most MAX_XCC figures
    each (a longer list or a longer table is recorded one past the bound, so parse() sees it
    was longer)."""
    if error_code(answer) is not None or not isinstance(answer, Mapping):
        return answer
    kept = {key: answer[key] for key in METRICS_KEPT if key in answer}
    stats = answer.get(XCP_BUSY)
    if isinstance(stats, list):
        count = as_int(answer.get("num_partition"))
        if count is None or not 1 <= count <= MAX_XCP:
            count = MAX_XCP + 1
        kept[XCP_BUSY] = [
            list(xccs[: MAX_XCC + 1]) if isinstance(xccs, list) else xccs for xccs in stats[:count]
        ]
    return kept


def xcp_index(device: Mapping[str, Any]) -> int | None:
    """The processor's compute partition (its KFD partition id): its entry in `xcp_stats`."""
    kfd = mapping(device.get("amdsmi_get_gpu_kfd_info"))
    return as_int(kfd.get("current_partition_id"))


def xcp_busy(table: Any, xcp: int | None) -> tuple[float | None, Reason | None]:
    """One XCP's GFX busy time from its board's GPU metrics table: the mean of
    `xcp_stats[xcp].gfx_busy_inst` over the XCCs that answered. amdsmi.h: "Utilization
    Instantaneous in %", each XCC's share of time its GFX engine was busy: a busy time (as
    `gfx_activity` is), not how much of the XCC worked. An XCC slot the firmware leaves at
    UINT32_MAX (the wheel's "N/A": a slot beyond the partition's own XCCs, or a table before
    v1.6) is not one of them; none answering is `unsupported` (never the board's average in its
    place); a failed read its code's reason; a figure outside 0..100 or a list longer than the
    header's array `invalid_data`."""
    if (code := error_code(table)) is not None:
        return None, reason_for(code)
    if not isinstance(table, Mapping) or xcp is None:
        return None, Reason.INVALID_DATA
    stats = table.get(XCP_BUSY)
    if stats is None:
        return None, Reason.UNSUPPORTED  # a library whose table has no per-XCP stats
    if not isinstance(stats, list) or len(stats) > MAX_XCP:
        return None, Reason.INVALID_DATA
    if not 0 <= xcp < len(stats):
        return None, Reason.UNSUPPORTED
    xccs = stats[xcp]
    if not isinstance(xccs, list) or len(xccs) > MAX_XCC:
        return None, Reason.INVALID_DATA
    answered: list[float] = []
    for value in xccs:
        if value == NA or (isinstance(value, int) and value in TYPE_MAXIMA):
            continue
        number = None if isinstance(value, bool) else finite(value)
        if number is None or not 0.0 <= number <= 100.0:
            return None, Reason.INVALID_DATA
        answered.append(number)
    if not answered:
        return None, Reason.UNSUPPORTED
    return round(sum(answered) / len(answered), 2), None


def xcp_cores(
    device: Mapping[str, Any], board: Mapping[str, Any] | None
) -> tuple[float | None, Reason | None] | None:
    """An XCP's GFX busy time from its board's table, or None where the board's table was not
    read (a payload recorded before it was): its handle's `gfx_activity` answers then."""
    if board is None or METRICS not in board:
        return None
    kfd = device.get("amdsmi_get_gpu_kfd_info")
    if (code := error_code(kfd)) is not None:
        return None, reason_for(code)
    return xcp_busy(board[METRICS], xcp_index(device))


def _address(socket: int, device: Mapping[str, Any] | None) -> Address:
    if device is None:
        return (("socket", socket),)
    kfd = mapping(device.get("amdsmi_get_gpu_kfd_info"))
    partition = as_int(kfd.get("current_partition_id"))
    return (("socket", socket),) if partition is None else (("socket", socket), ("xcp", partition))


def processor_card(
    device: Mapping[str, Any],
    socket: int,
    platform: Mapping[str, Any],
    *,
    whole: bool,
    parent: str | None = None,
    board: Mapping[str, Any] | None = None,
) -> Card | None:
    """One processor's card: a whole card, or one XCP of a partitioned card (`board`, the
    processor that answers for its card, whose GPU metrics table states the XCP's GFX busy)."""
    uuid = device_uuid(device)
    index = as_int(device.get("index"))
    if uuid is None or index is None:
        return None  # without its identity a device can be named in no figure
    total, used = _memory(device)
    reason = _unhealthy(device)
    own = None if whole else xcp_cores(device, board)
    return Card(
        id=uuid,
        index=index,
        name=text(_asic(device).get("market_name")),
        memory_total_mib=total,
        memory_used_mib=used,
        cores_utilization_percent=_utilization(device) if own is None else own[0],
        # A partition's board figures are its physical card's, never its own entry's.
        temperature_celsius=_temperature(device) if whole else None,
        power_usage_watts=_power(device) if whole else None,
        unhealthy=reason is not None,
        unhealthy_reason=reason,
        aliases=device_aliases(device, platform, whole),
        address=_address(socket, None if whole else device),
        parent_id=parent,
        health=health(device) if whole else None,
    )


def physical_card(
    socket_doc: Mapping[str, Any], socket: int, devices: list[Mapping[str, Any]]
) -> Card | None:
    """A partitioned card's own entry: board temperature, power and health from its first XCP
    only; memory and utilization are its XCPs' and stay on them."""
    pid = physical_id(socket_doc, devices)
    board = board_of(devices)
    index = as_int(board.get("index")) if board is not None else None
    if pid is None or board is None or index is None:
        return None
    reason = _unhealthy(board) or next(("device_lost" for d in devices if _lost(d)), None)
    mode = text(board.get("amdsmi_get_gpu_compute_partition"))
    address: Address = (("socket", socket),) + ((("compute_partition", mode),) if mode else ())
    return Card(
        id=pid,
        index=index,
        name=text(_asic(board).get("market_name")),
        temperature_celsius=_temperature(board),
        power_usage_watts=_power(board),
        unhealthy=reason is not None,
        unhealthy_reason=reason,
        address=address,
        health=health(board),
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


def compute_units_of(device: Mapping[str, Any]) -> int | None:
    units = as_int(_asic(device).get("num_compute_units"))
    return units if units is not None and units > 0 else None


# One device's process rows, and why its memory and its compute figures are absent: what the
# amdsmi path here and the ROCm SMI path (vendors/_amd_rocm_smi.py) both answer.
Rows = tuple[list[ProcessRow], Reason | None, Reason | None]


def scaled(value: float | None, scale: float | None) -> float | None:
    """A device-share percent restated as a share of a larger whole (None: cannot be)."""
    if value is None or scale is None:
        return None
    return round(value * scale, 2)


def amdsmi_rows(device: Mapping[str, Any], partition: str | None, scale: float | None) -> Rows:
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
    units = compute_units_of(device)
    first = previous_at is None
    rows: list[ProcessRow] = []
    for proc in entries(listed):
        pid = as_int(proc.get("pid"))
        if pid is None:
            continue
        vram = as_int(mapping(proc.get("memory_usage")).get("vram_mem"))  # bytes
        cores = None
        gfx = _number(mapping(proc.get("engine_usage")).get("gfx"))  # cumulative ns
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
                cores_percent=scaled(cores, scale),
                partition_id=partition,
            )
        )
    return rows, None, Reason.NO_BASELINE if first else None


# -- partitions -----------------------------------------------------------------------------------


def partition_reading(
    parent_id: str,
    device: Mapping[str, Any],
    platform: Mapping[str, Any],
    board: Mapping[str, Any] | None = None,
) -> PartitionReading:
    """An XCP read as a partition: memory on its own handle; its GFX busy time from its board's
    GPU metrics table (`xcp_stats`), else, in a payload recorded before the table was read, its
    handle's `gfx_activity`."""
    uuid = device_uuid(device) or ""
    total, used = _memory(device)
    own = xcp_cores(device, board)
    cores = _utilization(device) if own is None else own[0]
    activity = device.get("amdsmi_get_gpu_activity")
    if own is not None:
        cores_reason = own[1]
    elif cores is not None:
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


# -- links and placement (R-X3) -------------------------------------------------------------------

# amdsmi_link_type_t (amdsmi_io_link_type_t in older headers): both give PCIe 1 and xGMI 2; the
# rest (INTERNAL or UNDEFINED 0, NOT_APPLICABLE, UNKNOWN) place the pair nowhere.
AMD_LINKS = {1: "pcie", 2: "xgmi"}
MAX_NUMA_NODE = 1 << 12  # above any kernel's MAX_NUMNODES


def parse_topology(
    payload: Mapping[str, Any],
) -> dict[int, tuple[tuple[tuple[int, str], ...], int | None]]:
    """Per socket position, its links to the other sockets ((peer socket, kind), sorted) and its
    NUMA node, from the board processor of each socket; empty where the payload has no topology
    (a recording made before it was read). amdsmi says xGMI or PCIe (and hops), not how many
    links: no count."""
    topology = payload.get("topology")
    if not isinstance(topology, Mapping):
        return {}
    out: dict[int, tuple[list[tuple[int, str]], int | None]] = {}
    for entry in entries(topology.get("devices")):
        socket = as_int(entry.get("socket"))
        if socket is None:
            continue
        answer = entry.get("amdsmi_topo_get_numa_node_number")
        node = as_int(answer) if error_code(answer) is None else None
        out[socket] = ([], node if node is not None and 0 <= node < MAX_NUMA_NODE else None)
    for pair in entries(topology.get("pairs")):
        a, b = as_int(pair.get("a")), as_int(pair.get("b"))
        answer = mapping(pair.get("amdsmi_topo_get_link_type"))
        kind = AMD_LINKS.get(as_int(answer.get("type")) or 0)
        if a is None or b is None or a == b or a not in out or b not in out or kind is None:
            continue
        out[a][0].append((b, kind))
        out[b][0].append((a, kind))
    return {s: (tuple(sorted(set(links))), node) for s, (links, node) in out.items()}
