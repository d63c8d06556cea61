"""What every vendor module shares: how a failed call is written into a payload, how a float
from a library becomes a figure, how a library is loaded, and how a cumulative counter becomes
a rate across rounds. Imports only the core's model and interface.
"""

from __future__ import annotations

import ctypes
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from devicemanager.backend import BackendUnavailable, Library
from devicemanager.model import HealthFigure, Reason


class PayloadShapeError(ValueError):
    """A payload that is not what read() writes: its parse fails (the backend's read is an
    error this round), never "answered, with no cards"."""


def listing(payload: Any, key: str) -> list[Mapping[str, Any]]:
    """The objects of the list read() writes under `key` (the devices, the sockets): raises
    PayloadShapeError when the payload is not a mapping, the key is missing, the enumeration
    was recorded as failed, or the value is not a list. Items that are not objects are skipped
    (each entry's own parse reasons about what it holds)."""
    if not isinstance(payload, Mapping):
        raise PayloadShapeError(f"the payload is a {type(payload).__name__}, not an object")
    if key not in payload:
        raise PayloadShapeError(f"the payload has no {key!r}")
    value = payload[key]
    code = error_code(value)
    if code is not None:
        raise PayloadShapeError(f"the enumeration of {key!r} failed with code {code}")
    if not isinstance(value, list):
        raise PayloadShapeError(f"{key!r} is a {type(value).__name__}, not a list")
    return [v for v in value if isinstance(v, Mapping)]


def failed(name: str, code: int) -> dict[str, Any]:
    """How a payload records an entry point that answered with an error code."""
    return {"error": name, "code": code}


def error_code(value: Any) -> int | None:
    """The error code recorded for an entry point, or None when it answered."""
    kind = type(value)
    if kind is int or kind is float or kind is str or value is None:
        return None  # most answers: settled without the ABC's isinstance, several a card
    if isinstance(value, Mapping) and "error" in value:
        code = value.get("code")
        return code if isinstance(code, int) and not isinstance(code, bool) else -1
    return None


def finite(value: Any) -> float | None:
    """A JSON number as a finite float; NaN, infinities, booleans and anything else are absent."""
    kind = type(value)
    # A float or an int settled at once (bool is a type of its own: absent, as is the rest).
    if (kind is not float and kind is not int) and (
        isinstance(value, bool) or not isinstance(value, (int, float))
    ):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


# The activity figures GPM states (issue 41): a library with no such counter says `unsupported`
# for each one it cannot state, never its busy time in their place.
GPM_ACTIVITY: frozenset[HealthFigure] = frozenset(
    {
        HealthFigure.SM_ACTIVITY,
        HealthFigure.SM_OCCUPANCY,
        HealthFigure.TENSOR_ACTIVITY,
        HealthFigure.TENSOR_ACTIVITY_DFMA,
        HealthFigure.TENSOR_ACTIVITY_HMMA,
        HealthFigure.TENSOR_ACTIVITY_IMMA,
        HealthFigure.MEMORY_BANDWIDTH_UTILIZATION,
        HealthFigure.PIPE_FP64_ACTIVITY,
        HealthFigure.PIPE_FP32_ACTIVITY,
        HealthFigure.PIPE_FP16_ACTIVITY,
        HealthFigure.PCIE_TX_BYTES_PER_SECOND,
        HealthFigure.PCIE_RX_BYTES_PER_SECOND,
        HealthFigure.NVLINK_TX_BYTES_PER_SECOND,
        HealthFigure.NVLINK_RX_BYTES_PER_SECOND,
    }
)

# Every activity figure and the busy times beside the cores' (issue 41): what a library with
# none of them says `unsupported` for.
EVERY_ACTIVITY: frozenset[HealthFigure] = GPM_ACTIVITY | {
    HealthFigure.MEMORY_BUSY,
    HealthFigure.VECTOR_CORE_BUSY,
}


def percent_answer(
    value: Any, reason_for: Callable[[int], Reason]
) -> tuple[float | None, Reason | None]:
    """A library's percent figure as an answer: a failed call its code's reason, the wheel's or
    the library's "N/A" `unsupported`, a number outside 0..100 `invalid_data`, never clamped."""
    code = error_code(value)
    if code is not None:
        return None, reason_for(code)
    if value == "N/A":
        return None, Reason.UNSUPPORTED
    number = finite(value)
    if number is None or not 0.0 <= number <= 100.0:
        return None, Reason.INVALID_DATA
    return number, None


def reasons(
    unsupported: frozenset[int],
    permission: frozenset[int] = frozenset(),
    truncated: frozenset[int] = frozenset(),
) -> Callable[[int], Reason]:
    """A code -> reason mapping for one library: "cannot" (unsupported, permission) is kept
    apart from "could not" (anything else is transient: the next round asks again)."""

    def reason_for(code: int) -> Reason:
        if code in unsupported:
            return Reason.UNSUPPORTED
        if code in permission:
            return Reason.PERMISSION
        if code in truncated:
            return Reason.TRUNCATED
        return Reason.TRANSIENT_DRIVER_ERROR

    return reason_for


# glibc's RTLD_DEEPBIND; 0 where the C library has none (musl), which then binds as usual.
DEEPBIND: int = getattr(os, "RTLD_DEEPBIND", 0)


def load(library: Library, configured: Mapping[str, str], *, deep: bool = False) -> ctypes.CDLL:
    """dlopen one of a backend's libraries, privately (RTLD_LOCAL): its symbols never enter the
    process's global namespace, so a library loaded after it (pynvml's libnvidia-ml) never
    binds its own calls to ours; two libraries exporting the same names (Hygon's MIG library
    speaks NVML's) never answer for each other. `deep` adds RTLD_DEEPBIND for a library that
    exports another library's names: its calls to its own exported functions then bind to
    itself even when that other library was loaded into the global namespace before it (by
    another component, RTLD_GLOBAL). The error names the library, not where it was looked for
    on the host."""
    target = library.locate(configured.get(library.name))
    mode = os.RTLD_LOCAL | os.RTLD_NOW | (DEEPBIND if deep else 0)
    try:
        return ctypes.CDLL(target, mode=mode)
    except OSError:
        raise BackendUnavailable(f"{library.sonames[0]} cannot be loaded") from None


@dataclass(frozen=True, slots=True)
class Sample:
    """One reading of a cumulative counter, with the monotonic time it was taken."""

    value: float
    at: float  # seconds, monotonic

    def json(self) -> dict[str, float]:
        return {"value": self.value, "at": self.at}


class Baseline:
    """The previous sample of each counter a backend reads, so that read() can put both samples
    in the payload and parse() can take their difference without keeping state.

    Forgotten on re-init (a new Baseline), so a rate never spans a driver reload.
    """

    def __init__(self) -> None:
        self._last: dict[str, Sample] = {}

    def exchange(self, key: str, sample: Sample) -> Sample | None:
        """Store `sample` as the newest for `key` and return the one before it, if any."""
        previous = self._last.get(key)
        self._last[key] = sample
        return previous

    def keep_only(self, keys: set[str]) -> None:
        """Forget counters not read this round (a process that ended, a card that is gone)."""
        for stale in self._last.keys() - keys:
            del self._last[stale]


def rate_percent(
    previous: Any, current: Any, scale: float = 1.0
) -> tuple[float | None, Reason | None]:
    """Percent busy from two samples of a cumulative busy-time counter, 100 * Δvalue * scale / Δt.

    `scale` turns the counter's unit into seconds (1e-9 for nanoseconds). No previous sample is
    `no_baseline`; a counter that went backwards (a reset) or a time that did not advance is
    `no_baseline` too, never a negative or infinite figure. Not capped: a process using several
    engines may read above 100, and the caller decides what its figure means.
    """
    if not isinstance(current, Mapping):
        return None, Reason.TRANSIENT_DRIVER_ERROR
    if not isinstance(previous, Mapping):
        return None, Reason.NO_BASELINE
    v0, t0, v1, t1 = (
        finite(previous.get("value")),
        finite(previous.get("at")),
        finite(current.get("value")),
        finite(current.get("at")),
    )
    if None in (v0, t0, v1, t1):
        return None, Reason.TRANSIENT_DRIVER_ERROR
    assert v0 is not None and t0 is not None and v1 is not None and t1 is not None
    if t1 <= t0 or v1 < v0:
        return None, Reason.NO_BASELINE
    return round((v1 - v0) * scale / (t1 - t0) * 100.0, 2), None


# How often a backend reads the node's links and placement again (R-X3): they change only with a
# reset or a hot-plug, so once a minute, on the backend's own monotonic clock.
TOPOLOGY_PERIOD = 60.0
