"""The monitor loop: one round per period, each backend on its own thread with a deadline.

Vendor calls block inside C and cannot be interrupted from Python, so every backend runs on a
worker thread of its own. A round waits for each until the deadline and moves on; a worker
still busy at the next round is reported `stuck` and not called again (calling into a library
that is hung in another thread would only pile up threads). Other backends and the HTTP server
go on (R-O3). A worker stuck past the liveness timeout makes /livez fail, because only a
restart gets a thread back from a hung driver call.
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
from dataclasses import replace
from functools import partial
from typing import Any, Protocol

from devicemanager.agent import logs
from devicemanager.backend import Backend, BackendUnavailable
from devicemanager.figures import exposition, slices, snapshot
from devicemanager.figures.figures import View, exported
from devicemanager.figures.published import Published, publish
from devicemanager.figures.ranges import plausible_reading
from devicemanager.figures.snapshot import BackendResult
from devicemanager.grants import deviceplugins, dra
from devicemanager.grants.deviceplugins import KubeletAnswer
from devicemanager.grants.dra import DraInventory
from devicemanager.grants.grants import (
    HELD_BY_ANOTHER_POD,
    Disagreement,
    NodeGrants,
    RememberedGrants,
    node_grants,
)
from devicemanager.model import (
    BackendState,
    BackendStatus,
    Card,
    Identities,
    Payload,
    PodFault,
    ReadRequest,
    SliceSection,
    finite_reading,
)
from devicemanager.node import isolation
from devicemanager.node.attribution import Attributor, boot_seconds
from devicemanager.node.isolation import FaultLog
from devicemanager.node.pods import PodIndex

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


# The cards each manufacturer's library listed in this run, remembered so that one it stops
# listing is reported `not_enumerated` whatever the kubelet says; far above any node's count.
MAX_CARDS_SEEN = 1024


class Monitor:
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
    ) -> None:
        self.workers = list(workers)
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
        self._inventory: DraInventory | None = None
        self._kubelet_health: dict[tuple[str, str], str] = {}
        self._dra_error: str | None = None
        self._allocation_errors: dict[str, str] = {}
        self._annotation_grants = RememberedGrants()
        # Each manufacturer's aliases as its last reading named them: the round's requests ask
        # for cards by the library's own ids even when an allocator recorded another form.
        self._identities = Identities()
        self._disagreements: dict[str, Disagreement] = {}
        self._refused: dict[str, tuple[str, ...]] = {}
        self._kubelet_state: tuple[str | None, str | None] | None = None
        # (manufacturer, a device plugin's id) -> card id: indexes, partitions' parents, aliases.
        self._aliases: dict[tuple[str, str], str] = {}
        self._cards_seen: dict[str, dict[str, Card]] = {}
        self._read_at: dict[str, float | None] = {}
        self._faults = FaultLog()
        self._raw_errors: dict[str, str | None] = {}
        # (NaN or out of range, manufacturer) -> the figures last left out, logged on a change
        self._figures_left_out: dict[tuple[str, str], tuple[str, ...]] = {}
        self._wall, self._mono = wall, mono
        self.current = publish(snapshot.empty(period, node), mono(), exposition.Extras(build=build))
        self.rounds = 0
        self.rounds_failed = 0
        # Each backend's state and error as last logged (STUCK's "busy for Ns" grows each round:
        # not a change), and the faults of the round's other steps.
        self._last_state: dict[str, tuple[BackendState, str | None]] = {}
        self._persisting = logs.Persisting(log)
        self._heartbeat = mono()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- one round ---------------------------------------------------------------------------

    def _collect(self, requests: dict[str, ReadRequest]) -> list[BackendResult]:
        started = self._mono()
        pending: list[tuple[BackendWorker, Future[Any], float]] = []
        results: list[BackendResult] = []
        for worker in self.workers:
            if worker.busy_since is not None:
                since = started - worker.busy_since
                results.append(
                    self._result(worker, BackendState.STUCK, None, f"busy for {since:.1f}s")
                )
                continue
            request = requests.get(worker.manufacturer, ReadRequest())
            pending.append((worker, worker.submit(partial(worker.read, request)), self._mono()))
        for worker, future, submitted in pending:
            try:
                payload = future.result(timeout=max(0.0, started + self.deadline - self._mono()))
            except FutureTimeout:
                results.append(
                    self._result(
                        worker,
                        BackendState.TIMEOUT,
                        self.deadline,
                        f"no answer in {self.deadline}s",
                    )
                )
                continue
            except BackendUnavailable as exc:
                results.append(self._result(worker, BackendState.UNAVAILABLE, None, str(exc)))
                continue
            except Exception as exc:
                results.append(self._result(worker, BackendState.ERROR, None, _describe(exc)))
                continue
            took = round(self._mono() - submitted, 6)
            self._read_at[worker.manufacturer] = worker.read_began_boot
            read_at = self._wall()
            try:
                reading, dropped = finite_reading(worker.backend.parse(payload))
                reading, refused = plausible_reading(reading)
            except Exception as exc:
                error = f"payload could not be parsed: {_describe(exc)}"
                results.append(self._result(worker, BackendState.ERROR, took, error))
                continue
            self._log_figures_left_out(
                "nan",
                worker.manufacturer,
                dropped,
                "backend %s answered figures that are not finite; they are absent",
            )
            self._log_figures_left_out(
                "range",
                worker.manufacturer,
                refused,
                "backend %s answered figures outside what the hardware can hold; they are "
                "absent (invalid_data)",
            )
            self._raw_errors[worker.manufacturer] = None
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
        return results

    def _result(
        self, worker: BackendWorker, state: BackendState, took: float | None, error: str
    ) -> BackendResult:
        # The snapshot says what failed; only the log says where it lives on the host.
        self._raw_errors[worker.manufacturer] = error
        status = BackendStatus(
            worker.manufacturer, state, took, public_error(error), worker.last_success
        )
        return BackendResult(status=status)

    def _log_figures_left_out(
        self, kind: str, manufacturer: str, paths: tuple[str, ...], message: str
    ) -> None:
        # Once per change, like the backend states: a card that keeps answering NaN, or a
        # sentinel, every round would otherwise log every period.
        key = (kind, manufacturer)
        if self._figures_left_out.get(key, ()) == paths:
            return
        self._figures_left_out[key] = paths
        if paths:
            log.warning(
                message,
                manufacturer,
                extra={"manufacturer": manufacturer, "figures": list(paths[:20])},
            )

    def _log_transitions(self, results: Sequence[BackendResult]) -> None:
        # One line when a fault starts and one when it changes (another state, or another
        # error), not one per round: a node without the library would otherwise log the same
        # sentence every period forever.
        for result in results:
            status = result.status
            error = self._raw_errors.get(status.manufacturer, status.error)
            logged = (status.state, None if status.state is BackendState.STUCK else error)
            if self._last_state.get(status.manufacturer) == logged:
                continue
            self._last_state[status.manufacturer] = logged
            level = logging.INFO if status.state is BackendState.OK else logging.WARNING
            log.log(
                level,
                "backend %s is %s",
                status.manufacturer,
                status.state.value,
                extra={
                    "manufacturer": status.manufacturer,
                    "state": status.state.value,
                    "error": error,
                },
            )

    def _pod_index(self) -> PodIndex | None:
        if self.pods is None:
            return None
        try:
            index = self.pods()
        except Exception as exc:
            self._persisting.failed(
                "pods",
                _describe(exc),
                "the node's pods could not be read; per-grant figures are absent",
                level=logging.ERROR,
                exc_info=exc,
            )
            return None
        self._persisting.recovered("pods", "the node's pods are read again")
        return index

    def _slices(
        self, results: Sequence[BackendResult], index: PodIndex | None, grants: NodeGrants | None
    ) -> SliceSection | None:
        """The per-grant section, or None when nothing could be measured (no pods, no carved
        grant, or no backend that answered for one)."""
        if index is None or grants is None or self.attributor is None:
            return None
        sections = []
        for result in results:
            reading = result.reading
            if reading is None:
                continue
            request = grants.request(reading.manufacturer)
            if not request.carved_device_ids:
                continue
            carved = [p for p in reading.processes if p.device_id in request.carved_device_ids]
            try:
                verdicts = self.attributor.attribute(
                    carved,
                    index,
                    grants.holders(reading.manufacturer),
                    reading.manufacturer,
                    read_at=self._read_at.get(reading.manufacturer),
                )
                # Each holder's part is behind the per-pod boundary inside `build`: a pod whose
                # part raises is in the section's faults (counted and logged with the round's).
                sections.append(slices.build(reading, verdicts, grants.all()))
            except Exception as exc:
                # What is no one pod's (attribution, a device's own entry) raised: this
                # manufacturer's per-grant figures are absent this round (its devices are
                # missing from the section: "could not measure"); cards and others go on.
                self._persisting.failed(
                    f"slices:{reading.manufacturer}",
                    _describe(exc),
                    "per-grant figures of %s could not be built",
                    reading.manufacturer,
                    level=logging.ERROR,
                    exc_info=exc,
                    extra={"manufacturer": reading.manufacturer},
                )
                continue
            self._persisting.recovered(
                f"slices:{reading.manufacturer}",
                "per-grant figures of %s are built again",
                reading.manufacturer,
                manufacturer=reading.manufacturer,
            )
        return slices.merge(sections) if sections else None

    # -- the kubelet's device-plugin grants (R-X2) -----------------------------------------------

    def _kubelet(self) -> KubeletAnswer | None:
        if self.podresources is None:
            return None
        try:
            answer = self.podresources()
        except Exception as exc:  # the reader never raises; a bug here must not end the round
            answer = KubeletAnswer(error=_describe(exc))
        state = (answer.error, answer.allocatable_error)
        if state != self._kubelet_state:
            ok = answer.ok and answer.allocatable_error is None
            log.log(
                logging.INFO if ok else logging.WARNING,
                "kubelet pod-resources %s",
                "read" if ok else "answered in part" if answer.pods is not None else "not read",
                extra={"error": answer.error, "allocatable_error": answer.allocatable_error},
            )
            self._kubelet_state = state
        return answer

    def _dra_inventory(self, kubelet: KubeletAnswer | None) -> DraInventory | None:
        """The node's DRA slices and the claims the kubelet named; never raises. A change of
        its error is logged once, not every round."""
        if self.dra is None:
            return None
        try:
            inventory = self.dra(deviceplugins.claim_refs(kubelet))
        except Exception as exc:  # the reader never raises; a bug here must not end the round
            inventory = DraInventory(error=_describe(exc))
        if inventory is None:
            return None
        if inventory.error != self._dra_error:
            log.log(
                logging.INFO if inventory.error is None else logging.WARNING,
                "DRA ResourceSlices %s",
                "read" if inventory.error is None else "not read",
                extra={"error": inventory.error},
            )
            self._dra_error = inventory.error
        return inventory

    def _grants(self, index: PodIndex | None, kubelet: KubeletAnswer | None) -> NodeGrants | None:
        if index is None:
            return None
        self._annotation_grants.retain(index)
        return node_grants(
            index,
            deviceplugins.pod_kubelet_grants(kubelet, index, self._aliases, self._inventory),
            self._annotation_grants,
        )

    def _log_disagreements(self, grants: NodeGrants, index: PodIndex) -> None:
        for uid, differs in grants.disagreements.items():
            if self._disagreements.get(uid) != differs:
                pod = index.get(uid)
                log.warning(
                    "%s/%s: its allocation annotation and the kubelet name different cards; "
                    "the annotation is used, but for what the kubelet gave another pod",
                    pod.namespace if pod else "?",
                    pod.name if pod else uid,
                    extra={"pod_uid": uid, "disagreement": str(differs)},
                )
        self._disagreements = dict(grants.disagreements)
        refused = {uid: tuple(sorted(g.entry_id for g in gs)) for uid, gs in grants.refused.items()}
        for uid, ids in refused.items():
            if self._refused.get(uid) != ids:
                pod = index.get(uid)
                log.warning(
                    "%s/%s: its allocation annotation names what the kubelet gave another pod; "
                    "those grants are refused",
                    pod.namespace if pod else "?",
                    pod.name if pod else uid,
                    extra={"pod_uid": uid, "refused": list(ids), "reason": HELD_BY_ANOTHER_POD},
                )
        self._refused = refused

    def _learn(self, results: Sequence[BackendResult]) -> bool:
        """Aliases and cards from what the libraries enumerated; whether an alias is new."""
        readings = [r.reading for r in results if r.reading is not None]
        learned = deviceplugins.aliases_of(readings)
        for reading in readings:
            seen = self._cards_seen.setdefault(reading.manufacturer, {})
            seen.update((c.id, c) for c in reading.cards)
            if len(seen) > MAX_CARDS_SEEN:  # a library inventing ids: remember what it lists now
                self._cards_seen[reading.manufacturer] = {c.id: c for c in reading.cards}
        if learned.items() <= self._aliases.items():
            return False
        # Kept across rounds (a lost card is still named by its index); bounded all the same.
        self._aliases = learned if len(self._aliases) > 4096 else {**self._aliases, **learned}
        return True

    def _with_missing_cards(
        self, results: list[BackendResult], kubelet: KubeletAnswer | None
    ) -> list[BackendResult]:
        """A card the kubelet allocates and the library does not list is unhealthy."""
        out = []
        for result in results:
            reading = result.reading
            if reading is not None:
                allocatable = deviceplugins.allocatable_cards(
                    kubelet, reading.manufacturer, self._aliases
                )
                # A card the node's DRA slices offer is the kubelet's to give as much.
                offered = dra.inventory_cards(self._inventory, reading.manufacturer, self._aliases)
                if offered is not None:
                    allocatable = offered | (allocatable or frozenset())
                missing = deviceplugins.missing_cards(
                    reading, allocatable, self._cards_seen.get(reading.manufacturer, {})
                )
                if missing:
                    reading = replace(reading, cards=reading.cards + missing)
                    result = replace(result, reading=reading)
                reading = deviceplugins.with_dra_health(
                    reading, self._inventory, self._aliases, self._kubelet_health
                )
                if reading is not result.reading:
                    result = replace(result, reading=reading)
            out.append(result)
        return out

    def run_round(self) -> Published:
        started = self._mono()
        index = self._pod_index()
        kubelet = self._kubelet()
        self._inventory = self._dra_inventory(kubelet)
        # The kubelet's word on unhealthy devices its pods hold (KEP-4680), by card.
        self._kubelet_health = (
            dra.kubelet_health(
                (r for pod in index.pods.values() for r in pod.device_health),
                self._inventory,
                self._aliases,
            )
            if index is not None
            else {}
        )
        recorded = self._grants(index, kubelet)
        grants = recorded.resolve(self._identities) if recorded is not None else None
        requests = {
            w.manufacturer: grants.request(w.manufacturer) if grants else ReadRequest()
            for w in self.workers
        }
        results = self._collect(requests)
        self._log_transitions(results)
        for result in results:
            if result.reading is not None:
                reading = result.reading
                self._identities = self._identities.updated(
                    reading.manufacturer, [*reading.cards, *reading.partitions]
                )
        if self._learn(results) and kubelet is not None:
            # A partition's card or an index became known this round: this round's grants
            # name it already.
            recorded = self._grants(index, kubelet)
        if recorded is not None:
            grants = recorded.resolve(self._identities)
        if grants is not None and index is not None:
            self._log_disagreements(grants, index)
        results = self._with_missing_cards(results, kubelet)
        faults: dict[str, PodFault] = {}
        if grants is not None:
            faults.update(
                (uid, PodFault(isolation.GRANTS, error)) for uid, error in grants.errors.items()
            )
        section = self._slices(results, index, grants)
        snap = snapshot.assemble(
            now=self._wall(),
            period=self.period,
            node=self.node,
            results=results,
            round_duration=round(self._mono() - started, 6),
            slices=section,
        )
        extras = exposition.Extras(
            instances=exported(
                index, grants, View.of(snap), [w.manufacturer for w in self.workers], faults
            ),
            allocation_errors=len(grants.errors) if grants is not None else 0,
            grants_refused=grants.refused_count() if grants is not None else {},
            podresources_success=kubelet.ok if kubelet is not None else None,
            podresources_duration=kubelet.duration_seconds if kubelet is not None else None,
            dra_success=None if self._inventory is None else self._inventory.error is None,
            dra_unresolved=deviceplugins.count_unresolved(
                kubelet, index, self._aliases, self._inventory
            )
            if self._inventory is not None and index is not None
            else {},
            build=self.build,
            skipped_lines=dict(self.skipped_lines()) if self.skipped_lines is not None else None,
        )
        if self.cluster is not None:
            extras = self.cluster.round(index, grants, extras, faults)
        self._faults.report(faults, index)
        extras = replace(extras, pod_errors=isolation.count_by_stage(faults))
        if self.own is not None:
            extras = replace(extras, own=self.own(self.rounds + 1, self.rounds_failed))
        published = publish(snap, self._mono(), extras)
        self.current = published
        self.rounds += 1
        self._heartbeat = self._mono()
        return published

    # -- the loop ----------------------------------------------------------------------------

    def _loop(self) -> None:
        next_tick = self._mono()
        while not self._stop.is_set():
            try:
                self.run_round()
            except Exception as exc:
                # Assembly or rendering failed: keep the last good snapshot, try next period
                # (logged when it starts failing, or fails otherwise, not every period).
                self.rounds_failed += 1
                self._persisting.failed(
                    "round",
                    _describe(exc),
                    "monitor round failed",
                    level=logging.ERROR,
                    exc_info=exc,
                )
            else:
                self._persisting.recovered("round", "monitor rounds complete again")
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
