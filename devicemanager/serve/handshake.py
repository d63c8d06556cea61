"""TLS handshakes counted against the connection bound (issues 30 and 44).

A listener made with `create_server(ssl=...)` hands a connection to the HTTP protocol only once
its handshake is done: until then the connection is in no registry, so a few thousand TCP
connections that never send a ClientHello cost the agent ~50 KiB each (157 MiB for 3,000,
measured), none counted against `--http-max-connections`, for the whole handshake deadline; and
the allocator keeps what they took after they go.

So the listener is made without TLS, and `TlsGate` is each connection's first protocol: it counts
the connection in the server's `Connections` registry the moment it is accepted, as *waiting*
(nothing received yet), and costs no more than its socket until the client speaks: the loop's
TLS protocol (the one the listener would have used, with the same deadlines: its read buffer
alone is 256 KiB of address space, and OpenSSL's objects tens of KiB) is made only when the
first bytes, the ClientHello, arrive; they are handed to it and the connection counts as
*handshaking* until the TLS protocol hands the transport to the HTTP protocol. Past the bound,
the registry makes room (serve/http.py, `Connections.gate_room`): a connection that has sent
nothing for a while goes first, then one that finished its handshake and never sent a request,
then a handshake that has stalled; a client that connects and speaks at once, as the kubelet's
probe does, is never the one shed for a flood of connections that say nothing.
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

    waiting: dict[TlsGate, float]
    handshaking: dict[TlsGate, float]

    def gate_room(self, new: TlsGate) -> None: ...

    def ended(self) -> None: ...


def _ssl_protocol_class() -> type[Any]:
    """The TLS protocol the running loop's own `create_server(ssl=...)` would wrap each
    connection in: uvloop's (Cython), else asyncio's."""
    try:
        from uvloop.loop import SSLProtocol  # type: ignore[attr-defined,unused-ignore]
    except ImportError:  # pragma: no cover - uvloop is a Linux dependency of ours
        from asyncio.sslproto import SSLProtocol
    return cast(type[Any], SSLProtocol)


class TlsGate(asyncio.Protocol):
    """One accepted connection's first protocol: counts it, waits for its first bytes, then
    hands the transport and those bytes to the TLS protocol, as the listener's own TLS would
    have received them."""

    def __init__(
        self,
        factory: Callable[[], asyncio.Protocol],
        context: ssl.SSLContext,
        handshake_timeout: float,
        shutdown_timeout: float,
        registry: Registry | None = None,
    ) -> None:
        self.factory = factory
        self.context = context
        self.handshake_timeout = handshake_timeout
        self.shutdown_timeout = shutdown_timeout
        self.transport: asyncio.Transport | None = None
        self.registry = registry
        self._silence: asyncio.TimerHandle | None = None
        self._tls_started = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's TCPTransport is a Transport in all but its class.
        self.transport = cast(asyncio.Transport, transport)
        if self.registry is not None:
            self.registry.waiting[self] = time.monotonic()
            self.registry.gate_room(self)
        if self.transport.is_closing():
            return
        # A client that never speaks goes at the handshake deadline, as it would have in TLS.
        loop = asyncio.get_running_loop()
        self._silence = loop.call_later(self.handshake_timeout, self.abort)

    def data_received(self, data: bytes) -> None:
        """The ClientHello (or its first part): TLS from here on."""
        if self._tls_started or self.transport is None or self.transport.is_closing():
            return
        self._tls_started = True
        self._cancel_silence()
        registry = self.registry
        if registry is not None:
            registry.waiting.pop(self, None)
            registry.handshaking[self] = time.monotonic()
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        done.add_done_callback(self._handshake_done)
        tls = _ssl_protocol_class()(
            loop,
            self.factory(),
            self.context,
            done,
            server_side=True,
            call_connection_made=True,  # the app's connection_made with the TLS transport
            ssl_handshake_timeout=self.handshake_timeout,
            ssl_shutdown_timeout=self.shutdown_timeout,
        )
        self.transport.set_protocol(tls)
        tls.connection_made(self.transport)
        _feed(tls, data)

    def _handshake_done(self, done: asyncio.Future[None]) -> None:
        gone = self._release()
        if not done.cancelled() and (exc := done.exception()) is not None:
            # A client that stalled its handshake, or not TLS: what the listener's own
            # handshake would have dropped, dropped (the TLS protocol has closed it).
            log.debug("TLS handshake failed: %r", exc)
            if gone and self.registry is not None:
                self.registry.ended()

    def abort(self) -> None:
        """Shed: the connection goes now, its handshake unfinished."""
        self._cancel_silence()
        gone = self._release()
        if self.transport is not None and not self.transport.is_closing():
            self.transport.abort()
        if gone and self.registry is not None:
            self.registry.ended()

    def _cancel_silence(self) -> None:
        if self._silence is not None:
            self._silence.cancel()
            self._silence = None

    def _release(self) -> bool:
        """Out of the registry; whether it was in it."""
        if self.registry is None:
            return False
        waited = self.registry.waiting.pop(self, None)
        shook = self.registry.handshaking.pop(self, None)
        return waited is not None or shook is not None

    def connection_lost(self, exc: Exception | None) -> None:
        # Only while the gate is still the transport's protocol: gone before it said anything.
        self._cancel_silence()
        if self._release() and self.registry is not None:
            self.registry.ended()


def _feed(tls: Any, data: bytes) -> None:
    """Hand bytes already read to a buffered protocol (both loops' TLS protocols are)."""
    view = memoryview(data)
    while view:
        buffer = tls.get_buffer(len(view))
        n = min(len(buffer), len(view))
        buffer[:n] = view[:n]
        view = view[n:]
        tls.buffer_updated(n)


def gated(
    factory: Callable[[], asyncio.Protocol],
    context: ssl.SSLContext,
    handshake_timeout: float,
    shutdown_timeout: float,
) -> Callable[[], TlsGate]:
    """A protocol factory for a listener made without TLS: each connection's TLS by its gate,
    counted in the registry of the protocol `factory` makes (one made here, to ask)."""
    registry = getattr(factory(), "registry", None)

    def make(*_: Any) -> TlsGate:
        return TlsGate(factory, context, handshake_timeout, shutdown_timeout, registry)

    return make
