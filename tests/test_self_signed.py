"""The self-signed serving pair, minted by a short-lived child (serve/mint.py; R-O1).

An agent started without --cert-dir serves a certificate that a child process made with
cryptography; the agent itself loads the pair with the standard library's ssl, so
cryptography's shared objects are never mapped into the long-lived process (about 9 MiB of
its resident set, docs/performance.md). Checked on the real agent through /proc/<pid>/maps.
"""

from __future__ import annotations

import contextlib
import io
import ipaddress
import json
import ssl
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509
from hypothesis import given, settings
from hypothesis import strategies as st

from devicemanager.serve import tls
from devicemanager.serve.mint import (
    MAX_NAME_BYTES,
    MAX_NAMES,
    names_message,
    read_names,
    write_pair,
)
from tests.conftest import NODES, REPO, Agent, agent_env

pytestmark = pytest.mark.timeout(60)
H100 = NODES / "h100-8gpu-mixed"


def test_the_agent_serves_a_minted_pair_without_mapping_cryptography(launch) -> None:  # type: ignore[no-untyped-def]
    agent: Agent = launch("--replay", str(H100), "--monitor-period", "0.5")
    agent.wait_for("/readyz", 200)
    der = ssl.get_server_certificate(("127.0.0.1", agent.port))
    cert = x509.load_pem_x509_certificate(der.encode())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in names.get_values_for_type(x509.IPAddress)
    maps = Path(f"/proc/{agent.proc.pid}/maps").read_text()
    assert "/ssl" in maps or "libssl" in maps  # the maps are the agent's, which serves TLS
    assert "cryptography" not in maps
    assert "_rust.abi3" not in maps


def test_the_minted_key_is_its_owners_alone_from_its_first_byte(tmp_path: Path) -> None:
    write_pair(tmp_path, ["node-a.example", "10.0.0.7"])
    assert stat.S_IMODE((tmp_path / tls.KEY_FILE).stat().st_mode) == 0o600
    cert = x509.load_pem_x509_certificate((tmp_path / tls.CERT_FILE).read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["node-a.example"]
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("10.0.0.7")]
    # The pair loads as the agent loads it.
    tls.server_context(tmp_path / tls.CERT_FILE, tmp_path / tls.KEY_FILE)


def test_minting_through_the_child_writes_a_pair_certificates_load(tmp_path: Path) -> None:
    tls.mint_self_signed(tmp_path, ["localhost", "127.0.0.1"])
    assert sorted(p.name for p in tmp_path.iterdir()) == [tls.CERT_FILE, tls.KEY_FILE]
    tls.server_context(tmp_path / tls.CERT_FILE, tmp_path / tls.KEY_FILE)


def test_a_child_that_fails_is_a_clear_error_at_start(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match=r"minting a self-signed certificate failed \(exit 1\)"):
        tls.mint_self_signed(tmp_path / "gone", ["localhost"])


def test_an_existing_key_is_never_overwritten(tmp_path: Path) -> None:
    # O_EXCL: the child refuses a directory that already holds a key, rather than write a new
    # key into a file someone else may already be able to read.
    (tmp_path / tls.KEY_FILE).write_bytes(b"someone else's\n")
    with pytest.raises(RuntimeError, match="FileExistsError"):
        tls.mint_self_signed(tmp_path, ["localhost"])
    assert (tmp_path / tls.KEY_FILE).read_bytes() == b"someone else's\n"


def test_a_start_refused_after_minting_began_leaves_no_key_behind(tmp_path: Path) -> None:
    """(R-O1) `serve` starts the self-signed pair's child before it imports the agent; a start
    then refused (here a --proc-root that is not there, exit 2) ends the child and removes its
    private directory: no key material outlives a start that never served."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    done = subprocess.run(
        [
            *(sys.executable, "-m", "devicemanager", "serve", "--replay", str(H100)),
            *("--proc-root", str(tmp_path / "gone"), "--secure-port", "0"),
        ],
        env=agent_env({"TMPDIR": str(scratch)}),
        cwd=REPO,
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert b"--proc-root" in done.stderr
    assert list(scratch.iterdir()) == []
    left = []  # the child, killed, not left to finish a pair into a directory that is gone
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            if str(scratch).encode() in cmdline.read_bytes():
                left.append(cmdline.parent.name)
    assert left == []


def test_the_early_pair_names_the_replayed_node(launch) -> None:  # type: ignore[no-untyped-def]
    """(R-O1) The pair minted while the agent starts is made out to the names it serves under,
    the recorded node's among them, as one minted once the node is resolved."""
    agent: Agent = launch("--replay", str(NODES / "mi300x-8gpu-cpx-mixed"))
    agent.wait_for("/readyz", 200)
    node = json.loads((NODES / "mi300x-8gpu-cpx-mixed" / "scenario.json").read_text())["node"]
    pem = ssl.get_server_certificate(("127.0.0.1", agent.port))
    cert = x509.load_pem_x509_certificate(pem.encode())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert node in names.get_values_for_type(x509.DNSName)


# -- the child started before the names are known (R-O1) ---------------------------------------
# `serve` starts the child as soon as its flags are read, so that importing cryptography happens
# on another core while the agent imports itself, and hands it the names once the node is
# resolved (`DIR -`: the names on standard input, one a line, then an empty line).

HOST = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\n"), min_size=1
).filter(lambda h: len(h.encode()) <= MAX_NAME_BYTES)


@given(st.lists(HOST, max_size=MAX_NAMES))
@settings(max_examples=200, deadline=None)
def test_the_names_read_are_the_names_written(hosts: list[str]) -> None:
    message = names_message(hosts)
    stream = io.BytesIO(message + b"what follows is not the reader's\n")
    assert read_names(stream) == hosts
    assert stream.tell() == len(message)  # it stops at the empty line


@pytest.mark.parametrize(
    "hosts",
    [[""], ["a\nb"], ["x" * (MAX_NAME_BYTES + 1)], ["é" * 127], ["h"] * (MAX_NAMES + 1)],
    ids=["empty", "line-break", "too-long", "too-long-in-utf8", "too-many"],
)
def test_names_no_certificate_can_hold_are_refused_before_sending(hosts: list[str]) -> None:
    with pytest.raises(ValueError):
        names_message(hosts)


@pytest.mark.parametrize(
    ("message", "why"),
    [
        (b"", "ended before the empty line"),
        (b"node-a\n", "ended before the empty line"),
        (b"x" * (MAX_NAME_BYTES + 1) + b"\n\n", "longer than 253 bytes"),
        (b"h\n" * (MAX_NAMES + 1) + b"\n", "more than 64"),
        (b"\xff\n\n", "utf-8"),
    ],
    ids=["nothing", "no-empty-line", "too-long", "too-many", "not-utf8"],
)
def test_the_child_refuses_names_it_cannot_read(message: bytes, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        read_names(io.BytesIO(message))


def test_a_child_started_first_and_named_later_writes_the_pair_for_those_names(
    tmp_path: Path,
) -> None:
    minting = tls.Minting(directory=tmp_path)
    assert minting.hosts is None and list(tmp_path.iterdir()) == []  # nothing before the names
    minting.name(["node-b.example", "10.0.0.9"])
    minting.wait()
    cert = x509.load_pem_x509_certificate((tmp_path / tls.CERT_FILE).read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["node-b.example"]
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("10.0.0.9")]
    tls.server_context(tmp_path / tls.CERT_FILE, tmp_path / tls.KEY_FILE)


def test_a_child_never_named_is_an_error_not_a_wait() -> None:
    minting = tls.Minting()
    directory = minting.directory
    try:
        with pytest.raises(RuntimeError, match="never given the names"):
            minting.wait()
        with pytest.raises(ValueError, match="not a host name"):
            minting.name(["bad\nname"])
        assert minting.hosts is None  # a refused name is not taken
    finally:
        minting.abandon()
    assert not directory.exists()


def test_a_refused_name_at_start_leaves_no_child_and_no_directory(tmp_path: Path) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    with pytest.raises(ValueError, match="not a host name"):
        tls.Minting(["x" * (MAX_NAME_BYTES + 1)], directory=scratch / "pair")
    assert list(scratch.iterdir()) == []


def test_a_child_whose_agent_went_away_writes_no_key(tmp_path: Path) -> None:
    """The agent ended (its end of the pipe closed) before it named the hosts: the child says
    so and exits 1, and no key is written."""
    done = subprocess.run(
        [sys.executable, "-m", "devicemanager.serve.mint", str(tmp_path), "-"],
        env=agent_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 1
    assert b"ended before the empty line" in done.stderr
    assert list(tmp_path.iterdir()) == []
