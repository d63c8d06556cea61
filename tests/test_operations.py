"""The command line as operators use it, against the real agent process (issue "The command line,
as operators use it"): signals, the pod's own token for `kubectl exec ... devicemanager
snapshot`, bounded inputs, start-up refusals with exit 2 and the flag named, logs that say a
lasting fault once and carry the same fields in text as in JSON, HEAD and the landing page.

Exit codes throughout: 0 ok, 2 usage, 3 cannot reach or read (docs/configuration.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from devicemanager.model import Card, Payload, ReadRequest, VendorReading
from devicemanager.serve.mint import self_signed
from tests.conftest import NODES, REPO, Agent, agent_env
from tests.fakes import StaticBackend
from tests.kube_server import FakeApiServer, summary_for
from tests.test_fast_path import _responses, _tls

pytestmark = pytest.mark.timeout(120)

H100 = str(NODES / "h100-8gpu-mixed")
PROMETHEUS = "system:serviceaccount:monitoring:prometheus-k8s"
WORKER = "system:serviceaccount:gpustack-system:gpustack-worker"
Launch = Callable[..., Agent]
BOUND_SECONDS = 10.0  # a refused input is said at once, not after reading gigabytes


def dm(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "devicemanager", *args],
        capture_output=True,
        text=True,
        env=agent_env(env),
        cwd=REPO,
        check=False,
        timeout=timeout,
    )


def one_line(result: subprocess.CompletedProcess[str], command: str) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"devicemanager {command}: "), line
    return line


def json_lines(agent: Agent) -> list[dict[str, Any]]:
    return [json.loads(line) for line in agent.logs().splitlines() if line.startswith("{")]


def wait_until(predicate: Any, timeout: float = 15.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


# -- signals (R-O6) -------------------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_closes_the_backends_and_exits_0(
    launch: Launch, tmp_path: Path, sig: int
) -> None:
    """(R-O6) The kubelet stops a pod with SIGTERM: a clean stop, every backend closed, exit 0,
    not a process killed by its signal (uvicorn re-raises it by default)."""
    marker = tmp_path / "closed"
    agent: Agent = launch(
        "--manufacturer",
        "tests.fakes:ClosingBackend",
        "--monitor-period",
        "0.2",
        env={"DM_TEST_CLOSE_MARKER": str(marker)},
    )
    agent.wait_for("/readyz", 200)
    os.kill(agent.proc.pid, sig)
    assert agent.proc.wait(15) == 0, agent.logs()
    assert marker.read_text() == "closed\n"  # the vendor library was shut down, once
    lines = json_lines(agent)
    assert any(line["msg"] == "stopped" and line["backends_closed"] is True for line in lines)
    (last,) = [line for line in lines if line["msg"].startswith("exiting after")]
    assert last["signal"] == signal.Signals(sig).name and last["exit_code"] == 0


def test_sighup_never_stops_the_agent_and_rereads_the_cert_dir(
    launch: Launch, tmp_path: Path
) -> None:
    """(R-O6, R-O1) SIGHUP, whose default is instant death without closing anything, is
    handled: the --cert-dir pair is read again at once, serving goes on, and SIGTERM after it
    still stops cleanly with exit 0."""
    certs = tmp_path / "certs"
    certs.mkdir()
    cert, key = self_signed(["first.example", "127.0.0.1"])
    (certs / "tls.crt").write_bytes(cert)
    (certs / "tls.key").write_bytes(key)
    marker = tmp_path / "closed"
    agent: Agent = launch(
        "--manufacturer",
        "tests.fakes:ClosingBackend",
        "--cert-dir",
        str(certs),
        "--monitor-period",
        "0.2",
        env={"DM_TEST_CLOSE_MARKER": str(marker)},
    )
    agent.wait_for("/readyz", 200)
    for _ in range(3):  # more than one: a handled signal stays handled
        os.kill(agent.proc.pid, signal.SIGHUP)
        time.sleep(0.3)
    wait_until(
        lambda: (
            sum(line["msg"] == "SIGHUP: certificates checked" for line in json_lines(agent)) == 3
        ),
        what="three SIGHUPs logged",
    )
    assert agent.proc.poll() is None  # alive
    agent.wait_for("/readyz", 200)
    assert not marker.exists()  # nothing was closed
    os.kill(agent.proc.pid, signal.SIGTERM)
    assert agent.proc.wait(15) == 0
    assert marker.read_text() == "closed\n"


def test_sighup_without_a_cert_dir_is_logged_and_ignored(launch: Launch) -> None:
    """(R-O6) Self-signed: there is nothing to reload; the line says so and the agent serves on."""
    agent: Agent = launch("--replay", H100, "--monitor-period", "0.3")
    agent.wait_for("/readyz", 200)
    os.kill(agent.proc.pid, signal.SIGHUP)
    wait_until(lambda: "SIGHUP: nothing to reload" in agent.logs(), what="SIGHUP logged")
    agent.wait_for("/readyz", 200)
    assert agent.proc.poll() is None


# -- nothing to do, nothing done (R-O1) ---------------------------------------------------------


def _voluntary_switches(pid: int) -> dict[str, int]:
    """Each thread's voluntary context switches so far: how many times it slept and woke."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            status = (task / "status").read_text()
            out[task.name] = int(re.search(r"voluntary_ctxt_switches:\s+(\d+)", status)[1])  # type: ignore[index]
    return out


def test_an_agent_with_nothing_to_do_does_not_wake(launch: Launch) -> None:
    """(R-O1) Between rounds, with no client, no thread of the agent wakes: no housekeeping
    tick in the server's main loop (uvicorn's woke ten times a second), no timer but the
    round's. Counted by the kernel: each thread's voluntary context switches over 1.5 s, the
    period an hour so that no round falls in the window."""
    agent: Agent = launch("--replay", H100, "--monitor-period", "3600")
    agent.wait_for("/readyz", 200)
    time.sleep(0.3)  # the probe's connection closed and forgotten
    before = _voluntary_switches(agent.proc.pid)
    time.sleep(1.5)
    after = _voluntary_switches(agent.proc.pid)
    woke = {tid: after[tid] - n for tid, n in before.items() if after.get(tid, n) != n}
    assert sum(woke.values()) <= 1, woke  # uvicorn's tick alone: 15 in the main thread
    assert agent.proc.poll() is None


def test_the_apps_answers_carry_this_seconds_date(launch: Launch) -> None:
    """(R-O1) With no tick to renew it, the Date header is still the current second's on
    what the app answers (a 404) as on the fast path, after the server slept for seconds."""
    import email.utils

    agent: Agent = launch("--replay", H100, "--monitor-period", "3600")
    agent.wait_for("/readyz", 200)
    with agent.client() as client:
        time.sleep(2.2)
        for path in ("/no-such-path", "/readyz"):
            answer = client.get(path)
            date = email.utils.parsedate_to_datetime(answer.headers["date"]).timestamp()
            assert abs(date - time.time()) < 1.5, (path, answer.headers["date"])
        assert answer.status_code == 200


# -- the pod's own token, for --access-control=kubernetes (R-X4) ----------------------------------


@pytest.fixture
def api(tmp_path: Path) -> Iterator[FakeApiServer]:
    server = FakeApiServer(tmp_path).start()
    server.identities = {
        "prometheus-token": {"username": PROMETHEUS, "groups": ["system:serviceaccounts"]},
        "worker-token": {"username": WORKER, "groups": ["gpustack:readers"]},
    }
    server.allowed = {
        (PROMETHEUS, "/metrics"),
        ("group:gpustack:readers", "/monitor/snapshot"),
        ("group:gpustack:readers", "/metrics"),
    }
    yield server
    server.stop()


def guarded_agent(launch: Launch, api: FakeApiServer, tmp_path: Path, *extra: str) -> Agent:
    agent: Agent = launch(
        "--replay",
        H100,
        "--monitor-period",
        "0.5",
        "--kubeconfig",
        str(api.kubeconfig(tmp_path / "kubeconfig")),
        "--access-control",
        "kubernetes",
        *extra,
    )
    agent.wait_for("/readyz", 200)
    return agent


def reviewed_tokens(api: FakeApiServer) -> list[str]:
    return [spec["token"] for kind, spec in api.reviews if kind == "tokenreview"]


def test_snapshot_and_metrics_send_the_pods_own_token(
    launch: Launch, api: FakeApiServer, tmp_path: Path
) -> None:
    """(R-X4) `kubectl exec <pod> -- devicemanager snapshot` under --access-control=kubernetes:
    the command sends the token of the service account the pod mounts, from where the agent's
    own reviewer reads it ($DEVICEMANAGER_SERVICE_ACCOUNT_DIR/token), and the agent accepts it."""
    agent = guarded_agent(launch, api, tmp_path)
    account = api.service_account(tmp_path / "serviceaccount", token="worker-token")
    env = {"DEVICEMANAGER_SERVICE_ACCOUNT_DIR": str(account)}
    snap = dm("snapshot", "--url", agent.url("/monitor/snapshot"), env=env)
    assert snap.returncode == 0, snap.stderr
    assert "node gpu-h100-07" in snap.stdout and "grants (" in snap.stdout  # /metrics read too
    metrics = dm("metrics", "--url", agent.url("/metrics"), env=env)
    assert metrics.returncode == 0, metrics.stderr
    assert "gpustack_accelerator_backend_up{" in metrics.stdout
    assert set(reviewed_tokens(api)) == {"worker-token"}  # the very token the pod mounts
    # Without a token the agent refuses, and the command says so in one line, exit 3.
    bare = dm("metrics", "--url", agent.url("/metrics"), "--token-file", "")
    assert bare.returncode == 3 and "answered 401" in one_line(bare, "metrics")
    nowhere = dm(
        "metrics",
        "--url",
        agent.url("/metrics"),
        env={"DEVICEMANAGER_SERVICE_ACCOUNT_DIR": str(tmp_path / "not-in-a-pod")},
    )
    assert nowhere.returncode == 3 and "answered 401" in one_line(nowhere, "metrics")


def test_token_file_names_another_token_and_a_bad_one_is_a_usage_error(
    launch: Launch, api: FakeApiServer, tmp_path: Path
) -> None:
    """(R-X4) --token-file sends that file's token; one that is missing, empty or huge is exit 2,
    named, before any request."""
    agent = guarded_agent(launch, api, tmp_path)
    token = tmp_path / "prometheus.token"
    token.write_text("prometheus-token\n")
    ok = dm("metrics", "--url", agent.url("/metrics"), "--token-file", str(token))
    assert ok.returncode == 0, ok.stderr
    assert reviewed_tokens(api) == ["prometheus-token"]
    denied = dm("snapshot", "--url", agent.url("/monitor/snapshot"), "--token-file", str(token))
    assert denied.returncode == 3 and "answered 403" in one_line(denied, "snapshot")
    empty = tmp_path / "empty.token"
    empty.write_text("\n")
    huge = tmp_path / "huge.token"
    with huge.open("wb") as f:
        f.truncate(1 << 30)  # a sparse GiB
    for bad, said in (
        (tmp_path / "missing", "No such file or directory"),
        (empty, "holds no bearer token"),
        (huge, "is larger than 16 KiB"),
        (Path("/dev/zero"), "is larger than 16 KiB"),
    ):
        started = time.monotonic()
        out = dm("metrics", "--url", agent.url("/metrics"), "--token-file", str(bad))
        assert time.monotonic() - started < BOUND_SECONDS
        assert out.returncode == 2, (bad, out.stderr)
        assert "--token-file" in one_line(out, "metrics") and said in out.stderr
    assert reviewed_tokens(api) == ["prometheus-token", "prometheus-token"]  # none was sent


def _own_address() -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # no packet is sent: the route picks the address
            address = str(s.getsockname()[0])
        except OSError:
            address = ""
    if not address or address.startswith("127."):
        pytest.skip("this machine has no address but loopback")
    return address


def test_the_pods_token_goes_only_to_an_agent_on_this_host(
    launch: Launch, api: FakeApiServer, tmp_path: Path
) -> None:
    """(R-X4) The agent's certificate is not verified by default, so the pod's own token is
    sent to a loopback address only; to an address elsewhere, only with --cacert or an explicit
    --token-file. Over plain http a token is never sent."""
    address = _own_address()
    agent = guarded_agent(launch, api, tmp_path, "--bind-address", "0.0.0.0")
    account = api.service_account(tmp_path / "serviceaccount", token="worker-token")
    env = {"DEVICEMANAGER_SERVICE_ACCOUNT_DIR": str(account)}
    away = f"https://{address}:{agent.port}/metrics"
    refused = dm("metrics", "--url", away, env=env)
    assert refused.returncode == 3 and "answered 401" in one_line(refused, "metrics")
    assert reviewed_tokens(api) == []
    given = dm("metrics", "--url", away, "--token-file", str(account / "token"))
    assert given.returncode == 0, given.stderr
    assert reviewed_tokens(api) == ["worker-token"]
    plain = dm(
        "metrics",
        "--url",
        f"http://127.0.0.1:{agent.port}/metrics",
        "--token-file",
        str(account / "token"),
    )
    assert plain.returncode == 2 and "https only" in one_line(plain, "metrics")


def test_instance_metrics_sends_the_token_to_the_agent(
    launch: Launch, api: FakeApiServer, tmp_path: Path
) -> None:
    """(R-X4, R-F7) instance-metrics reads the agent's snapshot with the token: the Instance's
    accelerators are there; without it the agent refuses and they are absent."""
    objects = json.loads((NODES / "h100-8gpu-mixed" / "pods.json").read_text())["items"]
    for obj in objects:
        api.add(obj)
    api.summaries["gpu-h100-07"] = summary_for(objects)
    agent = guarded_agent(launch, api, tmp_path)
    token = tmp_path / "worker.token"
    token.write_text("worker-token")
    args = (
        "instance-metrics",
        "gpustack-workloads",
        "llama-3-8b",
        "--kubeconfig",
        str(tmp_path / "kubeconfig"),
        "--snapshot-url",
        agent.url("/monitor/snapshot"),
    )
    with_token = dm(*args, "--token-file", str(token))
    assert with_token.returncode == 0, with_token.stderr
    accelerators = json.loads(with_token.stdout)["sample"]["accelerators"]
    assert accelerators and accelerators[0]["mode"] == "Sliced"
    assert "worker-token" in reviewed_tokens(api)
    without = dm(*args, "--token-file", "")
    assert without.returncode == 0, without.stderr
    assert "accelerators" not in json.loads(without.stdout)["sample"]
    assert "401" in without.stderr  # the sampler's warning says why


# -- every input bounded (R-O4, R-A1) --------------------------------------------------------------


def sparse(path: Path, size: int) -> Path:
    with path.open("wb") as f:
        f.truncate(size)
    return path


def test_whois_reads_at_most_a_cgroup_file_and_a_podlist(tmp_path: Path) -> None:
    """(R-A1, R-O4) `whois --cgroup-file /dev/zero` grew until the OOM killer ended it: now it,
    a huge file, and a --pods of either, are exit 2 within seconds."""
    saved = tmp_path / "cgroup"
    saved.write_text("0::/\n")
    cases = (
        (("--cgroup-file", "/dev/zero"), "--cgroup-file: /dev/zero is larger than 64 KiB"),
        (("--cgroup-file", str(sparse(tmp_path / "big", 8 << 30))), "is larger than 64 KiB"),
        (("--cgroup-file", str(saved), "--pods", "/dev/zero"), "--pods: /dev/zero is larger"),
        (
            ("--cgroup-file", str(saved), "--pods", str(sparse(tmp_path / "pods", 8 << 30))),
            "is larger than 64 MiB",
        ),
    )
    for args, said in cases:
        started = time.monotonic()
        out = dm("whois", *args, timeout=BOUND_SECONDS * 3)
        assert time.monotonic() - started < BOUND_SECONDS, args
        assert out.returncode == 2, (args, out.stderr)
        assert said in one_line(out, "whois"), out.stderr


def test_a_cacert_or_kubeconfig_that_cannot_be_one_is_a_usage_error(tmp_path: Path) -> None:
    """(R-O4, R-X1) A --cacert with no certificate in it (junk, a key, a huge file) is exit 2
    for snapshot, metrics and summarize alike, before any connection; so is a huge
    --kubeconfig."""
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    _, key = self_signed(["127.0.0.1"])
    key_only = tmp_path / "key.pem"
    key_only.write_bytes(key)
    huge = sparse(tmp_path / "huge.pem", 4 << 30)
    for ca, said in (
        (junk, "holds no CA certificate"),
        (key_only, "holds no CA certificate"),
        (huge, "is larger than 1 MiB"),
        (Path("/dev/zero"), "is not a file"),
    ):
        for command in (
            ("snapshot", "--url", "https://127.0.0.1:1/"),
            ("metrics", "--url", "https://127.0.0.1:1/"),
            ("summarize", "https://127.0.0.1:1/metrics"),
        ):
            started = time.monotonic()
            out = dm(*command, "--cacert", str(ca))
            assert time.monotonic() - started < BOUND_SECONDS
            assert out.returncode == 2, (ca, command, out.stderr)
            line = one_line(out, command[0])
            assert "--cacert" in line and said in line, line
    config = sparse(tmp_path / "kubeconfig", 4 << 30)
    out = dm("instance-metrics", "ns", "x", "--kubeconfig", str(config))
    assert out.returncode == 2 and "is larger than 16 MiB" in one_line(out, "instance-metrics")


@pytest.fixture(scope="module")
def replay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    from tests.conftest import start_agent

    agent = start_agent(["--replay", H100, "--monitor-period", "1"], tmp_path_factory.mktemp("a"))
    try:
        agent.wait_for("/readyz", 200)
        yield agent
    finally:
        agent.proc.terminate()
        agent.proc.wait(10)


def test_a_url_that_answers_something_else_is_one_line_and_exit_3(replay: Agent) -> None:
    """(R-E1, R-S1) `metrics` pointed at the snapshot, or at a probe, and `snapshot` whose
    --metrics-url answers `ok`: one line saying what was answered, exit 3, nothing printed."""
    for path, kind in (
        ("/monitor/snapshot", "application/json"),
        ("/readyz", "text/plain"),
        ("/", "text/html"),
    ):
        out = dm("metrics", "--url", replay.url(path))
        assert out.returncode == 3 and out.stdout == ""
        line = one_line(out, "metrics")
        assert f"does not serve Prometheus text (it answered {kind}" in line
        assert "the agent serves it at /metrics" in line
    ok = dm(
        "snapshot", "--url", replay.url("/monitor/snapshot"), "--metrics-url", replay.url("/readyz")
    )
    assert ok.returncode == 3 and ok.stdout == ""
    assert "--metrics-url: " in one_line(ok, "snapshot") and "Prometheus text" in ok.stderr
    unreachable = dm(
        "snapshot",
        "--url",
        replay.url("/monitor/snapshot"),
        "--metrics-url",
        "https://127.0.0.1:1/metrics",
    )
    assert unreachable.returncode == 3 and "ConnectError" in one_line(unreachable, "snapshot")
    # The default beside --url still only costs the grants table when it cannot be reached.
    fine = dm("snapshot", "--url", replay.url("/monitor/snapshot"))
    assert fine.returncode == 0 and "grants (" in fine.stdout


class _Trickle:
    """A TLS server that answers headers at once, then one byte of body every 0.2 s: a
    request bounded per read only would last as long as the body does."""

    def __init__(self, tmp: Path) -> None:
        cert, key = self_signed(["127.0.0.1"])
        (tmp / "t.crt").write_bytes(cert)
        (tmp / "t.key").write_bytes(key)
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(tmp / "t.crt", tmp / "t.key")
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.done = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with self.context.wrap_socket(conn, server_side=True) as tls:
            tls.recv(65536)
            tls.sendall(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 100000\r\n\r\n"
            )
            try:
                while not self.done.wait(0.2):
                    tls.sendall(b"x")
            except OSError:
                pass

    def close(self) -> None:
        self.done.set()
        self.listener.close()


def test_an_answer_that_trickles_is_cut_at_the_timeout(tmp_path: Path) -> None:
    """(R-O4) --timeout bounds the whole request, not each read: a server that never finishes
    its answer costs the command about the timeout, then exit 3 saying so."""
    server = _Trickle(tmp_path)
    try:
        started = time.monotonic()
        out = dm("metrics", "--url", f"https://127.0.0.1:{server.port}/metrics", "--timeout", "2")
        took = time.monotonic() - started
    finally:
        server.close()
    assert out.returncode == 3
    assert "did not arrive whole in 2s" in one_line(out, "metrics")
    assert took < 2 + BOUND_SECONDS


# -- start-up refuses what cannot work (R-O4, R-O1) ------------------------------------------------


def refused(*args: str, env: dict[str, str] | None = None) -> str:
    started = time.monotonic()
    out = dm("serve", "--secure-port", "0", *args, env=env, timeout=BOUND_SECONDS * 3)
    assert time.monotonic() - started < BOUND_SECONDS, args
    assert out.returncode == 2, (args, out.returncode, out.stderr)
    return one_line(out, "serve")


def test_serve_refuses_paths_that_are_not_there(tmp_path: Path) -> None:
    """(R-O4) A --pods-file or --proc-root that does not exist is exit 2 naming the flag, from
    the flag or its variable, before anything starts."""
    missing = tmp_path / "nonexistent"
    assert refused("--replay", H100, "--pods-file", str(missing)) == (
        f"devicemanager serve: --pods-file: {missing} is not a file"
    )
    assert refused("--replay", H100, "--proc-root", str(missing)) == (
        f"devicemanager serve: --proc-root: {missing} is not a directory"
    )
    assert "--proc-root: " in refused(
        "--manufacturer", "tests.fakes:StaticBackend", env={"DEVICEMANAGER_PROC_ROOT": str(missing)}
    )


def test_serve_refuses_a_manufacturer_the_scenario_contradicts(launch: Launch) -> None:
    """(R-O4) --manufacturer beside --replay must name what the scenario recorded; said with
    both, exit 2. Naming the scenario's own manufacturer, or none, starts."""
    line = refused("--replay", H100, "--manufacturer", "amd")
    assert line == (
        "devicemanager serve: --manufacturer: amd beside --replay, but the scenario "
        "h100-8gpu-mixed records nvidia; give those or leave --manufacturer out"
    )
    from_env = refused("--replay", H100, env={"DEVICEMANAGER_MANUFACTURER": "nvidia,amd"})
    assert "--manufacturer: nvidia,amd beside --replay" in from_env
    agent: Agent = launch("--replay", H100, "--manufacturer", "nvidia", "--monitor-period", "0.5")
    agent.wait_for("/readyz", 200)


@pytest.mark.parametrize("level", ["loud", "warn", "trace", ""])
def test_serve_refuses_an_unknown_log_level(level: str) -> None:
    """(R-O4, R-O5) An unknown --log-level was a ValueError from logging; now the flag and its
    choices."""
    line = (
        refused("--replay", H100, "--log-level", level)
        if level
        else refused("--replay", H100, "--log-level=")
    )
    assert line.startswith("devicemanager serve: --log-level: debug, info, warning, error; got")


def test_serve_takes_a_log_level_in_any_case(launch: Launch) -> None:
    """(R-O4, R-O5) WARNING is warning: the info lines are left out."""
    agent: Agent = launch("--replay", H100, "--log-level", "WARNING", "--monitor-period", "0.5")
    agent.wait_for("/readyz", 200)
    assert all(line["level"] != "info" for line in json_lines(agent))


def test_serve_refuses_a_cert_dir_that_cannot_serve(tmp_path: Path) -> None:
    """(R-O1, R-O4) An empty --cert-dir, one with a pair that does not load, or one whose files
    cannot be read: exit 2 naming --cert-dir and what is wrong, not exit 3 with an OSError."""
    empty = tmp_path / "empty"
    empty.mkdir()
    assert refused("--replay", H100, "--cert-dir", str(empty)) == (
        f"devicemanager serve: --cert-dir: {empty} has no tls.crt (it needs tls.crt and tls.key)"
    )
    half = tmp_path / "half"
    half.mkdir()
    cert, key = self_signed(["127.0.0.1"])
    (half / "tls.crt").write_bytes(cert)
    (half / "tls.key").symlink_to(half / "..data" / "tls.key")  # a Secret volume's dangling link
    assert "has no tls.key" in refused("--replay", H100, "--cert-dir", str(half))
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "tls.crt").write_text("not a certificate\n")
    (junk / "tls.key").write_bytes(key)
    assert refused("--replay", H100, "--cert-dir", str(junk)).startswith(
        f"devicemanager serve: --cert-dir: {junk}: tls.crt is not a PEM certificate"
    )
    other, _ = self_signed(["127.0.0.1"])
    mismatched = tmp_path / "mismatched"
    mismatched.mkdir()
    (mismatched / "tls.crt").write_bytes(other)
    (mismatched / "tls.key").write_bytes(key)
    assert "tls.key is not the key of tls.crt" in refused(
        "--replay", H100, "--cert-dir", str(mismatched)
    )
    if os.geteuid() != 0:  # root reads whatever the mode says
        locked = tmp_path / "locked"
        locked.mkdir()
        (locked / "tls.crt").write_bytes(cert)
        (locked / "tls.key").write_bytes(key)
        (locked / "tls.key").chmod(0)
        assert "cannot be read: Permission denied" in refused(
            "--replay", H100, "--cert-dir", str(locked)
        )


# -- logs: a lasting fault once, the same fields in text (R-O5) ------------------------------


class ScriptedBackend(StaticBackend):
    """Reads the file $DM_TEST_FAULT_FILE names every round: `ok` answers one card, anything
    else is raised as the driver's error."""

    manufacturer = "scripted"

    def read(self, request: ReadRequest) -> Payload:
        fault = Path(os.environ["DM_TEST_FAULT_FILE"]).read_text().strip()
        if fault != "ok":
            raise RuntimeError(fault)
        return super().read(request)

    def parse(self, payload: Payload) -> VendorReading:
        card = Card(
            id="S-0",
            index=0,
            name="Scripted",
            memory_total_mib=1,
            memory_used_mib=0,
            cores_utilization_percent=None,
        )
        return VendorReading(manufacturer=self.manufacturer, cards=(card,), driver_version="0")


def backend_lines(agent: Agent) -> list[tuple[str, str | None]]:
    return [
        (line["state"], line["error"])
        for line in json_lines(agent)
        if line["msg"].startswith("backend scripted is ")
    ]


def test_a_lasting_backend_fault_is_logged_when_it_starts_and_when_it_changes(
    launch: Launch, tmp_path: Path
) -> None:
    """(R-O5) Over many rounds of one fault, one line; another error text is another line; the
    recovery is one more. Never a line per period."""
    fault = tmp_path / "fault"

    def say(text: str) -> None:
        # Atomically: a round that opens the file between truncate and write would read ""
        # and log a fault nobody scripted.
        staged = tmp_path / "fault.next"
        staged.write_text(text + "\n")
        staged.replace(fault)

    say("driver said no")
    agent: Agent = launch(
        "--manufacturer",
        "tests.test_operations:ScriptedBackend",
        "--monitor-period",
        "0.1",
        env={"DM_TEST_FAULT_FILE": str(fault)},
    )

    def rounds_with(error: str, count: int = 10) -> None:
        with agent.client() as client:
            seen = 0
            deadline = time.monotonic() + 20
            last = None
            while seen < count and time.monotonic() < deadline:
                doc = client.get("/monitor/snapshot").json()
                if doc["timestamp"] != last and error in json.dumps(doc["backends"]):
                    seen, last = seen + 1, doc["timestamp"]
                time.sleep(0.05)
        assert seen >= count, f"{count} rounds with {error!r} never served"

    rounds_with("driver said no")
    assert backend_lines(agent) == [("error", "RuntimeError: driver said no")]
    say("driver said no, differently")
    rounds_with("differently")
    say("ok")
    rounds_with('"state": "ok"')
    say("driver said no")
    rounds_with("driver said no")
    assert backend_lines(agent) == [
        ("error", "RuntimeError: driver said no"),
        ("error", "RuntimeError: driver said no, differently"),
        ("ok", None),
        ("error", "RuntimeError: driver said no"),
    ]


def test_pods_that_cannot_be_read_are_logged_once_with_the_traceback(
    launch: Launch, tmp_path: Path
) -> None:
    """(R-O5) A --pods-file that stops being a PodList: one error line with its traceback over
    many rounds, one more when the error changes, one info line when it reads again."""
    pods = tmp_path / "pods.json"
    pods.write_text((NODES / "h100-8gpu-mixed" / "pods.json").read_text())
    agent: Agent = launch("--replay", H100, "--pods-file", str(pods), "--monitor-period", "0.1")
    agent.wait_for("/readyz", 200)

    def pods_lines() -> list[dict[str, Any]]:
        return [line for line in json_lines(agent) if "node's pods" in line["msg"]]

    pods.write_text("{ not json")
    wait_until(lambda: len(pods_lines()) == 1, what="the first fault logged")
    time.sleep(1.5)  # some fifteen rounds of the same fault
    (first,) = pods_lines()
    assert first["level"] == "error" and "ListError" in first["error"]
    assert "Traceback" in first["exc"]
    pods.unlink()  # another fault
    wait_until(lambda: len(pods_lines()) == 2, what="the changed fault logged")
    assert "FileNotFoundError" in pods_lines()[1]["error"]
    pods.write_text((NODES / "h100-8gpu-mixed" / "pods.json").read_text())
    wait_until(lambda: len(pods_lines()) == 3, what="the recovery logged")
    time.sleep(1.0)
    lines = pods_lines()
    assert [line["level"] for line in lines] == ["error", "error", "info"]
    assert lines[2]["msg"] == "the node's pods are read again"


_PAIR = re.compile(r' (\w+)=("(?:[^"\\]|\\.)*"|\S+)')


def test_a_round_that_keeps_failing_is_logged_once_per_fault(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """(R-O5) The monitor loop's own failure (assembly, rendering): one line with the traceback
    when it starts, one when it fails otherwise, one when rounds complete again, over many
    periods of each."""
    import logging

    from devicemanager.agent.monitor import BackendWorker, Monitor

    faults = ["rendering broke"] * 8 + ["rendering broke otherwise"] * 8 + [""] * 8

    class Failing(Monitor):
        def run_round(self) -> Any:
            fault = faults.pop(0) if faults else ""
            if fault:
                raise RuntimeError(fault)
            return super().run_round()

    monitor = Failing(
        [BackendWorker(StaticBackend())],
        period=0.01,
        deadline=0.5,
        liveness_timeout=60,
        node="n1",
    )
    with caplog.at_level(logging.INFO, logger="devicemanager.monitor"):
        monitor.start()
        wait_until(lambda: not faults, what="24 rounds")
        time.sleep(0.1)
        monitor.stop()
    lines = [r for r in caplog.records if "monitor round" in r.getMessage()]
    assert [(r.levelname, r.getMessage(), getattr(r, "error", None)) for r in lines] == [
        ("ERROR", "monitor round failed", "RuntimeError: rendering broke"),
        ("ERROR", "monitor round failed", "RuntimeError: rendering broke otherwise"),
        ("INFO", "monitor rounds complete again", None),
    ]
    assert lines[0].exc_info is not None and lines[1].exc_info is not None


def _text_line(lines: list[str], msg: str) -> str | None:
    """The text line whose message is `msg`: what follows it is its fields, or nothing."""
    for line in lines:
        rest = line.partition(": ")[2]
        if rest.startswith(msg) and re.fullmatch(f"({_PAIR.pattern})*", rest[len(msg) :]):
            return line
    return None


def _text_fields(line: str) -> dict[str, Any]:
    """`key=value` pairs of a text line, values read as JSON where they are JSON."""
    out: dict[str, Any] = {}
    for key, value in _PAIR.findall(line):
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def test_text_logs_carry_the_same_fields_as_json_logs(launch: Launch) -> None:
    """(R-O5) "backend hostpath is unavailable" lost its cause in text: now every line of the
    text format has the JSON line's fields, as key=value."""
    args = ("--manufacturer", "tests.fakes:HostPathBackend", "--monitor-period", "0.2")
    as_json: Agent = launch(*args)
    as_text: Agent = launch(*args, "--log-format", "text")
    as_json.wait_for_round()
    as_text.wait_for_round()
    wait_until(lambda: "backend hostpath is unavailable" in as_text.logs(), what="text line")
    (line,) = [x for x in as_text.logs().splitlines() if "backend hostpath is unavailable" in x]
    assert line.split()[2:4] == ["WARNING", "devicemanager.monitor:"]
    assert (
        'manufacturer=hostpath state=unavailable error="/usr/lib/x86_64-linux-gnu/'
        'libhostpath.so.1: cannot open shared object file: No such file or directory"'
    ) in line
    text_lines = as_text.logs().splitlines()
    compared = 0
    for doc in json_lines(as_json):
        if doc["msg"].startswith(("Started server", "Uvicorn running")):
            continue  # a pid and a port: not the same text in two agents
        text = _text_line(text_lines, doc["msg"])
        assert text is not None, (doc["msg"], text_lines)
        fields = _text_fields(text)
        wanted = {k: v for k, v in doc.items() if k not in ("ts", "level", "logger", "msg")}
        assert fields.keys() == wanted.keys(), (doc, text)
        for key, value in wanted.items():
            if key != "address":  # each agent's own port
                assert fields[key] == value, (doc["msg"], key, text)
        compared += 1
    assert compared >= 4


# -- HEAD and the landing page (R-S3, R-X4) --------------------------------------------------

FOUR = ("/monitor/snapshot", "/metrics", "/readyz", "/livez")


def test_head_answers_as_get_without_a_body(replay: Agent) -> None:
    """(R-S3) HEAD of every endpoint: GET's status and headers, its content-length, no body;
    the connection goes on (a pipelined GET after it is read right). Other methods: 405 with
    `Allow: GET, HEAD`."""
    with replay.client() as client:
        for path in (*FOUR, "/"):
            get = client.get(path, headers={"Accept-Encoding": "identity"})
            head = client.head(path, headers={"Accept-Encoding": "identity"})
            assert head.status_code == get.status_code == 200, path
            assert head.content == b"", path
            assert head.headers["content-type"] == get.headers["content-type"], path
            if path in ("/", "/readyz", "/livez"):  # the same bytes from round to round
                assert head.headers["content-length"] == str(len(get.content)), path
            else:
                assert int(head.headers["content-length"]) > 1000, path
        gz = client.head("/metrics", headers={"Accept-Encoding": "gzip"})
        assert gz.headers["content-encoding"] == "gzip"
        for method in ("OPTIONS", "TRACE", "POST"):
            refused = client.request(method, "/metrics")
            assert refused.status_code == 405 and refused.headers["allow"] == "GET, HEAD"
        assert client.head("/nope").status_code == 404
    with _tls(replay.port) as conn:
        conn.sendall(
            b"HEAD /livez HTTP/1.1\r\nHost: a\r\n\r\nGET /readyz HTTP/1.1\r\nHost: a\r\n\r\n"
        )
        (headed, after) = _responses(conn, 2, heads=frozenset({0}))
    assert (headed[0], headed[2], headed[1]["content-length"]) == (200, b"", "3")
    assert (after[0], after[2]) == (200, b"ok\n")


def test_the_landing_page_lists_the_endpoints_and_nothing_else(replay: Agent) -> None:
    """(R-S3) `/`, as node_exporter's: a small HTML page linking the four endpoints, and
    nothing of the node (no name, version, card or figure)."""
    with replay.client() as client:
        page = client.get("/")
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    for path in FOUR:
        assert f'<a href="{path}">{path}</a>' in page.text
    from devicemanager import __version__

    for secret in ("gpu-h100-07", "nvidia", "GPU-", __version__, "Python"):
        assert secret not in page.text
    assert len(page.content) < 1024


def test_the_landing_page_is_open_and_head_is_reviewed_like_get(
    launch: Launch, api: FakeApiServer, tmp_path: Path
) -> None:
    """(R-X4) With access control, `/` needs no token and asks the API server nothing (it
    shows nothing to guard); HEAD of a guarded route is reviewed as its GET is."""
    agent = guarded_agent(launch, api, tmp_path)
    with agent.client() as client:
        page = client.get("/")
        assert page.status_code == 200 and '<a href="/metrics">' in page.text
        assert client.head("/").status_code == 200
        assert client.head("/metrics").status_code == 401
        bearer = {"Authorization": "Bearer prometheus-token"}
        allowed = client.head("/metrics", headers=bearer)
        assert allowed.status_code == 200 and allowed.content == b""
        assert client.head("/monitor/snapshot", headers=bearer).status_code == 403
    # One review per guarded path, as for GET; none for `/`.
    assert reviewed_tokens(api) == ["prometheus-token", "prometheus-token"]


# -- the exit codes, in one table (R-O4) --------------------------------------------------


def test_the_exit_codes_are_one_table_in_the_docs() -> None:
    """(R-O4) docs/configuration.md holds the exit codes once, 0/1/2/3, and what SIGTERM and
    SIGHUP do; the README points there."""
    text = (REPO / "docs" / "configuration.md").read_text()
    assert text.count("| code | meaning |") == 1
    for row in ("| 0 |", "| 1 |", "| 2 |", "| 3 |"):
        assert row in text
    assert "`--token-file`" in text and "SIGHUP" in text and "SIGTERM" in text
    assert "configuration.md" in (REPO / "README.md").read_text()
