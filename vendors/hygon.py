"""Hygon DCUs through Hygon's own libraries, by our ctypes declarations (vendors/_hygon_lib.py):
its fork of ROCm SMI (`librocm_smi64.so`: cards and per-process rows), `libhydmi.so` (virtual
DCUs) and `libhydmi_mig.so` (multi-instance partitions, under NVML's symbol names, loaded
privately and deep-bound so it never answers for a libnvidia-ml in the same process, nor the
other way).

Here: the backend (which libraries, open, read, parse, close), and what ROCm SMI answers, read
and parsed: identity, card figures and per-process rows. What each of the two optional libraries
answers is read and parsed in a module of its own: vDCUs in vendors/_hygon_vdcu.py, MIG
partitions and the driver's registry of them in vendors/_hygon_mig.py. parse_partitions() here
sends each partition asked for to the one that names it.

`read()` asks the libraries and writes down what each entry point answered under its C name; a
failed call is {"error": <status name>, "code": <status>}. `parse()` is pure. Facts used here:
../shared/reference/vendors.md §4 and §12, reference-implementation.md (Hygon), Hygon's public
headers (HYGON-AI/hcu-dcgm pkg/dcgm/include/) and GPUStack's hardware notes; see docs/vendors.md.

Identity. A card's canonical id is GPUStack's: `GPU-` + the hex of its ROCm SMI unique id. Its
aliases are HAMi's `DCU-<index>` and `HCU-<serial>` and the PCI bus id `0000:bb:dd.f` the Hygon
device plugin registers. A vDCU is `vDCU-<index>` (its node-global index; alias `vdev<index>`,
the name of the configuration file the device plugins mount). A MIG partition, which the
library gives no UUID, is `MIG-<card id>/<gpu instance>/<compute instance>`, with the
`MIG-<uuid>` the driver writes in /etc/dmi_mig_config as its alias (what GPUStack records as
`allocatedPhysicalID` and Hygon's device plugin hands out).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Iterable, Mapping
from ctypes import byref, c_char, c_float, c_int64, c_uint32, c_uint64
from pathlib import Path
from typing import Any, ClassVar

from devicemanager.backend import BackendUnavailable, Library
from devicemanager.model import (
    MIB,
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
from vendors import _hygon_lib as lib
from vendors._common import (
    EVERY_ACTIVITY,
    failed,
    finite,
    listing,
    load,
    percent_answer,
    reasons,
)
from vendors._common import error_code as _error
from vendors._hygon_mig import MIG_CONFIG as MIG_CONFIG
from vendors._hygon_mig import MIG_CONFIG_ENV as MIG_CONFIG_ENV
from vendors._hygon_mig import Instance, instance_reading, mig_instances, mig_reading, read_mig
from vendors._hygon_vdcu import VDCU, read_vdcu, vdcu_reading
from vendors._placement import due, index_of, numa_node, parse_pairs

MANUFACTURER = "hygon"

# Where Hygon installs its libraries; none of them is on the linker's path by default.
DIRECTORIES = ("/opt/hyhal/lib", "/opt/dtk/lib", "/opt/dtk/.hyhal/lib", "/opt/hygondriver/lib")
# The unversioned links may be missing on a node (hcu-dcgm's README): the versioned sonames are
# tried too, in each directory.
ROCM_SMI = Library(
    "rocm_smi",
    ("librocm_smi64.so", "librocm_smi64.so.2", "librocm_smi64.so.7", "librocm_smi64.so.1"),
    DIRECTORIES,
)
HYDMI = Library("hydmi", ("libhydmi.so", "libhydmi.so.1"), DIRECTORIES)
HYDMI_MIG = Library("hydmi_mig", ("libhydmi_mig.so", "libhydmi_mig.so.1"), DIRECTORIES)

PROCESS_LIST_ATTEMPTS = 3  # asked again when the list grew between the size probe and the read
MAX_PROCESSES = 4096  # the most rows one list read takes; more is `truncated`
MAX_DEVICES_PER_PROCESS = 64
MAX_PARTITIONS = 1024  # partitions one round reads; a node holds far fewer

rsmi_reason = reasons(
    unsupported=frozenset({lib.RSMI_NOT_SUPPORTED, lib.RSMI_NOT_YET_IMPLEMENTED}),
    permission=frozenset({lib.RSMI_PERMISSION}),
    truncated=frozenset({lib.RSMI_INSUFFICIENT_SIZE}),
)

# Where a call is refused because the library does not export it: each library's own
# "not supported" code, so the reason is `unsupported`.
NOT_EXPORTED = "NOT_EXPORTED"


# -- parse: pure ------------------------------------------------------------------------------


def _entries(value: Any) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def bus_id_of(bdfid: Any) -> str | None:
    """ROCm SMI's BDFID (domain << 32 | bus << 8 | device << 3 | function) as `0000:bb:dd.f`."""
    value = as_int(bdfid)
    if value is None or value < 0:
        return None
    domain, bus, dev, fn = value >> 32, (value >> 8) & 0xFF, (value >> 3) & 0x1F, value & 0x7
    return f"{domain & 0xFFFFFFFF:04x}:{bus:02x}:{dev:02x}.{fn:x}"


def _identity(device: Mapping[str, Any]) -> tuple[int | None, str | None, str | None, str | None]:
    """(unique id, bus id, name, serial) as this round answered, else as known from before."""
    known = device.get("known")
    known = known if isinstance(known, Mapping) else {}
    unique = as_int(device.get("rsmi_dev_unique_id_get"))
    if unique is None:
        unique = as_int(known.get("unique_id"))
    bus = bus_id_of(device.get("rsmi_dev_pci_id_get"))
    if bus is None:
        bus = bus_id_of(known.get("bdf"))
    name = device.get("rsmi_dev_name_get")
    if not isinstance(name, str):
        name = known.get("name")
    serial = device.get("rsmi_dev_serial_number_get")
    if not isinstance(serial, str):
        serial = known.get("serial")
    return (
        unique if unique is not None and unique >= 0 else None,
        bus,
        name if isinstance(name, str) and name else None,
        serial.strip() if isinstance(serial, str) and serial.strip() else None,
    )


def card_ids(devices: Iterable[Mapping[str, Any]]) -> dict[int, tuple[str, ...]]:
    """Enumeration index -> every id the card answers to, canonical first.

    Canonical: `GPU-<hex unique id>` (GPUStack's); a unique id two cards report (some boards
    report none, or the same) names neither, and the card is then named by its PCI bus id. A card
    with neither is left out: it cannot be named in any figure."""
    seen: dict[int, tuple[int | None, str | None, str | None]] = {}
    for device in devices:
        index = as_int(device.get("index"))
        if index is None or index < 0 or index in seen:
            continue
        unique, bus, _, serial = _identity(device)
        seen[index] = (unique, bus, serial)
    uniques = [u for u, _, _ in seen.values() if u is not None]
    out: dict[int, tuple[str, ...]] = {}
    for index, (unique, bus, serial) in seen.items():
        gpu = f"GPU-{unique:x}" if unique is not None and uniques.count(unique) == 1 else None
        canonical = gpu or bus
        if canonical is None:
            continue
        ids = [canonical, f"DCU-{index}"]
        if serial is not None:
            ids.append(f"HCU-{serial}")
        if bus is not None:
            ids.append(bus)
        out[index] = tuple(dict.fromkeys(ids))
    return out


def _cannot(code: int | None) -> bool:
    return code is not None and rsmi_reason(code) in (Reason.UNSUPPORTED, Reason.PERMISSION)


def _unhealthy(device: Mapping[str, Any]) -> str | None:
    """Why the card is unusable, or None; the first match, most severe first. A card that
    answers neither its identity nor its memory (its sysfs files gone) is unreachable; an
    uncorrectable ECC error is what GPUStack and the ROCm tools count as a failed card; a page
    the driver could not retire (UNRESERVABLE) leaves bad memory in use (R-X7), as NVML's
    failed row remap does."""
    identity, memory = (
        _error(device.get("rsmi_dev_unique_id_get")),
        _error(device.get("rsmi_dev_memory_total_get")),
    )
    if identity is not None and memory is not None and not (_cannot(identity) or _cannot(memory)):
        return "unreachable"
    ecc = device.get("rsmi_dev_ecc_count_get")
    if isinstance(ecc, Mapping) and _error(ecc) is None:
        uncorrectable = as_int(ecc.get("uncorrectable_err"))
        if uncorrectable is not None and uncorrectable > 0:
            return "ecc_uncorrectable"
    if "rsmi_dev_memory_reserved_pages_get" in device:
        pages = _retired_pages(device["rsmi_dev_memory_reserved_pages_get"])
        if pages[H.REMAPPED_ROWS_FAILED] == (1, None):
            return "retired_pages_unreservable"
    return None


def _temperature(device: Mapping[str, Any]) -> float | None:
    """°C from millidegrees: the edge sensor, else the junction where edge is not served."""
    temps = device.get("rsmi_dev_temp_metric_get")
    if not isinstance(temps, Mapping):
        return None
    for sensor in ("edge", "junction"):
        value = finite(temps.get(sensor))
        if value is not None:
            return round(value / 1000.0, 3)
    return None


def _power(device: Mapping[str, Any]) -> float | None:
    """W from microwatts: rsmi_dev_power_get (current or average, as the card serves), else
    rsmi_dev_power_ave_get. An invalid power type is absent, not 0."""
    power = device.get("rsmi_dev_power_get")
    if isinstance(power, Mapping) and _error(power) is None:
        if as_int(power.get("type")) == 0xFFFFFFFF:
            return None
        value = finite(power.get("power"))
        return None if value is None else round(value / 1e6, 3)
    value = finite(device.get("rsmi_dev_power_ave_get"))
    return None if value is None else round(value / 1e6, 3)


UINT64_MAX = 0xFFFFFFFFFFFFFFFF
MAX_CLOCK_HZ = 100_000_000_000  # 100 GHz: no accelerator's clock is near it
MAX_RETIRED_PAGES = 4096  # retired-page records one read takes; more is `truncated`
# CardHealth's clocks by ROCm SMI's clock domain: the system clock is the one compute runs on
# (graphics); ROCm SMI has no separate SM domain, so `clock_sm_hz` is `unsupported` here.
H = HealthFigure
HYGON_CLOCKS = (
    (H.CLOCK_GRAPHICS_HZ, "sys", lib.RSMI_CLK_TYPE_SYS),
    (H.CLOCK_MEMORY_HZ, "mem", lib.RSMI_CLK_TYPE_MEM),
)
# The entry points whose answers make a card's CardHealth; a payload recorded before they were
# read has none of them, and its cards have no CardHealth (absent, as before).
HEALTH_KEYS = (
    "rsmi_dev_energy_count_get",
    "rsmi_dev_gpu_clk_freq_get",
    "rsmi_dev_pci_replay_counter_get",
    "rsmi_dev_memory_reserved_pages_get",
    "rsmi_dev_memory_busy_percent_get",
)
# Figures no call of Hygon's ROCm SMI answers (the throttle status is only a field of the
# versioned gpu_metrics table, with AMD's own bits): absent with `unsupported`.
HYGON_UNSUPPORTED = frozenset(
    {
        H.ECC_CORRECTED_VOLATILE,  # rocm_smi.h says "accumulated", not since when (issue 43)
        H.ECC_UNCORRECTED_VOLATILE,
        H.ECC_CORRECTED_AGGREGATE,
        H.ECC_UNCORRECTED_AGGREGATE,
        H.REMAPPED_ROWS_CORRECTABLE,
        H.THROTTLE_REASONS,
        H.CLOCK_SM_HZ,
        H.XID_ERRORS,  # no error-event call in the fork's header (issue 29)
        H.PCIE_REPLAYS,  # the replay counter counts NAKs: pcie_naks
    }
)


def _count(value: Any, ceiling: int = UINT64_MAX) -> tuple[int | None, Reason | None]:
    """An unsigned count ROCm SMI answered, or why it is absent: a failure's reason; the type's
    all-ones value, a negative, a boolean or a fraction is `invalid_data`."""
    if (code := _error(value)) is not None:
        return None, rsmi_reason(code)
    number = as_int(value)
    if number is None or not 0 <= number < ceiling:
        return None, Reason.INVALID_DATA
    return number, None


def _clock(answer: Any) -> tuple[int | None, Reason | None]:
    """The current level of one rsmi_frequencies_t, Hz: its index must name one of the levels
    it lists (all ones is "none current"), and the level must be a plausible clock."""
    if (code := _error(answer)) is not None:
        return None, rsmi_reason(code)
    if not isinstance(answer, Mapping):
        return None, Reason.INVALID_DATA
    levels = answer.get("frequency")
    supported = as_int(answer.get("num_supported"))
    current = as_int(answer.get("current"))
    if not isinstance(levels, list) or supported is None or current is None:
        return None, Reason.INVALID_DATA
    if not 0 <= current < min(supported, len(levels)):
        return None, Reason.INVALID_DATA
    hz = as_int(levels[current])
    if hz is None or not 0 <= hz <= MAX_CLOCK_HZ:
        return None, Reason.INVALID_DATA
    return hz, None


def _retired_pages(answer: Any) -> dict[HealthFigure, tuple[int | None, Reason | None]]:
    """Retired (bad) pages as memory repair: pages retired count as rows remapped for
    uncorrectable errors; `pending` and `failed` are flags, as NVML's: 1 when a page waits
    to be retired, or could not be."""
    names = (H.REMAPPED_ROWS_UNCORRECTABLE, H.REMAPPED_ROWS_PENDING, H.REMAPPED_ROWS_FAILED)
    if (code := _error(answer)) is not None:
        return dict.fromkeys(names, (None, rsmi_reason(code)))
    statuses = [as_int(s) for s in answer] if isinstance(answer, list) else None
    known = (
        lib.RSMI_MEM_PAGE_STATUS_RESERVED,
        lib.RSMI_MEM_PAGE_STATUS_PENDING,
        lib.RSMI_MEM_PAGE_STATUS_UNRESERVABLE,
    )
    if statuses is None or any(s not in known for s in statuses):
        return dict.fromkeys(names, (None, Reason.INVALID_DATA))
    return {
        H.REMAPPED_ROWS_UNCORRECTABLE: (statuses.count(lib.RSMI_MEM_PAGE_STATUS_RESERVED), None),
        H.REMAPPED_ROWS_PENDING: (int(lib.RSMI_MEM_PAGE_STATUS_PENDING in statuses), None),
        H.REMAPPED_ROWS_FAILED: (int(lib.RSMI_MEM_PAGE_STATUS_UNRESERVABLE in statuses), None),
    }


def parse_health(device: Mapping[str, Any]) -> CardHealth | None:
    """A card's ECC counts, retired pages, energy, clocks and PCIe replays (R-X7), in base
    units, each absent with its reason; None where the payload was recorded before they were
    read. ECC is the memory (UMC) block's "accumulated" count, published as `total`: the header
    gives no lifetime (issue 43)."""
    if not any(key in device for key in HEALTH_KEYS):
        return None
    found: dict[HealthFigure, Answer] = {}
    ecc = device.get("rsmi_dev_ecc_count_get")
    if ecc is not None:
        for figure, key in (
            (H.ECC_CORRECTED_TOTAL, "correctable_err"),
            (H.ECC_UNCORRECTED_TOTAL, "uncorrectable_err"),
        ):
            found[figure] = _count(
                ecc.get(key) if isinstance(ecc, Mapping) and _error(ecc) is None else ecc
            )
    if "rsmi_dev_memory_reserved_pages_get" in device:
        found.update(_retired_pages(device["rsmi_dev_memory_reserved_pages_get"]))
    energy = device.get("rsmi_dev_energy_count_get")
    if energy is not None:
        answered = isinstance(energy, Mapping) and _error(energy) is None
        counts, reason = _count(energy.get("counter") if answered else energy)
        resolution = finite(energy.get("resolution")) if answered else None
        if counts is not None and (resolution is None or resolution <= 0):
            counts, reason = None, Reason.INVALID_DATA
        joules = None if counts is None or resolution is None else counts * resolution / 1e6
        found[H.ENERGY_JOULES] = (None if joules is None else round(joules, 6), reason)
    clocks = device.get("rsmi_dev_gpu_clk_freq_get")
    if clocks is not None:
        for figure, key, _ in HYGON_CLOCKS:
            found[figure] = _clock(
                clocks.get(key)
                if isinstance(clocks, Mapping) and _error(clocks) is None
                else clocks
            )
    if "rsmi_dev_pci_replay_counter_get" in device:
        # NAKs received plus generated (rocm_smi.h), not NVML's replays (issue 43).
        found[H.PCIE_NAKS] = _count(device["rsmi_dev_pci_replay_counter_get"])
    found.update(unsupported(HYGON_UNSUPPORTED))
    # Hygon's ROCm SMI fork states the cores' busy time (`rsmi_dev_busy_percent_get`) and the
    # memory's ("the percentage of time that any device memory is being used", rocm_smi.h),
    # both busy time. Its CU figures are no activity over the round: `rsmi_dev_cu_util_get`
    # and `rsmi_dev_wave_util_get` sample inside the call for a window it is given (hy-smi's
    # 1000 ms; a read never sleeps), `rsmi_dev_cu_usage_get` is one instant (issue 41).
    found.update(unsupported(EVERY_ACTIVITY))
    # A payload recorded before the memory's busy time was read keeps it `unsupported`.
    if "rsmi_dev_memory_busy_percent_get" in device:
        found[H.MEMORY_BUSY] = percent_answer(
            device["rsmi_dev_memory_busy_percent_get"], rsmi_reason
        )
    return CardHealth.answered(found)


def parse_card(device: Mapping[str, Any], ids: tuple[str, ...]) -> Card:
    _, _, name, _ = _identity(device)
    busy = device.get("rsmi_dev_busy_percent_get")
    reason = _unhealthy(device)
    return Card(
        id=ids[0],
        index=as_int(device.get("index")) or 0,
        name=name,
        memory_total_mib=mib_from_bytes(as_int(device.get("rsmi_dev_memory_total_get"))),
        memory_used_mib=mib_from_bytes(as_int(device.get("rsmi_dev_memory_usage_get"))),
        cores_utilization_percent=finite(busy) if as_int(busy) is not None else None,
        temperature_celsius=_temperature(device),
        power_usage_watts=_power(device),
        unhealthy=reason is not None,
        unhealthy_reason=reason,
        aliases=ids[1:],
        health=parse_health(device),
    )


def _row_from_device_answer(pid: int, answer: Mapping[str, Any]) -> ProcessRow:
    """rsmi_compute_process_info_by_device_get: VRAM in bytes on this device; cu_occupancy in
    percent of the card, CU_OCCUPANCY_INVALID (the kernel gives none) absent for this row."""
    cu = as_int(answer.get("cu_occupancy"))
    return ProcessRow(
        pid=pid,
        memory_bytes=as_int(answer.get("vram_usage")),
        cores_percent=None if cu is None or cu == lib.CU_OCCUPANCY_INVALID else float(cu),
    )


def _row_from_v2(pid: int, index: int, answer: Mapping[str, Any]) -> ProcessRow:
    """Hygon's rsmi_compute_process_info_by_pid_get_v2: VRAM in MiB for the whole process, so
    it is this device's only when the process uses this device alone; a usage rate per GPU."""
    gpus = (
        [as_int(g) for g in answer.get("gpuIndex") or []]
        if isinstance(answer.get("gpuIndex"), list)
        else []
    )
    rates = answer.get("gpuUsageRate") if isinstance(answer.get("gpuUsageRate"), list) else []
    vram = as_int(answer.get("vramUsageSize"))
    memory = vram * MIB if vram is not None and gpus == [index] else None
    cores = None
    if index in gpus and isinstance(rates, list) and gpus.index(index) < len(rates):
        cores = finite(rates[gpus.index(index)])
    return ProcessRow(pid=pid, memory_bytes=memory, cores_percent=cores)


def parse_processes(
    payload: Mapping[str, Any], device: Mapping[str, Any], card_id: str
) -> DeviceProcesses | None:
    """The per-process answer of one carved card; None when read() did not ask for it.

    Three steps, as the ROCm SMI path answers: the node's process list (one read for every
    card), the devices each process uses, then each process's row on this device."""
    asked = device.get("processes")
    listing = payload.get("processes")
    index = as_int(device.get("index"))
    if not isinstance(asked, list) or not isinstance(listing, Mapping) or index is None:
        return None
    rows_listed = listing.get("rsmi_compute_process_info_get")
    code = _error(rows_listed)
    if code is not None or not isinstance(rows_listed, list):
        whole = rsmi_reason(code) if code is not None else Reason.TRANSIENT_DRIVER_ERROR
        return DeviceProcesses(
            device_id=card_id,
            memory_reason=whole,
            cores_reason=whole,
            reads_truncated=int(whole is Reason.TRUNCATED),
        )
    gpus: dict[int, Any] = {}
    for entry in _entries(listing.get("rsmi_compute_process_gpus_get")):
        pid = as_int(entry.get("pid"))
        if pid is not None:
            gpus[pid] = entry.get("devices")
    answers: dict[int, Mapping[str, Any]] = {}
    for entry in _entries(asked):
        pid = as_int(entry.get("pid"))
        if pid is not None:
            answers[pid] = entry
    reason: Reason | None = None
    rows: list[ProcessRow] = []
    pids = [as_int(r.get("process_id")) for r in _entries(rows_listed)]
    for pid in dict.fromkeys(p for p in pids if p is not None):
        on = gpus.get(pid)
        on_code = _error(on)
        if on_code == lib.RSMI_NOT_FOUND:
            continue  # exited since the list was read
        if on_code is not None or not isinstance(on, list):
            # Which devices it uses is unknown: the list for this card cannot be complete.
            reason = reason or (rsmi_reason(on_code) if on_code else Reason.TRANSIENT_DRIVER_ERROR)
            continue
        if index not in on:
            continue
        asked_row = answers.get(pid)
        answer = asked_row.get("rsmi_compute_process_info_by_device_get") if asked_row else None
        a_code = _error(answer)
        if a_code is None and isinstance(answer, Mapping):
            rows.append(_row_from_device_answer(pid, answer))
            continue
        if a_code == lib.RSMI_NOT_FOUND:
            continue  # exited, or left this device, between the steps
        fallback = asked_row.get("rsmi_compute_process_info_by_pid_get_v2") if asked_row else None
        if a_code is not None and rsmi_reason(a_code) is Reason.UNSUPPORTED and fallback:
            v_code = _error(fallback)
            if v_code == lib.RSMI_NOT_FOUND:
                continue
            if v_code is None and isinstance(fallback, Mapping):
                rows.append(_row_from_v2(pid, index, fallback))
                continue
            a_code = v_code
        # A row that cannot be read makes the device's figures absent: never a partial sum.
        reason = reason or (
            rsmi_reason(a_code) if a_code is not None else Reason.TRANSIENT_DRIVER_ERROR
        )
    return DeviceProcesses(
        device_id=card_id,
        rows=tuple(rows),
        memory_reason=reason,
        cores_reason=reason,
        reads_truncated=int(reason is Reason.TRUNCATED),
    )


def _wanted(payload: Mapping[str, Any]) -> list[tuple[str, str]]:
    request = payload.get("request")
    items = request.get("partitions") if isinstance(request, Mapping) else None
    out = []
    for item in items if isinstance(items, list) else ():
        if isinstance(item, list) and len(item) == 2 and all(isinstance(s, str) for s in item):
            out.append((item[0], item[1]))
    return out[:MAX_PARTITIONS]


def parse_partitions(
    payload: Mapping[str, Any], ids: Mapping[int, tuple[str, ...]]
) -> tuple[PartitionReading, ...]:
    """Answer every partition read() was asked for, found only by its recorded id (R-V4)."""
    by_alias: dict[str, tuple[str, ...]] = {}
    for card in ids.values():
        for alias in card:
            by_alias[alias] = card
    instances = mig_instances(payload, ids)
    found: dict[str, tuple[Instance, list[str]]] = {}
    out: dict[tuple[str, str], PartitionReading] = {}
    for parent, wanted in _wanted(payload):
        parent_ids = by_alias.get(parent) if parent else None
        canonical_parent = parent_ids[0] if parent_ids else parent
        if m := VDCU.fullmatch(wanted):
            reading = vdcu_reading(
                wanted, int(m.group(1)), canonical_parent, payload, ids, parent_ids
            )
            if (reading.id, reading.parent_id) in out:
                previous = out[(reading.id, reading.parent_id)]
                aliases = (
                    *previous.aliases,
                    *(a for a in reading.aliases if a not in previous.aliases),
                )
                reading = PartitionReading(**{**_fields(previous), "aliases": aliases})
            out[(reading.id, reading.parent_id)] = reading
            continue
        answer = mig_reading(wanted, canonical_parent, payload, instances, parent_ids)
        if isinstance(answer, PartitionReading):
            out.setdefault((answer.id, answer.parent_id), answer)
            continue
        instance, spellings = found.setdefault(answer.id, (answer, []))
        spellings.append(wanted)
    for instance, spellings in found.values():
        reading = instance_reading(instance, spellings)
        out[(reading.id, reading.parent_id)] = reading
    return tuple(out.values())


def _fields(reading: PartitionReading) -> dict[str, Any]:
    return {
        "id": reading.id,
        "parent_id": reading.parent_id,
        "memory_total_mib": reading.memory_total_mib,
        "memory_used_mib": reading.memory_used_mib,
        "cores_percent": reading.cores_percent,
        "memory_reason": reading.memory_reason,
        "cores_reason": reading.cores_reason,
        "aliases": reading.aliases,
        "activity": reading.activity,
    }


def parse(payload: Payload) -> VendorReading:
    devices = listing(payload, "devices")
    ids = card_ids(devices)
    cards, processes = [], []
    for device in devices:
        index = as_int(device.get("index"))
        if index is None or index not in ids:
            continue
        cards.append(parse_card(device, ids[index]))
        answer = parse_processes(payload, device, ids[index][0])
        if answer is not None:
            processes.append(answer)
    seen: set[str] = set()
    unique_cards = []
    for c in cards:  # an index listed twice by a damaged payload names one card once
        if c.id not in seen:
            seen.add(c.id)
            unique_cards.append(c)
    unique_cards = _placed(unique_cards, ids, parse_topology(payload))
    driver = payload.get("rsmi_version_str_get")
    libraries = payload.get("libraries")
    loaded = (
        [n for n in ("rocm_smi", "hydmi", "hydmi_mig") if libraries.get(n) is True]
        if isinstance(libraries, Mapping)
        else []
    )
    return VendorReading(
        manufacturer=MANUFACTURER,
        cards=tuple(unique_cards),
        processes=tuple(processes),
        partitions=parse_partitions(payload, ids),
        driver_version=driver if isinstance(driver, str) and driver else None,
        via=",".join(loaded) or None,
    )


# -- links and placement (R-X3) ----------------------------------------------------------------

# RSMI_IO_LINK_TYPE as Hygon's rocm_smi.h keeps it (upstream's values): PCIe 1, and 2, which the
# header still calls RSMI_IOLINK_TYPE_XGMI and Hygon's own tools (hcu-dcgm's LinkTypeHSL, `hy-smi
# --showtopotype`) name HSL, Hygon's card-to-card link. UNDEFINED 0 and anything else place the
# pair nowhere. The call gives hops, not how many links: no count.
HYGON_LINKS = {1: "pcie", 2: "hsl"}


def _link(pair: Mapping[str, Any]) -> str | None:
    answer = pair.get("rsmi_topo_get_link_type")
    if not isinstance(answer, Mapping) or _error(answer) is not None:
        return None
    return HYGON_LINKS.get(as_int(answer.get("type")) or 0)


def parse_topology(
    payload: Mapping[str, Any],
) -> Mapping[Any, tuple[tuple[tuple[Any, str], ...], int | None]]:
    """Per enumeration index, its links ((peer index, kind)) and its NUMA node
    (`rsmi_topo_get_numa_node_number`); empty where the payload has no topology."""
    return parse_pairs(
        payload,
        "index",
        index_of,
        lambda e: numa_node(e.get("rsmi_topo_get_numa_node_number")),
        _link,
    )


def _placed(
    cards: list[Card],
    ids: Mapping[int, tuple[str, ...]],
    topology: Mapping[Any, tuple[tuple[tuple[Any, str], ...], int | None]],
) -> list[Card]:
    """Each card with its links to the others, by their canonical ids, and its NUMA node."""
    out = []
    for card in cards:
        if card.index not in topology or ids.get(card.index, ("",))[0] != card.id:
            out.append(card)
            continue
        links, node = topology[card.index]
        named = tuple(CardLink(ids[peer][0], kind) for peer, kind in links if peer in ids)
        out.append(dataclasses.replace(card, links=named, numa_node=node))
    return out


# -- read: the libraries ----------------------------------------------------------------------


class HygonBackend:
    """Reads Hygon DCUs through our ctypes declarations of its three libraries."""

    manufacturer = MANUFACTURER
    libraries: ClassVar[tuple[Library, ...]] = (ROCM_SMI, HYDMI, HYDMI_MIG)

    def __init__(
        self,
        libraries: Mapping[str, str] | None = None,
        mig_config: str | os.PathLike[str] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.configured = dict(libraries or {})
        self.mig_config = Path(mig_config or os.environ.get(MIG_CONFIG_ENV) or MIG_CONFIG)
        self._clock = clock
        # The node's links and NUMA nodes, last read (R-X3), and the cards they were read for.
        self._topology: dict[str, Any] | None = None
        self._topology_cards: tuple[Any, ...] = ()
        self._rsmi: lib.Bound | None = None
        self._dmi: lib.Bound | None = None
        self._mig: lib.Bound | None = None
        # What each enumeration index answered before, for a card that stops answering.
        self._known: dict[int, dict[str, Any]] = {}

    # -- lifecycle --------------------------------------------------------------------------

    def open(self) -> None:
        rsmi = lib.Bound(load(ROCM_SMI, self.configured), lib.RSMI_PROTOTYPES)
        init = rsmi.get("rsmi_init")
        if init is None:
            raise BackendUnavailable(f"{ROCM_SMI.sonames[0]} exports no rsmi_init")
        rc = init(0)
        if rc != lib.RSMI_SUCCESS:
            raise BackendUnavailable(
                f"ROCm SMI could not be initialised: {lib.rsmi_status_name(rc)}"
            )
        self._rsmi = rsmi
        # The vDCU and multi-instance libraries are optional: a node without them has no such
        # partitions, and its cards are read all the same.
        self._dmi = self._optional(HYDMI, lib.DMI_PROTOTYPES)
        # libhydmi_mig exports NVML's names: deep-bound, so its calls to its own nvml*
        # functions stay its own even where a libnvidia-ml sits in the global namespace.
        self._mig = self._optional(HYDMI_MIG, lib.MIG_PROTOTYPES, deep=True)

    def _optional(
        self, library: Library, prototypes: Mapping[str, Any], *, deep: bool = False
    ) -> lib.Bound | None:
        try:
            return lib.Bound(load(library, self.configured, deep=deep), prototypes)
        except BackendUnavailable:
            return None

    def close(self) -> None:
        rsmi, self._rsmi = self._rsmi, None
        self._dmi = self._mig = None
        if rsmi is not None and (shut := rsmi.get("rsmi_shut_down")) is not None:
            shut()

    # -- calls ------------------------------------------------------------------------------

    def _rsmi_call(self, name: str, *args: Any) -> int | None:
        """The status of one ROCm SMI call, or None when the library does not export it."""
        assert self._rsmi is not None
        fn = self._rsmi.get(name)
        return None if fn is None else int(fn(*args))

    def _rsmi_out(self, name: str, ctype: Any, *args: Any) -> Any:
        """One ROCm SMI call that writes a number: the number, or the failure."""
        out = ctype()
        rc = self._rsmi_call(name, *args, byref(out))
        if rc is None:
            return failed(NOT_EXPORTED, lib.RSMI_NOT_SUPPORTED)
        if rc != lib.RSMI_SUCCESS:
            return failed(lib.rsmi_status_name(rc), rc)
        return int(out.value)

    def _rsmi_text(self, name: str, *args: Any) -> Any:
        buffer = (c_char * 256)()
        rc = self._rsmi_call(name, *args, buffer, 256)
        if rc is None:
            return failed(NOT_EXPORTED, lib.RSMI_NOT_SUPPORTED)
        if rc != lib.RSMI_SUCCESS:
            return failed(lib.rsmi_status_name(rc), rc)
        return lib.c_text(buffer)

    def _failed(self, rc: int | None) -> dict[str, Any]:
        """How a failed call is recorded; a call the library does not export is NOT_SUPPORTED."""
        code = lib.RSMI_NOT_SUPPORTED if rc is None else rc
        return failed(NOT_EXPORTED if rc is None else lib.rsmi_status_name(code), code)

    def _health(self, index: int, d: dict[str, Any]) -> None:
        """The answers CardHealth is parsed from (R-X7), keyed by entry point."""
        counter, resolution, at = c_uint64(), c_float(), c_uint64()
        rc = self._rsmi_call(
            "rsmi_dev_energy_count_get", index, byref(counter), byref(resolution), byref(at)
        )
        d["rsmi_dev_energy_count_get"] = (
            {"counter": counter.value, "resolution": resolution.value, "timestamp": at.value}
            if rc == lib.RSMI_SUCCESS
            else self._failed(rc)
        )  # counts of `resolution` µJ; the time stamp in ns
        clocks: dict[str, Any] = {}
        for _, key, kind in HYGON_CLOCKS:
            levels = lib.Frequencies()
            rc = self._rsmi_call("rsmi_dev_gpu_clk_freq_get", index, kind, byref(levels))
            if rc != lib.RSMI_SUCCESS:
                clocks[key] = self._failed(rc)
                continue
            n = min(levels.num_supported, lib.RSMI_MAX_NUM_FREQUENCIES)
            clocks[key] = {
                "num_supported": levels.num_supported,
                "current": levels.current,
                "frequency": list(levels.frequency[:n]),  # Hz
            }
        d["rsmi_dev_gpu_clk_freq_get"] = clocks
        d["rsmi_dev_pci_replay_counter_get"] = self._rsmi_out(
            "rsmi_dev_pci_replay_counter_get", c_uint64, index
        )
        d["rsmi_dev_memory_busy_percent_get"] = self._rsmi_out(
            "rsmi_dev_memory_busy_percent_get", c_uint32, index
        )  # percent of the driver's sample period
        count = c_uint32(0)
        rc = self._rsmi_call("rsmi_dev_memory_reserved_pages_get", index, byref(count), None)
        if rc != lib.RSMI_SUCCESS:
            d["rsmi_dev_memory_reserved_pages_get"] = self._failed(rc)
            return
        if count.value > MAX_RETIRED_PAGES:
            d["rsmi_dev_memory_reserved_pages_get"] = failed(
                lib.rsmi_status_name(lib.RSMI_INSUFFICIENT_SIZE), lib.RSMI_INSUFFICIENT_SIZE
            )
            return
        records = (lib.RetiredPage * max(count.value, 1))()
        capacity = c_uint32(count.value)
        rc = self._rsmi_call("rsmi_dev_memory_reserved_pages_get", index, byref(capacity), records)
        d["rsmi_dev_memory_reserved_pages_get"] = (
            [int(r.status) for r in records[: min(capacity.value, count.value)]]
            if rc == lib.RSMI_SUCCESS
            else self._failed(rc)
        )

    def _device(self, index: int) -> dict[str, Any]:
        d: dict[str, Any] = {"index": index}
        d["rsmi_dev_unique_id_get"] = self._rsmi_out("rsmi_dev_unique_id_get", c_uint64, index)
        d["rsmi_dev_pci_id_get"] = self._rsmi_out("rsmi_dev_pci_id_get", c_uint64, index)
        d["rsmi_dev_name_get"] = self._rsmi_text("rsmi_dev_name_get", index)
        d["rsmi_dev_serial_number_get"] = self._rsmi_text("rsmi_dev_serial_number_get", index)
        self._remember(index, d)
        vram = lib.RSMI_MEM_TYPE_VRAM
        d["rsmi_dev_memory_total_get"] = self._rsmi_out(
            "rsmi_dev_memory_total_get", c_uint64, index, vram
        )
        d["rsmi_dev_memory_usage_get"] = self._rsmi_out(
            "rsmi_dev_memory_usage_get", c_uint64, index, vram
        )
        d["rsmi_dev_busy_percent_get"] = self._rsmi_out(
            "rsmi_dev_busy_percent_get", c_uint32, index
        )
        temps: dict[str, Any] = {}
        temps["edge"] = self._rsmi_out(
            "rsmi_dev_temp_metric_get",
            c_int64,
            index,
            lib.RSMI_TEMP_TYPE_EDGE,
            lib.RSMI_TEMP_CURRENT,
        )
        if _error(temps["edge"]) is not None:
            temps["junction"] = self._rsmi_out(
                "rsmi_dev_temp_metric_get",
                c_int64,
                index,
                lib.RSMI_TEMP_TYPE_JUNCTION,
                lib.RSMI_TEMP_CURRENT,
            )
        d["rsmi_dev_temp_metric_get"] = temps  # millidegrees Celsius
        power, kind = c_uint64(), c_uint32()
        rc = self._rsmi_call("rsmi_dev_power_get", index, byref(power), byref(kind))
        if rc == lib.RSMI_SUCCESS:
            d["rsmi_dev_power_get"] = {"power": power.value, "type": kind.value}  # microwatts
        else:
            code = lib.RSMI_NOT_SUPPORTED if rc is None else rc
            d["rsmi_dev_power_get"] = failed(
                NOT_EXPORTED if rc is None else lib.rsmi_status_name(code), code
            )
            d["rsmi_dev_power_ave_get"] = self._rsmi_out(
                "rsmi_dev_power_ave_get", c_uint64, index, 0
            )
        ecc = lib.ErrorCount()
        rc = self._rsmi_call("rsmi_dev_ecc_count_get", index, lib.RSMI_GPU_BLOCK_UMC, byref(ecc))
        if rc == lib.RSMI_SUCCESS:
            d["rsmi_dev_ecc_count_get"] = {
                "correctable_err": ecc.correctable_err,
                "uncorrectable_err": ecc.uncorrectable_err,
                "deferred_err": ecc.deferred_err,
            }
        else:
            code = lib.RSMI_NOT_SUPPORTED if rc is None else rc
            d["rsmi_dev_ecc_count_get"] = failed(
                NOT_EXPORTED if rc is None else lib.rsmi_status_name(code), code
            )
        self._health(index, d)
        return d

    def _remember(self, index: int, device: dict[str, Any]) -> None:
        """Keep what a card said about itself; a card that stops answering its identity is
        named by it (when its bus, if answered, is the same), so its grant shows it unhealthy."""
        unique, bdf = device["rsmi_dev_unique_id_get"], device["rsmi_dev_pci_id_get"]
        if isinstance(unique, int):
            self._known[index] = {
                "unique_id": unique,
                "bdf": bdf if isinstance(bdf, int) else None,
                "name": device["rsmi_dev_name_get"],
                "serial": device["rsmi_dev_serial_number_get"],
            }
            return
        known = self._known.get(index)
        if known is not None and (not isinstance(bdf, int) or bdf == known.get("bdf")):
            device["known"] = dict(known)

    def _process_list(self) -> tuple[Any, int]:
        """The node's process list: a size probe with no buffer (which some builds answer with
        INSUFFICIENT_SIZE and the count), then a read; asked again when the list grew in
        between, then `truncated`."""
        assert self._rsmi is not None
        fn = self._rsmi.get("rsmi_compute_process_info_get")
        if fn is None:
            return failed(NOT_EXPORTED, lib.RSMI_NOT_SUPPORTED), 0
        for attempt in range(1, PROCESS_LIST_ATTEMPTS + 1):
            count = c_uint32(0)
            rc = fn(None, byref(count))
            if rc not in (lib.RSMI_SUCCESS, lib.RSMI_INSUFFICIENT_SIZE):
                return failed(lib.rsmi_status_name(rc), rc), attempt
            if count.value == 0:
                return [], attempt
            capacity = min(count.value, MAX_PROCESSES)
            rows = (lib.ProcessInfo * capacity)()
            written = c_uint32(capacity)
            rc = fn(rows, byref(written))
            if rc == lib.RSMI_SUCCESS:
                return (
                    [
                        {
                            "process_id": r.process_id,
                            "pasid": r.pasid,
                            "vram_usage": r.vram_usage,  # bytes, the whole process
                            "sdma_usage": r.sdma_usage,  # microseconds
                            "cu_occupancy": r.cu_occupancy,  # percent, or CU_OCCUPANCY_INVALID
                        }
                        for r in rows[: min(written.value, capacity)]
                    ],
                    attempt,
                )
            if rc != lib.RSMI_INSUFFICIENT_SIZE:
                return failed(lib.rsmi_status_name(rc), rc), attempt
            if count.value > MAX_PROCESSES:
                break  # more than we ever read: no retry will fit
        code = lib.RSMI_INSUFFICIENT_SIZE
        return failed(lib.rsmi_status_name(code), code), PROCESS_LIST_ATTEMPTS

    def _gpus_of(self, pid: int) -> Any:
        """The device indexes a process uses: a size probe with no buffer, then the read."""
        assert self._rsmi is not None
        fn = self._rsmi.get("rsmi_compute_process_gpus_get")
        if fn is None:
            return failed(NOT_EXPORTED, lib.RSMI_NOT_SUPPORTED)
        count = c_uint32(0)
        rc = fn(pid, None, byref(count))
        if rc not in (lib.RSMI_SUCCESS, lib.RSMI_INSUFFICIENT_SIZE):
            return failed(lib.rsmi_status_name(rc), rc)
        capacity = min(count.value, MAX_DEVICES_PER_PROCESS)
        if capacity == 0:
            return []
        indexes = (c_uint32 * capacity)()
        written = c_uint32(capacity)
        rc = fn(pid, indexes, byref(written))
        if rc != lib.RSMI_SUCCESS:
            return failed(lib.rsmi_status_name(rc), rc)
        return [int(i) for i in indexes[: min(written.value, capacity)]]

    def _row(self, pid: int, index: int) -> dict[str, Any]:
        out: dict[str, Any] = {"pid": pid}
        info = lib.ProcessInfo()
        rc = self._rsmi_call("rsmi_compute_process_info_by_device_get", pid, index, byref(info))
        if rc == lib.RSMI_SUCCESS:
            out["rsmi_compute_process_info_by_device_get"] = {
                "vram_usage": info.vram_usage,  # bytes, on this device
                "cu_occupancy": info.cu_occupancy,  # percent of the card, or the invalid mark
                "sdma_usage": info.sdma_usage,
            }
            return out
        code = lib.RSMI_NOT_SUPPORTED if rc is None else rc
        out["rsmi_compute_process_info_by_device_get"] = failed(
            NOT_EXPORTED if rc is None else lib.rsmi_status_name(code), code
        )
        if rsmi_reason(code) is Reason.UNSUPPORTED:
            v2 = lib.ProcessInfoV2()
            rc = self._rsmi_call("rsmi_compute_process_info_by_pid_get_v2", pid, byref(v2))
            if rc == lib.RSMI_SUCCESS:
                used = max(0, min(int(v2.usedGpus), 16))
                out["rsmi_compute_process_info_by_pid_get_v2"] = {
                    "vramUsageSize": v2.vramUsageSize,  # MiB, the whole process
                    "usedGpus": v2.usedGpus,
                    "gpuIndex": list(v2.gpuIndex[:used]),
                    "gpuUsageRate": [round(float(r), 3) for r in v2.gpuUsageRate[:used]],
                }
            else:
                code = lib.RSMI_NOT_SUPPORTED if rc is None else rc
                out["rsmi_compute_process_info_by_pid_get_v2"] = failed(
                    NOT_EXPORTED if rc is None else lib.rsmi_status_name(code), code
                )
        return out

    def _processes(self, payload: dict[str, Any], carved: list[dict[str, Any]]) -> None:
        rows, attempts = self._process_list()
        listing: dict[str, Any] = {
            "rsmi_compute_process_info_get": rows,
            "attempts": attempts,
        }
        on: dict[int, Any] = {}
        if isinstance(rows, list):
            for pid in dict.fromkeys(r["process_id"] for r in rows):
                on[pid] = self._gpus_of(pid)
        listing["rsmi_compute_process_gpus_get"] = [
            {"pid": pid, "devices": devices} for pid, devices in on.items()
        ]
        payload["processes"] = listing
        for device in carved:
            index = device["index"]
            device["processes"] = [
                self._row(pid, index)
                for pid, devices in on.items()
                if isinstance(devices, list) and index in devices
            ]

    def read(self, request: ReadRequest) -> Payload:
        if self._rsmi is None:
            raise BackendUnavailable("read() before open()")
        count = self._rsmi_out("rsmi_num_monitor_devices", c_uint32)
        if not isinstance(count, int):
            # Nothing can be named without it; the round is an error, not a node without cards.
            raise RuntimeError(f"rsmi_num_monitor_devices answered {count['error']}")
        partitions = sorted(request.partition_ids)[:MAX_PARTITIONS]
        loaded = {
            "rocm_smi": True,
            "hydmi": self._dmi is not None,
            "hydmi_mig": self._mig is not None,
        }
        payload: dict[str, Any] = {
            "rsmi_version_str_get": self._rsmi_text(
                "rsmi_version_str_get", lib.RSMI_SW_COMP_DRIVER
            ),
            "rsmi_num_monitor_devices": count,
            "libraries": loaded,
            "request": {
                "carved": sorted(request.carved_device_ids),
                "partitions": [list(p) for p in partitions],
            },
        }
        now = self._clock()
        devices = [self._device(i) for i in range(count)]
        payload["devices"] = devices
        ids = card_ids(devices)
        payload["topology"] = self._topology_of(ids, now)
        carved = [
            d
            for d in devices
            if d["index"] in ids and request.carved_device_ids & set(ids[d["index"]])
        ]
        if carved:
            self._processes(payload, carved)
        vdcus = sorted(
            {int(m.group(1)) for _, p in partitions if (m := VDCU.fullmatch(p)) is not None}
        )
        if vdcus and self._dmi is not None:
            payload["vdcu"] = read_vdcu(self._dmi, vdcus)
        mig_parents = {parent for parent, p in partitions if not VDCU.fullmatch(p)}
        if mig_parents and self._mig is not None:
            buses = {d["index"]: d.get("rsmi_dev_pci_id_get") for d in devices}
            for d in devices:
                known = d.get("known")
                if not isinstance(buses[d["index"]], int) and isinstance(known, dict):
                    buses[d["index"]] = known.get("bdf")
            payload["mig"] = read_mig(
                self._mig,
                self.mig_config,
                mig_parents,
                ids,
                {index: bus_id_of(bdf) for index, bdf in buses.items()},
            )
        return payload

    def _topology_of(self, ids: Mapping[int, tuple[str, ...]], now: float) -> Any:
        """Each card's NUMA node and the link type of each pair of cards (R-X3): read when none
        is held, once TOPOLOGY_PERIOD has passed since the last read, or when the cards
        changed; else the last read, whose `readAt` says when it was made."""
        cards = tuple(sorted((index, names[0]) for index, names in ids.items()))
        if not due(self._topology, cards, self._topology_cards, now):
            return self._topology
        indices = [index for index, _ in cards]
        topology: dict[str, Any] = {
            "readAt": now,
            "devices": [
                {
                    "index": i,
                    "rsmi_topo_get_numa_node_number": self._rsmi_out(
                        "rsmi_topo_get_numa_node_number", c_uint32, i
                    ),
                }
                for i in indices
            ],
            "pairs": [
                {"a": a, "b": b, "rsmi_topo_get_link_type": self._link_type(a, b)}
                for k, a in enumerate(indices)
                for b in indices[k + 1 :]
            ],
        }
        self._topology, self._topology_cards = topology, cards
        return topology

    def _link_type(self, a: int, b: int) -> Any:
        hops, kind = c_uint64(), c_uint32()
        rc = self._rsmi_call("rsmi_topo_get_link_type", a, b, byref(hops), byref(kind))
        if rc is None:
            return failed(NOT_EXPORTED, lib.RSMI_NOT_SUPPORTED)
        if rc != lib.RSMI_SUCCESS:
            return failed(lib.rsmi_status_name(rc), rc)
        return {"hops": int(hops.value), "type": int(kind.value)}

    def parse(self, payload: Payload) -> VendorReading:
        return parse(payload)
