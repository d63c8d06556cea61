"""Unary gRPC calls over cleartext HTTP/2 on a unix socket: what the kubelet's pod-resources
API needs, and no more (RFC 9113; gRPC's PROTOCOL-HTTP2.md).

One connection, blocking, on the calling thread: the preface and our SETTINGS, then per call a
HEADERS frame and one DATA frame carrying the empty request, and the answer read back as
HEADERS, DATA and trailers (or trailers alone) on the same stream. Every read of the socket is
held to the caller's deadline. The answer is bounded: its 5-byte length prefix is read first
and a larger message refused before the rest is read, and flow control holds what the server
may send meanwhile to one window (`WINDOW`). Frames are at most 16 KiB (the default we never
raise) and a header block at most `MAX_HEADER_BLOCK`.

It replaces grpclib with h2, hyperframe and multidict (1.3 MiB resident: docs/performance.md).
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable
from urllib.parse import unquote

from devicemanager.kube import hpack

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
WINDOW = 1 << 20  # per stream and for the connection: what the server may send unread
MAX_FRAME = 16384  # SETTINGS_MAX_FRAME_SIZE's default, which we keep
MAX_HEADER_BLOCK = 64 * 1024

DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY = range(8)
WINDOW_UPDATE, CONTINUATION = 8, 9
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY_FLAG = 0x1, 0x1, 0x4, 0x8, 0x20
# SETTINGS_ENABLE_PUSH = 0, SETTINGS_INITIAL_WINDOW_SIZE = WINDOW,
# SETTINGS_MAX_HEADER_LIST_SIZE = MAX_HEADER_BLOCK (what the decoder takes, decoded).
_SETTINGS = struct.pack(">HIHIHI", 0x2, 0, 0x4, WINDOW, 0x6, MAX_HEADER_BLOCK)

STATUS_NAMES = (
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
)
UNKNOWN, DEADLINE_EXCEEDED, UNIMPLEMENTED, INTERNAL, UNAVAILABLE = 2, 4, 12, 13, 14
# gRPC's mapping of an HTTP status that is not 200 (doc/http-grpc-status-mapping.md).
_HTTP_STATUS = {
    400: INTERNAL,
    401: STATUS_NAMES.index("UNAUTHENTICATED"),
    403: STATUS_NAMES.index("PERMISSION_DENIED"),
    404: UNIMPLEMENTED,
    429: UNAVAILABLE,
    502: UNAVAILABLE,
    503: UNAVAILABLE,
    504: UNAVAILABLE,
}


class GrpcError(Exception):
    """A call the server answered with a status other than OK."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(status, message)
        self.status, self.message = status, message

    @property
    def name(self) -> str:
        return STATUS_NAMES[self.status] if 0 <= self.status < len(STATUS_NAMES) else "UNKNOWN"


class Refused(Exception):
    """An answer this client will not take: larger than its bound, or compressed unasked."""


class ProtocolError(Exception):
    """The server broke HTTP/2 or gRPC framing."""


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    """One frame: a 9-byte header (length, type, flags, stream) and its payload."""
    head = len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big")
    return head + payload


def _timeout_header(seconds: float) -> str:
    """gRPC's `grpc-timeout`: at most 8 digits and a unit; milliseconds here."""
    return f"{max(1, min(99_999_999, int(seconds * 1000)))}m"


def _unpad(flags: int, payload: bytes) -> bytes:
    if not flags & PADDED:
        return payload
    if not payload or payload[0] >= len(payload):
        raise ProtocolError("padding longer than its frame")
    return payload[1 : len(payload) - payload[0]]


class Connection:
    """One HTTP/2 connection to a gRPC server on a unix socket, its calls made one at a time."""

    def __init__(
        self,
        path: str,
        deadline: float,
        max_message: int,
        mono: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_message, self._mono = max_message, mono
        self._decoder = hpack.Decoder(max_list_size=MAX_HEADER_BLOCK)
        self._buffer = bytearray()
        self._next_stream = 1
        self._last_stream: int | None = None  # from the server's GOAWAY
        self._unacknowledged = 0  # DATA bytes received on the connection, not yet given back
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._sock.settimeout(self._left(deadline))
            self._sock.connect(path)
            self._sock.sendall(
                PREFACE
                + frame(SETTINGS, 0, 0, _SETTINGS)
                + frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", WINDOW - 65535))
            )
        except BaseException:
            self._sock.close()
            raise

    def close(self) -> None:
        self._sock.close()

    def _left(self, deadline: float) -> float:
        left = deadline - self._mono()
        if left <= 0:
            raise TimeoutError("the deadline passed")
        return left

    def _read(self, size: int, deadline: float) -> bytes:
        while len(self._buffer) < size:
            self._sock.settimeout(self._left(deadline))
            chunk = self._sock.recv(max(65536, size - len(self._buffer)))
            if not chunk:
                raise ConnectionError("the server closed the connection")
            self._buffer += chunk
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data

    def _next_frame(self, deadline: float) -> tuple[int, int, int, bytes]:
        head = self._read(9, deadline)
        length = int.from_bytes(head[:3], "big")
        if length > MAX_FRAME:
            raise ProtocolError(f"a frame of {length} bytes, past the {MAX_FRAME} we allow")
        stream = int.from_bytes(head[5:], "big") & 0x7FFFFFFF
        return head[3], head[4], stream, self._read(length, deadline)

    def _answer_control(self, kind: int, flags: int, payload: bytes) -> None:
        """The connection's own frames: SETTINGS and PING are acknowledged, GOAWAY noted."""
        if kind == SETTINGS and not flags & ACK:
            self._sock.sendall(frame(SETTINGS, ACK, 0))
        elif kind == PING and not flags & ACK:
            self._sock.sendall(frame(PING, ACK, 0, payload))
        elif kind == GOAWAY:
            self._last_stream = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
        elif kind == PUSH_PROMISE:
            raise ProtocolError("a PUSH_PROMISE, and push was disabled")

    def _header_block(self, flags: int, payload: bytes, stream: int, deadline: float) -> bytes:
        block = _unpad(flags, payload)
        if flags & PRIORITY_FLAG:
            block = block[5:]
        while not flags & END_HEADERS:
            kind, flags, on, more = self._next_frame(deadline)
            if kind != CONTINUATION or on != stream:
                raise ProtocolError("a header block not continued by CONTINUATION")
            block += more
            if len(block) > MAX_HEADER_BLOCK:
                raise ProtocolError(f"a header block past {MAX_HEADER_BLOCK} bytes")
        return block

    def unary(self, path: str, request: bytes, deadline: float) -> bytes:
        """One call: the answer's message, or GrpcError with the server's status; TimeoutError
        past the deadline, Refused for an answer past the bound (its stream reset)."""
        stream = self._next_stream
        self._next_stream += 2
        headers = [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", path),
            (":authority", "localhost"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
            ("grpc-timeout", _timeout_header(self._left(deadline))),
        ]
        message = b"\x00" + struct.pack(">I", len(request)) + request
        self._sock.settimeout(self._left(deadline))
        self._sock.sendall(
            frame(HEADERS, END_HEADERS, stream, hpack.encode(headers))
            + frame(DATA, END_STREAM, stream, message)
        )
        try:
            return self._receive(stream, deadline)
        except Refused:
            self._sock.sendall(frame(RST_STREAM, 0, stream, struct.pack(">I", 0x8)))  # CANCEL
            raise

    def _receive(self, stream: int, deadline: float) -> bytes:
        body = bytearray()
        length: int | None = None
        started = False  # the answer's initial headers were read
        unacknowledged = 0  # on this stream
        while True:
            if self._last_stream is not None and self._last_stream < stream:
                raise ConnectionError("the server is going away (GOAWAY) before this call")
            kind, flags, on, payload = self._next_frame(deadline)
            if on == 0 or kind in (SETTINGS, PING, GOAWAY, PUSH_PROMISE):
                self._answer_control(kind, flags, payload)
                continue
            if kind == DATA:
                # Flow control counts the whole frame, padding included; the connection's
                # window across calls, the stream's for this call.
                self._unacknowledged += len(payload)
                if self._unacknowledged >= WINDOW // 2:
                    update = struct.pack(">I", self._unacknowledged)
                    self._sock.sendall(frame(WINDOW_UPDATE, 0, 0, update))
                    self._unacknowledged = 0
                if on != stream:
                    continue  # a stream reset earlier: its data is dropped
                unacknowledged += len(payload)
                if unacknowledged >= WINDOW // 2:
                    update = struct.pack(">I", unacknowledged)
                    self._sock.sendall(frame(WINDOW_UPDATE, 0, stream, update))
                    unacknowledged = 0
                if not started:
                    raise ProtocolError("DATA before the answer's headers")
                body += _unpad(flags, payload)
                if length is None and len(body) >= 5:
                    length = self._length(bytes(body[:5]))
                if length is not None and len(body) > 5 + length:
                    raise ProtocolError("more than one message in a unary answer")
                if flags & END_STREAM:
                    raise ProtocolError("the answer ended without trailers")
            elif kind == HEADERS and on == stream:
                headers = dict(
                    self._decoder.decode(self._header_block(flags, payload, on, deadline))
                )
                if not started:
                    started = True
                    self._check_start(headers)
                    if not flags & END_STREAM:
                        continue  # trailers-only answers end here
                elif not flags & END_STREAM:
                    raise ProtocolError("trailers that do not end the stream")
                return self._finish(headers, body, length)
            elif kind == HEADERS:
                self._header_block(flags, payload, on, deadline)  # keeps the table in step
            elif kind == RST_STREAM and on == stream:
                code = int.from_bytes(payload[:4], "big")
                status = UNAVAILABLE if code == 0x7 else INTERNAL  # REFUSED_STREAM: retry later
                raise GrpcError(status, f"the server reset the stream (HTTP/2 error {code})")
            # WINDOW_UPDATE, PRIORITY, frames of other streams and unknown frame types: ignored,
            # as RFC 9113 says (our request is far smaller than any window).

    def _length(self, prefix: bytes) -> int:
        if prefix[0]:
            raise Refused("a compressed answer, and none was asked for")
        length = int.from_bytes(prefix[1:], "big")
        if length > self.max_message:
            raise Refused(f"an answer of {length} bytes, larger than {self.max_message} bytes")
        return length

    @staticmethod
    def _check_start(headers: dict[str, str]) -> None:
        status = headers.get(":status", "")
        if status != "200":
            code = _HTTP_STATUS.get(int(status) if status.isdigit() else 0, UNKNOWN)
            raise GrpcError(code, f"HTTP status {status or 'missing'}")
        if not headers.get("content-type", "").startswith("application/grpc"):
            raise GrpcError(UNKNOWN, f"content-type {headers.get('content-type')!r}")

    @staticmethod
    def _finish(trailers: dict[str, str], body: bytearray, length: int | None) -> bytes:
        status = trailers.get("grpc-status", "")
        if not status.isdigit():
            raise ProtocolError(f"trailers without a grpc-status ({status!r})")
        if int(status):
            raise GrpcError(int(status), unquote(trailers.get("grpc-message", "")))
        if length is None or len(body) < 5 + length:
            raise GrpcError(
                INTERNAL, "the answer carries no message" if not body else "a cut message"
            )
        return bytes(body[5:])
