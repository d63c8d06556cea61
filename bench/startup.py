"""From exec to ready: how long `devicemanager serve --replay` takes to answer /readyz 200.

Each try starts the agent (the replay node, the default period) and asks /readyz every 5 ms
over a fresh TLS connection from the moment of exec until it answers 200: the server listens
and the first round has been published. With `--baseline PATH` another checkout's agent is
measured too, alternated with this one in pairs, so both see the same machine; the figures are
the median and range of the tries, and of the pairs' ratio.

The agent is started as the image starts it. Each checkout is installed as the Dockerfile
installs it, into a virtual environment of its own made for the run (`pip install --requirement
requirements.lock <checkout>`: a wheel, not an editable install, its bytecode compiled by pip),
and run through its console script, `devicemanager serve`, with the image's environment
(PYTHONDONTWRITEBYTECODE, PYTHONUNBUFFERED). A development venv's editable install adds an
import finder to every start (about 20 ms here) that no node has.

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
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import REPO, free_port, report

POLL = 0.005
IMAGE_ENV = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}  # the Dockerfile's ENV


def ready(port: int, context: ssl.SSLContext) -> bool:
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=2, context=context)
    try:
        conn.request("GET", "/readyz")
        return conn.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


def installed(checkout: Path, into: Path) -> Path:
    """`checkout` installed as the Dockerfile installs it, into a new venv at `into`; the path
    of its console script."""
    subprocess.run([sys.executable, "-m", "venv", str(into)], check=True)
    subprocess.run(
        [
            str(into / "bin" / "python"),
            *("-m", "pip", "install", "--quiet", "--disable-pip-version-check"),
            *("--requirement", str(checkout / "requirements.lock"), str(checkout)),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return into / "bin" / "devicemanager"


def one(agent: Path, node: str) -> float:
    """Seconds from exec of an installed agent's console script to its first /readyz 200."""
    port = free_port()
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    started = time.monotonic()
    proc = subprocess.Popen(
        [
            str(agent),
            "serve",
            *("--replay", str(REPO / "fixtures" / "nodes" / node)),
            *("--bind-address", "127.0.0.1", "--secure-port", str(port)),
            *("--log-level", "warning"),
        ],
        cwd=agent.parent,  # not a checkout: nothing is imported from the working directory
        env={**env, **IMAGE_ENV},
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
                raise SystemExit(f"{agent} exited with {proc.returncode}")
            time.sleep(POLL)
        raise SystemExit(f"{agent} was not ready in 30 s")
    finally:
        proc.terminate()
        proc.wait(15)


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
    current: list[float] = []
    baseline: list[float] = []
    with tempfile.TemporaryDirectory(prefix="devicemanager-startup-") as scratch:
        agent = installed(REPO, Path(scratch) / "current")
        before = None
        if args.baseline is not None:
            before = installed(args.baseline.resolve(), Path(scratch) / "baseline")
        for warm in (agent, before):  # a first start warms the page cache; not counted
            if warm is not None:
                one(warm, args.node)
        for _ in range(args.pairs):
            if before is not None:
                baseline.append(one(before, args.node))
            current.append(one(agent, args.node))
    figures: dict[str, object] = {
        "benchmark": "startup",
        "node": args.node,
        "pairs": args.pairs,
        "installed": "as the image installs it: requirements.lock and a wheel, in a new venv",
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
