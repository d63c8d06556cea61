"""The amd backend's pure parts and its configuration: identity forms, units, reasons, where its
three libraries are looked for, and that importing it loads no library."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devicemanager.backend import create_backend
from devicemanager.model import Reason
from tests.conftest import REPO, agent_env
from vendors import amd
from vendors._amd_smi import (
    METRICS,
    XCP_BUSY,
    health,
    metrics_kept,
    partition_reading,
    xcp_busy,
    xcp_cores,
)


@pytest.mark.parametrize(
    ("serial", "expected"),
    [
        ("0x2C4A6B8F1E3D5A70", "GPU-2c4a6b8f1e3d5a70"),  # as the wheel formats it
        ("2C4A6B8F1E3D5A70", "GPU-2c4a6b8f1e3d5a70"),
        ("N/A", None),
        ("0x", None),
        ("0xZZ", None),
        (17, None),
    ],
)
def test_gpustack_names_an_amd_card_by_its_asic_serial(
    serial: object, expected: str | None
) -> None:
    assert amd.serial_id({"asic_serial": serial}) == expected


@pytest.mark.parametrize(
    ("cu", "units", "expected"),
    [
        (152, 304, 50.0),
        (19, 38, 50.0),
        (0, 304, 0.0),  # measured: no CU occupied
        ("N/A", 304, None),  # the wheel's word for 0xFFFFFFFF
        (0xFFFFFFFF, 304, None),
        (305, 304, None),  # more CUs than the device has: not a figure
        (10, None, None),
        (True, 304, None),
    ],
)
def test_cu_occupancy_as_a_share_of_the_devices_compute_units(
    cu: object, units: int | None, expected: float | None
) -> None:
    assert amd.occupancy_percent(cu, units) == expected


def test_status_codes_keep_cannot_apart_from_could_not() -> None:
    assert amd.reason_for(amd.NOT_SUPPORTED) is Reason.UNSUPPORTED
    assert amd.reason_for(amd.NO_PERM) is Reason.PERMISSION
    assert amd.reason_for(amd.OUT_OF_RESOURCES) is Reason.TRUNCATED
    assert amd.reason_for(amd.NOT_FOUND) is Reason.TRANSIENT_DRIVER_ERROR
    assert amd.reason_for(9) is Reason.TRANSIENT_DRIVER_ERROR  # RETRY: ask again next round
    assert amd.rsmi_reason_for(2) is Reason.UNSUPPORTED
    assert amd.rsmi_reason_for(4) is Reason.PERMISSION
    assert amd.rsmi_reason_for(11) is Reason.TRUNCATED


def test_the_rocm_directories_follow_the_wheels_order() -> None:
    env = {"ROCM_HOME": "/opt/rocm-7.0.2", "ROCM_PATH": "/opt/rocm-6.4.1"}
    assert amd.rocm_lib_directories(env) == (
        "/opt/rocm-7.0.2/lib",
        "/opt/rocm-6.4.1/lib",
        "/opt/rocm/lib",
    )
    assert amd.rocm_lib_directories({}) == ("/opt/rocm/lib",)


def test_where_each_library_is_looked_for(tmp_path: Path) -> None:
    root = tmp_path / "rocm-7.2.0"
    (root / "lib").mkdir(parents=True)
    for name in ("libamd_smi.so", "librocm_smi64.so.7", "librocm-core.so.1"):
        (root / "lib" / name).write_bytes(b"")
    backend = amd.AmdBackend({"amd_smi": str(root)}, environ={})
    # A ROCm root means its lib/; the other two are looked for beside libamd_smi first.
    assert backend._locate(amd.AMD_SMI) == str(root / "lib" / "libamd_smi.so")
    near = str(root / "lib")
    assert backend._locate(amd.ROCM_SMI, near) == str(root / "lib" / "librocm_smi64.so.7")
    assert backend._locate(amd.ROCM_CORE, near) == str(root / "lib" / "librocm-core.so.1")
    # From the environment, as the wheel would look.
    from_env = amd.AmdBackend(environ={"ROCM_PATH": str(root)})
    assert from_env._locate(amd.AMD_SMI) == str(root / "lib" / "libamd_smi.so")
    # Nowhere: the bare name, for the wheel's own search.
    assert amd.AmdBackend(environ={})._locate(amd.AMD_SMI) in (
        "libamd_smi.so",
        "/opt/rocm/lib/libamd_smi.so",
    )


def test_the_three_libraries_are_configured_by_name() -> None:
    backend = create_backend("amd", {"": "/opt/rocm", "rocm_smi": "/x/librocm_smi64.so.7"})
    assert backend.configured == {  # type: ignore[attr-defined]
        "amd_smi": "/opt/rocm",
        "rocm_smi": "/x/librocm_smi64.so.7",
    }
    with pytest.raises(ValueError, match="it loads: amd_smi, rocm_smi, rocm_core"):
        create_backend("amd", {"hydmi": "/x.so"})


def test_xcp_platform_devices_are_read_from_sysfs(tmp_path: Path) -> None:
    for n, minor in ((0, 129), (1, 130), (12, 147)):
        (tmp_path / "devices" / "platform" / f"amdgpu_xcp_{n}" / "drm" / f"renderD{minor}").mkdir(
            parents=True
        )
    (tmp_path / "devices" / "platform" / "amdgpu_xcp_9" / "drm").mkdir(parents=True)  # unused
    assert amd.xcp_platform_devices(tmp_path) == {
        "129": "amdgpu_xcp_0",
        "130": "amdgpu_xcp_1",
        "147": "amdgpu_xcp_12",
    }
    assert amd.xcp_platform_devices(tmp_path / "absent") == {}


def test_importing_the_backend_loads_no_library() -> None:
    code = "import sys, vendors.amd; print('amdsmi' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=agent_env(),
        cwd=REPO,
        check=True,
    )
    assert out.stdout == "False\n" and out.stderr == ""


def test_a_partitioned_socket_without_a_serial_is_named_by_its_socket() -> None:
    socket = {"amdsmi_get_socket_info": "0000:75:00"}
    assert amd.physical_id(socket, [{}, {}]) == "socket-0000:75:00"
    assert amd.physical_id({}, [{}, {}]) is None


@pytest.mark.parametrize(
    ("answers", "figure", "value", "reason"),
    [
        # Energy: counts times µJ per count, in joules; a resolution that is no resolution refused.
        (
            {
                "amdsmi_get_energy_count": {
                    "energy_accumulator": 2_000_000,
                    "counter_resolution": 0.5,
                }
            },
            "energy_joules",
            1.0,
            None,
        ),
        (
            {"amdsmi_get_energy_count": {"energy_accumulator": 5, "counter_resolution": 0.0}},
            "energy_joules",
            None,
            Reason.INVALID_DATA,
        ),
        (
            {
                "amdsmi_get_energy_count": {
                    "energy_accumulator": 0xFFFFFFFFFFFFFFFF,
                    "counter_resolution": 15.3,
                }
            },
            "energy_joules",
            None,
            Reason.INVALID_DATA,
        ),
        (
            {"amdsmi_get_energy_count": {"error": "AmdSmiLibraryException", "code": 10}},
            "energy_joules",
            None,
            Reason.PERMISSION,
        ),
        # Clocks: MHz to Hz; the wheel's "N/A" and a clock above 100 GHz refused.
        (
            {"amdsmi_get_clock_info": {"GFX": {"clk": 100_000}}},
            "clock_graphics_hz",
            100_000_000_000,
            None,
        ),
        (
            {"amdsmi_get_clock_info": {"GFX": {"clk": 100_001}}},
            "clock_graphics_hz",
            None,
            Reason.INVALID_DATA,
        ),
        (
            {"amdsmi_get_clock_info": {"MEM": {"clk": "N/A"}}},
            "clock_memory_hz",
            None,
            Reason.INVALID_DATA,
        ),
        # A 16-bit GPU-metrics field ROCm SMI marked absent (0xFFFF, its type's maximum):
        # absent, not 65.5 GHz (issue 43; b42776a published 65,535,000,000 Hz).
        (
            {"amdsmi_get_clock_info": {"GFX": {"clk": 0xFFFF}}},
            "clock_graphics_hz",
            None,
            Reason.INVALID_DATA,
        ),
        (
            {"amdsmi_get_clock_info": {"MEM": {"clk": 0xFFFF}}},
            "clock_memory_hz",
            None,
            Reason.INVALID_DATA,
        ),
        (
            {"amdsmi_get_clock_info": {"MEM": {"clk": 0xFFFE}}},
            "clock_memory_hz",
            0xFFFE * 1_000_000,
            None,
        ),
        (
            {"amdsmi_get_clock_info": {"MEM": {"clk": 1300}}},
            "clock_sm_hz",
            None,
            Reason.UNSUPPORTED,
        ),
        (
            {"amdsmi_get_gpu_pci_replay_counter": 0xFFFFFFFFFFFFFFFE},
            "pcie_naks",
            0xFFFFFFFFFFFFFFFE,
            None,
        ),
        (
            {"amdsmi_get_gpu_pci_replay_counter": {"error": "AmdSmiLibraryException", "code": 2}},
            "pcie_naks",
            None,
            Reason.UNSUPPORTED,
        ),
    ],
)
def test_each_amd_health_figure_is_range_checked_and_says_why_it_is_absent(
    answers: dict[str, object], figure: str, value: object, reason: Reason | None
) -> None:
    """(R-X7) amdsmi's energy, clocks and replays, one answer at a time: base units in range,
    the failure's reason, `invalid_data` out of range, and no SM clock domain on AMD."""
    got = health(answers)
    assert got is not None
    assert (got.get(figure), got.reason(figure)) == (value, reason)
    assert health({"amdsmi_get_gpu_total_ecc_count": {"uncorrectable_count": 0}}) is None


FAILED = {"error": "AmdSmiLibraryException", "code": 2}  # NOT_SUPPORTED
HEALTHY = {"amdsmi_get_energy_count": FAILED}  # any health key: the board's health was read


@pytest.mark.parametrize(
    ("answers", "figure", "value", "reason"),
    [
        (
            {"amdsmi_get_gpu_total_ecc_count": {"correctable_count": 9}},
            "ecc_corrected_total",
            9,
            None,
        ),
        (
            {"amdsmi_get_gpu_total_ecc_count": FAILED},
            "ecc_corrected_total",
            None,
            Reason.UNSUPPORTED,
        ),
        (
            {"amdsmi_get_gpu_total_ecc_count": {"uncorrectable_count": 0xFFFFFFFFFFFFFFFF}},
            "ecc_uncorrected_total",
            None,
            Reason.INVALID_DATA,
        ),
        (
            {"amdsmi_get_gpu_total_ecc_count": {"uncorrectable_count": "N/A"}},
            "ecc_uncorrected_total",
            None,
            Reason.INVALID_DATA,
        ),
        # The total not served: the enabled blocks (UMC 0x1, GFX 0x4) summed; XGMI_WAFL's 0x80
        # is not enabled, so its count is not added.
        (
            {
                "amdsmi_get_gpu_total_ecc_count": FAILED,
                "amdsmi_get_gpu_ecc_enabled": 0x5,
                "amdsmi_get_gpu_ecc_count": {
                    "UMC": {"correctable_count": 3},
                    "GFX": {"correctable_count": 4},
                    "XGMI_WAFL": {"correctable_count": 100},
                },
            },
            "ecc_corrected_total",
            7,
            None,
        ),
        # A block failing otherwise than NOT_SUPPORTED: the sum is not made, the total's reason.
        (
            {
                "amdsmi_get_gpu_total_ecc_count": FAILED,
                "amdsmi_get_gpu_ecc_enabled": 0x1,
                "amdsmi_get_gpu_ecc_count": {"UMC": {"error": "x", "code": 10}},
            },
            "ecc_corrected_total",
            None,
            Reason.UNSUPPORTED,
        ),
        ({"amdsmi_get_gpu_bad_page_info": []}, "remapped_rows_uncorrectable", 0, None),
        (
            {"amdsmi_get_gpu_bad_page_info": [{"status": 0}] * 3},
            "remapped_rows_uncorrectable",
            3,
            None,
        ),
        ({"amdsmi_get_gpu_bad_page_info": [{"status": 1}] * 2}, "remapped_rows_pending", 1, None),
        ({"amdsmi_get_gpu_bad_page_info": [{"status": 2}]}, "remapped_rows_failed", 1, None),
        (
            {"amdsmi_get_gpu_bad_page_info": [{"status": 3}]},
            "remapped_rows_failed",
            None,
            Reason.INVALID_DATA,
        ),
        (
            {"amdsmi_get_gpu_bad_page_info": [{"status": True}]},
            "remapped_rows_pending",
            None,
            Reason.INVALID_DATA,
        ),
        (
            {"amdsmi_get_gpu_bad_page_info": {"error": "x", "code": 41}},
            "remapped_rows_failed",
            None,
            Reason.TRUNCATED,
        ),
        (
            {"amdsmi_get_gpu_bad_page_info": FAILED},
            "remapped_rows_pending",
            None,
            Reason.UNSUPPORTED,
        ),
        (
            {"amdsmi_get_violation_status": {"active_ppt_pwr": True, "active_socket_thrm": "N/A"}},
            "throttle_reasons",
            (("sw_power_cap", True),),
            None,
        ),
        (
            {
                "amdsmi_get_violation_status": {
                    "active_ppt_pwr": False,
                    "active_socket_thrm": False,
                    "active_hbm_thrm": "N/A",
                    "active_prochot_thrm": True,
                }
            },
            "throttle_reasons",
            (
                ("sw_power_cap", False),
                ("sw_thermal_slowdown", False),
                ("hw_thermal_slowdown", True),
            ),
            None,
        ),
        (
            {"amdsmi_get_violation_status": {"active_ppt_pwr": "N/A"}},
            "throttle_reasons",
            None,
            Reason.UNSUPPORTED,
        ),
        (
            {"amdsmi_get_violation_status": {"active_ppt_pwr": 1}},
            "throttle_reasons",
            None,
            Reason.INVALID_DATA,
        ),
        ({"amdsmi_get_violation_status": [True]}, "throttle_reasons", None, Reason.INVALID_DATA),
        ({"amdsmi_get_violation_status": FAILED}, "throttle_reasons", None, Reason.UNSUPPORTED),
        (
            {"amdsmi_get_violation_status": {"error": "x", "code": 10}},
            "throttle_reasons",
            None,
            Reason.PERMISSION,
        ),
        ({}, "ecc_corrected_aggregate", None, Reason.UNSUPPORTED),
        ({}, "remapped_rows_correctable", None, Reason.UNSUPPORTED),
    ],
)
def test_amd_ecc_bad_pages_and_throttle_one_answer_at_a_time(
    answers: dict[str, object], figure: str, value: object, reason: Reason | None
) -> None:
    """(R-X7) amdsmi's ECC counts, bad pages and violation flags, one answer at a time: the
    figure, the failure's reason, `invalid_data` for a sentinel or a value amdsmi.h does not
    define, and `unsupported` where no amdsmi call answers (aggregate ECC, correctable rows)."""
    got = health({**HEALTHY, **answers})
    assert got is not None
    assert (got.get(figure), got.reason(figure)) == (value, reason)


@pytest.mark.parametrize(
    ("answers", "reason"),
    [
        (
            {"amdsmi_get_gpu_bad_page_info": [{"status": 0}, {"status": 2}]},
            "retired_pages_unreservable",
        ),
        ({"amdsmi_get_gpu_bad_page_info": [{"status": 1}]}, None),  # pending: retired next window
        (
            {
                "amdsmi_get_gpu_total_ecc_count": {"uncorrectable_count": 1},
                "amdsmi_get_gpu_bad_page_info": [{"status": 2}],
            },
            "ecc_uncorrectable",  # the most severe first
        ),
        ({"amdsmi_get_gpu_total_ecc_count": {"uncorrectable_count": 0xFFFFFFFFFFFFFFFF}}, None),
    ],
)
def test_an_amd_board_that_could_not_retire_a_page_is_unhealthy(
    answers: dict[str, object], reason: str | None
) -> None:
    """(R-X7) A page the driver could not retire leaves bad memory in use: the board is
    unhealthy with `retired_pages_unreservable`, as Hygon's; a sentinel count is no error."""
    from vendors._amd_smi import _unhealthy

    assert _unhealthy({**HEALTHY, **answers}) == reason


# -- links and placement (R-X3) ------------------------------------------------------------------


def _topology(numa: list[object], pairs: list[tuple[object, object, object]]) -> dict[str, object]:
    return {
        "topology": {
            "readAt": 1.0,
            "devices": [
                {"socket": s, "amdsmi_topo_get_numa_node_number": n} for s, n in enumerate(numa)
            ],
            "pairs": [{"a": a, "b": b, "amdsmi_topo_get_link_type": link} for a, b, link in pairs],
        }
    }


@pytest.mark.parametrize(
    ("link", "wanted"),
    [
        ({"hops": 1, "type": 2}, ((1, "xgmi"),)),
        ({"hops": 2, "type": 1}, ((1, "pcie"),)),
        ({"hops": 1, "type": 0}, ()),  # INTERNAL / UNDEFINED
        ({"hops": 1, "type": 3}, ()),  # NOT_APPLICABLE
        ({"hops": 1, "type": 4}, ()),  # UNKNOWN
        ({"hops": 1, "type": True}, ()),
        ({"error": "AmdSmiLibraryException", "code": 2}, ()),
        ("x", ()),
    ],
)
def test_amdsmi_link_types_and_what_places_nothing(link: object, wanted: object) -> None:
    """(R-X3) xGMI and PCIe as amdsmi names them, on both sockets of the pair; any other type,
    a failed call or a damaged answer places the pair nowhere, never "pcie"."""
    from vendors._amd_smi import parse_topology

    placed = parse_topology(_topology([0, 1], [(0, 1, link)]))
    assert placed[0] == (wanted, 0)
    assert placed[1] == (tuple((0, kind) for _, kind in wanted), 1)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("numa", "wanted"),
    [(0, 0), (7, 7), (-1, None), (1 << 12, None), (True, None), ({"error": "x", "code": 2}, None)],
)
def test_amdsmi_numa_node_out_of_range_or_failed_is_absent(numa: object, wanted: object) -> None:
    """(R-X3) The NUMA node as amdsmi gives it; a failed call, a boolean or a number past any
    node count is absent, never node 0."""
    from vendors._amd_smi import parse_topology

    assert parse_topology(_topology([numa], []))[0] == ((), wanted)


@pytest.mark.parametrize(
    "payload",
    [
        {},
        {"topology": None},
        {"topology": {"devices": "x", "pairs": [None, {"a": 0, "b": 0}]}},
        _topology([0], [(0, 0, {"type": 2}), (0, 9, {"type": 2}), (None, 0, {"type": 2})]),
    ],
)
def test_a_missing_or_damaged_amd_topology_places_nothing_and_never_raises(payload: object) -> None:
    """(R-X3) No topology (a recording made before it was read), a pair of a socket with itself
    or with one the read did not list: nothing placed, and parse() does not raise."""
    from vendors._amd_smi import parse_topology

    placed = parse_topology(payload)  # type: ignore[arg-type]
    assert all(links == () for links, _ in placed.values())
    assert amd.parse({"sockets": [], **payload}).cards == ()  # type: ignore[dict-item]


# -- each XCP's own GFX busy from its board's GPU metrics table (issue 41) -------------------------

NA_XCC = ["N/A"] * 7


def table(*rows: list[object]) -> dict[str, object]:
    return {"average_gfx_activity": 55, "num_partition": len(rows), XCP_BUSY: list(rows)}


@pytest.mark.parametrize(
    ("answer", "xcp", "expected"),
    [
        (table([40, *NA_XCC], [10, 30, "N/A"]), 0, (40.0, None)),
        (table([40, *NA_XCC], [10, 30, "N/A"]), 1, (20.0, None)),  # the XCCs that answered
        (table([33, 34, 34]), 0, (33.67, None)),
        (table([0, *NA_XCC]), 0, (0.0, None)),  # idle: a measured 0
        (table(["N/A"] * 8), 0, (None, Reason.UNSUPPORTED)),  # no XCC: never the board's 55
        (table([0xFFFFFFFF, 0xFFFF, 20]), 0, (20.0, None)),  # type maxima are no figure
        (table([0xFFFFFFFF]), 0, (None, Reason.UNSUPPORTED)),
        (table([40]), 1, (None, Reason.UNSUPPORTED)),  # the table states no such XCP
        (table([40]), None, (None, Reason.INVALID_DATA)),  # the XCP's own index unknown
        (table([101]), 0, (None, Reason.INVALID_DATA)),  # never clamped
        (table([-1]), 0, (None, Reason.INVALID_DATA)),
        (table([True]), 0, (None, Reason.INVALID_DATA)),
        (table(["busy"]), 0, (None, Reason.INVALID_DATA)),
        (table([1] * 9), 0, (None, Reason.INVALID_DATA)),  # more XCCs than the header's 8
        (table(*[[1]] * 9), 0, (None, Reason.INVALID_DATA)),  # more XCPs than its 8
        (table("N/A"), 0, (None, Reason.INVALID_DATA)),  # type: ignore[arg-type]
        ({"average_gfx_activity": 55}, 0, (None, Reason.UNSUPPORTED)),  # no per-XCP stats
        ({"error": "AmdSmiLibraryException", "code": 2}, 0, (None, Reason.UNSUPPORTED)),
        ({"error": "AmdSmiLibraryException", "code": 10}, 0, (None, Reason.PERMISSION)),
        ({"error": "AmdSmiLibraryException", "code": 8}, 0, (None, Reason.TRANSIENT_DRIVER_ERROR)),
        ("N/A", 0, (None, Reason.INVALID_DATA)),
    ],
)
def test_an_xcps_gfx_busy_is_its_own_xccs_mean(
    answer: object, xcp: int | None, expected: tuple[float | None, Reason | None]
) -> None:
    assert xcp_busy(answer, xcp) == expected


XCC_FIGURE = st.one_of(
    st.integers(-(2**33), 2**65),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["N/A", "", True, None]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(XCC_FIGURE, max_size=10), max_size=10), st.integers(-2, 10))
def test_an_xcps_gfx_busy_is_a_percent_or_absent_with_its_reason(
    rows: list[list[object]], xcp: int
) -> None:
    value, reason = xcp_busy({XCP_BUSY: rows}, xcp)
    assert (value is None) != (reason is None)
    if value is not None:
        figures = [v for v in rows[xcp] if v != "N/A" and v not in (0xFFFF, 0xFFFFFFFF, 2**64 - 1)]
        assert 0.0 <= value <= 100.0
        assert min(figures) - 0.01 <= value <= max(figures) + 0.01  # type: ignore[type-var]


def test_an_xcp_without_its_boards_table_keeps_its_handles_figure() -> None:
    """A payload recorded before the table was read: the handle's gfx_activity, as before."""
    device = {
        "amdsmi_get_gpu_kfd_info": {"current_partition_id": 2},
        "amdsmi_get_gpu_activity": {"gfx_activity": 12},
        "amdsmi_get_gpu_device_uuid": "xcp-2",
    }
    assert xcp_cores(device, {"board": True}) is None
    assert partition_reading("card", device, {}, {"board": True}).cores_percent == 12.0
    board = {METRICS: table([5], [6], [7, 9])}
    assert xcp_cores(device, board) == (8.0, None)
    reading = partition_reading("card", device, {}, board)
    assert (reading.cores_percent, reading.cores_reason) == (8.0, None)
    lost = {**device, "amdsmi_get_gpu_kfd_info": {"error": "AmdSmiLibraryException", "code": 31}}
    assert xcp_cores(lost, board) == (None, Reason.TRANSIENT_DRIVER_ERROR)


def test_read_keeps_the_table_bounded() -> None:
    whole = {f"x{i}": i for i in range(200)} | {
        "average_gfx_activity": 55,
        "average_umc_activity": 20,
        "average_mm_activity": "N/A",
        "num_partition": 2,
        XCP_BUSY: [[1] * 8] * 8,
    }
    assert metrics_kept(whole) == {
        "average_gfx_activity": 55,
        "average_umc_activity": 20,
        "average_mm_activity": "N/A",
        "num_partition": 2,
        XCP_BUSY: [[1] * 8] * 2,
    }
    odd = {"num_partition": "N/A", XCP_BUSY: [[1] * 20] * 20}
    kept = metrics_kept(odd)[XCP_BUSY]
    assert len(kept) == 9 and all(len(row) == 9 for row in kept)  # one past: parse() refuses
    assert xcp_busy(metrics_kept(odd), 0) == (None, Reason.INVALID_DATA)
    failed = {"error": "AmdSmiLibraryException", "code": 2}
    assert metrics_kept(failed) == failed
