"""Grants through particular DRA drivers (R-X12): HAMi's `hami-core-gpu.project-hami.io` with its
`cores` cap, Ascend's `npu.huawei.com` by `physicId`, and NVIDIA's `--consumable-shares` modes
(`shares` of N, shares with 0 memory, shares of a MIG device). Device shapes as the upstream
drivers publish them (grants/dra_drivers.py cites each file); every expected value is worked
out by hand."""

from __future__ import annotations

from types import MappingProxyType

from devicemanager.figures.figures import View, entry
from devicemanager.figures.slices import Lookup
from devicemanager.grants import deviceplugins, dra, dra_drivers
from devicemanager.grants.allocations import Mode
from devicemanager.grants.deviceplugins import KubeletAnswer, PodDevices
from devicemanager.grants.dra import (
    AllocationResult,
    ClaimDevice,
    ClaimStatus,
    ContainerClaim,
    DraDevice,
    inventory_of,
)
from devicemanager.grants.grants import grants_from
from devicemanager.grants.node import node_grants
from devicemanager.model import Card, SliceDevice, SliceSection, SliceUsage, VendorReading
from devicemanager.node.pods import PodIndex
from tests.world import GIB, MIB, gpu, pod, uid

NV = "gpu.nvidia.com"
POOL = "node-1"
CARD_MIB = 81920  # an A100-SXM4-80GB
MIG = "MIG-11111111-2222-4333-8444-555555555555"
READING = VendorReading(
    manufacturer="nvidia",
    cards=tuple(
        Card(id=gpu(n), index=n, name="A100", memory_total_mib=CARD_MIB, memory_used_mib=0)
        for n in range(4)
    ),
)
ALIASES = deviceplugins.aliases_of([READING])


def hami_gpu(minor: int) -> DraDevice:
    """A device as HAMi's driver publishes it (`HAMiGpuInfo.GetDevice`): type `hami-gpu`, the
    card's `uuid`, `pcieBusID`, and `cores` (100) and `memory` capacity."""
    attrs = {"type": "hami-gpu", "uuid": gpu(minor), "minor": minor, "pcieBusID": "0000:3b:00.0"}
    capacity = {"cores": 100, "memory": CARD_MIB * MIB}
    return DraDevice(
        dra_drivers.HAMI,
        POOL,
        f"hami-gpu-{minor}",
        MappingProxyType(attrs),
        MappingProxyType(capacity),
    )


def nv_gpu(n: int, shares: int | None = None) -> DraDevice:
    """A whole GPU as NVIDIA's driver publishes it, with `shares` of N under
    `--consumable-shares=<N>` (`applyConsumableShares`)."""
    capacity = {"memory": CARD_MIB * MIB, **({"shares": shares} if shares else {})}
    attrs = {"type": "gpu", "uuid": gpu(n)}
    return DraDevice(NV, POOL, f"gpu-{n}", MappingProxyType(attrs), MappingProxyType(capacity))


def nv_mig(shares: int) -> DraDevice:
    """A 3g.40gb MIG device of card 2 (40192 MiB) shared by `shares` claims."""
    attrs = {"type": "mig", "uuid": MIG, "parentUUID": gpu(2), "profile": "3g.40gb"}
    capacity = {"memory": 40192 * MIB, "multiprocessors": 42, "shares": shares}
    return DraDevice(
        NV, POOL, "gpu-2-mig-9-0-4", MappingProxyType(attrs), MappingProxyType(capacity)
    )


def share(name: str, device: DraDevice, share_id: str, **consumed: int) -> ClaimStatus:
    result = AllocationResult(
        device.driver,
        POOL,
        device.name,
        share_id=share_id,
        consumed_capacity=MappingProxyType(consumed),
    )
    return ClaimStatus("ns", name, results=(result,))


def held(
    device: DraDevice, status: ClaimStatus, share_id: str, aliases: dra.Aliases = ALIASES
) -> dra.PodClaims:
    claimed = ClaimDevice(device.driver, POOL, device.name, share_id)
    inventory = inventory_of([device], claims=[status])
    return dra.pod_allocations(
        [ContainerClaim("main", "ns", status.name, (claimed,))], inventory, aliases, "p"
    )


def test_a_hami_dra_share_holds_its_memory_and_its_cores_as_the_slices_cap() -> None:
    """R-X12: HAMi-core enforces the consumed `cores` as the SM limit: the slice's compute cap,
    against which its compute is restated (ceil(measured * 100 / cap)), as for any capped
    slice; the consumed `memory` is its quota."""
    device = hami_gpu(1)
    status = share("infer", device, "s-1", cores=30, memory=8 * GIB)
    ((a,), ()) = (got := held(device, status, "s-1")).allocations, got.unresolved
    assert (a.device_id, a.mode, a.memory_mib, a.cores_percent) == (
        gpu(1),
        Mode.SLICED,
        8192,
        30,
    )
    (g,) = grants_from(pod_info("infer-0"), got.allocations)
    assert g.cores_cap == 30.0
    # 12% of the card measured for its processes: 40% of its own allowance of 30%.
    view = measured(g.pod_uid, gpu(1), memory_used=5000, cores=12.0)
    e = entry(g, view)
    assert (e.id, e.mode, e.memory_total_mib, e.memory_used_mib, e.cores_utilization_percent) == (
        gpu(1),
        Mode.SLICED,
        8192,
        5000,
        40.0,
    )


def test_a_hami_share_that_states_no_memory_is_held_to_the_whole_card() -> None:
    """R-X12: HAMi's driver sets CUDA_DEVICE_MEMORY_LIMIT to the card's memory when the claim
    consumed none (`GetCDIContainerEdits`); its `cores` is no cap at 100."""
    device = hami_gpu(0)
    (a,) = held(device, share("c", device, "s-1", cores=100), "s-1").allocations
    assert (a.memory_mib, a.cores_percent) == (CARD_MIB, 100)
    assert grants_from(pod_info("c-0"), (a,))[0].cores_cap == 100.0


def test_another_drivers_cores_is_no_cap() -> None:
    """R-X12: only a driver that enforces `cores` makes it the slice's cap."""
    device = nv_gpu(0)
    (a,) = held(device, share("c", device, "s-1", cores=30, memory=4 * GIB), "s-1").allocations
    assert (a.memory_mib, a.cores_percent) == (4096, None)


def test_nvidia_shares_of_four_give_a_quarter_of_the_card() -> None:
    """R-X12: `--consumable-shares=4`: a claim consuming 1 of 4 shares and 0 memory holds the
    card's memory * 1 / 4; 2 of 4, half; memory it asked for stays its quota."""
    device = nv_gpu(3, shares=4)
    for consumed, want in (
        ({"shares": 1, "memory": 0}, CARD_MIB // 4),
        ({"shares": 2, "memory": 0}, CARD_MIB // 2),
        ({"shares": 1}, CARD_MIB // 4),
        ({"shares": 1, "memory": 10 * GIB}, 10240),
    ):
        (a,) = held(device, share("c", device, "s-1", **consumed), "s-1").allocations
        assert (a.device_id, a.mode, a.memory_mib, a.partition_id) == (
            gpu(3),
            Mode.SLICED,
            want,
            None,
        ), consumed


def test_an_unlimited_share_with_no_memory_has_no_quota_rather_than_zero() -> None:
    """R-X12: `--consumable-shares=unlimited` gives a claim 0 memory: it states no quota, so the
    quota is absent, never a 0 MiB ceiling every byte would overrun."""
    device = nv_gpu(0)
    (a,) = held(device, share("c", device, "s-1", memory=0), "s-1").allocations
    assert (a.mode, a.memory_mib) == (Mode.SLICED, None)
    (g,) = grants_from(pod_info("c-0"), (a,))
    e = entry(g, measured(g.pod_uid, gpu(0), memory_used=700, cores=5.0))
    assert (e.memory_total_mib, e.memory_used_mib, e.cores_utilization_percent) == (
        None,
        700,
        5.0,
    )


def test_two_shares_of_one_mig_device_are_slices_of_it_that_sum_to_it_once() -> None:
    """R-X12: two claims sharing one MIG device (`--consumable-shares=2`) are two Sliced grants of
    that partition, each half of its 40192 MiB and its own processes' memory: together the
    partition once, not a copy of it each (as Partitioned grants would be)."""
    device = nv_mig(shares=2)
    statuses = [share(f"c{n}", device, f"s-{n}", shares=1, memory=0) for n in (1, 2)]
    pods = [pod(f"w{n}", pod_uid=uid(f"w{n}")) for n in (1, 2)]
    answer = KubeletAnswer(
        pods=tuple(
            PodDevices(
                "ns",
                f"w{n}",
                (),
                (
                    ContainerClaim(
                        "main", "ns", f"c{n}", (ClaimDevice(NV, POOL, device.name, f"s-{n}"),)
                    ),
                ),
            )
            for n in (1, 2)
        )
    )
    index = PodIndex.of(pods)
    inventory = inventory_of([device], claims=statuses)
    grants = node_grants(index, deviceplugins.pod_kubelet_grants(answer, index, ALIASES, inventory))
    got = sorted((g for g in grants.all()), key=lambda g: g.pod_uid)
    assert {(g.device_id, g.partition_id, g.mode, g.memory_mib) for g in got} == {
        (gpu(2), MIG, Mode.SLICED, 20096)
    }
    assert len(got) == 2
    view = View(
        cards={("nvidia", gpu(2)): READING.cards[2]},
        lookup=Lookup.of(
            SliceSection(
                usages=(
                    SliceUsage("nvidia", uid("w1"), "main", gpu(2), 9000, None),
                    SliceUsage("nvidia", uid("w2"), "main", gpu(2), 3000, None),
                ),
                devices=(SliceDevice("nvidia", gpu(2)),),
            )
        ),
        manufacturers=frozenset({"nvidia"}),
    )
    entries = [entry(g, view) for g in got]
    assert {(e.id, e.mode) for e in entries} == {(MIG, Mode.SLICED)}
    assert sum(e.memory_total_mib or 0 for e in entries) == 40192
    assert sorted(e.memory_used_mib or 0 for e in entries) == [3000, 9000]


def test_an_ascend_dra_device_reaches_its_npu_by_physical_id() -> None:
    """R-X12: Ascend's driver publishes only `deviceType` and `physicId` (`Ascend910-<phy>`):
    the NPU the library knows as `Ascend910-<phy>`; a physicId naming no NPU is unmatched."""
    npus = VendorReading(
        manufacturer="ascend",
        cards=tuple(
            Card(id=f"DIE {n}", index=n, name="910B2", aliases=(f"Ascend910-{n + 4}",))
            for n in range(2)
        ),
    )
    aliases = deviceplugins.aliases_of([npus])

    def npu(phy: object) -> DraDevice:
        attrs = {"deviceType": "Ascend910B", "physicId": phy}
        return DraDevice(dra_drivers.ASCEND, POOL, f"Ascend910-{phy}", MappingProxyType(attrs))

    assert dra.resolve(npu(5), aliases) == dra.Resolved("ascend", "DIE 1")
    for phy in (0, "5", True, -1):
        assert dra.resolve(npu(phy), aliases) is None, phy
    device = npu(4)
    claimed = ClaimDevice(dra_drivers.ASCEND, POOL, device.name)
    got = dra.pod_allocations(
        [ContainerClaim("main", "ns", "c", (claimed,))], inventory_of([device]), aliases, "p"
    )
    ((a,), ()) = got.allocations, got.unresolved
    assert (a.manufacturer, a.device_id, a.mode) == ("ascend", "DIE 0", Mode.EXCLUSIVE)


# -- helpers ---------------------------------------------------------------------------------


def pod_info(name: str):  # type: ignore[no-untyped-def]
    (info,) = PodIndex.of([pod(name, pod_uid=uid(name))]).pods.values()
    return info


def measured(pod_uid: str, device: str, memory_used: int, cores: float) -> View:
    """A view where `pod_uid`'s `main` container used `memory_used` MiB and `cores` % of the
    card `device`."""
    return View(
        cards={("nvidia", c.id): c for c in READING.cards},
        lookup=Lookup.of(
            SliceSection(
                usages=(SliceUsage("nvidia", pod_uid, "main", device, memory_used, cores),),
                devices=(SliceDevice("nvidia", device),),
            )
        ),
        manufacturers=frozenset({"nvidia"}),
    )


def test_the_driver_scenarios_place_every_claimed_device() -> None:
    """R-X12: over the replayed nodes of HAMi's and Ascend's drivers no claimed device is left
    unmatched (Ascend's were all `unmatched_device` before), and each pod's grant is on the card
    its claim names: HAMi's shares Sliced on cards 3 and 7, Ascend's NPUs by physicId."""
    from prometheus_client.parser import text_string_to_metric_families

    from tests.conftest import scenario_monitor

    def grants(scenario: str) -> tuple[set[tuple[str, str, str]], list[float]]:
        monitor = scenario_monitor(scenario)
        text = monitor.run_round().metrics.plain.decode()
        monitor.stop()
        samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
        held = {
            (s.labels["instance_name"], s.labels["index"], s.labels["mode"])
            for s in samples
            if s.name == "gpustack_instance_accelerator_memory_total_mib"
        }
        unresolved = [
            s.value for s in samples if s.name == "gpustack_accelerator_dra_unresolved_devices"
        ]
        return held, unresolved

    held, unresolved = grants("atlas800t-a2-npu-dra")
    assert unresolved == [] or set(unresolved) == {0.0}
    assert held == {
        ("qwen3-32b-0", "0", "Exclusive"),
        ("qwen3-32b-0", "1", "Exclusive"),
        ("llm-a-0", "2", "Shared"),
        ("llm-b-0", "2", "Shared"),
        ("npu-burn-in-7xk2q", "5", "Exclusive"),
    }
    held, unresolved = grants("h100-hami-dra")
    assert unresolved == [] or set(unresolved) == {0.0}
    assert held == {
        ("llama-3-8b-0", "3", "Sliced"),
        ("bge-m3-0", "3", "Sliced"),
        ("phi-4-0", "7", "Sliced"),
        ("gemma-2-2b-0", "7", "Sliced"),
        ("mistral-small-24b-0", "4", "Partitioned"),
        ("whisper-large-v3-0", "4", "Partitioned"),
    }
