"""The node's pods by list-then-watch (R-A4): listed once, then kept current by a watch that
resumes from the last resource version, follows bookmarks, relists on 410 Gone, and backs off
(capped, with jitter) from dropped connections and API errors. Never a list per round.

While the API server is away the last good index keeps serving, so figures keep flowing. A
deleted pod stays in the index for a while as terminating (a tombstone): the processes of a pod
that was just deleted are its own, not an `unknown_pod`, which is kept for pods never seen.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from devicemanager.kube.client import KubeClient, KubeError, WatchEvent
from devicemanager.node.pods import PodIndex, PodInfo, read_pod

log = logging.getLogger("devicemanager.kube.informer")

# A watch that lasted this long without an error was healthy, however it ended.
HEALTHY_WATCH_SECONDS = 10.0


class Reflector:
    """List once, then watch from the last resource version until the server ends the watch,
    for as long as it runs: the loop the pod index and the node's DRA slices share. A watch
    that fails is retried with capped, jittered backoff; a 410 Gone lists again. `run_once`
    is the subclass's: one list (when needed) and one watch; it returns True when there was
    nothing to watch and it has already waited (an API the cluster does not serve)."""

    what = "watch"  # in the log lines: "pod watch", "resource slice watch"

    def __init__(
        self,
        *,
        backoff: tuple[float, float] = (0.5, 30.0),
        watch_timeout: int = 300,
        clock: Callable[[], float] = time.monotonic,
        log_extra: dict[str, Any] | None = None,
    ) -> None:
        self.backoff = backoff
        self.watch_timeout = watch_timeout
        self._clock = clock
        self._log_extra = log_extra or {}
        self.version = ""
        self.events = 0
        self.malformed = 0  # lines of the stream that were no event, skipped
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run_once(self) -> bool | None:
        raise NotImplementedError

    def _malformed(self, line: str) -> None:
        """A line of the watch stream that is no event (a proxy's garbage, a truncated write):
        skipped and counted, and the watch goes on, so the events after it are applied rather
        than the index frozen until a relist. Logged the first time only: one per line would
        let the stream write the agent's log."""
        self.malformed += 1
        if self.malformed == 1:
            log.warning(
                "a %s line that is not an event was skipped; the watch goes on (later ones are "
                "counted, not logged)",
                self.what,
                extra={**self._log_extra, "line": line},
            )

    def _delay(self, failures: int) -> float:
        """Exponential in consecutive failures, capped, with jitter so that the agents of every
        node do not come back to the API server in step."""
        base, cap = self.backoff
        delay = min(cap, base * 2.0 ** max(0, failures - 1))
        return delay * random.uniform(0.5, 1.0)

    def _loop(self) -> None:
        failures = 0
        while not self._stop.is_set():
            started, events = self._clock(), self.events
            status: int | None = None
            try:
                if self.run_once():
                    failures = 0
                    continue
                error = "the watch ended at once, with no event"
            except KubeError as exc:
                status, error = exc.status, str(exc)
            except Exception as exc:  # never let the watch thread die: the index would freeze
                error = f"{type(exc).__name__}: {exc}"
                log.exception("%s broke; retrying", self.what)
            if self._stop.is_set():
                return
            # An attempt that delivered events, or watched for a while, was healthy however it
            # ended: the count of failures in a row starts again.
            if self.events > events or self._clock() - started >= HEALTHY_WATCH_SECONDS:
                failures = 0
                if status is None:  # the server ended a healthy watch: resume at once
                    self.last_error = None
                    continue
            failures += 1
            self.last_error = error
            if status == 410:
                # Too old to resume: list again, since events in the gap are lost. The first
                # time at once; a server that answers 410 again and again is backed off from
                # like any other failure, or the agent would relist many times a second.
                self.version = ""
                log.info(
                    "%s expired (410 Gone); listing again",
                    self.what,
                    extra={**self._log_extra, "in_a_row": failures},
                )
                if failures == 1:
                    continue
            delay = self._failed(status, error, failures)
            self._stop.wait(delay)

    def _failed(self, status: int | None, error: str, failures: int) -> float:
        """How long to wait after a failed attempt, having said so."""
        delay = self._delay(failures)
        log.warning(
            "%s failed; serving the last state",
            self.what,
            extra={
                **self._log_extra,
                "error": error,
                "in_a_row": failures,
                "retry_in": round(delay, 2),
            },
        )
        return delay

    def start(self) -> None:
        name = self.what.replace(" ", "-")
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()


class PodInformer(Reflector):
    what = "pod watch"

    def __init__(
        self,
        client: KubeClient,
        node: str,
        *,
        tombstone_seconds: float = 120.0,
        backoff: tuple[float, float] = (0.5, 30.0),
        watch_timeout: int = 300,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(
            backoff=backoff, watch_timeout=watch_timeout, clock=clock, log_extra={"node": node}
        )
        self.client, self.node = client, node
        self.tombstone_seconds = tombstone_seconds
        self._lock = threading.Lock()
        self._pods: dict[str, PodInfo] = {}
        self._gone: dict[str, tuple[float, PodInfo]] = {}
        self._index: PodIndex | None = None
        self._dirty = True
        self.synced = False
        self.lists = 0

    # -- state --------------------------------------------------------------------------------

    def _bury(self, info: PodInfo) -> None:
        self._gone[info.uid] = (self._clock(), replace(info, terminating=True))

    def replace_all(self, objects: Iterable[Any], version: str) -> None:
        """A fresh list: pods missing from it were deleted while nobody watched."""
        fresh = {i.uid: i for i in map(_info, objects) if i is not None}
        with self._lock:
            for uid, info in self._pods.items():
                if uid not in fresh:
                    self._bury(info)
            for uid in fresh:
                self._gone.pop(uid, None)
            self._pods = fresh
            self.version = version
            self.synced = True
            self.lists += 1
            self._dirty = True

    def apply(self, event: WatchEvent) -> None:
        meta = event.object.get("metadata")
        version = meta.get("resourceVersion") if isinstance(meta, dict) else None
        with self._lock:
            self.events += 1
            if isinstance(version, str) and version:
                self.version = version
            if event.type == "BOOKMARK":
                return  # only a newer version to resume from
            info = _info(event.object)
            if info is None:
                return
            if event.type == "DELETED":
                if self._pods.pop(info.uid, None) is not None or info.uid not in self._gone:
                    self._bury(info)
            else:
                self._pods[info.uid] = info
                self._gone.pop(info.uid, None)
            self._dirty = True

    def __call__(self) -> PodIndex | None:
        """The current index; None until the first list succeeded."""
        now = self._clock()
        with self._lock:
            if not self.synced:
                return None
            expired = [u for u, (at, _) in self._gone.items() if now - at > self.tombstone_seconds]
            for uid in expired:
                del self._gone[uid]
            if self._dirty or expired or self._index is None:
                infos = [*self._pods.values(), *(info for _, info in self._gone.values())]
                self._index = PodIndex.of_infos(infos)
                self._dirty = False
            return self._index

    # -- the loop -------------------------------------------------------------------------------

    def _relist(self) -> None:
        items, version = self.client.list_pods(self.node)
        self.replace_all(items, version)
        log.info("listed the node's pods", extra={"node": self.node, "pods": len(items)})

    def run_once(self) -> None:
        """One list (when needed) and one watch until the server ends it. Raises KubeError."""
        if not self.version:
            self._relist()
        for event in self.client.watch_pods(
            self.node, self.version, self.watch_timeout, malformed=self._malformed
        ):
            self.apply(event)
            if self._stop.is_set():
                return


def _info(obj: Any) -> PodInfo | None:
    """One pod object, or None: an object the index cannot read whole is that pod's problem,
    never a failed list or a dead watch for the node. It is indexed by its identity alone
    (pods.read_pod), so its processes are its own, and said once per event."""
    info = read_pod(obj)
    if info is not None and info.refused is not None:
        log.warning(
            "a pod object could not be read whole; it is indexed by its UID and container ids "
            "alone and holds no grants",
            extra={"uid": info.uid, "reason": info.refused},
        )
    return info
