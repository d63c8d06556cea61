"""NVIDIA on the fake-library kit's common faults, through real pynvml: the faults every
vendor's fake expresses the same way (tests/fakelib/fakelib.h), and the NVML structs pynvml
lays out, asserted against gcc on the real nvml.h."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from devicemanager.backend import BackendUnavailable
from devicemanager.model import BackendState, ReadRequest
from tests.fakelib import ctypes_layout, layout
from tests.fakelib import nvidia as fake_nvml
from tests.fakelib.nvidia import scenarios
from tests.vendors import kit
from tests.world import gpu
from vendors.nvidia import NvidiaBackend

pytestmark = pytest.mark.timeout(60)

DRIVER_NOT_LOADED = 9


@pytest.fixture
def scenario(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    def _write(devices: list[dict[str, Any]], **top: Any) -> Path:
        path = fake_nvml.write(tmp_path / "scenario.txt", "550.90.07", devices, **top)
        monkeypatch.setenv(fake_nvml.SCENARIO_ENV, str(path))
        return path

    return _write


def test_a_driver_that_is_not_loaded_makes_the_backend_unavailable(libnvml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario([fake_nvml.device(gpu(0))], init=DRIVER_NOT_LOADED)
    with pytest.raises(
        BackendUnavailable, match="NVML could not be initialised: Driver Not Loaded"
    ):
        NvidiaBackend({"nvml": str(libnvml)}).open()


def test_a_node_without_cards_reads_no_cards(libnvml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario([])
    backend = NvidiaBackend({"nvml": str(libnvml)})
    backend.open()
    try:
        reading = backend.parse(backend.read(ReadRequest()))
    finally:
        backend.close()
    assert reading.cards == () and reading.driver_version == "550.90.07"


def test_a_card_that_leaves_enumeration_is_gone_from_the_next_round(
    libnvml: Path, scenario
) -> None:  # type: ignore[no-untyped-def]
    cards = [fake_nvml.device(gpu(n), **scenarios.H100) for n in range(3)]
    cards[1]["gone_after"] = 2  # the open's enumeration and round one's, then gone
    scenario(cards)
    backend = NvidiaBackend({"nvml": str(libnvml)})
    backend.open()
    try:
        first, second = (backend.parse(backend.read(ReadRequest())) for _ in range(2))
    finally:
        backend.close()
    assert [c.id for c in first.cards] == [gpu(0), gpu(1), gpu(2)]
    assert [c.id for c in second.cards] == [gpu(0), gpu(2)]


def test_a_hung_call_costs_its_round_a_deadline_and_then_is_stuck(libnvml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario([fake_nvml.device(gpu(0))], hang={"nvmlDeviceGetPowerUsage": 0})
    monitor = kit.hung(NvidiaBackend({"nvml": str(libnvml)}))
    started = time.monotonic()
    first = monitor.run_round().snapshot
    second = monitor.run_round().snapshot
    assert time.monotonic() - started < 5
    assert [b.state for b in first.backends] == [BackendState.TIMEOUT]
    assert [b.state for b in second.backends] == [BackendState.STUCK]
    assert first.groups == () and second.groups == ()  # nothing carried, nothing invented


def test_pynvmls_structs_are_laid_out_as_nvml_h_says(libnvml: Path, tmp_path: Path) -> None:
    import pynvml

    include = fake_nvml.header_dir()
    assert include is not None
    structs = {
        "nvmlProcessInfo_v2_t": (
            pynvml.c_nvmlProcessInfo_v2_t,
            ["pid", "usedGpuMemory", "gpuInstanceId", "computeInstanceId"],
        ),
        "nvmlProcessUtilizationSample_t": (
            pynvml.c_nvmlProcessUtilizationSample_t,
            ["pid", "timeStamp", "smUtil", "memUtil", "encUtil", "decUtil"],
        ),
        "nvmlMemory_v2_t": (
            pynvml.c_nvmlMemory_v2_t,
            ["version", "total", "reserved", "free", "used"],
        ),
    }
    got = layout(
        '#include "nvml.h"',
        {name: fields for name, (_, fields) in structs.items()},
        includes=[include],
        directory=tmp_path,
    )
    for name, (struct, _) in structs.items():
        assert ctypes_layout(struct) == got[name], name
    assert got["nvmlProcessInfo_v2_t"].size == 24  # the row the reference notes measure
    assert got["nvmlProcessUtilizationSample_t"].size == 32
