"""The fake libnvidia-ml.so.1 of the kit (tests/fakelib), compiled against the real nvml.h, and
the scenario documents it answers from.

The header comes from the PyPI package nvidia-nvml-dev, installed with the test extras and
never copied into the repository. Without gcc or the header the tests that need the library
skip, saying which is missing.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

from tests.fakelib import FakeLibrary
from tests.fakelib.nvml_family import MIB, device, scenario, write

__all__ = [
    "MIB",
    "SCENARIO_ENV",
    "build",
    "device",
    "header_dir",
    "library",
    "missing",
    "scenario",
    "write",
]

HERE = Path(__file__).resolve().parent
SCENARIO_ENV = "FAKE_NVML_SCENARIO"


def header_dir() -> Path | None:
    try:
        files = importlib.metadata.files("nvidia-nvml-dev") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in files:
        if f.name == "nvml.h":
            return Path(str(f.locate())).parent
    return None


def library() -> FakeLibrary:
    include = header_dir()
    return FakeLibrary(
        source=HERE / "fake_nvml.c",
        soname="libnvidia-ml.so.1",
        scenario_env=SCENARIO_ENV,
        includes=(include,) if include else (),
    )


def missing() -> str | None:
    """Why the fake cannot be built here, or None."""
    if header_dir() is None:
        return "nvml.h is not installed (pip install nvidia-nvml-dev)"
    return library().missing()


def build(directory: Path) -> Path:
    """Compile the fake into `directory`/libnvidia-ml.so.1 and return its path."""
    return library().build(directory)
