"""What GPM costs a round (issue 41): the whole monitor round with every card's activity read,
against the round as it was when issue 41 was filed (the code of TODAY, on the same node and
driver), and against this code on a driver that serves no GPM, in the same run.

Eight H100 cards of the fake libnvidia-ml (tests/fakelib/nvidia, compiled against the real
nvml.h and read through real pynvml), each held whole by a pod of its own, so each round does
everything a live node does for GPM: per card one GPM sample allocated, taken and kept, the
fourteen metrics between it and the previous round's sample asked and recorded, the parse into
fourteen activity figures, their card and per-grant families and the snapshot. Three variants:

- `gpm`: this code, the driver serving GPM;
- `today`: the code of TODAY (main before issue 41's first commit: it reads no whole card's
  GPM), extracted with `git archive`, on the same driver and node: the issue's goal, "the
  round's cost with GPM on every card stays within 10% of today", is gpm/today;
- `without`: this code on a driver without GPM (`nvmlGpmQueryDeviceSupport` says no): one call
  per card, busy time only; gpm/without is what GPM alone costs this code.

pynvml binds its library once per process, so each variant runs in a child of its own; children
take turns (the order rotated each turn, noise hitting all alike), each timing its steady rounds
(the first two set the baseline sample) with GPM's 100 ms between rounds (the fake refuses
closer samples, as the headers do), and the ratios of their medians are printed per turn, with
their median and range. Goal: gpm/today within 1.1x.

The fake answers in microseconds, so this is the agent's own cost of GPM (the calls through
pynvml, the parse, the families), not the driver's: no timing of a real driver's GPM calls was
recorded yet (a run on hardware would add it).

    python bench/gpm.py [--cards 8] [--rounds 25] [--pairs 7]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import report

REPO = Path(__file__).resolve().parent.parent
# GPM's interval (vendors/_nvml_family.py GPM_MIN_INTERVAL is 0.1 s), with room.
GAP = 0.15
WARMUP = 2  # the first round takes the baseline sample; the second is the first with metrics
# Main before issue 41's first commit (b97e949): the round as it was when the issue was filed.
TODAY = "2fb5426"


def child(library: str, scenario: str, cards: int, rounds: int, tree: str) -> dict[str, Any]:
    """One variant's steady rounds, in this process (pynvml binds one library per process), of
    the code under `tree` (this checkout, or TODAY's)."""
    sys.path.insert(0, tree)
    os.environ["FAKE_NVML_SCENARIO"] = scenario
    from devicemanager.agent.monitor import BackendWorker, Monitor
    from devicemanager.agent.wiring import settle_interpreter
    from devicemanager.node.attribution import Attributor
    from devicemanager.node.pods import PodIndex
    from tests.world import accel, pod
    from vendors.nvidia import NvidiaBackend

    pods = [pod(f"p{n}", {"main": [accel(n, 1)]}, instance=f"p{n}") for n in range(cards)]
    index = PodIndex.of(pods)
    settle_interpreter()
    with tempfile.TemporaryDirectory() as proc:
        monitor = Monitor(
            [BackendWorker(NvidiaBackend({"nvml": library}))],
            period=15,
            deadline=10,
            liveness_timeout=60,
            node="bench-node",
            pods=lambda: index,
            attributor=Attributor(Path(proc)),
        )
        times = []
        published = None
        for n in range(WARMUP + rounds):
            time.sleep(GAP)
            started = time.perf_counter()
            published = monitor.run_round()
            took = time.perf_counter() - started
            if n >= WARMUP:
                times.append(took)
        monitor.stop()
    assert published is not None
    text = published.metrics.plain.decode()
    activity = sum(
        1 for line in text.splitlines() if line.startswith("gpustack_instance_accelerator_sm_")
    )
    return {
        "round_ms": statistics.median(times) * 1000,
        "series": sum(1 for line in text.splitlines() if line and not line.startswith("#")),
        "grant_activity_series": activity,
    }


def scenarios(directory: Path, cards: int) -> dict[str, Path]:
    from tests.fakelib import nvidia as fake
    from tests.fakelib.nvidia.scenarios import GPM_QUARTER_DUTY, H100
    from tests.world import gpu

    out = {}
    for name, gpm in (("gpm", 1), ("without", 0)):
        devices = [
            fake.device(
                gpu(n),
                **H100,  # type: ignore[arg-type]
                used_mib=60_000,
                util=(80, 30),
                temp=55,
                power=500_000,
                gpm=gpm,
                gpm_metrics=dict(GPM_QUARTER_DUTY),
            )
            for n in range(cards)
        ]
        out[name] = fake.write(directory / f"{name}.txt", "570.133.20", devices)
    return out


def run_child(library: Path, scenario: Path, cards: int, rounds: int, tree: Path) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", str(library), str(scenario),
         "--cards", str(cards), "--rounds", str(rounds), "--tree", str(tree)],
        cwd=REPO, capture_output=True, text=True, check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    if out.returncode != 0:
        raise SystemExit(f"a child failed: {out.stderr}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def extract(commit: str, into: Path) -> Path:
    """The tree of `commit`, written under `into` by git archive."""
    into.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", commit], capture_output=True, check=False
    )
    if archive.returncode != 0:
        raise SystemExit(f"git archive {commit} failed (a shallow clone?): {archive.stderr!r}")
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def _ratios(over: list[dict[str, Any]], under: list[dict[str, Any]]) -> list[float]:
    return sorted(a["round_ms"] / b["round_ms"] for a, b in zip(over, under, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cards", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--child", nargs=2, metavar=("LIBRARY", "SCENARIO"))
    parser.add_argument("--tree", default=str(REPO))
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(*args.child, args.cards, args.rounds, args.tree)))
        return
    from tests.fakelib import nvidia as fake

    why = fake.missing()
    if why:
        raise SystemExit(f"the fake libnvidia-ml cannot be built here: {why}")
    variants = ("gpm", "today", "without")
    with tempfile.TemporaryDirectory() as tmp:
        library = fake.build(Path(tmp))
        paths = scenarios(Path(tmp), args.cards)
        today = extract(TODAY, Path(tmp) / "today")
        # (scenario, tree): the same GPM-serving node for this code and TODAY's.
        setups = {
            "gpm": (paths["gpm"], REPO),
            "today": (paths["gpm"], today),
            "without": (paths["without"], REPO),
        }
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
        for n in range(args.pairs):
            for name in variants[n % 3 :] + variants[: n % 3]:
                scenario, tree = setups[name]
                runs[name].append(run_child(library, scenario, args.cards, args.rounds, tree))
    median = {name: statistics.median(r["round_ms"] for r in runs[name]) for name in variants}
    over_today = _ratios(runs["gpm"], runs["today"])
    over_without = _ratios(runs["gpm"], runs["without"])
    ratio = round(statistics.median(over_today), 3)
    print(
        f"{args.cards} cards, each held whole: a round with GPM {median['gpm']:.2f} ms "
        f"({runs['gpm'][0]['series']} series); today ({TODAY}) {median['today']:.2f} ms "
        f"({runs['today'][0]['series']} series); without GPM {median['without']:.2f} ms "
        f"({runs['without'][0]['series']} series); gpm/today median {ratio} "
        f"(range {over_today[0]:.3f}-{over_today[-1]:.3f}), gpm/without median "
        f"{statistics.median(over_without):.3f} over {args.pairs} turns"
    )
    report(
        {
            "bench": "gpm",
            "cards": args.cards,
            "rounds": args.rounds,
            "pairs": args.pairs,
            "today": TODAY,
            "gpm_round_ms": round(median["gpm"], 2),
            "today_round_ms": round(median["today"], 2),
            "without_round_ms": round(median["without"], 2),
            "gpm_series": runs["gpm"][0]["series"],
            "today_series": runs["today"][0]["series"],
            "without_series": runs["without"][0]["series"],
            "grant_activity_series": runs["gpm"][0]["grant_activity_series"],
            "gpm_over_today": ratio,
            "gpm_over_today_range": [round(over_today[0], 3), round(over_today[-1], 3)],
            "gpm_over_without": round(statistics.median(over_without), 3),
            "gpm_over_without_range": [round(over_without[0], 3), round(over_without[-1], 3)],
            "goal_within_1_1x": ratio <= 1.1,
        }
    )


if __name__ == "__main__":
    main()
