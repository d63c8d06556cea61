"""Lost cards from the PCI bus (R-X11, issue 42): what the kernel lists of each manufacturer's
accelerators against what its library enumerates, with no device plugin, ResourceSlice or
allocation needed. Every expected value is written by hand."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import MappingProxyType

from devicemanager.agent.monitor import BusWatch
from devicemanager.figures.snapshot import BackendResult
from devicemanager.grants.deviceplugins import NOT_ENUMERATED
from devicemanager.model import BackendState, BackendStatus, Card, VendorReading
from devicemanager.node import pcibus
from devicemanager.node.pcibus import BusScan
from devicemanager.round.steps import Memory, learn, plan
from tests.conftest import NODES, scenario_monitor
from tests.world import gpu

B0, B1, B2 = "0000:10:00.0", "0000:11:00.0", "0000:12:00.0"


def function(
    root: Path,
    bus: str,
    vendor: int,
    device_class: int,
    driver: str | None = None,
    physfn: bool = False,
) -> None:
    d = root / "bus" / "pci" / "devices" / bus
    d.mkdir(parents=True)
    (d / "vendor").write_text(f"0x{vendor:04x}\n")
    (d / "class").write_text(f"0x{device_class:06x}\n")
    if driver is not None:
        os.symlink(f"../../../bus/pci/drivers/{driver}", d / "driver")
    if physfn:
        os.symlink("../0000:40:00.0", d / "physfn")


def test_the_bus_is_read_as_each_manufacturers_accelerators(tmp_path: Path) -> None:
    """R-X11: a function is an accelerator by vendor id and class together: NVIDIA's audio
    function, a Hygon root complex, Huawei's iBMC VGA and an ASPEED VGA are not; a function
    passed through to a VM (vfio-pci, pci-stub) or an SR-IOV virtual function is not the
    library's to see; one with no driver bound (as a card that fell off often is) counts."""
    function(tmp_path, B0, 0x10DE, 0x030200, driver="nvidia")
    function(tmp_path, B1, 0x10DE, 0x030200)  # no driver bound
    function(tmp_path, "0000:10:00.1", 0x10DE, 0x040300, driver="snd_hda_intel")
    function(tmp_path, "0000:20:00.0", 0x10DE, 0x030200, driver="vfio-pci")
    function(tmp_path, "0000:21:00.0", 0x10DE, 0x030200, driver="pci-stub")
    function(tmp_path, "0000:41:00.4", 0x1002, 0x038000, physfn=True)
    function(tmp_path, "0000:40:00.0", 0x1002, 0x038000, driver="amdgpu")
    function(tmp_path, "0000:00:00.0", 0x1D94, 0x060000)  # Hygon's root complex
    function(tmp_path, "0000:03:00.0", 0x1D94, 0x038000)  # a Hygon DCU
    function(tmp_path, "0000:04:00.0", 0x19E5, 0x030000)  # Huawei's iBMC VGA
    function(tmp_path, "0000:05:00.0", 0x19E5, 0x120000)  # an Ascend NPU
    function(tmp_path, "0000:06:00.0", 0x1A03, 0x030000)  # ASPEED
    (tmp_path / "bus" / "pci" / "devices" / "not-a-bus-id").mkdir()
    broken = tmp_path / "bus" / "pci" / "devices" / "0000:07:00.0"
    broken.mkdir()
    (broken / "vendor").write_text("garbage\n")
    scan = pcibus.read_bus(tmp_path)
    assert scan.error is None
    assert dict(scan.functions) == {
        "nvidia": frozenset({B0, B1}),
        "amd": frozenset({"0000:40:00.0"}),
        "hygon": frozenset({"0000:03:00.0"}),
        "ascend": frozenset({"0000:05:00.0"}),
    }
    assert scan.of("thead") == frozenset()
    missing = pcibus.read_bus(tmp_path / "nowhere")
    assert missing.error is not None and "nowhere" in missing.error
    assert missing.of("nvidia") is None  # not read: nothing is compared


def test_a_bus_id_is_read_in_every_spelling_libraries_use() -> None:
    """R-X11: NVML's 8-digit domain, no domain, upper case: all the sysfs name."""
    assert pcibus.sysfs_bus_id("00000000:1A:00.0") == "0000:1a:00.0"
    assert pcibus.sysfs_bus_id("1a:00.0") == "0000:1a:00.0"
    assert pcibus.sysfs_bus_id(" 0000:1a:00.0\n") == "0000:1a:00.0"
    for wrong in ("GPU-1", "0000:1a:00.8", "100000000:1a:00.0", 7, None):
        assert pcibus.sysfs_bus_id(wrong) is None


def reading(*cards: Card, bus_ids: dict[str, str] | None = None) -> VendorReading:
    return VendorReading("nvidia", cards=cards, bus_ids=MappingProxyType(bus_ids or {}))


def test_a_function_no_enumerated_card_names_is_lost_by_its_bus_id() -> None:
    """R-X11: the library names card 0 by NVML's bus id and card 1 by an alias; the third
    function is a card it cannot see. A card seen before on a bus id now gone from both the
    bus and the library is lost too, by its id; one the library still lists is not."""
    now = reading(
        Card(gpu(0), 0),
        Card(gpu(1), 1, aliases=("0000:11:00.0",)),
        bus_ids={gpu(0): "00000000:10:00.0"},
    )
    on_bus = frozenset({B0, B1, B2})
    assert pcibus.lost(now, on_bus, {}) == {B2: None}
    remembered = {B2: gpu(2), "0000:13:00.0": gpu(3), B0: gpu(0)}
    assert pcibus.lost(now, on_bus, remembered) == {B2: gpu(2), "0000:13:00.0": gpu(3)}
    # not read this round: nothing is said
    assert pcibus.lost(now, None, remembered) == {}


def test_a_library_that_names_no_bus_id_is_not_judged_by_count() -> None:
    """R-X11: cards with no bus id (a payload without the topology yet) could be any of the
    functions: none is called lost for the count alone; a card gone from both still is."""
    now = reading(Card(gpu(0), 0), Card(gpu(1), 1))
    assert pcibus.lost(now, frozenset({B0, B1, B2}), {}) == {}
    assert pcibus.lost(now, frozenset({B0, B1}), {B2: gpu(2)}) == {B2: gpu(2)}


def test_a_lost_card_takes_the_reason_lost_in_place_of_not_enumerated() -> None:
    """R-X11: a card the lost-card rule added as not_enumerated is named better: lost by its
    bus id (other reasons kept); one never enumerated is added by its bus id, index -1."""
    gone = Card(gpu(2), 2, unhealthy=True, unhealthy_reason=f"{NOT_ENUMERATED},xid:79")
    now = reading(Card(gpu(0), 0), gone)
    known = {gpu(3): Card(gpu(3), 3, name="NVIDIA H100 80GB HBM3", memory_total_mib=81559)}
    got = pcibus.with_lost(
        now, {B2: gpu(2), "0000:13:00.0": gpu(3), "0000:14:00.0": None}, known,
        frozenset({NOT_ENUMERATED}),
    )  # fmt: skip
    assert [(c.id, c.index, c.name, c.unhealthy, c.unhealthy_reason) for c in got.cards] == [
        (gpu(0), 0, None, False, None),
        (gpu(2), 2, None, True, f"xid:79,lost:{B2}"),
        (gpu(3), 3, "NVIDIA H100 80GB HBM3", True, "lost:0000:13:00.0"),
        ("0000:14:00.0", -1, None, True, "lost:0000:14:00.0"),
    ]
    assert pcibus.with_lost(now, {}, known) is now


def ok(r: VendorReading) -> BackendResult:
    return BackendResult(BackendStatus("nvidia", BackendState.OK, 0.01), r)


def test_a_card_that_leaves_the_bus_and_the_library_is_lost_in_the_next_rounds() -> None:
    """R-X11: round one names three cards on the bus; in round two card 2 is gone from NVML
    and from the bus: lost by the bus id it had, with no kubelet, device plugin or DRA."""
    cards = [Card(gpu(n), n) for n in range(3)]
    buses = {gpu(0): B0, gpu(1): B1, gpu(2): B2}
    first = reading(*cards, bus_ids=buses)
    bus = BusScan({"nvidia": frozenset({B0, B1, B2})})
    planned = plan(Memory(), None, None, None)
    learned = learn(Memory(), planned, [ok(first)], bus)
    assert [c.unhealthy for c in learned.results[0].reading.cards] == [False] * 3  # type: ignore[union-attr]
    memory = Memory(cards_seen=learned.cards_seen, bus_seen=learned.bus_seen)
    second = reading(*cards[:2], bus_ids={gpu(0): B0, gpu(1): B1})
    later = learn(
        memory,
        plan(memory, None, None, None),
        [ok(second)],
        BusScan({"nvidia": frozenset({B0, B1})}),
    )
    got = later.results[0].reading
    assert got is not None
    assert [(c.id, c.unhealthy_reason) for c in got.cards if c.unhealthy] == [
        (gpu(2), f"lost:{B2}")
    ]
    # without a bus read, the same card is the library's lost card as before: not_enumerated
    without = learn(memory, plan(memory, None, None, None), [ok(second)], None)
    assert without.results[0].reading is not None
    assert [c.unhealthy_reason for c in without.results[0].reading.cards if c.unhealthy] == [
        NOT_ENUMERATED
    ]


def test_the_bus_is_read_once_a_minute(tmp_path: Path) -> None:
    """R-X11: listing every PCI device each round is not needed to find a lost card within a
    minute; a card that falls off between reads is seen at the next."""
    function(tmp_path, B0, 0x10DE, 0x030200)
    clock = [0.0]
    watch = BusWatch(str(tmp_path), 60.0, mono=lambda: clock[0])
    assert watch().of("nvidia") == frozenset({B0})
    function(tmp_path, B1, 0x10DE, 0x030200)
    clock[0] = 59.0
    assert watch().of("nvidia") == frozenset({B0})
    clock[0] = 60.0
    assert watch().of("nvidia") == frozenset({B0, B1})


def test_the_lost_from_bus_node_shows_its_fifth_card_lost() -> None:
    """R-X11: h100-lost-from-bus's PCI root lists five NVIDIA 3D controllers and NVML
    enumerates four: the fifth is unhealthy, reason lost naming its bus id, with no device
    plugin, no DRA and no allocation naming it; the other four read healthy."""
    root = NODES / "h100-lost-from-bus"
    assert not (root / "podresources.json").exists() and not (root / "dra").exists()
    expected = json.loads((root / "expected.json").read_text())
    monitor = scenario_monitor("h100-lost-from-bus")
    published = monitor.run_round()
    monitor.stop()
    doc = json.loads(published.snapshot_json)
    cards = {c["id"]: c for g in doc["groups"] for c in g["accelerators"]}
    for want in expected["lost"]:
        got = cards[want["id"]]
        assert (got["index"], got["unhealthy"], got["unhealthyReason"]) == (
            want["index"],
            True,
            want["unhealthyReason"],
        )
    assert {i for i, c in cards.items() if not c["unhealthy"]} == set(expected["healthy"])
    text = published.metrics.plain.decode()
    line = (
        'gpustack_accelerator_unhealthy_reason{action="reboot_node",id="0000:14:00.0",index="-1",'
        'manufacturer="nvidia",node="gpu-h100-12",reason="lost:0000:14:00.0"} 1.0'
    )
    assert line in text.splitlines()


def test_the_sysfs_root_is_a_parameter_and_replay_reads_the_scenarios() -> None:
    """R-X11: `--sysfs-root` (or DEVICEMANAGER_SYSFS_ROOT) names the sysfs whose bus is read;
    in replay a scenario's `sys/` is, and a scenario without one reads no bus."""
    from devicemanager.agent.config import parse_serve
    from devicemanager.agent.wiring import resolve_node

    assert parse_serve(["--sysfs-root", "/host/sys"], env={}).sysfs_root == Path("/host/sys")
    assert parse_serve([], env={"DEVICEMANAGER_SYSFS_ROOT": "/s"}).sysfs_root == Path("/s")
    assert parse_serve([], env={}).sysfs_root is None
    lost = resolve_node(parse_serve(["--replay", str(NODES / "h100-lost-from-bus")], env={}))
    assert lost.sysfs_root == NODES / "h100-lost-from-bus" / "sys"
    other = resolve_node(parse_serve(["--replay", str(NODES / "h100-mig-gpm")], env={}))
    assert other.sysfs_root is None
