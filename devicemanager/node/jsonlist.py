"""A Kubernetes list (`{"kind": "PodList", "metadata": {...}, "items": [...]}`) split into its
items without decoding them, so that each item is decoded on its own. Pure.

Why: `json.loads` on a whole list is all or nothing, and costs what the biggest item costs. One
item with an invalid UTF-8 byte, an integer Python refuses, or nesting too deep fails every
other item with it; one item of 10 MiB (far past what the API server can store) is decoded
into some 30 times its size before anything can look at it. Split first, each item is judged
alone: one past its bound is refused by its length, never decoded, and one that does not
decode is refused alone, with its reason.

The split reads the top level's keys and skims each item to find where it ends (the C decoder,
keeping nothing of it); each item's text is then decoded alone. The text is read with Python's
`surrogateescape`, so a byte UTF-8 does not allow is seen in the item that holds it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

# Skims one JSON value to find where it ends, at the C decoder's speed, keeping nothing of it:
# every object becomes None as soon as it is read, so an item of any size costs its text only.
_SKIM = json.JSONDecoder(
    object_pairs_hook=lambda pairs: None,
    parse_int=lambda text: None,
    parse_float=lambda text: None,
    parse_constant=lambda text: None,
)
_HEAD = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")
# A byte UTF-8 does not allow, as `surrogateescape` carries it: a literal lone surrogate in
# the text itself. (A JSON `\udc80` escape is six ASCII characters until it is decoded.)
_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")
ITEMS = "items"

# Why an item was refused.
TOO_LARGE = "too_large"  # past the bound on one item's size: never decoded
INVALID_UTF8 = "invalid_utf8"  # a byte sequence UTF-8 does not allow
INVALID_JSON = "invalid_json"  # JSON Python cannot hold (nesting, an integer of 4,300 digits)
NOT_AN_OBJECT = "not_an_object"


class ListError(ValueError):
    """Text that is no list of objects at all (not JSON, no `items` list)."""


@dataclass(frozen=True, slots=True)
class Refused:
    """One item of the list that was not decoded, and why; `raw` is its text (its first
    characters only when it is too large), to name it in a log line, never trusted."""

    index: int
    reason: str
    size: int
    raw: str = ""


@dataclass(frozen=True, slots=True)
class Split:
    """The list without its items (`head`: its kind, metadata, continue token), its items
    decoded one by one, and those refused."""

    head: dict[str, Any]
    items: tuple[dict[str, Any], ...]
    refused: tuple[Refused, ...]


def _skip(text: str, pos: int) -> int:
    return _SPACE.match(text, pos).end()  # type: ignore[union-attr]  # matches the empty text


def _skim(text: str, pos: int, limit: int | None = None) -> int:
    """Where the JSON value at `pos` ends; one nested deeper than the decoder goes is scanned
    bracket by bracket instead, as far as `limit` characters."""
    try:
        return int(_SKIM.raw_decode(text, pos)[1])
    except RecursionError:
        return _scan(text, pos, limit)
    except ValueError as exc:
        raise ListError(f"not JSON at character {pos}: {exc}") from exc


_BRACKET = re.compile(r'["{}\[\]]')
_STRING_TAIL = re.compile(r'(?:[^"\\]|\\.)*"', re.DOTALL)


def _scan(text: str, pos: int, limit: int | None) -> int:
    """Where the object or array at `pos` ends, by its brackets (strings skipped whole)."""
    stop = len(text) if limit is None else min(len(text), pos + limit)
    depth = 0
    at = pos
    while True:
        m = _BRACKET.search(text, at, stop)
        if m is None:
            raise ListError(f"no end within {stop - pos} characters of character {pos}")
        at = m.end()
        c = m.group()
        if c == '"':
            tail = _STRING_TAIL.match(text, at, stop)
            if tail is None:
                raise ListError(f"an unterminated string at character {m.start()}")
            at = tail.end()
        elif c in "{[":
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                return at


def _item_spans(text: str, pos: int, limit: int | None) -> tuple[list[tuple[int, int]], int]:
    """The span of each value of the array whose `[` is at `pos`, and where the array ends."""
    spans: list[tuple[int, int]] = []
    pos = _skip(text, pos + 1)
    if text.startswith("]", pos):
        return spans, pos + 1
    while True:
        end = _skim(text, pos, limit)
        spans.append((pos, end))
        pos = _skip(text, end)
        if text.startswith("]", pos):
            return spans, pos + 1
        if not text.startswith(",", pos):
            raise ListError(f"no comma between items at character {pos}")
        pos = _skip(text, pos + 1)


def split_list(data: bytes | str, max_item_chars: int | None = None) -> Split:
    """A list's items, each decoded alone: one past `max_item_chars`, one that is not valid
    UTF-8 or not JSON Python can hold, or one that is not an object is refused with its reason,
    and the others are kept. Raises ListError when the text is no JSON object with an `items`
    list (a list of another shape is no list this reader knows)."""
    text = data.decode("utf-8", "surrogateescape") if isinstance(data, bytes) else data
    pos = _skip(text, 0)
    if not text.startswith("{", pos):
        raise ListError("not a JSON object")
    head: dict[str, Any] = {}
    spans: list[tuple[int, int]] | None = None
    pos = _skip(text, pos + 1)
    while not text.startswith("}", pos):
        if not text.startswith('"', pos):
            raise ListError(f"no key at character {pos}")
        try:
            key, pos = json.decoder.scanstring(text, pos + 1)  # type: ignore[attr-defined]
        except ValueError as exc:
            raise ListError(f"not JSON at character {pos}: {exc}") from exc
        pos = _skip(text, pos)
        if not text.startswith(":", pos):
            raise ListError(f"no colon at character {pos}")
        pos = _skip(text, pos + 1)
        if key == ITEMS and text.startswith("[", pos) and spans is None:
            spans, pos = _item_spans(text, pos, max_item_chars)
        else:
            end = _skim(text, pos)
            if _ESCAPED_BYTE.search(text, pos, end):
                raise ListError(f"the list's {key!r} is not UTF-8")
            try:
                head[key] = _HEAD.decode(text[pos:end])
            except (ValueError, RecursionError) as exc:
                raise ListError(f"the list's {key!r} is not JSON: {exc}") from exc
            pos = end
        pos = _skip(text, pos)
        if text.startswith(",", pos):
            pos = _skip(text, pos + 1)
        elif not text.startswith("}", pos):
            raise ListError(f"no comma between keys at character {pos}")
    if _skip(text, pos + 1) != len(text):
        raise ListError("text after the list")
    if spans is None:
        raise ListError("no list of items")
    items: list[dict[str, Any]] = []
    refused: list[Refused] = []
    for n, (start, end) in enumerate(spans):
        size = end - start
        if max_item_chars is not None and size > max_item_chars:
            refused.append(Refused(n, TOO_LARGE, size, text[start : start + 512]))
            continue
        raw = text[start:end]
        if _ESCAPED_BYTE.search(raw):
            refused.append(Refused(n, INVALID_UTF8, size, raw))
            continue
        try:
            item = _HEAD.decode(raw)
        except (ValueError, RecursionError):
            refused.append(Refused(n, INVALID_JSON, size, raw))
            continue
        if isinstance(item, dict):
            items.append(item)
        else:
            refused.append(Refused(n, NOT_AN_OBJECT, size, raw[:512]))
    return Split(head, tuple(items), tuple(refused))


_KEY_VALUE = re.compile(r'\s*:\s*"((?:[^"\\]|\\.){0,253})"')


def string_values(text: str, key: str, depth: int, limit: int = 8) -> list[str]:
    """The string values of `key` among the keys of objects `depth` deep (1: the item's own
    keys) in an item's text that may not decode: what a refused item still says of itself,
    read by its brackets alone. At most `limit`, each of at most 253 characters."""
    out: list[str] = []
    level = 0
    at = 0
    while len(out) < limit:
        m = _BRACKET.search(text, at)
        if m is None:
            return out
        at = m.end()
        c = m.group()
        if c == '"':
            tail = _STRING_TAIL.match(text, at)
            if tail is None:
                return out
            if level == depth and text[at : tail.end() - 1] == key:
                value = _KEY_VALUE.match(text, tail.end())
                if value is not None:
                    out.append(value.group(1))
            at = tail.end()
        elif c in "{[":
            level += 1
        else:
            level -= 1
    return out


def named(raw: str) -> str:
    """What a refused item's first characters say of it, for a log line: its namespace, name
    and uid where they can be seen (as U+FFFD where a byte was not UTF-8), else nothing."""
    text = raw.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    found = [
        f"{k}={m.group(1)[:80]}"
        for k in ("namespace", "name", "uid")
        if (m := re.search(rf'"{k}"\s*:\s*"([^"\\]{{1,253}})"', text))
    ]
    return " ".join(found)
