"""Structured logs (R-O5): one JSON object a line, with whatever a call site passed in `extra`;
or, with `--log-format text`, one line of text carrying the very same fields as `key=value`.

A fault that lasts (a backend that stays unavailable, pods that cannot be read) is logged when
it starts and when it changes, not once per period: round/said.py keeps what was said."""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import UTC, datetime
from typing import Any

# Attributes every LogRecord has; anything else on a record came from `extra=`.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


def fields(record: logging.LogRecord) -> dict[str, Any]:
    """What a call site passed in `extra=`: the fields both formats carry."""
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        doc.update(fields(record))
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)


_BARE = re.compile(r"[^\s\"=\\]+")  # a value that needs no quotes in key=value


def _value(value: Any) -> str:
    if isinstance(value, str):
        return value if _BARE.fullmatch(value) else json.dumps(value)
    return json.dumps(value, default=str, separators=(",", ":"))  # no space: one word


class TextFormatter(logging.Formatter):
    """`time LEVEL logger: message key=value ...`: the JSON line's fields, in text (a string
    with spaces or quotes is quoted as JSON quotes it, anything else is its JSON), and the
    traceback, when there is one, on the lines after."""

    def __init__(self, fmt: str = "%(asctime)s %(levelname)s %(name)s: %(message)s") -> None:
        super().__init__(fmt)

    def format(self, record: logging.LogRecord) -> str:
        record.message = record.getMessage()
        if self.usesTime():
            record.asctime = self.formatTime(record)
        line = self.formatMessage(record)
        extra = " ".join(f"{k}={_value(v)}" for k, v in fields(record).items())
        if extra:
            line = f"{line} {extra}"
        if record.exc_info:
            line = f"{line}\n{self.formatException(record.exc_info)}"
        return line


class OwnNames(logging.Filter):
    """uvicorn's records under our logger name, without the ANSI-coloured copy of the message
    (`color_message`) that uvicorn adds for its own terminal formatter."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "uvicorn" or record.name.startswith("uvicorn."):
            record.name = "devicemanager.serve.http"
        record.__dict__.pop("color_message", None)
        return True


def configure(level: str = "info", fmt: str = "json") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(OwnNames())
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # uvicorn's access log would add a line per scrape; errors still come through.
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
    # The HTTP clients log every request at info: a line per API call per round.
    for noisy in ("httpx", "httpx2", "httpcore", "httpcore2"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def configure_command(command: str) -> None:
    """The client commands' warnings (a snapshot the sampler could not read, say) on standard
    error as `devicemanager <command>: warning: message key=value ...`, with their causes,
    rather than Python's bare last-resort line without them."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(TextFormatter(f"devicemanager {command}: %(levelname)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
