"""Resolver, cache and device verdict over generated /proc trees (R-A2, R-A3).

Races are made deterministic by changing a file between two of the resolver's own reads.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from devicemanager.model import DeviceProcesses, ProcessRow, Reason
from devicemanager.node.attribution import (
    Attributor,
    LogLimiter,
    Placement,
    Resolution,
    Resolver,
    attribute_device,
    started_after,
)
from devicemanager.node.pods import PodIndex
from tests.conftest import REPO, agent_env

UID_A = "11111111-1111-4111-8111-111111111111"
UID_B = "22222222-2222-4222-8222-222222222222"
CID_A = "a" * 64
CID_B = "b" * 64
CID_SIDE = "c" * 64


def stat(pid: int, start: int, state: str = "S") -> str:
    tail = " ".join(["0"] * 30)
    return f"{pid} (py thon) x) {state} 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {start} {tail}\n"


def put(
    root: Path,
    pid: int,
    uid: str | None,
    cid: str | None,
    start: int = 100,
    comm: str = "python3",
    state: str = "S",
) -> None:
    d = root / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    path = f"/kubepods/burstable/pod{uid}/{cid}" if uid else "/system.slice/sshd.service"
    (d / "cgroup").write_text(f"0::{path}\n")
    (d / "stat").write_text(stat(pid, start, state))
    (d / "comm").write_text(comm + "\n")


def pod(uid: str, name: str, containers: dict[str, str]) -> dict[str, object]:
    return {
        "metadata": {"uid": uid, "name": name, "namespace": "ns"},
        "status": {
            "containerStatuses": [
                {"name": n, "containerID": f"containerd://{cid}", "state": {"running": {}}}
                for cid, n in containers.items()
            ]
        },
    }


INDEX = PodIndex.of(
    [pod(UID_A, "a", {CID_A: "main", CID_SIDE: "sidecar"}), pod(UID_B, "b", {CID_B: "main"})]
)


def test_cache_keeps_steady_state_to_stat_and_cgroup_per_pid(tmp_path: Path) -> None:
    put(tmp_path, 10, UID_A, CID_A)
    put(tmp_path, 11, UID_B, CID_B)
    resolver = Resolver(tmp_path)
    first = resolver.resolve([10, 11], INDEX)
    assert first[10].placement == Placement(UID_A, "main")
    assert first[11].placement == Placement(UID_B, "main")
    assert resolver.reads == 2 * 5  # stat, cgroup, comm, cgroup, stat
    resolver.reads = 0
    again = resolver.resolve([10, 11], INDEX)
    assert again == first and resolver.reads == 2 * 2  # stat, cgroup


def test_a_process_moved_to_another_cgroup_is_resolved_again(tmp_path: Path) -> None:
    put(tmp_path, 10, UID_A, CID_A, start=100)
    resolver = Resolver(tmp_path)
    assert resolver.resolve([10], INDEX)[10].placement == Placement(UID_A, "main")
    # Same PID, same start time, written into another container's cgroup.procs.
    put(tmp_path, 10, UID_A, CID_SIDE, start=100)
    assert resolver.resolve([10], INDEX)[10].placement == Placement(UID_A, "sidecar")


@pytest.mark.parametrize(
    ("start_ticks", "read_at", "after"),
    [
        (100, None, False),  # no read time: nothing to compare
        (100, 1.0, False),  # started exactly at the read: not after it
        (99, 1.0, False),
        (101, 1.0, True),
        (0, 0.0, False),
    ],
)
def test_started_after_compares_ticks_with_the_read(
    start_ticks: int, read_at: float | None, after: bool
) -> None:
    assert started_after(start_ticks, read_at, 100) is after


def test_a_pid_that_started_after_the_vendor_read_is_not_charged(tmp_path: Path) -> None:
    # The vendor read returned 5.00 s after boot; PID 10 now belongs to a process of pod B that
    # started at 5.01 s: the process the vendor reported has exited and its PID was reused.
    put(tmp_path, 10, UID_B, CID_B, start=501)
    resolver = Resolver(tmp_path, ticks_per_second=100)
    assert resolver.resolve([10], INDEX, read_at=5.0)[10].reason is Reason.UNSTABLE
    # The same process read against a later vendor answer is what that answer reported.
    assert resolver.resolve([10], INDEX, read_at=5.02)[10].placement == Placement(UID_B, "main")


def test_a_reused_pid_is_never_served_from_the_cache(tmp_path: Path) -> None:
    put(tmp_path, 10, UID_A, CID_A, start=100)
    resolver = Resolver(tmp_path)
    assert resolver.resolve([10], INDEX)[10].placement == Placement(UID_A, "main")
    # PID 10 exits and is handed to a process of another pod: a new start time.
    put(tmp_path, 10, UID_B, CID_B, start=900)
    assert resolver.resolve([10], INDEX)[10].placement == Placement(UID_B, "main")


@pytest.mark.parametrize(("state", "reason"), [("Z", Reason.ZOMBIE), ("X", Reason.EXITED)])
def test_a_placed_process_that_dies_is_not_served_from_the_cache(
    tmp_path: Path, state: str, reason: Reason
) -> None:
    # Without a pidfd the steady path reads stat: same start time and cgroup, but its state
    # says the process has ended, so the cached placement is not served.
    put(tmp_path, 10, UID_A, CID_A, start=100)
    resolver = Resolver(tmp_path)
    assert resolver.resolve([10], INDEX)[10].placement == Placement(UID_A, "main")
    put(tmp_path, 10, UID_A, CID_A, start=100, state=state)
    assert resolver.resolve([10], INDEX)[10].reason is reason


def test_a_pid_reused_in_the_same_container_is_read_afresh(tmp_path: Path) -> None:
    # The MPS daemon exits and a CUDA client of the same container gets its PID: same cgroup
    # text, a new start time. Only the full read (comm) tells them apart.
    put(tmp_path, 10, UID_A, CID_A, start=100, comm="nvidia-cuda-mps")
    resolver = Resolver(tmp_path)
    assert resolver.resolve([10], INDEX)[10].reason is Reason.MEDIATED
    put(tmp_path, 10, UID_A, CID_A, start=900, comm="python3")
    resolver.reads = 0
    assert resolver.resolve([10], INDEX)[10].placement == Placement(UID_A, "main")
    assert resolver.reads == 2 + 5  # the steady stat and cgroup, then the full read


def test_a_steady_pid_against_the_same_index_keeps_its_resolution(tmp_path: Path) -> None:
    put(tmp_path, 10, UID_A, CID_A)
    resolver = Resolver(tmp_path)
    first = resolver.resolve([10], INDEX)
    assert resolver.resolve([10], INDEX)[10] is first[10]  # served, not placed again


def test_a_steady_pid_is_placed_again_against_a_newer_pod_index(tmp_path: Path) -> None:
    # The index lagged pod A's creation: unknown first, then placed once the index has it.
    put(tmp_path, 10, UID_A, CID_A)
    resolver = Resolver(tmp_path)
    lagging = PodIndex.of([pod(UID_B, "b", {CID_B: "main"})])
    assert resolver.resolve([10], lagging)[10].reason is Reason.UNKNOWN_POD
    assert resolver.resolve([10], INDEX)[10].placement == Placement(UID_A, "main")
    assert resolver.resolve([10], lagging)[10].reason is Reason.UNKNOWN_POD


def test_a_pid_unreadable_for_one_round_is_placed_again_once_readable(tmp_path: Path) -> None:
    # One round's failure is that round's answer only: it is not kept as the PID's placement.
    put(tmp_path, 10, UID_A, CID_A, start=100)
    resolver = Resolver(tmp_path)
    assert resolver.resolve([10], INDEX)[10].placement == Placement(UID_A, "main")
    good = (tmp_path / "10" / "stat").read_text()
    (tmp_path / "10" / "stat").write_text("10 (python3 S 1\n")
    assert resolver.resolve([10], INDEX)[10].reason is Reason.UNREADABLE
    (tmp_path / "10" / "stat").write_text(good)
    resolver.reads = 0
    assert resolver.resolve([10], INDEX)[10].placement == Placement(UID_A, "main")
    assert resolver.reads == 2  # the same (PID, start time, cgroup): from the cache


class Recycling(Resolver):
    """Swaps what /proc/<pid> shows right after the resolver's n-th read of `name`."""

    def __init__(self, root: Path, name: str, after: int, swap: object) -> None:
        super().__init__(root)
        self.name, self.after, self.swap, self.count = name, after, swap, 0

    def _counted(self, name: str) -> None:
        if name == self.name:
            self.count += 1
            if self.count == self.after:
                self.swap()  # type: ignore[operator]

    def _read(self, pid: int, name: str) -> str:
        text = super()._read(pid, name)
        self._counted(name)
        return text

    def _read_raw(self, pid: int, name: str) -> bytes:
        data = super()._read_raw(pid, name)
        self._counted(name)
        return data


def test_a_pid_recycled_into_another_pod_between_reads_is_unstable(tmp_path: Path) -> None:
    put(tmp_path, 10, UID_A, CID_A)
    resolver = Recycling(tmp_path, "cgroup", 1, lambda: put(tmp_path, 10, UID_B, CID_B, start=100))
    assert resolver.resolve([10], INDEX)[10].reason is Reason.UNSTABLE


def test_a_pid_recycled_within_its_own_container_is_caught_by_start_time(tmp_path: Path) -> None:
    put(tmp_path, 10, UID_A, CID_A, start=100)
    resolver = Recycling(tmp_path, "comm", 1, lambda: put(tmp_path, 10, UID_A, CID_A, start=101))
    assert resolver.identify(10).reason is Reason.UNSTABLE
    assert resolver._cache == {}  # an unstable answer is never cached


def test_a_pid_that_exits_between_reads(tmp_path: Path) -> None:
    put(tmp_path, 10, UID_A, CID_A)

    def vanish() -> None:
        for f in (tmp_path / "10").iterdir():
            f.unlink()
        (tmp_path / "10").rmdir()

    resolver = Recycling(tmp_path, "cgroup", 1, vanish)
    assert resolver.identify(10).reason is Reason.EXITED
    assert Resolver(tmp_path).identify(99).reason is Reason.EXITED


@pytest.mark.parametrize(
    ("setup", "reason"),
    [
        (lambda r: put(r, 10, UID_A, CID_A, state="Z"), Reason.ZOMBIE),
        (lambda r: put(r, 10, UID_A, CID_A, comm="nvidia-cuda-mps"), Reason.MEDIATED),
        (lambda r: put(r, 10, None, None), Reason.NO_POD_COMPONENT),
        (lambda r: put(r, 10, "33333333-3333-4333-8333-333333333333", CID_A), Reason.UNKNOWN_POD),
        (lambda r: put(r, 10, UID_A, "d" * 64), Reason.UNKNOWN_CONTAINER),
    ],
)
def test_one_outcome_per_pid(tmp_path: Path, setup, reason: Reason) -> None:  # type: ignore[no-untyped-def]
    setup(tmp_path)
    assert Resolver(tmp_path).resolve([10], INDEX)[10].reason is reason


def test_a_damaged_stat_file_is_unreadable(tmp_path: Path) -> None:
    put(tmp_path, 10, UID_A, CID_A)
    (tmp_path / "10" / "stat").write_text("10 (python3 S 1\n")
    assert Resolver(tmp_path).identify(10).reason is Reason.UNREADABLE
    (tmp_path / "10" / "stat").write_bytes(b"\xff\xfe")
    assert Resolver(tmp_path).identify(10).reason is Reason.UNREADABLE


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to another user")
def test_permission_denied_by_the_kernel(tmp_path: Path) -> None:
    # Root reads any file, so the denial is produced for real by resolving as `nobody`.
    root = tmp_path / "proc"
    put(root, 10, UID_A, CID_A)
    tmp_path.chmod(0o755)
    root.chmod(0o755)
    (root / "10").chmod(0o700)
    # Imports first, as root (the interpreter's own files may be unreadable to `nobody`), then
    # the effective user drops before /proc is read.
    script = (
        "import os, sys; from devicemanager.node.attribution import Resolver; "
        "r = Resolver(sys.argv[1]); os.setegid(65534); os.seteuid(65534); "
        "print(r.identify(10).reason.value)"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(root)],
        capture_output=True,
        text=True,
        env=agent_env(),
        cwd=REPO,
        check=True,
    )
    assert out.stdout.strip() == "permission"


# -- the device verdict ------------------------------------------------------------------------

DEVICE = "GPU-x"


def device(*pids: int) -> DeviceProcesses:
    return DeviceProcesses(DEVICE, tuple(ProcessRow(pid, 1 << 20, 10.0) for pid in pids))


def placed(uid: str, container: str = "main") -> Resolution:
    return Resolution(placement=Placement(uid, container))


def test_rows_of_holders_are_attributed_and_other_pods_excluded_harmlessly() -> None:
    verdict = attribute_device(
        device(1, 2, 3),
        {1: placed(UID_A), 2: placed(UID_A, "sidecar"), 3: placed(UID_B)},
        holders=frozenset({UID_A}),
        ever_seen=True,
    )
    assert verdict.reason is None
    assert [(r.pid, p.container) for r, p in verdict.rows] == [(1, "main"), (2, "sidecar")]
    assert (verdict.counts.returned, verdict.counts.attributed, verdict.counts.non_instance) == (
        3,
        2,
        1,
    )


def test_one_unplaceable_row_poisons_the_device_with_the_first_reason() -> None:
    verdict = attribute_device(
        device(1, 2, 3, 4),
        {
            1: placed(UID_A),
            2: Resolution(reason=Reason.NO_POD_COMPONENT),
            3: Resolution(reason=Reason.EXITED),
            4: Resolution(reason=Reason.MEDIATED),
        },
        holders=frozenset({UID_A}),
        ever_seen=True,
    )
    assert verdict.reason is Reason.NO_POD_COMPONENT
    c = verdict.counts
    assert (c.returned, c.attributed, c.unreadable, c.ambiguous) == (4, 1, 1, 2)


def test_every_pid_missing_and_none_ever_seen_is_an_invisible_namespace() -> None:
    gone = {1: Resolution(reason=Reason.EXITED), 2: Resolution(reason=Reason.EXITED)}
    never = attribute_device(device(1, 2), gone, frozenset({UID_A}), ever_seen=False)
    assert never.reason is Reason.PID_NAMESPACE_INVISIBLE and never.counts.unreadable == 2
    seen = attribute_device(device(1, 2), gone, frozenset({UID_A}), ever_seen=True)
    assert seen.reason is Reason.EXITED


def test_no_rows_is_a_measured_idle_device() -> None:
    verdict = attribute_device(device(), {}, frozenset({UID_A}), ever_seen=False)
    assert verdict.reason is None and verdict.rows == () and verdict.counts.returned == 0


def test_attributor_tracks_invisible_namespaces_per_device(tmp_path: Path) -> None:
    attributor = Attributor(tmp_path)
    holders = {DEVICE: frozenset({UID_A})}
    (first,) = attributor.attribute([device(10)], INDEX, holders)
    assert first.reason is Reason.PID_NAMESPACE_INVISIBLE
    put(tmp_path, 11, UID_A, CID_A)
    (second,) = attributor.attribute([device(11)], INDEX, holders)
    assert second.reason is None
    # Now a PID of this device has been seen: a later full miss is the ordinary race.
    (third,) = attributor.attribute([device(12)], INDEX, holders)
    assert third.reason is Reason.EXITED


def test_a_recorded_tree_is_not_checked_against_the_vendor_read_unless_asked(
    tmp_path: Path,
) -> None:
    # A recording's start times are not this machine's: 10^9 ticks is years after boot.
    put(tmp_path, 10, UID_A, CID_A, start=10**9)
    holders = {DEVICE: frozenset({UID_A})}
    (recorded,) = Attributor(tmp_path).attribute([device(10)], INDEX, holders, read_at=5.0)
    assert recorded.reason is None and recorded.counts.attributed == 1
    live = Attributor(tmp_path, recycled_check=True)
    (checked,) = live.attribute([device(10)], INDEX, holders, read_at=5.0)
    assert checked.reason is Reason.UNSTABLE and checked.counts.unreadable == 1


def test_a_recorded_tree_is_read_by_its_stat_without_pidfds(tmp_path: Path) -> None:
    # The tree names a PID that is alive here (this test's own), so a pidfd could be opened on
    # it; by default none is, and the tree's stat decides: a zombie there is a zombie.
    pid = os.getpid()
    put(tmp_path, pid, UID_A, CID_A, start=100)
    attributor = Attributor(tmp_path)
    holders = {DEVICE: frozenset({UID_A})}
    (first,) = attributor.attribute([device(pid)], INDEX, holders)
    assert first.reason is None and first.counts.attributed == 1
    put(tmp_path, pid, UID_A, CID_A, start=100, state="Z")
    (second,) = attributor.attribute([device(pid)], INDEX, holders)
    attributor.close()
    assert second.reason is Reason.ZOMBIE
    assert attributor.resolver.pidfds is None


def test_reasons_are_logged_under_their_logger_without_flooding(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    now = [0.0]
    attributor = Attributor(tmp_path, LogLimiter(interval=60, clock=lambda: now[0]))
    put(tmp_path, 10, None, None)
    holders = {DEVICE: frozenset({UID_A})}
    with caplog.at_level(logging.WARNING, logger="instance-accelerator-metrics"):
        for _ in range(50):
            attributor.attribute([device(10)], INDEX, holders, manufacturer="nvidia")
            now[0] += 1  # 50 rounds in 50 s: one line
        now[0] += 60
        attributor.attribute([device(10)], INDEX, holders, manufacturer="nvidia")
    records = [r for r in caplog.records if r.name == "instance-accelerator-metrics"]
    assert len(records) == 2
    assert records[0].reason == "no_pod_component" and records[0].device == DEVICE  # type: ignore[attr-defined]
    assert records[1].repeats_not_logged == 49  # type: ignore[attr-defined]


# -- whois -----------------------------------------------------------------------------------


def whois(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "devicemanager", "whois", *args],
        capture_output=True,
        text=True,
        env=agent_env(),
        cwd=REPO,
        check=False,
    )


def test_whois_a_pid_through_proc_and_the_pod_index(tmp_path: Path) -> None:
    put(tmp_path / "proc", 10, UID_A, CID_A)
    (tmp_path / "pods.json").write_text(
        json.dumps({"kind": "PodList", "items": [pod(UID_A, "vllm-0", {CID_A: "main"})]})
    )
    out = whois("10", "--proc-root", str(tmp_path / "proc"), "--pods", str(tmp_path / "pods.json"))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {
        "pid": 10,
        "pod_uid": UID_A,
        "container_id": CID_A,
        "runtime": None,
        "namespace": "ns",
        "pod": "vllm-0",
        "container": "main",
        "reason": None,
    }
    missing = whois("11", "--proc-root", str(tmp_path / "proc"))
    assert missing.returncode == 1  # not placed in a pod
    assert json.loads(missing.stdout)["reason"] == "no_such_process"


def test_whois_a_saved_cgroup_file(tmp_path: Path) -> None:
    saved = tmp_path / "cgroup"
    saved.write_text(
        f"0::/kubepods.slice/kubepods-pod{UID_A.replace('-', '_')}.slice/crio-{CID_A}.scope\n"
    )
    doc = json.loads(whois("--cgroup-file", str(saved)).stdout)
    assert doc == {"pod_uid": UID_A, "container_id": CID_A, "runtime": "crio", "reason": None}
    saved.write_text("0::/system.slice/containerd.service\n")
    assert json.loads(whois("--cgroup-file", str(saved)).stdout)["reason"] == "no_pod_component"
    both = whois("10", "--cgroup-file", str(saved))
    assert both.returncode == 2 and "not both" in both.stderr
