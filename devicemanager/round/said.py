"""What the log has said of each lasting condition, as one frozen value, and the round's log
events as its difference from the last. Pure: the shell (agent/monitor.py) writes the events.

A condition that lasts (a backend that stays unavailable, a pod whose annotation stays
malformed, a kubelet that stays unreachable) is logged when it starts and when it changes, not
once per period. Each condition below keeps the last thing said of it; each `…_said` function
takes the value before and this round's facts and returns the value after and the lines to log.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from devicemanager.figures.snapshot import BackendResult
from devicemanager.grants.deviceplugins import KubeletAnswer
from devicemanager.grants.dra import DraInventory
from devicemanager.grants.grants import (
    CONTESTED_PARTITION,
    HELD_BY_ANOTHER_POD,
    Disagreement,
    NodeGrants,
)
from devicemanager.model import BackendState, PodFault
from devicemanager.node.pods import PodIndex

MONITOR = "devicemanager.monitor"
ISOLATION = "devicemanager.isolation"


@dataclass(frozen=True, slots=True)
class LogEvent:
    """One line to log, as `logging.getLogger(logger).log(level, message, *args, ...)`."""

    logger: str
    level: int
    message: str
    args: tuple[Any, ...] = ()
    extra: Mapping[str, Any] | None = None
    exc: BaseException | None = None  # its traceback goes with the line (exc_info)


def _empty() -> Mapping[Any, Any]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Said:
    """The last thing the log said of each lasting condition."""

    kubelet: tuple[str | None, str | None] | None = None  # pod-resources: (error, allocatable)
    dra: str | None = None  # the DRA slices' error
    # manufacturer -> (state, error); STUCK's "busy for Ns" grows each round: not a change
    backends: Mapping[str, tuple[BackendState, str | None]] = field(default_factory=_empty)
    # (nan | range, manufacturer) -> the figures last left out
    left_out: Mapping[tuple[str, str], tuple[str, ...]] = field(default_factory=_empty)
    disagreements: Mapping[str, Disagreement] = field(default_factory=_empty)  # by pod UID
    refused: Mapping[str, tuple[str, ...]] = field(default_factory=_empty)  # by pod UID
    # by pod UID: the partitions refused as contested, and the pods believed of them
    contested: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]] = field(default_factory=_empty)
    faults: Mapping[str, PodFault] = field(default_factory=_empty)  # by pod UID
    # faults that last, by key (pods, slices:<manufacturer>, round): the fault last logged
    persisting: Mapping[str, str] = field(default_factory=_empty)


def _frozen(d: Mapping[Any, Any]) -> Mapping[Any, Any]:
    return MappingProxyType(dict(d))


def kubelet_said(before: Said, answer: KubeletAnswer | None) -> tuple[Said, list[LogEvent]]:
    if answer is None:
        return before, []
    state = (answer.error, answer.allocatable_error)
    if state == before.kubelet:
        return before, []
    ok = answer.ok and answer.allocatable_error is None
    event = LogEvent(
        MONITOR,
        logging.INFO if ok else logging.WARNING,
        "kubelet pod-resources %s",
        ("read" if ok else "answered in part" if answer.pods is not None else "not read",),
        {"error": answer.error, "allocatable_error": answer.allocatable_error},
    )
    return replace(before, kubelet=state), [event]


def dra_said(before: Said, inventory: DraInventory | None) -> tuple[Said, list[LogEvent]]:
    if inventory is None or inventory.error == before.dra:
        return before, []
    event = LogEvent(
        MONITOR,
        logging.INFO if inventory.error is None else logging.WARNING,
        "DRA ResourceSlices %s",
        ("read" if inventory.error is None else "not read",),
        {"error": inventory.error},
    )
    return replace(before, dra=inventory.error), [event]


LEFT_OUT_MESSAGES = {
    "nan": "backend %s answered figures that are not finite; they are absent",
    "range": "backend %s answered figures outside what the hardware can hold; they are "
    "absent (invalid_data)",
}


def left_out_said(
    before: Said, left_out: Iterable[tuple[str, str, tuple[str, ...]]]
) -> tuple[Said, list[LogEvent]]:
    """(kind, manufacturer, figures) of each reading parsed this round: a card that keeps
    answering NaN, or a sentinel, every round would otherwise log every period."""
    said = dict(before.left_out)
    events = []
    for kind, manufacturer, paths in left_out:
        key = (kind, manufacturer)
        if said.get(key, ()) == paths:
            continue
        said[key] = paths
        if paths:
            extra = {"manufacturer": manufacturer, "figures": list(paths[:20])}
            events.append(
                LogEvent(MONITOR, logging.WARNING, LEFT_OUT_MESSAGES[kind], (manufacturer,), extra)
            )
    return replace(before, left_out=_frozen(said)), events


def backends_said(
    before: Said, results: Iterable[BackendResult], raw_errors: Mapping[str, str | None]
) -> tuple[Said, list[LogEvent]]:
    """One line when a fault starts and one when it changes (another state, or another error),
    not one per round: a node without the library would otherwise log the same sentence every
    period forever. `raw_errors`: each backend's error as the log shows it (the snapshot's
    leaves out where a library lives on the host)."""
    said = dict(before.backends)
    events = []
    for result in results:
        status = result.status
        error = raw_errors.get(status.manufacturer, status.error)
        logged = (status.state, None if status.state is BackendState.STUCK else error)
        if said.get(status.manufacturer) == logged:
            continue
        said[status.manufacturer] = logged
        events.append(
            LogEvent(
                MONITOR,
                logging.INFO if status.state is BackendState.OK else logging.WARNING,
                "backend %s is %s",
                (status.manufacturer, status.state.value),
                {"manufacturer": status.manufacturer, "state": status.state.value, "error": error},
            )
        )
    if not events:
        return before, events
    return replace(before, backends=_frozen(said)), events


def _pod_name(index: PodIndex, uid: str) -> tuple[str, str]:
    pod = index.get(uid)
    return (pod.namespace if pod else "?", pod.name if pod else uid)


def grants_said(
    before: Said, grants: NodeGrants | None, index: PodIndex | None
) -> tuple[Said, list[LogEvent]]:
    """A pod whose annotation and the kubelet differ, and one whose annotation's grants are
    refused: once when it starts or changes."""
    if grants is None or index is None:
        return before, []
    events = []
    for uid, differs in grants.disagreements.items():
        if before.disagreements.get(uid) != differs:
            events.append(
                LogEvent(
                    MONITOR,
                    logging.WARNING,
                    "%s/%s: its allocation annotation and the kubelet name different cards; "
                    "the annotation is used, but for what the kubelet gave another pod",
                    _pod_name(index, uid),
                    {"pod_uid": uid, "disagreement": str(differs)},
                )
            )
    refused = {uid: tuple(sorted(g.entry_id for g in gs)) for uid, gs in grants.refused.items()}
    for uid, ids in refused.items():
        if before.refused.get(uid) != ids:
            events.append(
                LogEvent(
                    MONITOR,
                    logging.WARNING,
                    "%s/%s: its allocation annotation names what the kubelet gave another pod; "
                    "those grants are refused",
                    _pod_name(index, uid),
                    {"pod_uid": uid, "refused": list(ids), "reason": HELD_BY_ANOTHER_POD},
                )
            )
    contested = {}
    for uid, gs in grants.contested.items():
        believed = {
            grants.believed[(g.manufacturer, g.partition_id)]
            for g in gs
            if g.partition_id is not None and (g.manufacturer, g.partition_id) in grants.believed
        }
        names = tuple(sorted("/".join(_pod_name(index, b)) for b in believed))
        contested[uid] = (tuple(sorted(g.entry_id for g in gs)), names)
    for uid, (ids, names) in contested.items():
        if before.contested.get(uid) != (ids, names):
            who = f"{', '.join(names)} {'is' if len(names) == 1 else 'are'} believed"
            events.append(
                LogEvent(
                    MONITOR,
                    logging.WARNING,
                    "%s/%s: its allocation annotation claims a partition another pod's annotation"
                    " claims too, and the kubelet named neither's partition; %s",
                    (*_pod_name(index, uid), who if names else "neither is believed"),
                    {
                        "pod_uid": uid,
                        "refused": list(ids),
                        "believed": list(names),
                        "reason": CONTESTED_PARTITION,
                    },
                )
            )
    after = replace(
        before,
        disagreements=_frozen(grants.disagreements),
        refused=_frozen(refused),
        contested=_frozen(contested),
    )
    return after, events


def faults_said(
    before: Said, faults: Mapping[str, PodFault], index: PodIndex | None
) -> tuple[Said, list[LogEvent]]:
    """Each pod's fault once, when it appears or changes; pods that recovered are forgotten."""
    events = []
    for uid, fault in faults.items():
        if before.faults.get(uid) == fault:
            continue
        pod = index.get(uid) if index is not None else None
        events.append(
            LogEvent(
                ISOLATION,
                logging.ERROR,
                "%s/%s: its %s could not be used this round; the pod is left out of that "
                "stage, no other pod is affected",
                (pod.namespace if pod else "?", pod.name if pod else uid, fault.stage),
                {"pod_uid": uid, "stage": fault.stage, "error": fault.error},
            )
        )
    return replace(before, faults=_frozen(faults)), events


def failed(
    before: Said,
    key: str,
    fault: str,
    message: str,
    *args: Any,
    level: int = logging.WARNING,
    exc: BaseException | None = None,
    extra: Mapping[str, Any] | None = None,
) -> tuple[Said, list[LogEvent]]:
    """A lasting fault under `key`: logged when it starts or its text changes (with the
    traceback, when given, that once), silent while the same fault is seen again."""
    if before.persisting.get(key) == fault:
        return before, []
    event = LogEvent(MONITOR, level, message, args, {**(extra or {}), "error": fault}, exc)
    return replace(before, persisting=_frozen({**before.persisting, key: fault})), [event]


def recovered(
    before: Said, key: str, message: str, *args: Any, **extra: Any
) -> tuple[Said, list[LogEvent]]:
    """Once, when a fault that was logged under `key` is gone."""
    if key not in before.persisting:
        return before, []
    persisting = {k: v for k, v in before.persisting.items() if k != key}
    event = LogEvent(MONITOR, logging.INFO, message, args, extra or None)
    return replace(before, persisting=_frozen(persisting)), [event]
