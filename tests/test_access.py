"""Route-level access control (R-X4, issue 10) on the real agent: bearer tokens reviewed by the
local API server with TokenReview and SubjectAccessReview, as the kubelet and kube-rbac-proxy
delegate them; cached briefly, failing closed, the probes open.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from devicemanager.kube.client import KubeClient, KubeError
from devicemanager.serve.access import TOKEN_REVIEWS, Reviewer, Verdict
from tests.conftest import NODES, REPO, Agent, agent_env
from tests.kube_server import FakeApiServer

pytestmark = pytest.mark.timeout(90)

H100 = str(NODES / "h100-8gpu-mixed")
PROMETHEUS = "system:serviceaccount:monitoring:prometheus-k8s"
WORKER = "system:serviceaccount:gpustack-system:gpustack-worker"


@pytest.fixture
def api(tmp_path: Path) -> Iterator[FakeApiServer]:
    server = FakeApiServer(tmp_path).start()
    server.identities = {
        "prometheus-token": {
            "username": PROMETHEUS,
            "uid": "7f0c",
            "groups": ["system:serviceaccounts", "system:authenticated"],
        },
        "worker-token": {"username": WORKER, "groups": ["gpustack:readers"]},
        "tenant-token": {"username": "alice", "groups": ["system:authenticated"]},
    }
    server.allowed = {
        (PROMETHEUS, "/metrics"),
        ("group:gpustack:readers", "/monitor/snapshot"),
        ("group:gpustack:readers", "/metrics"),
    }
    yield server
    server.stop()


@pytest.fixture
def guarded(api: FakeApiServer, tmp_path: Path, launch) -> Agent:  # type: ignore[no-untyped-def]
    agent: Agent = launch(
        "--replay",
        H100,
        "--monitor-period",
        "0.5",
        "--kubeconfig",
        str(api.kubeconfig(tmp_path / "kubeconfig")),
        "--access-control",
        "kubernetes",
        "--access-review-ttl",
        "1.5",
    )
    agent.wait_for("/readyz", 200)
    return agent


def get(agent: Agent, path: str, token: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with agent.client() as client:
        return client.get(path, headers=headers)


def test_tokens_are_reviewed_and_only_the_allowed_read(api: FakeApiServer, guarded: Agent) -> None:
    missing = get(guarded, "/metrics")
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"] == 'Bearer realm="devicemanager"'
    assert get(guarded, "/metrics", "not-a-token").status_code == 401
    assert get(guarded, "/metrics", "tenant-token").status_code == 403  # authenticated, no RBAC
    ok = get(guarded, "/metrics", "prometheus-token")
    assert ok.status_code == 200 and "gpustack_accelerator_info" in ok.text
    # Prometheus may scrape, not read every tenant's pods from the snapshot.
    assert get(guarded, "/monitor/snapshot", "prometheus-token").status_code == 403
    assert get(guarded, "/monitor/snapshot", "worker-token").json()["node"] == "gpu-h100-07"
    # The reviews the API server received: the token, then the user as a non-resource URL.
    access = [spec for kind, spec in api.reviews if kind == "subjectaccessreview"]
    prometheus = next(s for s in access if s["user"] == PROMETHEUS)
    assert prometheus["nonResourceAttributes"] == {"path": "/metrics", "verb": "get"}
    assert prometheus["groups"] == ["system:serviceaccounts", "system:authenticated"]
    assert prometheus["uid"] == "7f0c"
    assert {s["token"] for kind, s in api.reviews if kind == "tokenreview"} >= {
        "prometheus-token",
        "not-a-token",
    }


def test_probes_stay_open_and_other_methods_are_still_405(guarded: Agent) -> None:
    assert get(guarded, "/readyz").status_code == 200
    assert get(guarded, "/livez").status_code == 200
    with guarded.client() as client:
        response = client.post("/metrics")
    assert response.status_code == 405 and response.headers["allow"] == "GET, HEAD"


def test_verdicts_are_cached_for_the_ttl_then_reviewed_again(
    api: FakeApiServer, guarded: Agent
) -> None:
    for _ in range(10):
        assert get(guarded, "/metrics", "prometheus-token").status_code == 200
        assert get(guarded, "/metrics", "tenant-token").status_code == 403
    assert api.count("tokenreview") == 2  # one per token, not one per request
    time.sleep(1.7)  # past --access-review-ttl
    assert get(guarded, "/metrics", "prometheus-token").status_code == 200
    assert api.count("tokenreview") == 3
    # Revoked in RBAC: refused once the cached verdict has expired.
    api.allowed.discard((PROMETHEUS, "/metrics"))
    time.sleep(1.7)
    assert get(guarded, "/metrics", "prometheus-token").status_code == 403


def test_an_api_server_that_cannot_answer_fails_closed_and_is_not_cached(
    api: FakeApiServer, guarded: Agent
) -> None:
    api.failures["tokenreview"] = [500, 503]
    assert get(guarded, "/metrics", "prometheus-token").status_code == 503
    assert get(guarded, "/metrics", "prometheus-token").status_code == 503
    assert get(guarded, "/metrics", "prometheus-token").status_code == 200  # no failure cached
    api.delays["subjectaccessreview"] = 8.0  # past the 5 s review deadline
    started = time.monotonic()
    assert get(guarded, "/metrics", "worker-token").status_code == 503
    assert time.monotonic() - started < 7.5
    assert get(guarded, "/readyz").status_code == 200  # probes never wait on a review
    assert "access review failed" in guarded.logs()


def test_probes_are_answered_while_every_connection_is_busy(
    api: FakeApiServer, tmp_path: Path, launch
) -> None:  # type: ignore[no-untyped-def]
    agent: Agent = launch(
        "--replay",
        H100,
        "--monitor-period",
        "0.5",
        "--kubeconfig",
        str(api.kubeconfig(tmp_path / "kubeconfig")),
        "--access-control",
        "kubernetes",
        "--http-max-connections",
        "3",
    )
    agent.wait_for("/readyz", 200)
    api.delays["tokenreview"] = 3.0  # three requests wait on a slow review: every slot busy
    # Each of the three is a TLS connection whose handshake completed and whose request was
    # sent before the next starts, here on this thread: the three slots are taken for certain,
    # however slowly threads would be scheduled on a loaded machine.
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    request = b"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer worker-token\r\n\r\n"
    waiting = []
    for _ in range(3):
        raw = socket.create_connection(("127.0.0.1", agent.port), timeout=10)
        conn = context.wrap_socket(raw, server_hostname="localhost")
        conn.sendall(request)
        waiting.append(conn)
    try:
        time.sleep(0.3)  # the last request read by the agent, its review asked
        # Past the cap with nothing idle to close: a probe is still answered, anything else 503.
        assert get(agent, "/livez").status_code == 200
        assert get(agent, "/readyz").status_code == 200
        busy = get(agent, "/metrics", "worker-token")
        assert busy.status_code == 503 and busy.headers["retry-after"] == "1"
        results = [conn.recv(64).split(b"\r\n", 1)[0] for conn in waiting]
    finally:
        for conn in waiting:
            conn.close()
    assert results == [b"HTTP/1.1 200 OK"] * 3


def test_access_control_without_a_cluster_refuses_to_start(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "devicemanager", "serve", "--replay", H100],
        capture_output=True,
        text=True,
        env=agent_env({"DEVICEMANAGER_ACCESS_CONTROL": "kubernetes"}),
        cwd=REPO,
        timeout=30,
        check=False,
    )
    assert out.returncode != 0
    assert "--access-control=kubernetes needs the API server" in out.stderr


class HangingApiServer:
    """A stand-in for the agent's KubeClient whose TokenReviews of every token but `scraper`
    hang, past the review's deadline, and then fail, as an API server that stopped answering."""

    def __init__(self) -> None:
        self.tokens: list[str] = []
        self.hang = threading.Event()  # never set: a hanging review waits out its timeout

    def create(self, path: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        if path == TOKEN_REVIEWS:
            token = body["spec"]["token"]
            self.tokens.append(token)
            if token != "scraper":
                self.hang.wait(timeout * 3)
                raise KubeError("timed out")
            return {"status": {"authenticated": True, "user": {"username": PROMETHEUS}}}
        return {"status": {"allowed": True}}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def reviewer_over(
    client: HangingApiServer, clock: Clock, refusals: list[str], **bounds: Any
) -> Reviewer:
    settings: dict[str, Any] = {"timeout": 0.5, "concurrency": 2, **bounds}
    return Reviewer(
        cast(KubeClient, client), ttl=30.0, refused=refusals.append, clock=clock, **settings
    )


def test_a_flood_of_new_tokens_costs_bounded_reviews_and_never_holds_the_scraper() -> None:
    """(R-X4, issue 30) Against an API server that hangs: 100 requests with 100 new tokens start
    only the bucket's 4 TokenReviews, the other 96 are refused at once (503, counted `reviews`);
    the 4 end at their deadline; the scraper's cached verdict is answered meanwhile without a
    wait, and its expired verdict is renewed in the known lane the strangers cannot fill."""
    client, clock, refusals = HangingApiServer(), Clock(), []
    # a bucket of 5: the scraper's first review is a new token's too, the flood gets 4
    reviewer = reviewer_over(client, clock, refusals, new_per_second=1.0, new_burst=5)

    async def scenario() -> tuple[list[Verdict], Verdict, Verdict, float]:
        assert (await reviewer.check("scraper", "/metrics")).status == 200
        flood = [asyncio.create_task(reviewer.check(f"random-{i}", "/metrics")) for i in range(100)]
        await asyncio.sleep(0.05)  # the flood is in: two reviews hang, two wait their turn
        started = time.monotonic()
        cached = await reviewer.check("scraper", "/metrics")
        clock.now = 31.0  # the scraper's verdict expires: renewed while the new lane is full
        renewed = await reviewer.check("scraper", "/metrics")
        waited = time.monotonic() - started
        return await asyncio.gather(*flood), cached, renewed, waited

    flood, cached, renewed, waited = asyncio.run(scenario())
    assert cached.status == 200 and renewed.status == 200
    assert waited < 0.4  # less than one hanging review's deadline: it never queued behind one
    assert client.tokens.count("scraper") == 2
    strangers = [t for t in client.tokens if t != "scraper"]
    assert len(strangers) <= 4
    assert refusals == ["reviews"] * 96
    busy = [v for v in flood if v.reason == "too many access reviews"]
    assert len(busy) == 96 and all(v.status == 503 for v in flood)
    assert len([v for v in flood if v.reason == "access review past its deadline"]) >= 2


def test_reviews_waiting_or_running_for_new_tokens_are_bounded() -> None:
    """(R-X4, issue 30) However fast the bucket refills, no more than `max_waiting` reviews of
    new tokens wait or run at once; the rest are 503 at once, and each waiting one ends at its
    deadline rather than waiting for a turn indefinitely."""
    client, clock, refusals = HangingApiServer(), Clock(), []
    reviewer = reviewer_over(client, clock, refusals, max_waiting=8, new_burst=1000)

    async def scenario() -> tuple[list[Verdict], float]:
        started = time.monotonic()
        verdicts = await asyncio.gather(
            *(reviewer.check(f"random-{i}", "/metrics") for i in range(50))
        )
        return verdicts, time.monotonic() - started

    verdicts, took = asyncio.run(scenario())
    assert refusals == ["reviews"] * 42
    assert len(client.tokens) <= 8
    late = [v for v in verdicts if v.reason == "access review past its deadline"]
    assert len(late) == 8
    assert took < 2.0  # the 8 end at the 0.5 s deadline, the 6 waiting for a turn included


def test_a_token_flood_against_the_real_agent_leaves_prometheus_scraping(
    api: FakeApiServer, guarded: Agent
) -> None:
    """(R-X4, issue 30) The real agent with a slow API server: 40 clients each sending a new
    token cannot hold up Prometheus's scrape, cost the API server at most the bucket's reviews,
    and show in `gpustack_device_manager_http_refused_total{reason="reviews"}`."""
    assert get(guarded, "/metrics", "prometheus-token").status_code == 200
    before = api.count("tokenreview")
    api.delays["tokenreview"] = 3.0
    answers: list[httpx.Response] = []
    flood = [
        threading.Thread(target=lambda i=i: answers.append(get(guarded, "/metrics", f"x{i}")))
        for i in range(40)
    ]
    started = time.monotonic()
    for thread in flood:
        thread.start()
    time.sleep(0.3)
    scrape = get(guarded, "/metrics", "prometheus-token")  # cached within the 1.5 s TTL
    for thread in flood:
        thread.join(15)
    elapsed = time.monotonic() - started
    assert scrape.status_code == 200
    # reviewed (the API server says 401 within the deadline), past the deadline waiting for a
    # turn, or refused at once: nothing else
    codes = [a.status_code for a in answers]
    assert set(codes) <= {401, 503} and len(codes) == 40
    reviewed = api.count("tokenreview") - before
    assert reviewed <= 20 + 10 * elapsed + 1
    assert codes.count(401) <= reviewed
    busy = sum(a.text == "too many access reviews\n" for a in answers)
    late = sum(a.text == "access review past its deadline\n" for a in answers)
    assert busy + late + codes.count(401) == 40
    api.delays.clear()

    def refused() -> float:
        text = get(guarded, "/metrics", "prometheus-token").text
        return next(
            s.value
            for f in text_string_to_metric_families(text)
            if f.name == "gpustack_device_manager_http_refused"
            for s in f.samples
            if s.labels.get("reason") == "reviews"
        )

    deadline = time.monotonic() + 10  # counted at the next round's end (period 0.5 s)
    while refused() < busy and time.monotonic() < deadline:
        time.sleep(0.2)
    assert refused() == busy > 0
