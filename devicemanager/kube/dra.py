"""The node's DRA inventory from the API server (R-X6): its ResourceSlices, by list-then-watch,
and the ResourceClaims its pods hold, by a bounded, cached get.

Which slices: those of this node (field selector `spec.nodeName=<node>`) and those that are no
one node's (`spec.nodeName=`, empty: `allNodes`, a `nodeSelector`, or per-device selection),
kept when they reach this node. A node selector is followed where it names the node by
`matchFields` on `metadata.name`; one that selects by the node's labels is not followed (the
agent does not read Node objects), so the devices of such a slice are `no_slice` when claimed.
Two watches, never every slice of the cluster: an agent's cost does not grow with the cluster.

Which version: the group's discovery document (`/apis/resource.k8s.io`) says which of `v1`,
`v1beta2`, `v1beta1` the cluster serves; the newest is read. A cluster that serves none has no
DRA grants: said once at info, asked again every `absent_retry` seconds (a cluster upgraded
while the agent runs), never an error every round.

A pool's slices of an older generation than the pool's newest are left out: while a driver
republishes a pool, both generations exist for a moment and would name every device twice.

Claims: only the claim says whether it is admin access, which share of a device it consumed,
and which pods it is reserved for, so the claims the kubelet names are read (GET, one in flight
per claim, cached for `claim_max_age`; an expired entry is served while it is read again). A
round waits at most `claim_wait` seconds for the claims it has never seen; those still unread
are `pending` (their devices are absent this round with `claim_unavailable`, never guessed as
exclusive). A claim deleted while its pod runs keeps the status last read; one never read is
`missing` (whole devices still count, the kubelet says they are held; a share cannot).

DeviceTaintRules (KEP-5055, cluster-scoped, issue 42): an admin's taint on the devices a rule
selects by driver, pool and device name, read by a list-then-watch of their own (the newest of
`v1`, `v1beta2`, `v1alpha3` that serves them; none: asked again every `absent_retry` seconds)
and applied with the slices' own taints. A rule that selects by a device class or CEL
expression (`v1alpha3` only) is one the agent cannot evaluate: not applied, counted as refused.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_all
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from devicemanager.grants import dra
from devicemanager.grants.quantity import parse_quantity
from devicemanager.kube.client import KubeClient, KubeError, WatchEvent
from devicemanager.kube.informer import Reflector
from devicemanager.node import jsonlist

log = logging.getLogger("devicemanager.kube.dra")

GROUP = "resource.k8s.io"
VERSIONS = ("v1", "v1beta2", "v1beta1")  # newest first
STANDARD_DOMAIN = "resource.kubernetes.io"  # standard attributes: pciBusID, pcieRoot
# Bounds on what the API server hands over (docs/kubernetes.md, Bounds). A driver publishes a
# few slices per node; Kubernetes' own validation allows 128 devices per slice (64 where a
# device has taints or consumes counters), and with 32 attributes and capacities per device
# no valid slice's JSON comes near 2 MiB.
MAX_SLICES = 256  # slices kept per watch (this node's; those reaching it from no one node)
MAX_DEVICES_PER_SLICE = 128
MAX_SLICE_BYTES = 2 << 20  # one slice's JSON, in a list page or a watch line: never decoded past
LIST_CHUNK = 16  # slices asked per page: a page is read no further than 16 slices' bound
MAX_NAME = dra.MAX_NAME
MAX_TEXT = 1024  # an attribute's string value
MAX_TAINTS = 16  # per device
RULE_VERSIONS = ("v1", "v1beta2", "v1alpha3")  # DeviceTaintRule, newest first
MAX_RULE_BYTES = 64 << 10  # one rule's JSON: a selector and a taint, far below it


# -- parsing (pure) ------------------------------------------------------------------------------


# Why a slice was refused: skipped, counted with the watch's skipped lines, logged, and the
# last valid version of it (if any) kept, as Kubernetes' own informers keep the last object
# that decoded.
MALFORMED = "malformed"  # not the shape of a ResourceSlice (`devices` not a list, a device unnamed)
TOO_LARGE = jsonlist.TOO_LARGE  # its JSON past MAX_SLICE_BYTES: never decoded
TOO_MANY_DEVICES = "too_many_devices"  # over MAX_DEVICES_PER_SLICE
TOO_MANY_SLICES = "too_many_slices"  # past MAX_SLICES, or dra.MAX_SLICE_DEVICES devices held


@dataclass(frozen=True, slots=True)
class RefusedSlice:
    """A ResourceSlice of this node that the agent does not use, and why."""

    reason: str
    detail: str


@dataclass(frozen=True, slots=True)
class SliceEntry:
    """What the agent keeps of one ResourceSlice: its pool, generation and the devices of it
    that reach this node."""

    driver: str
    pool: str
    generation: int
    devices: tuple[dra.DraDevice, ...]


def _map(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _name(value: Any) -> str | None:
    return value if isinstance(value, str) and 0 < len(value) <= MAX_NAME else None


def _attribute(raw: Any) -> dra.Attribute | None:
    """`{string: …}`, `{int: …}`, `{bool: …}` or `{version: …}`: the one value it holds."""
    if not isinstance(raw, dict):
        return None
    for kind in ("string", "version"):
        value = raw.get(kind)
        if isinstance(value, str) and len(value) <= MAX_TEXT:
            return value
    value = raw.get("bool")
    if isinstance(value, bool):
        return value
    value = raw.get("int")
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return None


def _bare(name: str, driver: str) -> str:
    """An attribute's name without the driver's own domain or the standard one: `uuid` for
    `gpu.nvidia.com/uuid`, `pciBusID` for `resource.kubernetes.io/pciBusID`; another domain's
    attribute keeps its whole name, so it can never pass for one the agent reads."""
    domain, slash, bare = name.rpartition("/")
    if not slash:
        return name
    return bare if domain in (driver, STANDARD_DOMAIN) else name


def _capacity(raw: Any) -> int | None:
    """A device capacity `{value: "80Gi"}` (or, as some servers wrote it, the bare quantity) in
    base units; None when it is not a quantity."""
    value = raw.get("value") if isinstance(raw, dict) else raw
    if isinstance(value, int) and not isinstance(value, bool):
        return value if value >= 0 else None
    if not isinstance(value, str) or len(value) > 64:
        return None
    try:
        amount = parse_quantity(value)
    except (ValueError, ArithmeticError):
        return None
    return int(amount) if amount >= 0 else None


def _taint(t: Any) -> dra.DeviceTaint | None:
    if not isinstance(t, dict) or (key := _name(t.get("key"))) is None:
        return None
    value, effect = t.get("value"), t.get("effect")
    return dra.DeviceTaint(
        key,
        value if isinstance(value, str) and len(value) <= MAX_NAME else "",
        effect if isinstance(effect, str) and len(effect) <= 32 else "",
    )


def _taints(raw: Any) -> tuple[dra.DeviceTaint, ...]:
    if not isinstance(raw, list):
        return ()
    return tuple(t for t in map(_taint, raw[:MAX_TAINTS]) if t is not None)


def parse_rule(obj: Any) -> dra.DeviceTaintRule | None:
    """One DeviceTaintRule of any served version: its taint and the driver, pool and device
    it selects; None when it selects nothing the agent can tell (no selector: Kubernetes
    matches no device; a device class or CEL selectors, which only the scheduler evaluates) or
    is not the shape of one."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    spec = obj.get("spec") if isinstance(obj, dict) else None
    if not isinstance(meta, dict) or not isinstance(spec, dict):
        return None
    name, taint = _name(meta.get("name")), _taint(spec.get("taint"))
    selector = spec.get("deviceSelector")
    if name is None or taint is None or not isinstance(selector, dict):
        return None
    if selector.get("deviceClassName") or selector.get("selectors"):
        return None
    fields = [selector.get(k) for k in ("driver", "pool", "device")]
    if any(f is not None and _name(f) is None for f in fields):
        return None
    return dra.DeviceTaintRule(name, taint, *fields)


def _reaches(spec: Mapping[str, Any], node: str) -> bool:
    """Whether a slice (or, with per-device selection, a device) that says where its devices
    are reaches `node`: named, all nodes, or a selector term naming it by `metadata.name`."""
    if spec.get("nodeName") not in (None, ""):
        return spec.get("nodeName") == node
    if spec.get("allNodes") is True:
        return True
    selector = spec.get("nodeSelector")
    terms = selector.get("nodeSelectorTerms") if isinstance(selector, dict) else None
    for term in terms if isinstance(terms, list) else ():
        if isinstance(term, dict) and not term.get("matchExpressions"):
            fields = term.get("matchFields")
            if isinstance(fields, list) and fields and all(_names(f, node) for f in fields):
                return True
    return False


def _names(requirement: Any, node: str) -> bool:
    if not isinstance(requirement, dict) or requirement.get("key") != "metadata.name":
        return False
    values = requirement.get("values")
    values = values if isinstance(values, list) else []
    if requirement.get("operator") == "In":
        return node in values
    if requirement.get("operator") == "NotIn":
        return node not in values
    return False


def parse_slice(obj: Any, node: str) -> SliceEntry | RefusedSlice | None:
    """One ResourceSlice of any served version: its entry, a RefusedSlice saying why it is not
    used (not the shape of a slice, over 128 devices), or None when it is no object or not this
    node's. `v1beta1` keeps each device's fields under `basic`; `v1beta2` and `v1` do not.

    A slice is used whole or not at all: a newer generation with one device the API server
    would never have stored does not stand in for the pool's devices, and the devices of a
    slice not used are never half of a pool."""
    if not isinstance(obj, dict):
        return None
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return RefusedSlice(MALFORMED, "no spec")
    per_device = spec.get("perDeviceNodeSelection") is True
    if not per_device and not _reaches(spec, node):
        return None
    driver = _name(spec.get("driver"))
    pool = spec.get("pool")
    pool_name = _name(pool.get("name")) if isinstance(pool, dict) else None
    if driver is None or pool_name is None:
        return RefusedSlice(MALFORMED, "no driver or pool name")
    generation = pool.get("generation", 0) if isinstance(pool, dict) else 0
    if not isinstance(generation, int) or isinstance(generation, bool) or generation < 0:
        return RefusedSlice(MALFORMED, "the pool's generation is not a count")
    raw_devices = spec.get("devices")
    if raw_devices is None:
        raw_devices = []  # a slice of shared counters only
    if not isinstance(raw_devices, list):
        return RefusedSlice(MALFORMED, "`devices` is not a list")
    if len(raw_devices) > MAX_DEVICES_PER_SLICE:
        return RefusedSlice(
            TOO_MANY_DEVICES, f"{len(raw_devices)} devices, over {MAX_DEVICES_PER_SLICE}"
        )
    devices = []
    for raw in raw_devices:
        if not isinstance(raw, dict) or (name := _name(raw.get("name"))) is None:
            return RefusedSlice(MALFORMED, "a device that is no object with a name")
        body = _map(raw.get("basic")) or raw
        if per_device and not _reaches(body, node):
            continue
        attrs_raw = body.get("attributes")
        attrs: dict[str, dra.Attribute] = {}
        if isinstance(attrs_raw, dict):
            for key, value in list(attrs_raw.items())[: dra.MAX_ATTRIBUTES]:
                parsed = _attribute(value)
                if isinstance(key, str) and len(key) <= MAX_NAME and parsed is not None:
                    attrs[_bare(key, driver)] = parsed
        capacity: dict[str, int] = {}
        caps_raw = body.get("capacity")
        if isinstance(caps_raw, dict):
            for key, value in list(caps_raw.items())[: dra.MAX_ATTRIBUTES]:
                amount = _capacity(value)
                if isinstance(key, str) and len(key) <= MAX_NAME and amount is not None:
                    capacity[_bare(key, driver)] = amount
        devices.append(
            dra.DraDevice(
                driver,
                pool_name,
                name,
                MappingProxyType(attrs),
                MappingProxyType(capacity),
                _taints(body.get("taints")),
            )
        )
    return SliceEntry(driver, pool_name, generation, tuple(devices))


def current_devices(entries: Iterable[SliceEntry]) -> list[dra.DraDevice]:
    """The devices of every pool's newest generation."""
    entries = list(entries)
    newest: dict[tuple[str, str], int] = {}
    for e in entries:
        key = (e.driver, e.pool)
        newest[key] = max(newest.get(key, e.generation), e.generation)
    return [d for e in entries if e.generation == newest[(e.driver, e.pool)] for d in e.devices]


def parse_claim(obj: Any) -> dra.ClaimStatus | None:
    """What the agent reads of a ResourceClaim: its allocation's results (admin access, the
    share and what it consumed) and the pods it is reserved for."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(meta, dict):
        return None
    namespace, name = _name(meta.get("namespace")), _name(meta.get("name"))
    if namespace is None or name is None:
        return None
    status = _map(obj.get("status"))
    devices = _map(_map(status.get("allocation")).get("devices"))
    raw_results = devices.get("results")
    results = []
    for r in raw_results[: dra.MAX_CLAIM_RESULTS] if isinstance(raw_results, list) else ():
        if not isinstance(r, dict):
            continue
        driver, pool, device = _name(r.get("driver")), _name(r.get("pool")), _name(r.get("device"))
        if driver is None or pool is None or device is None:
            continue
        consumed: dict[str, int] = {}
        raw_consumed = r.get("consumedCapacity")
        if isinstance(raw_consumed, dict):
            for key, value in list(raw_consumed.items())[: dra.MAX_ATTRIBUTES]:
                amount = _capacity(value)
                if isinstance(key, str) and amount is not None:
                    consumed[_bare(key, driver)] = amount
        results.append(
            dra.AllocationResult(
                driver,
                pool,
                device,
                share_id=_name(r.get("shareID")),
                admin_access=r.get("adminAccess") is True,
                consumed_capacity=MappingProxyType(consumed),
            )
        )
    reserved = status.get("reservedFor")
    uids = tuple(
        u["uid"]
        for u in (reserved[: dra.MAX_CLAIM_RESULTS] if isinstance(reserved, list) else ())
        if isinstance(u, dict) and _name(u.get("uid")) is not None
    )
    return dra.ClaimStatus(namespace, name, tuple(results), uids)


# -- the API server (the shell) ------------------------------------------------------------------


def served_version(client: KubeClient) -> str | None:
    """The newest version of resource.k8s.io the cluster serves, or None when it serves none
    the agent reads (404 on the group: no DRA on this cluster)."""
    try:
        doc = client.get(f"/apis/{GROUP}")
    except KubeError as exc:
        if exc.status == 404:
            return None
        raise
    versions = doc.get("versions") if isinstance(doc, dict) else None
    served = (
        {v.get("version") for v in versions if isinstance(v, dict)}
        if isinstance(versions, list)
        else set()
    )
    return next((v for v in VERSIONS if v in served), None)


class SliceReflector(Reflector):
    """One field selector's slices, kept current by list-then-watch (see informer.Reflector)."""

    what = "resource slice watch"

    def __init__(
        self,
        client: KubeClient,
        node: str,
        selector: str,
        version: Callable[[], str | None],
        forget: Callable[[], None] = lambda: None,
        *,
        backoff: tuple[float, float] = (0.5, 30.0),
        watch_timeout: int = 300,
        absent_retry: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(
            backoff=backoff,
            watch_timeout=watch_timeout,
            clock=clock,
            log_extra={"node": node, "fieldSelector": selector},
        )
        self.client, self.node, self.selector = client, node, selector
        self._version, self._forget = version, forget
        self.absent_retry = absent_retry
        self._lock = threading.Lock()
        self._entries: dict[str, SliceEntry] = {}
        self.refused: dict[str, int] = {}  # slices refused since start, by reason
        self._refused_names: dict[str, str] = {}  # slices refused now (logged), by name
        self.synced = False
        self.absent = False  # the cluster serves no resource.k8s.io version the agent reads

    def entries(self) -> list[SliceEntry]:
        with self._lock:
            return list(self._entries.values())

    def _refuse(self, key: str | None, reason: str, detail: str) -> None:
        """A slice not used: counted with the watch's skipped lines (what
        `collector_skipped_lines{source="resourceslices"}` reports) and by reason, and logged
        when a slice is first refused for that reason; a slice refused again and again (a
        driver that keeps writing it) is counted, not logged each time. Under the lock."""
        self.malformed += 1
        self.refused[reason] = self.refused.get(reason, 0) + 1
        if key is not None and self._refused_names.get(key) == reason:
            return
        if key is not None and len(self._refused_names) >= MAX_SLICES:
            return  # as many refused slices named as kept ones: the count goes on, the log not
        if key is not None:
            self._refused_names[key] = reason
        log.warning(
            "a resource slice was refused; the last valid version of it, if any, is kept",
            extra={**self._log_extra, "slice": key, "reason": reason, "detail": detail},
        )

    def _admit(
        self,
        entries: dict[str, SliceEntry],
        key: str,
        entry: SliceEntry,
        held: int,
        *,
        valid: bool = True,
    ) -> int:
        """Keep `entry` under `key` within the node's bounds (a slice past them is refused);
        `held` is the devices `entries` holds, returned as it is after. `valid`: the slice as
        the API server holds it now (not the last valid version of one refused)."""
        before = entries.get(key)
        devices = held - (len(before.devices) if before else 0) + len(entry.devices)
        if before is None and len(entries) >= MAX_SLICES:
            self._refuse(key, TOO_MANY_SLICES, f"over {MAX_SLICES} slices")
            return held
        if devices > dra.MAX_SLICE_DEVICES:
            self._refuse(key, TOO_MANY_SLICES, f"over {dra.MAX_SLICE_DEVICES} devices held")
            return held
        entries[key] = entry
        if valid:
            self._refused_names.pop(key, None)
        return devices

    def replace_all(
        self, objects: Iterable[Any], version: str, refused: Iterable[jsonlist.Refused] = ()
    ) -> None:
        with self._lock:
            fresh: dict[str, SliceEntry] = {}
            held = 0
            listed: set[str] = set()
            for obj in objects:
                key = _slice_name(obj)
                entry = parse_slice(obj, self.node)
                if key is not None:
                    listed.add(key)
                if isinstance(entry, RefusedSlice):
                    self._refuse(key, entry.reason, entry.detail)
                    last = self._entries.get(key) if key is not None else None
                    if key is not None and last is not None:
                        held = self._admit(fresh, key, last, held, valid=False)
                elif key is not None and entry is not None:
                    held = self._admit(fresh, key, entry, held)
            # Slices gone from the list are no longer refused: the next one of a name is news.
            self._refused_names = {k: v for k, v in self._refused_names.items() if k in listed}
            for item in refused:
                self._refuse(
                    None,
                    TOO_LARGE if item.reason == jsonlist.TOO_LARGE else MALFORMED,
                    f"{item.reason}, {item.size} characters {jsonlist.named(item.raw)}".strip(),
                )
            self._entries = fresh
            self.version = version
            self.synced, self.absent = True, False

    def apply(self, event: WatchEvent) -> None:
        with self._lock:
            key = _noted(self, event)
            if key is None:
                return
            if event.type == "DELETED":
                self._entries.pop(key, None)
                self._refused_names.pop(key, None)
                return
            entry = parse_slice(event.object, self.node)
            if isinstance(entry, RefusedSlice):
                self._refuse(key, entry.reason, entry.detail)  # the last valid version stays
            elif entry is None:
                self._entries.pop(key, None)  # no longer reaching this node
                self._refused_names.pop(key, None)
            else:
                held = sum(len(e.devices) for e in self._entries.values())
                self._admit(self._entries, key, entry, held)

    def _list(self, path: str, params: dict[str, str]) -> None:
        """List every slice afresh, each decoded alone within its bound."""
        refused: list[jsonlist.Refused] = []
        items, listed = self.client.list_bounded(
            path, params, LIST_CHUNK, MAX_SLICE_BYTES, refused.append
        )
        self.replace_all(items, listed, refused)

    def run_once(self) -> bool | None:
        version = self._version()
        if version is None:
            return self._absent()
        path = f"/apis/{GROUP}/{version}/resourceslices"
        params = {"fieldSelector": self.selector}
        try:
            if not self.version:
                self._list(path, params)
            for event in self.client.watch(
                path,
                params,
                self.version,
                self.watch_timeout,
                malformed=self._malformed,
                max_line_bytes=MAX_SLICE_BYTES + 4096,  # the event's envelope around the slice
            ):
                self.apply(event)
                if self._stop.is_set():
                    return None
        except KubeError as exc:
            if exc.status != 404:
                raise
            self._forget()  # the version went away (a downgrade): discover it again
            return self._absent()
        return None

    def _absent(self) -> bool:
        """No slices to read on this cluster: none held, and asked again after a while."""
        with self._lock:
            self._entries, self.version = {}, ""
            self.synced, self.absent = True, True
        self._stop.wait(self.absent_retry)
        return True


def _slice_name(obj: Any) -> str | None:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    return _name(meta.get("name")) if isinstance(meta, dict) else None


def _noted(reflector: Reflector, event: WatchEvent) -> str | None:
    """A watch event counted and its resource version kept (the caller holds the reflector's
    lock): the name of the object it changes, None for a bookmark or a nameless object."""
    meta = event.object.get("metadata")
    version = meta.get("resourceVersion") if isinstance(meta, dict) else None
    reflector.events += 1
    if isinstance(version, str) and version:
        reflector.version = version
    key = _slice_name(event.object)
    return None if event.type == "BOOKMARK" else key


class RuleReflector(Reflector):
    """The cluster's DeviceTaintRules, kept current by list-then-watch (cluster-scoped: a
    cluster has few). The version is the newest the group lists whose collection answers; a
    cluster where none does holds no rules, asked again every `absent_retry` seconds."""

    what = "device taint rule watch"

    def __init__(
        self,
        client: KubeClient,
        *,
        backoff: tuple[float, float] = (0.5, 30.0),
        watch_timeout: int = 300,
        absent_retry: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(backoff=backoff, watch_timeout=watch_timeout, clock=clock)
        self.client, self.absent_retry = client, absent_retry
        self._lock = threading.Lock()
        self._rules: dict[str, dra.DeviceTaintRule] = {}
        self._served: str | None = None  # the version read, once one answered
        self.refused = 0  # rules not applied since start (unreadable, or not evaluable)
        self._refused_names: set[str] = set()
        self.synced = False
        self.absent = False

    def rules(self) -> tuple[dra.DeviceTaintRule, ...]:
        with self._lock:
            return tuple(self._rules[k] for k in sorted(self._rules))

    def _keep(self, rules: dict[str, dra.DeviceTaintRule], obj: Any) -> None:
        key = _slice_name(obj)
        rule = parse_rule(obj)
        if key is None or rule is None:
            self._refuse(key, "it selects by device class or CEL, or is not a rule's shape")
            if key is not None:
                rules.pop(key, None)
        elif key in rules or len(rules) < dra.MAX_RULES:
            rules[key] = rule
        else:
            self._refuse(key, f"over {dra.MAX_RULES} rules")

    def _refuse(self, key: str | None, why: str) -> None:
        """A rule not applied: counted, and logged the first time for its name (a rule the
        watch delivers again and again is not logged each time). Under the lock."""
        self.refused += 1
        if key is None or key in self._refused_names or len(self._refused_names) >= dra.MAX_RULES:
            return
        self._refused_names.add(key)
        log.info("a device taint rule is not applied", extra={"rule": key, "reason": why})

    def replace_all(self, objects: Iterable[Any], version: str, refused: int = 0) -> None:
        with self._lock:
            fresh: dict[str, dra.DeviceTaintRule] = {}
            for obj in objects:
                self._keep(fresh, obj)
            self.refused += refused
            self._rules, self.version = fresh, version
            self.synced, self.absent = True, False

    def apply(self, event: WatchEvent) -> None:
        with self._lock:
            key = _noted(self, event)
            if key is None:
                return
            if event.type == "DELETED":
                self._rules.pop(key, None)
            else:
                self._keep(self._rules, event.object)

    def _candidates(self) -> list[str]:
        if self._served is not None:
            return [self._served]
        try:
            doc = self.client.get(f"/apis/{GROUP}")
        except KubeError as exc:
            if exc.status == 404:
                return []
            raise
        versions = doc.get("versions") if isinstance(doc, dict) else None
        listed = (
            {v.get("version") for v in versions if isinstance(v, dict)}
            if isinstance(versions, list)
            else set()
        )
        return [v for v in RULE_VERSIONS if v in listed]

    def run_once(self) -> bool | None:
        for version in self._candidates():
            path = f"/apis/{GROUP}/{version}/devicetaintrules"
            try:
                if not self.version or self._served != version:
                    refused: list[jsonlist.Refused] = []
                    items, listed = self.client.list_bounded(
                        path, {}, LIST_CHUNK, MAX_RULE_BYTES, refused.append
                    )
                    self._served = version
                    self.replace_all(items, listed, len(refused))
                for event in self.client.watch(
                    path,
                    {},
                    self.version,
                    self.watch_timeout,
                    malformed=self._malformed,
                    max_line_bytes=MAX_RULE_BYTES + 4096,
                ):
                    self.apply(event)
                    if self._stop.is_set():
                        return None
                return None
            except KubeError as exc:
                if exc.status != 404:
                    raise
                self._served = None  # not served at this version: the next one, or none
        with self._lock:
            self._rules, self.version, self._served = {}, "", None
            self.synced, self.absent = True, True
        self._stop.wait(self.absent_retry)
        return True


class ClaimReader:
    """ResourceClaims by (namespace, name): one GET in flight per claim, cached for `max_age`
    seconds; an expired entry is served while it is read again. `statuses` waits at most
    `wait` seconds for claims it never read."""

    def __init__(
        self,
        client: KubeClient,
        version: Callable[[], str | None],
        *,
        max_age: float = 60.0,
        wait: float = 1.0,
        timeout: float = 5.0,
        workers: int = 4,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client, self._version = client, version
        self.max_age, self.wait, self.timeout = max_age, wait, timeout
        self._clock = clock
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="claim-read")
        self._lock = threading.Lock()
        self._read: dict[tuple[str, str], tuple[float, dra.ClaimStatus | None]] = {}
        self._inflight: dict[tuple[str, str], Future[None]] = {}
        self.gets = 0

    def _get(self, ref: tuple[str, str]) -> None:
        namespace, name = ref
        version = self._version()
        status: dra.ClaimStatus | None
        try:
            if version is None:
                raise KubeError("the cluster serves no resource.k8s.io version", 404)
            self.gets += 1
            doc = self.client.get(
                f"/apis/{GROUP}/{version}/namespaces/{namespace}/resourceclaims/{name}",
                timeout=self.timeout,
            )
            status = parse_claim(doc)
        except KubeError as exc:
            if exc.status != 404:
                log.info(
                    "a resource claim could not be read",
                    extra={"claim": f"{namespace}/{name}", "error": str(exc)},
                )
                with self._lock:
                    self._inflight.pop(ref, None)
                return  # not cached: asked again next round
            status = None
        with self._lock:
            last = self._read.get(ref)
            if status is None and last is not None and last[1] is not None:
                status = last[1]  # deleted while its pod runs: the allocation it had
            self._read[ref] = (self._clock(), status)
            self._inflight.pop(ref, None)

    def statuses(
        self, refs: Iterable[tuple[str, str]]
    ) -> tuple[list[dra.ClaimStatus], set[tuple[str, str]], set[tuple[str, str]]]:
        """(claims read, claims missing, claims pending) for the claims a round needs."""
        refs = sorted(set(refs))[: dra.MAX_CLAIMS]
        now = self._clock()
        waiting: list[Future[None]] = []
        with self._lock:
            wanted = set(refs)
            for stale in [r for r in self._read if r not in wanted]:
                del self._read[stale]  # no pod holds it any more: forget it
            for ref in refs:
                hit = self._read.get(ref)
                if hit is not None and now - hit[0] <= self.max_age:
                    continue
                flight = self._inflight.get(ref)
                if flight is None:
                    flight = self._inflight[ref] = self._pool.submit(self._get, ref)
                if hit is None:
                    waiting.append(flight)
        if waiting:
            wait_all(waiting, timeout=self.wait)
        read, missing, pending = [], set(), set()
        with self._lock:
            for ref in refs:
                hit = self._read.get(ref)
                if hit is None:
                    pending.add(ref)
                elif hit[1] is None:
                    missing.add(ref)
                else:
                    read.append(hit[1])
        return read, missing, pending

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class DraSource:
    """The monitor's DRA source: `source(claims)` is the node's inventory for one round, or
    None on a cluster without the resource.k8s.io API."""

    def __init__(
        self,
        client: KubeClient,
        node: str,
        *,
        backoff: tuple[float, float] = (0.5, 30.0),
        watch_timeout: int = 300,
        absent_retry: float = 300.0,
        claim_max_age: float = 60.0,
        claim_wait: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client, self.node = client, node
        self._clock = clock
        self._version_lock = threading.Lock()
        self._version: str | None = None
        self._version_at: float | None = None
        self.absent_retry = absent_retry
        self._said_absent = False
        self.reflectors = [
            SliceReflector(
                client,
                node,
                selector,
                self.version,
                self.forget_version,
                backoff=backoff,
                watch_timeout=watch_timeout,
                absent_retry=absent_retry,
                clock=clock,
            )
            for selector in (f"spec.nodeName={node}", "spec.nodeName=")
        ]
        self.claims = ClaimReader(
            client, self.version, max_age=claim_max_age, wait=claim_wait, clock=clock
        )
        self.rules = RuleReflector(
            client,
            backoff=backoff,
            watch_timeout=watch_timeout,
            absent_retry=absent_retry,
            clock=clock,
        )

    def version(self) -> str | None:
        """The served version, discovered once (again after `absent_retry` when none was)."""
        with self._version_lock:
            now = self._clock()
            known = self._version is not None
            if self._version_at is not None and (
                known or now - self._version_at < self.absent_retry
            ):
                return self._version
            self._version = served_version(self.client)
            self._version_at = now
            if self._version is None and not self._said_absent:
                log.info(
                    "the cluster serves no resource.k8s.io API: no DRA grants on this node",
                    extra={"node": self.node},
                )
                self._said_absent = True
            elif self._version is not None:
                self._said_absent = False
                log.info(
                    "reading DRA resource slices",
                    extra={"node": self.node, "version": self._version},
                )
            return self._version

    def forget_version(self) -> None:
        with self._version_lock:
            self._version_at = None

    def start(self) -> None:
        for r in self.reflectors:
            r.start()
        self.rules.start()

    def stop(self) -> None:
        for r in self.reflectors:
            r.stop()
        self.rules.stop()
        self.claims.close()

    def __call__(self, refs: frozenset[tuple[str, str]]) -> dra.DraInventory | None:
        if all(r.absent for r in self.reflectors):
            return None
        if not all(r.synced for r in self.reflectors):
            errors = [r.last_error for r in self.reflectors if r.last_error]
            why = errors[0] if errors else "not listed yet"
            return dra.DraInventory(error=f"the node's resource slices are not read: {why}")
        devices = current_devices(e for r in self.reflectors for e in r.entries())
        read, missing, pending = self.claims.statuses(refs) if refs else ([], set(), set())
        # Rules not listed yet (or on a cluster that serves none) add nothing: the slices'
        # own taints still count.
        return dra.inventory_of(
            devices, read, missing, pending_claims=pending, rules=self.rules.rules()
        )


class RecordedDra:
    """Replay's DRA source: a scenario's `dra/resourceslices.json` (a ResourceSliceList as the
    API server answers it), optional `dra/resourceclaims.json` (a ResourceClaimList) and
    `dra/devicetaintrules.json` (a DeviceTaintRuleList), read through the parsers the live
    source uses. A claim the kubelet names that the recording lacks is missing, as a claim
    deleted while its pod runs."""

    def __init__(
        self, node: str, slices: Path, claims: Path | None = None, rules: Path | None = None
    ) -> None:
        self.node, self.slices, self.claims, self.rules = node, slices, claims, rules

    def __call__(self, refs: frozenset[tuple[str, str]]) -> dra.DraInventory | None:
        try:
            parsed = [parse_slice(obj, self.node) for obj in _items(self.slices)]
            statuses = [parse_claim(obj) for obj in (_items(self.claims) if self.claims else [])]
            rules = [parse_rule(obj) for obj in (_items(self.rules) if self.rules else [])]
        except (OSError, ValueError) as exc:
            return dra.DraInventory(error=f"the recorded slices cannot be read: {exc}")
        read = [s for s in statuses if s is not None and (s.namespace, s.name) in refs]
        known = {(s.namespace, s.name) for s in read}
        devices = current_devices(e for e in parsed if isinstance(e, SliceEntry))
        return dra.inventory_of(
            devices,
            read,
            missing_claims=refs - known,
            rules=[r for r in rules if r is not None],
        )

    def start(self) -> None:
        """Nothing runs beside the rounds."""

    def stop(self) -> None:
        """Nothing to release."""


def _items(path: Path) -> list[Any]:
    doc = json.loads(path.read_text())
    items = doc.get("items") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        raise ValueError(f"{path}: not a list of objects (no `items`)")
    return items
