"""vendors/_gpm_request: the GPM metrics request kept across rounds, laid out from the binding's
own ctypes declaration (pynvml's for NVML, ours for HGML), whose answers never carry over from
one call to the next. The library's side is played here by writing the struct's fields as
`…GpmMetricsGet` does; tests/vendors/test_nvidia_gpm.py drives the same request through the
fake libnvidia-ml and libhgml."""

from __future__ import annotations

from typing import Any

import pynvml
import pytest
from hypothesis import given
from hypothesis import strategies as st

from vendors import _thead_lib
from vendors._gpm_request import UNWRITTEN, GpmRequest

BINDINGS = [
    pytest.param(pynvml.c_nvmlGpmMetricsGet_t, "nvmlReturn", id="nvml"),
    pytest.param(_thead_lib.hgmlGpmMetricsGet_t, "hgmlReturn", id="hgml"),
]


def _samples(struct: Any) -> tuple[Any, Any]:
    """Two samples of the type the struct declares (a pointer or a handle struct)."""
    kind = dict(struct._fields_)["sample1"]
    return kind(), kind()


def _answer(request: Any, field: str, answers: list[tuple[int, float]]) -> None:
    """What the library does: each asked metric's return code and value written in place."""
    for i, (code, value) in enumerate(answers):
        setattr(request.metrics[i], field, code)
        request.metrics[i].value = value


@pytest.mark.parametrize(("struct", "field"), BINDINGS)
@given(
    answers=st.lists(
        st.tuples(st.integers(0, 2**31 - 1), st.floats(allow_nan=False)), min_size=1, max_size=20
    )
)
def test_each_asked_metric_is_read_back_as_the_library_wrote_it(
    struct: Any, field: str, answers: list[tuple[int, float]]
) -> None:
    ids = [1 + 3 * i for i in range(len(answers))]
    request = GpmRequest(struct, field, ids)
    sent = request.prepared(1, *_samples(struct))
    assert sent.version == 1 and sent.numMetrics == len(ids)
    assert [sent.metrics[i].metricId for i in range(len(ids))] == ids
    _answer(sent, field, answers)
    assert request.answers() == answers


@pytest.mark.parametrize(("struct", "field"), BINDINGS)
def test_an_answer_the_library_did_not_write_is_unwritten_never_the_last_rounds(
    struct: Any, field: str
) -> None:
    request = GpmRequest(struct, field, [1, 2, 3])
    _answer(request.prepared(1, *_samples(struct)), field, [(0, 21.19), (0, 3.1), (0, 20.14)])
    assert request.answers() == [(0, 21.19), (0, 3.1), (0, 20.14)]
    sent = request.prepared(
        1, *_samples(struct)
    )  # the next round: the library writes only the first
    _answer(sent, field, [(0, 0.2)])
    assert request.answers() == [(0, 0.2), (UNWRITTEN, 0.0), (UNWRITTEN, 0.0)]
    assert [sent.metrics[i].metricId for i in range(3)] == [1, 2, 3]


@pytest.mark.parametrize(("struct", "field"), BINDINGS)
def test_more_ids_than_the_declared_array_holds_are_refused(struct: Any, field: str) -> None:
    size = len(struct().metrics)
    GpmRequest(struct, field, list(range(size)))
    with pytest.raises(ValueError, match="metric ids"):
        GpmRequest(struct, field, list(range(size + 1)))
