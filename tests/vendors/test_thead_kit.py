"""T-Head on the fake-library kit: our ctypes declarations of HGML laid out as gcc lays out our
header (written from the public hgml.h), and the faults every vendor's fake expresses the same
way (tests/fakelib/fakelib.h), through our real binding."""

from __future__ import annotations

import ctypes
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from devicemanager.backend import BackendUnavailable, create_backend
from devicemanager.model import BackendState, ReadRequest
from tests.conftest import REPO, agent_env
from tests.fakelib import ctypes_layout, gcc_missing, layout
from tests.fakelib import thead as fake
from tests.fakelib.thead import scenarios
from tests.vendors import kit
from tests.world import gpu
from vendors import _thead_lib as hgml
from vendors.thead import HGML, TheadBackend

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def scenario(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    def _write(devices: list[dict[str, Any]], **top: Any) -> Path:
        path = fake.write(tmp_path / "scenario.txt", devices, **top)
        monkeypatch.setenv(fake.SCENARIO_ENV, str(path))
        return path

    return _write


STRUCTS: dict[str, tuple[Any, list[str]]] = {
    "hgmlDevice_t": (hgml.hgmlDevice_t, ["handle"]),
    "hgmlGpmSample_t": (hgml.hgmlGpmSample_t, ["handle"]),
    "hgmlMemory_t": (hgml.hgmlMemory_t, ["total", "free", "used"]),
    "hgmlMemory_v2_t": (hgml.hgmlMemory_v2_t, ["version", "total", "reserved", "free", "used"]),
    "hgmlUtilization_t": (hgml.hgmlUtilization_t, ["gpu", "memory"]),
    "hgmlTemperature_v1_t": (hgml.hgmlTemperature_v1_t, ["version", "sensorType", "temperature"]),
    "hgmlProcessInfo_t": (
        hgml.hgmlProcessInfo_t,
        ["pid", "usedGpuMemory", "gpuInstanceId", "computeInstanceId"],
    ),
    "hgmlProcessUtilizationSample_t": (
        hgml.hgmlProcessUtilizationSample_t,
        ["pid", "timeStamp", "smUtil", "memUtil", "encUtil", "decUtil"],
    ),
    "hgmlGpmSupport_t": (hgml.hgmlGpmSupport_t, ["version", "isSupportedDevice"]),
    "hgmlPciInfo_t": (
        hgml.hgmlPciInfo_t,
        [
            "busIdLegacy",
            "domain",
            "bus",
            "device",
            "pciDeviceId",
            "pciSubSystemId",
            "busId",
            "globalPpuId",
        ],
    ),
    "hgmlEventData_t": (
        hgml.hgmlEventData_t,
        ["device", "eventType", "eventData", "gpuInstanceId", "computeInstanceId"],
    ),
    "hgmlGpmMetricInfo_t": (hgml.hgmlGpmMetricInfo_t, ["shortName", "longName", "unit"]),
    "hgmlGpmMetric_t": (hgml.hgmlGpmMetric_t, ["metricId", "hgmlReturn", "value", "metricInfo"]),
    "hgmlGpmMetricsGet_t": (
        hgml.hgmlGpmMetricsGet_t,
        ["version", "numMetrics", "sample1", "sample2", "metrics"],
    ),
}


def test_our_ctypes_structs_are_laid_out_as_gcc_lays_out_our_header(tmp_path: Path) -> None:
    if why := gcc_missing():
        pytest.skip(why)
    # hgml.h (as nvml.h) declares a metric's info as an anonymous struct: named here by its
    # member's type, so its own fields are laid out by gcc, not only its place in the metric.
    header = (
        '#include "hgml.h"\n'
        "typedef __typeof__(((hgmlGpmMetric_t *)0)->metricInfo) hgmlGpmMetricInfo_t;"
    )
    got = layout(
        header,
        {name: fields for name, (_, fields) in STRUCTS.items()},
        includes=[fake.HERE],
        directory=tmp_path,
    )
    for name, (struct, _) in STRUCTS.items():
        assert ctypes_layout(struct) == got[name], name
    # The sizes the public notes give for HGML's NVML-shaped rows.
    assert got["hgmlProcessInfo_t"].size == 24
    assert got["hgmlProcessUtilizationSample_t"].size == 32
    # Room for HGML_GPM_METRIC_MAX (2052) metrics, not NVML's maximum.
    assert got["hgmlGpmMetricsGet_t"].size == 24 + 2052 * 40
    # A metric's info is three string pointers after its 16-byte head (LP64).
    assert got["hgmlGpmMetricInfo_t"].offsets == {"shortName": 0, "longName": 8, "unit": 16}
    assert got["hgmlGpmMetric_t"].offsets["metricInfo"] == 16


def test_the_versioned_memory_struct_carries_its_size_and_version() -> None:
    assert hgml.Hgml.hgmlMemory_v2 == ctypes.sizeof(hgml.hgmlMemory_v2_t) | 2 << 24 == 0x2000028


def test_the_versioned_temperature_struct_carries_its_size_and_version() -> None:
    """(R-X7) hgmlTemperature_v1: 12 bytes (version, sensor, signed reading), version 1."""
    assert hgml.Hgml.hgmlTemperature_v1 == ctypes.sizeof(hgml.hgmlTemperature_v1_t) | 1 << 24
    assert hgml.Hgml.hgmlTemperature_v1 == 0x100000C


def test_a_driver_that_is_not_loaded_makes_the_backend_unavailable(libhgml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario([scenarios.whole(40)], init=scenarios.DRIVER_NOT_LOADED)
    with pytest.raises(
        BackendUnavailable, match="HGML could not be initialised: HGML_ERROR_DRIVER_NOT_LOADED"
    ):
        TheadBackend({"hgml": str(libhgml)}).open()


def test_a_node_without_cards_reads_no_cards(libhgml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario([])
    backend = TheadBackend({"hgml": str(libhgml)})
    backend.open()
    try:
        reading = backend.parse(backend.read(ReadRequest()))
    finally:
        backend.close()
    assert reading.cards == () and reading.driver_version == fake.DRIVER


def test_a_card_that_leaves_enumeration_is_gone_from_the_next_round(
    libhgml: Path, scenario
) -> None:  # type: ignore[no-untyped-def]
    cards = [scenarios.whole(40 + n) for n in range(3)]
    # open()'s enumeration (registering XID events) and round one's, then gone.
    cards[1]["gone_after"] = 2
    scenario(cards)
    backend = TheadBackend({"hgml": str(libhgml)})
    backend.open()
    try:
        first, second = (backend.parse(backend.read(ReadRequest())) for _ in range(2))
    finally:
        backend.close()
    assert [c.id for c in first.cards] == [gpu(40), gpu(41), gpu(42)]
    assert [c.id for c in second.cards] == [gpu(40), gpu(42)]


def test_a_hung_call_costs_its_round_a_deadline_and_then_is_stuck(libhgml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario([scenarios.whole(40)], hang={"hgmlDeviceGetPowerUsage": 0})
    monitor = kit.hung(TheadBackend({"hgml": str(libhgml)}))
    started = time.monotonic()
    first = monitor.run_round().snapshot
    second = monitor.run_round().snapshot
    assert time.monotonic() - started < 5
    assert [b.state for b in first.backends] == [BackendState.TIMEOUT]
    assert [b.state for b in second.backends] == [BackendState.STUCK]
    assert first.groups == () and second.groups == ()


def test_a_symbol_the_library_lacks_is_function_not_found_not_a_crash(libhgml: Path) -> None:
    lib = hgml.Hgml(ctypes.CDLL(str(libhgml), mode=ctypes.RTLD_LOCAL))
    # The newer per-process utilization call is not in the fake (nor in HGML 2.7.1).
    with pytest.raises(hgml.HGMLError) as info:
        lib._fn("hgmlDeviceGetProcessesUtilizationInfo")
    assert info.value.value == hgml.HGML_ERROR_FUNCTION_NOT_FOUND
    assert info.value.name == "HGML_ERROR_FUNCTION_NOT_FOUND"


def test_a_library_that_is_not_there_is_unavailable_not_a_crash() -> None:
    with pytest.raises(BackendUnavailable, match=r"^libhgml\.so cannot be loaded$"):
        TheadBackend({"hgml": "/nonexistent/libhgml.so"}).open()
    # In a clean interpreter, with nothing on the linker's path or in the PPU SDK.
    code = (
        "from vendors.thead import TheadBackend\n"
        "from devicemanager.backend import BackendUnavailable\n"
        "try:\n    TheadBackend().open()\n"
        "except BackendUnavailable as e:\n    print('unavailable', e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=agent_env({"LD_LIBRARY_PATH": "/nonexistent"}),
        cwd=REPO,
        check=True,
    )
    assert out.stdout.strip() == "unavailable libhgml.so cannot be loaded"


def test_the_library_is_found_in_the_ppu_sdk_and_configured_by_name(tmp_path: Path) -> None:
    installed = {"/usr/local/PPU_SDK/lib/libhgml.so"}
    assert HGML.locate(None, {}, installed.__contains__) == "/usr/local/PPU_SDK/lib/libhgml.so"
    assert HGML.locate(None, {}, lambda _: False) == "libhgml.so"
    backend = create_backend("thead", {"": str(tmp_path / "libhgml.so")})
    assert backend.configured == {"hgml": str(tmp_path / "libhgml.so")}  # type: ignore[attr-defined]
