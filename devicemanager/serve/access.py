"""Route-level access control (R-X4): who may read `/metrics` and `/monitor/snapshot`.

A NetworkPolicy guards a port, not a route, and the snapshot names every tenant's pods on the
node. With `--access-control=kubernetes` a request to those routes must carry a bearer token;
the agent asks the API server who it is (TokenReview) and whether that user may `get` the path
as a non-resource URL (SubjectAccessReview), the way the kubelet and kube-rbac-proxy delegate
authentication and authorization. RBAC then says who may read:

    rules: [{nonResourceURLs: ["/metrics"], verbs: ["get"]}]

Verdicts are cached per token and path for `ttl` seconds (allowed and denied alike; the token
itself is never stored, only its SHA-256), concurrent requests with one token share one review,
and at most `concurrency` reviews run at a time. Failing closed: a missing or unknown token is
401, a denied one 403, and a review that could not be made (API server unreachable, slow past
its deadline, an error) is 503 and is not cached. `/readyz` and `/livez` stay open: the kubelet
probes them without a token.

Bounded against a client with no valid token (issue 30): anyone can send a new random token
with every request, and each would cost the API server a TokenReview. So reviews run in two
lanes. A token whose last verdict here was "allowed" (a scraper renewing its expired verdict) is
reviewed in the known lane, which no stranger can enter; every other token waits in the new
lane, where at most `max_waiting` reviews wait or run and at most `new_per_second` start a
second (a bucket of `new_burst`); past either the request is 503 at once, without a review, and
counted (`gpustack_device_manager_http_refused_total{reason="reviews"}`). Every review, waiting
included, has a deadline (`timeout`): past it the request is 503 and the review, already bounded
by the client's own timeouts, finishes on its thread unwaited. A cached verdict is answered
without waiting on either lane, so a hanging API server never holds a valid scraper behind the
strangers.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
from starlette.types import ASGIApp, Receive, Scope, Send

if TYPE_CHECKING:
    from devicemanager.kube.client import KubeClient

log = logging.getLogger("devicemanager.serve.access")

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
MAX_TOKEN_CHARS = 16 * 1024


@dataclass(frozen=True, slots=True)
class Verdict:
    status: int  # 200 allowed, 401 unauthenticated, 403 denied, 503 review not possible
    reason: str
    user: str | None = None


UNAVAILABLE = Verdict(503, "access review unavailable")
LATE = Verdict(503, "access review past its deadline")
BUSY = Verdict(503, "too many access reviews")


class _Bucket:
    """Up to `burst` starts at once, refilled at `rate` a second."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float]) -> None:
        self.rate, self.burst, self._clock = rate, float(burst), clock
        self._tokens, self._at = float(burst), clock()

    def take(self) -> bool:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True


@dataclass(frozen=True, slots=True)
class _User:
    name: str
    uid: str | None
    groups: tuple[str, ...]
    extra: dict[str, list[str]]


class Reviewer:
    """TokenReview and SubjectAccessReview through `client`, with a short-lived cache."""

    def __init__(
        self,
        client: KubeClient,
        ttl: float = 30.0,
        *,
        timeout: float = 5.0,
        concurrency: int = 4,
        max_entries: int = 4096,
        max_waiting: int = 32,
        new_per_second: float = 10.0,
        new_burst: int = 20,
        refused: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # The API server's client module, loaded where access control starts: a reviewer
        # is made only when it is on, and the app imports this module either way.
        from devicemanager.kube.client import KubeError

        self.client, self.ttl, self.timeout = client, ttl, timeout
        self._failures: tuple[type[Exception], ...] = (KubeError, ValueError, TypeError)
        self.max_entries, self.max_waiting = max_entries, max_waiting
        self._clock = clock
        self._refused = refused
        self._known_lane = anyio.CapacityLimiter(concurrency)
        self._new_lane = anyio.CapacityLimiter(concurrency)
        self._new_waiting = 0  # reviews in the new lane, waiting or running
        self._starts = _Bucket(new_per_second, new_burst, clock)
        # (expiry, verdict), expired ones kept (LRU-bounded) to route their renewal
        self._verdicts: OrderedDict[tuple[bytes, str], tuple[float, Verdict]] = OrderedDict()
        self._inflight: dict[tuple[bytes, str], asyncio.Future[Verdict]] = {}
        self.reviews = 0  # reviews made (a TokenReview and its SubjectAccessReview count one)
        self._failing = False

    async def check(self, token: str, path: str) -> Verdict:
        key = (hashlib.sha256(token.encode()).digest(), path)
        hit = self._verdicts.get(key)
        if hit is not None and self._clock() < hit[0]:
            return hit[1]
        known = hit is not None and hit[1].status == 200
        flight = self._inflight.get(key)
        if flight is not None:
            return await asyncio.shield(flight)
        if not known and (self._new_waiting >= self.max_waiting or not self._starts.take()):
            if self._refused is not None:
                self._refused("reviews")
            return BUSY
        flight = asyncio.get_running_loop().create_future()
        self._inflight[key] = flight
        if not known:
            self._new_waiting += 1
        verdict = LATE  # unless the review answers within the deadline
        try:
            with anyio.move_on_after(self.timeout):
                verdict = await anyio.to_thread.run_sync(
                    self.review,
                    token,
                    path,
                    limiter=self._known_lane if known else self._new_lane,
                    abandon_on_cancel=True,
                )
        except BaseException:
            verdict = UNAVAILABLE
            raise
        finally:
            if not known:
                self._new_waiting -= 1
            self._inflight.pop(key, None)
            flight.set_result(verdict)
        if verdict.status != UNAVAILABLE.status:
            self._remember(key, verdict)
        return verdict

    def _remember(self, key: tuple[bytes, str], verdict: Verdict) -> None:
        self._verdicts[key] = (self._clock() + self.ttl, verdict)
        self._verdicts.move_to_end(key)
        while len(self._verdicts) > self.max_entries:
            self._verdicts.popitem(last=False)

    def review(self, token: str, path: str) -> Verdict:
        """Blocking: who the token is, then whether they may GET `path`. Runs on a thread."""
        self.reviews += 1
        try:
            verdict = self._review(token, path)
        except self._failures as exc:
            if not self._failing:
                log.warning("access review failed; refusing (503)", extra={"error": str(exc)})
            self._failing = True
            return UNAVAILABLE
        if self._failing:
            log.info("access reviews answered again")
        self._failing = False
        return verdict

    def _review(self, token: str, path: str) -> Verdict:
        doc = self.client.create(
            TOKEN_REVIEWS,
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenReview",
                "spec": {"token": token},
            },
            timeout=self.timeout,
        )
        status = _status(doc)
        if status.get("authenticated") is not True:
            return Verdict(401, "unauthorized")
        user = _user(status.get("user"))
        spec: dict[str, Any] = {
            "user": user.name,
            "groups": list(user.groups),
            "nonResourceAttributes": {"path": path, "verb": "get"},
        }
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = user.extra
        doc = self.client.create(
            ACCESS_REVIEWS,
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": spec,
            },
            timeout=self.timeout,
        )
        status = _status(doc)
        if status.get("allowed") is True and status.get("denied") is not True:
            return Verdict(200, "allowed", user.name)
        return Verdict(403, "forbidden", user.name)


def _status(doc: Any) -> dict[str, Any]:
    status = doc.get("status") if isinstance(doc, dict) else None
    if not isinstance(status, dict):
        raise ValueError("the review came back without a status")
    return status


def _user(doc: Any) -> _User:
    if not isinstance(doc, dict) or not isinstance(doc.get("username"), str):
        raise ValueError("an authenticated TokenReview without a username")
    groups = doc.get("groups") or []
    extra = doc.get("extra") or {}
    return _User(
        doc["username"],
        doc.get("uid") if isinstance(doc.get("uid"), str) else None,
        tuple(g for g in groups if isinstance(g, str)) if isinstance(groups, list) else (),
        {
            str(k): [str(v) for v in values]
            for k, values in extra.items()
            if isinstance(values, list)
        }
        if isinstance(extra, dict)
        else {},
    )


def bearer(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, rest = value.decode("latin-1").strip().partition(" ")
            token: str = rest.strip()
            if scheme.lower() == "bearer" and token and len(token) <= MAX_TOKEN_CHARS:
                return token
            return None
    return None


async def _plain(send: Send, status: int, text: str, headers: list[tuple[bytes, bytes]]) -> None:
    body = text.encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


ALLOW = b"GET, HEAD"


class Guard:
    """In front of the routes: GET, and HEAD answered as GET without the body (R-S3), and, when
    a reviewer is given, a reviewed bearer token for every route but the open ones (probes)."""

    def __init__(
        self,
        app: ASGIApp,
        routes: Collection[str],
        reviewer: Reviewer | None = None,
        open_paths: Collection[str] = ("/readyz", "/livez"),
    ) -> None:
        self.app, self.routes = app, frozenset(routes)
        self.reviewer, self.open_paths = reviewer, frozenset(open_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or path not in self.routes:
            await self.app(scope, receive, send)
            return
        if scope["method"] not in ("GET", "HEAD"):
            # TRACE, OPTIONS and the rest alike: 405 with what is allowed. HEAD is reviewed like
            # the GET it stands for: its headers (the length) are the answer's too.
            await _plain(send, 405, "method not allowed\n", [(b"allow", ALLOW)])
            return
        if self.reviewer is not None and path not in self.open_paths:
            token = bearer(scope)
            if token is None:
                await _plain(
                    send,
                    401,
                    "unauthorized: a bearer token is required\n",
                    [(b"www-authenticate", b'Bearer realm="devicemanager"')],
                )
                return
            verdict = await self.reviewer.check(token, path)
            if verdict.status != 200:
                headers = [(b"retry-after", b"5")] if verdict.status == 503 else []
                if verdict.status == 401:
                    headers = [(b"www-authenticate", b'Bearer realm="devicemanager"')]
                await _plain(send, verdict.status, verdict.reason + "\n", headers)
                return
        await self.app(scope, receive, send)
