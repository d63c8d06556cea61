"""`devicemanager crosscheck`: the agent's figures and the tool's, read at the same moment, then
compared (compare.py) and printed (render.py).

The agent's side is the backend's `read()` and pure `parse()` now, as `devicemanager record`
reads, or a recording (`--payload`), or a running agent's snapshot (`--snapshot-url`), each as
a round publishes it. The tool's side is the tool run right after, with a deadline and a bound
on what it may print, or its answers kept beside a recording (`meta.tool`, written by
`record`), or files (`--tool-output DIR`). Exit 0 when every compared figure agrees, 1 when one
disagrees, 2 for an input given that cannot be read, 3 when either side cannot be read (the
tool missing: what to install, or `--tool-output`)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from devicemanager.backend import BackendUnavailable, create_backend
from devicemanager.crosscheck.agent import (
    AgentCard,
    AgentProcess,
    agent_cards,
    agent_processes,
    as_published,
    snapshot_cards,
)
from devicemanager.crosscheck.compare import compare
from devicemanager.crosscheck.render import render
from devicemanager.crosscheck.tools import TOOLS, Tool
from devicemanager.model import ReadRequest, VendorReading

OK, DISAGREE, USAGE, UNREADABLE = 0, 1, 2, 3
MAX_ANSWER_BYTES = 64 << 20  # nvidia-smi -q -x of an 8-card node is under 1 MiB
MAX_PAYLOAD_BYTES = 256 << 20


class CrosscheckError(Exception):
    """A failure told in one line, with the command's exit code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


# -- the tool ---------------------------------------------------------------------------------


def locate(tool: Tool, environ: Mapping[str, str] = os.environ) -> str | None:
    found = shutil.which(tool.name, path=environ.get("PATH"))
    if found is not None:
        return found
    for directory in tool.where:
        candidate = os.path.join(directory, tool.name)
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def run_command(argv: list[str], timeout: float, limit: int = MAX_ANSWER_BYTES) -> str:
    """One run of the tool: its standard output, at most `limit` bytes, within `timeout`.
    The output goes to an unlinked file, so a tool that prints without end costs disk up to
    the deadline, never this process's memory."""
    with tempfile.TemporaryFile() as out:
        try:
            done = subprocess.run(
                argv, stdout=out, stderr=subprocess.PIPE, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired:
            message = f"{argv[0]} did not answer within {timeout:g} s"
            raise CrosscheckError(message, UNREADABLE) from None
        except OSError as exc:
            raise CrosscheckError(f"{argv[0]}: {exc.strerror}", UNREADABLE) from None
        size = os.fstat(out.fileno()).st_size
        if size > limit:
            raise CrosscheckError(f"{argv[0]} printed {size} bytes, over {limit}", UNREADABLE)
        if done.returncode != 0:
            said = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["nothing"]
            raise CrosscheckError(
                f"{' '.join(argv)} exited {done.returncode}: {said[0][:200]}", UNREADABLE
            )
        out.seek(0)
        return out.read().decode(errors="replace")


def run_tool(tool: Tool, timeout: float, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    path = locate(tool, environ)
    if path is None:
        raise CrosscheckError(
            f"{tool.name} is not installed here (not on PATH"
            + (f" nor in {', '.join(tool.where)}" if tool.where else "")
            + f"): install {tool.manufacturer}'s driver tools, or give --tool-output DIR with "
            "its saved answers",
            UNREADABLE,
        )
    return {name: run_command([path, *argv[1:]], timeout) for name, argv in tool.commands}


def saved_answers(tool: Tool, directory: Path) -> dict[str, str]:
    answers = {}
    for name, _ in tool.commands:
        path = directory / name
        try:
            if path.stat().st_size > MAX_ANSWER_BYTES:
                raise CrosscheckError(
                    f"--tool-output: {path} is over {MAX_ANSWER_BYTES} bytes", USAGE
                )
            answers[name] = path.read_text(errors="replace")
        except FileNotFoundError:
            if name not in tool.optional:
                raise CrosscheckError(f"--tool-output: no {name} in {directory}", USAGE) from None
        except OSError as exc:
            raise CrosscheckError(f"--tool-output: {exc.strerror}: {path}", USAGE) from None
    return answers


def kept_answers(tool: Tool, doc: Mapping[str, Any]) -> dict[str, str] | None:
    """The tool's answers a recording keeps (`meta.tool.answers`), if it kept them."""
    meta = doc.get("meta")
    kept = meta.get("tool") if isinstance(meta, Mapping) else None
    if not isinstance(kept, Mapping) or kept.get("name") != tool.name:
        return None
    answers = kept.get("answers")
    if not isinstance(answers, Mapping):
        return None
    return {str(k): str(v) for k, v in answers.items()}


def tool_answers_for_record(manufacturer: str, timeout: float = 30.0) -> dict[str, Any] | None:
    """What `record` keeps beside its payload: the tool's answers of the same moment, where
    the tool is installed (None where it is not, or failed: a recording is not refused)."""
    tool = TOOLS.get(manufacturer)
    if tool is None or locate(tool) is None:
        return None
    try:
        answers = run_tool(tool, timeout)
    except CrosscheckError:
        return None
    return {"name": tool.name, "answers": answers}


# -- the agent --------------------------------------------------------------------------------


def read_payload(path: Path, manufacturer: str) -> dict[str, Any]:
    try:
        if path.stat().st_size > MAX_PAYLOAD_BYTES:
            raise CrosscheckError(f"--payload: {path} is over {MAX_PAYLOAD_BYTES} bytes", USAGE)
        doc = json.loads(path.read_text())
    except OSError as exc:
        raise CrosscheckError(f"--payload: {exc.strerror}: {path}", USAGE) from None
    except ValueError as exc:
        raise CrosscheckError(f"--payload: {path} is not JSON: {exc}", USAGE) from None
    if not isinstance(doc, dict) or "payload" not in doc:
        raise CrosscheckError(f"--payload: {path} is no recording (no 'payload')", USAGE)
    meta = doc.get("meta") if isinstance(doc.get("meta"), dict) else {}
    recorded = meta.get("manufacturer") if isinstance(meta, dict) else None
    if recorded not in (None, manufacturer):
        raise CrosscheckError(
            f"--payload: {path} is a recording of {recorded}, not {manufacturer}", USAGE
        )
    return doc


def read_agent(manufacturer: str, libraries: Mapping[str, str]) -> VendorReading:
    """The agent's figures now: what a round reads, every card asked for its processes."""
    try:
        backend = create_backend(manufacturer, libraries)
    except ValueError as exc:  # a --library the backend does not load
        raise CrosscheckError(f"--library: {exc}", USAGE) from None
    try:
        backend.open()
        reading = backend.parse(backend.read(ReadRequest()))
        carved = frozenset(c.id for c in reading.cards)
        return backend.parse(backend.read(ReadRequest(carved_device_ids=carved)))
    except BackendUnavailable as exc:
        raise CrosscheckError(
            f"{manufacturer}'s library is not available here: {exc}", UNREADABLE
        ) from None
    finally:
        backend.close()


# -- the command ------------------------------------------------------------------------------


def read_snapshot(
    url: str, cacert: str | None, timeout: float, token: str | None, manufacturer: str
) -> tuple[AgentCard, ...]:
    from devicemanager.serve.client import FetchError, fetch_snapshot  # httpx, only here

    try:
        doc = fetch_snapshot(url, cacert, timeout, token)
    except FetchError as exc:
        raise CrosscheckError(str(exc), UNREADABLE) from None
    cards = snapshot_cards(doc, manufacturer)
    if not cards:
        raise CrosscheckError(f"{url}: the agent's snapshot has no {manufacturer} card", UNREADABLE)
    return cards


def command(
    args: argparse.Namespace, token_for: Callable[[str], str | None] = lambda url: None
) -> int:
    """`token_for` is the bearer token the command line sends to a URL (cli.py's rule)."""
    tool = TOOLS[args.vendor]
    notes: list[str] = []
    processes: tuple[AgentProcess, ...] | None
    if args.payload is not None and args.snapshot_url is not None:
        raise CrosscheckError("--payload and --snapshot-url: give one of them", USAGE)
    if args.library and (args.payload is not None or args.snapshot_url is not None):
        raise CrosscheckError(
            "--library reads the cards now: not beside --payload or --snapshot-url", USAGE
        )
    if args.payload is not None:
        doc = read_payload(args.payload, args.vendor)
        reading = as_published(create_backend(args.vendor).parse(doc["payload"]))
        cards, processes = agent_cards(reading), agent_processes(reading)
        if args.tool_output is not None:
            answers = saved_answers(tool, args.tool_output)
        elif (kept := kept_answers(tool, doc)) is not None:
            answers = kept
            notes.append(f"{tool.name}'s answers kept in the recording, of its moment")
        else:
            answers = run_tool(tool, args.timeout)
            notes.append(f"{tool.name} run now, against a recording of another moment")
    else:
        if args.snapshot_url is not None:
            token = token_for(args.snapshot_url)
            cards = read_snapshot(args.snapshot_url, args.cacert, args.timeout, token, args.vendor)
            processes = None
            notes.append("the agent's figures from its last round's snapshot")
        else:
            reading = as_published(read_agent(args.vendor, dict(args.library or [])))
            cards, processes = agent_cards(reading), agent_processes(reading)
        if args.tool_output is not None:
            answers = saved_answers(tool, args.tool_output)
        else:
            answers = run_tool(tool, args.timeout)  # right after the agent's read
    try:
        parsed = tool.parse(answers)
    except (ValueError, KeyError, IndexError, SyntaxError) as exc:  # ET.ParseError: SyntaxError
        raise CrosscheckError(f"{tool.name}'s answer cannot be read: {exc}", UNREADABLE) from None
    report = compare(args.vendor, parsed, cards, processes, tuple(notes))
    sys.stdout.write(render(report))
    return DISAGREE if report.disagreements else OK
