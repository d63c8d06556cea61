"""The pod index under load: 250 pods on the node and 50 watch events a second.

A fake API server in a process of its own serves the pods and modifies one of them 50 times a
second. In this process, for the same time, first a bare consumer reads the watch stream through
the same client and does nothing with the decoded events (the floor: no client can do less),
then the agent's informer keeps the index, rebuilt once a second as a monitor round would ask
for it. Reported: CPU per event of each and their ratio, and the memory the informer's state
holds against the raw pod objects it was built from.

    python bench/podindex.py [--seconds 10]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import REPO, report
from devicemanager.kube.client import KubeClient, KubeError, config_from
from devicemanager.kube.informer import PodInformer


def thread_cpu(target, seconds: float) -> float:  # type: ignore[no-untyped-def]
    """CPU seconds `target` spends on its own thread during `seconds` of wall time."""
    spent: list[float] = []
    stop = threading.Event()

    def run() -> None:
        started = time.thread_time()
        target(stop)
        spent.append(time.thread_time() - started)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    time.sleep(seconds)
    stop.set()
    thread.join(30)
    return spent[0]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--pods", type=int, default=250)
    parser.add_argument("--rate", type=float, default=50.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.kube_server",
                tmp,
                "--pods",
                str(args.pods),
                "--rate",
                str(args.rate),
            ],
            cwd=REPO,
        )
        try:
            kubeconfig = Path(tmp) / "kubeconfig"
            for _ in range(300):
                if kubeconfig.exists():
                    break
                time.sleep(0.05)
            config = config_from(kubeconfig)
            assert config is not None
            client = KubeClient(config)
            items, version = client.list_pods("node-1")
            events = [0, 0]

            def floor(stop: threading.Event) -> None:
                watch = client.watch_pods("node-1", version, timeout_seconds=int(args.seconds) + 5)
                for _ in watch:
                    events[0] += 1
                    if stop.is_set():
                        return

            floor_cpu = thread_cpu(floor, args.seconds)
            informer = PodInformer(client, "node-1")
            informer.replace_all(*client.list_pods("node-1"))

            def agent(stop: threading.Event) -> None:
                last = time.monotonic()
                watch = client.watch_pods(
                    "node-1", informer.version, timeout_seconds=int(args.seconds) + 5
                )
                try:
                    for event in watch:
                        informer.apply(event)
                        events[1] += 1
                        if time.monotonic() - last >= 1.0:
                            informer()  # what a round asks for
                            last = time.monotonic()
                        if stop.is_set():
                            return
                except KubeError:
                    return

            agent_cpu = thread_cpu(agent, args.seconds)

            tracemalloc.start()
            raw = json.loads(json.dumps(items))
            raw_bytes = tracemalloc.get_traced_memory()[0]
            tracemalloc.stop()
            tracemalloc.start()
            kept = PodInformer(client, "node-1")
            kept.replace_all(raw, version)
            index = kept()
            index_bytes = tracemalloc.get_traced_memory()[0]
            tracemalloc.stop()
            assert index is not None and len(index.pods) == args.pods
            client.close()
        finally:
            server.kill()
    per_event = agent_cpu / max(events[1], 1) * 1e6
    floor_per_event = floor_cpu / max(events[0], 1) * 1e6
    print(
        f"{args.pods} pods: informer {events[1]} events, {agent_cpu:.3f} CPU s "
        f"({per_event:.0f} us each); bare watch {events[0]} events, {floor_cpu:.3f} CPU s "
        f"({floor_per_event:.0f} us each); index {index_bytes / 1024:.0f} KiB vs "
        f"{raw_bytes / 1024:.0f} KiB of raw pods"
    )
    report(
        {
            "bench": "podindex",
            "pods": args.pods,
            "events_per_second": round(events[1] / args.seconds, 1),
            "informer_cpu_s": round(agent_cpu, 4),
            "floor_cpu_s": round(floor_cpu, 4),
            "informer_us_per_event": round(per_event, 1),
            "floor_us_per_event": round(floor_per_event, 1),
            "informer_over_floor_per_event": round(per_event / floor_per_event, 3),
            "informer_cpu_percent_of_a_core": round(agent_cpu * 100 / args.seconds, 2),
            "index_kib": round(index_bytes / 1024, 1),
            "raw_objects_kib": round(raw_bytes / 1024, 1),
            "index_over_raw_memory": round(index_bytes / raw_bytes, 3),
        }
    )


if __name__ == "__main__":
    main()
