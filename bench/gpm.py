"""What GPM costs a round (issue 41): the whole monitor round with every card's activity read,
against the same round where the driver serves no GPM, in the same run.

Eight H100 cards of the fake libnvidia-ml (tests/fakelib/nvidia, compiled against the real
nvml.h and read through real pynvml), each held whole by a pod of its own, so each round does
everything a live node does for GPM: per card one GPM sample allocated, taken and kept, the
sixteen metrics between it and the previous round's sample asked and recorded, the parse into
fourteen activity figures, their card and per-grant families and the snapshot. The baseline is
the same node on a driver without GPM (`nvmlGpmQueryDeviceSupport` says no): one call per card,
busy time only.

pynvml binds its library once per process, so each variant runs in a child of its own; children
alternate in pairs (the order swapped each pair, noise hitting both alike), each timing its
steady rounds (the first two set the baseline sample) with GPM's 100 ms between rounds (the
fake refuses closer samples, as the headers do), and the ratio of their medians is printed per
pair, with its median and range. Goal: with GPM within 1.1x of without.

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


def child(library: str, scenario: str, cards: int, rounds: int) -> dict[str, Any]:
    """One variant's steady rounds, in this process (pynvml binds one library per process)."""
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


def run_child(library: Path, scenario: Path, cards: int, rounds: int) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", str(library), str(scenario),
         "--cards", str(cards), "--rounds", str(rounds)],
        cwd=REPO, capture_output=True, text=True, check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    if out.returncode != 0:
        raise SystemExit(f"a child failed: {out.stderr}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cards", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--child", nargs=2, metavar=("LIBRARY", "SCENARIO"))
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(*args.child, args.cards, args.rounds)))
        return
    from tests.fakelib import nvidia as fake

    why = fake.missing()
    if why:
        raise SystemExit(f"the fake libnvidia-ml cannot be built here: {why}")
    with tempfile.TemporaryDirectory() as tmp:
        library = fake.build(Path(tmp))
        paths = scenarios(Path(tmp), args.cards)
        runs: dict[str, list[dict[str, Any]]] = {"gpm": [], "without": []}
        for n in range(args.pairs):
            order = ("gpm", "without") if n % 2 == 0 else ("without", "gpm")
            for name in order:
                runs[name].append(run_child(library, paths[name], args.cards, args.rounds))
    ratios = sorted(
        g["round_ms"] / w["round_ms"] for g, w in zip(runs["gpm"], runs["without"], strict=True)
    )
    gpm_ms = statistics.median(r["round_ms"] for r in runs["gpm"])
    without_ms = statistics.median(r["round_ms"] for r in runs["without"])
    ratio = round(statistics.median(ratios), 3)
    print(
        f"{args.cards} cards, each held whole: a round with GPM {gpm_ms:.2f} ms "
        f"({runs['gpm'][0]['series']} series), without {without_ms:.2f} ms "
        f"({runs['without'][0]['series']} series); with/without median {ratio} "
        f"(range {ratios[0]:.3f}-{ratios[-1]:.3f}) over {args.pairs} pairs"
    )
    report(
        {
            "bench": "gpm",
            "cards": args.cards,
            "rounds": args.rounds,
            "pairs": args.pairs,
            "gpm_round_ms": round(gpm_ms, 2),
            "without_round_ms": round(without_ms, 2),
            "gpm_series": runs["gpm"][0]["series"],
            "without_series": runs["without"][0]["series"],
            "grant_activity_series": runs["gpm"][0]["grant_activity_series"],
            "gpm_over_without": ratio,
            "gpm_over_without_range": [round(ratios[0], 3), round(ratios[-1], 3)],
            "goal_within_1_1x": ratio <= 1.1,
        }
    )


if __name__ == "__main__":
    main()
