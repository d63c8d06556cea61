"""Links and placement (R-X3) where a library answers one call per pair of cards and the NUMA
node comes from a call or from the card's PCI device in sysfs: what the hygon (ROCm SMI fork),
ascend (DCMI) and metax (MXSML) backends share.

The reader's half: `due()` says when a backend reads its node's topology again (once
TOPOLOGY_PERIOD has passed on its own monotonic clock, or at once when the cards answering
changed), and `sysfs_numa()` reads the kernel's `numa_node` of a PCI device under a sysfs root
that is a parameter. The pure half: `parse_pairs()` turns the recorded topology,
{"readAt", "devices": [...], "pairs": [{"a", "b", <C call>: answer}]}, into each card's links
(peer, kind) and NUMA node. A pair whose call failed, or whose answer the library's header does
not name as a link, is placed nowhere: absent, never a guessed "pcie". None of these libraries
counts the links between two cards, so no link here has a count.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable, Mapping
from pathlib import Path
from typing import Any

from devicemanager.model import as_int
from vendors._common import TOPOLOGY_PERIOD
from vendors._common import error_code as _error

MAX_NUMA_NODE = 1 << 12  # above any kernel's MAX_NUMNODES: a larger answer is no node
SYSFS_NUMA = "sysfsNumaNode"  # where a payload records the kernel's answer


def due(
    held: Mapping[str, Any] | None, cards: tuple[Any, ...], held_cards: Any, now: float
) -> bool:
    """Whether the topology is read this round: none is held, it is TOPOLOGY_PERIOD old, or the
    cards answering are not the ones it was read for."""
    if held is None or cards != held_cards:
        return True
    at = held.get("readAt")
    return not isinstance(at, int | float) or now - at >= TOPOLOGY_PERIOD


def sysfs_name(domain: int, bus: int, device: int, function: int) -> str:
    """The directory sysfs names a PCI device by: `0000:07:00.0`, lower case."""
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function:x}"


def bus_name(text: Any) -> str | None:
    """A PCI address as a library writes it (`0000:07:00.0`, `00000000:07:00.0`, any case) as
    sysfs names the device, or None where it is not one."""
    if not isinstance(text, str):
        return None
    try:
        domain, bus, rest = text.strip().split(":")
        device, function = rest.split(".")
        parts = int(domain, 16), int(bus, 16), int(device, 16), int(function, 16)
    except ValueError:
        return None
    if not (0 <= parts[0] <= 0xFFFF and 0 <= parts[1] <= 0xFF and 0 <= parts[2] <= 0x1F):
        return None
    return sysfs_name(*parts) if 0 <= parts[3] <= 7 else None


def sysfs_numa(sysfs: str | os.PathLike[str], name: str) -> Any:
    """What the kernel says of the PCI device's NUMA node (the text of its `numa_node`), or the
    failure to read it as a payload records one."""
    path = Path(sysfs) / "bus" / "pci" / "devices" / name / "numa_node"
    try:
        return path.read_text()
    except OSError as exc:
        return {"error": type(exc).__name__, "code": exc.errno or -1}


def numa_node(answer: Any) -> int | None:
    """A NUMA node from a library's number or the kernel's text; -1 ("no affinity"), a failure,
    a number past any node count, or anything else is no node."""
    if _error(answer) is not None:
        return None
    node = as_int(answer)
    if node is None and isinstance(answer, str):
        try:
            node = int(answer.strip())
        except ValueError:
            node = None
    return node if node is not None and 0 <= node < MAX_NUMA_NODE else None


def _entries(value: Any) -> list[Mapping[str, Any]]:
    return [e for e in value if isinstance(e, Mapping)] if isinstance(value, list) else []


def parse_pairs(
    payload: Mapping[str, Any],
    field: str,
    ident: Callable[[Any], Hashable | None],
    numa: Callable[[Mapping[str, Any]], int | None],
    kind: Callable[[Mapping[str, Any]], str | None],
) -> dict[Hashable, tuple[tuple[tuple[Hashable, str], ...], int | None]]:
    """Per card, as `ident` names it from a device entry's `field` and from a pair's `a` and `b`,
    its links to its peers ((peer, kind), sorted) and its NUMA node; empty where the payload has
    no topology (a recording made before it was read). `numa` reads a device entry's node,
    `kind` a pair's link kind (None: the pair is not placed)."""
    topology = payload.get("topology")
    if not isinstance(topology, Mapping):
        return {}
    out: dict[Hashable, tuple[set[tuple[Hashable, str]], int | None]] = {}
    for entry in _entries(topology.get("devices")):
        me = ident(entry.get(field))
        if me is not None and me not in out:
            out[me] = (set(), numa(entry))
    for pair in _entries(topology.get("pairs")):
        a, b = ident(pair.get("a")), ident(pair.get("b"))
        link = kind(pair)
        if a is None or b is None or a == b or a not in out or b not in out or link is None:
            continue
        out[a][0].add((b, link))
        out[b][0].add((a, link))
    return {me: (tuple(sorted(links, key=str)), node) for me, (links, node) in out.items()}


def index_of(value: Any) -> int | None:
    """A card named by a non-negative enumeration index."""
    index = as_int(value)
    return index if index is not None and index >= 0 else None
