"""`mx-smi` (MetaX) into crosscheck figures.

mx-smi prints nvidia-smi's kind of table, two rows per GPU, then a process table. The shape
read here is mx-smi 2.1.6 and 2.2.4's, as quoted in PaddleNLP's MetaX README and a MetaX
document-AI README (read with `find_string` "mx-smi  version", 2026-12-04):

    | GPU         NAME                   | Bus-id              | GPU-Util             |
    | Temp        Pwr:Usage/Cap          | Memory-Usage        | GPU-State            |
    |====================================+=====================+======================|
    | 0           MetaX C500             | 0000:01:00.0        | 0%                   |
    | 45C         48W / 350W             | 858/65536 MiB       | Available            |
    ...
    | Process:                                                                        |
    |  GPU                    PID         Process Name                 GPU Memory     |
    |                                                                  Usage(MiB)     |

(2.1.6 prints `Temp Power` and `44W` alone.) Neither quote lists a process; a process row is
read as its header names the columns (GPU, PID, name, MiB), and a row that does not read so
is left out, never guessed into a number.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from devicemanager.crosscheck.model import ToolCard, ToolProcess, ToolReading, Value

TOOL = "mx-smi"
TABLE = "mx-smi.txt"
COMMANDS = ((TABLE, ("mx-smi",)),)

BUS = re.compile(r"^[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")
FIRST = re.compile(r"^(\d+)\s+\S")
TEMP = re.compile(r"^(\d+(?:\.\d+)?)C\s+(\d+(?:\.\d+)?)W")
MEMORY = re.compile(r"^(\d+)\s*/\s*(\d+)\s*MiB$")
UTIL = re.compile(r"^(\d+(?:\.\d+)?)%$")
PROCESS = re.compile(r"^(\d+)\s+(\d+)\s+.*?\s(\d+)\s*(?:MiB)?$")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def parse(answers: Mapping[str, str]) -> ToolReading:
    cards: list[ToolCard] = []
    processes: list[ToolProcess] = []
    first: list[str] | None = None
    in_processes = False
    for line in answers[TABLE].splitlines():
        if not line.startswith("|"):
            continue
        cells = _cells(line)
        if cells[0].startswith("Process:"):
            in_processes = True
            continue
        if in_processes:
            if len(cells) == 1 and (row := PROCESS.match(cells[0])):
                gpu, pid, mib = row.groups()
                processes.append(ToolProcess(f"index:{gpu}", int(pid), int(mib), "mx-smi"))
            continue
        if len(cells) == 3 and BUS.match(cells[1]) and FIRST.match(cells[0]):
            first = cells
            continue
        if first is not None and len(cells) == 3:
            figures: dict[str, Value] = {}
            if util := UTIL.match(first[2]):
                figures["utilization_percent"] = float(util.group(1))
            if temp := TEMP.match(cells[0]):
                figures["temperature"] = float(temp.group(1))
                figures["power_watts"] = float(temp.group(2))
            if memory := MEMORY.match(cells[1]):
                figures["memory.used_mib"] = int(memory.group(1))
                figures["memory.total_mib"] = int(memory.group(2))
            index = first[0].split()[0]
            cards.append(ToolCard(keys=(first[1], f"index:{index}"), figures=figures))
            first = None
    return ToolReading(TOOL, tuple(cards), tuple(processes))
