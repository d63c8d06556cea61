"""Rules of `devicemanager summarize` (R-X1) that a person editing the report would break:
a limit of 0, a UUID several devices share, a partition's compute, and no paste of the
families it knows that makes it raise or print a non-finite percentage.

Every input is Prometheus text written by hand, as small as shows the rule; every expected
value is worked out by hand beside it, never computed by the report's own formulas.
"""

from __future__ import annotations

import json
import math
import re
import sys
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devicemanager.report import summarize_texts, to_json, to_text
from devicemanager.report.families import BY_NAME, LABELS, Figure, Scope

GIB = 1073741824  # bytes: 1024 MiB
REDACTED = "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"


def report(*texts: tuple[str, str]) -> tuple[dict[str, Any], str]:
    """The JSON document (read back through the JSON the command prints) and the text."""
    r = summarize_texts(list(texts))
    return json.loads(to_json(r)), to_text(r)


def device(d: dict[str, Any], node: str, index: int) -> dict[str, Any]:
    found: list[dict[str, Any]] = [
        x for x in d["devices"] if x["node"] == node and x["index"] == index
    ]
    assert len(found) == 1, (node, index, d["devices"])
    return found[0]


def rows_of(d: dict[str, Any], pod: str) -> list[dict[str, Any]]:
    return [c for c in d["containers"] if c["pod"] == pod]


def messages(d: dict[str, Any], kind: str) -> list[str]:
    return [f["message"] for f in d["findings"] if f["kind"] == kind]


def lines_of(text: str, head: str, count: int) -> list[str]:
    """The `count` lines after the one that starts with `head` (a device's block)."""
    lines = text.splitlines()
    at = [i for i, line in enumerate(lines) if line.startswith(head)]
    assert len(at) == 1, (head, text)
    return lines[at[0] + 1 : at[0] + 1 + count]


# --- Rule 1: a limit of 0 gives no percentage, and no crash ----------------------------------

ZERO_LIMIT_DEVICE = """\
hami_gpu_core_limit_ratio{node="n1",device_index="0",device_uuid="GPU-zero",zone="vGPU"} 0
hami_gpu_core_allocated_ratio{node="n1",device_index="0",device_uuid="GPU-zero",zone="vGPU"} 30
hami_gpu_memory_limit_bytes{node="n1",device_index="0",device_uuid="GPU-zero",zone="vGPU"} 0
hami_gpu_memory_allocated_bytes{node="n1",device_index="0",device_uuid="GPU-zero",zone="vGPU"} 1073741824
hami_gpu_shared_count{node="n1",device_index="0",device_uuid="GPU-zero",zone="vGPU"} 1
hami_node_gpu_memory_allocated_ratio{node="n1",device_index="0",device_uuid="GPU-zero",zone="vGPU"} 0.5
"""  # noqa: E501
PLAIN_DEVICE = """\
hami_gpu_core_limit_ratio{node="n1",device_index="1",device_uuid="GPU-ok",zone="vGPU"} 100
hami_gpu_core_allocated_ratio{node="n1",device_index="1",device_uuid="GPU-ok",zone="vGPU"} 50
hami_gpu_memory_limit_bytes{node="n1",device_index="1",device_uuid="GPU-ok",zone="vGPU"} 2147483648
hami_gpu_memory_allocated_bytes{node="n1",device_index="1",device_uuid="GPU-ok",zone="vGPU"} 1073741824
hami_gpu_shared_count{node="n1",device_index="1",device_uuid="GPU-ok",zone="vGPU"} 1
"""  # noqa: E501


def test_a_device_with_limits_of_0_has_no_allocation_percentage() -> None:
    """(R-X1) A device whose core limit and memory limit are 0 gets no allocation percentage
    (JSON null, and no "(p%)" in the text), is left out of the distribution (it has no
    fraction to judge), and its allocated-ratio check is not attempted (allocated / 0); the
    report is still printed, in text and JSON, with the allocation above capacity as a
    finding."""
    d, text = report(("sched", ZERO_LIMIT_DEVICE + PLAIN_DEVICE))
    zero, ok = device(d, "n1", 0), device(d, "n1", 1)
    assert (zero["cores_limit"], zero["cores_allocated"]) == (0, 30)
    assert (zero["memory_limit_mib"], zero["memory_allocated_mib"]) == (0, 1024)
    assert zero["core_allocation_percent"] is None
    assert zero["memory_allocation_percent"] is None
    # The other device is untouched: 50 of 100 cores, 1024 of 2048 MiB.
    assert (ok["core_allocation_percent"], ok["memory_allocation_percent"]) == (50, 50)
    # The text says "a of b" with no percentage at all for the zero-limit device.
    assert lines_of(text, "  n1 #0  GPU-zero", 2) == [
        "    cores allocated   30 of 0",
        "    memory allocated  1024 MiB of 0 MiB",
    ]
    assert lines_of(text, "  n1 #1  GPU-ok", 2) == [
        "    cores allocated   50 of 100 (50%)",
        "    memory allocated  1024 MiB of 2048 MiB (50%)",
    ]
    # Only GPU-ok has a fraction (0.5): one device, so no spread is judged.
    assert d["distribution"] is None
    assert d["distribution_reason"] == "only one device has the figures to judge a spread by"
    # 30 cores of 0 and 1024 MiB of 0 are above capacity; the 0.5 ratio is not compared
    # with 1024 / 0.
    assert sorted(f["kind"] for f in d["findings"]) == ["capacity", "capacity"]
    assert any("GPU-zero" in m and "30 cores allocated of 0" in m for m in messages(d, "capacity"))


def test_a_cluster_whose_limits_are_all_0_has_no_capacity_percentage() -> None:
    """(R-X1) Summed over devices whose limits are all 0, capacity has an allocation but no
    percentage: null in JSON, "not present" in the text, never a division by 0."""
    d, text = report(("sched", ZERO_LIMIT_DEVICE))
    cap = d["capacity"]
    assert (cap["cores_limit"], cap["cores_allocated"], cap["cores_free"]) == (0, 30, 0)
    assert (cap["memory_limit_mib"], cap["memory_allocated_mib"]) == (0, 1024)
    assert cap["core_allocation_percent"] is None and cap["memory_allocation_percent"] is None
    per_node = cap["per_node"]["n1"]
    assert per_node["core_allocation_percent"] is None
    assert per_node["memory_allocation_percent"] is None
    assert "  cores allocated   30 of 0 (not present); free 0" in text.splitlines()
    assert "  memory allocated  1024 MiB of 0 MiB (not present); free 0 MiB" in text.splitlines()


def test_a_card_and_a_grant_with_0_mib_of_memory_in_a_usage_only_paste() -> None:
    """(R-X1) This agent's figures only (no allocation): a card whose memory total is 0 has
    no share in use to judge a spread by, and a grant whose memory total is 0 keeps its
    figures as published, with no percentage; nothing divides by the 0."""
    agent = """\
gpustack_accelerator_info{id="GPU-zero",index="0",name="Card",node="n1",parent_id=""} 1
gpustack_accelerator_memory_total_mib{id="GPU-zero",index="0",node="n1"} 0
gpustack_accelerator_memory_used_mib{id="GPU-zero",index="0",node="n1"} 100
gpustack_accelerator_info{id="GPU-ok",index="1",name="Card",node="n1",parent_id=""} 1
gpustack_accelerator_memory_total_mib{id="GPU-ok",index="1",node="n1"} 1000
gpustack_accelerator_memory_used_mib{id="GPU-ok",index="1",node="n1"} 500
gpustack_instance_accelerator_memory_total_mib{id="GPU-zero",index="0",instance_name="w",mode="Exclusive",namespace="ns",node="n1"} 0
gpustack_instance_accelerator_memory_used_mib{id="GPU-zero",index="0",instance_name="w",mode="Exclusive",namespace="ns",node="n1"} 100
"""  # noqa: E501
    d, text = report(("agent", agent))
    assert d["basis"] == "usage"
    zero = device(d, "n1", 0)
    assert (zero["memory_limit_mib"], zero["host_memory_used_mib"]) == (0, 100)
    assert zero["memory_allocation_percent"] is None and zero["core_allocation_percent"] is None
    # GPU-ok is the only device with a share in use (500 of 1000).
    assert (d["distribution"], d["distribution_basis"]) == (None, "usage")
    assert d["distribution_reason"] == "only one device has the figures to judge a spread by"
    [w] = rows_of(d, "w")
    assert (w["memory_limit_mib"], w["memory_used_mib"]) == (0, 100)
    assert w["cores_used_percent"] is None and w["cores_used_percent_of_limit"] is None
    assert "    measured   memory used 100 MiB, limit 0 MiB, utilization not present" in text
    assert messages(d, "capacity") == [
        "ns/w on GPU-zero (n1 #0) uses 100 MiB, above its limit of 0 MiB"
    ]


def test_containers_allocating_0_give_namespaces_no_share() -> None:
    """(R-X1) When every container's core and memory allocation is 0, no namespace has a
    share of the total (0 of 0): null in JSON, no "% of all" in the text."""
    sched = """\
hami_gpu_core_limit_ratio{node="n1",device_index="0",device_uuid="GPU-a",zone="vGPU"} 100
hami_vgpu_core_allocated_ratio{container_index="0",device_uuid="GPU-a",namespace="ns-a",node="n1",pod="p",zone="vGPU"} 0
hami_vgpu_memory_allocated_bytes{container_index="0",device_uuid="GPU-a",namespace="ns-a",node="n1",pod="p",zone="vGPU"} 0
hami_vgpu_core_allocated_ratio{container_index="0",device_uuid="GPU-a",namespace="ns-b",node="n1",pod="q",zone="vGPU"} 0
hami_vgpu_memory_allocated_bytes{container_index="0",device_uuid="GPU-a",namespace="ns-b",node="n1",pod="q",zone="vGPU"} 0
"""  # noqa: E501
    d, text = report(("sched", sched))
    for ns in ("ns-a", "ns-b"):
        n = d["namespaces"][ns]
        assert (n["cores_allocated"], n["memory_allocated_mib"]) == (0, 0)
        assert n["core_share_percent"] is None and n["memory_share_percent"] is None
    for ns in ("ns-a", "ns-b"):
        assert lines_of(text, f"  {ns}: pods 1", 1) == ["    allocated  cores 0, memory 0 MiB"]
    assert "% of all" not in text


def test_a_negative_allocation_over_a_tiny_limit_is_no_share_and_no_crash() -> None:
    """(R-X1) A device whose allocation is negative (-1e300 cores over a limit of 1e-300: the
    ratio overflows to minus infinity) has no allocation percentage and no share to judge
    a spread by; the report is printed, its percentages finite. (It raised OverflowError
    formatting the spread.)"""
    sched = """\
hami_gpu_core_limit_ratio{node="n1",device_index="0",device_uuid="GPU-a",zone="vGPU"} 1e-300
hami_gpu_core_allocated_ratio{node="n1",device_index="0",device_uuid="GPU-a",zone="vGPU"} -1e300
hami_gpu_core_limit_ratio{node="n1",device_index="1",device_uuid="GPU-b",zone="vGPU"} 100
hami_gpu_core_allocated_ratio{node="n1",device_index="1",device_uuid="GPU-b",zone="vGPU"} 50
hami_gpu_core_limit_ratio{node="n1",device_index="2",device_uuid="GPU-c",zone="vGPU"} 100
hami_gpu_core_allocated_ratio{node="n1",device_index="2",device_uuid="GPU-c",zone="vGPU"} 0
"""
    d, text = report(("sched", sched))
    assert device(d, "n1", 0)["core_allocation_percent"] is None
    assert device(d, "n1", 1)["core_allocation_percent"] == 50
    # GPU-b at 0.5 and GPU-c at 0 are judged; GPU-a has no share.
    assert d["distribution"] == "concentrated"
    assert d["distribution_reason"] == (
        "1 of 2 devices carry the load (1 with nothing allocated); from 0% to 50% allocated"
        " (judged on the 2 of 3 devices with figures)"
    )
    assert "distribution      concentrated (by allocation): 1 of 2 devices" in text


def test_negative_memory_in_use_over_a_tiny_total_is_no_share_and_no_crash() -> None:
    """(R-X1) The same in a usage-only paste: a card whose memory in use is negative over a
    memory total of 1e-300 MiB (the share overflows to minus infinity) has no share in use
    to judge a spread by; the others are judged. (It raised OverflowError.)"""
    agent = """\
gpustack_accelerator_memory_total_mib{id="GPU-a",index="0",node="n1"} 1e-300
gpustack_accelerator_memory_used_mib{id="GPU-a",index="0",node="n1"} -1e300
gpustack_accelerator_memory_total_mib{id="GPU-b",index="1",node="n1"} 1000
gpustack_accelerator_memory_used_mib{id="GPU-b",index="1",node="n1"} 500
gpustack_accelerator_memory_total_mib{id="GPU-c",index="2",node="n1"} 1000
gpustack_accelerator_memory_used_mib{id="GPU-c",index="2",node="n1"} 0
"""
    d, _ = report(("agent", agent))
    assert (d["distribution"], d["distribution_basis"]) == ("concentrated", "usage")
    assert d["distribution_reason"] == (
        "1 of 2 devices carry the load (1 with nothing in use); from 0% to 50% in use"
        " (judged on the 2 of 3 devices with figures)"
    )


# --- Rule 2: a UUID several devices share is ambiguous, never the first device's -------------


def scheduler_pair(first: tuple[str, int], second: tuple[str, int], uuid: str) -> str:
    """HAMi's five device families for two devices at (node, index) that publish one UUID:
    100 cores and 1024 MiB each, nothing allocated. Written out, not generated."""
    (n1, i1), (n2, i2) = first, second
    a = f'node="{n1}",device_index="{i1}",device_uuid="{uuid}",zone="vGPU"'
    b = f'node="{n2}",device_index="{i2}",device_uuid="{uuid}",zone="vGPU"'
    return (
        f"hami_gpu_core_limit_ratio{{{a}}} 100\n"
        f"hami_gpu_core_limit_ratio{{{b}}} 100\n"
        f"hami_gpu_core_allocated_ratio{{{a}}} 0\n"
        f"hami_gpu_core_allocated_ratio{{{b}}} 0\n"
        f"hami_gpu_memory_limit_bytes{{{a}}} 1073741824\n"
        f"hami_gpu_memory_limit_bytes{{{b}}} 1073741824\n"
        f"hami_gpu_memory_allocated_bytes{{{a}}} 0\n"
        f"hami_gpu_memory_allocated_bytes{{{b}}} 0\n"
        f"hami_gpu_shared_count{{{a}}} 0\n"
        f"hami_gpu_shared_count{{{b}}} 0\n"
    )


def test_usage_naming_a_uuid_two_nodes_share_is_given_to_neither() -> None:
    """(R-X1) Two nodes' devices publish one (redacted) UUID at index 0. The legacy
    monitor's series name no node: its card figures and its container's figures could be
    either device, so they are reported `ambiguous` and attributed to neither (not to the
    first device seen, n1 #0), beside the `collision` that names both."""
    sched = scheduler_pair(("n1", 0), ("n2", 0), REDACTED)
    monitor = f"""\
HostCoreUtilization{{deviceidx="0",deviceuuid="{REDACTED}",zone="vGPU"}} 80
HostGPUMemoryUsage{{deviceidx="0",deviceuuid="{REDACTED}",zone="vGPU"}} 1073741824
vGPU_device_memory_usage_in_bytes{{ctrname="c",deviceuuid="{REDACTED}",podname="p",podnamespace="ns",vdeviceid="0",zone="vGPU"}} 536870912
Device_utilization_desc_of_container{{ctrname="c",deviceuuid="{REDACTED}",podname="p",podnamespace="ns",vdeviceid="0",zone="vGPU"}} 30
"""  # noqa: E501
    d, text = report(("sched", sched), ("mon", monitor))
    for node in ("n1", "n2"):
        x = device(d, node, 0)
        assert x["host_cores_utilization_percent"] is None, x
        assert x["host_memory_used_mib"] is None, x
        assert x["containers"] == 0, x
    assert d["capacity"]["host_memory_used_mib"] is None
    # The container keeps its own figures (512 MiB, 30%) but no device, node or index.
    [p] = rows_of(d, "p")
    assert (p["memory_used_mib"], p["cores_used_percent"]) == (512, 30)
    assert (p["node"], p["device_index"], p["device"]) == (None, None, REDACTED)
    assert messages(d, "collision") == [
        f"2 devices share the UUID {REDACTED} (n1 #0, n2 #0); a redacted UUID? They are kept "
        "apart by node and index; a series naming only the UUID is attributed through its pod "
        "where the scheduler places the pod on one of them"
    ]
    [ambiguous] = messages(d, "ambiguous")
    assert ambiguous.startswith("mon: 4 series could mean several devices and were not attributed")
    assert "HostCoreUtilization line 1" in ambiguous
    assert "utilization 80%" not in text and "memory in use 1024 MiB" not in text


def test_an_allocation_naming_a_uuid_two_cards_of_a_node_share_is_given_to_neither() -> None:
    """(R-X1) Two cards of one node publish one UUID. The scheduler's container series name
    the node and the UUID, not the card's index: the allocation could be either card's, so
    it is `ambiguous` and counted on neither (not on #0, the first seen)."""
    sched = scheduler_pair(("n1", 0), ("n1", 1), REDACTED) + (
        f'hami_vgpu_core_allocated_ratio{{container_index="0",device_uuid="{REDACTED}",'
        f'namespace="ns",node="n1",pod="p",zone="vGPU"}} 30\n'
        f'hami_vgpu_memory_allocated_bytes{{container_index="0",device_uuid="{REDACTED}",'
        f'namespace="ns",node="n1",pod="p",zone="vGPU"}} 536870912\n'
    )
    d, _ = report(("sched", sched))
    for index in (0, 1):
        assert device(d, "n1", index)["containers"] == 0
    [p] = rows_of(d, "p")
    assert (p["cores_allocated"], p["memory_allocated_mib"]) == (30, 512)
    assert (p["device_index"], p["device"]) == (None, REDACTED)
    [ambiguous] = messages(d, "ambiguous")
    assert ambiguous.startswith(
        "sched: 2 series could mean several devices and were not attributed "
        "(hami_vgpu_core_allocated_ratio line 11; hami_vgpu_memory_allocated_bytes line 12)"
    )
    assert len(messages(d, "collision")) == 1


def test_a_pod_on_both_cards_that_share_a_uuid_does_not_say_which_its_usage_is() -> None:
    """(R-X1) A series that names only a shared UUID goes to its pod's device only when the
    scheduler places the pod on exactly one of the devices. HAMi-DRA places pod p on both
    cards (#0 and #1, one redacted UUID): the monitor's p is `ambiguous`, given to neither;
    pod q is on #1 only, so the monitor's q is #1's."""
    dra = 'devicebrand="Tesla",deviceproductname="Tesla P4",nodeid="n1",deviceuuid="' + REDACTED
    sched = f"""\
GPUDeviceCoreLimit{{{dra}",deviceidx="0",devicename="hami-gpu-0"}} 100
GPUDeviceCoreLimit{{{dra}",deviceidx="1",devicename="hami-gpu-1"}} 100
vGPUDeviceCoreAllocated{{{dra}",deviceidx="0",devicename="hami-gpu-0",podname="p",podnamespace="ns"}} 50
vGPUDeviceCoreAllocated{{{dra}",deviceidx="1",devicename="hami-gpu-1",podname="p",podnamespace="ns"}} 50
vGPUDeviceCoreAllocated{{{dra}",deviceidx="1",devicename="hami-gpu-1",podname="q",podnamespace="ns"}} 20
"""  # noqa: E501
    monitor = f"""\
hami_vgpu_memory_used_bytes{{container="c",device_uuid="{REDACTED}",namespace="ns",pod="p",vdevice_index="0",zone="vGPU"}} 2147483648
hami_vgpu_memory_used_bytes{{container="c",device_uuid="{REDACTED}",namespace="ns",pod="q",vdevice_index="0",zone="vGPU"}} 1073741824
"""  # noqa: E501
    d, _ = report(("sched", sched), ("mon", monitor))
    [p_used] = [c for c in rows_of(d, "p") if c["container"] == "c"]
    assert p_used["memory_used_mib"] == 2048
    assert (p_used["node"], p_used["device_index"]) == (None, None)
    # p's two allocations stay on their own cards.
    assert sorted(c["device_index"] for c in rows_of(d, "p") if c["container"] is None) == [0, 1]
    [q_used] = [c for c in rows_of(d, "q") if c["container"] == "c"]
    assert (q_used["node"], q_used["device_index"], q_used["memory_used_mib"]) == ("n1", 1, 1024)
    # #0: p's allocation; #1: p's and q's allocations and q's usage.
    assert device(d, "n1", 0)["containers"] == 1
    assert device(d, "n1", 1)["containers"] == 3
    [ambiguous] = messages(d, "ambiguous")
    assert ambiguous.startswith(
        "mon: 1 series could mean several devices and were not attributed "
        "(hami_vgpu_memory_used_bytes line 1)"
    )


# --- Rule 3: a partition's compute is on the partition's own scale ---------------------------

CARD = """\
gpustack_accelerator_info{id="GPU-card",index="1",name="Card",node="n1",parent_id=""} 1
gpustack_accelerator_memory_total_mib{id="GPU-card",index="1",node="n1"} 81559
gpustack_accelerator_cores_utilization_percent{id="GPU-card",index="1",node="n1"} 20
"""


@pytest.mark.parametrize(
    "partition",
    [
        "MIG-5c1a0b7e-3f2d-5e8a-9b4c-7d6e5f4a3b2c",  # NVIDIA MIG (a 3g.40gb on an H100)
        "MIG-GPU-7e8f6b3ac49bc87a/3/0",  # Hygon MIG, GPU/GI/CI
        "vdavinci100",  # Ascend vNPU
        "vDCU-1",  # Hygon vDCU
    ],
)
def test_a_partitions_compute_is_a_percent_of_the_partition(partition: str) -> None:
    """(R-X1) This agent states a Partitioned grant's compute against the partition itself
    (docs/grants-and-figures.md: "the partition's ... never restated"). A 3g partition at
    50% busy reads 50% of its own allowance: not 50% of the card (`cores_used_percent`),
    not 50 x 40192 / 81559 = 24.64 (its memory share of the card), not 50 x 3/7 = 21.43.
    The partition is not a device of its own, and the card keeps its own 20%."""
    grant = (
        f'id="{partition}",index="1",instance_name="llm",mode="Partitioned",namespace="ns",'
        'node="n1"'
    )
    agent = CARD + (
        f"gpustack_instance_accelerator_memory_total_mib{{{grant}}} 40192\n"
        f"gpustack_instance_accelerator_cores_utilization_percent{{{grant}}} 50\n"
    )
    d, text = report(("agent", agent))
    [llm] = rows_of(d, "llm")
    assert llm["cores_used_percent_of_limit"] == 50
    assert llm["cores_used_percent"] is None
    assert (llm["device"], llm["device_index"], llm["memory_limit_mib"]) == ("GPU-card", 1, 40192)
    assert llm["mig_instance"]["uuid"] == partition
    [card] = d["devices"]
    assert (card["uuid"], card["host_cores_utilization_percent"]) == ("GPU-card", 20)
    assert card["containers"] == 1
    assert "utilization not present (50% of its own allowance)" in text
    assert d["findings"] == []


def test_an_xcps_compute_is_the_xcps_own_and_its_board_is_no_device() -> None:
    """(R-X1) AMD XCPs are listed as devices of their own, with their board as parent: an
    XCP's 50% is that XCP's (not halved over the board's two XCPs, not the board's), the
    board is not one more device, and a Partitioned grant on the XCP reads 50% of itself."""
    agent = """\
gpustack_accelerator_info{id="GPU-board",index="3",name="AMD Instinct MI300X",node="n1",parent_id=""} 1
gpustack_accelerator_info{id="xcp-a",index="3",name="AMD Instinct MI300X",node="n1",parent_id="GPU-board"} 1
gpustack_accelerator_info{id="xcp-b",index="4",name="AMD Instinct MI300X",node="n1",parent_id="GPU-board"} 1
gpustack_accelerator_cores_utilization_percent{id="xcp-a",index="3",node="n1"} 50
gpustack_accelerator_cores_utilization_percent{id="xcp-b",index="4",node="n1"} 0
gpustack_instance_accelerator_cores_utilization_percent{id="xcp-a",index="3",instance_name="llm",mode="Partitioned",namespace="ns",node="n1"} 50
"""  # noqa: E501
    d, _ = report(("agent", agent))
    assert [(x["uuid"], x["index"]) for x in d["devices"]] == [("xcp-a", 3), ("xcp-b", 4)]
    assert device(d, "n1", 3)["host_cores_utilization_percent"] == 50
    assert device(d, "n1", 4)["host_cores_utilization_percent"] == 0
    [llm] = rows_of(d, "llm")
    assert (llm["device"], llm["cores_used_percent_of_limit"]) == ("xcp-a", 50)
    assert llm["cores_used_percent"] is None
    assert d["findings"] == []


def test_hamis_mig_figures_are_not_restated_on_the_profiles_share() -> None:
    """(R-X1) HAMi's MIG families only name the instance (3g.20gb on an A100); the
    allocation and the monitor's utilization are read as published on their own scales:
    40 of the card's 100 cores (40%), the container's 50% (not 50 x 3/7 = 21.43, not
    scaled by the 20 of 40 GiB), the card's own 21%."""
    at = 'device_index="0",device_uuid="GPU-a100",node="n1",zone="vGPU"'
    slot = 'container_index="0",device_uuid="GPU-a100",namespace="ns",node="n1",pod="train"'
    ctr = 'container="c",device_uuid="GPU-a100",namespace="ns",pod="train",vdevice_index="0"'
    sched = f"""\
hami_gpu_core_limit_ratio{{{at}}} 100
hami_gpu_core_allocated_ratio{{{at}}} 40
hami_gpu_memory_limit_bytes{{{at}}} 42949672960
hami_gpu_memory_allocated_bytes{{{at}}} 21474836480
hami_gpu_shared_count{{{at}}} 1
hami_node_gpu_mig_instance_info{{{at},mig_uuid="MIG-3g",profile="3g.20gb",gpu_instance_id="2",compute_instance_id="0"}} 1
hami_vgpu_core_allocated_ratio{{{slot}}} 40
hami_vgpu_memory_allocated_bytes{{{slot}}} 21474836480
"""  # noqa: E501
    monitor = f"""\
hami_host_gpu_utilization_ratio{{{at}}} 21
hami_host_gpu_memory_used_bytes{{{at}}} 10737418240
hami_mig_device_info{{{ctr},mig_uuid="MIG-3g",profile="3g.20gb",gpu_instance_id="2",compute_instance_id="0"}} 1
hami_container_device_utilization_ratio{{{ctr}}} 50
"""  # noqa: E501
    d, text = report(("sched", sched), ("mon", monitor))
    [train] = rows_of(d, "train")
    assert train["cores_used_percent"] == 50
    assert (train["cores_allocated"], train["memory_allocated_mib"]) == (40, 20480)
    assert train["mig_instance"]["profile"] == "3g.20gb"
    gpu = device(d, "n1", 0)
    assert gpu["host_cores_utilization_percent"] == 21
    assert (gpu["core_allocation_percent"], gpu["memory_allocation_percent"]) == (40, 50)
    assert "utilization 50%" in text
    assert d["findings"] == []


# --- No paste of the known families raises or prints a non-finite percentage ----------------

# Edge values, drawn more often than any other: 0, negatives, the tiniest and largest
# floats (a tiny limit under a huge negative allocation overflows a ratio to -infinity).
_LARGEST = sys.float_info.max
_EDGES = st.sampled_from(
    [0.0, -0.0, 1.0, -1.0, 100.0, 1048575.0, float(2**30), 5e-324, 1e-300, _LARGEST, -_LARGEST]
)
_NUMBERS = st.one_of(
    _EDGES,
    _EDGES,
    _EDGES,
    _EDGES,
    _EDGES,
    _EDGES,
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(min_value=-(2**70), max_value=2**70),
)
# Values by meaning: a few that name the same devices and pods again, so that series meet;
# and any text without a "%", so that every "%" in the report is one the report printed.
_ANY_TEXT = st.text(alphabet=st.characters(blacklist_characters="%\n"), max_size=10)
_POOLS: dict[str, list[str]] = {
    "node": ["n1", "n2"],
    "uuid": ["GPU-a", "GPU-b", REDACTED, "MIG-a", "vdavinci100"],
    "index": ["0", "1", "-1", "01"],
    "namespace": ["ns", "kube-system"],
    "pod": ["p", "q"],
    "container": ["c"],
    "container_index": ["0", "1"],
    "vdevice_index": ["0", "1"],
    "quota": ["nvidia.com/gpumem", "nvidia.com/gpucores", "nvidia.com/gpumem-percentage"],
    "mode": ["Exclusive", "Shared", "Sliced", "Partitioned", "Visibility"],
}
_EXTRA = ["limit", "parent_id", "device_memory_limit", "shared_containers", "deviceusedcore"]
_EXTRA += ["context", "module", "data", "context_size", "module_size", "buffer_size"]
_EXTRA += ["devicebrand", "profile", "gpu_instance_id", "mig_uuid"]


def _number_text(value: float | int) -> str:
    return str(value) if isinstance(value, int) else repr(value)


def _escaped(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _label_set(draw: st.DrawFn, meanings: list[str]) -> dict[str, str]:
    """Labels for `meanings`, each under one of its names, valued from its pool or any text."""
    labels: dict[str, str] = {}
    for meaning in meanings:
        name = draw(st.sampled_from(LABELS[meaning]))
        pool = _POOLS.get(meaning, [])
        pooled = st.sampled_from(pool)
        labels[name] = draw(st.one_of(pooled, pooled, pooled, _ANY_TEXT) if pool else _ANY_TEXT)
    for name in draw(st.sets(st.sampled_from(_EXTRA), max_size=3)):
        labels[name] = draw(
            st.one_of(
                _NUMBERS.map(_number_text), st.sampled_from(["", "GPU-board", "NaN"]), _ANY_TEXT
            )
        )
    return labels


def _line(family: str, labels: dict[str, str], value: float | int) -> str:
    body = ",".join(f'{k}="{_escaped(v)}"' for k, v in labels.items())
    return f"{family}{{{body}}} {_number_text(value)}"


@st.composite
def _known_lines(draw: st.DrawFn) -> str:
    """One sample of any family the report reads, with any labels."""
    family = draw(st.sampled_from(sorted(BY_NAME)))
    meanings = sorted(draw(st.sets(st.sampled_from(sorted(LABELS)), max_size=8)))
    return _line(family, _label_set(draw, meanings), draw(_NUMBERS))


_DEVICE_FAMILIES = sorted(n for n, f in BY_NAME.items() if f.scope is not Scope.QUOTA)
# A device's limit and its allocation, in every name each is published under: the figures
# divided by one another, drawn together so that they meet on one device.
_LIMIT_AND_ALLOCATION = [
    (limit, allocation)
    for limit_figure, allocation_figure in (
        (Figure.CORES_LIMIT, Figure.CORES_ALLOCATED),
        (Figure.MEMORY_LIMIT, Figure.MEMORY_ALLOCATED),
        (Figure.MEMORY_LIMIT, Figure.HOST_MEMORY_USED),
        (Figure.HOST_MEMORY_TOTAL, Figure.HOST_MEMORY_USED),
    )
    for limit, lf in sorted(BY_NAME.items())
    if lf.scope is Scope.DEVICE and lf.figure is limit_figure
    for allocation, af in sorted(BY_NAME.items())
    if af.scope is Scope.DEVICE and af.figure is allocation_figure
]


@st.composite
def _device_block(draw: st.DrawFn) -> list[str]:
    """Several families naming one device (or container) the same way, as a scrape does,
    so that figures meet: an allocation and its limit, a ratio and its memory."""
    dropped = draw(st.sampled_from([(), (), (), ("node",), ("index",), ("uuid",)]))
    meanings = sorted(
        {"node", "index", "uuid"} - set(dropped)
        | draw(st.sets(st.sampled_from(sorted(LABELS)), max_size=4))
    )
    labels = _label_set(draw, meanings)
    families = draw(st.lists(st.sampled_from(_DEVICE_FAMILIES), max_size=4))
    for pair in draw(st.lists(st.sampled_from(_LIMIT_AND_ALLOCATION), min_size=1, max_size=2)):
        families += pair
    return [_line(family, labels, draw(_NUMBERS)) for family in families]


_PASTE = st.lists(
    st.one_of(_known_lines().map(lambda line: [line]), _device_block(), _device_block()),
    min_size=1,
    max_size=8,
).map(lambda blocks: [line for block in blocks for line in block])


def _percent_fields(node: object, where: str = "") -> list[tuple[str, object]]:
    if isinstance(node, dict):
        out: list[tuple[str, object]] = []
        for key, value in node.items():
            if key.endswith("_percent"):
                out.append((f"{where}.{key}", value))
            out.extend(_percent_fields(value, f"{where}.{key}"))
        return out
    if isinstance(node, list):
        return [x for i, v in enumerate(node) for x in _percent_fields(v, f"{where}[{i}]")]
    return []


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_PASTE, min_size=1, max_size=2))
def test_no_paste_of_known_families_raises_or_prints_a_non_finite_percentage(
    sources: list[list[str]],
) -> None:
    """(R-X1) Any paste made of the families the report reads, with any finite value (0,
    negative, huge, tiny) and any label values, is summarized without raising, in text and
    JSON; every percentage it holds is null or a finite number, and every "p%" in the text
    is a finite number."""
    r = summarize_texts([(f"s{i}", "\n".join(lines) + "\n") for i, lines in enumerate(sources)])
    d = json.loads(to_json(r), parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))
    for where, value in _percent_fields(d):
        assert value is None or (isinstance(value, int | float) and math.isfinite(value)), (
            where,
            value,
        )
    text = to_text(r)
    for token in re.findall(r"([^\s(]*)%", text):
        assert math.isfinite(float(token)), (token, text)
