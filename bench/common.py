"""Helpers the benchmarks share: starting the real agent, waiting for it, printing results."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_agent(
    args: list[str], env: dict[str, str] | None = None, cwd: Path = REPO
) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "devicemanager",
            "serve",
            "--bind-address",
            "127.0.0.1",
            "--secure-port",
            str(port),
            "--log-level",
            "warning",
            *args,
        ],
        env=full_env,
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if (
                httpx.get(f"https://127.0.0.1:{port}/readyz", verify=False, timeout=1).status_code
                == 200
            ):
                return proc, port
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise SystemExit("the agent did not become ready")


def report(figures: dict[str, Any]) -> None:
    """Every benchmark ends with one JSON line, so runs can be compared mechanically."""
    print(json.dumps(figures, sort_keys=True))
