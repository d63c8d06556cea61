"""The HTTP surface: routes and probe semantics. Handlers only read what the monitor published.

No handler performs I/O or computes a figure (R-E1): /metrics hands out bytes rendered when
the round ended, already gzip-compressed for scrapers that ask for it. In front of the routes,
access.Guard answers every method but GET with 405 and `Allow: GET`, and, when access control
is on, reviews the bearer token of every request but the probes' (R-X4).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from devicemanager.exposition import CONTENT_TYPE
from devicemanager.monitor import Published
from devicemanager.serve.access import Guard, Reviewer

PATHS = ("/monitor/snapshot", "/metrics", "/readyz", "/livez")


class Source(Protocol):
    """What the server reads: the monitor, or anything that behaves like it in a test."""

    @property
    def current(self) -> Published: ...

    def fresh(self, published: Published | None = None) -> bool: ...

    def liveness(self) -> tuple[bool, str]: ...

    def readiness(self) -> tuple[bool, str]: ...


Handler = Callable[[Request], Awaitable[Response]]


def _accepts_gzip(request: Request) -> bool:
    for part in request.headers.get("accept-encoding", "").split(","):
        coding, _, params = part.strip().partition(";")
        if coding.strip().lower() in ("gzip", "*") and params.replace(" ", "") != "q=0":
            return True
    return False


def create_app(source: Source, reviewer: Reviewer | None = None) -> Starlette:
    async def snapshot(request: Request) -> Response:
        return Response(source.current.snapshot_json, media_type="application/json")

    async def metrics(request: Request) -> Response:
        published = source.current
        # A round older than three periods publishes its verdict and no figures (R-E4).
        body = published.metrics if source.fresh(published) else published.stale_metrics
        headers = {"Content-Type": CONTENT_TYPE, "Vary": "Accept-Encoding"}
        if _accepts_gzip(request):
            headers["Content-Encoding"] = "gzip"
            return Response(body.gzipped, headers=headers)
        return Response(body.plain, headers=headers)

    def probe(check: Callable[[], tuple[bool, str]]) -> Handler:
        async def endpoint(request: Request) -> Response:
            ok, detail = check()
            return PlainTextResponse(detail + "\n", status_code=200 if ok else 503)

        return endpoint

    # GET only; the Guard answers every other method before routing (starlette's own check
    # would admit HEAD and list every method a route has in Allow).
    routes = [
        Route("/monitor/snapshot", snapshot, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/readyz", probe(source.readiness), methods=["GET"]),
        Route("/livez", probe(source.liveness), methods=["GET"]),
    ]
    assert {r.path for r in routes} == set(PATHS)
    guard = Middleware(Guard, routes=PATHS, reviewer=reviewer)
    return Starlette(routes=routes, middleware=[guard])
