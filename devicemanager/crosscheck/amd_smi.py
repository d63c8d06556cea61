"""`amd-smi metric --json` into crosscheck figures.

The shape is amd-smi's own (ROCm/amdsmi's CLI, `amdsmi_commands.py`): ROCm 6 prints a list with
one object per GPU, ROCm 7 wraps the same list as `{"gpu_data": [...]}`; each figure is
`{"value": 54, "unit": "C"}` or the string `"N/A"`. amd-smi's "MB" is bytes divided by 1024²,
MiB. Sources of the shape: a full two-GPU `amd-smi metric --json` answer quoted in a Rust
test (`amd_smi.rs`, `gen_multi_gpu_data`), and the `gpu_data` wrapping in AMD's own device
metrics exporter tests; both read with `search`, 2026-12-04. `metric` names each GPU by
amdsmi's index only; `amd-smi list --json` (`[{"gpu": 0, "bdf": "0000:0b:00.0", "uuid": ...,
"kfd_id": 7, "node_id": 3, "partition_id": 0}]`, as several harnesses of real amd-smi quote
it) gives its UUID and bus id, so a card is matched by those where the list answered.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from devicemanager.crosscheck.model import ToolCard, ToolReading, Value

TOOL = "amd-smi"
METRIC = "amd-smi-metric.json"
LIST = "amd-smi-list.json"
COMMANDS = ((METRIC, ("amd-smi", "metric", "--json")), (LIST, ("amd-smi", "list", "--json")))

TO_MIB = {"B": 1 / (1 << 20), "KB": 1 / 1024, "MB": 1, "GB": 1024}

# amd-smi's pcie.replay_count is the link's replay count from the GPU metrics table; the agent's
# figure is the driver's pcie_replay_count (NAKs received plus generated, issue 43): two counters.
REPLAYS_DIFFER = (
    "amd-smi's pcie.replay_count is another counter than the agent's (the driver's "
    "pcie_replay_count: NAKs received plus generated)"
)


def value(answer: Any) -> float | None:
    """`{"value": 54, "unit": "C"}` or a bare number: the number; "N/A" and the rest: None."""
    if isinstance(answer, Mapping):
        answer = answer.get("value")
    if isinstance(answer, bool) or not isinstance(answer, int | float):
        return None
    return float(answer)


def _mib(answer: Any) -> int | None:
    found = value(answer)
    unit = answer.get("unit", "MB") if isinstance(answer, Mapping) else "MB"
    if found is None or unit not in TO_MIB:
        return None
    return round(found * TO_MIB[unit])


def _clock(clocks: Mapping[str, Any], name: str) -> float | None:
    domain = clocks.get(name, clocks.get(name.upper()))
    return value(domain.get("clk")) if isinstance(domain, Mapping) else None


def _gpus(text: str) -> list[Mapping[str, Any]]:
    """ROCm 6's list of GPU objects, or ROCm 7's `{"gpu_data": [...]}`."""
    document = json.loads(text)
    if isinstance(document, Mapping):
        document = document.get("gpu_data", [])
    if not isinstance(document, list):
        return []
    return [g for g in document if isinstance(g, Mapping) and isinstance(g.get("gpu"), int)]


def _names(answers: Mapping[str, str]) -> dict[int, tuple[str, ...]]:
    """Each GPU index's UUID and bus id, from `amd-smi list --json` where it was read."""
    if LIST not in answers:
        return {}
    out = {}
    for gpu in _gpus(answers[LIST]):
        names = (gpu.get("uuid"), gpu.get("bdf"))
        out[int(gpu["gpu"])] = tuple(n for n in names if isinstance(n, str) and n != "N/A")
    return out


def _card(gpu: Mapping[str, Any], names: tuple[str, ...]) -> ToolCard:
    figures: dict[str, Value] = {}

    def put(figure: str, found: Value | None) -> None:
        if found is not None:
            figures[figure] = found

    def section(name: str) -> Mapping[str, Any]:
        found = gpu.get(name)
        return found if isinstance(found, Mapping) else {}

    memory = section("mem_usage")
    put("memory.total_mib", _mib(memory.get("total_vram")))
    put("memory.used_mib", _mib(memory.get("used_vram")))
    put("utilization_percent", value(section("usage").get("gfx_activity")))
    temperature = section("temperature")
    hotspot = value(temperature.get("hotspot"))  # the agent's order: hotspot, then edge
    put("temperature", hotspot if hotspot is not None else value(temperature.get("edge")))
    put("power_watts", value(section("power").get("socket_power")))
    put("clock.graphics_mhz", _clock(section("clock"), "gfx_0"))
    put("clock.memory_mhz", _clock(section("clock"), "mem_0"))
    ecc = section("ecc")
    counts = (
        ("corrected", "total_correctable_count"),
        ("uncorrected", "total_uncorrectable_count"),
    )
    for kind, key in counts:
        found = value(ecc.get(key))
        # amdsmi's count since the driver loaded, which the agent publishes as counter="total".
        put(f"ecc.{kind}.total", None if found is None else int(found))
    return ToolCard(
        keys=(*names, f"index:{gpu.get('gpu')}"),
        figures=figures,
        unstated={"pcie.naks": REPLAYS_DIFFER},
    )


def parse(answers: Mapping[str, str]) -> ToolReading:
    names = _names(answers)
    return ToolReading(
        TOOL,
        tuple(_card(g, names.get(int(g["gpu"]), ())) for g in _gpus(answers[METRIC])),
        None,
        "amd-smi's process list (amd-smi process) is not read by crosscheck",
    )
