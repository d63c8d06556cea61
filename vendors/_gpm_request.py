"""One GPM metrics request, made once per open library and asked again every round (issue 41).

`…GpmMetricsGet` takes a struct of the library's own declaration whose metric array holds
every id the header knows (NVML 13: 477 entries, 19 KiB), of which a round asks fourteen per
card. Allocating it, setting its ids field by field through pynvml's Python-level attribute
hooks and reading each answer back the same way cost the agent about 40 µs per card and
round, several times the library's own time: here the ids are laid out once as bytes, copied
in with one `memmove` before each call, and the answers read back with `struct` from one copy
of the array. The layout (each element's size, the offsets and C types of its return code and
value) is taken from the binding's own ctypes declaration, so NVML's and HGML's agree with
theirs by construction.

Before each call every asked metric's return code is set to UNWRITTEN: a library that leaves
one unwritten reads as that failure, never as the previous round's answer.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Sequence
from typing import Any

# NVML_ERROR_UNKNOWN (and HGML's): what an answer the library did not write reads as.
UNWRITTEN = 999


class GpmRequest:
    """The metrics-request struct of one binding, with `ids` asked in this order each time."""

    __slots__ = ("_address", "_count", "_request", "_return", "_size", "_template", "_value")

    def __init__(self, metrics_get: Any, return_field: str, ids: Sequence[int]) -> None:
        self._request = metrics_get()
        array = self._request.metrics
        element = array._type_
        if len(ids) > len(array):
            raise ValueError(f"{len(ids)} metric ids for an array of {len(array)}")
        types = dict(element._fields_)
        self._size = ctypes.sizeof(element)
        self._count = len(ids)
        # (struct, offset) of each field read back, from the declaration itself.
        self._return = (
            struct.Struct("=" + types[return_field]._type_),
            getattr(element, return_field).offset,
        )
        self._value = (struct.Struct("=" + types["value"]._type_), element.value.offset)
        template = (element * len(ids))()
        for i, metric_id in enumerate(ids):
            template[i].metricId = metric_id
            setattr(template[i], return_field, UNWRITTEN)
        self._template = bytes(template)
        self._address = ctypes.addressof(array)

    def prepared(self, version: int, first: Any, second: Any) -> Any:
        """The struct to hand `…GpmMetricsGet`: between `first` and `second`, every asked
        metric's id set and its answer unwritten."""
        request = self._request
        request.version = version
        request.numMetrics = self._count
        request.sample1, request.sample2 = first, second
        ctypes.memmove(self._address, self._template, len(self._template))
        return request

    def answers(self) -> list[tuple[int, float]]:
        """(return code, value) of each asked metric, in the order of `ids`."""
        raw = ctypes.string_at(self._address, len(self._template))
        (code, code_at), (value, value_at) = self._return, self._value
        return [
            (code.unpack_from(raw, base + code_at)[0], value.unpack_from(raw, base + value_at)[0])
            for base in range(0, self._count * self._size, self._size)
        ]
