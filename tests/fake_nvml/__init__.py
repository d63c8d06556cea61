"""Build the fake libnvidia-ml.so.1 with gcc against the real nvml.h, and write its scenarios.

The header comes from the PyPI package nvidia-nvml-dev, installed with the test extras and
never copied into the repository. Without gcc or the header the tests that need the library
skip, saying which is missing.
"""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "fake_nvml.c"
SCENARIOS = HERE / "scenarios"
MIB = 1048576


def header_dir() -> Path | None:
    try:
        files = importlib.metadata.files("nvidia-nvml-dev") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in files:
        if f.name == "nvml.h":
            return Path(str(f.locate())).parent
    return None


def missing() -> str | None:
    """Why the fake cannot be built here, or None."""
    if shutil.which("gcc") is None:
        return "gcc is not installed"
    if header_dir() is None:
        return "nvml.h is not installed (pip install nvidia-nvml-dev)"
    return None


def build(directory: Path) -> Path:
    """Compile the fake into `directory`/libnvidia-ml.so.1 and return its path."""
    include = header_dir()
    assert include is not None, missing()
    out = directory / "libnvidia-ml.so.1"
    subprocess.run(
        [
            "gcc",
            "-shared",
            "-fPIC",
            "-O1",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-Wno-deprecated-declarations",
            f"-I{include}",
            "-o",
            str(out),
            str(SOURCE),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return out


def device(
    uuid: str,
    name: str = "NVIDIA A100-SXM4-40GB",
    total_mib: int = 40960,
    used_mib: int = 1024,
    **options: Any,
) -> dict[str, Any]:
    """A card for `write()`. Options: util=(gpu, mem), temp, power (mW), mig_mode=(cur, pend),
    processes=[(pid, bytes | "na", [gi, ci])], samples=[(pid, ts, sm, mem)], grow=(n, mode),
    errors={entry point: code}, migs=[{slot, uuid, gi, total_mib, used_mib}], lost, lose_after,
    xid, remapped=(corr, unc, pending, failure)."""
    return {"uuid": uuid, "name": name, "total": total_mib * MIB, "used": used_mib * MIB, **options}


def render(driver: str, devices: Iterable[Mapping[str, Any]]) -> str:
    lines = [f"driver {driver}"]
    for d in devices:
        lines += [
            "device",
            f"uuid {d['uuid']}",
            f"name {d['name']}",
            f"memory {d['total']} {d['used']} {d.get('reserved', 512 * MIB)}",
        ]
        gpu, mem = d.get("util", (0, 0))
        lines += [
            f"util {gpu} {mem}",
            f"temp {d.get('temp', 40)}",
            f"power {d.get('power', 100_000)}",
        ]
        for key in ("lost", "lose_after", "xid", "retired_pending"):
            if key in d:
                lines.append(f"{key} {d[key]}")
        if "remapped" in d:
            lines.append("remapped " + " ".join(map(str, d["remapped"])))
        if "mig_mode" in d:
            lines.append("mig_mode " + " ".join(map(str, d["mig_mode"])))
        for proc in d.get("processes", ()):
            lines.append("process " + " ".join(map(str, proc)))
        for s in d.get("samples", ()):
            lines.append("sample " + " ".join(map(str, s)))
        if "grow" in d:
            lines.append("grow " + " ".join(map(str, d["grow"])))
        for entry, code in d.get("errors", {}).items():
            lines.append(f"error {entry} {code}")
        for m in d.get("migs", ()):
            lines += [
                f"mig {m['slot']}",
                f"uuid {m['uuid']}",
                f"gi {m.get('gi', m['slot'])}",
                f"memory {m['total_mib'] * MIB} {m.get('used_mib', 0) * MIB}",
            ]
            for entry, code in m.get("errors", {}).items():
                lines.append(f"error {entry} {code}")
    return "\n".join(lines) + "\n"


def write(path: Path, driver: str, devices: Iterable[Mapping[str, Any]]) -> Path:
    path.write_text(render(driver, devices))
    return path
