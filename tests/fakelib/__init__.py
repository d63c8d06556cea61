"""The fake-library kit every vendor's tests use (R-V6).

A fake is a small C file per vendor, compiled by the tests with gcc into a shared object named
as the real library, loaded through the real binding (pynvml, the amdsmi wheel, our own ctypes
declarations), and driven by a scenario the test writes as JSON. The C side includes
`fakelib.h`, which reads the scenario and expresses the faults every vendor shares the same
way (see its header comment): library absent (point the backend at nothing), driver not
loaded at init, zero devices, not supported, no permission, a buffer too small and retried, a
device lost mid-read, a call that hangs, a card that disappears from enumeration.

ABI: `layout()` compiles a probe against a header and reports `sizeof`/`offsetof`, so each
struct our ctypes declarations lay out is asserted against the C compiler on a header written
from the vendor's public one.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KIT = Path(__file__).resolve().parent
HEADER = KIT / "fakelib.h"


def flatten(doc: Any, prefix: str = "") -> Iterator[tuple[str, str]]:
    """A scenario as the C side reads it: one (dotted key, text) pair per leaf; a list's items
    by position and its length under "<list>.#"; true/false as 1/0; None left out."""
    if isinstance(doc, Mapping):
        for key, value in doc.items():
            yield from flatten(value, f"{prefix}{key}.")
    elif isinstance(doc, list | tuple):
        yield f"{prefix}#", str(len(doc))
        for i, value in enumerate(doc):
            yield from flatten(value, f"{prefix}{i}.")
    elif doc is None:
        return
    else:
        key = prefix[:-1]
        if isinstance(doc, bool):
            yield key, "1" if doc else "0"
        else:
            text = str(doc)
            if "\t" in text or "\n" in text:
                raise ValueError(f"{key}: a scenario value cannot hold a tab or a newline")
            yield key, text


def write_scenario(path: Path, doc: Mapping[str, Any]) -> Path:
    """Write `doc` where a fake reads it; the JSON beside it is for the person reading a failure."""
    path.write_text("".join(f"{k}\t{v}\n" for k, v in flatten(doc)))
    path.with_suffix(".json").write_text(_json(doc))
    return path


def _json(doc: Any) -> str:
    import json

    return json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n"


def gcc_missing() -> str | None:
    return None if shutil.which("gcc") else "gcc is not installed"


@dataclass(frozen=True)
class FakeLibrary:
    """One vendor's fake: its C source, the soname it is built as, the variable naming its
    scenario, and the include directories its header needs."""

    source: Path
    soname: str
    scenario_env: str
    includes: tuple[Path, ...] = ()
    defines: tuple[str, ...] = ()
    flags: tuple[str, ...] = field(default=("-Wno-deprecated-declarations",))

    def missing(self) -> str | None:
        """Why this fake cannot be built here, or None."""
        if why := gcc_missing():
            return why
        absent = [str(d) for d in self.includes if not d.is_dir()]
        return f"include directory missing: {', '.join(absent)}" if absent else None

    def build(self, directory: Path) -> Path:
        """Compile into `directory`/<soname>; the same source is compiled once per directory."""
        directory.mkdir(parents=True, exist_ok=True)
        out = directory / self.soname
        headers = sorted(h for d in self.includes if d.is_dir() for h in d.glob("*.h"))
        stamp = hashlib.sha256(
            b"".join(p.read_bytes() for p in (self.source, HEADER, *headers))
            + "\0".join((*self.defines, *map(str, self.includes))).encode()
        ).hexdigest()
        marker = directory / f".{self.soname}.sha256"
        if out.exists() and marker.exists() and marker.read_text() == stamp:
            return out
        command = [
            "gcc",
            "-shared",
            "-fPIC",
            "-O1",
            "-Wall",
            "-Wextra",
            "-Werror",
            *self.flags,
            f"-DFL_SCENARIO_ENV={_c_string(self.scenario_env)}",
            *(f"-D{d}" for d in self.defines),
            f"-I{KIT}",
            *(f"-I{d}" for d in self.includes),
            "-o",
            str(out),
            str(self.source),
        ]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"building {self.soname} failed:\n{result.stderr}")
        marker.write_text(stamp)
        return out

    def env(self, scenario: Path) -> dict[str, str]:
        """The environment a process needs for this fake to read `scenario`."""
        return {self.scenario_env: str(scenario)}


def _c_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass(frozen=True)
class Layout:
    size: int
    offsets: Mapping[str, int]


def layout(
    header: str,
    structs: Mapping[str, Sequence[str]],
    includes: Iterable[Path] = (),
    directory: Path | None = None,
) -> dict[str, Layout]:
    """sizeof and offsetof of each struct's fields, as gcc lays them out for this machine.

    `header` is C text (usually `#include "ours.h"`); `structs` maps a type name to the fields
    whose offsets are wanted."""
    import tempfile

    work = Path(directory or tempfile.mkdtemp(prefix="fakelib-abi-"))
    lines = [header, "#include <stddef.h>", "#include <stdio.h>", "int main(void) {"]
    for name, fields in structs.items():
        lines.append(f'    printf("{name} size %zu\\n", sizeof({name}));')
        for f in fields:
            lines.append(f'    printf("{name} {f} %zu\\n", offsetof({name}, {f}));')
    lines += ["    return 0;", "}"]
    probe = work / "abi_probe.c"
    probe.write_text("\n".join(lines) + "\n")
    binary = work / "abi_probe"
    subprocess.run(
        ["gcc", "-Wall", "-Werror", *(f"-I{d}" for d in includes), "-o", str(binary), str(probe)],
        check=True,
        capture_output=True,
        text=True,
    )
    output = subprocess.run([str(binary)], check=True, capture_output=True, text=True).stdout
    sizes: dict[str, int] = {}
    offsets: dict[str, dict[str, int]] = {name: {} for name in structs}
    for line in output.splitlines():
        name, what, value = line.rsplit(" ", 2)
        if what == "size":
            sizes[name] = int(value)
        else:
            offsets[name][what] = int(value)
    return {name: Layout(sizes[name], offsets[name]) for name in structs}


def ctypes_layout(struct: Any) -> Layout:
    """The same figures for a ctypes Structure, to compare with `layout()`."""
    import ctypes

    offsets = {name: getattr(struct, name).offset for name, *_ in struct._fields_}
    return Layout(ctypes.sizeof(struct), offsets)
