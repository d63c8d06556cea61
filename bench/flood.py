"""Idle TLS floods against the real agent, and the kubelet's probe beside them (issue 44).

A flood is `--connections` TLS connections, `--concurrency` handshakes at a time, each finishing
its handshake and then sending nothing (and reading nothing: the agent's close_notify is never
answered), held `--hold` seconds and closed; `--floods` of them, one after the other. All the
while a second process probes `/readyz` as the kubelet does: a fresh connection each time,
a new TLS handshake, `GET /readyz`, a 5 s timeout (the DaemonSet's `timeoutSeconds`), twice a
second. The agent replays the H100 node at its default period.

Measured: the agent's resident set (`/proc/<pid>/status` VmRSS) before the first flood, after
each flood (once its connections are closed) and its peak (sampled every 0.1 s); the probes
answered and not. Goals (issue 44): after twelve floods of 2,000 the agent within 48 MiB of
where it started, and every probe answered.

    python bench/flood.py [--floods 12] [--connections 2000] [--hold 12] [--concurrency 32]
                          [--tls 1.2|1.3] [--max-connections N]

Prints one JSON line last.
"""

from __future__ import annotations

import argparse
import multiprocessing
import socket
import ssl
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import report, start_agent

NODE = "fixtures/nodes/h100-8gpu-mixed"
PROBE_TIMEOUT = 5.0  # the DaemonSet's readinessProbe timeoutSeconds
PROBE_EVERY = 0.5
GOAL_MIB = 48


def rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    kib = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS"))
    return kib / 1024


def _client_context(version: str = "") -> ssl.SSLContext:
    context = ssl.create_default_context()
    if version == "1.2":
        context.maximum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def probe_once(port: int, context: ssl.SSLContext) -> str:
    """The kubelet's probe: a fresh connection, GET /readyz, the status or what went wrong."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=PROBE_TIMEOUT) as raw:
            deadline = time.monotonic() + PROBE_TIMEOUT
            with context.wrap_socket(raw) as conn:
                conn.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                head = b""
                while b"\r\n" not in head:
                    conn.settimeout(max(0.01, deadline - time.monotonic()))
                    chunk = conn.recv(4096)
                    if not chunk:
                        return "closed"
                    head += chunk
                return head.split(b" ", 2)[1].decode("ascii", "replace")
    except (OSError, ValueError) as exc:
        return type(exc).__name__


def prober(port: int, stop: Any, results: Any) -> None:
    """Runs in a process of its own, so the flood's client never delays a probe."""
    context = _client_context()
    while not stop.is_set():
        started = time.monotonic()
        results.put((probe_once(port, context), time.monotonic() - started))
        stop.wait(max(0.0, PROBE_EVERY - (time.monotonic() - started)))


def flood(port: int, connections: int, hold: float, concurrency: int, version: str) -> int:
    """Open `connections` TLS connections, `concurrency` handshakes at a time, send nothing and
    read nothing (a close_notify from the agent is never answered), hold them, close them; how
    many finished their handshake."""
    context = _client_context(version)
    held: list[ssl.SSLSocket] = []
    lock = threading.Lock()
    share = [
        connections // concurrency + (i < connections % concurrency) for i in range(concurrency)
    ]

    def opener(count: int) -> None:
        for _ in range(count):
            try:
                raw = socket.create_connection(("127.0.0.1", port), timeout=30)
                conn = context.wrap_socket(raw)
            except (OSError, ValueError):
                continue
            with lock:
                held.append(conn)

    threads = [threading.Thread(target=opener, args=(n,)) for n in share]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    time.sleep(hold)
    for conn in held:
        conn.close()  # the socket only: no close_notify waited for
    return len(held)


def sample_peak(pid: int, stop: threading.Event, peak: list[float]) -> None:
    """The agent's largest resident set and open descriptors, every 0.1 s."""
    while not stop.wait(0.1):
        try:
            peak[0] = max(peak[0], rss_mib(pid))
            peak[1] = max(peak[1], len(list(Path(f"/proc/{pid}/fd").iterdir())))
        except (OSError, StopIteration):
            return


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--floods", type=int, default=12)
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--hold", type=float, default=12.0)
    parser.add_argument("--concurrency", type=int, default=32, help="handshakes at a time")
    parser.add_argument("--tls", choices=("1.2", "1.3"), default="1.2", help="the flood's")
    parser.add_argument(
        "--max-connections", type=int, help="the agent's --http-max-connections (its default)"
    )
    parser.add_argument("--settle", type=float, default=3.0, help="seconds after each flood")
    args = parser.parse_args()

    bound = (
        []
        if args.max_connections is None
        else ["--http-max-connections", str(args.max_connections)]
    )
    agent, port = start_agent(["--replay", NODE, *bound])
    stop_sampling = threading.Event()
    try:
        time.sleep(5)  # a few rounds, so the start's figures are in
        before = rss_mib(agent.pid)
        peak = [before, 0.0]
        sampler = threading.Thread(target=sample_peak, args=(agent.pid, stop_sampling, peak))
        sampler.start()
        stop = multiprocessing.Event()
        results: Any = multiprocessing.Queue()
        probing = multiprocessing.Process(target=prober, args=(port, stop, results))
        probing.start()
        after: list[float] = []
        handshaken: list[int] = []
        for _ in range(args.floods):
            handshaken.append(flood(port, args.connections, args.hold, args.concurrency, args.tls))
            time.sleep(args.settle)
            after.append(round(rss_mib(agent.pid), 1))
            print(f"flood {len(after)}: {handshaken[-1]} handshaken, {after[-1]} MiB", flush=True)
        stop.set()
        probes: list[tuple[str, float]] = []
        probing.join(PROBE_TIMEOUT + 5)
        while not results.empty():
            probes.append(results.get())
    finally:
        stop_sampling.set()
        agent.terminate()
        agent.wait()
    outcomes: dict[str, int] = {}
    for status, _ in probes:
        outcomes[status] = outcomes.get(status, 0) + 1
    answered = outcomes.get("200", 0)
    slowest = max((s for _, s in probes), default=0.0)
    report(
        {
            "floods": args.floods,
            "connections": args.connections,
            "hold_seconds": args.hold,
            "concurrency": args.concurrency,
            "max_connections": args.max_connections,
            "tls": args.tls,
            "rss_before_mib": round(before, 1),
            "rss_after_each_mib": after,
            "rss_peak_mib": round(peak[0], 1),
            "descriptors_peak": int(peak[1]),
            "rss_growth_mib": round(after[-1] - before, 1),
            "handshaken_per_flood": handshaken,
            "probes": len(probes),
            "probe_outcomes": outcomes,
            "probe_slowest_seconds": round(slowest, 3),
            "goal_rss_within_48_mib": after[-1] - before <= GOAL_MIB,
            "goal_every_probe_answered": answered == len(probes) and answered > 0,
        }
    )


if __name__ == "__main__":
    main()
