"""`summarize --prometheus URL --window 1h` (R-X9): which grants sat idle over the window,
which holders used far less than they hold, and per namespace the accelerator-hours held
against those used. Pure: the queries to ask, and their answers into the section.

Each grant's figures over the window come from instant queries at one evaluation time:
`count_over_time(F[W:S])` (the steps of the window, at resolution S, where the figure has a
value), `sum_over_time(F[W:S])` (its values at those steps, added), and `max_over_time(F[W])`
(its peak over every sample stored, so no burst between two steps is missed).

A grant is `idle` only where its memory used and its compute were both measured at every step
it was held and both stayed at zero; a grant with some measured use above zero is `low` or
`used`; every other held grant is `not_measured`, never idle.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from devicemanager.report.families import BY_NAME, Family

# A holder "far below its grant": its peak memory under this share of its memory total, and
# its mean compute under this percent (of its own allowance; of the card for HAMi).
LOW_MEMORY_FRACTION = 0.10
LOW_COMPUTE_PERCENT = 10.0
MIB = 1024 * 1024


class State(StrEnum):
    IDLE = "idle"
    LOW = "low"
    USED = "used"
    NOT_MEASURED = "not_measured"


class Role(StrEnum):
    HELD = "held"  # the grant's memory total: present while the grant is held
    MEMORY = "memory_used"
    CORES = "cores"


class Stat(StrEnum):
    STEPS = "steps"  # count_over_time over the window's steps
    SUM = "sum"  # sum_over_time over the window's steps
    PEAK = "peak"  # max_over_time over every stored sample


@dataclass(frozen=True, slots=True)
class Source:
    """Where a cluster's per-grant figures are: one family per role, in one unit each."""

    name: str
    held: str
    memory_used: str
    cores: str
    memory_scale: float  # into MiB
    compute_of: str  # "grant": percent of the grant's own allowance; "card": of the card

    def family(self, role: Role) -> Family:
        return BY_NAME[{Role.HELD: self.held, Role.MEMORY: self.memory_used,
                        Role.CORES: self.cores}[role]]  # fmt: skip


# In the order they are preferred: the first with any held grant in the window is read.
SOURCES = (
    Source(
        "devicemanager",
        "gpustack_instance_accelerator_memory_total_mib",
        "gpustack_instance_accelerator_memory_used_mib",
        "gpustack_instance_accelerator_cores_utilization_percent",
        1.0,
        "grant",
    ),
    Source(
        "hami",
        "hami_vgpu_memory_limit_bytes",
        "hami_vgpu_memory_used_bytes",
        "hami_container_device_utilization_ratio",
        1 / MIB,
        "card",
    ),
    Source(
        "hami-legacy",
        "vGPU_device_memory_limit_in_bytes",
        "vGPU_device_memory_usage_in_bytes",
        "Device_utilization_desc_of_container",
        1 / MIB,
        "card",
    ),
)
# Labels a Prometheus server adds for its scrape target; not the grant's.
TARGET_LABELS = frozenset({"instance", "job"})


@dataclass(frozen=True, slots=True)
class Figure:
    """One figure of one grant over the window."""

    steps: int  # steps with a value
    total: float  # the values at those steps, added (in the source's unit, scaled)
    peak: float | None  # the largest stored sample; None: none in the window

    def mean(self) -> float | None:
        return self.total / self.steps if self.steps > 0 else None


@dataclass(frozen=True, slots=True)
class Grant:
    source: str
    namespace: str | None
    holder: str | None  # this agent's Instance (instance_name), HAMi's pod
    container: str | None
    node: str | None
    device: str | None
    mode: str | None
    labels: tuple[tuple[str, str], ...]
    held: Figure  # the memory total, MiB
    memory_used: Figure | None  # MiB; None: no sample in the window
    cores: Figure | None  # percent; None: no sample in the window


def _fully(grant: Grant, figure: Figure | None) -> bool:
    return figure is not None and figure.peak is not None and figure.steps >= grant.held.steps


def state_of(grant: Grant) -> State:
    """`idle` needs both figures measured throughout and both at zero; measured use above
    zero is `low` or `used`; anything else held is `not_measured`."""
    figures = (grant.memory_used, grant.cores)
    if any(f is not None and f.peak is not None and f.peak > 0 for f in figures):
        mem, cores, total = grant.memory_used, grant.cores, grant.held.mean()
        if (
            _fully(grant, mem)
            and _fully(grant, cores)
            and mem is not None
            and cores is not None
            and mem.peak is not None
            and total is not None
            and total > 0
            and mem.peak < LOW_MEMORY_FRACTION * total
            and (cores.mean() or 0.0) < LOW_COMPUTE_PERCENT
            and cores.peak is not None
            and math.isfinite(cores.peak)
        ):
            return State.LOW
        return State.USED
    if all(_fully(grant, f) and f is not None and f.peak == 0 for f in figures):
        return State.IDLE
    return State.NOT_MEASURED


@dataclass(frozen=True, slots=True)
class Held:
    """One namespace's holdings and use over the window (a Shared card once per card)."""

    grants: int
    held_hours: float  # grants x hours held
    memory_held_mib_hours: float
    memory_used_mib_hours: float | None  # None: no held hour was measured
    memory_measured_hours: float
    compute_used_hours: float | None  # grant allowances (cards, for HAMi) x hours in use
    compute_measured_hours: float
    idle: int
    low: int
    not_measured: int


@dataclass(frozen=True, slots=True)
class IdleReport:
    window_seconds: float
    step_seconds: float
    at: float
    basis: str | None  # which source's families were read; None: no grant in the window
    grants: tuple[tuple[Grant, State], ...]
    namespaces: tuple[tuple[str, Held], ...]

    def to_json(self) -> dict[str, Any]:
        h = self.step_seconds / 3600
        return {
            "window_seconds": self.window_seconds,
            "step_seconds": self.step_seconds,
            "at": self.at,
            "basis": self.basis,
            "thresholds": {
                "low_memory_fraction": LOW_MEMORY_FRACTION,
                "low_compute_percent": LOW_COMPUTE_PERCENT,
            },
            "grants": [
                {
                    "state": state.value,
                    "namespace": g.namespace,
                    "holder": g.holder,
                    "container": g.container,
                    "node": g.node,
                    "device": g.device,
                    "mode": g.mode,
                    "held_hours": _r(g.held.steps * h),
                    "memory_total_mib": _r(g.held.mean()),
                    "memory_used_peak_mib": _r(g.memory_used.peak if g.memory_used else None),
                    "memory_used_mean_mib": _r(g.memory_used.mean() if g.memory_used else None),
                    "memory_measured_hours": _r((g.memory_used.steps if g.memory_used else 0) * h),
                    "compute_peak_percent": _r(g.cores.peak if g.cores else None),
                    "compute_mean_percent": _r(g.cores.mean() if g.cores else None),
                    "compute_measured_hours": _r((g.cores.steps if g.cores else 0) * h),
                    "compute_of": _compute_of(g.source),
                }
                for g, state in self.grants
            ],
            "namespaces": {
                name: {
                    "grants": n.grants,
                    "held_hours": _r(n.held_hours),
                    "memory_held_mib_hours": _r(n.memory_held_mib_hours),
                    "memory_used_mib_hours": _r(n.memory_used_mib_hours),
                    "memory_measured_hours": _r(n.memory_measured_hours),
                    "compute_used_hours": _r(n.compute_used_hours),
                    "compute_measured_hours": _r(n.compute_measured_hours),
                    "idle": n.idle,
                    "low": n.low,
                    "not_measured": n.not_measured,
                }
                for name, n in self.namespaces
            },
        }


def _compute_of(source: str) -> str:
    return next(s.compute_of for s in SOURCES if s.name == source)


def _r(value: float | None) -> float | None:
    """Rounded for reading (4 decimals); NaN and infinities are not figures: None."""
    if value is None or not math.isfinite(value):
        return None
    return round(value, 4)


# --- The queries ---------------------------------------------------------------------------


def duration(seconds: float) -> str:
    return f"{round(seconds)}s"


def step_for(window_seconds: float) -> float:
    """The window's resolution: 60 s, or a tenth of a window shorter than ten minutes (1 s at
    least), so a window has 10 to its minutes' worth of steps."""
    return float(max(1, min(60, round(window_seconds / 10))))


def query(
    name: str, stat: Stat, window: float, step: float, matchers: Sequence[tuple[str, str]] = ()
) -> str:
    import json

    inside = ",".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in matchers)
    selector = f"{name}{{{inside}}}"
    if stat is Stat.PEAK:
        return f"max_over_time({selector}[{duration(window)}])"
    fn = "count_over_time" if stat is Stat.STEPS else "sum_over_time"
    return f"{fn}({selector}[{duration(window)}:{duration(step)}])"


def queries(
    source: Source, window: float, step: float, matchers: Sequence[tuple[str, str]] = ()
) -> list[tuple[Role, Stat, str]]:
    """Every query a source's section needs: each role's steps, sum and peak."""
    return [
        (role, stat, query(source.family(role).name, stat, window, step, matchers))
        for role in Role
        for stat in Stat
    ]


# --- The answers into the section ----------------------------------------------------------

Key = tuple[tuple[str, str], ...]
Answers = Mapping[tuple[Role, Stat], Sequence[tuple[Key, float]]]


def key_of(labels: Mapping[str, str]) -> Key:
    """A grant's series are told apart by their labels, less the name and the target's."""
    return tuple(sorted((k, v) for k, v in labels.items() if k != "__name__"
                        and k not in TARGET_LABELS))  # fmt: skip


def _label(labels: Mapping[str, str], *names: str) -> str | None:
    for name in names:
        for candidate in (f"exported_{name}", name):
            value = labels.get(candidate)
            if value:
                return value
    return None


def grants_of(source: Source, answers: Answers) -> tuple[Grant, ...]:
    """Each held grant of the source, with its figures joined by label set."""
    by: dict[tuple[Role, Stat], dict[Key, float]] = {
        k: dict(v) for k, v in answers.items()
    }  # fmt: skip

    def figure(role: Role, key: Key, scale: float) -> Figure | None:
        steps = by.get((role, Stat.STEPS), {}).get(key)
        peak = by.get((role, Stat.PEAK), {}).get(key)
        if (steps is None or steps <= 0) and peak is None:
            return None
        total = by.get((role, Stat.SUM), {}).get(key, 0.0)
        return Figure(
            steps=int(steps or 0),
            total=total * scale,
            peak=None if peak is None else peak * scale,
        )

    grants = []
    for key, steps in sorted(by.get((Role.HELD, Stat.STEPS), {}).items()):
        if steps <= 0:
            continue
        held = figure(Role.HELD, key, source.memory_scale)
        assert held is not None
        labels = dict(key)
        hami = source.name != "devicemanager"
        grants.append(
            Grant(
                source=source.name,
                namespace=_label(labels, "namespace", "podnamespace"),
                holder=_label(labels, "podname", "pod") if hami
                else _label(labels, "instance_name"),
                container=_label(labels, "container", "ctrname", "container_name"),
                node=_label(labels, "node", "nodeid", "nodename", "node_name"),
                device=_label(labels, "id", "device_uuid", "deviceuuid"),
                mode=labels.get("mode") or None,
                labels=key,
                held=held,
                memory_used=figure(Role.MEMORY, key, source.memory_scale),
                cores=figure(Role.CORES, key, 1.0),
            )
        )  # fmt: skip
    return tuple(grants)


def _once(figures: Sequence[Figure | None]) -> Figure | None:
    """A Shared card's figure once: each holder publishes the card's, so the largest."""
    present = [f for f in figures if f is not None]
    if not present:
        return None
    peaks = [f.peak for f in present if f.peak is not None]
    return Figure(
        steps=max(f.steps for f in present),
        total=max(f.total for f in present),
        peak=max(peaks) if peaks else None,
    )


def per_card(grants: Sequence[Grant]) -> list[Grant]:
    """The grants a namespace's hours count: each Shared card once per namespace."""
    counted: list[Grant] = []
    shared: dict[tuple[str | None, str | None, str | None], list[Grant]] = {}
    for g in grants:
        if g.mode == "Shared":
            shared.setdefault((g.namespace, g.node, g.device), []).append(g)
        else:
            counted.append(g)
    for holders in shared.values():
        counted.append(
            replace(
                holders[0],
                held=_once([h.held for h in holders]) or holders[0].held,
                memory_used=_once([h.memory_used for h in holders]),
                cores=_once([h.cores for h in holders]),
            )
        )
    return counted


def _held(grants: Sequence[Grant], step: float) -> Held:
    h = step / 3600
    states = [state_of(g) for g in grants]
    mem = [g.memory_used for g in grants if g.memory_used is not None and g.memory_used.steps]
    cores = [g.cores for g in grants if g.cores is not None and g.cores.steps]
    return Held(
        grants=len(grants),
        held_hours=sum(g.held.steps for g in grants) * h,
        memory_held_mib_hours=sum(g.held.total for g in grants) * h,
        memory_used_mib_hours=sum(f.total for f in mem) * h if mem else None,
        memory_measured_hours=sum(f.steps for f in mem) * h,
        compute_used_hours=sum(f.total for f in cores) / 100 * h if cores else None,
        compute_measured_hours=sum(f.steps for f in cores) * h,
        idle=states.count(State.IDLE),
        low=states.count(State.LOW),
        not_measured=states.count(State.NOT_MEASURED),
    )


def idle_report(
    grants: Sequence[Grant], basis: str | None, window: float, step: float, at: float
) -> IdleReport:
    """The section: every grant with its state, and each namespace's holdings."""
    ordered = sorted(grants, key=lambda g: (g.namespace or "", g.holder or "", g.labels))
    by_namespace: dict[str, list[Grant]] = {}
    for g in per_card(ordered):
        by_namespace.setdefault(g.namespace or "", []).append(g)
    return IdleReport(
        window_seconds=window,
        step_seconds=step,
        at=at,
        basis=basis,
        grants=tuple((g, state_of(g)) for g in ordered),
        namespaces=tuple((ns, _held(gs, step)) for ns, gs in sorted(by_namespace.items())),
    )


# --- Text ----------------------------------------------------------------------------------

_TITLES = {
    State.IDLE: "Idle (memory used and compute measured at 0 at every step held)",
    State.LOW: (
        f"Far below its grant (peak memory under {LOW_MEMORY_FRACTION:.0%} of its total, "
        f"mean compute under {LOW_COMPUTE_PERCENT:g}%)"
    ),
    State.NOT_MEASURED: "Not measured (held, its use not measured throughout: never idle)",
}


def _n(value: float | None, unit: str = "") -> str:
    r = _r(value)
    return "not measured" if r is None else f"{r:g}{unit}"


def to_text(report: IdleReport) -> str:
    import datetime

    when = datetime.datetime.fromtimestamp(report.at, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    lines = [
        "",
        f"Idle and held over {duration(report.window_seconds)} to {when} "
        f"(steps of {duration(report.step_seconds)}; families: {report.basis or 'none held'})",
    ]
    if not report.grants:
        lines.append("  no grant was held in the window")
    h = report.step_seconds / 3600
    for state in (State.IDLE, State.LOW, State.NOT_MEASURED):
        rows = [g for g, s in report.grants if s is state]
        lines.append(f"  {_TITLES[state]}: {len(rows)}")
        for g in rows:
            where = " ".join(x for x in (g.node, g.device) if x)
            lines.append(
                f"    {g.namespace or '-'}/{g.holder or '-'} on {where or '-'}"
                f" ({g.mode or '-'}): held {_n(g.held.steps * h, ' h')} (measured: memory "
                f"{_n((g.memory_used.steps if g.memory_used else 0) * h, ' h')}, compute "
                f"{_n((g.cores.steps if g.cores else 0) * h, ' h')}), "
                f"memory {_n(g.held.mean(), ' MiB')}, peak used "
                f"{_n(g.memory_used.peak if g.memory_used else None, ' MiB')}, mean compute "
                f"{_n(g.cores.mean() if g.cores else None, '%')}"
            )
    lines.append("  Per namespace (a Shared card once): held h | memory held / used MiB·h "
                 "(measured h) | compute used h (measured h)")  # fmt: skip
    for name, n in report.namespaces:
        lines.append(
            f"    {name or '-'}: {n.grants} grant(s), {_n(n.held_hours, ' h')} | "
            f"{_n(n.memory_held_mib_hours)} / {_n(n.memory_used_mib_hours)} "
            f"({_n(n.memory_measured_hours, ' h')}) | {_n(n.compute_used_hours, ' h')} "
            f"({_n(n.compute_measured_hours, ' h')}); idle {n.idle}, low {n.low}, "
            f"not measured {n.not_measured}"
        )
    return "\n".join(lines) + "\n"
