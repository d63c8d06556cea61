"""The round's rules as tables over its pure steps (round/steps.py): `plan`, `learn` and `settle`
called directly, with hand-built pods, kubelet answers, DRA slices and readings, no thread and
no clock. The shell (agent/monitor.py) is held to its part at the end: the fields it keeps, one
grant resolution per steady round, and a second output."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from devicemanager.agent.monitor import BackendWorker, Monitor
from devicemanager.figures.actions import action_for
from devicemanager.figures.snapshot import BackendResult
from devicemanager.grants import node as grants_node
from devicemanager.grants.allocations import HAMI_KEY, Mode
from devicemanager.grants.deviceplugins import (
    NOT_ENUMERATED,
    ContainerDevices,
    KubeletAnswer,
    PodDevices,
)
from devicemanager.grants.dra import DeviceTaint, DraDevice, DraInventory, inventory_of
from devicemanager.grants.grants import CONTESTED_PARTITION, HELD_BY_ANOTHER_POD, Grant
from devicemanager.grants.sources.annotations import Annotations
from devicemanager.grants.sources.claims import Claims
from devicemanager.grants.sources.device_plugins import DevicePlugins
from devicemanager.grants.sources.reservations import Reservations
from devicemanager.model import BackendState, BackendStatus, Card, PartitionReading, VendorReading
from devicemanager.node.pods import PodIndex
from devicemanager.round import said as says
from devicemanager.round.said import LogEvent, Said
from devicemanager.round.steps import (
    Inputs,
    Memory,
    PodRef,
    Round,
    UnhealthyCard,
    learn,
    plan,
    round_failed,
    settle,
)
from tests.world import ReadingBackend, accel, card, gpu, pod, uid

NOW = 1_764_000_000.0
WARNING, INFO = logging.WARNING, logging.INFO


def reading(*cards: Card) -> VendorReading:
    return VendorReading("nvidia", tuple(cards), driver_version="550.90.07")


def ok(read: VendorReading) -> BackendResult:
    status = BackendStatus("nvidia", BackendState.OK, 0.1, last_success=NOW)
    return BackendResult(status=status, reading=read, read_at=NOW)


def down(error: str) -> BackendResult:
    return BackendResult(status=BackendStatus("nvidia", BackendState.UNAVAILABLE, None, error))


def plugin(name: str, *ids: str, resource: str = "nvidia.com/gpu") -> PodDevices:
    return PodDevices("ns", name, (ContainerDevices("main", resource, ids),))


def answer(*pods: PodDevices, allocatable: tuple[str, ...] | None = None) -> KubeletAnswer:
    free = None
    if allocatable is not None:
        free = (ContainerDevices("", "nvidia.com/gpu", allocatable),)
    return KubeletAnswer(pods=pods, allocatable=free, duration_seconds=0.01)


@dataclass
class World:
    """One round's world: what the cluster says and what the library answers."""

    pods: list[dict[str, Any]] = field(default_factory=list)
    kubelet: KubeletAnswer | None = None
    dra: DraInventory | None = None
    results: Sequence[BackendResult] = ()
    raw_errors: dict[str, str | None] = field(default_factory=dict)


def one_round(memory: Memory, world: World) -> tuple[Memory, Round, Any, Any]:
    index = PodIndex.of(world.pods)
    planned = plan(memory, index, world.kubelet, world.dra)
    learned = learn(memory, planned, world.results)
    inputs = Inputs(
        now=NOW,
        took=0.5,
        period=15,
        node="node-1",
        manufacturers=("nvidia",),
        raw_errors=world.raw_errors,
    )
    after, done = settle(memory, learned, inputs)
    return after, done, planned, learned


def held(done: Round) -> dict[str, list[tuple[str, str]]]:
    """pod name -> (card, source) of each grant it holds."""
    names = {uid(n): n for n in ("a", "b", "c", "plain")}
    assert done.grants is not None
    return {names[u]: [(g.device_id, g.source) for g in gs] for u, gs in done.grants.by_pod.items()}


def said(done: Round) -> list[tuple[str, int, str]]:
    return [(e.logger.rsplit(".", 1)[1], e.level, e.message % e.args) for e in done.events]


REFUSED = (
    "ns/a: its allocation annotation names what the kubelet gave another pod; those grants are"
    " refused"
)
HAMI = {HAMI_KEY: f"{gpu(2)},NVIDIA,40000,30:;"}

# -- grant precedence ----------------------------------------------------------------------------

PRECEDENCE = [
    # (pods, the kubelet's answer, expected (card, source) by pod)
    pytest.param(
        [pod("a", {"main": [accel(0, 1)]})],
        None,
        {"a": [(gpu(0), "gpustack")]},
        id="gpustack-annotation",
    ),
    pytest.param(
        [pod("a", annotations=HAMI)], None, {"a": [(gpu(2), "hami")]}, id="hami-annotation"
    ),
    pytest.param(
        [pod("plain")],
        answer(plugin("plain", gpu(1))),
        {"plain": [(gpu(1), "kubelet")]},
        id="device-plugin",
    ),
    pytest.param(
        [pod("a", {"main": [accel(0, 1)]})],
        answer(plugin("a", gpu(0))),
        {"a": [(gpu(0), "gpustack")]},
        id="annotation-wins-over-plugin",
    ),
    pytest.param(
        [pod("a", {"main": [accel(0, 1)]}), pod("plain")],
        answer(plugin("plain", gpu(3))),
        {"a": [(gpu(0), "gpustack")], "plain": [(gpu(3), "kubelet")]},
        id="each-pod-its-own-source",
    ),
    pytest.param(
        [pod("plain")], answer(plugin("plain", "rdma/x", resource="rdma/hca")), {}, id="not-ours"
    ),
]


@pytest.mark.parametrize(("pods", "kubelet", "expected"), PRECEDENCE)
def test_a_pods_grants_come_from_the_first_source_that_speaks_for_it(
    pods: list[dict[str, Any]], kubelet: KubeletAnswer | None, expected: dict[str, Any]
) -> None:
    _, done, _, _ = one_round(Memory(), World(pods, kubelet))
    assert held(done) == expected


def test_the_sources_are_listed_in_precedence_order_each_one_module() -> None:
    kinds = [(type(s), s.name, s.allocated) for s in grants_node.SOURCES]
    assert kinds == [
        (Annotations, "annotation", False),
        (Reservations, "kai", False),
        (DevicePlugins, "kubelet", True),
        (Claims, "dra", True),
    ]
    # A reservation pod's card handed to the pods that run on it, before the refusals.
    assert (grants_node.reserved_for_others,) == grants_node.HANDED_ON


def test_device_plugins_and_dra_claims_are_one_word_what_the_kubelet_gave() -> None:
    from devicemanager.grants.dra import ClaimDevice, ContainerClaim

    both = PodDevices(
        "ns",
        "plain",
        (ContainerDevices("main", "nvidia.com/gpu", (gpu(0),)),),
        (ContainerClaim("main", "ns", "c1", (ClaimDevice("gpu.nvidia.com", "node-1", "gpu-1"),)),),
    )
    slices = inventory_of(
        [DraDevice("gpu.nvidia.com", "node-1", "gpu-1", MappingProxyType({"uuid": gpu(1)}))]
    )
    _, done, _, _ = one_round(Memory(), World([pod("plain")], answer(both), slices))
    assert sorted(held(done)["plain"]) == sorted([(gpu(0), "kubelet"), (gpu(1), "dra")])


# -- cross-pod: a card another pod holds ---------------------------------------------------------

REFUSALS = [
    # (a's annotation card, what the kubelet gives b, a's grants, a's refused)
    pytest.param(1, (gpu(1),), [], [gpu(1)], id="the-kubelet-gave-it-another-pod"),
    pytest.param(1, (gpu(2),), [(gpu(1), "gpustack")], [], id="another-card-given-to-b"),
    pytest.param(1, (), [(gpu(1), "gpustack")], [], id="the-kubelet-gave-no-one-the-card"),
]


@pytest.mark.parametrize(("card_n", "to_b", "kept", "refused"), REFUSALS)
def test_an_annotation_naming_a_card_another_pod_holds_is_refused(
    card_n: int, to_b: tuple[str, ...], kept: list[Any], refused: list[str]
) -> None:
    pods = [pod("a", {"main": [accel(card_n, 1)]}), pod("b", containers=["main"])]
    kubelet = answer(plugin("b", *to_b)) if to_b else answer()
    memory, done, _, _ = one_round(Memory(), World(pods, kubelet))
    assert held(done).get("a", []) == kept
    assert done.grants is not None
    assert [g.device_id for g in done.grants.refused.get(uid("a"), ())] == refused
    assert done.extras.grants_refused == {HELD_BY_ANOTHER_POD: len(refused), CONTESTED_PARTITION: 0}
    refusals = [e for e in said(done) if "refused" in e[2]]
    assert refusals == ([("monitor", WARNING, REFUSED)] if refused else [])
    # said once: the same refusal next round is not said again
    _, again, _, _ = one_round(memory, World(pods, kubelet))
    assert [e for e in said(again) if "refused" in e[2]] == []


MIG_X = f"MIG-{uid('mig x')}"


def mig(n: int, partition: str, profile: str) -> dict[str, Any]:
    """A GPUStack Partitioned grant (mode 4) on card n naming `partition` of `profile`."""
    return accel(
        n,
        4,
        800_000,
        allocatedPhysicalID=partition,
        allocatedPhysicalProfile=profile,
        allocatedPhysicalPlacements=[{"start": 4, "length": 4}],
    )


FORGED = [
    # (a's annotation, what the kubelet gives b (resource, id), whether a is refused). `b`'s own
    # annotation names what it holds; `a`'s names b's partition or a slice of b's card, and the
    # kubelet gives `a` nothing.
    *(
        pytest.param(
            mig(4, MIG_X, "3g.40gb"),
            ("nvidia.com/mig-3g.40gb", given),
            mig(4, MIG_X, "3g.40gb"),
            id=f"partition-by-{form}",
        )
        for form, given in [
            ("parent-replica", f"{gpu(4)}::0"),  # GPUStack's plugin (h100-8gpu-mixed)
            ("parent", gpu(4)),
            ("parent-split", f"{gpu(4)}-0"),
            ("mig-uuid", MIG_X),
        ]
    ),
    *(
        pytest.param(
            accel(3, 3, 400_000),
            ("nvidia.com/gpu.sliced", given),
            accel(3, 3, 640_000),
            id=f"slice-by-{form}",
        )
        for form, given in [
            ("replica", f"{gpu(3)}::0"),  # GPUStack's plugin (h100-8gpu-mixed)
            ("card", gpu(3)),
            ("split", f"{gpu(3)}-1"),
        ]
    ),
]


@pytest.mark.parametrize(("forged", "to_b", "b_holds"), FORGED)
def test_a_forged_partition_or_slice_of_what_the_kubelet_gave_another_pod_is_refused(
    forged: dict[str, Any], to_b: tuple[str, str], b_holds: dict[str, Any]
) -> None:
    """(issue 44) Whatever form the kubelet's id takes for `b` (the card's UUID, a replica
    `::<n>` or split `-<n>` of it, the partition's own id), `a`'s annotation naming b's
    partition or a slice of b's card is refused, counted and said once; `b` keeps its own."""
    pods = [pod("a", {"main": [forged]}), pod("b", {"main": [b_holds]})]
    kubelet = answer(plugin("b", to_b[1], resource=to_b[0]))
    memory, done, _, _ = one_round(Memory(), World(pods, kubelet))
    assert done.grants is not None
    assert held(done) == {"b": [(b_holds["id"], "gpustack")]}
    assert [g.entry_id for g in done.grants.refused[uid("a")]] == [
        forged.get("allocatedPhysicalID", forged["id"])
    ]
    assert done.extras.grants_refused[HELD_BY_ANOTHER_POD] == 1
    assert [e for e in said(done) if "refused" in e[2]] == [("monitor", WARNING, REFUSED)]
    _, again, _, _ = one_round(memory, World(pods, kubelet))
    assert [e for e in said(again) if "refused" in e[2]] == []


def test_a_forged_partition_of_a_card_named_by_its_index_is_refused() -> None:
    """(issue 44) The plugin's index strategy: `b` is given `4:1` of `nvidia.com/mig-3g.40gb`,
    which names card 4 once the library has enumerated it; `a` is given nothing of card 4."""
    pods = [
        pod("a", {"main": [mig(4, MIG_X, "3g.40gb")]}),
        pod("b", {"main": [mig(4, MIG_X, "3g.40gb")]}),
    ]
    kubelet = answer(plugin("b", "4:1", resource="nvidia.com/mig-3g.40gb"))
    world = World(pods, kubelet, results=[ok(reading(card(4)))])
    memory, done, _, _ = one_round(Memory(), world)
    _, done, _, _ = one_round(memory, world)
    assert done.grants is not None
    assert held(done) == {"b": [(gpu(4), "gpustack")]}
    assert [g.entry_id for g in done.grants.refused[uid("a")]] == [MIG_X]


MIG_Y = f"MIG-{uid('mig y')}"

HOLDING_PART = [
    # (a's annotation, what the kubelet gives a (resource, id), what it gives b, b's annotation):
    # the kubelet gave `a` part of the card too, which lends it neither b's part nor the card.
    pytest.param(
        mig(4, MIG_X, "1g.10gb"),
        ("nvidia.com/mig-1g.10gb", MIG_Y),
        ("nvidia.com/mig-1g.10gb", MIG_X),
        mig(4, MIG_X, "1g.10gb"),
        id="b-partition-by-its-uuid",
    ),
    pytest.param(
        accel(4, 1),
        ("nvidia.com/mig-1g.10gb", f"{gpu(4)}::0"),
        ("nvidia.com/mig-3g.40gb", f"{gpu(4)}::0"),
        mig(4, MIG_X, "3g.40gb"),
        id="the-whole-card-by-a-partitions-holder",
    ),
    pytest.param(
        accel(4, 2),
        ("nvidia.com/mig-1g.10gb", MIG_Y),
        ("nvidia.com/mig-3g.40gb", MIG_X),
        mig(4, MIG_X, "3g.40gb"),
        id="the-shared-card-by-a-partitions-holder",
    ),
    pytest.param(
        accel(3, 1),
        ("nvidia.com/gpu.sliced", f"{gpu(3)}::0"),
        ("nvidia.com/gpu.sliced", f"{gpu(3)}::0"),
        accel(3, 3, 640_000),
        id="the-whole-card-by-a-slices-holder",
    ),
]


@pytest.mark.parametrize(("forged", "to_a", "to_b", "b_holds"), HOLDING_PART)
def test_a_pod_given_part_of_a_card_is_refused_another_pods_part_or_the_whole_card(
    forged: dict[str, Any], to_a: tuple[str, str], to_b: tuple[str, str], b_holds: dict[str, Any]
) -> None:
    """(issue 44) A partition the kubelet named to `b` by its own id is b's even when `a` holds
    another partition of the card; and a pod the kubelet gave only a partition or a slice of a
    card it also gave `b` some of does not read the card's own figures (b's use among them) on
    its annotation's word. Each is refused, counted and said once; `b` keeps its own."""
    pods = [pod("a", {"main": [forged]}), pod("b", {"main": [b_holds]})]
    kubelet = answer(plugin("a", to_a[1], resource=to_a[0]), plugin("b", to_b[1], resource=to_b[0]))
    # The library enumerates both partitions: the kubelet's MIG ids name card 4 from then on.
    parts = tuple(PartitionReading(m, gpu(4), 9856, 100, None) for m in (MIG_X, MIG_Y))
    read = VendorReading("nvidia", (card(3), card(4)), (), parts, "550.90.07")
    world = World(pods, kubelet, results=[ok(read)])
    memory, first, _, _ = one_round(Memory(), world)
    _, done, _, _ = one_round(memory, world)
    assert done.grants is not None
    assert held(done) == {"b": [(b_holds["id"], "gpustack")]}
    assert [g.entry_id for g in done.grants.refused[uid("a")]] == [
        forged.get("allocatedPhysicalID", forged["id"])
    ]
    assert done.extras.grants_refused == {HELD_BY_ANOTHER_POD: 1, CONTESTED_PARTITION: 0}
    refusals = [e for d in (first, done) for e in said(d) if "refused" in e[2]]
    assert refusals == [("monitor", WARNING, REFUSED)]


KEPT = [
    # (a's annotation, what the kubelet gives a, what it gives b, b's annotation): a's own word
    pytest.param(
        accel(1, 3, 400_000),
        ("nvidia.com/gpu", f"{gpu(1)}::1"),
        ("nvidia.com/gpu", f"{gpu(1)}::0"),
        accel(1, 3, 400_000),
        id="a-slice-of-a-time-sliced-replica",
    ),
    pytest.param(
        accel(5, 2),
        ("nvidia.com/gpu", f"{gpu(5)}::0"),
        ("nvidia.com/gpu", f"{gpu(5)}::0"),
        accel(5, 2),
        id="shared-by-two-notebooks",
    ),
    pytest.param(
        mig(4, MIG_Y, "1g.10gb"),
        ("nvidia.com/mig-1g.10gb", f"{gpu(4)}::0"),
        ("nvidia.com/mig-3g.40gb", f"{gpu(4)}::0"),
        mig(4, MIG_X, "3g.40gb"),
        id="each-its-own-partition-by-the-parent",
    ),
    pytest.param(
        accel(3, 3, 640_000),
        ("nvidia.com/gpu.sliced", f"{gpu(3)}::0"),
        ("nvidia.com/gpu.sliced", f"{gpu(3)}::0"),
        accel(3, 3, 640_000),
        id="two-sliced",
    ),
]


@pytest.mark.parametrize(("a_holds", "to_a", "to_b", "b_holds"), KEPT)
def test_each_pod_keeps_its_own_part_of_a_card_the_kubelet_carved_for_both(
    a_holds: dict[str, Any], to_a: tuple[str, str], to_b: tuple[str, str], b_holds: dict[str, Any]
) -> None:
    """(issue 44) The shipped scenarios' shapes: none is refused."""
    pods = [pod("a", {"main": [a_holds]}), pod("b", {"main": [b_holds]})]
    kubelet = answer(plugin("a", to_a[1], resource=to_a[0]), plugin("b", to_b[1], resource=to_b[0]))
    _, done, _, _ = one_round(Memory(), World(pods, kubelet))
    assert done.grants is not None
    assert held(done) == {"a": [(a_holds["id"], "gpustack")], "b": [(b_holds["id"], "gpustack")]}
    assert done.extras.grants_refused == {HELD_BY_ANOTHER_POD: 0, CONTESTED_PARTITION: 0}


CONTESTED = (
    "ns/%s: its allocation annotation claims a partition another pod's annotation claims too,"
    " and the kubelet named neither's partition; %s"
)

CONFLICTS = [
    # (a's kubelet resource, a's stated profile, b's kubelet resource, b's stated profile,
    #  who keeps MIG_X, who is refused as contested)
    pytest.param(
        "nvidia.com/mig-1g.10gb",
        "3g.40gb",
        "nvidia.com/mig-3g.40gb",
        "3g.40gb",
        ["b"],
        ["a"],
        id="the-profile-the-kubelet-gave-b",
    ),
    pytest.param(
        "nvidia.com/mig-1g.10gb",
        "1g.10gb",
        "nvidia.com/mig-3g.40gb",
        "3g.40gb",
        [],
        ["a", "b"],
        id="each-consistent-neither-believed",
    ),
    pytest.param(
        "nvidia.com/mig-3g.40gb",
        "3g.40gb",
        "nvidia.com/mig-3g.40gb",
        "3g.40gb",
        [],
        ["a", "b"],
        id="same-profile-neither-believed",
    ),
    pytest.param(
        "nvidia.com/mig-1g.10gb",
        "2g.20gb",
        "nvidia.com/mig-3g.40gb",
        "3g.40gb",
        ["b"],
        ["a"],
        id="a-contradicts-its-kubelet",
    ),
]


@pytest.mark.parametrize(("a_res", "a_prof", "b_res", "b_prof", "keeps", "contested"), CONFLICTS)
def test_two_pods_given_only_the_parent_card_claiming_one_partition_is_a_conflict(
    a_res: str, a_prof: str, b_res: str, b_prof: str, keeps: list[str], contested: list[str]
) -> None:
    """(issue 44) The kubelet gives `a` and `b` each a partition of card 4 named by the card's id
    alone (GPUStack's plugin), and both annotations claim MIG_X: never the first in silence.
    The one pod whose kubelet resource is the MIG profile its annotation states for the
    partition is believed; where none or both are, neither is, and each refusal is said."""
    pods = [
        pod("a", {"main": [mig(4, MIG_X, a_prof)]}),
        pod("b", {"main": [mig(4, MIG_X, b_prof)]}),
    ]
    kubelet = answer(
        plugin("a", f"{gpu(4)}::0", resource=a_res), plugin("b", f"{gpu(4)}::0", resource=b_res)
    )
    memory, done, _, _ = one_round(Memory(), World(pods, kubelet))
    assert done.grants is not None
    assert sorted(held(done)) == keeps
    assert sorted(n for n in ("a", "b") if uid(n) in done.grants.contested) == contested
    assert done.extras.grants_refused == {
        HELD_BY_ANOTHER_POD: 0,
        CONTESTED_PARTITION: len(contested),
    }
    lines = sorted(e[2] for e in said(done) if "claims a partition" in e[2])
    believed = f"ns/{keeps[0]} is believed" if keeps else "neither is believed"
    assert lines == sorted(CONTESTED % (n, believed) for n in contested)
    _, again, _, _ = one_round(memory, World(pods, kubelet))
    assert [e for e in said(again) if "claims a partition" in e[2]] == []


def gone(name: str, phase: str = "Running", terminating: bool = False) -> dict[str, Any]:
    doc = pod(name, containers=["main"])
    doc["status"]["phase"] = phase
    if terminating:
        doc["metadata"]["deletionTimestamp"] = "2026-11-20T09:00:00Z"
    return doc


RELEASED = [
    # (b: what the kubelet gave the card to, whether a's annotation on it is refused)
    pytest.param(gone("b"), True, id="running"),
    pytest.param(gone("b", terminating=True), False, id="terminating"),
    pytest.param(gone("b", phase="Succeeded"), False, id="succeeded"),
    pytest.param(gone("b", phase="Failed"), False, id="failed"),
]


@pytest.mark.parametrize(("b", "refused"), RELEASED)
def test_a_pod_gone_or_going_holds_nothing_the_kubelet_gave_it(
    b: dict[str, Any], refused: bool
) -> None:
    pods = [pod("a", {"main": [accel(1, 1)]}), b]
    _, done, _, _ = one_round(Memory(), World(pods, answer(plugin("b", gpu(1)))))
    assert done.grants is not None
    assert (uid("a") in done.grants.refused, uid("b") in done.grants.kubelet) == (refused, refused)


# -- the alias map: learned this round, it names this round's grant ------------------------------


def test_an_index_learned_this_round_names_this_rounds_grant_and_a_steady_round_resolves_once() -> (
    None
):
    world = World([pod("plain")], answer(plugin("plain", "0")), results=[ok(reading(card(0)))])
    memory, done, planned, _ = one_round(Memory(), world)
    assert [g.device_id for g in planned.grants.all()] == ["0"]  # no alias known yet
    assert held(done) == {"plain": [(gpu(0), "kubelet")]}  # named this round
    assert memory.ids.cards[("nvidia", "0")] == gpu(0)
    # next round: the plan names it already, and `learn` keeps the plan's grants as they are
    _, done2, planned2, learned2 = one_round(memory, world)
    assert [g.device_id for g in planned2.grants.all()] == [gpu(0)]
    assert learned2.grants is planned2.grants and learned2.ids is memory.ids
    assert held(done2) == {"plain": [(gpu(0), "kubelet")]}


# -- health ----------------------------------------------------------------------------------------

HEALTH = [
    # (library lists, kubelet allocatable, DRA taint on card, expected unhealthy (card, reason))
    pytest.param((0, 1), (gpu(0), gpu(1)), None, [], id="all-listed"),
    pytest.param(
        (0,), (gpu(0), gpu(1)), None, [(gpu(1), NOT_ENUMERATED)], id="allocatable-not-listed"
    ),
    pytest.param((0, 1), None, 1, [(gpu(1), "gpu.nvidia.com/xid=79")], id="dra-taint-by-card"),
    pytest.param((0,), (gpu(0),), None, [], id="none-missing"),
]


@pytest.mark.parametrize(("listed", "allocatable", "taint", "expected"), HEALTH)
def test_which_cards_are_unhealthy_and_the_pods_on_them(
    listed: tuple[int, ...],
    allocatable: tuple[str, ...] | None,
    taint: int | None,
    expected: list[tuple[str, str]],
) -> None:
    slices = None
    if taint is not None:
        tainted = DraDevice(
            "gpu.nvidia.com",
            "node-1",
            f"gpu-{taint}",
            MappingProxyType({"uuid": gpu(taint)}),
            taints=(DeviceTaint("gpu.nvidia.com/xid", "79", "NoExecute"),),
        )
        slices = inventory_of([tainted])
    pods = [pod("a", {"main": [accel(1, 1)]}), pod("b", {"main": [accel(0, 1)]})]
    kubelet = answer(allocatable=allocatable) if allocatable is not None else None
    world = World(pods, kubelet, slices, [ok(reading(*(card(n) for n in listed)))])
    _, done, _, _ = one_round(Memory(), world)
    a = PodRef(uid("a"), "ns", "a")
    index = {c.id: c.index for g in done.snapshot.groups for c in g.cards}
    # each with its index and what NVIDIA says to do (R-X11: the taint's XID 79, a reboot)
    assert done.unhealthy == tuple(
        UnhealthyCard("nvidia", c, why, (a,), index[c], action_for("nvidia", why).value)
        for c, why in expected
    )
    cards = {c.id: (c.unhealthy, c.unhealthy_reason) for g in done.snapshot.groups for c in g.cards}
    for c, why in expected:
        assert cards[c] == (True, why)


def test_a_card_listed_before_and_gone_is_unhealthy_whatever_the_kubelet_says() -> None:
    memory, _, _, _ = one_round(Memory(), World(results=[ok(reading(card(0), card(1)))]))
    _, done, _, _ = one_round(memory, World(results=[ok(reading(card(0)))]))
    assert done.unhealthy == (UnhealthyCard("nvidia", gpu(1), NOT_ENUMERATED, (), 1),)


def many(n: int, prefix: str) -> dict[str, Card]:
    return {f"{prefix}{i}": Card(id=f"{prefix}{i}", index=i) for i in range(n)}


@pytest.mark.parametrize(
    ("before", "kept"),
    [
        pytest.param(1023, 1024, id="at-the-bound-kept"),
        pytest.param(1024, 1, id="past-the-bound-what-it-lists-now"),
    ],
)
def test_the_cards_a_library_listed_are_remembered_up_to_a_bound(before: int, kept: int) -> None:
    memory = Memory(cards_seen=MappingProxyType({"nvidia": many(before, "old-")}))
    planned = plan(memory, PodIndex.of([]), None, None)
    learned = learn(memory, planned, [ok(reading(card(0)))])
    assert len(learned.cards_seen["nvidia"]) == kept


# -- log on change -------------------------------------------------------------------------------


def test_a_backends_state_is_said_once_per_change() -> None:
    steps = [
        (
            down("libnvidia-ml.so.1: cannot open"),
            [("monitor", WARNING, "backend nvidia is unavailable")],
        ),
        (down("libnvidia-ml.so.1: cannot open"), []),
        (down("another error"), [("monitor", WARNING, "backend nvidia is unavailable")]),
        (ok(reading(card(0))), [("monitor", INFO, "backend nvidia is ok")]),
        (ok(reading(card(0))), []),
    ]
    memory = Memory()
    for result, expected in steps:
        memory, done, _, _ = one_round(memory, World(results=[result]))
        assert said(done) == expected
    assert memory.rounds == len(steps)


HOST_PATH = "/usr/lib/x/libnvidia-ml.so.1"


def test_the_event_carries_the_lines_fields() -> None:
    _, done, _, _ = one_round(
        Memory(),
        World(results=[down("public")], raw_errors={"nvidia": HOST_PATH}),
    )
    assert done.events == (
        LogEvent(
            "devicemanager.monitor",
            WARNING,
            "backend %s is %s",
            ("nvidia", "unavailable"),
            {"manufacturer": "nvidia", "state": "unavailable", "error": HOST_PATH},
        ),
    )


def test_a_pods_fault_is_said_once_and_forgotten_when_it_is_gone() -> None:
    broken = pod("a", annotations={HAMI_KEY: "not,a,hami,annotation"})
    memory, done, _, _ = one_round(Memory(), World([broken]))
    assert [(e[0], e[1]) for e in said(done)] == [("isolation", logging.ERROR)]
    assert done.extras.pod_errors == {"grants": 1}
    memory, done, _, _ = one_round(memory, World([broken]))
    assert said(done) == []
    memory, done, _, _ = one_round(memory, World([pod("a", containers=["main"])]))
    assert said(done) == [] and memory.said.faults == {}


def test_a_failed_round_is_counted_and_said_once_until_a_round_completes() -> None:
    memory, events = round_failed(Memory(), ValueError("boom"))
    assert (memory.rounds_failed, [(e.level, e.message) for e in events]) == (
        1,
        [(logging.ERROR, "monitor round failed")],
    )
    memory, events = round_failed(memory, ValueError("boom"))
    assert (memory.rounds_failed, events) == (2, ())
    memory, done, _, _ = one_round(memory, World())
    assert said(done) == [("monitor", INFO, "monitor rounds complete again")]


def test_plan_asks_per_process_figures_only_for_carved_cards() -> None:
    pods = [pod("a", {"main": [accel(0, 3, 800_000)]}), pod("b", {"main": [accel(1, 1)]})]
    planned = plan(Memory(), PodIndex.of(pods), None, None)
    assert {m: sorted(r.carved_device_ids) for m, r in planned.requests.items()} == {
        "nvidia": [gpu(0)]
    }
    assert planned.grants is not None
    grant = planned.grants.by_pod[uid("a")][0]
    assert (grant.mode, grant.source) == (Mode.SLICED, "gpustack")
    assert grant == Grant(
        uid("a"), ("main",), "nvidia", gpu(0), 0, Mode.SLICED, units=800_000, source="any"
    )  # provenance is not identity


# -- the shell -----------------------------------------------------------------------------------


def monitor(tmp: Path, outputs: Sequence[Any] = ()) -> tuple[Monitor, ReadingBackend]:
    backend = ReadingBackend(reading(card(0), card(1)))
    index = PodIndex.of([pod("a", {"main": [accel(1, 1)]}), pod("b", {"main": [accel(0, 1)]})])
    kubelet = answer(allocatable=(gpu(0), gpu(1), gpu(2)))
    m = Monitor(
        [BackendWorker(backend)],
        period=15,
        deadline=5,
        liveness_timeout=60,
        node="node-1",
        pods=lambda: index,
        podresources=lambda: kubelet,
        outputs=outputs,
    )
    return m, backend


def test_a_second_output_sees_the_unhealthy_cards_with_their_pods(tmp_path: Path) -> None:
    seen: list[Round] = []
    m, _ = monitor(tmp_path, [seen.append])
    published = m.run_round()
    m.stop()
    (done,) = seen
    assert done.snapshot is published.snapshot is m.current.snapshot  # the same round
    # never enumerated: offered by the kubelet only, so no index (-1)
    assert done.unhealthy == (UnhealthyCard("nvidia", gpu(2), NOT_ENUMERATED, ()),)
    # the card a pod holds turns unhealthy: the output names the pod
    m, backend = monitor(tmp_path, [seen.append])
    backend.reading = reading(card(0))
    m.run_round()
    m.run_round()
    m.stop()
    assert seen[-1].unhealthy == (
        UnhealthyCard("nvidia", gpu(1), NOT_ENUMERATED, (PodRef(uid("a"), "ns", "a"),)),
        UnhealthyCard("nvidia", gpu(2), NOT_ENUMERATED, ()),
    )


def test_an_output_that_raises_neither_fails_the_round_nor_the_next_output(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A further output (an Event writer, …) only reads the round: one that raises is logged
    when its error starts or changes, once, and the round is published, counted, and handed to
    the outputs after it."""
    calls = {"n": 0}

    def flaky(done: Round) -> None:
        calls["n"] += 1
        if calls["n"] <= 2:
            raise RuntimeError("the API server refused the Event")

    seen: list[Round] = []
    m, _ = monitor(tmp_path, [flaky, seen.append])
    with caplog.at_level(logging.INFO, logger="devicemanager.monitor"):
        published = [m.run_round() for _ in range(3)]
    m.stop()
    assert len(seen) == 3 and all(p.snapshot.timestamp > 0 for p in published)
    assert (m.rounds, m.rounds_failed) == (3, 0)
    said = [
        (r.levelno, r.getMessage())
        for r in caplog.records
        if r.name == "devicemanager.monitor" and "round output" in r.getMessage()
    ]
    name = flaky.__qualname__
    assert said == [
        (logging.ERROR, f"round output {name} failed; the round and the other outputs go on"),
        (logging.INFO, f"round output {name} works again"),
    ]


def test_the_monitor_keeps_at_most_eight_fields_that_change(tmp_path: Path) -> None:
    m, backend = monitor(tmp_path)
    before = dict(vars(m))
    m.run_round()
    backend.reading = reading(card(0))
    m.run_round()
    m.start()
    m.stop()
    after = vars(m)
    changed = {k for k in after if k not in before or after[k] is not before[k]}
    assert changed <= {"memory", "_heartbeat", "_thread"}
    assert len(changed) <= 8
    # nothing the round decides is kept on the shell in a container of its own
    kept = {k for k, v in after.items() if isinstance(v, dict | list | set)}
    assert kept == {"workers"}


def test_grants_are_gathered_and_resolved_once_per_steady_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from devicemanager.grants.grants import NodeGrants
    from devicemanager.round import steps

    calls = {"gather": 0, "resolve": 0}
    gather, resolve = grants_node.gather, NodeGrants.resolve

    def counted_gather(*args: Any, **kwargs: Any) -> NodeGrants:
        calls["gather"] += 1
        return gather(*args, **kwargs)

    def counted_resolve(self: NodeGrants, *args: Any) -> NodeGrants:
        calls["resolve"] += 1
        return resolve(self, *args)

    monkeypatch.setattr(steps, "gather", counted_gather)  # as the round's steps call it
    monkeypatch.setattr(NodeGrants, "resolve", counted_resolve)
    m, _ = monitor(tmp_path)
    m.run_round()  # the first round learns the aliases: the grants are named again
    first = dict(calls)
    m.run_round()
    m.run_round()
    m.stop()
    assert first == {"gather": 2, "resolve": 2}
    assert calls == {"gather": 4, "resolve": 4}


# -- what the log says of each lasting condition (round/said.py), step by step -------------------

KUBELET = [
    # (the answers of successive rounds, the line each round logs, or None)
    pytest.param(
        [KubeletAnswer(pods=()), KubeletAnswer(pods=())],
        [(INFO, "kubelet pod-resources read"), None],
        id="read-once",
    ),
    pytest.param(
        [KubeletAnswer(error="refused"), KubeletAnswer(error="refused"), KubeletAnswer(pods=())],
        [(WARNING, "kubelet pod-resources not read"), None, (INFO, "kubelet pod-resources read")],
        id="down-then-up",
    ),
    pytest.param(
        [KubeletAnswer(pods=(), allocatable_error="unimplemented")],
        [(WARNING, "kubelet pod-resources answered in part")],
        id="no-allocatable",
    ),
    pytest.param(
        [KubeletAnswer(pods=(), error="cut"), KubeletAnswer(pods=(), error="cut again")],
        [(WARNING, "kubelet pod-resources answered in part")] * 2,
        id="another-error",
    ),
]


def lines(events: Sequence[LogEvent]) -> tuple[int, str] | None:
    assert len(events) <= 1
    return (events[0].level, events[0].message % events[0].args) if events else None


@pytest.mark.parametrize(("answers", "expected"), KUBELET)
def test_the_kubelets_answer_is_said_once_per_change(
    answers: list[KubeletAnswer], expected: list[Any]
) -> None:
    state, got = Said(), []
    for a in answers:
        state, events = says.kubelet_said(state, a)
        got.append(lines(events))
    assert got == expected
    assert says.kubelet_said(state, None) == (state, [])  # not asked: nothing said


NOT_READ, READ = (WARNING, "DRA ResourceSlices not read"), (INFO, "DRA ResourceSlices read")
DRA_STATES = [
    pytest.param([None, "forbidden"], [None, NOT_READ], id="fails"),
    pytest.param(["forbidden", "forbidden"], [NOT_READ, None], id="once"),
    pytest.param(["forbidden", None], [NOT_READ, READ], id="recovers"),
]


@pytest.mark.parametrize(("errors", "expected"), DRA_STATES)
def test_the_dra_slices_are_said_once_per_change(
    errors: list[str | None], expected: list[Any]
) -> None:
    state, got = Said(), []
    for error in errors:
        state, events = says.dra_said(state, DraInventory(error=error))
        got.append(lines(events))
        assert state.dra == error
    assert got == expected
    assert says.dra_said(state, None) == (state, [])


def test_figures_left_out_are_said_when_they_change_and_at_most_twenty_named() -> None:
    twenty_one = tuple(f"cards.{i}.power" for i in range(21))
    steps: list[tuple[list[tuple[str, str, tuple[str, ...]]], list[tuple[str, str]]]] = [
        ([("nan", "nvidia", ("cards.0.power",))], [("nan", "cards.0.power")]),
        ([("nan", "nvidia", ("cards.0.power",))], []),
        ([("nan", "nvidia", ())], []),  # gone: nothing said, but remembered as gone
        ([("nan", "nvidia", ("cards.0.power",))], [("nan", "cards.0.power")]),
        ([("range", "nvidia", twenty_one)], [("range", "cards.0.power")]),
    ]
    state = Said()
    for left_out, expected in steps:
        state, events = says.left_out_said(state, left_out)
        got = []
        for e in events:
            assert e.extra is not None
            kind = "nan" if e.message == says.LEFT_OUT_MESSAGES["nan"] else "range"
            got.append((kind, e.extra["figures"][0]))
            assert len(e.extra["figures"]) <= 20 and e.extra["manufacturer"] == "nvidia"
        assert got == expected
    assert state.left_out[("range", "nvidia")] == twenty_one
    assert len(events[0].extra["figures"]) == 20  # type: ignore[index]


def test_a_disagreement_is_said_once_per_change() -> None:
    from devicemanager.grants.grants import Disagreement

    index = PodIndex.of([pod("a", containers=["main"])])
    one = Disagreement(frozenset({("nvidia", gpu(0))}), frozenset({("nvidia", gpu(1))}))
    two = Disagreement(frozenset({("nvidia", gpu(0))}), frozenset({("nvidia", gpu(2))}))
    state, got = Said(), []
    for differs in (one, one, two):
        from devicemanager.grants.grants import NodeGrants

        grants = NodeGrants({}, {}, MappingProxyType({uid("a"): differs}))
        state, events = says.grants_said(state, grants, index)
        got.append([e.extra["disagreement"] for e in events if e.extra])
    assert got == [[str(one)], [], [str(two)]]
    assert says.grants_said(state, None, index) == (state, [])
    assert says.grants_said(state, grants, None) == (state, [])


def test_a_fault_without_the_pod_index_names_the_pod_by_uid() -> None:
    from devicemanager.model import PodFault

    _, events = says.faults_said(Said(), {"u-1": PodFault("grants", "bad")}, None)
    assert [e.message % e.args for e in events] == [
        "?/u-1: its grants could not be used this round; the pod is left out of that stage, no "
        "other pod is affected"
    ]


def test_a_lasting_fault_is_said_when_it_starts_changes_and_ends_and_only_its_own() -> None:
    state, events = says.failed(Said(), "pods", "boom", "pods could not be read")
    state, more = says.failed(state, "slices:nvidia", "bang", "slices of %s", "nvidia")
    assert [(e.message % e.args, dict(e.extra or {})) for e in (*events, *more)] == [
        ("pods could not be read", {"error": "boom"}),
        ("slices of nvidia", {"error": "bang"}),
    ]
    assert says.failed(state, "pods", "boom", "again") == (state, [])
    state, events = says.recovered(state, "pods", "pods read again")
    assert [(e.level, e.message, e.extra) for e in events] == [(INFO, "pods read again", None)]
    assert dict(state.persisting) == {"slices:nvidia": "bang"}  # the other fault lasts
    state, events = says.recovered(state, "slices:nvidia", "built again", manufacturer="nvidia")
    assert [e.extra for e in events] == [{"manufacturer": "nvidia"}]
    assert says.recovered(state, "pods", "pods read again") == (state, [])


# -- what settle makes of the shell's inputs -------------------------------------------------------


def settle_with(memory: Memory, index: PodIndex | None, **given: Any) -> tuple[Memory, Round]:
    kubelet, inventory = given.pop("kubelet", None), given.pop("dra", None)
    planned = plan(memory, index, kubelet, inventory)
    learned = learn(memory, planned, given.pop("results", ()))
    inputs = Inputs(now=NOW, took=0.5, period=15, node="node-1", manufacturers=("nvidia",), **given)
    return settle(memory, learned, inputs)


def test_the_pods_that_could_not_be_read_are_said_once_and_their_return() -> None:
    memory, done = settle_with(Memory(), None, pods_asked=True, pods_error=OSError("refused"))
    assert [(e.level, e.exc) for e in done.events] == [(logging.ERROR, done.events[0].exc)]
    assert isinstance(done.events[0].exc, OSError)
    assert done.extras.allocation_errors == 0 and done.grants is None
    memory, done = settle_with(memory, None, pods_asked=True, pods_error=OSError("refused"))
    assert done.events == ()
    _, done = settle_with(memory, PodIndex.of([]), pods_asked=True)
    assert said(done) == [("monitor", INFO, "the node's pods are read again")]
    _, done = settle_with(memory, PodIndex.of([]))  # no pod reader: nothing to say of one
    assert done.events == ()


def test_without_pods_no_dra_device_is_counted_unresolved() -> None:
    _, done = settle_with(Memory(), None, dra=DraInventory(), kubelet=answer())
    assert (done.extras.dra_success, done.extras.dra_unresolved) == (True, {})


NOT_BUILT = "per-grant figures of nvidia could not be built"
SECTION = [
    # (what attribution answered for nvidia, whether a section is built, what is said)
    pytest.param(None, False, [], id="no-attribution"),
    pytest.param((), True, [], id="attributed"),
    pytest.param(
        OSError("proc"),
        False,
        [(logging.ERROR, "per-grant figures of nvidia could not be built")],
        id="raised",
    ),
]


@pytest.mark.parametrize(("verdicts", "built", "expected"), SECTION)
def test_the_per_grant_section_is_built_from_attributions_verdicts(
    verdicts: Any, built: bool, expected: list[Any]
) -> None:
    index = PodIndex.of([pod("a", {"main": [accel(0, 3, 800_000)]})])
    given = None if verdicts is None else {"nvidia": verdicts}
    results = [ok(reading(card(0)))]
    memory, done = settle_with(Memory(), index, results=results, verdicts=given)
    assert (done.snapshot.slices is not None) == built
    assert [(e.level, e.message % e.args) for e in done.events if "per-grant" in e.message] == (
        expected
    )
    if expected:  # it is said again only when it is built again
        _, done = settle_with(memory, index, results=results, verdicts={"nvidia": ()})
        assert [e.message % e.args for e in done.events if "per-grant" in e.message] == [
            "per-grant figures of nvidia are built again"
        ]
