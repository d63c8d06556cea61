"""`summarize --prometheus URL`: the series the report reads, from Prometheus's HTTP API (or
one that answers as it does: Thanos Query, Mimir, VictoriaMetrics), as the same samples the
text parser yields, so one reader makes one report of either.

One instant query per family the report reads (families.py), all at one evaluation time, with
the selection's labels as matchers (a superset: `select` then keeps exactly what it keeps of
text). Each series' scrape target (`instance`) is its source, as a file is for text; the
`job` and `instance` labels Prometheus adds are not the exporter's and are dropped.

Bounded: each answer in size (`max_bytes`), every request in time (whole: deadline.py), all
answers together in series (`max_series`). An answer that is not a successful vector is a
`SourceError`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from devicemanager import deadline
from devicemanager.deadline import Deadline
from devicemanager.report import idle
from devicemanager.report.families import FAMILIES, Family, Scope, labels_for
from devicemanager.report.parse import LineKind, Parsed, Sample
from devicemanager.report.selection import Selection, keeps_container, select
from devicemanager.report.sources import SourceError

DEFAULT_MAX_SERIES = 200_000
QUERY_PATH = "/api/v1/query"
# Labels a Prometheus server adds for the target it scraped: the source, not the series.
TARGET_LABELS = ("instance", "job")
EVERYTHING = Selection()


def quote(value: str) -> str:
    """A PromQL string literal (double-quoted, Go escapes)."""
    return json.dumps(value, ensure_ascii=False)


def _selector(name: str, matchers: Sequence[tuple[str, str]]) -> str:
    inside = ",".join(f"{k}={quote(v)}" for k, v in matchers)
    return f"{name}{{{inside}}}"


def query_for(
    family: Family, selection: Selection, extra: Sequence[tuple[str, str]] = ()
) -> str | None:
    """The instant query that asks for a family's series under `selection` (None: the
    selection keeps none of them). The workload's label may be under any of the names the
    family uses, or under `exported_` one: the query is the union over them of the most
    selective label asked for."""
    if family.scope is Scope.QUOTA:
        if not selection.keeps_quotas():
            return None
        meaning, wanted = "namespace", selection.namespace
    elif family.scope is Scope.CONTAINER:
        meaning, wanted = next(
            ((m, v) for m, v in (("pod", selection.pod), ("namespace", selection.namespace),
                                 ("node", selection.node)) if v is not None),
            ("node", None),
        )  # fmt: skip
    else:  # a device's series (or HAMi-DRA's either-or) names only its node
        meaning, wanted = "node", selection.node
    if wanted is None:
        return _selector(family.name, extra)
    names = labels_for(family)[meaning]
    alternatives = [
        _selector(family.name, [*extra, (label, wanted)])
        for name in names
        for label in (f"exported_{name}", name)
    ]
    return " or ".join(alternatives)


def query_url(base: str) -> str:
    """The API's query endpoint under `base` (a server, or a path prefix such as Mimir's
    /prometheus); a URL that already ends in /api/v1/query is taken as it is."""
    base = base.rstrip("/")
    return base if base.endswith(QUERY_PATH) else base + QUERY_PATH


def _too_many(q: Query) -> str:
    return (
        f"{q.url}: more than {q.max_series} series (narrow the report with "
        "--node, --namespace, --pod or --label, or raise --max-series)"
    )


class _Answers:
    """Series gathered so far, by source, under the series cap."""

    def __init__(self, q: Query) -> None:
        self.q = q
        self.base = q.url
        self.max_series = q.max_series
        self.count = 0
        self.by_source: dict[str, list[Sample]] = {}

    def add(self, family: Family, result: Any) -> None:
        if not isinstance(result, list):
            raise SourceError(f"{self.base}: {family.name}: the answer's result is not a list")
        self.count += len(result)
        if self.count > self.max_series:
            raise SourceError(_too_many(self.q))
        for item in result:
            sample, source = sample_of(family, item, self.base)
            self.by_source.setdefault(source, []).append(sample)

    @property
    def room(self) -> int:
        """Series --max-series still allows."""
        return self.max_series - self.count


def sample_of(family: Family, item: Any, base: str) -> tuple[Sample, str]:
    """One vector element as a sample of `family`, and its source (the scrape target)."""
    try:
        metric: Mapping[str, str] = item["metric"]
        _, text = item["value"]
        value = float(text)  # "NaN", "+Inf", "-Inf" included
        labels = tuple(sorted((str(k), str(v)) for k, v in metric.items() if k != "__name__"))
    except (KeyError, TypeError, ValueError):
        raise SourceError(f"{base}: {family.name}: a series in the answer is malformed") from None
    source = metric.get("instance") or base
    kept = tuple(kv for kv in labels if kv[0] not in TARGET_LABELS)
    return Sample(family.name, kept, value, 0), source


@dataclass(frozen=True, slots=True)
class Query:
    """How to ask: where, as whom, within what."""

    url: str
    token: str | None = None
    cacert: str | None = None  # None: the system's CAs
    timeout: float = 10.0
    max_bytes: int = 64 * 1024 * 1024
    max_series: int = DEFAULT_MAX_SERIES
    labels: tuple[tuple[str, str], ...] = ()  # matchers added to every query
    headers: tuple[tuple[str, str], ...] = field(default=())
    at: float | None = None  # evaluation time (Unix seconds); None: now


def series_in(body: bytes | bytearray) -> int:
    """How many series a vector answer holds at most, counted in its bytes before it is
    decoded: each element has one `"metric"` key (a label named `metric` counts once more,
    so this errs high, never low). Decoding a million series to count them took 703 MB."""
    return body.count(b'"metric":') + body.count(b'"metric" :')


def _answer(
    client: httpx.Client,
    whole: Deadline,
    q: Query,
    family: Family,
    promql: str,
    at: float,
    room: int,
) -> Any:
    """The query's vector, decoded only when it holds at most `room` series (what is left of
    --max-series)."""
    endpoint = query_url(q.url)
    body = bytearray()  # grown in place: a list of chunks joined would be the answer twice
    size = 0
    whole.restart()  # each query whole within --timeout
    try:
        with client.stream(
            "GET", endpoint, params={"query": promql, "time": f"{at:.3f}"}
        ) as response:
            for chunk in response.iter_bytes():
                size += len(chunk)
                if size > q.max_bytes:
                    raise SourceError(
                        f"{q.url}: {family.name}: the answer is larger than {q.max_bytes} "
                        "bytes (narrow the report, or raise --max-bytes)"
                    )
                body += chunk
            status = response.status_code
    except httpx.TimeoutException:
        raise SourceError(
            f"{q.url}: {family.name}: not whole within {q.timeout:g} s (--timeout)"
        ) from None
    except httpx.HTTPError as exc:
        raise SourceError(f"{q.url}: {type(exc).__name__}: {exc}") from None
    except OSError as exc:  # a --cacert that cannot be read
        raise SourceError(f"{q.url}: {exc}") from None
    if status < 400 and series_in(body) > room:
        raise SourceError(_too_many(q))
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the decoder goes
        what = f"HTTP {status}" if status >= 400 else "the answer"
        raise SourceError(
            f"{endpoint}: {what} is not JSON: not a Prometheus HTTP API (is the URL's path "
            "prefix right?)"
        ) from None
    if not isinstance(doc, dict):
        raise SourceError(f"{endpoint}: the answer is not a Prometheus API object")
    if status >= 400 or doc.get("status") != "success":
        why = doc.get("error") or doc.get("status")
        kind = doc.get("errorType")
        said = f"{kind}: {why}" if kind else str(why)
        raise SourceError(f"{endpoint}: HTTP {status}: {family.name}: {said}")
    data = doc.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "vector":
        got = data.get("resultType") if isinstance(data, dict) else None
        raise SourceError(f"{endpoint}: {family.name}: the answer is not a vector ({got})")
    return data.get("result")


def _client(q: Query) -> tuple[httpx.Client, Deadline]:
    """The HTTP client every query of `q` is asked through (its headers, token and CA), and
    the deadline each query restarts."""
    headers = {"Accept": "application/json", **dict(q.headers)}
    if q.token is not None:
        headers["Authorization"] = f"Bearer {q.token}"
    verify: str | bool = q.cacert if q.cacert else True
    return deadline.client(q.timeout, verify=verify, headers=headers, follow_redirects=True)


def read_prometheus(
    q: Query, selection: Selection = EVERYTHING, families: Sequence[Family] = FAMILIES
) -> tuple[Parsed, ...]:
    """Every family's series at one moment, as parsed sources (one per scrape target), with
    exactly what `selection` keeps."""
    at = time.time() if q.at is None else q.at
    answers = _Answers(q)
    client, whole = _client(q)
    with client:
        for family in families:
            promql = query_for(family, selection, q.labels)
            if promql is not None:
                answers.add(family, _answer(client, whole, q, family, promql, at, answers.room))
    parsed = [
        Parsed(
            source=source,
            samples=tuple(samples),
            declared=(),
            types=(),
            unreadable=(),
            lines=0,
            ends_with_newline=True,
            last_kind=LineKind.SAMPLE,
        )
        for source, samples in sorted(answers.by_source.items())
    ]
    return select(parsed, selection)


def read_window(
    q: Query,
    window: float,
    selection: Selection = EVERYTHING,
    step: float | None = None,
    thresholds: idle.Thresholds = idle.DEFAULT_THRESHOLDS,
) -> idle.IdleReport:
    """`--window`: each grant's figures over the `window` seconds before `q.at` (instant
    queries of `count_over_time`, `sum_over_time` and `max_over_time`, idle.py), from the
    first source (this agent's per-grant families, else HAMi's monitor's, current names then
    legacy) that held any grant in it; with exactly the grants `selection` keeps."""
    at = time.time() if q.at is None else q.at
    step = idle.step_for(window) if step is None else step
    counted = 0
    client, whole = _client(q)
    with client:
        for source in idle.SOURCES:
            answers: dict[tuple[idle.Role, idle.Stat], list[tuple[idle.Key, float]]] = {}
            for role, stat, promql in idle.queries(source, window, step, q.labels):
                family = source.family(role)
                result = _answer(client, whole, q, family, promql, at, q.max_series - counted)
                if not isinstance(result, list):
                    raise SourceError(f"{q.url}: {promql}: the answer's result is not a list")
                counted += len(result)
                if counted > q.max_series:
                    raise SourceError(_too_many(q))
                rows = answers.setdefault((role, stat), [])
                for item in result:
                    sample, _ = sample_of(family, item, q.url)
                    rows.append((idle.key_of(dict(item["metric"])), sample.value))
                if role is idle.Role.HELD and stat is idle.Stat.STEPS and not result:
                    break  # nothing held under these names: the next source
            grants = [
                g
                for g in idle.grants_of(source, answers)
                if keeps_container(
                    selection, source.family(idle.Role.HELD), Sample(source.held, g.labels, 0, 0)
                )
            ]
            if answers.get((idle.Role.HELD, idle.Stat.STEPS)):
                return idle.idle_report(grants, source.name, window, step, at, thresholds)
    return idle.idle_report([], None, window, step, at, thresholds)
