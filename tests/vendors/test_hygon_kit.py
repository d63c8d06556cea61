"""Hygon on the fake-library kit: the three libraries' structs as our ctypes declarations lay
them out, asserted against gcc on the headers we wrote from Hygon's public ones; where the
libraries are looked for; and the faults every vendor's fake expresses the same way
(tests/fakelib/fakelib.h), through our real ctypes layer."""

from __future__ import annotations

import ctypes
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from devicemanager.backend import BackendUnavailable, create_backend
from devicemanager.model import BackendState, ReadRequest, Reason
from tests.fakelib import ctypes_layout, layout
from tests.fakelib import hygon as fake
from tests.fakelib.hygon import scenarios
from tests.fakelib.hygon.scenarios import dcu, k100
from tests.vendors import kit
from vendors import _hygon_lib as lib
from vendors.hygon import HYDMI, HYDMI_MIG, ROCM_SMI, HygonBackend

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def libs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    why = fake.missing()
    if why:
        pytest.skip(f"the fake Hygon libraries cannot be built here: {why}")
    built = fake.build(tmp_path_factory.getbasetemp() / "hygon-libs")
    return {name: str(path) for name, path in built.items()}


@pytest.fixture
def scenario(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    def _write(doc: dict[str, Any]) -> dict[str, str]:
        env = fake.write(tmp_path / "scenario", doc)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        return env

    return _write


def read_rounds(libs: dict[str, str], request: ReadRequest, rounds: int = 1) -> list[Any]:
    backend = HygonBackend(libs)
    backend.open()
    try:
        return [backend.parse(backend.read(request)) for _ in range(rounds)]
    finally:
        backend.close()


# -- ABI ----------------------------------------------------------------------------------------

STRUCTS: dict[str, tuple[Any, list[str]]] = {
    "rsmi_process_info_t": (
        lib.ProcessInfo,
        ["process_id", "pasid", "vram_usage", "sdma_usage", "cu_occupancy"],
    ),
    "rsmi_process_info_v2_t": (
        lib.ProcessInfoV2,
        ["processId", "vramUsageSize", "vramUsageRate", "usedGpus", "gpuIndex", "gpuUsageRate"],
    ),
    "rsmi_error_count_t": (
        lib.ErrorCount,
        ["correctable_err", "uncorrectable_err", "deferred_err", "reserved"],
    ),
    "rsmi_frequencies_t": (
        lib.Frequencies,
        ["has_deep_sleep", "num_supported", "current", "frequency"],
    ),
    "rsmi_retired_page_record_t": (lib.RetiredPage, ["page_address", "page_size", "status"]),
    "dmiDeviceInfo": (
        lib.DmiDeviceInfo,
        [
            "name",
            "compute_unit_count",
            "global_mem_size",
            "usage_mem_size",
            "container_id",
            "device_id",
        ],
    ),
    "nvmlPciInfo": (
        lib.MigPciInfo,
        ["pci_domain", "pci_bus", "pci_device", "pci_function", "bus_id"],
    ),
    "nvmlMemory_t": (lib.MigMemory, ["total", "free", "used"]),
    "nvmlUtilization_t": (lib.MigUtilization, ["gpu", "memory"]),
}
HEADERS = '#include "hygon_rsmi.h"\n#include "hygon_dmi.h"\n#include "hygon_dmi_mig.h"'


def test_every_struct_is_laid_out_as_our_headers_say(tmp_path: Path) -> None:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    wanted: dict[str, Any] = {name: fields for name, (_, fields) in STRUCTS.items()}
    wanted.update({"rsmi_gpu_block_t": [], "rsmi_status_t": [], "RSMI_POWER_TYPE": []})
    got = layout(HEADERS, wanted, includes=[fake.INCLUDE], directory=tmp_path)
    for name, (struct, _) in STRUCTS.items():
        assert ctypes_layout(struct) == got[name], name
    # The sizes the public headers imply on x86-64 (reference notes §12.3), so a header of
    # ours that drifted from Hygon's would fail here too.
    sizes = {name: got[name].size for name in STRUCTS}
    assert sizes == {
        "rsmi_process_info_t": 32,
        "rsmi_process_info_v2_t": 152,
        "rsmi_error_count_t": 64,  # upstream's is 16: Hygon's fork adds deferred + reserved
        "rsmi_frequencies_t": 280,  # a deep-sleep flag, two counts, 33 levels (R-X7)
        "rsmi_retired_page_record_t": 24,
        "dmiDeviceInfo": 296,
        "nvmlPciInfo": 48,
        "nvmlMemory_t": 24,
        "nvmlUtilization_t": 8,
    }
    # The enums the prototypes pass by value: a 64-bit block mask, 32-bit statuses.
    assert got["rsmi_gpu_block_t"].size == ctypes.sizeof(ctypes.c_uint64)
    assert got["rsmi_status_t"].size == got["RSMI_POWER_TYPE"].size == 4


def test_every_prototype_is_bound_to_a_symbol_the_fakes_export(libs: dict[str, str]) -> None:
    for name, prototypes in (
        ("rocm_smi", lib.RSMI_PROTOTYPES),
        ("hydmi", lib.DMI_PROTOTYPES),
        ("hydmi_mig", lib.MIG_PROTOTYPES),
    ):
        bound = lib.Bound(ctypes.CDLL(libs[name], mode=ctypes.RTLD_LOCAL), prototypes)
        assert [p for p in prototypes if bound.get(p) is None] == [], name


# -- where the libraries are ----------------------------------------------------------------


def test_three_libraries_in_hygons_install_directories() -> None:
    assert [lib.name for lib in HygonBackend.libraries] == ["rocm_smi", "hydmi", "hydmi_mig"]
    for library in (ROCM_SMI, HYDMI, HYDMI_MIG):
        assert library.directories[:2] == ("/opt/hyhal/lib", "/opt/dtk/lib")


@pytest.mark.parametrize(
    ("library", "present", "found"),
    [
        # The unversioned link is missing: the versioned soname is loaded.
        (HYDMI_MIG, {"/opt/hyhal/lib/libhydmi_mig.so.1"}, "/opt/hyhal/lib/libhydmi_mig.so.1"),
        (ROCM_SMI, {"/opt/dtk/lib/librocm_smi64.so.2"}, "/opt/dtk/lib/librocm_smi64.so.2"),
        (
            HYDMI,
            {"/opt/dtk/lib/libhydmi.so", "/opt/hyhal/lib/libhydmi.so.1"},
            "/opt/hyhal/lib/libhydmi.so.1",  # hyhal first, whichever name it holds
        ),
        (HYDMI, set(), "libhydmi.so"),  # nowhere: the linker is asked, and names it if missing
    ],
)
def test_libraries_are_found_under_versioned_sonames(
    library: Any, present: set[str], found: str
) -> None:
    assert library.locate(environ={}, exists=present.__contains__) == found


def test_a_directory_holding_only_versioned_sonames_is_enough(
    libs: dict[str, str], scenario, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.vdcu_calls())
    versioned = tmp_path / "hyhal" / "lib"
    versioned.mkdir(parents=True)
    for name, soname in (
        ("rocm_smi", "librocm_smi64.so.2"),
        ("hydmi", "libhydmi.so.1"),
        ("hydmi_mig", "libhydmi_mig.so.1"),
    ):
        shutil.copy(libs[name], versioned / soname)
    backend = create_backend(
        "hygon", {"": str(versioned), "hydmi": str(versioned), "hydmi_mig": str(versioned)}
    )
    backend.open()
    try:
        reading = backend.parse(backend.read(ReadRequest()))
    finally:
        backend.close()
    assert [c.id for c in reading.cards] == [dcu(0), dcu(1)]
    assert reading.via == "rocm_smi,hydmi,hydmi_mig"


# -- the kit's common faults ------------------------------------------------------------------


def test_a_library_that_is_not_there_is_unavailable_and_says_which(tmp_path: Path) -> None:
    with pytest.raises(BackendUnavailable, match=r"librocm_smi64\.so cannot be loaded") as info:
        HygonBackend({"rocm_smi": str(tmp_path / "nothing" / "librocm_smi64.so")}).open()
    assert str(tmp_path) not in str(info.value)  # what failed, not where it was looked for


def test_a_driver_that_is_not_loaded_makes_the_backend_unavailable(
    libs: dict[str, str], scenario
) -> None:  # type: ignore[no-untyped-def]
    scenario(fake.node([k100(0)], init=8))  # RSMI_STATUS_INIT_ERROR
    with pytest.raises(
        BackendUnavailable, match=r"ROCm SMI could not be initialised: .*INIT_ERROR"
    ):
        HygonBackend(libs).open()


def test_without_the_vdcu_and_mig_libraries_cards_are_read_and_partitions_unsupported(
    libs: dict[str, str], scenario
) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.k100ai_mig())
    only = {"rocm_smi": libs["rocm_smi"], "hydmi": "/nonexistent/libhydmi.so"}
    only["hydmi_mig"] = "/nonexistent/libhydmi_mig.so"
    request = ReadRequest(
        partition_ids=frozenset({(dcu(0), "vDCU-0"), (dcu(0), f"MIG-{scenarios.mig_uuid(0)}")})
    )
    (reading,) = read_rounds(only, request)
    assert len(reading.cards) == 8 and reading.via == "rocm_smi"
    assert {p.memory_reason for p in reading.partitions} == {Reason.UNSUPPORTED}


def test_a_node_without_cards_reads_no_cards(libs: dict[str, str], scenario) -> None:  # type: ignore[no-untyped-def]
    scenario(fake.node([]))
    (reading,) = read_rounds(libs, ReadRequest())
    assert reading.cards == () and reading.driver_version == "6.3.8-V1.11.0"


def test_a_card_that_leaves_enumeration_is_gone_from_the_next_round(
    libs: dict[str, str], scenario
) -> None:  # type: ignore[no-untyped-def]
    cards = [k100(n) for n in range(3)]
    cards[1]["gone_after"] = 1  # round one's enumeration, then gone
    scenario(fake.node(cards))
    first, second = read_rounds(libs, ReadRequest(), rounds=2)
    assert [c.id for c in first.cards] == [dcu(0), dcu(1), dcu(2)]
    assert [c.id for c in second.cards] == [dcu(0), dcu(2)]


def test_a_card_lost_mid_read_keeps_its_name_and_is_unreachable(
    libs: dict[str, str], scenario
) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.lost_card())
    first, second = read_rounds(libs, ReadRequest(), rounds=2)
    assert [c.unhealthy for c in first.cards] == [False] * 4
    lost = second.cards[2]
    assert (lost.id, lost.index, lost.unhealthy_reason) == (dcu(2), 2, "unreachable")
    assert "0000:43:00.0" in lost.aliases  # its bus as it answered before
    assert (lost.memory_total_mib, lost.cores_utilization_percent) == (None, None)
    assert [c.unhealthy for i, c in enumerate(second.cards) if i != 2] == [False] * 3


def test_a_refused_enumeration_is_an_error_round_not_a_node_without_cards(
    libs: dict[str, str], scenario
) -> None:  # type: ignore[no-untyped-def]
    scenario(fake.node([k100(0)], faults={"rsmi_num_monitor_devices": 3}))
    monitor = kit.monitor(HygonBackend(libs), period=1, deadline=5)
    snap = monitor.run_round().snapshot
    monitor.stop()
    (status,) = snap.backends
    assert status.state is BackendState.ERROR and "RSMI_STATUS_FILE_ERROR" in (status.error or "")
    assert snap.groups == ()


def test_a_hung_call_costs_its_round_a_deadline(libs: dict[str, str], scenario) -> None:  # type: ignore[no-untyped-def]
    scenario(fake.node([k100(0)], hang={"rsmi_dev_busy_percent_get": 2}))
    monitor = kit.hung(HygonBackend(libs))
    started = time.monotonic()
    first = monitor.run_round().snapshot
    assert time.monotonic() - started < 2
    assert [b.state for b in first.backends] == [BackendState.TIMEOUT]
    assert first.groups == ()  # nothing carried, nothing invented
    monitor.stop()


def test_an_entry_point_refused_on_one_card_only(libs: dict[str, str], scenario) -> None:  # type: ignore[no-untyped-def]
    cards = [k100(0, busy=10), k100(1, busy=20, errors={"rsmi_dev_busy_percent_get": 4})]
    scenario(fake.node(cards))
    (reading,) = read_rounds(libs, ReadRequest())
    assert [c.cores_utilization_percent for c in reading.cards] == [10.0, None]
