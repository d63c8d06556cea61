"""Whether the agent needs root (issue 10): the per-process attribution, the one part that reads
other users' processes, run as an unprivileged user with no capability at all.

A root-owned process is put in a kubelet-shaped cgroup; a forked copy of this test process
drops to uid/gid 65534 (changing every uid away from 0 clears all capabilities, see
capabilities(7)) and resolves that PID with the agent's own resolver through the real /proc.
A fork rather than a fresh interpreter: this machine's Python lives under /root, which the
unprivileged user cannot reach, while the resolver's modules are already loaded in the fork.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from devicemanager.node.attribution import Resolver
from tests.test_cgroup_kernel import Cgroups, cgroups, hierarchies, ids, index, join

__all__ = ["cgroups"]  # the fixture, shared with the kernel cgroup tests

NOBODY = 65534


def as_nobody(pid: int, uid: str, cid: str) -> dict[str, object]:
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the forked child
        try:
            os.close(read)
            os.setgroups([])
            os.setresgid(NOBODY, NOBODY, NOBODY)
            os.setresuid(NOBODY, NOBODY, NOBODY)
            status = Path("/proc/self/status").read_text()
            effective = next(line for line in status.splitlines() if line.startswith("CapEff:"))
            resolution = Resolver(Path("/proc")).resolve([pid], index(uid, cid))[pid]
            doc = {
                "uid": os.getuid(),
                "cap_eff": int(effective.split()[1], 16),
                "placement": None
                if resolution.placement is None
                else [resolution.placement.pod_uid, resolution.placement.container],
                "reason": None if resolution.reason is None else resolution.reason.value,
            }
            os.write(write, json.dumps(doc).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        data = pipe.read()
    os.waitpid(child, 0)
    return json.loads(data)  # type: ignore[no-any-return]


def test_an_unprivileged_user_without_capabilities_attributes_root_processes(
    cgroups: Cgroups,
) -> None:
    if "hidepid=" in Path("/proc/self/mountinfo").read_text():
        pytest.skip("/proc is mounted with hidepid here; see docs/kubernetes.md")
    mounts = [m for _, m in hierarchies()]
    uid, cid = ids()
    child = cgroups.spawn()  # a root-owned process, as a container's often are
    join(cgroups.make(mounts[0], f"kubepods/burstable/pod{uid}/{cid}"), child.pid)
    seen = as_nobody(child.pid, uid, cid)
    assert seen["uid"] == NOBODY and seen["cap_eff"] == 0  # no capability at all
    assert seen == {"uid": NOBODY, "cap_eff": 0, "placement": [uid, "main"], "reason": None}
