"""Attribution cost: 1,024 GPU processes across 64 pods in a generated /proc tree.

Measures the first round (every PID read in full: stat, cgroup, comm, cgroup, stat) and a
steady-state round (the (PID, start time, cgroup text) cache: stat and cgroup per PID, so a
process moved to another cgroup is noticed), beside the floor, the bare cost of reading each
PID's stat and cgroup once with open/read, and the old floor (stat alone, what the cache read
before it had to notice moves). Best of several repetitions, all in one run. Goal: steady
state within 1.5x of the floor.

    python bench/attribution.py [--processes 1024] [--pods 64]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import report
from devicemanager.node.attribution import Resolver
from devicemanager.node.pods import PodIndex


def generate(root: Path, processes: int, pods: int) -> tuple[list[int], PodIndex]:
    objects: list[dict[str, Any]] = []
    pids = []
    for p in range(pods):
        uid = str(uuid.UUID(int=p + 1))
        cid = f"{p:064x}"
        objects.append(
            {
                "metadata": {"uid": uid, "name": f"pod-{p}", "namespace": "bench"},
                "status": {
                    "containerStatuses": [
                        {
                            "name": "main",
                            "containerID": f"containerd://{cid}",
                            "state": {"running": {}},
                        }
                    ]
                },
            }
        )
        for i in range(processes // pods):
            pid = 10_000 + p * 100 + i
            d = root / str(pid)
            d.mkdir()
            u = uid.replace("-", "_")
            (d / "cgroup").write_text(
                f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice/"
                f"cri-containerd-{cid}.scope\n"
            )
            (d / "comm").write_text("python3\n")
            tail = " ".join(["0"] * 30)
            (d / "stat").write_text(
                f"{pid} (python3) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {5000 + pid} {tail}\n"
            )
            pids.append(pid)
    return pids, PodIndex.of(objects)


def best(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--processes", type=int, default=1024)
    parser.add_argument("--pods", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        pids, index = generate(root, args.processes, args.pods)

        def floor() -> None:
            for pid in pids:
                for name in ("stat", "cgroup"):
                    with open(f"{root}/{pid}/{name}", "rb") as f:
                        f.read()

        def stat_only() -> None:
            for pid in pids:
                with open(f"{root}/{pid}/stat", "rb") as f:
                    f.read()

        def first() -> None:
            Resolver(root).resolve(pids, index)

        warm = Resolver(root)
        result = warm.resolve(pids, index)
        assert all(r.placement is not None for r in result.values()), "generated tree misread"

        def steady() -> None:
            warm.resolve(pids, index)

        floor()  # page cache warm for all three
        floor_s, first_s, steady_s, stat_s = (
            best(floor, args.repeat),
            best(first, args.repeat),
            best(steady, args.repeat),
            best(stat_only, args.repeat),
        )
        fresh = Resolver(root)
        fresh.resolve(pids, index)
        first_reads = fresh.reads
        fresh.reads = 0
        fresh.resolve(pids, index)
        steady_reads = fresh.reads
    ms = 1000.0
    print(
        f"{len(pids)} processes in {args.pods} pods: floor {floor_s * ms:.2f} ms, "
        f"first round {first_s * ms:.2f} ms, steady state {steady_s * ms:.2f} ms "
        f"({first_reads} files read in the first round, {steady_reads} in a steady one)"
    )
    report(
        {
            "bench": "attribution",
            "processes": len(pids),
            "pods": args.pods,
            "floor_ms": round(floor_s * ms, 3),
            "first_round_ms": round(first_s * ms, 3),
            "steady_round_ms": round(steady_s * ms, 3),
            "first_over_floor": round(first_s / floor_s, 3),
            "steady_over_floor": round(steady_s / floor_s, 3),
            "steady_over_stat_only": round(steady_s / stat_s, 3),
            "first_reads_per_pid": first_reads / len(pids),
            "steady_reads_per_pid": steady_reads / len(pids),
            "goal_steady_within_1_5x": steady_s / floor_s <= 1.5,
        }
    )


if __name__ == "__main__":
    main()
