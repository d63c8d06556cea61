"""`nvidia-smi -q -x` and `nvidia-smi --query-compute-apps` into crosscheck figures.

The XML is NVIDIA's own (nvsmi_device_v12.dtd; the shape read here is the one a real H200 on
driver 580.159.04 printed, fixtures/nodes/h200-recorded/nvidia-smi/). Older drivers name a few
elements differently (`power_readings/power_draw`, `clocks_throttle_reasons`), read as well.
Every value is text with a unit (`17891 MiB`, `689.64 W`, `61 C`) or `N/A`; `N/A` and
`[Not Supported]` are not stated, never zero.
"""

from __future__ import annotations

import csv
import io
import xml.etree.ElementTree as ET
from collections.abc import Mapping

from devicemanager.crosscheck.model import ToolCard, ToolProcess, ToolReading, Value

TOOL = "nvidia-smi"
XML = "nvidia-smi-q.xml"
CSV = "nvidia-smi-compute-apps.csv"
COMMANDS = (
    (XML, ("nvidia-smi", "-q", "-x")),
    (CSV, ("nvidia-smi", "--query-compute-apps=gpu_uuid,pid,used_memory", "--format=csv")),
)

# The XML's clocks-event element (after its prefix) -> NVML's reason name, where they differ.
REASON_NAMES = {"display_clocks_setting": "display_clock_setting"}
REASON_PREFIXES = ("clocks_event_reason_", "clocks_throttle_reason_")


def number(text: str | None) -> float | None:
    """`17891 MiB`, `689.64 W`, `0`: the number before the unit; `N/A` and the like: None."""
    if text is None:
        return None
    head = text.strip().split(" ")[0] if text.strip() else ""
    try:
        return float(head)
    except ValueError:
        return None


def _count(gpu: ET.Element, path: str) -> int | None:
    found = number(gpu.findtext(path))
    return None if found is None else int(found)


def _sum(gpu: ET.Element, paths: tuple[str, ...]) -> int | None:
    """A total only when every part is stated."""
    parts = [_count(gpu, p) for p in paths]
    return None if any(p is None for p in parts) else sum(p for p in parts if p is not None)


def _ecc(gpu: ET.Element, out: dict[str, Value]) -> None:
    for counter in ("volatile", "aggregate"):
        base = f"ecc_errors/{counter}"
        if gpu.find(f"{base}/dram_correctable") is not None:  # Ampere and later
            corrected = _sum(gpu, (f"{base}/sram_correctable", f"{base}/dram_correctable"))
            uncorrected = _sum(
                gpu,
                (
                    f"{base}/sram_uncorrectable_parity",
                    f"{base}/sram_uncorrectable_secded",
                    f"{base}/dram_uncorrectable",
                ),
            )
        else:  # before Ampere: single and double bit, each with its total
            corrected = _count(gpu, f"{base}/single_bit/total")
            uncorrected = _count(gpu, f"{base}/double_bit/total")
        for kind, value in (("corrected", corrected), ("uncorrected", uncorrected)):
            if value is not None:
                out[f"ecc.{kind}.{counter}"] = value


def _yes(text: str | None) -> bool | None:
    return {"Yes": True, "No": False}.get((text or "").strip())


def _card(gpu: ET.Element) -> ToolCard:
    figures: dict[str, Value] = {}

    def put(figure: str, value: Value | None) -> None:
        if value is not None:
            figures[figure] = value

    put("memory.total_mib", _count(gpu, "fb_memory_usage/total"))
    put("memory.used_mib", _count(gpu, "fb_memory_usage/used"))
    put("utilization_percent", number(gpu.findtext("utilization/gpu_util")))
    put("temperature", number(gpu.findtext("temperature/gpu_temp")))
    for path in (
        "gpu_power_readings/average_power_draw",  # what NVML's power usage is on Hopper
        "power_readings/power_draw",
        "gpu_power_readings/instant_power_draw",
    ):
        if (watts := number(gpu.findtext(path))) is not None:
            put("power_watts", watts)
            break
    put("clock.sm_mhz", number(gpu.findtext("clocks/sm_clock")))
    put("clock.graphics_mhz", number(gpu.findtext("clocks/graphics_clock")))
    put("clock.memory_mhz", number(gpu.findtext("clocks/mem_clock")))
    _ecc(gpu, figures)
    put("remapped_rows.correctable", _count(gpu, "remapped_rows/remapped_row_corr"))
    put("remapped_rows.uncorrectable", _count(gpu, "remapped_rows/remapped_row_unc"))
    put("remapped_rows.pending", _yes(gpu.findtext("remapped_rows/remapped_row_pending")))
    put("remapped_rows.failed", _yes(gpu.findtext("remapped_rows/remapped_row_failure")))
    put("pcie.replays", _count(gpu, "pci/replay_counter"))
    for parent in ("clocks_event_reasons", "clocks_throttle_reasons"):
        for element in gpu.findall(f"{parent}/*"):
            for prefix in REASON_PREFIXES:
                if element.tag.startswith(prefix):
                    name = element.tag.removeprefix(prefix)
                    state = (element.text or "").strip()
                    if state in ("Active", "Not Active"):
                        figures[f"throttle.{REASON_NAMES.get(name, name)}"] = state == "Active"
    keys = tuple(k for k in (gpu.findtext("uuid"), gpu.findtext("pci/pci_bus_id")) if k)
    return ToolCard(keys=keys, figures=figures)


def _xml_processes(gpu: ET.Element, uuid: str) -> list[ToolProcess]:
    out = []
    for row in gpu.iterfind("processes/process_info"):
        pid = number(row.findtext("pid"))
        if pid is None:
            continue
        memory = number(row.findtext("used_memory"))
        out.append(
            ToolProcess(uuid, int(pid), None if memory is None else int(memory), "nvidia-smi -q -x")
        )
    return out


def _csv_processes(text: str, on_one_card: Mapping[int, str]) -> list[ToolProcess]:
    """The CSV names the card by gpu_uuid when asked for it; a CSV without that column (as
    the recorded one) is placed by the XML, where the PID is on one card only."""
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        return []
    header = [h.strip() for h in rows[0]]
    out = []
    for row in rows[1:]:
        cells = dict(zip(header, (c.strip() for c in row), strict=False))
        pid = number(cells.get("pid"))
        if pid is None:
            continue
        memory = number(cells.get("used_gpu_memory [MiB]", cells.get("used_memory [MiB]")))
        card = cells.get("gpu_uuid") or on_one_card.get(int(pid), "a card nvidia-smi did not name")
        source = "nvidia-smi --query-compute-apps"
        out.append(ToolProcess(card, int(pid), None if memory is None else int(memory), source))
    return out


def parse(answers: Mapping[str, str]) -> ToolReading:
    root = ET.fromstring(answers[XML])
    cards, processes = [], []
    for gpu in root.findall("gpu"):
        card = _card(gpu)
        cards.append(card)
        if card.keys:
            processes += _xml_processes(gpu, card.keys[0])
    if CSV in answers:
        pids: dict[int, set[str]] = {}
        for p in processes:
            pids.setdefault(p.pid, set()).add(p.card)
        on_one_card = {pid: next(iter(c)) for pid, c in pids.items() if len(c) == 1}
        processes += _csv_processes(answers[CSV], on_one_card)
    return ToolReading(TOOL, tuple(cards), tuple(processes))
