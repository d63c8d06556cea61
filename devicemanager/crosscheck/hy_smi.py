"""`hy-smi ... --json` (Hygon, a fork of rocm-smi) into crosscheck figures.

hy-smi answers `--json` with one object per card, `{"card0": {"DCU use (%)": "92", ...}}`,
values as strings, sometimes after lines of text that are not JSON (the object is read from
its first `{`). No verbatim capture of one whole answer was found; the keys read here are the
ones Hygon's own environment checker's tests hold (`hcu_envcheck`, Hygon Information
Technology: `{"card0":{"vram Total Memory (MiB)":"65520","vram Total Used Memory (MiB)":
"20413"}}`, `"HCU use (%)":"0.0"`, `"PCI Bus":"0000:09:00.0"`) and independent readers of real
hy-smi output agree on (SwanLab's hygon.py: "DCU use (%)", "Average Graphics Package Power
(W)", "Temperature (Sensor edge|junction|mem) (C)"); read with `find_string`, 2026-12-04. The
memory unit is read from the key.
Clocks, ECC and PCIe counters are not read from hy-smi: no real answer of theirs was found.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from devicemanager.crosscheck.model import ToolCard, ToolReading, Value

TOOL = "hy-smi"
ANSWER = "hy-smi.json"
COMMANDS = (
    (
        ANSWER,
        (
            "hy-smi",
            "--showuse",
            "--showmeminfo",
            "vram",
            "--showpower",
            "--showtemp",
            "--showbus",
            "--json",
        ),
    ),
)

CARD = re.compile(r"^card(\d+)$")
USE = re.compile(r"^[DH]CU use \(%\)$")
MEMORY = re.compile(r"^vram total (used )?memory \((B|KiB|MiB|GiB)\)$", re.IGNORECASE)
TO_MIB = {"b": 1 / (1 << 20), "kib": 1 / 1024, "mib": 1, "gib": 1024}
NOT_READ = "crosscheck reads no hy-smi answer for it"
UNREAD = (
    "clock.graphics_mhz",
    "clock.memory_mhz",
    "pcie.naks",
    "ecc.corrected.total",
    "ecc.uncorrected.total",
)


def _number(text: Any) -> float | None:
    try:
        return float(str(text).strip())
    except ValueError:
        return None


def _card(index: str, answer: Mapping[str, Any]) -> ToolCard:
    figures: dict[str, Value] = {}
    for key, text in answer.items():
        found = _number(text)
        if found is None:
            continue
        if USE.match(key):
            figures["utilization_percent"] = found
        elif memory := MEMORY.match(key):
            mib = round(found * TO_MIB[memory.group(2).lower()])
            figures["memory.used_mib" if memory.group(1) else "memory.total_mib"] = mib
    if (watts := _number(answer.get("Average Graphics Package Power (W)"))) is not None:
        figures["power_watts"] = watts
    for sensor in ("edge", "junction"):  # the agent's order: edge, then junction
        if (celsius := _number(answer.get(f"Temperature (Sensor {sensor}) (C)"))) is not None:
            figures["temperature"] = celsius
            break
    keys = tuple(k for k in (str(answer.get("PCI Bus", "")).strip(), f"index:{index}") if k)
    unstated = dict.fromkeys(UNREAD, NOT_READ)
    return ToolCard(keys=keys, figures=figures, unstated=unstated)


def parse(answers: Mapping[str, str]) -> ToolReading:
    text = answers[ANSWER]
    start, end = text.find("{"), text.rfind("}")
    document = json.loads(text[start : end + 1]) if 0 <= start < end else {}
    cards = [
        _card(m.group(1), answer)
        for key, answer in document.items()
        if (m := CARD.match(key)) and isinstance(answer, Mapping)
    ]
    note = "hy-smi's process list (--showpids) is not read by crosscheck"
    return ToolReading(TOOL, tuple(cards), None, note)
