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

from typing import ClassVar

from devicemanager.backend import BackendUnavailable, Library
from devicemanager.model import Payload, VendorReading
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
    reads_xid_events = True
    xids_make_unhealthy = True
    newer_process_utilization = True
    reads_health = True
    reads_card_gpm = True  # GPM over the round period (issue 41)
    reads_topology = True
    sdk: ClassVar[str] = "nvidia-ml-py"  # the distribution `record` names in its provenance

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
        self._register_xid_events()

    def close(self) -> None:
        if self._binding is None:
            return
        self._release()
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
