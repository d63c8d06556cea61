"""The monitor loop: one round per period, each backend on its own thread with a deadline.

Vendor calls block inside C and cannot be interrupted from Python, so every backend runs on a
worker thread of its own. A round waits for each until the deadline and moves on; a worker
still busy at the next round is reported `stuck` and not called again (calling into a library
that is hung in another thread would only pile up threads). Other backends and the HTTP server
go on (R-O3). A worker stuck past the liveness timeout makes /livez fail, because only a
restart gets a thread back from a hung driver call.

The monitor is the round's shell: it reads the pods, the kubelet, DRA, the libraries and /proc,
and everything between those reads is the pure steps of round/steps.py (plan, learn, settle),
whose one frozen `Memory` is all a round hands the next. The round's log lines come back from
`settle` as values and are written here; the `Round` goes to each output, the published
snapshot and /metrics first.
"""

from __future__ import annotations

import logging
import queue
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from devicemanager.backend import Backend, BackendUnavailable
from devicemanager.figures import exposition, snapshot
from devicemanager.figures.published import Published, publish
from devicemanager.figures.ranges import plausible_reading
from devicemanager.figures.snapshot import BackendResult
from devicemanager.grants import deviceplugins
from devicemanager.grants.deviceplugins import KubeletAnswer
from devicemanager.grants.dra import DraInventory
from devicemanager.grants.grants import NodeGrants, RememberedGrants
from devicemanager.grants.node import sources
from devicemanager.model import (
    BackendState,
    BackendStatus,
    Payload,
    PodFault,
    ReadRequest,
    finite_reading,
)
from devicemanager.node import pcibus
from devicemanager.node.attribution import Attributor, DeviceAttribution, boot_seconds
from devicemanager.node.pods import PodIndex
from devicemanager.round.said import LogEvent
from devicemanager.round.steps import (
    Inputs,
    Learned,
    Memory,
    Output,
    Round,
    learn,
    plan,
    round_failed,
    settle,
)

log = logging.getLogger("devicemanager.monitor")

# A consumer treats a snapshot older than this many periods as a failing monitor (R-S3).
FRESH_PERIODS = 3


class BackendWorker:
    """Owns one backend and the one daemon thread that ever calls into its library."""

    def __init__(self, backend: Backend, clock: Callable[[], float] = time.monotonic) -> None:
        self.backend = backend
        self.manufacturer = backend.manufacturer
        self._clock = clock
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None] = (
            queue.SimpleQueue()
        )
        self._opened = False
        self.busy_since: float | None = None
        self.last_success: float | None = None
        # When the last successful read() began, on the clock /proc's start times count in: a
        # process that started later may have taken the PID of one the vendor reported while
        # the call ran, so it is not charged as that one (attribution: `unstable`).
        self.read_began_boot: float | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"backend-{self.manufacturer}", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            fn, future = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as exc:  # the boundary: a vendor failure is data
                future.set_exception(exc)
            finally:
                self.busy_since = None

    def submit(self, fn: Callable[[], Any]) -> Future[Any]:
        future: Future[Any] = Future()
        self.busy_since = self._clock()
        self._jobs.put((fn, future))
        return future

    def read(self, request: ReadRequest) -> Payload:
        """Runs on the worker thread: (re)open when needed, then read."""
        if not self._opened:
            self.backend.open()
            self._opened = True
        try:
            began = boot_seconds()
            payload = self.backend.read(request)
            self.read_began_boot = began
            return payload
        except BaseException:
            # Start over next round: a driver reload or a lost card may need a fresh init.
            self._opened = False
            self._close_quietly()
            raise

    def _close_quietly(self) -> None:
        try:
            self.backend.close()
        except Exception:  # closing after a failure must not hide the failure
            log.debug("close after a failed read raised", exc_info=True)

    def stop(self, timeout: float = 2.0) -> bool:
        """Close the backend on its own thread and end it, waiting up to `timeout` for the close
        (a vendor library is shut down, not abandoned). A thread hung inside the library is
        left to the process: returns False then, True once the backend was closed."""
        if not self._thread.is_alive():
            return True
        if self.busy_since is not None and self._clock() - self.busy_since > timeout:
            self._jobs.put(None)
            return False
        if self._opened:
            self.submit(self._close_quietly)
        self._jobs.put(None)
        self._thread.join(timeout)
        return not self._thread.is_alive()


class ClusterRound(Protocol):
    """The cluster's part of a round: the exporter role and the kubelet's figures (R-E3, R-E4).
    It must not wait on the cluster: reads happen beside the round, which takes the latest."""

    def round(
        self,
        index: PodIndex | None,
        grants: NodeGrants | None,
        extras: exposition.Extras,
        faults: dict[str, PodFault],
    ) -> exposition.Extras: ...


@dataclass(frozen=True, slots=True)
class Reads:
    """What the vendor reads of one round gave, beside each backend's result."""

    results: tuple[BackendResult, ...]
    raw_errors: Mapping[str, str | None]  # each backend's error as the log shows it
    left_out: tuple[tuple[str, str, tuple[str, ...]], ...]  # (nan | range, manufacturer, figures)
    read_at: Mapping[str, float | None]  # when each successful read began, in boot seconds


class Publisher:
    """The round's first output: the snapshot and /metrics, rendered once and swapped in whole
    for the HTTP handlers (figures/published.py)."""

    def __init__(self, current: Published, mono: Callable[[], float]) -> None:
        self.current = current
        self._mono = mono

    def __call__(self, done: Round) -> None:
        self.current = publish(done.snapshot, self._mono(), done.extras)


def emit(events: Sequence[LogEvent]) -> None:
    """The round's log events, written as the lines they stand for."""
    for e in events:
        logging.getLogger(e.logger).log(
            e.level,
            e.message,
            *e.args,
            exc_info=e.exc,
            extra=dict(e.extra) if e.extra is not None else None,
        )


class BusWatch:
    """The PCI bus's accelerator functions under a sysfs root, read again once `period`
    seconds have passed (on the monitor's monotonic clock): a card does not fall off the bus
    often enough to list every device each round, and a minute is soon enough to say so."""

    def __init__(
        self, root: str, period: float = 60.0, mono: Callable[[], float] = time.monotonic
    ) -> None:
        self.root, self.period, self._mono = root, period, mono
        self._last: pcibus.BusScan | None = None
        self._at: float | None = None
        self._said: str | None = None

    def __call__(self) -> pcibus.BusScan:
        now = self._mono()
        if self._last is None or self._at is None or now - self._at >= self.period:
            self._last, self._at = pcibus.read_bus(self.root), now
            if self._last.error != self._said:  # said when it changes, not every minute
                self._said = self._last.error
                if self._said is not None:
                    log.warning(
                        "the PCI bus cannot be read; cards lost from it are not found",
                        extra={"error": self._said},
                    )
        return self._last


class Monitor:
    """The shell of the round: the I/O around the pure steps (round/steps.py), the loop, and
    the probes. What one round hands the next is `memory`, one frozen value."""

    def __init__(
        self,
        workers: Sequence[BackendWorker],
        *,
        period: float,
        deadline: float,
        liveness_timeout: float,
        node: str | None,
        pods: Callable[[], PodIndex | None] | None = None,
        attributor: Attributor | None = None,
        cluster: ClusterRound | None = None,
        podresources: Callable[[], KubeletAnswer] | None = None,
        dra: Callable[[frozenset[tuple[str, str]]], DraInventory | None] | None = None,
        build: tuple[tuple[str, str], ...] = (),
        own: Callable[[int, int], tuple[exposition.GaugeFamily, ...]] | None = None,
        skipped_lines: Callable[[], Mapping[str, int]] | None = None,
        wall: Callable[[], float] = time.time,
        mono: Callable[[], float] = time.monotonic,
        outputs: Sequence[Output] = (),
        bus: Callable[[], pcibus.BusScan | None] | None = None,
    ) -> None:
        self.workers = list(workers)
        # The PCI bus's accelerator functions as last read (BusWatch: once a minute), which
        # the lost-card rule compares with what each library enumerates; None: not read.
        self.bus = bus
        self.build = build
        # The agent's report on itself (R-X8), asked with the rounds completed and failed when
        # a round ends (agent/selfmetrics.py); None where no server runs.
        self.own = own
        self.period = period
        self.deadline = deadline
        self.liveness_timeout = liveness_timeout
        self.node = node
        # Where the node's pods come from (a file in replay, the API server in a cluster);
        # without them no grant is known and the per-grant figures are absent, not zero.
        self.pods = pods
        self.attributor = attributor
        self.cluster = cluster
        # The kubelet's device-plugin allocations (R-X2); None where there is no kubelet.
        self.podresources = podresources
        # The node's DRA inventory (R-X6), asked with the claims the kubelet named; None where
        # the cluster is not asked (replay without slices, no API server). It answers None on
        # a cluster that serves no resource.k8s.io API: no DRA there, and no DRA verdict.
        self.dra = dra
        # Lines of the cluster's watch streams that were no event, skipped, by watch; None
        # where nothing is watched.
        self.skipped_lines = skipped_lines
        self._wall, self._mono = wall, mono
        # A cache, not meaning: a pod's annotations parsed again only when the pod changed.
        self._annotation_grants = RememberedGrants()
        self._sources = sources(self._annotation_grants)
        empty = publish(snapshot.empty(period, node), mono(), exposition.Extras(build=build))
        self.published = Publisher(empty, mono)
        # The round's outputs, the published snapshot and /metrics first.
        self.outputs: tuple[Output, ...] = (self.published, *outputs)
        # Each further output's error as last logged, by its name: replaced whole on a change.
        self._output_errors: tuple[tuple[str, str], ...] = ()
        # What one round hands the next (round/steps.py), replaced whole when a round ends.
        self.memory = Memory()
        self._heartbeat = mono()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def current(self) -> Published:
        return self.published.current

    @property
    def rounds(self) -> int:
        return self.memory.rounds

    @property
    def rounds_failed(self) -> int:
        return self.memory.rounds_failed

    # -- one round ---------------------------------------------------------------------------

    def _collect(self, requests: Mapping[str, ReadRequest]) -> Reads:
        started = self._mono()
        pending: list[tuple[BackendWorker, Future[Any], float]] = []
        results: list[BackendResult] = []
        raw_errors: dict[str, str | None] = {}
        left_out: list[tuple[str, str, tuple[str, ...]]] = []
        read_at_boot: dict[str, float | None] = {}

        def failed(
            worker: BackendWorker, state: BackendState, took: float | None, error: str
        ) -> BackendResult:
            # The snapshot says what failed; only the log says where it lives on the host.
            raw_errors[worker.manufacturer] = error
            status = BackendStatus(
                worker.manufacturer, state, took, public_error(error), worker.last_success
            )
            return BackendResult(status=status)

        for worker in self.workers:
            if worker.busy_since is not None:
                since = started - worker.busy_since
                results.append(failed(worker, BackendState.STUCK, None, f"busy for {since:.1f}s"))
                continue
            request = requests.get(worker.manufacturer, ReadRequest())
            pending.append((worker, worker.submit(partial(worker.read, request)), self._mono()))
        for worker, future, submitted in pending:
            try:
                payload = future.result(timeout=max(0.0, started + self.deadline - self._mono()))
            except FutureTimeout:
                results.append(
                    failed(
                        worker,
                        BackendState.TIMEOUT,
                        self.deadline,
                        f"no answer in {self.deadline}s",
                    )
                )
                continue
            except BackendUnavailable as exc:
                results.append(failed(worker, BackendState.UNAVAILABLE, None, str(exc)))
                continue
            except Exception as exc:
                results.append(failed(worker, BackendState.ERROR, None, _describe(exc)))
                continue
            took = round(self._mono() - submitted, 6)
            read_at_boot[worker.manufacturer] = worker.read_began_boot
            read_at = self._wall()
            try:
                reading, dropped = finite_reading(worker.backend.parse(payload))
                reading, refused = plausible_reading(reading)
            except Exception as exc:
                error = f"payload could not be parsed: {_describe(exc)}"
                results.append(failed(worker, BackendState.ERROR, took, error))
                continue
            left_out.append(("nan", worker.manufacturer, dropped))
            left_out.append(("range", worker.manufacturer, refused))
            raw_errors[worker.manufacturer] = None
            worker.last_success = read_at
            results.append(
                BackendResult(
                    status=BackendStatus(
                        worker.manufacturer,
                        BackendState.OK,
                        took,
                        last_success=read_at,
                        via=reading.via,
                    ),
                    reading=reading,
                    read_at=read_at,
                )
            )
        return Reads(tuple(results), raw_errors, tuple(left_out), read_at_boot)

    def _pod_index(self) -> tuple[PodIndex | None, BaseException | None]:
        if self.pods is None:
            return None, None
        try:
            return self.pods(), None
        except Exception as exc:
            return None, exc

    def _kubelet(self) -> KubeletAnswer | None:
        """The kubelet's device-plugin grants (R-X2); never raises."""
        if self.podresources is None:
            return None
        try:
            return self.podresources()
        except Exception as exc:  # the reader never raises; a bug here must not end the round
            return KubeletAnswer(error=_describe(exc))

    def _dra_inventory(self, kubelet: KubeletAnswer | None) -> DraInventory | None:
        """The node's DRA slices and the claims the kubelet named; never raises."""
        if self.dra is None:
            return None
        try:
            return self.dra(deviceplugins.claim_refs(kubelet))
        except Exception as exc:  # the reader never raises; a bug here must not end the round
            return DraInventory(error=_describe(exc))

    def _attribute(
        self, learned: Learned, read_at: Mapping[str, float | None]
    ) -> dict[str, tuple[DeviceAttribution, ...] | BaseException] | None:
        """/proc's verdicts on each carved device's process rows, by manufacturer; what
        attribution raised stands in for a manufacturer's verdicts (settle says so)."""
        index = learned.plan.index
        if self.attributor is None or index is None:
            return None
        out: dict[str, tuple[DeviceAttribution, ...] | BaseException] = {}
        for ask in learned.asks:
            try:
                out[ask.manufacturer] = self.attributor.attribute(
                    ask.devices,
                    index,
                    ask.holders,
                    ask.manufacturer,
                    read_at=read_at.get(ask.manufacturer),
                )
            except Exception as exc:
                out[ask.manufacturer] = exc
        return out

    def _cluster(
        self, index: PodIndex | None, grants: NodeGrants | None
    ) -> tuple[exposition.Extras | None, dict[str, PodFault]]:
        faults: dict[str, PodFault] = {}
        if self.cluster is None:
            return None, faults
        return self.cluster.round(index, grants, exposition.Extras(), faults), faults

    def run_round(self) -> Published:
        started = self._mono()
        index, pods_error = self._pod_index()
        kubelet = self._kubelet()
        inventory = self._dra_inventory(kubelet)
        if index is not None:
            self._annotation_grants.retain(index)
        planned = plan(self.memory, index, kubelet, inventory, self._sources)
        reads = self._collect(planned.requests)
        learned = learn(
            self.memory, planned, reads.results, self.bus() if self.bus is not None else None
        )
        verdicts = self._attribute(learned, reads.read_at)
        now, took = self._wall(), round(self._mono() - started, 6)
        cluster, cluster_faults = self._cluster(index, learned.grants)
        inputs = Inputs(
            now=now,
            took=took,
            period=self.period,
            node=self.node,
            manufacturers=tuple(w.manufacturer for w in self.workers),
            raw_errors=reads.raw_errors,
            left_out=reads.left_out,
            pods_asked=self.pods is not None,
            pods_error=pods_error,
            verdicts=verdicts,
            cluster=cluster,
            cluster_faults=cluster_faults,
            skipped_lines=self.skipped_lines() if self.skipped_lines is not None else None,
            build=self.build,
            own=self.own(self.rounds + 1, self.rounds_failed) if self.own is not None else (),
        )
        self.memory, done = settle(self.memory, learned, inputs)
        emit(done.events)
        # Publishing is the round's own end: a failure to render fails the round, and the last
        # good snapshot stays served. A further output (an Event writer, …) only reads the round.
        self.published(done)
        for output in self.outputs[1:]:
            self._hand(output, done)
        self._heartbeat = self._mono()
        return self.current

    def _hand(self, output: Output, done: Round) -> None:
        """One further output given the round, behind a boundary of its own: one that raises is
        logged when its error starts or changes (not every round), and the round, the served
        snapshot and the other outputs go on."""
        name = getattr(output, "__qualname__", type(output).__qualname__)
        errors = dict(self._output_errors)
        try:
            output(done)
        except Exception as exc:
            error = _describe(exc)
            if errors.get(name) != error:
                log.error(
                    "round output %s failed; the round and the other outputs go on",
                    name,
                    exc_info=exc,
                    extra={"output": name, "error": error},
                )
                errors[name] = error
        else:
            if errors.pop(name, None) is not None:
                log.info("round output %s works again", name, extra={"output": name})
        if errors != dict(self._output_errors):
            self._output_errors = tuple(sorted(errors.items()))

    # -- the loop ----------------------------------------------------------------------------

    def _loop(self) -> None:
        next_tick = self._mono()
        while not self._stop.is_set():
            try:
                self.run_round()
            except Exception as exc:
                # Assembly or rendering failed: keep the last good snapshot, try next period
                # (logged when it starts failing, or fails otherwise, not every period; the
                # round that completes again says so).
                self.memory, events = round_failed(self.memory, exc)
                emit(events)
            next_tick += self.period
            now = self._mono()
            if next_tick < now:  # the round overran: skip the ticks it missed
                next_tick = now
            self._stop.wait(next_tick - now)

    def start(self) -> None:
        self._heartbeat = self._mono()
        self._thread = threading.Thread(target=self._loop, name="monitor", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> bool:
        """End the loop (a round in progress finishes, bounded by the backend deadline and
        `timeout`) and close every backend. False when some backend thread is hung in its
        library and could not be closed."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        closed = [worker.stop() for worker in self.workers]
        if self.attributor is not None:
            self.attributor.close()
        return all(closed)

    # -- probes (R-O2) -----------------------------------------------------------------------

    def liveness(self) -> tuple[bool, str]:
        now = self._mono()
        if self._thread is not None and not self._thread.is_alive():
            return False, "monitor loop is not running"
        silent = now - self._heartbeat
        if silent > self.liveness_timeout:
            return False, f"monitor loop has not finished a round for {silent:.0f}s"
        for worker in self.workers:
            busy = worker.busy_since
            if busy is not None and now - busy > self.liveness_timeout:
                return False, (
                    f"backend {worker.manufacturer} has been inside one call for {now - busy:.0f}s"
                )
        return True, "ok"

    def fresh(self, published: Published | None = None) -> bool:
        """Whether a published round is recent enough to be believed (three periods)."""
        published = published or self.current
        age = self._mono() - published.published_at
        return published.snapshot.timestamp > 0 and age <= FRESH_PERIODS * self.period

    def readiness(self) -> tuple[bool, str]:
        # A library that is down is data (backend_up 0, collector_success{source="backends"}
        # 0 when none answered), not unreadiness (R-O2): no restart or rollout would fix it.
        if self.current.snapshot.timestamp <= 0:
            return False, "no round has completed yet"
        if not self.fresh():
            return False, "the last completed round is older than three periods"
        return True, "ok"


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# An absolute path of two or more segments, not inside a URL or a word: /usr/lib/x/libfoo.so.1
_HOST_PATH = re.compile(r"(?<![\w.:/~-])/(?:[^\s/:'\"(),;]+/)+([^\s/:'\"(),;]+)")


def public_error(error: str) -> str:
    """A backend's error as the snapshot shows it: what failed, not where it lives on the host.
    `/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1: cannot open shared object file` becomes
    `libnvidia-ml.so.1: cannot open shared object file`; the log keeps the full text."""
    return _HOST_PATH.sub(r"\1", error)
