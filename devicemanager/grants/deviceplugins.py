"""Grants from the kubelet's device-plugin allocations (R-X2). Pure.

The kubelet's pod-resources API says, per pod (by namespace and name) and container, which
device ids of which extended resource it was allocated. This module is the one place that
knows what those ids mean for each manufacturer's device plugin:

- `nvidia.com/gpu` (and `.shared`, renamed replicas): `GPU-<uuid>` is an Exclusive card;
  `GPU-<uuid>::<n>` (time-slicing, MPS) and `GPU-<uuid>-<n>` (HAMi's split) are Shared on it;
  `<index>` (the index strategy) is the card of that index.
- `nvidia.com/gpu` (single MIG strategy) and `nvidia.com/mig-<profile>` (mixed): `MIG-<uuid>`,
  or `MIG-GPU-<uuid>/<gi>/<ci>` before R470, is Partitioned by the partition's own id;
  `<index>:<mig index>`, and GPUStack's `GPU-<uuid>::<n>` (the parent card), are a partition
  of that card whose id is not known.
- `nvidia.com/gpu.sliced` (GPUStack's slices): `GPU-<uuid>`, `GPU-<uuid>::<n>`, `GPU-<uuid>-<n>`
  or `<index>` is Sliced on the card, its quota unknown (the pod's annotation states it).
- `amd.com/gpu` and `amd.com/<compute>_<memory>` (ROCm/k8s-device-plugin; partitions, each a
  device of its own, in its mixed naming strategy): the PCI bus id (`0000:05:00.0`) or the
  `amdgpu_xcp_<N>` platform device of a secondary compute partition is Exclusive;
  `<bus id>-slice-<n>` (the time-slicing of ROCm/k8s-device-plugin#189, not merged) is Shared on it.
- `hygon.com/dcu` or `hygon.com/hcu` (Hygon's plugin; the PCI bus id) is Exclusive;
  `hygon.com/{dcu,hcu}-share-<cu>c-<mem>g` (a pre-made vDCU, `vdev<n>`) and
  `hygon.com/{dcu,hcu}-mig-<profile>` (a MIG instance, by its UUID) are Partitioned, the card their
  parent. `hygon.com/dcunum` (HAMi mode) grants nothing: HAMi's annotation carries the slice.
- `metax-tech.com/gpu`, `alibabacloud.com/ppu` (T-Head): Exclusive; no public plugin shows the
  ids, so an id is whatever names the card (its canonical id or an alias its backend reports).
- `huawei.com/Ascend910`, `…/Ascend310`, `…/Ascend310P`: `Ascend910-<phy>` is Exclusive;
  `huawei.com/npu` (mind-cluster's name on Ascend 950 nodes): `npu-<phy>`, the same NPU as
  `Ascend910-<phy>`; `huawei.com/Ascend910-<n>c…` (vNPU templates): `Ascend910-<n>c-<vdev>-<phy>`
  is Partitioned on `Ascend910-<phy>`, the template its profile.

A device id names its card through `aliases` (manufacturer, alias) -> card id, learned from what
the vendor libraries enumerate (a card's index, a partition's parent, and every alias a backend
reports for a card: its PCI bus id, `Ascend910-<phy>`, …); an id that is no alias is taken as the
card id itself.

Extended resources of no manufacturer here (memory or core shares of HAMi's plugins, RDMA,
SR-IOV) grant no card. HAMi's and GPUStack's pods carry their allocation annotation, which wins
over the kubelet's view (grants/node.py, which reads these through grants/sources/).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from devicemanager.grants import dra
from devicemanager.grants.allocations import Allocation, Mode
from devicemanager.grants.dra import ContainerClaim, DraInventory
from devicemanager.grants.grants import Grant, grants_from, live
from devicemanager.model import Card, CardTaint, VendorReading, identity_map
from devicemanager.node.pods import PodIndex, PodInfo

# Bounds on one answer (the kubelet's, but a node's pods shape it): a node runs at most a few
# hundred pods; a container holds at most a few dozen devices.
MAX_PODS = 2048
MAX_CONTAINERS = 64
MAX_DEVICES = 256
MAX_ID_LENGTH = 256

# (manufacturer, alias) -> card id
Aliases = Mapping[tuple[str, str], str]


@dataclass(frozen=True, slots=True)
class ContainerDevices:
    """Device ids one container was allocated of one extended resource."""

    container: str
    resource: str
    device_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PodDevices:
    namespace: str
    name: str
    devices: tuple[ContainerDevices, ...]
    claims: tuple[ContainerClaim, ...] = ()  # DRA claims by container (R-X6)


@dataclass(frozen=True, slots=True)
class KubeletAnswer:
    """One round's read of the pod-resources API. `pods` is None when `List` did not answer;
    `allocatable` is None when `GetAllocatableResources` did not (older kubelets)."""

    pods: tuple[PodDevices, ...] | None = None
    allocatable: tuple[ContainerDevices, ...] | None = None
    error: str | None = None  # why `List` failed, or what was cut from its answer
    allocatable_error: str | None = None
    duration_seconds: float | None = None

    @property
    def ok(self) -> bool:
        return self.pods is not None and self.error is None


@dataclass(frozen=True, slots=True)
class PluginDevice:
    """What one device id is: a card, a replica of one, or a partition."""

    manufacturer: str
    card_id: str  # "" when the partition's card is not known yet
    mode: Mode
    partition_id: str | None = None
    profile: str | None = None


_H = "[0-9a-fA-F]"
_UUID = rf"{_H}{{8}}-{_H}{{4}}-{_H}{{4}}-{_H}{{4}}-{_H}{{12}}"
_NV_GPU = re.compile(rf"(GPU-{_UUID})(?:(::|-)(\d+))?")
_NV_MIG = re.compile(rf"(MIG-{_UUID})(?:::\d+)?")
_NV_MIG_OLD = re.compile(rf"(MIG-(GPU-{_UUID})/\d+/\d+)(?:::\d+)?")
_NV_INDEX = re.compile(r"(\d+)(?::(\d+))?(?:::\d+)?")
_NV_MIG_RESOURCE = re.compile(r"nvidia\.com/mig-([0-9a-z.+]+?)(?:\.shared)?")
_AMD_PARTITION_RESOURCE = re.compile(r"amd\.com/(?:[cdqst]px|spx)_nps\d")
_AMD_SLICE = re.compile(r"(.+)-slice-\d+")
_ASCEND_WHOLE_RESOURCE = re.compile(r"huawei\.com/Ascend[0-9A-Za-z]+|huawei\.com/npu")
_ASCEND_VNPU_RESOURCE = re.compile(r"huawei\.com/(Ascend[0-9A-Za-z]+)-([0-9a-z_.]+)")
_ASCEND_VNPU = re.compile(r"(Ascend[0-9A-Za-z]+)-([0-9a-z_.]+)-(\d+)-(\d+)")
_ASCEND_NPU = re.compile(r"npu-(\d+)")
# Hygon's device plugin (HYGON-AI/k8s-hcu-device-plugin; `dcu` before it was renamed `hcu`):
# whole cards by PCI bus id, pre-made vDCUs as `vdev<n>` under `-share-<cu>c-<mem>g`, MIG
# instances by UUID under `-mig-<profile>`, the profile's '.' written '-' (`4g-31gb`).
_HYGON_WHOLE_RESOURCE = re.compile(r"hygon\.com/(?:dcu|hcu)")
_HYGON_VDCU_RESOURCE = re.compile(r"hygon\.com/(?:dcu|hcu)-share-(\d+c-\d+g)")
_HYGON_MIG_RESOURCE = re.compile(r"hygon\.com/(?:dcu|hcu)-mig-([0-9a-z+-]+)")
_HYGON_VDCU = re.compile(r"vdev\d+")
_WHOLE_ONLY = {
    "metax-tech.com/gpu": "metax",
    "alibabacloud.com/ppu": "thead",
}


def _card(manufacturer: str, given: str, aliases: Aliases) -> str:
    return aliases.get((manufacturer, given), given)


def _nvidia(resource: str, device_id: str, aliases: Aliases) -> PluginDevice | None:
    mig_resource = _NV_MIG_RESOURCE.fullmatch(resource)
    profile = mig_resource.group(1) if mig_resource else None
    if resource == "nvidia.com/gpu.sliced":
        # GPUStack's slices: a share of the card whose size only its annotation states.
        if m := _NV_GPU.fullmatch(device_id):
            return PluginDevice("nvidia", m.group(1), Mode.SLICED)
        if m := _NV_INDEX.fullmatch(device_id):
            return PluginDevice("nvidia", _card("nvidia", m.group(1), aliases), Mode.SLICED)
        return None
    if resource not in ("nvidia.com/gpu", "nvidia.com/gpu.shared") and mig_resource is None:
        return None
    if m := _NV_MIG_OLD.fullmatch(device_id):
        return PluginDevice("nvidia", m.group(2), Mode.PARTITIONED, m.group(1), profile)
    if m := _NV_MIG.fullmatch(device_id):
        parent = aliases.get(("nvidia", m.group(1)), "")
        return PluginDevice("nvidia", parent, Mode.PARTITIONED, m.group(1), profile)
    if mig_resource is not None:
        if m := _NV_INDEX.fullmatch(device_id):  # index strategy: "<card>:<mig index>"
            parent = _card("nvidia", m.group(1), aliases)
            return PluginDevice("nvidia", parent, Mode.PARTITIONED, None, profile)
        if m := _NV_GPU.fullmatch(device_id):
            # GPUStack's plugin names a partition by its parent card (`GPU-<uuid>::<n>`): one
            # partition of that profile on the card, which one only the pod's annotation says.
            return PluginDevice("nvidia", m.group(1), Mode.PARTITIONED, None, profile)
        return None
    if m := _NV_GPU.fullmatch(device_id):
        shared = m.group(2) is not None or resource.endswith(".shared")
        return PluginDevice("nvidia", m.group(1), Mode.SHARED if shared else Mode.EXCLUSIVE)
    if m := _NV_INDEX.fullmatch(device_id):
        card = _card("nvidia", m.group(1), aliases)
        if m.group(2) is not None:  # a MIG device named by indexes: its id is not known
            return PluginDevice("nvidia", card, Mode.PARTITIONED, None, profile)
        shared = device_id.count("::") > 0 or resource.endswith(".shared")
        return PluginDevice("nvidia", card, Mode.SHARED if shared else Mode.EXCLUSIVE)
    return None


def _amd(resource: str, device_id: str, aliases: Aliases) -> PluginDevice | None:
    # AMD's compute partitions (CPX, …) are enumerated as devices of their own, each with its
    # own bus id, under `amd.com/<compute>_<memory>` in the plugin's mixed naming strategy.
    if resource != "amd.com/gpu" and not _AMD_PARTITION_RESOURCE.fullmatch(resource):
        return None
    if m := _AMD_SLICE.fullmatch(device_id):
        return PluginDevice("amd", _card("amd", m.group(1), aliases), Mode.SHARED)
    return PluginDevice("amd", _card("amd", device_id, aliases), Mode.EXCLUSIVE)


def _ascend(resource: str, device_id: str, aliases: Aliases) -> PluginDevice | None:
    if vnpu := _ASCEND_VNPU_RESOURCE.fullmatch(resource):
        m = _ASCEND_VNPU.fullmatch(device_id)
        if m is None:
            return None
        card = _card("ascend", f"{m.group(1)}-{m.group(4)}", aliases)
        return PluginDevice("ascend", card, Mode.PARTITIONED, device_id, vnpu.group(2))
    if _ASCEND_WHOLE_RESOURCE.fullmatch(resource):
        if (npu := _ASCEND_NPU.fullmatch(device_id)) and ("ascend", device_id) not in aliases:
            # mind-cluster names an NPU `npu-<phy>` by replacing `Ascend910-` in its own name.
            device_id = f"Ascend910-{npu.group(1)}"
        return PluginDevice("ascend", _card("ascend", device_id, aliases), Mode.EXCLUSIVE)
    return None


def _hygon(resource: str, device_id: str, aliases: Aliases) -> PluginDevice | None:
    if _HYGON_WHOLE_RESOURCE.fullmatch(resource):
        return PluginDevice("hygon", _card("hygon", device_id, aliases), Mode.EXCLUSIVE)
    if vdcu := _HYGON_VDCU_RESOURCE.fullmatch(resource):
        if not _HYGON_VDCU.fullmatch(device_id):
            return None
        parent = aliases.get(("hygon", device_id), "")
        return PluginDevice("hygon", parent, Mode.PARTITIONED, device_id, vdcu.group(1))
    if mig := _HYGON_MIG_RESOURCE.fullmatch(resource):
        parent = aliases.get(("hygon", device_id), "")
        profile = mig.group(1).replace("-", ".")  # the plugin wrote the profile's '.' as '-'
        return PluginDevice("hygon", parent, Mode.PARTITIONED, device_id, profile)
    return None


def device_of(resource: str, device_id: str, aliases: Aliases) -> PluginDevice | None:
    """What a device id of an extended resource names, or None: not an accelerator of ours."""
    if not device_id or len(device_id) > MAX_ID_LENGTH:
        return None
    if resource.startswith("nvidia.com/"):
        return _nvidia(resource, device_id, aliases)
    if resource.startswith("amd.com/"):
        return _amd(resource, device_id, aliases)
    if resource.startswith("huawei.com/"):
        return _ascend(resource, device_id, aliases)
    if resource.startswith("hygon.com/"):
        return _hygon(resource, device_id, aliases)
    manufacturer = _WHOLE_ONLY.get(resource)
    if manufacturer is None:
        return None
    return PluginDevice(manufacturer, _card(manufacturer, device_id, aliases), Mode.EXCLUSIVE)


def allocations(pod: PodDevices, aliases: Aliases) -> tuple[Allocation, ...]:
    """A pod's device-plugin devices as allocations, in the annotation parsers' shape."""
    out = []
    for entry in pod.devices:
        for device_id in entry.device_ids:
            device = device_of(entry.resource, device_id, aliases)
            if device is None:
                continue
            out.append(
                Allocation(
                    container=entry.container,
                    manufacturer=device.manufacturer,
                    device_id=device.card_id,
                    index=None,
                    mode=device.mode,
                    partition_id=device.partition_id,
                    profile=device.profile,
                    source="kubelet",
                )
            )
    return tuple(out)


def kubelet_grants(
    pod: PodInfo, devices: PodDevices, aliases: Aliases, inventory: DraInventory | None = None
) -> tuple[Grant, ...]:
    """One pod's grants from what the kubelet allocated it: its device-plugin devices and its
    DRA claims, resolved through the node's slices (R-X2, R-X6). The grant source for a pod
    without an allocation annotation. The kubelet allocates each device once, so the two
    cannot name one card twice; where they do (a DRA-backed extended resource), one grant."""
    claimed = dra.pod_allocations(devices.claims, inventory, aliases, pod.uid).allocations
    return grants_from(pod, (*allocations(devices, aliases), *claimed))


def match_pods(answer: Iterable[PodDevices], index: PodIndex) -> dict[str, PodDevices]:
    """Pod UID -> its devices. The API names pods by namespace and name only; where the index
    holds two pods of one name (a StatefulSet pod recreated), the one live pod is meant, and
    with none or several the name is skipped rather than guessed."""
    by_name: dict[tuple[str, str], list[PodInfo]] = {}
    for pod in index.pods.values():
        by_name.setdefault((pod.namespace, pod.name), []).append(pod)
    out: dict[str, PodDevices] = {}
    for entry in answer:
        if not entry.devices and not entry.claims:
            continue
        candidates = by_name.get((entry.namespace, entry.name), [])
        if len(candidates) > 1:
            candidates = [p for p in candidates if live(p) or not p.started]
            candidates = [p for p in candidates if not p.terminating]
        if len(candidates) == 1:
            out[candidates[0].uid] = entry
    return out


def pod_kubelet_grants(
    answer: KubeletAnswer | None,
    index: PodIndex,
    aliases: Aliases,
    inventory: DraInventory | None = None,
) -> Callable[[PodInfo], tuple[Grant, ...]]:
    """The grants the kubelet's answer gives one pod, as a function the per-pod boundary
    (grants.node.node_grants) calls: a device id or a claim that raises costs that pod alone."""
    if answer is None or answer.pods is None:
        return lambda pod: ()
    matched = match_pods(answer.pods, index)

    def grants_of_pod(pod: PodInfo) -> tuple[Grant, ...]:
        devices = matched.get(pod.uid)
        return kubelet_grants(pod, devices, aliases, inventory) if devices is not None else ()

    return grants_of_pod


def node_kubelet_grants(
    answer: KubeletAnswer | None,
    index: PodIndex,
    aliases: Aliases,
    inventory: DraInventory | None = None,
) -> dict[str, tuple[Grant, ...]]:
    """Pod UID -> grants the kubelet's answer gives it; empty when it did not answer."""
    of_pod = pod_kubelet_grants(answer, index, aliases, inventory)
    return {uid: grants for uid, pod in index.pods.items() if (grants := of_pod(pod))}


def claim_refs(answer: KubeletAnswer | None) -> frozenset[tuple[str, str]]:
    """(namespace, name) of every DRA claim the kubelet's answer names: the claims whose
    status the round needs (admin access, shares, who else holds them)."""
    if answer is None or answer.pods is None:
        return frozenset()
    return frozenset((c.claim_namespace, c.claim_name) for pod in answer.pods for c in pod.claims)


def unresolved_claims(
    answer: KubeletAnswer | None, index: PodIndex, aliases: Aliases, inventory: DraInventory | None
) -> tuple[dra.Unresolved, ...]:
    """Every claimed device of the node's pods that gives no grant, with its reason."""
    if answer is None or answer.pods is None:
        return ()
    out: list[dra.Unresolved] = []
    for uid, devices in match_pods(answer.pods, index).items():
        out.extend(dra.pod_allocations(devices.claims, inventory, aliases, uid).unresolved)
    return tuple(out)


def aliases_of(readings: Iterable[VendorReading]) -> dict[tuple[str, str], str]:
    """Aliases from what the libraries enumerated: a card's index names it (the NVIDIA plugin's
    index strategy), and so does every alias its backend reports; a partition's own ids name
    its parent card."""
    out: dict[tuple[str, str], str] = {}
    for reading in readings:
        for card in reading.cards:
            if card.index >= 0:
                out[(reading.manufacturer, str(card.index))] = card.id
        # The forms device plugins record for a card (a PCI bus id, `Ascend910-3`, …) are among
        # the aliases its backend reports; an alias two cards claim names neither.
        for alias, canonical in identity_map(reading.cards).items():
            out[(reading.manufacturer, alias)] = canonical
        for partition in reading.partitions:
            if partition.parent_id:
                for name in partition.ids:
                    out[(reading.manufacturer, name)] = partition.parent_id
    return out


def allocatable_cards(
    answer: KubeletAnswer | None, manufacturer: str, aliases: Aliases
) -> frozenset[str] | None:
    """The cards of one manufacturer the kubelet can allocate, or None when it did not say."""
    if answer is None or answer.allocatable is None:
        return None
    cards = set()
    for entry in answer.allocatable:
        for device_id in entry.device_ids:
            device = device_of(entry.resource, device_id, aliases)
            if device is not None and device.manufacturer == manufacturer and device.card_id:
                cards.add(device.card_id)
    return frozenset(cards)


# The unhealthy reason of a card the library does not enumerate: one it listed before in this
# run, or one the kubelet can allocate.
NOT_ENUMERATED = "not_enumerated"


def missing_cards(
    reading: VendorReading, allocatable: frozenset[str] | None, known: Mapping[str, Card]
) -> tuple[Card, ...]:
    """Cards the library no longer lists: every card it listed before in this run (`known`),
    whether or not the kubelet answers, and every card the kubelet allocates (lost at start, or
    gone mid-run). Unhealthy, so the grant on them and the AcceleratorUnhealthy alert say so.
    Named by what was last seen of them, else by the kubelet's id with index -1 (unknown). A
    partition enumerated as a card of its own (an AMD XCP) whose physical card is still listed
    went with a change of partition mode, not with a lost card: it is not missed."""
    present = {c.id for c in reading.cards}
    remembered = {
        card_id
        for card_id, card in known.items()
        if card.parent_id is None or card.parent_id not in present
    }
    out = []
    for card_id in sorted((remembered | (allocatable or frozenset())) - present)[:MAX_DEVICES]:
        before = known.get(card_id)
        out.append(
            Card(
                id=card_id,
                index=before.index if before is not None else -1,
                name=before.name if before is not None else None,
                memory_total_mib=before.memory_total_mib if before is not None else None,
                unhealthy=True,
                unhealthy_reason=NOT_ENUMERATED,
                parent_id=before.parent_id if before is not None else None,
            )
        )
    return tuple(out)


def count_unresolved(
    answer: KubeletAnswer | None, index: PodIndex, aliases: Aliases, inventory: DraInventory | None
) -> dict[str, int]:
    """Claimed devices that gave no grant this round, by reason (R-X6)."""
    out: dict[str, int] = {}
    for missed in unresolved_claims(answer, index, aliases, inventory):
        out[missed.reason] = out.get(missed.reason, 0) + 1
    return out


def with_dra_health(
    reading: VendorReading,
    inventory: DraInventory | None,
    aliases: Aliases,
    kubelet_says: Mapping[tuple[str, str], dra.KubeletSays] | None = None,
) -> VendorReading:
    """The reading with what Kubernetes says of its cards (issue 42): each card carries the
    taints on its DRA devices (slices' and DeviceTaintRules', KEP-5055) and the kubelet's word
    on them (`allocatedResourcesStatus`, KEP-4680); a `NoSchedule`/`NoExecute` taint or an
    `Unhealthy` word marks it unhealthy with that reason (a card already unhealthy keeps its own
    reason and gains these), a `None` taint or an `Unknown` word does not. The same reading
    when nothing is said."""
    mine = reading.manufacturer
    taints = {
        card_id: tuple(CardTaint(t.key, dra.reason_text(t.value), t.effect) for t in found)
        for (manufacturer, card_id), found in dra.card_taints(inventory, aliases).items()
        if manufacturer == mine
    }
    reasons = {c: why for (m, c), why in dra.tainted(inventory, aliases).items() if m == mine}
    kubelet = {card_id: said for (m, card_id), said in (kubelet_says or {}).items() if m == mine}
    for card_id, word in kubelet.items():
        if word.reason is not None:
            reasons[card_id] = dra.joined(reasons.get(card_id, ""), word.reason)
    named = taints.keys() | kubelet.keys()
    if not any(c.id in named for c in reading.cards):
        return reading
    cards = []
    for card in reading.cards:
        if card.id in named:
            said = kubelet.get(card.id)
            card = replace(
                card,
                device_taints=taints.get(card.id, ()),
                kubelet_health=said.health if said is not None else None,
            )
        reason = reasons.get(card.id)
        if reason is not None:
            own = card.unhealthy_reason if card.unhealthy else None
            card = replace(
                card,
                unhealthy=True,
                unhealthy_reason=f"{own},{reason}" if own else reason,
            )
        cards.append(card)
    return replace(reading, cards=tuple(cards))
