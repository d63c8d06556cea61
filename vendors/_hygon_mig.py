"""Hygon's multi-instance (MIG) partitions through `libhydmi_mig.so`, by our ctypes declarations
(vendors/_hygon_lib.py), and the driver's registry of them in /etc/dmi_mig_config: reading the
partitions and parsing what they answered.

Apart from vendors/hygon.py (the backend, its ROCm SMI cards and per-process rows) because it
is another library, with NVML's symbol names and status codes, and an optional one: a node
without libhydmi_mig has no MIG partition, and its cards are read all the same. The backend
loads it (privately and deep-bound, so it never answers for a libnvidia-ml in the same process,
nor the other way) and hands the bound library to read_mig(); its parse_partitions() asks
mig_reading() for every partition id that does not name a vDCU.

A MIG partition, which the library gives no UUID, is `MIG-<card id>/<gpu instance>/<compute
instance>`, with the `MIG-<uuid>` the driver writes in /etc/dmi_mig_config as its alias (what
GPUStack records as `allocatedPhysicalID` and Hygon's device plugin hands out).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from ctypes import byref, c_uint32, c_void_p
from pathlib import Path
from typing import Any

from devicemanager.model import (
    Answer,
    CardHealth,
    HealthFigure,
    PartitionReading,
    Reason,
    as_int,
    mib_from_bytes,
    unsupported,
)
from vendors import _hygon_lib as lib
from vendors._common import EVERY_ACTIVITY, failed, percent_answer, reasons
from vendors._common import error_code as _error

# The driver's registry of live MIG compute instances, one dev<N>gi<G>ci<C>.conf each, the only
# place their UUIDs are written. The variable points the backend at a copy (tests, a container
# that mounts it elsewhere).
MIG_CONFIG_ENV = "DEVICEMANAGER_HYGON_MIG_CONFIG"
MIG_CONFIG = "/etc/dmi_mig_config"

MAX_REGISTRY_FILES = 1024
MAX_REGISTRY_BYTES = 65536

mig_reason = reasons(
    unsupported=frozenset({lib.MIG_NOT_SUPPORTED, lib.MIG_FUNCTION_NOT_FOUND, lib.MIG_DEPRECATED}),
    permission=frozenset({lib.MIG_NO_PERMISSION}),
    truncated=frozenset({lib.MIG_INSUFFICIENT_SIZE}),
)

# Where a call is refused because the library does not export it: libhydmi_mig's own "function
# not found" code, so the reason is `unsupported` (the mark each of Hygon's libraries writes).
NOT_EXPORTED = "NOT_EXPORTED"

_REGISTRY_NAME = re.compile(r"dev(\d{1,4})gi(\d{1,6})ci(\d{1,6})\.conf")
_UUID = re.compile(r"[0-9A-Za-z][0-9A-Za-z-]{0,63}")


# -- parse: pure ------------------------------------------------------------------------------


def _entries(value: Any) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _normal_uuid(value: str) -> str:
    return value[4:].lower() if value[:4].upper() == "MIG-" else value.lower()


class Instance:
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


def mig_instances(payload: Mapping[str, Any], ids: Mapping[int, tuple[str, ...]]) -> list[Instance]:
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
            out.append(Instance(ids[index][0], card, m, uuid if valid else None))
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


def mig_reading(
    wanted: str,
    parent: str,
    payload: Mapping[str, Any],
    instances: list[Instance],
    parent_ids: tuple[str, ...] | None,
) -> PartitionReading | Instance:
    """The instance a MIG partition request names, or a reading saying why it has none."""

    def absent(reason: Reason) -> PartitionReading:
        return PartitionReading(
            id=wanted,
            parent_id=parent,
            memory_reason=reason,
            cores_reason=reason,
            activity=CardHealth.answered({f: (None, reason) for f in unsupported(EVERY_ACTIVITY)}),
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


def instance_activity(util: Any) -> dict[HealthFigure, Answer]:
    """A MIG instance's activity figures (issue 41): its memory's busy time, the `memory` of
    the utilization its own handle answered (NVML's struct: the share of the sample period in
    which memory was read or written), and every activity figure `unsupported`. Hygon's
    dmi_mig.h declares no GPM and no other per-instance measure (GPUStack: the utilization
    rates are "the only one"), so none is read, and the card's figure is never put in their
    place."""
    found = unsupported(EVERY_ACTIVITY)
    found[HealthFigure.MEMORY_BUSY] = percent_answer(
        util.get("memory") if isinstance(util, Mapping) and _error(util) is None else util,
        mig_reason,
    )
    return found


def instance_reading(instance: Instance, aliases: Iterable[str]) -> PartitionReading:
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
        activity=CardHealth.answered(instance_activity(util)),
    )


# -- read: libhydmi_mig and the registry ------------------------------------------------------


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


class _MigReader:
    """One round's walk of libhydmi_mig: the node's mode, then the instances of each card asked
    for."""

    def __init__(self, mig: lib.Bound, config: Path) -> None:
        self._mig = mig
        self._config = config

    def _call(self, name: str, *args: Any) -> int:
        fn = self._mig.get(name)
        return lib.MIG_FUNCTION_NOT_FOUND if fn is None else int(fn(*args))

    def _failed(self, name: str, rc: int) -> dict[str, Any]:
        if self._mig.get(name) is None:
            return failed(NOT_EXPORTED, lib.MIG_FUNCTION_NOT_FOUND)
        return failed(lib.mig_status_name(rc), rc)

    def _value(self, name: str, *args: Any) -> Any:
        out = c_uint32()
        rc = self._call(name, *args, byref(out))
        return int(out.value) if rc == lib.MIG_SUCCESS else self._failed(name, rc)

    def _device(self, handle: c_void_p, global_index: int) -> dict[str, Any]:
        m: dict[str, Any] = {"nvmlDeviceGetMigDeviceHandleByIndex": global_index}
        m["nvmlDeviceGetGpuInstanceId"] = self._value("nvmlDeviceGetGpuInstanceId", handle)
        m["nvmlDeviceGetComputeInstanceId"] = self._value("nvmlDeviceGetComputeInstanceId", handle)
        memory = lib.MigMemory()
        rc = self._call("nvmlDeviceGetMemoryInfo", handle, byref(memory))
        m["nvmlDeviceGetMemoryInfo"] = (
            {"total": memory.total, "free": memory.free, "used": memory.used}  # bytes
            if rc == lib.MIG_SUCCESS
            else self._failed("nvmlDeviceGetMemoryInfo", rc)
        )
        util = lib.MigUtilization()
        rc = self._call("nvmlDeviceGetUtilizationRates", handle, byref(util))
        m["nvmlDeviceGetUtilizationRates"] = (
            {"gpu": util.gpu, "memory": util.memory}  # percent of the partition
            if rc == lib.MIG_SUCCESS
            else self._failed("nvmlDeviceGetUtilizationRates", rc)
        )
        return m

    def _card(self, index: int, card_id: str, bus: str | None, count: int) -> dict[str, Any]:
        c: dict[str, Any] = {"index": index, "id": card_id, "busId": bus}
        if bus is None:
            # Without ROCm SMI's bus id the card cannot be reached in this library at all.
            c["nvmlDeviceGetHandleByPciBusId"] = failed("NO_BUS_ID", lib.MIG_NOT_FOUND)
            return c
        handle = c_void_p()
        rc = self._call("nvmlDeviceGetHandleByPciBusId", bus.encode(), byref(handle))
        if rc != lib.MIG_SUCCESS:
            c["nvmlDeviceGetHandleByPciBusId"] = self._failed("nvmlDeviceGetHandleByPciBusId", rc)
            return c
        c["nvmlDeviceGetHandleByPciBusId"] = bus
        c["nvmlDeviceGetIndex"] = self._value("nvmlDeviceGetIndex", handle)
        pci = lib.MigPciInfo()
        rc = self._call("nvmlDeviceGetPciInfo", handle, byref(pci))
        c["nvmlDeviceGetPciInfo"] = (
            lib.c_text(pci.bus_id)
            if rc == lib.MIG_SUCCESS
            else self._failed("nvmlDeviceGetPciInfo", rc)
        )
        per_card = self._value("nvmlDeviceGetMaxMigDeviceCount", handle)
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
            rc = self._call("nvmlDeviceGetMigDeviceHandleByIndex", handle, global_index, byref(mig))
            if rc == lib.MIG_SUCCESS and isinstance(migs, list):
                migs.append(self._device(mig, global_index))
            elif rc in (lib.MIG_NOT_FOUND, lib.MIG_NOT_SUPPORTED, lib.MIG_INVALID_ARGUMENT):
                continue  # another card's index, or an empty one: a gap, not a fault
            else:
                migs = self._failed("nvmlDeviceGetMigDeviceHandleByIndex", rc)
                break
        c["migDevices"] = migs
        return c

    def read(
        self,
        parents: set[str],
        cards: Mapping[int, tuple[str, ...]],
        buses: Mapping[int, str | None],
    ) -> dict[str, Any]:
        current, pending = c_uint32(), c_uint32()
        rc = self._call("nvmlGetSystemMigMode", byref(current), byref(pending))
        out: dict[str, Any] = {
            "nvmlGetSystemMigMode": {"current": current.value, "pending": pending.value}
            if rc == lib.MIG_SUCCESS
            else self._failed("nvmlGetSystemMigMode", rc)
        }
        if rc != lib.MIG_SUCCESS or current.value != lib.MIG_ENABLE:
            return out  # the node is not in multi-instance mode: no partition to walk
        count = self._value("nvmlDeviceGetCount")
        out["nvmlDeviceGetCount"] = count
        out["registry"] = read_registry(self._config)
        out["cards"] = [
            self._card(
                index,
                ids[0],
                buses.get(index),
                count if isinstance(count, int) else len(cards),
            )
            for index, ids in sorted(cards.items())
            if "" in parents or parents & set(ids)
        ]
        return out


def read_mig(
    mig: lib.Bound,
    config: Path,
    parents: set[str],
    cards: Mapping[int, tuple[str, ...]],
    buses: Mapping[int, str | None],
) -> dict[str, Any]:
    """What libhydmi_mig answers for the cards `parents` names (every card for ""): `cards` are
    the cards' ids by enumeration index, `buses` their PCI bus ids as ROCm SMI answered them
    (the only way to the card's handle in this library), `config` the registry's directory."""
    return _MigReader(mig, config).read(parents, cards, buses)
