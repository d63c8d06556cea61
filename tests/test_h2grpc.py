"""The agent's HTTP/2 gRPC client (devicemanager/kube/h2grpc.py) against a scripted server on a
unix socket: the frames a grpc-go kubelet may send that the stand-in grpcio server
(tests/test_podresources.py) does not send on its own, each answered as RFC 9113 and gRPC's
PROTOCOL-HTTP2 say, and every breach of framing an error, never a hang or a crash."""

from __future__ import annotations

import shutil
import socket
import struct
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import hpack as reference_hpack
import pytest

from devicemanager.kube.h2grpc import (
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADERS,
    PADDED,
    PING,
    PREFACE,
    RST_STREAM,
    SETTINGS,
    Connection,
    GrpcError,
    ProtocolError,
    Refused,
    frame,
)

Script = Callable[[socket.socket, "Peer"], None]


class Peer:
    """The server's side of one connection: what the client sent, frame by frame."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn, self.buffer = conn, b""
        self.frames: list[tuple[int, int, int, bytes]] = []
        self.done = threading.Event()  # the client closed the connection

    def _read(self, size: int) -> bytes:
        while len(self.buffer) < size:
            chunk = self.conn.recv(65536)
            if not chunk:
                raise EOFError
            self.buffer += chunk
        data, self.buffer = self.buffer[:size], self.buffer[size:]
        return data

    def next_frame(self) -> tuple[int, int, int, bytes]:
        head = self._read(9)
        length = int.from_bytes(head[:3], "big")
        got = (head[3], head[4], int.from_bytes(head[5:], "big"), self._read(length))
        self.frames.append(got)
        return got

    def until(self, kind: int, flags: int | None = None) -> tuple[int, int, int, bytes]:
        while True:
            got = self.next_frame()
            if got[0] == kind and (flags is None or got[1] & flags):
                return got


def headers(pairs: list[tuple[str, str]], stream: int = 1, flags: int = END_HEADERS) -> bytes:
    return frame(HEADERS, flags, stream, reference_hpack.Encoder().encode(pairs, huffman=True))


START = [(":status", "200"), ("content-type", "application/grpc")]
OK = [("grpc-status", "0")]


def message(body: bytes) -> bytes:
    return b"\x00" + struct.pack(">I", len(body)) + body


@pytest.fixture
def serve() -> Iterator[Callable[[Script], tuple[Path, list[Peer]]]]:
    root = Path(tempfile.mkdtemp(prefix="h2-", dir="/tmp"))
    threads = []
    listeners = []

    def start(script: Script) -> tuple[Path, list[Peer]]:
        path = root / f"s{len(listeners)}.sock"
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(path))
        listener.listen(1)
        listeners.append(listener)
        peers: list[Peer] = []

        def run() -> None:
            conn, _ = listener.accept()
            with conn:
                peer = Peer(conn)
                peers.append(peer)
                assert peer._read(len(PREFACE)) == PREFACE
                try:
                    script(conn, peer)
                    conn.shutdown(socket.SHUT_WR)
                    while True:
                        peer.next_frame()  # what the client sends after
                except (EOFError, OSError):
                    pass
                finally:
                    peer.done.set()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        threads.append(thread)
        return path, peers

    yield start
    for listener in listeners:
        listener.close()
    for thread in threads:
        thread.join(5)
    shutil.rmtree(root, ignore_errors=True)


def call(path: Path, timeout: float = 5.0, max_message: int = 1024) -> bytes:
    import time

    deadline = time.monotonic() + timeout
    connection = Connection(str(path), deadline, max_message)
    try:
        return connection.unary("/v1.PodResourcesLister/List", b"", deadline)
    finally:
        connection.close()


def test_settings_and_pings_are_acknowledged_and_the_answer_read_through_them(serve) -> None:  # type: ignore[no-untyped-def]
    """SETTINGS and PING between the answer's frames, headers continued by CONTINUATION, DATA
    padded and cut over two frames, trailers Huffman-coded: the message comes back whole."""

    def script(conn: socket.socket, peer: Peer) -> None:
        peer.until(DATA, END_STREAM)
        block = reference_hpack.Encoder().encode(START, huffman=True)
        conn.sendall(
            frame(SETTINGS, 0, 0, struct.pack(">HI", 0x3, 100))
            + frame(HEADERS, 0, 1, block[:3])
            + frame(CONTINUATION, END_HEADERS, 1, block[3:])
            + frame(PING, 0, 0, b"12345678")
            + frame(DATA, PADDED, 1, b"\x04" + message(b"hello")[:4] + b"\x00" * 4)
            + frame(DATA, 0, 1, message(b"hello")[4:])
            + headers(OK, flags=END_HEADERS | END_STREAM)
        )

    path, peers = serve(script)
    assert call(path) == b"hello"
    (peer,) = peers
    assert peer.done.wait(5)
    sent = [(kind, flags, payload) for kind, flags, _, payload in peer.frames]
    assert (SETTINGS, 1, b"") in sent  # our ACK of its SETTINGS
    assert (PING, 1, b"12345678") in sent
    first_headers = next(p for k, _, _, p in peer.frames if k == HEADERS)
    request = dict(reference_hpack.Decoder().decode(first_headers))
    assert request[":path"] == "/v1.PodResourcesLister/List" and request["te"] == "trailers"
    assert request["grpc-timeout"].endswith("m")


@pytest.mark.parametrize(
    ("answer", "status", "text"),
    [
        (headers([*START, ("grpc-status", "12")], flags=END_HEADERS | END_STREAM), 12, ""),
        (
            headers(START)
            + headers([("grpc-status", "13"), ("grpc-message", "bad%20thing")], flags=5),
            13,
            "bad thing",
        ),
        (headers([(":status", "503")], flags=END_HEADERS | END_STREAM), 14, "HTTP status 503"),
        (headers(START) + frame(RST_STREAM, 0, 1, struct.pack(">I", 7)), 14, "HTTP/2 error 7"),
        (headers(START) + headers(OK, flags=5), 13, "the answer carries no message"),
    ],
)
def test_a_status_is_the_servers(serve, answer: bytes, status: int, text: str) -> None:  # type: ignore[no-untyped-def]
    def script(conn: socket.socket, peer: Peer) -> None:
        peer.until(DATA, END_STREAM)
        conn.sendall(answer)

    path, _ = serve(script)
    with pytest.raises(GrpcError) as raised:
        call(path)
    assert raised.value.status == status and text in raised.value.message


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (frame(DATA, 0, 1, message(b"x")), ProtocolError),  # data before headers
        (headers(START) + frame(DATA, END_STREAM, 1, message(b"x")), ProtocolError),  # no trailers
        (headers(START) + frame(DATA, 0, 1, message(b"x") * 2), ProtocolError),  # two messages
        (headers(START) + frame(DATA, 0, 1, b"\x00" * 16385), ProtocolError),  # a frame too long
        (headers(START) + headers([("grpc-status", "x")], flags=5), ProtocolError),
        (frame(GOAWAY, 0, 0, struct.pack(">II", 0, 0)), ConnectionError),  # going away first
        (headers(START), ConnectionError),  # the server closes mid-answer
        (headers(START) + frame(DATA, 0, 1, b"\x01" + bytes(4)), Refused),  # compressed
        (headers(START) + frame(DATA, 0, 1, b"\x00" + struct.pack(">I", 1025)), Refused),
    ],
)
def test_a_broken_answer_is_an_error(serve, answer: bytes, error: type[Exception]) -> None:  # type: ignore[no-untyped-def]
    def script(conn: socket.socket, peer: Peer) -> None:
        peer.until(DATA, END_STREAM)
        conn.sendall(answer)

    path, peers = serve(script)
    with pytest.raises(error):
        call(path)
    if error is Refused:  # the stream is reset, so the server sends no more of it
        (peer,) = peers
        assert peer.done.wait(5)
        assert any(kind == RST_STREAM for kind, *_ in peer.frames)


def test_a_silent_server_is_a_timeout(serve) -> None:  # type: ignore[no-untyped-def]
    release = threading.Event()

    def script(conn: socket.socket, peer: Peer) -> None:
        release.wait(10)

    path, _ = serve(script)
    try:
        with pytest.raises(TimeoutError):
            call(path, timeout=0.2)
    finally:
        release.set()
