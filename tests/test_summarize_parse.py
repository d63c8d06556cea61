"""The tolerant reader of pasted Prometheus text, and no text that makes summarize raise."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from devicemanager.report import summarize_texts, to_json, to_text
from devicemanager.report.families import BY_NAME, LABELS
from devicemanager.report.parse import LineKind, parse
from tests.conftest import NODES, SCENARIOS, scenario_monitor
from tests.test_summarize import SUMMARIZE


def samples_of(text: str) -> list[tuple[str, tuple[tuple[str, str], ...], float]]:
    return sorted((s.name, tuple(sorted(s.labels)), s.value) for s in parse("t", text).samples)


def library_samples(text: str) -> list[tuple[str, tuple[tuple[str, str], ...], float]]:
    return sorted(
        (s.name, tuple(sorted(s.labels.items())), s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    )


def test_reads_exactly_what_prometheus_client_reads_on_the_agents_metrics() -> None:
    for scenario in SCENARIOS:
        golden = (NODES / scenario / "golden" / "metrics.txt").read_text()
        assert samples_of(golden) == library_samples(golden)
        monitor = scenario_monitor(scenario)
        text = monitor.run_round().metrics.plain.decode()
        monitor.stop()
        parsed = parse("round", text)
        assert parsed.unreadable == () and parsed.last_kind is not LineKind.UNREADABLE
        assert samples_of(text) == library_samples(text)


def test_reads_what_prometheus_client_reads_on_the_well_formed_fixtures() -> None:
    for name in ("synthetic-cluster-monitor-gpu-a.prom", "hami-scheduler-test-quota.prom"):
        text = (SUMMARIZE / name).read_text()
        assert samples_of(text) == library_samples(text)


def test_tolerates_what_pastes_do_to_the_text() -> None:
    text = "\n".join(
        [
            '  aligned{a="1"}        42   ',  # indentation and runs of spaces
            'spaced{a="1", b="2" ,c="3"} 7',  # spaces around commas
            'trailing{a="1",} 1',  # a trailing comma, as the format allows
            'escaped{a="say \\"hi\\"\\n",b="back\\\\slash"} 2',
            'stamped{a="1"} 3 1700000000000',  # a timestamp
            "bare 4",
            'abbreviated{namespace="ns", …} 5',
            'dots{pod="p",...} 6',
            "weird{a=1} 8",  # an unquoted value
            'nan{a="1"} NaN',
            'inf{a="1"} +Inf',
            'toomuch{a="1"} 1 2 3',
            'cut{a="1",b="2',
        ]
    )
    p = parse("paste", text)
    by_name = {s.name: s for s in p.samples}
    assert by_name["aligned"].value == 42 and by_name["aligned"].labels == (("a", "1"),)
    assert by_name["spaced"].labels == (("a", "1"), ("b", "2"), ("c", "3"))
    assert by_name["trailing"].labels == (("a", "1"),)
    assert by_name["escaped"].labels == (("a", 'say "hi"\n'), ("b", "back\\slash"))
    assert by_name["stamped"].value == 3
    assert by_name["bare"].labels == ()
    assert by_name["abbreviated"].abbreviated and by_name["abbreviated"].labels == (
        ("namespace", "ns"),
    )
    assert by_name["dots"].abbreviated
    assert math.isnan(by_name["nan"].value) and by_name["inf"].value == math.inf
    assert [u.line for u in p.unreadable] == [9, 12, 13]
    assert "no quoted value" in p.unreadable[0].reason
    assert "cut off" in p.unreadable[-1].reason
    assert p.last_kind is LineKind.UNREADABLE and not p.ends_with_newline


def test_nothing_read_is_dropped_silently() -> None:
    text = "\n".join(
        [
            'hami_gpu_core_limit_ratio{node="n",device_index="0",device_uuid="GPU-1"} 100',
            'hami_gpu_core_limt_ratio{node="n",device_index="0",device_uuid="GPU-1"} 100',
            'somebody_elses_family{x="1"} 1',
            'somebody_elses_family{x="2"} 2',
            "go_threads 12",
            "!!! not prometheus",
            'hami_vgpu_memory_used_bytes{pod="p"} NaN',
            "hami_gpu_core_allocated_ratio{…} 50",
        ]
    )
    d = summarize_texts([("paste", text)]).to_json()
    assert d["unrecognised"] == ["hami_gpu_core_limt_ratio", "somebody_elses_family"]
    unrecognised = [f["message"] for f in d["findings"] if f["kind"] == "unrecognised"]
    assert any("did you mean hami_gpu_core_limit_ratio?" in m for m in unrecognised)
    assert any(m.startswith("somebody_elses_family: 2 sample(s)") for m in unrecognised)
    assert d["ignored"] == ["go_threads"]
    kinds = [f["kind"] for f in d["findings"]]
    assert "unparseable" in kinds  # line 6
    assert any("NaN or infinite" in f["message"] for f in d["findings"])
    # The abbreviated series names no device: said, not guessed.
    assert any(
        f["kind"] == "ambiguous" and "names no device" in f["message"] for f in d["findings"]
    )
    assert any(f["kind"] == "partial" and "ellipsis" in f["message"] for f in d["findings"])
    assert d["devices"][0]["cores_allocated"] is None


def test_a_text_without_a_final_newline_may_be_cut() -> None:
    d = summarize_texts([("p", 'hami_gpu_shared_count{node="n",device_index="0"} 1')]).to_json()
    assert any("does not end with a newline" in f["message"] for f in d["findings"])
    d = summarize_texts([("p", "# HELP hami_gpu_shared_count Number\n")]).to_json()
    assert any("ends with the HELP" in f["message"] for f in d["findings"])


def test_an_empty_input_reports_nothing_and_says_so() -> None:
    report = summarize_texts([("empty", "")])
    d = report.to_json()
    assert d["basis"] is None and d["devices"] == [] and d["findings"] == []
    assert "no allocation or usage families" in to_text(report)


# --- No text makes it raise ---------------------------------------------------------------

_LABEL_NAMES = sorted({n for names in LABELS.values() for n in names} | {"zone", "limit", "x"})
_values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from(["NaN", "+Inf", "-Inf", "1e400", "0x1", "", "nan", "1.048576e+10", "1e308"]),
)
_label_values = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["0", "1", "GPU-1", "GPU-xxxx", "MIG-1", "node-a", "nvidia.com/gpumem", ""]),
    st.sampled_from(["9" * 5000, "1e308", "-1e308", "NaN", "Inf", "\u0669"]),
)


@st.composite
def sample_lines(draw: st.DrawFn) -> str:
    name = draw(st.one_of(st.sampled_from(sorted(BY_NAME)), st.from_regex(r"[a-zA-Z_:]\w{0,20}")))
    labels = draw(st.dictionaries(st.sampled_from(_LABEL_NAMES), _label_values, max_size=8))
    body = ",".join(
        f'{k}="{v.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
        for k, v in labels.items()
    )
    value = draw(_values)
    return f"{name}{{{body}}} {value}"


@st.composite
def pastes(draw: st.DrawFn) -> str:
    lines = draw(
        st.lists(
            st.one_of(
                sample_lines(),
                st.sampled_from(["# HELP x y", "# TYPE hami_gpu_shared_count gauge", "#", ""]),
                st.text(max_size=40),
            ),
            max_size=30,
        )
    )
    text = "\n".join(lines)
    cut = draw(st.integers(min_value=0, max_value=len(text)))
    return text[:cut] if draw(st.booleans()) else text


def _exercise(texts: list[str]) -> None:
    report = summarize_texts([(f"s{i}", t) for i, t in enumerate(texts)])
    json.loads(to_json(report))
    assert to_text(report)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(pastes(), min_size=1, max_size=3))
def test_no_near_prometheus_text_makes_it_raise(texts: list[str]) -> None:
    _exercise(texts)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(), min_size=1, max_size=2))
def test_no_text_at_all_makes_it_raise(texts: list[str]) -> None:
    _exercise(texts)


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_every_fixture_cut_anywhere_still_summarizes(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(sorted(p.name for p in SUMMARIZE.glob("*.prom"))))
    text = (SUMMARIZE / name).read_text()
    cut = data.draw(st.integers(min_value=0, max_value=len(text)))
    _exercise([text[:cut]])


def test_absurd_numbers_never_make_invalid_json() -> None:
    text = "\n".join(
        f'{family}{{node="n",device_index="{i}",device_uuid="GPU-{i}"}} 1e308'
        for i in ("0", "1", "9" * 5000)
        for family in ("hami_gpu_core_limit_ratio", "hami_gpu_core_allocated_ratio")
    )
    report = summarize_texts([("absurd", text + "\n")])
    d = json.loads(to_json(report), parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    assert d["devices"][2]["index"] == "9" * 5000  # too long to be a number: kept as text
    assert d["capacity"]["cores_devices"] == 3
    assert d["capacity"]["cores_limit"] is None  # 3e308 overflows: no figure, not infinity
    assert d["devices"][0]["cores_limit"] == int(1e308)


def test_where_prometheus_client_rejects_a_paste_every_other_line_is_kept() -> None:
    """Why the reader is our own: one cut line and the library refuses the whole text."""
    for name, samples in (
        ("hami-issue-555-legacy-monitor.prom", 4),
        ("hami-issue-1417-node-overview.prom", 5),
    ):
        text = (SUMMARIZE / name).read_text()
        with pytest.raises(ValueError):
            library_samples(text)
        parsed = parse(name, text)
        assert len(parsed.samples) == samples and len(parsed.unreadable) == 1
