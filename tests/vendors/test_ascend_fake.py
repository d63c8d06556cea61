"""The Ascend backend end to end: our ctypes layer, read() and parse(), against a fake
libdcmi.so compiled by the test from tests/fakelib/ascend/fake_dcmi.c (R-V1..R-V6). Most cases
run the monitor round in-process (grants, attribution, slices, /metrics); one runs the agent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from devicemanager.figures.published import Published
from devicemanager.model import HealthFigure as H
from devicemanager.model import ReadRequest, Reason, VendorReading
from tests.conftest import assert_promtool_accepts
from tests.fakelib import ascend as fake_dcmi
from tests.fakelib.ascend import scenarios
from tests.vendors import kit
from tests.vendors.conftest import ManualClock, links_of, serve_fake_library, topology_reads
from tests.vendors.kit import series
from tests.world import pod, process, uid
from vendors._common import EVERY_ACTIVITY
from vendors.ascend import VDEV_TOTAL, AscendBackend, gpustack_id, hami_id

pytestmark = pytest.mark.timeout(90)

MIB = 1048576
GPUSTACK_KEY = "device.gpustack.ai/accelerator.allocated"
HAMI_KEY = "hami.io/Ascend910B-devices-allocated"


@pytest.fixture
def scenario(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    def _write(devices: list[dict[str, Any]], **top: Any) -> Path:
        path = fake_dcmi.write(tmp_path / "scenario.txt", devices, **top)
        monkeypatch.setenv(fake_dcmi.SCENARIO_ENV, str(path))
        return path

    return _write


NOTHING = ReadRequest()


def payloads(libdcmi: Path, request: ReadRequest = NOTHING, rounds: int = 1) -> list[Any]:
    backend = AscendBackend({"dcmi": str(libdcmi)})
    backend.open()
    try:
        return [backend.read(request) for _ in range(rounds)]
    finally:
        backend.close()


def reading(libdcmi: Path, request: ReadRequest = NOTHING) -> VendorReading:
    (payload,) = payloads(libdcmi, request)
    return AscendBackend().parse(payload)


def npu(n: int) -> str:
    """The canonical id of scenario NPU n (its die as GPUStack records it)."""
    return gpustack_id(fake_dcmi.die(n))


def carved(*ids: str) -> ReadRequest:
    return ReadRequest(carved_device_ids=frozenset(ids))


# -- cards ---------------------------------------------------------------------------------------


def test_eight_910b2_named_as_every_allocator_names_them(libdcmi: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.eight_910b2(npu3={"aicore": 64, "health": 0}))
    (payload,) = payloads(libdcmi)
    got = AscendBackend().parse(payload)
    assert got.driver_version == "25.5.1" and len(got.cards) == 8
    first = got.cards[0]
    words = fake_dcmi.die(0)
    # GPUStack's form is canonical: unpadded words, so the second reads 140C979, not 0140C979.
    assert first.id == "E0F4EE64 140C979 6A691492 89528485 104301E3" == gpustack_id(words)
    assert first.aliases == ("E0F4EE64-0140C979-6A691492-89528485-104301E3", "Ascend910-0")
    assert first.aliases[0] == hami_id(words)
    assert (first.index, first.name) == (0, "Ascend910B2")
    assert first.address == (("card", 0), ("device", 0), ("logic", 0), ("phy", 0))
    # MB from the HBM query are MiB (65536 on a 64 GiB part); 0.1 W become W once.
    assert (first.memory_total_mib, first.memory_used_mib) == (65536, 3432)
    assert (first.temperature_celsius, first.power_usage_watts) == (45.0, 101.3)
    assert got.cards[3].cores_utilization_percent == 64.0
    assert not any(c.unhealthy for c in got.cards)
    # No carved NPU asked for: no per-process query was made (R-V3), nor a vNPU one (R-V4).
    assert all("dcmi_get_device_resource_info" not in d for d in payload["devices"])
    assert all("dcmi_get_device_info/vdev_total" not in d for d in payload["devices"])


def test_two_npus_on_one_card_and_no_hbm(libdcmi: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.two_devices_on_one_card())
    (payload,) = payloads(libdcmi)
    got = AscendBackend().parse(payload)
    assert payload["dcmi_get_card_list"] == [4]
    assert payload["dcmi_get_device_num_in_card"] == {"4": 3}
    # The card's MCU is asked its type and nothing else, and is not a card.
    assert payload["devices"][2] == {"card": 4, "device": 2, "dcmi_get_device_type": 1}
    a, b = got.cards
    assert [dict(c.address) for c in (a, b)] == [
        {"card": 4, "device": 0, "logic": 0, "phy": 0},
        {"card": 4, "device": 1, "logic": 1, "phy": 1},
    ]
    assert (a.index, b.index) == (0, 1) and a.id != b.id
    assert a.aliases[-1] == "Ascend310P-0" and b.aliases[-1] == "Ascend310P-1"
    # HBM answered not-supported: the general query's size less its available memory.
    assert payload["devices"][0]["dcmi_get_device_hbm_info"]["code"] == fake_dcmi.NOT_SUPPORTED
    assert (a.memory_total_mib, a.memory_used_mib) == (44280, 41731)
    assert (b.memory_total_mib, b.memory_used_mib) == (44280, 1507)
    assert a.name == "Ascend310P3" and a.power_usage_watts == 0.0


def test_an_hbm_query_that_answers_zeros_falls_back_too(libdcmi: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.hbm_answers_zero())
    (card,) = reading(libdcmi).cards
    assert (card.memory_total_mib, card.memory_used_mib) == (21534, 1534)


def test_an_hbm_query_that_fails_otherwise_reads_no_other_memory(libdcmi: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    devices = scenarios.eight_910b2()[:1]
    devices[0]["faults"] = {"dcmi_get_device_hbm_info": fake_dcmi.TIMEOUT}
    devices[0]["memory"] = {"size": 15000, "available": 9000}  # the control CPU's DDR
    scenario(devices)
    (payload,) = payloads(libdcmi)
    assert "dcmi_get_device_memory_info_v3" not in payload["devices"][0]
    (card,) = AscendBackend().parse(payload).cards
    assert (card.memory_total_mib, card.memory_used_mib) == (None, None)


@pytest.mark.parametrize(
    ("health", "reason"),
    [(1, "alarm_minor"), (2, "alarm_major"), (3, "alarm_critical"), (0xFFFFFFFF, "not_started")],
)
def test_a_health_alarm_makes_the_npu_unhealthy(
    libdcmi: Path, scenario, health: int, reason: str
) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.eight_910b2(npu2={"health": health}))
    cards = reading(libdcmi).cards
    assert [(c.index, c.unhealthy_reason) for c in cards if c.unhealthy] == [(2, reason)]


def test_an_npu_lost_mid_run_keeps_its_name_and_is_unhealthy(libdcmi: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.lost_one_of_eight())
    first, second = payloads(libdcmi, rounds=2)
    parse = AscendBackend().parse
    assert not any(c.unhealthy for c in parse(first).cards)
    cards = parse(second).cards
    assert len(cards) == 8
    lost = cards[5]
    assert second["devices"][5]["dcmi_get_device_die_v2"]["code"] == fake_dcmi.DEVICE_NOT_EXIST
    assert (lost.id, lost.index, lost.unhealthy, lost.unhealthy_reason) == (
        npu(5),
        5,
        True,
        "device_lost",
    )
    assert lost.aliases == (hami_id(fake_dcmi.die(5)), "Ascend910-5")
    assert (lost.memory_total_mib, lost.temperature_celsius, lost.power_usage_watts) == (
        None,
        None,
        None,
    )
    assert [c.unhealthy for i, c in enumerate(cards) if i != 5] == [False] * 7


def test_an_npu_lost_before_the_agent_started_is_left_out_not_invented(
    libdcmi: Path, scenario
) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.lost_one_of_eight(at_start=True))
    assert [c.index for c in reading(libdcmi).cards] == [0, 1, 2, 3, 4, 6, 7]


# -- per-process memory ---------------------------------------------------------------------------


def test_process_memory_in_bytes_through_the_guarded_buffer(libdcmi: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.busy_worker(processes=2))
    # Asked under HAMi's name for the NPU: read() knows every alias.
    got = reading(libdcmi, carved(hami_id(fake_dcmi.die(0))))
    (answer,) = got.processes
    assert answer.device_id == npu(0)
    assert [(r.pid, r.memory_bytes) for r in answer.rows] == [
        (899293, 28640 * MIB),
        (899294, 28640 * MIB),
    ]
    assert (answer.memory_reason, answer.cores_reason) == (None, Reason.UNSUPPORTED)


@pytest.mark.parametrize("build", [scenarios.process_list_overruns, scenarios.count_understates])
def test_a_process_list_past_the_buffer_is_truncated_never_partial(
    libdcmi: Path, scenario, build: Any
) -> None:  # type: ignore[no-untyped-def]
    scenario(build())
    (payload,) = payloads(libdcmi, carved(npu(0)))
    answer = payload["devices"][0]["dcmi_get_device_resource_info"]
    assert answer["guard_written"] is True and "rows" not in answer
    (processes,) = AscendBackend().parse(payload).processes
    assert processes.rows == () and processes.memory_reason is Reason.TRUNCATED
    assert processes.reads_truncated == 1


def test_a_driver_answering_mb_is_refused_not_read_as_bytes(libdcmi: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.megabytes_for_bytes())
    (processes,) = reading(libdcmi, carved(npu(0))).processes
    # 57280 "bytes" would publish a 57 GB worker as 1 MiB: the rows fit only as MB.
    assert processes.memory_reason is Reason.INVALID_DATA and processes.rows == ()


CODES = [
    (fake_dcmi.INVALID_PARAMETER, Reason.TRANSIENT_DRIVER_ERROR),
    (fake_dcmi.PERMISSION, Reason.PERMISSION),
    (-8003, Reason.TRANSIENT_DRIVER_ERROR),
    (-8004, Reason.TRANSIENT_DRIVER_ERROR),
    (-8005, Reason.TRANSIENT_DRIVER_ERROR),
    (fake_dcmi.TIMEOUT, Reason.TRANSIENT_DRIVER_ERROR),
    (fake_dcmi.INVALID_DEVICE_ID, Reason.TRANSIENT_DRIVER_ERROR),
    (fake_dcmi.DEVICE_NOT_EXIST, Reason.TRANSIENT_DRIVER_ERROR),
    (-8009, Reason.TRANSIENT_DRIVER_ERROR),
    (-8010, Reason.TRANSIENT_DRIVER_ERROR),
    (-8011, Reason.TRANSIENT_DRIVER_ERROR),
    (fake_dcmi.NOT_READY, Reason.TRANSIENT_DRIVER_ERROR),
    (fake_dcmi.NOT_SUPPORTED_IN_CONTAINER, Reason.UNSUPPORTED),
    (-8014, Reason.TRANSIENT_DRIVER_ERROR),
    (-8015, Reason.TRANSIENT_DRIVER_ERROR),
    (-8016, Reason.TRANSIENT_DRIVER_ERROR),
    (-8017, Reason.TRANSIENT_DRIVER_ERROR),
    (-8020, Reason.TRANSIENT_DRIVER_ERROR),
    (-8022, Reason.TRANSIENT_DRIVER_ERROR),
    (-8023, Reason.TRANSIENT_DRIVER_ERROR),
    (fake_dcmi.NOT_SUPPORTED, Reason.UNSUPPORTED),
]


@pytest.mark.parametrize(("code", "reason"), CODES)
def test_each_dcmi_code_from_the_process_query_is_its_reason(
    libdcmi: Path, scenario, code: int, reason: Reason
) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.busy_worker(errors={"dcmi_get_device_resource_info": code}))
    got = reading(libdcmi, carved(npu(0)))
    (processes,) = got.processes
    assert (processes.memory_reason, processes.rows) == (reason, ())
    assert processes.cores_reason is Reason.UNSUPPORTED
    # A code from the process query alone names the NPU lost only when it says it is gone.
    (card,) = got.cards
    assert card.unhealthy is (code in (fake_dcmi.DEVICE_NOT_EXIST, fake_dcmi.INVALID_DEVICE_ID))


@pytest.mark.parametrize(("code", "reason"), CODES)
def test_each_dcmi_code_from_the_vnpu_activity_query_is_its_reason(
    libdcmi: Path, scenario, code: int, reason: Reason
) -> None:  # type: ignore[no-untyped-def]
    devices = scenarios.vnpus()
    devices[0]["faults"] = {fake_dcmi.VDEV_ACTIVITY: code}
    scenario(devices)
    (part,) = reading(libdcmi, ReadRequest(partition_ids=frozenset({(npu(0), "100")}))).partitions
    assert (part.id, part.cores_reason, part.cores_percent) == ("vdavinci100", reason, None)
    assert part.memory_used_mib is None
    if reason is Reason.UNSUPPORTED:
        # The driver's standing answer: the capacity is still the template's (vir04, 16384 MB).
        assert (part.memory_total_mib, part.memory_reason) == (16384, None)
    else:
        assert (part.memory_total_mib, part.memory_reason) == (None, reason)


# -- vNPUs ----------------------------------------------------------------------------------------


def test_vnpus_found_by_every_recorded_form(libdcmi: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.vnpus())
    wanted = {
        (npu(0), "100"),  # the bare vdev id
        (npu(0), "Ascend910-4c-101-0"),  # Huawei's device plugin
        (npu(1), "vdavinci102"),  # the device node
        (npu(1), "vdavinci555"),  # destroyed since it was allocated
        (npu(0), "MIG-not-an-ascend-id"),
    }
    (payload,) = payloads(libdcmi, ReadRequest(partition_ids=frozenset(wanted)))
    got = {p.id: p for p in AscendBackend().parse(payload).partitions}
    busy, idle, big = got["vdavinci100"], got["vdavinci101"], got["vdavinci102"]
    assert (busy.parent_id, busy.aliases) == (npu(0), ("100", "Ascend910-4c-100-0"))
    assert (busy.memory_total_mib, busy.memory_used_mib, busy.cores_percent) == (16384, 12000, 62)
    assert (idle.memory_used_mib, idle.cores_percent, idle.memory_reason) == (0, 0.0, None)
    assert idle.aliases == ("101", "Ascend910-4c-101-0")
    assert (big.parent_id, big.memory_total_mib, big.cores_percent) == (npu(1), 32768, 18.0)
    assert big.aliases == ("102", "Ascend910-8c-102-1")
    for missing in ("vdavinci555", "MIG-not-an-ascend-id"):
        assert got[missing].memory_reason is Reason.TRANSIENT_DRIVER_ERROR
    # Only the vNPUs asked for were queried.
    assert [v["vdev_id"] for v in payload["devices"][0]["vnpus"]] == [100, 101]


def test_vnpus_without_activity_keep_their_templates_memory(libdcmi: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.vnpus(activity=False))
    wanted = {(npu(0), "100"), (npu(1), "vdavinci102")}
    (payload,) = payloads(libdcmi, ReadRequest(partition_ids=frozenset(wanted)))
    got = {p.id: p for p in AscendBackend().parse(payload).partitions}
    small, big = got["vdavinci100"], got["vdavinci102"]
    # The resource query's memory_size is DCMI's MB (2^20 bytes): MiB as it stands, so a vir04
    # is 16384 and a vir08 32768. Used and AI cores have no source without the activity query.
    assert (small.memory_total_mib, small.memory_used_mib, small.cores_percent) == (
        16384,
        None,
        None,
    )
    assert (big.memory_total_mib, big.memory_used_mib, big.cores_percent) == (32768, None, None)
    assert (small.memory_reason, small.cores_reason) == (None, Reason.UNSUPPORTED)
    assert small.aliases == ("100", "Ascend910-4c-100-0")  # the resource query still named it
    # A resource query that failed too leaves nothing to publish: both absent, unsupported.
    devices = scenarios.vnpus(activity=False)
    devices[0]["faults"][fake_dcmi.VDEV_RESOURCE] = fake_dcmi.NOT_SUPPORTED
    scenario(devices)
    (payload,) = payloads(libdcmi, ReadRequest(partition_ids=frozenset({(npu(0), "100")})))
    # Only the NPU the request names as the parent is asked for its vNPUs.
    assert [VDEV_TOTAL in d for d in payload["devices"]] == [True, False]
    (part,) = AscendBackend().parse(payload).partitions
    assert (part.memory_total_mib, part.memory_reason) == (None, Reason.UNSUPPORTED)
    assert part.cores_reason is Reason.UNSUPPORTED


def test_a_driver_without_vnpus_answers_unsupported(libdcmi: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.no_vnpu_support())
    (part,) = reading(libdcmi, ReadRequest(partition_ids=frozenset({(npu(0), "100")}))).partitions
    assert (part.id, part.parent_id) == ("100", npu(0))
    assert (part.memory_reason, part.cores_reason) == (Reason.UNSUPPORTED, Reason.UNSUPPORTED)


# -- through the monitor round ------------------------------------------------------------------


# -- links and placement (R-X3) ------------------------------------------------------------------


def numa_sysfs(root: Path, nodes: dict[str, str]) -> Path:
    """A sysfs tree whose PCI devices (by name) hold the given `numa_node` text."""
    for name, text in nodes.items():
        pci = root / "bus" / "pci" / "devices" / name
        pci.mkdir(parents=True)
        (pci / "numa_node").write_text(text)
    return root


def test_links_and_numa_nodes_through_our_ctypes(  # type: ignore[no-untyped-def]
    libdcmi: Path, scenario, tmp_path: Path
) -> None:
    """(R-X3) Per pair of NPUs the topology type DCMI names (`dcmi_get_topo_info_by_device_id`:
    HCCS, HCCS through a switch, PIX; no count), and each NPU's NUMA node from its PCI device
    in sysfs (`dcmi_get_device_pcie_info_v2` names it); a type no header gives one meaning and
    a NOT_SUPPORT answer place the pair nowhere (never "pcie"), and an NPU whose sysfs gives no
    node (-1, or no file) has none, the failure in the payload."""
    scenario(scenarios.links_910b2())
    sysfs = numa_sysfs(
        tmp_path / "sys", {"0000:01:00.0": "0\n", "0000:11:00.0": "1\n", "0000:21:00.0": "-1\n"}
    )
    backend = AscendBackend({"dcmi": str(libdcmi)}, sysfs=sysfs)
    backend.open()
    try:
        payload = backend.read(NOTHING)
    finally:
        backend.close()
    cards = {c.id: c for c in AscendBackend().parse(payload).cards}
    a, b, c, d = (npu(n) for n in range(4))

    def links(card_id: str) -> set[tuple[str, str, int | None]]:
        return links_of(cards[card_id])

    assert links(a) == {(b, "hccs", None), (c, "pcie_switch", None), (d, "hccs_switch", None)}
    assert links(b) == {(a, "hccs", None)}
    assert links(c) == {(a, "pcie_switch", None)}
    assert links(d) == {(a, "hccs_switch", None)}
    assert [cards[x].numa_node for x in (a, b, c, d)] == [0, 1, None, None]
    topology = payload["topology"]
    assert len(topology["pairs"]) == 6
    assert topology["devices"][3]["sysfsNumaNode"]["error"] == "FileNotFoundError"
    assert topology["devices"][1]["dcmi_get_device_pcie_info_v2"]["bdf_busid"] == 0x11
    (refused,) = [p for p in topology["pairs"] if (p["a"], p["b"]) == ([1, 0], [3, 0])]
    assert refused["dcmi_get_topo_info_by_device_id"] == {
        "error": "dcmi_get_topo_info_by_device_id",
        "code": -8255,
    }


def test_ascend_links_are_read_once_a_minute(libdcmi: Path, scenario, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """(R-X3) One 15 s period a round on the backend's clock: the topology read in the first
    round is carried by the next three and read again in the fifth, 60 s later; an NPU that
    leaves enumeration has it read again at once."""

    def read_at(npus: list[dict[str, Any]], n: int) -> list[tuple[float, int]]:
        scenario(npus)
        clock = ManualClock(1000.0)
        backend = AscendBackend({"dcmi": str(libdcmi)}, clock=clock, sysfs=tmp_path)
        return topology_reads(backend, clock, n)

    assert read_at(scenarios.links_910b2(), 5) == [(1000.0, 4)] * 4 + [(1060.0, 4)]
    leaving = scenarios.links_910b2()
    leaving[3]["gone_after"] = 1
    assert read_at(leaving, 2) == [(1000.0, 4), (1015.0, 3)]


def test_the_whole_agent_publishes_npu_links(
    libdcmi: Path, scenario, tmp_path: Path, launch
) -> None:  # type: ignore[no-untyped-def]
    """(R-X3) Over real HTTPS: `link_info` per NPU, peer and kind (`hccs`, `hccs_switch`,
    `pcie_switch`), no `links` count (DCMI counts none), no series for the pairs DCMI does not
    place; promtool takes the text. (NUMA nodes come from the host's /sys here: not asserted.)"""
    path = scenario(scenarios.links_910b2())
    agent = serve_fake_library(
        launch, "ascend", libdcmi, tmp_path, env={fake_dcmi.SCENARIO_ENV: str(path)}
    )
    with agent.client() as client:
        text = client.get("/metrics").content
    got = series(text)
    a, b, c, d = (npu(n) for n in range(4))
    pairs = {
        (ls["id"], ls["peer_id"], ls["link"]) for ls, _ in got["gpustack_accelerator_link_info"]
    }
    assert pairs == {
        (a, b, "hccs"),
        (b, a, "hccs"),
        (a, c, "pcie_switch"),
        (c, a, "pcie_switch"),
        (a, d, "hccs_switch"),
        (d, a, "hccs_switch"),
    }
    assert "gpustack_accelerator_links" not in got
    assert_promtool_accepts(text)


def gpustack(containers: dict[str, list[dict[str, Any]]]) -> dict[str, str]:
    doc = {
        c: {"devices": {"groups": [{"id": 0, "manufacturer": "ascend", "accelerators": accs}]}}
        for c, accs in containers.items()
    }
    return {GPUSTACK_KEY: json.dumps(doc)}


def round_over(libdcmi: Path, tmp: Path, pods: list[dict[str, Any]]) -> Published:
    return kit.one_round(AscendBackend({"dcmi": str(libdcmi)}), tmp / "proc", pods)


def test_hami_slices_and_a_vnpu_partition_through_the_round(
    libdcmi: Path, scenario, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    devices = scenarios.vnpus()
    devices[1]["processes"] = [{"pid": 8101, "mem": 20_000 * MIB}, {"pid": 8201, "mem": 3 * MIB}]
    scenario(devices)
    hami = hami_id(fake_dcmi.die(1))
    pods = [
        # HAMi's vNPU grants: the physical NPU under HAMi's name, a memory and core quota.
        pod(
            "hami-a",
            None,
            containers=["main"],
            instance="hami-a",
            annotations={HAMI_KEY: f"{hami},Ascend910B,32768,50:;"},
        ),
        pod(
            "hami-b",
            None,
            containers=["main"],
            instance="hami-b",
            annotations={HAMI_KEY: f"{hami},Ascend910B,16384,25:;"},
        ),
        # GPUStack's vNPU: a partition recorded by its vdev id.
        pod(
            "vnpu",
            None,
            containers=["main"],
            instance="vnpu",
            annotations=gpustack(
                {
                    "main": [
                        {
                            "id": npu(0),
                            "index": 0,
                            "mode": 4,
                            "allocated": 400_000,
                            "allocatedPhysicalProfile": "vir04",
                            "allocatedPhysicalID": "100",
                        }
                    ],
                }
            ),
        ),
    ]
    process(tmp_path / "proc", 8101, "hami-a")
    process(tmp_path / "proc", 8201, "hami-b")
    published = round_over(libdcmi, tmp_path, pods)
    section = published.snapshot.slices
    assert section is not None
    usages = {u.pod_uid: u for u in section.usages}
    assert usages[uid("hami-a")].memory_used_mib == 20_000
    assert usages[uid("hami-b")].memory_used_mib == 3
    assert usages[uid("hami-a")].cores_utilization_percent is None  # DCMI has none per process
    # The vNPU's parent is carved too (R-V3), and answered: no process of its own.
    devices = {
        d.device_id: (d.memory_reason, d.cores_reason, d.rows_returned) for d in section.devices
    }
    assert devices == {
        npu(1): (None, Reason.UNSUPPORTED, 2),
        npu(0): (None, Reason.UNSUPPORTED, 0),
    }
    (part,) = section.partitions
    assert (part.id, part.device_id, part.memory_total_mib, part.memory_used_mib) == (
        "vdavinci100",
        npu(0),
        16384,
        12000,
    )
    assert part.cores_percent == 62
    got = series(published)
    used = {
        ls["instance_name"]: v for ls, v in got["gpustack_instance_accelerator_memory_used_mib"]
    }
    assert used == {"hami-a": 20_000.0, "hami-b": 3.0, "vnpu": 12_000.0}
    cores = {
        ls["instance_name"]: v
        for ls, v in got["gpustack_instance_accelerator_cores_utilization_percent"]
    }
    assert cores == {"vnpu": 62.0}  # the slices' compute is absent, never 0
    capability = {
        (ls["entry_point"], ls["reason"]): v
        for ls, v in got["gpustack_accelerator_process_capability"]
    }
    assert capability[("cores", "unsupported")] == 0.0


def test_an_overrun_leaves_every_slice_of_the_npu_without_memory(
    libdcmi: Path, scenario, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.process_list_overruns())
    hami = hami_id(fake_dcmi.die(0))
    pods = [
        pod(
            "hami-a",
            None,
            containers=["main"],
            instance="hami-a",
            annotations={HAMI_KEY: f"{hami},Ascend910B,32768,50:;"},
        ),
    ]
    published = round_over(libdcmi, tmp_path, pods)
    section = published.snapshot.slices
    assert section is not None
    (device,) = section.devices
    assert (device.memory_reason, device.reads_truncated) == (Reason.TRUNCATED, 1)
    assert section.usages == ()
    got = series(published)
    assert not got.get("gpustack_instance_accelerator_memory_used_mib")


# -- the whole agent ------------------------------------------------------------------------------


# -- the NPU's health beyond one bit (R-X7) ----------------------------------------------------


def test_error_codes_the_npu_reports_now_through_our_ctypes(libdcmi: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    """(R-X7) dcmi_get_device_errorcode_v2 through our declarations: the codes an NPU reports
    this round as hex text, each once, in DCMI's order; none is an empty answer, not an absent
    one; a refused call is `unsupported`; a count past the header's 128 is `invalid_data`
    (nothing published from that answer); past 64 codes the rest are `other`. What the card
    reports changes with the next round: the codes are a state, not a counter."""
    scenario(scenarios.error_codes_910b2())
    cards = reading(libdcmi).cards
    got = [(c.health.error_codes, c.health.reason("error_codes")) for c in cards if c.health]
    assert got[:4] == [
        (("0x40F84E00", "0x80E01801"), None),
        ((), None),
        (None, Reason.UNSUPPORTED),
        (None, Reason.INVALID_DATA),
    ]
    many, reason = got[4]
    assert reason is None and many is not None and len(many) == 65
    assert many[0] == "0x00001000" and many[63] == "0x0000103F" and many[64] == "other"
    scenario([fake_dcmi.device(0, n=0, **scenarios.B2)])  # the codes cleared
    (cleared,) = reading(libdcmi).cards
    assert cleared.health is not None and cleared.health.error_codes == ()


def test_npu_health_through_our_ctypes(libdcmi: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    """(R-X7) ECC counts and isolated pages (struct dcmi_ecc_info) and frequencies as DCMI
    answers them through our declarations: in base units (MHz to Hz); ECC off and a refused
    frequency are `unsupported`; all ones and above 100 GHz are `invalid_data`; a DDR part
    answers ECC and memory frequency from its DDR where HBM is not served."""
    scenario(scenarios.health_910b2())
    full, off, odd = (c.health for c in reading(libdcmi).cards)
    assert full is not None and off is not None and odd is not None
    assert (
        full.number(H.ECC_CORRECTED_VOLATILE),
        full.number(H.ECC_UNCORRECTED_VOLATILE),
        full.number(H.ECC_CORRECTED_AGGREGATE),
        full.number(H.ECC_UNCORRECTED_AGGREGATE),
    ) == (3, 1, 40, 2)
    assert (
        full.number(H.REMAPPED_ROWS_CORRECTABLE),
        full.number(H.REMAPPED_ROWS_UNCORRECTABLE),
        full.number(H.REMAPPED_ROWS_PENDING),
    ) == (2, 1, 1)
    assert (full.number(H.CLOCK_SM_HZ), full.number(H.CLOCK_MEMORY_HZ)) == (
        1_650_000_000,
        1_600_000_000,
    )
    never = {
        "ecc_corrected_total",  # DCMI splits its counts by lifetime (issue 43)
        "ecc_uncorrected_total",
        "remapped_rows_failed",
        "energy_joules",
        "throttle_reasons",
        "clock_graphics_hz",
        "pcie_replays",
        "pcie_naks",  # no NAK counter either (issue 43)
        "xid_errors",
        # No activity figure, nor memory or vector busy time, in these scenarios (issue 41).
        *EVERY_ACTIVITY,
    }
    assert dict(full.reasons) == dict.fromkeys(never, Reason.UNSUPPORTED)
    assert {k for k, r in off.reasons if r is Reason.UNSUPPORTED} == never | {
        "ecc_corrected_volatile",
        "ecc_uncorrected_volatile",
        "ecc_corrected_aggregate",
        "ecc_uncorrected_aggregate",
        "remapped_rows_correctable",
        "remapped_rows_uncorrectable",
        "remapped_rows_pending",
        "clock_sm_hz",
        "clock_memory_hz",
    }
    assert {k: r for k, r in odd.reasons if r is not Reason.UNSUPPORTED} == {
        "ecc_corrected_aggregate": Reason.INVALID_DATA,
        "clock_sm_hz": Reason.INVALID_DATA,
        "clock_memory_hz": Reason.INVALID_DATA,
    }
    scenario(scenarios.two_devices_on_one_card())
    duo = reading(libdcmi).cards[0].health
    assert duo is not None and (
        duo.number(H.CLOCK_MEMORY_HZ),
        duo.number(H.ECC_CORRECTED_VOLATILE),
    ) == (3.2e9, 0)


def test_the_whole_agent_publishes_npu_health(
    libdcmi: Path, scenario, tmp_path: Path, launch
) -> None:  # type: ignore[no-untyped-def]
    """(R-X7) Over real HTTPS on a 910B2 node: ECC counters in `_total`, isolated pages under
    the remapped-rows family, clocks in Hz, energy with no sample and its capability saying
    `unsupported`; promtool takes the text with nothing to say."""
    path = scenario(scenarios.health_910b2())
    agent = serve_fake_library(
        launch, "ascend", libdcmi, tmp_path, env={fake_dcmi.SCENARIO_ENV: str(path)}
    )
    with agent.client() as client:
        text = client.get("/metrics").content
    assert "# TYPE gpustack_accelerator_ecc_errors_total counter" in text.decode().splitlines()
    got = series(text)

    def by_card(name: str, **match: str) -> dict[str, float]:
        return {
            ls["id"]: v
            for ls, v in got.get(name, [])
            if all(ls.get(k) == want for k, want in match.items())
        }

    pre = "gpustack_accelerator_"
    assert by_card(f"{pre}ecc_errors", error="corrected", counter="aggregate") == {npu(0): 40.0}
    assert by_card(f"{pre}remapped_rows", state="uncorrectable") == {npu(0): 1.0, npu(2): 0.0}
    assert by_card(f"{pre}clock_hertz", clock="sm") == {npu(0): 1.65e9}
    assert by_card(f"{pre}energy_joules") == {}
    assert by_card(f"{pre}figure_capability", figure="energy_joules", reason="unsupported") == {
        npu(n): 0.0 for n in range(3)
    }
    assert_promtool_accepts(text)


def test_the_whole_agent_on_the_fake_dcmi(libdcmi: Path, scenario, tmp_path: Path, launch) -> None:  # type: ignore[no-untyped-def]
    devices = scenarios.vnpus()
    devices[1]["processes"] = [{"pid": 8101, "mem": 20_000 * MIB}]
    path = scenario(devices)
    pods = [
        pod(
            "hami-a",
            None,
            containers=["main"],
            instance="hami-a",
            annotations={HAMI_KEY: f"{hami_id(fake_dcmi.die(1))},Ascend910B,32768,50:;"},
        ),
        pod(
            "vnpu",
            None,
            containers=["main"],
            instance="vnpu",
            annotations=gpustack(
                {
                    "main": [
                        {
                            "id": npu(0),
                            "index": 0,
                            "mode": 4,
                            "allocated": 400_000,
                            "allocatedPhysicalProfile": "vir04",
                            "allocatedPhysicalID": "100",
                        }
                    ],
                }
            ),
        ),
    ]
    process(tmp_path / "proc", 8101, "hami-a")
    agent = serve_fake_library(
        launch, "ascend", libdcmi, tmp_path, env={fake_dcmi.SCENARIO_ENV: str(path)}, pods=pods
    )
    with agent.client() as client:
        doc = client.get("/monitor/snapshot").json()
        text = client.get("/metrics").text
    (backend,) = doc["backends"]
    assert (backend["manufacturer"], backend["state"]) == ("ascend", "ok")
    (group,) = doc["groups"]
    assert [c["id"] for c in group["accelerators"]] == [npu(0), npu(1)]
    assert group["driverVersion"] == "25.5.1"
    parts = {p["id"]: p for p in doc["slices"]["partitions"]}
    assert parts["vdavinci100"]["memoryUsedMiB"] == 12000
    assert 'instance_name="hami-a"' in text and 'manufacturer="ascend"' in text
