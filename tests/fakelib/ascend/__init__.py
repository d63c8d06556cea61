"""The fake libdcmi.so of the kit (tests/fakelib), compiled against this project's own dcmi.h
(written from the public dcmi_interface_api.h's facts), and the scenario documents it answers
from. Without gcc the tests that need the library skip, saying so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.fakelib import FakeLibrary, write_scenario

HERE = Path(__file__).resolve().parent
SCENARIO_ENV = "FAKE_DCMI_SCENARIO"
MIB = 1048576

# DCMI return codes the scenarios use.
INVALID_PARAMETER = -8001
PERMISSION = -8002
TIMEOUT = -8006
INVALID_DEVICE_ID = -8007
DEVICE_NOT_EXIST = -8008
NOT_READY = -8012
NOT_SUPPORTED_IN_CONTAINER = -8013
NOT_SUPPORTED = -8255

# Fault keys of the VDEV_MNG sub-commands (dcmi_get_device_info.<main>.<sub>).
VDEV_TOTAL = "dcmi_get_device_info.52.1"
VDEV_RESOURCE = "dcmi_get_device_info.52.0"
VDEV_ACTIVITY = "dcmi_get_device_info.52.5"


def library(old_driver: bool = False) -> FakeLibrary:
    """The fake; `old_driver` leaves out dcmi_get_device_die_v2 and dcmi_get_driver_version."""
    return FakeLibrary(
        source=HERE / "fake_dcmi.c",
        soname="libdcmi.so",
        scenario_env=SCENARIO_ENV,
        includes=(HERE,),
        defines=("FAKE_DCMI_OLD_DRIVER",) if old_driver else (),
    )


def missing() -> str | None:
    return library().missing()


def build(directory: Path, old_driver: bool = False) -> Path:
    """Compile the fake into `directory`/libdcmi.so and return its path."""
    return library(old_driver).build(directory)


def die(n: int, seed: int = 0x104301E3) -> list[int]:
    """A VDIE of five words, distinct per n, shaped like a 910B2's (the last word shared by
    chips of one batch, a leading word that prints without zero padding)."""
    return [
        (0xE0F4EE64 + 0x1111 * n) & 0xFFFFFFFF,
        (0x0140C979 + 0x10101 * n) & 0xFFFFFFFF,
        (0x6A691492 + 0x3001 * n) & 0xFFFFFFFF,
        (0x89528485 + 0x100 * n) & 0xFFFFFFFF,
        seed,
    ]


def device(
    card: int,
    dev: int = 0,
    *,
    logic: int | None = None,
    phy: int | None = None,
    chip: str = "910B2",
    **options: Any,
) -> dict[str, Any]:
    """An NPU of a scenario. Options: die (five words), hbm=(size MB, usage MB), memory=(size MB,
    available MB), aicore (%), temp (°C), power (0.1 W), health, processes=[(pid, bytes)],
    reported_count, vdevs=[{id, template, aic, memory, util, total_kb, free_kb}], errors={entry:
    code}, type (1: the card's MCU), lost, lose_after (die reads), lost_code, gone_after,
    error_codes=[the codes dcmi_get_device_errorcode_v2 reports], error_count (its count)."""
    n = options.pop("n", card * 2 + dev)
    doc: dict[str, Any] = {
        "card": card,
        "device": dev,
        "type": options.pop("type", 0),
        "logic": n if logic is None else logic,
        "phy": n if phy is None else phy,
        "die": options.pop("die", die(n)),
        "chip": {
            "type": "Ascend",
            "name": chip,
            "ver": "V1",
            "aicore": options.pop("aicore_cnt", 24 if chip.startswith("910") else 8),
        },
    }
    if "hbm" in options:
        size, usage = options.pop("hbm")
        doc["hbm"] = {"size": size, "usage": usage}
    if "memory" in options:
        size, available = options.pop("memory")
        doc["memory"] = {"size": size, "available": available}
    doc["processes"] = [{"pid": pid, "mem": mem} for pid, mem in options.pop("processes", ())]
    doc["vdevs"] = list(options.pop("vdevs", ()))
    doc["faults"] = dict(options.pop("errors", {}))
    if "lose_after" in options:
        doc["lost_after"] = options.pop("lose_after")
    doc.update(options)  # aicore, temp, power, health, reported_count, lost, lost_code, gone_after
    return doc


def vdev(
    vdev_id: int,
    template: str = "vir04",
    *,
    aic: float = 4,
    memory_mb: int = 16384,
    util: int = 0,
    used_kb: int = 0,
) -> dict[str, Any]:
    """A vNPU: its template's AI cores and memory (MB), and its activity (KB)."""
    total_kb = memory_mb * 1024
    return {
        "id": vdev_id,
        "template": template,
        "aic": aic,
        "memory": memory_mb,
        "util": util,
        "total_kb": total_kb,
        "free_kb": total_kb - used_kb,
    }


def scenario(
    devices: Iterable[Mapping[str, Any]], driver: str = "25.5.1", **top: Any
) -> dict[str, Any]:
    """A whole scenario: the driver version, the devices, and any of the kit's top-level keys
    (init, faults, hang)."""
    return {"driver": driver, "devices": list(devices), **top}


def write(
    path: Path, devices: Sequence[Mapping[str, Any]], driver: str = "25.5.1", **top: Any
) -> Path:
    return write_scenario(path, scenario(devices, driver, **top))
