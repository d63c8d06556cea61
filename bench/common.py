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
LOCK = REPO / "requirements.lock"


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


def _pins(text: str) -> dict[str, str]:
    """name -> version of each `name==version` line (pip freeze's form and the lock's)."""
    out = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if "==" in line and not line.startswith("-"):
            name, version = line.split("==", 1)
            out[name.strip().lower().replace("_", "-").replace(".", "-")] = version.strip()
    return out


def lock_drift(freeze: str, lock: str) -> dict[str, dict[str, str | None]]:
    """Each pin of the lock that the environment does not hold as pinned: what the lock says
    and what is installed (None: not installed). Distributions the lock does not name (the
    test tools) are not drift."""
    installed = _pins(freeze)
    return {
        name: {"lock": version, "installed": installed.get(name)}
        for name, version in sorted(_pins(lock).items())
        if installed.get(name) != version
    }


def environment_drift() -> dict[str, dict[str, str | None]]:
    """`pip freeze` of the interpreter that runs the benchmarks against requirements.lock."""
    freeze = subprocess.run(
        [sys.executable, "-m", "pip", "freeze", "--exclude", "devicemanager"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return lock_drift(freeze, LOCK.read_text())
