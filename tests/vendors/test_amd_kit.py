"""The fake ROCm install itself, and the ABI the amd backend depends on: every symbol the
amdsmi wheel binds is exported; the structs our fake declares (amdsmi_decl.h, written from the
public amdsmi.h) lay out as the wheel's ctypes definitions do; our ctypes rsmi_process_info_t
lays out as gcc lays out the declaration written from the public rocm_smi.h; and a hung call
costs its round a deadline."""

from __future__ import annotations

import ctypes
import sys
import threading
import time
import types
from pathlib import Path

import pytest

from devicemanager.model import BackendState
from tests.fakelib import Layout, ctypes_layout, layout
from tests.fakelib import amd as fake
from tests.vendors import kit
from vendors._amd_lib import _purge, import_amdsmi
from vendors._rocm_smi_lib import RsmiProcessInfo
from vendors.amd import AmdBackend

pytestmark = pytest.mark.timeout(60)


def wheel(rocm_root: Path):  # type: ignore[no-untyped-def]
    """The wheel, bound to the session's fake (the only library it binds in this process)."""
    return import_amdsmi(str(rocm_root / "lib" / "libamd_smi.so"))


def test_the_fake_exports_every_symbol_the_wheel_binds(
    rocm_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    symbols = fake.wheel_symbols()
    assert len(symbols) > 150  # 184 in amdsmi 7.0.2
    lib = ctypes.CDLL(str(rocm_root / "lib" / "libamd_smi.so"), mode=ctypes.RTLD_LOCAL)
    assert [s for s in symbols if not hasattr(lib, s)] == []
    # What the fake implements is a subset of what the wheel knows; every other symbol is a
    # generated stub answering NOT_SUPPORTED, which the wheel raises like any refusal.
    assert fake.implemented() <= set(symbols)
    assert "amdsmi_get_gpu_board_info" not in fake.implemented()
    doc = fake.scenario([fake.card(0)])
    monkeypatch.setenv(fake.SCENARIO_ENV, str(fake.write(tmp_path / "s.txt", doc)))
    backend = AmdBackend({"amd_smi": str(rocm_root)}, sysfs=tmp_path)
    backend.open()
    try:
        smi = wheel(rocm_root)
        (handle,) = smi.amdsmi_get_processor_handles()
        with pytest.raises(smi.AmdSmiLibraryException) as refused:
            smi.amdsmi_get_gpu_board_info(handle)
        assert refused.value.get_error_code() == fake.NOT_SUPPORTED
    finally:
        backend.close()


def _wheel_layout(struct: type, fields: list[str]) -> Layout:
    whole = ctypes_layout(struct)
    return Layout(whole.size, {f: whole.offsets[f] for f in fields})


AMDSMI_STRUCTS = {
    "amdsmi_proc_info_t": (
        "amdsmi_proc_info_t",
        ["name", "pid", "mem", "engine_usage", "memory_usage", "container_name", "cu_occupancy"],
    ),
    "amdsmi_asic_info_t": (
        "amdsmi_asic_info_t",
        [
            "market_name",
            "vendor_id",
            "vendor_name",
            "subvendor_id",
            "device_id",
            "rev_id",
            "asic_serial",
            "oam_id",
            "num_of_compute_units",
            "target_graphics_version",
            "subsystem_id",
        ],
    ),
    "amdsmi_kfd_info_t": ("amdsmi_kfd_info_t", ["kfd_id", "node_id", "current_partition_id"]),
    "amdsmi_enumeration_info_t": (
        "amdsmi_enumeration_info_t",
        ["drm_render", "drm_card", "hsa_id", "hip_id", "hip_uuid"],
    ),
    "amdsmi_vram_usage_t": ("amdsmi_vram_usage_t", ["vram_total", "vram_used"]),
    "amdsmi_engine_usage_t": (
        "amdsmi_engine_usage_t",
        ["gfx_activity", "umc_activity", "mm_activity"],
    ),
    "amdsmi_power_info_t": (
        "amdsmi_power_info_t",
        [
            "socket_power",
            "current_socket_power",
            "average_socket_power",
            "gfx_voltage",
            "soc_voltage",
            "mem_voltage",
            "power_limit",
        ],
    ),
    "amdsmi_driver_info_t": (
        "amdsmi_driver_info_t",
        ["driver_version", "driver_date", "driver_name"],
    ),
    "amdsmi_error_count_t": (
        "amdsmi_error_count_t",
        ["correctable_count", "uncorrectable_count", "deferred_count"],
    ),
    "amdsmi_version_t": ("amdsmi_version_t", ["major", "minor", "release", "build"]),
    "amdsmi_clk_info_t": (
        "amdsmi_clk_info_t",
        ["clk", "min_clk", "max_clk", "clk_locked", "clk_deep_sleep", "reserved"],
    ),
    "amdsmi_retired_page_record_t": (
        "amdsmi_retired_page_record_t",
        ["page_address", "page_size", "status"],
    ),
    "amdsmi_violation_status_t": (
        "amdsmi_violation_status_t",
        [
            "reference_timestamp",
            "acc_counter",
            "per_prochot_thrm",
            "per_ppt_pwr",
            "per_socket_thrm",
            "per_hbm_thrm",
            "active_prochot_thrm",
            "active_ppt_pwr",
            "active_socket_thrm",
            "active_vr_thrm",
            "active_hbm_thrm",
            "active_gfx_clk_below_host_limit",
            "acc_gfx_clk_below_host_limit_pwr",
            "active_low_utilization",
            "reserved3",
        ],
    ),
    # The GPU metrics table (issue 41): the activity fields the backend reads, their neighbours,
    # the per-XCP stats and the last field, so every padding the wheel spells out is checked.
    "amdsmi_gpu_metrics_t": (
        "amdsmi_gpu_metrics_t",
        [
            "common_header",
            "average_gfx_activity",
            "average_umc_activity",
            "average_mm_activity",
            "energy_accumulator",
            "throttle_status",
            "gfx_activity_acc",
            "firmware_timestamp",
            "indep_throttle_status",
            "gfxclk_lock_status",
            "pcie_bandwidth_acc",
            "jpeg_activity",
            "accumulation_counter",
            "num_partition",
            "xcp_stats",
            "pcie_lc_perf_other_end_recovery",
            "vram_max_bandwidth",
            "xgmi_link_status",
        ],
    ),
    "amdsmi_gpu_xcp_metrics_t": (
        "amdsmi_gpu_xcp_metrics_t",
        [
            "gfx_busy_inst",
            "jpeg_busy",
            "vcn_busy",
            "gfx_busy_acc",
            "gfx_below_host_limit_acc",
            "gfx_below_host_limit_total_acc",
        ],
    ),
}


def test_our_amdsmi_declarations_lay_out_as_the_wheel_binds_them(
    rocm_root: Path, tmp_path: Path
) -> None:
    wrapper = wheel(rocm_root).amdsmi_wrapper
    got = layout(
        '#include "amdsmi_decl.h"',
        {name: fields for name, (_, fields) in AMDSMI_STRUCTS.items()},
        includes=[fake.HERE],
        directory=tmp_path,
    )
    for name, (attribute, fields) in AMDSMI_STRUCTS.items():
        assert _wheel_layout(getattr(wrapper, attribute), fields) == got[name], name
    assert got["amdsmi_proc_info_t"].size == 704  # natural alignment: 4 bytes after `pid`
    assert got["amdsmi_proc_info_t"].offsets["mem"] == 264
    assert ctypes.sizeof(wrapper.amdsmi_bdf_t) == 8
    # (R-X7) The bad-page record pads its 4-byte status to 24 bytes; the ROCm 7.0 violation
    # status puts its six flags at 120 and its per-XCP arrays from 128 (two bytes of padding).
    assert got["amdsmi_retired_page_record_t"].size == 24
    assert got["amdsmi_violation_status_t"].offsets["active_prochot_thrm"] == 120
    assert got["amdsmi_violation_status_t"].offsets["acc_gfx_clk_below_host_limit_pwr"] == 128
    assert got["amdsmi_violation_status_t"].size == 6016


def test_our_rocm_smi_process_struct_is_laid_out_as_rocm_smi_h_says(tmp_path: Path) -> None:
    fields = ["process_id", "pasid", "vram_usage", "sdma_usage", "cu_occupancy"]
    got = layout(
        '#include "rocm_smi_decl.h"',
        {"rsmi_process_info_t": fields},
        includes=[fake.HERE],
        directory=tmp_path,
    )
    assert ctypes_layout(RsmiProcessInfo) == got["rsmi_process_info_t"]
    assert got["rsmi_process_info_t"].size == 32


def test_a_hung_call_costs_its_round_a_deadline_and_then_is_stuck(
    rocm_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = fake.scenario([fake.card(0)], hang={"amdsmi_get_gpu_activity": 2})
    monkeypatch.setenv(fake.SCENARIO_ENV, str(fake.write(tmp_path / "s.txt", doc)))
    monitor = kit.hung(AmdBackend({"amd_smi": str(rocm_root)}, sysfs=tmp_path))
    first = monitor.run_round().snapshot
    second = monitor.run_round().snapshot
    assert [b.state for b in first.backends] == [BackendState.TIMEOUT]
    assert [b.state for b in second.backends] == [BackendState.STUCK]
    assert first.groups == () and second.groups == ()  # nothing carried, nothing invented
    # Let the hung call return before the next test reloads the fake's scenario under it.
    time.sleep(2.5)
    monitor.stop()


def test_a_half_imported_wheel_is_forgotten_while_another_thread_imports() -> None:
    """The wheel is imported, and forgotten when that fails (no library: `unavailable`), on the
    backend's thread, while the main thread may be importing: the server starts beside the
    first round. Forgetting it must not iterate sys.modules while it changes, or the backend
    reads `error: dictionary changed size during iteration` instead of `unavailable` (seen
    once in some 40 starts of six manufacturers without their libraries)."""
    stop = threading.Event()
    churned = [f"_tests_churn_{i}" for i in range(50)]

    def churn() -> None:  # another thread importing: names come and go in sys.modules
        i = 0
        while not stop.is_set():
            sys.modules[churned[i % 50]] = types.ModuleType(churned[i % 50])
            sys.modules.pop(churned[(i + 25) % 50], None)
            i += 1

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # hand the lock over as often as the interpreter will
    other = threading.Thread(target=churn)
    other.start()
    failures = 0
    try:
        for _ in range(3000):  # iterating sys.modules itself failed 54 times in 3,000 here
            sys.modules["amdsmi.half_imported"] = types.ModuleType("amdsmi.half_imported")
            try:
                _purge()
            except RuntimeError:
                failures += 1
            else:
                assert "amdsmi.half_imported" not in sys.modules
    finally:
        stop.set()
        other.join()
        sys.setswitchinterval(interval)
        for name in [*churned, "amdsmi.half_imported"]:
            sys.modules.pop(name, None)
    assert failures == 0
