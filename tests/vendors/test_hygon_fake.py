"""The hygon backend end to end: our ctypes declarations, read() and parse() against the three
fake Hygon libraries compiled by the test (tests/fakelib/hygon), through the monitor round and the
whole agent (R-V1..R-V6); and libhydmi_mig, which exports NVML's symbol names, loaded in one
process with the fake libnvidia-ml without either answering for the other.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from devicemanager.agent.monitor import Monitor
from devicemanager.model import HealthFigure as H
from devicemanager.model import ReadRequest, Reason
from tests.conftest import REPO, Agent, agent_env, assert_promtool_accepts
from tests.fakelib import hygon as fake
from tests.fakelib import nvidia as fake_nvml
from tests.fakelib.hygon import GIB, MIB, scenarios
from tests.fakelib.hygon.scenarios import dcu, mig_uuid
from tests.vendors import kit
from tests.vendors.conftest import ManualClock, links_of, topology_reads
from tests.vendors.kit import series
from tests.world import gpu, pod, process, uid
from vendors._common import EVERY_ACTIVITY
from vendors.hygon import HygonBackend

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def libs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    why = fake.missing()
    if why:
        pytest.skip(f"the fake Hygon libraries cannot be built here: {why}")
    built = fake.build(tmp_path_factory.getbasetemp() / "hygon-libs")
    return {name: str(path) for name, path in built.items()}


@pytest.fixture
def scenario(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    def _write(doc: dict[str, Any]) -> dict[str, str]:
        env = fake.write(tmp_path / "scenario", doc)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        return env

    return _write


@pytest.fixture
def registry(tmp_path: Path) -> Path:
    """The driver's /etc/dmi_mig_config for scenarios.k100ai_mig()."""
    return fake.registry(tmp_path / "dmi_mig_config", scenarios.mig_registry())


def read(
    libs: dict[str, str], request: ReadRequest, mig_config: Path | None = None
) -> dict[str, Any]:
    backend = HygonBackend(libs, mig_config=mig_config or "/nonexistent")
    backend.open()
    try:
        return backend.read(request)
    finally:
        backend.close()


def carved(*cards: int) -> ReadRequest:
    return ReadRequest(carved_device_ids=frozenset(dcu(n) for n in cards))


def partitions(*pairs: tuple[str, str]) -> ReadRequest:
    return ReadRequest(partition_ids=frozenset(pairs))


def hygon_pod(name: str, accels: list[dict[str, Any]], **options: Any) -> dict[str, Any]:
    """A pod with GPUStack's allocation annotation naming Hygon cards."""
    doc = pod(name, {"main": accels}, instance=name, **options)
    key = "device.gpustack.ai/accelerator.allocated"
    annotation = json.loads(doc["metadata"]["annotations"][key])
    for group in annotation["main"]["devices"]["groups"]:
        group["manufacturer"] = "hygon"
    doc["metadata"]["annotations"][key] = json.dumps(annotation)
    return doc


def accel(n: int, mode: int, units: int = 1_600_000, **extra: Any) -> dict[str, Any]:
    return {"id": dcu(n), "index": n, "mode": mode, "allocated": units, **extra}


def hami_pod(name: str, device: str, memory_mib: int, cores: int) -> dict[str, Any]:
    """A pod HAMi placed on a dynamic vDCU: its card as DCU-<index>, the quota and the cap."""
    value = f"{device},DCU-K100_AI,{memory_mib},{cores}:;"
    return pod(name, instance=name, annotations={"hami.io/dcu-devices-allocated": value})


def monitor(
    libs: dict[str, str], tmp: Path, pods: list[dict[str, Any]], mig_config: Path | None = None
) -> Monitor:
    return kit.monitor(
        HygonBackend(libs, mig_config=mig_config or "/nonexistent"), tmp / "proc", pods
    )


def entries(text: bytes) -> dict[tuple[str, str], dict[str, float]]:
    """(instance, id) -> the per-grant figures /metrics publishes."""
    out: dict[tuple[str, str], dict[str, float]] = {}
    for name, samples in series(text).items():
        if name.startswith("gpustack_instance_accelerator_"):
            for labels, value in samples:
                field = name.removeprefix("gpustack_instance_accelerator_")
                out.setdefault((labels["instance_name"], labels["id"]), {})[field] = value
    return out


# -- cards --------------------------------------------------------------------------------------


def test_card_figures_and_identities_through_our_ctypes(libs: dict[str, str], scenario) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.k100ai_whole_and_slices())
    payload = read(libs, ReadRequest())
    reading = HygonBackend().parse(payload)
    assert [c.id for c in reading.cards] == [dcu(n) for n in range(8)]
    first = reading.cards[0]
    assert first.aliases == ("DCU-0", "HCU-HCU0000K1A", "0000:03:00.0")
    assert (first.name, first.memory_total_mib, first.memory_used_mib) == ("K100_AI", 65520, 53248)
    assert (
        first.cores_utilization_percent,
        first.temperature_celsius,
        first.power_usage_watts,
    ) == (97.0, 71.0, 286.0)
    assert reading.driver_version == "6.3.8-V1.11.0"
    # No carved card, no partition asked for: no per-process, vDCU or MIG call at all (R-V3).
    assert not {"processes", "vdcu", "mig"} & payload.keys()


# -- the card's health beyond one bit (R-X7) ---------------------------------------------------


def test_card_health_through_our_ctypes(libs: dict[str, str], scenario) -> None:  # type: ignore[no-untyped-def]
    """(R-X7) ECC, retired pages, energy, clocks and PCIe replays as Hygon's ROCm SMI answers
    them through our declarations (rsmi_frequencies_t with its deep-sleep flag, retired-page
    records after a NULL probe): in base units; each NOT_SUPPORTED answer is that figure
    absent with `unsupported`; all ones and a missing current clock level are
    `invalid_data`; throttle reasons, aggregate ECC and the SM clock are `unsupported`."""
    scenario(scenarios.k100ai_health())
    payload = read(libs, ReadRequest())
    full, blind, odd = (c.health for c in HygonBackend().parse(payload).cards)
    assert full is not None and blind is not None and odd is not None
    assert (full.number(H.ECC_CORRECTED_TOTAL), full.number(H.ECC_UNCORRECTED_TOTAL)) == (
        4,
        1,
    )
    assert (
        full.number(H.REMAPPED_ROWS_UNCORRECTABLE),
        full.number(H.REMAPPED_ROWS_PENDING),
        full.number(H.REMAPPED_ROWS_FAILED),
    ) == (2, 1, 0)
    assert (
        full.number(H.ENERGY_JOULES) is not None and round(full.number(H.ENERGY_JOULES), 3) == 15.3
    )
    assert (
        full.number(H.CLOCK_GRAPHICS_HZ),
        full.number(H.CLOCK_MEMORY_HZ),
        full.number(H.PCIE_NAKS),
    ) == (
        1_500_000_000,
        1_600_000_000,
        9,
    )
    # The memory's busy time (rsmi_dev_memory_busy_percent_get), held as busy time (issue 41).
    assert full.number(H.MEMORY_BUSY) == 35.0
    always = {
        "pcie_replays",  # the replay counter counts NAKs: pcie_naks (issue 43)
        "ecc_corrected_volatile",  # the header's count is "total" (issue 43)
        "ecc_uncorrected_volatile",
        "ecc_corrected_aggregate",
        "ecc_uncorrected_aggregate",
        "remapped_rows_correctable",
        "throttle_reasons",
        "clock_sm_hz",
        "xid_errors",
        # No activity figure, nor vector busy time: the fork states none (issue 41).
        *(EVERY_ACTIVITY - {H.MEMORY_BUSY}),
    }
    assert dict(full.reasons) == dict.fromkeys(always, Reason.UNSUPPORTED)
    assert dict(blind.reasons) == {
        **dict.fromkeys(always, Reason.UNSUPPORTED),
        **dict.fromkeys(
            (
                "ecc_corrected_total",
                "ecc_uncorrected_total",
                "remapped_rows_uncorrectable",
                "remapped_rows_pending",
                "remapped_rows_failed",
                "energy_joules",
                "clock_memory_hz",
                "pcie_naks",
                "memory_busy_percent",
            ),
            Reason.UNSUPPORTED,
        ),
    }
    assert blind.number(H.CLOCK_GRAPHICS_HZ) == 1_500_000_000  # the fake's default top level
    assert {k: v for k, v in odd.reasons if v is not Reason.UNSUPPORTED} == {
        "ecc_corrected_total": Reason.INVALID_DATA,
        "clock_graphics_hz": Reason.INVALID_DATA,
        "pcie_naks": Reason.INVALID_DATA,
        "memory_busy_percent": Reason.INVALID_DATA,  # 101%, never clamped
    }
    assert (odd.number(H.REMAPPED_ROWS_UNCORRECTABLE), odd.number(H.REMAPPED_ROWS_FAILED)) == (0, 1)
    # The page card 2 could not retire makes it unhealthy; card 0's uncorrectable ECC error
    # is the more severe reason of the two it has.
    reasons = [c.unhealthy_reason for c in HygonBackend().parse(payload).cards]
    assert reasons == ["ecc_uncorrectable", None, "retired_pages_unreservable"]
    # The levels as the library listed them, only the ones it filled.
    clocks = payload["devices"][0]["rsmi_dev_gpu_clk_freq_get"]
    assert clocks["sys"] == {
        "num_supported": 3,
        "current": 2,
        "frequency": [300_000_000, 1_000_000_000, 1_500_000_000],
    }


def test_the_whole_agent_publishes_dcu_health(
    libs: dict[str, str], scenario, tmp_path: Path, launch
) -> None:  # type: ignore[no-untyped-def]
    """(R-X7) Over real HTTPS on a K100_AI node: energy, ECC and replays as counters in base
    units, an unsupported figure with no sample and its capability saying why, and promtool
    taking the text with nothing to say."""
    env = scenario(scenarios.k100ai_health())
    agent = serve(launch, libs, env, tmp_path, [])
    with agent.client() as client:
        text = client.get("/metrics").content
        doc = client.get("/monitor/snapshot").json()
    lines = text.decode().splitlines()
    for name in ("ecc_errors", "energy_joules", "pcie_naks"):
        assert f"# TYPE gpustack_accelerator_{name}_total counter" in lines
    got = series(text)

    def by_card(name: str, **match: str) -> dict[str, float]:
        return {
            ls["id"]: v
            for ls, v in got.get(name, [])
            if all(ls.get(k) == want for k, want in match.items())
        }

    pre = "gpustack_accelerator_"
    assert by_card(f"{pre}pcie_naks") == {dcu(0): 9.0}
    assert by_card(f"{pre}ecc_errors", error="uncorrected", counter="total") == {
        dcu(0): 1.0,
        dcu(2): 0.0,
    }
    assert by_card(f"{pre}ecc_errors", counter="aggregate") == {}
    assert by_card(f"{pre}clock_hertz", clock="memory") == {dcu(0): 1.6e9, dcu(2): 1.8e9}
    assert by_card(f"{pre}figure_capability", figure="throttle_reasons", reason="unsupported") == {
        dcu(n): 0.0 for n in range(3)
    }
    assert_promtool_accepts(text)
    health = doc["groups"][0]["accelerators"][1]["health"]
    assert health["absentReasons"]["energy_joules"] == "unsupported"


# -- links and placement (R-X3) ------------------------------------------------------------------


def test_links_and_numa_nodes_through_our_ctypes(libs: dict[str, str], scenario) -> None:  # type: ignore[no-untyped-def]
    """(R-X3) Per pair of cards the link Hygon's ROCm SMI names (`rsmi_topo_get_link_type`:
    HSL, the header's XGMI value, or PCIe; no count, the call gives hops), and each card's
    NUMA node (`rsmi_topo_get_numa_node_number`); a link type 0 (UNDEFINED) and a
    NOT_SUPPORTED answer place the pair nowhere (never "pcie"), and a NUMA node the library
    does not give is absent with its failure in the payload, not node 0."""
    scenario(scenarios.links_and_numa())
    payload = read(libs, ReadRequest())
    cards = {c.id: c for c in HygonBackend().parse(payload).cards}
    a, b, c, d = (dcu(n) for n in range(4))

    def links(card_id: str) -> set[tuple[str, str, int | None]]:
        return links_of(cards[card_id])

    assert links(a) == {(b, "hsl", None), (c, "pcie", None)}
    assert links(b) == {(a, "hsl", None)}
    assert links(c) == {(a, "pcie", None)}
    assert links(d) == set()
    assert [cards[x].numa_node for x in (a, b, c, d)] == [0, 0, 1, None]
    topology = payload["topology"]
    assert len(topology["pairs"]) == 6  # one call per unordered pair
    assert topology["devices"][3]["rsmi_topo_get_numa_node_number"] == {
        "error": "RSMI_STATUS_NOT_SUPPORTED",
        "code": 2,
    }
    (undefined,) = [p for p in topology["pairs"] if (p["a"], p["b"]) == (1, 2)]
    assert undefined["rsmi_topo_get_link_type"] == {"hops": 1, "type": 0}


def test_hygon_links_are_read_once_a_minute(libs: dict[str, str], scenario) -> None:  # type: ignore[no-untyped-def]
    """(R-X3) The backend's clock advances one 15 s period a round: the topology read in the
    first round is carried by the next three and read again in the fifth, 60 s later; a card
    that leaves enumeration has it read again at once."""

    def read_at(doc: dict[str, Any], n: int) -> list[tuple[float, int]]:
        scenario(doc)
        clock = ManualClock(1000.0)
        backend = HygonBackend(libs, mig_config="/nonexistent", clock=clock)
        return topology_reads(backend, clock, n)

    assert read_at(scenarios.links_and_numa(), 5) == [(1000.0, 4)] * 4 + [(1060.0, 4)]
    leaving = scenarios.links_and_numa()
    leaving["cards"][3]["gone_after"] = 1  # round one's enumeration, then gone
    assert read_at(leaving, 2) == [(1000.0, 4), (1015.0, 3)]


def test_the_whole_agent_publishes_hygon_links(
    libs: dict[str, str], scenario, tmp_path: Path, launch
) -> None:  # type: ignore[no-untyped-def]
    """(R-X3) Over real HTTPS: `link_info` per card, peer and kind (`hsl`, `pcie`), no `links`
    count (the fork gives hops, not links), `numa_node` only where the library gives one, the
    snapshot's optional `links` and `numaNode`; promtool takes the text."""
    env = scenario(scenarios.links_and_numa())
    agent = serve(launch, libs, env, tmp_path, [])
    with agent.client() as client:
        text = client.get("/metrics").content
        doc = client.get("/monitor/snapshot").json()
    got = series(text)
    a, b, c, d = (dcu(n) for n in range(4))
    pairs = {
        (ls["id"], ls["peer_id"], ls["link"]) for ls, _ in got["gpustack_accelerator_link_info"]
    }
    assert pairs == {
        (a, b, "hsl"),
        (b, a, "hsl"),
        (a, c, "pcie"),
        (c, a, "pcie"),
    }
    assert "gpustack_accelerator_links" not in got
    numa = {ls["id"]: v for ls, v in got["gpustack_accelerator_numa_node"]}
    assert numa == {a: 0.0, b: 0.0, c: 1.0}  # card 3: NOT_SUPPORTED, no sample
    served = {x["id"]: x for x in doc["groups"][0]["accelerators"]}
    assert sorted((x["peerID"], x["link"], x["count"]) for x in served[a]["links"]) == sorted(
        [(b, "hsl", None), (c, "pcie", None)]
    )
    assert (served[a]["numaNode"], served[c]["numaNode"]) == (0, 1)
    assert (served[d]["links"], "numaNode" in served[d]) == ([], False)
    assert_promtool_accepts(text)


# -- per-process --------------------------------------------------------------------------------


def test_a_null_probe_answering_insufficient_size_is_a_count(
    libs: dict[str, str], scenario
) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.null_probe_insufficient())
    payload = read(libs, carved(0))
    assert payload["processes"]["attempts"] == 1
    (answer,) = HygonBackend().parse(payload).processes
    assert [(r.pid, r.memory_bytes, r.cores_percent) for r in answer.rows] == [
        (4101, 6 * GIB, 25.0),
        (4102, 2 * GIB, 5.0),
    ]
    assert (answer.memory_reason, answer.cores_reason) == (None, None)


def test_a_list_that_grew_between_probe_and_read_is_read_again(
    libs: dict[str, str], scenario
) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.list_grows("once"))
    payload = read(libs, carved(0))
    assert payload["processes"]["attempts"] == 2
    (answer,) = HygonBackend().parse(payload).processes
    assert answer.memory_reason is None and len(answer.rows) == 12


def test_a_list_that_keeps_growing_is_truncated_not_partial(libs: dict[str, str], scenario) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.list_grows("always"))
    payload = read(libs, carved(0))
    assert payload["processes"]["attempts"] == 3
    (answer,) = HygonBackend().parse(payload).processes
    assert (answer.rows, answer.memory_reason, answer.cores_reason, answer.reads_truncated) == (
        (),
        Reason.TRUNCATED,
        Reason.TRUNCATED,
        1,
    )


def test_cu_occupancy_invalid_is_absent_for_that_row_and_memory_still_measured(
    libs: dict[str, str], scenario, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.cu_occupancy_invalid())
    (answer,) = HygonBackend().parse(read(libs, carved(0))).processes
    assert [(r.pid, r.memory_bytes, r.cores_percent) for r in answer.rows] == [
        (4101, 6 * GIB, None),
        (4102, 2 * GIB, 12.0),
    ]
    pods = [hygon_pod(n, [accel(0, 3, 800_000)]) for n in ("blind", "seen")]
    process(tmp_path / "proc", 4101, "blind")
    process(tmp_path / "proc", 4102, "seen")
    m = monitor(libs, tmp_path, pods)
    published = m.run_round()
    m.stop()
    got = entries(published.metrics.plain)
    assert got[("blind", dcu(0))]["memory_used_mib"] == 6144
    assert "cores_utilization_percent" not in got[("blind", dcu(0))]  # absent, never 0
    assert got[("seen", dcu(0))]["cores_utilization_percent"] == 12.0


def test_the_v2_row_in_mib_where_the_per_device_row_is_not_served(
    libs: dict[str, str], scenario
) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.by_device_not_supported())
    payload = read(libs, carved(0))
    (row, _) = payload["devices"][0]["processes"]
    assert row["rsmi_compute_process_info_by_device_get"]["code"] == 2
    assert row["rsmi_compute_process_info_by_pid_get_v2"]["vramUsageSize"] == 6144  # MiB
    (answer,) = HygonBackend().parse(payload).processes
    assert [(r.pid, r.memory_bytes, r.cores_percent) for r in answer.rows] == [
        (4101, 6144 * MIB, 25.5),
        (4102, None, 5.0),  # the process uses two cards: its MiB are no one card's
    ]


def test_a_vdcu_slice_held_through_hami_is_measured_on_its_card(
    libs: dict[str, str], scenario, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.k100ai_whole_and_slices())
    pods = [
        hygon_pod("whole", [accel(0, 1)]),
        hami_pod("vdcu", "DCU-2", 8192, 30),  # HAMi names the card by index
        hygon_pod("busy", [accel(3, 3, 800_000)]),
        hygon_pod("idle", [accel(3, 3, 800_000)]),
    ]
    for pid, owner in ((51201, "whole"), (52110, "vdcu"), (53007, "busy"), (53118, "idle")):
        process(tmp_path / "proc", pid, owner)
    m = monitor(libs, tmp_path, pods)
    published = m.run_round()
    m.stop()
    got = entries(published.metrics.plain)
    vdcu = got[("vdcu", dcu(2))]  # resolved to the library's own id
    assert (vdcu["memory_total_mib"], vdcu["memory_used_mib"]) == (8192, 5420)
    assert vdcu["cores_utilization_percent"] == 87.0  # 26% of the card against a 30% cap
    assert got[("busy", dcu(3))]["memory_used_mib"] == 18432
    assert got[("idle", dcu(3))]["cores_utilization_percent"] == 0.0  # measured idle
    assert got[("whole", dcu(0))]["cores_utilization_percent"] == 97.0  # the card's own
    requested = {d.device_id for d in published.snapshot.slices.devices}
    assert requested == {dcu(2), dcu(3)}  # only carved cards cost per-process calls


# -- vDCU ---------------------------------------------------------------------------------------


def test_vdcu_calls(libs: dict[str, str], scenario) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.vdcu_calls())
    wanted = [(dcu(1), "vDCU-0"), ("DCU-0", "vDCU-3"), ("", "vDCU-7"), ("", "vdev9")]
    payload = read(libs, partitions(*wanted))
    # Read on the indexes asked for, nothing else enumerated.
    assert [v["index"] for v in payload["vdcu"]] == [0, 3, 7, 9]
    assert payload["vdcu"][0]["dmiGetVDeviceInfo"]["container_id"] == 0xC0FFEE
    got = {p.id: p for p in HygonBackend().parse(payload).partitions}
    busy = got["vDCU-0"]
    assert (busy.parent_id, busy.memory_total_mib, busy.memory_used_mib, busy.cores_percent) == (
        dcu(1),
        16384,
        10240,
        71.0,
    )
    assert busy.activity is not None and not busy.activity.held()  # busy time only
    unserved = got["vDCU-3"]
    assert (unserved.parent_id, unserved.memory_used_mib) == (dcu(0), 2048)
    assert (unserved.cores_percent, unserved.cores_reason) == (None, Reason.UNSUPPORTED)
    gone = got["vDCU-7"]
    assert (gone.memory_used_mib, gone.cores_reason) == (0, Reason.TRANSIENT_DRIVER_ERROR)
    assert got["vdev9"].memory_reason is Reason.TRANSIENT_DRIVER_ERROR  # no such vDCU


# -- MIG-style partitions -----------------------------------------------------------------------


def test_mig_partitions_without_uuid_found_through_the_drivers_registry(
    libs: dict[str, str], scenario, registry: Path
) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.k100ai_mig())
    wanted = [
        (dcu(0), f"MIG-{mig_uuid(0)}"),
        (dcu(0), f"MIG-{mig_uuid(2)}"),
        (dcu(1), f"MIG-{mig_uuid(4)}"),
        (dcu(0), "MIG-not-there"),
    ]
    payload = read(libs, partitions(*wanted), registry)
    mig = payload["mig"]
    # Only the cards a partition was asked on were walked; the node's index space was swept.
    assert [c["index"] for c in mig["cards"]] == [0, 1]
    assert [m["nvmlDeviceGetMigDeviceHandleByIndex"] for m in mig["cards"][1]["migDevices"]] == [4]
    got = {p.id: p for p in HygonBackend().parse(payload).partitions}
    busy = got[f"MIG-{dcu(0)}/3/0"]
    assert busy.aliases == (f"MIG-{mig_uuid(0)}",)
    assert (busy.memory_total_mib, busy.memory_used_mib, busy.cores_percent) == (16380, 12288, 93.0)
    # The same call's memory busy time, its instance's own, kept raw and held as busy time;
    # no activity figure (the library has none per instance), the card's 24% nowhere.
    assert mig["cards"][0]["migDevices"][0]["nvmlDeviceGetUtilizationRates"]["memory"] == 37
    assert busy.activity is not None
    assert busy.activity.held() == {H.MEMORY_BUSY: 37.0}
    assert busy.activity.reason(H.SM_ACTIVITY) is Reason.UNSUPPORTED
    idle = got[f"MIG-{dcu(0)}/5/0"]
    assert (idle.memory_used_mib, idle.cores_percent, idle.memory_reason) == (0, 0.0, None)
    wide = got[f"MIG-{dcu(1)}/1/0"]
    assert (wide.parent_id, wide.memory_total_mib, wide.cores_percent) == (dcu(1), 32760, 61.0)
    assert got["MIG-not-there"].memory_reason is Reason.TRANSIENT_DRIVER_ERROR


def test_devicemanager_record_keeps_the_memorys_busy_times(
    libs: dict[str, str], scenario, registry: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """(issue 41) `devicemanager record` keeps what the activity figures are parsed from: the
    card's rsmi_dev_memory_busy_percent_get and a MIG instance's whole utilization answer, so
    the next real node recorded carries both."""
    from devicemanager.cli import record
    from vendors.hygon import MIG_CONFIG_ENV

    scenario(scenarios.k100ai_mig())
    monkeypatch.setenv(MIG_CONFIG_ENV, str(registry))
    doc = record("hygon", libs, False, [(dcu(0), f"MIG-{mig_uuid(0)}")])
    payload = doc["payload"]
    assert [d["rsmi_dev_memory_busy_percent_get"] for d in payload["devices"][:2]] == [10, 9]
    (instance, *_) = payload["mig"]["cards"][0]["migDevices"]
    assert instance["nvmlDeviceGetUtilizationRates"] == {"gpu": 93, "memory": 37}
    (part,) = HygonBackend().parse(payload).partitions
    assert part.activity is not None and part.activity.number(H.MEMORY_BUSY) == 37.0


def test_a_mig_partition_with_no_uuid_anywhere_is_found_by_its_synthesized_id(
    libs: dict[str, str], scenario, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.k100ai_mig())
    empty = tmp_path / "empty"  # no registry: the library itself has no UUID to give
    payload = read(libs, partitions((dcu(0), f"MIG-{dcu(0)}/4/0")), empty)
    assert payload["mig"]["registry"] == {}
    (part,) = HygonBackend().parse(payload).partitions
    assert (part.id, part.aliases, part.memory_used_mib, part.cores_percent) == (
        f"MIG-{dcu(0)}/4/0",
        (),
        1024,
        2.0,
    )


def test_an_empty_pci_string_is_the_librarys_quirk_and_the_card_is_reached_by_rsmis_bus_id(
    libs: dict[str, str], scenario, registry: Path
) -> None:  # type: ignore[no-untyped-def]
    doc = scenarios.k100ai_mig()
    scenario(doc)
    payload = read(libs, partitions((dcu(0), f"MIG-{mig_uuid(0)}")), registry)
    card = payload["mig"]["cards"][0]
    assert (card["nvmlDeviceGetPciInfo"], card["busId"]) == ("", "0000:03:00.0")
    (part,) = HygonBackend().parse(payload).partitions
    assert part.memory_reason is None
    # A bus id the library does write must be the card's: another's is invalid data.
    doc["cards"][0]["mig"]["pci_info"] = "0000:23:00.0"
    scenario(doc)
    payload = read(libs, partitions((dcu(0), f"MIG-{mig_uuid(0)}")), registry)
    (part,) = HygonBackend().parse(payload).partitions
    assert part.memory_reason is Reason.INVALID_DATA


def test_a_node_not_in_mig_mode_answers_unsupported_without_walking(
    libs: dict[str, str], scenario, registry: Path
) -> None:  # type: ignore[no-untyped-def]
    doc = scenarios.k100ai_mig()
    doc["mig_mode"] = 0
    scenario(doc)
    payload = read(libs, partitions((dcu(0), f"MIG-{mig_uuid(0)}")), registry)
    assert "cards" not in payload["mig"]
    (part,) = HygonBackend().parse(payload).partitions
    assert (part.memory_reason, part.cores_reason) == (Reason.UNSUPPORTED, Reason.UNSUPPORTED)


def test_mig_partitions_held_by_pods_through_the_monitor_round(
    libs: dict[str, str], scenario, registry: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    scenario(scenarios.k100ai_mig())
    profile = {"allocatedPhysicalProfile": "2g.15gb"}
    pods = [
        hygon_pod(
            "train", [accel(0, 4, 400_000, **profile, allocatedPhysicalID=f"MIG-{mig_uuid(0)}")]
        ),
        hygon_pod(
            "spare", [accel(0, 4, 400_000, **profile, allocatedPhysicalID=f"MIG-{mig_uuid(3)}")]
        ),
    ]
    m = monitor(libs, tmp_path, pods, registry)
    published = m.run_round()
    m.stop()
    parts = {(p.pod_uid, p.id): p for p in published.snapshot.slices.partitions}
    train = parts[(uid("train"), f"MIG-{dcu(0)}/3/0")]
    assert (train.memory_total_mib, train.memory_used_mib, train.cores_percent) == (
        16380,
        12288,
        93.0,
    )
    spare = parts[(uid("spare"), f"MIG-{dcu(0)}/6/0")]
    assert (spare.memory_used_mib, spare.cores_percent) == (0, 0.0)  # idle, measured
    got = entries(published.metrics.plain)
    # Partition compute is the partition's own, never restated against anything.
    assert got[("train", f"MIG-{dcu(0)}/3/0")]["cores_utilization_percent"] == 93.0


# -- NVML's names in two libraries --------------------------------------------------------------


# Each order runs in a fresh interpreter: a library's calls to its own exported functions are
# bound once, when it is loaded, against whatever is in the global namespace then.
BOTH = """
import json, sys
from devicemanager.model import ReadRequest
from vendors.hygon import HygonBackend
from vendors.nvidia import NvidiaBackend
order, nvml, libs, registry, wanted = sys.argv[1], sys.argv[2], *map(json.loads, sys.argv[3:6])
hy = HygonBackend(libs, mig_config=registry)
nv = NvidiaBackend({"nvml": nvml} if nvml else None)  # None: pynvml's own loader finds it
opened = [hy, nv] if order == "hygon-first" else [nv, hy]
for backend in opened:
    backend.open()
hp = hy.read(ReadRequest(partition_ids=frozenset({tuple(wanted)})))
np = nv.read(ReadRequest())
(part,) = hy.parse(hp).partitions
print(json.dumps({
    "hygon": [hp["mig"]["nvmlDeviceGetCount"], part.memory_total_mib, part.memory_used_mib],
    "nvidia": [np["nvmlDeviceGetCount"], [d["nvmlDeviceGetMemoryInfo_v2"] for d in np["devices"]],
               [(c.id, c.memory_used_mib) for c in nv.parse(np).cards]],
}))
"""


@pytest.mark.parametrize(
    ("order", "nvml_loader"),
    [
        ("hygon-first", "pynvml"),  # the agent's default: pynvml dlopens libnvidia-ml itself
        ("hygon-first", "configured"),
        ("nvidia-first", "configured"),
    ],
)
def test_libhydmi_mig_and_libnvidia_ml_in_one_process_never_answer_for_each_other(
    libs: dict[str, str],
    libnvml: Path,
    scenario,
    registry: Path,
    tmp_path: Path,
    order: str,
    nvml_loader: str,
) -> None:  # type: ignore[no-untyped-def]
    """Both fakes answer one entry point through another of their own exported names (NVIDIA's
    memory v2 through its v1, Hygon's MIG memory through its instance-id getters). Were
    libhydmi_mig loaded into the global namespace, a libnvidia-ml loaded after it would bind
    that call to Hygon's, which refuses NVIDIA's handle, and v2 would fail."""
    env = scenario(scenarios.k100ai_mig())  # eight Hygon cards, two MIG-carved
    nvml = fake_nvml.write(
        tmp_path / "nvml.txt",
        "550.90.07",
        [fake_nvml.device(gpu(n), used_mib=1024, reserved=512 * MIB) for n in range(3)],
    )
    extra = {**env, fake_nvml.SCENARIO_ENV: str(nvml)}
    configured = str(libnvml) if nvml_loader == "configured" else ""
    if not configured:
        extra["LD_LIBRARY_PATH"] = str(libnvml.parent)
    args = (libs, str(registry), [dcu(0), f"MIG-{mig_uuid(0)}"])
    out = subprocess.run(
        [sys.executable, "-c", BOTH, order, configured, *map(json.dumps, args)],
        capture_output=True,
        text=True,
        env=agent_env(extra),
        cwd=REPO,
        check=False,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    # Hygon's nvmlDeviceGetCount and its 2g.15gb instance's own memory (16380 MiB, 12 GiB used).
    assert got["hygon"] == [8, 16380, 12288]
    count, v2, cards = got["nvidia"]
    assert count == 3  # NVIDIA's
    # NVIDIA's v2 answered (through its own v1): used leaves the 512 MiB reservation out.
    assert all("error" not in answer for answer in v2), v2
    assert cards == [[gpu(n), 1024] for n in range(3)]


def test_a_libnvidia_ml_loaded_into_the_global_namespace_does_not_shadow_hygons(
    libs: dict[str, str], libnvml: Path, scenario, registry: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """Another component of the process dlopens NVML with RTLD_GLOBAL first: its nvml* names
    are then what a bare lookup finds, and our private handle still reaches Hygon's. The fake
    libhydmi_mig answers MIG memory through its own exported nvmlDeviceGetGpuInstanceId, which
    only RTLD_DEEPBIND keeps from binding to NVIDIA's (which refuses Hygon's handle)."""
    env = scenario(scenarios.k100ai_mig())
    nvml = fake_nvml.write(
        tmp_path / "nvml.txt", "550.90.07", [fake_nvml.device(gpu(n)) for n in range(3)]
    )
    code = f"""
import ctypes, json, os
from devicemanager.model import ReadRequest
from vendors.hygon import HygonBackend
nv = ctypes.CDLL({str(libnvml)!r}, mode=os.RTLD_GLOBAL | os.RTLD_NOW)
assert nv.nvmlInit_v2() == 0
count = ctypes.c_uint()
ctypes.CDLL(None).nvmlDeviceGetCount_v2(ctypes.byref(count))  # the global namespace: NVIDIA's
hy = HygonBackend({libs!r}, mig_config={str(registry)!r})
hy.open()
payload = hy.read(ReadRequest(partition_ids=frozenset({{({dcu(0)!r}, "MIG-{mig_uuid(0)}")}})))
print(json.dumps([count.value, payload["mig"]["nvmlDeviceGetCount"],
                  hy.parse(payload).partitions[0].memory_total_mib]))
"""
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=agent_env({**env, fake_nvml.SCENARIO_ENV: str(nvml)}),
        cwd=REPO,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [3, 8, 16380]


# -- the whole agent ----------------------------------------------------------------------------


def serve(
    launch, libs: dict[str, str], env: dict[str, str], tmp: Path, pods: list[dict[str, Any]]
) -> Agent:  # type: ignore[no-untyped-def]
    (tmp / "pods.json").write_text(json.dumps({"kind": "PodList", "items": pods}))
    (tmp / "proc").mkdir(exist_ok=True)
    agent: Agent = launch(
        "--manufacturer",
        "hygon",
        "--vendor-library",
        f"hygon={libs['rocm_smi']},hygon.hydmi={libs['hydmi']},hygon.hydmi_mig={libs['hydmi_mig']}",
        "--pods-file",
        str(tmp / "pods.json"),
        "--proc-root",
        str(tmp / "proc"),
        "--pod-resources-socket",
        "none",
        "--monitor-period",
        "0.5",
        env=env,
    )
    agent.wait_for("/readyz", 200)
    return agent


def test_the_whole_agent_on_a_k100ai_node_in_mig_mode(
    libs: dict[str, str], scenario, registry: Path, tmp_path: Path, launch
) -> None:  # type: ignore[no-untyped-def]
    env = scenario(scenarios.k100ai_mig())
    env["DEVICEMANAGER_HYGON_MIG_CONFIG"] = str(registry)
    pods = [
        hygon_pod("train", [accel(0, 4, 400_000, allocatedPhysicalID=f"MIG-{mig_uuid(0)}")]),
        hygon_pod("wide", [accel(1, 4, 800_000, allocatedPhysicalID=f"MIG-{mig_uuid(4)}")]),
    ]
    agent = serve(launch, libs, env, tmp_path, pods)
    with agent.client() as client:
        doc = client.get("/monitor/snapshot").json()
        text = client.get("/metrics").content
    (group,) = doc["groups"]
    assert [c["id"] for c in group["accelerators"]] == [dcu(n) for n in range(8)]
    parts = {p["id"]: p for p in doc["slices"]["partitions"]}
    assert parts[f"MIG-{dcu(0)}/3/0"]["coresPercent"] == 93.0
    assert parts[f"MIG-{dcu(1)}/1/0"]["memoryTotalMiB"] == 32760
    got = entries(text)
    assert got[("wide", f"MIG-{dcu(1)}/1/0")]["cores_utilization_percent"] == 61.0
    (backend,) = doc["backends"]
    # Which of the three libraries were loaded, for an operator reading backends[].
    assert (backend["state"], backend["via"]) == ("ok", "rocm_smi,hydmi,hydmi_mig")


def test_record_writes_what_a_hygon_node_answers(
    libs: dict[str, str], scenario, registry: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """`devicemanager record hygon` on a node makes a replay scenario's vendors/hygon.json."""
    env = scenario(scenarios.k100ai_mig())
    out = tmp_path / "hygon.json"
    libraries = [f"--library={name}={path}" for name, path in libs.items()]
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "devicemanager",
            "record",
            "hygon",
            *libraries,
            "--partition",
            f"{dcu(0)}:MIG-{mig_uuid(0)}",
            "--kind",
            "synthetic",
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=agent_env({**env, "DEVICEMANAGER_HYGON_MIG_CONFIG": str(registry)}),
        cwd=REPO,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(out.read_text())
    assert (doc["meta"]["kind"], doc["meta"]["driver"], doc["meta"]["cards"]) == (
        "synthetic",
        "6.3.8-V1.11.0",
        ["K100_AI"],
    )
    payload = doc["payload"]
    assert len(payload["devices"]) == 8 and "processes" in payload  # every card carved
    (part,) = HygonBackend().parse(payload).partitions
    assert (part.id, part.cores_percent) == (f"MIG-{dcu(0)}/3/0", 93.0)
