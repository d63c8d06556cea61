"""A backend with as many cards as a benchmark asks for (DM_BENCH_CARDS), for load tests only.

Each card publishes eight series (info plus seven figures), so 125 cards make the 1,000-series
/metrics of bench/scrape.py.
"""

from __future__ import annotations

import os

from devicemanager.model import Card, Payload, ReadRequest, VendorReading


class ManyCardsBackend:
    manufacturer = "bench"

    def __init__(self, library: str | None = None) -> None:
        self.cards = int(os.environ.get("DM_BENCH_CARDS", "125"))

    def open(self) -> None:
        pass

    def read(self, request: ReadRequest) -> Payload:
        return {"cards": self.cards}

    def parse(self, payload: Payload) -> VendorReading:
        cards = tuple(
            Card(
                id=f"GPU-{i:08x}-0000-4000-8000-{i:012x}",
                index=i,
                name="Bench Card",
                memory_total_mib=81559,
                memory_used_mib=1000 + i,
                cores_utilization_percent=float(i % 100),
                temperature_celsius=40.0 + i % 30,
                power_usage_watts=100.0 + i,
            )
            for i in range(payload["cards"])
        )
        return VendorReading(manufacturer=self.manufacturer, cards=cards, driver_version="bench")

    def close(self) -> None:
        pass
