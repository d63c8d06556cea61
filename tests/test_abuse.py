"""Issue 44's abuse matrix, the server's part: idle TLS floods against the real agent
(`devicemanager serve` in a subprocess, real TLS clients on real sockets).

Each test reproduces what the issue found on the code before it (they fail there) and shows
it fixed. Settings are passed as environment variables, as tests/test_faults.py does.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time

import psutil
import pytest

from tests.conftest import NODES, Agent

pytestmark = pytest.mark.timeout(180)

H100 = NODES / "h100-8gpu-mixed"
MIB = 1048576


def _client_context() -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


CLIENT = _client_context()  # one for every connection: loading a context costs milliseconds


def mute(port: int) -> ssl.SSLSocket | None:
    """A connection that finishes its TLS handshake and then says nothing (None: refused)."""
    try:
        raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    except OSError:
        return None
    try:
        return CLIENT.wrap_socket(raw)
    except OSError:
        raw.close()
        return None


def probe(port: int) -> str:
    """The kubelet's readiness probe: a fresh connection, GET /readyz, the status it got (or
    what went wrong instead)."""
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
            CLIENT.wrap_socket(raw) as conn,
        ):
            conn.sendall(b"GET /readyz HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n")
            head = conn.recv(4096)
            return head.split(b" ", 2)[1].decode() if head else "closed"
    except (OSError, IndexError) as exc:
        return type(exc).__name__


def refused(agent: Agent, reason: str) -> float:
    with agent.client() as client:
        text = client.get("/metrics").text
    line = f'gpustack_device_manager_http_refused_total{{reason="{reason}"}} '
    return next(float(x.split()[-1]) for x in text.splitlines() if x.startswith(line))


def test_an_idle_tls_flood_is_shed_and_the_probes_are_answered_throughout(launch) -> None:  # type: ignore[no-untyped-def]
    """Two clients open connections that finish their handshake and say nothing, as fast as
    they can, far past the bound; meanwhile the kubelet's probe, on fresh connections, gets
    200 every time. The connections that said nothing are the ones shed (counted `shed_idle`),
    and the agent holds no more than the bound. (Before: the bound made room by aborting
    handshakes, the probe's among them: some probes got a reset or an empty answer.)"""
    cap = 16
    agent: Agent = launch(
        "--replay",
        str(H100),
        "--monitor-period",
        "0.5",
        env={"DEVICEMANAGER_HTTP_MAX_CONNECTIONS": str(cap)},
    )
    agent.wait_for("/readyz", 200)
    process = psutil.Process(agent.proc.pid)
    fds_before = process.num_fds()
    stop = threading.Event()
    held: list[ssl.SSLSocket] = []
    most_fds = [0]

    def flood() -> None:
        while not stop.is_set():
            conn = mute(agent.port)
            if conn is not None:
                held.append(conn)

    floods = [threading.Thread(target=flood) for _ in range(2)]
    for thread in floods:
        thread.start()
    try:
        while len(held) < 4 * cap:  # the bound is full of them, and more are coming
            time.sleep(0.05)
        probes = []
        for _ in range(30):
            probes.append(probe(agent.port))
            most_fds[0] = max(most_fds[0], process.num_fds() - fds_before)
    finally:
        stop.set()
        for thread in floods:
            thread.join()
        opened = len(held)
        for conn in held:
            conn.close()
    assert probes == ["200"] * len(probes), probes
    assert opened > 4 * cap
    # At most the bound's worth held at once, give or take those closing and the probe's.
    assert most_fds[0] <= cap + 16, most_fds
    # Every one but the bound's worth was shed, as idle or, if it went before its handshake was
    # done on the agent's side, in it (the counters are rendered once a round).
    deadline = time.monotonic() + 10
    while (shed := refused(agent, "shed_idle") + refused(agent, "handshakes")) < opened - cap - 8:
        assert time.monotonic() < deadline, (shed, opened)
        time.sleep(0.2)
    assert refused(agent, "shed_idle") > 0


def test_idle_tls_connections_give_their_memory_back_when_they_close(launch) -> None:  # type: ignore[no-untyped-def]
    """With a bound raised to let them all in, 1,000 connections that finish their handshake
    and say nothing take their TLS objects and buffers from the heap; once they close, the
    agent's resident set comes back near where it was. (Before: glibc kept the freed pages,
    +45 MiB after each 1,000, and three floods left +95 MiB.)"""
    agent: Agent = launch(
        "--replay",
        str(H100),
        "--monitor-period",
        "0.5",
        env={"DEVICEMANAGER_HTTP_MAX_CONNECTIONS": "2000"},
    )
    agent.wait_for("/readyz", 200)
    process = psutil.Process(agent.proc.pid)
    time.sleep(1)  # a few rounds in
    before = process.memory_info().rss
    for _ in range(3):
        held = [c for c in (mute(agent.port) for _ in range(1000)) if c is not None]
        assert len(held) == 1000
        for conn in held:
            conn.close()
        # Until the agent has seen them all go.
        deadline = time.monotonic() + 20
        while process.num_fds() > 64 and time.monotonic() < deadline:
            time.sleep(0.1)
    deadline = time.monotonic() + 10
    while process.memory_info().rss - before > 16 * MIB and time.monotonic() < deadline:
        time.sleep(0.2)
    grown = (process.memory_info().rss - before) / MIB
    assert grown <= 16, f"{grown:.1f} MiB kept after the connections closed"
    assert probe(agent.port) == "200"
