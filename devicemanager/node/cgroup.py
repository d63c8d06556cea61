"""Pure parsing of /proc/<pid>/cgroup into the pod UID and container id the kubelet gave it (R-A1).

Every line is `hierarchy-id:controllers:path` (cgroup(7)); v2 is the single `0::<path>`, v1 one
line per controller, and lines that name a pod must agree. Paths come from both kubelet cgroup
drivers and every runtime in use (fixtures/proc/ holds each form with where it was seen):

    cgroupfs  /kubepods/burstable/pod<uid>/<id>                 (containerd, cri-dockerd, k3s)
              /kubepods/burstable/pod<uid>/crio-<id>            (CRI-O, and docker-<id>)
    systemd   /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice/
              cri-containerd-<id>.scope                         (also crio-, docker-, containerd-)
    runc      …/containerd.service/kubepods-burstable-pod<uid_>.slice:cri-containerd:<id>
              (the systemd driver's `slice:prefix:id` cgroupsPath, seen as a path on v1)

possibly under another prefix (kubelet in docker, kind, k3s) and, from a private cgroup
namespace, relative: with `..` segments, or without the leading `/` (cgroup_namespaces(7)).
A container id is 8-64 hex digits or a UUID. Matching is anchored on whole path segments,
never on a substring: a systemd pod slice must be the kubelet's `…kubepods[-<qos>]-pod<uid>.slice`
and a cgroupfs one exactly `pod<uid>` with the kubelet's `kubepods` above it (the cgroupfs driver
names `<root>/kubepods[/burstable|/besteffort]/pod<uid>`), or with nothing above it but what a
cgroup namespace elides (`..` segments, then at most the QoS level). The container is looked for
only below the pod.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from devicemanager.model import Reason

# 36 characters with '-' or '_' at 8/13/18/23 (systemd escapes '-' in unit names as '_'),
# or the 32-hex UID the kubelet derives for a static pod from its manifest's hash.
_H = "[0-9a-fA-F]"
_UID = rf"{_H}{{8}}[-_]{_H}{{4}}[-_]{_H}{{4}}[-_]{_H}{{4}}[-_]{_H}{{12}}|{_H}{{32}}"
_CGROUPFS_POD = re.compile(rf"pod({_UID})")
# What the kubelet's cgroupfs driver puts above a pod: its node-allocatable cgroup `kubepods`,
# then a QoS level for burstable and best-effort pods (a guaranteed pod sits in kubepods itself).
_KUBEPODS = "kubepods"
_QOS = frozenset({"burstable", "besteffort"})
# The kubelet's systemd driver names a pod's slice after every cgroup above it, joined by '-':
# kubepods-<qos>-pod<uid>.slice, kubelet-kubepods-…-pod<uid>.slice under kind's "kubelet" cgroup
# root, <root>-kubepods-… under any other. "kubepods" is always in it, so a unit of someone
# else's that merely ends in pod<uid>.slice is not taken for a pod.
_SYSTEMD_POD = re.compile(rf"(?:[^/]*-)?kubepods(?:-besteffort|-burstable)?-pod({_UID})\.slice")
# 64 hex digits from containerd, CRI-O and Docker; shorter hex and UUIDs from other runtimes.
_CONTAINER_ID = rf"{_H}{{8,64}}|{_H}{{8}}-{_H}{{4}}-{_H}{{4}}-{_H}{{4}}-{_H}{{12}}"
_BARE_CONTAINER = re.compile(_CONTAINER_ID)
# With the systemd driver a scope (`.scope`); with cgroupfs CRI-O and Docker name the directory
# the same way without the suffix. `crio-conmon-<id>` is the monitor, not the container.
_SCOPED_CONTAINER = re.compile(
    rf"(cri-containerd|containerd|crio|docker)-({_CONTAINER_ID})(?:\.scope)?"
)
# runc's systemd cgroupsPath, `<slice>:<prefix>:<id>`, shows up verbatim as one path segment
# when the runtime's cgroup driver is not the kubelet's (containerd with SystemdCgroup on v1).
_RUNC_SYSTEMD = re.compile(r"([^:/]+\.slice):([A-Za-z][A-Za-z0-9_-]*):([^:/]+)")
_RUNTIMES = {
    "cri-containerd": "containerd",
    "containerd": "containerd",
    "crio": "crio",
    "docker": "docker",
}


@dataclass(frozen=True, slots=True)
class CgroupIdentity:
    """Who a process belongs to. `reason` is None exactly when both ids were found."""

    pod_uid: str | None = None
    container_id: str | None = None
    runtime: str | None = None  # named only when the path names it (a scope prefix)
    reason: Reason | None = None


def normalise_uid(raw: str) -> str:
    """Lower-case, dashed. A 32-hex static-pod UID stays as it is, lower-cased."""
    return raw.replace("_", "-").lower()


def _cgroupfs_parent(above: list[str]) -> bool:
    """Whether what is above a cgroupfs `pod<uid>` segment is the kubelet's: `kubepods` among
    it, or only what a cgroup namespace hides (`..`, or nothing) and at most the QoS level.
    `/system.slice/pod<uid>` is someone else's cgroup that merely has a pod-like name."""
    if _KUBEPODS in above:
        return True
    elided = above[:-1] if above and above[-1] in _QOS else above
    return all(segment == ".." for segment in elided)


def _pod_at(segments: list[str], i: int) -> str | None:
    """The pod UID segment `i` names, read with what is above it."""
    segment = segments[i]
    if match := _SYSTEMD_POD.fullmatch(segment):
        return normalise_uid(match.group(1))
    if (match := _CGROUPFS_POD.fullmatch(segment)) and _cgroupfs_parent(segments[:i]):
        return normalise_uid(match.group(1))
    return None


def container_segment(segment: str) -> tuple[str, str | None] | None:
    """(container id, runtime) a segment below the pod names, or None."""
    if match := _SCOPED_CONTAINER.fullmatch(segment):
        return match.group(2).lower(), _RUNTIMES[match.group(1)]
    if _BARE_CONTAINER.fullmatch(segment):
        return segment.lower(), None
    return None


def _segments(path: str) -> list[str]:
    """Whole segments; a runc `slice:prefix:id` segment becomes its slice and its scope. `..`
    (how a private cgroup namespace shows other cgroups) is kept: it says what is elided."""
    out: list[str] = []
    for segment in path.split("/"):
        if segment in ("", "."):
            continue
        if ":" in segment and (runc := _RUNC_SYSTEMD.fullmatch(segment)):
            out.extend((runc.group(1), f"{runc.group(2)}-{runc.group(3)}.scope"))
        else:
            out.append(segment)
    return out


def parse_path(path: str) -> CgroupIdentity:
    segments = _segments(path)
    pods = [(i, uid) for i in range(len(segments)) if (uid := _pod_at(segments, i)) is not None]
    if not pods:
        return CgroupIdentity(reason=Reason.NO_POD_COMPONENT)
    uids = {uid for _, uid in pods}
    if len(uids) > 1:
        return CgroupIdentity(reason=Reason.AMBIGUOUS_POD)
    first, uid = pods[0]
    below = [c for s in segments[first + 1 :] if (c := container_segment(s)) is not None]
    containers = {cid for cid, _ in below}
    if not containers:
        # Kata or gVisor sandboxes, crio-conmon, or a runtime prefix we do not know.
        return CgroupIdentity(pod_uid=uid, reason=Reason.NO_CONTAINER_COMPONENT)
    if len(containers) > 1:
        return CgroupIdentity(pod_uid=uid, reason=Reason.AMBIGUOUS_CONTAINER)
    cid, runtime = below[0]
    return CgroupIdentity(pod_uid=uid, container_id=cid, runtime=runtime)


def parse(text: str) -> CgroupIdentity:
    """The identity the whole file names. Never raises: malformed text names no pod."""
    named: list[CgroupIdentity] = []
    for line in text.splitlines():
        parts = line.split(":", 2)  # the path itself may hold ':'
        if len(parts) != 3 or not parts[0].isdigit():
            continue
        # A path without its leading '/' is relative to the reader's cgroup namespace root,
        # like one that starts with '/..': read the same way.
        identity = parse_path(parts[2])
        if identity.pod_uid is not None or identity.reason is Reason.AMBIGUOUS_POD:
            named.append(identity)
    # Lines naming no pod (a v1 controller left at '/', the unified line in hybrid mode) are
    # not evidence against the lines that do.
    if not named:
        return CgroupIdentity(reason=Reason.NO_POD_COMPONENT)
    if any(i.reason is Reason.AMBIGUOUS_POD for i in named):
        return CgroupIdentity(reason=Reason.AMBIGUOUS_POD)
    if len({i.pod_uid for i in named}) > 1:
        return CgroupIdentity(reason=Reason.AMBIGUOUS_POD)
    uid = named[0].pod_uid
    if any(i.reason is Reason.AMBIGUOUS_CONTAINER for i in named):
        return CgroupIdentity(pod_uid=uid, reason=Reason.AMBIGUOUS_CONTAINER)
    found = {(i.container_id, i.runtime) for i in named if i.container_id is not None}
    if len({cid for cid, _ in found}) > 1:
        return CgroupIdentity(pod_uid=uid, reason=Reason.AMBIGUOUS_CONTAINER)
    if not found:
        return CgroupIdentity(pod_uid=uid, reason=Reason.NO_CONTAINER_COMPONENT)
    cid = next(iter(found))[0]
    runtimes = {r for c, r in found if r is not None}
    # Controllers of one container agree on its id; a runtime is named if any line names it.
    return CgroupIdentity(
        pod_uid=uid, container_id=cid, runtime=next(iter(runtimes)) if len(runtimes) == 1 else None
    )
