"""Each manufacturer's own tool: the commands crosscheck runs, the files their answers are kept
in (`--tool-output DIR`, a recording's `meta.tool`), and the parser that reads them. Pure."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from devicemanager.crosscheck import amd_smi, hy_smi, mx_smi, npu_smi, nvidia_smi, ppu_smi
from devicemanager.crosscheck.model import ToolReading

Command = tuple[str, tuple[str, ...]]  # (the answer's file name, argv)


@dataclass(frozen=True, slots=True)
class Tool:
    manufacturer: str
    name: str
    commands: tuple[Command, ...]
    parse: Callable[[Mapping[str, str]], ToolReading]
    where: tuple[str, ...] = ()  # where the vendor installs it, when it is not on PATH
    optional: frozenset[str] = frozenset()  # answers a reading can do without


TOOLS: Mapping[str, Tool] = {
    "nvidia": Tool(
        "nvidia",
        nvidia_smi.TOOL,
        nvidia_smi.COMMANDS,
        nvidia_smi.parse,
        optional=frozenset({nvidia_smi.CSV}),
    ),
    "amd": Tool(
        "amd",
        amd_smi.TOOL,
        amd_smi.COMMANDS,
        amd_smi.parse,
        ("/opt/rocm/bin",),
        optional=frozenset({amd_smi.LIST}),
    ),
    "ascend": Tool("ascend", npu_smi.TOOL, npu_smi.COMMANDS, npu_smi.parse, ("/usr/local/sbin",)),
    "metax": Tool("metax", mx_smi.TOOL, mx_smi.COMMANDS, mx_smi.parse, ("/opt/mxdriver/bin",)),
    "hygon": Tool("hygon", hy_smi.TOOL, hy_smi.COMMANDS, hy_smi.parse, ("/opt/hyhal/bin",)),
    "thead": Tool("thead", ppu_smi.TOOL, ppu_smi.COMMANDS, ppu_smi.parse),
}
