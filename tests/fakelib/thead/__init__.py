"""The fake libhgml.so of the kit (tests/fakelib): T-Head's HGML as our own declarations
(hgml.h beside it, written from the public header's facts) describe it, answering from the
NVML-family scenario document of tests/fakelib/nvml_family.py. Without gcc the tests that need
it skip, saying so."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tests.fakelib import FakeLibrary
from tests.fakelib import nvml_family as family

HERE = Path(__file__).resolve().parent
SCENARIO_ENV = "FAKE_HGML_SCENARIO"
MIB = family.MIB
GIB = 1024 * MIB
DRIVER = "1.4.1-816bc0"
# A Zhenwu 810E as GPUStack's detector recorded one on hardware: 97920 MiB.
PPU = {"name": "PPU-ZW810E", "total_mib": 97920}


def library() -> FakeLibrary:
    return FakeLibrary(
        source=HERE / "fake_hgml.c",
        soname="libhgml.so",
        scenario_env=SCENARIO_ENV,
        includes=(HERE,),
    )


def missing() -> str | None:
    """Why the fake cannot be built here, or None."""
    return library().missing()


def build(directory: Path) -> Path:
    """Compile the fake into `directory`/libhgml.so and return its path."""
    return library().build(directory)


def device(uuid: str, **options: Any) -> dict[str, Any]:
    """A PPU of a scenario: tests.fakelib.nvml_family.device with a Zhenwu 810E's defaults."""
    spec = {**PPU, "used_mib": 2, "reserved": 0, **options}
    return family.device(uuid, **spec)


def write(
    path: Path, devices: Iterable[Mapping[str, Any]], driver: str = DRIVER, **top: Any
) -> Path:
    return family.write(path, driver, devices, **top)
