"""A bounded soak of the whole agent: does anything grow without end? (issue 10)

The real agent runs in a cluster of this machine's making: a fake API server in a process of its
own serves N pods of the node, deleting one and creating another (a new UID) every second, with
the node's kubelet answering its summary and TokenReview/SubjectAccessReview answering access
reviews. The agent runs with a 1 s period, access control on, and is scraped 20 times a second
(one keep-alive scraper alternating /metrics and /monitor/snapshot, and a fresh TLS connection
every 2 s). Resident memory and open descriptors are sampled every 10 s.

Reported: RSS and fds at the start (after a warm-up) and at the end, the ratio end/start, and
the growth of the second half against the first: growth must flatten (the second half's close
to zero), or something leaks per request, per pod or per round.

With `--hostile` (issue 30), clients with no token run beside the scrapers the whole time: one
connection pipelining 2,000 `GET /metrics` without reading an answer, again each time the
agent aborts it; 100 TCP connections that never send a ClientHello, renewed every 5 s; 20
connections sending their header a byte a second; and 5 requests a second each with a new
random token. Reported besides: what each hostile client got, the agent's refusal counters
by reason, and whether the scrapers were still answered 200.

    python bench/soak.py [--seconds 300] [--pods 100] [--hostile]   # at most 600 seconds
"""

from __future__ import annotations

import argparse
import secrets
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import REPO, free_port, report

MIB = 1048576
TOKEN = "soak-token"


def wait_for(path: Path, seconds: float = 30) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists():
            return path.read_text()
        time.sleep(0.1)
    raise SystemExit(f"{path} never appeared")


def scrape(port: int, stop: threading.Event, rate: float, counts: dict[str, int]) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    base = f"https://127.0.0.1:{port}"
    paths = ["/metrics", "/monitor/snapshot"]
    next_at = time.monotonic()
    last_fresh = 0.0
    with httpx.Client(verify=False, timeout=5, headers=headers) as keep_alive:
        i = 0
        while not stop.is_set():
            try:
                if time.monotonic() - last_fresh >= 2:  # a new connection now and then
                    last_fresh = time.monotonic()
                    with httpx.Client(verify=False, timeout=5, headers=headers) as fresh:
                        status = fresh.get(base + "/metrics").status_code
                else:
                    status = keep_alive.get(base + paths[i % 2]).status_code
                counts[str(status)] = counts.get(str(status), 0) + 1
            except httpx.HTTPError as exc:
                counts[type(exc).__name__] = counts.get(type(exc).__name__, 0) + 1
            i += 1
            next_at += 1 / rate
            stop.wait(max(0.0, next_at - time.monotonic()))


def _tls() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _connect(port: int) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        return _tls().wrap_socket(raw, server_hostname="localhost")
    except BaseException:
        raw.close()
        raise


def _count(counts: dict[str, int], key: str) -> None:
    counts[key] = counts.get(key, 0) + 1


def pipeliner(port: int, stop: threading.Event, counts: dict[str, int]) -> None:
    """One connection at a time sending 2,000 pipelined requests and reading nothing."""
    request = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 2000
    while not stop.is_set():
        try:
            with _connect(port) as tls:
                tls.settimeout(5)
                tls.sendall(request)
                while not stop.is_set():
                    tls.sendall(request)
        except (OSError, ssl.SSLError):
            _count(counts, "pipelined_connections_ended")
        stop.wait(0.2)


def bare(port: int, stop: threading.Event, counts: dict[str, int]) -> None:
    """100 connections that never send a ClientHello, renewed every 5 s."""
    while not stop.is_set():
        held = []
        for _ in range(100):
            try:
                held.append(socket.create_connection(("127.0.0.1", port), timeout=5))
                _count(counts, "bare_opened")
            except OSError:
                _count(counts, "bare_refused")
        stop.wait(5)
        for sock in held:
            sock.close()


def slow_header(port: int, stop: threading.Event, counts: dict[str, int]) -> None:
    """20 connections sending their request a byte a second, each started again when closed."""
    line = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 4096

    def one() -> None:
        while not stop.is_set():
            try:
                with _connect(port) as tls:
                    for byte in line:
                        if stop.is_set():
                            return
                        tls.sendall(bytes([byte]))
                        stop.wait(1.0)
            except (OSError, ssl.SSLError):
                _count(counts, "slow_closed_by_agent")

    threads = [threading.Thread(target=one, daemon=True) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def strangers(port: int, stop: threading.Event, counts: dict[str, int]) -> None:
    """5 requests a second, each with a token never seen before."""
    with httpx.Client(verify=False, timeout=10) as client:
        while not stop.is_set():
            token = secrets.token_urlsafe(24)
            try:
                status = client.get(
                    f"https://127.0.0.1:{port}/metrics",
                    headers={"Authorization": f"Bearer {token}"},
                ).status_code
                _count(counts, f"stranger_{status}")
            except httpx.HTTPError as exc:
                _count(counts, f"stranger_{type(exc).__name__}")
            stop.wait(0.2)


def refused_counts(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line.startswith("gpustack_device_manager_http_refused_total{"):
            reason = line.split('reason="', 1)[1].split('"', 1)[0]
            out[reason] = float(line.rsplit(" ", 1)[1])
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--pods", type=int, default=100)
    parser.add_argument("--warmup", type=float, default=20)
    parser.add_argument("--hostile", action="store_true", help="add the hostile clients")
    args = parser.parse_args()
    seconds = min(args.seconds, 600.0)
    with tempfile.TemporaryDirectory() as tmp:
        world = Path(tmp)
        api = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.kube_server",
                str(world),
                "--pods",
                str(args.pods),
                "--rate",
                "1",
                "--churn",
                "--manufacturer",
                "fake",
                "--device",
                "FAKE-0",
                "--kubelet",
                "--reader",
                TOKEN,
            ],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
        )
        agent = None
        try:
            wait_for(world / "kubeconfig")
            kubelet_port = wait_for(world / "kubelet-port")
            port = free_port()
            agent = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "devicemanager",
                    "serve",
                    "--manufacturer",
                    "tests.fakes:StaticBackend",
                    "--bind-address",
                    "127.0.0.1",
                    "--secure-port",
                    str(port),
                    "--monitor-period",
                    "1",
                    "--kubeconfig",
                    str(world / "kubeconfig"),
                    "--node-name",
                    "node-1",
                    "--pod-name",
                    "device-manager-fake-x1",
                    "--pod-namespace",
                    "gpustack-system",
                    "--kubelet-host",
                    "127.0.0.1",
                    "--kubelet-port",
                    kubelet_port,
                    "--access-control",
                    "kubernetes",
                    "--log-level",
                    "warning",
                ],
                cwd=REPO,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    if (
                        httpx.get(f"https://127.0.0.1:{port}/readyz", verify=False).status_code
                        == 200
                    ):
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.2)
            else:
                raise SystemExit("the agent never became ready")
            process = psutil.Process(agent.pid)
            counts: dict[str, int] = {}
            stop = threading.Event()
            scraper = threading.Thread(target=scrape, args=(port, stop, 20.0, counts))
            scraper.start()
            hostile: dict[str, int] = {}
            attackers = [
                threading.Thread(target=f, args=(port, stop, hostile), daemon=True)
                for f in ((pipeliner, bare, slow_header, strangers) if args.hostile else ())
            ]
            for attacker in attackers:
                attacker.start()
            time.sleep(args.warmup)
            samples: list[tuple[float, int, int]] = []
            started = time.monotonic()
            while True:
                elapsed = time.monotonic() - started
                samples.append((round(elapsed, 1), process.memory_info().rss, process.num_fds()))
                print(
                    f"t={elapsed:6.0f}s rss={samples[-1][1] / MIB:7.1f} MiB fds={samples[-1][2]}",
                    flush=True,
                )
                if elapsed >= seconds:
                    break
                time.sleep(min(10.0, seconds - elapsed) or 0.1)
            stop.set()
            scraper.join(10)
            for attacker in attackers:
                attacker.join(10)
            time.sleep(2)  # a round to count the last refusals
            with httpx.Client(verify=False, headers={"Authorization": f"Bearer {TOKEN}"}) as c:
                text = c.get(f"https://127.0.0.1:{port}/metrics").text
            kubelet_ok = 'collector_success{source="kubelet"} 1.0' in text
            refused = refused_counts(text)
        finally:
            if agent is not None:
                agent.terminate()
                agent.wait(15)
            api.terminate()
            api.wait(15)
    (t0, rss0, fds0), (t1, rss1, fds1) = samples[0], samples[-1]
    middle = samples[len(samples) // 2]
    extra = (
        {"hostile": hostile, "refused_by_reason": {k: v for k, v in refused.items() if v}}
        if args.hostile
        else {}
    )
    report(
        {
            "benchmark": "soak-hostile" if args.hostile else "soak",
            "seconds": round(t1 - t0, 1),
            "pods": args.pods,
            "churn_per_second": 1,
            "scrapes_per_second": 20,
            "requests": counts,
            "kubelet_fresh_at_end": kubelet_ok,
            "rss_start_mib": round(rss0 / MIB, 1),
            "rss_end_mib": round(rss1 / MIB, 1),
            "rss_end_over_start": round(rss1 / rss0, 3),
            "rss_growth_first_half_mib": round((middle[1] - rss0) / MIB, 1),
            "rss_growth_second_half_mib": round((rss1 - middle[1]) / MIB, 1),
            "fds_start": fds0,
            "fds_end": fds1,
            **extra,
        }
    )


if __name__ == "__main__":
    main()
