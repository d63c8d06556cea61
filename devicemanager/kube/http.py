"""The one HTTP client of the cluster's readers: the API server's (list, watch, reviews) and the
kubelet's summary, over the standard library's http.client.

Why not httpx2 (lightkube's): the agent asks for a GET or a POST of JSON, a body read in chunks
so that a bound can stop it, and a kept-alive connection; the standard library does that, with
TLS from the ssl module the server already loads, where httpx2 and its stack cost a node in a
cluster about 2 MiB more (issue 46, docs/performance.md).

Timeouts are per operation as httpx's were: `timeout` for connecting, and `read` (default
`timeout`) for each read and write on the socket. Connections are kept for reuse once an
answer was read to its end; one that fails before any answer (the server closed a kept-alive
connection) is retried once on a new connection. An answer of 401 renews the credentials
(the service account token is read again: the kubelet rotates it) and asks once more.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import os
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

from devicemanager.kube.config import ConfigError, User

CHUNK = 65536
KEPT = 4  # idle connections kept for reuse


class HttpError(Exception):
    """A request that got no answer: not connected, TLS refused, timed out, cut short."""


class Credentials:
    """The Authorization header of a user, renewed after a 401 where it can be."""

    def __init__(self, user: User | None) -> None:
        self.user = user
        self._lock = threading.Lock()
        self._header: str | None = None
        if user is not None and user.auth_provider and not (user.token or user.token_file):
            raise ConfigError("auth-provider not supported")

    def header(self) -> str | None:
        with self._lock:
            if self._header is None:
                self._header = self._make(renew=False)
            return self._header

    def renew(self) -> bool:
        """After a 401: whether new credentials were made (then the request is asked again)."""
        user = self.user
        if user is None or not (user.token_file or user.exec):
            return False
        with self._lock:
            self._header = self._make(renew=True)
        return True

    def _make(self, renew: bool) -> str | None:
        user = self.user
        if user is None:
            return None
        if user.token_file:
            try:
                return "Bearer " + Path(user.token_file).read_text().strip()
            except FileNotFoundError as exc:
                raise ConfigError(f"token file {user.token_file} not found") from exc
        if user.token:
            return f"Bearer {user.token}"
        if user.exec:
            return "Bearer " + _exec_token(user)
        if user.username and user.password:
            pair = f"{user.username}:{user.password}".encode()
            return "Basic " + base64.b64encode(pair).decode()
        return None


def _exec_token(user: User) -> str:
    plugin = user.exec
    assert plugin is not None
    if plugin.api_version not in (
        "client.authentication.k8s.io/v1alpha1",
        "client.authentication.k8s.io/v1beta1",
    ):
        raise ConfigError(f"auth exec api version {plugin.api_version} not implemented")
    env = {**os.environ, **dict(plugin.env)}
    done = subprocess.run([plugin.command, *plugin.args], env=env, capture_output=True, check=False)
    if done.returncode != 0:
        raise ConfigError(
            f"exec {plugin.command} returned {done.returncode}: {done.stderr.decode()}"
        )
    return str(json.loads(done.stdout)["status"]["token"])


class Response:
    """An answer whose body is read as the caller goes."""

    def __init__(self, raw: http.client.HTTPResponse) -> None:
        self._raw = raw
        self.status_code = raw.status

    def iter_bytes(self) -> Iterator[bytes]:
        try:
            while chunk := self._raw.read1(CHUNK):
                yield chunk
        except (OSError, http.client.HTTPException) as exc:
            raise HttpError(f"{type(exc).__name__}: {exc}") from exc

    def iter_lines(self) -> Iterator[bytes]:
        held = b""
        for chunk in self.iter_bytes():
            held += chunk
            *lines, held = held.split(b"\n")
            yield from lines
        if held:
            yield held

    def read(self, limit: int = 1 << 20) -> bytes:
        body = bytearray()
        for chunk in self.iter_bytes():
            body += chunk
            if len(body) > limit:
                break
        return bytes(body)

    def done(self) -> bool:
        return self._raw.isclosed() and not self._raw.will_close


class Http:
    """Requests to one server (`https://host:port`), over connections kept for reuse."""

    def __init__(
        self,
        base: str,
        tls: ssl.SSLContext | None,
        timeout: float,
        credentials: Credentials | None = None,
    ) -> None:
        url = urlsplit(base)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ConfigError(f"not a server's address: {base!r}")
        self.https = url.scheme == "https"
        self.host = url.hostname
        self.port = url.port or (443 if self.https else 80)
        self.prefix = url.path.rstrip("/")
        self.tls = tls if tls is not None or not self.https else ssl.create_default_context()
        self.timeout = timeout
        self.credentials = credentials
        self._idle: list[http.client.HTTPConnection] = []
        self._open: set[http.client.HTTPConnection] = set()  # idle or answering
        self._lock = threading.Lock()
        self._closed = False

    def close(self) -> None:
        """Every connection closed, those still answering too (a watch then ends at once)."""
        with self._lock:
            self._closed = True
            every, self._idle, self._open = list(self._open), [], set()
        for conn in every:
            # A read blocked in another thread wakes at a shutdown, not at a close.
            if conn.sock is not None:
                with contextlib.suppress(OSError):
                    conn.sock.shutdown(socket.SHUT_RDWR)
            conn.close()

    def _connection(self, read: float) -> tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            kept = self._idle.pop() if self._idle else None
        if kept is not None and kept.sock is not None:
            kept.sock.settimeout(read)
            return kept, True
        conn: http.client.HTTPConnection
        if self.https:
            conn = http.client.HTTPSConnection(
                self.host, self.port, timeout=self.timeout, context=self.tls
            )
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        with self._lock:
            self._open.add(conn)
        try:
            conn.connect()
        except BaseException:
            self._forget(conn)
            raise
        with self._lock:
            closed = self._closed
        if closed:  # closed while connecting: this connection would outlive it
            self._forget(conn)
            raise HttpError("the client was closed")
        if conn.sock is not None:
            conn.sock.settimeout(read)
        return conn, False

    def _forget(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            self._open.discard(conn)
        conn.close()

    def _release(self, conn: http.client.HTTPConnection, response: Response | None) -> None:
        if response is not None and response.done():
            with self._lock:
                if conn in self._open and len(self._idle) < KEPT:
                    self._idle.append(conn)
                    return
        self._forget(conn)

    def _send(
        self,
        method: str,
        target: str,
        body: bytes | None,
        headers: Mapping[str, str],
        read: float,
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        for attempt in (0, 1):
            conn, reused = None, False
            try:
                conn, reused = self._connection(read)
                conn.request(method, target, body=body, headers=dict(headers))
                return conn, conn.getresponse()
            except (OSError, http.client.HTTPException) as exc:
                if conn is not None:
                    self._forget(conn)
                if reused and attempt == 0:
                    continue  # the server closed a kept-alive connection: a new one
                raise HttpError(f"{type(exc).__name__}: {exc}") from exc
        raise AssertionError("unreachable")

    @contextmanager
    def stream(
        self,
        method: str,
        path: str,
        params: Mapping[str, str] | None = None,
        json_body: Any = None,
        read: float | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Iterator[Response]:
        """The answer to one request, its body to be read inside the block."""
        target = self.prefix + path + (f"?{urlencode(params)}" if params else "")
        body = None if json_body is None else json.dumps(json_body).encode()
        sent = {"Accept": "application/json", "Host": _host_header(self), **(headers or {})}
        if body is not None:  # a PATCH names its own kind of patch
            sent.setdefault("Content-Type", "application/json")
        for attempt in (0, 1):
            if self.credentials is not None and (auth := self.credentials.header()):
                sent["Authorization"] = auth
            conn, raw = self._send(method, target, body, sent, read or self.timeout)
            response = Response(raw)
            if (
                raw.status == 401
                and attempt == 0
                and self.credentials is not None
                and self.credentials.renew()
            ):
                response.read()
                self._release(conn, response)
                continue
            try:
                yield response
            finally:
                self._release(conn, response)
            return


def _host_header(http_: Http) -> str:
    host = f"[{http_.host}]" if ":" in http_.host else http_.host
    default = 443 if http_.https else 80
    return host if http_.port == default else f"{host}:{http_.port}"
