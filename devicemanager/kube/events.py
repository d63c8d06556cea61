"""Kubernetes Events (`events.k8s.io/v1`) and the node condition `AcceleratorsHealthy`,
written on a thread of their own so that no round ever waits on the API server (R-X11).

The round's output hands `EventWriter.offer` its notes and returns at once: a note whose Event
exists (or is on its way) grows that Event's series in memory; a new one goes on a bounded
queue, and past the queue it is dropped and counted (`counts["dropped"]`). The thread POSTs new
Events, at most `burst` at once and one more every `refill` seconds for the whole node (past
that a note is counted `limited` and forgotten, so the next round's note of the same fault tries
again), and PATCHes a grown series' `count` and `lastObservedTime` no more often than every
`flush` seconds per Event: one Event per fault, however many rounds see it, as the API
server's own event recorder deduplicates. The node condition, where asked for, is the latest
one wanted, PATCHed to `nodes/<node>/status` when it changes.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

log = logging.getLogger("devicemanager.kube.events")

CONTROLLER = "gpustack.ai/devicemanager"
NODE_EVENTS_NAMESPACE = "default"  # where the kubelet writes a node's Events too
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
MAX_NOTE = 1024  # the API server refuses a longer note
MAX_FIELD = 128  # reason, action, reportingInstance
OUTCOMES = ("posted", "patched", "dropped", "limited", "failed")


class Api(Protocol):
    """What the writer asks of the API server's client (kube/client.py `KubeClient`)."""

    def create(self, path: str, body: dict[str, Any], timeout: float | None = None) -> Any: ...

    def patch(
        self, path: str, body: dict[str, Any], kind: str = ..., timeout: float | None = None
    ) -> Any: ...


@dataclass(frozen=True, slots=True)
class Regarding:
    """The object an Event is about: the Node (no namespace) or a Pod."""

    kind: str
    name: str
    namespace: str = ""
    uid: str = ""


@dataclass(frozen=True, slots=True)
class Note:
    """One Event's content. Two notes with the same `regarding`, `reason` and `series` are one
    Event, whose series grows."""

    regarding: Regarding
    reason: str  # AcceleratorUnhealthy, AcceleratorRecovered
    action: str  # what the manufacturer says to do (figures/actions.py)
    text: str
    warning: bool
    series: str  # the card and its fault

    @property
    def key(self) -> tuple[str, ...]:
        r = self.regarding
        return (r.kind, r.namespace, r.name, r.uid, self.reason, self.series)


@dataclass(frozen=True, slots=True)
class NodeCondition:
    healthy: bool
    reason: str
    message: str


@dataclass
class _Series:
    namespace: str
    name: str | None  # None until the POST answered
    count: int  # times seen
    written: int  # the count the server has
    patched_at: float  # monotonic time of the last write


def micro_time(wall: float) -> str:
    """RFC 3339 with microseconds, as an Event's eventTime (MicroTime)."""
    return datetime.fromtimestamp(wall, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _seconds(wall: float) -> str:
    return datetime.fromtimestamp(wall, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def event_body(note: Note, node: str, wall: float) -> dict[str, Any]:
    """The events.k8s.io/v1 Event a note is, regarding its object."""
    r = note.regarding
    regarding: dict[str, Any] = {"apiVersion": "v1", "kind": r.kind, "name": r.name}
    if r.namespace:
        regarding["namespace"] = r.namespace
    if r.uid:
        regarding["uid"] = r.uid
    namespace = r.namespace or NODE_EVENTS_NAMESPACE
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"generateName": f"{r.name[:200]}.", "namespace": namespace},
        "eventTime": micro_time(wall),
        "reportingController": CONTROLLER,
        "reportingInstance": f"devicemanager-{node}"[:MAX_FIELD],
        "action": note.action[:MAX_FIELD],
        "reason": note.reason[:MAX_FIELD],
        "type": "Warning" if note.warning else "Normal",
        "regarding": regarding,
        "note": note.text[:MAX_NOTE],
    }


def condition_patch(wanted: NodeCondition, changed_at: float, wall: float) -> dict[str, Any]:
    """The strategic merge patch of `nodes/<node>/status` that sets the condition (merged by
    type: the kubelet's own conditions stay as they are)."""
    return {
        "status": {
            "conditions": [
                {
                    "type": "AcceleratorsHealthy",
                    "status": "True" if wanted.healthy else "False",
                    "reason": wanted.reason,
                    "message": wanted.message[:MAX_NOTE],
                    "lastHeartbeatTime": _seconds(wall),
                    "lastTransitionTime": _seconds(changed_at),
                }
            ]
        }
    }


_STOP = object()
_WAKE = object()


class EventWriter:
    """Events and the node condition on their own thread; `offer` and `want` never block."""

    def __init__(
        self,
        api: Api,
        node: str,
        *,
        queue_size: int = 128,
        burst: int = 25,
        refill: float = 5.0,
        flush: float = 60.0,
        max_series: int = 4096,
        timeout: float = 10.0,
        mono: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.api, self.node = api, node
        self._queue: queue.Queue[Any] = queue.Queue(queue_size)
        self._burst, self._refill, self._flush = float(burst), refill, flush
        self._tokens, self._filled = float(burst), mono()
        self._max_series, self._timeout = max_series, timeout
        self._mono, self._wall = mono, wall
        self._lock = threading.Lock()
        self._series: OrderedDict[tuple[str, ...], _Series] = OrderedDict()
        self._counts = dict.fromkeys(OUTCOMES, 0)
        self._wanted: NodeCondition | None = None
        self._written: NodeCondition | None = None
        self._changed_at = wall()
        self._thread: threading.Thread | None = None

    # -- the round's side: never blocks -------------------------------------------------------

    def offer(self, notes: Iterable[Note]) -> None:
        for note in notes:
            with self._lock:
                known = self._series.get(note.key)
                if known is not None:
                    known.count += 1  # the same fault seen again: its series grows
                    continue
                try:
                    self._queue.put_nowait(note)
                except queue.Full:
                    self._counts["dropped"] += 1
                    continue
                namespace = note.regarding.namespace or NODE_EVENTS_NAMESPACE
                self._series[note.key] = _Series(namespace, None, 1, 1, self._mono())
                while len(self._series) > self._max_series:
                    self._series.popitem(last=False)  # the oldest Event is no longer grown

    def want(self, condition: NodeCondition) -> None:
        """The node condition the node should show; written by the thread when it changes."""
        with self._lock:
            if self._wanted is not None and self._wanted.healthy != condition.healthy:
                self._changed_at = self._wall()
            self._wanted = condition
        # Wake the thread; a full queue wakes it anyway.
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(_WAKE)

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    # -- the thread ---------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="events", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        """Write what was seen since the last write (bounded by `timeout`), then end."""
        if self._thread is None:
            return
        with contextlib.suppress(queue.Full):
            self._queue.put(_STOP, timeout=timeout)
        self._thread.join(timeout)

    def idle(self) -> None:
        """Wait until every queued note was handled (for tests and a clean stop)."""
        self._queue.join()

    def _run(self) -> None:
        while True:
            try:
                item = self._queue.get(timeout=max(0.05, min(self._flush, 1.0)))
            except queue.Empty:
                item = _WAKE
                got = False
            else:
                got = True
            try:
                if item is _STOP:
                    self._write_series(final=True)
                    self._write_condition()
                    return
                if isinstance(item, Note):
                    self._post(item)
                self._write_series(final=False)
                self._write_condition()
            except Exception:  # never let the thread die: the next round's notes go on
                log.exception("writing Events failed")
            finally:
                if got:
                    self._queue.task_done()

    def _take(self) -> bool:
        """One token of the node's bound on writes, if there is one."""
        now = self._mono()
        with self._lock:
            if self._refill > 0:
                self._tokens = min(self._burst, self._tokens + (now - self._filled) / self._refill)
            self._filled = now
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return True
            return False

    def _forget(self, note: Note, outcome: str) -> None:
        with self._lock:
            self._series.pop(note.key, None)
            self._counts[outcome] += 1

    def _post(self, note: Note) -> None:
        if not self._take():
            self._forget(note, "limited")
            return
        body = event_body(note, self.node, self._wall())
        path = f"/apis/events.k8s.io/v1/namespaces/{body['metadata']['namespace']}/events"
        try:
            made = self.api.create(path, body, timeout=self._timeout)
        except Exception as exc:
            log.warning("an Event could not be written: %s", exc, extra={"reason": note.reason})
            self._forget(note, "failed")
            return
        name = (made.get("metadata") or {}).get("name") if isinstance(made, dict) else None
        with self._lock:
            self._counts["posted"] += 1
            series = self._series.get(note.key)
            if series is not None and isinstance(name, str):
                series.name = name
            elif series is not None:  # no name to PATCH: a later note makes a new Event
                self._series.pop(note.key, None)

    def _write_series(self, final: bool) -> None:
        now = self._mono()
        with self._lock:
            due = [
                (key, s.namespace, s.name, s.count)
                for key, s in self._series.items()
                if s.name is not None
                and s.count > s.written
                and (final or now - s.patched_at >= self._flush)
            ]
        for key, namespace, name, count in due:
            if not self._take():
                with self._lock:
                    self._counts["limited"] += 1
                return  # the rest wait for the next token
            patch = {"series": {"count": count, "lastObservedTime": micro_time(self._wall())}}
            path = f"/apis/events.k8s.io/v1/namespaces/{namespace}/events/{name}"
            try:
                self.api.patch(path, patch, MERGE_PATCH, timeout=self._timeout)
            except Exception as exc:
                log.warning("an Event's series could not be written: %s", exc)
                with self._lock:
                    self._counts["failed"] += 1
                    self._series.pop(key, None)  # gone (expired, deleted): a new one next
                continue
            with self._lock:
                self._counts["patched"] += 1
                series = self._series.get(key)
                if series is not None:
                    series.written, series.patched_at = count, self._mono()

    def _write_condition(self) -> None:
        with self._lock:
            wanted, written, changed_at = self._wanted, self._written, self._changed_at
        if wanted is None or wanted == written:
            return
        if not self._take():
            return  # tried again at the next wake
        body = condition_patch(wanted, changed_at, self._wall())
        try:
            self.api.patch(
                f"/api/v1/nodes/{self.node}/status", body, STRATEGIC_MERGE_PATCH, self._timeout
            )
        except Exception as exc:
            log.warning("the node condition could not be written: %s", exc)
            with self._lock:
                self._counts["failed"] += 1
            return
        with self._lock:
            self._written = wanted
