"""Backends for tests of the core: they answer, fail, stall or hang on demand.

They live here rather than in vendors/ because no node has them; the agent loads them by
import string (`--manufacturer tests.fakes:HangingBackend`), the way it loads a real vendor.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from devicemanager.backend import BackendUnavailable
from devicemanager.model import Card, Payload, ReadRequest, VendorReading

_forever = threading.Event()


class StaticBackend:
    """One healthy card whose used memory counts the reads, so each round is distinguishable."""

    manufacturer = "fake"

    def __init__(self, library: str | None = None) -> None:
        self.library = library
        self.reads = 0
        self.opened = 0
        self.closed = 0
        self.requests: list[ReadRequest] = []

    def open(self) -> None:
        self.opened += 1

    def read(self, request: ReadRequest) -> Payload:
        self.reads += 1
        self.requests.append(request)
        return {"cards": [{"id": "FAKE-0", "index": 0, "total": 1024, "used": self.reads}]}

    def parse(self, payload: Payload) -> VendorReading:
        cards = tuple(
            Card(
                id=c["id"],
                index=c["index"],
                name="Fake Card",
                memory_total_mib=c["total"],
                memory_used_mib=c["used"],
                cores_utilization_percent=None,
            )
            for c in payload["cards"]
        )
        return VendorReading(manufacturer=self.manufacturer, cards=cards, driver_version="0.0")

    def close(self) -> None:
        self.closed += 1


class SlowFirstBackend(StaticBackend):
    """The first read takes DM_TEST_SLOW_SECONDS (default 3): the agent serves before round one."""

    def read(self, request: ReadRequest) -> Payload:
        if self.reads == 0:
            time.sleep(float(os.environ.get("DM_TEST_SLOW_SECONDS", "3")))
        return super().read(request)


class HangingBackend(StaticBackend):
    """read() never returns, like a driver call stuck in the kernel."""

    manufacturer = "hung"

    def read(self, request: ReadRequest) -> Payload:
        self.reads += 1
        _forever.wait()
        raise AssertionError("unreachable")


class FailingBackend(StaticBackend):
    manufacturer = "broken"

    def read(self, request: ReadRequest) -> Payload:
        self.reads += 1
        raise RuntimeError("driver said no")


class UnavailableBackend(StaticBackend):
    manufacturer = "absent"

    def open(self) -> None:
        self.opened += 1
        raise BackendUnavailable("libabsent.so.1: cannot open shared object file")


class GarbageBackend(StaticBackend):
    """Answers with a payload its own parse cannot read."""

    manufacturer = "garbage"

    def read(self, request: ReadRequest) -> Payload:
        self.reads += 1
        return {"cards": "not a list"}

    def parse(self, payload: Payload) -> VendorReading:
        cards: Any = payload["cards"]
        return VendorReading(manufacturer=self.manufacturer, cards=tuple(c["id"] for c in cards))


class NanBackend(StaticBackend):
    """A driver answering NaN and Infinity: a card's utilization, temperature and power."""

    manufacturer = "nan"

    def parse(self, payload: Payload) -> VendorReading:
        reading = super().parse(payload)
        card = reading.cards[0]
        nan = Card(
            id=card.id,
            index=card.index,
            name=card.name,
            memory_total_mib=card.memory_total_mib,
            memory_used_mib=card.memory_used_mib,
            cores_utilization_percent=float("nan"),
            temperature_celsius=float("inf"),
            power_usage_watts=float("-inf"),
        )
        return VendorReading(manufacturer=self.manufacturer, cards=(nan,), driver_version="0.0")


class ClosingBackend(StaticBackend):
    """Writes "closed" to the file DM_TEST_CLOSE_MARKER names when its library is closed."""

    manufacturer = "closing"

    def close(self) -> None:
        super().close()
        marker = os.environ.get("DM_TEST_CLOSE_MARKER")
        if marker:
            with open(marker, "a") as f:
                f.write("closed\n")


class HostPathBackend(StaticBackend):
    """A library that is not there, failing the way the dynamic loader says so: with its path."""

    manufacturer = "hostpath"

    def open(self) -> None:
        self.opened += 1
        raise BackendUnavailable(
            "/usr/lib/x86_64-linux-gnu/libhostpath.so.1: cannot open shared object file: "
            "No such file or directory"
        )


class VanishingBackend(StaticBackend):
    """Two cards, FAKE-0 and FAKE-1, until the DM_TEST_VANISH_AFTER-th read (default 3); from
    then on FAKE-1 is no longer enumerated, as a card that fell off the bus mid-run."""

    def read(self, request: ReadRequest) -> Payload:
        payload = super().read(request)
        if self.reads < int(os.environ.get("DM_TEST_VANISH_AFTER", "3")):
            payload["cards"].append({"id": "FAKE-1", "index": 1, "total": 2048, "used": 7})
        return payload
