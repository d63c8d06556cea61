"""The agent beside Debian's prometheus-node-exporter, under the same scrape load (issue 32).

Both run on this machine at once, each scraped as Prometheus scrapes it: one keep-alive
connection, `/metrics` every 15 s, `Accept-Encoding: gzip`, over TLS (node_exporter is given
a pair minted for the run through `--web.config.file`). The agent replays the MI300X node at
the default period (15 s). After a warm-up, each window samples both processes' resident
set (`/proc/<pid>/status` VmRSS, at the window's end) and CPU time (user + system over the
window); the ratios agent/node_exporter are taken per window, and reported as the median
and range of the windows.

A third process runs beside them, scraped the same way: the agent as a node in a cluster runs it
(bench/cluster_node.py), the same recorded MI300X cards but its pods watched through the tests'
fake API server, the kubelet's summary, pod-resources socket (the tests' fake gRPC server) and
ResourceSlices read live: every cluster client loaded and working. With --baseline
CHECKOUT, a fourth does the same from another checkout (what a change saves, in one run).

The real node's row is the cluster row plus what the vendor library adds, measured on hardware
(HARDWARE: the agent on an H200 against the same agent replaying, same machine, same minute),
until a run on hardware replaces it; its ratio is to the node_exporter measured here.

    python bench/peer.py [--windows 4] [--window-seconds 60] [--warmup 30] [--baseline DIR]

Needs `prometheus-node-exporter` (Debian: `apt-get install prometheus-node-exporter`);
without it the bench says so and exits 2. Tests never need it. Prints one JSON line last.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.cluster_node import agent_args, wait_for_world
from bench.common import REPO, free_port, report, start_agent

MIB = 1048576
TICKS = os.sysconf("SC_CLK_TCK")
NODE = "mi300x-8gpu-cpx-mixed"
SCENARIO = REPO / "fixtures" / "nodes" / NODE
# What the vendor library costs a real node, measured on hardware: the agent on the card (NVML
# initialised, one CUDA pod, no cluster clients) against the same agent replaying a recorded
# node, same machine, same minute (../shared/recorded/nvidia-h200-2026-12-04, method/run3.sh).
ON_CARD_MIB, REPLAYING_MIB = 62.5, 46.6  # the agent's resident set, each way
HARDWARE = {
    "card": "NVIDIA H200",
    "driver": "580.159.04",
    "date": "2026-12-04",
    "agent_on_card_rss_mib": ON_CARD_MIB,
    "agent_replaying_rss_mib": REPLAYING_MIB,
    "node_exporter_rss_mib": 21.1,
}
VENDOR_LIBRARY_MIB = round(ON_CARD_MIB - REPLAYING_MIB, 1)
INSTALL = "prometheus-node-exporter is not installed: apt-get install prometheus-node-exporter"


def node_exporter() -> str | None:
    return shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")


def rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    kib = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS"))
    return kib / 1024


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def scrape(url: str, stop: threading.Event, counts: dict[str, int]) -> None:
    """As Prometheus: one connection, gzip, every 15 s."""
    with httpx.Client(verify=False, timeout=10, headers={"Accept-Encoding": "gzip"}) as client:
        while not stop.is_set():
            try:
                status = str(client.get(url).status_code)
            except httpx.HTTPError as exc:
                status = type(exc).__name__
            counts[status] = counts.get(status, 0) + 1
            stop.wait(15)


def start_node_exporter(binary: str, workdir: Path) -> tuple[subprocess.Popen[bytes], int]:
    from devicemanager.serve.mint import write_pair

    write_pair(workdir, ["localhost", "127.0.0.1"])
    config = workdir / "web.yml"
    config.write_text(
        f"tls_server_config:\n  cert_file: {workdir / 'tls.crt'}\n"
        f"  key_file: {workdir / 'tls.key'}\n"
    )
    port = free_port()
    proc = subprocess.Popen(
        [
            binary,
            f"--web.listen-address=127.0.0.1:{port}",
            f"--web.config.file={config}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"https://127.0.0.1:{port}/metrics", verify=False).status_code == 200:
                return proc, port
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise SystemExit("node_exporter never answered /metrics")


def summary(values: list[float], digits: int = 3) -> dict[str, object]:
    return {
        "median": round(statistics.median(values), digits),
        "range": [round(min(values), digits), round(max(values), digits)],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--windows", type=int, default=4)
    parser.add_argument("--window-seconds", type=float, default=60)
    parser.add_argument("--warmup", type=float, default=30)
    parser.add_argument(
        "--baseline", default="", help="another checkout, measured in a cluster too"
    )
    args = parser.parse_args()
    binary = node_exporter()
    if binary is None:
        print(INSTALL, file=sys.stderr)
        raise SystemExit(2)
    asked = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False)
    version = (asked.stdout + asked.stderr).splitlines()[:1] or ["unknown"]
    with tempfile.TemporaryDirectory() as tmp:
        exporter, exporter_port = start_node_exporter(binary, Path(tmp))
        agent, agent_port = start_agent(["--replay", str(SCENARIO)])
        world = Path(tmp) / "cluster"
        world.mkdir()
        servers = subprocess.Popen(
            [sys.executable, "-m", "bench.cluster_node", str(world), str(SCENARIO)],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdout=subprocess.DEVNULL,
        )
        processes = [agent, exporter, servers]
        ports = {"agent": agent_port, "node_exporter": exporter_port}
        pids = {"agent": agent.pid, "node_exporter": exporter.pid}
        try:
            wait_for_world(world)
            cluster, cluster_env = agent_args(world, SCENARIO)
            checkouts = {"agent_in_a_cluster": REPO}
            if args.baseline:
                checkouts["baseline_in_a_cluster"] = Path(args.baseline).resolve()
            for name, checkout in checkouts.items():
                # The backend's module travels beside the checkout measured (a baseline has none).
                site = Path(tmp) / f"site-{name}"
                site.mkdir()
                shutil.copy(REPO / "bench" / "cluster_node.py", site / "bench_cluster_node.py")
                argv = [a.replace("bench.cluster_node:", "bench_cluster_node:") for a in cluster]
                env = {**cluster_env, "PYTHONPATH": os.pathsep.join((str(checkout), str(site)))}
                proc, port = start_agent(argv, env=env, cwd=checkout)
                processes.append(proc)
                ports[name], pids[name] = port, proc.pid
        except BaseException:
            for process in processes:
                process.kill()
            raise
        stop = threading.Event()
        counts: dict[str, dict[str, int]] = {name: {} for name in ports}
        scrapers = [
            threading.Thread(
                target=scrape,
                args=(f"https://127.0.0.1:{port}/metrics", stop, counts[name]),
            )
            for name, port in ports.items()
        ]
        for scraper in scrapers:
            scraper.start()
        windows: list[dict[str, dict[str, float]]] = []
        try:
            time.sleep(args.warmup)
            for _ in range(args.windows):
                cpu0 = {name: cpu_seconds(pid) for name, pid in pids.items()}
                t0 = time.monotonic()
                time.sleep(args.window_seconds)
                elapsed = time.monotonic() - t0
                windows.append(
                    {
                        name: {
                            "rss_mib": rss_mib(pid),
                            "millicores": 1000 * (cpu_seconds(pid) - cpu0[name]) / elapsed,
                        }
                        for name, pid in pids.items()
                    }
                )
                print(windows[-1], flush=True)
        finally:
            stop.set()
            for scraper in scrapers:
                scraper.join(20)
            for process in processes:
                process.terminate()
            for process in processes:
                process.wait(15)

    def of(name: str, figure: str) -> list[float]:
        return [w[name][figure] for w in windows]

    def ratios(name: str) -> list[float]:
        pairs = zip(of(name, "rss_mib"), of("node_exporter", "rss_mib"), strict=True)
        return [a / n for a, n in pairs]

    rss_ratio = ratios("agent")
    cluster_ratio = ratios("agent_in_a_cluster")
    # The real node: the cluster's agent plus the vendor library measured on hardware.
    real = [c + VENDOR_LIBRARY_MIB for c in of("agent_in_a_cluster", "rss_mib")]
    real_ratio = [r / n for r, n in zip(real, of("node_exporter", "rss_mib"), strict=True)]
    # node_exporter's CPU over a window can be below what the CPU clock resolves: no ratio then.
    cpu_pairs = zip(of("agent", "millicores"), of("node_exporter", "millicores"), strict=True)
    cpu_ratio = [a / n for a, n in cpu_pairs if n > 0]
    agent_rss = statistics.median(of("agent", "rss_mib"))
    cluster_rss = statistics.median(of("agent_in_a_cluster", "rss_mib"))
    figures: dict[str, object] = {
        "benchmark": "peer",
        "node": NODE,
        "peer": version[0],
        "scrape_interval_seconds": 15,
        "windows": args.windows,
        "window_seconds": args.window_seconds,
        "requests": counts,
        "agent_rss_mib": summary(of("agent", "rss_mib"), 1),
        "node_exporter_rss_mib": summary(of("node_exporter", "rss_mib"), 1),
        "rss_agent_over_peer": summary(rss_ratio),
        "agent_in_a_cluster_rss_mib": summary(of("agent_in_a_cluster", "rss_mib"), 1),
        "rss_cluster_over_peer": summary(cluster_ratio),
        "agent_in_a_cluster_millicores": summary(of("agent_in_a_cluster", "millicores"), 2),
        "vendor_library_mib": VENDOR_LIBRARY_MIB,
        "vendor_library_measured_on": HARDWARE,
        "real_node_rss_mib": summary(real, 1),
        "rss_real_node_over_peer": summary(real_ratio),
        "agent_millicores": summary(of("agent", "millicores"), 2),
        "node_exporter_millicores": summary(of("node_exporter", "millicores"), 2),
        "cpu_agent_over_peer": summary(cpu_ratio) if cpu_ratio else None,
        "goal_rss_at_most_48_mib": agent_rss <= 48,
        "goal_rss_within_2_5x": statistics.median(rss_ratio) <= 2.5,
        "goal_cluster_rss_at_most_44_mib": cluster_rss <= 44,
        "real_node_within_2_5x": statistics.median(real_ratio) <= 2.5,
        "goal_cpu_within_1_5x": bool(cpu_ratio) and statistics.median(cpu_ratio) <= 1.5,
    }
    if args.baseline:
        before = of("baseline_in_a_cluster", "rss_mib")
        saved = [b - a for b, a in zip(before, of("agent_in_a_cluster", "rss_mib"), strict=True)]
        figures["baseline_in_a_cluster_rss_mib"] = summary(before, 1)
        figures["cluster_saving_mib"] = summary(saved, 1)
        commit = subprocess.run(
            ["git", "-C", args.baseline, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        figures["baseline_commit"] = commit or None
    report(figures)


if __name__ == "__main__":
    main()
