"""T-Head (Alibaba) PPU through HGML (`libhgml.so`), an NVML clone with the `hgml` prefix.

HGML answers NVML's entry points under its own prefix, with NVML's return codes and struct
shapes, so this backend is NVIDIA's reader and parse (vendors/_nvml_family.py) keyed by
`hgml`, over our own ctypes declarations (vendors/_thead_lib.py): there is no Python binding
to use. What differs is kept here:

- the library: `libhgml.so`, on the linker's path or in the PPU SDK (`/usr/local/PPU_SDK/lib`);
- per-process compute from `hgmlDeviceGetProcessUtilization` only: the newer
  `…ProcessesUtilizationInfo` answers NOT_SUPPORTED where it is exported at all, so it is
  never asked (the older call returns several samples per PID; the newest counts);
- XID events through NVML's event calls under HGML's prefix (`hgmlEventSetCreate`,
  `hgmlDeviceRegisterEvents`, `hgmlEventSetWait_v2`, as the public hgml.h and GPUStack's
  pyhgml declare them), counted by code (R-X7); but no XID makes the card unhealthy: which
  XIDs are an application's fault is NVIDIA's knowledge, not published for the PPU, so
  `unhealthy` comes from GPU_IS_LOST, row remapping and retired pages, and the counts say
  what the card raised without a verdict;
- MIG handles answer no temperature or power, and none is asked of them;
- GPM support asked with `hgmlGpmSupport_t` version 2 (the header's), then 1 (what GPUStack's
  binding sends) where the driver answers ARGUMENT_VERSION_MISMATCH; the payload records which
  version the driver accepted;
- the temperature from `hgmlDeviceGetTemperatureV` (`hgmlTemperature_v1_t`, signed °C) where
  the plain `hgmlDeviceGetTemperature` is not exported (FUNCTION_NOT_FOUND);
- links and placement (R-X3) through the shared NVML reader with HGML's ICN-link calls in place
  of NVLink's (`icnlink`, `icnswitch`), the PCIe common ancestor, and the NUMA node from sysfs
  (hgml.h declares `hgmlDeviceGetNumaNodeId`, not asked: as NVML's call of that name it would
  name the card's own memory node where the card is a NUMA node, issue 43);
- the card's health figures (issue 29) through NVML's calls under HGML's prefix: total ECC
  errors, energy (mJ), clocks-event reasons (the older throttle name as fallback), clocks
  (MHz) and the PCIe replay counter, with NVML's units and all-ones sentinels.

PIDs: HGML is assumed to report host PIDs, as NVML does; the agent runs with `hostPID`. One
public hardware note saw a PID from inside a container; such a PID names no pod on the host
(or none at all) and gets its attribution reason like any other, never a guess.

Facts: ../shared/reference/vendors.md §7, §12.3; reference-implementation.md (T-Head).
"""

from __future__ import annotations

from typing import ClassVar

from devicemanager.backend import BackendUnavailable, Library
from devicemanager.model import Payload, VendorReading
from vendors import _nvml_family as family
from vendors._common import load
from vendors._nvml_family import Binding, NvmlFamilyBackend
from vendors._thead_lib import Hgml, HGMLError, hgmlGpmMetricsGet_t

MANUFACTURER = "thead"
PREFIX = "hgml"

HGML = Library(
    "hgml",
    ("libhgml.so",),
    directories=("/usr/local/PPU_SDK/lib", "/usr/local/PPU_SDK/lib64"),
)


def parse(payload: Payload) -> VendorReading:
    return family.parse(payload, PREFIX, MANUFACTURER)


class TheadBackend(NvmlFamilyBackend):
    manufacturer = MANUFACTURER
    prefix = PREFIX
    libraries: ClassVar[tuple[Library, ...]] = (HGML,)
    reads_health = True
    reads_card_gpm = True  # GPM over the round period (issue 41)
    # XIDs counted by code (R-X7); none makes the card unhealthy (see the module's notes).
    reads_xid_events = True
    reads_topology = True  # ICN links and PCIe paths (R-X3); the NUMA node from sysfs
    temperature_v = True
    records_gpm_support_version = True

    def open(self) -> None:
        hgml = Hgml(load(HGML, self.configured))
        try:
            hgml.hgmlInitWithFlags(0)
        except HGMLError as exc:  # DRIVER_NOT_LOADED on a node without the PPU driver
            raise BackendUnavailable(f"HGML could not be initialised: {exc}") from exc
        self._binding = Binding(PREFIX, hgml, HGMLError, hgmlGpmMetricsGet_t)
        self._register_xid_events()

    def close(self) -> None:
        if self._binding is None:
            return
        self._release()
        self._call("Shutdown")
        self._binding = None
