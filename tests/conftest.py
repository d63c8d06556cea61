"""Shared test helpers: fixture paths, and a real `devicemanager serve` in a subprocess."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"
NODES = FIXTURES / "nodes"
SCENARIOS = sorted(p.name for p in NODES.iterdir() if (p / "scenario.json").exists())


def assert_promtool_accepts(text: bytes | str) -> None:
    """`promtool check metrics` takes the exposition with nothing to say (no lint finding).
    Skipped where promtool is not installed; .ci/run installs Debian's prometheus package,
    which carries it."""
    promtool = shutil.which("promtool")
    if promtool is None:
        return
    data = text.encode() if isinstance(text, str) else text
    result = subprocess.run(
        [promtool, "check", "metrics"], input=data, capture_output=True, check=False
    )
    assert result.returncode == 0 and result.stdout + result.stderr == b"", result


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Agent:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path
    args: list[str] = field(default_factory=list)

    def url(self, path: str) -> str:
        return f"https://127.0.0.1:{self.port}{path}"

    def client(self) -> httpx.Client:
        # The agent serves a self-signed certificate unless given --cert-dir.
        return httpx.Client(base_url=self.url(""), verify=False, timeout=10)

    def logs(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def wait_for(self, path: str, status: int, timeout: float = 15.0) -> httpx.Response:
        deadline = time.monotonic() + timeout
        last: httpx.Response | None = None
        with self.client() as client:
            while time.monotonic() < deadline:
                last = client.get(path)
                if last.status_code == status:
                    return last
                time.sleep(0.05)
        seen = None if last is None else (last.status_code, last.text)
        raise AssertionError(f"{path} never answered {status}; last {seen}\n{self.logs()}")

    def wait_for_round(self, timeout: float = 15.0) -> dict[str, Any]:
        """The snapshot of the first round, ready or not (a node whose every library failed
        is not ready, and still publishes its round)."""
        deadline = time.monotonic() + timeout
        with self.client() as client:
            while time.monotonic() < deadline:
                try:
                    doc: dict[str, Any] = client.get("/monitor/snapshot").json()
                except httpx.HTTPError:
                    doc = {}
                if not str(doc.get("timestamp", "0001")).startswith("0001"):  # not the empty round
                    return doc
                time.sleep(0.05)
        raise AssertionError(f"no round was published\n{self.logs()}")


def agent_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("DEVICEMANAGER_", "KUBERNETES_"))
    }
    env["PYTHONPATH"] = str(REPO)
    env.update(extra or {})
    return env


def start_agent(args: list[str], tmp: Path, env: dict[str, str] | None = None) -> Agent:
    port = free_port()
    log = tmp / f"agent-{port}.log"
    cmd = [
        sys.executable,
        "-m",
        "devicemanager",
        "serve",
        "--bind-address",
        "127.0.0.1",
        "--secure-port",
        str(port),
        "--log-format",
        "json",
        *args,
    ]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=agent_env(env), cwd=REPO
        )
    agent = Agent(proc, port, log, args)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"agent exited with {proc.returncode}:\n{agent.logs()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return agent
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"agent never listened on {port}:\n{agent.logs()}")


@pytest.fixture
def agents(tmp_path: Path) -> Iterator[list[Agent]]:
    """Agents started through `launch`; every one is stopped after the test."""
    started: list[Agent] = []
    yield started
    for agent in started:
        agent.proc.terminate()
    for agent in started:
        try:
            agent.proc.wait(10)
        except subprocess.TimeoutExpired:
            agent.proc.kill()


@pytest.fixture
def launch(agents: list[Agent], tmp_path: Path):  # type: ignore[no-untyped-def]
    def _launch(*args: str, env: dict[str, str] | None = None) -> Agent:
        agent = start_agent(list(args), tmp_path, env)
        agents.append(agent)
        return agent

    return _launch


# A fixed moment for golden outputs: 2026-11-20T09:00:00Z.
FIXED_TIME = 1795165200.0


def scenario_monitor(name: str, period: float = 15.0):  # type: ignore[no-untyped-def]
    """The monitor `serve --replay` builds, with a frozen clock so one round is reproducible."""
    from devicemanager.agent.config import parse_serve
    from devicemanager.agent.wiring import build_monitor, resolve_node

    settings = parse_serve(["--replay", str(NODES / name), "--monitor-period", str(period)], env={})
    return build_monitor(
        settings, resolve_node(settings), wall=lambda: FIXED_TIME, mono=lambda: 0.0
    )


@pytest.fixture(scope="session")
def libhgml(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fake libhgml.so, compiled once per run from our own hgml.h (a C compiler is
    needed: without one the tests that load it are skipped, saying why)."""
    from tests.fakelib import thead as hgml_fake

    why = hgml_fake.missing()
    if why:
        pytest.skip(f"the fake libhgml cannot be built here: {why}")
    return hgml_fake.build(tmp_path_factory.mktemp("hgml"))


@pytest.fixture(scope="session")
def libdcmi(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fake libdcmi.so, compiled once per run for every Ascend test (a C compiler is
    needed: without one the tests that load it are skipped, saying why)."""
    from tests.fakelib import ascend as fake_dcmi

    why = fake_dcmi.missing()
    if why:
        pytest.skip(f"the fake libdcmi cannot be built here: {why}")
    return fake_dcmi.build(tmp_path_factory.mktemp("dcmi"))
