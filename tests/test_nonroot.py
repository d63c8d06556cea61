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


# -- the image's default user (R-O6) -----------------------------------------------------------


def final_stage_users() -> list[str]:
    """The USER instructions of the Dockerfile's last stage, in order."""
    from tests.conftest import REPO

    stages = (REPO / "Dockerfile").read_text().split("\nFROM ")
    return [
        line.split(None, 1)[1].strip()
        for line in stages[-1].splitlines()
        if line.upper().startswith("USER ")
    ]


def test_the_image_runs_as_the_unprivileged_user_this_test_drops_to() -> None:
    """The image's default user is not root, named by number (a kubelet checks runAsNonRoot
    only against a numeric user) and is the uid and gid the attribution above was resolved as,
    and the base DaemonSet runs as (R-O6)."""
    import yaml

    from tests.conftest import REPO

    *_, user = final_stage_users()  # the last USER is the one the image runs as
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and gid.isdigit(), user
    assert (int(uid), int(gid)) == (NOBODY, NOBODY)
    base = yaml.safe_load((REPO / "deploy" / "base" / "daemonset.yaml").read_text())
    (container,) = base["spec"]["template"]["spec"]["containers"]
    security = container["securityContext"]
    assert (security["runAsUser"], security["runAsGroup"]) == (NOBODY, NOBODY)
    assert security["runAsNonRoot"] is True


def test_every_build_names_its_user_rather_than_taking_the_images() -> None:
    """Each manufacturer's DaemonSet says which user it runs as: non-root where its devices
    allow (NVIDIA), root, explicitly, exactly where the container is privileged because the
    vendor's library opens device nodes itself (docs/kubernetes.md, R-O6). A change of the
    image's USER then changes no manufacturer's agent."""
    import yaml

    from devicemanager.backend import BACKENDS
    from tests.conftest import REPO

    for manufacturer in sorted(BACKENDS):
        path = REPO / "deploy" / "rendered" / f"{manufacturer}.yaml"
        (ds,) = [d for d in yaml.safe_load_all(path.read_text()) if d and d["kind"] == "DaemonSet"]
        (container,) = ds["spec"]["template"]["spec"]["containers"]
        security = container["securityContext"]
        assert {"runAsUser", "runAsGroup", "runAsNonRoot"} <= set(security), manufacturer
        root = security["runAsUser"] == 0
        assert root == bool(security.get("privileged")), manufacturer
        assert security["runAsNonRoot"] is not root, manufacturer
        assert (security["runAsGroup"] == 0) == root, manufacturer
