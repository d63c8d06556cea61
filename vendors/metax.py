"""MetaX through MXSML (`libmxsml.so`), by way of our own ctypes declarations in _metax_lib.

`read()` asks MXSML and writes down what each entry point answered, keyed by its C name; a
failed call is recorded as {"error": <name>, "code": <mxSmlReturn_t>}, an entry point the
library does not export with code 999. `parse()` is pure. Facts used here: the project's
reference notes, vendors.md §5 and §12, and reference-implementation.md (MetaX).

What MXSML does that a reader would not guess:

- `mxSmlGetDeviceCount()` returns the count; it takes no out-parameter.
- SR-IOV virtual functions are enumerated beside the physical cards; their workloads run in
  virtual machines, not in this node's pods, so they are skipped.
- A card's index is its enumeration (sequence) index, the `deviceId` every call takes and the
  `gpuId` of a process row. `DeviceInfo.gpuId` is the driver's own id of the card, a different
  number: matching process rows on it charges one card's processes to another (the reference
  implementation did, on hardware).
- Memory comes in KB, the hotspot temperature x100, power per supply rail in mW (summed),
  sGPU usage in ten-thousandths of the card. Each is turned into MiB, degrees C, W and percent
  here, once.
- A process row lists every GPU the process uses; the entry whose `gpuId` is the card's
  sequence index is this card's. `_v3` rows name the sGPU the process runs in (-1: the whole
  card). MXSML has no per-process utilization at all.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import socket
import time
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any, ClassVar

from devicemanager.backend import BackendUnavailable, Library
from devicemanager.model import (
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
from vendors import _metax_lib as mx
from vendors._common import EVERY_ACTIVITY, error_code, failed, finite, listing, load, reasons
from vendors._placement import (
    SYSFS_NUMA,
    bus_name,
    due,
    index_of,
    numa_node,
    parse_pairs,
    sysfs_numa,
)

MANUFACTURER = "metax"

MXSML = Library(
    "mxsml",
    ("libmxsml.so",),
    # Where MetaX's driver, MACA and N-class packages install it (nvtop and pymxsml look here).
    directories=("/opt/mxdriver/lib", "/opt/maca/lib", "/opt/mxn100/lib"),
)

# An OperationNotSupport is a property of the card (sGPU mode off, an N-class card asked for a
# C-class figure); an entry point the library does not export is one of the library.
reason_for = reasons(
    unsupported=frozenset({mx.OPERATION_NOT_SUPPORTED, mx.FUNCTION_NOT_FOUND}),
    permission=frozenset({mx.PERMISSION_DENIED}),
    truncated=frozenset({mx.INSUFFICIENT_SIZE}),
)

ERROR_NAMES = {
    mx.FAILURE: "Failure",
    mx.NO_DEVICE: "NoDevice",
    mx.OPERATION_NOT_SUPPORTED: "OperationNotSupport",
    mx.SYSFS_ERROR: "SysfsError",
    mx.INVALID_DEVICE_ID: "InvalidDeviceId",
    mx.PERMISSION_DENIED: "PermissionDenied",
    mx.INVALID_INPUT: "InvalidInput",
    mx.INSUFFICIENT_SIZE: "InsufficientSize",
    mx.LOAD_DLL_FAILURE: "LoadDllFailure",
    mx.FUNCTION_NOT_FOUND: "FunctionNotFound",
}

PROCESS_KEYS = tuple(name for name, _ in mx.PROCESS_CALLS)  # newest first
# How many times read() asks again when the process list outgrew its buffer.
PROCESS_LIST_ATTEMPTS = 3
MAX_PROCESS_ROWS = 1024  # a 3,656-byte row each: 3.7 MB at most per card and round
MAX_DEVICES = 256
MAX_POWER_RAILS = 8  # C-class cards have three 12 V rails, N-class two
MAX_STRING = 4096


def error(code: int) -> dict[str, Any]:
    return failed(ERROR_NAMES.get(code, f"Error{code}"), code)


def node_name_from_environment(environ: Mapping[str, str] = os.environ) -> str:
    """The node's name as the DaemonSet hands it to the agent, else the host name."""
    for key in ("KUBERNETES_NODE_NAME", "DEVICEMANAGER_NODE_NAME"):
        if environ.get(key):
            return environ[key]
    return socket.gethostname()


def hami_alias(node: str, index: int) -> str:
    """How HAMi names a whole MetaX card in hami.io/metax-gpu-devices-allocated
    (pkg/device/metax/device.go: `<node>-metax-<index>`)."""
    return f"{node}-metax-{index}"


# -- parse: pure ------------------------------------------------------------------------------


def _entries(value: Any) -> list[Mapping[str, Any]]:
    """The objects of a JSON list, skipping anything else a damaged payload may hold."""
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _answer(value: Any) -> Mapping[str, Any] | None:
    return value if isinstance(value, Mapping) and error_code(value) is None else None


C_LIMIT = 1 << 64  # no field MXSML fills is wider than 64 bits


def _count(value: Any) -> int | None:
    """A non-negative JSON integer a C field can hold, else absent (a C long that came back
    negative is junk, and so is a number no 64-bit field holds)."""
    number = as_int(value)
    return number if number is not None and 0 <= number < C_LIMIT else None


def _finite(value: Any) -> float | None:
    """A JSON number as a finite float, absent when no C field could have held it."""
    if isinstance(value, int) and not -C_LIMIT < value < C_LIMIT:
        return None
    return finite(value)


def _mib_from_kb(value: Any) -> int | None:
    kb = _count(value)
    return None if kb is None else mib_from_bytes(kb * 1024)


def _percent(value: Any, scale: float = 1.0) -> float | None:
    """A utilization as percent of the card; outside 0..100 it is not one, and is absent."""
    number = _finite(value)
    if number is None:
        return None
    percent = round(number * scale, 2)
    return percent if 0.0 <= percent <= 100.0 else None


def _identity(device: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """What the card said it is this round, else what it said in an earlier one."""
    info = _answer(device.get("mxSmlGetDeviceInfo"))
    if info is not None:
        return info
    known = device.get("known")
    return known if isinstance(known, Mapping) else None


def _unhealthy(device: Mapping[str, Any]) -> str | None:
    if any(error_code(v) == mx.NO_DEVICE for v in device.values()):
        return "device_lost"  # MXSML no longer finds the card
    if device.get("mxSmlGetDeviceState") == 0:
        return "device_unavailable"  # the driver marks the card not available
    return None


def _power_watts(value: Any) -> float | None:
    """The board's draw: the sum of its supply rails (mW), in W."""
    if not isinstance(value, list) or not value:
        return None
    rails = [_count(way.get("power")) if isinstance(way, Mapping) else None for way in value]
    if any(r is None for r in rails):
        return None
    return round(sum(r for r in rails if r is not None) / 1000.0, 3)


def _temperature(value: Any) -> float | None:
    number = _finite(value)
    return None if number is None else round(number / 100.0, 2)  # hundredths of a degree


ECC = "mxSmlGetTotalEccErrors"
THROTTLE = "mxSmlGetCurrentClocksThrottleReason"
CLOCKS = "mxSmlGetClocks"
UINT32_MAX = 0xFFFFFFFF
UINT64_MAX = 0xFFFFFFFFFFFFFFFF
MAX_CLOCK_MHZ = 100_000  # 100 GHz: no clock is near it
# mxsmlClocksThrottleReason* bits (MxSml.h) by the reason names the figures use, each reason
# active when any of its bits is set. Where MetaX's own NVML-compatible extension
# (MxSmlExtension.h) maps one bit to one NVML reason, that reason: idle 0x1, applications limit
# 0x2, over-power 0x4, thermal over-temperature 0x40 (its SwThermalSlowdown), power brake 0x100.
# The bits it leaves out are read by what they mean (issue 43): chip (0x8) and HBM (0x20)
# over-temperature are NVML's SwThermalSlowdown by its own words ("GPU temperature above the
# GPU Max Operating Temperature", "memory temperature above the Memory Max Operating
# Temperature"), and the voltage regulator's (0x10) is the same kind of thermal limit; peak
# current control (0x80) and di/dt (0x200) are NVML's HwSlowdown ("power draw is too high and
# Fast Trigger protection is reducing the clocks"). "Dynamic" (0x400) and the catch-all "other"
# (0x80000000) name no one reason, and hw_thermal_slowdown (its halving of clocks),
# sync_boost and display_clock_setting have no bit: those are not reported.
METAX_THROTTLE_BITS: tuple[tuple[str, int], ...] = (
    ("gpu_idle", 0x1),
    ("applications_clocks_setting", 0x2),
    ("sw_power_cap", 0x4),
    ("hw_slowdown", 0x80 | 0x200),  # PCC, di/dt
    ("sw_thermal_slowdown", 0x8 | 0x10 | 0x20 | 0x40),  # chip, VR, HBM, thermal
    ("hw_power_brake_slowdown", 0x100),
)
# Figures no MXSML call answers (no energy counter, PCIe replay counter or graphics clock is
# declared; "total" ECC counts are not split by lifetime, so they are `total`, issue 43; no
# pending or failed repair).
H = HealthFigure
METAX_UNSUPPORTED = frozenset(
    {
        H.ECC_CORRECTED_VOLATILE,  # MxSml.h says "total", not since when (issue 43)
        H.ECC_UNCORRECTED_VOLATILE,
        H.ECC_CORRECTED_AGGREGATE,
        H.ECC_UNCORRECTED_AGGREGATE,
        H.REMAPPED_ROWS_CORRECTABLE,
        H.REMAPPED_ROWS_PENDING,
        H.REMAPPED_ROWS_FAILED,
        H.ENERGY_JOULES,
        H.CLOCK_GRAPHICS_HZ,
        H.PCIE_REPLAYS,
        H.PCIE_NAKS,
        # MXSML 2.3.1 declares no error-event call; a newer MxSml.h declares mxSmlEventSetCreate,
        # mxSmlDeviceRegisterEvents (mxSmlEventTypeEid 0x1) and mxSmlEventSetWait: not yet read.
        H.XID_ERRORS,
    }
)


def _unsigned(value: Any, ceiling: int) -> tuple[int | None, Reason | None]:
    """An unsigned field MXSML answered, or why it is absent; all ones is `invalid_data`."""
    if (code := error_code(value)) is not None:
        return None, reason_for(code)
    number = as_int(value)
    if number is None or not 0 <= number < ceiling:
        return None, Reason.INVALID_DATA
    return number, None


def parse_health(device: Mapping[str, Any]) -> CardHealth | None:
    """The card's ECC counts, retired pages, throttle reasons and clocks (R-X7), in base
    units, each absent with its reason; None where the payload was recorded before they were
    read. ECC counts are the SRAM's and the DRAM's together, as NVML's total counts are."""
    if not any(key in device for key in (ECC, THROTTLE, CLOCKS)):
        return None
    found: dict[HealthFigure, Answer] = {}
    ecc = device.get(ECC)
    if ecc is not None:
        for figure, keys in (
            (H.ECC_CORRECTED_TOTAL, ("sramCE", "dramCE")),
            (H.ECC_UNCORRECTED_TOTAL, ("sramUE", "dramUE")),
            (H.REMAPPED_ROWS_UNCORRECTABLE, ("retiredPage",)),
        ):
            parts = [_unsigned(ecc.get(k) if _answer(ecc) else ecc, UINT32_MAX) for k in keys]
            bad = next((r for _, r in parts if r is not None), None)
            found[figure] = (None, bad) if bad else (sum(n or 0 for n, _ in parts), None)
    mask = device.get(THROTTLE)
    if mask is not None:
        bits, reason = _unsigned(mask, UINT64_MAX)
        active = (
            None if bits is None else tuple((n, bool(bits & b)) for n, b in METAX_THROTTLE_BITS)
        )
        found[H.THROTTLE_REASONS] = (active, reason)
    clocks = device.get(CLOCKS)
    if clocks is not None:
        for figure, key in ((H.CLOCK_SM_HZ, "xcore"), (H.CLOCK_MEMORY_HZ, "mc0")):
            answer = clocks.get(key) if _answer(clocks) else clocks
            if (code := error_code(answer)) is not None:
                found[figure] = (None, reason_for(code))
                continue
            first = answer[0] if isinstance(answer, list) and answer else None
            mhz, reason = _unsigned(first, UINT32_MAX)
            if mhz is not None and mhz > MAX_CLOCK_MHZ:
                mhz, reason = None, Reason.INVALID_DATA
            found[figure] = (None if mhz is None else mhz * 1_000_000, reason)
    found.update(unsupported(METAX_UNSUPPORTED))
    # MXSML states the cores' busy time (`mxSmlGetDeviceIpUsage`) and no activity
    # figure, memory or vector-unit busy time beside it (issue 41).
    found.update(unsupported(EVERY_ACTIVITY))
    return CardHealth.answered(found)


def parse_card(device: Mapping[str, Any], node: str | None) -> Card | None:
    """A physical card, or None for a virtual function or a card that never said who it is."""
    index = _count(device.get("deviceId"))
    identity = _identity(device)
    if identity is None or index is None:
        return None
    if as_int(identity.get("mode")) == mx.MODE_VF:
        return None  # an SR-IOV virtual function: its work runs in a VM, not in our pods
    uuid = identity.get("uuid")
    if not isinstance(uuid, str) or not uuid:
        return None  # without its id a card cannot be named in any figure
    memory = _answer(device.get("mxSmlGetMemoryInfo")) or {}
    name = identity.get("deviceName")
    bdf = identity.get("bdfId")
    reason = _unhealthy(device)
    return Card(
        id=uuid,
        index=index,
        name=name if isinstance(name, str) and name else None,
        memory_total_mib=_mib_from_kb(memory.get("vramTotal")),
        memory_used_mib=_mib_from_kb(memory.get("vramUse")),
        cores_utilization_percent=_percent(device.get("mxSmlGetDeviceIpUsage")),
        temperature_celsius=_temperature(device.get("mxSmlGetTemperatureInfo")),
        power_usage_watts=_power_watts(device.get("mxSmlGetBoardPowerInfo")),
        unhealthy=reason is not None,
        unhealthy_reason=reason,
        aliases=(hami_alias(node, index),) if node else (),
        address=(("bdf", bdf),) if isinstance(bdf, str) and bdf else (),
        health=parse_health(device),
    )


def sgpu_fallback_id(card_id: str, sgpu: int) -> str:
    """An sGPU's id where the library gave no UUID for it."""
    return f"{card_id}/sgpu{sgpu}"


def _sgpu_mode_reason(block: Mapping[str, Any]) -> Reason | None:
    """Why a card's sGPUs cannot be read, or None when sGPU mode is on."""
    toggle = block.get("mxSmlGetSgpuToggle")
    code = error_code(toggle)
    if code is not None:
        return reason_for(code)
    return None if toggle == 1 else Reason.UNSUPPORTED  # sGPU mode off: there is no slice


def _figure(value: Any, read: Callable[[Any], Any]) -> tuple[Any, Reason | None]:
    code = error_code(value)
    if code is not None:
        return None, reason_for(code)
    got = read(value)
    return got, None if got is not None else Reason.INVALID_DATA


def _sgpu_memory(value: Any) -> tuple[int | None, int | None]:
    if not isinstance(value, Mapping):
        return None, None
    total, used = _count(value.get("total")), _count(value.get("used"))
    return (mib_from_bytes(total), mib_from_bytes(used)) if total is not None else (None, None)


def parse_sgpus(
    device: Mapping[str, Any], card: Card
) -> tuple[list[PartitionReading], dict[int, str], Reason | None]:
    """The card's sGPUs as partitions read on their own (usage, memory), the id of each sGPU
    slot, and why there are none (sGPU mode off: `unsupported`). None of it when read() did
    not ask, because no grant carves the card."""
    block = device.get("sgpu")
    if not isinstance(block, Mapping):
        return [], {}, None
    mode = _sgpu_mode_reason(block)
    if mode is not None:
        return [], {}, mode
    readings: list[PartitionReading] = []
    names: dict[int, str] = {}
    for slot in _entries(block.get("sgpus")):
        number = _count(slot.get("sgpuId"))
        if number is None or number >= mx.MAX_SGPU or number in names:
            continue
        info = slot.get("mxSmlGetSgpuInfo")
        uuid = info.get("uuid") if isinstance(info, Mapping) else None
        sgpu_id = uuid if isinstance(uuid, str) and uuid else sgpu_fallback_id(card.id, number)
        names[number] = sgpu_id
        code = error_code(info)
        if code is not None or not isinstance(info, Mapping):
            why = reason_for(code) if code is not None else Reason.INVALID_DATA
            readings.append(PartitionReading(sgpu_id, card.id, memory_reason=why, cores_reason=why))
            continue
        # Ten-thousandths of the whole card's compute, as MetaX's exporter reads it.
        cores, cores_reason = _figure(
            slot.get("mxSmlGetSgpuUsage"), lambda v: _percent(v, scale=0.01)
        )
        memory = slot.get("mxSmlGetSgpuMemory")
        (total, used), memory_reason = _sgpu_memory(memory), None
        if (code := error_code(memory)) is not None:
            memory_reason = reason_for(code)
        elif total is None:
            memory_reason = Reason.INVALID_DATA
        aliases = [
            value
            for key in ("mxSmlGetSgpuAnnotationsId", "mxSmlGetSgpuAlias")
            if isinstance(value := slot.get(key), str) and value and value != sgpu_id
        ]
        readings.append(
            PartitionReading(
                id=sgpu_id,
                parent_id=card.id,
                memory_total_mib=total,
                memory_used_mib=used,
                cores_percent=cores,
                memory_reason=memory_reason,
                cores_reason=cores_reason,
                aliases=tuple(dict.fromkeys(aliases)),
                cores_of_card=True,  # MXSML's sGPU usage counts ten-thousandths of the card
            )
        )
    return readings, names, None


def _row(
    row: Mapping[str, Any], index: int, card_id: str, sgpus: Mapping[int, str]
) -> ProcessRow | None:
    """This card's part of a process row, or None when the row has none (or is unreadable)."""
    pid = _count(row.get("processId"))
    if pid is None:
        return None
    # The entries of this card: its sequence index, never DeviceInfo.gpuId. Two entries are
    # the two dies of a multi-die card.
    mine = [g for g in _entries(row.get("processGpuInfo")) if as_int(g.get("gpuId")) == index]
    if not mine:
        return None
    sizes = [_count(g.get("gpuMemoryUsage")) for g in mine]  # bytes
    memory = None if any(s is None for s in sizes) else sum(s for s in sizes if s is not None)
    slices = {as_int(g.get("sgpuId")) for g in mine if "sgpuId" in g}
    partition = None
    if len(slices) == 1:
        (number,) = slices
        if number is not None and number >= 0:
            partition = sgpus.get(number) or sgpu_fallback_id(card_id, number)
    return ProcessRow(pid=pid, memory_bytes=memory, cores_percent=None, partition_id=partition)


def parse_processes(
    device: Mapping[str, Any], card: Card, sgpus: Mapping[int, str]
) -> tuple[DeviceProcesses | None, str | None]:
    """The per-process answer for a carved card, and the entry point that gave it; None when
    read() did not ask for this card."""
    if not any(key in device for key in PROCESS_KEYS):
        return None, None
    listed: Any = None
    via = None
    reason: Reason | None = Reason.UNSUPPORTED  # no process entry point at all
    for key in PROCESS_KEYS:
        if key not in device:
            continue
        code = error_code(device[key])
        if code is None:
            listed, via, reason = device[key], key, None
            break
        if code == mx.FUNCTION_NOT_FOUND:
            continue  # this library has an older one: read() asked it next
        reason = reason_for(code)
        break
    rows: dict[int, ProcessRow] = {}
    if reason is None:
        if not isinstance(listed, list):
            reason = Reason.INVALID_DATA
        else:
            for entry in _entries(listed):
                row = _row(entry, card.index, card.id, sgpus)
                if row is not None:
                    rows.setdefault(row.pid, row)  # a PID listed twice is counted once
    return (
        DeviceProcesses(
            device_id=card.id,
            rows=tuple(rows.values()),
            memory_reason=reason,
            # MXSML serves no per-process utilization: "cannot", on every card and driver.
            cores_reason=Reason.UNSUPPORTED,
            reads_truncated=int(reason is Reason.TRUNCATED),
        ),
        via,
    )


def _requested(payload: Mapping[str, Any]) -> list[tuple[str, str]]:
    request = payload.get("request")
    wanted = request.get("partitions") if isinstance(request, Mapping) else None
    out = []
    for item in wanted if isinstance(wanted, list) else ():
        if isinstance(item, list) and len(item) == 2 and all(isinstance(s, str) for s in item):
            out.append((item[0], item[1]))
    return out


# -- links and placement (R-X3) ----------------------------------------------------------------

TOPOLOGY = "mxSmlGetDeviceTopology"
# mxSmlGpuTopologyLevel_t (MxSml.h 2.3.1): sequential from 0, NVML's levels with MetaXLink and
# Ethernet among them. INTERNAL is one board, SINGLE a PCIe switch (PIX), MULTIPLE several (PXB),
# HOSTBRIDGE one host bridge (PHB), NODE one NUMA node, SYSTEM across them (SYS). ETH ("the same
# Eth") and UNDEFINED have no kind here: the pair is placed nowhere.
METAX_LINKS = {
    0: "pcie_board",
    1: "pcie_switch",
    2: "pcie_switches",
    3: "pcie_host_bridge",
    4: "numa_node",
    5: "metaxlink",
    6: "system",
}


def _topology_kind(pair: Mapping[str, Any]) -> str | None:
    answer = pair.get(TOPOLOGY)
    level = as_int(answer) if error_code(answer) is None else None
    return None if level is None else METAX_LINKS.get(level)


def parse_topology(
    payload: Mapping[str, Any],
) -> Mapping[Hashable, tuple[tuple[tuple[Hashable, str], ...], int | None]]:
    """Per sequence index, its links ((peer index, kind)) and its NUMA node (the `numa_node`
    sysfs gives the card's PCI device, named by DeviceInfo.bdfId); empty where the payload has
    no topology."""
    return parse_pairs(
        payload,
        "deviceId",
        index_of,
        lambda e: numa_node(e.get(SYSFS_NUMA)),
        _topology_kind,
    )


def _placed(cards: list[tuple[int, Card]], payload: Mapping[str, Any]) -> list[Card]:
    """Each card with its links to the others, by their canonical ids, and its NUMA node."""
    topology = parse_topology(payload)
    ids = dict(cards)
    out = []
    for index, card in cards:
        if index not in topology:
            out.append(card)
            continue
        links, node = topology[index]
        found = tuple(CardLink(ids[p].id, kind) for p, kind in links if p in ids)
        out.append(dataclasses.replace(card, links=found, numa_node=node))
    return out


def parse(payload: Payload) -> VendorReading:
    node = payload.get("node")
    node = node if isinstance(node, str) and node else None
    cards: list[tuple[int, Card]] = []
    processes: list[DeviceProcesses] = []
    partitions: list[PartitionReading] = []
    modes: dict[str, Reason | None] = {}
    driver: str | None = None
    via: str | None = None
    for device in listing(payload, "devices"):
        card = parse_card(device, node)
        if card is None:
            continue
        position = as_int(device.get("deviceId"))
        cards.append((card.index if position is None else position, card))
        version = device.get("mxSmlGetDeviceVersion")
        if driver is None and isinstance(version, str) and version:
            driver = version
        sgpus, names, mode = parse_sgpus(device, card)
        partitions.extend(sgpus)
        if isinstance(device.get("sgpu"), Mapping):
            modes[card.id] = mode
        answer, used = parse_processes(device, card, names)
        if answer is not None:
            processes.append(answer)
            via = via or used
    # A partition a grant recorded and no sGPU answers to: absent, with why.
    known = {(p.parent_id, i) for p in partitions for i in p.ids}
    for parent, wanted in _requested(payload):
        if (parent, wanted) in known:
            continue
        reason = modes.get(parent) or Reason.TRANSIENT_DRIVER_ERROR
        partitions.append(
            PartitionReading(wanted, parent, memory_reason=reason, cores_reason=reason)
        )
        known.add((parent, wanted))
    return VendorReading(
        manufacturer=MANUFACTURER,
        cards=tuple(_placed(cards, payload)),
        processes=tuple(processes),
        partitions=tuple(partitions),
        driver_version=driver,
        via=via,
    )


# -- the backend: the only code that touches the library ---------------------------------------


class MetaxBackend:
    """Reads MXSML through our ctypes declarations; the library is loaded in open()."""

    manufacturer = MANUFACTURER
    libraries: ClassVar[tuple[Library, ...]] = (MXSML,)

    def __init__(
        self,
        libraries: Mapping[str, str] | None = None,
        node_name: str | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sysfs: str | os.PathLike[str] = "/sys",
    ) -> None:
        self.configured = dict(libraries or {})
        self._clock = clock
        self._sysfs = sysfs
        # The node's links and NUMA nodes, last read (R-X3), and the cards they were read for.
        self._topology: dict[str, Any] | None = None
        self._topology_cards: tuple[Any, ...] = ()
        # HAMi names a whole card after the node (`<node>-metax-<index>`); read() records the
        # name so that parse() stays pure and a recording replays with its own node's name.
        self.node_name = node_name if node_name is not None else node_name_from_environment()
        self._mx: mx.Mxsml | None = None
        # Identity a card gave in an earlier round, by sequence index: a card that falls off
        # stops answering mxSmlGetDeviceInfo, and its grant should show it unhealthy.
        self._known: dict[int, dict[str, Any]] = {}

    # -- lifecycle --

    def open(self) -> None:
        lib = mx.Mxsml(load(MXSML, self.configured))
        if missing := lib.missing():
            raise BackendUnavailable(f"libmxsml.so does not export {', '.join(missing)}")
        # REINIT where the library has it: this process may have initialised MXSML before (a
        # re-open after a failed round), and a plain init would not look for cards again.
        reinit = lib.function("mxSmlInitWithFlags")
        rc = int(reinit(mx.INIT_FLAG_REINIT) if reinit else lib.function("mxSmlInit")())
        # NoDevice: the library works and found no card; read() then reads none.
        if rc not in (mx.SUCCESS, mx.NO_DEVICE):
            raise BackendUnavailable(f"MXSML could not be initialised: {self._describe(lib, rc)}")
        self._mx = lib

    def close(self) -> None:
        # MXSML has no shutdown entry point; the handle is dropped (ctypes never unloads).
        self._mx = None

    @staticmethod
    def _describe(lib: mx.Mxsml, rc: int) -> str:
        describe = lib.function("mxSmlGetErrorString")
        text = describe(rc) if describe is not None else None
        words = text.decode("utf-8", "replace") if isinstance(text, bytes) else ERROR_NAMES.get(rc)
        return f"{words or 'error'} ({rc})"

    # -- calls --

    def _fn(self, name: str) -> Any:
        assert self._mx is not None
        return self._mx.function(name)

    def _out(self, name: str, ctype: Any, *args: Any) -> tuple[Any, dict[str, Any] | None]:
        """Call an entry point whose last argument is one out-value: (value, None) or
        (None, the failure to record)."""
        fn = self._fn(name)
        if fn is None:
            return None, error(mx.FUNCTION_NOT_FOUND)
        value = ctype()
        rc = int(fn(*args, ctypes.byref(value)))
        return (value, None) if rc == mx.SUCCESS else (None, error(rc))

    def _int(self, name: str, *args: Any, ctype: Any = ctypes.c_int) -> Any:
        value, failure = self._out(name, ctype, *args)
        return failure if failure is not None else int(value.value)

    def _string(self, name: str, *args: Any, length: int = mx.VERSION_LEN) -> Any:
        """An entry point that fills a sized string buffer, asked again once if it was short."""
        fn = self._fn(name)
        if fn is None:
            return error(mx.FUNCTION_NOT_FOUND)
        for _ in range(2):
            buffer = ctypes.create_string_buffer(length)
            size = ctypes.c_uint(length)
            rc = int(fn(*args, buffer, ctypes.byref(size)))
            if rc == mx.INSUFFICIENT_SIZE and length < size.value <= MAX_STRING:
                length = size.value
                continue
            return mx.text(buffer.raw) if rc == mx.SUCCESS else error(rc)
        return error(mx.INSUFFICIENT_SIZE)

    def _struct(self, name: str, struct: type[ctypes.Structure], *args: Any) -> Any:
        value, failure = self._out(name, struct, *args)
        if failure is not None:
            return failure
        return {field: _plain(getattr(value, field)) for field, *_ in struct._fields_}

    def _power(self, index: int) -> Any:
        fn = self._fn("mxSmlGetBoardPowerInfo")
        if fn is None:
            return error(mx.FUNCTION_NOT_FOUND)
        length = MAX_POWER_RAILS
        for _ in range(2):
            ways = (mx.BoardWayElectricInfo * length)()
            size = ctypes.c_uint(length)
            rc = int(fn(index, ctypes.byref(size), ways))
            if rc == mx.INSUFFICIENT_SIZE and length < size.value <= 64:
                length = size.value
                continue
            if rc != mx.SUCCESS:
                return error(rc)
            return [
                {"voltage": w.voltage, "current": w.current, "power": w.power}  # mV, mA, mW
                for w in ways[: min(size.value, length)]
            ]
        return error(mx.INSUFFICIENT_SIZE)

    def _process_list(self, fn: Any, row: type[ctypes.Structure], index: int) -> Any:
        """One per-device process call: a count-0 probe with a one-row buffer (a NULL buffer
        is refused), then a read with room to spare, asked again when the list outgrew it."""
        count = ctypes.c_uint(0)
        probe = (row * 1)()
        rc = int(fn(index, ctypes.byref(count), probe))
        if rc not in (mx.SUCCESS, mx.INSUFFICIENT_SIZE):
            return error(rc)
        need = count.value
        for _ in range(PROCESS_LIST_ATTEMPTS):
            if need == 0:
                return []
            if need > MAX_PROCESS_ROWS:
                break  # more processes than one card's read is allowed: never a partial list
            capacity = min(MAX_PROCESS_ROWS, need * 2 + 5)  # room for processes starting now
            rows = (row * capacity)()
            count = ctypes.c_uint(capacity)
            rc = int(fn(index, ctypes.byref(count), rows))
            if rc == mx.INSUFFICIENT_SIZE or (rc == mx.SUCCESS and count.value >= capacity):
                # The list outgrew the buffer between the probe and the read (a full buffer
                # may have left rows out): ask again with room for what it says now.
                need = max(count.value, capacity + 1)
                continue
            if rc != mx.SUCCESS:
                return error(rc)
            return [_process_row(rows[k]) for k in range(count.value)]
        return error(mx.INSUFFICIENT_SIZE)

    def _processes(self, index: int) -> dict[str, Any]:
        """The newest per-device process call this library exports (_v3, then _v2, then v1);
        a missing one is recorded as such, so the payload says which answered."""
        out: dict[str, Any] = {}
        for name, row in mx.PROCESS_CALLS:
            fn = self._fn(name)
            if fn is None:
                out[name] = error(mx.FUNCTION_NOT_FOUND)
                continue
            out[name] = self._process_list(fn, row, index)
            break
        return out

    def _sgpus(self, index: int) -> dict[str, Any]:
        toggle = self._int("mxSmlGetSgpuToggle", index, ctype=ctypes.c_uint)
        out: dict[str, Any] = {"mxSmlGetSgpuToggle": toggle}
        if toggle != 1:
            return out  # sGPU mode off (or not supported): there is no slice to read
        count = self._fn("mxSmlGetSgpuCount")
        out["mxSmlGetSgpuCount"] = (
            int(count(index)) if count is not None else error(mx.FUNCTION_NOT_FOUND)
        )
        slots = []
        # Every slot: the count is 0 on any error, so it cannot say where to stop.
        for number in range(mx.MAX_SGPU):
            info = self._struct("mxSmlGetSgpuInfo", mx.SgpuInfo, index, number)
            if error_code(info) == mx.OPERATION_NOT_SUPPORTED:
                continue  # an empty slot ("target sgpu is not exist")
            slot: dict[str, Any] = {"sgpuId": number, "mxSmlGetSgpuInfo": info}
            if error_code(info) is None:
                slot["mxSmlGetSgpuUsage"] = self._int("mxSmlGetSgpuUsage", index, number)
                slot["mxSmlGetSgpuMemory"] = self._struct(
                    "mxSmlGetSgpuMemory", mx.SgpuMemoryInfo, index, number
                )
                for name in ("mxSmlGetSgpuAlias", "mxSmlGetSgpuAnnotationsId"):
                    slot[name] = self._string(name, index, number, length=mx.ALIAS_LEN)
            slots.append(slot)
        out["sgpus"] = slots
        return out

    def _clocks(self, index: int, domain: int) -> Any:
        """One clock domain's clocks (MHz), as mxSmlGetClocks fills them."""
        fn = self._fn(CLOCKS)
        if fn is None:
            return error(mx.FUNCTION_NOT_FOUND)
        clocks = (ctypes.c_uint * mx.MAX_CLOCKS)()
        size = ctypes.c_uint(mx.MAX_CLOCKS)
        rc = int(fn(index, domain, ctypes.byref(size), clocks))
        if rc != mx.SUCCESS:
            return error(rc)
        return [int(c) for c in clocks[: min(size.value, mx.MAX_CLOCKS)]]

    def _health(self, index: int) -> dict[str, Any]:
        """The answers CardHealth is parsed from (R-X7), keyed by entry point."""
        return {
            ECC: self._struct(ECC, mx.EccErrorCount, index),
            THROTTLE: self._int(THROTTLE, index, ctype=ctypes.c_ulonglong),
            CLOCKS: {
                "xcore": self._clocks(index, mx.CLOCK_XCORE),
                "mc0": self._clocks(index, mx.CLOCK_MC0),
            },
        }

    def _device(self, index: int, carved: frozenset[str], sliced: frozenset[str]) -> dict[str, Any]:
        device: dict[str, Any] = {"deviceId": index}
        info = self._struct("mxSmlGetDeviceInfo", mx.DeviceInfo, index)
        device["mxSmlGetDeviceInfo"] = info
        if error_code(info) is None:
            if info.get("mode") == mx.MODE_VF:
                return device  # a virtual function: nothing more is asked of it
            self._known[index] = {
                k: info.get(k) for k in ("uuid", "deviceName", "bdfId", "brand", "mode")
            }
            identity: Mapping[str, Any] = info
        elif index in self._known:
            identity = device["known"] = dict(self._known[index])
        else:
            return device  # never said who it is: it cannot be named
        uuid = identity.get("uuid")
        ids = {uuid, hami_alias(self.node_name, index)} if self.node_name else {uuid}
        device["mxSmlGetDeviceVersion"] = self._string(
            "mxSmlGetDeviceVersion", index, mx.VERSION_DRIVER
        )
        device["mxSmlGetDeviceState"] = self._int("mxSmlGetDeviceState", index)
        device["mxSmlGetMemoryInfo"] = self._struct("mxSmlGetMemoryInfo", mx.MemoryInfo, index)
        ip = mx.USAGE_DLA if identity.get("brand") == mx.BRAND_N else mx.USAGE_XCORE
        device["mxSmlGetDeviceIpUsage"] = self._int("mxSmlGetDeviceIpUsage", index, ip)
        device["mxSmlGetTemperatureInfo"] = self._int(
            "mxSmlGetTemperatureInfo", index, mx.TEMPERATURE_HOTSPOT
        )
        device["mxSmlGetBoardPowerInfo"] = self._power(index)
        device.update(self._health(index))
        if ids & carved:
            device.update(self._processes(index))
        if ids & (carved | sliced):
            device["sgpu"] = self._sgpus(index)
        return device

    def read(self, request: ReadRequest) -> Payload:
        if self._mx is None:
            raise BackendUnavailable("read() before open()")
        now = self._clock()
        count = min(int(self._fn("mxSmlGetDeviceCount")()), MAX_DEVICES)
        sliced = frozenset(parent for parent, _ in request.partition_ids)
        devices = [self._device(i, request.carved_device_ids, sliced) for i in range(count)]
        return {
            "node": self.node_name,
            "mxSmlGetDeviceCount": count,
            "request": {
                "carved": sorted(request.carved_device_ids),
                "partitions": [list(p) for p in sorted(request.partition_ids)],
            },
            "devices": devices,
            "topology": self._topology_of(devices, now),
        }

    def _topology_of(self, devices: list[dict[str, Any]], now: float) -> Any:
        """Each physical card's NUMA node and the topology level of each pair (R-X3): read when
        none is held, once TOPOLOGY_PERIOD has passed since the last read, or when the cards
        changed; else the last read, whose `readAt` says when it was made."""
        named = [
            (d["deviceId"], identity)
            for d in devices
            if "mxSmlGetDeviceState" in d and (identity := _identity(d)) is not None
        ]
        cards = tuple((index, identity.get("uuid")) for index, identity in named)
        if not due(self._topology, cards, self._topology_cards, now):
            return self._topology
        entries = []
        for index, identity in named:
            entry: dict[str, Any] = {"deviceId": index}
            name = bus_name(identity.get("bdfId"))
            if name is not None:
                entry[SYSFS_NUMA] = sysfs_numa(self._sysfs, name)
            entries.append(entry)
        topology: dict[str, Any] = {
            "readAt": now,
            "devices": entries,
            "pairs": [
                {"a": a, "b": b, TOPOLOGY: self._int(TOPOLOGY, a, b, ctype=ctypes.c_uint)}
                for k, (a, _) in enumerate(named)
                for b, _ in named[k + 1 :]
            ],
        }
        self._topology, self._topology_cards = topology, cards
        return topology

    def parse(self, payload: Payload) -> VendorReading:
        return parse(payload)


def _plain(value: Any) -> Any:
    """A ctypes field as JSON: bytes as text, numbers as themselves."""
    if isinstance(value, bytes):
        return mx.text(value)
    return value


def _process_row(row: Any) -> dict[str, Any]:
    """A process row as JSON: the GPUs it lists (not its name: nothing about a process but its
    PID and figures leaves the library's answer)."""
    gpus: Iterable[Any] = row.processGpuInfo[: min(row.gpuNumber, mx.GPUS_PER_PROCESS)]
    return {
        "processId": row.processId,
        "gpuNumber": row.gpuNumber,
        "processGpuInfo": [
            {name: _plain(getattr(gpu, name)) for name, *_ in type(gpu)._fields_} for gpu in gpus
        ],
    }
