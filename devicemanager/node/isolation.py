"""One boundary per pod: whatever one pod's own data does to the code that reads it is that pod's
fault, never the node's.

A tenant controls its annotations, its cgroup paths and, through its processes, what a driver
reports for it. The parsers are written to refuse bad input with a clear error, but a parser
bug or an input nobody thought of must not cost every other pod its figures or the agent its
readiness. So each stage of a round that works pod by pod (building grants, each holder's
records of the per-grant section, an Instance's figures, its pod-level figures) runs each pod's
part through `per_pod`: any
exception is recorded against that pod as a `PodFault`, the pod contributes nothing to that
stage, and the loop goes on. The round logs a pod's fault when it appears or changes, not once
per round (round/said.py). Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, MutableMapping
from typing import TypeVar

from devicemanager.model import PodFault

T = TypeVar("T")
R = TypeVar("R")

# Stages of a round that read one pod's data at a time.
GRANTS = "grants"
FIGURES = "figures"  # the per-grant section's records (slices.build) and the Instance's entries
POD_LEVEL = "pod_level"

MAX_ERROR_CHARS = 300  # an exception's text may quote the tenant's input; keep the log bounded


def describe(exc: BaseException) -> str:
    text = str(exc)
    if len(text) > MAX_ERROR_CHARS:
        text = text[:MAX_ERROR_CHARS] + "…"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def encodable(*texts: str) -> None:
    """Raises (UnicodeEncodeError) inside the pod's boundary when some text of the pod's that a
    label or a document carries could not be encoded as UTF-8 when the round is rendered: then
    the pod is left out of the stage, not the whole node out of the round. The pod index makes
    every such text encodable as it enters (node/pods.py); this holds for any other way in."""
    "".join(texts).encode()


def per_pod(
    items: Iterable[T],
    uid: Callable[[T], str],
    work: Callable[[T], R],
    stage: str,
    faults: MutableMapping[str, PodFault],
) -> list[tuple[T, R]]:
    """`work` applied to each item; an item whose work raised is left out and its pod's fault
    recorded in `faults` (the first fault of a pod in a round is kept)."""
    done: list[tuple[T, R]] = []
    for item in items:
        try:
            done.append((item, work(item)))
        except Exception as exc:  # the boundary: one pod's data is that pod's problem
            faults.setdefault(uid(item), PodFault(stage, describe(exc)))
    return done


def count_by_stage(faults: Mapping[str, PodFault]) -> dict[str, int]:
    out: dict[str, int] = {}
    for fault in faults.values():
        out[fault.stage] = out.get(fault.stage, 0) + 1
    return out
