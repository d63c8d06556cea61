"""Issue 44's abuse matrix, the server's and the commands' part: idle TLS floods and bodies
against the real agent (`devicemanager serve` in a subprocess, real TLS clients on real
sockets), and the commands given FIFOs, JSON nested without end and numbers that are not.

Each test reproduces what the issue found on the code before it (they fail there) and shows
it fixed. Settings are passed as environment variables, as tests/test_faults.py does.
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.conftest import NODES, REPO, Agent, agent_env
from tests.test_operations import BOUND_SECONDS, dm, one_line

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


# -- a request body, and the commands' inputs (issue 44, item 9) -----------------------------------


@pytest.mark.parametrize("chunked", [False, True])
def test_a_body_past_the_bound_is_413_at_once_and_never_read(launch, chunked: bool) -> None:  # type: ignore[no-untyped-def]
    """A 1 GiB body (declared, or chunked and counted as it comes) is answered 413 with
    Connection: close as soon as it passes 64 KiB, and the connection closed: the client is
    never read to the end. (Before: the body was drained, 9.9 CPU-seconds for 8 at once.)"""
    agent: Agent = launch("--replay", str(H100), "--monitor-period", "0.5")
    agent.wait_for("/readyz", 200)
    head = b"POST /metrics HTTP/1.1\r\nHost: agent\r\n"
    head += (
        b"Transfer-Encoding: chunked\r\n\r\n" if chunked else b"Content-Length: 1073741824\r\n\r\n"
    )
    chunk = b"x" * 65536
    piece = b"10000\r\n" + chunk + b"\r\n" if chunked else chunk
    raw = socket.create_connection(("127.0.0.1", agent.port), timeout=10)
    with CLIENT.wrap_socket(raw) as conn:
        conn.sendall(head)
        sent = 0
        answer = b""
        conn.setblocking(False)
        while sent < 1024 * MIB:  # the client would send its whole GiB: the agent stops it
            try:
                sent += conn.send(piece)
            except (ssl.SSLWantWriteError, ssl.SSLWantReadError, BlockingIOError):
                time.sleep(0.01)
            except OSError:
                break
            try:
                got = conn.recv(65536)
                answer += got
                # A chunked body's size is known only as it comes: the method's 405 may come
                # first, and the client goes on sending until the 413 or the close stops it.
                if not got or b"HTTP/1.1 413" in answer:
                    break
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                pass
            except OSError:
                break
        conn.setblocking(True)
        conn.settimeout(5)
        try:
            while chunk_read := conn.recv(65536):
                answer += chunk_read
        except OSError:
            pass
    # A chunked body's size is known only as it comes: the method's 405 may be sent first.
    assert answer.startswith(b"HTTP/1.1 413") or (chunked and b"HTTP/1.1 413" in answer), answer
    assert b"connection: close" in answer.lower()
    assert sent < 64 * MIB, sent  # stopped within a few buffers of the bound, not drained
    deadline = time.monotonic() + 10
    while refused(agent, "body") < 1:
        assert time.monotonic() < deadline
        time.sleep(0.2)


@pytest.fixture
def fifo_proc(tmp_path: Path) -> Path:
    """A --proc-root whose process 4242 has a FIFO for its cgroup file, and a FIFO beside it."""
    proc = tmp_path / "proc"
    (proc / "4242").mkdir(parents=True)
    (proc / "4242" / "stat").write_text(
        "4242 (python) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 99 0\n"
    )
    os.mkfifo(proc / "4242" / "cgroup")
    os.mkfifo(tmp_path / "fifo")
    return proc


@pytest.mark.parametrize(
    "args",
    [
        ("4242", "--proc-root", "{proc}"),
        ("--cgroup-file", "{fifo}"),
        ("--cgroup-file", "/etc/hostname", "--pods", "{fifo}"),
    ],
)
def test_whois_refuses_a_fifo_at_once(fifo_proc: Path, args: tuple[str, ...]) -> None:
    """(Before: whois waited for a writer that never came, and never returned.)"""
    argv = [a.format(proc=fifo_proc, fifo=fifo_proc.parent / "fifo") for a in args]
    out = dm("whois", *argv, timeout=BOUND_SECONDS)
    assert out.returncode == 2, out.stderr
    assert "FIFO" in one_line(out, "whois")


def test_inputs_that_broke_the_commands_say_what_to_fix(tmp_path: Path) -> None:
    """A PodList nested 100,000 deep, a timeout of inf, a moment of nan: each a usage error
    naming the flag, never a Python exception's name. (Before: RecursionError,
    OverflowError, and nan sent on to Prometheus.)"""
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    out = dm("whois", "--cgroup-file", "/etc/hostname", "--pods", str(deep))
    assert out.returncode == 2 and "is not a JSON PodList" in one_line(out, "whois")
    nan = tmp_path / "nan.json"
    nan.write_text('{"items": NaN}')
    out = dm("whois", "--cgroup-file", "/etc/hostname", "--pods", str(nan))
    assert out.returncode == 2 and "is not a JSON PodList" in one_line(out, "whois")
    for command, flag, value in [
        ("snapshot", "--timeout", "inf"),
        ("metrics", "--timeout", "1e300"),
        ("summarize", "--timeout", "inf"),
        ("summarize", "--at", "nan"),
    ]:
        extra = ["--prometheus", "http://127.0.0.1:9"] if command == "summarize" else []
        out = dm(command, *extra, flag, value)
        assert out.returncode == 2, (command, flag, out.stderr)
        assert f"argument {flag}:" in out.stderr and "Error" not in out.stderr, out.stderr


# -- terminal escapes (issue 44, item 4) ---------------------------------------------------------

HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x9b31m\u202e\ud800"  # title, clear, 8-bit CSI, bidi, surrogate
CONTROLS = ("\x1b", "\x07", "\x9b", "\u202e", "\ud800")


def hostile_strings(doc: Any) -> Any:
    """Every string of a document with HOSTILE after it (keys left alone)."""
    if isinstance(doc, str):
        return doc + HOSTILE
    if isinstance(doc, list):
        return [hostile_strings(v) for v in doc]
    if isinstance(doc, dict):
        return {k: hostile_strings(v) for k, v in doc.items()}
    return doc


class Hostile:
    """An HTTP server on loopback answering each path with a fixed (status, type, body)."""

    def __init__(self, routes: dict[str, tuple[int, str, bytes]]) -> None:
        answers = routes

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                status, kind, body = answers.get(self.path.split("?")[0], (404, "text/plain", b""))
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def shown(out: Any) -> str:
    text = out.stdout + out.stderr
    assert "Traceback" not in text and "UnicodeEncodeError" not in text, text
    return str(text)


def test_what_a_tenant_an_exporter_or_a_server_sends_never_reaches_the_terminal_raw() -> None:
    """An agent's snapshot whose every name carries a title set, a screen clear, an 8-bit
    CSI, a bidi override and a lone surrogate; an exporter's label values with the same, raw;
    a Prometheus server whose error says them: `snapshot`, `metrics`, `summarize URL` and
    `summarize --prometheus` print the rest, none of them. (Before: printed raw, and the
    surrogate ended `snapshot` with a UnicodeEncodeError.)"""
    golden = json.loads((H100 / "golden" / "snapshot.json").read_text())
    snapshot = json.dumps(hostile_strings(golden)).encode()
    metrics = (H100 / "golden" / "metrics.txt").read_text()
    metrics = metrics.replace('node="gpu-h100-07"', f'node="gpu-h100-07{HOSTILE[:-1]}"')
    error = json.dumps({"status": "error", "errorType": "bad_data", "error": HOSTILE})
    server = Hostile(
        {
            "/monitor/snapshot": (200, "application/json", snapshot),
            "/metrics": (200, "text/plain; version=0.0.4", metrics.encode()),
            "/api/v1/query": (400, "application/json", error.encode()),
        }
    )
    try:
        outs = [
            dm("snapshot", "--url", f"{server.url}/monitor/snapshot"),
            dm("metrics", "--url", f"{server.url}/metrics"),
            dm("summarize", f"{server.url}/metrics"),
            dm("summarize", "--prometheus", server.url),
        ]
    finally:
        server.close()
    texts = [shown(out) for out in outs]
    assert [out.returncode for out in outs] == [0, 0, 0, 3], [o.stderr for o in outs]
    assert "gpu-h100-07]0;pwned[2J31m" in texts[0]  # the text around them is kept
    assert "pwned" in texts[3]
    for text in texts:
        assert not any(c in text for c in CONTROLS), repr(text[:300])


# -- summarize --prometheus bounds series before decoding (issue 44, item 6) ----------------------


def test_a_million_series_are_refused_before_they_are_decoded() -> None:
    """A Prometheus that answers the first query with 1,000,000 series, 47 MB, under the
    default --max-bytes (64 MiB): refused as more than --max-series (200,000) with the
    command's peak resident set under 256 MiB (79 MiB measured: the answer's bytes and the
    interpreter). (Before: every series was decoded first, 704 MiB, then refused.)"""
    element = b'{"metric":{"deviceidx":"%d"},"value":[1,"1"]}'
    result = b",".join(element % i for i in range(1_000_000))
    body = b'{"status":"success","data":{"resultType":"vector","result":[' + result + b"]}}"
    assert len(body) < 64 * MIB
    server = Hostile({"/api/v1/query": (200, "application/json", body)})
    del result, body
    # A parent of its own, so the peak it reports is this command's alone.
    command = [sys.executable, "-m", "devicemanager", "summarize", "--prometheus", server.url]
    measure = (
        "import resource, subprocess, sys\n"
        "out = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "print(out.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
        "print(out.stderr, file=sys.stderr)\n"
    )
    try:
        out = subprocess.run(
            [sys.executable, "-c", measure, *command],
            capture_output=True,
            text=True,
            env=agent_env(None),
            cwd=REPO,
            timeout=120,
        )
    finally:
        server.close()
    code, peak_kib = (int(x) for x in out.stdout.split())
    assert code == 3 and "more than 200000 series" in out.stderr, out.stderr
    assert peak_kib < 256 * 1024, f"{peak_kib // 1024} MiB"
