"""A self-signed serving certificate, minted in a short-lived child process (R-O1).

cryptography is about 9 MiB of the resident set once imported (its Rust core and OpenSSL's
pages, docs/performance.md), and an agent without --cert-dir needs it once, at start, for one
key. `Certificates` therefore runs this module as a child (`python -m
devicemanager.serve.mint DIR HOST...`), which writes the pair into DIR and exits: the agent
loads the pair with the standard library's ssl and never imports cryptography itself unless
it must explain a refused pair (tls.why_refused).

`DIR -` takes the names on standard input instead (`names_message`: one a line, then an empty
line), so that the agent can start the child before it knows them: importing cryptography is
nearly all the child's time, and it happens while the agent imports itself on another core.

This module is imported by the agent too (tls.Minting writes the names message), so it imports
cryptography only inside the functions the child runs.
"""

from __future__ import annotations

import datetime
import gc
import ipaddress
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

from devicemanager.serve import CERT_FILE, KEY_FILE

MAX_NAMES = 64  # names a self-signed pair is made out to (config.serving_hosts gives five)
MAX_NAME_BYTES = 253  # a DNS name's longest form


def names_message(hosts: Sequence[str]) -> bytes:
    """The names as the child reads them from standard input: one a line, then an empty line.
    ValueError for what no certificate can name (empty, a line break, too long, too many)."""
    if len(hosts) > MAX_NAMES:
        raise ValueError(f"a self-signed pair names at most {MAX_NAMES} hosts, not {len(hosts)}")
    lines = []
    for host in hosts:
        raw = host.encode("utf-8")
        if not raw or b"\n" in raw or len(raw) > MAX_NAME_BYTES:
            raise ValueError(f"not a host name a certificate can be made out to: {host!r}")
        lines.append(raw + b"\n")
    return b"".join(lines) + b"\n"


def read_names(stream: BinaryIO) -> list[str]:
    """What `names_message` wrote, read with every line and the count bounded. An end of input
    before the empty line is a refusal: the agent gave up before it named the hosts."""
    names: list[str] = []
    while True:
        line = stream.readline(MAX_NAME_BYTES + 1)  # the longest name and its line break
        if line == b"\n":
            return names
        if not line:
            raise ValueError("the names ended before the empty line that closes them")
        if not line.endswith(b"\n"):
            raise ValueError(f"a host name longer than {MAX_NAME_BYTES} bytes")
        if len(names) == MAX_NAMES:
            raise ValueError(f"more than {MAX_NAMES} host names")
        names.append(line[:-1].decode("utf-8"))


def self_signed(hosts: Sequence[str], days: int = 365) -> tuple[bytes, bytes]:
    """A P-256 key and a certificate for `hosts` (names or IP addresses), both PEM."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for host in dict.fromkeys(hosts):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    subject = x509.Name(
        [x509.NameAttribute(NameOID.COMMON_NAME, hosts[0] if hosts else "devicemanager")]
    )
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def write_pair(directory: Path, hosts: Sequence[str]) -> None:
    """The pair into `directory`: the key readable by its owner only from its first byte."""
    cert, key = self_signed(hosts)
    fd = os.open(directory / KEY_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key)
    (directory / CERT_FILE).write_bytes(cert)


def main(argv: Sequence[str]) -> int:
    # A process that lives a fraction of a second: the cyclic collector would only cost it time.
    gc.disable()
    if len(argv) < 1:
        print("usage: python -m devicemanager.serve.mint DIR [HOST... | -]", file=sys.stderr)
        return 2
    hosts = list(argv[1:])
    if hosts == ["-"]:
        # The child's real work, done while the agent has yet to name the hosts.
        import cryptography.hazmat.primitives.asymmetric.ec
        import cryptography.hazmat.primitives.serialization
        import cryptography.x509  # noqa: F401

        hosts = read_names(sys.stdin.buffer)
    write_pair(Path(argv[0]), hosts)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
