"""Links and placement through NVML (R-X3): how each pair of cards is joined and the NUMA node
each card is attached to, read at most once a minute and never on the scrape path.

`read_topology()` asks NVML and writes down what each entry point answered, as the rest of the
NVML payload does; `parse_topology()` is pure. Per card: its PCI bus id
(`nvmlDeviceGetPciInfo_v3`), the NUMA node it is attached to (the PCI device's `numa_node` in
sysfs, under a root that is a parameter; -1 is none), and per NVLink whether it is active
(`nvmlDeviceGetNvLinkState`), the PCI bus id of what it reaches
(`nvmlDeviceGetNvLinkRemotePciInfo_v2`) and whether that is a GPU or an NVSwitch
(`nvmlDeviceGetNvLinkRemoteDeviceType`). Per unordered pair: the PCIe path between them
(`nvmlDeviceGetTopologyCommonAncestor`).

A pair is `nvlink` with the number of this card's active links whose remote end is the peer's
bus id, `nvswitch` when both cards have active links into an NVSwitch (the count is this card's),
and has one PCIe kind from the common ancestor (`pcie_board`, `pcie_switch`, `pcie_switches`,
`pcie_host_bridge`, `numa_node`, `system`, the levels `nvidia-smi topo -m` shows as PIX, PXB,
PHB, NODE, SYS). A pair NVML does not place (the call failed, a level the header does not
define) has no PCIe kind: absent, never guessed as "PCIe". Facts: nvml.h (nvidia-nvml-dev).

Links are asked one by one up to NVML_NVLINK_MAX_LINKS, and an error on one link (NOT_SUPPORTED,
INVALID_ARGUMENT) skips that link, not the rest, as NVIDIA's own enumeration (go-gpuallocator's
`getAllNvLinkRemotePciInfo`) does: a card whose link 2 of six fails still has five (issue 43).

`nvmlDeviceGetNumaNodeId` is recorded, never read as the card's node: nvml.h says it "only
applies to platforms where the GPUs are NUMA nodes", where (GH200, GB200) it names the GPU
memory's own node, a different fact; on x86 it answers NOT_SUPPORTED (the recorded H200 did,
beside a sysfs `numa_node` of -1 and `nvidia-smi topo -m`'s "GPU NUMA ID N/A"). The node the
card is attached to is the kernel's, from sysfs, on every platform (issue 43).

HGML (T-Head) answers the same calls under its prefix with its own interconnect in place of
NVLink: `hgmlDeviceGetIcnLinkState`, `…IcnLinkRemotePciInfo_v2` and `…IcnLinkRemoteDeviceType`
(HGML_ICNLINK_DEVICE_TYPE_SWITCH is 2, as NVML's), whose links are `icnlink` and, through a
switch, `icnswitch`; the common ancestor's levels are NVML's. hgml.h declares
`hgmlDeviceGetNumaNodeId` too; as NVML's it would name the card's own memory node where the card
is one, so it is not asked: the card's PCI device's `numa_node` in sysfs answers. Facts: the
public hgml.h and GPUStack's pyhgml (the project's reference notes, §7).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devicemanager.model import CardLink, as_int
from vendors._common import error_code as _error

# nvmlGpuTopologyLevel_t, as `nvidia-smi topo -m` names the levels.
ANCESTOR_LINKS: Mapping[int, str] = {
    0: "pcie_board",  # NVML_TOPOLOGY_INTERNAL: the same board
    10: "pcie_switch",  # NVML_TOPOLOGY_SINGLE: one PCIe switch (PIX)
    20: "pcie_switches",  # NVML_TOPOLOGY_MULTIPLE: several switches, no host bridge (PXB)
    30: "pcie_host_bridge",  # NVML_TOPOLOGY_HOSTBRIDGE: the same host bridge (PHB)
    40: "numa_node",  # NVML_TOPOLOGY_NODE: host bridges of one NUMA node (NODE)
    50: "system",  # NVML_TOPOLOGY_SYSTEM: across NUMA nodes, the SMP interconnect (SYS)
}
NVLINK_ACTIVE = 1  # NVML_FEATURE_ENABLED
NVLINK_DEVICE_TYPE_SWITCH = 2  # NVML_NVLINK_DEVICE_TYPE_SWITCH
MAX_NVLINKS = 36  # NVML_NVLINK_MAX_LINKS (nvml.h of CUDA 13); every one is asked
MAX_NUMA_NODE = 1 << 12  # above any kernel's MAX_NUMNODES: a larger answer is no node


@dataclass(frozen=True, slots=True)
class Interconnect:
    """How a library of the NVML family names its card-to-card links: the infix of its link
    calls, the kind of a direct link and of one through a switch, and whether its NUMA-node
    call (the GPU memory's own node, recorded only) is asked."""

    calls: str
    direct: str
    switched: str
    numa_call: bool


INTERCONNECTS: Mapping[str, Interconnect] = {
    "nvml": Interconnect("NvLink", "nvlink", "nvswitch", numa_call=True),
    "hgml": Interconnect("IcnLink", "icnlink", "icnswitch", numa_call=False),
}


def bus_id(value: Any) -> tuple[int, int, int, int] | None:
    """A PCI bus id (`00000000:07:00.0`, or the legacy `0000:07:00.0`, any case) as (domain,
    bus, device, function), so NVML's two spellings and sysfs's compare equal."""
    if not isinstance(value, str):
        return None
    try:
        domain, bus, rest = value.strip().split(":")
        device, function = rest.split(".")
        return int(domain, 16), int(bus, 16), int(device, 16), int(function, 16)
    except ValueError:
        return None


def sysfs_name(value: Any) -> str | None:
    """The directory sysfs names the PCI device by: `0000:07:00.0`, lower case."""
    parts = bus_id(value)
    if parts is None:
        return None
    domain, bus, device, function = parts
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function:x}"


# -- the reader -------------------------------------------------------------------------------


def _pci(answer: Any) -> Any:
    if _error(answer) is not None:
        return answer
    raw = answer.busId
    return {"busId": raw.decode() if isinstance(raw, bytes) else str(raw)}


def read_topology(
    call: Callable[..., Any],
    key: Callable[[str], str],
    count: int,
    sysfs: Path,
    at: float,
    links: Interconnect = INTERCONNECTS["nvml"],
) -> dict[str, Any]:
    """What NVML answered about the node's links and placement, keyed by entry point; `call`
    answers `<prefix><name>(*args)` or its failure as the payload records it; `links` names the
    library's link calls."""
    state_call = f"DeviceGet{links.calls}State"
    remote_call = f"DeviceGet{links.calls}RemotePciInfo"
    type_call = f"DeviceGet{links.calls}RemoteDeviceType"
    cards: list[tuple[str, Any]] = []
    devices: list[dict[str, Any]] = []
    for index in range(count):
        handle = call("DeviceGetHandleByIndex", index)
        if _error(handle) is not None:
            continue
        uuid = call("DeviceGetUUID", handle)
        if not isinstance(uuid, str):
            continue
        cards.append((uuid, handle))
        pci = _pci(call("DeviceGetPciInfo_v3", handle))
        entry: dict[str, Any] = {"uuid": uuid, key("DeviceGetPciInfo_v3"): pci}
        if links.numa_call:
            # Recorded as what it is (the GPU memory's own node on a coherent platform), not
            # read as the node the card is attached to.
            entry[key("DeviceGetNumaNodeId")] = call("DeviceGetNumaNodeId", handle)
        name = sysfs_name(pci.get("busId")) if isinstance(pci, Mapping) else None
        if name is not None:
            # The node the card is attached to: the kernel's answer for its PCI device.
            path = sysfs / "bus" / "pci" / "devices" / name / "numa_node"
            try:
                entry["sysfsNumaNode"] = path.read_text()
            except OSError as exc:
                entry["sysfsNumaNode"] = {"error": type(exc).__name__, "code": exc.errno or -1}
        found: list[dict[str, Any]] = []
        failed: dict[str, dict[str, Any]] = {}
        for link in range(MAX_NVLINKS):
            state = call(state_call, handle, link)
            if _error(state) is not None:
                # NOT_SUPPORTED (no NVLink, or this link), INVALID_ARGUMENT (past the last):
                # the next link is asked all the same, as go-gpuallocator does.
                group = failed.setdefault(repr(sorted(state.items())), {**state, "links": []})
                group["links"].append(link)
                continue
            one: dict[str, Any] = {"link": link, key(state_call): state}
            if state == NVLINK_ACTIVE:
                # pynvml's nvmlDeviceGetNvLinkRemotePciInfo (and our HGML binding's) calls the
                # C entry point's _v2.
                one[key(f"{remote_call}_v2")] = _pci(call(remote_call, handle, link))
                one[key(type_call)] = call(type_call, handle, link)
            found.append(one)
        entry["nvlinks"] = found
        if failed:
            entry["nvlinkErrors"] = list(failed.values())  # each error with the links it answered
        devices.append(entry)
    pairs = [
        {
            "a": a,
            "b": b,
            key("DeviceGetTopologyCommonAncestor"): call("DeviceGetTopologyCommonAncestor", ha, hb),
        }
        for i, (a, ha) in enumerate(cards)
        for b, hb in cards[i + 1 :]
    ]
    return {"readAt": at, "devices": devices, "pairs": pairs}


# -- the pure parse ---------------------------------------------------------------------------


def _numa(entry: Mapping[str, Any]) -> int | None:
    """The NUMA node the card is attached to: its PCI function's `numa_node` in sysfs. The
    library's NumaNodeId answer (the GPU memory's own node, where the GPU is a NUMA node) is
    another fact and never stands in for it."""
    node = None
    if isinstance(entry.get("sysfsNumaNode"), str):
        try:
            node = int(entry["sysfsNumaNode"].strip())
        except ValueError:
            node = None
    # -1 is the kernel's "no affinity"; a number past any node count is no node either.
    return node if node is not None and 0 <= node < MAX_NUMA_NODE else None


def parse_bus_ids(payload: Mapping[str, Any], p: str) -> dict[str, str]:
    """Per card UUID, its PCI bus id as sysfs names the function (`0000:07:00.0`), from the
    topology's `…DeviceGetPciInfo_v3`: where the lost-card rule finds the card on the bus."""
    topology = payload.get("topology")
    raw = topology.get("devices") if isinstance(topology, Mapping) else None
    out: dict[str, str] = {}
    for e in raw if isinstance(raw, list) else ():
        pci = e.get(f"{p}DeviceGetPciInfo_v3") if isinstance(e, Mapping) else None
        name = sysfs_name(pci.get("busId")) if isinstance(pci, Mapping) else None
        if name is not None and isinstance(e.get("uuid"), str):
            out[e["uuid"]] = name
    return out


def parse_topology(
    payload: Mapping[str, Any], p: str
) -> dict[str, tuple[tuple[CardLink, ...], int | None]]:
    """Per card UUID, its links to its peers (sorted by peer, then kind) and its NUMA node; empty
    where the payload has no topology (a recording made before it was read). The link calls
    and kinds are the prefix's library's (INTERCONNECTS)."""
    kinds = INTERCONNECTS.get(p, INTERCONNECTS["nvml"])
    topology = payload.get("topology")
    if not isinstance(topology, Mapping):
        return {}
    raw = topology.get("devices")
    entries = [e for e in (raw if isinstance(raw, list) else ()) if isinstance(e, Mapping)]
    entries = [e for e in entries if isinstance(e.get("uuid"), str)]
    by_bus: dict[tuple[int, int, int, int], list[str]] = {}
    for e in entries:
        pci = e.get(f"{p}DeviceGetPciInfo_v3")
        bus = bus_id(pci.get("busId")) if isinstance(pci, Mapping) else None
        if bus is not None:
            by_bus.setdefault(bus, []).append(e["uuid"])
    direct: dict[str, dict[str, int]] = {}
    switched: dict[str, int] = {}
    for e in entries:
        links = e.get("nvlinks")
        for link in links if isinstance(links, list) else ():
            if not isinstance(link, Mapping) or link.get(f"{p}DeviceGet{kinds.calls}State") != 1:
                continue
            remote = link.get(f"{p}DeviceGet{kinds.calls}RemotePciInfo_v2")
            kind = link.get(f"{p}DeviceGet{kinds.calls}RemoteDeviceType")
            if _error(remote) is not None or not isinstance(remote, Mapping):
                continue  # an active link whose far end NVML did not name: not counted
            if kind == NVLINK_DEVICE_TYPE_SWITCH:
                switched[e["uuid"]] = switched.get(e["uuid"], 0) + 1
                continue
            peers = by_bus.get(bus_id(remote.get("busId")) or (-1, -1, -1, -1), [])
            if len(peers) == 1 and peers[0] != e["uuid"]:  # a GPU of this node, by its bus id
                mine = direct.setdefault(e["uuid"], {})
                mine[peers[0]] = mine.get(peers[0], 0) + 1
    ancestors: dict[tuple[str, str], str] = {}
    pairs = topology.get("pairs")
    for pair in pairs if isinstance(pairs, list) else ():
        if not isinstance(pair, Mapping):
            continue
        a, b = pair.get("a"), pair.get("b")
        level = as_int(pair.get(f"{p}DeviceGetTopologyCommonAncestor"))
        if (
            isinstance(a, str)
            and isinstance(b, str)
            and a != b
            and level is not None
            and level in ANCESTOR_LINKS
        ):
            ancestors[(a, b)] = ancestors[(b, a)] = ANCESTOR_LINKS[level]
    out: dict[str, tuple[tuple[CardLink, ...], int | None]] = {}
    uuids = [e["uuid"] for e in entries]
    for e in entries:
        me = e["uuid"]
        found: list[CardLink] = []
        for peer in sorted(set(uuids) - {me}):
            if (n := direct.get(me, {}).get(peer, 0)) > 0:
                found.append(CardLink(peer, kinds.direct, n))
            elif switched.get(me, 0) > 0 and switched.get(peer, 0) > 0:
                found.append(CardLink(peer, kinds.switched, switched[me]))
            if (me, peer) in ancestors:
                found.append(CardLink(peer, ancestors[(me, peer)]))
        out[me] = (tuple(found), _numa(e))
    return out
