"""The real agent, started as `devicemanager serve`, over real TLS with httpx and curl."""

from __future__ import annotations

import contextlib
import gzip
import json
import shutil
import socket
import ssl
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from devicemanager.serve.mint import self_signed
from tests.conftest import NODES, Agent

H100 = str(NODES / "h100-8gpu-mixed")
pytestmark = pytest.mark.timeout(90)


def curl(*args: str) -> subprocess.CompletedProcess[bytes]:
    if shutil.which("curl") is None:  # .ci/run installs curl; a bare machine may lack it
        pytest.skip("curl is not installed")
    return subprocess.run(
        ["curl", "-sS", "-k", "--max-time", "10", *args], capture_output=True, check=False
    )


def test_replay_serves_card_figures_over_https(launch) -> None:  # type: ignore[no-untyped-def]
    agent: Agent = launch("--replay", H100, "--monitor-period", "0.5")
    agent.wait_for("/readyz", 200)
    with agent.client() as client:
        response = client.get("/monitor/snapshot")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    doc = response.json()
    assert doc["node"] == "gpu-h100-07"
    assert doc["periodSeconds"] == 1  # 0.5 s rounded up: never under-estimated
    assert doc["timestamp"].endswith("Z") and not doc["timestamp"].startswith("0001")
    (group,) = doc["groups"]
    assert group["manufacturer"] == "nvidia"
    cards = group["accelerators"]
    assert [c["index"] for c in cards] == list(range(8))
    assert {c["memory"] for c in cards} == {81559}
    # The MIG card answers no utilization: absent, not 0.
    assert cards[4]["coresUtilization"] is None
    assert cards[6]["coresUtilization"] == 0.0
    assert doc["backends"][0]["state"] == "ok"
    # The replayed pods carve cards 3 and 7 (slices) and 4 (MIG): the per-grant section is
    # measured for those three, and only those.
    assert doc["slices"]["schemaVersion"] == 1
    carved = {cards[i]["id"] for i in (3, 4, 7)}
    assert {d["deviceID"] for d in doc["slices"]["devices"]} == carved


def test_curl_reads_snapshot_metrics_and_gzip(launch) -> None:  # type: ignore[no-untyped-def]
    agent: Agent = launch("--replay", H100, "--monitor-period", "0.5")
    agent.wait_for("/readyz", 200)
    snap = curl("--fail", agent.url("/monitor/snapshot"))
    assert snap.returncode == 0, snap.stderr
    assert json.loads(snap.stdout)["groups"][0]["manufacturer"] == "nvidia"

    raw = curl("--fail", "-H", "Accept-Encoding: gzip", "-D", "-", "-o", "-", agent.url("/metrics"))
    head, _, body = raw.stdout.partition(b"\r\n\r\n")
    assert b"content-encoding: gzip" in head.lower()
    text = gzip.decompress(body).decode()
    names = {f.name for f in text_string_to_metric_families(text)}
    assert "gpustack_accelerator_memory_used_mib" in names

    plain = curl("--fail", "-D", "-", agent.url("/metrics"))
    assert b"content-encoding" not in plain.stdout.lower()
    assert b"text/plain; version=0.0.4" in plain.stdout

    tls12 = curl("--fail", "--tlsv1.2", "--tls-max", "1.2", agent.url("/livez"))
    assert tls12.returncode == 0, tls12.stderr


def test_metrics_parse_and_publish_no_sample_for_absent_figures(launch) -> None:  # type: ignore[no-untyped-def]
    agent: Agent = launch("--replay", H100, "--monitor-period", "0.5")
    agent.wait_for("/readyz", 200)
    with agent.client() as client:
        text = client.get("/metrics").text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    cores = families["gpustack_accelerator_cores_utilization_percent"]
    indexes = {s.labels["index"] for s in cores.samples}
    assert indexes == {"0", "1", "2", "3", "5", "6", "7"}  # card 4 (MIG) is absent, not 0
    success = families["gpustack_instance_metrics_collector_success"].samples
    # The scenario's recorded kubelet answer counts as a source read.
    assert [(s.labels["source"], s.value) for s in success] == [
        ("podresources", 1.0),
        ("snapshot", 1.0),
        ("backends", 1.0),
    ]


def test_other_methods_than_get_and_head_are_405(launch) -> None:  # type: ignore[no-untyped-def]
    """(R-S3) HEAD answers as GET (tests/test_operations.py); the rest are 405."""
    agent: Agent = launch("--replay", H100, "--monitor-period", "0.5")
    with agent.client() as client:
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            for path in ("/monitor/snapshot", "/metrics", "/readyz", "/livez", "/"):
                response = client.request(method, path)
                assert response.status_code == 405, (method, path)
                assert response.headers["allow"] == "GET, HEAD"
        assert client.head("/livez").status_code == 200
        assert client.get("/nope").status_code == 404


def test_before_the_first_round_empty_groups_zero_timestamp_not_ready(launch) -> None:  # type: ignore[no-untyped-def]
    agent: Agent = launch(
        "--manufacturer",
        "tests.fakes:SlowFirstBackend",
        "--monitor-period",
        "1",
        "--backend-timeout",
        "20",
        env={"DM_TEST_SLOW_SECONDS": "4"},
    )
    with agent.client() as client:
        snapshot = client.get("/monitor/snapshot")
        ready = client.get("/readyz")
        metrics = client.get("/metrics").text
    assert snapshot.status_code == 200
    assert snapshot.json()["groups"] == []
    assert snapshot.json()["timestamp"] == "0001-01-01T00:00:00Z"
    assert ready.status_code == 503
    # No data yet is told apart from no accelerators: the collector says it has no snapshot.
    assert 'gpustack_instance_metrics_collector_success{source="snapshot"} 0.0' in metrics
    assert "gpustack_accelerator_memory_total_mib{" not in metrics
    agent.wait_for("/readyz", 200)
    with agent.client() as client:
        doc = client.get("/monitor/snapshot").json()
    assert doc["groups"][0]["accelerators"][0]["id"] == "FAKE-0"


def test_livez_fails_when_a_backend_never_returns_but_serving_goes_on(launch) -> None:  # type: ignore[no-untyped-def]
    agent: Agent = launch(
        "--manufacturer",
        "tests.fakes:HangingBackend,tests.fakes:StaticBackend",
        "--monitor-period",
        "0.3",
        "--backend-timeout",
        "0.2",
        "--liveness-timeout",
        "1.5",
    )
    agent.wait_for("/readyz", 200)
    with agent.client() as client:
        assert client.get("/livez").status_code == 200
        doc = client.get("/monitor/snapshot").json()
    states = {b["manufacturer"]: b["state"] for b in doc["backends"]}
    assert states["fake"] == "ok"
    assert states["hung"] in ("timeout", "stuck")
    # The other backend keeps publishing while one hangs (R-O3).
    assert [g["manufacturer"] for g in doc["groups"]] == ["fake"]
    livez = agent.wait_for("/livez", 503)
    assert "backend hung" in livez.text
    with agent.client() as client:
        assert client.get("/readyz").status_code == 200
        metrics = client.get("/metrics").text
    assert 'gpustack_accelerator_backend_up{manufacturer="hung"' in metrics
    assert 'gpustack_accelerator_memory_total_mib{id="FAKE-0"' in metrics


def _served_certificate(port: int) -> str:
    return ssl.get_server_certificate(("127.0.0.1", port))


def test_certificate_rotation_in_cert_dir_is_served_without_restart(launch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    certs = tmp_path / "certs"
    certs.mkdir()
    first_cert, first_key = self_signed(["first.example", "127.0.0.1"])
    (certs / "tls.crt").write_bytes(first_cert)
    (certs / "tls.key").write_bytes(first_key)
    agent: Agent = launch("--replay", H100, "--cert-dir", str(certs), "--monitor-period", "0.5")
    agent.wait_for("/livez", 200)
    assert ssl.PEM_cert_to_DER_cert(_served_certificate(agent.port)) == ssl.PEM_cert_to_DER_cert(
        first_cert.decode()
    )
    # A client that trusts only the first certificate gets in.
    with httpx.Client(verify=ssl.create_default_context(cadata=first_cert.decode())) as client:
        assert client.get(agent.url("/livez")).status_code == 200

    second_cert, second_key = self_signed(["second.example", "127.0.0.1"])
    # Written the way a Secret volume updates: new files moved into place.
    (certs / "tls.key.new").write_bytes(second_key)
    (certs / "tls.crt.new").write_bytes(second_cert)
    (certs / "tls.key.new").replace(certs / "tls.key")
    (certs / "tls.crt.new").replace(certs / "tls.crt")
    deadline = time.monotonic() + 15
    served = ""
    while time.monotonic() < deadline:
        served = _served_certificate(agent.port)
        if ssl.PEM_cert_to_DER_cert(served) == ssl.PEM_cert_to_DER_cert(second_cert.decode()):
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"rotated certificate never served; still {served[:80]}")
    assert agent.proc.poll() is None  # same process: no restart
    with httpx.Client(verify=ssl.create_default_context(cadata=second_cert.decode())) as client:
        assert client.get(agent.url("/monitor/snapshot")).status_code == 200
    assert "certificate reloaded" in agent.logs()


def _old_tls_client() -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_ciphers("ALL:@SECLEVEL=0")
    ctx.minimum_version = ssl.TLSVersion.TLSv1
    ctx.maximum_version = ssl.TLSVersion.TLSv1_1
    return ctx


def _handshake(ctx: ssl.SSLContext, port: int) -> str | None:
    with socket.create_connection(("127.0.0.1", port)) as sock, ctx.wrap_socket(sock) as tls:
        return tls.version()


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1:DeprecationWarning")
def test_tls_below_1_2_is_refused(launch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # Control: this machine's OpenSSL can speak TLS 1.1 at all, so a refusal below is the
    # agent's doing and not the client's.
    cert, key = self_signed(["127.0.0.1"])
    (tmp_path / "c.pem").write_bytes(cert)
    (tmp_path / "k.pem").write_bytes(key)
    permissive = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    permissive.set_ciphers("ALL:@SECLEVEL=0")
    permissive.minimum_version = ssl.TLSVersion.TLSv1
    permissive.load_cert_chain(tmp_path / "c.pem", tmp_path / "k.pem")
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def accept() -> None:
            conn, _ = listener.accept()
            with contextlib.suppress(OSError), permissive.wrap_socket(conn, server_side=True):
                pass

        thread = threading.Thread(target=accept)
        thread.start()
        try:
            control = _handshake(_old_tls_client(), port)
        except ssl.SSLError:
            control = None
        thread.join(5)
    if control != "TLSv1.1":
        pytest.skip("this OpenSSL build cannot negotiate TLS 1.1 even with a permissive peer")

    agent: Agent = launch("--replay", H100, "--monitor-period", "0.5")
    agent.wait_for("/livez", 200)
    with pytest.raises(ssl.SSLError):
        _handshake(_old_tls_client(), agent.port)
    tls12 = _old_tls_client()
    tls12.maximum_version = ssl.TLSVersion.TLSv1_2
    assert _handshake(tls12, agent.port) == "TLSv1.2"


def test_snapshot_command_prints_a_running_agent(launch) -> None:  # type: ignore[no-untyped-def]
    import sys

    agent: Agent = launch("--replay", H100, "--monitor-period", "0.5")
    agent.wait_for("/readyz", 200)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "devicemanager",
            "snapshot",
            "--url",
            agent.url("/monitor/snapshot"),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "node gpu-h100-07" in out.stdout
    assert "backend nvidia: ok" in out.stdout
    cards = out.stdout.split("\ngrants (")[0]
    lines = [line for line in cards.splitlines() if "GPU-" in line]
    assert len(lines) == 8
    assert "28701/81559" in lines[4] and lines[4].split()[4] == "-"  # MIG card: no CORE%
    raw = subprocess.run(
        [
            sys.executable,
            "-m",
            "devicemanager",
            "snapshot",
            "--json",
            "--url",
            agent.url("/monitor/snapshot"),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(raw.stdout)["node"] == "gpu-h100-07"
    failed = subprocess.run(
        [sys.executable, "-m", "devicemanager", "snapshot", "--url", "https://127.0.0.1:1/x"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert failed.returncode == 3 and "127.0.0.1:1" in failed.stderr  # cannot reach


def test_bad_replay_directory_is_a_clear_error(tmp_path: Path) -> None:
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "devicemanager", "serve", "--replay", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    assert out.returncode != 0
    assert "scenario.json" in out.stderr
