"""The snapshot's `slices` section: per-grant usage of carved cards, and its reading (R-S1, R-S2).

Producer: per-process rows placed by attribution become usage records per (manufacturer, pod,
container name, device); every device the per-process pass covered gets one diagnostics entry
with a reason per figure and its row counts; every partition an Instance container holds gets
the figures read on its own handle. No PID leaves the node. Each holder's part (its usage
record, its partitions' records) is built behind the per-pod boundary (`isolation.per_pod`,
stage `figures`): a pod whose part raised has its figures absent, never zero, and every other
pod's records are what they would have been.

Consumer: `figures()` answers, for one holder of one device, its figures or their absence.
Both surfaces (the exporter and the per-Instance sample) use it, so absent-versus-zero is
decided in one place.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from devicemanager.grants.allocations import Mode
from devicemanager.grants.grants import Grant
from devicemanager.model import FIGURES as TABLE
from devicemanager.model import (
    MIB,
    SCHEMA_VERSION,
    Activity,
    Card,
    CardHealth,
    FigureSpec,
    HealthFigure,
    PartitionReading,
    PodFault,
    ProcessRow,
    Reason,
    SliceDevice,
    SlicePartition,
    SliceSection,
    SliceUsage,
    VendorReading,
    as_int,
    as_number,
    mib_from_bytes,
)
from devicemanager.node.attribution import DeviceAttribution
from devicemanager.node.isolation import FIGURES, per_pod

SUPPORTED_VERSIONS = range(1, 2)
MAX_USAGES = 4096
MAX_DEVICES = 256


@dataclass(frozen=True, slots=True)
class Figures:
    """One holder's figures on one device; a None figure is absent, with its reason."""

    memory_used_mib: int | None
    cores_percent: float | None
    memory_total_mib: int | None = None  # partitions only: their own capacity
    memory_reason: Reason | None = None
    cores_reason: Reason | None = None
    activity: Activity = ()  # partitions only: their own activity figures (issue 41)


# -- producing ----------------------------------------------------------------------------------


def _partition_cores(
    rows: Sequence[ProcessRow],
    all_rows: Sequence[ProcessRow],
    partitions: Mapping[str, PartitionReading],
) -> float | None:
    """One holder's compute from the partitions its processes run in, where the library has
    no per-process figure but measures each partition on its own (a MetaX sGPU): only when
    every one of the holder's rows names such a partition and no other process of the card
    runs in it. Otherwise None: a partition shared with anyone is not one tenant's figure."""
    named = [r.partition_id for r in rows]
    if not rows or any(p is None or p not in partitions for p in named):
        return None
    total = 0.0
    for partition_id in set(named):
        found = partitions[partition_id or ""]
        if found.cores_reason is not None or found.cores_percent is None:
            return None
        if not found.cores_of_card:
            return None  # a share of the partition's own compute is not one of the card
        if sum(r.partition_id == partition_id for r in all_rows) != named.count(partition_id):
            return None  # someone else's process runs in it too
        total += found.cores_percent
    return total


def _holder_usage(
    manufacturer: str,
    verdict: DeviceAttribution,
    vendor: Any,
    holder: tuple[str, str],
    rows: Sequence[Any],
    reasons: tuple[Reason | None, Reason | None],
    partitions: Mapping[str, PartitionReading] | None,
) -> SliceUsage:
    """One holder's (pod UID, container) usage of one device from its attributed rows."""
    memory_reason, cores_reason = reasons
    memory = None
    if memory_reason is None and all(r.memory_bytes is not None for r in rows):
        # Summed in bytes, converted once, rounded up (R-F2).
        memory = mib_from_bytes(sum(r.memory_bytes for r in rows))
    cores = None
    if cores_reason is None and all(r.cores_percent is not None for r in rows):
        cores = min(100.0, float(sum(r.cores_percent for r in rows)))
    elif verdict.reason is None and partitions:
        alone = _partition_cores(rows, vendor.rows, partitions)
        cores = None if alone is None else min(100.0, alone)
    return SliceUsage(manufacturer, holder[0], holder[1], verdict.device_id, memory, cores)


def _device_entry(
    manufacturer: str,
    verdict: DeviceAttribution,
    vendor: Any,
    card: Card | None,
    partitions: Mapping[str, PartitionReading] | None = None,
    faults: MutableMapping[str, PodFault] | None = None,
) -> tuple[SliceDevice, list[SliceUsage]]:
    memory_reason = vendor.memory_reason or verdict.reason
    cores_reason = vendor.cores_reason or verdict.reason
    if memory_reason is None and card is not None and card.memory_total_mib is not None:
        summed = sum(r.memory_bytes or 0 for r in vendor.rows)
        if summed > card.memory_total_mib * MIB:
            # The driver's rows contradict its own card: refused, not clamped (R-S4).
            memory_reason = Reason.INVALID_DATA
    by_holder: dict[tuple[str, str], list[Any]] = {}
    for row, placement in verdict.rows:
        by_holder.setdefault((placement.pod_uid, placement.container), []).append(row)
    usages: list[SliceUsage] = []
    if memory_reason is None or cores_reason is None:
        holders = sorted(by_holder)
        measured = dict(
            per_pod(
                holders,
                lambda holder: holder[0],
                lambda holder: _holder_usage(
                    manufacturer,
                    verdict,
                    vendor,
                    holder,
                    by_holder[holder],
                    (memory_reason, cores_reason),
                    partitions,
                ),
                FIGURES,
                {} if faults is None else faults,
            )
        )
        # A holder whose part raised keeps a record without figures: absent, not a zero.
        usages = [
            measured.get(h) or SliceUsage(manufacturer, *h, verdict.device_id, None, None)
            for h in holders
        ]
    c = verdict.counts
    device = SliceDevice(
        manufacturer,
        verdict.device_id,
        memory_reason,
        cores_reason,
        c.returned,
        c.attributed,
        c.non_instance,
        c.unreadable,
        c.ambiguous,
        vendor.reads_truncated,
    )
    return device, usages


def _partition_entry(
    manufacturer: str, grant: Grant, found: PartitionReading | None, parent: Card | None
) -> SlicePartition:
    key = (manufacturer, grant.pod_uid, grant.container, grant.device_id)
    if grant.partition_id is None or found is None:
        # No id recorded (allocated by an older release), or the driver did not answer for
        # it: found by nothing else, and the parent's figures are every tenant's.
        reason = Reason.TRANSIENT_DRIVER_ERROR
        return SlicePartition(
            *key, id=grant.partition_id or "", memory_reason=reason, cores_reason=reason
        )
    memory_reason = found.memory_reason
    total, used = found.memory_total_mib, found.memory_used_mib
    parent_total = parent.memory_total_mib if parent is not None else None
    if (
        parent_total is not None
        and memory_reason is None
        and ((total or 0) > parent_total or (used or 0) > parent_total)
    ):
        memory_reason, total, used = Reason.INVALID_DATA, None, None
    return SlicePartition(
        *key,
        id=found.id,
        memory_total_mib=total if memory_reason is None else None,
        memory_used_mib=used if memory_reason is None else None,
        cores_percent=found.cores_percent if found.cores_reason is None else None,
        memory_reason=memory_reason,
        cores_reason=found.cores_reason,
        activity=found.activity,
    )


def _without_faulted(section: SliceSection) -> SliceSection:
    """A faulted pod's records carry nothing: its usages no figures, its partitions no record
    (what `figures()` reads as absent), so a part of it that did not raise never stands alone."""
    faulted = {uid for uid, _ in section.faults}
    if not faulted:
        return section
    usages = tuple(
        replace(u, memory_used_mib=None, cores_utilization_percent=None)
        if u.pod_uid in faulted
        else u
        for u in section.usages
    )
    partitions = tuple(p for p in section.partitions if p.pod_uid not in faulted)
    return replace(section, usages=usages, partitions=partitions)


def build(
    reading: VendorReading,
    verdicts: Sequence[DeviceAttribution],
    grants: Iterable[Grant],
) -> SliceSection:
    """One manufacturer's section from its reading, attribution and grants; each holder's part
    behind the per-pod boundary, its faults in the section's `faults`. Pure."""
    manufacturer = reading.manufacturer
    faults: dict[str, PodFault] = {}
    cards = {c.id: c for c in reading.cards}
    vendor = {p.device_id: p for p in reading.processes}
    by_parent: dict[str, dict[str, PartitionReading]] = {}
    for p in reading.partitions:
        by_parent.setdefault(p.parent_id, {})[p.id] = p
    devices, usages = [], []
    for verdict in verdicts:
        device, records = _device_entry(
            manufacturer,
            verdict,
            vendor[verdict.device_id],
            cards.get(verdict.device_id),
            by_parent.get(verdict.device_id),
            faults,
        )
        devices.append(device)
        usages.extend(records)
    found: dict[str, list[PartitionReading]] = {}
    for p in reading.partitions:
        found.setdefault(p.id, []).append(p)

    def partition(grant: Grant) -> SlicePartition:
        candidates = [
            p for p in found.get(grant.partition_id or "", []) if p.parent_id == grant.device_id
        ]
        match = candidates[0] if len(candidates) == 1 else None
        return _partition_entry(manufacturer, grant, match, cards.get(grant.device_id))

    held = [
        g
        for g in grants
        if g.manufacturer == manufacturer
        and g.mode is Mode.PARTITIONED
        and not g.ambiguous  # claimed by two containers: dropped for both
    ]
    partitions = [p for _, p in per_pod(held, lambda g: g.pod_uid, partition, FIGURES, faults)]
    return _without_faulted(
        SliceSection(
            usages=tuple(usages),
            devices=tuple(devices),
            partitions=tuple(partitions),
            faults=tuple(faults.items()),
        )
    )


def merge(sections: Iterable[SliceSection]) -> SliceSection:
    """One section for every manufacturer, within its bounds (R-S2)."""
    sections = list(sections)
    devices = sorted(
        (d for s in sections for d in s.devices), key=lambda d: (d.manufacturer, d.device_id)
    )
    by_device: dict[tuple[str, str], list[SliceUsage]] = {}
    for u in (u for s in sections for u in s.usages):
        by_device.setdefault((u.manufacturer, u.device_id), []).append(u)
    truncated = len(devices) > MAX_DEVICES
    kept_devices: list[SliceDevice] = []
    kept_usages: list[SliceUsage] = []
    for device in devices[:MAX_DEVICES]:
        records = by_device.get((device.manufacturer, device.device_id), [])
        if len(kept_usages) + len(records) > MAX_USAGES:
            # Dropped whole: a device's records are never published in part.
            truncated = True
            device = replace(device, memory_reason=Reason.BOUNDED, cores_reason=Reason.BOUNDED)
            records = []
        kept_devices.append(device)
        kept_usages.extend(records)
    partitions = sorted(
        (p for s in sections for p in s.partitions),
        key=lambda p: (p.manufacturer, p.pod_uid, p.container, p.device_id, p.id),
    )
    faults: dict[str, PodFault] = {}
    for s in sections:
        for uid, fault in s.faults:
            faults.setdefault(uid, fault)
    # A pod that raised under one manufacturer has no figures under another either.
    return _without_faulted(
        SliceSection(
            SCHEMA_VERSION,
            truncated,
            tuple(kept_usages),
            tuple(kept_devices),
            tuple(partitions),
            tuple(faults.items()),
        )
    )


# -- consuming ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Lookup:
    """A section indexed for `figures()`; built once per snapshot."""

    section: SliceSection
    usages: Mapping[tuple[str, str, str, str], SliceUsage]
    devices: Mapping[tuple[str, str], SliceDevice]
    partitions: Mapping[tuple[str, str, str, str, str], SlicePartition]

    @classmethod
    def of(cls, section: SliceSection) -> Lookup:
        return cls(
            section,
            {(u.manufacturer, u.pod_uid, u.container, u.device_id): u for u in section.usages},
            {(d.manufacturer, d.device_id): d for d in section.devices},
            {
                (p.manufacturer, p.pod_uid, p.container, p.device_id, p.id): p
                for p in section.partitions
            },
        )


def figures(
    lookup: Lookup | None,
    manufacturer: str,
    pod_uid: str,
    container: str,
    device_id: str,
    partition_id: str | None = None,
) -> Figures | None:
    """The figures of one holder on one device, or None when the section cannot answer."""
    if lookup is None:
        return None  # no section: this round could not measure
    if lookup.section.schema_version not in SUPPORTED_VERSIONS:
        skew = Reason.VERSION_SKEW
        return Figures(None, None, memory_reason=skew, cores_reason=skew)
    if partition_id is not None:
        # A partition's own record supersedes everything, never mixed per field.
        p = lookup.partitions.get((manufacturer, pod_uid, container, device_id, partition_id))
        if p is None:
            return None
        return Figures(
            p.memory_used_mib,
            p.cores_percent,
            p.memory_total_mib,
            p.memory_reason,
            p.cores_reason,
            activity_of(p.activity),
        )
    device = lookup.devices.get((manufacturer, device_id))
    if device is None:
        return None  # the per-process pass did not cover this device
    usage = lookup.usages.get((manufacturer, pod_uid, container, device_id))
    if usage is not None:
        return Figures(
            usage.memory_used_mib,
            usage.cores_utilization_percent,
            memory_reason=device.memory_reason,
            cores_reason=device.cores_reason,
        )
    # Measured, and this holder ran nothing there: a measured zero wherever the device answered.
    return Figures(
        0 if device.memory_reason is None else None,
        0.0 if device.cores_reason is None else None,
        memory_reason=device.memory_reason,
        cores_reason=device.cores_reason,
    )


# -- JSON -----------------------------------------------------------------------------------------


def to_json(section: SliceSection) -> dict[str, Any]:
    def reasons(memory: Reason | None, cores: Reason | None) -> dict[str, str]:
        out = {}
        if memory is not None:
            out["memoryReason"] = memory.value
        if cores is not None:
            out["coresReason"] = cores.value
        return out

    doc: dict[str, Any] = {"schemaVersion": section.schema_version}
    if section.truncated:
        doc["truncated"] = True
    doc["usages"] = [
        {
            "manufacturer": u.manufacturer,
            "podUID": u.pod_uid,
            "container": u.container,
            "deviceID": u.device_id,
            "memoryUsedMiB": u.memory_used_mib,
            "coresUtilizationPercent": u.cores_utilization_percent,
        }
        for u in section.usages
    ]
    doc["devices"] = [
        {
            "manufacturer": d.manufacturer,
            "deviceID": d.device_id,
            **reasons(d.memory_reason, d.cores_reason),
            "rowsReturned": d.rows_returned,
            "rowsAttributed": d.rows_attributed,
            "rowsNonInstance": d.rows_non_instance,
            "rowsUnreadable": d.rows_unreadable,
            "rowsAmbiguous": d.rows_ambiguous,
            "readsTruncated": d.reads_truncated,
        }
        for d in section.devices
    ]
    if section.partitions:
        doc["partitions"] = [
            {
                "manufacturer": p.manufacturer,
                "podUID": p.pod_uid,
                "container": p.container,
                "deviceID": p.device_id,
                "id": p.id,
                "memoryTotalMiB": p.memory_total_mib,
                "memoryUsedMiB": p.memory_used_mib,
                "coresPercent": p.cores_percent,
                **reasons(p.memory_reason, p.cores_reason),
                **_activity_json(p.activity),
            }
            for p in section.partitions
        ]
    return doc


# A partition's activity rows (issue 41): the figure table's rows under a card's `activity`,
# its busy times among them.
_ACTIVITY: tuple[FigureSpec, ...] = tuple(s for s in TABLE.health if s.json[0] == "activity")


def _activity_json(activity: CardHealth | None) -> dict[str, Any]:
    """A partition's activity as a card's is written (each figure held under its key, why each
    absent one is absent), only where its backend reads it: every other partition's record
    is the one it was before."""
    if activity is None:
        return {}
    held = activity.held()
    return {
        "activity": {s.json[-1]: held[HealthFigure(s.name)] for s in _ACTIVITY if s.name in held},
        "activityAbsentReasons": {name.value: why.value for name, why in activity.reasons},
    }


def _activity_from_json(p: Mapping[str, Any]) -> CardHealth | None:
    values, absent = p.get("activity"), p.get("activityAbsentReasons")
    if not isinstance(values, dict) and not isinstance(absent, dict):
        return None
    held = {
        HealthFigure(s.name): as_number(values.get(s.json[-1]))
        for s in _ACTIVITY
        if isinstance(values, dict)
    }
    names = {s.name.value: HealthFigure(s.name) for s in _ACTIVITY}
    reasons = [
        (names[name], why)
        for name, value in (absent.items() if isinstance(absent, dict) else ())
        if name in names and (why := _reason_of(value)) is not None
    ]
    return CardHealth.of(held, reasons)


# Each activity figure's key in an `activity` object (the card's `health.activity` keys).
_ACTIVITY_KEYS: tuple[tuple[HealthFigure, str], ...] = tuple(
    (HealthFigure(spec.name), spec.json[-1]) for spec in TABLE.activity_rows()
)


def activity_of(health: CardHealth | None) -> Activity:
    """The activity figures a card's or a partition's library measured, as a grant holds them."""
    if health is None:
        return ()
    held = dict(health.numbers)  # activity figures are all numbers
    return tuple((figure, held[figure]) for figure, _ in _ACTIVITY_KEYS if figure in held)


def activity_json(activity: Activity) -> dict[str, float]:
    """A partition's or a grant's activity as the snapshot holds a card's: by JSON key."""
    held = dict(activity)
    return {key: held[figure] for figure, key in _ACTIVITY_KEYS if figure in held}


def activity_from_json(doc: Any) -> Activity:
    """An `activity` object read back; a value that is no number is left out, never guessed."""
    if not isinstance(doc, dict):
        return ()
    out = []
    for figure, key in _ACTIVITY_KEYS:
        value = as_number(doc.get(key))
        if value is not None:
            out.append((figure, value))
    return tuple(out)


def _reason_of(value: Any) -> Reason | None:
    if value in (None, ""):
        return None
    try:
        return Reason(value)
    except ValueError:
        # A reason this consumer does not know is still a reason: the figure stays absent.
        return Reason.VERSION_SKEW


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def from_json(doc: Any) -> SliceSection | None:
    """A section as another agent served it. Unreadable parts are left out, never guessed."""
    if not isinstance(doc, dict):
        return None
    version = as_int(doc.get("schemaVersion"))
    if version is None:
        return None
    if version not in SUPPORTED_VERSIONS:
        return SliceSection(schema_version=version)  # only the version can be trusted

    def items(key: str) -> list[dict[str, Any]]:
        value = doc.get(key)
        return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []

    usages = tuple(
        SliceUsage(
            _str(u.get("manufacturer")),
            _str(u.get("podUID")),
            _str(u.get("container")),
            _str(u.get("deviceID")),
            as_int(u.get("memoryUsedMiB")),
            as_number(u.get("coresUtilizationPercent")),
        )
        for u in items("usages")
    )
    devices = tuple(
        SliceDevice(
            _str(d.get("manufacturer")),
            _str(d.get("deviceID")),
            _reason_of(d.get("memoryReason")),
            _reason_of(d.get("coresReason")),
            *(
                as_int(d.get(k)) or 0
                for k in (
                    "rowsReturned",
                    "rowsAttributed",
                    "rowsNonInstance",
                    "rowsUnreadable",
                    "rowsAmbiguous",
                    "readsTruncated",
                )
            ),
        )
        for d in items("devices")
    )
    partitions = tuple(
        SlicePartition(
            _str(p.get("manufacturer")),
            _str(p.get("podUID")),
            _str(p.get("container")),
            _str(p.get("deviceID")),
            _str(p.get("id")),
            as_int(p.get("memoryTotalMiB")),
            as_int(p.get("memoryUsedMiB")),
            as_number(p.get("coresPercent")),
            _reason_of(p.get("memoryReason")),
            _reason_of(p.get("coresReason")),
            _activity_from_json(p),
        )
        for p in items("partitions")
    )
    return SliceSection(version, doc.get("truncated") is True, usages, devices, partitions)
