"""The PCI bus's accelerators (R-X11, issue 42): a card that falls off the bus, or that the
library stops seeing, is found without a device plugin, a ResourceSlice or an allocation
naming it, by comparing what the kernel lists with what the library enumerates.

The reader (`read_bus`) lists `<root>/bus/pci/devices/*/{vendor,class}` under a sysfs root that
is a parameter, once a minute (the shell's clock decides). A function is an accelerator of a
manufacturer by its PCI vendor id and class together (`CLASSES`): the same vendor id also names
a manufacturer's CPU functions, NICs or a BMC's VGA (Hygon's root complex, Huawei's iBMC VGA),
which the class keeps out. A function given away on purpose is not the library's to see: one
bound to `vfio-pci` or `pci-stub` (passed through to a VM) and an SR-IOV virtual function (it
has a `physfn`) are left out.

The comparison (`lost`) is pure. Each card the library enumerates is named on the bus by the
PCI bus ids it carries (an alias such as `0000:05:00.0`, an address `bdf`, or the bus id the
backend read, `VendorReading.bus_ids`). A bus function no enumerated card names is lost, named
by its bus id; so is a card seen earlier on a bus id that is now gone from both the bus and the
library. Where the library names no bus id for some of its cards, the functions it leaves
unnamed cannot be told apart from those cards: no function is called lost by count alone.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from devicemanager.model import Card, VendorReading

# PCI vendor ids (the kernel's pci.ids) -> the manufacturer whose library enumerates them, and
# the device classes (the class code's upper 16 bits) its accelerators report: display
# controllers (VGA 0x0300, 3D 0x0302, other 0x0380) and processing accelerators (0x1200).
# Huawei's Ascend NPUs are processing accelerators only (its servers' iBMC VGA is 19e5 0x0300).
# MetaX is not here: its PCI vendor id is not in the kernel's list nor in the project's notes.
DISPLAY = frozenset({0x0300, 0x0302, 0x0380})
ACCELERATOR = 0x1200
CLASSES: Mapping[int, tuple[str, frozenset[int]]] = {
    0x10DE: ("nvidia", DISPLAY),
    0x1002: ("amd", DISPLAY | {ACCELERATOR}),
    0x19E5: ("ascend", frozenset({ACCELERATOR})),
    0x1D94: ("hygon", DISPLAY | {ACCELERATOR}),
    0x1DED: ("thead", DISPLAY | {ACCELERATOR}),
}
GIVEN_AWAY = frozenset({"vfio-pci", "pci-stub"})  # drivers that hand a function to a VM
MAX_FUNCTIONS = 4096  # PCI functions read per scan: a node has a few hundred
LOST = "lost"  # the unhealthy reason's kind: `lost:<bus id>`
SYSFS_NAME = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
_BUS = re.compile(r"(?:([0-9a-fA-F]{4,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])")


@dataclass(frozen=True, slots=True)
class BusScan:
    """One reading of the bus: the accelerator functions of each manufacturer by bus id, or
    why the bus could not be read (then nothing is compared)."""

    functions: Mapping[str, frozenset[str]]
    error: str | None = None

    def of(self, manufacturer: str) -> frozenset[str] | None:
        return None if self.error is not None else self.functions.get(manufacturer, frozenset())


def manufacturer_of(vendor: int, device_class: int) -> str | None:
    """The manufacturer whose accelerator a function is, by its vendor id and class."""
    known = CLASSES.get(vendor)
    return known[0] if known is not None and device_class in known[1] else None


def sysfs_bus_id(text: object) -> str | None:
    """A PCI bus id as sysfs names the function (`0000:07:00.0`, lower case) from any of the
    spellings libraries use (NVML's 8-digit domain, no domain, upper case); None otherwise."""
    if not isinstance(text, str):
        return None
    m = _BUS.fullmatch(text.strip())
    if m is None or int(m.group(1) or "0", 16) > 0xFFFF:
        return None
    domain = int(m.group(1) or "0", 16)
    return f"{domain:04x}:{m.group(2)}:{m.group(3)}.{m.group(4)}".lower()


def _hex(path: Path) -> int | None:
    try:
        return int(path.read_text().strip(), 16)
    except (OSError, ValueError):
        return None


def read_bus(root: str | os.PathLike[str]) -> BusScan:
    """The accelerator functions under `<root>/bus/pci/devices` (the shell's half: I/O)."""
    devices = Path(root) / "bus" / "pci" / "devices"
    try:
        names = sorted(os.listdir(devices))[:MAX_FUNCTIONS]
    except OSError as exc:
        return BusScan({}, f"{devices}: {exc.strerror or exc}")
    out: dict[str, set[str]] = {}
    for name in names:
        if not SYSFS_NAME.fullmatch(name):
            continue
        function = devices / name
        vendor, device_class = _hex(function / "vendor"), _hex(function / "class")
        if vendor is None or device_class is None:
            continue
        manufacturer = manufacturer_of(vendor, device_class >> 8)
        if manufacturer is None or (function / "physfn").exists():
            continue
        try:
            driver = os.path.basename(os.readlink(function / "driver"))
        except OSError:
            driver = ""  # no driver bound: a card that fell off often is so
        if driver not in GIVEN_AWAY:
            out.setdefault(manufacturer, set()).add(name)
    return BusScan({m: frozenset(ids) for m, ids in out.items()})


def card_bus_ids(card: Card, named: Mapping[str, str]) -> set[str]:
    """The bus ids a card carries: its ids and aliases that are bus ids, an address `bdf`, and
    the one its backend read (`named`, card id -> bus id)."""
    found = {b for b in map(sysfs_bus_id, card.ids) if b is not None}
    found |= {b for k, v in card.address if k == "bdf" and (b := sysfs_bus_id(v)) is not None}
    if (b := sysfs_bus_id(named.get(card.id))) is not None:
        found.add(b)
    return found


def seen_on_bus(reading: VendorReading) -> dict[str, str]:
    """bus id -> card id for the cards the library enumerates, where it names their bus id; a
    bus id two cards carry (an AMD card and its partitions) names the card that has no parent."""
    out: dict[str, str] = {}
    for card in sorted(reading.cards, key=lambda c: c.parent_id is None):
        for bus in card_bus_ids(card, reading.bus_ids):
            out[bus] = card.id
    return out


def lost(
    reading: VendorReading, on_bus: frozenset[str] | None, remembered: Mapping[str, str]
) -> dict[str, str | None]:
    """bus id -> the card lost there (its id where the library or an earlier round named it,
    else None): a function on the bus no enumerated card names, and a card seen earlier on a
    bus id now gone from the bus and the library. `remembered`: bus id -> card id of earlier
    rounds. Nothing when the bus was not read."""
    if on_bus is None:
        return {}
    named = seen_on_bus(reading)
    present = {c.id for c in reading.cards}
    out: dict[str, str | None] = {}
    unnamed = [
        c for c in reading.cards if c.parent_id is None and not card_bus_ids(c, reading.bus_ids)
    ]
    if not unnamed:  # every card says where it is: a function none names is none of them
        for bus in sorted(on_bus - named.keys()):
            card = remembered.get(bus)
            out[bus] = card if card is not None and card not in present else None
    for bus, card in sorted(remembered.items()):
        if bus not in on_bus and bus not in named and card not in present:
            out[bus] = card
    return out


def lost_reason(bus: str) -> str:
    return f"{LOST}:{bus}"


def with_lost(
    reading: VendorReading,
    lost_here: Mapping[str, str | None],
    known: Mapping[str, Card],
    supersedes: frozenset[str] = frozenset(),
) -> VendorReading:
    """The reading with each lost card unhealthy, reason `lost:<bus id>`: a card already in it
    takes that reason beside its own, less those it `supersedes` (the lost-card rule's
    `not_enumerated`, which this names better); one not in it is added, named by its id where
    an earlier round knew it (as last seen), else by its bus id, index -1 (unknown)."""
    if not lost_here:
        return reading
    by_id = {c.id: c for c in reading.cards}
    added: list[Card] = []
    for bus, card_id in sorted(lost_here.items()):
        why = lost_reason(bus)
        card = by_id.get(card_id) if card_id is not None else None
        if card is not None:
            own = card.unhealthy_reason if card.unhealthy else None
            keep = [r for r in (own or "").split(",") if r and r not in supersedes]
            by_id[card.id] = replace(card, unhealthy=True, unhealthy_reason=",".join([*keep, why]))
            continue
        before = known.get(card_id) if card_id is not None else None
        added.append(
            Card(
                id=card_id or bus,
                index=before.index if before is not None else -1,
                name=before.name if before is not None else None,
                memory_total_mib=before.memory_total_mib if before is not None else None,
                unhealthy=True,
                unhealthy_reason=why,
            )
        )
    cards = tuple(by_id[c.id] for c in reading.cards) + tuple(added)
    return replace(reading, cards=cards)


def remembered_after(
    before: Mapping[str, str], reading: VendorReading, bound: int
) -> Mapping[str, str]:
    """bus id -> card id as of this round for one manufacturer: what earlier rounds named,
    with this round's; past `bound` (a library inventing ids) only what it names now."""
    now = seen_on_bus(reading)
    if now.items() <= before.items():
        return before
    out = {**before, **now}
    return out if len(out) <= bound else now
