"""What particular DRA drivers' devices and shares mean, beyond the attributes every driver
shares (R-X12). Pure, over plain mappings: grants/dra.py asks it two things, which card a
device with no card id is, and what quota a share of a device holds.

- HAMi's `hami-core-gpu.project-hami.io` (Project-HAMi/k8s-dra-driver,
  `cmd/hami-kubelet-plugin/hami_core.go`): devices `hami-gpu-<minor>` of type `hami-gpu` with
  the card's `uuid`, and `cores` (0-100, default 100) and `memory` (default the whole card)
  consumable capacity. HAMi-core enforces a share's consumed `cores` as
  `CUDA_DEVICE_SM_LIMIT_<i>` and its `memory` as `CUDA_DEVICE_MEMORY_LIMIT_<i>`: the share's
  compute cap and memory quota.
- Ascend's `npu.huawei.com` (Ascend/mind-cluster, `component/ascend-dynamic-resource-allocation`,
  `internal/device/generation_910.go`, `generation_common.go`): devices `<ReleasedName>-<phy>`
  carrying only `deviceType` and `physicId`, no capacity. The NPU is the one the library knows by
  the device plugin's name `<family>-<physicId>` (vendors/ascend.py lists it as an alias).
- NVIDIA's `gpu.nvidia.com` with `--consumable-shares` (kubernetes-sigs/dra-driver-nvidia-gpu,
  `cmd/gpu-kubelet-plugin/consumable_shares.go`): in `unlimited` and `<N>` a claim consumes 0
  memory unless it asks; `<N>` adds a `shares` capacity of N, 1 per claim unless it asks more,
  on a whole GPU or a MIG device. A share that consumed memory holds that memory; one that
  consumed none but `s` of N shares holds the device's memory * s / N (the card's, or the MIG
  device's own, as its ResourceSlice states it); one that consumed neither (`unlimited`) holds
  no stated quota: absent, never 0 MiB. Neither mode enforces compute: no cap.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from devicemanager.model import MIB

HAMI = "hami-core-gpu.project-hami.io"
ASCEND = "npu.huawei.com"

MEMORY = "memory"
CORES = "cores"
SHARES = "shares"
PHYSIC_ID = "physicId"

# Drivers whose consumed `cores` is enforced on the share (HAMi-core's SM limit), so the share's
# compute is restated against it as any capped slice's is. No other driver's `cores` is a cap.
ENFORCED_CORES = frozenset({HAMI})
# Drivers whose share without a consumed `memory` is held to the device's whole memory (HAMi's
# default limit); elsewhere a share that states no memory states no quota.
WHOLE_MEMORY_BY_DEFAULT = frozenset({HAMI})
# Drivers that name an NPU by its physical id only, and the families its device-plugin name may
# carry (`Ascend910-3`; `npu-<phy>` on Ascend 950 nodes is the same NPU as `Ascend910-<phy>`).
BY_PHYSICAL_ID = {ASCEND: ("Ascend910", "Ascend310P", "Ascend310")}
MAX_PHYSICAL_ID = 1 << 16  # far above any node's NPU count; a bigger number names none


@dataclass(frozen=True, slots=True)
class ShareQuota:
    """What one share of a device holds: its memory quota and compute cap, each None when the
    driver states none."""

    memory_mib: int | None = None
    cores_percent: int | None = None


def physical_names(driver: str, attributes: Mapping[str, object]) -> Sequence[str]:
    """The device-plugin names a device of a driver that names NPUs by physical id may be known
    by; none when the driver is not one of those or its `physicId` is no small integer."""
    families = BY_PHYSICAL_ID.get(driver)
    phy = attributes.get(PHYSIC_ID)
    if families is None or isinstance(phy, bool) or not isinstance(phy, int):
        return ()
    if not 0 <= phy < MAX_PHYSICAL_ID:
        return ()
    return tuple(f"{family}-{phy}" for family in families)


def share_quota(
    driver: str, capacity: Mapping[str, int], consumed: Mapping[str, int]
) -> ShareQuota:
    """The quota one share of a device holds, from the device's capacity in its ResourceSlice
    and what the claim's allocation result consumed of it."""
    cores = consumed.get(CORES) if driver in ENFORCED_CORES else None
    memory = consumed.get(MEMORY)
    if memory is not None and memory > 0:
        return ShareQuota(memory // MIB, cores)
    taken, total, device_memory = consumed.get(SHARES), capacity.get(SHARES), capacity.get(MEMORY)
    if taken is not None and total and device_memory is not None:
        part = device_memory * min(taken, total) // total
        return ShareQuota(part // MIB, cores)
    if memory is None and driver in WHOLE_MEMORY_BY_DEFAULT and device_memory is not None:
        return ShareQuota(device_memory // MIB, cores)
    return ShareQuota(None, cores)
