"""`devicemanager summarize` (R-X1): golden reports over public pastes, key figures checked by
hand, the agent's own /metrics, the JSON contract, and the command's exit codes.

Goldens live in fixtures/summarize/golden/; UPDATE_GOLDEN=1 rewrites them. The hand-written
expectations below do not come from the goldens: each was worked out from the fixture text.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from devicemanager.figures import exposition
from devicemanager.figures.figures import Pair, PodLevel
from devicemanager.grants.grants import InstanceRef
from devicemanager.report import summarize_texts, to_json, to_text
from devicemanager.report.model import Report
from devicemanager.serve.mint import self_signed
from tests.conftest import FIXTURES, NODES, REPO, SCENARIOS, Agent, agent_env, scenario_monitor
from tests.kube_server import issue_ca, issue_leaf

SUMMARIZE = FIXTURES / "summarize"
GOLDEN = SUMMARIZE / "golden"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"

# A case is one run of summarize over one or more fixture files, in order.
CASES: dict[str, tuple[str, ...]] = {
    "hami-docs-device-allocation": ("hami-docs-device-allocation.prom",),
    "hami-docs-device-allocation-v2.7": ("hami-docs-device-allocation-v2.7.prom",),
    "hami-docs-device-allocation-dra": ("hami-docs-device-allocation-dra.prom",),
    "hami-docs-real-time-device-usage": ("hami-docs-real-time-device-usage.prom",),
    "hami-docs-real-time-device-usage-v1.3": ("hami-docs-real-time-device-usage-v1.3.prom",),
    "hami-issue-555-legacy-monitor": ("hami-issue-555-legacy-monitor.prom",),
    "hami-issue-1410-1417-one-node-two-days": (
        "hami-issue-1410-legacy-scheduler.prom",
        "hami-issue-1417-node-overview.prom",
    ),
    "hami-scheduler-test-amd": ("hami-scheduler-test-amd.prom",),
    "hami-scheduler-test-quota": ("hami-scheduler-test-quota.prom",),
    "synthetic-cluster": (
        "synthetic-cluster-scheduler.prom",
        "synthetic-cluster-monitor-gpu-a.prom",
    ),
    "synthetic-mig": ("synthetic-mig-scheduler.prom", "synthetic-mig-monitor.prom"),
}
MIB = 1048576
REDACTED = "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"


def run(case: str) -> Report:
    return summarize_texts([(name, (SUMMARIZE / name).read_text()) for name in CASES[case]])


def doc(case: str) -> dict[str, Any]:
    result: dict[str, Any] = run(case).to_json()
    return result


def kinds(d: dict[str, Any]) -> list[str]:
    return [f["kind"] for f in d["findings"]]


def messages(d: dict[str, Any], kind: str) -> list[str]:
    return [f["message"] for f in d["findings"] if f["kind"] == kind]


def device(d: dict[str, Any], node: str | None, index: int | None) -> dict[str, Any]:
    found = [x for x in d["devices"] if x["node"] == node and x["index"] == index]
    assert len(found) == 1, (node, index, d["devices"])
    return found[0]


def container(d: dict[str, Any], namespace: str, pod: str, **where: Any) -> dict[str, Any]:
    found = [
        c
        for c in d["containers"]
        if c["namespace"] == namespace
        and c["pod"] == pod
        and all(c[k] == v for k, v in where.items())
    ]
    assert len(found) == 1, (namespace, pod, where, d["containers"])
    return found[0]


# --- Goldens -------------------------------------------------------------------------------


def check(path: Path, actual: str) -> None:
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual)
    assert path.exists(), f"{path} is missing; run UPDATE_GOLDEN=1 pytest {__file__}"
    assert actual == path.read_text(), f"{path} differs; if intended, UPDATE_GOLDEN=1"


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden_reports(case: str) -> None:
    report = run(case)
    check(GOLDEN / f"{case}.txt", to_text(report))
    check(GOLDEN / f"{case}.json", to_json(report))


def test_every_fixture_is_in_a_case_and_in_the_readme() -> None:
    files = {p.name for p in SUMMARIZE.glob("*.prom")}
    used = {name for names in CASES.values() for name in names}
    assert files == used
    # fixtures/README.md's table, and this directory's own for the fixtures added since.
    readme = (FIXTURES / "README.md").read_text() + (SUMMARIZE / "README.md").read_text()
    for name in files:
        row = next((line for line in readme.splitlines() if f"`{name}`" in line), None)
        assert row is not None, f"{name} has no provenance row in a fixtures README"
        provenance = row.split("|")[2].strip()
        assert provenance in ("synthetic", "copied from public docs",
                              "copied from public source", "pasted by a user"), row  # fmt: skip
        assert provenance == "synthetic" or "https://github.com/" in row, row


# --- Key figures, worked out by hand ---------------------------------------------------------


def test_synthetic_cluster_figures() -> None:
    d = doc("synthetic-cluster")
    assert d["basis"] == "both"
    assert d["nodes"] == ["gpu-a", "gpu-b"]
    # Two devices share a redacted UUID; node and index keep them apart.
    a1, b0 = device(d, "gpu-a", 1), device(d, "gpu-b", 0)
    assert a1["uuid"] == b0["uuid"] == REDACTED
    assert (a1["cores_allocated"], a1["memory_allocated_mib"], a1["shared_containers"]) == (
        60,
        40960,
        2,
    )
    assert (b0["cores_allocated"], b0["memory_allocated_mib"], b0["shared_containers"]) == (
        20,
        10240,
        2,
    )
    assert a1["containers"] == 2 and b0["containers"] == 1
    # Measured on gpu-a only: 41000 MiB of 4.2991616e+10 bytes, utilization 64.
    assert a1["host_memory_used_mib"] == 41000 and a1["host_cores_utilization_percent"] == 64
    assert b0["host_memory_used_mib"] is None and b0["host_cores_utilization_percent"] is None
    assert device(d, "gpu-b", 1)["state"] == "idle"
    assert device(d, "gpu-a", 0)["state"] == "full"
    # 100+60+20+0 of 4 x 100 cores; 81920+40960+10240+0 of 4 x 81920 MiB.
    cap = d["capacity"]
    assert (cap["cores_limit"], cap["cores_allocated"], cap["cores_free"]) == (400, 180, 220)
    assert (cap["memory_limit_mib"], cap["memory_allocated_mib"]) == (327680, 133120)
    assert cap["memory_free_mib"] == 194560 and cap["core_allocation_percent"] == 45
    assert (cap["idle_devices"], cap["full_devices"], cap["partial_devices"]) == (1, 1, 2)
    assert cap["per_node"]["gpu-a"]["cores_allocated"] == 160
    # The monitor names infer-1 by UUID only; its pod places it on gpu-a #1, so the
    # scheduler's slot and the monitor's container are one row.
    infer1 = container(d, "team-x", "infer-1")
    assert infer1["container"] == "server" and infer1["container_index"] == "0"
    assert (infer1["node"], infer1["device"], infer1["device_index"]) == ("gpu-a", REDACTED, 1)
    assert (infer1["cores_allocated"], infer1["memory_allocated_mib"]) == (30, 20480)
    assert (infer1["memory_used_mib"], infer1["memory_limit_mib"]) == (21000, 20480)
    assert infer1["cores_used_percent"] == 104 and infer1["last_kernel_seconds"] == 1
    ns = d["namespaces"]
    assert ns["team-x"]["pods"] == 2 and ns["team-x"]["cores_allocated"] == 60
    assert (
        ns["team-x"]["memory_allocated_mib"] == 40960 and ns["team-x"]["memory_used_mib"] == 40000
    )
    assert ns["team-x"]["quota"]["nvidia.com/gpumem"] == {"used": 30720, "limit": None}
    assert ns["ml"]["quota"]["nvidia.com/gpumem"] == {"used": 81920, "limit": 163840}
    # 100 of 180 allocated cores.
    assert ns["ml"]["core_share_percent"] == 55.56
    assert sorted(kinds(d)) == ["capacity", "collision", "inconsistency", "inconsistency", "unit"]
    assert any(
        "team-x" in m and "30720" in m and "40960" in m for m in messages(d, "inconsistency")
    )
    assert any("gpu-b #0" in m and "2 container" in m for m in messages(d, "inconsistency"))
    assert any("infer-1" in m and "21000" in m for m in messages(d, "capacity"))
    assert d["unrecognised"] == [] and d["ignored"] == ["go_goroutines", "hami_build_info"]
    assert d["distribution"] == "concentrated" and d["distribution_basis"] == "allocation"


def test_issue_1417_overview_reads_limit_and_sharing_from_labels() -> None:
    d = summarize_texts(
        [("p", (SUMMARIZE / "hami-issue-1417-node-overview.prom").read_text())]
    ).to_json()
    node = "voice-node003-77-alma88"
    assert [x["index"] for x in d["devices"]] == [1, 2, 3, 4, 5]
    assert {x["memory_limit_mib"] for x in d["devices"]} == {11264}
    # Values are bytes: 5.24288e+09 = 5000 MiB, 1.048576e+10 = 10000 MiB.
    assert [x["memory_allocated_mib"] for x in d["devices"]] == [0, 0, 5000, 10000, 10000]
    assert [x["shared_containers"] for x in d["devices"]] == [0, 0, 1, 2, 2]
    assert device(d, node, 4)["memory_allocation_percent"] == 88.78
    # No cores published: no core figure and no state from a figure nobody gave.
    assert all(x["cores_limit"] is None and x["cores_allocated"] is None for x in d["devices"])
    assert d["basis"] == "allocation"
    assert kinds(d) == ["partial", "unparseable"]
    assert "line 6" in messages(d, "partial")[0]


def test_two_pastes_of_one_node_disagree_and_say_so() -> None:
    d = doc("hami-issue-1410-1417-one-node-two-days")
    # #1410 adds devices 0 and 6 the #1417 paste does not reach.
    assert [x["index"] for x in d["devices"]] == [0, 1, 2, 3, 4, 5, 6]
    # GPUDeviceSharedNum (a figure family) wins over the overview's label.
    assert device(d, "voice-node003-77-alma88", 4)["shared_containers"] == 0
    disagree = messages(d, "inconsistency")
    assert any("GPUDeviceSharedNum and nodeGPUOverview disagree on 3" in m for m in disagree)
    assert any("memory allocated ratio 0" in m for m in disagree)


def test_dra_values_in_mib_are_kept_raw_with_a_unit_finding() -> None:
    d = doc("hami-docs-device-allocation-dra")
    gpu = next(x for x in d["devices"] if x["uuid"] == "GPU-3ab1-179d-d6dd")
    assert gpu["memory_limit_mib"] == 8192  # published as 8192 under a byte-named family
    assert gpu["type"] == "Tesla P4" and gpu["cores_limit"] == 100
    pod = container(d, "default", "pod-0")
    assert pod["memory_allocated_mib"] == 4000 and pod["cores_allocated"] == 100
    units = messages(d, "unit")
    assert len(units) == 2 and all("cannot be bytes" in m for m in units)
    assert any("GPUDeviceMemoryLimit" in m for m in units)
    assert any("k8s-node01 #0" in m for m in messages(d, "collision"))
    # HAMi-DRA publishes no shared count: its absence is not a cut-off.
    assert not any("GPUDeviceSharedNum" in m for m in messages(d, "partial"))


def test_issue_555_cut_mid_label_set_keeps_what_was_read() -> None:
    d = doc("hami-issue-555-legacy-monitor")
    assert d["basis"] == "usage"
    assert len(d["devices"]) == 4 and all(x["node"] is None for x in d["devices"])
    used = container(d, "default", "mistral-7b-78c69f7cc4-fz96k", vdevice_index="0")
    # 1.9876938752e+10 bytes = 18956.126 MiB; context 266338304 + data 19610600448 equal it.
    assert used["memory_used_mib"] == 18956.13
    assert used["device"] == "GPU-9ef17446-43db-8bfa-b0d5-a9920d8d5ba0"
    assert used["cores_used_percent"] is None  # its family was cut off
    assert "inconsistency" not in kinds(d)
    assert kinds(d).count("orphan") == 4
    assert any("line 9" in m for m in messages(d, "partial"))


def test_amd_legacy_compute_units_disagree_with_the_normalised_share() -> None:
    d = doc("hami-scheduler-test-amd")
    assert container(d, "default", "amd-pod")["cores_allocated"] == 50
    assert device(d, "node-1", 0)["cores_allocated"] == 50
    assert any("50 vs 32" in m for m in messages(d, "inconsistency"))


def test_quota_limit_zero_means_unset_not_zero() -> None:
    d = doc("hami-scheduler-test-quota")
    ns = d["namespaces"]
    assert ns["team-a"]["quota"] == {
        "nvidia.com/gpucore": {"used": 50, "limit": 100},
        "nvidia.com/gpumem": {"used": 4096, "limit": 8192},
    }
    assert ns["team-b"]["quota"] == {"nvidia.com/gpumem": {"used": 1024, "limit": None}}
    # No container series at all: pods and sums are not present, never 0.
    assert ns["team-b"]["pods"] is None and ns["team-b"]["memory_allocated_mib"] is None
    assert d["findings"] == []
    assert d["basis"] == "allocation" and d["devices"] == []


def test_docs_examples_ascend_and_misspelt_family() -> None:
    d = doc("hami-docs-device-allocation")
    npu = device(d, "aio-node74-arm", 0)
    assert npu["uuid"] == "aio-node74-arm-Ascend310P-0" and npu["memory_allocated_mib"] == 3072
    pod = container(d, "default", "ascend310p-pod")
    assert pod["container"] is None and pod["container_index"] == "Ascend310P"
    assert any("quota used 100" in m and "50" in m for m in messages(d, "inconsistency"))
    legacy = doc("hami-docs-real-time-device-usage-v1.3")
    assert legacy["unrecognised"] == ["Device_utilization_desc_of_containert"]
    assert (
        "did you mean Device_utilization_desc_of_container?" in messages(legacy, "unrecognised")[0]
    )
    host = legacy["devices"][0]
    assert host["host_memory_used_mib"] == 273.94 and host["host_cores_utilization_percent"] == 0


def test_monitor_breakdown_above_total_is_an_inconsistency() -> None:
    d = doc("hami-docs-real-time-device-usage")
    cuda = container(d, "default", "vgpu-share")
    assert (cuda["memory_used_mib"], cuda["memory_limit_mib"]) == (0, 20000)
    assert cuda["last_kernel_seconds"] == 3664
    assert any("652.25 MiB" in m for m in messages(d, "inconsistency"))
    # Real-time families are present: the report is not allocation-based.
    assert d["basis"] == "usage"
    assert "not measured compute" not in to_text(run("hami-docs-real-time-device-usage"))
    assert "not measured compute" in to_text(run("hami-docs-device-allocation"))


# --- Findings each rule makes, on text written for it --------------------------------------


def scheduler_device(
    uuid: str, index: int, cores: tuple[int, int], memory_mib: tuple[int, int], shared: int
) -> str:
    """One device's five scheduler families (current names), limits then allocations, as
    HAMi publishes them together: (limit, allocated) cores on the share scale, memory in MiB
    written as bytes."""
    labels = f'device_index="{index}",device_type="NVIDIA",device_uuid="{uuid}",node="n1"'
    return "".join(
        f"{name}{{{labels}}} {value}\n"
        for name, value in (
            ("hami_gpu_core_limit_ratio", cores[0]),
            ("hami_gpu_core_allocated_ratio", cores[1]),
            ("hami_gpu_memory_limit_bytes", memory_mib[0] * MIB),
            ("hami_gpu_memory_allocated_bytes", memory_mib[1] * MIB),
            ("hami_gpu_shared_count", shared),
        )
    )


def test_device_allocation_above_its_capacity() -> None:
    text = scheduler_device("GPU-over", 0, (100, 120), (15360, 16384), 3) + scheduler_device(
        "GPU-at", 1, (100, 100), (15360, 15360), 2
    )
    d = doc_of_text(text)
    # 120 of 100 cores and 16384 of 15360 MiB on GPU-over; GPU-at is at its limits, not above.
    assert messages(d, "capacity") == [
        "GPU-over (n1 #0): 120 cores allocated of 100: allocation above capacity "
        "(oversubscribed, or a stale scheduler cache)",
        "GPU-over (n1 #0): 16384 MiB memory allocated of 15360 MiB: allocation above capacity "
        "(oversubscribed, or a stale scheduler cache)",
    ]
    assert kinds(d) == ["capacity", "capacity"]
    over = device(d, "n1", 0)
    assert (over["cores_allocated"], over["memory_allocated_mib"]) == (120, 16384)
    assert over["core_allocation_percent"] == 120 and over["memory_allocation_percent"] == 106.67
    # Free capacity is per device and never negative: 0 + 0 cores, 0 + 0 MiB.
    assert d["capacity"]["cores_free"] == 0 and d["capacity"]["memory_free_mib"] == 0


def test_one_series_twice_with_different_values_is_a_duplicate() -> None:
    again = 'hami_gpu_core_allocated_ratio{device_index="0",device_type="NVIDIA",device_uuid="GPU-d",node="n1"}'  # noqa: E501
    same = scheduler_device("GPU-d", 0, (100, 30), (8192, 2048), 1)
    # The same series again with its value: nothing to say.
    assert doc_of_text(same + f"{again} 30\n")["findings"] == []
    d = doc_of_text(same + f"{again} 40\n")
    assert d["findings"] == [
        {
            "kind": "duplicate",
            "message": "hami_gpu_core_allocated_ratio appears more than once with different "
            "values (metrics line 2 30 vs metrics line 6 40); the first read is used",
        }
    ]
    assert device(d, "n1", 0)["cores_allocated"] == 30


def test_memory_without_cores_and_cores_without_memory_are_to_investigate() -> None:
    text = scheduler_device("GPU-m", 0, (100, 0), (8192, 4096), 1) + scheduler_device(
        "GPU-c", 1, (100, 50), (8192, 0), 1
    )
    d = doc_of_text(text)
    assert d["findings"] == [
        {
            "kind": "investigate",
            "message": "GPU-m (n1 #0): 4096 MiB allocated with no core share: its containers "
            "did not ask for gpucores and are not compute-capped",
        },
        {"kind": "investigate", "message": "GPU-c (n1 #1): 50 cores allocated with no memory"},
    ]
    # Nothing allocated at all is idle, not a finding.
    assert doc_of_text(scheduler_device("GPU-i", 0, (100, 0), (8192, 0), 0))["findings"] == []


def test_containers_using_more_memory_than_the_card_is_an_inconsistency() -> None:
    card = 'device_index="0",device_type="NVIDIA-A10",device_uuid="GPU-card",node="n1"'
    ctr = 'device_uuid="GPU-card",namespace="ns",vdevice_index="0"'

    def monitor(p2_mib: int) -> str:
        return (
            f"hami_host_gpu_utilization_ratio{{{card}}} 40\n"
            f"hami_host_gpu_memory_used_bytes{{{card}}} {4096 * MIB}\n"
            f'hami_vgpu_memory_used_bytes{{container="a",{ctr},pod="p1"}} {3072 * MIB}\n'
            f'hami_vgpu_memory_used_bytes{{container="b",{ctr},pod="p2"}} {p2_mib * MIB}\n'
        )

    d = doc_of_text(monitor(2048))
    # 3072 + 2048 = 5120 MiB in the containers, 4096 MiB in use on the card.
    assert d["findings"] == [
        {
            "kind": "inconsistency",
            "message": "GPU-card (n1 #0): its containers use 5120 MiB together, more than the "
            "4096 MiB in use on the card",
        }
    ]
    assert device(d, "n1", 0)["containers"] == 2
    # 3072 + 1024 = 4096: they fit.
    assert doc_of_text(monitor(1024))["findings"] == []


# --- MIG -------------------------------------------------------------------------------------

MIG_3G = {
    "uuid": "MIG-7c1e9a40-2d5b-5f83-9e06-b4a2c8d1f763",
    "profile": "3g.20gb",
    "gpu_instance_id": "2",
    "compute_instance_id": "0",
}
MIG_2G = {
    "uuid": "MIG-e05b3d82-6f14-5a97-8c3e-1d9f07a2b648",
    "profile": "2g.10gb",
    "gpu_instance_id": "5",
    "compute_instance_id": "0",
}


def test_mig_instances_on_the_device_and_in_its_containers() -> None:
    d = doc("synthetic-mig")
    gpu = device(d, "mig-node-a", 0)
    # The scheduler's two realized instances, by MIG UUID; the legacy nodeGPUMigInstance names
    # the same two (3g.20gb-2, 2g.10gb-5) and adds none.
    assert gpu["mig_instances"] == [MIG_3G, MIG_2G]
    assert device(d, "mig-node-a", 1)["mig_instances"] is None  # not in MIG mode
    # 40 + 30 cores, 20480 + 10240 MiB of 40960: the device's own figures.
    assert (gpu["cores_allocated"], gpu["memory_allocated_mib"]) == (70, 30720)
    assert gpu["memory_allocation_percent"] == 75 and gpu["containers"] == 2
    # The monitor's hami_mig_device_info names each container's instance in full; MigInfo's
    # instanceid (the GPU instance) agrees. Each is one row with the scheduler's slot.
    train = container(d, "research", "train-3g")
    assert train["mig_instance"] == MIG_3G
    assert (train["container"], train["container_index"]) == ("trainer", "0")
    assert (train["cores_allocated"], train["memory_allocated_mib"]) == (40, 20480)
    assert train["device"] == "GPU-3f2c8a71-5b9e-4d06-8c4a-e1d7b6a90f35"
    assert container(d, "serving", "infer-2g")["mig_instance"] == MIG_2G
    assert d["findings"] == [] and d["unrecognised"] == []
    text = to_text(run("synthetic-mig"))
    assert f"MIG instance      3g.20gb GI 2 CI 0 {MIG_3G['uuid']}" in text
    assert f"MIG        2g.10gb {MIG_2G['uuid']}" in text


def test_legacy_mig_slots_free_ones_and_disagreeing_twins() -> None:
    # Before the runtime identity (HAMi 2.5 to 2.9) the scheduler published one series per
    # MIG template slot, 1 in use and 0 free, and the monitor's MigInfo only the instance id.
    slots = "\n".join(
        [
            'nodeGPUMigInstance{deviceidx="0",deviceuuid="GPU-m",migname="1g.10gb-0",nodeid="n1"} 1',  # noqa: E501
            'nodeGPUMigInstance{deviceidx="0",deviceuuid="GPU-m",migname="1g.10gb-1",nodeid="n1"} 0',  # noqa: E501
            'nodeGPUMigInstance{deviceidx="0",deviceuuid="GPU-m",migname="1g.10gb-2",nodeid="n1"} 1',  # noqa: E501
            'nodeGPUMigInstance{deviceidx="1",deviceuuid="GPU-n",migname="1g.10gb-0",nodeid="n1"} 0',  # noqa: E501
            'MigInfo{ctrname="c",deviceuuid="GPU-m",instanceid="3",podname="p",podnamespace="ns",vdeviceid="0"} 1',  # noqa: E501
        ]
    )
    d = doc_of_text(slots + "\n")
    in_use = [m["profile"] for m in device(d, "n1", 0)["mig_instances"]]
    assert in_use == ["1g.10gb-0", "1g.10gb-2"]
    assert all(m["uuid"] is None for m in device(d, "n1", 0)["mig_instances"])
    assert device(d, "n1", 1)["mig_instances"] == []  # MIG mode, every slot free
    row = container(d, "ns", "p")
    assert row["device"] == "GPU-m" and row["device_index"] == 0
    assert row["mig_instance"] == {
        "uuid": None,
        "profile": None,
        "gpu_instance_id": "3",
        "compute_instance_id": None,
    }
    assert d["findings"] == [] and d["unrecognised"] == []
    # The current families win over their legacy twins, which are compared with them.
    g = 'device_index="0",device_uuid="GPU-x",node="n1"'
    c = 'namespace="ns",pod="p",vdevice_index="0",device_uuid="GPU-x",container="c"'
    twins = "\n".join(
        [
            f'hami_node_gpu_mig_instance_info{{compute_instance_id="0",{g},gpu_instance_id="2",'
            'mig_uuid="MIG-a",placement_size="4",placement_start="0",profile="3g.20gb"} 1',
            f'hami_node_gpu_mig_instance_info{{compute_instance_id="0",{g},gpu_instance_id="5",'
            'mig_uuid="MIG-b",placement_size="2",placement_start="4",profile="2g.10gb"} 1',
            'nodeGPUMigInstance{deviceidx="0",deviceuuid="GPU-x",migname="3g.20gb-2",nodeid="n1"} 1',  # noqa: E501
            f'hami_mig_device_info{{compute_instance_id="0",{c},gpu_instance_id="2",'
            'mig_uuid="MIG-a",profile="3g.20gb"} 1',
            'MigInfo{ctrname="c",deviceuuid="GPU-x",instanceid="4",podname="p",podnamespace="ns",vdeviceid="0"} 1',  # noqa: E501
        ]
    )
    d = doc_of_text(twins + "\n")
    assert [m["uuid"] for m in device(d, "n1", 0)["mig_instances"]] == ["MIG-a", "MIG-b"]
    assert container(d, "ns", "p")["mig_instance"]["gpu_instance_id"] == "2"
    assert messages(d, "inconsistency") == [
        "hami_mig_device_info and MigInfo disagree on 1 series (ns/p/c MIG GPU instance: "
        "2 vs 4); hami_mig_device_info is used",
        "hami_node_gpu_mig_instance_info and nodeGPUMigInstance disagree on 1 series "
        "(GPU-x (n1 #0) MIG instances in use: 2 vs 1); hami_node_gpu_mig_instance_info is used",
    ]


# --- Names HAMi used before ----------------------------------------------------------------


def test_legacy_and_early_names() -> None:
    # HAMi's monitor before 2023-08 (e027397c): the card's index in `deviceid`.
    early = doc_of_text(
        'HostGPUMemoryUsage{deviceid="3",deviceuuid="GPU-old"} 2.147483648e+09\n'
        'HostCoreUtilization{deviceid="3",deviceuuid="GPU-old"} 37\n'
        'vGPU_device_memory_usage_in_bytes{ctrname="c",deviceuuid="GPU-old",podname="p",'
        'podnamespace="ns",vdeviceid="0"} 1.073741824e+09\n'
    )
    old = early["devices"][0]
    assert (old["uuid"], old["index"], old["node"]) == ("GPU-old", 3, None)
    assert old["host_memory_used_mib"] == 2048 and old["host_cores_utilization_percent"] == 37
    assert container(early, "ns", "p", container="c")["memory_used_mib"] == 1024
    assert early["findings"] == [] and early["unrecognised"] == []
    # --legacy-metrics: the monitor's seconds since the container's last kernel.
    who = 'ctrname="c",deviceuuid="GPU-old",podname="p",podnamespace="ns",vdeviceid="0"'
    legacy = doc_of_text(f"Device_last_kernel_of_container{{{who}}} 12\n")
    assert container(legacy, "ns", "p")["last_kernel_seconds"] == 12
    assert legacy["unrecognised"] == [] and legacy["basis"] is None
    # The snake-case names of 2026-02 (71dce667), scheduler and monitor.
    dev = 'deviceidx="1",devicetype="NVIDIA",deviceuuid="GPU-snake",nodeid="n1"'
    snake = doc_of_text(
        f"gpu_device_core_limit{{{dev}}} 100\n"
        f"gpu_device_core_allocated{{{dev}}} 25\n"
        f"gpu_device_memory_limit_bytes{{{dev}}} {8192 * MIB}\n"
        f"gpu_device_memory_allocated_bytes{{{dev}}} {2048 * MIB}\n"
        f"container_device_last_kernel_seconds{{{who.replace('GPU-old', 'GPU-snake')}}} 30\n"
    )
    gpu = device(snake, "n1", 1)
    assert (gpu["cores_limit"], gpu["cores_allocated"]) == (100, 25)
    assert (gpu["memory_limit_mib"], gpu["memory_allocated_mib"]) == (8192, 2048)
    row = container(snake, "ns", "p")
    assert row["last_kernel_seconds"] == 30 and row["device"] == "GPU-snake"
    assert snake["findings"] == [] and snake["unrecognised"] == []


# --- Implausible units -----------------------------------------------------------------------


def test_a_core_limit_above_100_is_a_unit_finding() -> None:
    # An MI300X's 304 compute units under a legacy name.
    d = doc_of_text('GPUDeviceCoreLimit{deviceidx="0",deviceuuid="GPU-amd",nodeid="n1"} 304\n')
    assert messages(d, "unit") == [
        "GPUDeviceCoreLimit (metrics): 1 value(s): a core limit above 100 is not on HAMi's "
        "share scale (100 = one card); it may be compute units (AMD in legacy names) or a core "
        "scaling; shown as published. E.g. 304 on GPU-amd n1"
    ]
    assert device(d, "n1", 0)["cores_limit"] == 304  # as published
    assert "unit" not in kinds(doc_of_text(scheduler_device("GPU-a", 0, (100, 0), (8192, 0), 0)))


def test_a_mib_figure_of_2_to_the_30_or_more_is_a_unit_finding() -> None:
    card = 'gpustack_accelerator_info{{id="{0}",index="{1}",name="NVIDIA H100",node="n2"}} 1\n'
    total = 'gpustack_accelerator_memory_total_mib{{id="{0}",index="{1}",node="n2"}} {2}\n'
    cards = [
        ("GPU-bytes", 85899345920),  # 80 GiB written in bytes
        ("GPU-mib", 81559),  # an H100's MiB
        ("GPU-edge", 2**30),  # 2^30 MiB, an exbibyte: bytes
        ("GPU-under", 2**30 - 1),
    ]
    text = "".join(
        card.format(uuid, i) + total.format(uuid, i, value) for i, (uuid, value) in enumerate(cards)
    )
    d = doc_of_text(text)
    assert messages(d, "unit") == [
        "gpustack_accelerator_memory_total_mib (metrics): 2 value(s): values this large cannot "
        "be MiB (they look like bytes); shown as published. E.g. 85899345920 on GPU-bytes n2; "
        "1073741824 on GPU-edge n2"
    ]
    # Every figure as published.
    assert [x["memory_limit_mib"] for x in d["devices"]] == [v for _, v in cards]


def test_a_ratio_above_1_is_a_unit_finding() -> None:
    where = 'device_index="0",device_type="NVIDIA",device_uuid="GPU-r",node="n1"'
    text = scheduler_device("GPU-r", 0, (100, 50), (8192, 4096), 1)
    # 4096 / 8192 = 0.5, published as 50.
    d = doc_of_text(text + f"hami_node_gpu_memory_allocated_ratio{{{where}}} 50\n")
    assert d["findings"] == [
        {
            "kind": "unit",
            "message": "hami_node_gpu_memory_allocated_ratio (metrics): 1 value(s): a 0 to 1 "
            "ratio above 1: this one looks like a percentage; shown as published. E.g. 50 on "
            "GPU-r n1",
        }
    ]
    assert (
        doc_of_text(text + f"hami_node_gpu_memory_allocated_ratio{{{where}}} 0.5\n")["findings"]
        == []
    )


# --- The JSON contract -------------------------------------------------------------------

DEVICE_FIELDS = {
    "uuid", "node", "index", "type", "cores_limit", "cores_allocated", "memory_limit_mib",
    "memory_allocated_mib", "shared_containers", "containers",
    "host_cores_utilization_percent", "host_memory_used_mib",
}  # fmt: skip
CONTAINER_FIELDS = {
    "namespace", "pod", "container", "node", "device", "vdevice_index", "cores_allocated",
    "memory_allocated_mib", "memory_limit_mib", "memory_used_mib", "cores_used_percent",
}  # fmt: skip
NAMESPACE_FIELDS = {
    "pods", "cores_allocated", "memory_allocated_mib", "memory_limit_mib", "memory_used_mib",
    "quota",
}  # fmt: skip
TOP_FIELDS = {
    "basis", "nodes", "devices", "containers", "namespaces", "capacity", "distribution",
    "findings", "unrecognised",
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_contract_field_is_present(case: str) -> None:
    d = json.loads(to_json(run(case)))
    assert set(d) >= TOP_FIELDS
    assert d["basis"] in ("allocation", "usage", "both", None)
    for x in d["devices"]:
        assert set(x) >= DEVICE_FIELDS
    for c in d["containers"]:
        assert set(c) >= CONTAINER_FIELDS
    for ns in d["namespaces"].values():
        assert set(ns) >= NAMESPACE_FIELDS
        for q in ns["quota"].values():
            assert set(q) == {"used", "limit"}
    for f in d["findings"]:
        assert set(f) == {"kind", "message"} and f["message"]


def test_absent_is_null_never_zero() -> None:
    # The monitor's legacy paste holds no allocation: none of it may read 0.
    d = doc("hami-issue-555-legacy-monitor")
    for x in d["devices"]:
        for field in ("cores_limit", "cores_allocated", "memory_limit_mib",
                      "memory_allocated_mib", "shared_containers",
                      "host_memory_used_mib"):  # fmt: skip
            assert x[field] is None, (field, x)
    for c in d["containers"]:
        assert c["cores_allocated"] is None and c["memory_allocated_mib"] is None
    assert d["capacity"]["cores_free"] is None and d["capacity"]["idle_devices"] is None
    assert d["distribution"] is None


# --- This agent's own /metrics ---------------------------------------------------------------


def _exporting_text(scenario: str) -> tuple[str, str]:
    """A round of the scenario through the real code, then the families only the exporting
    agent publishes (exporter role, kubelet verdict, pod-level figures) rendered by the real
    exposition code."""
    monitor = scenario_monitor(scenario)
    published = monitor.run_round()
    monitor.stop()
    pod = PodLevel(
        InstanceRef("ns", "name", "uid"), Pair(4000, 1200), Pair(8192, 4096), Pair(1024, None)
    )
    extras = exposition.Extras(
        exporting=True, kubelet_success=True, kubelet_duration=0.05, pod_level=(pod,)
    )
    body = exposition.render(exposition.families(published.snapshot, True, extras))
    return published.metrics.plain.decode(), body.decode()


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_agents_own_metrics_are_all_recognised(scenario: str) -> None:
    golden = (NODES / scenario / "golden" / "metrics.txt").read_text()
    live, exporting = _exporting_text(scenario)
    for name, text in (("golden", golden), ("round", live), ("exporting", exporting)):
        d = summarize_texts([(name, text)]).to_json()
        assert "unrecognised" not in kinds(d), messages(d, "unrecognised")
        assert d["unrecognised"] == []
        assert "unparseable" not in kinds(d) and "partial" not in kinds(d)
        assert d["basis"] == "usage"
    d = summarize_texts([("golden", golden)]).to_json()
    snapshot = json.loads((NODES / scenario / "golden" / "snapshot.json").read_text())
    listed = [a for g in snapshot["groups"] for a in g["accelerators"]]
    # A board whose partitions are listed as devices of their own (AMD CPX) is not one more.
    boards = {a["parentID"] for a in listed if a.get("parentID")}
    cards = len([a for a in listed if a["id"] not in boards])
    assert len(d["devices"]) == cards and d["findings"] == [], d["findings"]
    # Every Instance grant is a container row on a card of the scenario.
    cards = {x["uuid"] for x in d["devices"]}
    assert d["containers"] and all(c["device"] in cards for c in d["containers"])


def test_the_agents_shared_and_sliced_grants() -> None:
    d = doc_of_text((NODES / "h100-8gpu-mixed" / "golden" / "metrics.txt").read_text())
    qwen = container(d, "gpustack-workloads", "qwen3-32b", device_index=0)
    assert qwen["mode"] == "Exclusive" and qwen["cores_used_percent"] == 91
    # A slice's compute is stated against its own cap (124% of it), not the card's.
    phi = container(d, "gpustack-workloads", "phi-4")
    assert phi["cores_used_percent"] is None and phi["cores_used_percent_of_limit"] == 124
    mistral = container(d, "gpustack-workloads", "mistral-small-24b")
    assert mistral["device_index"] == 4 and mistral["device"].startswith("GPU-641877a3")
    assert mistral["mig_instance"]["uuid"].startswith("MIG-b167ea09")
    # Two Shared tenants each publish the card's 11338 MiB: the namespace counts it once.
    assert d["namespaces"]["notebooks"]["memory_used_mib"] == 11338
    # And each is granted the whole 81,559 MiB card: the namespace's limit is that card's once.
    assert d["namespaces"]["notebooks"]["memory_limit_mib"] == 81559
    assert device(d, "gpu-h100-07", 5)["containers"] == 2


CARD_5 = "GPU-1749c520-b2a2-3f13-f7ec-8fdebf5728c2"


def shared_holders(*holders: tuple[str, str, str]) -> str:
    """The agent's /metrics for holders (namespace, Instance, pod) of one Shared 81,559 MiB
    card with 11,338 MiB in use, as the exposition writes them, and the card's own series."""
    lines = [
        "# TYPE gpustack_accelerator_memory_total_mib gauge",
        f'gpustack_accelerator_memory_total_mib{{id="{CARD_5}",index="5",manufacturer="nvidia",'
        'node="gpu-h100-07"} 81559.0',
    ]
    for family, value in (("memory_total_mib", 81559.0), ("memory_used_mib", 11338.0)):
        lines.append(f"# TYPE gpustack_instance_accelerator_{family} gauge")
        for namespace, instance, pod in holders:
            lines.append(
                f'gpustack_instance_accelerator_{family}{{container="notebook",id="{CARD_5}",'
                f'index="5",instance_name="{instance}",instance_uid="uid-{instance}",'
                f'manufacturer="nvidia",mode="Shared",namespace="{namespace}",'
                f'node="gpu-h100-07",pod="{pod}"}} {value}'
            )
    return "\n".join(lines) + "\n"


def test_a_shared_cards_limit_counts_once_per_namespace_not_once_per_holder() -> None:
    """(R-X1) Each holder of a Shared card is granted the whole card, so each publishes the
    card's 81,559 MiB: two holders in one namespace are one card's limit, 81,559 MiB (163,118
    before issue 31), as its use is one card's 11,338 MiB."""
    d = doc_of_text(
        shared_holders(
            ("notebooks", "jupyter-alice", "jupyter-alice"),
            ("notebooks", "jupyter-bob", "jupyter-bob"),
        )
    )
    notebooks = d["namespaces"]["notebooks"]
    assert (notebooks["memory_limit_mib"], notebooks["memory_used_mib"]) == (81559, 11338)
    assert notebooks["pods"] == 2
    # Each holder's own row still states the card it was granted.
    alice = container(d, "notebooks", "jupyter-alice")
    assert (alice["memory_limit_mib"], alice["container"]) == (81559, "notebook")
    assert device(d, "gpu-h100-07", 5)["memory_limit_mib"] == 81559


def test_a_shared_card_held_from_two_namespaces_is_each_namespaces_whole_card() -> None:
    """(R-X1) Two holders of one Shared card in two namespaces: each namespace was granted the
    whole card and reads 81,559 MiB of limit and its 11,338 MiB in use (the card's, which no
    tenant's share can be told apart from); the namespaces' limits add up to twice the card,
    which the capacity (per device) does not."""
    d = doc_of_text(
        shared_holders(
            ("notebooks", "jupyter-alice", "jupyter-alice"),
            ("research", "jupyter-carol", "jupyter-carol"),
        )
    )
    for namespace in ("notebooks", "research"):
        ns = d["namespaces"][namespace]
        assert (ns["memory_limit_mib"], ns["memory_used_mib"]) == (81559, 11338), namespace
    assert d["capacity"]["devices"] == 1
    assert device(d, "gpu-h100-07", 5)["memory_limit_mib"] == 81559


def doc_of_text(text: str) -> dict[str, Any]:
    result: dict[str, Any] = summarize_texts([("metrics", text)]).to_json()
    return result


# --- The command -----------------------------------------------------------------------------


def summarize_cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "devicemanager", "summarize", *args],
        input=None if stdin is None else stdin.decode(),
        capture_output=True,
        text=True,
        env=agent_env(),
        cwd=REPO,
        timeout=60,
        check=False,
    )


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_command_merges_files_and_prints_json() -> None:
    files = [str(SUMMARIZE / name) for name in CASES["synthetic-cluster"]]
    result = summarize_cli(*files, "--format", "json")
    assert result.returncode == 0, result.stderr
    d = json.loads(result.stdout)
    assert d["nodes"] == ["gpu-a", "gpu-b"] and len(d["containers"]) == 4


def test_command_reads_standard_input() -> None:
    text = (SUMMARIZE / "hami-issue-1417-node-overview.prom").read_bytes()
    result = summarize_cli("-", stdin=text)
    assert result.returncode == 0
    assert "Accelerator summary of stdin" in result.stdout
    assert "not measured compute" in result.stdout


def test_command_exit_codes() -> None:
    assert summarize_cli("--format", "yaml").returncode == 2
    assert summarize_cli("-", "-").returncode == 2
    missing = summarize_cli("/nonexistent/metrics.prom")
    assert missing.returncode == 3
    assert "/nonexistent/metrics.prom" in one_line_error(missing)
    big = summarize_cli(str(SUMMARIZE / "synthetic-cluster-scheduler.prom"), "--max-bytes", "100")
    assert big.returncode == 3 and "larger than 100 bytes" in one_line_error(big)
    with socket_closed() as port:
        refused = summarize_cli(f"http://127.0.0.1:{port}/metrics", "--timeout", "5")
    assert refused.returncode == 3 and "ConnectError" in one_line_error(refused)


class socket_closed:
    """A loopback port nothing listens on."""

    def __enter__(self) -> int:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
        return port

    def __exit__(self, *exc: object) -> None:
        return None


@pytest.fixture
def hami_scheduler() -> Iterator[str]:
    """A plain-HTTP /metrics on loopback, serving a scheduler scrape as HAMi's :9395 does."""
    body = (SUMMARIZE / "synthetic-cluster-scheduler.prom").read_bytes()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path != "/metrics":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_command_reads_http_and_reports_http_errors(hami_scheduler: str) -> None:
    monitor = str(SUMMARIZE / "synthetic-cluster-monitor-gpu-a.prom")
    result = summarize_cli(f"{hami_scheduler}/metrics", monitor, "--format", "json")
    assert result.returncode == 0, result.stderr
    d = json.loads(result.stdout)
    assert d["basis"] == "both" and d["capacity"]["cores_allocated"] == 180
    missing = summarize_cli(f"{hami_scheduler}/nope")
    assert missing.returncode == 3 and "HTTP 404" in one_line_error(missing)


def test_command_reads_the_running_agent_over_https(launch: Any, tmp_path: Path) -> None:
    agent: Agent = launch("--replay", str(NODES / "h100-8gpu-mixed"), "--monitor-period", "1")
    agent.wait_for("/readyz", 200)
    result = summarize_cli(agent.url("/metrics"), "--format", "json")
    assert result.returncode == 0, result.stderr
    d = json.loads(result.stdout)
    assert d["unrecognised"] == [] and len(d["devices"]) == 8
    # Verifying against a certificate that did not sign the agent's fails, in one line.
    other, _ = self_signed(["127.0.0.1"])
    ca = tmp_path / "other-ca.pem"
    ca.write_bytes(other)
    bad = summarize_cli(agent.url("/metrics"), "--cacert", str(ca))
    assert bad.returncode == 3 and "CERTIFICATE_VERIFY_FAILED" in one_line_error(bad)
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    unreadable = summarize_cli(agent.url("/metrics"), "--cacert", str(junk))
    assert unreadable.returncode == 2  # a usage error: no CA in the file, nothing was asked
    assert "holds no CA certificate" in one_line_error(unreadable)


def test_command_verifies_the_agent_against_its_ca(launch: Any, tmp_path: Path) -> None:
    """An agent serving a certificate from --cert-dir signed by a CA; --cacert with that CA
    verifies it, and one that did not sign it does not."""
    ca = issue_ca("devicemanager-test-ca")
    cert, key = issue_leaf(ca, ["127.0.0.1"])
    certs = tmp_path / "certs"
    certs.mkdir()
    (certs / "tls.crt").write_bytes(cert)
    (certs / "tls.key").write_bytes(key)
    (tmp_path / "ca.pem").write_bytes(ca.pem())
    (tmp_path / "other-ca.pem").write_bytes(issue_ca("another-ca").pem())
    agent: Agent = launch(
        "--replay", str(NODES / "h100-8gpu-mixed"), "--cert-dir", str(certs),
        "--monitor-period", "1",
    )  # fmt: skip
    agent.wait_for("/readyz", 200)
    good = summarize_cli(agent.url("/metrics"), "--cacert", str(tmp_path / "ca.pem"),
                         "--format", "json")  # fmt: skip
    assert good.returncode == 0, good.stderr
    d = json.loads(good.stdout)
    assert len(d["devices"]) == 8 and d["unrecognised"] == []
    bad = summarize_cli(agent.url("/metrics"), "--cacert", str(tmp_path / "other-ca.pem"))
    assert bad.returncode == 3 and "CERTIFICATE_VERIFY_FAILED" in one_line_error(bad)


# --- The docs ------------------------------------------------------------------------------


def test_docs_name_every_family_flag_and_finding() -> None:
    from devicemanager.cli import build_parser
    from devicemanager.report.families import FAMILIES, IGNORED
    from devicemanager.report.model import Kind

    page = (REPO / "docs" / "summarize.md").read_text()
    for family in FAMILIES:
        assert f"`{family.name}`" in page, f"{family.name} is not in docs/summarize.md"
    for name in IGNORED:
        assert f"`{name}`" in page, f"{name} is not in docs/summarize.md"
    for kind in Kind:
        assert f"| `{kind.value}` |" in page
    sub = next(
        a
        for a in build_parser()._subparsers._group_actions[0].choices.items()  # type: ignore[union-attr]
        if a[0] == "summarize"
    )[1]
    flags = [o for action in sub._actions for o in action.option_strings if o.startswith("--")]
    configuration = (REPO / "docs" / "configuration.md").read_text()
    for flag in flags:
        if flag in ("--help", "--version", "--debug"):  # every command's, documented once
            assert flag == "--help" or f"`{flag}`" in configuration, flag
            continue
        assert f"`{flag}`" in page, flag
        assert flag in configuration, flag
    assert "devicemanager summarize" in configuration
    assert "[docs/summarize.md](docs/summarize.md)" in (REPO / "README.md").read_text()


def test_text_copied_from_a_prometheus_query_keeps_the_workloads_labels() -> None:
    """Series as a Prometheus server stores them: the scrape target's labels added, clashing
    ones renamed exported_*, node_name relabelled from the target as HAMi's guide does."""
    target = 'container="vgpu-scheduler-extender",instance="10.0.0.5:9395",job="hami-scheduler"'
    text = "\n".join(
        [
            f'hami_gpu_core_limit_ratio{{{target},device_index="0",device_uuid="GPU-1",'
            'node="gpu-a",node_name="master-1",zone="vGPU"} 100',
            f'GPUDeviceCoreAllocated{{{target},deviceidx="0",deviceuuid="GPU-1",'
            'nodeid="gpu-a",node_name="master-1",zone="vGPU"} 30',
            f'hami_vgpu_core_allocated_ratio{{{target},container_index="0",device_uuid="GPU-1",'
            'exported_namespace="team-a",exported_pod="train-0",namespace="kube-system",'
            'node="gpu-a",pod="hami-scheduler-7d9",zone="vGPU"} 30',
        ]
    )
    d = summarize_texts([("query", text + "\n")]).to_json()
    assert d["nodes"] == ["gpu-a"]
    gpu = device(d, "gpu-a", 0)
    assert (gpu["cores_limit"], gpu["cores_allocated"]) == (100, 30)
    row = container(d, "team-a", "train-0")
    assert row["container"] is None and row["container_index"] == "0"
    # Only the two families' worth of a scrape is here: that is all that is said.
    assert set(kinds(d)) == {"partial"}
