"""A self-signed serving certificate, minted in a short-lived child process (R-O1).

cryptography is about 9 MiB of the resident set once imported (its Rust core and OpenSSL's
pages, docs/performance.md), and an agent without --cert-dir needs it once, at start, for one
key. `Certificates` therefore runs this module as a child (`python -m
devicemanager.serve.mint DIR HOST...`), which writes the pair into DIR and exits: the agent
loads the pair with the standard library's ssl and never imports cryptography itself unless
it must explain a refused pair (tls.why_refused).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from devicemanager.serve.tls import CERT_FILE, KEY_FILE


def self_signed(hosts: Sequence[str], days: int = 365) -> tuple[bytes, bytes]:
    """A P-256 key and a certificate for `hosts` (names or IP addresses), both PEM."""
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
    if len(argv) < 1:
        print("usage: python -m devicemanager.serve.mint DIR [HOST...]", file=sys.stderr)
        return 2
    write_pair(Path(argv[0]), list(argv[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
