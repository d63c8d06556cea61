"""A tolerant reader of Prometheus text as people paste it.

`prometheus_client.parser` is exact: one bad line and the whole text is rejected, which is
right for a scrape and wrong for a paste from an issue thread, where the last line is cut
mid-label-set, values are aligned with runs of spaces, a label set has spaces after its
commas or an ellipsis where labels were left out. This reader takes the same grammar line by
line and keeps every line it cannot read (with its number and why), so nothing read is ever
silently dropped. On well-formed text it yields exactly what `prometheus_client.parser` does
(a test holds the two together on the agent's own /metrics).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from enum import StrEnum

NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
ELLIPSES = ("…", "...")
# Lines longer than this are not Prometheus text anyone pasted; they are kept as unreadable.
MAX_LINE = 65536
EXCERPT = 80

_FLOATS = {"nan": math.nan, "+inf": math.inf, "inf": math.inf, "-inf": -math.inf}


class LineKind(StrEnum):
    EMPTY = "empty"
    SAMPLE = "sample"
    COMMENT = "comment"
    UNREADABLE = "unreadable"


@dataclass(frozen=True, slots=True)
class Sample:
    """One sample line: name, labels in the order written, value; `abbreviated` when the
    label set had an ellipsis in place of some labels."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float
    line: int
    abbreviated: bool = False
    by_name: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.by_name and self.labels:
            self.by_name.update(self.labels)

    def where(self) -> str:
        """Where a finding cites the sample: its line, or (a series from Prometheus's HTTP
        API, which has none: line 0) the series itself."""
        if self.line > 0:
            return f"line {self.line}"
        labels = ", ".join(f'{k}="{v}"' for k, v in self.labels)
        return f"series {excerpt(self.name + '{' + labels + '}')}"

    def label(self, *names: str) -> str | None:
        """The first of `names` this sample carries."""
        for wanted in names:
            value = self.by_name.get(wanted)
            if value is not None:
                return value
        return None


@dataclass(frozen=True, slots=True)
class Unreadable:
    line: int
    excerpt: str
    reason: str


@dataclass(frozen=True, slots=True)
class Parsed:
    """One source's text, read line by line."""

    source: str
    samples: tuple[Sample, ...]
    declared: tuple[tuple[str, str, int], ...]  # (family, "HELP"|"TYPE", line)
    types: tuple[tuple[str, str], ...]  # (family, type) as declared
    unreadable: tuple[Unreadable, ...]
    lines: int
    ends_with_newline: bool
    last_kind: LineKind  # of the last non-empty line


class _Bad(ValueError):
    pass


def excerpt(text: str) -> str:
    text = text.strip()
    return text if len(text) <= EXCERPT else text[: EXCERPT - 1] + "…"


def _value(token: str) -> float:
    lowered = token.lower()
    if lowered in _FLOATS:
        return _FLOATS[lowered]
    try:
        return float(token)
    except ValueError:
        raise _Bad(f"value {token!r} is not a number") from None


_PLAIN_VALUE = re.compile(r'"([^"\\]*)"')


def _quoted(text: str, start: int) -> tuple[str, int]:
    """The label value opening at text[start] == '"'; returns it unescaped and the index
    after the closing quote."""
    plain = _PLAIN_VALUE.match(text, start)
    if plain is not None:  # the common case: no escapes
        return plain.group(1), plain.end()
    out: list[str] = []
    i = start + 1
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            out.append({"n": "\n", "\\": "\\", '"': '"'}.get(nxt, "\\" + nxt))
            i += 2
            continue
        if ch == '"':
            return "".join(out), i + 1
        out.append(ch)
        i += 1
    raise _Bad("label value is not closed (the line may be cut off)")


def _labels(text: str, start: int) -> tuple[tuple[tuple[str, str], ...], bool, int]:
    """The label set opening at text[start] == '{'; returns labels, whether an ellipsis stood
    for some, and the index after '}'."""
    labels: list[tuple[str, str]] = []
    seen: set[str] = set()
    abbreviated = False
    i = start + 1
    while True:
        while i < len(text) and text[i] in " \t,":
            i += 1
        if i >= len(text):
            raise _Bad("label set is not closed (the line may be cut off)")
        if text[i] == "}":
            return tuple(labels), abbreviated, i + 1
        ellipsis = next((e for e in ELLIPSES if text.startswith(e, i)), None)
        if ellipsis is not None:
            abbreviated = True
            i += len(ellipsis)
            continue
        match = LABEL_NAME.match(text, i)
        if match is None:
            raise _Bad(f"unexpected {text[i]!r} in the label set")
        name = match.group()
        i = match.end()
        while i < len(text) and text[i] in " \t":
            i += 1
        if i >= len(text) or text[i] != "=":
            raise _Bad(f"label {name} has no '='")
        i += 1
        while i < len(text) and text[i] in " \t":
            i += 1
        if i >= len(text) or text[i] != '"':
            raise _Bad(f"label {name} has no quoted value")
        value, i = _quoted(text, i)
        if name not in seen:  # a repeated name keeps its first value, as Prometheus rejects it
            seen.add(name)
            labels.append((name, value))


def parse_line(text: str, number: int) -> Sample:
    """One sample line, or _Bad saying why not."""
    match = NAME.match(text)
    if match is None:
        raise _Bad("does not start with a metric name")
    name = match.group()
    i = match.end()
    while i < len(text) and text[i] in " \t":
        i += 1
    labels: tuple[tuple[str, str], ...] = ()
    abbreviated = False
    if i < len(text) and text[i] == "{":
        labels, abbreviated, i = _labels(text, i)
    rest = text[i:].split()
    if not rest:
        raise _Bad("has no value (the line may be cut off)")
    if len(rest) > 2:
        raise _Bad("has more than a value and a timestamp after the labels")
    value = _value(rest[0])
    if len(rest) == 2:
        try:
            float(rest[1])
        except ValueError:
            raise _Bad(f"timestamp {rest[1]!r} is not a number") from None
    return Sample(name, labels, value, number, abbreviated)


def parse(source: str, text: str) -> Parsed:
    """Every line of `text`: samples, HELP/TYPE declarations, and the lines that are neither."""
    samples: list[Sample] = []
    declared: list[tuple[str, str, int]] = []
    types: list[tuple[str, str]] = []
    unreadable: list[Unreadable] = []
    last = LineKind.EMPTY
    lines = text.splitlines()
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line:
            continue
        if len(line) > MAX_LINE:
            unreadable.append(Unreadable(number, excerpt(line), "line is too long"))
            last = LineKind.UNREADABLE
            continue
        if line.startswith("#"):
            last = LineKind.COMMENT
            parts = line[1:].split(None, 3)
            if len(parts) >= 2 and parts[0] in ("HELP", "TYPE") and NAME.fullmatch(parts[1]):
                declared.append((parts[1], parts[0], number))
                if parts[0] == "TYPE" and len(parts) >= 3:
                    types.append((parts[1], parts[2]))
            continue
        try:
            samples.append(parse_line(line, number))
            last = LineKind.SAMPLE
        except _Bad as exc:
            unreadable.append(Unreadable(number, excerpt(line), str(exc)))
            last = LineKind.UNREADABLE
    return Parsed(
        source=source,
        samples=tuple(samples),
        declared=tuple(declared),
        types=tuple(types),
        unreadable=tuple(unreadable),
        lines=len(lines),
        ends_with_newline=text.endswith("\n"),
        last_kind=last,
    )
