"""The node's pod index, built from pod objects as the API server returns them (R-A4).

Pure: objects in, a frozen index out. Every pod of the node is indexed, not only those holding
accelerators, so a process of a known pod without a grant is excluded rather than unknown.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from devicemanager.model import utf8_text
from devicemanager.node import jsonlist

log = logging.getLogger("devicemanager.node.pods")

_STATUS_LISTS = ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses")
_EMPTY: Mapping[str, str] = MappingProxyType({})


def _frozen() -> Mapping[str, Any]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Owner:
    api_version: str
    kind: str
    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class PodInfo:
    uid: str
    namespace: str
    name: str
    owner: Owner | None = None  # the controller ownerReference
    labels: Mapping[str, str] = field(default_factory=_frozen)
    annotations: Mapping[str, str] = field(default_factory=_frozen)
    containers: Mapping[str, str] = field(default_factory=_frozen)  # runtime id -> container name
    started: bool = False  # some container has ever started (R-F6)
    ready: bool = False  # the pod's Ready condition
    terminating: bool = False
    phase: str | None = None  # Pending, Running, Succeeded, Failed
    node: str | None = None  # spec.nodeName
    ip: str | None = None  # status.podIP
    created: str | None = None
    # Container names in HAMi's slot order: init containers, then regular ones.
    slots: tuple[str, ...] = ()
    # Regular containers' resource limits, by container name; init containers are left out
    # because they never run beside the others.
    limits: Mapping[str, Mapping[str, str]] = field(default_factory=_frozen)
    # What the kubelet says of the devices its containers hold that are not healthy
    # (`allocatedResourcesStatus`, KEP-4680): (resource ID, health, message), health
    # `Unhealthy` or `Unknown`, the message None where the kubelet gave none. A DRA device's ID
    # is its first CDI device name (`k8s.gpu.nvidia.com/claim=<uid>-gpu-0`) or, where its driver
    # gave none, `<driver>/<pool>/<device>`; a device plugin's its own device id.
    device_health: tuple[tuple[str, str, str | None], ...] = ()
    # Why the pod's object was not read whole (out of the API server's bounds, not UTF-8, not
    # JSON, or it raised), else None. Such a pod is indexed by its UID and container ids alone,
    # so that its processes are known as its own (excluded, never `unknown_pod` poisoning the
    # card it shares); with no name, labels or annotations it holds no grant and no figures.
    refused: str | None = None


MAX_HEALTH = 64  # device health entries kept per pod
MAX_HEALTH_MESSAGE = 256  # the kubelet's message on one (a reason keeps less of it)

# What the API server allows in a pod (its validation), so never more here: a pod past these
# was not written through it. Names are DNS subdomains (253) or labels (63); a label's key is a
# prefix (253), `/` and a name (63), its value 63; the annotations 256 KiB together.
MAX_POD_NAME = 253
MAX_NAMESPACE = 63
MAX_UID = 36  # a UUID; a static pod's is 32 hex digits
MAX_CONTAINER_NAME = 63
MAX_LABEL_KEY = 317
MAX_LABEL_VALUE = 63
MAX_ANNOTATIONS = 256 << 10  # keys and values together
MAX_OWNER_TEXT = 317  # an ownerReference's apiVersion, kind, name
MAX_CONTAINER_ID = 128  # `containerd://` and 64 hex digits
MAX_CONTAINERS = 256  # statuses of each kind, containers in the spec
MAX_POD_BYTES = 4 << 20  # one pod's JSON in a pods file: the API server stores none near it
MAX_PODS_FILE_BYTES = 64 << 20  # a node's PodList is a few MiB at most
OUT_OF_BOUNDS = "out_of_bounds"
UNREADABLE = "unreadable"


def strip_scheme(container_id: str) -> str:
    """`containerd://<id>`, `cri-o://<id>`, `docker://<id>` -> `<id>`, lower-cased."""
    return container_id.rpartition("://")[2].lower()


# Every string a pod object carries enters the index through `_str`: a code point UTF-8 cannot
# encode (a lone surrogate from a JSON `\ud800` escape) is U+FFFD from here on, so no text of a
# tenant's can fail the encoding of the snapshot, /metrics or a log line for the whole node.
def _str(value: Any) -> str:
    return utf8_text(value if isinstance(value, str) else str(value))


def _strings(value: Any) -> Mapping[str, str]:
    if not isinstance(value, Mapping):
        return _EMPTY
    return MappingProxyType({_str(k): _str(v) for k, v in value.items()})


def _text(value: Any) -> str | None:
    return utf8_text(value) if isinstance(value, str) else None


def _list(value: Any) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def has_started(status: Mapping[str, Any]) -> bool:
    """Any trace a container leaves opens the gate: a restart, running, a termination."""
    if status.get("started") is True:
        return True
    restarts = status.get("restartCount")
    if isinstance(restarts, int) and restarts > 0:
        return True
    for key in ("state", "lastState"):
        state = status.get(key)
        if isinstance(state, Mapping) and ("running" in state or "terminated" in state):
            return True
    return False


def _controller(meta: Mapping[str, Any]) -> Owner | None:
    for ref in _list(meta.get("ownerReferences")):
        if ref.get("controller") is True:
            return Owner(
                api_version=_str(ref.get("apiVersion", "")),
                kind=_str(ref.get("kind", "")),
                name=_str(ref.get("name", "")),
                uid=_str(ref.get("uid", "")),
            )
    return None


def pod_info(obj: Mapping[str, Any]) -> PodInfo | None:
    """One pod object; None when it has no UID to index it by."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    uid = meta.get("uid")
    if not isinstance(uid, str) or not uid:
        return None
    spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
    status = obj.get("status") if isinstance(obj.get("status"), Mapping) else {}
    assert isinstance(spec, Mapping) and isinstance(status, Mapping)
    containers: dict[str, str] = {}
    started = False
    health: list[tuple[str, str, str | None]] = []
    for key in _STATUS_LISTS:
        for st in _list(status.get(key)):
            started = started or has_started(st)
            for allocated in _list(st.get("allocatedResourcesStatus"))[:MAX_HEALTH]:
                for r in _list(allocated.get("resources"))[:MAX_HEALTH]:
                    rid, state = r.get("resourceID"), r.get("health")
                    if (
                        isinstance(rid, str)
                        and 0 < len(rid) <= 512
                        and state in ("Unhealthy", "Unknown")
                        and len(health) < MAX_HEALTH
                    ):
                        message = r.get("message")
                        text = message[:MAX_HEALTH_MESSAGE] if isinstance(message, str) else None
                        health.append((_str(rid), state, _str(text) if text else None))
            cid, name = st.get("containerID"), st.get("name")
            if isinstance(cid, str) and cid and isinstance(name, str):
                containers[_str(strip_scheme(cid))] = _str(name)
    limits: dict[str, Mapping[str, str]] = {}
    for container in _list(spec.get("containers")):
        resources = container.get("resources")
        if isinstance(container.get("name"), str):
            limits[_str(container["name"])] = _strings(
                resources.get("limits") if isinstance(resources, Mapping) else None
            )
    inits = [
        _str(c["name"]) for c in _list(spec.get("initContainers")) if isinstance(c.get("name"), str)
    ]
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in _list(status.get("conditions"))
    )
    return PodInfo(
        device_health=tuple(health),
        uid=_str(uid.lower()),
        namespace=_str(meta.get("namespace", "")),
        name=_str(meta.get("name", "")),
        owner=_controller(meta),
        labels=_strings(meta.get("labels")),
        annotations=_strings(meta.get("annotations")),
        containers=MappingProxyType(containers),
        started=started,
        ready=ready,
        terminating=meta.get("deletionTimestamp") is not None,
        phase=_text(status.get("phase")),
        node=_text(spec.get("nodeName")),
        ip=_text(status.get("podIP")),
        created=_text(meta.get("creationTimestamp")),
        slots=(*inits, *limits),
        limits=MappingProxyType(limits),
    )


def _text_map(value: Any, key_bound: int, value_bound: int) -> int | None:
    """The characters of a label or annotation map as the API server keeps one (text to
    text, within its bounds; absent is empty), or None when it is not one."""
    if value is None:
        return 0
    if not isinstance(value, Mapping):
        return None
    size = 0
    for k, v in value.items():
        if type(k) is not str or type(v) is not str:
            return None
        n, m = len(k), len(v)
        if n > key_bound or m > value_bound:
            return None
        size += n + m
    return size


def bounds_error(obj: Mapping[str, Any]) -> str | None:
    """What of a pod object is not as the API server keeps a pod (past its bounds, or of
    another type where it always writes one), or None. Checked before anything of it is copied
    into the index: a name of a MiB would be in every series, and a pod whose container
    statuses cannot be read would leave its processes unknown on the cards it shares."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return "metadata is not an object"
    for key, bound in (("name", MAX_POD_NAME), ("namespace", MAX_NAMESPACE), ("uid", MAX_UID)):
        value = meta.get(key)
        if value is not None and (not isinstance(value, str) or len(value) > bound):
            return f"metadata.{key} is not text of at most {bound} characters"
    if _text_map(meta.get("labels"), MAX_LABEL_KEY, MAX_LABEL_VALUE) is None:
        return f"a label that is not text, or over {MAX_LABEL_KEY}/{MAX_LABEL_VALUE} characters"
    size = _text_map(meta.get("annotations"), MAX_LABEL_KEY, MAX_ANNOTATIONS)
    if size is None or size > MAX_ANNOTATIONS:
        return f"an annotation that is not text, or annotations over {MAX_ANNOTATIONS} characters"
    refs = meta.get("ownerReferences")
    if refs is not None and not isinstance(refs, list):
        return "ownerReferences is not a list"
    for ref in refs or ():
        if not isinstance(ref, Mapping):
            return "an ownerReference that is not an object"
        for k in ("apiVersion", "kind", "name", "uid"):
            v = ref.get(k)
            if type(v) is str and len(v) > MAX_OWNER_TEXT:
                return f"an ownerReference's {k} over {MAX_OWNER_TEXT} characters"
    for part, keys in (("spec", ("initContainers", "containers")), ("status", _STATUS_LISTS)):
        body = obj.get(part)
        if body is None:
            continue
        if not isinstance(body, Mapping):
            return f"{part} is not an object"
        for key in keys:
            entries = body.get(key)
            if entries is None:
                continue
            if not isinstance(entries, list) or len(entries) > MAX_CONTAINERS:
                return f"{part}.{key} is not a list of at most {MAX_CONTAINERS}"
            for c in entries:
                if not isinstance(c, Mapping):
                    return f"{part}.{key} holds an entry that is not an object"
                name, cid = c.get("name"), c.get("containerID")
                if not isinstance(name, str) or len(name) > MAX_CONTAINER_NAME:
                    return f"a container name that is not text of at most {MAX_CONTAINER_NAME}"
                if cid is not None and (not isinstance(cid, str) or len(cid) > MAX_CONTAINER_ID):
                    return f"a container id that is not text of at most {MAX_CONTAINER_ID}"
    return None


# A pod UID as the API server writes it (a static pod's: 32 hex digits).
_UID_TEXT = re.compile(r"[0-9A-Fa-f-]{32,36}")


def _identity(uid: Any, container_ids: Iterable[Any], reason: str) -> PodInfo | None:
    """A refused pod as the index holds it: its UID and container ids, nothing else."""
    if not isinstance(uid, str) or not 0 < len(uid) <= MAX_UID:
        return None
    containers = {
        _str(strip_scheme(cid)): ""
        for cid in list(container_ids)[: 3 * MAX_CONTAINERS]
        if isinstance(cid, str) and 0 < len(cid) <= MAX_CONTAINER_ID
    }
    return PodInfo(
        uid=_str(uid.lower()),
        namespace="",
        name="",
        containers=MappingProxyType(containers),
        refused=reason,
    )


def refused_pod(obj: Any, reason: str) -> PodInfo | None:
    """The identity of a pod object not read whole (see PodInfo.refused), or None when not even
    its UID can be read."""
    if not isinstance(obj, Mapping):
        return None
    try:
        meta = obj.get("metadata")
        status = obj.get("status")
        ids = [
            st.get("containerID")
            for key in _STATUS_LISTS
            for st in (_list(status.get(key)) if isinstance(status, Mapping) else [])
        ]
        return _identity(meta.get("uid") if isinstance(meta, Mapping) else None, ids, reason)
    except Exception:  # nothing of it can be read: its processes stay unknown
        return None


def refused_text(raw: str, reason: str) -> PodInfo | None:
    """The identity of a pod whose text cannot be decoded, from its text: the `uid` among
    `metadata`'s keys (two deep), and every `containerID` (only statuses carry one)."""
    uids = [u for u in jsonlist.string_values(raw, "uid", 2) if _UID_TEXT.fullmatch(u)]
    ids = jsonlist.string_values(raw, "containerID", 4, limit=3 * MAX_CONTAINERS)
    return _identity(uids[0], ids, reason) if len(uids) == 1 else None


def read_pod(obj: Any) -> PodInfo | None:
    """One pod object as the index holds it: whole when it is within the API server's bounds
    and reads, else its identity alone with the reason (`refused`); None without a UID."""
    if not isinstance(obj, Mapping):
        return None
    try:
        error = bounds_error(obj)
        if error is not None:
            return refused_pod(obj, f"{OUT_OF_BOUNDS}: {error}")
        return pod_info(obj)
    except Exception as exc:  # one unreadable object is that pod's alone
        return refused_pod(obj, f"{UNREADABLE}: {type(exc).__name__}")


@dataclass(frozen=True, slots=True)
class PodIndex:
    pods: Mapping[str, PodInfo] = field(default_factory=_frozen)
    skipped: int = 0  # objects without a UID

    @classmethod
    def of(cls, objects: Iterable[Any]) -> PodIndex:
        pods: dict[str, PodInfo] = {}
        skipped = 0
        for obj in objects:
            info = read_pod(obj)  # one unreadable object is that pod's alone, never the index's
            if info is None:
                skipped += 1
                continue
            pods[info.uid] = info
        return cls(pods=MappingProxyType(pods), skipped=skipped)

    @classmethod
    def of_infos(cls, infos: Iterable[PodInfo]) -> PodIndex:
        return cls(pods=MappingProxyType({i.uid: i for i in infos}))

    @classmethod
    def from_list(cls, doc: Any) -> PodIndex:
        """From a PodList (`kubectl get pods -o json`, or the API server's list)."""
        items = doc.get("items") if isinstance(doc, Mapping) else None
        return cls.of(items if isinstance(items, list) else ())

    def get(self, uid: str) -> PodInfo | None:
        return self.pods.get(uid)

    def container_name(self, uid: str, container_id: str) -> str | None:
        pod = self.pods.get(uid)
        return None if pod is None else pod.containers.get(container_id)


class PodsFile:
    """The node's pods from a PodList file, read again only when the file changes.

    The file is read within `MAX_PODS_FILE_BYTES` and each pod decoded on its own
    (jsonlist.split_list): a pod that is not UTF-8, not JSON, past `MAX_POD_BYTES` or past the
    API server's bounds is refused alone, by its identity where it can be read, and logged
    with its reason when the file is read; every other pod keeps its figures."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self._index: PodIndex | None = None

    def __call__(self) -> PodIndex:
        st = self.path.stat()
        stamp = (st.st_mtime_ns, st.st_size)
        if self._index is None or stamp != self._stamp:
            self._index = read_pods_file(self.path)
            self._stamp = stamp
        return self._index


def read_pods_file(path: Path) -> PodIndex:
    """A PodList file's index, each pod read alone (see PodsFile). Raises OSError or ValueError
    for a file that is no PodList at all, or past its bound."""
    with path.open("rb") as f:
        data = f.read(MAX_PODS_FILE_BYTES + 1)
    if len(data) > MAX_PODS_FILE_BYTES:
        raise ValueError(f"{path}: over {MAX_PODS_FILE_BYTES} bytes, not a node's pods")
    split = jsonlist.split_list(data, MAX_POD_BYTES)
    infos: list[PodInfo] = []
    refused: list[tuple[str, str]] = []  # (what names the pod, why)
    skipped = 0
    for obj in split.items:
        info = read_pod(obj)
        if info is None:
            skipped += 1
        else:
            infos.append(info)
            if info.refused is not None:
                refused.append((f"uid={info.uid}", info.refused))
    for item in split.refused:
        info = None
        if item.reason == jsonlist.INVALID_UTF8:
            # Read with each byte UTF-8 does not allow kept aside: enough for its identity.
            with contextlib.suppress(ValueError, RecursionError):
                info = refused_pod(json.loads(item.raw), item.reason)
        if info is None and item.reason != jsonlist.TOO_LARGE:
            info = refused_text(item.raw, item.reason)
        if info is None:
            skipped += 1
        else:
            infos.append(info)
        refused.append((jsonlist.named(item.raw) or f"item {item.index}", item.reason))
    for pod, reason in refused:
        log.warning(
            "a pod of the pods file was refused: it holds no grants, and its processes are "
            "known as its own",
            extra={"file": str(path), "pod": pod, "reason": reason},
        )
    return PodIndex(pods=MappingProxyType({i.uid: i for i in infos}), skipped=skipped)
