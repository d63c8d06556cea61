"""The agent's figures against the tool's, figure by figure, with the tolerance each allows.

Counts and MiB are exact: both sides read the same counter or the same allocation, and a
difference of one is a bug. Power, the SM and graphics clocks, temperature and utilization move
between the agent's read and the tool's (a card at its power cap moves its clock by tens of MHz
from one second to the next), so each is held within a stated window, the same reasoning as
tests/test_recorded_h200.py, where the window was measured on a real H200.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from devicemanager.crosscheck.agent import AgentCard, AgentProcess, normal_key, whole_mib
from devicemanager.crosscheck.model import Check, Report, ToolCard, ToolReading, Value, Verdict


@dataclass(frozen=True, slots=True)
class Tolerance:
    """`relative` is a share of the tool's value, `absolute` a number in the figure's unit;
    a figure agrees when the difference is within either (0 and 0: exact)."""

    relative: float = 0.0
    absolute: float = 0.0
    unit: str = ""

    def allows(self, agent: Value, tool: Value) -> bool:
        if isinstance(agent, bool) or isinstance(tool, bool):
            return agent == tool
        difference = abs(float(agent) - float(tool))
        return difference <= max(self.relative * abs(float(tool)), self.absolute) + 1e-9

    def describe(self) -> str:
        if not self.relative and not self.absolute:
            return "exact"
        parts = []
        if self.relative:
            parts.append(f"±{self.relative:.0%}")
        if self.absolute:
            parts.append(f"±{self.absolute:g}{self.unit}")
        return " or ".join(parts)


EXACT = Tolerance()
# The windows (why each is what it is: docs/vendors.md, "Crosscheck").
WINDOWS: Mapping[str, Tolerance] = {
    "power_watts": Tolerance(relative=0.02, absolute=1.0, unit=" W"),
    "clock.sm_mhz": Tolerance(relative=0.05),
    "clock.graphics_mhz": Tolerance(relative=0.05),
    "temperature": Tolerance(absolute=1.0, unit=" °C"),
    "utilization_percent": Tolerance(absolute=10.0, unit=" points"),
}


def tolerance(figure: str) -> Tolerance:
    return WINDOWS.get(figure, EXACT)


def _match(tool: ToolCard, cards: Mapping[str, AgentCard], taken: set[str]) -> AgentCard | None:
    """The agent's card the tool's card names, each taken once (amdsmi numbers a partitioned
    card and its first partition alike: the tool lists them in the agent's order)."""
    for key in tool.keys:
        for card in cards.values():
            if card.id not in taken and normal_key(key) in card.keys:
                return card
    return None


def _figure(subject: str, figure: str, agent: AgentCard, tool: ToolCard, name: str) -> Check:
    if figure in tool.unstated:
        return Check(subject, figure, Verdict.NOT_COMPARED, why=tool.unstated[figure])
    mine, theirs = agent.figures.get(figure), tool.figures.get(figure)
    if mine is None:
        why = agent.why_absent.get(figure, "the agent does not publish it for this card")
        return Check(subject, figure, Verdict.NOT_COMPARED, tool=theirs, why=why)
    if theirs is None:
        return Check(
            subject, figure, Verdict.NOT_COMPARED, agent=mine, why=f"{name} does not state it"
        )
    window = tolerance(figure)
    verdict = Verdict.AGREE if window.allows(mine, theirs) else Verdict.DISAGREE
    return Check(subject, figure, verdict, mine, theirs, window.describe())


# The snapshot names no process: no PID leaves the node (R-S).
NO_PIDS = "the agent's snapshot names no process (no PID leaves the node)"


def _processes(
    reading: ToolReading, matched: Mapping[str, str], processes: tuple[AgentProcess, ...] | None
) -> list[Check]:
    if processes is None:
        return [Check("processes", "memory_mib", Verdict.NOT_COMPARED, why=NO_PIDS)]
    if reading.processes is None:
        note = reading.process_note or f"{reading.tool}'s process list was not read"
        return [Check("processes", "memory_mib", Verdict.NOT_COMPARED, why=note)]
    out: list[Check] = []
    mine = {(p.card, p.pid): p for p in processes}
    seen: set[tuple[str, int]] = set()
    window = "exact, in whole MiB"
    for row in reading.processes:
        card = matched.get(normal_key(row.card))
        subject = f"pid {row.pid} on {card or row.card} ({row.source})"
        if card is None:
            why = f"{reading.tool} lists it on a card the agent does not read"
            out.append(Check(subject, "memory_mib", Verdict.DISAGREE, tool=row.memory_mib, why=why))
            continue
        seen.add((card, row.pid))
        agent = mine.get((card, row.pid))
        if agent is None:
            why = f"{reading.tool} lists this process, the agent does not"
            out.append(Check(subject, "memory_mib", Verdict.DISAGREE, tool=row.memory_mib, why=why))
        elif agent.memory_bytes is None or row.memory_mib is None:
            side = "the agent" if agent.memory_bytes is None else reading.tool
            why = f"{side} states no memory for it"
            out.append(Check(subject, "memory_mib", Verdict.NOT_COMPARED, why=why))
        else:
            ours = whole_mib(agent.memory_bytes)
            verdict = Verdict.AGREE if ours == row.memory_mib else Verdict.DISAGREE
            out.append(Check(subject, "memory_mib", verdict, ours, row.memory_mib, window))
    for (card, pid), agent in sorted(mine.items()):
        if (card, pid) not in seen and card in matched.values():
            subject = f"pid {pid} on {card}"
            held = None if agent.memory_bytes is None else whole_mib(agent.memory_bytes)
            why = f"the agent reads this process, {reading.tool} does not list it"
            out.append(Check(subject, "memory_mib", Verdict.DISAGREE, agent=held, why=why))
    return out


def compare(
    manufacturer: str,
    reading: ToolReading,
    cards: tuple[AgentCard, ...],
    processes: tuple[AgentProcess, ...] | None,
    notes: tuple[str, ...] = (),
) -> Report:
    """Every figure either side states, per card, then each process's memory (None: the
    agent's side names no process, as a snapshot)."""
    by_id = {c.id: c for c in cards}
    checks: list[Check] = []
    matched: dict[str, str] = {}  # each of a tool card's keys -> the agent's card id
    found: set[str] = set()
    for tool in reading.cards:
        agent = _match(tool, by_id, found)
        if agent is None:
            subject = f"card {tool.keys[0]}"
            why = f"{reading.tool} lists this card, the agent does not read it"
            checks.append(Check(subject, "card", Verdict.DISAGREE, why=why))
            continue
        found.add(agent.id)
        matched.update({normal_key(k): agent.id for k in tool.keys})
        subject = f"card {agent.id}"
        names = sorted(set(agent.figures) | set(tool.figures) | set(tool.unstated))
        checks.extend(_figure(subject, f, agent, tool, reading.tool) for f in names)
    for card in cards:
        if card.id in found:
            continue
        if card.partitioned:  # the tool lists its partitions, each a card of its own
            why = f"the whole card of partitions {reading.tool} lists one by one"
            checks.append(Check(f"card {card.id}", "card", Verdict.NOT_COMPARED, why=why))
        else:
            why = f"the agent reads this card, {reading.tool} does not list it"
            checks.append(Check(f"card {card.id}", "card", Verdict.DISAGREE, why=why))
    checks.extend(_processes(reading, matched, processes))
    return Report(manufacturer, reading.tool, tuple(checks), notes)
