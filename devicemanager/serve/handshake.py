"""TLS handshakes counted against the connection bound (issue 30).

A listener made with `create_server(ssl=...)` hands a connection to the HTTP protocol only once
its handshake is done: until then the connection is in no registry, so a few thousand TCP
connections that never send a ClientHello cost the agent ~50 KiB each (157 MiB for 3,000,
measured), none counted against `--http-max-connections`, for the whole handshake deadline; and
the allocator keeps what they took after they go.

So the listener is made without TLS, and `TlsGate` is each connection's first protocol: it counts
the connection as handshaking in the server's `Connections` registry the moment it is accepted,
and puts the loop's own TLS protocol (the one the listener would have used, with the same
deadlines) in its place, which hands the TLS transport to the HTTP protocol when the handshake
completes. At the
bound, the connection that has been in its handshake the longest is aborted (counted as
`handshakes`): an idle flood churns through its own connections and never grows, while a client
that completes its handshake in milliseconds still gets through.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Callable
from typing import Any, Protocol, cast

log = logging.getLogger("devicemanager.serve.http")


class Registry(Protocol):
    """What the gate needs of serve.http.Connections."""

    handshaking: dict[TlsGate, float]

    def handshake_room(self, new: TlsGate) -> None: ...

    def count(self, reason: str) -> None: ...


def _ssl_protocol_class() -> type[Any]:
    """The TLS protocol the running loop's own `create_server(ssl=...)` would wrap each
    connection in: uvloop's (Cython), else asyncio's."""
    try:
        from uvloop.loop import SSLProtocol  # type: ignore[attr-defined,unused-ignore]
    except ImportError:  # pragma: no cover - uvloop is a Linux dependency of ours
        from asyncio.sslproto import SSLProtocol
    return cast(type[Any], SSLProtocol)


class TlsGate(asyncio.Protocol):
    """One accepted connection's first protocol: counts it, then hands the transport to the
    TLS protocol at once, as the listener's own TLS would (uvloop delivers bytes to a protocol
    even when it pauses reading in connection_made, so the ClientHello must find TLS there)."""

    def __init__(
        self,
        factory: Callable[[], asyncio.Protocol],
        context: ssl.SSLContext,
        handshake_timeout: float,
        shutdown_timeout: float,
    ) -> None:
        self.factory = factory
        self.context = context
        self.handshake_timeout = handshake_timeout
        self.shutdown_timeout = shutdown_timeout
        self.transport: asyncio.Transport | None = None
        self.registry: Registry | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCPTransport is a Transport in all but its class.
        self.transport = cast(asyncio.Transport, transport)
        app = self.factory()
        self.registry = getattr(app, "registry", None)
        if self.registry is not None:
            self.registry.handshaking[self] = time.monotonic()
            self.registry.handshake_room(self)
        if self.transport.is_closing():
            self._release()
            return
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        done.add_done_callback(self._handshake_done)
        tls = _ssl_protocol_class()(
            loop,
            app,
            self.context,
            done,
            server_side=True,
            call_connection_made=True,  # the app's connection_made with the TLS transport
            ssl_handshake_timeout=self.handshake_timeout,
            ssl_shutdown_timeout=self.shutdown_timeout,
        )
        self.transport.set_protocol(tls)
        tls.connection_made(self.transport)

    def _handshake_done(self, done: asyncio.Future[None]) -> None:
        self._release()
        if not done.cancelled() and (exc := done.exception()) is not None:
            # A client that sent no ClientHello in time, or not TLS: what the listener's own
            # handshake would have dropped, dropped (the TLS protocol has closed it).
            log.debug("TLS handshake failed: %r", exc)

    def abort(self) -> None:
        """Shed: the connection goes now, its handshake unfinished."""
        self._release()
        if self.transport is not None:
            self.transport.abort()

    def _release(self) -> None:
        if self.registry is not None:
            self.registry.handshaking.pop(self, None)

    def connection_lost(self, exc: Exception | None) -> None:  # pragma: no cover
        self._release()  # only while the gate is still the transport's protocol

    def data_received(self, data: bytes) -> None:  # pragma: no cover - TLS's from the start
        pass


def gated(
    factory: Callable[[], asyncio.Protocol],
    context: ssl.SSLContext,
    handshake_timeout: float,
    shutdown_timeout: float,
) -> Callable[[], TlsGate]:
    """A protocol factory for a listener made without TLS: each connection's TLS by its gate."""

    def make(*_: Any) -> TlsGate:
        return TlsGate(factory, context, handshake_timeout, shutdown_timeout)

    return make
