"""Serving certificates: from --cert-dir, picked up again when they change, or self-signed (R-O1).

Reloading without a restart: every handshake's SNI callback (OpenSSL calls it whether or not
the client sent a server name) hands the connection the newest context, so a rotated Secret
is served from the next connection on while open connections finish on the old one.
"""

from __future__ import annotations

import logging
import os
import ssl
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

from devicemanager.serve import CERT_FILE as CERT_FILE  # re-exported: the pair's file names
from devicemanager.serve import KEY_FILE as KEY_FILE
from devicemanager.serve.mint import names_message

log = logging.getLogger("devicemanager.serve.tls")

MINT_TIMEOUT = 60.0  # seconds for the child that mints a self-signed pair (a fresh interpreter)
PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # where the child finds devicemanager


class Minting:
    """A self-signed pair being minted into a fresh private directory by a short-lived child,
    so that cryptography's pages never join this process's resident set (serve/mint.py).

    The child starts at once, before the names it is for are known: importing cryptography is
    nearly all of its work (about 0.1 s), and it does that on another core while this process
    imports the agent. `name(hosts)` hands it the names once the node is resolved; the child
    then signs and writes the pair, which `wait()` waits for when the server needs it."""

    def __init__(self, hosts: Sequence[str] | None = None, directory: Path | None = None) -> None:
        self.hosts: list[str] | None = None
        self.tmp: tempfile.TemporaryDirectory[str] | None = None
        if directory is None:
            self.tmp = tempfile.TemporaryDirectory(prefix="devicemanager-tls-")
            directory = Path(self.tmp.name)
        self.directory = directory
        self._child: subprocess.Popen[bytes] | None = None
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(PACKAGE_ROOT), os.environ.get("PYTHONPATH", "")) if p
            ),
        }
        try:
            self._child = subprocess.Popen(
                [sys.executable, "-m", "devicemanager.serve.mint", str(directory), "-"],
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
        except OSError as exc:
            self.abandon()
            raise RuntimeError(f"minting a self-signed certificate failed: {exc}") from exc
        if hosts is not None:
            try:
                self.name(hosts)
            except ValueError:
                self.abandon()
                raise

    def name(self, hosts: Sequence[str]) -> None:
        """The names the pair is made out to, handed to the child once (mint.py reads them)."""
        if self.hosts is not None:
            raise RuntimeError(f"the self-signed pair is already being made out to {self.hosts}")
        message = names_message(hosts)  # ValueError, naming the host, before anything is sent
        self.hosts = list(hosts)
        child = self._child
        if child is None or child.stdin is None:
            return
        try:
            child.stdin.write(message)
            child.stdin.flush()
        except BrokenPipeError:
            pass  # the child has ended already: wait() says how

    def wait(self) -> None:
        """Until the pair is written; RuntimeError, saying why, when it was not."""
        if self.hosts is None:
            raise RuntimeError("the self-signed pair was never given the names it is for")
        child = self._child
        if child is None:
            return
        try:
            _, err = child.communicate(timeout=MINT_TIMEOUT)
        except subprocess.TimeoutExpired as exc:
            self.abandon()
            raise RuntimeError(f"minting a self-signed certificate failed: {exc}") from exc
        self._child = None
        if child.returncode != 0:
            tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
            raise RuntimeError(
                f"minting a self-signed certificate failed (exit {child.returncode}): {tail[0]}"
            )

    def abandon(self) -> None:
        """The child ended and the directory removed: the start did not get as far as serving."""
        if self._child is not None:
            self._child.kill()
            self._child.communicate()
            self._child = None
        if self.tmp is not None:
            self.tmp.cleanup()


def mint_self_signed(directory: Path, hosts: Sequence[str]) -> None:
    """A self-signed pair for `hosts` written into `directory` by a short-lived child."""
    Minting(hosts, directory).wait()


def _no_passphrase() -> bytes:
    # Without a callback OpenSSL asks for a passphrase on the controlling terminal and waits:
    # an encrypted key must be refused, not hang the start or the watcher.
    return b""


def server_context(cert_file: Path, key_file: Path) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_file, key_file, password=_no_passphrase)
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


def why_refused(cert_file: Path, key_file: Path) -> str:
    """What is wrong with a pair OpenSSL refused, in words an operator acts on (OpenSSL's own
    message is "[SSL] PEM lib"). Reads the files again; only called after a refusal, which is
    the one time the serving process imports cryptography (serve/mint.py says why)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    try:
        certs = x509.load_pem_x509_certificates(cert_file.read_bytes())
    except (OSError, ValueError):
        return f"{cert_file.name} is not a PEM certificate (or not whole yet)"
    try:
        key = serialization.load_pem_private_key(key_file.read_bytes(), password=None)
    except TypeError:
        return f"{key_file.name} is encrypted: the agent takes an unencrypted key"
    except (OSError, ValueError):
        return f"{key_file.name} is not a PEM private key (or not whole yet)"
    if not certs:
        return f"{cert_file.name} holds no certificate"
    if certs[0].public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    ) != key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    ):
        return f"{key_file.name} is not the key of {cert_file.name} (halfway through a rotation?)"
    return "OpenSSL refused the pair"


def _stamp(path: Path) -> tuple[int, int, int]:
    # Kubernetes swaps a Secret volume through a symlink; stat() follows it, so a rotation
    # changes inode and mtime even when the size stays the same.
    st = path.stat()
    return st.st_ino, st.st_mtime_ns, st.st_size


class Certificates:
    """The current serving context, reloaded from a directory when its files change."""

    def __init__(
        self,
        cert_dir: Path | None,
        hosts: Sequence[str] = ("localhost", "127.0.0.1"),
        minting: Minting | None = None,
    ):
        """Without `cert_dir`, self-signed: the pair `minting` started, else one minted now."""
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if cert_dir is None:
            minting = minting or Minting(hosts)
            try:
                minting.wait()
            except BaseException:
                minting.abandon()
                raise
            self._tmp = minting.tmp
            cert_dir = minting.directory
            log.info("serving a self-signed certificate", extra={"hosts": minting.hosts})
        self.cert_dir = cert_dir
        self.cert_file, self.key_file = cert_dir / CERT_FILE, cert_dir / KEY_FILE
        # Fail at start, not at the first handshake, when --cert-dir is wrong.
        self._stamps = (_stamp(self.cert_file), _stamp(self.key_file))
        self.current = server_context(self.cert_file, self.key_file)
        self.reloads = 0
        self._refused: tuple[tuple[int, int, int], ...] | None = None  # the pair last refused
        self._stop = threading.Event()
        self._listener: ssl.SSLContext | None = None
        if self._tmp is not None:
            # The self-signed key is needed on disk only to load it: once both contexts hold it
            # the files go, so no key material outlives the start, even if the process is
            # killed without a chance to clean up.
            self._listener = self.context()
            self._tmp.cleanup()

    @property
    def self_signed(self) -> bool:
        return self._tmp is not None

    def context(self) -> ssl.SSLContext:
        """The context the listener is created with; it defers to `current` per handshake."""
        if self._listener is not None:
            return self._listener
        ctx = server_context(self.cert_file, self.key_file)
        ctx.sni_callback = self._choose
        return ctx

    def _choose(
        self, conn: ssl.SSLObject | ssl.SSLSocket, name: str | None, ctx: ssl.SSLContext
    ) -> None:
        conn.context = self.current

    def reload_if_changed(self) -> bool:
        try:
            stamps = (_stamp(self.cert_file), _stamp(self.key_file))
        except OSError as exc:
            log.error(
                "certificate files unreadable; serving the previous ones", extra={"error": str(exc)}
            )
            return False
        if stamps == self._stamps:
            return False
        try:
            fresh = server_context(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as exc:
            # Halfway through a rotation the key may not match the certificate yet; try again
            # at the next check rather than serve nothing. Said once per pair of files, with
            # why, not every check.
            if stamps != self._refused:
                self._refused = stamps
                log.error(
                    "new certificate rejected: %s; serving the previous one",
                    why_refused(self.cert_file, self.key_file),
                    extra={"error": str(exc), "cert_dir": str(self.cert_dir)},
                )
            return False
        self._stamps, self.current = stamps, fresh
        self.reloads += 1
        log.info("certificate reloaded", extra={"cert_dir": str(self.cert_dir)})
        return True

    def watch(self, interval: float = 2.0) -> threading.Thread:
        def loop() -> None:
            while not self._stop.wait(interval):
                try:
                    self.reload_if_changed()
                except Exception:
                    # Whatever a half-written or odd file does, the previous pair keeps serving
                    # and the next check tries again: a dead watcher would stop rotation for good.
                    log.exception("certificate check failed; serving the previous one")

        thread = threading.Thread(target=loop, name="cert-watcher", daemon=True)
        thread.start()
        return thread

    def close(self) -> None:
        self._stop.set()
        if self._tmp is not None:
            self._tmp.cleanup()
