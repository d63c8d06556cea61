"""The load the serving benchmarks put on the agent: cards, pods holding them, their processes.

`LoadBackend` (`--manufacturer bench.load:LoadBackend`) answers like a live backend: every
round `read()` builds a fresh payload (cards and per-process rows, as a library's answers
arrive), and `parse()` turns it into a reading, so a round costs what a live one does. What it
answers is a JSON file named by `DM_BENCH_LOAD`, written by `write_load`:

    {"cards": 64, "processes": {"<card index>": [pid, ...]}}

`write_load` also writes the node's pods (a PodList for `--pods-file`): pod `i` holds half of
card `i % cards` as a GPUStack slice, so each pod is an Instance with its own per-Instance
series, and a slice's figures need every one of its processes placed through /proc (a whole
card would need none). `kubelet_cgroups` makes real processes in real kubelet-shaped cgroups
for them (root only).
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from devicemanager.model import (
    MIB,
    Card,
    DeviceProcesses,
    Payload,
    ProcessRow,
    ReadRequest,
    VendorReading,
)

NODE = "bench-node"
SKIPPED_CONTROLLERS = {"cpuset", "memory"}  # need settings before a task may join one


def card_id(n: int) -> str:
    return f"GPU-{uuid.UUID(int=n + 1)}"


class LoadBackend:
    manufacturer = "nvidia"

    def __init__(self, library: str | None = None, load: dict[str, Any] | None = None) -> None:
        if load is None:
            load = json.loads(Path(os.environ["DM_BENCH_LOAD"]).read_text())
        self.cards = int(load["cards"])
        self.processes = {int(k): [int(p) for p in v] for k, v in load["processes"].items()}

    def open(self) -> None:
        pass

    def read(self, request: ReadRequest) -> Payload:
        return {
            "cards": [
                {"id": card_id(n), "index": n, "used": 40_000 + n, "util": float(n % 100)}
                for n in range(self.cards)
            ],
            "processes": {
                card_id(n): [[pid, 512 * MIB, 1.0] for pid in self.processes.get(n, ())]
                for n in range(self.cards)
            },
        }

    def parse(self, payload: Payload) -> VendorReading:
        cards = tuple(
            Card(
                id=c["id"],
                index=c["index"],
                name="NVIDIA H100 80GB HBM3",
                memory_total_mib=81559,
                memory_used_mib=c["used"],
                cores_utilization_percent=c["util"],
                temperature_celsius=50.0,
                power_usage_watts=300.0,
            )
            for c in payload["cards"]
        )
        processes = tuple(
            DeviceProcesses(device, tuple(ProcessRow(*row) for row in rows))
            for device, rows in payload["processes"].items()
        )
        return VendorReading("nvidia", cards, processes, driver_version="550.90.07")

    def close(self) -> None:
        pass


def pod_object(p: int, uid: str, cid: str, cards: int, units: int) -> dict[str, Any]:
    allocated = {
        "main": {
            "devices": {
                "groups": [
                    {
                        "manufacturer": "nvidia",
                        "accelerators": [
                            {"id": card_id(p % cards), "index": p % cards, "mode": 3,
                             "allocated": units}
                        ],
                    }
                ]
            }
        }
    }  # fmt: skip
    return {
        "metadata": {
            "uid": uid,
            "name": f"bench-{p}",
            "namespace": "bench",
            "annotations": {"device.gpustack.ai/accelerator.allocated": json.dumps(allocated)},
        },
        "spec": {"nodeName": NODE, "containers": [{"name": "main"}]},
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {"name": "main", "containerID": f"containerd://{cid}", "state": {"running": {}}}
            ],
        },
    }


def load_of(cards: int, pods: list[tuple[str, str, list[int]]]) -> dict[str, Any]:
    """What LoadBackend answers for `pods` (pod UID, container id, PIDs) on `cards` cards."""
    processes: dict[str, list[int]] = {}
    for p, (_, _, pids) in enumerate(pods):
        processes.setdefault(str(p % cards), []).extend(pids)
    return {"cards": cards, "processes": processes}


def pod_list(cards: int, pods: list[tuple[str, str, list[int]]]) -> dict[str, Any]:
    """The node's pods: pod `i` a slice of card `i % cards`; a card's slices add up to at
    most the card, each at most half of it."""
    units = min(800_000, 1_600_000 * cards // max(1, len(pods)))
    items = [pod_object(p, uid, cid, cards, units) for p, (uid, cid, _) in enumerate(pods)]
    return {"kind": "PodList", "apiVersion": "v1", "items": items}


def write_load(
    directory: Path, cards: int, pods: list[tuple[str, str, list[int]]]
) -> tuple[Path, Path]:
    """The backend's answer and the node's pods, as files for `DM_BENCH_LOAD` and
    `--pods-file`."""
    load = directory / "load.json"
    load.write_text(json.dumps(load_of(cards, pods)))
    pods_file = directory / "pods.json"
    pods_file.write_text(json.dumps(pod_list(cards, pods)))
    return load, pods_file


def hierarchies() -> list[Path]:
    out = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _, mount, fstype, options, *_ = line.split()
        if fstype == "cgroup2" or (
            fstype == "cgroup" and not SKIPPED_CONTROLLERS & set(options.split(","))
        ):
            out.append(Path(mount))
    return out


def pods_without_processes(pods: int) -> list[tuple[str, str, list[int]]]:
    return [(str(uuid.uuid4()), secrets.token_hex(32), []) for _ in range(pods)]


@contextmanager
def kubelet_cgroups(pods: int, per_pod: int) -> Iterator[list[tuple[str, str, list[int]]]]:
    """(pod UID, container id, PIDs) of `pods` pods, each with `per_pod` sleeping processes in
    its container's cgroup (systemd driver, containerd scopes) on every writable hierarchy of
    this host; all removed afterwards. Needs root."""
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
