"""Scrape throughput and latency of the agent's /metrics, beside nginx serving the same bytes.

The load is a node as Prometheus sees it: 56 cards and 64 pods, each pod an Instance holding
at most half a card, so /metrics carries card and per-Instance families (about 1,000 series). nginx
serves the agent's very bytes from files (plain, and gzip through `gzip_static`, the agent's
own compressed bytes), over TLS with keep-alive from one worker process; wrk drives each with
4 connections. Agent and nginx alternate in pairs (agent, nginx, nginx, agent, ...), so drift
hits both alike; each ratio is printed as the median and range over the pairs.

Then the same load with rounds back to back (period 0.05 s, a round of 1,024 processes in 64
pods, each in a real kubelet-shaped cgroup, attributed through real /proc): the scrape's p99
while a round is running. Real processes need root; without it the pods have no processes and
the busy phase says so.

Goals (issue 19): throughput within 1.3x of nginx plain and 2x with gzip; the gzip scrape's p99
(how Prometheus scrapes) under 5 ms, idle and while rounds run. Needs Debian's nginx and wrk
(`apt-get install nginx wrk`).

    python bench/scrape.py [--seconds 5] [--pairs 3]
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--cards", type=int, default=56)
    parser.add_argument("--pods", type=int, default=64)
    parser.add_argument("--processes", type=int, default=1024)
    args = parser.parse_args()
    for tool in ("nginx", "wrk"):
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
            raise SystemExit(f"{tool} is needed: apt-get install nginx wrk")
    real = os.geteuid() == 0
    world = (
        kubelet_cgroups(args.pods, args.processes // args.pods)
        if real
        else contextlib.nullcontext(pods_without_processes(args.pods))
    )
    with world as pods, tempfile.TemporaryDirectory() as tmp:
        load, pods_file = write_load(Path(tmp), args.cards, pods)
        agent_args = [
            "--manufacturer",
            "bench.load:LoadBackend",
            "--pods-file",
            str(pods_file),
            "--node-name",
            NODE,
        ]
        env = {"DM_BENCH_LOAD": str(load)}
        idle, port = start_agent([*agent_args, "--monitor-period", "15"], env=env)
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
        busy, port = start_agent([*agent_args, "--monitor-period", "0.05"], env=env)
        try:
            doc = wait_rounds(port, 5)
            placed = sum(
                d.get("rowsAttributed", 0) for d in (doc.get("slices") or {}).get("devices", ())
            )
            url = f"https://127.0.0.1:{port}/metrics"
            round_ms = round_seconds(httpx.get(url, verify=False).text) * 1000
            for _ in range(args.pairs):
                for kind, extra in (("plain", ()), ("gzip", GZIP)):
                    runs.setdefault(f"busy_{kind}_one", []).append(
                        wrk(url, args.seconds, *extra, connections=1)
                    )
            rounds_seen = wait_rounds(port, 1)
        finally:
            busy.terminate()
            busy.wait()

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
    print(
        f"busy: rounds of {placed} placed processes take {round_ms:.1f} ms, back to back; "
        f"p99 plain {spread(p99('busy_plain_one'), 2)} gzip {spread(p99('busy_gzip_one'), 2)} ms"
    )

    def gzip_p99(prefix: str) -> float:
        # The goal is on the scrape Prometheus makes (gzip); plain is printed beside it, with
        # nginx's plain p99 on the same machine for what a 200 KB TLS answer costs here.
        return statistics.median(p99(f"{prefix}_gzip_one"))

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
            "busy_processes_placed": placed,
            "busy_round_ms": round(round_ms, 1),
            "busy_real_processes": real,
            "busy_rounds_seen_at_end": bool(rounds_seen),
            "busy_p99_ms": {k: spread(p99(f"busy_{k}_one"), 2) for k in ("plain", "gzip")},
            "goal_plain_within_1_3x": plain_ratio["median"] <= 1.3,
            "goal_gzip_within_2x": gzip_ratio["median"] <= 2.0,
            "goal_p99_under_5ms": gzip_p99("agent") < 5.0,
            "goal_busy_p99_under_5ms": gzip_p99("busy") < 5.0,
        }
    )


if __name__ == "__main__":
    main()
