"""Where the text comes from: a file, standard input, or an http(s) URL. The only I/O of the
report; every read is bounded in size, and a URL also in time, the whole request within
`--timeout` (devicemanager/deadline.py)."""

from __future__ import annotations

from typing import BinaryIO

import httpx

from devicemanager import deadline

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_TIMEOUT = 10.0


class SourceError(Exception):
    """A source that could not be reached or read; the message names it and says why."""


def _bounded(stream: BinaryIO, name: str, max_bytes: int) -> bytes:
    data = stream.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise SourceError(f"{name}: larger than {max_bytes} bytes (raise --max-bytes to read it)")
    return data


def _decode(data: bytes) -> str:
    # A paste may carry any bytes; undecodable ones become U+FFFD and their lines are reported
    # as unreadable, never an exception.
    return data.decode("utf-8", errors="replace")


def _fetch(url: str, cacert: str | None, timeout: float, max_bytes: int) -> bytes:
    # Like `snapshot`: this agent's certificate is self-signed unless it was given
    # --cert-dir, so the default is no verification; --cacert verifies against a CA.
    verify: str | bool = cacert if cacert else False
    chunks: list[bytes] = []
    size = 0
    try:
        whole, _ = deadline.client(timeout, verify=verify, follow_redirects=True)
        with (
            whole as client,
            client.stream("GET", url, headers={"Accept": "text/plain"}) as response,
        ):
            if response.status_code >= 400:
                raise SourceError(f"{url}: HTTP {response.status_code}")
            for chunk in response.iter_bytes():
                size += len(chunk)
                if size > max_bytes:
                    raise SourceError(
                        f"{url}: larger than {max_bytes} bytes (raise --max-bytes to read it)"
                    )
                chunks.append(chunk)
    except httpx.TimeoutException:
        raise SourceError(f"{url}: not whole within {timeout:g} s (--timeout)") from None
    except httpx.HTTPError as exc:
        raise SourceError(f"{url}: {type(exc).__name__}: {exc}") from None
    except OSError as exc:  # a --cacert that cannot be read
        raise SourceError(f"{url}: {exc}") from None
    return b"".join(chunks)


def read_source(
    spec: str,
    stdin: BinaryIO,
    *,
    cacert: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> tuple[str, str]:
    """(name, text) of one SOURCE: `-` for standard input, an http(s) URL, else a file."""
    if spec == "-":
        return "stdin", _decode(_bounded(stdin, "stdin", max_bytes))
    if spec.startswith(("http://", "https://")):
        return spec, _decode(_fetch(spec, cacert, timeout, max_bytes))
    try:
        with open(spec, "rb") as f:
            return spec, _decode(_bounded(f, spec, max_bytes))
    except OSError as exc:
        raise SourceError(f"{spec}: {exc.strerror or exc}") from None
