"""`crosscheck`'s flags, apart from the command, so that building the parser (which every
command does, `serve` included) imports no parser of a tool."""

from __future__ import annotations

import argparse
from pathlib import Path

from devicemanager.backend import BACKENDS


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("vendor", choices=sorted(BACKENDS), help="the manufacturer to check")
    parser.add_argument(
        "--payload",
        type=Path,
        help="the agent's figures from this recording (`devicemanager record` output) instead "
        "of reading the vendor library now; the tool's answers it keeps are used unless "
        "--tool-output is given",
    )
    parser.add_argument(
        "--snapshot-url",
        metavar="URL",
        help="the agent's figures from a running agent's snapshot (its /monitor/snapshot) "
        "instead of reading the vendor library now; it names no process, so per-process "
        "memory is not compared",
    )
    parser.add_argument("--cacert", help="with --snapshot-url: verify the agent against this CA")
    parser.add_argument(
        "--tool-output",
        type=Path,
        metavar="DIR",
        help="the tool's answers saved in DIR (nvidia-smi-q.xml, nvidia-smi-compute-apps.csv, "
        "amd-smi-metric.json, amd-smi-list.json, npu-smi-info.txt, mx-smi.txt, hy-smi.json, "
        "ppu-smi-q.txt) instead of running it",
    )
    parser.add_argument(
        "--library",
        action="append",
        type=_library,
        metavar="[LIBRARY=]PATH",
        help="read the cards now through this vendor library (or its directory); LIBRARY names "
        "one of the backend's libraries (default: its main one); repeatable",
    )
    parser.add_argument(
        "--timeout",
        type=_seconds,
        default=30.0,
        help="seconds each run of the tool, and the snapshot request, may take (default: 30)",
    )


def _library(value: str) -> tuple[str, str]:
    """As `record --library` reads it."""
    name, sep, path = value.rpartition("=")
    if not path:
        raise argparse.ArgumentTypeError("expected [LIBRARY=]PATH")
    return (name if sep else ""), path


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value
