"""HTTP requests whole within their timeout: the commands' `--timeout` (issue 44).

httpx's timeout bounds each read, write and connect on its own: a server that sends a header
line, or a byte of its body, every half second never trips a 10 s timeout and holds the
command for as long as it likes (`summarize --prometheus`, `summarize URL` and `snapshot --url`
were still running after 20 minutes with `--timeout 10`). Checking the clock between chunks
of the body does not help with the headers, which httpx reads whole before it returns.

So the client's network streams are wrapped: every read, write and TLS handshake is given at
most what is left of the request's deadline as its own timeout, and none is started once the
deadline has passed. A socket blocked in `recv` then wakes at the deadline whatever the server
drips, and httpx raises its own timeout error (`httpx.TimeoutException`), which the commands
already report as "not whole within --timeout".
"""

from __future__ import annotations

import ssl
import time
import typing
from typing import Any

import httpcore
import httpx


class Deadline:
    """A moment `seconds` after `restart`; what is left of it, for each network call."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.at = time.monotonic() + seconds

    def restart(self) -> None:
        """A new request: the whole of `seconds` again."""
        self.at = time.monotonic() + self.seconds

    def left(self, timeout: float | None, error: type[Exception]) -> float:
        remaining = self.at - time.monotonic()
        if remaining <= 0:
            raise error(f"not whole within {self.seconds:g} s")
        return remaining if timeout is None else min(timeout, remaining)


class _Stream(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream, deadline: Deadline) -> None:
        self.stream = stream
        self.deadline = deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.stream.read(max_bytes, self.deadline.left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.stream.write(buffer, self.deadline.left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self.stream.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        left = self.deadline.left(timeout, httpcore.ConnectTimeout)
        return _Stream(self.stream.start_tls(ssl_context, server_hostname, left), self.deadline)

    def get_extra_info(self, info: str) -> Any:
        return self.stream.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    def __init__(self, deadline: Deadline) -> None:
        self.backend = httpcore.SyncBackend()
        self.deadline = deadline

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        left = self.deadline.left(timeout, httpcore.ConnectTimeout)
        stream = self.backend.connect_tcp(host, port, left, local_address, socket_options)
        return _Stream(stream, self.deadline)

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: typing.Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:  # pragma: no cover - the commands speak TCP
        left = self.deadline.left(timeout, httpcore.ConnectTimeout)
        stream = self.backend.connect_unix_socket(path, left, socket_options)
        return _Stream(stream, self.deadline)

    def sleep(self, seconds: float) -> None:  # pragma: no cover - httpcore's retries only
        self.backend.sleep(seconds)


def client(timeout: float, **kwargs: Any) -> tuple[httpx.Client, Deadline]:
    """An httpx.Client (`kwargs` as httpx takes them, `verify` included) whose requests are
    each whole within `timeout` seconds of the deadline's last `restart` (or of now), and that
    deadline. A caller that makes several requests restarts it before each."""
    deadline = Deadline(timeout)
    verify = kwargs.pop("verify", True)
    transport = httpx.HTTPTransport(verify=verify)
    # httpcore takes a network backend, but httpx's transport does not pass one through: the
    # pool's own is replaced (httpx and httpcore are pinned in requirements.lock;
    # tests/test_deadline.py fails if this stops taking effect).
    pool = transport._pool
    pool._network_backend = _Backend(deadline)
    return httpx.Client(transport=transport, timeout=timeout, **kwargs), deadline
