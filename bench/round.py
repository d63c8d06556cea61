"""A whole monitor round on real /proc: 1,024 GPU processes in 64 pods, each pod in a real
kubelet-shaped cgroup (systemd driver, containerd scopes) on every writable hierarchy of this
host, against the floor of reading each process's /proc/<pid>/stat and /proc/<pid>/cgroup once.

The round is what the agent does every period: grants from the pods' annotations, the vendor's
per-process answer (a backend answering like a live one: 8 cards, every process on one), the
attribution of every PID through /proc, the slices section, the snapshot, the Instance figures
and both renderings of /metrics. Steady state: the (PID, start time, cgroup) cache is warm, as
it is from the second round on. Floor and round alternate in pairs (noise hits both alike);
the ratio's median and range are printed. Goal: the round within 1.2x of the floor. Needs root
(it makes cgroups and moves processes into them; everything is removed afterwards).

    python bench/round.py [--processes 1024] [--pods 64] [--pairs 15]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import report
from devicemanager.attribution import Attributor
from devicemanager.model import (
    MIB,
    Card,
    DeviceProcesses,
    Payload,
    ProcessRow,
    ReadRequest,
    VendorReading,
)
from devicemanager.monitor import BackendWorker, Monitor
from devicemanager.pods import PodIndex
from devicemanager.procfs import read_bytes

CARDS = 8
SKIPPED = {"cpuset", "memory"}  # need settings before a task may join; not needed for a path


def hierarchies() -> list[Path]:
    out = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _, mount, fstype, options, *_ = line.split()
        if fstype == "cgroup2" or (fstype == "cgroup" and not SKIPPED & set(options.split(","))):
            out.append(Path(mount))
    return out


@contextmanager
def kubelet_cgroups(pods: int, per_pod: int) -> Iterator[list[tuple[str, str, list[int]]]]:
    """(pod UID, container id, PIDs) of `pods` pods, each with `per_pod` sleeping processes in
    its container's cgroup; removed afterwards."""
    tag = f"devicemanager-bench-{secrets.token_hex(4)}"
    made: list[Path] = []
    children: list[subprocess.Popen[bytes]] = []
    out = []
    try:
        for _ in range(pods):
            uid = str(uuid.uuid4())
            cid = secrets.token_hex(32)
            relative = (
                f"{tag}/kubepods.slice/kubepods-burstable.slice/"
                f"kubepods-burstable-pod{uid.replace('-', '_')}.slice/cri-containerd-{cid}.scope"
            )
            leaves = []
            for mount in hierarchies():
                current = mount
                for part in relative.split("/"):
                    current = current / part
                    if not current.exists():
                        current.mkdir()
                        made.append(current)
                leaves.append(current)
            pids = []
            for _ in range(per_pod):
                child = subprocess.Popen(["sleep", "3600"])
                children.append(child)
                for leaf in leaves:
                    (leaf / "cgroup.procs").write_text(str(child.pid))
                pids.append(child.pid)
            out.append((uid, cid, pids))
        yield out
    finally:
        for child in children:
            child.kill()
        for child in children:
            child.wait()
        time.sleep(0.1)
        for path in sorted(made, key=lambda p: len(p.parts), reverse=True):
            for _ in range(100):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


def gpu(n: int) -> str:
    return f"GPU-{uuid.UUID(int=n + 1)}"


def pod_objects(pods: list[tuple[str, str, list[int]]]) -> list[dict[str, Any]]:
    """Each pod holds a 1/8 slice of one card, as GPUStack writes it."""
    objects = []
    for p, (uid, cid, _) in enumerate(pods):
        allocated = {
            "main": {
                "devices": {
                    "groups": [
                        {
                            "manufacturer": "nvidia",
                            "accelerators": [
                                {"id": gpu(p % CARDS), "index": p % CARDS, "mode": 3,
                                 "allocated": 200_000}
                            ],
                        }
                    ]
                }
            }
        }  # fmt: skip
        objects.append(
            {
                "metadata": {
                    "uid": uid,
                    "name": f"bench-{p}",
                    "namespace": "bench",
                    "annotations": {
                        "device.gpustack.ai/accelerator.allocated": json.dumps(allocated)
                    },
                },
                "spec": {"containers": [{"name": "main"}]},
                "status": {
                    "phase": "Running",
                    "containerStatuses": [
                        {
                            "name": "main",
                            "containerID": f"containerd://{cid}",
                            "state": {"running": {}},
                        }
                    ],
                },
            }
        )
    return objects


class LiveLike:
    """Answers like a live backend: the cards, and every process on the card its pod holds."""

    manufacturer = "nvidia"

    def __init__(self, pods: list[tuple[str, str, list[int]]]) -> None:
        rows: dict[str, list[ProcessRow]] = {gpu(n): [] for n in range(CARDS)}
        for p, (_, _, pids) in enumerate(pods):
            rows[gpu(p % CARDS)] += [ProcessRow(pid, 512 * MIB, 1.0) for pid in pids]
        self.reading = VendorReading(
            "nvidia",
            tuple(
                Card(gpu(n), n, "NVIDIA H100 80GB HBM3", 81559, 40000, 50.0, 50.0, 300.0)
                for n in range(CARDS)
            ),
            tuple(DeviceProcesses(device, tuple(r)) for device, r in rows.items()),
            driver_version="550.90.07",
        )

    def open(self) -> None:
        pass

    def read(self, request: ReadRequest) -> Payload:
        return {}

    def parse(self, payload: Payload) -> VendorReading:
        return self.reading

    def close(self) -> None:
        pass


def floor(pids: list[int]) -> None:
    """The least a round must do: read each process's stat and cgroup once, as cheaply as
    Python can (plain open/read/close, the way the agent reads them)."""
    for pid in pids:
        for name in ("stat", "cgroup"):
            read_bytes(f"/proc/{pid}/{name}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--processes", type=int, default=1024)
    parser.add_argument("--pods", type=int, default=64)
    parser.add_argument("--pairs", type=int, default=15)
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench/round.py makes cgroups: run it as root")
    with kubelet_cgroups(args.pods, args.processes // args.pods) as pods:
        pids = [pid for _, _, p in pods for pid in p]
        index = PodIndex.of(pod_objects(pods))
        monitor = Monitor(
            [BackendWorker(LiveLike(pods))],
            period=15,
            deadline=10,
            liveness_timeout=60,
            node="bench",
            pods=lambda: index,
            attributor=Attributor(Path("/proc")),
        )
        first_started = time.perf_counter()
        published = monitor.run_round()
        first = time.perf_counter() - first_started
        devices = published.snapshot.slices.devices if published.snapshot.slices else ()
        attributed = sum(d.rows_attributed for d in devices)
        assert attributed == len(pids), f"only {attributed} of {len(pids)} processes placed"
        rounds, floors = [], []
        for _ in range(args.pairs):
            started = time.perf_counter()
            floor(pids)
            floors.append(time.perf_counter() - started)
            started = time.perf_counter()
            monitor.run_round()
            rounds.append(time.perf_counter() - started)
        monitor.stop()
    ratios = sorted(r / f for r, f in zip(rounds, floors, strict=True))
    ms = 1000.0
    print(
        f"{len(pids)} processes in {args.pods} pods on real /proc: steady round "
        f"{statistics.median(rounds) * ms:.1f} ms, floor {statistics.median(floors) * ms:.1f} ms, "
        f"round/floor median {statistics.median(ratios):.2f} "
        f"(range {ratios[0]:.2f}-{ratios[-1]:.2f}); first round {first * ms:.1f} ms"
    )
    report(
        {
            "bench": "round",
            "processes": len(pids),
            "pods": args.pods,
            "pairs": args.pairs,
            "round_ms": round(statistics.median(rounds) * ms, 2),
            "floor_ms": round(statistics.median(floors) * ms, 2),
            "first_round_ms": round(first * ms, 2),
            "round_over_floor": round(statistics.median(ratios), 3),
            "round_over_floor_range": [round(ratios[0], 3), round(ratios[-1], 3)],
            "goal_within_1_2x": statistics.median(ratios) <= 1.2,
        }
    )


if __name__ == "__main__":
    main()
