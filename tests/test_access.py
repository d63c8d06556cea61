"""Route-level access control (R-X4, issue 10) on the real agent: bearer tokens reviewed by the
local API server with TokenReview and SubjectAccessReview, as the kubelet and kube-rbac-proxy
delegate them; cached briefly, failing closed, the probes open.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

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
    results: list[int] = []
    waiting = [
        threading.Thread(
            target=lambda: results.append(get(agent, "/metrics", "worker-token").status_code)
        )
        for _ in range(3)
    ]
    for thread in waiting:
        thread.start()
    time.sleep(1.0)
    try:
        # Past the cap with nothing idle to close: a probe is still answered, anything else 503.
        assert get(agent, "/livez").status_code == 200
        assert get(agent, "/readyz").status_code == 200
        busy = get(agent, "/metrics", "worker-token")
        assert busy.status_code == 503 and busy.headers["retry-after"] == "1"
    finally:
        for thread in waiting:
            thread.join(10)
    assert results == [200, 200, 200]


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
