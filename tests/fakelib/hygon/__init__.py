"""The three fake Hygon libraries of the kit (tests/fakelib): Hygon's ROCm SMI fork
(`librocm_smi64.so`), `libhydmi.so` (virtual DCUs) and `libhydmi_mig.so` (multi-instance, under
NVML's symbol names), each compiled from its C source here against our own headers in
`include/` (written from Hygon's public ones, never copied), and the scenario documents they
answer from.

A node is described once (`node()`), and `write()` splits it into the three files the three
libraries read, each named by its own variable so no fake reads another's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tests.fakelib import FakeLibrary, write_scenario

HERE = Path(__file__).resolve().parent
INCLUDE = HERE / "include"
MIB = 1048576
GIB = 1024 * MIB

RSMI = FakeLibrary(
    source=HERE / "fake_rsmi.c",
    soname="librocm_smi64.so",
    scenario_env="FAKE_HYGON_RSMI_SCENARIO",
    includes=(INCLUDE,),
)
DMI = FakeLibrary(
    source=HERE / "fake_dmi.c",
    soname="libhydmi.so",
    scenario_env="FAKE_HYGON_DMI_SCENARIO",
    includes=(INCLUDE, HERE),
)
MIG = FakeLibrary(
    source=HERE / "fake_dmi_mig.c",
    soname="libhydmi_mig.so",
    scenario_env="FAKE_HYGON_MIG_SCENARIO",
    includes=(INCLUDE, HERE),
)
FAKES = {"rocm_smi": RSMI, "hydmi": DMI, "hydmi_mig": MIG}

K100_AI_BYTES = 68_702_699_520  # 65520 MiB, a 64 GB K100_AI as ROCm SMI reports it


def missing() -> str | None:
    return RSMI.missing()


def build(directory: Path) -> dict[str, Path]:
    """Compile the three fakes into `directory`; library name -> path."""
    return {name: fake.build(directory) for name, fake in FAKES.items()}


def bdf(bus: int, device: int = 0, function: int = 0, domain: int = 0) -> int:
    """ROCm SMI's BDFID: domain << 32 | bus << 8 | device << 3 | function."""
    return (domain << 32) | (bus << 8) | (device << 3) | function


def bus_id(bus: int, device: int = 0, function: int = 0, domain: int = 0) -> str:
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function:x}"


def card(
    unique_id: int,
    bus: int,
    *,
    name: str = "K100_AI",
    serial: str = "",
    used: int = 0,
    busy: int = 0,
    temp: int | None = 45_000,
    junction: int | None = None,
    power: int = 120_000_000,
    **options: Any,
) -> dict[str, Any]:
    """A card of a scenario: its unique id, PCI bus, name, serial, VRAM used (bytes), busy %,
    edge/junction temperature (millidegrees), power (microwatts). Options: total (bytes),
    ecc_unc, ecc_corr, errors={entry: code}, lost, lost_after, lost_code, gone_after, mig
    (a dict for the MIG library: index, pci_info, max_mig, migs)."""
    doc: dict[str, Any] = {
        "unique_id": unique_id,
        "bdf": bdf(bus),
        "name": name,
        "serial": serial,
        "vram_total": options.pop("total", K100_AI_BYTES),
        "vram_used": used,
        "busy": busy,
        "power": power,
        "faults": dict(options.pop("errors", {})),
    }
    if temp is not None:
        doc["temp_edge"] = temp
    if junction is not None:
        doc["temp_junction"] = junction
    doc.update(options)
    return doc


def process(
    pid: int,
    on: Iterable[tuple[int, int, int | None]],
    *,
    v2: Mapping[str, Any] | None = None,
    errors: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """A process: (device index, VRAM bytes, cu_occupancy % or None for CU_OCCUPANCY_INVALID)
    per device it uses; Hygon's _v2 answer (vram_mib, rates) where given."""
    devices = [
        {"dev": dev, "vram": vram, **({} if cu is None else {"cu": cu})} for dev, vram, cu in on
    ]
    doc: dict[str, Any] = {
        "pid": pid,
        "pasid": pid % 4096,
        "vram": sum(d["vram"] for d in devices),
        "sdma": 0,
        "devices": devices,
        "faults": dict(errors or {}),
    }
    if v2 is not None:
        doc["v2"] = dict(v2)
    return doc


def vdev(
    index: int,
    device: int,
    *,
    cu: int,
    total: int,
    used: int,
    busy: int | None,
    container: int = 0,
    errors: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """A virtual DCU: its node-global index, the physical card's index, CUs, memory (bytes),
    busy % (None: the library does not serve it)."""
    doc: dict[str, Any] = {
        "index": index,
        "device": device,
        "cu": cu,
        "total": total,
        "used": used,
        "container": container,
        "faults": dict(errors or {}),
    }
    if busy is not None:
        doc["busy"] = busy
    return doc


def mig(
    global_index: int,
    gi: int,
    ci: int,
    total: int,
    used: int,
    util: int | None,
    mem_util: int = 0,
) -> dict[str, Any]:
    """A MIG device: its node-global index, GPU and compute instance ids, memory (bytes),
    utilization % (None: not served) and the memory's busy % the same call writes."""
    doc: dict[str, Any] = {"global": global_index, "gi": gi, "ci": ci, "total": total}
    doc["used"] = used
    if util is not None:
        doc["util"] = util
    if mem_util:
        doc["mem_util"] = mem_util
    return doc


def node(
    cards: list[dict[str, Any]],
    processes: Iterable[Mapping[str, Any]] = (),
    vdevs: Iterable[Mapping[str, Any]] = (),
    mig_mode: int = 0,
    **top: Any,
) -> dict[str, Any]:
    """A whole node for the three fakes. Top-level options: driver, init, probe_code, grow,
    grow_always, faults (for the ROCm SMI fake), dmi_faults, mig_faults."""
    return {
        "cards": cards,
        "processes": list(processes),
        "vdevs": list(vdevs),
        "mig_mode": mig_mode,
        **top,
    }


def write(directory: Path, doc: Mapping[str, Any]) -> dict[str, str]:
    """The three scenario files for `doc`; returns the environment naming them."""
    directory.mkdir(parents=True, exist_ok=True)
    cards = doc["cards"]
    rsmi = {
        "driver": doc.get("driver", "6.3.8-V1.11.0"),
        "devices": [{k: v for k, v in c.items() if k != "mig"} for c in cards],
        "processes": list(doc.get("processes", ())),
        "faults": dict(doc.get("faults", {})),
    }
    for key in ("init", "probe_code", "grow", "grow_always", "hang"):
        if key in doc:
            rsmi[key] = doc[key]
    dmi = {
        "devices": [{} for _ in cards],
        "vdevs": list(doc.get("vdevs", ())),
        "faults": dict(doc.get("dmi_faults", {})),
    }
    mig_devices = []
    for i, c in enumerate(cards):
        extra = dict(c.get("mig", {}))
        mig_devices.append(
            {
                "bus_id": bus_id((c["bdf"] >> 8) & 0xFF, (c["bdf"] >> 3) & 0x1F, c["bdf"] & 7),
                "index": extra.pop("index", i),
                "total": c["vram_total"],
                "used": c["vram_used"],
                "migs": extra.pop("migs", []),
                "faults": extra.pop("faults", {}),
                **extra,
            }
        )
    mig = {
        "mode": {"current": doc.get("mig_mode", 0), "pending": doc.get("mig_mode", 0)},
        "devices": mig_devices,
        "faults": dict(doc.get("mig_faults", {})),
    }
    files = {
        RSMI.scenario_env: write_scenario(directory / "rsmi.txt", rsmi),
        DMI.scenario_env: write_scenario(directory / "dmi.txt", dmi),
        MIG.scenario_env: write_scenario(directory / "mig.txt", mig),
    }
    return {env: str(path) for env, path in files.items()}


def registry(root: Path, entries: Iterable[tuple[int, int, int, str]]) -> Path:
    """An /etc/dmi_mig_config as the driver writes it: ci/dev<N>gi<G>ci<C>.conf per compute
    instance, its GPU-instance block, then its own block ending with mig_uuid."""
    ci = root / "ci"
    ci.mkdir(parents=True, exist_ok=True)
    for dev, gi, c, uuid in entries:
        (ci / f"dev{dev}gi{gi}ci{c}.conf").write_text(
            f"dev_id: {dev}\ngi_id: {gi}\nprofile_id: 3\nplacement: 0:1\n"
            f"ci_id: {c}\nci_profile_id: 0\nmig_uuid: {uuid}\n"
        )
    return root
