"""Grants through Dynamic Resource Allocation (R-X6). Pure.

The kubelet's pod-resources `List` names, per container, each DRA claim it was given and the
devices of it as `(driver, pool, device)`: a DRA name such as `gpu-0`, not a card's UUID
(`ContainerClaim`, `ClaimDevice`). The node's ResourceSlices are the inventory that says what
each named device is (`DraDevice`: its attributes and capacity, and the taints its driver put
on it); the claim's own status says how it was allocated (`ClaimStatus`: admin access, the
share of a device with consumable capacity, which pods it is reserved for). This module turns
the three into the core's allocations, one per device a container holds:

- a whole device (`type: gpu`, or a device with no partition attribute) in one claim held by
  one container: `Exclusive`; one claim reserved for several pods, or named by several
  containers: `Shared` on that card, as time-slicing is;
- a partition device (`type: mig`, its own `uuid` and the card's `parentUUID`): `Partitioned`,
  read on the partition's own handle, the profile from `profile`;
- a share of a device with consumable capacity (`share_id`, the claim's `consumedCapacity`):
  `Sliced`, its memory quota the memory it consumed;
- an admin-access claim (a monitoring pod that sees every device, holding none): `Visibility`,
  no grant.

A device is matched to a card by its attributes only (`uuid`, `parentUUID`, a PCI bus id), each
looked up among the ids and aliases the vendor libraries enumerate (`Aliases`): a driver whose
devices carry no attribute that names a known card is not guessed at. Each device that could
not be resolved is left out with its reason (`Unresolved`), so the round can count it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from types import MappingProxyType

from devicemanager.grants.allocations import Allocation, Mode
from devicemanager.model import MIB

# Bounds on what the API server and the kubelet hand over for one node.
MAX_SLICE_DEVICES = 4096  # devices across every slice of the node
MAX_ATTRIBUTES = 64  # per device
MAX_CLAIM_RESULTS = 256  # allocation results per claim
MAX_CLAIMS = 2048
MAX_NAME = 253  # a Kubernetes name; DRA device names are DNS labels

# A driver's name -> the manufacturer whose backend enumerates its devices. A driver not named
# here is matched by its attributes against every manufacturer's cards, never by its name.
DRIVERS = {
    "gpu.nvidia.com": "nvidia",
    "gpu.amd.com": "amd",
}

# Attributes that name a card or partition, in the order they are tried. The NVIDIA driver
# publishes `uuid` (a `GPU-` or `MIG-` UUID) and, on a MIG device, `parentUUID`; AMD's publishes
# the PCI bus id; a driver of another manufacturer may publish any of these.
ID_ATTRIBUTES = ("uuid", "pciBusID", "pciAddress", "pcieRoot", "serial")
PARENT_ATTRIBUTE = "parentUUID"
TYPE_ATTRIBUTE = "type"
PROFILE_ATTRIBUTE = "profile"
# `amdgpu-partition`: AMD's driver names a partition's parent by its PCI bus id only, which
# all partitions of a card share: it is not resolved to one partition (unmatched, counted).
PARTITION_TYPES = frozenset({"mig", "partition", "xcp", "vnpu", "amdgpu-partition"})
MEMORY_CAPACITY = "memory"

# Why a claimed device has no grant (counted in /metrics, never a guess).
NO_SLICE = "no_slice"  # no ResourceSlice of the node lists it
DUPLICATE = "duplicate_device"  # a slice names it twice, or two slices do
UNMATCHED = "unmatched_device"  # no attribute of it names a card the libraries enumerate
# a claim not read yet (admin access unknown), or a share whose claim is gone (capacity unknown)
NO_CLAIM = "claim_unavailable"
NO_INVENTORY = "no_inventory"  # the node's slices could not be read at all

SOURCE = "dra"  # an Allocation's source: the kubelet's pod-resources, resolved through DRA

Attribute = str | int | bool
# (manufacturer, alias) -> card id, as deviceplugins.Aliases
Aliases = Mapping[tuple[str, str], str]
DeviceKey = tuple[str, str, str]  # (driver, pool, device)


@dataclass(frozen=True, slots=True)
class ClaimDevice:
    """One device of a claim as pod-resources names it (`ClaimResource`)."""

    driver: str
    pool: str
    device: str
    share_id: str | None = None  # consumable capacity: which share of the device (1.35+)
    # The fully qualified CDI device names the kubelet gave the container for it
    # (`vendor.com/class=name`), as pod-resources lists them; () when it lists none.
    cdi_devices: tuple[str, ...] = ()

    @property
    def key(self) -> DeviceKey:
        return (self.driver, self.pool, self.device)


@dataclass(frozen=True, slots=True)
class ContainerClaim:
    """A claim one container was given (`DynamicResource`), with its devices."""

    container: str
    claim_namespace: str
    claim_name: str
    devices: tuple[ClaimDevice, ...]


@dataclass(frozen=True, slots=True)
class DeviceTaint:
    """A taint a DRA driver put on one of its devices (KEP-5055): `gpu.nvidia.com/xid`, …"""

    key: str
    value: str = ""
    effect: str = ""  # NoSchedule, NoExecute, None

    @property
    def reason(self) -> str:
        return f"{self.key}={self.value}" if self.value else self.key


@dataclass(frozen=True, slots=True)
class DraDevice:
    """One device of a ResourceSlice: its attributes (names without the driver's domain, as
    `uuid` for `gpu.nvidia.com/uuid`), capacity in base units, and taints."""

    driver: str
    pool: str
    name: str
    attributes: Mapping[str, Attribute] = field(default_factory=lambda: MappingProxyType({}))
    capacity: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    taints: tuple[DeviceTaint, ...] = ()

    @property
    def key(self) -> DeviceKey:
        return (self.driver, self.pool, self.name)


@dataclass(frozen=True, slots=True)
class AllocationResult:
    """One result of a ResourceClaim's `status.allocation.devices.results[]`."""

    driver: str
    pool: str
    device: str
    share_id: str | None = None
    admin_access: bool = False
    consumed_capacity: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def key(self) -> DeviceKey:
        return (self.driver, self.pool, self.device)


@dataclass(frozen=True, slots=True)
class ClaimStatus:
    """What the agent reads of one ResourceClaim: how it was allocated, and who it is
    reserved for (`status.reservedFor`, pod UIDs)."""

    namespace: str
    name: str
    results: tuple[AllocationResult, ...] = ()
    reserved_for: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class DraInventory:
    """The node's DRA devices (from its ResourceSlices) and the claims its pods hold.

    `devices` is keyed by (driver, pool, device); a device two entries name is in `duplicates`
    and in no entry of `devices`. `claims` is keyed by (namespace, name) and holds the claims
    read; `missing_claims` those the API server does not have (deleted while the pod runs);
    `pending_claims` those not read yet (the API server slow or failing): a device of a pending
    claim gives no grant this round, since only the claim says whether it is admin access.
    `error` says why the slices could not be read at all (None with empty devices: the API
    serves slices and the node has none)."""

    devices: Mapping[DeviceKey, DraDevice] = field(default_factory=lambda: MappingProxyType({}))
    duplicates: frozenset[DeviceKey] = frozenset()
    claims: Mapping[tuple[str, str], ClaimStatus] = field(
        default_factory=lambda: MappingProxyType({})
    )
    missing_claims: frozenset[tuple[str, str]] = frozenset()
    error: str | None = None
    pending_claims: frozenset[tuple[str, str]] = frozenset()


def inventory_of(
    devices: Iterable[DraDevice],
    claims: Iterable[ClaimStatus] = (),
    missing_claims: Iterable[tuple[str, str]] = (),
    error: str | None = None,
    pending_claims: Iterable[tuple[str, str]] = (),
) -> DraInventory:
    """The inventory of every slice's devices: a device named twice is a duplicate, never the
    first of two; past the bound the rest is left out."""
    seen: dict[DeviceKey, DraDevice] = {}
    twice: set[DeviceKey] = set()
    for n, device in enumerate(devices):
        if n >= MAX_SLICE_DEVICES:
            break
        if device.key in seen or device.key in twice:
            twice.add(device.key)
            seen.pop(device.key, None)
            continue
        seen[device.key] = device
    by_name: dict[tuple[str, str], ClaimStatus] = {}
    for claim in claims:
        if len(by_name) >= MAX_CLAIMS:
            break
        by_name[(claim.namespace, claim.name)] = claim
    return DraInventory(
        devices=MappingProxyType(seen),
        duplicates=frozenset(twice),
        claims=MappingProxyType(by_name),
        missing_claims=frozenset(missing_claims),
        error=error,
        pending_claims=frozenset(pending_claims),
    )


@dataclass(frozen=True, slots=True)
class Resolved:
    """What a DRA device is: the card (canonical id) of a manufacturer, and the partition."""

    manufacturer: str
    card_id: str
    partition_id: str | None = None
    profile: str | None = None


@dataclass(frozen=True, slots=True)
class Unresolved:
    """A claimed device that gives no grant, and why."""

    container: str
    claim: str  # namespace/name
    device: DeviceKey
    reason: str


_H = "[0-9a-fA-F]"
# The card ids a known driver's `uuid` attribute carries, as the manufacturer's library names
# its cards (NVML's `GPU-<uuid>`).
_OWN_UUID = {"nvidia": re.compile(rf"GPU-{_H}{{8}}-{_H}{{4}}-{_H}{{4}}-{_H}{{4}}-{_H}{{12}}")}
_NOTHING = re.compile(r"(?!)")
_BUS_ID = re.compile(r"(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")


def _candidates(value: Attribute) -> list[str]:
    """The spellings a card id attribute may have: as given, and a bus id in the long form."""
    if not isinstance(value, str) or not value or len(value) > MAX_NAME:
        return []
    out = [value]
    if _BUS_ID.fullmatch(value):
        long = value if value.count(":") == 2 else f"0000:{value}"
        out += [long.lower(), long.upper()]
    return out


def _card(
    manufacturers: Iterable[str], value: Attribute, aliases: Aliases
) -> tuple[str, str] | None:
    """(manufacturer, card id) that one attribute value names, if exactly one card."""
    found = {
        (m, aliases[(m, spelling)])
        for m in manufacturers
        for spelling in _candidates(value)
        if (m, spelling) in aliases
    }
    return found.pop() if len(found) == 1 else None


def resolve(device: DraDevice, aliases: Aliases) -> Resolved | None:
    """The card or partition a slice's device is, from its attributes alone; None when no
    attribute names exactly one card the libraries enumerate."""
    known = DRIVERS.get(device.driver)
    manufacturers = [known] if known else sorted({m for m, _ in aliases})
    attrs = device.attributes
    kind = attrs.get(TYPE_ATTRIBUTE)
    profile = attrs.get(PROFILE_ATTRIBUTE)
    profile_text = profile if isinstance(profile, str) and profile else None
    parent = attrs.get(PARENT_ATTRIBUTE)
    partition = (isinstance(kind, str) and kind.lower() in PARTITION_TYPES) or parent is not None
    if partition:
        if parent is None:
            return None
        card = _card(manufacturers, parent, aliases)
        own_parent = isinstance(parent, str) and _OWN_UUID.get(known or "", _NOTHING).fullmatch(
            parent
        )
        if card is None and known and own_parent and isinstance(parent, str):
            card = (known, parent)
        own = attrs.get("uuid")
        if card is None or not isinstance(own, str) or not own or len(own) > MAX_NAME:
            return None
        return Resolved(card[0], card[1], own, profile_text)
    for name in ID_ATTRIBUTES:
        if name in attrs and (card := _card(manufacturers, attrs[name], aliases)) is not None:
            return Resolved(card[0], card[1], None, profile_text)
    own = attrs.get("uuid")
    if known and isinstance(own, str) and _OWN_UUID.get(known, _NOTHING).fullmatch(own):
        # A driver of a known manufacturer publishing the library's own UUID names the card
        # even before (or after) the library enumerates it: a card the library lost is then
        # the lost-card rule's, not an unmatched device.
        return Resolved(known, own, None, profile_text)
    return None


def _result(claim: ClaimStatus | None, device: ClaimDevice) -> AllocationResult | None:
    if claim is None:
        return None
    for r in claim.results[:MAX_CLAIM_RESULTS]:
        if r.key == device.key and r.share_id == device.share_id:
            return r
    return None


@dataclass(frozen=True, slots=True)
class PodClaims:
    """One pod's DRA allocations and the devices that gave none."""

    allocations: tuple[Allocation, ...] = ()
    unresolved: tuple[Unresolved, ...] = ()


def pod_allocations(
    claims: Iterable[ContainerClaim],
    inventory: DraInventory | None,
    aliases: Aliases,
    pod_uid: str = "",
) -> PodClaims:
    """One pod's allocations from the DRA claims its containers were given."""
    claims = list(claims)
    # A claim named by several containers of the pod is shared between them.
    holders: dict[tuple[str, str], set[str]] = {}
    for c in claims:
        holders.setdefault((c.claim_namespace, c.claim_name), set()).add(c.container)
    out: list[Allocation] = []
    missed: list[Unresolved] = []
    for c in claims:
        ref = (c.claim_namespace, c.claim_name)
        ref_text = f"{c.claim_namespace}/{c.claim_name}"
        status = inventory.claims.get(ref) if inventory is not None else None
        reserved = set(status.reserved_for) if status is not None else set()
        shared = len(holders[ref]) > 1 or len(reserved - {pod_uid}) > 0
        for d in c.devices:
            result = _result(status, d)
            if result is not None and result.admin_access:
                continue  # sees the device, holds none of it: not a grant
            if inventory is None or inventory.error is not None:
                missed.append(Unresolved(c.container, ref_text, d.key, NO_INVENTORY))
                continue
            if ref in inventory.pending_claims:
                missed.append(Unresolved(c.container, ref_text, d.key, NO_CLAIM))
                continue
            if d.key in inventory.duplicates:
                missed.append(Unresolved(c.container, ref_text, d.key, DUPLICATE))
                continue
            device = inventory.devices.get(d.key)
            if device is None:
                missed.append(Unresolved(c.container, ref_text, d.key, NO_SLICE))
                continue
            what = resolve(device, aliases)
            if what is None:
                missed.append(Unresolved(c.container, ref_text, d.key, UNMATCHED))
                continue
            held = partial(Allocation, c.container, what.manufacturer, what.card_id, None)
            if what.partition_id is not None:
                out.append(
                    held(
                        Mode.PARTITIONED,
                        partition_id=what.partition_id,
                        profile=what.profile,
                        source=SOURCE,
                    )
                )
            elif d.share_id is not None:
                consumed = result.consumed_capacity.get(MEMORY_CAPACITY) if result else None
                if consumed is None:
                    missed.append(Unresolved(c.container, ref_text, d.key, NO_CLAIM))
                else:
                    out.append(held(Mode.SLICED, memory_mib=consumed // MIB, source=SOURCE))
            else:
                out.append(held(Mode.SHARED if shared else Mode.EXCLUSIVE, source=SOURCE))
    return PodClaims(tuple(out), tuple(missed))


def tainted(inventory: DraInventory | None, aliases: Aliases) -> dict[tuple[str, str], str]:
    """(manufacturer, card id) -> the reason of the taints its DRA driver put on it (a taint on
    a partition marks its card): what marks the card unhealthy."""
    out: dict[tuple[str, str], str] = {}
    if inventory is None:
        return out
    for device in inventory.devices.values():
        if not device.taints:
            continue
        what = resolve(device, aliases)
        if what is None:
            continue
        reason = ",".join(sorted({t.reason for t in device.taints}))
        key = (what.manufacturer, what.card_id)
        out[key] = ",".join(sorted(set(filter(None, [out.get(key, ""), reason]))))
    return out


def kubelet_health(
    reports: Iterable[tuple[str, str]], inventory: DraInventory | None, aliases: Aliases
) -> dict[tuple[str, str], str]:
    """(manufacturer, card id) -> why the kubelet says a device on it is not healthy, from the
    pods' `allocatedResourcesStatus` (KEP-4680): a DRA device by `<driver>/<pool>/<device>`
    through the slices, a device plugin's by its id among the cards' aliases. An ID that names
    no card is left out (the kubelet's word on a device the agent cannot place)."""
    out: dict[tuple[str, str], str] = {}
    manufacturers = sorted({m for m, _ in aliases})
    for rid, health in reports:
        reason = f"kubelet:{health}"
        parts = rid.split("/")
        card: tuple[str, str] | None = None
        if len(parts) == 3 and inventory is not None:
            device = inventory.devices.get((parts[0], parts[1], parts[2]))
            what = resolve(device, aliases) if device is not None else None
            card = (what.manufacturer, what.card_id) if what is not None else None
        else:
            card = _card(manufacturers, rid, aliases)
        if card is not None:
            out[card] = ",".join(sorted(set(filter(None, [out.get(card, ""), reason]))))
    return out


def inventory_cards(
    inventory: DraInventory | None, manufacturer: str, aliases: Aliases
) -> frozenset[str] | None:
    """The cards of one manufacturer the node's slices offer (a partition offers its card), or
    None when the slices were not read: with the kubelet's allocatable devices, what the
    lost-card rule compares with what the library enumerates."""
    if inventory is None or inventory.error is not None:
        return None
    cards = set()
    for device in inventory.devices.values():
        what = resolve(device, aliases)
        if what is not None and what.manufacturer == manufacturer:
            cards.add(what.card_id)
    return frozenset(cards)
