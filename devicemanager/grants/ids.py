"""The one alias map: which card or partition each id the node's allocators write names. Pure.

Allocators record a card by whatever names it to them: a device plugin by its index or PCI bus
id, HAMi by a serial, a DRA driver by an attribute, a MIG partition by its own UUID. Both views
below are learned together from one round's readings and handed to the next round as one
value, so every step of a round sees one generation of it (round/steps.py says which).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from types import MappingProxyType

from devicemanager.grants.deviceplugins import Aliases, aliases_of
from devicemanager.model import Identities, VendorReading

# Aliases kept across rounds (a lost card is still named by its index) up to this many; past it
# the map starts over from this round's readings.
MAX_ALIASES = 4096


def _empty() -> Aliases:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Ids:
    """`identities`: alias -> canonical id, per manufacturer, from each one's last reading (a
    grant's card and partition named as the library names them). `cards`: (manufacturer, an
    allocator's id) -> the card it is on (indexes, aliases, a partition's ids to its parent),
    kept across rounds."""

    identities: Identities = field(default_factory=Identities)
    cards: Aliases = field(default_factory=_empty)

    def canonical(self, manufacturer: str, device_id: str) -> str:
        return self.identities.canonical(manufacturer, device_id)

    def learned(self, readings: Iterable[VendorReading]) -> Ids:
        """These ids with what this round's readings enumerated: each manufacturer's identities
        replaced by its reading's, and the card aliases grown (the same value when nothing is
        new, so a caller can tell whether the map changed by identity)."""
        readings = list(readings)
        identities = self.identities
        for reading in readings:
            identities = identities.updated(
                reading.manufacturer, [*reading.cards, *reading.partitions]
            )
        learned = aliases_of(readings)
        cards = self.cards
        if not learned.items() <= self.cards.items():
            grown = learned if len(self.cards) > MAX_ALIASES else {**self.cards, **learned}
            cards = MappingProxyType(grown)
        if cards is self.cards and identities == self.identities:
            return self
        return Ids(identities, cards)
