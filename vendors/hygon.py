"""Hygon DCUs through Hygon's own libraries, by our ctypes declarations (vendors/_hygon_lib.py):
its fork of ROCm SMI (`librocm_smi64.so`: cards and per-process rows), `libhydmi.so` (virtual
DCUs) and `libhydmi_mig.so` (multi-instance partitions, under NVML's symbol names, loaded
privately and deep-bound so it never answers for a libnvidia-ml in the same process, nor the
other way).

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

import os
import re
from collections.abc import Iterable, Mapping
from ctypes import byref, c_char, c_int, c_int64, c_uint32, c_uint64, c_void_p
from pathlib import Path
from typing import Any, ClassVar

from devicemanager.backend import BackendUnavailable, Library
from devicemanager.model import (
    MIB,
    Card,
    DeviceProcesses,
    PartitionReading,
    Payload,
    ProcessRow,
    ReadRequest,
    Reason,
    VendorReading,
    as_int,
    mib_from_bytes,
)
from vendors import _hygon_lib as lib
from vendors._common import error_code as _error
from vendors._common import failed, finite, load, reasons

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

# The driver's registry of live MIG compute instances, one dev<N>gi<G>ci<C>.conf each, the only
# place their UUIDs are written. The variable points the backend at a copy (tests, a container
# that mounts it elsewhere).
MIG_CONFIG_ENV = "DEVICEMANAGER_HYGON_MIG_CONFIG"
MIG_CONFIG = "/etc/dmi_mig_config"

PROCESS_LIST_ATTEMPTS = 3  # asked again when the list grew between the size probe and the read
MAX_PROCESSES = 4096  # the most rows one list read takes; more is `truncated`
MAX_DEVICES_PER_PROCESS = 64
MAX_PARTITIONS = 1024  # partitions one round reads; a node holds far fewer
MAX_REGISTRY_FILES = 1024
MAX_REGISTRY_BYTES = 65536

rsmi_reason = reasons(
    unsupported=frozenset({lib.RSMI_NOT_SUPPORTED, lib.RSMI_NOT_YET_IMPLEMENTED}),
    permission=frozenset({lib.RSMI_PERMISSION}),
    truncated=frozenset({lib.RSMI_INSUFFICIENT_SIZE}),
)
dmi_reason = reasons(
    unsupported=frozenset(
        {lib.DMI_NOT_SUPPORTED, lib.DMI_DEVICE_NOT_SUPPORT, lib.DMI_NOT_YET_IMPLEMENTED}
    ),
    permission=frozenset({lib.DMI_PERMISSION}),
    truncated=frozenset({24}),
)
mig_reason = reasons(
    unsupported=frozenset({lib.MIG_NOT_SUPPORTED, lib.MIG_FUNCTION_NOT_FOUND, lib.MIG_DEPRECATED}),
    permission=frozenset({lib.MIG_NO_PERMISSION}),
    truncated=frozenset({lib.MIG_INSUFFICIENT_SIZE}),
)

# Where a call is refused because the library does not export it: each library's own
# "not supported" code, so the reason is `unsupported`.
NOT_EXPORTED = "NOT_EXPORTED"

_VDCU = re.compile(r"(?:vDCU-|vdev)(\d{1,6})", re.IGNORECASE)
_REGISTRY_NAME = re.compile(r"dev(\d{1,4})gi(\d{1,6})ci(\d{1,6})\.conf")
_UUID = re.compile(r"[0-9A-Za-z][0-9A-Za-z-]{0,63}")


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
    """Why the card is unusable, or None. A card that answers neither its identity nor its
    memory (its sysfs files gone) is unreachable; an uncorrectable ECC error is what GPUStack
    and the ROCm tools count as a failed card."""
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


def _normal_uuid(value: str) -> str:
    return value[4:].lower() if value[:4].upper() == "MIG-" else value.lower()


class _Instance:
    """One MIG compute instance as the partition walk found it."""

    def __init__(
        self, card_id: str, card: Mapping[str, Any], mig: Mapping[str, Any], uuid: str | None
    ) -> None:
        self.card_id = card_id
        self.card = card
        self.mig = mig
        self.gi = as_int(mig.get("nvmlDeviceGetGpuInstanceId"))
        self.ci = as_int(mig.get("nvmlDeviceGetComputeInstanceId"))
        self.id = f"MIG-{card_id}/{self.gi}/{self.ci}"
        self.uuid = uuid
        aliases = []
        if uuid:
            aliases += [f"MIG-{uuid}", f"MIG-{uuid.lower()}"]
        self.aliases = tuple(dict.fromkeys(a for a in aliases if a != self.id))

    def answers_to(self, wanted: str) -> bool:
        if wanted == self.id or wanted in self.aliases:
            return True
        return self.uuid is not None and _normal_uuid(wanted) == self.uuid.lower()


def _instances(payload: Mapping[str, Any], ids: Mapping[int, tuple[str, ...]]) -> list[_Instance]:
    mig = payload.get("mig")
    if not isinstance(mig, Mapping):
        return []
    registry = mig.get("registry")
    registry = registry if isinstance(registry, Mapping) and _error(registry) is None else {}
    out = []
    for card in _entries(mig.get("cards")):
        index = as_int(card.get("index"))
        if index not in ids or index is None:
            continue
        dmi_index = as_int(card.get("nvmlDeviceGetIndex"))
        for m in _entries(card.get("migDevices")):
            gi = as_int(m.get("nvmlDeviceGetGpuInstanceId"))
            ci = as_int(m.get("nvmlDeviceGetComputeInstanceId"))
            if gi is None or ci is None:
                continue
            uuid = registry.get(f"dev{dmi_index}gi{gi}ci{ci}") if dmi_index is not None else None
            valid = isinstance(uuid, str) and _UUID.fullmatch(uuid)
            out.append(_Instance(ids[index][0], card, m, uuid if valid else None))
    return out


def _card_walk_reason(card: Mapping[str, Any]) -> Reason | None:
    """Why a card's MIG handles could not be listed, or None when they were."""
    for key in (
        "nvmlDeviceGetHandleByPciBusId",
        "nvmlDeviceGetIndex",
        "nvmlDeviceGetMaxMigDeviceCount",
        "migDevices",
    ):
        code = _error(card.get(key))
        if code is not None:
            return mig_reason(code)  # NOT_FOUND (no card at that bus id) is transient
    bus, reported = card.get("busId"), card.get("nvmlDeviceGetPciInfo")
    # The library's own PCI query answers an empty string (measured); a bus id it does write
    # must be the card's, or the handle is another card's.
    if (
        isinstance(reported, str)
        and reported
        and isinstance(bus, str)
        and (reported.lower() != bus.lower())
    ):
        return Reason.INVALID_DATA
    return None


def _mig_reading(
    wanted: str,
    parent: str,
    payload: Mapping[str, Any],
    instances: list[_Instance],
    parent_ids: tuple[str, ...] | None,
) -> PartitionReading | _Instance:
    """The instance a MIG partition request names, or a reading saying why it has none."""

    def absent(reason: Reason) -> PartitionReading:
        return PartitionReading(
            id=wanted, parent_id=parent, memory_reason=reason, cores_reason=reason
        )

    libraries = payload.get("libraries")
    if not (isinstance(libraries, Mapping) and libraries.get("hydmi_mig") is True):
        return absent(Reason.UNSUPPORTED)  # no multi-instance library on this node
    mig = payload.get("mig")
    if not isinstance(mig, Mapping):
        return absent(Reason.TRANSIENT_DRIVER_ERROR)
    mode = mig.get("nvmlGetSystemMigMode")
    if _error(mode) is not None:
        return absent(mig_reason(_error(mode) or 0))
    if not (isinstance(mode, Mapping) and mode.get("current") == lib.MIG_ENABLE):
        return absent(Reason.UNSUPPORTED)  # the node is not in multi-instance mode
    if parent and parent_ids is None:
        return absent(Reason.TRANSIENT_DRIVER_ERROR)  # its card is not enumerated
    found = [
        i for i in instances if i.answers_to(wanted) and (parent_ids is None or i.card_id == parent)
    ]
    if len(found) > 1 or (
        found
        and sum(
            1
            for i in instances
            if (i.card_id, i.gi, i.ci) == (found[0].card_id, found[0].gi, found[0].ci)
        )
        > 1
    ):
        return absent(Reason.INVALID_DATA)  # two handles claim it: neither can be trusted
    if not found:
        cards = [
            c for c in _entries(mig.get("cards")) if parent_ids is None or c.get("id") == parent
        ]
        walk = [r for r in map(_card_walk_reason, cards) if r is not None]
        return absent(walk[0] if walk else Reason.TRANSIENT_DRIVER_ERROR)
    if (walk_reason := _card_walk_reason(found[0].card)) is not None:
        return absent(walk_reason)
    return found[0]


def _instance_reading(instance: _Instance, aliases: Iterable[str]) -> PartitionReading:
    m = instance.mig
    memory, util = m.get("nvmlDeviceGetMemoryInfo"), m.get("nvmlDeviceGetUtilizationRates")
    m_code, u_code = _error(memory), _error(util)
    total = used = None
    memory_reason = mig_reason(m_code) if m_code is not None else None
    if memory_reason is None and isinstance(memory, Mapping):
        total = mib_from_bytes(as_int(memory.get("total")))  # bytes, as NVML's struct
        used = mib_from_bytes(as_int(memory.get("used")))
        if total is None or used is None:
            memory_reason, total, used = Reason.INVALID_DATA, None, None
    cores_reason = mig_reason(u_code) if u_code is not None else None
    cores = None
    if cores_reason is None and isinstance(util, Mapping):
        # The partition's own utilization, measured on its own handle; never restated.
        value = as_int(util.get("gpu"))
        cores = float(value) if value is not None else None
        cores_reason = None if cores is not None else Reason.INVALID_DATA
    return PartitionReading(
        id=instance.id,
        parent_id=instance.card_id,
        memory_total_mib=total,
        memory_used_mib=used,
        cores_percent=cores,
        memory_reason=memory_reason,
        cores_reason=cores_reason,
        aliases=tuple(dict.fromkeys(a for a in (*instance.aliases, *aliases) if a != instance.id)),
    )


def _vdcu_reading(
    wanted: str,
    number: int,
    parent: str,
    payload: Mapping[str, Any],
    devices: Mapping[int, tuple[str, ...]],
    parent_ids: tuple[str, ...] | None,
) -> PartitionReading:
    """A virtual DCU read on its own index: memory (bytes) and its busy percent."""
    canonical = f"vDCU-{number}"

    def absent(reason: Reason, parent_id: str = parent) -> PartitionReading:
        return PartitionReading(
            id=wanted, parent_id=parent_id, memory_reason=reason, cores_reason=reason
        )

    libraries = payload.get("libraries")
    if not (isinstance(libraries, Mapping) and libraries.get("hydmi") is True):
        return absent(Reason.UNSUPPORTED)  # no vDCU library on this node
    entry = next(
        (v for v in _entries(payload.get("vdcu")) if as_int(v.get("index")) == number), None
    )
    if entry is None:
        return absent(Reason.TRANSIENT_DRIVER_ERROR)
    info = entry.get("dmiGetVDeviceInfo")
    code = _error(info)
    if code is not None or not isinstance(info, Mapping):
        # VDEV_NOT_EXIST: destroyed under a live allocation, or not created yet.
        return absent(dmi_reason(code) if code is not None else Reason.TRANSIENT_DRIVER_ERROR)
    physical = as_int(info.get("device_id"))
    card = devices.get(physical) if physical is not None else None
    if card is None:
        return absent(Reason.TRANSIENT_DRIVER_ERROR)  # its card is not enumerated
    if parent and parent_ids is not None and card[0] != parent_ids[0]:
        # The allocation names another card: not the vDCU it was given.
        return absent(Reason.TRANSIENT_DRIVER_ERROR)
    total = mib_from_bytes(as_int(info.get("global_mem_size")))
    used = mib_from_bytes(as_int(info.get("usage_mem_size")))
    memory_reason = None if total is not None and used is not None else Reason.INVALID_DATA
    busy = entry.get("dmiGetVDevBusyPercent")
    b_code = _error(busy)
    busy_value = as_int(busy) if b_code is None else None
    cores = float(busy_value) if busy_value is not None else None
    cores_reason = None
    if cores is None:
        cores_reason = dmi_reason(b_code) if b_code is not None else Reason.INVALID_DATA
    aliases = tuple(dict.fromkeys(a for a in (f"vdev{number}", wanted) if a != canonical))
    return PartitionReading(
        id=canonical,
        parent_id=card[0],
        memory_total_mib=None if memory_reason else total,
        memory_used_mib=None if memory_reason else used,
        cores_percent=cores,
        memory_reason=memory_reason,
        cores_reason=cores_reason,
        aliases=aliases,
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
    instances = _instances(payload, ids)
    found: dict[str, tuple[_Instance, list[str]]] = {}
    out: dict[tuple[str, str], PartitionReading] = {}
    for parent, wanted in _wanted(payload):
        parent_ids = by_alias.get(parent) if parent else None
        canonical_parent = parent_ids[0] if parent_ids else parent
        if m := _VDCU.fullmatch(wanted):
            reading = _vdcu_reading(
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
        answer = _mig_reading(wanted, canonical_parent, payload, instances, parent_ids)
        if isinstance(answer, PartitionReading):
            out.setdefault((answer.id, answer.parent_id), answer)
            continue
        instance, spellings = found.setdefault(answer.id, (answer, []))
        spellings.append(wanted)
    for instance, spellings in found.values():
        reading = _instance_reading(instance, spellings)
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
    }


def parse(payload: Payload) -> VendorReading:
    devices = _entries(payload.get("devices"))
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


# -- read: the libraries ----------------------------------------------------------------------


def read_registry(root: Path) -> dict[str, Any]:
    """The driver's MIG registry: `dev<N>gi<G>ci<C>` -> the instance's UUID (`mig_uuid:`).

    A missing directory is an empty registry (no instance exists); one that cannot be read is
    recorded as such, so no request is answered "no such partition" from ignorance. Bounded in
    files and bytes: a registry is a handful of small files."""
    ci = root / "ci"
    try:
        names = sorted(os.listdir(ci))
    except FileNotFoundError:
        return {}
    except OSError as exc:
        return failed(f"unreadable: {exc.strerror or exc}", exc.errno or -1)
    out: dict[str, Any] = {}
    for name in names[:MAX_REGISTRY_FILES]:
        m = _REGISTRY_NAME.fullmatch(name)
        if m is None:
            continue
        try:
            with open(ci / name, "rb") as f:
                text = f.read(MAX_REGISTRY_BYTES).decode("utf-8", "replace")
        except OSError:
            continue  # one unreadable file does not blind the reader to the others
        for line in text.splitlines():
            key, sep, value = line.partition(":")
            if sep and key.strip() == "mig_uuid" and _UUID.fullmatch(value.strip()):
                out[f"dev{int(m.group(1))}gi{int(m.group(2))}ci{int(m.group(3))}"] = value.strip()
                break
    return out


class HygonBackend:
    """Reads Hygon DCUs through our ctypes declarations of its three libraries."""

    manufacturer = MANUFACTURER
    libraries: ClassVar[tuple[Library, ...]] = (ROCM_SMI, HYDMI, HYDMI_MIG)

    def __init__(
        self,
        libraries: Mapping[str, str] | None = None,
        mig_config: str | os.PathLike[str] | None = None,
    ) -> None:
        self.configured = dict(libraries or {})
        self.mig_config = Path(mig_config or os.environ.get(MIG_CONFIG_ENV) or MIG_CONFIG)
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

    def _vdcu(self, numbers: list[int]) -> list[dict[str, Any]]:
        assert self._dmi is not None
        out = []
        for number in numbers:
            entry: dict[str, Any] = {"index": number}
            info_fn = self._dmi.get("dmiGetVDeviceInfo")
            info = lib.DmiDeviceInfo()
            rc = None if info_fn is None else int(info_fn(number, byref(info)))
            if rc == lib.DMI_SUCCESS:
                entry["dmiGetVDeviceInfo"] = {
                    "name": lib.c_text(info.name),
                    "compute_unit_count": info.compute_unit_count,
                    "global_mem_size": info.global_mem_size,  # bytes
                    "usage_mem_size": info.usage_mem_size,  # bytes
                    "container_id": info.container_id,
                    "device_id": info.device_id,  # the physical card's index
                }
            else:
                code = lib.DMI_NOT_SUPPORTED if rc is None else rc
                entry["dmiGetVDeviceInfo"] = failed(
                    NOT_EXPORTED if rc is None else lib.dmi_status_name(code), code
                )
            busy_fn = self._dmi.get("dmiGetVDevBusyPercent")
            busy = c_int()
            rc = None if busy_fn is None else int(busy_fn(number, byref(busy)))
            if rc == lib.DMI_SUCCESS:
                entry["dmiGetVDevBusyPercent"] = busy.value  # percent of the vDCU, 0-100
            else:
                code = lib.DMI_NOT_SUPPORTED if rc is None else rc
                entry["dmiGetVDevBusyPercent"] = failed(
                    NOT_EXPORTED if rc is None else lib.dmi_status_name(code), code
                )
            out.append(entry)
        return out

    def _mig_call(self, name: str, *args: Any) -> int:
        assert self._mig is not None
        fn = self._mig.get(name)
        return lib.MIG_FUNCTION_NOT_FOUND if fn is None else int(fn(*args))

    def _mig_failed(self, name: str, rc: int) -> dict[str, Any]:
        assert self._mig is not None
        if self._mig.get(name) is None:
            return failed(NOT_EXPORTED, lib.MIG_FUNCTION_NOT_FOUND)
        return failed(lib.mig_status_name(rc), rc)

    def _mig_value(self, name: str, *args: Any) -> Any:
        out = c_uint32()
        rc = self._mig_call(name, *args, byref(out))
        return int(out.value) if rc == lib.MIG_SUCCESS else self._mig_failed(name, rc)

    def _mig_device(self, handle: c_void_p, global_index: int) -> dict[str, Any]:
        m: dict[str, Any] = {"nvmlDeviceGetMigDeviceHandleByIndex": global_index}
        m["nvmlDeviceGetGpuInstanceId"] = self._mig_value("nvmlDeviceGetGpuInstanceId", handle)
        m["nvmlDeviceGetComputeInstanceId"] = self._mig_value(
            "nvmlDeviceGetComputeInstanceId", handle
        )
        memory = lib.MigMemory()
        rc = self._mig_call("nvmlDeviceGetMemoryInfo", handle, byref(memory))
        m["nvmlDeviceGetMemoryInfo"] = (
            {"total": memory.total, "free": memory.free, "used": memory.used}  # bytes
            if rc == lib.MIG_SUCCESS
            else self._mig_failed("nvmlDeviceGetMemoryInfo", rc)
        )
        util = lib.MigUtilization()
        rc = self._mig_call("nvmlDeviceGetUtilizationRates", handle, byref(util))
        m["nvmlDeviceGetUtilizationRates"] = (
            {"gpu": util.gpu, "memory": util.memory}  # percent of the partition
            if rc == lib.MIG_SUCCESS
            else self._mig_failed("nvmlDeviceGetUtilizationRates", rc)
        )
        return m

    def _mig_card(self, index: int, card_id: str, bus: str | None, count: int) -> dict[str, Any]:
        c: dict[str, Any] = {"index": index, "id": card_id, "busId": bus}
        if bus is None:
            # Without ROCm SMI's bus id the card cannot be reached in this library at all.
            c["nvmlDeviceGetHandleByPciBusId"] = failed("NO_BUS_ID", lib.MIG_NOT_FOUND)
            return c
        handle = c_void_p()
        rc = self._mig_call("nvmlDeviceGetHandleByPciBusId", bus.encode(), byref(handle))
        if rc != lib.MIG_SUCCESS:
            c["nvmlDeviceGetHandleByPciBusId"] = self._mig_failed(
                "nvmlDeviceGetHandleByPciBusId", rc
            )
            return c
        c["nvmlDeviceGetHandleByPciBusId"] = bus
        c["nvmlDeviceGetIndex"] = self._mig_value("nvmlDeviceGetIndex", handle)
        pci = lib.MigPciInfo()
        rc = self._mig_call("nvmlDeviceGetPciInfo", handle, byref(pci))
        c["nvmlDeviceGetPciInfo"] = (
            lib.c_text(pci.bus_id)
            if rc == lib.MIG_SUCCESS
            else self._mig_failed("nvmlDeviceGetPciInfo", rc)
        )
        per_card = self._mig_value("nvmlDeviceGetMaxMigDeviceCount", handle)
        c["nvmlDeviceGetMaxMigDeviceCount"] = per_card
        if not isinstance(per_card, int):
            return c
        # MIG device indexes number the whole node's instances (GPUStack measured it): an
        # index of another card's answers NOT_FOUND here, so the sweep covers the node's space
        # and stops once this card's own maximum is found.
        migs: list[dict[str, Any]] | dict[str, Any] = []
        per_card = min(per_card, 64)
        for global_index in range(per_card * max(count, 1)):
            if isinstance(migs, list) and len(migs) >= per_card:
                break
            mig = c_void_p()
            rc = self._mig_call(
                "nvmlDeviceGetMigDeviceHandleByIndex", handle, global_index, byref(mig)
            )
            if rc == lib.MIG_SUCCESS and isinstance(migs, list):
                migs.append(self._mig_device(mig, global_index))
            elif rc in (lib.MIG_NOT_FOUND, lib.MIG_NOT_SUPPORTED, lib.MIG_INVALID_ARGUMENT):
                continue  # another card's index, or an empty one: a gap, not a fault
            else:
                migs = self._mig_failed("nvmlDeviceGetMigDeviceHandleByIndex", rc)
                break
        c["migDevices"] = migs
        return c

    def _mig_read(
        self, parents: set[str], cards: Mapping[int, tuple[str, ...]], buses: Mapping[int, Any]
    ) -> dict[str, Any]:
        current, pending = c_uint32(), c_uint32()
        rc = self._mig_call("nvmlGetSystemMigMode", byref(current), byref(pending))
        out: dict[str, Any] = {
            "nvmlGetSystemMigMode": {"current": current.value, "pending": pending.value}
            if rc == lib.MIG_SUCCESS
            else self._mig_failed("nvmlGetSystemMigMode", rc)
        }
        if rc != lib.MIG_SUCCESS or current.value != lib.MIG_ENABLE:
            return out  # the node is not in multi-instance mode: no partition to walk
        count = self._mig_value("nvmlDeviceGetCount")
        out["nvmlDeviceGetCount"] = count
        out["registry"] = read_registry(self.mig_config)
        out["cards"] = [
            self._mig_card(
                index,
                ids[0],
                bus_id_of(buses.get(index)),
                count if isinstance(count, int) else len(cards),
            )
            for index, ids in sorted(cards.items())
            if "" in parents or parents & set(ids)
        ]
        return out

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
        devices = [self._device(i) for i in range(count)]
        payload["devices"] = devices
        ids = card_ids(devices)
        carved = [
            d
            for d in devices
            if d["index"] in ids and request.carved_device_ids & set(ids[d["index"]])
        ]
        if carved:
            self._processes(payload, carved)
        vdcus = sorted(
            {int(m.group(1)) for _, p in partitions if (m := _VDCU.fullmatch(p)) is not None}
        )
        if vdcus and self._dmi is not None:
            payload["vdcu"] = self._vdcu(vdcus)
        mig_parents = {parent for parent, p in partitions if not _VDCU.fullmatch(p)}
        if mig_parents and self._mig is not None:
            buses = {d["index"]: d.get("rsmi_dev_pci_id_get") for d in devices}
            for d in devices:
                known = d.get("known")
                if not isinstance(buses[d["index"]], int) and isinstance(known, dict):
                    buses[d["index"]] = known.get("bdf")
            payload["mig"] = self._mig_read(mig_parents, ids, buses)
        return payload

    def parse(self, payload: Payload) -> VendorReading:
        return parse(payload)
