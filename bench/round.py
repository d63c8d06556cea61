"""A whole monitor round on real /proc: 1,024 GPU processes in 64 pods, each pod in a real
kubelet-shaped cgroup (systemd driver, containerd scopes) on every writable hierarchy of this
host, against the floor of reading each process's /proc/<pid>/stat and /proc/<pid>/cgroup once.

The round is what the agent does every period, configured as on a live node: grants from the
pods' annotations, the vendor's per-process answer (bench.load.LoadBackend: a payload built
afresh each round, 8 cards, every pod a slice of one), the attribution of every PID through
/proc (start times checked against the vendor's read, each placed process held by a pidfd),
the slices section, the snapshot and its gzip, the Instance figures and both renderings of
/metrics. Steady state: the cache is warm, as it is from the second round on. Floor and round
alternate in pairs (noise hits both alike); the ratio's median and range are printed, and the
round once more with pidfds off (stat and cgroup read per PID, as on a kernel without them).
Goal: the round within 1.2x of the floor. Needs root (it makes cgroups and moves processes
into them; everything is removed afterwards).

    python bench/round.py [--processes 1024] [--pods 64] [--pairs 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import report
from bench.load import LoadBackend, kubelet_cgroups, load_of, pod_list
from devicemanager.agent.monitor import BackendWorker, Monitor
from devicemanager.agent.wiring import settle_interpreter
from devicemanager.node.attribution import Attributor
from devicemanager.node.pods import PodIndex
from devicemanager.node.procfs import read_bytes

CARDS = 8


def floor(pids: list[int]) -> None:
    """The least a round must do: read each process's stat and cgroup once, as cheaply as
    Python can (plain open/read/close, the way the agent reads them)."""
    for pid in pids:
        read_bytes(f"/proc/{pid}/stat")
        read_bytes(f"/proc/{pid}/cgroup")


def monitor_for(pods: list[tuple[str, str, list[int]]], pidfds: bool) -> Monitor:
    index = PodIndex.from_list(pod_list(CARDS, pods))
    settle_interpreter()  # as `serve` does before its first round
    return Monitor(
        [BackendWorker(LoadBackend(load=load_of(CARDS, pods)))],
        period=15,
        deadline=10,
        liveness_timeout=60,
        node="bench-node",
        pods=lambda: index,
        attributor=Attributor(Path("/proc"), recycled_check=True, pidfds=pidfds),
    )


def timed_pairs(monitor: Monitor, pids: list[int], pairs: int) -> tuple[list[float], list[float]]:
    rounds, floors = [], []
    for _ in range(pairs):
        started = time.perf_counter()
        floor(pids)
        floors.append(time.perf_counter() - started)
        started = time.perf_counter()
        monitor.run_round()
        rounds.append(time.perf_counter() - started)
    return rounds, floors


def summary(rounds: list[float], floors: list[float]) -> dict[str, Any]:
    ratios = sorted(r / f for r, f in zip(rounds, floors, strict=True))
    return {
        "round_ms": round(statistics.median(rounds) * 1000, 2),
        "floor_ms": round(statistics.median(floors) * 1000, 2),
        "round_over_floor": round(statistics.median(ratios), 3),
        "round_over_floor_range": [round(ratios[0], 3), round(ratios[-1], 3)],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--processes", type=int, default=1024)
    parser.add_argument("--pods", type=int, default=64)
    parser.add_argument("--pairs", type=int, default=15)
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench/round.py makes cgroups: run it as root")
    results = {}
    with kubelet_cgroups(args.pods, args.processes // args.pods) as pods:
        pids = [pid for _, _, p in pods for pid in p]
        for name, pidfds in (("pidfds", True), ("stat", False)):
            monitor = monitor_for(pods, pidfds)
            started = time.perf_counter()
            published = monitor.run_round()
            first = time.perf_counter() - started
            devices = published.snapshot.slices.devices if published.snapshot.slices else ()
            placed = sum(d.rows_attributed for d in devices)
            assert placed == len(pids), f"only {placed} of {len(pids)} processes placed"
            results[name] = {
                **summary(*timed_pairs(monitor, pids, args.pairs)),
                "first_round_ms": round(first * 1000, 2),
            }
            monitor.stop()
    live = results["pidfds"]
    for name, figures in results.items():
        print(
            f"{len(pids)} processes in {args.pods} pods on real /proc ({name}): steady round "
            f"{figures['round_ms']} ms, floor {figures['floor_ms']} ms, round/floor median "
            f"{figures['round_over_floor']} (range {figures['round_over_floor_range']}); "
            f"first round {figures['first_round_ms']} ms"
        )
    report(
        {
            "bench": "round",
            "processes": len(pids),
            "pods": args.pods,
            "pairs": args.pairs,
            **live,
            "without_pidfds": results["stat"],
            "goal_within_1_2x": live["round_over_floor"] <= 1.2,
        }
    )


if __name__ == "__main__":
    main()
