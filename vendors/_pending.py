"""A manufacturer whose backend has not landed yet: known to --manufacturer, and honest about
it in backends[] (`unavailable`, with why), never a crash."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from devicemanager.backend import BackendUnavailable, Library
from devicemanager.model import Payload, ReadRequest, VendorReading


class PendingBackend:
    manufacturer: ClassVar[str] = ""
    libraries: ClassVar[tuple[Library, ...]] = ()

    def __init__(self, libraries: Mapping[str, str] | None = None) -> None:
        self.configured = dict(libraries or {})

    def open(self) -> None:
        raise BackendUnavailable(f"the {self.manufacturer} backend is not in this release yet")

    def read(self, request: ReadRequest) -> Payload:
        raise BackendUnavailable(f"the {self.manufacturer} backend is not in this release yet")

    def parse(self, payload: Payload) -> VendorReading:
        return VendorReading(manufacturer=self.manufacturer)

    def close(self) -> None:
        return None
