"""`ppu-smi -q` (T-Head PPU) into crosscheck figures.

ppu-smi is built on HGML as nvidia-smi is on NVML, and `-q` prints nvidia-smi's kind of
indented `Key : Value` text, one block per PPU headed `PPU <bus id>`. The shape read here is
the one T-Head's PPU-SMI manual prints (SAIL SDK, sections 2 and 3.1: `ppu-smi -q` and each of
its `-d MEMORY`, `UTILIZATION`, `ECC`, `TEMPERATURE`, `POWER`, `CLOCK`, `PIDS`,
`ROW_REMAPPER` answers, quoted whole in a public transcription of the manual read with
`find_string` "| PPU  Name", 2026-12-04):

    PPU 00000000:3E:00.0
        Memory Usage
            Total                               : 11264 MiB
            Used                                : 248 MiB
        Utilization
            Ppu                                 : 38 %
        ECC Errors
            Volatile
                SRAM Correctable                : 0
                ...
        Temperature
            PPU Current Temp                    : 42 C
        Power Readings
            Power Draw                          : 51.99 W
        Clocks
            CU                                  : 200 MHz
            Memory                              : 1800 MHz
        Processes
            Process ID                          : 85637
                Used PPU Memory                 : 413 MiB
        Remapped Rows
            Correctable Error                   : 0
            Pending                             : No

The manual names the clocks-throttle reasons (`Idle`, `SW Power Cap`, …) and the PCI link's
`Replays Since Reset` without printing their values; they are read as nvidia-smi prints them
(`Active`/`Not Active`, a count) where present. `N/A` is not stated, never zero. A PPU is named
by its UUID, its bus id and its place in the answer (HGML's index, as nvidia-smi's order is
NVML's).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from devicemanager.crosscheck.model import ToolCard, ToolProcess, ToolReading, Value

TOOL = "ppu-smi"
QUERY = "ppu-smi-q.txt"
COMMANDS = ((QUERY, ("ppu-smi", "-q")),)

HEADER = re.compile(r"^PPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")
REASONS = {
    "Idle": "gpu_idle",
    "Applications Clocks Setting": "applications_clocks_setting",
    "SW Power Cap": "sw_power_cap",
    "HW Slowdown": "hw_slowdown",
    "HW Thermal Slowdown": "hw_thermal_slowdown",
    "HW Power Brake Slowdown": "hw_power_brake_slowdown",
    "Sync Boost": "sync_boost",
    "SW Thermal Slowdown": "sw_thermal_slowdown",
    "Display Clock Setting": "display_clock_setting",
}

Entry = tuple[tuple[str, ...], str]  # (the path of sections and key, its value)


def entries(block: list[str]) -> list[Entry]:
    """Each `Key : Value` line with the path of the lines it is indented under (a key with a
    value may have lines under it too: `Process ID : 85637`, then its `Used PPU Memory`)."""
    out: list[Entry] = []
    stack: list[tuple[int, str]] = []
    for line in block:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        key, sep, value = line.strip().partition(":")
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = (*(name for _, name in stack), key.strip())
        if sep:
            out.append((path, value.strip()))
        stack.append((indent, key.strip()))
    return out


def number(text: str | None) -> float | None:
    head = (text or "").split(" ")[0]
    try:
        return float(head)
    except ValueError:
        return None  # N/A


def _find(found: list[Entry], *path: str) -> str | None:
    """The first value whose path begins with `path[:-1]` and ends with `path[-1]`."""
    for where, value in found:
        if where[: len(path) - 1] == path[:-1] and where[-1] == path[-1]:
            return value
    return None


def _card(index: int, bus: str, found: list[Entry]) -> tuple[ToolCard, list[ToolProcess]]:
    figures: dict[str, Value] = {}

    def put(figure: str, value: Value | None) -> None:
        if value is not None:
            figures[figure] = value

    def count(*path: str) -> int | None:
        value = number(_find(found, *path))
        return None if value is None else int(value)

    put("memory.total_mib", count("Memory Usage", "Total"))
    put("memory.used_mib", count("Memory Usage", "Used"))
    put("utilization_percent", number(_find(found, "Utilization", "Ppu")))
    put("temperature", number(_find(found, "Temperature", "PPU Current Temp")))
    put("power_watts", number(_find(found, "Power Readings", "Power Draw")))
    put("clock.sm_mhz", number(_find(found, "Clocks", "CU")))
    put("clock.memory_mhz", number(_find(found, "Clocks", "Memory")))
    for counter in ("Volatile", "Aggregate"):
        for kind, word in (("corrected", "Correctable"), ("uncorrected", "Uncorrectable")):
            parts = [count("ECC Errors", counter, f"{m} {word}") for m in ("SRAM", "DRAM")]
            if all(p is not None for p in parts):
                put(f"ecc.{kind}.{counter.lower()}", sum(p for p in parts if p is not None))
    put("remapped_rows.correctable", count("Remapped Rows", "Correctable Error"))
    put("remapped_rows.uncorrectable", count("Remapped Rows", "Uncorrectable Error"))
    for figure, key in (("pending", "Pending"), ("failed", "Remapping Failure Occurred")):
        flag = {"Yes": True, "No": False}.get(_find(found, "Remapped Rows", key) or "")
        put(f"remapped_rows.{figure}", flag)
    put("pcie.replays", count("PCI", "Replays Since Reset"))
    for where, value in found:
        section = where[0] in ("Clocks Throttle Reasons", "Clocks Event Reasons")
        if section and where[-1] in REASONS and value in ("Active", "Not Active"):
            figures[f"throttle.{REASONS[where[-1]]}"] = value == "Active"
    uuid = _find(found, "PPU UUID")
    keys = tuple(k for k in (uuid, bus, f"index:{index}") if k and k != "N/A")
    processes: list[ToolProcess] = []
    pid: int | None = None
    for where, value in found:
        if where == ("Processes", "Process ID"):
            pid = None if number(value) is None else int(number(value) or 0)
        elif where == ("Processes", "Process ID", "Used PPU Memory") and pid is not None:
            memory = number(value)
            mib = None if memory is None else int(memory)
            processes.append(ToolProcess(keys[0], pid, mib, "ppu-smi -q"))
    return ToolCard(keys=keys, figures=figures), processes


def parse(answers: Mapping[str, str]) -> ToolReading:
    blocks: list[tuple[str, list[str]]] = []
    for line in answers[QUERY].splitlines():
        if header := HEADER.match(line.strip()):
            blocks.append((header.group(1), []))
        elif blocks:
            blocks[-1][1].append(line)
    cards, processes = [], []
    for index, (bus, block) in enumerate(blocks):
        card, rows = _card(index, bus, entries(block))
        cards.append(card)
        processes += rows
    return ToolReading(TOOL, tuple(cards), tuple(processes))
