"""A small time-bounded cache for what the per-Instance sampler reads off the node: a worker
sampling many Instances a second asks each source once per freshness bound, not once per
sample.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any


class SharedCache:
    """Answers by key (a node's kubelet summary, an agent's snapshot, a namespace's pods),
    cached for `max_age` seconds, with one read in flight per key that every concurrent caller
    shares."""

    def __init__(
        self,
        fetch: Callable[[str], Any],
        max_age: float = 15.0,
        clock: Callable[[], float] = time.monotonic,
        timeout: float = 10.0,
        max_entries: int = 4096,
    ) -> None:
        self._fetch, self.max_age, self._clock, self.timeout = fetch, max_age, clock, timeout
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._cached: dict[str, tuple[float, Any]] = {}
        self._inflight: dict[str, Future[Any]] = {}
        self.reads = 0

    def get(self, key: str, max_age: float | None = None) -> Any:
        bound = self.max_age if max_age is None else max_age
        with self._lock:
            hit = self._cached.get(key)
            if hit is not None and self._clock() - hit[0] <= bound and bound > 0:
                return hit[1]
            flight = self._inflight.get(key)
            leader = flight is None
            if flight is None:
                flight = self._inflight[key] = Future()
        if leader:
            # Read on its own thread with its own deadline, detached from any one caller.
            threading.Thread(target=self._read, args=(key, flight), daemon=True).start()
        return flight.result(timeout=self.timeout + 1)

    def _read(self, key: str, flight: Future[Any]) -> None:
        self.reads += 1
        try:
            value = self._fetch(key)
        except BaseException as exc:
            with self._lock:
                self._inflight.pop(key, None)
            flight.set_exception(exc)
            return
        with self._lock:
            self._cached[key] = (self._clock(), value)
            self._inflight.pop(key, None)
            if len(self._cached) > self.max_entries:  # bounded: the oldest half goes
                oldest = sorted(self._cached, key=lambda k: self._cached[k][0])
                for stale in oldest[: len(oldest) // 2]:
                    del self._cached[stale]
        flight.set_result(value)
