"""`summarize --prometheus URL --window 1h` (R-X9): which grants sat idle over the window,
which holders used far less than they hold, and per namespace the accelerator-hours held
against those used. Pure: the queries to ask, and their answers into the section.

Each grant's figures over the window come from instant queries at one evaluation time:
`count_over_time(F[W:S])` (the steps of the window, at resolution S, where the figure has a
value), `sum_over_time(F[W:S])` (its values at those steps, added), and `max_over_time(F[W])`
(its peak over every sample stored, so no burst between two steps is missed).

A grant is `idle` by its compute alone, memory held or not (R-X10): its SM activity where it
was measured at every step held (at or below `--idle-sm-activity`, 1%), else its busy time
where that was (at or below `--idle-busy-time`, 0); `judged_by` names the figure, and
`idle_state` whether anything ran there (memory used measured 0 throughout: nothing_running;
some memory held: running_idle). A grant not idle with some measured use above zero is `low`
or `used`; every other held grant is `not_measured`, never idle.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from devicemanager.report.families import BY_NAME, Family, Scope, Surface, Unit
from devicemanager.report.families import Figure as FamilyFigure

# A holder "far below its grant": its peak memory under this share of its memory total, and
# its mean compute under this percent (of its own allowance; of the card for HAMi).
LOW_MEMORY_FRACTION = 0.10
LOW_COMPUTE_PERCENT = 10.0
MIB = 1024 * 1024
# Idle at or below these, the same as the alert's (deploy/prometheus-rules.yaml,
# `gpustack:accelerator_idle_threshold:percent`): one SM of an H200's 132 busy all the time is
# 0.76% SM activity, and a holder keeping one SM 30% busy reads 0.2 while 26% busy.
IDLE_SM_ACTIVITY_PERCENT = 1.0
IDLE_BUSY_TIME_PERCENT = 0.0


class JudgedBy(StrEnum):
    """The figure that judged a grant idle or not: its activity where measured throughout."""

    SM_ACTIVITY = "sm_activity"
    BUSY_TIME = "busy_time"


class IdleState(StrEnum):
    """What an idle grant holds: "held, nothing running" apart from "running, idle"."""

    NOTHING_RUNNING = "nothing_running"  # memory used measured 0 at every step held
    RUNNING_IDLE = "running_idle"  # some memory held: a process (a loaded model) computes nothing
    MEMORY_NOT_MEASURED = "memory_not_measured"


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Idle at or below these, percent, per figure that judges (`--idle-sm-activity`,
    `--idle-busy-time`)."""

    sm_activity: float = IDLE_SM_ACTIVITY_PERCENT
    busy_time: float = IDLE_BUSY_TIME_PERCENT

    def of(self, judged_by: JudgedBy) -> float:
        return self.sm_activity if judged_by is JudgedBy.SM_ACTIVITY else self.busy_time


DEFAULT_THRESHOLDS = Thresholds()


class State(StrEnum):
    IDLE = "idle"
    LOW = "low"
    USED = "used"
    NOT_MEASURED = "not_measured"


class Role(StrEnum):
    HELD = "held"  # the grant's memory total: present while the grant is held
    MEMORY = "memory_used"
    CORES = "cores"
    ACTIVITY = "activity"  # the grant's own SM activity, where measured alone (issue 41)


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
    activity: str | None = None  # the grant's SM activity family; None: the source has none

    def roles(self) -> tuple[Role, ...]:
        """The roles the source publishes a family for."""
        return tuple(r for r in Role if r is not Role.ACTIVITY or self.activity is not None)

    def family(self, role: Role) -> Family:
        names = {Role.HELD: self.held, Role.MEMORY: self.memory_used, Role.CORES: self.cores,
                 Role.ACTIVITY: self.activity}  # fmt: skip
        name = names[role]
        if name is None:
            raise KeyError(f"{self.name} publishes no {role.value} family")
        # The activity family is read here only: the report's own summary does not read it
        # (it is among the agent's families it lists as ignored).
        return BY_NAME.get(name) or Family(
            name,
            Scope.CONTAINER,
            FamilyFigure.CORES_USED,
            Unit.PERCENT,
            Surface.USAGE,
            0,
            self.name,
        )


# In the order they are preferred: the first with any held grant in the window is read.
SOURCES = (
    Source(
        "devicemanager",
        "gpustack_instance_accelerator_memory_total_mib",
        "gpustack_instance_accelerator_memory_used_mib",
        "gpustack_instance_accelerator_cores_utilization_percent",
        1.0,
        "grant",
        "gpustack_instance_accelerator_sm_activity_percent",
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
    activity: Figure | None = None  # SM activity, percent; None: no sample in the window


def _fully(grant: Grant, figure: Figure | None) -> bool:
    return figure is not None and figure.peak is not None and figure.steps >= grant.held.steps


def judged_by(grant: Grant) -> JudgedBy | None:
    """The figure that judges the grant: its SM activity where measured at every step held,
    else its busy time where that was; None: its compute was not measured throughout."""
    if _fully(grant, grant.activity):
        return JudgedBy.SM_ACTIVITY
    if _fully(grant, grant.cores):
        return JudgedBy.BUSY_TIME
    return None


def _judging(grant: Grant, by: JudgedBy) -> Figure | None:
    return grant.activity if by is JudgedBy.SM_ACTIVITY else grant.cores


def is_idle(grant: Grant, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> bool:
    """Idle by compute alone, memory held or not: the judging figure's peak over the window
    at or below its threshold."""
    by = judged_by(grant)
    figure = None if by is None else _judging(grant, by)
    if by is None or figure is None or figure.peak is None:
        return False
    return math.isfinite(figure.peak) and figure.peak <= thresholds.of(by)


def idle_state(grant: Grant) -> IdleState:
    """Whether anything ran on an idle grant, by its memory used."""
    memory = grant.memory_used
    if memory is not None and memory.peak is not None and memory.peak > 0:
        return IdleState.RUNNING_IDLE
    if _fully(grant, memory) and memory is not None and memory.peak == 0:
        return IdleState.NOTHING_RUNNING
    return IdleState.MEMORY_NOT_MEASURED


def state_of(grant: Grant, thresholds: Thresholds = DEFAULT_THRESHOLDS) -> State:
    """`idle` by compute alone (its judging figure measured throughout, at or below its
    threshold); measured use above zero is `low` or `used`; anything else held is
    `not_measured`."""
    if is_idle(grant, thresholds):
        return State.IDLE
    figures = (grant.memory_used, grant.cores, grant.activity)
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
    thresholds: Thresholds = DEFAULT_THRESHOLDS

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
                "idle_sm_activity_percent": self.thresholds.sm_activity,
                "idle_busy_time_percent": self.thresholds.busy_time,
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
                    "sm_activity_peak_percent": _r(g.activity.peak if g.activity else None),
                    "sm_activity_mean_percent": _r(g.activity.mean() if g.activity else None),
                    "sm_activity_measured_hours": _r((g.activity.steps if g.activity else 0) * h),
                    "judged_by": _value(judged_by(g)),
                    "idle_state": idle_state(g).value if state is State.IDLE else None,
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


def _value(judged: JudgedBy | None) -> str | None:
    return None if judged is None else judged.value


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
        for role in source.roles()
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
                activity=figure(Role.ACTIVITY, key, 1.0),
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
                activity=_once([h.activity for h in holders]),
            )
        )
    return counted


def _held(grants: Sequence[Grant], step: float, thresholds: Thresholds) -> Held:
    h = step / 3600
    states = [state_of(g, thresholds) for g in grants]
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
    grants: Sequence[Grant],
    basis: str | None,
    window: float,
    step: float,
    at: float,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
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
        grants=tuple((g, state_of(g, thresholds)) for g in ordered),
        namespaces=tuple(
            (ns, _held(gs, step, thresholds)) for ns, gs in sorted(by_namespace.items())
        ),
        thresholds=thresholds,
    )


# --- Text ----------------------------------------------------------------------------------


def _idle_title(t: Thresholds) -> str:
    return (
        "Idle (compute at or below its threshold at every step held, memory held or not: "
        f"SM activity {t.sm_activity:g}% where measured, else busy time {t.busy_time:g}%)"
    )


_TITLES = {
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
        title = _idle_title(report.thresholds) if state is State.IDLE else _TITLES[state]
        lines.append(f"  {title}: {len(rows)}")
        for g in rows:
            where = " ".join(x for x in (g.node, g.device) if x)
            judged = ""
            by = judged_by(g)
            if state is State.IDLE and by is not None:
                figure = _judging(g, by)
                peak = figure.peak if figure is not None else None
                judged = f", judged by {by.value} (peak {_n(peak, '%')}), {idle_state(g).value}"
            lines.append(
                f"    {g.namespace or '-'}/{g.holder or '-'} on {where or '-'}"
                f" ({g.mode or '-'}): held {_n(g.held.steps * h, ' h')} (measured: memory "
                f"{_n((g.memory_used.steps if g.memory_used else 0) * h, ' h')}, compute "
                f"{_n((g.cores.steps if g.cores else 0) * h, ' h')}), "
                f"memory {_n(g.held.mean(), ' MiB')}, peak used "
                f"{_n(g.memory_used.peak if g.memory_used else None, ' MiB')}, mean compute "
                f"{_n(g.cores.mean() if g.cores else None, '%')}{judged}"
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
