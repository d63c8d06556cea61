"""What the HTTP server did, counted where it happens and read by the monitor once a round (R-X8).

The event loop's thread counts: an answer by route and status code, and each bound's refusal by
reason. A count is one dict increment, no lock and no rendering: the fast path pays a lookup
and an addition per request. The monitor thread copies both dicts when its round ends
(`snapshot`; a dict copy is one step under the interpreter lock) and renders them with the
round, so `/metrics` shows them as of that round's end, up to one period behind.

Labels are bounded: a route is one of the paths the agent serves or `other`, a code one the
agent answers with, a reason one of `REASONS`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# The paths the agent serves (serve/app.py's PATHS and its landing page); any other is "other".
ROUTES = ("/", "/monitor/snapshot", "/metrics", "/readyz", "/livez")
OTHER = "other"
_ROUTE_OF_BYTES = {p.encode(): p for p in ROUTES}
_ROUTE_OF = {p: p for p in ROUTES}

# Each bound of serve/http.py, and what it did (docs/metrics.md says the same).
REASONS: dict[str, str] = {
    "slow": "a request not whole within --http-request-timeout of its first byte (408)",
    "silent": "a connection that sent nothing within --http-request-timeout (closed)",
    "oversized": "a header section over --http-max-header-bytes (431)",
    "too_many_headers": "more header fields than --http-max-headers (431)",
    "body": "a request body over 64 KiB, which no route takes (413, closed, the rest unread)",
    "connections": "at --http-max-connections with every connection answering: a newcomer's "
    "request that is not a probe (503)",
    "shed_incomplete": "at --http-max-connections: the oldest incomplete request, to make "
    "room (503)",
    "shed_idle": "at --http-max-connections: the connection idle the longest, or one that "
    "finished its TLS handshake and never sent a byte, to make room "
    "(closed)",
    "handshakes": "at --http-max-connections: a connection that has sent nothing for 1 s, "
    "a TLS handshake stalled for 3 s, or, with neither, the newcomer (aborted)",
    "pipelined": "a connection with more than 32 requests queued behind the one being answered "
    "(aborted)",
    "reviews": "with --access-control=kubernetes, a token never allowed before while 32 reviews "
    "wait or 10 a second already started (503, no TokenReview made)",
}


def route_of(path: str | bytes | None) -> str:
    """A request's path as a bounded label: one of ROUTES, else `other`."""
    if isinstance(path, bytes):
        return _ROUTE_OF_BYTES.get(path, OTHER)
    return _ROUTE_OF.get(path or "", OTHER)


@dataclass
class HttpCounters:
    """Counts since the process started; written by the event loop, read by the monitor."""

    # (route, status code) -> answers sent
    requests: dict[tuple[str, int], int] = field(default_factory=dict)
    # reason -> refusals; every reason present from the start, so each series starts at 0
    refused: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REASONS, 0))

    def answered(self, route: str, status: int) -> None:
        key = (route, status)
        self.requests[key] = self.requests.get(key, 0) + 1

    def refuse(self, reason: str) -> None:
        self.refused[reason] += 1

    def snapshot(self) -> tuple[dict[tuple[str, int], int], dict[str, int]]:
        """Both counts as of now, copied (for the monitor's thread)."""
        return dict(self.requests), dict(self.refused)
