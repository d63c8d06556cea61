"""The report as frozen dataclasses, and its JSON (the contract scripts rely on, R-X1).

`None` is a figure the input did not hold: `null` in JSON, "not present" in text, never 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

Number = int | float


class Kind(StrEnum):
    """What a finding is about. Scripts filter on these; the order is the report's."""

    PARTIAL = "partial"  # the input was cut off or abbreviated
    UNPARSEABLE = "unparseable"  # a line that is not Prometheus text
    UNRECOGNISED = "unrecognised"  # a family this report does not know
    UNIT = "unit"  # a value whose unit is implausible for its family; kept raw
    COLLISION = "collision"  # two devices share one UUID (often a redacted one)
    AMBIGUOUS = "ambiguous"  # a series that names no single device
    DUPLICATE = "duplicate"  # one series twice with different values
    INCONSISTENCY = "inconsistency"  # figures that should agree and do not
    CAPACITY = "capacity"  # allocation or use above what there is
    ORPHAN = "orphan"  # a pod on a device no device-level series names
    INVESTIGATE = "investigate"  # a device state the seed asks an operator to look at


KIND_ORDER = {kind: rank for rank, kind in enumerate(Kind)}


@dataclass(frozen=True, slots=True)
class Finding:
    kind: Kind
    message: str

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind.value, "message": self.message}


@dataclass(frozen=True, slots=True)
class MigInstance:
    uuid: str | None
    profile: str | None
    gpu_instance_id: str | None
    compute_instance_id: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "uuid": self.uuid,
            "profile": self.profile,
            "gpu_instance_id": self.gpu_instance_id,
            "compute_instance_id": self.compute_instance_id,
        }


@dataclass(frozen=True, slots=True)
class Device:
    uuid: str | None
    node: str | None
    index: int | str | None
    type: str | None
    cores_limit: Number | None
    cores_allocated: Number | None
    memory_limit_mib: Number | None
    memory_allocated_mib: Number | None
    shared_containers: Number | None
    containers: int | None
    host_cores_utilization_percent: Number | None
    host_memory_used_mib: Number | None
    # Beyond the contract: derived figures and what the input said of partitions.
    state: str | None  # idle | partial | full, from allocation figures
    core_allocation_percent: Number | None
    memory_allocation_percent: Number | None
    mig_instances: tuple[MigInstance, ...] | None

    def to_json(self) -> dict[str, Any]:
        return {
            "uuid": self.uuid,
            "node": self.node,
            "index": self.index,
            "type": self.type,
            "cores_limit": self.cores_limit,
            "cores_allocated": self.cores_allocated,
            "memory_limit_mib": self.memory_limit_mib,
            "memory_allocated_mib": self.memory_allocated_mib,
            "shared_containers": self.shared_containers,
            "containers": self.containers,
            "host_cores_utilization_percent": self.host_cores_utilization_percent,
            "host_memory_used_mib": self.host_memory_used_mib,
            "state": self.state,
            "core_allocation_percent": self.core_allocation_percent,
            "memory_allocation_percent": self.memory_allocation_percent,
            "mig_instances": (
                None if self.mig_instances is None else [m.to_json() for m in self.mig_instances]
            ),
        }


@dataclass(frozen=True, slots=True)
class Container:
    namespace: str | None
    pod: str | None
    container: str | None
    node: str | None
    device: str | None
    vdevice_index: str | None
    cores_allocated: Number | None
    memory_allocated_mib: Number | None
    memory_limit_mib: Number | None
    memory_used_mib: Number | None
    cores_used_percent: Number | None
    # Beyond the contract.
    container_index: str | None  # the scheduler's slot, where it names no container
    device_index: int | str | None  # the device's index on its node
    cores_used_percent_of_limit: Number | None  # this agent's slices and partitions
    last_kernel_seconds: Number | None
    mode: str | None  # this agent's grant mode
    mig_instance: MigInstance | None

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "pod": self.pod,
            "container": self.container,
            "node": self.node,
            "device": self.device,
            "vdevice_index": self.vdevice_index,
            "cores_allocated": self.cores_allocated,
            "memory_allocated_mib": self.memory_allocated_mib,
            "memory_limit_mib": self.memory_limit_mib,
            "memory_used_mib": self.memory_used_mib,
            "cores_used_percent": self.cores_used_percent,
            "container_index": self.container_index,
            "device_index": self.device_index,
            "cores_used_percent_of_limit": self.cores_used_percent_of_limit,
            "last_kernel_seconds": self.last_kernel_seconds,
            "mode": self.mode,
            "mig_instance": None if self.mig_instance is None else self.mig_instance.to_json(),
        }


@dataclass(frozen=True, slots=True)
class Quota:
    used: Number | None
    limit: Number | None

    def to_json(self) -> dict[str, Any]:
        return {"used": self.used, "limit": self.limit}


@dataclass(frozen=True, slots=True)
class Namespace:
    pods: int | None
    cores_allocated: Number | None
    memory_allocated_mib: Number | None
    memory_limit_mib: Number | None
    memory_used_mib: Number | None
    quota: dict[str, Quota]
    core_share_percent: Number | None
    memory_share_percent: Number | None

    def to_json(self) -> dict[str, Any]:
        return {
            "pods": self.pods,
            "cores_allocated": self.cores_allocated,
            "memory_allocated_mib": self.memory_allocated_mib,
            "memory_limit_mib": self.memory_limit_mib,
            "memory_used_mib": self.memory_used_mib,
            "quota": {k: v.to_json() for k, v in sorted(self.quota.items())},
            "core_share_percent": self.core_share_percent,
            "memory_share_percent": self.memory_share_percent,
        }


@dataclass(frozen=True, slots=True)
class Totals:
    """Capacity over a set of devices: the cluster's, or one node's."""

    devices: int
    cores_devices: int  # devices publishing both core figures: the sums below are theirs
    cores_limit: Number | None
    cores_allocated: Number | None
    cores_free: Number | None
    core_allocation_percent: Number | None
    memory_devices: int  # likewise for memory
    memory_limit_mib: Number | None
    memory_allocated_mib: Number | None
    memory_free_mib: Number | None
    memory_allocation_percent: Number | None
    idle_devices: int | None
    full_devices: int | None
    partial_devices: int | None
    largest_free_cores: Number | None
    largest_free_memory_mib: Number | None
    host_memory_used_mib: Number | None

    def to_json(self) -> dict[str, Any]:
        return {
            "devices": self.devices,
            "cores_devices": self.cores_devices,
            "cores_limit": self.cores_limit,
            "cores_allocated": self.cores_allocated,
            "cores_free": self.cores_free,
            "core_allocation_percent": self.core_allocation_percent,
            "memory_devices": self.memory_devices,
            "memory_limit_mib": self.memory_limit_mib,
            "memory_allocated_mib": self.memory_allocated_mib,
            "memory_free_mib": self.memory_free_mib,
            "memory_allocation_percent": self.memory_allocation_percent,
            "idle_devices": self.idle_devices,
            "full_devices": self.full_devices,
            "partial_devices": self.partial_devices,
            "largest_free_cores": self.largest_free_cores,
            "largest_free_memory_mib": self.largest_free_memory_mib,
            "host_memory_used_mib": self.host_memory_used_mib,
        }


@dataclass(frozen=True, slots=True)
class SourceInfo:
    """One source read, or asked and not answering (`error` says why; its counts are None).
    `kind` and `node` are known of a source found in the cluster (R-X9): `scheduler`,
    `monitor` or `agent`, and the node its pod runs on (None: the cluster's, or a file)."""

    name: str
    lines: int | None
    samples: int | None
    unparseable: int | None
    kind: str | None = None
    node: str | None = None
    error: str | None = None

    @property
    def answered(self) -> bool:
        return self.error is None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "lines": self.lines,
            "samples": self.samples,
            "unparseable": self.unparseable,
            "kind": self.kind,
            "node": self.node,
            "answered": self.answered,
            "error": self.error,
        }


@dataclass(frozen=True, slots=True)
class Report:
    basis: str | None  # allocation | usage | both; None when the input held neither
    nodes: tuple[str, ...]
    devices: tuple[Device, ...]
    containers: tuple[Container, ...]
    namespaces: dict[str, Namespace]
    capacity: Totals
    per_node: dict[str, Totals]
    distribution: str | None  # idle | even | concentrated | fragmented
    distribution_basis: str | None  # allocation | usage
    distribution_reason: str | None
    findings: tuple[Finding, ...]
    unrecognised: tuple[str, ...]
    ignored: tuple[str, ...]
    sources: tuple[SourceInfo, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        capacity = self.capacity.to_json()
        capacity["nodes"] = len(self.nodes)
        capacity["per_node"] = {k: v.to_json() for k, v in sorted(self.per_node.items())}
        return {
            "basis": self.basis,
            "nodes": list(self.nodes),
            "devices": [d.to_json() for d in self.devices],
            "containers": [c.to_json() for c in self.containers],
            "namespaces": {k: v.to_json() for k, v in sorted(self.namespaces.items())},
            "capacity": capacity,
            "distribution": self.distribution,
            "distribution_basis": self.distribution_basis,
            "distribution_reason": self.distribution_reason,
            "findings": [f.to_json() for f in self.findings],
            "unrecognised": list(self.unrecognised),
            "ignored": list(self.ignored),
            "sources": [s.to_json() for s in self.sources],
        }
