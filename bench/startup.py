"""From exec to ready: how long `devicemanager serve --replay` takes to answer /readyz 200.

Each try starts the agent (this interpreter, the replay node, the default period) and asks
/readyz every 5 ms over a fresh TLS connection from the moment of exec until it answers 200:
the server listens and the first round has been published. With `--baseline PATH` another
checkout's agent is measured too, alternated with this one in pairs, so both see the same
machine; the figures are the median and range of the tries, and of the pairs' ratio.

Each checkout's bytecode is compiled first (`compileall`), as the image's `pip install` of the
wheel compiles it: a node never starts from source it has to compile, and a run here with
PYTHONDONTWRITEBYTECODE set (as this machine's shell and the image both set it) would
otherwise compile every module of the agent at every start (about 0.1 s of it).

    python bench/startup.py [--pairs 9] [--node mi300x-8gpu-cpx-mixed] [--baseline PATH]

Prints one JSON line last.
"""

from __future__ import annotations

import argparse
import http.client
import os
import socket
import ssl
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import REPO, free_port, report

POLL = 0.005


def ready(port: int, context: ssl.SSLContext) -> bool:
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=2, context=context)
    try:
        conn.request("GET", "/readyz")
        return conn.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


def one(repo: Path, node: str) -> float:
    """Seconds from exec to the first /readyz 200."""
    port = free_port()
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    env = {**os.environ, "PYTHONPATH": str(repo)}
    started = time.monotonic()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "devicemanager",
            "serve",
            "--replay",
            str(REPO / "fixtures" / "nodes" / node),
            "--bind-address",
            "127.0.0.1",
            "--secure-port",
            str(port),
            "--log-level",
            "warning",
        ],
        cwd=repo,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while time.monotonic() - started < 30:
            with socket.socket() as probe:
                listening = probe.connect_ex(("127.0.0.1", port)) == 0
            if listening and ready(port, context):
                return time.monotonic() - started
            if proc.poll() is not None:
                raise SystemExit(f"the agent of {repo} exited with {proc.returncode}")
            time.sleep(POLL)
        raise SystemExit(f"the agent of {repo} was not ready in 30 s")
    finally:
        proc.terminate()
        proc.wait(15)


def compiled(repo: Path) -> None:
    """The checkout's bytecode, as pip writes it when it installs the wheel."""
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", "devicemanager", "vendors"],
        cwd=repo,
        check=True,
        stdout=subprocess.DEVNULL,
    )


def summary(values: list[float]) -> dict[str, object]:
    return {
        "median": round(statistics.median(values), 3),
        "range": [round(min(values), 3), round(max(values), 3)],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=9)
    parser.add_argument("--node", default="mi300x-8gpu-cpx-mixed")
    parser.add_argument("--baseline", type=Path, help="another checkout, alternated with this")
    args = parser.parse_args()
    for checkout in (REPO, args.baseline):
        if checkout is not None:
            compiled(checkout.resolve())
    one(REPO, args.node)  # a first start warms the page cache; not counted
    current: list[float] = []
    baseline: list[float] = []
    for _ in range(args.pairs):
        if args.baseline is not None:
            baseline.append(one(args.baseline.resolve(), args.node))
        current.append(one(REPO, args.node))
    figures: dict[str, object] = {
        "benchmark": "startup",
        "node": args.node,
        "pairs": args.pairs,
        "exec_to_ready_s": summary(current),
        "goal_at_most_0_3_s": statistics.median(current) <= 0.3,
    }
    if baseline:
        commit = subprocess.run(
            ["git", "-C", str(args.baseline), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        figures["baseline"] = {"commit": commit, "exec_to_ready_s": summary(baseline)}
        figures["current_over_baseline"] = summary(
            [c / b for c, b in zip(current, baseline, strict=True)]
        )
    report(figures)


if __name__ == "__main__":
    main()
