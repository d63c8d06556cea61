"""The node recorded on a real H200 (fixtures/nodes/h200-recorded), held to nvidia-smi.

The payload is what `devicemanager record nvidia` wrote on the card; `nvidia-smi -q -x` and
`nvidia-smi --query-compute-apps` answered in the same minute (nvidia-smi/). A replayed round
must publish what the vendor's own tool says: memory per process and per card to the MiB, the
ECC counts, remapped rows, PCIe replays and the active clocks-event reasons to the count, the
memory clock to the MHz. Power, the SM clock and the temperature move under load between the two
calls (the card sat at its power cap), so they are held within a stated tolerance, and the
replay's own values are pinned exactly by expected.json (tests/test_expected.py).
"""

from __future__ import annotations

import csv
import json
import xml.etree.ElementTree as ET
from functools import cache
from pathlib import Path
from typing import Any

from devicemanager.node.cgroup import parse as parse_cgroup
from tests.conftest import NODES, scenario_monitor

SCENARIO = "h200-recorded"
ROOT = NODES / SCENARIO
TOOL = ROOT / "nvidia-smi"

# Between the tool's answer and the payload's, one card at its power cap (documented in the
# scenario's README row and in the recording's own README).
POWER_TOLERANCE = 0.02  # of nvidia-smi's average power draw
SM_CLOCK_TOLERANCE = 0.05  # of nvidia-smi's SM clock; the power cap moves it by tens of MHz
TEMPERATURE_TOLERANCE = 1.0  # degrees Celsius

# nvidia-smi's clocks-event element -> the agent's reason label (NVML's names).
THROTTLE = {
    "clocks_event_reason_gpu_idle": "gpu_idle",
    "clocks_event_reason_applications_clocks_setting": "applications_clocks_setting",
    "clocks_event_reason_sw_power_cap": "sw_power_cap",
    "clocks_event_reason_hw_slowdown": "hw_slowdown",
    "clocks_event_reason_hw_thermal_slowdown": "hw_thermal_slowdown",
    "clocks_event_reason_hw_power_brake_slowdown": "hw_power_brake_slowdown",
    "clocks_event_reason_sync_boost": "sync_boost",
    "clocks_event_reason_sw_thermal_slowdown": "sw_thermal_slowdown",
    "clocks_event_reason_display_clocks_setting": "display_clock_setting",
}


def _number(text: str | None) -> float:
    """`17891 MiB`, `689.64 W`, `61 C`, `0` as the number before the unit."""
    assert text is not None
    return float(text.split()[0])


@cache
def _gpu() -> ET.Element:
    gpus = ET.parse(TOOL / "nvidia-smi-q.xml").getroot().findall("gpu")
    assert len(gpus) == 1
    return gpus[0]


def _tool(path: str) -> str:
    found = _gpu().findtext(path)
    assert found is not None, path
    return found


@cache
def _round() -> dict[str, Any]:
    monitor = scenario_monitor(SCENARIO)
    published = monitor.run_round()
    monitor.stop()
    document: dict[str, Any] = json.loads(published.snapshot_json)
    return document


def _card() -> dict[str, Any]:
    (group,) = _round()["groups"]
    (card,) = group["accelerators"]
    assert card["id"] == _tool("uuid")
    assert group["driverVersion"] == ET.parse(TOOL / "nvidia-smi-q.xml").getroot().findtext(
        "driver_version"
    )
    return card


def test_card_memory_equals_nvidia_smi_to_the_mib() -> None:
    card = _card()
    assert card["memory"] == _number(_tool("fb_memory_usage/total")) == 143771
    assert card["memoryUsage"] == _number(_tool("fb_memory_usage/used")) == 17891


def test_each_pods_memory_equals_nvidia_smi_compute_apps_to_the_mib() -> None:
    """Every compute process nvidia-smi lists, placed in its pod through its cgroup file, holds
    what the pod's usage says, in both of nvidia-smi's answers (the CSV and the XML)."""
    with (TOOL / "nvidia-smi-compute-apps.csv").open() as f:
        rows = [{k.strip(): v.strip() for k, v in row.items()} for row in csv.DictReader(f)]
    by_pid = {int(r["pid"]): _number(r["used_gpu_memory [MiB]"]) for r in rows}
    xml = {
        int(_number(p.findtext("pid"))): _number(p.findtext("used_memory"))
        for p in _gpu().iterfind("processes/process_info")
    }
    assert by_pid == xml == {498: 13034, 500: 4842}
    usages = {u["podUID"]: u["memoryUsedMiB"] for u in _round()["slices"]["usages"]}
    for pid, mib in by_pid.items():
        uid = parse_cgroup((ROOT / "proc" / str(pid) / "cgroup").read_text()).pod_uid
        assert uid is not None, pid
        assert usages[uid] == mib, (pid, uid)


def test_ecc_remapped_rows_and_replays_equal_nvidia_smi_to_the_count() -> None:
    health = _card()["health"]
    ecc = health["eccErrors"]
    for counter in ("volatile", "aggregate"):
        corrected = sum(
            _number(_tool(f"ecc_errors/{counter}/{kind}"))
            for kind in ("sram_correctable", "dram_correctable")
        )
        uncorrected = sum(
            _number(_tool(f"ecc_errors/{counter}/{kind}"))
            for kind in ("sram_uncorrectable_parity", "sram_uncorrectable_secded")
        ) + _number(_tool(f"ecc_errors/{counter}/dram_uncorrectable"))
        assert ecc["corrected"][counter] == corrected, counter
        assert ecc["uncorrected"][counter] == uncorrected, counter
    assert ecc["corrected"]["aggregate"] == 1213376  # not a zero the test could pass with
    rows = health["remappedRows"]
    assert rows["correctable"] == _number(_tool("remapped_rows/remapped_row_corr")) == 2
    assert rows["uncorrectable"] == _number(_tool("remapped_rows/remapped_row_unc"))
    assert rows["pending"] == (_tool("remapped_rows/remapped_row_pending") == "Yes")
    assert rows["failed"] == (_tool("remapped_rows/remapped_row_failure") == "Yes")
    assert health["pcieReplays"] == _number(_tool("pci/replay_counter"))


def test_clocks_event_reasons_equal_nvidia_smi() -> None:
    active = _card()["health"]["clockThrottleReasons"]
    told = {
        label: _tool(f"clocks_event_reasons/{element}") == "Active"
        for element, label in THROTTLE.items()
    }
    assert {label: active[label] for label in told} == told
    # CUDA 13's BoardLimit and Reliability, which this nvidia-smi does not list: the recorded
    # mask (0x4) has neither bit (issue 43).
    assert {k: v for k, v in active.items() if k not in told} == {
        "board_limit": False,
        "reliability": False,
    }
    assert [r for r, on in active.items() if on] == ["sw_power_cap"]


def test_clocks_power_and_temperature_agree_with_nvidia_smi_within_the_window() -> None:
    card = _card()
    clocks = card["health"]["clocksHz"]
    assert clocks["memory"] == _number(_tool("clocks/mem_clock")) * 1e6
    sm = _number(_tool("clocks/sm_clock")) * 1e6
    assert abs(clocks["sm"] - sm) <= SM_CLOCK_TOLERANCE * sm, (clocks["sm"], sm)
    power = _number(_tool("gpu_power_readings/average_power_draw"))
    assert abs(card["powerUsage"] - power) <= POWER_TOLERANCE * power, (card["powerUsage"], power)
    temperature = _number(_tool("temperature/gpu_temp"))
    assert abs(card["temperature"] - temperature) <= TEMPERATURE_TOLERANCE


def test_no_numa_node_where_the_card_has_none() -> None:
    """nvidia-smi topo -m said GPU NUMA ID N/A on this x86 VM (sysfs numa_node -1): absent."""
    assert "numaNode" not in _card()


def test_the_scenario_is_the_shared_recording_unchanged() -> None:
    """The payload is the card's answer as recorded (only meta.note added to name its source),
    and the scenario says it was recorded."""
    doc = json.loads((ROOT / "vendors" / "nvidia.json").read_text())
    assert doc["meta"]["kind"] == "recorded" and doc["meta"]["driver"] == "580.159.04"
    assert json.loads((ROOT / "scenario.json").read_text())["provenance"] == "recorded"
    shared = Path(__file__).resolve().parents[2] / "shared/recorded/nvidia-h200-2026-12-04"
    if (shared / "payload.json").exists():  # beside the checkout where the recording lives
        assert json.loads((shared / "payload.json").read_text())["payload"] == doc["payload"]
