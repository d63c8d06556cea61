"""Write the synthetic replay scenario fixtures/nodes/c500-8gpu-sgpu-slices/ from the fake
libmxsml: the payload is what the backend's own read() records over the fake, so the scenario is
exactly what the code records, not a hand-typed imitation of it.

    python -m tests.fakelib.metax.replay && UPDATE_GOLDEN=1 pytest tests/test_golden.py -k c500

An 8 x MXC500 node (driver 3.6.11): cards 0-1 whole to a GPUStack Instance; card 2 whole to a
HAMi pod that names it `<node>-metax-2`; card 3 in sGPU mode with two HAMi sGPU slices (one
busy, one idle); card 4 in sGPU mode with a GPUStack slice whose process runs in an sGPU; card
5 with sGPU mode off, time-shared by two GPUStack slices; cards 6-7 idle. The pods, the /proc
tree and the fake's processes are built from the same table here.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

from devicemanager.model import ReadRequest
from tests.fakelib import metax as fake
from tests.fakelib.metax import MIB, card, process, sgpu

REPO = Path(__file__).resolve().parents[3]
NAME = "c500-8gpu-sgpu-slices"
ROOT = REPO / "fixtures" / "nodes" / NAME
NODE = "gpu-c500-03"
NS = "gpustack-workloads"
RESEARCH = "research"
GPU = "metax-tech.com/gpu"


def synthesize() -> ModuleType:
    """fixtures/synthesize.py, for the pod, /proc and id helpers every scenario shares."""
    path = REPO / "fixtures" / "synthesize.py"
    spec = importlib.util.spec_from_file_location("fixtures_synthesize", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


S = synthesize()


def uuid(index: int) -> str:
    return str(S.gpu_uuid(NODE, index))


def sgpu_uuid(index: int, slot: int) -> str:
    return f"GPU-{S.ident(NODE, 'sgpu', str(index), str(slot))}"


def bdf(index: int) -> str:
    return (
        "0000:0e:00.0",
        "0000:0f:00.0",
        "0000:10:00.0",
        "0000:12:00.0",
        "0000:35:00.0",
        "0000:36:00.0",
        "0000:37:00.0",
        "0000:38:00.0",
    )[index]


def cards() -> list[dict[str, Any]]:
    def c500(index: int, used: int, usage: int, temp: float, rails: Any, **extra: Any) -> Any:
        return card(
            uuid(index),
            bdf=bdf(index),
            used_mib=used,
            usage=usage,
            temp=temp,
            power=rails,  # W per 12 V rail, written as mW
            gpu_id=index + 1,  # the DRM card number, as a recorded node shows: not the index
            # Links (synthetic): MetaXLink within each four, across the sockets' interconnect
            # (SYSTEM) between them.
            topo={str(m): 5 if m // 4 == index // 4 else 6 for m in range(index + 1, 8)},
            **extra,
        )

    return [
        c500(0, 59_963, 91, 58.31, (102.4, 100.1, 98.9)),
        c500(1, 59_120, 88, 57.06, (99.8, 98.7, 98.3)),
        c500(2, 41_288, 73, 51.5, (83.1, 82.4, 81.7)),
        c500(
            3,
            16_223,
            29,
            44.12,
            (51.2, 50.6, 50.1),
            sgpu_toggle=1,
            sgpus=[
                sgpu(0, sgpu_uuid(3, 0), vram_mib=16_384, compute=30, usage=2_875, used_mib=15_020),
                sgpu(1, sgpu_uuid(3, 1), vram_mib=8_192, compute=20, usage=0, used_mib=1_203),
            ],
        ),
        c500(
            4,
            3_026,
            5,
            38.7,
            (29.9, 29.3, 29.1),
            sgpu_toggle=1,
            sgpus=[
                sgpu(0, sgpu_uuid(4, 0), vram_mib=16_384, compute=25, usage=512, used_mib=2_100)
            ],
        ),
        c500(5, 30_306, 47, 47.25, (64.2, 63.5, 62.9), sgpu_toggle=0),
        c500(6, 826, 0, 36.0, (19.2, 19.0, 19.0)),
        c500(7, 826, 0, 35.0, (18.9, 18.8, 18.7)),
    ]


# pid -> (namespace, pod, container, qos, GPUs it uses: (card, MiB[, sGPU]))
PROCESSES: dict[int, tuple[str, str, str, str, tuple[tuple[int, ...], ...]]] = {
    51021: (NS, "qwen3-72b-0", "main", "guaranteed", ((0, 58_240), (1, 57_900))),
    51388: (RESEARCH, "hami-train-0", "train", "burstable", ((2, 40_460),)),
    52011: (RESEARCH, "hami-infer-a-0", "main", "burstable", ((3, 15_020, 0),)),
    52033: (RESEARCH, "hami-infer-b-0", "main", "burstable", ((3, 1_203, 1),)),
    53007: (NS, "bge-m3-0", "main", "burstable", ((4, 2_100, 0),)),
    54101: (NS, "qwen3-8b-0", "main", "burstable", ((5, 20_480),)),
    54190: (NS, "gemma-3-4b-0", "main", "burstable", ((5, 9_000),)),
}
CARVED = (3, 4, 5)


def fake_processes() -> list[dict[str, Any]]:
    return [
        process(pid, *((g[0], g[1] * MIB, *g[2:]) for g in gpus))
        for pid, (*_, gpus) in PROCESSES.items()
    ]


def payload(library: Path, directory: Path) -> dict[str, Any]:
    """What the backend's read() records over the fake for this node: every card, and per
    process and per sGPU for the carved ones."""
    from vendors.metax import MetaxBackend

    path = fake.write(directory / "scenario.txt", cards(), fake_processes())
    previous = os.environ.get(fake.SCENARIO_ENV)
    os.environ[fake.SCENARIO_ENV] = str(path)
    sysfs = directory / "sys"
    for index in range(8):  # each card's PCI device and NUMA node: 0-3 on node 0, 4-7 on 1
        pci = sysfs / "bus" / "pci" / "devices" / bdf(index)
        pci.mkdir(parents=True)
        (pci / "numa_node").write_text(f"{index // 4}\n")
    backend = MetaxBackend(
        {"mxsml": str(library)},
        node_name=NODE,
        clock=lambda: 1000.0,  # the topology's `readAt`, the same on every recording
        sysfs=sysfs,
    )
    try:
        backend.open()
        return backend.read(ReadRequest(carved_device_ids=frozenset(uuid(i) for i in CARVED)))
    finally:
        backend.close()
        if previous is None:
            os.environ.pop(fake.SCENARIO_ENV, None)
        else:
            os.environ[fake.SCENARIO_ENV] = previous


VENDOR_META = {
    "kind": "synthetic",
    "manufacturer": "metax",
    "driver": fake.DRIVER,
    "sdk": None,
    "cards": ["MXC500"],
    "source": "devicemanager read() over tests/fakelib/metax/fake_mxsml.c, "
    "written by tests/fakelib/metax/replay.py",
}


def allocation(containers: dict[str, list[dict[str, Any]]]) -> str:
    """device.gpustack.ai/accelerator.allocated for MetaX cards."""
    doc = {
        name: {
            "devices": {"groups": [{"id": 0, "manufacturer": "metax", "accelerators": accs}]},
            "deviceIDs": [f"{a['id']}::{i}" for i, a in enumerate(accs)],
        }
        for name, accs in containers.items()
    }
    return json.dumps(doc, separators=(",", ":"), sort_keys=True)


def accel(index: int, mode: int, units: int) -> dict[str, Any]:
    return {"id": uuid(index), "index": index, "mode": mode, "allocated": units}


def pods() -> list[dict[str, Any]]:
    runner = "gpustack/runner:maca3.0-vllm0.10.2"
    gs = "device.gpustack.ai/accelerator.allocated"

    def limits(**extra: str) -> dict[str, Any]:
        return {"limits": {"cpu": "8", "memory": "32Gi", **extra}}

    sliced = {f"{GPU}.sliced": "1"}
    return [
        S.pod(
            NODE,
            NS,
            "qwen3-72b-0",
            [
                {
                    "name": "main",
                    "image": runner,
                    "resources": {"limits": {"cpu": "32", "memory": "256Gi", GPU: "2"}},
                },
            ],
            instance="qwen3-72b",
            qos="Guaranteed",
            annotations={
                gs: allocation({"main": [accel(0, 1, 1_600_000), accel(1, 1, 1_600_000)]})
            },
        ),
        # HAMi's whole MetaX card: named `<node>-metax-<index>`, never by its UUID.
        S.pod(
            NODE,
            RESEARCH,
            "hami-train-0",
            [
                {
                    "name": "train",
                    "image": "cr.metax-tech.com/public-ai-release/c500/pytorch:2.4",
                    "resources": {"limits": {GPU: "1"}},
                },
            ],
            annotations={
                "hami.io/metax-gpu-devices-allocated": f"{NODE}-metax-2,Metax-GPU,65536,100:;",
                "hami.io/vgpu-node": NODE,
            },
        ),
        # HAMi's sGPU slices: the card's UUID, MemMiB and the compute quota; the sGPU itself is
        # made by MetaX's device plugin and found through the processes that run in it.
        *[
            S.pod(
                NODE,
                RESEARCH,
                name,
                [
                    {
                        "name": "main",
                        "image": "cr.metax-tech.com/public-ai-release/c500/vllm:0.9",
                        "resources": {
                            "limits": {
                                "metax-tech.com/sgpu": "1",
                                "metax-tech.com/vcore": cores,
                                "metax-tech.com/vmemory": gib,
                            }
                        },
                    },
                ],
                annotations={
                    "hami.io/metax-sgpu-devices-allocated": f"{uuid(3)},Metax-SGPU,{mem},{cores}:;",
                    "metax-tech.com/sgpu-qos-policy": "fixed-share",
                    "hami.io/vgpu-node": NODE,
                },
            )
            for name, mem, cores, gib in (
                ("hami-infer-a-0", 16384, "30", "16"),
                ("hami-infer-b-0", 8192, "20", "8"),
            )
        ],
        S.pod(
            NODE,
            NS,
            "bge-m3-0",
            [
                {
                    "name": "main",
                    "image": runner,
                    "resources": limits(**sliced, **{f"{GPU}.sliced.cores-percentage": "25"}),
                },
            ],
            instance="bge-m3",
            annotations={gs: allocation({"main": [accel(4, 3, 400_000)]})},
        ),
        *[
            S.pod(
                NODE,
                NS,
                f"{name}-0",
                [
                    {"name": "main", "image": runner, "resources": limits(**sliced)},
                ],
                instance=name,
                annotations={gs: allocation({"main": [accel(5, 3, 800_000)]})},
            )
            for name in ("qwen3-8b", "gemma-3-4b")
        ],
        S.pod(
            NODE,
            "gpustack-system",
            "gpustack-device-manager-metax-x2k9w",
            [
                {"name": "device-manager", "image": "gpustack/devicemanager:0.1.0"},
            ],
            labels={
                "app.kubernetes.io/component": "device-manager",
                "gpustack.ai/manufacturer": "metax",
            },
        ),
    ]


def proc_tree() -> list[dict[str, Any]]:
    out = []
    for pid, (namespace, name, container, qos, _) in PROCESSES.items():
        pod_uid = S.ident(NODE, "pod", namespace, name)
        cid = S.container_id(NODE, namespace, name, container)
        out.append(
            {
                "pid": pid,
                "comm": "python3",
                "ppid": pid - 17,
                "start": S.BOOT_TICKS + pid % 10_000,
                "cgroup": S.v2_systemd(pod_uid, cid, qos),
            }
        )
    return out


META = {
    "provenance": "synthetic",
    "node": NODE,
    "description": (
        "An 8-card MetaX MXC500 node (64 GiB cards, driver 3.6.11), payload recorded by the "
        "metax backend's read() over the fake libmxsml: cards 0-1 whole to a GPUStack "
        "Instance; card 2 whole to a HAMi pod naming it gpu-c500-03-metax-2; card 3 in sGPU "
        "mode with two HAMi sGPU slices (16 GiB/30% busy at 28.75% of the card, 8 GiB/20% "
        "idle); card 4 in sGPU mode with a GPUStack quarter slice (cap 25%) running in an sGPU "
        "at 5.12%; card 5 with sGPU mode off, time-shared by two GPUStack half slices (their "
        "compute absent: MXSML has no per-process utilization); cards 6-7 idle. Cards 0-3 on "
        "NUMA node 0 and 4-7 on node 1, each four joined by MetaXLink (a synthetic topology, "
        "not recorded). Figures "
        "follow a recorded 8 x C500 node's idle readings; not recorded on hardware."
    ),
}


def write(root: Path, library: Path) -> None:
    """Write the whole scenario under `root` (golden/ and expected.json are left alone)."""
    dump: dict[str, Any] = {"indent": 1, "sort_keys": True}
    with tempfile.TemporaryDirectory() as work:
        recorded = payload(library, Path(work))
    for sub in ("vendors", "proc"):
        shutil.rmtree(root / sub, ignore_errors=True)
    (root / "vendors").mkdir(parents=True, exist_ok=True)
    (root / "scenario.json").write_text(json.dumps(META, **dump) + "\n")
    (root / "vendors" / "metax.json").write_text(
        json.dumps({"meta": VENDOR_META, "payload": recorded}, **dump) + "\n"
    )
    (root / "pods.json").write_text(json.dumps(S.pod_list(pods()), **dump) + "\n")
    S.write_proc(root, proc_tree())


def main() -> int:
    why = fake.missing()
    if why:
        print(f"the fake libmxsml cannot be built here: {why}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as build:
        write(ROOT, fake.build(Path(build)))
    print(f"wrote {ROOT.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
