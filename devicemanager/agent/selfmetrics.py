"""The agent's report on itself (R-X8), made when a round ends, never on the scrape path.

What every Prometheus exporter publishes about itself: the process (`process_*`, read by
prometheus_client's own ProcessCollector, so the names, units and help are the ones every
dashboard knows), the HTTP server's answers by route and status code and each bound's refusals
(counted by serve/http.py and serve/app.py into one `HttpCounters`), and the monitor's rounds.

The monitor calls `SelfMetrics.families` once per round, after the round's figures are made;
the families are rendered with the round, so a scrape reads bytes made then: the figures are as
of the round's end, up to one period old, like every other family. A stale round's exposition
keeps them (they describe the process, not the round).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from prometheus_client.process_collector import ProcessCollector

from devicemanager.figures.exposition import GaugeFamily
from devicemanager.serve.counters import REASONS, HttpCounters

log = logging.getLogger("devicemanager.agent.selfmetrics")

PREFIX = "gpustack_device_manager_"


class SelfMetrics:
    """Reads the process and the HTTP counters; one instance per running agent."""

    def __init__(
        self,
        counters: HttpCounters,
        proc_root: str = "/proc",
        events: Callable[[], Mapping[str, int]] | None = None,
    ) -> None:
        # The agent's own /proc, not --proc-root (the host's, or a replay's recorded tree):
        # /proc/self is this process wherever the host's processes are read from.
        self.counters = counters
        # The Event writer's counts by outcome (kube/events.py), where Events are written.
        self.events = events
        # registry=None: read by us at the round's end, never registered for a scrape to run.
        self._process = ProcessCollector(registry=None, proc=proc_root)

    def families(self, rounds: int, failed: int) -> tuple[GaugeFamily, ...]:
        """This moment's figures: `rounds` completed rounds (this one included), `failed`
        rounds that raised and published nothing."""
        return (
            *self._process_families(),
            *http_families(self.counters),
            *round_families(rounds, failed),
            *(event_families(self.events()) if self.events is not None else ()),
        )

    def _process_families(self) -> list[GaugeFamily]:
        out = []
        try:
            metrics = self._process.collect()
        except OSError as exc:  # /proc unreadable: the process figures are absent, not zero
            log.debug("process figures unreadable: %s", exc)
            return []
        for metric in metrics:
            for sample in metric.samples:
                family = GaugeFamily(sample.name, metric.documentation, kind=metric.type or "gauge")
                family.add_metric([], float(sample.value))
                out.append(family)
        return out


def http_families(counters: HttpCounters) -> tuple[GaugeFamily, GaugeFamily]:
    requests, refused = counters.snapshot()
    answered = GaugeFamily(
        PREFIX + "http_requests_total",
        "HTTP answers the agent sent since it started, by route (a path it serves, or other) "
        "and status code; counted as they are sent, published when a round ends.",
        labels=["route", "code"],
        kind="counter",
    )
    for (route, code), count in sorted(requests.items()):
        answered.add_metric([route, str(code)], float(count))
    bounds = _counted_by(
        "http_refused_total",
        "Requests and connections a bound of the HTTP server refused or shed since the agent "
        "started, by reason: ",
        "reason",
        REASONS,
        refused,
        ".",
    )
    return answered, bounds


def _counted_by(
    name: str,
    head: str,
    label: str,
    meanings: Mapping[str, str],
    counts: Mapping[str, int],
    tail: str,
) -> GaugeFamily:
    """A counter with one series per value of `label`, every value always present (0 until
    counted), each value's meaning in the HELP."""
    family = GaugeFamily(
        PREFIX + name,
        head + "; ".join(f"{k}: {v}" for k, v in meanings.items()) + tail,
        labels=[label],
        kind="counter",
    )
    for value in meanings:
        family.add_metric([value], float(counts.get(value, 0)))
    return family


def round_families(rounds: int, failed: int) -> tuple[GaugeFamily, GaugeFamily]:
    done = GaugeFamily(
        PREFIX + "rounds_total",
        "Monitor rounds completed and published since the agent started (each round's "
        'duration: gpustack_instance_metrics_collector_duration_seconds{source="snapshot"}).',
        kind="counter",
    )
    done.add_metric([], float(rounds))
    broke = GaugeFamily(
        PREFIX + "rounds_failed_total",
        "Monitor rounds that raised and published nothing (the last good round stays served; "
        "the log says why, once per fault).",
        kind="counter",
    )
    broke.add_metric([], float(failed))
    return done, broke


# What each outcome of an Event or node-condition write means (kube/events.py).
EVENT_OUTCOMES = {
    "posted": "a new Event written",
    "patched": "an Event's series count written, or the node condition",
    "dropped": "a new Event dropped: the writer's queue was full",
    "limited": "a write left out by the node's bound on writes",
    "failed": "a write the API server did not take",
}


def event_families(counts: Mapping[str, int]) -> tuple[GaugeFamily]:
    written = _counted_by(
        "events_total",
        "Kubernetes Events for unhealthy and recovered cards since the agent started, by outcome: ",
        "outcome",
        EVENT_OUTCOMES,
        counts,
        " (R-X11).",
    )
    return (written,)
