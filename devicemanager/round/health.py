"""What a round's unhealthy cards say to the cluster (R-X11): a notice per card that is
unhealthy (new or still so) and per card that recovered since the round before, and the node
condition `AcceleratorsHealthy`. Pure: the shell (agent/acting.py) turns the notices into
Kubernetes Events, which kube/events.py writes and deduplicates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from devicemanager.round.steps import UnhealthyCard

UNHEALTHY = "AcceleratorUnhealthy"
RECOVERED = "AcceleratorRecovered"
CONDITION = "AcceleratorsHealthy"
MAX_CONDITION_CARDS = 16  # a condition's message names this many cards, then a count


@dataclass(frozen=True, slots=True)
class Notice:
    """One card's word this round: `UNHEALTHY` (each round it stays so: a series grows) or
    `RECOVERED` (the round it is no longer unhealthy), with the card as it was last seen
    unhealthy: its reason, action and holders."""

    turned: str
    card: UnhealthyCard

    @property
    def series(self) -> str:
        """What makes two notices one Event: the card and its fault (a new reason is a new
        Event, the same fault seen again grows the same one)."""
        c = self.card
        return f"{c.manufacturer}/{c.card_id}/{c.reason or ''}"

    def text(self) -> str:
        c = self.card
        head = f"{c.manufacturer} card {c.index} ({c.card_id})"
        if self.turned == RECOVERED:
            return f"{head} is healthy again (it was unhealthy: {c.reason or 'no reason'})"
        return f"{head} is unhealthy: {c.reason or 'no reason'}; action: {c.action}"


def _key(card: UnhealthyCard) -> tuple[str, str]:
    return card.manufacturer, card.card_id


def notices(before: Sequence[UnhealthyCard], now: Sequence[UnhealthyCard]) -> tuple[Notice, ...]:
    """Each card unhealthy now (an Event, or a series that grows), then each card unhealthy
    before and not now (recovered, named with the holders it had)."""
    current = {_key(c) for c in now}
    out = [Notice(UNHEALTHY, c) for c in now]
    out += [Notice(RECOVERED, c) for c in before if _key(c) not in current]
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Condition:
    """The node condition `AcceleratorsHealthy`: True, or False naming the unhealthy cards."""

    healthy: bool
    reason: str
    message: str


def condition(now: Sequence[UnhealthyCard]) -> Condition:
    if not now:
        return Condition(True, "AcceleratorsHealthy", "every accelerator of the node is healthy")
    named = [
        f"{c.manufacturer} {c.index} {c.card_id}: {c.reason or 'no reason'} ({c.action})"
        for c in now[:MAX_CONDITION_CARDS]
    ]
    more = len(now) - len(named)
    tail = f"; and {more} more" if more > 0 else ""
    return Condition(False, "AcceleratorsUnhealthy", "; ".join(named) + tail)
