"""A client of a running agent's HTTPS surface, for operators: `devicemanager snapshot` and
`devicemanager metrics`, typed in a `kubectl exec` shell where there is no curl.

Fetching says plainly what went wrong (unreachable, not a snapshot, not Prometheus text);
rendering turns the snapshot, and the per-Instance series of /metrics, into tables a person
reads. Every input is bounded: an answer in size (MAX_BYTES) and in time (`timeout` for the
whole request, not per read), a --cacert or token file in size, read before it is used.
"""

from __future__ import annotations

import ipaddress
import json
import os
import ssl
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from devicemanager import deadline
from devicemanager.serve import AGENT, METRICS_URL, SNAPSHOT_URL

MAX_BYTES = 16 << 20  # far above a full snapshot (4 MiB) or exposition; a bound, not a goal
MAX_CA_BYTES = 1 << 20  # a CA bundle is tens of KiB; the system's whole one is about 200
MAX_TOKEN_BYTES = 16 * 1024  # the longest bearer token the agent takes (serve/access.py)


class FetchError(Exception):
    """What went wrong reaching or reading the agent; `usage` when the caller's input is wrong."""

    def __init__(self, message: str, usage: bool = False) -> None:
        super().__init__(message)
        self.usage = usage


class NotServed(FetchError):
    """The URL answered, with something other than what the command reads."""


def read_bounded(flag: str, path: str | Path, limit: int, what: str) -> bytes:
    """A small file a flag names, read whole but never past `limit` (`/dev/zero`, a log file
    given by mistake): a usage error naming the flag otherwise. Opened without blocking, so a
    FIFO or a socket is refused at once rather than waited on for a writer."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise FetchError(f"{flag}: {exc.strerror or exc}: {path}", usage=True) from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
            raise FetchError(f"{flag}: {path} is a FIFO or a socket, not {what}", usage=True)
        os.set_blocking(fd, True)  # a file from here on: blocking reads, as any
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise FetchError(f"{flag}: {exc.strerror or exc}: {path}", usage=True) from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise FetchError(f"{flag}: {path} is larger than {_size(limit)}: not {what}", usage=True)
    return data


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def json_document(data: bytes | str) -> Any:
    """JSON as the commands take it from a file or a server: RFC 8259's, so not Python's
    `NaN`, `Infinity` and `-Infinity`; nested too deep for the decoder (it recurses, and a
    document of 100,000 `[` ended the command with a RecursionError) is not JSON either.
    ValueError, saying which."""
    try:
        return json.loads(data, parse_constant=_no_constant)
    except RecursionError:
        raise ValueError("nested too deeply to read") from None


def _size(limit: int) -> str:
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if limit >= 1 << shift and limit % (1 << shift) == 0:
            return f"{limit >> shift} {unit}"
    return f"{limit} bytes"


def ca_context(flag: str, cacert: str) -> ssl.SSLContext:
    """A client context trusting the certificates of `cacert` (PEM, or one DER certificate);
    a file that holds none (a key, junk, nothing) is a usage error."""
    if not Path(cacert).is_file():
        raise FetchError(f"{flag}: {cacert} is not a file", usage=True)
    data = read_bounded(flag, cacert, MAX_CA_BYTES, "a CA certificate file")
    context = ssl.create_default_context()
    try:
        if b"-----BEGIN" in data:
            context.load_verify_locations(cadata=data.decode("ascii", "ignore"))
        else:
            context.load_verify_locations(cadata=data)
    except (ssl.SSLError, ValueError):
        raise FetchError(
            f"{flag}: {cacert} holds no CA certificate (PEM or DER) to verify the agent with",
            usage=True,
        ) from None
    return context


def verify_of(cacert: str | None) -> ssl.SSLContext | bool:
    """The agent's certificate is self-signed unless it was given --cert-dir: verified only
    against a CA the operator names."""
    return False if cacert is None else ca_context("--cacert", cacert)


def token_goes_to(url: str, verified: bool) -> bool:
    """Whether the pod's own token (not one given by --token-file) may be sent to `url`: over
    HTTPS, to this host (the agent the command runs beside) or to a server verified against
    --cacert; never to whatever answers an address elsewhere."""
    parts = urlsplit(url)
    if parts.scheme != "https":
        return False
    if verified:
        return True
    host = parts.hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def fetch(url: str, cacert: str | None, timeout: float, token: str | None = None) -> httpx.Response:
    """One GET, whole within `timeout` seconds and MAX_BYTES; with `token` as a bearer token
    (what --access-control=kubernetes asks for)."""
    verify = verify_of(cacert)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    whole, _ = deadline.client(timeout, verify=verify)
    try:
        with whole as client, client.stream("GET", url, headers=headers) as response:
            chunks, size = [], 0
            for chunk in response.iter_bytes():
                chunks.append(chunk)
                size += len(chunk)
                if size > MAX_BYTES:
                    raise FetchError(f"{url}: the answer is larger than {MAX_BYTES >> 20} MiB")
            response._content = b"".join(chunks)
    except httpx.InvalidURL as exc:
        raise FetchError(f"--url: {exc}", usage=True) from None
    except httpx.UnsupportedProtocol as exc:
        raise FetchError(f"{url}: {exc}", usage=True) from None
    except httpx.TimeoutException:
        raise FetchError(f"{url}: the answer did not arrive whole in {timeout:g}s") from None
    except httpx.HTTPError as exc:
        raise FetchError(f"{url}: {type(exc).__name__}: {exc}") from None
    if response.status_code != 200:
        raise FetchError(f"{url}: answered {response.status_code} {response.text.strip()[:200]}")
    return response


EXPOSITION_TYPES = ("text/plain", "application/openmetrics-text")


def fetch_metrics(url: str, cacert: str | None, timeout: float, token: str | None = None) -> str:
    """A Prometheus text exposition: an answer of another type, or text that does not parse
    as one with a sample in it (`ok` from a probe, a JSON document), is said to be so."""
    from prometheus_client.parser import text_string_to_metric_families

    response = fetch(url, cacert, timeout, token)
    kind = response.headers.get("content-type", "?")
    text = response.text
    media = kind.partition(";")[0].strip().lower()
    try:
        ok = media in EXPOSITION_TYPES and any(
            family.samples for family in text_string_to_metric_families(text)
        )
    except ValueError:
        ok = False
    if not ok:
        raise NotServed(
            f"{url} does not serve Prometheus text (it answered {kind}); "
            f"the agent serves it at {METRICS_URL.removeprefix(AGENT)}"
        )
    return text


def metrics_url_beside(snapshot_url: str) -> str:
    """/metrics of the agent that serves `snapshot_url`."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(snapshot_url)
    return urlunsplit((parts.scheme, parts.netloc, "/metrics", "", ""))


def fetch_snapshot(
    url: str, cacert: str | None, timeout: float, token: str | None = None
) -> dict[str, Any]:
    response = fetch(url, cacert, timeout, token)
    kind = response.headers.get("content-type", "?")
    try:
        doc = json_document(response.content)
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or "groups" not in doc or "timestamp" not in doc:
        raise NotServed(
            f"{url} does not serve a snapshot (it answered {kind}); "
            f"the agent serves it at {SNAPSHOT_URL.removeprefix(AGENT)}"
        )
    return doc


# -- rendering ------------------------------------------------------------------------------------


def _fmt(value: Any, unit: str = "") -> str:
    return "-" if value is None else f"{value}{unit}"


def _table(header: Iterable[str], rows: Iterable[Iterable[Any]]) -> list[str]:
    cells = [list(header), *([_fmt(c) for c in row] for row in rows)]
    widths = [max(len(str(r[i])) for r in cells) for i in range(len(cells[0]))]
    return [
        "  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells
    ]


@dataclass(frozen=True, slots=True)
class Holding:
    """One grant's series in /metrics: who holds which card in which mode, and its figures."""

    namespace: str
    instance: str
    manufacturer: str
    id: str
    index: str
    mode: str
    figures: Mapping[str, float]


def holdings(metrics_text: str) -> list[Holding]:
    """The per-Instance accelerator series of an exposition, one Holding per grant."""
    from prometheus_client.parser import text_string_to_metric_families

    prefix = "gpustack_instance_accelerator_"
    found: dict[tuple[str, ...], dict[str, float]] = {}
    for family in text_string_to_metric_families(metrics_text):
        if not family.name.startswith(prefix):
            continue
        for sample in family.samples:
            labels = sample.labels
            key = tuple(
                labels.get(k, "")
                for k in ("namespace", "instance_name", "manufacturer", "id", "index", "mode")
            )
            found.setdefault(key, {})[family.name.removeprefix(prefix)] = sample.value
    return [
        Holding(namespace, instance, manufacturer, id_, index, mode, figures)
        for (namespace, instance, manufacturer, id_, index, mode), figures in sorted(found.items())
    ]


def render_snapshot(doc: Mapping[str, Any], held: Iterable[Holding] | None = None) -> str:
    """A snapshot as an operator reads it over `kubectl exec`: the backends, one line per card,
    the grants each Instance holds with its own figures, and why per-process figures are
    absent where they are."""
    lines = [
        f"node {doc.get('node') or '?'}  taken {doc.get('timestamp')}  "
        f"period {doc.get('periodSeconds')}s"
    ]
    for backend in doc.get("backends") or []:
        error = f"  ({backend['error']})" if backend.get("error") else ""
        via = f" via {backend['via']}" if backend.get("via") else ""
        lines.append(f"backend {backend['manufacturer']}: {backend['state']}{via}{error}")
    for group in doc.get("groups") or []:
        lines += [
            "",
            f"{group['manufacturer']} (driver {_fmt(group.get('driverVersion'))}, "
            f"read {group.get('timestamp')})",
        ]
        rows = []
        for a in group.get("accelerators") or []:
            health = (
                f"UNHEALTHY {a.get('unhealthyReason') or ''}".strip()
                if a.get("unhealthy")
                else "ok"
            )
            rows.append(
                (
                    a.get("index", "?"),
                    a.get("id", "?"),
                    f"{_fmt(a.get('memoryUsage'))}/{_fmt(a.get('memory'))}",
                    a.get("memoryUtilization"),
                    a.get("coresUtilization"),
                    a.get("temperature"),
                    a.get("powerUsage"),
                    health,
                )
            )
        lines += _table(
            ("IDX", "ID", "MEM USED/TOTAL MiB", "MEM%", "CORE%", "TEMP C", "POWER W", "HEALTH"),
            rows,
        )
    if not doc.get("groups"):
        lines.append("no accelerator figures in this snapshot")
    held = list(held or ())
    if held:
        lines += ["", "grants (each Instance's own figures; - = not measured)"]
        lines += _table(
            ("NAMESPACE", "INSTANCE", "MODE", "IDX", "ID", "MEM USED/TOTAL MiB", "CORE%"),
            (
                (
                    h.namespace,
                    h.instance,
                    h.mode,
                    h.index,
                    h.id,
                    f"{_int(h.figures.get('memory_used_mib'))}/"
                    f"{_int(h.figures.get('memory_total_mib'))}",
                    h.figures.get("cores_utilization_percent"),
                )
                for h in held
            ),
        )
    slices = doc.get("slices")
    if isinstance(slices, Mapping):
        absent = [
            (d.get("manufacturer"), d.get("deviceID"), d.get("memoryReason"), d.get("coresReason"))
            for d in slices.get("devices") or []
            if isinstance(d, Mapping) and (d.get("memoryReason") or d.get("coresReason"))
        ]
        if absent:
            lines += ["", "per-process figures absent"]
            lines += _table(("MANUFACTURER", "ID", "MEMORY", "CORES"), absent)
    return "\n".join(lines)


def _int(value: float | None) -> str:
    return "-" if value is None else str(int(value))
