"""The one way every vendor's tests build a monitor round over a backend and read its /metrics.

Each manufacturer's fake-library tests drive the real `Monitor` over their backend: with a pod
index and a fake /proc tree for attribution (a whole round), or with no pods at all (a hung or
failing library's deadline). They share this kit so a change to how a round is built is made
once, not in six copies.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from devicemanager.agent.monitor import BackendWorker, Monitor
from devicemanager.backend import Backend
from devicemanager.figures.published import Published
from devicemanager.node.attribution import Attributor
from devicemanager.node.pods import PodIndex

NODE = "n1"

Series = dict[str, list[tuple[dict[str, str], float]]]


def monitor(
    backend: Backend,
    proc_root: Path | None = None,
    pods: Iterable[dict[str, Any]] | None = None,
    *,
    period: float = 15,
    deadline: float = 10,
) -> Monitor:
    """A monitor over one backend. With `proc_root`, rounds attribute processes through that
    /proc tree to the pods given (a whole node); without, the backend alone (no grants)."""
    attribution: dict[str, Any] = {}
    if proc_root is not None:
        index = PodIndex.of(list(pods or ()))
        attribution = {"pods": lambda: index, "attributor": Attributor(proc_root)}
    return Monitor(
        [BackendWorker(backend)],
        period=period,
        deadline=deadline,
        liveness_timeout=60,
        node=NODE,
        **attribution,
    )


def hung(backend: Backend) -> Monitor:
    """A monitor whose round gives a library call 0.3 s: a hung call costs one deadline."""
    return monitor(backend, period=1, deadline=0.3)


def one_round(backend: Backend, proc_root: Path, pods: Iterable[dict[str, Any]]) -> Published:
    """One whole round over the node, the monitor stopped after it."""
    m = monitor(backend, proc_root, pods)
    try:
        return m.run_round()
    finally:
        m.stop()


def series(text: bytes | str | Published) -> Series:
    """Every sample of a /metrics text (or a published round's), by family name."""
    if isinstance(text, Published):
        text = text.metrics.plain
    if isinstance(text, bytes):
        text = text.decode()
    return {
        f.name: [(s.labels, s.value) for s in f.samples]
        for f in text_string_to_metric_families(text)
    }
