"""The node's pod index, built from pod objects as the API server returns them (R-A4).

Pure: objects in, a frozen index out. Every pod of the node is indexed, not only those holding
accelerators, so a process of a known pod without a grant is excluded rather than unknown.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from devicemanager.model import utf8_text

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
    # (`allocatedResourcesStatus`, KEP-4680): (resource ID, health), `Unhealthy` or `Unknown`.
    # A DRA device's ID is `<driver>/<pool>/<device>`, a device plugin's its own device id.
    device_health: tuple[tuple[str, str], ...] = ()


MAX_HEALTH = 64  # device health entries kept per pod


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
    health: list[tuple[str, str]] = []
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
                        health.append((_str(rid), state))
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


@dataclass(frozen=True, slots=True)
class PodIndex:
    pods: Mapping[str, PodInfo] = field(default_factory=_frozen)
    skipped: int = 0  # objects without a UID

    @classmethod
    def of(cls, objects: Iterable[Any]) -> PodIndex:
        pods: dict[str, PodInfo] = {}
        skipped = 0
        for obj in objects:
            try:
                info = pod_info(obj) if isinstance(obj, Mapping) else None
            except Exception:  # one unreadable object is skipped, never the node's index
                info = None
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
    """The node's pods from a PodList file, read again only when the file changes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self._index: PodIndex | None = None

    def __call__(self) -> PodIndex:
        st = self.path.stat()
        stamp = (st.st_mtime_ns, st.st_size)
        if self._index is None or stamp != self._stamp:
            self._index = PodIndex.from_list(json.loads(self.path.read_text()))
            self._stamp = stamp
        return self._index
