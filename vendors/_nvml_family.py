"""What NVML and its clones share, factored by symbol prefix: NVIDIA's NVML (`nvml…`, read
through pynvml) and T-Head's HGML (`hgml…`, read through our own ctypes declarations) answer
the same entry points with the same return codes and the same struct shapes, so one reader
and one pure parse serve both, with every payload key the C entry point's name under the
library's own prefix (`nvmlDeviceGetUUID`, `hgmlDeviceGetUUID`).

What they do not share stays in each vendor's module: how the library is found and
initialised, NVIDIA's XID events and its newer per-process utilization call.

GPM (R-X5). A partition's compute is the SM activity NVML's GPM reports for its GPU instance
between two samples taken at least 100 ms apart. The two samples are taken in consecutive
rounds, not both inside one read: the previous round's sample is kept (`GpmBaseline`), this
round's is taken, and the metric is computed over the whole period between them. So a read
never sleeps (a round's deadline is never spent waiting for a counter), and the figure is
the partition's activity over the period, like every other figure of the round, rather than
a 100 ms glimpse. The first round after start or a re-init has no previous sample: the figure
is absent with `no_baseline`. The sample handles are the library's own opaque buffers; the
payload records what the entry points answered (each sample's monotonic time and the metric
computed from the pair), so parse() stays pure and a recording replays whole.

A whole card not in MIG mode is sampled the same way (issue 41): `…GpmSampleGet` once a round,
kept in the same baseline under the card's UUID, and `…GpmMetricsGet` asked for every id of
GPM_CARD_METRICS against the previous round's sample: SM activity and occupancy, tensor, DRAM
bandwidth and pipe activity, PCIe and NVLink traffic. These are activity, not busy time
(`…DeviceGetUtilizationRates().gpu`, the share of time any kernel ran, stays
`cores_utilization_percent`); each is absent with its reason where GPM cannot state it. A
partition's GPU instance is asked for the same ids (its `activity`): SM activity stays its
compute as well, and every other id it answers is a figure of the partition's own.

Facts: ../shared/reference/vendors.md §1 (NVML), §7 and §12.3 (HGML).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar

from devicemanager.backend import BackendUnavailable, Library
from devicemanager.model import (
    ERROR_CODE_OTHER,
    FIGURES,
    MAX_ERROR_CODES,
    THROTTLE_REASONS,
    Answer,
    Card,
    CardHealth,
    DeviceProcesses,
    HealthFigure,
    HealthValue,
    PartitionReading,
    Payload,
    ProcessRow,
    ReadRequest,
    Reason,
    VendorReading,
    as_int,
    mib_from_bytes,
)
from vendors._common import TOPOLOGY_PERIOD, failed, finite, listing, percent_answer, reasons
from vendors._common import error_code as _error
from vendors._gpm_request import GpmRequest
from vendors._nvml_topology import INTERCONNECTS, parse_bus_ids, parse_topology, read_topology

# Return codes: NVML's nvmlReturn_t and HGML's hgmlReturn_t agree value for value.
SUCCESS = 0
ERROR_INVALID_ARGUMENT = 2
ERROR_NOT_SUPPORTED = 3
ERROR_NO_PERMISSION = 4
ERROR_NOT_FOUND = 6
ERROR_INSUFFICIENT_SIZE = 7
ERROR_DRIVER_NOT_LOADED = 9
ERROR_FUNCTION_NOT_FOUND = 13
ERROR_GPU_IS_LOST = 15
ERROR_ARGUMENT_VERSION_MISMATCH = 25
ERROR_DEPRECATED = 26

# "Cannot" (a property of the node) is kept apart from "could not" (the next round asks again).
reason_for: Callable[[int], Reason] = reasons(
    unsupported=frozenset(
        {
            ERROR_NOT_SUPPORTED,
            ERROR_FUNCTION_NOT_FOUND,
            ERROR_ARGUMENT_VERSION_MISMATCH,
            ERROR_DEPRECATED,
        }
    ),
    permission=frozenset({ERROR_NO_PERMISSION}),
    truncated=frozenset({ERROR_INSUFFICIENT_SIZE}),
)

MIG_ENABLED = 1
TEMPERATURE_GPU = 0  # NVML_TEMPERATURE_GPU, HGML_TEMPERATURE_GPU
# How many times read() asks again when a process list grew between the probe and the read.
PROCESS_LIST_ATTEMPTS = 3
# The headers' rule: two GPM samples closer than this are not comparable.
GPM_MIN_INTERVAL = 0.1
GPM_SM_UTIL = "GPM_METRIC_SM_UTIL"  # under the library's upper-case prefix, e.g. NVML_…
MIB = 1 << 20
# A whole card's GPM figures (issue 41): (metric constant, figure, scale to the figure's unit).
# The headers' units: percent, and MiB per second for PCIe and NVLink traffic.
GPM_CARD_METRICS: tuple[tuple[str, HealthFigure, float], ...] = (
    (GPM_SM_UTIL, HealthFigure.SM_ACTIVITY, 1.0),
    ("GPM_METRIC_SM_OCCUPANCY", HealthFigure.SM_OCCUPANCY, 1.0),
    ("GPM_METRIC_ANY_TENSOR_UTIL", HealthFigure.TENSOR_ACTIVITY, 1.0),
    ("GPM_METRIC_DFMA_TENSOR_UTIL", HealthFigure.TENSOR_ACTIVITY_DFMA, 1.0),
    ("GPM_METRIC_HMMA_TENSOR_UTIL", HealthFigure.TENSOR_ACTIVITY_HMMA, 1.0),
    ("GPM_METRIC_IMMA_TENSOR_UTIL", HealthFigure.TENSOR_ACTIVITY_IMMA, 1.0),
    ("GPM_METRIC_DRAM_BW_UTIL", HealthFigure.MEMORY_BANDWIDTH_UTILIZATION, 1.0),
    ("GPM_METRIC_FP64_UTIL", HealthFigure.PIPE_FP64_ACTIVITY, 1.0),
    ("GPM_METRIC_FP32_UTIL", HealthFigure.PIPE_FP32_ACTIVITY, 1.0),
    ("GPM_METRIC_FP16_UTIL", HealthFigure.PIPE_FP16_ACTIVITY, 1.0),
    ("GPM_METRIC_PCIE_TX_PER_SEC", HealthFigure.PCIE_TX_BYTES_PER_SECOND, MIB),
    ("GPM_METRIC_PCIE_RX_PER_SEC", HealthFigure.PCIE_RX_BYTES_PER_SECOND, MIB),
    ("GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC", HealthFigure.NVLINK_TX_BYTES_PER_SECOND, MIB),
    ("GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC", HealthFigure.NVLINK_RX_BYTES_PER_SECOND, MIB),
)


# -- the pure parse --------------------------------------------------------------------------


def _entries(value: Any) -> list[Mapping[str, Any]]:
    """The objects of a JSON list, skipping anything else a damaged payload may hold."""
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _memory(device: Mapping[str, Any], p: str) -> tuple[int | None, int | None]:
    """(total MiB, used MiB) from v2 where the driver served it, else v1."""
    for key in (f"{p}DeviceGetMemoryInfo_v2", f"{p}DeviceGetMemoryInfo"):
        info = device.get(key)
        if isinstance(info, Mapping) and _error(info) is None:
            total = as_int(info.get("total"))  # bytes
            used = as_int(info.get("used"))  # bytes; v2 leaves the driver's reservation out
            return mib_from_bytes(total), mib_from_bytes(used)
    return None, None


def _unhealthy(device: Mapping[str, Any], p: str, application_xids: frozenset[int]) -> str | None:
    """Why the card is unusable, or None. First match wins; the order is most to least severe."""
    if any(_error(v) == ERROR_GPU_IS_LOST for v in device.values()):
        return "gpu_is_lost"
    xids = device.get("xidCriticalErrors")
    for xid in xids if isinstance(xids, list) else ():
        if isinstance(xid, int) and not isinstance(xid, bool) and xid not in application_xids:
            return f"xid_{xid}"
    rows = device.get(f"{p}DeviceGetRemappedRows")
    if isinstance(rows, Mapping) and _error(rows) is None:
        if rows.get("failureOccurred"):
            return "row_remap_failure"
        if rows.get("isPending"):
            return "row_remap_pending"
    if device.get(f"{p}DeviceGetRetiredPagesPendingStatus") == 1:
        return "retired_pages_pending"
    return None


UINT32_MAX = 0xFFFFFFFF
UINT64_MAX = 0xFFFFFFFFFFFFFFFF
# NVML_CLOCK_* of nvmlDeviceGetClockInfo, by the name the payload and the figures use.
CLOCKS: tuple[tuple[str, int], ...] = (("graphics", 0), ("sm", 1), ("memory", 2))
MAX_CLOCK_MHZ = 100_000  # 100 GHz: no accelerator's clock is near it; above it is a sentinel
# (error type, counter type) of nvmlDeviceGetTotalEccErrors, named as the payload records them:
# NVML_MEMORY_ERROR_TYPE_CORRECTED 0 / UNCORRECTED 1, by NVML_VOLATILE_ECC 0 / AGGREGATE_ECC 1.
ECC_COUNTERS: tuple[tuple[str, int, int], ...] = (
    ("corrected_volatile", 0, 0),
    ("uncorrected_volatile", 1, 0),
    ("corrected_aggregate", 0, 1),
    ("uncorrected_aggregate", 1, 1),
)
H = HealthFigure
# The health figure each of them is.
ECC_FIGURES: dict[str, HealthFigure] = {
    "corrected_volatile": H.ECC_CORRECTED_VOLATILE,
    "uncorrected_volatile": H.ECC_UNCORRECTED_VOLATILE,
    "corrected_aggregate": H.ECC_CORRECTED_AGGREGATE,
    "uncorrected_aggregate": H.ECC_UNCORRECTED_AGGREGATE,
}
CLOCK_FIGURES: dict[str, HealthFigure] = {
    "graphics": H.CLOCK_GRAPHICS_HZ,
    "sm": H.CLOCK_SM_HZ,
    "memory": H.CLOCK_MEMORY_HZ,
}
# nvmlClocksEventReason* bits (nvml.h), in THROTTLE_REASONS' order: 0x1 … 0x400.
THROTTLE_BITS: tuple[tuple[str, int], ...] = tuple(
    (name, 1 << bit) for bit, name in enumerate(THROTTLE_REASONS)
)
# The bits each library's header defines: HGML's hgml.h stops at 0x100 (no BoardLimit or
# Reliability), so a PPU does not report those two reasons at all rather than "not active".
THROTTLE_BITS_BY_PREFIX: Mapping[str, tuple[tuple[str, int], ...]] = {
    "nvml": THROTTLE_BITS,
    "hgml": tuple((name, bit) for name, bit in THROTTLE_BITS if bit <= 0x100),
}
# The entry points whose answers make a card's CardHealth; a payload recorded before they were
# read has none of them, and its cards have no CardHealth (absent, as before).
HEALTH_KEYS = (
    "DeviceGetTotalEccErrors",
    "DeviceGetTotalEnergyConsumption",
    "DeviceGetCurrentClocksEventReasons",
    "DeviceGetClockInfo",
    "DeviceGetPcieReplayCounter",
)
# The payload key of a card's XID events counted by code since the agent started (NVIDIA's
# event set: `{"79": 2, "other": 1}`, or the failure that left the backend without one).
XID_COUNTS = "xidErrorCounts"


def _count(value: Any, ceiling: int) -> tuple[int | None, Reason | None]:
    """An unsigned count the library answered, or why it is absent: a recorded failure is its
    code's reason; anything but an integer in 0..ceiling-1 (the type's all-ones value is the
    headers' "not available") is `invalid_data`, never published."""
    if (code := _error(value)) is not None:
        return None, reason_for(code)
    number = as_int(value)
    if number is None or not 0 <= number < ceiling:
        return None, Reason.INVALID_DATA
    return number, None


def _part(answers: Any, name: str) -> Any:
    """One answer of an entry point read once per argument (`{name: answer}`); the whole record
    where the call failed before any argument was asked."""
    if isinstance(answers, Mapping) and _error(answers) is None:
        return answers.get(name)
    return answers


def parse_health(device: Mapping[str, Any], p: str) -> CardHealth | None:
    """A card's error counters, energy, clocks, PCIe replays and XID counts (issue 29), in
    base units, each absent with its reason where its entry point did not answer or answered
    out of range."""
    if not any(f"{p}{key}" in device for key in HEALTH_KEYS):
        return None
    found: dict[HealthFigure, Answer] = {}

    def put(figure: HealthFigure, value: HealthValue | None, reason: Reason | None) -> None:
        found[figure] = (value, reason)

    ecc = device.get(f"{p}DeviceGetTotalEccErrors")
    if ecc is not None:
        for name, _, _ in ECC_COUNTERS:
            put(ECC_FIGURES[name], *_count(_part(ecc, name), UINT64_MAX))
    rows = device.get(f"{p}DeviceGetRemappedRows")
    if rows is not None:
        code = _error(rows)
        for figure, key, ceiling in (
            (H.REMAPPED_ROWS_CORRECTABLE, "corrRows", UINT32_MAX),
            (H.REMAPPED_ROWS_UNCORRECTABLE, "uncRows", UINT32_MAX),
            (H.REMAPPED_ROWS_PENDING, "isPending", 2),  # NVML's flags: 0 or 1
            (H.REMAPPED_ROWS_FAILED, "failureOccurred", 2),
        ):
            if code is not None:
                put(figure, None, reason_for(code))
            elif isinstance(rows, Mapping):
                put(figure, *_count(rows.get(key), ceiling))
            else:
                put(figure, None, Reason.INVALID_DATA)
    energy = device.get(f"{p}DeviceGetTotalEnergyConsumption")
    if energy is not None:
        mj, reason = _count(energy, UINT64_MAX)  # millijoules since the driver loaded
        put(H.ENERGY_JOULES, None if mj is None else mj / 1000.0, reason)
    mask: Any = device.get(f"{p}DeviceGetCurrentClocksEventReasons")
    older = device.get(f"{p}DeviceGetCurrentClocksThrottleReasons")
    if older is not None and _error(mask) is not None:
        mask = older  # the pre-12.x name, asked where the newer call is not served
    if mask is not None:
        bits, reason = _count(mask, UINT64_MAX)
        known = THROTTLE_BITS_BY_PREFIX.get(p, THROTTLE_BITS)
        active = None if bits is None else tuple((n, bool(bits & b)) for n, b in known)
        put(H.THROTTLE_REASONS, active, reason)
    clocks = device.get(f"{p}DeviceGetClockInfo")
    if clocks is not None:
        for name, _ in CLOCKS:
            mhz, reason = _count(_part(clocks, name), UINT32_MAX)
            if mhz is not None and mhz > MAX_CLOCK_MHZ:
                mhz, reason = None, Reason.INVALID_DATA
            put(CLOCK_FIGURES[name], None if mhz is None else mhz * 1_000_000, reason)
    replays = device.get(f"{p}DeviceGetPcieReplayCounter")
    if replays is not None:
        put(H.PCIE_REPLAYS, *_count(replays, UINT32_MAX))
    counts = device.get(XID_COUNTS)
    if counts is not None:
        put(H.XID_ERRORS, *parse_xid_counts(counts))
    found.update(parse_card_gpm(device, p))
    rates = device.get(f"{p}DeviceGetUtilizationRates")
    if rates is not None:
        # "Percent of time over the past sample period during which global (device) memory was
        # being read or written" (nvml.h): the memory's busy time, not bandwidth (issue 41).
        memory = (
            rates
            if _error(rates) is not None or not isinstance(rates, Mapping)
            else rates.get("memory")
        )
        put(H.MEMORY_BUSY, *percent_answer(memory, reason_for))
    return CardHealth.answered(found)


def parse_xid_counts(value: Any) -> tuple[tuple[tuple[str, int], ...] | None, Reason | None]:
    """The XID events counted since the agent started, by code (R-X7): `{code: count}` as
    read() recorded it, codes in numeric order and ERROR_CODE_OTHER last; a recorded failure
    (no event set on this driver) is its reason; anything else is `invalid_data`."""
    if (code := _error(value)) is not None:
        return None, reason_for(code)
    if not isinstance(value, Mapping) or len(value) > MAX_ERROR_CODES + 1:
        return None, Reason.INVALID_DATA
    codes: list[tuple[int, str, int]] = []
    for key, raw in value.items():
        count = as_int(raw)
        if count is None or not 1 <= count < UINT64_MAX:
            return None, Reason.INVALID_DATA
        if key == ERROR_CODE_OTHER:
            codes.append((UINT64_MAX + 1, key, count))
        elif isinstance(key, str) and key.isascii() and key.isdigit() and len(key) <= 20:
            codes.append((int(key), str(int(key)), count))
        else:
            return None, Reason.INVALID_DATA
    return tuple((name, count) for _, name, count in sorted(codes)), None


def _temperature(device: Mapping[str, Any], p: str) -> Any:
    """The plain call's reading; where it failed, the versioned call's (HGML drivers that no
    longer export the plain one answer `…DeviceGetTemperatureV`)."""
    plain = device.get(f"{p}DeviceGetTemperature")
    if _error(plain) is not None and f"{p}DeviceGetTemperatureV" in device:
        return device.get(f"{p}DeviceGetTemperatureV")
    return plain


def parse_card(
    device: Mapping[str, Any],
    p: str,
    application_xids: frozenset[int] = frozenset(),
) -> Card | None:
    # A card that stopped answering is still named by what it answered earlier (`known*`,
    # recorded by read()), so its grant shows it unhealthy instead of silently losing it.
    uuid = device.get(f"{p}DeviceGetUUID")
    if not isinstance(uuid, str):
        uuid = device.get("knownUUID")
    index = as_int(device.get(f"{p}DeviceGetIndex"))
    if index is None:
        index = as_int(device.get("knownIndex"))
    if not isinstance(uuid, str) or index is None:
        # Without its identity a card cannot be named in any figure.
        return None
    total, used = _memory(device, p)
    rates = device.get(f"{p}DeviceGetUtilizationRates")
    gpu = finite(rates.get("gpu")) if isinstance(rates, Mapping) and not _error(rates) else None
    power_mw = finite(device.get(f"{p}DeviceGetPowerUsage"))  # mW
    name = device.get(f"{p}DeviceGetName")
    if not isinstance(name, str):
        name = device.get("knownName")
    reason = _unhealthy(device, p, application_xids)
    return Card(
        id=uuid,
        index=index,
        name=name if isinstance(name, str) else None,
        memory_total_mib=total,
        memory_used_mib=used,
        cores_utilization_percent=gpu,
        temperature_celsius=finite(_temperature(device, p)),  # °C
        power_usage_watts=None if power_mw is None else round(power_mw / 1000.0, 3),
        unhealthy=reason is not None,
        unhealthy_reason=reason,
        health=parse_health(device, p),
    )


def _newest_samples(samples: Iterable[Any]) -> dict[int, float]:
    """Per PID, the SM share of its newest sample: older rows for one PID are history (a PID
    can appear in several rows of one answer, with different time stamps)."""
    newest: dict[int, tuple[int, float]] = {}
    for sample in samples:
        if not isinstance(sample, Mapping):
            continue
        pid, stamp = as_int(sample.get("pid")), as_int(sample.get("timeStamp"))
        util = finite(sample.get("smUtil"))
        if pid is None or stamp is None or util is None:
            continue
        if pid not in newest or stamp > newest[pid][0]:
            newest[pid] = (stamp, util)
    return {pid: util for pid, (_, util) in newest.items()}


def _cores_answer(
    device: Mapping[str, Any], p: str
) -> tuple[dict[int, float] | None, Reason | None]:
    """Per-PID SM share, or the reason there is none.

    NOT_FOUND means no process had a sample in the window: every process is idle, which is an
    answer. The newer …ProcessesUtilizationInfo is used only where read() had to fall back to
    it because the older call is not served.
    """
    reason: Reason | None = Reason.UNSUPPORTED
    for key in (f"{p}DeviceGetProcessUtilization", f"{p}DeviceGetProcessesUtilizationInfo"):
        if key not in device:
            continue
        value = device[key]
        code = _error(value)
        if code is None:
            return _newest_samples(_entries(value)), None
        if code == ERROR_NOT_FOUND:
            return {}, None
        reason = reason_for(code)
        if reason is not Reason.UNSUPPORTED:
            return None, reason
    return None, reason


def parse_processes(device: Mapping[str, Any], p: str) -> DeviceProcesses | None:
    """The per-process answer for a carved card; None when read() did not ask for this card."""
    uuid = device.get(f"{p}DeviceGetUUID")
    key = f"{p}DeviceGetComputeRunningProcesses_v3"
    if not isinstance(uuid, str) or key not in device:
        return None
    listed = device[key]
    code = _error(listed)
    samples, cores_reason = _cores_answer(device, p)
    memory_reason = None if code is None else reason_for(code)
    truncated = int(memory_reason is Reason.TRUNCATED) + int(cores_reason is Reason.TRUNCATED)
    # A row of a MIG-enabled card names its GPU instance; the MIG handles read this round say
    # which partition that is (0xFFFFFFFF, MIG off, matches none).
    partitions = {
        as_int(m.get(f"{p}DeviceGetGpuInstanceId")): m.get(f"{p}DeviceGetUUID")
        for m in _entries(device.get("migDevices"))
        if isinstance(m.get(f"{p}DeviceGetUUID"), str)
    }
    rows: list[ProcessRow] = []
    if code is None and isinstance(listed, list):
        for proc in listed:
            pid = as_int(proc.get("pid")) if isinstance(proc, Mapping) else None
            if pid is None:
                continue
            # usedGpuMemory null is the VALUE_NOT_AVAILABLE sentinel: unknown, never 0.
            used = as_int(proc.get("usedGpuMemory"))
            # A listed PID with no sample ran nothing in the window: idle, measured.
            cores = None if samples is None else samples.get(pid, 0.0)
            partition = partitions.get(as_int(proc.get("gpuInstanceId")))
            rows.append(
                ProcessRow(
                    pid=pid,
                    memory_bytes=used,
                    cores_percent=cores,
                    partition_id=partition if isinstance(partition, str) else None,
                )
            )
    elif samples is not None:
        # No process list: the sampled PIDs are the rows we have, their memory unknown.
        rows = [ProcessRow(pid=pid, cores_percent=util) for pid, util in sorted(samples.items())]
    # A PID seen only in samples and not in a good process list has exited: dropped above.
    return DeviceProcesses(
        device_id=uuid,
        rows=tuple(rows),
        memory_reason=memory_reason,
        cores_reason=cores_reason,
        reads_truncated=truncated,
    )


def parse_gpm(
    parent: Mapping[str, Any], mig: Mapping[str, Any], p: str
) -> tuple[float | None, Reason | None]:
    """A partition's SM activity from GPM, or why there is none (R-X5).

    No GPM support asked or answered (an older card, a driver without GPM, a payload recorded
    before GPM was read) is `unsupported`, as partition compute always was; no previous sample
    yet is `no_baseline`; a value outside 0..100 is `invalid_data`, never clamped.
    """
    metrics, why = _gpm_steps(
        parent.get(f"{p}GpmQueryDeviceSupport"),
        (mig.get(f"{p}GpmSampleAlloc"), mig.get(f"{p}GpmMigSampleGet")),
        mig.get(f"{p}GpmMetricsGet"),
    )
    if metrics is None:
        return None, why
    value = metrics.get(f"{p.upper()}_{GPM_SM_UTIL}")
    if (code := _error(value)) is not None:
        return None, reason_for(code)
    number = finite(value)
    if number is None or not 0.0 <= number <= 100.0:
        return None, Reason.INVALID_DATA
    return round(number, 2), None


def _gpm_steps(
    support: Any, steps: Iterable[Any], metrics: Any
) -> tuple[Mapping[str, Any] | None, Reason | None]:
    """The metrics GPM computed between two samples, or why there are none: no support asked
    or answered is `unsupported`, a failed step its code's reason, no previous sample
    `no_baseline`."""
    if not isinstance(support, Mapping):
        return None, Reason.UNSUPPORTED
    if (code := _error(support)) is not None:
        return None, reason_for(code)
    if as_int(support.get("isSupportedDevice")) != 1:
        return None, Reason.UNSUPPORTED
    taken: Any = None
    for taken in steps:
        if (code := _error(taken)) is not None:
            return None, reason_for(code)
    if not isinstance(taken, Mapping):
        return None, Reason.TRANSIENT_DRIVER_ERROR  # supported, yet no sample was taken
    if metrics is None:
        return None, Reason.NO_BASELINE  # the first sample, or the previous one too recent
    if not isinstance(metrics, Mapping):
        return None, Reason.INVALID_DATA
    if (code := _error(metrics)) is not None:
        return None, reason_for(code)
    return metrics, None


def parse_card_gpm(device: Mapping[str, Any], p: str) -> dict[HealthFigure, Answer]:
    """A whole card's GPM figures over the round period (issue 41), each absent with its
    reason: a card whose GPM was not sampled (before Hopper, in MIG mode, a payload recorded
    before these were read) `unsupported`; the first round `no_baseline`; a metric the library
    refused its code's reason; a value outside its row's bounds `invalid_data`, never clamped.
    Never busy time in activity's place."""
    if f"{p}GpmSampleAlloc" not in device and f"{p}GpmSampleGet" not in device:
        # Not sampled: no GPM on this card, or its partitions carry the figures (MIG mode).
        return {figure: (None, Reason.UNSUPPORTED) for _, figure, _ in GPM_CARD_METRICS}
    metrics, why = _gpm_steps(
        device.get(f"{p}GpmQueryDeviceSupport"),
        (device.get(f"{p}GpmSampleAlloc"), device.get(f"{p}GpmSampleGet")),
        device.get(f"{p}GpmMetricsGet"),
    )
    return _gpm_answers(metrics, why, p)


def parse_partition_gpm(
    parent: Mapping[str, Any], mig: Mapping[str, Any], p: str
) -> dict[HealthFigure, Answer]:
    """Every GPM figure a partition's GPU instance answered over the round period (issue 41),
    each absent with its reason as a whole card's are. A payload recorded when only SM
    activity was asked of a partition holds no other id: those are `unsupported`, as an id
    the library does not define is."""
    metrics, why = _gpm_steps(
        parent.get(f"{p}GpmQueryDeviceSupport"),
        (mig.get(f"{p}GpmSampleAlloc"), mig.get(f"{p}GpmMigSampleGet")),
        mig.get(f"{p}GpmMetricsGet"),
    )
    return _gpm_answers(metrics, why, p)


@functools.cache
def _gpm_rows(p: str) -> tuple[tuple[str, HealthFigure, float, tuple[float, float]], ...]:
    """GPM_CARD_METRICS as a payload of prefix `p` names them: (payload key, figure, scale,
    the figure row's bounds), worked out once per prefix, not per card and round."""
    rows = []
    for constant, figure, scale in GPM_CARD_METRICS:
        spec = FIGURES.health_spec(figure)
        bounds = spec.bounds if spec is not None and spec.bounds is not None else (0.0, 100.0)
        rows.append((f"{p.upper()}_{constant}", figure, scale, bounds))
    return tuple(rows)


def _gpm_answers(
    metrics: Mapping[str, Any] | None, why: Reason | None, p: str
) -> dict[HealthFigure, Answer]:
    """Each GPM figure from the metrics one pair of samples gave, or why it is absent."""
    found: dict[HealthFigure, Answer] = {}
    for key, figure, scale, bounds in _gpm_rows(p):
        if metrics is None:
            found[figure] = (None, why)
            continue
        value = metrics.get(key)
        if value is None:
            found[figure] = (None, Reason.UNSUPPORTED)  # an id the library does not define
        elif (code := _error(value)) is not None:
            # A metric id the driver does not serve answers INVALID_ARGUMENT every round (the
            # H200's answer to the ids it lacks), and one a GPU instance cannot state
            # NOT_SUPPORTED: a property of the card, not a glitch.
            why_not = Reason.UNSUPPORTED if code == ERROR_INVALID_ARGUMENT else reason_for(code)
            found[figure] = (None, why_not)
        else:
            found[figure] = _gpm_value(value, scale, bounds)
    return found


def _gpm_value(value: Any, scale: float, bounds: tuple[float, float]) -> Answer:
    number = finite(value)
    if number is None or not bounds[0] <= number * scale <= bounds[1]:
        return None, Reason.INVALID_DATA
    return round(number * scale, 2), None


def parse_partitions(payload: Mapping[str, Any], p: str) -> tuple[PartitionReading, ...]:
    """Answer every partition read() was asked for, found only by its recorded id (R-V4)."""
    request = payload.get("request")
    wanted = request.get("partitions") if isinstance(request, Mapping) else None
    devices = _entries(payload.get("devices"))
    uuid_key = f"{p}DeviceGetUUID"
    by_uuid = {d[uuid_key]: d for d in devices if isinstance(d.get(uuid_key), str)}
    handles: dict[str, list[Mapping[str, Any]]] = {}
    parents: dict[str, list[str]] = {}  # partition id -> the cards listing it
    for device in devices:
        for mig in _entries(device.get("migDevices")):
            if isinstance(mig.get(uuid_key), str):
                handles.setdefault(mig[uuid_key], []).append(mig)
                if isinstance(device.get(uuid_key), str):
                    parents.setdefault(mig[uuid_key], []).append(device[uuid_key])
    out: list[PartitionReading] = []
    for item in wanted if isinstance(wanted, list) else ():
        if not (
            isinstance(item, list) and len(item) == 2 and all(isinstance(s, str) for s in item)
        ):
            continue
        parent_id, partition_id = item
        if not parent_id:
            # Asked for by its own id alone: its card is the one that lists it, when exactly
            # one does.
            listed = parents.get(partition_id, [])
            parent_id = listed[0] if len(listed) == 1 else ""
        parent = by_uuid.get(parent_id)
        found = handles.get(partition_id, [])
        mode = parent.get(f"{p}DeviceGetMigMode") if parent is not None else None
        mode_code = _error(mode)
        if parent is None:
            reason = Reason.TRANSIENT_DRIVER_ERROR
        elif mode_code is not None:
            reason = reason_for(mode_code)
        elif not (isinstance(mode, Mapping) and mode.get("current") == MIG_ENABLED):
            # A partition named on a card whose MIG mode is off cannot be read as one.
            reason = Reason.UNSUPPORTED
        elif len(found) > 1:
            # Two handles claim one UUID: neither answer can be trusted as this partition's.
            reason = Reason.INVALID_DATA
        elif not found:
            reason = Reason.TRANSIENT_DRIVER_ERROR
        else:
            total, used = _memory(found[0], p)
            memory_reason = None if total is not None else Reason.TRANSIENT_DRIVER_ERROR
            cores, cores_reason = parse_gpm(parent, found[0], p)
            out.append(
                PartitionReading(
                    id=partition_id,
                    parent_id=parent_id,
                    memory_total_mib=total,
                    memory_used_mib=used,
                    memory_reason=memory_reason,
                    cores_percent=cores,
                    cores_reason=cores_reason,
                    activity=CardHealth.answered(parse_partition_gpm(parent, found[0], p)),
                )
            )
            continue
        out.append(
            PartitionReading(
                id=partition_id,
                parent_id=parent_id,
                memory_reason=reason,
                cores_reason=reason,
                activity=CardHealth.answered(
                    {figure: (None, reason) for _, figure, _ in GPM_CARD_METRICS}
                ),
            )
        )
    return tuple(out)


def parse(
    payload: Payload,
    p: str,
    manufacturer: str,
    application_xids: frozenset[int] = frozenset(),
) -> VendorReading:
    devices = listing(payload, "devices")
    cards = tuple(c for c in (parse_card(d, p, application_xids) for d in devices) if c)
    placed = parse_topology(payload, p)
    if placed:
        cards = tuple(
            dataclasses.replace(c, links=placed[c.id][0], numa_node=placed[c.id][1])
            if c.id in placed
            else c
            for c in cards
        )
    processes = tuple(x for x in (parse_processes(d, p) for d in devices) if x is not None)
    driver = payload.get(f"{p}SystemGetDriverVersion")
    return VendorReading(
        manufacturer=manufacturer,
        cards=cards,
        processes=processes,
        partitions=parse_partitions(payload, p),
        driver_version=driver if isinstance(driver, str) else None,
        bus_ids=MappingProxyType(parse_bus_ids(payload, p)),
    )


# -- the reader --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Binding:
    """An NVML-shaped library as Python calls it: pynvml's module, or our HGML declarations.

    Entry points are looked up as `<prefix><Name>` with pynvml's calling convention (values
    returned, a failure raised as `error` carrying the return code in `.value`); constants as
    `<PREFIX>_<NAME>`; `metrics_get` is the library's GPM metrics-request struct.
    """

    prefix: str
    lib: Any
    error: type[Exception]
    metrics_get: Any
    # Each entry point looked up once: a round makes some thirty calls a card.
    _functions: dict[str, Callable[..., Any]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def fn(self, name: str) -> Callable[..., Any]:
        function = self._functions.get(name)
        if function is None:
            function = self._functions[name] = getattr(self.lib, f"{self.prefix}{name}")
        return function

    def const(self, name: str) -> Any:
        return getattr(self.lib, f"{self.prefix.upper()}_{name}")

    def error_name(self, exc: BaseException) -> str:
        """How a failure is named in the payload: pynvml's class name, or our library's."""
        name = getattr(exc, "name", None)
        return name if isinstance(name, str) else type(exc).__name__

    def code_name(self, code: int) -> str:
        return self.error_name(self.error(code))


class GpmBaseline:
    """The previous GPM sample of each partition (or whole card) read, kept across rounds: the
    library's own sample buffer and the monotonic time it was taken, and a spare buffer to take
    the next sample into. Each `…GpmSampleGet` reads a sample into the buffer it is given
    (nvml.h: "Read a sample of GPM metrics into the provided gpmSample buffer"; "allocate at
    least two of these buffers"), so the one a new sample replaces becomes the spare instead
    of being freed and another allocated: two calls a card and round fewer.
    Both are freed when their partition is no longer read and on close; forgotten with the
    backend on re-init, so a figure never spans a driver reload."""

    def __init__(self) -> None:
        self._held: dict[str, tuple[Any, float]] = {}
        self._spare: dict[str, Any] = {}

    def previous(self, key: str) -> tuple[Any, float] | None:
        return self._held.get(key)

    def take_spare(self, key: str) -> Any:
        """The spare buffer of `key`, now the caller's; None when there is none."""
        return self._spare.pop(key, None)

    def put_spare(self, key: str, sample: Any, free: Callable[[Any], None]) -> None:
        """`sample`, not kept as the previous one, becomes `key`'s spare (one at most)."""
        old = self._spare.get(key)
        self._spare[key] = sample
        if old is not None and old is not sample:
            free(old)

    def keep(self, key: str, sample: Any, at: float, free: Callable[[Any], None]) -> None:
        """`sample` becomes the previous one for `key`; the one it replaces becomes the spare."""
        old = self._held.get(key)
        self._held[key] = (sample, at)
        if old is not None and old[0] is not sample:
            self.put_spare(key, old[0], free)

    def keep_only(self, keys: set[str], free: Callable[[Any], None]) -> None:
        for stale in self._held.keys() - keys:
            free(self._held.pop(stale)[0])
        for stale in self._spare.keys() - keys:
            free(self._spare.pop(stale))

    def clear(self, free: Callable[[Any], None]) -> None:
        self.keep_only(set(), free)


class NvmlFamilyBackend:
    """The read() and parse() NVML and HGML share. A vendor module sets the class attributes,
    and its open() sets `self._binding` after initialising the library."""

    manufacturer: ClassVar[str] = ""
    prefix: ClassVar[str] = ""
    libraries: ClassVar[tuple[Library, ...]] = ()
    # XIDs that report an application fault rather than a broken card (NVIDIA only).
    application_xids: ClassVar[frozenset[int]] = frozenset()
    # Whether XID events are read from the library's event set and counted by code (R-X7), and
    # whether a non-application XID makes the card unhealthy (NVIDIA: its device plugin's
    # rule; not where nobody published which XIDs are an application's).
    reads_xid_events: ClassVar[bool] = False
    xids_make_unhealthy: ClassVar[bool] = False
    # Whether the newer …ProcessesUtilizationInfo is asked where the older call is not served.
    newer_process_utilization: ClassVar[bool] = False
    # Whether the card's error counters, energy, clocks and PCIe replays are read (issue 29).
    reads_health: ClassVar[bool] = False
    # Whether the versioned `…DeviceGetTemperatureV` is asked where the plain call is missing
    # (FUNCTION_NOT_FOUND): HGML's newer drivers.
    temperature_v: ClassVar[bool] = False
    # Whether the GPM support struct's version the driver accepted is recorded (HGML's binding
    # tries two: the header's and GPUStack's).
    records_gpm_support_version: ClassVar[bool] = False
    # Whether a whole card's GPM figures are read (issue 41): NVIDIA's and T-Head's.
    reads_card_gpm: ClassVar[bool] = False
    # Whether links and placement are read (R-X3): NVIDIA's NVLinks, HGML's ICN links.
    reads_topology: ClassVar[bool] = False

    def __init__(
        self,
        libraries: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        sysfs: str | Path = "/sys",
    ) -> None:
        self.configured = dict(libraries or {})
        # Where a card's PCI device is found when NVML does not say its NUMA node.
        self._sysfs = Path(sysfs)
        # The last topology read and the cards it was read for: read again once a minute (by
        # `clock`), or sooner when the cards change; every payload in between carries it.
        self._topology: dict[str, Any] | None = None
        self._topology_cards: tuple[Any, ...] = ()
        self._binding: Binding | None = None
        self._clock = clock
        self._baseline = GpmBaseline()
        # The payload names of the GPM ids the open library defines, and its metrics request
        # asking them in that order (made on the first metrics asked, dropped with the library).
        self._gpm: tuple[tuple[str, ...], GpmRequest] | None = None
        # Identity a card gave in an earlier round, by enumeration index: a lost card stops
        # answering even …DeviceGetUUID.
        self._known: dict[int, dict[str, Any]] = {}

        # XID events (R-X7): the event set, or why there is none (its failure as the payload
        # records it); per card UUID the codes seen for `unhealthy`, the counts by code, and
        # why a card's events are not read.
        self._events: Any = None
        self._events_failed: dict[str, Any] | None = None
        self._xids: dict[str, list[int]] = {}
        self._xid_counts: dict[str, dict[str, int]] = {}
        self._unregistered: dict[str, dict[str, Any]] = {}

    # -- XID events ---------------------------------------------------------------------------

    def _register_xid_events(self) -> None:
        """After the library is initialised: an event set for every card's XIDs, where the
        backend reads them. A driver without one leaves the counts absent with its reason."""
        self._events = None
        if not self.reads_xid_events:
            return
        events = self._call("EventSetCreate")
        if _error(events) is not None:
            self._events_failed = events  # no event support: health keeps its other signals
            return
        self._events_failed = None
        count = self._call("DeviceGetCount")
        xid_type = getattr(self.binding.lib, f"{self.prefix}EventTypeXidCriticalError")
        for index in range(count if isinstance(count, int) else 0):
            handle = self._call("DeviceGetHandleByIndex", index)
            if _error(handle) is not None:
                continue
            answer = self._call("DeviceRegisterEvents", handle, xid_type, events)
            if _error(answer) is not None:
                # This card's XIDs cannot be counted: absent with the reason, not 0.
                uuid = self._call("DeviceGetUUID", handle)
                if isinstance(uuid, str):
                    self._unregistered[uuid] = answer
        self._events = events

    def _free_events(self) -> None:
        if self._events is not None:
            self._call("EventSetFree", self._events)
            self._events = None

    def _round_started(self) -> None:
        """Before a round's reads: the XIDs raised since the last round, without blocking
        (timeout 0)."""
        while self._events is not None:
            data = self._call("EventSetWait", self._events, 0)
            if _error(data) is not None:
                return  # TIMEOUT: nothing queued
            uuid = self._call("DeviceGetUUID", data.device)
            if isinstance(uuid, str):
                self._record_xid(uuid, int(data.eventData))

    def _record_xid(self, uuid: str, xid: int) -> None:
        """Kept for the agent's lifetime: a card that raised a fatal XID stays unhealthy until
        someone restarts the agent after fixing it, as the device plugin does; and every XID
        is counted by code (R-X7), application ones included. Both are bounded: at most
        MAX_ERROR_CODES codes per card (a fatal one is always kept for `unhealthy`), the
        events past that counted under ERROR_CODE_OTHER."""
        seen = self._xids.setdefault(uuid, [])
        fatal = xid not in self.application_xids
        if xid not in seen and (
            len(seen) < MAX_ERROR_CODES or (fatal and all(x in self.application_xids for x in seen))
        ):
            seen.append(xid)
        counts = self._xid_counts.setdefault(uuid, {})
        key = str(xid)
        if key not in counts and len(counts.keys() - {ERROR_CODE_OTHER}) >= MAX_ERROR_CODES:
            key = ERROR_CODE_OTHER
        counts[key] = counts.get(key, 0) + 1

    def _device_extras(self, uuid: str) -> dict[str, Any]:
        """The XID answers recorded for a card: the codes that make it unhealthy (where the
        vendor says which XIDs do) and the counts by code."""
        if not self.reads_xid_events:
            return {}
        counts: dict[str, Any] = dict(self._xid_counts.get(uuid, {}))
        extras: dict[str, Any] = {
            XID_COUNTS: self._events_failed or self._unregistered.get(uuid) or counts
        }
        if self.xids_make_unhealthy:
            extras["xidCriticalErrors"] = list(self._xids.get(uuid, ()))
        return extras

    # -- calling the library -----------------------------------------------------------------

    @property
    def binding(self) -> Binding:
        if self._binding is None:
            raise BackendUnavailable("read() before open()")
        return self._binding

    def _call(self, name: str, *args: Any) -> Any:
        """What `<prefix><name>` answered, or its failure as the payload records it."""
        b = self.binding
        try:
            return b.fn(name)(*args)
        except b.error as exc:
            return failed(b.error_name(exc), int(getattr(exc, "value", -1)))

    def _key(self, name: str) -> str:
        return f"{self.prefix}{name}"

    def _free_sample(self, sample: Any) -> None:
        self._call("GpmSampleFree", sample)

    def _release(self) -> None:
        """Free what the library allocated for us; before shutdown, and safe without open()."""
        if self._binding is not None:
            self._baseline.clear(self._free_sample)
            self._free_events()
        self._baseline = GpmBaseline()
        self._gpm = None

    # -- read -------------------------------------------------------------------------------

    def _processes(self, handle: Any) -> Any:
        for _ in range(PROCESS_LIST_ATTEMPTS):
            value = self._call("DeviceGetComputeRunningProcesses_v3", handle)
            if _error(value) != ERROR_INSUFFICIENT_SIZE:
                break
            # The list grew past the binding's buffer between its probe and its read.
        if _error(value) is not None:
            return value
        return [
            {
                "pid": p.pid,
                "usedGpuMemory": p.usedGpuMemory,  # bytes; None is VALUE_NOT_AVAILABLE
                "gpuInstanceId": p.gpuInstanceId,
                "computeInstanceId": p.computeInstanceId,
            }
            for p in value
        ]

    @staticmethod
    def _sample_rows(value: Any) -> Any:
        if _error(value) is not None:
            return value
        return [
            {"pid": s.pid, "timeStamp": s.timeStamp, "smUtil": s.smUtil, "memUtil": s.memUtil}
            for s in value
        ]

    def _samples(self, handle: Any) -> dict[str, Any]:
        """Per-process SM samples since time stamp 0, from the older call (and, where the
        vendor has it and the older one is not served, from its successor)."""
        value = self._sample_rows(self._call("DeviceGetProcessUtilization", handle, 0))
        out = {self._key("DeviceGetProcessUtilization"): value}
        code = _error(value)
        if (
            code is not None
            and self.newer_process_utilization
            and reason_for(code) is Reason.UNSUPPORTED
        ):
            newer = self._call("DeviceGetProcessesUtilizationInfo", handle, 0)
            out[self._key("DeviceGetProcessesUtilizationInfo")] = self._sample_rows(newer)
        return out

    def _memory_info(self, handle: Any) -> dict[str, Any]:
        b = self.binding
        value = self._call("DeviceGetMemoryInfo", handle, getattr(b.lib, f"{b.prefix}Memory_v2"))
        if _error(value) is None:
            return {
                self._key("DeviceGetMemoryInfo_v2"): {
                    "total": value.total,
                    "reserved": value.reserved,
                    "free": value.free,
                    "used": value.used,
                }
            }
        v1 = self._call("DeviceGetMemoryInfo", handle)
        if _error(v1) is None:
            v1 = {"total": v1.total, "free": v1.free, "used": v1.used}
        return {self._key("DeviceGetMemoryInfo_v2"): value, self._key("DeviceGetMemoryInfo"): v1}

    def _health(self, handle: Any) -> dict[str, Any]:
        """The answers CardHealth is parsed from, keyed by entry point; an entry point asked
        once per argument (ECC counter, clock domain) records `{name: answer}`."""
        out: dict[str, Any] = {
            self._key("DeviceGetTotalEccErrors"): {
                name: self._call("DeviceGetTotalEccErrors", handle, error, counter)
                for name, error, counter in ECC_COUNTERS
            },
            self._key("DeviceGetTotalEnergyConsumption"): self._call(
                "DeviceGetTotalEnergyConsumption", handle
            ),  # mJ
        }
        mask = self._call("DeviceGetCurrentClocksEventReasons", handle)
        out[self._key("DeviceGetCurrentClocksEventReasons")] = mask
        if _error(mask) == ERROR_FUNCTION_NOT_FOUND:
            # A driver older than the rename (NVML 12.x) serves the same mask under its old name.
            older = self._call("DeviceGetCurrentClocksThrottleReasons", handle)
            out[self._key("DeviceGetCurrentClocksThrottleReasons")] = older
        out[self._key("DeviceGetClockInfo")] = {
            name: self._call("DeviceGetClockInfo", handle, clock) for name, clock in CLOCKS
        }  # MHz
        out[self._key("DeviceGetPcieReplayCounter")] = self._call(
            "DeviceGetPcieReplayCounter", handle
        )
        return out

    def _gpm_metrics(self, first: Any, second: Any) -> Any:
        """The metrics GPM computes between two samples, as the payload records them: each id
        of GPM_CARD_METRICS under its constant's name, its value or its own failure. An id the
        binding does not define is not asked (parse() says `unsupported`)."""
        b = self.binding
        if self._gpm is None:
            # Once per open library: the ids it defines, under the names parse() reads them by.
            names = tuple(key for key, *_ in _gpm_rows(b.prefix) if hasattr(b.lib, key))
            ids = [getattr(b.lib, key) for key in names]
            self._gpm = names, GpmRequest(b.metrics_get, f"{b.prefix}Return", ids)
        names, gpm = self._gpm
        request = gpm.prepared(b.const("GPM_METRICS_GET_VERSION"), first, second)
        answer = self._call("GpmMetricsGet", request)
        if _error(answer) is not None:
            return answer
        out: dict[str, Any] = {}
        for name, (code, value) in zip(names, gpm.answers(), strict=True):
            if code != SUCCESS:
                out[name] = failed(b.code_name(code), code)
            else:
                # JSON has no NaN: a non-finite answer is written as text, which parse() refuses.
                out[name] = value if math.isfinite(value) else repr(value)
        return out

    def _gpm_sample(self, parent: Any, key: str, gpu_instance: int | None = None) -> dict[str, Any]:
        """This round's GPM sample of one partition (or, with no GPU instance, of the whole
        card), and the metrics since the previous one. Taken into the spare buffer the last
        round left (GpmBaseline), or a new one the first time."""
        sample = self._baseline.take_spare(key)
        if sample is None:
            sample = self._call("GpmSampleAlloc")
            if _error(sample) is not None:
                return {self._key("GpmSampleAlloc"): sample}
        if gpu_instance is None:
            step = "GpmSampleGet"
            taken = self._call(step, parent, sample)
        else:
            step = "GpmMigSampleGet"
            taken = self._call(step, parent, gpu_instance, sample)
        at = self._clock()
        previous = self._baseline.previous(key)
        if _error(taken) is not None:
            # The previous sample stays for the next round; this buffer waits as the spare.
            self._baseline.put_spare(key, sample, self._free_sample)
            return {self._key(step): taken}
        out: dict[str, Any] = {
            self._key(step): {
                "at": at,
                "previousAt": None if previous is None else previous[1],
            }
        }
        if previous is not None and at - previous[1] < GPM_MIN_INTERVAL:
            # Too soon to compare: keep the older sample, so the next round's interval is longer.
            self._baseline.put_spare(key, sample, self._free_sample)
            return out
        if previous is not None:
            # Every id, of a whole card and of a GPU instance alike (issue 41): an id the
            # instance cannot state answers for itself, and parse() says why it is absent.
            out[self._key("GpmMetricsGet")] = self._gpm_metrics(previous[0], sample)
        self._baseline.keep(key, sample, at, self._free_sample)
        return out

    def _gpm_support(self, handle: Any) -> Any:
        """Whether the card serves GPM (Hopper and newer), as the payload records it."""
        support = self._call("GpmQueryDeviceSupport", handle)
        if _error(support) is None:
            answer = {"isSupportedDevice": int(support.isSupportedDevice)}
            if self.records_gpm_support_version:
                answer["version"] = int(support.version)
            support = answer
        return support

    def _card_gpm(self, handle: Any, uuid: str, sampled: set[str]) -> dict[str, Any]:
        """A whole card's GPM support, this round's sample and the metrics since the last
        round's (issue 41), kept by card in the baseline as a partition's is."""
        support = self._gpm_support(handle)
        out: dict[str, Any] = {self._key("GpmQueryDeviceSupport"): support}
        if isinstance(support, Mapping) and support.get("isSupportedDevice") == 1:
            sampled.add(uuid)
            out.update(self._gpm_sample(handle, uuid))
        return out

    def _mig_devices(
        self, handle: Any, uuid: str, wanted: set[str], sampled: set[str]
    ) -> tuple[list[dict[str, Any]], Any]:
        """The card's MIG handles, and its GPM support when a wanted partition is among them."""
        count = self._call("DeviceGetMaxMigDeviceCount", handle)
        if not isinstance(count, int):
            return [], None
        out: list[dict[str, Any]] = []
        for slot in range(count):
            mig = self._call("DeviceGetMigDeviceHandleByIndex", handle, slot)
            if _error(mig) is not None:
                continue  # NOT_FOUND: an empty slot
            entry: dict[str, Any] = {
                self._key("DeviceGetMigDeviceHandleByIndex"): slot,
                self._key("DeviceGetUUID"): self._call("DeviceGetUUID", mig),
                self._key("DeviceGetGpuInstanceId"): self._call("DeviceGetGpuInstanceId", mig),
            }
            entry.update(self._memory_info(mig))
            out.append(entry)
        support: Any = None
        targets = [
            e
            for e in out
            if isinstance(e[self._key("DeviceGetUUID")], str)
            and e[self._key("DeviceGetUUID")] in wanted
            and isinstance(e[self._key("DeviceGetGpuInstanceId")], int)
        ]
        if targets:
            support = self._gpm_support(handle)
            if isinstance(support, Mapping) and support.get("isSupportedDevice") == 1:
                for entry in targets:
                    gi = entry[self._key("DeviceGetGpuInstanceId")]
                    key = f"{uuid}/{entry[self._key('DeviceGetUUID')]}/{gi}"
                    sampled.add(key)
                    entry.update(self._gpm_sample(handle, key, gi))
        return out, support

    def _device(
        self,
        index: int,
        request: ReadRequest,
        partitions: Mapping[str, set[str]],
        sampled: set[str],
    ) -> dict[str, Any]:
        handle = self._call("DeviceGetHandleByIndex", index)
        known = self._known.get(index, {})
        if _error(handle) is not None:
            return {self._key("DeviceGetHandleByIndex"): handle, **known}
        uuid = self._call("DeviceGetUUID", handle)
        device: dict[str, Any] = {
            self._key("DeviceGetIndex"): self._call("DeviceGetIndex", handle),
            self._key("DeviceGetUUID"): uuid,
            self._key("DeviceGetName"): self._call("DeviceGetName", handle),
        }
        if isinstance(uuid, str) and isinstance(device[self._key("DeviceGetIndex")], int):
            self._known[index] = {
                "knownUUID": uuid,
                "knownIndex": device[self._key("DeviceGetIndex")],
                "knownName": device[self._key("DeviceGetName")],
            }
        elif known:
            device.update(known)
            uuid = known["knownUUID"]
        device.update(self._memory_info(handle))
        rates = self._call("DeviceGetUtilizationRates", handle)
        if _error(rates) is None:
            rates = {"gpu": rates.gpu, "memory": rates.memory}  # percent of the sample period
        device[self._key("DeviceGetUtilizationRates")] = rates
        temperature = self._call("DeviceGetTemperature", handle, TEMPERATURE_GPU)
        device[self._key("DeviceGetTemperature")] = temperature
        if self.temperature_v and _error(temperature) == ERROR_FUNCTION_NOT_FOUND:
            device[self._key("DeviceGetTemperatureV")] = self._call(
                "DeviceGetTemperatureV", handle, TEMPERATURE_GPU
            )
        device[self._key("DeviceGetPowerUsage")] = self._call("DeviceGetPowerUsage", handle)
        rows = self._call("DeviceGetRemappedRows", handle)
        if _error(rows) is None:
            corr, unc, pending, failure = rows
            rows = {
                "corrRows": corr,
                "uncRows": unc,
                "isPending": pending,
                "failureOccurred": failure,
            }
        device[self._key("DeviceGetRemappedRows")] = rows
        device[self._key("DeviceGetRetiredPagesPendingStatus")] = self._call(
            "DeviceGetRetiredPagesPendingStatus", handle
        )
        if self.reads_health:
            device.update(self._health(handle))
        mode = self._call("DeviceGetMigMode", handle)
        if _error(mode) is None:
            mode = {"current": mode[0], "pending": mode[1]}
        device[self._key("DeviceGetMigMode")] = mode
        if isinstance(uuid, str):
            device.update(self._device_extras(uuid))
            if uuid in request.carved_device_ids:
                device[self._key("DeviceGetComputeRunningProcesses_v3")] = self._processes(handle)
                device.update(self._samples(handle))
            # "" asks for a partition whose card is not known (a MIG device the kubelet
            # allocated, named by its own UUID alone): every MIG card is walked for it.
            wanted = partitions.get(uuid, set()) | partitions.get("", set())
            mig_on = isinstance(mode, dict) and mode.get("current") == MIG_ENABLED
            if wanted and mig_on:
                migs, support = self._mig_devices(handle, uuid, wanted, sampled)
                device["migDevices"] = migs
                if support is not None:
                    device[self._key("GpmQueryDeviceSupport")] = support
            elif not mig_on and self.reads_card_gpm:
                # A card in MIG mode is measured by its partitions; a whole card by itself.
                device.update(self._card_gpm(handle, uuid, sampled))
        return device

    def read(self, request: ReadRequest) -> Payload:
        if self._binding is None:
            raise BackendUnavailable("read() before open()")
        self._round_started()
        count = self._call("DeviceGetCount")
        if not isinstance(count, int):
            # Without a count nothing can be read; the worker re-initialises next round.
            raise RuntimeError(f"{self._key('DeviceGetCount')} failed: {count}")
        partitions: dict[str, set[str]] = {}
        for parent, partition in request.partition_ids:
            partitions.setdefault(parent, set()).add(partition)
        sampled: set[str] = set()
        devices = [self._device(i, request, partitions, sampled) for i in range(count)]
        # A partition no longer read (released, or its card gone) lets go of its sample.
        self._baseline.keep_only(sampled, self._free_sample)
        payload: Payload = {
            self._key("SystemGetDriverVersion"): self._call("SystemGetDriverVersion"),
            self._key("DeviceGetCount"): count,
            "request": {
                "carved": sorted(request.carved_device_ids),
                "partitions": [list(p) for p in sorted(request.partition_ids)],
            },
            "devices": devices,
        }
        if self.reads_topology:
            payload["topology"] = self._topology_of(devices, count)
        return payload

    def _topology_of(self, devices: list[dict[str, Any]], count: int) -> dict[str, Any]:
        """The node's links and placement (R-X3): read when none is held, once TOPOLOGY_PERIOD
        has passed since the last read, or when the cards answering changed; else the last read,
        whose `readAt` says when it was made."""
        cards = tuple(d.get(self._key("DeviceGetUUID")) for d in devices)
        at = self._clock()
        held = self._topology
        if (
            held is not None
            and cards == self._topology_cards
            and at - held["readAt"] < (TOPOLOGY_PERIOD)
        ):
            return held
        links = INTERCONNECTS[self.prefix]
        self._topology = read_topology(self._call, self._key, count, self._sysfs, at, links)
        self._topology_cards = cards
        return self._topology

    def parse(self, payload: Payload) -> VendorReading:
        return parse(payload, self.prefix, self.manufacturer, self.application_xids)
