"""`devicemanager summarize --prometheus URL --window 1h` (R-X9): idle grants, holders far below
their grant, and per namespace the accelerator-hours held against those used.

The rule itself is held to its definition by hypothesis: a grant whose use was not measured at
every step it was held, and showed no use where it was, is "not measured" and never "idle".
Then a real Prometheus (Debian's package), whose TSDB was backfilled by `promtool tsdb
create-blocks-from openmetrics` with two hours of recorded series (an idle grant, a busy one,
one never measured, one far below its grant, one with a burst between two steps, one measured
for half the window, a Shared card with two holders, and HAMi monitor containers), is asked by
the command at a time inside the block; its figures are worked out here by hand.
"""

from __future__ import annotations

import json
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
    )


def zero(steps: int = 60) -> Figure:
    return Figure(steps, 0.0, 0.0)


def test_idle_needs_both_figures_measured_at_zero_throughout() -> None:
    """(R-X9) Idle is memory used and compute both measured at every step held and both 0;
    either one missing, or measured for part of the window only, is not measured."""
    assert state_of(grant(memory=zero(), cores=zero())) is State.IDLE
    assert state_of(grant()) is State.NOT_MEASURED  # only the total: never idle
    assert state_of(grant(memory=zero())) is State.NOT_MEASURED  # compute unsupported
    assert state_of(grant(cores=zero())) is State.NOT_MEASURED
    assert state_of(grant(memory=zero(30), cores=zero())) is State.NOT_MEASURED  # half
    assert state_of(grant(memory=Figure(60, 0.0, None), cores=zero())) is State.NOT_MEASURED
    # A burst the steps did not see, but the peak of every stored sample did: used.
    assert state_of(grant(memory=Figure(60, 0.0, 200.0), cores=zero())) is State.USED
    # Measured use, even where the other figure is not measured: not idle.
    assert state_of(grant(memory=Figure(60, 6000.0, 120.0))) is State.USED


def test_far_below_its_grant_is_under_the_stated_thresholds() -> None:
    """(R-X9) Low: peak memory under 10% of the total and mean compute under 10%, both
    measured throughout; at either threshold it is used."""
    low = grant(memory=Figure(60, 60 * 50.0, 99.0), cores=Figure(60, 60 * 9.9, 40.0))
    assert state_of(low) is State.LOW
    at_memory = grant(memory=Figure(60, 0.0, 100.0), cores=zero())
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


@given(held=st.integers(min_value=1, max_value=120), memory=figures, cores=figures)
def test_unmeasured_is_never_idle(held: int, memory: Figure | None, cores: Figure | None) -> None:
    """(R-X9) For any figures: idle exactly when both were measured at every step held and
    peaked at 0; a grant missing either figure at some step, with no measured use above 0,
    is not measured."""
    g = grant(held, memory, cores)
    s = state_of(g)
    fully = [f is not None and f.peak is not None and f.steps >= held for f in (memory, cores)]
    used = any(f is not None and f.peak is not None and f.peak > 0 for f in (memory, cores))
    assert (s is State.IDLE) == (all(fully) and not used and all(
        f is not None and f.peak == 0 for f in (memory, cores)))  # fmt: skip
    if not all(fully) and not used:
        assert s is State.NOT_MEASURED
    if used:
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
    ):
        add(total, agent_labels(name), const(1000))
        add(used, agent_labels(name), mem)
        add(cores, agent_labels(name), cpu)
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
    """(R-X9) Over the backfilled hour: the grant at a measured 0 is idle; the one with only
    a total, and the one measured for half the window, are not measured; a burst between two
    steps makes its grant used; 5% of memory and 3% compute is far below its grant."""
    url, at = backfilled
    doc = window_of(url, at, "--label", "cluster=agent")
    assert doc["basis"] == "devicemanager" and doc["window_seconds"] == 3600
    assert doc["step_seconds"] == 60 and doc["at"] == at
    states = {g["holder"]: g["state"] for g in doc["grants"]}
    assert states == {
        "idle": "idle", "busy": "used", "low": "low", "blip": "used",
        "unmeasured": "not_measured", "half": "not_measured",
        "nb-1": "used", "nb-2": "used",
    }  # fmt: skip
    by = {g["holder"]: g for g in doc["grants"]}
    assert by["blip"]["memory_used_peak_mib"] == 200.0 and by["blip"]["memory_used_mean_mib"] == 0
    assert by["unmeasured"]["memory_used_peak_mib"] is None
    assert by["unmeasured"]["memory_measured_hours"] == 0
    assert by["half"]["memory_measured_hours"] == 0.5 and by["half"]["held_hours"] == 1.0
    assert by["low"]["memory_total_mib"] == 1000.0 and by["low"]["compute_mean_percent"] == 3.0


def test_each_namespace_held_against_used(backfilled: tuple[str, int]) -> None:
    """(R-X9) Worked out by hand: team-a holds six grants for the hour (6,000 MiB·h) and was
    measured using 600 + 50 MiB·h over 4.5 measured hours, compute 0.5 + 0.03 grant-hours;
    team-b's Shared card counts once (80,000 MiB·h held, 8,000 used, 0.2 compute-hours)."""
    url, at = backfilled
    ns = window_of(url, at, "--label", "cluster=agent")["namespaces"]
    assert ns["team-a"] == {
        "grants": 6, "held_hours": 6.0, "memory_held_mib_hours": 6000.0,
        "memory_used_mib_hours": 650.0, "memory_measured_hours": 4.5,
        "compute_used_hours": 0.53, "compute_measured_hours": 4.5,
        "idle": 1, "low": 1, "not_measured": 2,
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
    assert "Idle (memory used and compute measured at 0 at every step held): 1" in section
    assert "team-a/idle on gpu-a GPU-1 (Exclusive): held 1 h (measured: memory 1 h" in section
    assert "team-a/half on gpu-a GPU-1 (Exclusive): held 1 h (measured: memory 0.5 h" in section
    assert "under 10% of its total, mean compute under 10%): 1" in section
    assert "Not measured (held, its use not measured throughout: never idle): 2" in section
    assert "team-b: 1 grant(s), 1 h" in section
    assert summarize_cli("--window", "1h", "-").returncode == 2
    assert summarize_cli("--at", "0", "-").returncode == 2
    assert summarize_cli("--prometheus", url, "--window", "1hour").returncode == 2
    assert summarize_cli("--prometheus", url, "--at", "2026-12-03T12:00:00").returncode == 2


def test_the_queries_are_instant_over_the_window() -> None:
    """(R-X9) Steps and sums over the window's steps (a subquery), peaks over every stored
    sample; --label's matchers in each."""
    asked = [q for _, _, q in idle.queries(idle.SOURCES[0], 3600, 60, (("cluster", "p"),))]
    assert f'count_over_time({AGENT}memory_total_mib{{cluster="p"}}[3600s:60s])' in asked
    assert f'max_over_time({AGENT}memory_used_mib{{cluster="p"}}[3600s])' in asked
    assert len(asked) == 9
    assert idle.step_for(3600) == 60 and idle.step_for(300) == 30 and idle.step_for(5) == 1


def test_the_dashboards_idle_panel_lists_only_the_idle_grant(backfilled: tuple[str, int]) -> None:
    """(R-X9) The dashboard's "Idle allocations" panel, run by the backfilled Prometheus at the
    window's end, lists the grant measured at 0 throughout and none other: not the burst
    between two steps, not the grant measured for half the window, not the unmeasured one."""
    url, at = backfilled
    dashboard = json.loads((REPO / "deploy" / "grafana-dashboard.json").read_text())
    (panel,) = (p for p in dashboard["panels"] if p["title"] == "Idle allocations")
    assert panel is dashboard["panels"][-1]
    expr = panel["targets"][0]["expr"].replace("$node", ".*").replace("$namespace", ".*")
    doc = httpx.get(f"{url}/api/v1/query", params={"query": expr, "time": at}, timeout=10).json()
    assert doc["status"] == "success", doc
    listed = {
        (r["metric"]["namespace"], r["metric"]["instance_name"]) for r in doc["data"]["result"]
    }
    assert listed == {("team-a", "idle")}


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
    states = {"idle", "low", "used", "not_measured", "grant", "card"}
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
    """(R-X9) From the queries' answers: a grant is idle only where both its memory used and
    its compute answered steps (as many as it was held) and a peak, all at 0; a grant with any
    of those series missing from the answers, and no use above 0, is not measured."""
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
        whole = all((r, st_) in present for r in (idle.Role.MEMORY, idle.Role.CORES)
                    for st_ in (idle.Stat.STEPS, idle.Stat.PEAK))  # fmt: skip
        peaked = any(stat is idle.Stat.PEAK for _, stat in present)
        if s is State.IDLE:
            assert whole and value == 0
        if not whole and not (peaked and value > 0):
            assert s is State.NOT_MEASURED
