"""Bounded HTTP: what one client may cost the agent in memory, file descriptors and time.

uvicorn's HTTP/1.1 protocol (httptools) has no limit on the size of a request's header section
(httptools buffers a header value until it ends), no deadline for a request to arrive (its
keep-alive timer starts only after a first response) and no way to make room when too many
clients connect: `limit_concurrency` answers 503 to every newcomer, probes included, and sheds
nothing. h11's `h11_max_incomplete_event_size` bounds the header section but answers 400, and
h11 has no deadline either. Measured against uvicorn 0.54 over TLS: with httptools, a 32 MiB
unfinished header was taken whole (+33 MiB resident, no answer); with h11 and a 32 KiB
`h11_max_incomplete_event_size` it was refused, as `400`; with either, 40 connections holding
half a request were still open and unanswered after 8 s (`timeout_keep_alive` 5 s), and with
`limit_concurrency` 24 a `/readyz` probe got `503`. So this module adds a thin layer over
uvicorn's own protocol:

- header section (request line and headers) at most `max_header_bytes`, and at most
  `max_headers` fields: past either, `431` and the connection is closed, without the section
  ever being held in memory;
- a request must arrive whole (headers and body) within `request_timeout` of its first byte,
  and a new connection must send one within `request_timeout`: else `408` (or, for a
  connection that never sent a byte, a plain close);
- at most `max_connections` connections: a newcomer past the cap first makes room by closing
  the connection idle the longest (between requests, or never sent anything), then, if none
  is idle, by answering `503` to the oldest one still sending an incomplete request. Only when
  every connection is busy with a request being answered is the newcomer itself limited: its
  request is answered `503` unless it is a probe (`/livez`, `/readyz`), which is always
  answered, so the kubelet never restarts the agent for what a client did to it;
- `CONNECT` is answered `405` with `Allow: GET, HEAD` here (httptools treats it as a tunnel and
  uvicorn would leave it hanging); every other method reaches the app, which says the same;
- the fast path: a GET of one of the `FastRoutes`' paths, with no request of the connection
  still being answered, is answered here as soon as it has arrived, from bytes the monitor
  made, without an ASGI task (see serve/app.py). Everything the limits above do applies to it
  alike; anything else (other methods and paths, pipelined requests) goes to the app.

Every answer sent here (fast, refused, or uvicorn's 400 for a request it cannot parse) and each
bound's action are counted in the registry's `HttpCounters` (serve/counters.py), which the
monitor renders once a round (R-X8); the app's answers are counted by serve/app.py.

TLS handshakes happen before a connection reaches the protocol; `new_event_loop` gives the
listener a handshake deadline (`HANDSHAKE_TIMEOUT`) instead of asyncio's 60 s, and a closing
deadline (`TLS_SHUTDOWN_TIMEOUT`) instead of 30 s, so a shed client that never acknowledges the
close gives its descriptor back within seconds.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import Any, Protocol

import httptools
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.server import ServerState

from devicemanager.serve.counters import OTHER, HttpCounters, route_of
from devicemanager.serve.handshake import TlsGate, gated

log = logging.getLogger("devicemanager.serve.http")

HANDSHAKE_TIMEOUT = 10.0
# Requests one connection may have queued behind the one being answered (pipelining). No
# scraper pipelines; a client that does, past this, is sending faster than it reads.
MAX_PIPELINED = 32
# A closed TLS connection waits for the peer's close_notify; a peer that never sends one would
# hold its file descriptor for asyncio's default 30 s after being shed or timed out.
TLS_SHUTDOWN_TIMEOUT = 2.0
PROBES = frozenset({"/livez", "/readyz"})
# A client's ClientHello follows its connect at once: an accepted connection that has said
# nothing for this long is the first to go when the bound needs room (serve/handshake.py).
SILENT_GRACE = 1.0
# A handshake in progress this long (its client's answer is a round trip away) may go too.
STALLED_HANDSHAKE = 3.0
# Connections ended before the allocator is asked to give freed pages back, and how long
# after the one that reaches the count (a burst's rest ends meanwhile).
TRIM_AFTER = 64
TRIM_DELAY = 1.0
JOIN_BELOW = 64 * 1024  # bytes: a fast answer this small is sent with its head in one write


@dataclass(frozen=True, slots=True)
class Answer:
    """A whole answer: status, headers (content-length is added), body."""

    status: int
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes


class FastRoutes(Protocol):
    """Routes answered without the ASGI app: their paths, and the answer for one of them."""

    paths: frozenset[bytes]

    def fast(self, path: bytes, accept_encoding: bytes | None) -> Answer: ...


@dataclass(frozen=True, slots=True)
class Limits:
    max_connections: int = 128
    request_timeout: float = 10.0
    max_header_bytes: int = 32 * 1024  # a service-account token is ~1 KiB, an OIDC one a few
    # No route takes a body: a request's body past this is refused at once (413), not read.
    max_body_bytes: int = 64 * 1024
    max_headers: int = 100


@dataclass
class Connections:
    """Every open connection of one server, oldest first, and what the limits did to clients."""

    limits: Limits
    open: dict[BoundedHttpProtocol, None] = field(default_factory=dict)
    counters: HttpCounters = field(default_factory=HttpCounters)
    # The fast path's joined heads, by answer, and the default headers (with uvicorn's date)
    # they were joined with.
    heads: dict[tuple[int, tuple[tuple[bytes, bytes], ...], int, bool], bytes] = field(
        default_factory=dict
    )
    heads_with: object = None
    # The second of the date in the server's default headers (`renew_date`).
    date_second: int = -1

    # Connections accepted that have sent nothing yet, and those in their TLS handshake, since
    # when (serve/handshake.py).
    waiting: dict[TlsGate, float] = field(default_factory=dict)
    handshaking: dict[TlsGate, float] = field(default_factory=dict)
    # Connections ended since the allocator was last asked to give freed pages back, and the
    # pending ask (`ended`).
    ended_since_trim: int = 0
    trim: asyncio.TimerHandle | None = None

    def renew_date(self, state: ServerState, config: Config) -> None:
        """uvicorn's default headers (its date, and the headers configured) with this second's
        date. Renewed when a request arrives in a new second, instead of by uvicorn's tick
        ten times a second (agent/wiring.py's AgentServer has none): an idle server sleeps."""
        now = time.time()
        second = int(now)
        if second == self.date_second:
            return
        self.date_second = second
        date = [(b"date", formatdate(now, usegmt=True).encode())] if config.date_header else []
        state.default_headers = date + config.encoded_headers

    def count(self, reason: str) -> None:
        """A bound acted: one of serve.counters.REASONS."""
        self.counters.refuse(reason)

    def gate_room(self, new: TlsGate) -> None:
        """A connection accepted: it counts against the bound with the open connections and
        the other handshakes. Past the bound, room is made from what a flood is made of, so a
        client that speaks at once (the kubelet's probe) is never the one that goes: first a
        connection that has sent nothing for `SILENT_GRACE`, then one that finished its
        handshake that long ago and never sent a byte, then a handshake stalled for
        `STALLED_HANDSHAKE`. With none of those, the newcomer goes on to its handshake while
        fewer than the bound are in theirs (`admit` makes room among the open connections
        when it is done); past that, the oldest that has still sent nothing goes, else the
        newcomer."""
        while self._over_bound() and self._shed_for(new):
            pass
        if len(self.waiting) + len(self.handshaking) > self.limits.max_connections:
            self.count("handshakes")
            others = [g for g in self.waiting if g is not new]
            # Still silent, however briefly: a client that spoke is in its handshake by now.
            (min(others, key=self.waiting.__getitem__) if others else new).abort()

    def _over_bound(self) -> bool:
        live = sum(1 for c in self.open if not c.closing)
        return live + len(self.waiting) + len(self.handshaking) > self.limits.max_connections

    def _shed_for(self, new: TlsGate) -> bool:
        now = time.monotonic()
        silent = [g for g, t in self.waiting.items() if g is not new and now - t >= SILENT_GRACE]
        if silent:
            self.count("handshakes")
            min(silent, key=self.waiting.__getitem__).abort()
            return True
        mute = [
            c
            for c in self.open
            if not c.sent_any and not c.closing and now - c.opened >= SILENT_GRACE
        ]
        if mute:
            self.count("shed_idle")
            min(mute, key=lambda c: c.opened).abort()
            return True
        stalled = [g for g, t in self.handshaking.items() if now - t >= STALLED_HANDSHAKE]
        if stalled:
            self.count("handshakes")
            min(stalled, key=self.handshaking.__getitem__).abort()
            return True
        return False

    def ended(self) -> None:
        """A connection is gone. After a burst of them, glibc is asked to give the pages they
        freed back (`malloc_trim`): each TLS connection takes a 256 KiB read buffer and OpenSSL's
        objects from the heap, and freed in the middle of it they stayed resident (twelve
        floods of 2,000 idle connections: +190 MiB without, measured)."""
        self.ended_since_trim += 1
        if self.ended_since_trim >= TRIM_AFTER and self.trim is None:
            self.trim = asyncio.get_running_loop().call_later(TRIM_DELAY, self._trim)

    def _trim(self) -> None:
        self.trim = None
        self.ended_since_trim = 0
        give_back_freed_memory()

    def admit(self, new: BoundedHttpProtocol) -> None:
        self.open[new] = None
        live = [c for c in self.open if not c.closing]
        if len(live) <= self.limits.max_connections:
            return
        others = [c for c in live if c is not new]
        idle = [c for c in others if c.idle]
        if idle:
            oldest = min(idle, key=lambda c: c.idle_since)
            self.count("shed_idle")
            # One that never sent a byte is owed no goodbye: aborted, its TLS objects go now
            # rather than when its client acknowledges a close (TLS_SHUTDOWN_TIMEOUT).
            (oldest.close if oldest.sent_any else oldest.abort)()
            return
        incomplete = [c for c in others if c.request_started is not None and not c.refused]
        if incomplete:
            oldest = min(incomplete, key=lambda c: c.request_started or 0.0)
            self.count("shed_incomplete")
            oldest.refuse(503, "server busy: too many connections\n")
            return
        new.probes_only = True  # every slot is answering a request: this one waits its turn

    def remove(self, gone: BoundedHttpProtocol) -> None:
        if gone in self.open:
            del self.open[gone]
            self.ended()


class BoundedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the limits above. Class attributes `registry` and
    `routes` are set by `protocol_for`, one registry per server."""

    registry: Connections
    routes: FastRoutes | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = self.registry.limits
        self.opened = time.monotonic()
        self.idle_since = self.opened
        self.request_started: float | None = None  # monotonic time of the request's first byte
        self.header_bytes = 0
        self.pending_bytes = 0
        self.header_count = 0
        self.body_bytes = 0
        self.headers_done = False
        self.too_many_headers = False
        self.probes_only = False
        self.refused = False
        self.sent_any = False
        self._deadline: asyncio.TimerHandle | None = None
        # The request being taken by the fast path: (path, Accept-Encoding, keep-alive).
        self._fast: tuple[bytes, bytes | None, bool] | None = None

    # -- state ------------------------------------------------------------------------------

    @property
    def closing(self) -> bool:
        return self.transport is None or self.transport.is_closing()

    @property
    def idle(self) -> bool:
        """Between requests (or before the first): nothing received, nothing being answered."""
        answering = self.cycle is not None and not self.cycle.response_complete
        return self.request_started is None and not answering and not self.pipeline

    def close(self) -> None:
        self._cancel_deadline()
        if not self.closing:
            self.transport.close()

    def abort(self) -> None:
        """Shed a connection that never sent a byte: nothing to say to it, and no TLS close
        to wait for (a close keeps its TLS objects until the client acknowledges it)."""
        self._cancel_deadline()
        if not self.closing:
            self.transport.abort()

    def _cancel_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _arm_deadline(self) -> None:
        self._cancel_deadline()
        self._deadline = self.loop.call_later(self.limits.request_timeout, self._expired)

    def _expired(self) -> None:
        self._deadline = None
        if self.closing or self.refused:
            return
        if not self.sent_any:
            self.registry.count("silent")
            self.close()  # connected and never said anything: nothing to answer
            return
        if self.request_started is None:
            return
        self.registry.count("slow")
        if self.cycle is not None and self.cycle.response_started:
            self.close()  # answered already while its body still trickles in
        else:
            self.refuse(408, "request not received in time\n")

    def refuse(self, status: int, text: str, headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
        """Answer without the app and close: the limits' own replies."""
        self.refused = True
        self._cancel_deadline()
        if self.closing:
            return
        self.registry.counters.answered(self._route(), status)
        self.registry.renew_date(self.server_state, self.config)
        body = text.encode()
        content = [STATUS_LINE[status]]
        for name, value in (*self.server_state.default_headers, *headers):
            content.extend([name, b": ", value, b"\r\n"])
        content.extend(
            [
                b"content-type: text/plain; charset=utf-8\r\n",
                b"content-length: " + str(len(body)).encode() + b"\r\n",
                b"connection: close\r\n\r\n",
                body,
            ]
        )
        self.transport.write(b"".join(content))
        self.transport.close()

    def _route(self) -> str:
        """The route of the request being refused, when its target has arrived whole (the
        parser has moved on to the headers)."""
        if not (self.headers_done or self.header_bytes > len(self.url)):
            return OTHER
        try:
            return route_of(httptools.parse_url(self.url).path)
        except httptools.HttpParserInvalidURLError:
            return OTHER

    def send_400_response(self, msg: str) -> None:
        self.registry.counters.answered(OTHER, 400)  # a request uvicorn could not parse
        self.registry.renew_date(self.server_state, self.config)
        super().send_400_response(msg)

    # -- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.registry.admit(self)
        self._arm_deadline()  # a first request must arrive within the deadline too

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_deadline()
        self.registry.remove(self)
        if self.transport is None:
            return  # lost in its TLS handshake (serve/handshake.py): never made, nothing to end
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.refused or self.closing:
            return  # answered and closing: whatever else arrives is dropped unread
        self.sent_any = True
        super().data_received(data)
        if self.refused or self.closing:
            return
        if self.request_started is not None and self._deadline is None:
            # A request still incomplete after this read: the rest within the deadline. One
            # that arrived whole in one read (most) never needs the timer.
            self._arm_deadline()
        # A header section still incomplete after this read: what the parser holds of it
        # unparsed (a header line not yet ended) counts too, so one endless line is refused.
        if not self.headers_done and self.request_started is not None:
            self.pending_bytes += len(data)
            if self.pending_bytes > self.limits.max_header_bytes:
                self.registry.count("oversized")
                self.refuse(431, "request header section too large\n")

    # -- httptools callbacks ----------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.registry.renew_date(self.server_state, self.config)
        self.request_started = time.monotonic()
        self.header_bytes = 0  # parsed: the request line's target and each header
        self.pending_bytes = 0  # read while the section was incomplete
        self.header_count = 0
        self.too_many_headers = False
        self.body_bytes = 0
        self.headers_done = False
        # The whole request, headers and body, within the deadline: armed by data_received
        # once this read has been parsed, if the request is not complete by then.

    def on_url(self, url: bytes) -> None:
        if self.refused:
            return
        # Kept before it is judged: a target refused in its middle (its part past the bound
        # in a later read) is then not whole, and its refusal is labelled `other`, never the
        # route its first part spells (`_route`).
        super().on_url(url)
        self._within_header_bound(len(url))

    def _within_header_bound(self, parsed: int) -> bool:
        """Counts parsed header-section bytes as the parser hands them over: the bound holds
        whatever the reads were (a section that arrived in one read, or ended one, is never
        counted by data_received); refuses the request past it."""
        self.header_bytes += parsed
        if self.header_bytes <= self.limits.max_header_bytes:
            return True
        self.registry.count("oversized")
        self.refuse(431, "request header section too large\n")
        return False

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.refused:
            return
        # name, ": ", value, CRLF: the bytes the header took on the wire, give or take spaces
        if not self._within_header_bound(len(name) + len(value) + 4):
            return
        self.header_count += 1
        if self.header_count > self.limits.max_headers:
            self.too_many_headers = True  # counted, not kept
            return
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        if self.refused:
            return
        self.headers_done = True
        if self.too_many_headers:
            self.registry.count("too_many_headers")
            self.refuse(431, "too many request header fields\n")
            return
        if self._body_too_large(self._declared_length()):
            return
        if self.parser.get_method() == b"CONNECT":
            self.refuse(405, "method not allowed\n", ((b"allow", b"GET, HEAD"),))
            return
        if self.probes_only:
            try:
                path = httptools.parse_url(self.url).path
            except httptools.HttpParserInvalidURLError:
                path = b""
            if path.decode("ascii", "replace") not in PROBES:
                self.registry.count("connections")
                self.refuse(503, "server busy: too many connections\n", ((b"retry-after", b"1"),))
                return
        if len(self.pipeline) >= MAX_PIPELINED:
            # A client that sends request after request without reading the answers: the
            # queue is bounded, and so is what a connection may hold. Aborted, not closed: a
            # close would wait for the client to read the answers already written.
            self.registry.count("pipelined")
            self.refused = True
            self._cancel_deadline()
            self.transport.abort()
            return
        if self._take_fast():
            return
        super().on_headers_complete()

    def _take_fast(self) -> bool:
        """Whether this request is the fast path's: a GET of one of its paths, on a connection
        with nothing still being answered (else the app's queue keeps the order)."""
        routes = self.routes
        if routes is None or self.parser.get_method() != b"GET" or self.pipeline:
            return False
        if self.flow.write_paused:
            # The client is not reading what it was sent: the app's path waits for the
            # transport to drain (and queues, bounded, what comes after) where the fast path
            # would write another answer into a buffer nobody empties.
            return False
        if self.cycle is not None and not self.cycle.response_complete:
            return False
        if self.parser.should_upgrade():
            return False
        try:
            path = httptools.parse_url(self.url).path
        except httptools.HttpParserInvalidURLError:
            return False
        if path not in routes.paths:
            return False
        accept = next((v for n, v in self.headers if n == b"accept-encoding"), None)
        keep_alive = self.parser.get_http_version() != "1.0" and self.parser.should_keep_alive()
        self._fast = (path, accept, keep_alive)
        return True

    def _answer_fast(self, path: bytes, accept: bytes | None, keep_alive: bool) -> None:
        assert self.routes is not None
        try:
            answer = self.routes.fast(path, accept)
        except Exception:
            log.exception("answering %s failed", path.decode("ascii", "replace"))
            answer = Answer(500, ((b"content-type", b"text/plain; charset=utf-8"),), b"error\n")
            keep_alive = False
        self.registry.counters.answered(route_of(path), answer.status)
        head = self._head(answer, keep_alive)
        if len(answer.body) <= JOIN_BELOW:
            # One write, one TLS record: the head alone would be an encryption and a send of
            # its own (12% of a gzip scrape's CPU, measured per request in alternated runs).
            self.transport.write(head + answer.body)
        else:
            self.transport.writelines([head, answer.body])  # a large body is not copied
        if not keep_alive:
            self.transport.close()
        self.on_response_complete()

    def _head(self, answer: Answer, keep_alive: bool) -> bytes:
        """Status line and headers: the same few answers each second (uvicorn renews its date
        header once a second), so each is joined once and kept until the date changes."""
        defaults = self.server_state.default_headers
        heads = self.registry.heads
        if self.registry.heads_with is not defaults:
            heads.clear()
            self.registry.heads_with = defaults
        key = (answer.status, answer.headers, len(answer.body), keep_alive)
        head = heads.get(key)
        if head is None:
            content = [STATUS_LINE[answer.status]]
            for name, value in (*defaults, *answer.headers):
                content.extend([name, b": ", value, b"\r\n"])
            content.append(b"content-length: %d\r\n" % len(answer.body))
            if not keep_alive:
                content.append(b"connection: close\r\n")
            content.append(b"\r\n")
            head = heads[key] = b"".join(content)
        return head

    def _unsupported_upgrade_warning(self) -> None:
        if not self.refused:  # CONNECT was answered already; nothing to warn about
            super()._unsupported_upgrade_warning()

    def _declared_length(self) -> int:
        """The request's Content-Length (0 without one; a chunked body is counted as it
        comes, in on_body)."""
        for name, value in self.headers:
            if name == b"content-length":
                try:
                    return int(value)
                except ValueError:
                    return 0  # httptools refuses a malformed one before this
        return 0

    def _body_too_large(self, size: int) -> bool:
        """Past `max_body_bytes`: 413 and the connection closed now, the rest never read (8
        clients sending 1 GiB each cost 9.9 CPU-seconds when the body was drained)."""
        if size <= self.limits.max_body_bytes:
            return False
        self.registry.count("body")
        self.refuse(413, "request body too large: no route takes a body\n")
        return True

    def on_body(self, body: bytes) -> None:
        if self.refused:
            return
        self.body_bytes += len(body)
        if self._body_too_large(self.body_bytes):
            return
        if self.refused or self._fast is not None or self.cycle is None:
            return  # a GET's body means nothing to the fast path: dropped
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._cancel_deadline()
        self.request_started = None
        fast, self._fast = self._fast, None
        if self.refused:
            return
        if fast is not None:
            self._answer_fast(*fast)
            return
        if self.cycle is None:
            return
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self.idle_since = time.monotonic()
        # A connection let in at the cap gets one request; it is closed after it.
        if self.probes_only and not self.closing:
            self.close()


def protocol_for(
    limits: Limits, routes: FastRoutes | None = None, counters: HttpCounters | None = None
) -> tuple[type[BoundedHttpProtocol], Connections]:
    """A protocol class bound to a fresh registry (counting into `counters`, or counters of its
    own) and the fast routes, for uvicorn.Config(http=...)."""
    registry = Connections(limits, counters=counters or HttpCounters())
    cls = type(
        "AgentHttpProtocol", (BoundedHttpProtocol,), {"registry": registry, "routes": routes}
    )
    return cls, registry


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(None)
        trim: Callable[[int], int] = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim): nothing to ask
        return None
    return trim


_MALLOC_TRIM = _malloc_trim()


def give_back_freed_memory() -> None:
    """glibc's `malloc_trim(0)`: free pages anywhere in the heap go back to the system (a few
    milliseconds, measured with 2,000 connections' worth freed)."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


# -- the event loop: a TLS handshake deadline -----------------------------------------------------


def _with_handshake_deadline(
    create_server: Callable[..., Coroutine[Any, Any, asyncio.Server]],
) -> Callable[..., Coroutine[Any, Any, asyncio.Server]]:
    async def create(
        factory: Callable[[], asyncio.Protocol], *args: Any, **kwargs: Any
    ) -> asyncio.Server:
        context = kwargs.pop("ssl", None)
        if context is not None:
            # TLS per connection by its gate, so a connection counts from its accept on.
            factory = gated(factory, context, HANDSHAKE_TIMEOUT, TLS_SHUTDOWN_TIMEOUT)
        return await create_server(factory, *args, **kwargs)

    return create


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop (or asyncio) whose TLS listeners drop a client that has not finished its handshake
    in HANDSHAKE_TIMEOUT seconds. uvicorn creates its listener without that argument, so the
    loop supplies it: `uvicorn.Config(loop="devicemanager.serve.http:new_event_loop")`."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a Linux dependency of ours
        loop: asyncio.AbstractEventLoop = asyncio.new_event_loop()
    else:
        loop = uvloop.new_event_loop()
    loop.create_server = _with_handshake_deadline(loop.create_server)  # type: ignore[method-assign]
    return loop
