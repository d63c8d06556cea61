"""The HTTP surface: routes and probe semantics. Handlers only read what the monitor published.

No handler performs I/O or computes a figure (R-E1): /metrics hands out bytes rendered when
the round ended, already gzip-compressed for scrapers that ask for it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from devicemanager.exposition import CONTENT_TYPE
from devicemanager.monitor import Published

ALL_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


class Source(Protocol):
    """What the server reads: the monitor, or anything that behaves like it in a test."""

    @property
    def current(self) -> Published: ...

    def fresh(self, published: Published | None = None) -> bool: ...

    def liveness(self) -> tuple[bool, str]: ...

    def readiness(self) -> tuple[bool, str]: ...


Handler = Callable[[Request], Awaitable[Response]]


def get_only(handler: Handler) -> Handler:
    # The contract is "non-GET: 405 with Allow: GET" (R-S3), HEAD included; starlette's
    # own method check would also admit HEAD and list it in Allow.
    async def endpoint(request: Request) -> Response:
        if request.method != "GET":
            return PlainTextResponse(
                "method not allowed\n", status_code=405, headers={"Allow": "GET"}
            )
        return await handler(request)

    return endpoint


def _accepts_gzip(request: Request) -> bool:
    for part in request.headers.get("accept-encoding", "").split(","):
        coding, _, params = part.strip().partition(";")
        if coding.strip().lower() in ("gzip", "*") and params.replace(" ", "") != "q=0":
            return True
    return False


def create_app(source: Source) -> Starlette:
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

    routes = [
        Route("/monitor/snapshot", get_only(snapshot), methods=ALL_METHODS),
        Route("/metrics", get_only(metrics), methods=ALL_METHODS),
        Route("/readyz", get_only(probe(source.readiness)), methods=ALL_METHODS),
        Route("/livez", get_only(probe(source.liveness)), methods=ALL_METHODS),
    ]
    return Starlette(routes=routes)
