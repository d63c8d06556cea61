"""What a crosscheck compares and what it found, as frozen dataclasses.

A figure is named the same on both sides (`memory.used_mib`, `ecc.corrected.aggregate`,
`throttle.sw_power_cap`, …) and holds an int, a float or a bool. A figure one side does not
state is absent from its mapping, or named in `unstated` with why; it is never compared.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

Value = int | float | bool


class Verdict(StrEnum):
    AGREE = "agree"
    DISAGREE = "DISAGREE"
    NOT_COMPARED = "not compared"


@dataclass(frozen=True, slots=True)
class ToolCard:
    """One card as the tool lists it. `keys` are the names the agent may know it by, most
    specific first (a UUID, a PCI bus id, `npu:<card>:<chip>`, `index:<n>`); `unstated` names
    figures the tool prints but that do not mean what the agent's figure means, with why."""

    keys: tuple[str, ...]
    figures: Mapping[str, Value]
    unstated: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ToolProcess:
    """One process row of the tool: the card it is on (one of that card's keys), its PID, the
    memory it holds in MiB as the tool prints it (None: the tool printed no number), and which
    of the tool's answers said so."""

    card: str
    pid: int
    memory_mib: int | None
    source: str


@dataclass(frozen=True, slots=True)
class ToolReading:
    """A tool's whole answer. `processes` is None where the tool's process list was not read
    (`process_note` says why), and () where it was read and listed none."""

    tool: str
    cards: tuple[ToolCard, ...]
    processes: tuple[ToolProcess, ...] | None = None
    process_note: str | None = None


@dataclass(frozen=True, slots=True)
class Check:
    """One figure of one card (or one process), compared or not, and why."""

    subject: str  # "card GPU-…", "pid 498 on GPU-…"
    figure: str
    verdict: Verdict
    agent: Value | None = None
    tool: Value | None = None
    tolerance: str | None = None
    why: str | None = None


@dataclass(frozen=True, slots=True)
class Report:
    manufacturer: str
    tool: str
    checks: tuple[Check, ...]
    notes: tuple[str, ...] = ()

    @property
    def disagreements(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.verdict is Verdict.DISAGREE)

    @property
    def agreements(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.verdict is Verdict.AGREE)
