"""The replay scenario fixtures/nodes/mi300x-8gpu-cpx-mixed/, written from the fake ROCm install:
the payload is what the amd backend's read() records over tests/fakelib/amd (the real amdsmi
wheel over the fake libamd_smi.so), two rounds 15 s apart so rates from engine time exist, and
asked for exactly what the pods' grants make the monitor ask for. tests/vendors/test_amd_node.py
re-writes it into a temporary directory and fails when the committed copy is stale;
UPDATE_GOLDEN=1 rewrites it in place.

The node: eight MI300X (ROCm 7.0.2, amdgpu 6.12.12). Cards 0-1 whole to one Instance (GPUStack
records them as GPU-<ASIC serial>); card 2 carved by HAMi into two slices (its AMD device
plugin records the amdsmi UUID), one busy; card 3 in CPX mode, eight XCPs: XCP 0 and XCP 2 held
as partitions (one busy, one idle), XCP 5 held whole by a pod whose allocation names its UUID;
card 4 carved by GPUStack into two 50% slices (one process's engine time advancing, one KFD
process whose CUs are known); card 5 Shared by two notebooks; card 6 carved into two slices
whose process list is longer than amdsmi's 1,024-row buffer (OUT_OF_RESOURCES); card 7 idle.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import uuid as uuidlib
from pathlib import Path
from typing import Any

from tests.fakelib import amd as fake
from tests.fakelib.amd import GIB, card, cpx_card, process, scenario

NAME = "mi300x-8gpu-cpx-mixed"
NODE = "gpu-mi300x-03"
ROCM = "7.0.2"
DRIVER = "6.12.12"
PERIOD = 15.0
SECOND = 1_000_000_000
NS = "gpustack-workloads"
CREATED = "2026-11-20T08:14:05Z"
STARTED = "2026-11-20T08:16:41Z"
BOOT_TICKS = 240_000
CORES = "amd.com/gpu.sliced.cores-percentage"

DESCRIPTION = (
    "An 8-card AMD Instinct MI300X node (ROCm 7.0.2, amdgpu 6.12.12): cards 0-1 whole to one "
    "Instance by GPUStack's GPU-<ASIC serial> ids, card 2 carved by HAMi into two slices (one "
    "busy), card 3 in CPX mode (eight XCPs with their own UUIDs; secondary XCPs answer N/A for "
    "activity, power and temperature on their handles, and the card's GPU metrics table states "
    "each XCP's own GFX busy) with pods on XCP 0 (busy) and XCP 2 (idle) as partitions and on "
    "XCP 5 whole (busy), card 4 carved by GPUStack into two 50% slices (engine time advancing "
    "for one process, KFD CU occupancy for the other), card 5 Shared by two notebooks, card 6 "
    "carved with a process list longer than amdsmi's 1,024-row buffer (OUT_OF_RESOURCES: "
    "truncated, never complete), card 7 idle. Health figures (R-X7: ECC counts, bad pages, "
    "throttle flags, energy, clocks, PCIe replays) are synthetic: card 0 at its power cap, card "
    "2 with two retired pages, card 4 with one pending, card 6 power- and thermal-throttled. "
    "Recorded by read() over the fake ROCm install of tests/fakelib/amd, not on hardware."
)


def ident(*parts: str) -> str:
    return str(uuidlib.UUID(hashlib.md5("/".join(parts).encode()).hexdigest()))


def container_id(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()


def xcp(k: int) -> str:
    return fake.uuid_of(3, k, NODE)


def devices() -> list[dict[str, Any]]:
    n = NODE
    return [
        card(
            0,
            node=n,
            used_mib=183_402,
            gfx=96,
            power_w=702,
            hotspot=78,
            processes=[process(40001, 179 * GIB, cu=290)],
        ),
        card(
            1,
            node=n,
            used_mib=183_399,
            gfx=94,
            power_w=695,
            hotspot=77,
            processes=[process(40001, 179 * GIB, cu=288)],
        ),
        card(
            2,
            node=n,
            used_mib=102_500,
            gfx=41,
            power_w=388,
            hotspot=58,
            processes=[process(41001, 80 * GIB, cu=120), process(41002, 20 * GIB, cu=0)],
        ),
        *cpx_card(
            3,
            node=n,
            bus=0x75,
            render_base=131,
            power_w=421,
            hotspot=61,
            xcps=[
                {"used_mib": 18_800, "gfx": 82, "processes": [process(42001, 18 * GIB, cu=30)]},
                {"used_mib": 0},
                {"used_mib": 310},
                {"used_mib": 0},
                {"used_mib": 0},
                {
                    "used_mib": 21_000,
                    "xcc_busy": [37],
                    "processes": [process(42005, 20 * GIB, cu=37)],
                },
            ],
        ),
        card(
            4,
            node=n,
            bus=0x85,
            used_mib=72_000,
            gfx=52,
            power_w=455,
            hotspot=63,
            render=139,
            card=11,
            processes=[
                process(
                    43001, 50 * GIB, gfx_ns=1_800 * SECOND, gfx_step_ns=9 * SECOND // 2, cu=150
                ),
                process(43002, 20 * GIB, cu=38),
            ],
        ),
        card(
            5,
            node=n,
            bus=0x95,
            used_mib=30_100,
            gfx=17,
            power_w=233,
            hotspot=49,
            render=140,
            card=12,
            processes=[process(44001, 14 * GIB, cu=20), process(44002, 15 * GIB, cu=31)],
        ),
        card(
            6,
            node=n,
            bus=0xE5,
            used_mib=160_000,
            gfx=99,
            power_w=731,
            hotspot=80,
            render=141,
            card=13,
            processes=[process(46001, 60 * GIB, cu=200)],
            grow=2,
            grow_always=True,
        ),
        card(
            7, node=n, bus=0xF5, used_mib=283, gfx=0, power_w=132, hotspot=39, render=142, card=14
        ),
    ]


def placed(devs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The node's links and placement (R-X3), as an MI300X platform has them: every card's
    board joined to every other by xGMI (one hop), cards 0-3 on NUMA node 0 and 4-7 on node 1."""
    boards = [i for i, d in enumerate(devs) if d.get("partition", 0) == 0]
    for i in boards:
        devs[i]["numa"] = 0 if devs[i]["socket"] < 4 else 1
        devs[i]["links"] = {str(j): {"type": 2, "hops": 1} for j in boards if j > i}
    return devs


def allocation(containers: dict[str, list[dict[str, Any]]]) -> str:
    doc = {
        name: {"devices": {"groups": [{"id": 0, "manufacturer": "amd", "accelerators": accs}]}}
        for name, accs in containers.items()
    }
    return json.dumps(doc, separators=(",", ":"), sort_keys=True)


def pod(
    name: str,
    containers: list[dict[str, Any]],
    *,
    namespace: str = NS,
    instance: str | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    uid = ident(NODE, "pod", namespace, name)
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid,
        "creationTimestamp": CREATED,
        "labels": {},
        "annotations": dict(annotations or {}),
    }
    if instance is not None:
        owner = ident(NODE, "instance", namespace, instance)
        meta["ownerReferences"] = [
            {
                "apiVersion": "worker.gpustack.ai/v1",
                "kind": "Instance",
                "name": instance,
                "uid": owner,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        meta["labels"]["app.kubernetes.io/part-of"] = owner
        meta["labels"]["app.kubernetes.io/name"] = instance
    statuses = [
        {
            "name": c["name"],
            "ready": True,
            "restartCount": 0,
            "started": True,
            "image": c["image"],
            "imageID": f"{c['image']}@sha256:{container_id(name, c['name'])}",
            "containerID": f"containerd://{container_id(NODE, namespace, name, c['name'])}",
            "state": {"running": {"startedAt": STARTED}},
        }
        for c in containers
    ]
    return {
        "metadata": meta,
        "spec": {
            "nodeName": NODE,
            "containers": [
                {"name": c["name"], "image": c["image"], "resources": c.get("resources", {})}
                for c in containers
            ],
        },
        "status": {
            "phase": "Running",
            "qosClass": "Burstable",
            "containerStatuses": statuses,
            "startTime": CREATED,
        },
    }


VLLM = "rocm/vllm:rocm7.0.2_vllm_0.10.1"


def pods() -> list[dict[str, Any]]:
    n = NODE
    whole = {"resources": {"limits": {"amd.com/gpu": "2"}}}
    sliced = {"resources": {"limits": {"amd.com/gpu.sliced": "1", CORES: "50"}}}
    gpustack = "device.gpustack.ai/accelerator.allocated"
    physical = fake.gpustack_id(3, n)
    hami = f"{fake.uuid_of(2, 0, n)},AMD Instinct MI300X,98296,50:;"
    return [
        pod(
            "llama-3-1-405b-0",
            [{"name": "main", "image": VLLM, **whole}],
            instance="llama-3-1-405b",
            annotations={
                gpustack: allocation(
                    {
                        "main": [
                            {
                                "id": fake.gpustack_id(0, n),
                                "index": 0,
                                "mode": 1,
                                "allocated": 1_600_000,
                            },
                            {
                                "id": fake.gpustack_id(1, n),
                                "index": 1,
                                "mode": 1,
                                "allocated": 1_600_000,
                            },
                        ]
                    }
                )
            },
        ),
        # HAMi: UUID,Type,MemMiB,Cores per device; its AMD device plugin registers the amdsmi UUID.
        pod(
            "hami-train-0",
            [{"name": "train", "image": "rocm/pytorch:rocm7.0.2"}],
            namespace="research",
            annotations={"hami.io/amd-devices-allocated": hami},
        ),
        pod(
            "hami-eval-0",
            [{"name": "eval", "image": "rocm/pytorch:rocm7.0.2"}],
            namespace="research",
            annotations={"hami.io/amd-devices-allocated": hami},
        ),
        pod(
            "embed-0",
            [{"name": "main", "image": VLLM}],
            instance="bge-m3",
            annotations={
                gpustack: allocation(
                    {
                        "main": [
                            {
                                "id": physical,
                                "index": 3,
                                "mode": 4,
                                "allocated": 200_000,
                                "allocatedPhysicalID": xcp(0),
                                "allocatedPhysicalProfile": "cpx",
                            },
                        ]
                    }
                )
            },
        ),
        pod(
            "rerank-0",
            [{"name": "main", "image": VLLM}],
            instance="bge-reranker",
            annotations={
                gpustack: allocation(
                    {
                        "main": [
                            {
                                "id": physical,
                                "index": 3,
                                "mode": 4,
                                "allocated": 200_000,
                                "allocatedPhysicalID": xcp(2),
                                "allocatedPhysicalProfile": "cpx",
                            },
                        ]
                    }
                )
            },
        ),
        pod(
            "whisper-0",
            [{"name": "main", "image": VLLM}],
            instance="whisper",
            annotations={
                gpustack: allocation(
                    {
                        "main": [
                            {"id": xcp(5), "index": 8, "mode": 1, "allocated": 1_600_000},
                        ]
                    }
                )
            },
        ),
        pod(
            "qwen3-32b-0",
            [{"name": "main", "image": VLLM, **sliced}],
            instance="qwen3-32b",
            annotations={
                gpustack: allocation(
                    {
                        "main": [
                            {
                                "id": fake.gpustack_id(4, n),
                                "index": 12,
                                "mode": 3,
                                "allocated": 800_000,
                            },
                        ]
                    }
                )
            },
        ),
        pod(
            "gemma-3-27b-0",
            [{"name": "main", "image": VLLM, **sliced}],
            instance="gemma-3-27b",
            annotations={
                gpustack: allocation(
                    {
                        "main": [
                            {
                                "id": fake.gpustack_id(4, n),
                                "index": 12,
                                "mode": 3,
                                "allocated": 800_000,
                            },
                        ]
                    }
                )
            },
        ),
        pod(
            "notebook-a-0",
            [{"name": "main", "image": "rocm/pytorch:rocm7.0.2"}],
            instance="nb-a",
            annotations={
                gpustack: allocation(
                    {
                        "main": [
                            {
                                "id": fake.gpustack_id(5, n),
                                "index": 13,
                                "mode": 2,
                                "allocated": 1_600_000,
                            },
                        ]
                    }
                )
            },
        ),
        pod(
            "notebook-b-0",
            [{"name": "main", "image": "rocm/pytorch:rocm7.0.2"}],
            instance="nb-b",
            annotations={
                gpustack: allocation(
                    {
                        "main": [
                            {
                                "id": fake.gpustack_id(5, n),
                                "index": 13,
                                "mode": 2,
                                "allocated": 1_600_000,
                            },
                        ]
                    }
                )
            },
        ),
        pod(
            "batch-0",
            [{"name": "main", "image": VLLM, **sliced}],
            instance="batch",
            annotations={
                gpustack: allocation(
                    {
                        "main": [
                            {
                                "id": fake.gpustack_id(6, n),
                                "index": 14,
                                "mode": 3,
                                "allocated": 800_000,
                            },
                        ]
                    }
                )
            },
        ),
        pod(
            "batch-1",
            [{"name": "main", "image": VLLM, **sliced}],
            instance="batch-b",
            annotations={
                gpustack: allocation(
                    {
                        "main": [
                            {
                                "id": fake.gpustack_id(6, n),
                                "index": 14,
                                "mode": 3,
                                "allocated": 800_000,
                            },
                        ]
                    }
                )
            },
        ),
    ]


# pid -> (pod, container, namespace)
PROCESSES = {
    40001: ("llama-3-1-405b-0", "main", NS),
    41001: ("hami-train-0", "train", "research"),
    41002: ("hami-eval-0", "eval", "research"),
    42001: ("embed-0", "main", NS),
    42005: ("whisper-0", "main", NS),
    43001: ("qwen3-32b-0", "main", NS),
    43002: ("gemma-3-27b-0", "main", NS),
    44001: ("notebook-a-0", "main", NS),
    44002: ("notebook-b-0", "main", NS),
    46001: ("batch-0", "main", NS),
}


def stat_line(pid: int, start: int) -> str:
    fields = [str(pid), "(python3)", "S", "1", str(pid), str(pid), "0", "-1", "4194560"]
    fields += ["0"] * 12 + [str(start)] + ["0"] * 30
    return " ".join(fields) + "\n"


def write_proc(root: Path) -> None:
    for pid, (name, container, namespace) in PROCESSES.items():
        d = root / "proc" / str(pid)
        d.mkdir(parents=True, exist_ok=True)
        uid = ident(NODE, "pod", namespace, name).replace("-", "_")
        cid = container_id(NODE, namespace, name, container)
        (d / "cgroup").write_text(
            f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid}.slice/"
            f"cri-containerd-{cid}.scope\n"
        )
        (d / "comm").write_text("python3\n")
        (d / "stat").write_text(stat_line(pid, BOOT_TICKS + pid % 10_000))


def health(devs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The boards' health figures (R-X7), synthetic, as a busy MI300X node could show them:
    card 0 (702 W of its 750 W) held at its power cap, with 4,000,000,000 counts of 15.3 µJ
    of energy and 3 corrected ECC errors; card 2 with 41 corrected errors, two pages retired
    long ago and 2 PCIe replays; card 4 with 7 corrected errors and one page pending retirement;
    card 6 (80 °C, 731 W) held by both its power cap and its socket's thermal limit, its
    graphics clock down to 1,420 MHz; card 7's firmware not serving the PROCHOT and VR flags
    (UINT8_MAX). Every board's ECC on the blocks amdsmi enables by default; no uncorrectable
    error and no page that could not be retired, so no card is unhealthy."""
    boards = {d["socket"]: d for d in devs if d.get("partition", 0) == 0}
    boards[0].update(
        ecc={"correctable": 3, "uncorrectable": 0},
        energy={"accumulator": 4_000_000_000, "resolution": 15.3},
        violation={"ppt": 1},
    )
    boards[2].update(
        ecc={"correctable": 41, "uncorrectable": 0},
        bad_pages=[
            {"address": 0x1F_2A40_0000, "size": 4096, "status": 0},
            {"address": 0x1F_2A40_1000, "size": 4096, "status": 0},
        ],
        pcie_replays=2,
    )
    boards[4].update(
        ecc={"correctable": 7, "uncorrectable": 0, "deferred": 1},
        bad_pages=[{"address": 0x2C_0000_3000, "size": 4096, "status": 1}],
    )
    boards[6].update(violation={"ppt": 1, "socket": 1}, clocks={"gfx": 1420, "mem": 1300})
    boards[7].update(violation={"prochot": 0xFF, "vr": 0xFF})
    return devs


def payload(rocm_root: Path, work: Path) -> dict[str, Any]:
    """Two rounds of the amd backend's read() over the fake, asked what the pods' grants ask."""
    import os

    from devicemanager.grants.node import node_grants
    from devicemanager.model import Identities, ReadRequest
    from devicemanager.node.pods import PodIndex
    from vendors.amd import AmdBackend

    doc = scenario(health(placed(devices())), rocm=ROCM, driver=DRIVER)
    previous = os.environ.get(fake.SCENARIO_ENV)
    os.environ[fake.SCENARIO_ENV] = str(fake.write(work / "scenario.txt", doc))
    ticks = iter([1000.0, 1000.0 + PERIOD, 1000.0 + 2 * PERIOD])
    backend = AmdBackend(
        {"amd_smi": str(rocm_root)},
        clock=lambda: next(ticks),
        sysfs=fake.sysfs(work / "sys", doc["devices"]),
    )
    try:
        backend.open()
        try:
            # Round one learns the identities; the grants, named canonically, ask rounds two
            # and three, and the third is recorded.
            reading = backend.parse(backend.read(ReadRequest()))
            identities = Identities().updated("amd", [*reading.cards, *reading.partitions])
            grants = node_grants(PodIndex.of(pods())).resolve(identities)
            request = grants.request("amd")
            backend.read(request)
            return backend.read(request)
        finally:
            backend.close()
    finally:
        if previous is None:
            os.environ.pop(fake.SCENARIO_ENV, None)
        else:
            os.environ[fake.SCENARIO_ENV] = previous


def write(root: Path, rocm_root: Path, work: Path) -> None:
    """The scenario's files under `root` (scenario.json, vendors/amd.json, pods.json, proc/)."""
    recorded = payload(rocm_root, work)
    for sub in ("vendors", "proc"):
        shutil.rmtree(root / sub, ignore_errors=True)
    (root / "vendors").mkdir(parents=True, exist_ok=True)
    dump: dict[str, Any] = {"indent": 1, "sort_keys": True}
    meta = {"provenance": "synthetic", "node": NODE, "description": DESCRIPTION}
    (root / "scenario.json").write_text(json.dumps(meta, **dump) + "\n")
    vendor_meta = {
        "kind": "synthetic",
        "manufacturer": "amd",
        "driver": DRIVER,
        "rocm": ROCM,
        "sdk": "amdsmi 7.0.2",
        "cards": ["AMD Instinct MI300X"],
        "note": "recorded by read() over tests/fakelib/amd (tests/fakelib/amd/node.py)",
    }
    (root / "vendors" / "amd.json").write_text(
        json.dumps({"meta": vendor_meta, "payload": recorded}, **dump) + "\n"
    )
    pod_list = {
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": "51200417"},
        "items": pods(),
    }
    (root / "pods.json").write_text(json.dumps(pod_list, **dump) + "\n")
    write_proc(root)
