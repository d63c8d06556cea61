"""Resident memory of `devicemanager serve` after 200 rounds of a big node, against the import
floor of everything the agent loads.

The node: 64 cards and 4,096 GPU processes answered by a live-like backend
(bench.load.LoadBackend: a fresh payload every round), 1,000 pods in the index of which 256
hold slices (16 processes each) and 744 hold no accelerator, a /proc tree of this run's making
for the 4,096 PIDs (--proc-root), rounds back to back, and a scraper reading /metrics and the
snapshot (gzip) throughout. The floor, measured in the same run: a bare interpreter that
imports what the agent imports to serve (its own modules, uvicorn, uvloop, httptools,
starlette, prometheus_client, the cluster's clients, psutil) and does nothing.
The agent loads the cluster's clients as a node in a cluster does (CLUSTER_IMPORTS), though
this bench gives it a pods file rather than an API server.
cryptography is not among them: the self-signed pair is minted by a child process.
Goal (issue 32): the agent at most 60 MiB (dcgm-exporter's users report 400 to 512 MiB).

    python bench/footprint.py [--rounds 200]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import REPO, report, start_agent
from bench.load import NODE, pod_list, write_load

MIB = 1048576
# What a node in a cluster loads at start beside the serving path (the watch and its client,
# the kubelet's summary and pod-resources readers), which `serve` imports only where those
# paths start: this bench has no API server, so the agent is made to load them as such a
# node does, by a sitecustomize of the run's making, and the floor imports them too.
CLUSTER_IMPORTS = (
    "import devicemanager.kube.client, devicemanager.kube.informer, devicemanager.kube.dra, "
    "devicemanager.kube.cluster, devicemanager.kube.kubelet, devicemanager.kube.podresources"
)
FLOOR_IMPORTS = (
    "import devicemanager.cli, devicemanager.agent.wiring, devicemanager.serve.http, "
    "bench.load, uvloop, httptools, uvicorn.protocols.http.httptools_impl, "
    f"uvicorn.lifespan.off; {CLUSTER_IMPORTS}; import time; time.sleep(60)"
)


def proc_tree(root: Path, pods: list[tuple[str, str, list[int]]]) -> None:
    """/proc/<pid>/{stat,cgroup,comm} for every process, in its pod's kubelet-shaped cgroup."""
    for uid, cid, pids in pods:
        slice_uid = uid.replace("-", "_")
        cgroup = (
            f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{slice_uid}"
            f".slice/cri-containerd-{cid}.scope\n"
        )
        for pid in pids:
            d = root / str(pid)
            d.mkdir(parents=True)
            (d / "cgroup").write_text(cgroup)
            (d / "comm").write_text("python3\n")
            # Started 1 s after boot, in state S: field 22 is the start time in ticks.
            (d / "stat").write_text(f"{pid} (python3) S " + " ".join(["0"] * 18) + " 100 0\n")


def as_in_a_cluster(root: Path) -> Path:
    """A directory whose sitecustomize loads what a node in a cluster loads (CLUSTER_IMPORTS)."""
    site = root / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(CLUSTER_IMPORTS + "\n")
    return site


def import_floor() -> int:
    proc = subprocess.Popen([sys.executable, "-c", FLOOR_IMPORTS], cwd=REPO)
    try:
        time.sleep(8)
        return int(psutil.Process(proc.pid).memory_info().rss)
    finally:
        proc.kill()
        proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--cards", type=int, default=64)
    parser.add_argument("--gpu-pods", type=int, default=256)
    parser.add_argument("--per-pod", type=int, default=16)
    parser.add_argument("--other-pods", type=int, default=744)
    args = parser.parse_args()
    gpu_pods = [
        (str(uuid.uuid4()), uuid.uuid4().hex * 2, [10_000 + p * 100 + i for i in range(n)])
        for p, n in enumerate([args.per_pod] * args.gpu_pods)
    ]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        proc_tree(root / "proc", gpu_pods)
        load, pods_file = write_load(root, args.cards, gpu_pods)
        # The node's other pods: no accelerator, indexed all the same.
        doc = pod_list(args.cards, gpu_pods)
        for n in range(args.other_pods):
            other = pod_list(1, [(str(uuid.uuid4()), uuid.uuid4().hex * 2, [])])["items"][0]
            other["metadata"]["name"] = f"web-{n}"
            other["metadata"]["annotations"] = {"app.kubernetes.io/version": "1.2.3"}
            doc["items"].append(other)
        pods_file.write_text(json.dumps(doc))
        agent, port = start_agent(
            [
                "--manufacturer",
                "bench.load:LoadBackend",
                "--pods-file",
                str(pods_file),
                "--proc-root",
                str(root / "proc"),
                "--node-name",
                NODE,
                "--monitor-period",
                "0.05",
            ],
            env={
                "DM_BENCH_LOAD": str(load),
                "PYTHONPATH": os.pathsep.join((str(REPO), str(as_in_a_cluster(root)))),
            },
        )
        try:
            stamps: set[str] = set()
            placed = 0
            deadline = time.monotonic() + 600
            with httpx.Client(verify=False, base_url=f"https://127.0.0.1:{port}") as client:
                while len(stamps) < args.rounds and time.monotonic() < deadline:
                    snap = client.get("/monitor/snapshot").json()
                    stamps.add(snap["timestamp"])
                    devices = (snap.get("slices") or {}).get("devices", ())
                    placed = sum(d.get("rowsAttributed", 0) for d in devices)
                    client.get("/metrics")
                    time.sleep(0.01)
            rss = int(psutil.Process(agent.pid).memory_info().rss)
        finally:
            agent.terminate()
            agent.wait()
    if len(stamps) < args.rounds:
        raise SystemExit(f"only {len(stamps)} rounds seen")
    processes = args.gpu_pods * args.per_pod
    if placed != processes:
        raise SystemExit(f"only {placed} of {processes} processes placed")
    floor = import_floor()
    print(
        f"{args.cards} cards, {processes} processes, {args.gpu_pods + args.other_pods} pods: "
        f"agent RSS {rss / MIB:.1f} MiB after {len(stamps)} rounds; import floor "
        f"{floor / MIB:.1f} MiB"
    )
    report(
        {
            "bench": "footprint",
            "cards": args.cards,
            "processes": processes,
            "pods": args.gpu_pods + args.other_pods,
            "rounds": len(stamps),
            "agent_rss_mib": round(rss / MIB, 1),
            "import_floor_rss_mib": round(floor / MIB, 1),
            "agent_over_floor_mib": round((rss - floor) / MIB, 1),
            "goal_at_most_60_mib": rss <= 60 * MIB,
        }
    )


if __name__ == "__main__":
    main()
