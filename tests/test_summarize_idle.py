"""`devicemanager summarize --prometheus URL --window 1h` (R-X9): idle grants, holders far below
their grant, and per namespace the accelerator-hours held against those used.

The rule itself is held to its definition by hypothesis: a grant is "idle" by its compute alone
(its SM activity where measured at every step held, else its busy time; R-X10), memory held or
not, and a grant whose compute was not measured at every step it was held, and showed no use
where it was, is "not measured" and never "idle".
Then a real Prometheus (Debian's package), whose TSDB was backfilled by `promtool tsdb
create-blocks-from openmetrics` with two hours of recorded series (an idle grant, a busy one,
one never measured, one far below its grant, one with a burst between two steps, one measured
for half the window, the H200's one-SM holder 26% busy and 0.2% SM-active, a Shared card with
two holders, and HAMi monitor containers), is asked by
the command at a time inside the block; its figures are worked out here by hand.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from devicemanager.report import idle
from devicemanager.report.idle import Figure, Grant, State, idle_report, state_of
from tests.conftest import REPO, agent_env, free_port

pytestmark = pytest.mark.timeout(180)


# --- The rule, pure ----------------------------------------------------------------------------


def grant(
    held_steps: int = 60,
    memory: Figure | None = None,
    cores: Figure | None = None,
    *,
    activity: Figure | None = None,
    total: float = 1000.0,
    namespace: str = "ns",
    mode: str = "Exclusive",
    device: str = "GPU-0",
    holder: str = "h",
) -> Grant:
    return Grant(
        source="devicemanager",
        namespace=namespace,
        holder=holder,
        container="c",
        node="n",
        device=device,
        mode=mode,
        labels=(("instance_name", holder), ("id", device), ("namespace", namespace)),
        held=Figure(held_steps, total * held_steps, total),
        memory_used=memory,
        cores=cores,
        activity=activity,
    )


def zero(steps: int = 60) -> Figure:
    return Figure(steps, 0.0, 0.0)


def flat(value: float, steps: int = 60) -> Figure:
    return Figure(steps, value * steps, value)


def test_idle_is_judged_by_compute_alone_memory_held_or_not() -> None:
    """(R-X9, R-X10) Idle is the compute measured at every step held and at or below its
    threshold: SM activity where measured throughout (1%), else busy time (0); memory used only
    says what is on it. A grant whose compute is not measured throughout is never idle."""
    nothing = grant(memory=zero(), cores=zero())
    assert state_of(nothing) is State.IDLE and idle.idle_state(nothing).value == "nothing_running"
    assert idle.judged_by(nothing) is idle.JudgedBy.BUSY_TIME
    assert state_of(grant()) is State.NOT_MEASURED  # only the total: never idle
    assert state_of(grant(memory=zero())) is State.NOT_MEASURED  # compute unsupported
    assert state_of(grant(cores=zero(30), memory=zero())) is State.NOT_MEASURED  # half
    unknown = grant(cores=zero())
    assert state_of(unknown) is State.IDLE
    assert idle.idle_state(unknown).value == "memory_not_measured"
    assert state_of(grant(memory=zero(30), cores=zero())) is State.IDLE
    # A process holding memory (a loaded model) that computes nothing: running, idle.
    held = grant(memory=Figure(60, 0.0, 200.0), cores=zero())
    assert state_of(held) is State.IDLE and idle.idle_state(held).value == "running_idle"
    # Measured use, where the compute is not measured: not idle.
    assert state_of(grant(memory=Figure(60, 6000.0, 120.0))) is State.USED
    # The H200's holder of one SM: 26% busy, 0.2% SM-active, 600 MiB held.
    one_sm = grant(memory=flat(600), cores=flat(26), activity=flat(0.2))
    assert state_of(one_sm) is State.IDLE
    assert idle.judged_by(one_sm) is idle.JudgedBy.SM_ACTIVITY
    assert idle.idle_state(one_sm).value == "running_idle"
    # Judged by its busy time, the same grant is used; a quarter-duty job is used either way.
    assert state_of(grant(memory=flat(600), cores=flat(26))) is State.USED
    assert state_of(grant(memory=flat(600), cores=flat(51), activity=flat(21.2))) is State.USED
    # Activity measured for half the window: busy time judges.
    half = grant(memory=flat(600), cores=zero(), activity=flat(50.0, 30))
    assert idle.judged_by(half) is idle.JudgedBy.BUSY_TIME and state_of(half) is State.IDLE
    # The thresholds are the caller's: at 0.1% the one-SM holder is used.
    strict = idle.Thresholds(sm_activity=0.1)
    assert state_of(one_sm, strict) is State.USED
    assert state_of(grant(memory=zero(), cores=flat(5)), idle.Thresholds(busy_time=5)) is (
        State.IDLE
    )


def test_far_below_its_grant_is_under_the_stated_thresholds() -> None:
    """(R-X9) Low: peak memory under 10% of the total and mean compute under 10%, both
    measured throughout; at either threshold it is used."""
    low = grant(memory=Figure(60, 60 * 50.0, 99.0), cores=Figure(60, 60 * 9.9, 40.0))
    assert state_of(low) is State.LOW
    at_memory = grant(memory=Figure(60, 60 * 5.0, 100.0), cores=Figure(60, 60 * 1.0, 1.0))
    assert state_of(at_memory) is State.USED
    at_compute = grant(memory=Figure(60, 60 * 5.0, 5.0), cores=Figure(60, 60 * 10.0, 10.0))
    assert state_of(at_compute) is State.USED
    part = grant(memory=Figure(30, 30 * 5.0, 5.0), cores=Figure(60, 60 * 1.0, 1.0))
    assert state_of(part) is State.USED  # measured for half: not judged low


values = st.one_of(st.just(0.0), st.just(float("nan")), st.floats(min_value=-1e6, max_value=1e6))
figures = st.one_of(
    st.none(),
    st.builds(
        Figure,
        steps=st.integers(min_value=0, max_value=120),
        total=st.floats(min_value=0, max_value=1e9),
        peak=st.one_of(st.none(), values),
    ),
)


@given(
    held=st.integers(min_value=1, max_value=120),
    memory=figures,
    cores=figures,
    activity=figures,
)
def test_unmeasured_is_never_idle(
    held: int, memory: Figure | None, cores: Figure | None, activity: Figure | None
) -> None:
    """(R-X9, R-X10) For any figures: idle exactly when the judging compute (SM activity where
    measured at every step held, else busy time where that was) peaked at or below its
    threshold; a grant whose compute was not measured throughout, with no measured use above
    0, is not measured."""
    g = grant(held, memory, cores, activity=activity)
    s = state_of(g)

    def fully(f: Figure | None) -> bool:
        return f is not None and f.peak is not None and f.steps >= held

    judge, limit = (activity, 1.0) if fully(activity) else (cores, 0.0)
    measured = fully(judge)
    peak = judge.peak if judge is not None and judge.peak is not None else math.nan
    assert (s is State.IDLE) == (measured and math.isfinite(peak) and peak <= limit)
    everything = (memory, cores, activity)
    used = any(f is not None and f.peak is not None and f.peak > 0 for f in everything)
    if not measured and not used:
        assert s is State.NOT_MEASURED
    if s is not State.IDLE and used:
        assert s in (State.USED, State.LOW)
    # An unmeasured grant beside it changes nobody's state, and counts as held, not used.
    report = idle_report([g, grant(held, holder="other")], "devicemanager", 3600, 60, 0)
    assert dict((x.holder, st_) for x, st_ in report.grants)["h"] is s
    (_, ns), = report.namespaces  # fmt: skip
    assert ns.not_measured >= 1 and ns.held_hours == pytest.approx(2 * held / 60)
    measured = [f for f in (memory,) if f is not None and f.steps]
    if not measured:
        assert ns.memory_used_mib_hours is None  # nothing measured: no figure, never 0


def test_a_shared_card_counts_once_per_namespace() -> None:
    """(R-X9) Two holders of one Shared card in one namespace each publish the card's
    figures: the namespace holds one card, its memory and its use once; in two namespaces,
    each holds the whole card."""
    card = {"mode": "Shared", "device": "GPU-S", "total": 80000.0}
    use = Figure(60, 60 * 8000.0, 8000.0)
    a = grant(memory=use, cores=Figure(60, 60 * 20.0, 20.0), holder="a", **card)  # type: ignore[arg-type]
    b = grant(memory=use, cores=Figure(60, 60 * 20.0, 20.0), holder="b", **card)  # type: ignore[arg-type]
    c = grant(memory=use, cores=Figure(60, 60 * 20.0, 20.0), holder="c", namespace="other",
              **card)  # type: ignore[arg-type]  # fmt: skip
    report = idle_report([a, b, c], "devicemanager", 3600, 60, 0)
    ns = dict(report.namespaces)
    assert ns["ns"].grants == 1 and ns["ns"].held_hours == 1.0
    assert ns["ns"].memory_held_mib_hours == 80000.0
    assert ns["ns"].memory_used_mib_hours == 8000.0
    assert ns["ns"].compute_used_hours == pytest.approx(0.2)
    assert ns["other"].grants == 1 and ns["other"].memory_held_mib_hours == 80000.0
    assert len(report.grants) == 3  # each holder is still listed


# --- Against a real Prometheus, backfilled ------------------------------------------------------

STEP = 15  # seconds between recorded samples
AGENT = "gpustack_instance_accelerator_"


def agent_labels(name: str, mode: str = "Exclusive", gpu: str = "GPU-1", ns: str = "team-a",
                 pod: str | None = None) -> str:  # fmt: skip
    return (
        f'cluster="agent",namespace="{ns}",instance_name="{name}",instance_uid="u-{name}",'
        f'node="gpu-a",pod="{pod or name + "-0"}",container="main",id="{gpu}",'
        f'index="{5 if gpu == "GPU-S" else 1}",'
        f'manufacturer="nvidia",mode="{mode}"'
    )


def hami_labels(pod: str) -> str:
    return (f'cluster="hami",namespace="ml",pod="{pod}",container="trainer",'
            f'device_uuid="GPU-H",vdevice_index="0",zone="vGPU"')  # fmt: skip


def recorded(end: int) -> str:
    """Two hours before `end` (a minute boundary), a sample every 15 s, as OpenMetrics."""
    start, t_query = end - 7200, end - 30
    times = range(start, end + 1, STEP)
    series: dict[str, list[tuple[str, Any]]] = {}

    def add(family: str, labels: str, value: Any, when: range = times) -> None:
        series.setdefault(family, []).append((labels, [(t, value(t)) for t in when]))

    def const(v: float) -> Any:
        return lambda t: v

    total, used, cores = (AGENT + "memory_total_mib", AGENT + "memory_used_mib",
                          AGENT + "cores_utilization_percent")  # fmt: skip
    for name, mem, cpu in (
        ("idle", const(0), const(0)),
        ("busy", const(600), const(50)),
        ("low", const(50), const(3)),
        # One sample of 200 MiB at t_query - 1785 s, between two of the window's steps.
        ("blip", lambda t: 200 if t == t_query - 1785 else 0, const(0)),
        # The H200's one-SM holder (issue 41): 26% busy, 0.2% SM-active, its context held.
        ("one-sm", const(600), const(26)),
    ):
        add(total, agent_labels(name), const(1000))
        add(used, agent_labels(name), mem)
        add(cores, agent_labels(name), cpu)
    add(AGENT + "sm_activity_percent", agent_labels("one-sm"), const(0.2))
    add(total, agent_labels("unmeasured"), const(1000))  # only the total, all along
    # Measured, at 0, for the last half hour of the window only.
    add(total, agent_labels("half"), const(1000))
    half = range(t_query - 1800, end + 1, STEP)
    add(used, agent_labels("half"), const(0), half)
    add(cores, agent_labels("half"), const(0), half)
    for holder in ("nb-1", "nb-2"):  # two holders of one Shared card: the card's figures
        labels = agent_labels(holder, "Shared", "GPU-S", "team-b")
        add(total, labels, const(80000))
        add(used, labels, const(8000))
        add(cores, labels, const(20))
    # HAMi's monitor, another cluster: an idle container and one whose use is not measured.
    gib = 1024**3
    add("hami_vgpu_memory_limit_bytes", hami_labels("train-0"), const(8 * gib))
    add("hami_vgpu_memory_used_bytes", hami_labels("train-0"), const(0))
    add("hami_container_device_utilization_ratio", hami_labels("train-0"), const(0))
    add("hami_vgpu_memory_limit_bytes", hami_labels("train-1"), const(8 * gib))
    lines = []
    for family, rows in series.items():
        lines.append(f"# TYPE {family} gauge")
        for labels, points in rows:
            lines.extend(f"{family}{{{labels}}} {v} {t}" for t, v in points)
    return "\n".join(lines) + "\n# EOF\n"


@pytest.fixture(scope="module")
def backfilled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """A real Prometheus over a TSDB backfilled with `recorded`; its URL and the query time."""
    binary, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if binary is None or promtool is None:
        pytest.skip("prometheus is not installed (Debian package prometheus; .ci/run installs it)")
    tmp = tmp_path_factory.mktemp("backfill")
    end = (int(time.time()) // 3600 - 1) * 3600  # an hour boundary, an hour ago
    (tmp / "recorded.om").write_text(recorded(end))
    (tmp / "data").mkdir()
    made = subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", "-q", str(tmp / "recorded.om"),
         str(tmp / "data")],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    (tmp / "prometheus.yml").write_text("global: {scrape_interval: 1m}\nscrape_configs: []\n")
    port = free_port()
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                doc = httpx.get(
                    f"{url}/api/v1/query",
                    timeout=5,
                    params={"query": f"count({AGENT}memory_total_mib)", "time": end - 30},
                ).json()
                if doc["status"] == "success" and doc["data"]["result"]:
                    break
            except (httpx.HTTPError, ValueError):
                pass  # Prometheus answers 503 while it starts
            assert time.monotonic() < deadline, "the backfilled blocks never answered"
            time.sleep(0.5)
        yield url, end - 30
    finally:
        proc.terminate()
        proc.wait(15)


def summarize_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "devicemanager", "summarize", *args],
        capture_output=True, text=True, env=agent_env(), cwd=REPO, timeout=60, check=False,
    )  # fmt: skip


def window_of(url: str, at: int, *extra: str) -> dict[str, Any]:
    result = summarize_cli("--prometheus", url, "--window", "1h", "--at", str(at),
                           "--format", "json", *extra)  # fmt: skip
    assert result.returncode == 0, result.stderr
    doc: dict[str, Any] = json.loads(result.stdout)["window"]
    return doc


def test_the_window_names_idle_low_used_and_unmeasured_grants(
    backfilled: tuple[str, int],
) -> None:
    """(R-X9, R-X10) Over the backfilled hour: the grant at a measured 0 is idle, nothing
    running; a burst of memory between two steps is a process holding memory and computing
    nothing (running, idle); the grant 26% busy and 0.2% SM-active is idle, judged by its SM
    activity; the one with only a total, and the one measured for half the window, are not
    measured; 5% of memory and 3% compute is far below its grant."""
    url, at = backfilled
    doc = window_of(url, at, "--label", "cluster=agent")
    assert doc["basis"] == "devicemanager" and doc["window_seconds"] == 3600
    assert doc["step_seconds"] == 60 and doc["at"] == at
    states = {g["holder"]: g["state"] for g in doc["grants"]}
    assert states == {
        "idle": "idle", "busy": "used", "low": "low", "blip": "idle", "one-sm": "idle",
        "unmeasured": "not_measured", "half": "not_measured",
        "nb-1": "used", "nb-2": "used",
    }  # fmt: skip
    by = {g["holder"]: g for g in doc["grants"]}
    judged = {h: (g["judged_by"], g["idle_state"]) for h, g in by.items() if g["state"] == "idle"}
    assert judged == {
        "idle": ("busy_time", "nothing_running"),
        "blip": ("busy_time", "running_idle"),
        "one-sm": ("sm_activity", "running_idle"),
    }
    assert by["one-sm"]["compute_mean_percent"] == 26.0
    assert by["one-sm"]["sm_activity_peak_percent"] == 0.2
    assert by["one-sm"]["sm_activity_measured_hours"] == 1.0
    assert by["busy"]["judged_by"] == "busy_time" and by["busy"]["idle_state"] is None
    assert by["unmeasured"]["judged_by"] is None
    assert doc["thresholds"]["idle_sm_activity_percent"] == 1.0
    strict = window_of(url, at, "--label", "cluster=agent", "--idle-sm-activity", "0.1")
    assert {g["holder"]: g["state"] for g in strict["grants"]}["one-sm"] == "used"
    assert strict["thresholds"]["idle_sm_activity_percent"] == 0.1
    assert by["blip"]["memory_used_peak_mib"] == 200.0 and by["blip"]["memory_used_mean_mib"] == 0
    assert by["unmeasured"]["memory_used_peak_mib"] is None
    assert by["unmeasured"]["memory_measured_hours"] == 0
    assert by["half"]["memory_measured_hours"] == 0.5 and by["half"]["held_hours"] == 1.0
    assert by["low"]["memory_total_mib"] == 1000.0 and by["low"]["compute_mean_percent"] == 3.0


def test_each_namespace_held_against_used(backfilled: tuple[str, int]) -> None:
    """(R-X9) Worked out by hand: team-a holds seven grants for the hour (7,000 MiB·h) and
    was measured using 600 + 50 + 600 MiB·h over 5.5 measured hours, compute (busy time)
    0.5 + 0.03 + 0.26 grant-hours; three of them idle; team-b's Shared card counts once
    (80,000 MiB·h held, 8,000 used, 0.2 compute-hours)."""
    url, at = backfilled
    ns = window_of(url, at, "--label", "cluster=agent")["namespaces"]
    assert ns["team-a"] == {
        "grants": 7, "held_hours": 7.0, "memory_held_mib_hours": 7000.0,
        "memory_used_mib_hours": 1250.0, "memory_measured_hours": 5.5,
        "compute_used_hours": 0.79, "compute_measured_hours": 5.5,
        "idle": 3, "low": 1, "not_measured": 2,
    }  # fmt: skip
    assert ns["team-b"]["grants"] == 1 and ns["team-b"]["held_hours"] == 1.0
    assert ns["team-b"]["memory_held_mib_hours"] == 80000.0
    assert ns["team-b"]["memory_used_mib_hours"] == 8000.0
    assert ns["team-b"]["compute_used_hours"] == 0.2
    narrowed = window_of(url, at, "--label", "cluster=agent", "--namespace", "team-b")
    assert list(narrowed["namespaces"]) == ["team-b"]
    assert {g["holder"] for g in narrowed["grants"]} == {"nb-1", "nb-2"}


def test_hamis_containers_where_the_cluster_has_no_agent(backfilled: tuple[str, int]) -> None:
    """(R-X9) A cluster with only HAMi's monitor: its containers are the grants (limit held,
    memory used, utilization of the card); the container with only a limit is not measured."""
    url, at = backfilled
    doc = window_of(url, at, "--label", "cluster=hami")
    assert doc["basis"] == "hami"
    by = {g["holder"]: g for g in doc["grants"]}
    assert by["train-0"]["state"] == "idle" and by["train-1"]["state"] == "not_measured"
    assert by["train-0"]["memory_total_mib"] == 8192.0 and by["train-0"]["compute_of"] == "card"
    assert doc["namespaces"]["ml"]["memory_used_mib_hours"] == 0.0
    assert doc["namespaces"]["ml"]["held_hours"] == 2.0
    nothing = window_of(url, at, "--label", "cluster=none")
    assert nothing == {**nothing, "basis": None, "grants": [], "namespaces": {}}


def test_the_text_section_and_the_flags(backfilled: tuple[str, int]) -> None:
    """(R-X9) The text report ends with the section, naming each idle and unmeasured grant and
    the thresholds; --at takes RFC 3339 too; --window and --at are for --prometheus only; a
    duration that is not one is a usage error."""
    url, at = backfilled
    import datetime

    when = datetime.datetime.fromtimestamp(at, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    text = summarize_cli("--prometheus", url, "--window", "1h", "--at", when,
                         "--label", "cluster=agent")  # fmt: skip
    assert text.returncode == 0, text.stderr
    section = text.stdout.partition("Idle and held over 3600s to " + when)[2]
    assert (
        "Idle (compute at or below its threshold at every step held, memory held or not: "
        "SM activity 1% where measured, else busy time 0%): 3"
    ) in section
    assert "team-a/idle on gpu-a GPU-1 (Exclusive): held 1 h (measured: memory 1 h" in section
    assert "mean compute 26%, judged by sm_activity (peak 0.2%), running_idle" in section
    assert "team-a/half on gpu-a GPU-1 (Exclusive): held 1 h (measured: memory 0.5 h" in section
    assert "under 10% of its total, mean compute under 10%): 1" in section
    assert "Not measured (held, its use not measured throughout: never idle): 2" in section
    assert "team-b: 1 grant(s), 1 h" in section
    assert summarize_cli("--window", "1h", "-").returncode == 2
    assert summarize_cli("--at", "0", "-").returncode == 2
    assert summarize_cli("--prometheus", url, "--window", "1hour").returncode == 2
    assert summarize_cli("--prometheus", url, "--at", "2026-12-03T12:00:00").returncode == 2
    assert summarize_cli("--idle-busy-time", "5", "-").returncode == 2  # --prometheus only
    assert summarize_cli("--prometheus", url, "--idle-sm-activity", "101").returncode == 2


def test_the_queries_are_instant_over_the_window() -> None:
    """(R-X9) Steps and sums over the window's steps (a subquery), peaks over every stored
    sample; --label's matchers in each."""
    asked = [q for _, _, q in idle.queries(idle.SOURCES[0], 3600, 60, (("cluster", "p"),))]
    assert f'count_over_time({AGENT}memory_total_mib{{cluster="p"}}[3600s:60s])' in asked
    assert f'max_over_time({AGENT}memory_used_mib{{cluster="p"}}[3600s])' in asked
    assert f'max_over_time({AGENT}sm_activity_percent{{cluster="p"}}[3600s])' in asked
    assert len(asked) == 12
    assert len(idle.queries(idle.SOURCES[1], 3600, 60)) == 9  # HAMi states no activity
    assert idle.step_for(3600) == 60 and idle.step_for(300) == 30 and idle.step_for(5) == 1


def test_the_dashboards_idle_panel_lists_only_the_idle_grants(
    backfilled: tuple[str, int],
) -> None:
    """(R-X9, R-X10) The dashboard's "Idle allocations" panel, run by the backfilled Prometheus
    at the window's end, lists the grants whose compute stayed idle throughout, memory held or
    not, with the figure that judged: the one at 0, the burst of memory between two steps,
    the one-SM holder by its SM activity; not the grant measured for half the window, not the
    unmeasured one, not the low one."""
    url, at = backfilled
    dashboard = json.loads((REPO / "deploy" / "grafana-dashboard.json").read_text())
    (panel,) = (p for p in dashboard["panels"] if p["title"] == "Idle allocations")
    assert panel is dashboard["panels"][-1]
    expr = panel["targets"][0]["expr"].replace("$node", ".*").replace("$namespace", ".*")
    doc = httpx.get(f"{url}/api/v1/query", params={"query": expr, "time": at}, timeout=10).json()
    assert doc["status"] == "success", doc
    listed = {
        (r["metric"]["namespace"], r["metric"]["instance_name"], r["metric"]["judged_by"])
        for r in doc["data"]["result"]
    }
    assert listed == {
        ("team-a", "idle", "busy_time"),
        ("team-a", "blip", "busy_time"),
        ("team-a", "one-sm", "sm_activity"),
    }


def test_the_documented_contract_is_the_json(backfilled: tuple[str, int]) -> None:
    """(R-X9) Every key of the `window` object, of a grant and of a namespace is named in
    docs/summarize.md's section, and the section names no key the JSON lacks."""
    url, at = backfilled
    doc = window_of(url, at, "--label", "cluster=agent")
    page = (REPO / "docs" / "summarize.md").read_text()
    section = page.partition("## Idle and held over a window")[2].partition("\n## ")[0]
    block = section.partition('"window": {')[2].partition("```")[0]
    keys = set(doc) | set(doc["grants"][0]) | set(next(iter(doc["namespaces"].values())))
    keys |= set(doc["thresholds"])
    named = set(re.findall(r'"(\w+)"', block)) | set(re.findall(r"^\| `(\w+)`", section, re.M))
    named |= {k for row in re.findall(r"^\| (`\w+`(?:, `\w+`)+) \|", section, re.M)
              for k in re.findall(r"`(\w+)`", row)}  # fmt: skip
    states = {"idle", "low", "used", "not_measured", "grant", "card", "sm_activity",
              "busy_time", "nothing_running", "running_idle", "memory_not_measured"}  # fmt: skip
    assert keys - named == set(), "keys the docs do not name"
    assert named - keys <= states, "keys the docs name and the JSON lacks"


answer_values = st.one_of(st.just(0.0), st.integers(min_value=0, max_value=60).map(float))


@given(
    grants=st.lists(
        st.tuples(
            st.integers(min_value=1, max_value=60),  # held steps
            st.sets(
                st.sampled_from(
                    [(r, s) for r in idle.Role if r is not idle.Role.HELD for s in idle.Stat]
                )
            ),
            answer_values,
        ),
        min_size=1,
        max_size=6,
    )
)
def test_a_figure_absent_from_the_answers_is_never_idle(
    grants: list[tuple[int, set[tuple[idle.Role, idle.Stat]], float]],
) -> None:
    """(R-X9, R-X10) From the queries' answers: a grant is idle only where its judging compute
    (SM activity, else busy time) answered steps (as many as it was held) and a peak at or
    below its threshold; a grant with neither compute's series whole in the answers, and no
    use above 0, is not measured."""
    answers: dict[tuple[idle.Role, idle.Stat], list[tuple[idle.Key, float]]] = {}
    for n, (held, present, value) in enumerate(grants):
        key = (("instance_name", f"g{n}"), ("namespace", "ns"))
        answers.setdefault((idle.Role.HELD, idle.Stat.STEPS), []).append((key, float(held)))
        answers.setdefault((idle.Role.HELD, idle.Stat.SUM), []).append((key, held * 1000.0))
        answers.setdefault((idle.Role.HELD, idle.Stat.PEAK), []).append((key, 1000.0))
        for role, stat in present:
            got = float(held) if stat is idle.Stat.STEPS else value
            answers.setdefault((role, stat), []).append((key, got))
    built = {g.holder: g for g in idle.grants_of(idle.SOURCES[0], answers)}
    assert len(built) == len(grants)
    for n, (_, present, value) in enumerate(grants):
        s = state_of(built[f"g{n}"])
        activity, cores = (
            all((role, st_) in present for st_ in (idle.Stat.STEPS, idle.Stat.PEAK))
            for role in (idle.Role.ACTIVITY, idle.Role.CORES)
        )
        peaked = any(stat is idle.Stat.PEAK for _, stat in present)
        if s is State.IDLE:
            assert (activity and value <= 1) or (cores and value == 0)
        if not activity and not cores and not (peaked and value > 0):
            assert s is State.NOT_MEASURED
