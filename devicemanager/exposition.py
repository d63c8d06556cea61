"""/metrics: pure families from a Snapshot, rendered to bytes once when a round ends (R-E1).

A scrape only hands out bytes made here. An absent figure yields no sample (R-E2): a gauge
cannot say "unknown", and a zero would read as idle.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.registry import Collector

from devicemanager.model import BackendState, Card, Snapshot

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4

CARD_LABELS = ["node", "manufacturer", "id", "index"]

# (family suffix, help, how to read the figure off a card)
_CARD_FAMILIES: tuple[tuple[str, str], ...] = (
    ("memory_total_mib", "Physical memory of the card, MiB."),
    ("memory_used_mib", "Memory in use on the card by every tenant, MiB."),
    ("memory_utilization_percent", "Card memory used over total, percent."),
    ("cores_utilization_percent", "Share of time the card's compute was busy, percent."),
    ("temperature_celsius", "Card temperature, degrees Celsius."),
    ("power_usage_watts", "Card power draw, watts."),
    (
        "unhealthy",
        "1 when the card is lost, has a pending or failed memory repair, or raised a fatal XID.",
    ),
)


def _card_value(card: Card, suffix: str) -> float | None:
    value: float | int | bool | None = {
        "memory_total_mib": card.memory_total_mib,
        "memory_used_mib": card.memory_used_mib,
        "memory_utilization_percent": card.memory_utilization_percent,
        "cores_utilization_percent": card.cores_utilization_percent,
        "temperature_celsius": card.temperature_celsius,
        "power_usage_watts": card.power_usage_watts,
        "unhealthy": card.unhealthy,
    }[suffix]
    return None if value is None else float(value)


def _sampled(help_text: str, period: int) -> str:
    # The figures are sampled by the monitor loop, not at scrape time; say so, as the
    # Prometheus guide asks of cached metrics.
    return f"{help_text} Sampled every {period}s by the monitor loop."


def card_families(snapshot: Snapshot) -> Iterator[Metric]:
    node = snapshot.node or ""
    info = GaugeMetricFamily(
        "gpustack_accelerator_info",
        _sampled(
            "Accelerators this agent reads; value 1, identity in labels.", snapshot.period_seconds
        ),
        labels=[*CARD_LABELS, "name", "driver_version"],
    )
    families = {
        suffix: GaugeMetricFamily(
            f"gpustack_accelerator_{suffix}",
            _sampled(help_text, snapshot.period_seconds),
            labels=CARD_LABELS,
        )
        for suffix, help_text in _CARD_FAMILIES
    }
    for group in snapshot.groups:
        for card in group.cards:
            labels = [node, group.manufacturer, card.id, str(card.index)]
            info.add_metric([*labels, card.name or "", group.driver_version or ""], 1.0)
            for suffix, family in families.items():
                value = _card_value(card, suffix)
                if value is not None:
                    family.add_metric(labels, value)
    yield info
    yield from families.values()


def collector_families(snapshot: Snapshot, fresh: bool) -> Iterator[Metric]:
    """The collector's report on itself (R-E4), and each backend's verdict."""
    node = snapshot.node or ""
    success = GaugeMetricFamily(
        "gpustack_instance_metrics_collector_success",
        "1 when the source's last round succeeded: snapshot = the monitor snapshot is fresh.",
        labels=["source"],
    )
    success.add_metric(["snapshot"], 1.0 if fresh and snapshot.timestamp > 0 else 0.0)
    yield success
    duration = GaugeMetricFamily(
        "gpustack_instance_metrics_collector_duration_seconds",
        "Duration of the source's last round, seconds.",
        labels=["source"],
    )
    if snapshot.round_duration_seconds is not None:
        duration.add_metric(["snapshot"], snapshot.round_duration_seconds)
    yield duration
    up = GaugeMetricFamily(
        "gpustack_accelerator_backend_up",
        "1 when the manufacturer's library answered in the last round; 0 when it is missing, "
        "failed, timed out or is stuck (the snapshot's backends[] says which).",
        labels=["node", "manufacturer"],
    )
    read = GaugeMetricFamily(
        "gpustack_accelerator_backend_read_duration_seconds",
        "How long the manufacturer's library took to answer in the last round, seconds.",
        labels=["node", "manufacturer"],
    )
    for status in snapshot.backends:
        labels = [node, status.manufacturer]
        up.add_metric(labels, 1.0 if fresh and status.state is BackendState.OK else 0.0)
        if status.duration_seconds is not None:
            read.add_metric(labels, status.duration_seconds)
    yield up
    yield read


def families(snapshot: Snapshot, fresh: bool = True) -> Iterator[Metric]:
    """Every family for a snapshot. A stale snapshot publishes its verdict and no figures."""
    yield from collector_families(snapshot, fresh)
    if fresh and snapshot.timestamp > 0:
        yield from card_families(snapshot)


class _Fixed(Collector):
    def __init__(self, metrics: Iterable[Metric]) -> None:
        self._metrics = list(metrics)

    def collect(self) -> Iterable[Metric]:
        return self._metrics


def render(metrics: Iterable[Metric]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(metrics))
    return generate_latest(registry)


@dataclass(frozen=True, slots=True)
class Exposition:
    """/metrics bytes ready to serve, plain and gzip-compressed."""

    plain: bytes
    gzipped: bytes

    @classmethod
    def of(cls, body: bytes) -> Exposition:
        # mtime=0 keeps the compressed bytes a pure function of the text.
        return cls(plain=body, gzipped=gzip.compress(body, compresslevel=6, mtime=0))
