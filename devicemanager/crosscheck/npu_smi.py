"""`npu-smi info` (Huawei Ascend) into crosscheck figures.

npu-smi prints a table, not a format for machines: two rows per chip, then a process table.
The shape read here is npu-smi's as printed by drivers 23.0 to 25.3 on 910B and 310P cards
(quoted in vllm-ascend issues and Ascend model-zoo READMEs, and printed by the `printf`s of a
published npu-smi source, read with `find_string` "Hugepages-Usage(page)" and
"| Process memory(MB)", 2026-12-04):

    | NPU   Name        | Health   | Power(W)    Temp(C)           Hugepages-Usage(page)|
    | Chip              | Bus-Id   | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
    +===================+==========+====================================================+
    | 0     910B        | OK       | 70.0        34                0    / 0             |
    | 0                 | 0000:C1:00.0  | 0      1197 / 13553      1365 / 32768         |
    ...
    | NPU     Chip      | Process id    | Process name        | Process memory(MB)      |
    | 5       0         | 904545        | python3             | 101                     |

(columns narrowed here to fit; the cells are what npu-smi prints).

A card is (NPU, Chip): DCMI's card and device ids. Its memory is the HBM where the table has an
HBM column (910), else Memory-Usage (310P's DDR); npu-smi's "MB" is DCMI's, MiB.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from devicemanager.crosscheck.model import ToolCard, ToolProcess, ToolReading, Value

TOOL = "npu-smi"
INFO = "npu-smi-info.txt"
COMMANDS = ((INFO, ("npu-smi", "info")),)

BUS = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")
PAIR = re.compile(r"(\d+)\s*/\s*(\d+)")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None  # "NA", "-"


def _card(first: list[str], second: list[str], hbm: bool) -> ToolCard:
    npu = first[0].split()[0]
    chip = second[0].split()[0]
    figures: dict[str, Value] = {}
    power_temp = first[2].split()
    if power_temp and (watts := _number(power_temp[0])) is not None:
        figures["power_watts"] = watts
    if len(power_temp) > 1 and (celsius := _number(power_temp[1])) is not None:
        figures["temperature"] = celsius
    usage = second[2].split()
    if usage and (aicore := _number(usage[0])) is not None:
        figures["utilization_percent"] = aicore
    pairs = PAIR.findall(second[2])
    memory = pairs[1] if hbm and len(pairs) > 1 else (pairs[0] if pairs else None)
    if memory is not None:
        figures["memory.used_mib"] = int(memory[0])
        figures["memory.total_mib"] = int(memory[1])
    return ToolCard(keys=(f"npu:{npu}:{chip}", second[1]), figures=figures)


def parse(answers: Mapping[str, str]) -> ToolReading:
    rows = [_cells(line) for line in answers[INFO].splitlines() if line.startswith("|")]
    cards: list[ToolCard] = []
    processes: list[ToolProcess] = []
    hbm = False
    in_processes = False
    previous: list[str] | None = None
    for cells in rows:
        text = " ".join(cells)
        if "Process id" in text:
            in_processes = True
            continue
        if "Bus-Id" in text:  # the second header row
            hbm = "HBM-Usage" in text
            continue
        if in_processes:
            if len(cells) >= 4 and cells[1].isdigit():
                npu_chip = cells[0].split()
                memory = _number(cells[-1])
                processes.append(
                    ToolProcess(
                        f"npu:{npu_chip[0]}:{npu_chip[1] if len(npu_chip) > 1 else 0}",
                        int(cells[1]),
                        None if memory is None else int(memory),
                        "npu-smi info",
                    )
                )
            continue
        if len(cells) >= 3 and BUS.match(cells[1]) and previous is not None:
            cards.append(_card(previous, cells, hbm))
            previous = None
        elif len(cells) >= 3 and cells[0][:1].isdigit():
            previous = cells
    return ToolReading(TOOL, tuple(cards), tuple(processes))
