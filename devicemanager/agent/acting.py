"""The round's output that acts (R-X11): each round's unhealthy cards into Kubernetes Events on
the Node and on each pod holding a grant on a card, and the node condition where asked for.

It runs on the monitor's thread behind the `_hand` boundary and never waits on the API server:
it turns the round's notices (round/health.py) into notes and hands them to the writer
(kube/events.py), whose own thread writes them.
"""

from __future__ import annotations

from devicemanager.figures.actions import Action
from devicemanager.kube.events import EventWriter, NodeCondition, Note, Regarding
from devicemanager.round import health
from devicemanager.round.steps import Round, UnhealthyCard


def notes(node: str, notice: health.Notice) -> list[Note]:
    """One note on the Node and one on each holder pod, each naming the card, its reason and
    what to do."""
    card = notice.card
    warning = notice.turned == health.UNHEALTHY
    # A recovered card asks for nothing more; its note says what it was.
    action = card.action if warning else Action.NONE.value
    text, series = notice.text(), notice.series
    out = [Note(Regarding("Node", node), notice.turned, action, text, warning, series)]
    out += [
        Note(
            Regarding("Pod", pod.name, pod.namespace, pod.uid),
            notice.turned,
            action,
            text,
            warning,
            series,
        )
        for pod in card.pods
        if pod.name and pod.namespace  # a pod the index no longer knows cannot be named
    ]
    return out


class Acting:
    """The output: what changed since the round before, to the writer."""

    def __init__(
        self, writer: EventWriter, node: str, *, events: bool = True, condition: bool = False
    ) -> None:
        self.writer, self.node = writer, node
        self.events, self.condition = events, condition
        self._before: tuple[UnhealthyCard, ...] = ()

    def __call__(self, done: Round) -> None:
        said = health.notices(self._before, done.unhealthy)
        self._before = done.unhealthy
        if self.events:
            self.writer.offer(n for notice in said for n in notes(self.node, notice))
        if self.condition:
            wanted = health.condition(done.unhealthy)
            self.writer.want(NodeCondition(wanted.healthy, wanted.reason, wanted.message))
