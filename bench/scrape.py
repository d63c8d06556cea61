"""Scrape throughput and latency of the agent's /metrics, beside nginx serving the same bytes.

The load is a node as Prometheus sees it: 56 cards and 64 pods, each pod an Instance holding
at most half a card, so /metrics carries card and per-Instance families (about 1,000 series). nginx
serves the agent's very bytes from files (plain, and gzip through `gzip_static`, the agent's
own compressed bytes), over TLS with keep-alive from one worker process; wrk drives each with
4 connections. Agent and nginx alternate in pairs (agent, nginx, nginx, agent, ...), so drift
hits both alike; each ratio is printed as the median and range over the pairs.

Then the same load with rounds back to back (period 0.05 s, rounds of 4,096 and then of
16,384 processes in 64 pods, each process real and in a real kubelet-shaped cgroup, attributed
through real /proc): the scrape's p99 while a round is running. Real processes need root;
without it the pods have no processes and the busy phase says so.

Goals (issues 19 and 32): throughput within 1.3x of nginx plain and 2x with gzip; the gzip
scrape's p99 (how Prometheus scrapes) under 5 ms, idle and while rounds of 4,096 processes run;
16,384 is reported beside it. Needs Debian's nginx and wrk (`apt-get install nginx wrk`).

    python bench/scrape.py [--seconds 5] [--pairs 3] [--processes 4096,16384]
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import free_port, report, start_agent
from bench.load import NODE, kubelet_cgroups, pods_without_processes, write_load
from devicemanager.serve.mint import self_signed

NGINX_CONF = """
worker_processes 1;
daemon off;
error_log {tmp}/error.log;
pid {tmp}/nginx.pid;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    keepalive_requests 1000000;
    server {{
        listen 127.0.0.1:{port} ssl;
        ssl_certificate {tmp}/tls.crt;
        ssl_certificate_key {tmp}/tls.key;
        ssl_protocols TLSv1.2 TLSv1.3;
        location = /metrics {{
            default_type "text/plain; version=0.0.4; charset=utf-8";
            gzip_static on;
            gzip_vary on;
            alias {tmp}/metrics;
        }}
    }}
}}
"""

GZIP = ("-H", "Accept-Encoding: gzip")


def wrk(url: str, seconds: int, *extra: str, connections: int = 4) -> dict[str, float]:
    threads = min(2, connections)
    out = subprocess.run(
        ["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "--latency", *extra, url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]

    def pct(p: str) -> float:
        value, unit = re.search(rf"^\s+{p}%\s+([\d.]+)(us|ms|s)\s*$", out, re.M).groups()  # type: ignore[union-attr]
        return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]

    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors:
        raise SystemExit(f"{url}: {errors.group(1)} failed responses\n{out}")
    return {"rps": rps, "p50_ms": pct("50"), "p99_ms": pct("99")}


def spread(values: list[float], digits: int = 3) -> dict[str, Any]:
    ordered = sorted(values)
    return {
        "median": round(statistics.median(ordered), digits),
        "range": [round(ordered[0], digits), round(ordered[-1], digits)],
    }


@contextlib.contextmanager
def nginx_serving(plain: bytes, compressed: bytes) -> Iterator[int]:
    with tempfile.TemporaryDirectory() as tmp:
        cert, key = self_signed(["127.0.0.1"])
        Path(tmp, "tls.crt").write_bytes(cert)
        Path(tmp, "tls.key").write_bytes(key)
        Path(tmp, "metrics").write_bytes(plain)
        Path(tmp, "metrics.gz").write_bytes(compressed)
        # nginx's workers drop to an unprivileged user and must read the files.
        Path(tmp).chmod(0o755)
        for name in ("metrics", "metrics.gz"):
            Path(tmp, name).chmod(0o644)
        port = free_port()
        Path(tmp, "nginx.conf").write_text(NGINX_CONF.format(tmp=tmp, port=port))
        binary = shutil.which("nginx") or "/usr/sbin/nginx"
        nginx = subprocess.Popen([binary, "-c", f"{tmp}/nginx.conf"], stderr=subprocess.DEVNULL)
        try:
            url = f"https://127.0.0.1:{port}/metrics"
            for _ in range(100):
                try:
                    with httpx.Client(verify=False) as client:
                        same = client.get(url).content == plain
                        raw = client.get(url, headers={"Accept-Encoding": "gzip"})
                        same_gz = raw.headers.get("content-encoding") == "gzip"
                    if same and same_gz:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.05)
            else:
                raise SystemExit("nginx did not serve the agent's bytes")
            yield port
        finally:
            nginx.terminate()
            nginx.wait()


def agent_bodies(port: int) -> tuple[bytes, bytes]:
    """The agent's /metrics plain, and the very gzip bytes it serves."""
    url = f"https://127.0.0.1:{port}/metrics"
    with httpx.Client(verify=False) as client:
        plain = client.get(url).content
        with client.stream("GET", url, headers={"Accept-Encoding": "gzip"}) as response:
            compressed = b"".join(response.iter_raw())
    if gzip.decompress(compressed) != plain:
        raise SystemExit("the agent's gzip bytes are not its plain bytes")
    return plain, compressed


def wait_rounds(port: int, rounds: int) -> dict[str, Any]:
    with httpx.Client(verify=False) as client:
        seen: set[float] = set()
        doc: dict[str, Any] = {}
        deadline = time.monotonic() + 60
        while len(seen) < rounds and time.monotonic() < deadline:
            doc = client.get(f"https://127.0.0.1:{port}/monitor/snapshot").json()
            seen.add(doc["timestamp"])
            time.sleep(0.01)
    return doc


def round_seconds(metrics: str) -> float:
    """How long the last round took, as the agent reports it."""
    found = re.search(
        r'^gpustack_instance_metrics_collector_duration_seconds\{source="snapshot"\} (\S+)$',
        metrics,
        re.M,
    )
    return float(found.group(1)) if found else float("nan")


def world(pods: int, processes: int) -> contextlib.AbstractContextManager[Any]:
    """The pods, each with its share of real processes where this runs as root."""
    if os.geteuid() == 0:
        return kubelet_cgroups(pods, processes // pods)
    return contextlib.nullcontext(pods_without_processes(pods))


def busy(agent_args: list[str], env: dict[str, str], pairs: int, seconds: int) -> dict[str, Any]:
    """Rounds back to back, one scraper: `facts` (what was placed, how long a round takes) and
    wrk's runs, `plain` and `gzip`."""
    agent, port = start_agent([*agent_args, "--monitor-period", "0.05"], env=env)
    plain: list[dict[str, float]] = []
    compressed: list[dict[str, float]] = []
    try:
        doc = wait_rounds(port, 5)
        placed = sum(
            d.get("rowsAttributed", 0) for d in (doc.get("slices") or {}).get("devices", ())
        )
        url = f"https://127.0.0.1:{port}/metrics"
        round_ms = round_seconds(httpx.get(url, verify=False).text) * 1000
        for _ in range(pairs):
            plain.append(wrk(url, seconds, connections=1))
            compressed.append(wrk(url, seconds, *GZIP, connections=1))
        rounds_seen = wait_rounds(port, 1)
    finally:
        agent.terminate()
        agent.wait()
    facts = {"placed": placed, "round_ms": round_ms, "rounds_seen": bool(rounds_seen)}
    return {"facts": facts, "plain": plain, "gzip": compressed}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--cards", type=int, default=56)
    parser.add_argument("--pods", type=int, default=64)
    parser.add_argument(
        "--processes", default="4096,16384", help="the busy phase's process counts, in turn"
    )
    args = parser.parse_args()
    counts = [int(n) for n in args.processes.split(",")]
    for tool in ("nginx", "wrk"):
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
            raise SystemExit(f"{tool} is needed: apt-get install nginx wrk")
    real = os.geteuid() == 0
    busy_runs: list[dict[str, Any]] = []

    def agent_args(pods_file: Path) -> list[str]:
        return [
            "--manufacturer",
            "bench.load:LoadBackend",
            "--pods-file",
            str(pods_file),
            "--node-name",
            NODE,
        ]

    with world(args.pods, counts[0]) as pods, tempfile.TemporaryDirectory() as tmp:
        load, pods_file = write_load(Path(tmp), args.cards, pods)
        env = {"DM_BENCH_LOAD": str(load)}
        idle, port = start_agent([*agent_args(pods_file), "--monitor-period", "15"], env=env)
        try:
            plain, compressed = agent_bodies(port)
            series = sum(1 for line in plain.decode().splitlines() if line[:1] not in ("", "#"))
            instances = sum(
                1 for line in plain.decode().splitlines() if line.startswith("gpustack_instance_")
            )
            ours = f"https://127.0.0.1:{port}/metrics"
            runs: dict[str, list[dict[str, float]]] = {}
            with nginx_serving(plain, compressed) as nginx_port:
                theirs = f"https://127.0.0.1:{nginx_port}/metrics"
                for i in range(args.pairs):
                    order = [("agent", ours), ("nginx", theirs)]
                    if i % 2:
                        order.reverse()
                    for name, url in order:
                        runs.setdefault(f"{name}_plain", []).append(wrk(url, args.seconds))
                    for name, url in reversed(order):
                        runs.setdefault(f"{name}_gzip", []).append(wrk(url, args.seconds, *GZIP))
                    # Latency as one scraper sees it: one connection, one request at a time.
                    for name, url in order:
                        for kind, extra in (("plain", ()), ("gzip", GZIP)):
                            runs.setdefault(f"{name}_{kind}_one", []).append(
                                wrk(url, args.seconds, *extra, connections=1)
                            )
        finally:
            idle.terminate()
            idle.wait()
        runs_of = busy(agent_args(pods_file), env, args.pairs, args.seconds)
        busy_runs.append({"processes": counts[0], **runs_of})
    for count in counts[1:]:
        with world(args.pods, count) as pods, tempfile.TemporaryDirectory() as tmp:
            load, pods_file = write_load(Path(tmp), args.cards, pods)
            env = {"DM_BENCH_LOAD": str(load)}
            runs_of = busy(agent_args(pods_file), env, args.pairs, args.seconds)
            busy_runs.append({"processes": count, **runs_of})

    def ratios(kind: str) -> list[float]:
        return [
            n["rps"] / a["rps"]
            for a, n in zip(runs[f"agent_{kind}"], runs[f"nginx_{kind}"], strict=True)
        ]

    def p99(name: str) -> list[float]:
        return [r["p99_ms"] for r in runs[name]]

    def rps(name: str) -> float:
        return statistics.median(r["rps"] for r in runs[name])

    plain_ratio, gzip_ratio = spread(ratios("plain")), spread(ratios("gzip"))
    print(
        f"series: {series} ({instances} per-Instance), "
        f"plain {len(plain)} B, gzip {len(compressed)} B"
    )
    for name in sorted(runs):
        print(f"{name}: {rps(name):.0f} req/s, p99 {spread(p99(name), 2)} ms")
    print(f"nginx/agent throughput: plain {plain_ratio}, gzip {gzip_ratio}")
    busy_figures = []
    for run in busy_runs:
        facts = run["facts"]
        figures = {
            "processes": run["processes"],
            "processes_placed": facts["placed"],
            "round_ms": round(facts["round_ms"], 1),
            "rounds_seen_at_end": facts["rounds_seen"],
            "p99_ms": {k: spread([r["p99_ms"] for r in run[k]], 2) for k in ("plain", "gzip")},
        }
        figures["gzip_p99_under_5ms"] = figures["p99_ms"]["gzip"]["median"] < 5.0
        busy_figures.append(figures)
        print(
            f"busy: rounds of {facts['placed']} placed processes take {facts['round_ms']:.1f} ms, "
            f"back to back; p99 plain {figures['p99_ms']['plain']} gzip "
            f"{figures['p99_ms']['gzip']} ms"
        )

    report(
        {
            "bench": "scrape",
            "series": series,
            "instance_series": instances,
            "body_bytes": len(plain),
            "gzip_bytes": len(compressed),
            "pairs": args.pairs,
            "seconds_per_run": args.seconds,
            "agent_plain_rps": round(rps("agent_plain"), 1),
            "nginx_plain_rps": round(rps("nginx_plain"), 1),
            "agent_gzip_rps": round(rps("agent_gzip"), 1),
            "nginx_gzip_rps": round(rps("nginx_gzip"), 1),
            "nginx_over_agent_plain": plain_ratio,
            "nginx_over_agent_gzip": gzip_ratio,
            "agent_p99_ms": {k: spread(p99(f"agent_{k}_one"), 2) for k in ("plain", "gzip")},
            "nginx_p99_ms": {k: spread(p99(f"nginx_{k}_one"), 2) for k in ("plain", "gzip")},
            "agent_p99_ms_at_4_connections": {
                k: spread(p99(f"agent_{k}"), 2) for k in ("plain", "gzip")
            },
            "busy_real_processes": real,
            "busy": busy_figures,
            "goal_plain_within_1_3x": plain_ratio["median"] <= 1.3,
            "goal_gzip_within_2x": gzip_ratio["median"] <= 2.0,
            # The gzip scrape Prometheus makes, idle and beside rounds of the first count
            # (4,096 processes, issue 32); plain is printed beside it, and nginx's plain p99
            # on the same machine for what a 200 KB TLS answer costs here.
            "goal_p99_under_5ms": statistics.median(p99("agent_gzip_one")) < 5.0,
            "goal_busy_p99_under_5ms": busy_figures[0]["gzip_p99_under_5ms"],
        }
    )


if __name__ == "__main__":
    main()
