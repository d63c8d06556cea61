"""The fast path (serve/http.py, serve/app.py): the four GET routes answered by the protocol
without the ASGI app, with the very answers the app gives, in order, under the same limits."""

from __future__ import annotations

import asyncio
import gzip
import json
import socket
import ssl

import pytest

from devicemanager.serve.app import LANDING, PATHS, Routes, accepts_gzip, create_app
from tests.conftest import NODES, Agent, scenario_monitor
from tests.test_serving_rules import _call

H100 = str(NODES / "h100-8gpu-mixed")
pytestmark = pytest.mark.timeout(90)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("gzip", True),
        ("deflate, gzip;q=0.5", True),
        ("GZIP", True),
        ("*", True),
        ("gzip;q=0", False),
        ("gzip; q=0", False),
        ("deflate, br", False),
        ("", False),
        (None, False),
    ],
)
def test_accept_encoding_is_read_as_http_says(value: str | None, expected: bool) -> None:
    assert accepts_gzip(value) is expected


@pytest.mark.parametrize("path", (*PATHS, LANDING))
@pytest.mark.parametrize("encoding", [None, b"gzip"])
def test_the_fast_answer_is_the_apps_answer(path: str, encoding: bytes | None) -> None:
    monitor = scenario_monitor("h100-8gpu-mixed")
    monitor.run_round()
    headers = ((b"accept-encoding", encoding),) if encoding else ()
    status, got_headers, body = asyncio.run(_call(create_app(monitor), path, headers))
    fast = Routes(monitor).fast(path.encode(), encoding)
    assert (fast.status, fast.body) == (status, body)
    assert dict(fast.headers) == {k: v for k, v in got_headers.items() if k != b"content-length"}
    monitor.stop()


def test_the_snapshot_is_served_gzip_compressed_to_whoever_asks(launch) -> None:  # type: ignore[no-untyped-def]
    agent: Agent = launch("--replay", H100, "--monitor-period", "0.5")
    agent.wait_for("/readyz", 200)
    with agent.client() as client:
        plain = client.get("/monitor/snapshot", headers={"Accept-Encoding": "identity"})
        with client.stream(
            "GET", "/monitor/snapshot", headers={"Accept-Encoding": "gzip"}
        ) as response:
            raw = b"".join(response.iter_raw())
            encoding = response.headers.get("content-encoding")
            vary = response.headers.get("vary")
    assert "content-encoding" not in plain.headers
    assert encoding == "gzip" and vary == "Accept-Encoding"
    document = json.loads(gzip.decompress(raw))
    assert document["node"] == plain.json()["node"] == "gpu-h100-07"
    assert len(raw) < len(plain.content) / 3


# -- raw HTTP/1.1 over TLS against the real server ------------------------------------------------


def _tls(port: int) -> ssl.SSLSocket:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    return context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10))


def _responses(
    conn: ssl.SSLSocket, count: int, heads: frozenset[int] = frozenset()
) -> list[tuple[int, dict[str, str], bytes]]:
    """`count` responses read off one connection, each by its content-length (none for the
    answers to HEAD requests, whose positions are `heads`)."""
    buffer = b""
    out = []
    while len(out) < count:
        while b"\r\n\r\n" not in buffer:
            chunk = conn.recv(65536)
            assert chunk, f"connection closed after {len(out)} responses"
            buffer += chunk
        head, _, buffer = buffer.partition(b"\r\n\r\n")
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
        length = 0 if len(out) in heads else int(headers["content-length"])
        while len(buffer) < length:
            chunk = conn.recv(65536)
            assert chunk, "connection closed inside a body"
            buffer += chunk
        out.append((int(status_line.split()[1]), headers, buffer[:length]))
        buffer = buffer[length:]
    return out


def _get(path: str, *extra: str, version: str = "1.1") -> bytes:
    lines = [f"GET {path} HTTP/{version}", "Host: agent", *extra, "", ""]
    return "\r\n".join(lines).encode()


def test_pipelined_requests_are_answered_in_order_whichever_path_serves_them(launch) -> None:  # type: ignore[no-untyped-def]
    agent: Agent = launch("--replay", H100, "--monitor-period", "0.5")
    agent.wait_for("/readyz", 200)
    with _tls(agent.port) as conn:
        # The app's 404 first (an ASGI task), then three fast answers queued behind it.
        conn.sendall(
            _get("/nowhere") + _get("/readyz") + _get("/metrics") + _get("/monitor/snapshot")
        )
        answers = _responses(conn, 4)
    assert [status for status, _, _ in answers] == [404, 200, 200, 200]
    assert answers[1][2] == b"ok\n"
    assert answers[2][2].startswith(b"# HELP ")
    assert json.loads(answers[3][2])["node"] == "gpu-h100-07"


def test_http_1_0_and_connection_close_are_answered_then_closed(launch) -> None:  # type: ignore[no-untyped-def]
    agent: Agent = launch("--replay", H100, "--monitor-period", "0.5")
    agent.wait_for("/readyz", 200)
    for request in (_get("/metrics", version="1.0"), _get("/metrics", "Connection: close")):
        with _tls(agent.port) as conn:
            conn.sendall(request)
            ((status, headers, body),) = _responses(conn, 1)
            assert status == 200 and headers["connection"] == "close"
            assert body.startswith(b"# HELP ")
            assert conn.recv(1) == b""  # closed by the agent


def test_a_query_string_and_a_head_are_not_the_fast_paths(launch) -> None:  # type: ignore[no-untyped-def]
    """(R-S3) Both are the app's: a query string is served alike, a HEAD as GET, head only."""
    agent: Agent = launch("--replay", H100, "--monitor-period", "0.5")
    agent.wait_for("/readyz", 200)
    with _tls(agent.port) as conn:
        conn.sendall(_get("/metrics?debug=1") + b"HEAD /metrics HTTP/1.1\r\nHost: a\r\n\r\n")
        (query, head) = _responses(conn, 2, heads=frozenset({1}))
    assert query[0] == 200 and query[2].startswith(b"# HELP ")  # the app serves it alike
    assert head[0] == 200 and head[2] == b"" and int(head[1]["content-length"]) > 1000


def test_the_fast_answers_date_moves_on_with_the_clock(launch) -> None:  # type: ignore[no-untyped-def]
    # The fast path keeps each answer's joined head for as long as uvicorn's date header is the
    # same: never a date from a second that has passed.
    import email.utils
    import time

    agent: Agent = launch("--replay", H100, "--monitor-period", "0.5")
    agent.wait_for("/readyz", 200)
    with agent.client() as client:
        first = client.get("/readyz").headers["date"]
        time.sleep(2.2)
        second = client.get("/readyz").headers["date"]
    elapsed = email.utils.parsedate_to_datetime(second) - email.utils.parsedate_to_datetime(first)
    assert elapsed.total_seconds() >= 1
