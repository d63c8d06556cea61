"""The HTTP surface: routes and probe semantics. Handlers only read what the monitor published.

No handler performs I/O or computes a figure (R-E1): /metrics and /monitor/snapshot hand out
bytes made when the round ended, already gzip-compressed for clients that ask for it. Every
answer is made by `Routes.answer`, whichever way the request came:

- the fast path (`Routes` as `serve.http.FastRoutes`): a GET of one of the four paths is
  answered by the connection's protocol the moment the request has arrived, without an ASGI
  task, a Starlette request or a middleware stack, which cost more than serving the bytes
  (bench/scrape.py: the gzip scrape, a 10 KB answer, is mostly that cost);
- the ASGI app below, for everything else: HEAD (the GET answer's head, without its body),
  other methods and paths, pipelined requests, and, when access control is on, the two guarded
  routes. In front of its routes, access.Guard answers every method but GET and HEAD with 405
  and `Allow: GET, HEAD`, and, when access control is on, reviews the bearer token of every
  request but the probes' and the landing page's (R-X4).

`/` is a landing page, as node_exporter's: the four endpoints' names as links, and nothing
else (no node, version or figure), so it is open like the probes.
"""

from __future__ import annotations

from typing import Protocol

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from devicemanager.figures.exposition import CONTENT_TYPE
from devicemanager.figures.published import Published
from devicemanager.serve.access import Guard, Reviewer
from devicemanager.serve.counters import HttpCounters, route_of
from devicemanager.serve.http import Answer

PATHS = ("/monitor/snapshot", "/metrics", "/readyz", "/livez")
PROBES = ("/readyz", "/livez")
LANDING = "/"
OPEN = (*PROBES, LANDING)  # answered without a token whatever --access-control says
LANDING_PAGE = (
    "<!DOCTYPE html>\n<html><head><title>devicemanager</title></head><body>\n"
    "<h1>devicemanager</h1>\n<ul>\n"
    + "".join(f'<li><a href="{p}">{p}</a></li>\n' for p in PATHS)
    + "</ul>\n</body></html>\n"
).encode()

_JSON = (b"content-type", b"application/json")
_TEXT = (b"content-type", b"text/plain; charset=utf-8")
_HTML = (b"content-type", b"text/html; charset=utf-8")
_METRICS = (b"content-type", CONTENT_TYPE.encode())
_VARY = (b"vary", b"Accept-Encoding")
_GZIP = (b"content-encoding", b"gzip")


class Source(Protocol):
    """What the server reads: the monitor, or anything that behaves like it in a test."""

    @property
    def current(self) -> Published: ...

    def fresh(self, published: Published | None = None) -> bool: ...

    def liveness(self) -> tuple[bool, str]: ...

    def readiness(self) -> tuple[bool, str]: ...


def accepts_gzip(accept_encoding: str | None) -> bool:
    """Whether an Accept-Encoding value admits gzip (`gzip`, or `*`, and not with q=0)."""
    for part in (accept_encoding or "").split(","):
        coding, _, params = part.strip().partition(";")
        if coding.strip().lower() in ("gzip", "*") and params.replace(" ", "") != "q=0":
            return True
    return False


class Routes:
    """The four GET routes' answers, from what `source` published last, and the landing page."""

    def __init__(self, source: Source, reviewer: Reviewer | None = None) -> None:
        self.source = source
        # With access control on, the guarded routes need the ASGI path (a review may wait on
        # the API server); the probes and the landing page stay open, and fast.
        self.paths = frozenset(p.encode() for p in (OPEN if reviewer else (*PATHS, LANDING)))

    def answer(self, path: str, gzip_ok: bool) -> Answer:
        if path == LANDING:
            return Answer(200, (_HTML,), LANDING_PAGE)
        if path == "/metrics":
            published = self.source.current
            # A round older than three periods publishes its verdict and no figures (R-E4).
            body = published.metrics if self.source.fresh(published) else published.stale_metrics
            if gzip_ok:
                return Answer(200, (_METRICS, _VARY, _GZIP), body.gzipped)
            return Answer(200, (_METRICS, _VARY), body.plain)
        if path == "/monitor/snapshot":
            published = self.source.current
            if gzip_ok:
                return Answer(200, (_JSON, _VARY, _GZIP), published.snapshot_gzipped)
            return Answer(200, (_JSON, _VARY), published.snapshot_json)
        check = self.source.readiness if path == "/readyz" else self.source.liveness
        ok, detail = check()
        return Answer(200 if ok else 503, (_TEXT,), (detail + "\n").encode())

    def fast(self, path: bytes, accept_encoding: bytes | None) -> Answer:
        """serve.http.FastRoutes: `path` is one of `paths`."""
        gzip_ok = accepts_gzip(accept_encoding.decode("latin-1")) if accept_encoding else False
        return self.answer(path.decode("ascii"), gzip_ok)


class Counted:
    """Counts each answer the ASGI app sends, by route and status (R-X8), outermost, so the
    Guard's 401, 403 and 405 count as well as the routes' answers."""

    def __init__(self, app: ASGIApp, counters: HttpCounters) -> None:
        self.app = app
        self.counters = counters

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route = route_of(scope.get("path"))

        async def counted(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.counters.answered(route, message["status"])
            await send(message)

        await self.app(scope, receive, counted)


def create_app(
    source: Source, reviewer: Reviewer | None = None, counters: HttpCounters | None = None
) -> Starlette:
    routes_ = Routes(source, reviewer)

    def route(path: str) -> Route:
        async def endpoint(request: Request) -> Response:
            answer = routes_.answer(path, accepts_gzip(request.headers.get("accept-encoding")))
            headers = {k.decode(): v.decode() for k, v in answer.headers}
            return Response(answer.body, status_code=answer.status, headers=headers)

        return Route(path, endpoint, methods=["GET"])  # and HEAD: starlette adds it

    # GET and HEAD (uvicorn sends a HEAD answer's head only); the Guard answers every other
    # method before routing (starlette's own check would list every method a route has).
    guard = Middleware(Guard, routes=(*PATHS, LANDING), reviewer=reviewer, open_paths=OPEN)
    counted = [Middleware(Counted, counters=counters)] if counters is not None else []
    return Starlette(routes=[route(p) for p in (*PATHS, LANDING)], middleware=[*counted, guard])
