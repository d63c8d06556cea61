"""What a vendor's parse may do with a payload of any shape (issue 30): answer a reading, or,
only where the payload is not what read() writes (not an object, no device list, the
enumeration recorded as failed, a list that is not a list), refuse it with PayloadShapeError,
so the round reports the read as failed instead of "answered, with no cards"."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from devicemanager.model import VendorReading
from vendors._common import PayloadShapeError


def parsed_or_refused(
    parse: Callable[[Any], VendorReading], payload: Any, key: str = "devices"
) -> VendorReading | None:
    """`parse(payload)`, or None where it refused a payload whose `key` is not a list."""
    well_shaped = isinstance(payload, Mapping) and key in payload and isinstance(payload[key], list)
    try:
        return parse(payload)
    except PayloadShapeError:
        assert not well_shaped, f"refused a payload whose {key!r} is a list"
        return None
