"""Grants through Dynamic Resource Allocation, the pure part (R-X6): a claimed device, named by
(driver, pool, device), resolved through the node's ResourceSlices to a card or a partition,
and the claim's status deciding Exclusive, Shared, Sliced or no grant at all. Every expected
value is written by hand."""

from __future__ import annotations

from types import MappingProxyType

from devicemanager.grants import deviceplugins, dra
from devicemanager.grants.allocations import Mode
from devicemanager.grants.deviceplugins import KubeletAnswer, PodDevices
from devicemanager.grants.dra import (
    AllocationResult,
    ClaimDevice,
    ClaimStatus,
    ContainerClaim,
    DeviceTaint,
    DraDevice,
    inventory_of,
)
from devicemanager.grants.node import node_grants
from devicemanager.model import Card, CardTaint, VendorReading
from devicemanager.node.pods import PodIndex
from tests.world import gpu, pod, uid

NV = "gpu.nvidia.com"
POOL = "node-1"
MIG = "MIG-11111111-2222-4333-8444-555555555555"
GIB = 1 << 30


def nv_gpu(name: str, n: int, **more: object) -> DraDevice:
    attrs = {"type": "gpu", "uuid": gpu(n), "index": n, "productName": "NVIDIA H100 80GB HBM3"}
    return DraDevice(NV, POOL, name, MappingProxyType({**attrs, **more}))


def nv_mig(name: str, parent: int, own: str, profile: str) -> DraDevice:
    attrs = {"type": "mig", "uuid": own, "parentUUID": gpu(parent), "profile": profile}
    return DraDevice(NV, POOL, name, MappingProxyType(attrs))


READING = VendorReading(
    manufacturer="nvidia",
    cards=tuple(Card(id=gpu(n), index=n, name="H100") for n in range(4)),
)
ALIASES = deviceplugins.aliases_of([READING])


def claim(container: str, name: str, *devices: ClaimDevice, ns: str = "ns") -> ContainerClaim:
    return ContainerClaim(container, ns, name, devices)


def on(device: str, share: str | None = None, driver: str = NV) -> ClaimDevice:
    return ClaimDevice(driver, POOL, device, share)


def alloc(claims: list[ContainerClaim], inventory: dra.DraInventory | None, pod_uid: str = "p"):  # type: ignore[no-untyped-def]
    return dra.pod_allocations(claims, inventory, ALIASES, pod_uid)


def test_a_whole_gpu_in_a_claim_of_one_container_is_exclusive() -> None:
    inventory = inventory_of([nv_gpu("gpu-0", 0), nv_gpu("gpu-1", 1)])
    got = alloc([claim("main", "c1", on("gpu-1"))], inventory)
    ((a,), ()) = (got.allocations, got.unresolved)
    assert (a.container, a.manufacturer, a.device_id, a.mode, a.source) == (
        "main",
        "nvidia",
        gpu(1),
        Mode.EXCLUSIVE,
        "dra",
    )


def test_a_mig_device_is_a_partition_of_its_parent_card() -> None:
    inventory = inventory_of([nv_mig("gpu-2-mig-1g10gb-0", 2, MIG, "1g.10gb")])
    ((a,), ()) = (
        (got := alloc([claim("main", "c1", on("gpu-2-mig-1g10gb-0"))], inventory)).allocations,
        got.unresolved,
    )
    assert (a.device_id, a.mode, a.partition_id, a.profile) == (
        gpu(2),
        Mode.PARTITIONED,
        MIG,
        "1g.10gb",
    )


def test_a_claim_reserved_for_two_pods_is_shared_and_for_one_is_not() -> None:
    two = ClaimStatus("ns", "c1", reserved_for=("p", "q"))
    one = ClaimStatus("ns", "c1", reserved_for=("p",))
    for status, mode in ((two, Mode.SHARED), (one, Mode.EXCLUSIVE)):
        inventory = inventory_of([nv_gpu("gpu-0", 0)], claims=[status])
        (a,) = alloc([claim("main", "c1", on("gpu-0"))], inventory, "p").allocations
        assert a.mode is mode


def test_one_claim_named_by_two_containers_of_a_pod_is_shared_by_both() -> None:
    inventory = inventory_of([nv_gpu("gpu-0", 0)])
    got = alloc([claim("a", "c1", on("gpu-0")), claim("b", "c1", on("gpu-0"))], inventory)
    assert [(x.container, x.mode) for x in got.allocations] == [
        ("a", Mode.SHARED),
        ("b", Mode.SHARED),
    ]


def test_a_consumable_capacity_share_is_a_slice_of_the_memory_it_consumed() -> None:
    status = ClaimStatus(
        "ns",
        "c1",
        results=(
            AllocationResult(NV, POOL, "gpu-0", share_id="s-2", consumed_capacity={"memory": 9}),
            AllocationResult(
                NV, POOL, "gpu-0", share_id="s-1", consumed_capacity={"memory": 20 * GIB}
            ),
        ),
    )
    inventory = inventory_of([nv_gpu("gpu-0", 0)], claims=[status])
    (a,) = alloc([claim("main", "c1", on("gpu-0", "s-1"))], inventory).allocations
    assert (a.device_id, a.mode, a.memory_mib) == (gpu(0), Mode.SLICED, 20480)


def test_a_share_whose_claim_was_not_read_is_no_grant_with_its_reason() -> None:
    inventory = inventory_of([nv_gpu("gpu-0", 0)], missing_claims=[("ns", "c1")])
    got = alloc([claim("main", "c1", on("gpu-0", "s-1"))], inventory)
    assert got.allocations == ()
    assert [(u.container, u.claim, u.reason) for u in got.unresolved] == [
        ("main", "ns/c1", dra.NO_CLAIM)
    ]


def test_an_admin_access_claim_sees_the_device_and_holds_none_of_it() -> None:
    status = ClaimStatus(
        "monitoring", "all-gpus", results=(AllocationResult(NV, POOL, "gpu-0", admin_access=True),)
    )
    inventory = inventory_of([nv_gpu("gpu-0", 0)], claims=[status])
    got = alloc([claim("exporter", "all-gpus", on("gpu-0"), ns="monitoring")], inventory)
    assert (got.allocations, got.unresolved) == ((), ())


def test_what_cannot_be_resolved_is_no_grant_and_says_why() -> None:
    inventory = inventory_of(
        [
            nv_gpu("gpu-0", 0),
            nv_gpu("gpu-0", 1),  # named twice: neither
            DraDevice("gpu.example.com", POOL, "x-0", MappingProxyType({"model": "X1"})),
        ]
    )
    got = alloc(
        [
            claim("a", "c1", on("gpu-0")),
            claim("b", "c2", on("gpu-9")),
            claim("c", "c3", on("x-0", driver="gpu.example.com")),
        ],
        inventory,
    )
    assert got.allocations == ()
    assert [(u.container, u.reason) for u in got.unresolved] == [
        ("a", dra.DUPLICATE),
        ("b", dra.NO_SLICE),
        ("c", dra.UNMATCHED),
    ]
    # Without an inventory nothing is resolved, and each device says so.
    (missed,) = alloc([claim("a", "c1", on("gpu-0"))], None).unresolved
    assert missed.reason == dra.NO_INVENTORY
    (missed,) = alloc([claim("a", "c1", on("gpu-0"))], dra.DraInventory(error="404")).unresolved
    assert missed.reason == dra.NO_INVENTORY


def test_a_driver_of_another_name_is_matched_by_a_bus_id_the_library_knows() -> None:
    amd = VendorReading(
        manufacturer="amd",
        cards=(Card(id="GPU-0x1234", index=0, aliases=("0000:05:00.0",)),),
    )
    aliases = deviceplugins.aliases_of([amd])
    device = DraDevice("gpu.vendor.example", POOL, "d0", MappingProxyType({"pciBusID": "05:00.0"}))
    assert dra.resolve(device, aliases) == dra.Resolved("amd", "GPU-0x1234")


def test_a_known_drivers_own_uuid_names_a_card_the_library_does_not_list() -> None:
    # The card the library lost is then the lost-card rule's, not an unmatched device.
    device = nv_gpu("gpu-7", 7)
    assert dra.resolve(device, ALIASES) == dra.Resolved("nvidia", gpu(7))
    # Another driver's UUID-looking attribute is never taken as a card id of its own.
    other = DraDevice("gpu.example.com", POOL, "g", MappingProxyType({"uuid": gpu(7)}))
    assert dra.resolve(other, ALIASES) is None


def test_a_tainted_device_marks_its_card_unhealthy_with_the_taint() -> None:
    tainted = DraDevice(
        NV,
        POOL,
        "gpu-1",
        MappingProxyType({"uuid": gpu(1)}),
        taints=(DeviceTaint("gpu.nvidia.com/xid", "79", "NoExecute"),),
    )
    inventory = inventory_of([nv_gpu("gpu-0", 0), tainted])
    got = deviceplugins.with_dra_health(READING, inventory, ALIASES)
    assert [(c.id, c.unhealthy, c.unhealthy_reason) for c in got.cards[:2]] == [
        (gpu(0), False, None),
        (gpu(1), True, "gpu.nvidia.com/xid=79"),
    ]
    assert deviceplugins.with_dra_health(READING, inventory_of([]), ALIASES) is READING
    # the kubelet's word (allocatedResourcesStatus) joins the taint's on the same card; its
    # `Unknown` (the driver does not say) is published, never unhealthy (R-X11)
    said = {
        ("nvidia", gpu(1)): dra.KubeletSays("kubelet:Unhealthy"),
        ("nvidia", gpu(2)): dra.KubeletSays(unknown=True),
    }
    got = deviceplugins.with_dra_health(READING, inventory, ALIASES, said)
    assert [(c.id, c.unhealthy, c.unhealthy_reason, c.kubelet_health) for c in got.cards[:3]] == [
        (gpu(0), False, None, None),
        (gpu(1), True, "gpu.nvidia.com/xid=79,kubelet:Unhealthy", "Unhealthy"),
        (gpu(2), False, None, "Unknown"),
    ]


# -- DRA health as Kubernetes means it (R-X11) ---------------------------------------------------


def tainted_gpu(n: int, *taints: DeviceTaint) -> DraDevice:
    return DraDevice(NV, POOL, f"gpu-{n}", MappingProxyType({"uuid": gpu(n)}), taints=taints)


def health(reading: VendorReading) -> list[tuple[bool, str | None, tuple[CardTaint, ...]]]:
    return [(c.unhealthy, c.unhealthy_reason, c.device_taints) for c in reading.cards]


def test_a_taints_effect_decides_whether_it_marks_the_card() -> None:
    """R-X11: NoSchedule and NoExecute keep pods off the device, so its card is unhealthy with
    key=value as reason; None is information (NVIDIA's non-fatal XID 43, `unmonitored`), and an
    effect Kubernetes does not define is treated like None, as its API says consumers must."""
    xid43 = DeviceTaint("gpu.nvidia.com/xid", "43", "None")
    unmonitored = DeviceTaint("gpu.nvidia.com/unmonitored", "", "None")
    future = DeviceTaint("example.com/drain-soon", "yes", "PreferNoSchedule")
    inventory = inventory_of(
        [
            tainted_gpu(0, xid43, unmonitored),
            tainted_gpu(1, DeviceTaint("gpu.nvidia.com/gpu-lost", "", "NoSchedule"), xid43),
            tainted_gpu(2, DeviceTaint("example.com/hbm", "rma", "NoExecute")),
            tainted_gpu(3, future),
        ]
    )
    got = deviceplugins.with_dra_health(READING, inventory, ALIASES)
    assert health(got) == [
        (
            False,
            None,
            (
                CardTaint("gpu.nvidia.com/unmonitored", "", "None"),
                CardTaint("gpu.nvidia.com/xid", "43", "None"),
            ),
        ),
        (
            True,
            "gpu.nvidia.com/gpu-lost",
            (
                CardTaint("gpu.nvidia.com/gpu-lost", "", "NoSchedule"),
                CardTaint("gpu.nvidia.com/xid", "43", "None"),
            ),
        ),
        (True, "example.com/hbm=rma", (CardTaint("example.com/hbm", "rma", "NoExecute"),)),
        (False, None, (CardTaint("example.com/drain-soon", "yes", "PreferNoSchedule"),)),
    ]
    assert dra.tainted(inventory, ALIASES) == {
        ("nvidia", gpu(1)): "gpu.nvidia.com/gpu-lost",
        ("nvidia", gpu(2)): "example.com/hbm=rma",
    }


def test_a_taint_value_enters_the_reason_printable_and_bounded() -> None:
    """R-X11: a value is the cluster's text: what the reason keeps of it is printable, holds no
    `,` (which separates reasons) and is at most 128 characters."""
    odd = DeviceTaint("example.com/why", "a,b\nc\x00" + "x" * 300, "NoSchedule")
    (reason,) = dra.tainted(inventory_of([tainted_gpu(0, odd)]), ALIASES).values()
    assert reason == "example.com/why=a?b?c?" + "x" * 122
    assert len(reason) == len("example.com/why=") + 128


def test_a_device_taint_rule_adds_its_taint_to_the_devices_it_selects() -> None:
    """R-X11: an admin's DeviceTaintRule (KEP-5055) taints every device its selector names by
    driver, pool and device (an unset field matches any), cumulatively with the slice's own
    taints; a rule naming another driver or pool selects nothing here."""
    own = DeviceTaint("gpu.nvidia.com/xid", "43", "None")
    maintenance = DeviceTaint("example.com/maintenance", "hbm-rma", "NoExecute")
    rules = [
        dra.DeviceTaintRule("rma-gpu-1", maintenance, NV, POOL, "gpu-1"),
        dra.DeviceTaintRule("other-pool", DeviceTaint("x/y", "", "NoSchedule"), NV, "elsewhere"),
        dra.DeviceTaintRule("other-driver", DeviceTaint("x/z", "", "NoSchedule"), "gpu.amd.com"),
        dra.DeviceTaintRule("all-note", DeviceTaint("example.com/audit", "q4", "None")),
    ]
    inventory = inventory_of([tainted_gpu(0), tainted_gpu(1, own)], rules=rules)
    got = deviceplugins.with_dra_health(READING, inventory, ALIASES)
    audit = CardTaint("example.com/audit", "q4", "None")
    assert health(got)[:2] == [
        (False, None, (audit,)),
        (
            True,
            "example.com/maintenance=hbm-rma",
            (
                audit,
                CardTaint("example.com/maintenance", "hbm-rma", "NoExecute"),
                CardTaint("gpu.nvidia.com/xid", "43", "None"),
            ),
        ),
    ]
    assert dra.DeviceTaintRule("any", own).selects((NV, POOL, "gpu-9"))
    assert not dra.DeviceTaintRule("d", own, device="gpu-1").selects((NV, POOL, "gpu-0"))


def test_the_kubelets_cdi_device_name_reaches_its_card_and_unknown_marks_nothing() -> None:
    """R-X11: the kubelet names a DRA device's health by its first CDI device name
    (`k8s.gpu.nvidia.com/claim=<uid>-<device>`), which pod-resources gives per claim device;
    the triple form still resolves. `Unhealthy` marks the card with the kubelet's message
    (bounded, printable); `Unknown` is "the driver does not say", published, not unhealthy."""
    inventory = inventory_of([nv_gpu(f"gpu-{n}", n) for n in range(4)])
    cdi0 = "k8s.gpu.nvidia.com/claim=0b9a3c1e-0000-4000-8000-000000000001-gpu-0"
    cdi1 = "k8s.gpu.nvidia.com/claim=0b9a3c1e-0000-4000-8000-000000000001-gpu-1"
    claims = [
        claim(
            "main",
            "c1",
            ClaimDevice(NV, POOL, "gpu-0", cdi_devices=(cdi0,)),
            ClaimDevice(NV, POOL, "gpu-1", cdi_devices=(cdi1, "k8s.gpu.nvidia.com/extra=1")),
        ),
        claim("other", "c2", ClaimDevice(NV, POOL, "gpu-2", cdi_devices=(cdi0,))),  # reused
    ]
    cdi = dra.cdi_index(claims)
    assert cdi == {cdi1: (NV, POOL, "gpu-1"), "k8s.gpu.nvidia.com/extra=1": (NV, POOL, "gpu-1")}
    reports = [
        (cdi1, "Unhealthy", "XID 48, double-bit ECC\n"),
        (cdi1, "Unknown", None),
        (f"{NV}/{POOL}/gpu-3", "Unknown", None),
        (cdi0, "Unhealthy", None),  # two devices gave that name: it names neither
        ("k8s.gpu.nvidia.com/claim=never-given", "Unhealthy", None),
        (f"{NV}/{POOL}/gpu-2", "Healthy", None),
    ]
    said = dra.kubelet_health(reports, inventory, ALIASES, cdi)
    assert said == {
        ("nvidia", gpu(1)): dra.KubeletSays("kubelet:Unhealthy:XID 48? double-bit ECC", True),
        ("nvidia", gpu(3)): dra.KubeletSays(None, True),
    }
    got = deviceplugins.with_dra_health(READING, inventory, ALIASES, said)
    assert [(c.unhealthy, c.unhealthy_reason, c.kubelet_health) for c in got.cards] == [
        (False, None, None),
        (True, "kubelet:Unhealthy:XID 48? double-bit ECC", "Unhealthy"),
        (False, None, None),
        (False, None, "Unknown"),
    ]


def test_a_pod_without_annotations_holds_its_claims_and_an_annotated_pod_its_annotation() -> None:
    plain = pod("plain", pod_uid=uid("plain"))
    index = PodIndex.of([plain])
    answer = KubeletAnswer(
        pods=(PodDevices("ns", "plain", (), (claim("main", "c1", on("gpu-3")),)),)
    )
    inventory = inventory_of([nv_gpu("gpu-3", 3)])
    grants = node_grants(index, deviceplugins.pod_kubelet_grants(answer, index, ALIASES, inventory))
    ((g,),) = grants.by_pod.values()
    assert (g.pod_uid, g.containers, g.device_id, g.mode) == (
        uid("plain"),
        ("main",),
        gpu(3),
        Mode.EXCLUSIVE,
    )
    assert deviceplugins.claim_refs(answer) == frozenset({("ns", "c1")})
    assert deviceplugins.count_unresolved(answer, index, ALIASES, inventory_of([])) == {
        dra.NO_SLICE: 1
    }


def test_the_collector_says_whether_the_rounds_dra_inventory_was_read() -> None:
    """R-X6, R-E4: `success{source="dra"}` is 1 only for a fresh round that had the node's
    slices; the claimed devices that gave no grant are counted by reason; a node where DRA is
    not read publishes neither."""
    from prometheus_client.parser import text_string_to_metric_families

    from devicemanager.figures import exposition
    from devicemanager.model import Snapshot

    def rendered(fresh: bool, extras: exposition.Extras) -> dict[tuple[str, str], float]:
        snap = Snapshot(timestamp=1000.0, period_seconds=15, node="n1")
        text = exposition.render(exposition.collector_families(snap, fresh, extras)).decode()
        return {
            (s.name, s.labels.get("source") or s.labels.get("reason", "")): s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if "dra" in s.name or s.labels.get("source") == "dra"
        }

    success = "gpustack_instance_metrics_collector_success"
    unresolved = "gpustack_accelerator_dra_unresolved_devices"
    read = exposition.Extras(dra_success=True, dra_unresolved={dra.NO_SLICE: 2, dra.UNMATCHED: 1})
    assert rendered(True, read) == {
        (success, "dra"): 1.0,
        (unresolved, dra.NO_SLICE): 2.0,
        (unresolved, dra.UNMATCHED): 1.0,
    }
    assert rendered(False, read)[(success, "dra")] == 0.0  # a stale round
    assert rendered(True, exposition.Extras(dra_success=False)) == {(success, "dra"): 0.0}
    assert rendered(True, exposition.Extras()) == {}
