"""Ascend on the fake-library kit: every struct our ctypes layer declares, asserted against gcc
on the header we wrote from the public dcmi_interface_api.h; and the faults every vendor's fake
expresses the same way (tests/fakelib/fakelib.h), through our real ctypes binding."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from devicemanager.backend import BackendUnavailable
from devicemanager.model import BackendState, ReadRequest
from tests.fakelib import ascend as fake_dcmi
from tests.fakelib import ctypes_layout, layout
from tests.fakelib.ascend import scenarios
from tests.vendors import kit
from vendors import _ascend_lib as lib
from vendors.ascend import AscendBackend, DcmiError

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def scenario(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    def _write(devices: list[dict[str, Any]], **top: Any) -> Path:
        path = fake_dcmi.write(tmp_path / "scenario.txt", devices, **top)
        monkeypatch.setenv(fake_dcmi.SCENARIO_ENV, str(path))
        return path

    return _write


NOTHING = ReadRequest()


def read(lib_path: Path, request: ReadRequest = NOTHING, rounds: int = 1) -> list[Any]:
    backend = AscendBackend({"dcmi": str(lib_path)})
    backend.open()
    try:
        return [backend.parse(backend.read(request)) for _ in range(rounds)]
    finally:
        backend.close()


STRUCTS: dict[str, tuple[Any, list[str]]] = {
    "struct dcmi_chip_info": (lib.ChipInfo, ["chip_type", "chip_name", "chip_ver", "aicore_cnt"]),
    "struct dcmi_die_id": (lib.DieId, ["soc_die"]),
    "struct dcmi_hbm_info": (
        lib.HbmInfo,
        ["memory_size", "freq", "memory_usage", "temp", "bandwith_util_rate"],
    ),
    "struct dcmi_get_memory_info_stru": (
        lib.MemoryInfoV3,
        [
            "memory_size",
            "memory_available",
            "freq",
            "hugepagesize",
            "hugepages_total",
            "hugepages_free",
            "utiliza",
            "reserve",
        ],
    ),
    "struct dcmi_proc_mem_info": (lib.ProcMemInfo, ["proc_id", "proc_mem_usage"]),
    "struct dcmi_pcie_info_all": (lib.PcieInfoAll, [name for name, *_ in lib.PcieInfoAll._fields_]),
    "struct dcmi_ecc_info": (lib.EccInfo, [name for name, *_ in lib.EccInfo._fields_]),
    "struct dcmi_base_resource": (
        lib.BaseResource,
        ["token", "token_max", "task_timeout", "vfg_id", "vip_mode", "reserved"],
    ),
    "struct dcmi_computing_resource": (
        lib.ComputingResource,
        [name for name, *_ in lib.ComputingResource._fields_],
    ),
    "struct dcmi_media_resource": (
        lib.MediaResource,
        [name for name, *_ in lib.MediaResource._fields_],
    ),
    "struct dcmi_vdev_query_info": (
        lib.VdevQueryInfo,
        [name for name, *_ in lib.VdevQueryInfo._fields_],
    ),
    "struct dcmi_vdev_query_stru": (lib.VdevQuery, ["vdev_id", "query_info"]),
    "struct dcmi_soc_total_resource": (
        lib.SocTotalResource,
        [name for name, *_ in lib.SocTotalResource._fields_],
    ),
}


def test_our_structs_are_laid_out_as_gcc_lays_out_the_header(tmp_path: Path) -> None:
    if why := fake_dcmi.missing():
        pytest.skip(why)
    got = layout(
        '#include "dcmi.h"',
        {name: fields for name, (_, fields) in STRUCTS.items()},
        includes=[fake_dcmi.HERE],
        directory=tmp_path,
    )
    for name, (struct, _) in STRUCTS.items():
        assert ctypes_layout(struct) == got[name], name
    # The sizes the reference notes measured on x86-64: a 16-byte process row (int, pad,
    # unsigned long), the 264-byte vNPU query the activity sub-command fills, and 112 bytes
    # for the general memory struct whose header comment claims 96.
    assert got["struct dcmi_proc_mem_info"].size == 16
    assert got["struct dcmi_proc_mem_info"].offsets["proc_mem_usage"] == 8
    assert got["struct dcmi_vdev_query_stru"].size == 264
    assert got["struct dcmi_get_memory_info_stru"].size == 112
    assert got["struct dcmi_hbm_info"].size == 32
    assert got["struct dcmi_chip_info"].size == 100
    assert got["struct dcmi_die_id"].size == 20
    assert got["struct dcmi_pcie_info_all"].size == 64  # as the header's comment says (R-X3)
    assert got["struct dcmi_ecc_info"].size == 36  # an int flag and eight unsigned counts (R-X7)


def test_a_driver_that_is_not_loaded_makes_the_backend_unavailable(libdcmi: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.eight_910b2(), init=fake_dcmi.DEVICE_NOT_EXIST)
    with pytest.raises(BackendUnavailable, match="dcmi_init answered -8008"):
        AscendBackend({"dcmi": str(libdcmi)}).open()


def test_no_library_is_unavailable_and_names_only_the_library(tmp_path: Path) -> None:
    with pytest.raises(BackendUnavailable) as info:
        AscendBackend({"dcmi": str(tmp_path / "host" / "libdcmi.so")}).open()
    assert str(info.value) == "libdcmi.so cannot be loaded"


def test_a_node_without_npus_reads_no_cards(libdcmi: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario([])
    (reading,) = read(libdcmi)
    assert reading.cards == () and reading.driver_version == "25.5.1"


def test_a_card_list_that_fails_is_an_error_not_an_empty_node(libdcmi: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.eight_910b2(), faults={"dcmi_get_card_list": fake_dcmi.NOT_READY})
    backend = AscendBackend({"dcmi": str(libdcmi)})
    backend.open()
    with pytest.raises(DcmiError, match="-8012"):
        backend.read(ReadRequest())


def test_an_npu_that_leaves_enumeration_is_gone_from_the_next_round(
    libdcmi: Path, scenario
) -> None:  # type: ignore[no-untyped-def]
    cards = scenarios.eight_910b2()
    cards[3]["gone_after"] = 1  # round one's enumeration, then gone
    scenario(cards)
    first, second = read(libdcmi, rounds=2)
    assert [c.index for c in first.cards] == list(range(8))
    assert [c.index for c in second.cards] == [0, 1, 2, 4, 5, 6, 7]


def test_a_hung_call_costs_its_round_a_deadline_and_then_is_stuck(libdcmi: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.eight_910b2(), hang={"dcmi_get_device_power_info": 0})
    monitor = kit.hung(AscendBackend({"dcmi": str(libdcmi)}))
    started = time.monotonic()
    first = monitor.run_round().snapshot
    second = monitor.run_round().snapshot
    assert time.monotonic() - started < 5
    assert [b.state for b in first.backends] == [BackendState.TIMEOUT]
    assert [b.state for b in second.backends] == [BackendState.STUCK]
    assert first.groups == () and second.groups == ()


def test_an_older_driver_without_die_v2_or_driver_version(
    tmp_path_factory: pytest.TempPathFactory, scenario
) -> None:  # type: ignore[no-untyped-def]
    if why := fake_dcmi.missing():
        pytest.skip(why)
    old = fake_dcmi.build(tmp_path_factory.getbasetemp() / "dcmi-old", old_driver=True)
    scenario(scenarios.eight_910b2())
    backend = AscendBackend({"dcmi": str(old)})
    backend.open()
    try:
        payload = backend.read(ReadRequest())
    finally:
        backend.close()
    device = payload["devices"][0]
    # The missing symbol is answered by our binding, and the v1 call names the die instead.
    assert device["dcmi_get_device_die_v2"] == {
        "error": "dcmi_get_device_die_v2",
        "code": lib.FUNCTION_NOT_FOUND,
    }
    assert device["dcmi_get_device_die"] == fake_dcmi.die(0)
    reading = backend.parse(payload)
    assert len(reading.cards) == 8 and reading.driver_version is None
