"""Certificate rotation in --cert-dir that goes wrong halfway (issue 12; R-O1).

A real TLS listener built from `Certificates.context()` answers real handshakes while the files
under it are rewritten the ways a rotation can go: half a certificate, a new certificate with
the old key, an encrypted key, an error nobody foresaw. Each time the previous pair keeps
serving, and the watcher lives on to pick up the finished pair.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from devicemanager.serve import tls
from devicemanager.serve.mint import self_signed
from devicemanager.serve.tls import Certificates
from tests.conftest import REPO, agent_env

pytestmark = pytest.mark.timeout(60)
INTERVAL = 0.05


class Listener:
    """A TLS server on loopback that completes one handshake per connection."""

    def __init__(self, certs: Certificates) -> None:
        self.context = certs.context()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            with contextlib.suppress(OSError), conn:
                conn.settimeout(5)
                with self.context.wrap_socket(conn, server_side=True):
                    pass

    def served(self) -> bytes:
        """The DER certificate a client is handed now."""
        return ssl.PEM_cert_to_DER_cert(ssl.get_server_certificate(("127.0.0.1", self.port)))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


def der(pem: bytes) -> bytes:
    return ssl.PEM_cert_to_DER_cert(pem.decode())


def write_pair(directory: Path, cert: bytes, key: bytes) -> None:
    (directory / "tls.crt").write_bytes(cert)
    (directory / "tls.key").write_bytes(key)


@pytest.fixture
def rotation(tmp_path: Path) -> Iterator[tuple[Path, Certificates, Listener, bytes, bytes]]:
    first_cert, first_key = self_signed(["first.example", "127.0.0.1"])
    write_pair(tmp_path, first_cert, first_key)
    certs = Certificates(tmp_path)
    listener = Listener(certs)
    watcher = certs.watch(interval=INTERVAL)
    yield tmp_path, certs, listener, first_cert, first_key
    certs.close()
    watcher.join(5)
    listener.close()


def settle(certs: Certificates, watcher_checks: int = 6) -> None:
    """Let the watcher look at the files a few times."""
    time.sleep(INTERVAL * watcher_checks)


def eventually(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "never happened"
        time.sleep(INTERVAL)


def watcher_alive() -> bool:
    return any(t.name == "cert-watcher" and t.is_alive() for t in threading.enumerate())


def test_a_half_written_certificate_keeps_the_previous_pair(rotation, caplog) -> None:  # type: ignore[no-untyped-def]
    directory, certs, listener, first_cert, _ = rotation
    assert listener.served() == der(first_cert)
    second_cert, second_key = self_signed(["second.example", "127.0.0.1"])
    with caplog.at_level(logging.ERROR, logger="devicemanager.serve.tls"):
        # Halfway through: half of the new certificate, the old key.
        (directory / "tls.crt").write_bytes(second_cert[: len(second_cert) // 2])
        settle(certs)
        assert listener.served() == der(first_cert)
        # The whole new certificate, still the old key: a pair that does not match.
        (directory / "tls.crt").write_bytes(second_cert)
        settle(certs)
        assert listener.served() == der(first_cert)
        # Half of the new key.
        (directory / "tls.key").write_bytes(second_key[: len(second_key) // 2])
        settle(certs)
        assert listener.served() == der(first_cert)
    assert certs.reloads == 0 and watcher_alive()
    assert any("rejected" in r.getMessage() for r in caplog.records)
    # The rotation finishes: the new pair is served from the next connection on.
    (directory / "tls.key").write_bytes(second_key)
    eventually(lambda: listener.served() == der(second_cert))
    assert certs.reloads == 1


def test_a_missing_file_keeps_the_previous_pair(rotation) -> None:  # type: ignore[no-untyped-def]
    directory, certs, listener, first_cert, _ = rotation
    (directory / "tls.key").unlink()
    settle(certs)
    assert listener.served() == der(first_cert) and watcher_alive()
    second_cert, second_key = self_signed(["second.example", "127.0.0.1"])
    write_pair(directory, second_cert, second_key)
    eventually(lambda: listener.served() == der(second_cert))


def test_an_unforeseen_error_in_a_check_never_stops_the_watcher(rotation, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    directory, certs, listener, first_cert, _ = rotation
    failures = []

    def broken(cert_file: Path, key_file: Path) -> ssl.SSLContext:
        failures.append(cert_file)
        raise ValueError("something nobody foresaw")

    real = tls.server_context
    monkeypatch.setattr(tls, "server_context", broken)
    second_cert, second_key = self_signed(["second.example", "127.0.0.1"])
    write_pair(directory, second_cert, second_key)
    eventually(lambda: len(failures) >= 3)  # it raised at every check, and checks went on
    assert watcher_alive() and listener.served() == der(first_cert)
    monkeypatch.setattr(tls, "server_context", real)
    eventually(lambda: listener.served() == der(second_cert))
    assert certs.reloads == 1


def encrypted(key_pem: bytes) -> bytes:
    key = serialization.load_pem_private_key(key_pem, None)
    return key.private_bytes(  # type: ignore[union-attr]
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"secret"),
    )


def test_an_encrypted_key_is_rejected_without_asking_for_a_passphrase(rotation) -> None:  # type: ignore[no-untyped-def]
    directory, certs, listener, first_cert, _ = rotation
    second_cert, second_key = self_signed(["second.example", "127.0.0.1"])
    write_pair(directory, second_cert, encrypted(second_key))
    settle(certs)
    assert listener.served() == der(first_cert) and watcher_alive()


def test_an_encrypted_key_never_waits_on_a_terminal(tmp_path: Path) -> None:
    # OpenSSL's default is to prompt on the controlling terminal and wait for an answer. Run
    # the loader with a real pseudo-terminal as its controlling terminal: it must fail at once.
    setsid = shutil.which("setsid")
    if setsid is None:
        pytest.skip("setsid (util-linux) is not installed")
    cert, key = self_signed(["127.0.0.1"])
    write_pair(tmp_path, cert, encrypted(key))
    code = (
        "import sys; from pathlib import Path; from devicemanager.serve.tls import server_context\n"
        "d = Path(sys.argv[1])\n"
        "try:\n    server_context(d / 'tls.crt', d / 'tls.key')\n"
        "except OSError as exc:\n    print('refused:', type(exc).__name__)\n"
    )
    controller, terminal = os.openpty()
    try:
        proc = subprocess.Popen(
            [setsid, "--ctty", sys.executable, "-c", code, str(tmp_path)],
            stdin=terminal,
            stdout=terminal,
            stderr=terminal,
            env=agent_env(),
            cwd=REPO,
        )
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            pytest.fail("loading an encrypted key waited on the terminal for a passphrase")
        os.set_blocking(controller, False)
        with contextlib.suppress(BlockingIOError, OSError):
            output = os.read(controller, 4096).decode(errors="replace")
    finally:
        os.close(controller)
        os.close(terminal)
    assert "refused: SSLError" in output and "pass phrase" not in output


def test_a_refused_pair_says_why_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    first_cert, first_key = self_signed(["localhost"])
    second_cert, second_key = self_signed(["localhost"])
    (tmp_path / "tls.crt").write_bytes(first_cert)
    (tmp_path / "tls.key").write_bytes(first_key)
    certs = Certificates(tmp_path)
    try:
        with caplog.at_level(logging.ERROR, logger="devicemanager.serve.tls"):
            (tmp_path / "tls.crt").write_bytes(second_cert)  # the new certificate, the old key
            for _ in range(5):  # the watcher checks every 2 s; a refusal is said once
                assert certs.reload_if_changed() is False
            (tmp_path / "tls.key").write_bytes(second_key[:50])
            assert certs.reload_if_changed() is False
        messages = [r.getMessage() for r in caplog.records]
        assert messages == [
            "new certificate rejected: tls.key is not the key of tls.crt (halfway through a "
            "rotation?); serving the previous one",
            "new certificate rejected: tls.key is not a PEM private key (or not whole yet); "
            "serving the previous one",
        ]
        encrypted = serialization.load_pem_private_key(second_key, None).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
        (tmp_path / "tls.key").write_bytes(encrypted)
        assert "is encrypted" in tls.why_refused(tmp_path / "tls.crt", tmp_path / "tls.key")
        (tmp_path / "tls.crt").write_bytes(b"-----BEGIN CERT")
        assert "tls.crt is not a PEM certificate" in tls.why_refused(
            tmp_path / "tls.crt", tmp_path / "tls.key"
        )
    finally:
        certs.close()
