"""Cards a reservation pod holds for the pods that run on them: KAI Scheduler's GPU fractions
(Run:ai's open-source scheduler), as KAI writes them today and as Run:ai wrote them. Pure.

A fractional pod asks for no `nvidia.com/gpu`: KAI's binder creates a reservation pod in its
own namespace (`kai-resource-reservation`; `runai-reservation` before KAI v0.6) asking for one
whole card, labelled with a GPU group, and the reservation pod writes the UUID of the card it
was given into its own annotation. Every fractional pod bound to that card carries the same
group label and its share in its annotations; the binder points the pod's container at the
card through a ConfigMap the agent does not read. So the kubelet names only the reservation
pod, and the pods that use the card carry only the group: this module reads both sides, and
the rule that hands the card from the one to the others (`hand_on`) runs between the grant
sources and the refusals (grants/node.py).

What is read, from NVIDIA/KAI-Scheduler at 72de64f (docs/grants-and-figures.md cites each):

- a reservation pod: a pod of `RESERVATION_NAMESPACES` carrying the `runai-gpu-group` label
  (pkg/binder/binding/resourcereservation/resource_reservation.go, createResourceReservationPod);
  its card: the `run.ai/reserve_for_gpu_index` annotation, which despite its name holds the
  card's UUID as NVML reads it inside the pod (pkg/resourcereservation/discovery/discovery.go,
  patcher/pod_patcher.go);
- a fractional pod: outside those namespaces, with `gpu-fraction` (a number in (0, 1): that
  share of the card's memory) or `gpu-memory` (MiB), never both
  (pkg/binder/plugins/gpusharing/gpu-request/gpu_request_validator.go); its groups: the value of
  `runai-gpu-group`, and of each `runai-gpu-group/<group>` label when it asked for several cards
  (`gpu-fraction-num-devices`; pkg/common/resources/gpu_sharing.go); its container: the one
  `gpu-fraction-container-name` names, else the first (pkg/binder/common/gpu_access.go).

KAI enforces no compute share (docs/gpu-sharing/README.md); HAMi-core, where
`kai-resource-isolator` injects it, enforces `gpu-memory` only. So a tenant's grant is Sliced
with its memory quota and no compute cap.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal

from devicemanager.grants.allocations import UNITS_PER_CARD, Allocation, AllocationError, Mode
from devicemanager.grants.grants import Grant, merged
from devicemanager.node.pods import PodIndex, PodInfo

# KAI's default (deployments/kai-scheduler/values.yaml, pkg/common/constants DefaultResource-
# ReservationName), and Run:ai's name before it (docs/migrationguides/v0.6.0/README.md). Only
# KAI's service account writes pods there: a tenant cannot make its own pod a reservation pod.
RESERVATION_NAMESPACES = frozenset({"kai-resource-reservation", "runai-reservation"})
GPU_GROUP = "runai-gpu-group"  # label, on both sides
MULTI_GROUP_PREFIX = GPU_GROUP + "/"  # label of a pod fractional on several cards
RESERVED_CARD = "run.ai/reserve_for_gpu_index"  # annotation of the reservation pod: a UUID
GPU_FRACTION = "gpu-fraction"
GPU_MEMORY = "gpu-memory"
FRACTION_CONTAINER = "gpu-fraction-container-name"
SOURCE = "kai"

# A card's UUID as NVML writes it; a reservation pod's annotation is nothing else.
_UUID = re.compile(r"GPU-[0-9A-Fa-f-]{8,64}")
# strconv.ParseFloat takes more ("5e-1", "0x1p-1"); a fraction in (0, 1) as people write it.
_FRACTION = re.compile(r"0?\.[0-9]{1,12}")
_MIB = re.compile(r"[0-9]{1,9}")


def is_reservation_pod(pod: PodInfo) -> bool:
    return pod.namespace in RESERVATION_NAMESPACES and bool(pod.labels.get(GPU_GROUP))


def gpu_groups(pod: PodInfo) -> tuple[str, ...]:
    """The GPU groups a pod is bound to: its `runai-gpu-group` and `runai-gpu-group/<g>`."""
    groups = [pod.labels.get(GPU_GROUP, "")]
    groups += [v for k, v in pod.labels.items() if k.startswith(MULTI_GROUP_PREFIX)]
    return tuple(sorted({g for g in groups if g}))


def is_fractional(pod: PodInfo) -> bool:
    """A pod that runs on a card another pod reserved: KAI's annotation and a group."""
    return (
        pod.namespace not in RESERVATION_NAMESPACES
        and (GPU_FRACTION in pod.annotations or GPU_MEMORY in pod.annotations)
        and bool(gpu_groups(pod))
    )


def reserved_card(pod: PodInfo) -> str | None:
    """The UUID a reservation pod wrote of its card; None until it has written one."""
    value = pod.annotations.get(RESERVED_CARD)
    if value is None or value == "":
        return None
    if not _UUID.fullmatch(value):
        raise AllocationError(f"{RESERVED_CARD}: {value[:80]!r} is no GPU UUID")
    return value


@dataclass(frozen=True, slots=True)
class Share:
    """What a fractional pod asked of each card it runs on."""

    container: str
    units: int | None  # gpu-fraction, in GPUStack's units (1,600,000 = the card)
    memory_mib: int | None  # gpu-memory


def share_of(pod: PodInfo) -> Share:
    """A fractional pod's share; raises AllocationError as KAI's validator would refuse it."""
    fraction, memory = pod.annotations.get(GPU_FRACTION), pod.annotations.get(GPU_MEMORY)
    if fraction is not None and memory is not None:
        raise AllocationError(f"both {GPU_FRACTION} and {GPU_MEMORY}: KAI takes one")
    units = memory_mib = None
    if fraction is not None:
        if not _FRACTION.fullmatch(fraction) or Decimal(fraction) == 0:
            raise AllocationError(f"{GPU_FRACTION}: {fraction[:40]!r} is no number in (0, 1)")
        units = max(1, round(Decimal(fraction) * UNITS_PER_CARD))
    if memory is not None:
        if not _MIB.fullmatch(memory) or int(memory) == 0:
            raise AllocationError(f"{GPU_MEMORY}: {memory[:40]!r} is no positive MiB count")
        memory_mib = int(memory)
    containers = list(pod.limits)
    named = pod.annotations.get(FRACTION_CONTAINER)
    if named is not None:
        if named not in pod.slots:
            raise AllocationError(f"{FRACTION_CONTAINER}: the pod has no container {named[:63]!r}")
        container = named
    elif containers:
        container = containers[0]
    else:
        raise AllocationError("a fractional pod without a container")
    return Share(container, units, memory_mib)


def reserved_cards(index: PodIndex) -> dict[str, set[str]]:
    """GPU group -> the cards its live reservation pods on this node wrote (one, normally)."""
    out: dict[str, set[str]] = {}
    for pod in index.pods.values():
        if is_reservation_pod(pod) and not _released(pod):
            try:
                card = reserved_card(pod)
            except AllocationError:
                continue  # that pod's own fault, said by the source; it names no card
            if card is not None:
                out.setdefault(pod.labels[GPU_GROUP], set()).add(card)
    return out


def tenant_allocations(pod: PodInfo, cards: Mapping[str, set[str]]) -> tuple[Allocation, ...]:
    """A fractional pod's Sliced allocations, one per group whose reservation pod named its
    card; raises AllocationError on a malformed share, or a group two cards are reserved for."""
    share = share_of(pod)
    out = []
    for group in gpu_groups(pod):
        named = cards.get(group, set())
        if len(named) > 1:
            raise AllocationError(f"GPU group {group[:63]!r} is reserved on {len(named)} cards")
        for card in named:
            out.append(
                Allocation(
                    container=share.container,
                    manufacturer="nvidia",
                    device_id=card,
                    index=None,
                    mode=Mode.SLICED,
                    units=share.units,
                    memory_mib=share.memory_mib,
                    source=SOURCE,
                )
            )
    return tuple(out)


def reservation_allocations(pod: PodInfo) -> tuple[Allocation, ...]:
    """A reservation pod's own word on its card, checked against what the kubelet gave it."""
    card = reserved_card(pod)
    if card is None or not pod.limits:
        return ()
    container = next(iter(pod.limits))
    return (Allocation(container, "nvidia", card, None, Mode.EXCLUSIVE, source=SOURCE),)


def hand_on(
    by_pod: Mapping[str, tuple[Grant, ...]],
    kubelet: Mapping[str, Sequence[Grant]],
    index: PodIndex,
) -> tuple[dict[str, tuple[Grant, ...]], dict[str, tuple[Grant, ...]]]:
    """Every reservation pod holds no figures (it runs nothing on its card: its use is its
    tenants'), and what the kubelet gave it is recorded as given, a slice each, to the
    fractional pods of its group whose grants are KAI's word (this source's), so that
    `refuse_borrowed` finds the card theirs. A slice, never the card: a tenant whose own
    allocation annotation names the card whole (which would win over KAI's labels) is refused
    it as before, so no one reads its neighbours' use by labelling itself into a group. A
    reservation pod none of whose tenants holds a grant keeps the kubelet's record: no other
    pod's annotation may claim its card. Returns (grants by pod, the kubelet's record by pod)."""
    reservers = [p for p in index.pods.values() if is_reservation_pod(p)]
    if not reservers:
        return dict(by_pod), {uid: tuple(g) for uid, g in kubelet.items()}
    gone = {p.uid for p in reservers}
    kept = {uid: grants for uid, grants in by_pod.items() if uid not in gone}
    tenants: dict[str, list[str]] = {}
    for pod in index.pods.values():
        if is_fractional(pod) and any(g.source == SOURCE for g in kept.get(pod.uid, ())):
            for group in gpu_groups(pod):
                tenants.setdefault(group, []).append(pod.uid)
    record = {uid: tuple(g) for uid, g in kubelet.items()}
    for reserver in reservers:
        held = record.get(reserver.uid, ())
        holders = tenants.get(reserver.labels[GPU_GROUP], [])
        if not held or not holders:
            continue
        del record[reserver.uid]
        for uid in holders:
            given = (replace(g, pod_uid=uid, mode=Mode.SLICED) for g in held)
            record[uid] = merged((*record.get(uid, ()), *given))
    return kept, record


def _released(pod: PodInfo) -> bool:
    return pod.terminating or pod.phase in ("Succeeded", "Failed")
