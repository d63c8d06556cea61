"""The scenario document both NVML-family fakes answer from (tests/fakelib/nvidia/fake_nvml.c
and tests/fakelib/thead/fake_hgml.c): the same cards, processes, samples, MIG slots and GPM
answers, since HGML is NVML's clone. Each fake adds its own defaults (driver, names)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tests.fakelib import write_scenario

MIB = 1048576


def device(
    uuid: str,
    name: str = "NVIDIA A100-SXM4-40GB",
    total_mib: int = 40960,
    used_mib: int = 1024,
    **options: Any,
) -> dict[str, Any]:
    """A card of a scenario. Options: util=(gpu, mem), temp, power (mW), reserved (bytes),
    mig_mode=(cur, pend), processes=[(pid, bytes | "na"[, gi, ci])], samples=[(pid, ts, sm,
    mem)], grow=(n, "once" | "always"), errors={entry point: code}, migs=[{slot, uuid, gi,
    total_mib, used_mib, sm (GPM SM activity, %), gpm_metrics {id: value} (the instance's other
    GPM ids), errors}], gpm (1: the card serves GPM), lost,
    lose_after (identity reads), gone_after (enumerations), xid, remapped=(corr, unc, pending,
    failure), retired_pending, index."""
    doc: dict[str, Any] = {
        "uuid": uuid,
        "name": name,
        "memory": {
            "total": total_mib * MIB,
            "used": used_mib * MIB,
            "reserved": options.pop("reserved", 512 * MIB),
        },
    }
    if "util" in options:
        gpu, mem = options.pop("util")
        doc["util"] = {"gpu": gpu, "memory": mem}
    if "mig_mode" in options:
        current, pending = options.pop("mig_mode")
        doc["mig_mode"] = {"current": current, "pending": pending}
    if "remapped" in options:
        doc["remapped"] = dict(
            zip(("corr", "unc", "pending", "failure"), options.pop("remapped"), strict=True)
        )
    if "grow" in options:
        n, mode = options.pop("grow")
        doc["grow"] = n
        doc["grow_always"] = mode == "always"
    doc["processes"] = [
        {"pid": p[0], "memory": p[1], **({"gi": p[2], "ci": p[3]} if len(p) > 2 else {})}
        for p in options.pop("processes", ())
    ]
    doc["samples"] = [
        {"pid": pid, "ts": ts, "sm": sm, "mem": mem}
        for pid, ts, sm, mem in options.pop("samples", ())
    ]
    doc["faults"] = dict(options.pop("errors", {}))
    doc["migs"] = [
        {
            "slot": m["slot"],
            "uuid": m["uuid"],
            "gi": m.get("gi", m["slot"]),
            "memory": {"total": m["total_mib"] * MIB, "used": m.get("used_mib", 0) * MIB},
            "faults": dict(m.get("errors", {})),
            **({"sm": m["sm"]} if "sm" in m else {}),
            **({"gpm_metrics": dict(m["gpm_metrics"])} if "gpm_metrics" in m else {}),
        }
        for m in options.pop("migs", ())
    ]
    if "lose_after" in options:
        doc["lost_after"] = options.pop("lose_after")
    doc.update(options)  # temp, power, lost, gone_after, xid, retired_pending, index, gpm
    return doc


def scenario(driver: str, devices: Iterable[Mapping[str, Any]], **top: Any) -> dict[str, Any]:
    """A whole scenario: the driver version, the cards, and any of the kit's top-level keys
    (init, faults, hang)."""
    return {"driver": driver, "devices": list(devices), **top}


def write(path: Path, driver: str, devices: Iterable[Mapping[str, Any]], **top: Any) -> Path:
    return write_scenario(path, scenario(driver, devices, **top))


def write_sysfs(root: Path, devices: Iterable[Mapping[str, Any]]) -> Path:
    """The sysfs tree under `root` that names the NUMA node each card of a scenario is attached
    to (its `numa` key, written as the kernel writes it, "-1" for none) at its PCI bus id (its
    `bus_id`, else the fake's default `00000000:<0x10 + position>:00.0`), as the kernel does; a
    card without `numa` has no entry. The fake library answers nvmlDeviceGetNumaNodeId from
    `gpu_numa` only (issue 43): the node a card is attached to is the kernel's."""
    for position, doc in enumerate(devices):
        if "numa" not in doc:
            continue
        bus = str(doc.get("bus_id", f"00000000:{0x10 + position:02X}:00.0"))
        domain, rest = bus.split(":", 1)
        pci = root / "bus" / "pci" / "devices" / f"{int(domain, 16):04x}:{rest.lower()}"
        pci.mkdir(parents=True, exist_ok=True)
        (pci / "numa_node").write_text(f"{doc['numa']}\n")
    return root
