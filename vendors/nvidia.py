"""NVIDIA through NVML, by way of the `pynvml` module of the `nvidia-ml-py` distribution.

`read()` asks NVML and writes down what each entry point answered, keyed by the entry point's
C name; an entry point that failed is recorded as {"error": <name>, "code": <nvmlReturn_t>}.
`parse()` is pure and turns such a payload into the model, so recorded payloads exercise the
same code the live agent runs. Both are shared with T-Head's NVML clone in
vendors/_nvml_family.py, keyed by the `nvml` prefix; what is NVIDIA's own is here: pynvml,
XID events, and the newer per-process utilization call. Partition compute comes from GPM on
Hopper and newer (R-X5). Facts used here: ../shared/reference/vendors.md §1.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from devicemanager.backend import BackendUnavailable, Library
from devicemanager.model import ERROR_CODE_OTHER, MAX_ERROR_CODES, Payload, VendorReading
from vendors import _nvml_family as family
from vendors._common import load
from vendors._nvml_family import (
    ERROR_FUNCTION_NOT_FOUND,
    ERROR_GPU_IS_LOST,
    ERROR_NOT_FOUND,
    ERROR_NOT_SUPPORTED,
    Binding,
    NvmlFamilyBackend,
    reason_for,
)

MANUFACTURER = "nvidia"
PREFIX = "nvml"

# XIDs that report an application fault rather than a broken card; the NVIDIA device plugin
# leaves a card healthy on these (k8s-device-plugin, internal/rm/health.go).
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})


def parse(payload: Payload) -> VendorReading:
    return family.parse(payload, PREFIX, MANUFACTURER, APPLICATION_XIDS)


NVML = Library("nvml", ("libnvidia-ml.so.1",), env="DEVICEMANAGER_NVML_LIBRARY")


class NvidiaBackend(NvmlFamilyBackend):
    """Reads NVML through pynvml. The module is imported in open(), never at import time."""

    manufacturer = MANUFACTURER
    prefix = PREFIX
    libraries: ClassVar[tuple[Library, ...]] = (NVML,)
    application_xids = APPLICATION_XIDS
    newer_process_utilization = True
    reads_health = True
    reads_topology = True
    sdk: ClassVar[str] = "nvidia-ml-py"  # the distribution `record` names in its provenance

    def __init__(self, libraries: Mapping[str, str] | None = None, **options: Any) -> None:
        # Where libnvidia-ml is configured; by default pynvml has the dynamic linker find it.
        super().__init__(libraries, **options)
        self._events: Any = None
        # Why there is no event set (its failure as the payload records it), once open() tried.
        self._events_failed: dict[str, Any] | None = None
        self._xids: dict[str, list[int]] = {}
        self._xid_counts: dict[str, dict[str, int]] = {}
        self._unregistered: dict[str, dict[str, Any]] = {}  # by UUID: why its events are not read

    def open(self) -> None:
        try:
            import pynvml
        except ImportError as exc:  # nvidia-ml-py not installed
            raise BackendUnavailable(f"pynvml is not importable: {exc}") from exc
        if NVML.locate(self.configured.get(NVML.name)) != NVML.sonames[0]:
            lib = load(NVML, self.configured)
            if getattr(pynvml.nvmlLib, "_handle", None) != lib._handle:
                # pynvml caches symbols of the library it loaded first; another library's
                # would otherwise be called through the first one's pointers.
                pynvml._nvmlGetFunctionPointer_cache.clear()
                pynvml.nvmlLib = lib
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise BackendUnavailable(f"NVML could not be initialised: {exc}") from exc
        self._binding = Binding(PREFIX, pynvml, pynvml.NVMLError, pynvml.c_nvmlGpmMetricsGet_t)
        self._events = self._register_xid_events()

    def _register_xid_events(self) -> Any:
        nvml = self.binding.lib
        try:
            events = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as exc:
            # No event support on this driver: health falls back to the other signals, and
            # the XID counts are absent with this reason.
            self._events_failed = {"error": self.binding.error_name(exc), "code": exc.value}
            return None
        for index in range(nvml.nvmlDeviceGetCount()):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
            except nvml.NVMLError:
                continue
            try:
                nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, events)
            except nvml.NVMLError as exc:
                # This card's XIDs cannot be counted: absent with the reason, not 0.
                failure = {"error": self.binding.error_name(exc), "code": exc.value}
                try:
                    self._unregistered[nvml.nvmlDeviceGetUUID(handle)] = failure
                except nvml.NVMLError:
                    continue
        return events

    def _round_started(self) -> None:
        """Collect the XIDs raised since the last round without blocking (timeout 0)."""
        nvml = self.binding.lib
        while self._events is not None:
            try:
                data = nvml.nvmlEventSetWait(self._events, 0)
            except nvml.NVMLError:
                return  # NVML_ERROR_TIMEOUT: nothing queued
            try:
                uuid = nvml.nvmlDeviceGetUUID(data.device)
            except nvml.NVMLError:
                continue
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
        counts: dict[str, Any] = dict(self._xid_counts.get(uuid, {}))
        return {
            "xidCriticalErrors": list(self._xids.get(uuid, ())),
            family.XID_COUNTS: self._events_failed or self._unregistered.get(uuid) or counts,
        }

    def close(self) -> None:
        if self._binding is None:
            return
        self._release()
        if self._events is not None:
            self._call("EventSetFree", self._events)
            self._events = None
        self._call("Shutdown")
        self._binding = None


__all__ = [
    "ERROR_FUNCTION_NOT_FOUND",
    "ERROR_GPU_IS_LOST",
    "ERROR_NOT_FOUND",
    "ERROR_NOT_SUPPORTED",
    "NVML",
    "NvidiaBackend",
    "parse",
    "reason_for",
]
