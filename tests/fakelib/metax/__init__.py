"""The fake libmxsml.so of the kit (tests/fakelib), compiled against our own declarations
(mxsml.h beside it, written from the documented layouts; MetaX's header is proprietary and
never copied), and the scenario documents it answers from.

Variants are built from the same source with defines: `no_v3` is an older library without
`mxSmlGetSingleGpuProcess_v3` and the sGPU annotations id; `v1_only` has neither `_v3` nor
`_v2`.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tests.fakelib import FakeLibrary, write_scenario

HERE = Path(__file__).resolve().parent
SCENARIO_ENV = "FAKE_MXSML_SCENARIO"
SONAME = "libmxsml.so"
MIB = 1048576
KIB_PER_MIB = 1024
C500_MIB = 65536  # an MXC500: 64 GiB of HBM
DRIVER = "3.6.11"  # what mxSmlGetDeviceVersion(driver) answered on a recorded C500 node

VARIANTS: dict[str, tuple[str, ...]] = {
    "": (),
    "no_v3": ("FAKE_MXSML_NO_V3", "FAKE_MXSML_NO_ANNOTATIONS"),
    "v1_only": ("FAKE_MXSML_NO_V3", "FAKE_MXSML_NO_V2"),
}

# mxSmlReturn_t
FAILURE = 1
NO_DEVICE = 2
NOT_SUPPORTED = 3
SYSFS_ERROR = 4
PERMISSION_DENIED = 8
INSUFFICIENT_SIZE = 10
MODE_PF, MODE_VF = 1, 2
BRAND_N = 1


def library(variant: str = "") -> FakeLibrary:
    return FakeLibrary(
        source=HERE / "fake_mxsml.c",
        soname=SONAME,
        scenario_env=SCENARIO_ENV,
        includes=(HERE,),
        defines=VARIANTS[variant],
    )


def missing() -> str | None:
    """Why the fake cannot be built here, or None."""
    return library().missing()


def build(directory: Path, variant: str = "") -> Path:
    """Compile the fake (one variant per directory) and return the library's path."""
    return library(variant).build(directory / (variant or "default"))


_BUILT: dict[str, Path] = {}
_WORK: list[Path] = []


def built(variant: str = "") -> Path:
    """The fake compiled once per test run and variant (tests skip when missing() says why)."""
    if variant not in _BUILT:
        if not _WORK:
            _WORK.append(Path(tempfile.mkdtemp(prefix="fake-mxsml-")))
            atexit.register(shutil.rmtree, _WORK[0], True)
        _BUILT[variant] = build(_WORK[0], variant)
    return _BUILT[variant]


def card(
    uuid: str,
    *,
    name: str = "MXC500",
    total_mib: int = C500_MIB,
    used_mib: int = 826,
    bdf: str | None = None,
    **options: Any,
) -> dict[str, Any]:
    """A device of a scenario. Options: usage (percent), temp (degrees C, written x100), power
    (W per rail, written as mW), gpu_id (the driver's own id; default position + 1), mode
    (1 PF, 2 VF), brand, state, sgpu_toggle (0/1; absent: sGPU not supported), sgpus (from
    sgpu()), insufficient, errors={entry point: code}, lost, lose_after (identity reads),
    gone_after (enumerations), grow=(n, "once" | "always")."""
    doc: dict[str, Any] = {
        "uuid": uuid,
        "name": name,
        "memory": {
            "vram_total": total_mib * KIB_PER_MIB,
            "vram_used": used_mib * KIB_PER_MIB,
        },
        "usage": options.pop("usage", 0),
        "temp": round(options.pop("temp", 36.0) * 100),
        "power": [round(w * 1000) for w in options.pop("power", (19.0, 19.0, 19.0))],
    }
    if bdf is not None:
        doc["bdf"] = bdf
    if "grow" in options:
        n, mode = options.pop("grow")
        doc["grow"] = n
        doc["grow_always"] = mode == "always"
    doc["faults"] = dict(options.pop("errors", {}))
    if "lose_after" in options:
        doc["lost_after"] = options.pop("lose_after")
    doc.update(options)  # gpu_id, mode, brand, state, sgpu_toggle, sgpus, lost, gone_after, ...
    return doc


def sgpu(
    number: int,
    uuid: str,
    *,
    vram_mib: int,
    compute: int,
    usage: int = 0,
    used_mib: int = 0,
    alias: str = "",
    annotations_id: str = "",
    errors: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """An sGPU slot: its quota (MiB, percent of the card), usage in ten-thousandths of the
    card, memory used."""
    return {
        "id": number,
        "uuid": uuid,
        "vram_quota": vram_mib,
        "compute_quota": compute,
        "usage": usage,
        "memory": {"total": vram_mib * MIB, "used": used_mib * MIB},
        "alias": alias,
        "annotations_id": annotations_id,
        "faults": dict(errors or {}),
    }


def process(pid: int, *gpus: tuple[int, int] | tuple[int, int, int]) -> dict[str, Any]:
    """A process and every GPU it uses: (scenario position, bytes[, sGPU id])."""
    return {
        "pid": pid,
        "name": "python3",
        "gpus": [
            {"device": g[0], "memory": g[1], "sgpu": g[2] if len(g) > 2 else -1, "die": 0}
            for g in gpus
        ],
    }


def scenario(
    devices: Iterable[Mapping[str, Any]],
    processes: Iterable[Mapping[str, Any]] = (),
    driver: str = DRIVER,
    **top: Any,
) -> dict[str, Any]:
    """A whole scenario: the cards, the processes, the driver version and any of the kit's
    top-level keys (init, faults, hang, lost_code)."""
    return {"driver": driver, "devices": list(devices), "processes": list(processes), **top}


def write(
    path: Path,
    devices: Iterable[Mapping[str, Any]],
    processes: Iterable[Mapping[str, Any]] = (),
    **top: Any,
) -> Path:
    return write_scenario(path, scenario(devices, processes, **top))
