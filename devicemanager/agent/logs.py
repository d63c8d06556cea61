"""Structured logs (R-O5): one JSON object a line, with whatever a call site passed in `extra`."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

# Attributes every LogRecord has; anything else on a record came from `extra=`.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                doc[key] = value
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)


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
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # uvicorn's access log would add a line per scrape; errors still come through.
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
    # The HTTP clients log every request at info: a line per API call per round.
    for noisy in ("httpx", "httpx2", "httpcore", "httpcore2"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
