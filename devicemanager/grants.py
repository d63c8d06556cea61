"""From pods to grants: who holds what, as which Instance, with which quota (R-G2..R-G4, R-F6).

Pure. A grant is one entry users read: one per (card) or (partition) a pod holds, never one
per card when a pod holds two partitions of it, and one entry with no usage figures of its own
when two containers of a pod were separately granted the same card.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from devicemanager.allocations import (
    UNITS_PER_CARD,
    Allocation,
    AllocationError,
    Mode,
    allocations_of,
)
from devicemanager.model import ReadRequest
from devicemanager.pods import PodIndex, PodInfo

log = logging.getLogger("instance-accelerator-metrics")

INSTANCE_GROUP = "worker.gpustack.ai"
PART_OF = "app.kubernetes.io/part-of"
CORES_LIMIT_SUFFIX = ".sliced.cores-percentage"
CARVED = (Mode.SLICED, Mode.PARTITIONED)


@dataclass(frozen=True, slots=True)
class InstanceRef:
    namespace: str
    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class Grant:
    pod_uid: str
    containers: tuple[str, ...]  # the holders; two or more make the grant ambiguous
    manufacturer: str
    device_id: str  # the card; a partition's parent
    index: int | None
    mode: Mode
    units: int | None = None  # GPUStack slice share, summed over holders
    memory_mib: int | None = None  # HAMi slice quota, summed over holders
    cores_cap: float = 100.0  # percent of the card the holder may use
    partition_id: str | None = None
    profile: str | None = None

    @property
    def container(self) -> str:
        return self.containers[0]

    @property
    def ambiguous(self) -> bool:
        return len(self.containers) > 1

    @property
    def entry_id(self) -> str:
        """The id an entry is keyed by: the partition's own, else the card's."""
        return self.partition_id or self.device_id

    def memory_quota_mib(self, card_total_mib: int | None) -> int | None:
        """A slice's memory ceiling: units * card MiB / 1,600,000, at least 1 MiB (R-G2)."""
        if self.memory_mib is not None:
            return self.memory_mib
        if self.units is None or card_total_mib is None:
            return None
        units = min(self.units, UNITS_PER_CARD)  # a slice is never more than its card
        return max(1, units * card_total_mib // UNITS_PER_CARD)


def owned_by_instance(pod: PodInfo) -> bool:
    """Whether a GPUStack Instance controls the pod and the pod carries its UID as part-of."""
    owner = pod.owner
    return (
        owner is not None
        and owner.kind == "Instance"
        and owner.api_version.partition("/")[0] == INSTANCE_GROUP
        and bool(owner.uid)
        and pod.labels.get(PART_OF) == owner.uid
    )


def instance_of(pod: PodInfo) -> InstanceRef:
    """A pod owned by a GPUStack Instance belongs to it; any other pod holding a grant is an
    Instance of its own (R-G4)."""
    if owned_by_instance(pod) and pod.owner is not None:
        return InstanceRef(pod.namespace, pod.owner.name, pod.owner.uid)
    return InstanceRef(pod.namespace, pod.name, pod.uid)


def cores_cap(pod: PodInfo, container: str) -> float:
    """The compute cap from `<resource>.sliced.cores-percentage`; 100 (no cap) otherwise."""
    limits = pod.limits.get(container, {})
    caps = [v for k, v in limits.items() if k.endswith(CORES_LIMIT_SUFFIX)]
    if len(caps) != 1:
        return 100.0
    try:
        cap = float(caps[0])
    except ValueError:
        return 100.0
    return cap if 0 < cap <= 100 else 100.0


def grants_of(pod: PodInfo) -> tuple[Grant, ...]:
    """A pod's grants; raises AllocationError when an annotation is malformed."""
    merged: dict[tuple[str, str, str | None, str | None], list[Allocation]] = {}
    for a in allocations_of(pod.annotations, pod.slots):
        if a.mode is Mode.VISIBILITY:
            continue  # a sidecar that sees its sibling's card holds nothing
        partition = (a.partition_id, a.profile) if a.mode is Mode.PARTITIONED else (None, None)
        merged.setdefault((a.manufacturer, a.device_id, *partition), []).append(a)
    out = []
    for (manufacturer, device_id, partition_id, profile), allocations in merged.items():
        first = allocations[0]
        containers = tuple(dict.fromkeys(a.container for a in allocations))
        units = [a.units for a in allocations if a.units is not None]
        memory = [a.memory_mib for a in allocations if a.memory_mib is not None]
        if first.cores_percent is not None and first.cores_percent > 0:
            cap = float(min(first.cores_percent, 100))  # HAMi states the cap itself
        else:  # HAMi's 0 means no cap; GPUStack states its cap as a container limit
            cap = cores_cap(pod, first.container)
        out.append(
            Grant(
                pod_uid=pod.uid,
                containers=containers,
                manufacturer=manufacturer,
                device_id=device_id,
                index=first.index,
                mode=first.mode,
                units=sum(units) if units else None,
                memory_mib=sum(memory) if memory else None,
                cores_cap=cap,
                partition_id=partition_id,
                profile=profile,
            )
        )
    return tuple(sorted(out, key=lambda g: (g.manufacturer, g.device_id, g.entry_id)))


@dataclass(frozen=True, slots=True)
class NodeGrants:
    """Every grant on the node by pod, and the pods whose allocations could not be read."""

    by_pod: Mapping[str, tuple[Grant, ...]]
    errors: Mapping[str, str]  # pod UID -> what was wrong

    def all(self) -> Iterable[Grant]:
        for grants in self.by_pod.values():
            yield from grants

    def holders(self, manufacturer: str) -> dict[str, frozenset[str]]:
        """device id -> pods holding any grant on it."""
        out: dict[str, set[str]] = {}
        for g in self.all():
            if g.manufacturer == manufacturer:
                out.setdefault(g.device_id, set()).add(g.pod_uid)
        return {device: frozenset(pods) for device, pods in out.items()}

    def request(self, manufacturer: str) -> ReadRequest:
        """Per-process queries only for carved cards (R-V3); partitions by recorded id (R-V4)."""
        mine = [g for g in self.all() if g.manufacturer == manufacturer and g.mode in CARVED]
        return ReadRequest(
            carved_device_ids=frozenset(g.device_id for g in mine),
            partition_ids=frozenset(
                (g.device_id, g.partition_id) for g in mine if g.partition_id is not None
            ),
        )


def node_grants(index: PodIndex) -> NodeGrants:
    by_pod: dict[str, tuple[Grant, ...]] = {}
    errors: dict[str, str] = {}
    for pod in index.pods.values():
        try:
            grants = grants_of(pod)
        except AllocationError as exc:
            # No grants for this pod, a line in the log, a count in /metrics; no other pod is
            # touched (R-G1).
            errors[pod.uid] = str(exc)
            continue
        if grants:
            by_pod[pod.uid] = grants
    return NodeGrants(MappingProxyType(by_pod), MappingProxyType(errors))


def live(pod: PodInfo) -> bool:
    """Whether a pod's figures may be published: started (R-F6), not stopped or going."""
    return pod.started and not pod.terminating and pod.phase not in ("Succeeded", "Failed")


def ceil_restated(measured: float, cap: float) -> float:
    """A slice's compute against its own allowance: ceil(measured * 100 / cap) (R-F4).

    A cap that is not a positive percentage is no cap: HAMi writes `Cores` 0 for a slice
    without one, and a zero here would fail the whole round on a division.
    """
    allowance = cap if 0 < cap <= 100 else 100.0
    return float(math.ceil(round(measured * 100.0 / allowance, 9)))
