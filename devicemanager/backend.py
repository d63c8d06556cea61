"""The one interface every vendor backend implements, and the registry that finds them.

The core never imports a vendor by name: backends are named by import strings and loaded
lazily, so the agent runs, and its tests pass, with no vendor SDK installed (R-V1).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from devicemanager.model import Payload, ReadRequest, VendorReading

# manufacturer -> "module:attribute" of its backend class.
BACKENDS: Mapping[str, str] = {
    "nvidia": "vendors.nvidia:NvidiaBackend",
}


class BackendUnavailable(Exception):
    """The vendor's library, driver or devices are not on this node. Data, not a crash."""


@runtime_checkable
class Backend(Protocol):
    """open → read → parse → close. Only read() and open() touch the vendor library.

    `parse` is pure: recorded payloads go through the very function the live agent uses.
    """

    manufacturer: str

    def open(self) -> None:
        """Load and initialise the vendor library; raise BackendUnavailable when it is absent."""

    def read(self, request: ReadRequest) -> Payload:
        """Ask the library for what `request` needs; a failed call is recorded, not raised."""

    def parse(self, payload: Payload) -> VendorReading:
        """Turn a payload into the model. Pure: no I/O, no clock, no SDK."""

    def close(self) -> None:
        """Release the library. Safe to call when open() failed."""


def import_from_string(spec: str) -> object:
    """Resolve "package.module:attribute", the way uvicorn names pluggable implementations."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"backend {spec!r} is not of the form 'module:attribute'")
    module = importlib.import_module(module_name)
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise ValueError(f"module {module_name!r} has no attribute {attribute!r}") from None


def backend_class(name: str) -> type[Backend]:
    """A manufacturer name from BACKENDS, or an import string for a backend of one's own."""
    spec = BACKENDS.get(name, name)
    if ":" not in spec:
        known = ", ".join(sorted(BACKENDS))
        raise ValueError(f"unknown manufacturer {name!r} (known: {known}; or give module:Class)")
    cls = import_from_string(spec)
    if not isinstance(cls, type):
        raise ValueError(f"{spec!r} is not a class")
    return cls
