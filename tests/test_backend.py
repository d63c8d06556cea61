"""The backend interface (issue 13): six manufacturers known by name, libraries configured per
manufacturer and found where vendors install them, and the helpers every vendor shares."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from devicemanager.backend import BACKENDS, BackendUnavailable, Library, create_backend
from devicemanager.model import Reason
from tests.conftest import Agent
from vendors._common import Baseline, Sample, error_code, failed, finite, load, rate_percent

SIX = ("nvidia", "thead", "amd", "hygon", "metax", "ascend")

HYDMI = Library(
    "hydmi", ("libhydmi.so", "libhydmi.so.1"), directories=("/opt/hyhal/lib",), env="X_HYDMI"
)


def test_a_configured_file_wins_then_the_environment_then_the_vendor_directories(
    tmp_path: Path,
) -> None:
    installed = {"/opt/hyhal/lib/libhydmi.so.1"}
    exists = installed.__contains__
    assert HYDMI.locate("/x/libhydmi.so.1.5", {"X_HYDMI": "/y"}, exists) == "/x/libhydmi.so.1.5"
    assert HYDMI.locate(None, {"X_HYDMI": "/y/lib.so"}, exists) == "/y/lib.so"
    # Only the versioned soname is installed (the unversioned link is often missing).
    assert HYDMI.locate(None, {}, exists) == "/opt/hyhal/lib/libhydmi.so.1"
    # Nothing anywhere: the first soname, for the dynamic linker to look up (and name).
    assert HYDMI.locate(None, {}, lambda _: False) == "libhydmi.so"
    # A configured directory is searched for the sonames.
    (tmp_path / "libhydmi.so.1").write_bytes(b"")
    assert HYDMI.locate(str(tmp_path), {}) == str(tmp_path / "libhydmi.so.1")


def test_every_manufacturer_is_known_and_libraries_are_configured_by_name() -> None:
    assert set(BACKENDS) == set(SIX)
    for name in SIX:
        backend = create_backend(name)
        assert backend.manufacturer == name
    nvidia = create_backend("nvidia", {"": "/opt/nv/libnvidia-ml.so.1"})
    assert nvidia.configured == {"nvml": "/opt/nv/libnvidia-ml.so.1"}  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match=r"nvidia loads no library 'hydmi' \(it loads: nvml\)"):
        create_backend("nvidia", {"hydmi": "/x.so"})
    with pytest.raises(ValueError, match="unknown manufacturer 'voodoo'"):
        create_backend("voodoo")


def test_loading_a_missing_library_names_it_and_not_where_it_was_looked_for() -> None:
    with pytest.raises(BackendUnavailable) as info:
        load(HYDMI, {"hydmi": "/secret/host/path/libhydmi.so"})
    assert str(info.value) == "libhydmi.so cannot be loaded"


def test_failed_entry_points_and_finite_figures() -> None:
    assert error_code(failed("hgmlDeviceGetPowerUsage", 3)) == 3
    assert error_code({"error": "x", "code": True}) == -1  # a bool is not a code
    assert error_code(12.5) is None and error_code({"watts": 3}) is None
    assert [finite(v) for v in (1, 2.5, math.nan, math.inf, -math.inf, True, "3", None)] == [
        1.0,
        2.5,
        None,
        None,
        None,
        None,
        None,
        None,
    ]


def test_a_cumulative_counter_becomes_a_rate_from_the_second_sample() -> None:
    baseline = Baseline()
    assert baseline.exchange("pid:7", Sample(1_000_000_000, 10.0)) is None
    previous = baseline.exchange("pid:7", Sample(1_600_000_000, 12.0))
    assert previous == Sample(1_000_000_000, 10.0)
    # 0.6 s of engine time in 2 s of wall time: 30 %.
    assert rate_percent(previous.json(), Sample(1_600_000_000, 12.0).json(), 1e-9) == (30.0, None)
    assert rate_percent(None, {"value": 1, "at": 1}) == (None, Reason.NO_BASELINE)
    # A counter that went backwards was reset: no rate, never a negative one.
    assert rate_percent({"value": 5, "at": 1}, {"value": 1, "at": 2}) == (None, Reason.NO_BASELINE)
    assert rate_percent({"value": 1, "at": 2}, {"value": 5, "at": 2}) == (None, Reason.NO_BASELINE)
    assert rate_percent({"value": 1, "at": 1}, {"value": "x", "at": 2}) == (
        None,
        Reason.TRANSIENT_DRIVER_ERROR,
    )
    baseline.keep_only({"pid:8"})
    assert baseline.exchange("pid:7", Sample(0, 13.0)) is None  # forgotten: a new baseline


def test_the_agent_serves_with_every_manufacturer_and_none_of_their_libraries(
    launch,  # type: ignore[no-untyped-def]
) -> None:
    agent: Agent = launch(
        "--manufacturer",
        ",".join(SIX),
        "--monitor-period",
        "0.5",
        env={"LD_LIBRARY_PATH": "/nonexistent", "DEVICEMANAGER_NVML_LIBRARY": "/nonexistent.so"},
    )
    agent.wait_for("/readyz", 200)
    with agent.client() as client:
        doc = client.get("/monitor/snapshot").json()
        metrics = client.get("/metrics").text
    states = {b["manufacturer"]: (b["state"], b["error"]) for b in doc["backends"]}
    assert set(states) == set(SIX) and doc["groups"] == []
    assert all(state == "unavailable" for state, _ in states.values())
    assert states["nvidia"][1] == "libnvidia-ml.so.1 cannot be loaded"
    assert states["ascend"][1] == "libdcmi.so cannot be loaded"
    for name in SIX:
        assert f'gpustack_accelerator_backend_up{{manufacturer="{name}",node=' in metrics, name
