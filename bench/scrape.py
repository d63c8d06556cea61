"""Scrape throughput and latency of the agent's /metrics, beside nginx serving the same bytes.

Both serve the same 1,000-series exposition over TLS with keep-alive from one worker process
on this machine, and wrk drives each with 4 connections for the same time. Goal: within 1.5x
of nginx's throughput, p99 under 5 ms. Needs Debian's nginx and wrk
(`apt-get install nginx wrk`).

    python bench/scrape.py [--seconds 10]
"""

from __future__ import annotations

import argparse
import re
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import free_port, report, start_agent
from devicemanager.serve.tls import self_signed

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
            alias {tmp}/metrics.txt;
        }}
    }}
}}
"""


def wrk(url: str, seconds: int) -> dict[str, float]:
    out = subprocess.run(
        ["wrk", "-t2", "-c4", f"-d{seconds}s", "--latency", url],
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--cards", type=int, default=125)
    args = parser.parse_args()
    for tool in ("nginx", "wrk"):
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
            raise SystemExit(f"{tool} is needed: apt-get install nginx wrk")

    agent, port = start_agent(
        ["--manufacturer", "bench.manycards:ManyCardsBackend", "--monitor-period", "15"],
        env={"DM_BENCH_CARDS": str(args.cards)},
    )
    nginx = None
    try:
        body = httpx.get(f"https://127.0.0.1:{port}/metrics", verify=False).content
        series = sum(1 for line in body.decode().splitlines() if line and not line.startswith("#"))
        with tempfile.TemporaryDirectory() as tmp:
            cert, key = self_signed(["127.0.0.1"])
            Path(tmp, "tls.crt").write_bytes(cert)
            Path(tmp, "tls.key").write_bytes(key)
            Path(tmp, "metrics.txt").write_bytes(body)
            # nginx's workers drop to an unprivileged user and must read the file.
            Path(tmp).chmod(0o755)
            Path(tmp, "metrics.txt").chmod(0o644)
            nginx_port = free_port()
            Path(tmp, "nginx.conf").write_text(NGINX_CONF.format(tmp=tmp, port=nginx_port))
            binary = shutil.which("nginx") or "/usr/sbin/nginx"
            nginx = subprocess.Popen([binary, "-c", f"{tmp}/nginx.conf"], stderr=subprocess.DEVNULL)
            ctx = ssl.create_default_context()
            ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
            for _ in range(100):
                try:
                    if (
                        httpx.get(f"https://127.0.0.1:{nginx_port}/metrics", verify=False).content
                        == body
                    ):
                        break
                except httpx.HTTPError:
                    time.sleep(0.05)
            else:
                raise SystemExit("nginx did not serve the file")
            ours = wrk(f"https://127.0.0.1:{port}/metrics", args.seconds)
            theirs = wrk(f"https://127.0.0.1:{nginx_port}/metrics", args.seconds)
    finally:
        agent.terminate()
        if nginx is not None:
            nginx.terminate()
    print(f"series: {series}, body {len(body)} bytes")
    for name, got in (("agent", ours), ("nginx", theirs)):
        print(
            f"{name}: {got['rps']:.0f} req/s, p50 {got['p50_ms']:.2f} ms, p99 {got['p99_ms']:.2f}"
        )
    ratio = theirs["rps"] / ours["rps"]
    report(
        {
            "bench": "scrape",
            "series": series,
            "body_bytes": len(body),
            "agent_rps": round(ours["rps"], 1),
            "nginx_rps": round(theirs["rps"], 1),
            "nginx_over_agent_throughput": round(ratio, 3),
            "agent_p50_ms": ours["p50_ms"],
            "agent_p99_ms": ours["p99_ms"],
            "nginx_p50_ms": theirs["p50_ms"],
            "nginx_p99_ms": theirs["p99_ms"],
            "goal_throughput_within_1_5x": ratio <= 1.5,
            "goal_p99_under_5ms": ours["p99_ms"] < 5.0,
        }
    )


if __name__ == "__main__":
    main()
