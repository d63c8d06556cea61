"""Placing every host PID a vendor reports in its pod and container, or saying why not (R-A2, R-A3).

Per PID, exactly one outcome: placed (pod UID, container name) or a reason. Per device, one
row that cannot be placed makes every per-process figure of that device absent for the round:
a partial sum is never published as a complete one, and a lost row never becomes a plausible
measured zero.

Reads per PID: `stat` (state, start time) and `cgroup`; the first time that (PID, start time,
cgroup text) is seen, also `comm`, `cgroup` again and `stat` again. A PID recycled between those
reads shows a different identity or start time and is `unstable`. The triple keys a cache, so a
steady-state round reads two small files per PID: a reused PID has a new start time and a
process moved to another cgroup (`cgroup.procs` written, a container restarted into a new
scope) has new cgroup text, and neither is served from the cache.

A PID is also checked against the vendor's read: a process that started after the vendor's
call began may have taken the PID of the process the vendor reported (which ended while the
call ran), whatever cgroup it is in, so it is `unstable` (the reported process is gone, or
cannot be told from its successor) rather than charged to the new process's pod. The price: a
process that really started during the call and was reported is `unstable` for that one round.
The comparison is in CLOCK_BOOTTIME seconds, the clock `stat`'s start time counts in. On the
live /proc each placed process is also held by a pidfd (devicemanager.node.pidfds): when it
shows the identified process ended and the PID's stat still shows its start time, the PID was
recycled within one clock tick, and the row is `unstable` too; without pidfds that window is
not closed, only made negligible.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from devicemanager.model import DeviceProcesses, ProcessRow, Reason
from devicemanager.node import cgroup, procfs
from devicemanager.node.cgroup import CgroupIdentity
from devicemanager.node.pidfds import PidFds
from devicemanager.node.pods import PodIndex
from devicemanager.node.procfs import ProcError

# The logger operators grep for absent figures (R-O5); the name is the reference's.
log = logging.getLogger("instance-accelerator-metrics")

# The MPS control daemon and server both show as this: comm is cut at 15 characters.
MPS_COMM = "nvidia-cuda-mps"

UNREADABLE = frozenset(
    {
        Reason.EXITED,
        Reason.PERMISSION,
        Reason.UNREADABLE,
        Reason.ZOMBIE,
        Reason.UNSTABLE,
        Reason.PID_NAMESPACE_INVISIBLE,
    }
)
AMBIGUOUS = frozenset(
    {
        Reason.NO_POD_COMPONENT,
        Reason.AMBIGUOUS_POD,
        Reason.NO_CONTAINER_COMPONENT,
        Reason.AMBIGUOUS_CONTAINER,
        Reason.UNKNOWN_POD,
        Reason.UNKNOWN_CONTAINER,
        Reason.MEDIATED,
    }
)


@dataclass(frozen=True, slots=True)
class Placement:
    pod_uid: str
    container: str  # the container's name; runtime ids and PIDs never leave the node


@dataclass(frozen=True, slots=True)
class Identified:
    """What /proc says of one PID: its cgroup identity, or the reason it could not be read."""

    identity: CgroupIdentity | None = None
    reason: Reason | None = None


@dataclass(frozen=True, slots=True)
class Resolution:
    """Exactly one of `placement` and `reason` is set."""

    placement: Placement | None = None
    reason: Reason | None = None
    identity: CgroupIdentity | None = None


@dataclass(frozen=True, slots=True)
class RowCounts:
    returned: int = 0
    attributed: int = 0
    non_instance: int = 0
    unreadable: int = 0
    ambiguous: int = 0


@dataclass(frozen=True, slots=True)
class DeviceAttribution:
    device_id: str
    reason: Reason | None  # the first reason a row could not be placed; poisons the device
    rows: tuple[tuple[ProcessRow, Placement], ...]  # rows of the device's grant holders
    counts: RowCounts


def place(identified: Identified, index: PodIndex) -> Resolution:
    """Join /proc's answer with the pod index. Pure."""
    identity = identified.identity
    if identity is None:
        return Resolution(reason=identified.reason or Reason.UNREADABLE)
    if identity.reason is not None or identity.pod_uid is None or identity.container_id is None:
        return Resolution(reason=identity.reason or Reason.NO_POD_COMPONENT, identity=identity)
    pod = index.get(identity.pod_uid)
    if pod is None:
        # The index may lag a new pod; never assume such a process is nobody's.
        return Resolution(reason=Reason.UNKNOWN_POD, identity=identity)
    name = pod.containers.get(identity.container_id)
    if name is None and pod.refused is not None:
        # A pod whose object was refused holds no grant: its process is its own (excluded from
        # every grant's figures), not an unknown one poisoning the card it shares.
        return Resolution(placement=Placement(pod.uid, ""), identity=identity)
    if name is None:
        return Resolution(reason=Reason.UNKNOWN_CONTAINER, identity=identity)
    return Resolution(placement=Placement(pod.uid, name), identity=identity)


def attribute_device(
    device: DeviceProcesses,
    resolutions: Mapping[int, Resolution],
    holders: frozenset[str],
    ever_seen: bool,
) -> DeviceAttribution:
    """The device verdict (R-A3). Pure.

    `holders` are the pods holding a grant on this device: a process of any other known pod is
    excluded, harmlessly. `ever_seen` says whether any PID of this device was ever found in
    /proc; if none ever was and none is now, the vendor reports PIDs of a namespace this agent
    cannot see (no hostPID), which is a deployment fault rather than a race.
    """
    rows = device.rows
    outcomes = [resolutions.get(r.pid, Resolution(reason=Reason.EXITED)) for r in rows]
    if rows and not ever_seen and all(o.reason is Reason.EXITED for o in outcomes):
        outcomes = [Resolution(reason=Reason.PID_NAMESPACE_INVISIBLE)] * len(rows)
    first: Reason | None = None
    placed: list[tuple[ProcessRow, Placement]] = []
    attributed = non_instance = unreadable = ambiguous = 0
    for row, outcome in zip(rows, outcomes, strict=True):
        if outcome.placement is not None:
            if outcome.placement.pod_uid in holders:
                attributed += 1
                placed.append((row, outcome.placement))
            else:
                non_instance += 1
            continue
        reason = outcome.reason or Reason.UNREADABLE
        first = first or reason
        if reason in UNREADABLE:
            unreadable += 1
        else:
            ambiguous += 1
    counts = RowCounts(len(rows), attributed, non_instance, unreadable, ambiguous)
    return DeviceAttribution(device.device_id, first, tuple(placed), counts)


class LogLimiter:
    """Says whether to log a key now: the first time, then at most once per interval."""

    def __init__(self, interval: float = 600.0, clock: Callable[[], float] = time.monotonic):
        self.interval, self._clock = interval, clock
        self._last: dict[tuple[str, ...], float] = {}
        self._suppressed: dict[tuple[str, ...], int] = {}

    def allow(self, key: tuple[str, ...]) -> tuple[bool, int]:
        """(log now?, how many were held back since the last line for this key)."""
        now = self._clock()
        last = self._last.get(key)
        if last is not None and now - last < self.interval:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return False, 0
        self._last[key] = now
        return True, self._suppressed.pop(key, 0)


def boot_seconds() -> float:
    """Seconds since boot on the clock /proc/<pid>/stat's start time is counted in."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def started_after(start_ticks: int, read_at: float | None, ticks_per_second: int) -> bool:
    """Whether a process with this start time began after a vendor read that began at
    `read_at` (boot seconds). Start times are truncated to a tick, so a process that started
    before the read is never judged to have started after it. Pure."""
    return read_at is not None and start_ticks / ticks_per_second > read_at


@dataclass(slots=True)
class _Known:
    """A PID as /proc last showed it, and where it was placed against which pod index."""

    start_ticks: int
    cgroup: bytes  # the cgroup file's bytes as read: compared, never parsed again
    identified: Identified
    index: PodIndex | None = None
    resolution: Resolution | None = None


def _start_and_state(stat: bytes) -> tuple[int, bytes]:
    """Start time and state from a stat line read as bytes (see procfs.parse_stat)."""
    fields = stat[stat.rindex(b")") + 1 :].split(None, 20)
    return int(fields[19]), fields[0]


class Resolver:
    """Reads /proc under `proc_root`; caches identities by (PID, start time, cgroup text).

    With `pidfds` (the live /proc of this PID namespace), a placed process is also held by a
    pidfd: while it has not ended, it is the process that was identified, so a steady round
    reads only its cgroup (to notice a move)."""

    def __init__(
        self,
        proc_root: Path | str,
        ticks_per_second: int | None = None,
        pidfds: PidFds | None = None,
    ) -> None:
        self.proc_root = Path(proc_root)
        self._root = str(self.proc_root)
        self.ticks_per_second = ticks_per_second or os.sysconf("SC_CLK_TCK")
        self.pidfds = pidfds
        self._cache: dict[int, _Known] = {}
        self._ended: set[int] = set()  # held PIDs whose process ended, as of this round
        self.reads = 0  # files read, for tests and the benchmark

    def _read(self, pid: int, name: str) -> str:
        self.reads += 1
        return procfs.read(self.proc_root, pid, name)

    def _read_raw(self, pid: int, name: str) -> bytes:
        self.reads += 1
        return procfs.read_raw(self.proc_root, pid, name)

    def _stat(self, pid: int) -> procfs.Stat:
        self.reads += 1
        return procfs.read_stat(self.proc_root, pid)

    def _steady(self, pid: int, read_at: float | None) -> _Known | None:
        """The cache's answer when this PID's stat and cgroup say nothing changed: two plain
        reads, the cgroup compared as bytes. None whenever anything differs or fails; the full
        read then decides, with its reasons. This is the path of every PID from its second
        round on, so it does no more than the reads and one comparison."""
        known = self._cache.get(pid)
        if known is None:
            return None
        if self.pidfds is not None and self.pidfds.holds(pid):
            if pid in self._ended:
                return None
            self.reads += 1
            try:
                text = procfs.read_bytes(f"{self._root}/{pid}/cgroup")
            except OSError:
                return None
            return known if text == known.cgroup else None
        try:
            stat = procfs.read_bytes(f"{self._root}/{pid}/stat")
            text = procfs.read_bytes(f"{self._root}/{pid}/cgroup")
            start, state = _start_and_state(stat)
        except (OSError, ValueError, IndexError):
            return None
        finally:
            self.reads += 2
        if (
            text != known.cgroup
            or start != known.start_ticks
            or state in (b"Z", b"X")
            or started_after(start, read_at, self.ticks_per_second)
        ):
            return None
        return known

    def identify(self, pid: int, read_at: float | None = None) -> Identified:
        """What /proc says of `pid`. `read_at`: when the vendor's call naming it began (boot
        seconds); a process started later is not taken for the one it reported. Never raises: the
        cgroup text and comm are written by the tenant's side of the node (a process can name
        itself, a delegated cgroup can be named freely), so anything unforeseen in them makes
        this one row `unreadable`, which keeps its device's per-process figures absent rather
        than failing the round."""
        known = self._steady(pid, read_at)
        return known.identified if known is not None else self._full(pid, read_at)

    def _identify(self, pid: int, read_at: float | None = None) -> Identified:
        try:
            stat = self._stat(pid)
            if stat.state in ("Z", "X"):
                return Identified(reason=Reason.ZOMBIE if stat.state == "Z" else Reason.EXITED)
            if started_after(stat.start_ticks, read_at, self.ticks_per_second):
                # The reported process is gone and its PID recycled: seen, but not that one.
                return Identified(reason=Reason.UNSTABLE)
            cached = self._cache.get(pid)
            if pid in self._ended and cached is not None and cached.start_ticks == stat.start_ticks:
                # The pidfd says the process identified here ended; a process with its PID and
                # its start time is its successor within one tick: not to be told apart this
                # round. Forgotten, so the next round (whose vendor read saw only the
                # successor) identifies it afresh.
                del self._cache[pid]
                self._ended.discard(pid)
                self._release(pid)
                return Identified(reason=Reason.UNSTABLE)
            raw = self._read_raw(pid, "cgroup")
            if (
                cached is not None
                and cached.start_ticks == stat.start_ticks
                and cached.cgroup == raw
            ):
                return cached.identified
            first = cgroup.parse(procfs.text_of(raw, pid, "cgroup"))
            comm = self._read(pid, "comm").strip()
            second = cgroup.parse(self._read(pid, "cgroup"))
            # Held before the last stat: if that stat still shows the same start time, the
            # handle is on the process identified here, not on a successor.
            if self.pidfds is not None:
                self.pidfds.open(pid)
            again = self._stat(pid)
        except ProcError as exc:
            return Identified(reason=exc.reason)
        if first != second or again.start_ticks != stat.start_ticks:
            return Identified(reason=Reason.UNSTABLE)  # recycled mid-read: not cached
        if again.state == "Z":
            return Identified(reason=Reason.ZOMBIE)
        # The MPS daemon holds the device for other pods: its usage is nobody's to divide.
        result = (
            Identified(reason=Reason.MEDIATED) if comm.startswith(MPS_COMM) else Identified(first)
        )
        self._cache[pid] = _Known(stat.start_ticks, raw, result)
        return result

    def resolve(
        self, pids: Iterable[int], index: PodIndex, read_at: float | None = None
    ) -> dict[int, Resolution]:
        """Each distinct PID once; the cache keeps only PIDs of this round. A PID unchanged
        since the last round, against the same (immutable) pod index, keeps its placement."""
        wanted = set(pids)
        self._ended = self.pidfds.ended() if self.pidfds is not None else set()
        out = {}
        for pid in wanted:
            known = self._steady(pid, read_at)
            if known is not None and known.index is index and known.resolution is not None:
                out[pid] = known.resolution
                continue
            identified = known.identified if known is not None else self._full(pid, read_at)
            resolution = out[pid] = place(identified, index)
            known = self._cache.get(pid)
            if known is not None and known.identified is identified:
                known.index, known.resolution = index, resolution
        for stale in self._cache.keys() - wanted:
            del self._cache[stale]
            self._release(stale)
        return out

    def _release(self, pid: int) -> None:
        if self.pidfds is not None:
            self.pidfds.close(pid)

    def close(self) -> None:
        """Let go of every pidfd held."""
        if self.pidfds is not None:
            self.pidfds.close_all()
        self._cache.clear()

    def _full(self, pid: int, read_at: float | None) -> Identified:
        try:
            result = self._identify(pid, read_at)
        except Exception:
            log.debug("identifying PID %d failed", pid, exc_info=True)
            result = Identified(reason=Reason.UNREADABLE)
        known = self._cache.get(pid)
        if known is None or known.identified is not result:
            self._release(pid)  # only a process identified and cached is held
        return result


class Attributor:
    """One round's attribution over every device the vendor answered per process for.

    `recycled_check`: compare each process's start time with the vendor's read. On for the live
    /proc; off where the /proc tree is a recording whose start times are not this machine's.
    `pidfds`: hold each placed process by a pidfd (see devicemanager.node.pidfds); only for the live
    /proc of this agent's own PID namespace.
    """

    def __init__(
        self,
        proc_root: Path,
        limiter: LogLimiter | None = None,
        recycled_check: bool = False,
        pidfds: bool = False,
    ) -> None:
        self.resolver = Resolver(proc_root, pidfds=PidFds() if pidfds else None)
        self.limiter = limiter or LogLimiter()
        self.recycled_check = recycled_check
        self._seen: set[str] = set()  # devices some PID of which was ever found in /proc

    def attribute(
        self,
        devices: Sequence[DeviceProcesses],
        index: PodIndex,
        holders: Mapping[str, frozenset[str]],
        manufacturer: str = "",
        read_at: float | None = None,
    ) -> tuple[DeviceAttribution, ...]:
        """`read_at`: when the vendor's read began, in boot seconds (see boot_seconds)."""
        resolutions = self.resolver.resolve(
            (r.pid for d in devices for r in d.rows),
            index,
            read_at if self.recycled_check else None,
        )
        out = []
        for device in devices:
            outcomes = [resolutions[r.pid] for r in device.rows]
            if any(o.reason is not Reason.EXITED for o in outcomes):
                self._seen.add(device.device_id)
            verdict = attribute_device(
                device,
                resolutions,
                holders.get(device.device_id, frozenset()),
                ever_seen=device.device_id in self._seen,
            )
            self._log(manufacturer, verdict)
            out.append(verdict)
        return tuple(out)

    def close(self) -> None:
        self.resolver.close()

    def _log(self, manufacturer: str, verdict: DeviceAttribution) -> None:
        if verdict.reason is None:
            return
        ok, held_back = self.limiter.allow((manufacturer, verdict.device_id, verdict.reason))
        if ok:
            log.warning(
                "per-process figures of %s are absent this round: %s",
                verdict.device_id,
                verdict.reason.value,
                extra={
                    "manufacturer": manufacturer,
                    "device": verdict.device_id,
                    "reason": verdict.reason.value,
                    "rows_returned": verdict.counts.returned,
                    "rows_unreadable": verdict.counts.unreadable,
                    "rows_ambiguous": verdict.counts.ambiguous,
                    "repeats_not_logged": held_back,
                },
            )
