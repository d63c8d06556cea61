"""The replay scenario fixtures/nodes/atlas800t-a2-8npu-vnpu-mixed/, written by read() over the
fake libdcmi.so so that its payload is exactly what the backend records.

An Atlas 800T A2 shape: eight 910B2 NPUs, one a card, on driver 25.5.1. Synthetic: the tables
below are the whole input; pods and /proc reuse fixtures/synthesize.py's builders. Regenerate
(gcc needed) and then refresh the goldens:

    .venv/bin/python -m tests.fakelib.ascend.node
    UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_golden.py -k atlas800t

tests/vendors/test_ascend_node.py rewrites the scenario into a temporary directory and fails
when the committed one differs, so it never goes stale.
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

from devicemanager.grants.node import node_grants
from devicemanager.model import Identities, Payload
from devicemanager.node.pods import PodIndex
from tests.fakelib import ascend as fake_dcmi
from tests.fakelib.ascend.scenarios import eight_910b2_hccs
from vendors.ascend import AscendBackend, gpustack_id, hami_id

NAME = "atlas800t-a2-8npu-vnpu-mixed"
NODE = "npu-910b-03"
NS = "gpustack-workloads"
DRIVER = "25.5.1"
MIB = 1048576
SEED = 0x2A0301E3  # the die word a batch of chips shares
IDLE_MB = 3432  # HBM a 910B2 holds with nothing running (GPUStack's 910B2 sample)
REPO = Path(__file__).resolve().parents[3]


def synthesize() -> ModuleType:
    """fixtures/synthesize.py, for its pod, /proc and cgroup builders."""
    spec = importlib.util.spec_from_file_location(
        "fixtures_synthesize", REPO / "fixtures" / "synthesize.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def die(n: int) -> list[int]:
    return fake_dcmi.die(n, SEED)


def npu_id(n: int) -> str:
    return gpustack_id(die(n))


# NPU n -> (HBM used MB, AI-core %, °C, 0.1 W, extra scenario options)
NPUS: dict[int, tuple[int, int, int, int, dict[str, Any]]] = {
    # Qwen3-32B across NPUs 0-1, whole (tensor parallel 2).
    0: (IDLE_MB + 57280, 78, 58, 3120, {}),
    1: (IDLE_MB + 57280, 81, 57, 3088, {}),
    # HAMi: two pods on NPU 2 with a memory and core quota each.
    2: (
        IDLE_MB + 39_000,
        55,
        52,
        2411,
        {"processes": [(41207, 30_000 * MIB), (41388, 9_000 * MIB)]},
    ),
    # Split into two vir04 vNPUs: 100 busy (an embedding model), 101 idle (a reranker).
    3: (
        IDLE_MB + 11_000,
        31,
        49,
        1704,
        {
            "processes": [(42010, 11_000 * MIB)],
            "vdevs": [
                fake_dcmi.vdev(100, "vir04", memory_mb=16384, util=62, used_kb=11_000 * 1024),
                fake_dcmi.vdev(101, "vir04", memory_mb=16384, util=0, used_kb=0),
            ],
        },
    ),
    # One vir08 vNPU: speech recognition.
    4: (
        IDLE_MB + 9_500,
        18,
        47,
        1390,
        {
            "processes": [(42311, 9_500 * MIB)],
            "vdevs": [
                fake_dcmi.vdev(102, "vir08", aic=8, memory_mb=32768, util=18, used_kb=9_500 * 1024)
            ],
        },
    ),
    # A plain Job pod holds NPU 5 whole.
    5: (IDLE_MB + 40_000, 97, 63, 3502, {}),
    6: (3419, 0, 44, 950, {}),
    # A major alarm with the error code DCMI reports for it: unhealthy, and nobody holds it.
    7: (3426, 0, 47, 999, {"health": 2, "error_codes": [0x80E01801]}),
}

# NPU n -> (HBM bandwidth utilization %, vector-core busy %), dcmi_get_device_utilization_rate's
# input types 10 and 12 (issue 41): the Qwen pair moving weights through HBM with the vector
# cores a fifth as busy as the AI Cores, the idle NPUs at 0; NPU 7 (the alarm) answers neither.
ACTIVITY: dict[int, tuple[int, int]] = {
    0: (64, 17),
    1: (66, 18),
    2: (41, 9),
    3: (22, 5),
    4: (12, 3),
    5: (88, 35),
    6: (0, 0),
}


def scenario_devices() -> list[dict[str, Any]]:
    return eight_910b2_hccs(
        [
            fake_dcmi.device(
                n,
                0,
                n=n,
                die=die(n),
                hbm=(65536, used),
                aicore=aicore,
                temp=temp,
                power=power,
                **activity(n),
                **extra,
            )
            for n, (used, aicore, temp, power, extra) in NPUS.items()
        ]
    )


def activity(n: int) -> dict[str, int]:
    if n not in ACTIVITY:
        return {}
    hbm_bandwidth, vector_core = ACTIVITY[n]
    return {"hbm_bandwidth": hbm_bandwidth, "vector_core": vector_core}


def numa_sysfs(root: Path) -> Path:
    """The node's sysfs as the recording saw it: each NPU's PCI device (bus 0xC1 + n) and its
    NUMA node, NPUs 0-3 on node 0 and 4-7 on node 1 (synthetic, after the Atlas 800T A2's two
    sockets)."""
    for n in NPUS:
        pci = root / "bus" / "pci" / "devices" / f"0000:{0xC1 + n:02x}:00.0"
        pci.mkdir(parents=True)
        (pci / "numa_node").write_text(f"{n // 4}\n")
    return root


def gpustack(accelerators: dict[str, list[dict[str, Any]]]) -> dict[str, str]:
    """device.gpustack.ai/accelerator.allocated for Ascend accelerators."""
    doc = {
        name: {
            "devices": {"groups": [{"id": 0, "manufacturer": "ascend", "accelerators": accs}]},
            "deviceIDs": [a["id"] for a in accs],
        }
        for name, accs in accelerators.items()
    }
    return {"device.gpustack.ai/accelerator.allocated": json.dumps(doc, sort_keys=True)}


def whole(n: int) -> dict[str, Any]:
    return {"id": npu_id(n), "index": n, "mode": 1, "allocated": 1_600_000}


def vnpu(n: int, recorded: str, template: str, units: int) -> dict[str, Any]:
    return {
        "id": npu_id(n),
        "index": n,
        "mode": 4,
        "allocated": units,
        "allocatedPhysicalProfile": template,
        "allocatedPhysicalID": recorded,
    }


def hami(n: int, memory_mib: int, cores: int) -> dict[str, str]:
    # UUID,Type,MemMiB,Cores per device, ':' after each, ';' after each container.
    device = f"{hami_id(die(n))},Ascend910B,{memory_mib},{cores}"
    return {
        "hami.io/Ascend910B-devices-allocated": f"{device}:;",
        "hami.io/vgpu-node": NODE,
        "hami.io/bind-phase": "success",
    }


RUNNER = "gpustack/runner:cann8.2-vllm-ascend0.10.2"


def pods(s: ModuleType) -> list[dict[str, Any]]:
    main = {"name": "main", "image": RUNNER}

    def limits(**values: str) -> dict[str, Any]:
        return {"resources": {"limits": {"cpu": "8", "memory": "64Gi", **values}}}

    return [
        s.pod(
            NODE,
            NS,
            "qwen3-32b-0",
            [{**main, **limits(**{"huawei.com/Ascend910": "2"})}],
            instance="qwen3-32b",
            annotations=gpustack({"main": [whole(0), whole(1)]}),
        ),
        s.pod(
            NODE,
            "research",
            "hami-llm-a-0",
            [
                {
                    **main,
                    **limits(
                        **{"huawei.com/Ascend910B": "1", "huawei.com/Ascend910B-memory": "32768"}
                    ),
                },
            ],
            annotations=hami(2, 32768, 50),
        ),
        s.pod(
            NODE,
            "research",
            "hami-llm-b-0",
            [
                {
                    **main,
                    **limits(
                        **{"huawei.com/Ascend910B": "1", "huawei.com/Ascend910B-memory": "16384"}
                    ),
                },
            ],
            annotations=hami(2, 16384, 25),
        ),
        # vNPUs recorded three ways: the bare vdev id, the device plugin's id, the device node.
        s.pod(
            NODE,
            NS,
            "bge-m3-0",
            [main],
            instance="bge-m3",
            annotations=gpustack({"main": [vnpu(3, "100", "vir04", 266_666)]}),
        ),
        s.pod(
            NODE,
            NS,
            "bge-reranker-0",
            [main],
            instance="bge-reranker",
            annotations=gpustack({"main": [vnpu(3, "Ascend910-4c-101-3", "vir04", 266_666)]}),
        ),
        s.pod(
            NODE,
            NS,
            "whisper-large-0",
            [main],
            instance="whisper-large",
            annotations=gpustack({"main": [vnpu(4, "vdavinci102", "vir08", 533_333)]}),
        ),
        s.pod(
            NODE,
            "batch",
            "npu-burn-in-7xk2q",
            [
                {"name": "burn", "image": "ascendhub/ascend-toolkit:8.2.rc1"},
            ],
            annotations=gpustack({"burn": [whole(5)]}),
        ),
        s.pod(
            NODE,
            "gpustack-system",
            "gpustack-device-manager-ascend-p2m8d",
            [
                {"name": "device-manager", "image": "gpustack/devicemanager:0.1.0"},
            ],
            labels={
                "app.kubernetes.io/component": "device-manager",
                "gpustack.ai/manufacturer": "ascend",
            },
        ),
    ]


# PID -> (namespace, pod, container)
PROCESSES = {
    41207: ("research", "hami-llm-a-0", "main"),
    41388: ("research", "hami-llm-b-0", "main"),
    42010: (NS, "bge-m3-0", "main"),
    42311: (NS, "whisper-large-0", "main"),
}


def proc_entries(s: ModuleType) -> list[dict[str, Any]]:
    return [
        {
            "pid": pid,
            "comm": "python3",
            "ppid": pid - 17,
            "start": s.BOOT_TICKS + pid % 10_000,
            "cgroup": s.v2_systemd(
                s.ident(NODE, "pod", ns, name),
                s.container_id(NODE, ns, name, container),
                "burstable",
            ),
        }
        for pid, (ns, name, container) in PROCESSES.items()
    ]


def record(lib: Path, pod_docs: list[dict[str, Any]], scratch: Path) -> Payload:
    """The payload a steady round records: the request from the pods' grants named by the
    identities the previous round learnt, as the live agent makes it."""
    before = os.environ.get(fake_dcmi.SCENARIO_ENV)
    os.environ[fake_dcmi.SCENARIO_ENV] = str(
        fake_dcmi.write(scratch / "scenario.txt", scenario_devices(), DRIVER)
    )
    recorded = node_grants(PodIndex.of(pod_docs))
    backend = AscendBackend(
        {"dcmi": str(lib)},
        clock=lambda: 1000.0,  # the topology's `readAt`, the same on every recording
        sysfs=numa_sysfs(scratch / "sys"),
    )
    try:
        backend.open()
        first = backend.parse(backend.read(recorded.request("ascend")))
        identities = Identities().updated("ascend", [*first.cards, *first.partitions])
        return backend.read(recorded.resolve(identities).request("ascend"))
    finally:
        backend.close()
        if before is None:
            os.environ.pop(fake_dcmi.SCENARIO_ENV, None)
        else:
            os.environ[fake_dcmi.SCENARIO_ENV] = before


DESCRIPTION = (
    "An Atlas 800T A2 shape: eight Ascend 910B2 NPUs (65536 MB HBM, 24 AI cores each), one per "
    "card, driver 25.5.1. NPUs 0-1 whole to one Instance (Qwen3-32B, 57280 MB a worker, the "
    "figure npu-smi showed for a vLLM worker on a 910B2); NPU 2 carved by HAMi for two pods "
    "(32768 MiB/50% and 16384 MiB/25%, 30000 and 9000 MiB used); NPU 3 split into two vir04 "
    "vNPUs, vdev 100 busy (62% AI core, 11000 MiB) and vdev 101 idle, and NPU 4 into one vir08 "
    "(vdev 102), held by Instances that recorded them as the bare vdev id, the device plugin's "
    "Ascend910-4c-101-3 and vdavinci102; NPU 5 whole to a plain Job pod; NPU 6 idle; NPU 7 "
    "raising a major alarm, with the error code 0x80E01801 active. Links: the eight NPUs "
    "joined to each other by HCCS, NPUs 0-3 on NUMA node 0 and 4-7 on node 1 (a synthetic "
    "topology after the Atlas 800T A2's, not recorded). The payload is what "
    "read() records over the fake libdcmi.so "
    "(tests/fakelib/ascend/node.py); processes in a vNPU are assumed to be listed on its "
    "physical NPU too. Not recorded on hardware."
)


def write(root: Path, lib: Path) -> None:
    s = synthesize()
    pod_docs = pods(s)
    with tempfile.TemporaryDirectory() as scratch:
        payload = record(lib, pod_docs, Path(scratch))
    for sub in ("vendors", "proc"):
        shutil.rmtree(root / sub, ignore_errors=True)
    (root / "vendors").mkdir(parents=True)
    dump: dict[str, Any] = {"indent": 1, "sort_keys": True}
    meta = {"provenance": "synthetic", "node": NODE, "description": DESCRIPTION}
    (root / "scenario.json").write_text(json.dumps(meta, **dump) + "\n")
    vendor_meta = {
        "kind": "synthetic",
        "manufacturer": "ascend",
        "driver": DRIVER,
        "sdk": None,
        "cards": ["Ascend910B2"],
        "source": "devicemanager read() over tests/fakelib/ascend/fake_dcmi.c, "
        "written by tests/fakelib/ascend/node.py",
    }
    (root / "vendors" / "ascend.json").write_text(
        json.dumps({"meta": vendor_meta, "payload": payload}, **dump) + "\n"
    )
    (root / "pods.json").write_text(json.dumps(s.pod_list(pod_docs), **dump) + "\n")
    s.write_proc(root, proc_entries(s))


def main() -> int:
    if why := fake_dcmi.missing():
        print(f"cannot build the fake libdcmi: {why}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as build:
        write(REPO / "fixtures" / "nodes" / NAME, fake_dcmi.build(Path(build)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
