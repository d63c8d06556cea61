"""The two synthetic K100_AI replay scenarios under fixtures/nodes/, made by what the code
records: the payload is `read()` of the hygon backend over the three fake libraries
(tests/fakelib/hygon) on the named scenarios, and the pods, /proc and kubelet answer are written
here from one table per node. tests/vendors/test_hygon_nodes.py renders them again and fails
when a file is stale. To change one, edit the tables, then

    python -m tests.fakelib.hygon.nodes && UPDATE_GOLDEN=1 pytest tests/test_golden.py

Why two nodes and not one: Hygon's multi-instance mode is the node's (GPUStack measured it on
hardware: a node in MIG mode serves partitions only, no whole card, no logical slice), so whole
cards and a vDCU slice live on one K100_AI node and MIG partitions on another.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from devicemanager.model import ReadRequest
from tests.fakelib import hygon as fake
from tests.fakelib.hygon import scenarios
from tests.fakelib.hygon.scenarios import dcu, mig_uuid

NODES = Path(__file__).resolve().parents[3] / "fixtures" / "nodes"
CREATED = "2026-11-20T08:14:05Z"
STARTED = "2026-11-20T08:16:41Z"
DRIVER_SOURCE = "tests/fakelib/hygon (fake_rsmi.c, fake_dmi.c, fake_dmi_mig.c)"


def ident(*parts: str) -> str:
    return str(uuid.UUID(hashlib.sha256("/".join(parts).encode()).hexdigest()[:32]))


def container_id(*parts: str) -> str:
    return hashlib.sha256("/".join(("ctr", *parts)).encode()).hexdigest()


def gpustack(card: int, mode: int, units: int, **physical: str) -> dict[str, Any]:
    return {"id": dcu(card), "index": card, "mode": mode, "allocated": units, **physical}


# A pod: name, namespace, container, what allocated it, its processes, limits.
#   annotation: ("gpustack", [accelerators]) | ("hami", "<value>") | None (the kubelet's)
#   kubelet:    [(resource, [device ids])] the Hygon device plugin allocated
Pod = dict[str, Any]

WHOLE_AND_VDCU: list[Pod] = [
    {
        "name": "qwen2-72b-0",
        "namespace": "llm",
        "container": "vllm",
        "instance": "qwen2-72b",
        "annotation": ("gpustack", [gpustack(0, 1, 1_600_000), gpustack(1, 1, 1_600_000)]),
        "pids": [51201, 51305],
    },
    {
        "name": "sd-webui-7c9f",
        "namespace": "imagegen",
        "container": "webui",
        # HAMi's dynamic vDCU: the card by index, 8 GiB and 30% of its CUs.
        "annotation": ("hami", "DCU-2,DCU-K100_AI,8192,30:;"),
        "pids": [52110],
    },
    {
        "name": "bge-embed-0",
        "namespace": "rag",
        "container": "embed",
        "instance": "bge-embed",
        "annotation": ("gpustack", [gpustack(3, 3, 800_000)]),
        "limits": {"hygon.com/dcu.sliced.cores-percentage": "50"},
        "pids": [53007],
    },
    {
        "name": "bge-rerank-0",
        "namespace": "rag",
        "container": "rerank",
        "instance": "bge-rerank",
        "annotation": ("gpustack", [gpustack(3, 3, 800_000)]),
        "pids": [53118],
    },
    {
        "name": "chatglm3-6b-0",
        "namespace": "llm",
        "container": "vllm",
        "instance": "chatglm3-6b",
        # GPUStack on a static vDCU: allocatedPhysicalID names it by its own id.
        "annotation": ("gpustack", [gpustack(5, 4, 400_000, allocatedPhysicalID="vDCU-1")]),
        "pids": [55012],
    },
    {
        "name": "paddle-ocr-0",
        "namespace": "doc",
        "container": "ocr",
        "instance": "paddle-ocr",
        # The same, recorded by the configuration file's name (vdev<index>).
        "annotation": ("gpustack", [gpustack(5, 4, 400_000, allocatedPhysicalID="vdev2")]),
        "pids": [55107],
    },
    {
        "name": "batch-infer-5d2k",
        "namespace": "batch",
        "container": "worker",
        # No allocator annotation: the Hygon device plugin's grant, a card by PCI bus id.
        "annotation": None,
        "kubelet": [("hygon.com/dcu", ["0000:83:00.0"])],
        "pids": [],
    },
]

MIG: list[Pod] = [
    {
        "name": "llama3-8b-0",
        "namespace": "llm",
        "container": "vllm",
        "instance": "llama3-8b",
        "annotation": (
            "gpustack",
            [
                gpustack(
                    0,
                    4,
                    400_000,
                    allocatedPhysicalProfile="2g.15gb",
                    allocatedPhysicalID=f"MIG-{mig_uuid(0)}",
                )
            ],
        ),
        "pids": [],
    },
    {
        "name": "whisper-0",
        "namespace": "audio",
        "container": "asr",
        "instance": "whisper",
        "annotation": (
            "gpustack",
            [
                gpustack(
                    0,
                    4,
                    400_000,
                    allocatedPhysicalProfile="2g.15gb",
                    allocatedPhysicalID=f"MIG-{mig_uuid(2)}",
                )
            ],
        ),
        "pids": [],
    },
    {
        "name": "qwen2-14b-0",
        "namespace": "llm",
        "container": "vllm",
        "instance": "qwen2-14b",
        "annotation": (
            "gpustack",
            [
                gpustack(
                    1,
                    4,
                    800_000,
                    allocatedPhysicalProfile="4g.31gb",
                    allocatedPhysicalID=f"MIG-{mig_uuid(4)}",
                )
            ],
        ),
        "pids": [],
    },
]


def pod_doc(node: str, p: Pod) -> dict[str, Any]:
    name, container = p["name"], p["container"]
    uid = ident(node, "pod", name)
    meta: dict[str, Any] = {
        "name": name,
        "namespace": p["namespace"],
        "uid": uid,
        "creationTimestamp": CREATED,
        "labels": {"app": name.rsplit("-", 1)[0]},
        "annotations": {},
        "resourceVersion": str(int(uid[:6], 16)),
    }
    kind, value = p["annotation"] or (None, None)
    if kind == "gpustack":
        meta["annotations"]["device.gpustack.ai/accelerator.allocated"] = json.dumps(
            {
                container: {
                    "devices": {
                        "groups": [{"id": 0, "manufacturer": "hygon", "accelerators": value}]
                    }
                }
            }
        )
    elif kind == "hami":
        meta["annotations"]["hami.io/dcu-devices-allocated"] = value
        meta["annotations"]["hami.io/vgpu-node"] = node
        meta["annotations"]["hami.io/bind-phase"] = "success"
    if "instance" in p:
        owner = ident(node, "instance", p["instance"])
        meta["ownerReferences"] = [
            {
                "apiVersion": "worker.gpustack.ai/v1",
                "kind": "Instance",
                "name": p["instance"],
                "uid": owner,
                "controller": True,
            }
        ]
        meta["labels"]["app.kubernetes.io/part-of"] = owner
    limits = {"cpu": "8", "memory": "64Gi", **p.get("limits", {})}
    for resource, ids in p.get("kubelet", ()):
        limits[resource] = str(len(ids))
    return {
        "metadata": meta,
        "spec": {
            "containers": [
                {
                    "name": container,
                    "image": "image.sourcefind.cn:5000/dcu/admin/base/vllm:0.8.5-dtk25.04",
                    "resources": {"limits": limits},
                }
            ],
            "nodeName": node,
        },
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": container,
                    "containerID": f"containerd://{container_id(node, name, container)}",
                    "ready": True,
                    "restartCount": 0,
                    "started": True,
                    "state": {"running": {"startedAt": STARTED}},
                }
            ],
        },
    }


def proc_files(node: str, p: Pod, pid: int) -> dict[str, str]:
    """cgroup v2, systemd driver, containerd: the path a DTK node's kubelet writes."""
    pod_uid = ident(node, "pod", p["name"]).replace("-", "_")
    cid = container_id(node, p["name"], p["container"])
    path = (
        "/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{pod_uid}.slice/cri-containerd-{cid}.scope"
    )
    return {
        "cgroup": f"0::{path}\n",
        "comm": "python3\n",
        "stat": f"{pid} (python3) S 1 {pid} {pid} 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 32 0 "
        f"{180_000 + pid} 0 0 18446744073709551615 0 0 0 0 0 0 0 16781312 1073745152 0 0 0 "
        "17 3 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
    }


def podresources(p_list: list[Pod]) -> dict[str, Any] | None:
    held = [p for p in p_list if p.get("kubelet")]
    if not held:
        return None
    devices = [
        {"resourceName": r, "deviceIds": ids, "topology": {"nodes": [{"ID": 0}]}}
        for p in held
        for r, ids in p["kubelet"]
    ]
    return {
        "allocatable": {
            "devices": [
                {
                    "resourceName": "hygon.com/dcu",
                    "deviceIds": [fake.bus_id(scenarios.bus(n)) for n in range(8)],
                    "topology": {"nodes": [{"ID": 0}]},
                }
            ]
        },
        "list": {
            "podResources": [
                {
                    "name": p["name"],
                    "namespace": p["namespace"],
                    "containers": [{"name": p["container"], "devices": devices}],
                }
                for p in held
            ]
        },
    }


# scenario name -> (node name, description, the fake node, pods, what read() is asked for,
# the MIG registry)
NODE_TABLE: dict[
    str,
    tuple[
        str,
        str,
        Callable[[], dict[str, Any]],
        list[Pod],
        ReadRequest,
        list[tuple[int, int, int, str]],
    ],
] = {
    "k100ai-8dcu-whole-and-vdcu": (
        "dcu-k100ai-03",
        "An 8-card Hygon K100_AI node (64 GB, 65520 MiB as ROCm SMI reports it; DTK 25.04, "
        "driver 6.3.8) in the normal (non-MIG) mode: cards 0-1 whole to one GPUStack Instance, "
        "card 2 carved by HAMi into a dynamic vDCU (8 GiB, 30% of its CUs; HAMi's "
        "hami.io/dcu-devices-allocated names the card DCU-2), card 3 in two GPUStack 50% logical "
        "slices (one busy with a 50% cores cap, one idle), card 4 whole through the Hygon device "
        "plugin (hygon.com/dcu by PCI bus id, from the kubelet), card 5 carved into two static "
        "vDCUs of 16 GiB held by GPUStack Instances (recorded as vDCU-1 and vdev2; the second on "
        "a libhydmi that does not serve its busy percent). Cards 0-3 on NUMA node 0 and 4-7 on "
        "node 1, each four joined by HSL, PCIe between the fours (a synthetic topology, not "
        "recorded). Synthetic: read() over the fake "
        "Hygon libraries; figures after public K100_AI numbers, not recorded on hardware.",
        scenarios.k100ai_whole_and_slices,
        WHOLE_AND_VDCU,
        ReadRequest(
            carved_device_ids=frozenset({dcu(2), dcu(3)}),
            partition_ids=frozenset({(dcu(5), "vDCU-1"), (dcu(5), "vdev2")}),
        ),
        [],
    ),
    "k100ai-8dcu-mig": (
        "dcu-k100ai-07",
        "An 8-card Hygon K100_AI node with the node in multi-instance mode (Hygon's MIG is "
        "node-wide): card 0 carved in four 2g.15gb instances (16380 MiB each, GPU instances 3-6), "
        "one busy and one idle held by GPUStack Instances, card 1 one 4g.31gb held by a third. "
        "The library has no UUID: partitions are named MIG-<card>/<gi>/<ci>, and the MIG-<uuid> "
        "GPUStack records comes from the driver's /etc/dmi_mig_config. Profile geometry after "
        "GPUStack's measurement on a 64 GB Hygon card; whether K100_AI offers the same profiles "
        "is not verified. Cards 0-3 on NUMA node 0 and 4-7 on node 1, each four joined by HSL, "
        "PCIe between the fours (a synthetic topology, not recorded). Synthetic: read() over "
        "the fake Hygon libraries.",
        scenarios.k100ai_mig,
        MIG,
        ReadRequest(
            partition_ids=frozenset(
                {
                    (dcu(0), f"MIG-{mig_uuid(0)}"),
                    (dcu(0), f"MIG-{mig_uuid(2)}"),
                    (dcu(1), f"MIG-{mig_uuid(4)}"),
                }
            )
        ),
        scenarios.mig_registry(),
    ),
}


def record(name: str, work: Path) -> dict[str, Any]:
    """vendors/hygon.json for one scenario: what read() records over the fakes."""
    import os

    from vendors.hygon import HygonBackend

    _, _, build, _, request, registry = NODE_TABLE[name]
    libs = {k: str(v) for k, v in fake.build(work / "libs").items()}
    env = fake.write(work / "scenario", build())
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        backend = HygonBackend(
            libs,
            mig_config=fake.registry(work / "dmi_mig_config", registry),
            clock=lambda: 1000.0,  # the topology's `readAt`, the same on every render
        )
        backend.open()
        try:
            payload = backend.read(request)
        finally:
            backend.close()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    meta = {
        "kind": "synthetic",
        "manufacturer": "hygon",
        "driver": payload.get("rsmi_version_str_get"),
        "sdk": None,
        "cards": ["K100_AI"],
        "source": f"devicemanager read() over {DRIVER_SOURCE}, scenario {build.__name__}",
    }
    return {"meta": meta, "payload": payload}


def render(name: str, root: Path) -> None:
    """Every input file of one scenario (not its golden/ or expected.json) under root."""
    node, description, _, pods, _, _ = NODE_TABLE[name]
    root.mkdir(parents=True, exist_ok=True)
    dump = lambda doc: json.dumps(doc, indent=1, sort_keys=True) + "\n"  # noqa: E731
    (root / "scenario.json").write_text(
        dump({"description": description, "node": node, "provenance": "synthetic"})
    )
    (root / "vendors").mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="hygon-node-") as work:
        (root / "vendors" / "hygon.json").write_text(dump(record(name, Path(work))))
    (root / "pods.json").write_text(
        dump({"apiVersion": "v1", "kind": "PodList", "items": [pod_doc(node, p) for p in pods]})
    )
    if (answer := podresources(pods)) is not None:
        (root / "podresources.json").write_text(dump(answer))
    proc = root / "proc"
    if proc.exists():
        shutil.rmtree(proc)
    proc.mkdir()
    if not any(p["pids"] for p in pods):
        (proc / "README").write_text(
            "No process of this node is read: its grants are partitions, read on their own\n"
            "handles (R-V4), so the agent makes no per-process query here.\n"
        )
    for p in pods:
        for pid in p["pids"]:
            d = proc / str(pid)
            d.mkdir()
            for file, text in proc_files(node, p, pid).items():
                (d / file).write_text(text)


def inputs(root: Path) -> dict[str, str]:
    """The input files of a scenario directory, by relative path."""
    skip = ("golden/", "expected.json")
    return {
        str(p.relative_to(root)): p.read_text()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not str(p.relative_to(root)).startswith(skip)
    }


if __name__ == "__main__":
    for scenario_name in NODE_TABLE:
        render(scenario_name, NODES / scenario_name)
        print(f"wrote {NODES / scenario_name}")
