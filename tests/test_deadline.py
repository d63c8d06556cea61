"""`--timeout` bounds each whole request, however a server drips (issue 44, item 5).

A real hostile HTTP server on loopback answers each request with its status line and then
one header line, or one byte of its body, every 0.5 s, for as long as the client listens.
Before: httpx's timeout bounds each read, so `summarize --prometheus`, `summarize URL` and
`snapshot --url` waited as long as the server dripped (20 minutes and counting with
`--timeout 10`). Now each ends by its `--timeout`, exit 3, saying so.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from devicemanager import deadline
from tests.test_operations import BOUND_SECONDS, dm, one_line

pytestmark = pytest.mark.timeout(120)

TIMEOUT = 2


class Drip:
    """A server that accepts every connection, reads its request, and drips the answer:
    headers (`what="headers"`: a header line at a time, never the blank line that ends them)
    or body (`what="body"`: the headers whole, then a byte of a long body at a time)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.done = threading.Event()
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def _accept(self) -> None:
        while not self.done.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._drip, args=(conn,), daemon=True).start()

    def _drip(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n")
                if self.what == "body":
                    conn.sendall(b"content-length: 1000000\r\n\r\n{")
                while not self.done.wait(0.5):
                    conn.sendall(b"x-drip: 1\r\n" if self.what == "headers" else b" ")
            except OSError:
                pass

    def close(self) -> None:
        self.done.set()
        self.listener.close()


@pytest.fixture(params=["headers", "body"])
def drip(request: pytest.FixtureRequest) -> Iterator[Drip]:
    server = Drip(request.param)
    yield server
    server.close()


@pytest.mark.parametrize(
    ("command", "args"),
    [
        ("summarize", ("--prometheus", "{url}")),
        ("summarize", ("{url}/metrics",)),
        ("snapshot", ("--url", "{url}/monitor/snapshot")),
        ("metrics", ("--url", "{url}/metrics")),
    ],
)
def test_a_server_that_drips_is_cut_at_the_timeout(
    drip: Drip, command: str, args: tuple[str, ...]
) -> None:
    argv = [a.format(url=drip.url("")) for a in args]
    started = time.monotonic()
    out = dm(command, *argv, "--timeout", str(TIMEOUT), timeout=TIMEOUT + BOUND_SECONDS * 3)
    took = time.monotonic() - started
    assert out.returncode == 3, (out.returncode, out.stderr)
    line = one_line(out, command)
    assert f"within {TIMEOUT}" in line or f"whole in {TIMEOUT}s" in line, line
    assert took < TIMEOUT + BOUND_SECONDS, took
    assert drip.connections >= 1


def test_the_deadline_is_what_each_read_waits_for() -> None:
    """The mechanism: a client made by `deadline.client` wakes from a read blocked on a
    server that drips at the deadline, not at the per-read timeout (which every drip
    resets); a second request on the same client has the whole timeout again."""
    server = Drip("headers")
    try:
        client, whole = deadline.client(1.0)
        with client:
            for _ in range(2):
                whole.restart()
                started = time.monotonic()
                with pytest.raises(httpx.TimeoutException):
                    client.get(server.url("/"))
                assert time.monotonic() - started < 1.0 + BOUND_SECONDS
    finally:
        server.close()
