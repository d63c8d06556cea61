"""Device-plugin device ids as grants (R-X2): every manufacturer's resource names and id forms,
the annotation winning over the kubelet, pods matched by name, cards the library lost."""

from __future__ import annotations

import json
import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from devicemanager.grants.allocations import GPUSTACK_KEY, Mode
from devicemanager.grants.deviceplugins import (
    NOT_ENUMERATED,
    ContainerDevices,
    KubeletAnswer,
    PluginDevice,
    PodDevices,
    aliases_of,
    allocatable_cards,
    device_of,
    match_pods,
    missing_cards,
    node_kubelet_grants,
)
from devicemanager.grants.node import node_grants
from devicemanager.model import Card, PartitionReading, VendorReading
from devicemanager.node.pods import PodIndex
from tests.conftest import NODES, scenario_monitor

G = "GPU-8b6f0b2e-4e58-2d0b-9b1a-1f3c2a7d9e01"
G2 = "GPU-0c1d2e3f-4a5b-6c7d-8e9f-a0b1c2d3e4f5"
G3 = "GPU-1d2e3f4a-5b6c-7d8e-9fa0-b1c2d3e4f5a6"
M = "MIG-5c2e1a90-7d4b-5e3f-8a21-93b0c4d5e6f7"
# Each manufacturer's canonical card ids in the form its backend reports them, and the ids its
# device plugin hands the kubelet (docs/grants-and-figures.md cites each plugin's source).
AMD = "31ff74a1-0000-1000-800d-e080309a2b17"  # amdsmi's UUID
AMD_XCP = "beff74a1-0000-1000-803c-bde0541797d1"  # a secondary XCP of a CPX card
ASCEND = "E0F4EE64 140C979 6A691492 89528485 2A0301E3"  # the VDIE die id
ASCEND_4 = "E0F4FF75 141CA7A 6A694493 89528585 2A0301E3"
HYGON = "GPU-7e8f6b3ac49bc87a"  # GPU- + the ROCm SMI unique id
HYGON_MIG = "MIG-2f6c1e0a-93d4-4b7e-a1c5-0d8e7f6a5b4c"
METAX = "GPU-27c08701-4d00-0246-74b4-ffc94a196410"
THEAD = "GPU-03155c44-a4db-50f2-b0f9-bed7df5a1690"
ALIASES = {
    ("nvidia", "0"): G,
    ("nvidia", M): G,
    ("amd", "0000:05:00.0"): AMD,  # the PCI bus id the ROCm plugin registers a card by
    ("amd", "amdgpu_xcp_30"): AMD_XCP,  # and a secondary XCP by its platform device
    ("ascend", "Ascend910-3"): ASCEND,  # Huawei's plugin: <family>-<phy id>
    ("ascend", "npu-4"): ASCEND_4,  # as a backend would report mind-cluster's A5 name
    ("hygon", "0000:03:00.0"): HYGON,  # Hygon's plugin: the PCI bus id
    ("hygon", "vdev2"): HYGON,  # a vDCU on that card names its parent
    ("hygon", HYGON_MIG): HYGON,  # and so does a MIG instance
    ("metax", "gpu-c500-03-metax-0"): METAX,  # an alias the metax backend reports
    ("thead", "1"): THEAD,  # a card's index, as for every manufacturer
}

CASES = [
    # (resource, device id, what it is) -- NVIDIA's plugin: whole, replicas, MIG, index strategy
    ("nvidia.com/gpu", G, PluginDevice("nvidia", G, Mode.EXCLUSIVE)),
    ("nvidia.com/gpu", f"{G}::3", PluginDevice("nvidia", G, Mode.SHARED)),
    ("nvidia.com/gpu.shared", f"{G}::0", PluginDevice("nvidia", G, Mode.SHARED)),
    ("nvidia.com/gpu", f"{G}-7", PluginDevice("nvidia", G, Mode.SHARED)),  # HAMi's split
    ("nvidia.com/gpu", M, PluginDevice("nvidia", G, Mode.PARTITIONED, M)),  # single strategy
    ("nvidia.com/mig-1g.10gb", M, PluginDevice("nvidia", G, Mode.PARTITIONED, M, "1g.10gb")),
    (
        "nvidia.com/mig-1g.10gb.shared",
        f"{M}::1",
        PluginDevice("nvidia", G, Mode.PARTITIONED, M, "1g.10gb"),
    ),
    (
        "nvidia.com/mig-3g.40gb",
        f"MIG-{G}/2/0",  # before R470
        PluginDevice("nvidia", G, Mode.PARTITIONED, f"MIG-{G}/2/0", "3g.40gb"),
    ),
    ("nvidia.com/gpu", "0", PluginDevice("nvidia", G, Mode.EXCLUSIVE)),  # index strategy
    ("nvidia.com/gpu", "0::2", PluginDevice("nvidia", G, Mode.SHARED)),
    ("nvidia.com/mig-2g.20gb", "0:1", PluginDevice("nvidia", G, Mode.PARTITIONED, None, "2g.20gb")),
    # A MIG id whose card is not enumerated yet: named by the partition alone.
    (
        "nvidia.com/mig-1g.10gb",
        "MIG-00000000-0000-0000-0000-000000000001",
        PluginDevice(
            "nvidia", "", Mode.PARTITIONED, "MIG-00000000-0000-0000-0000-000000000001", "1g.10gb"
        ),
    ),
    # GPUStack's plugin (h100-8gpu-mixed): a MIG device by its parent card, whose partition
    # only the pod's annotation names, and a slice whose quota only the annotation states
    (
        "nvidia.com/mig-3g.40gb",
        f"{G}::0",
        PluginDevice("nvidia", G, Mode.PARTITIONED, None, "3g.40gb"),
    ),
    ("nvidia.com/mig-1g.10gb", G, PluginDevice("nvidia", G, Mode.PARTITIONED, None, "1g.10gb")),
    (
        "nvidia.com/mig-1g.10gb",
        f"{G}-2",
        PluginDevice("nvidia", G, Mode.PARTITIONED, None, "1g.10gb"),
    ),
    ("nvidia.com/gpu.sliced", f"{G}::0", PluginDevice("nvidia", G, Mode.SLICED)),
    ("nvidia.com/gpu.sliced", G, PluginDevice("nvidia", G, Mode.SLICED)),
    ("nvidia.com/gpu.sliced", f"{G}-1", PluginDevice("nvidia", G, Mode.SLICED)),
    ("nvidia.com/gpu.sliced", "0", PluginDevice("nvidia", G, Mode.SLICED)),
    # AMD (ROCm/k8s-device-plugin): a card by PCI bus id, an XCP by platform device, each
    # named through the aliases the amd backend reports; a time-slicing replica (PR #189)
    ("amd.com/gpu", "0000:05:00.0", PluginDevice("amd", AMD, Mode.EXCLUSIVE)),
    ("amd.com/gpu", "0000:05:00.0-slice-2", PluginDevice("amd", AMD, Mode.SHARED)),
    ("amd.com/cpx_nps4", "0000:05:00.0", PluginDevice("amd", AMD, Mode.EXCLUSIVE)),
    ("amd.com/cpx_nps4", "amdgpu_xcp_30", PluginDevice("amd", AMD_XCP, Mode.EXCLUSIVE)),
    ("amd.com/gpu", "0000:c1:00.0", PluginDevice("amd", "0000:c1:00.0", Mode.EXCLUSIVE)),  # unseen
    # Hygon (HYGON-AI/k8s-hcu-device-plugin and its `dcu` predecessor): a card by PCI bus id,
    # a pre-made vDCU and a MIG instance on it
    ("hygon.com/dcu", "0000:03:00.0", PluginDevice("hygon", HYGON, Mode.EXCLUSIVE)),
    ("hygon.com/hcu", "0000:03:00.0", PluginDevice("hygon", HYGON, Mode.EXCLUSIVE)),
    (
        "hygon.com/dcu-share-4c-16g",
        "vdev2",
        PluginDevice("hygon", HYGON, Mode.PARTITIONED, "vdev2", "4c-16g"),
    ),
    (
        "hygon.com/hcu-share-30c-16g",
        "vdev9",  # its card not enumerated yet
        PluginDevice("hygon", "", Mode.PARTITIONED, "vdev9", "30c-16g"),
    ),
    (
        "hygon.com/dcu-mig-4g-31gb",
        HYGON_MIG,
        PluginDevice("hygon", HYGON, Mode.PARTITIONED, HYGON_MIG, "4g.31gb"),
    ),
    # MetaX and T-Head: no public plugin shows the ids; whatever names the card does
    ("metax-tech.com/gpu", "gpu-c500-03-metax-0", PluginDevice("metax", METAX, Mode.EXCLUSIVE)),
    ("metax-tech.com/gpu", METAX, PluginDevice("metax", METAX, Mode.EXCLUSIVE)),
    ("alibabacloud.com/ppu", "1", PluginDevice("thead", THEAD, Mode.EXCLUSIVE)),
    ("alibabacloud.com/ppu", THEAD, PluginDevice("thead", THEAD, Mode.EXCLUSIVE)),
    # Ascend (Ascend/ascend-device-plugin, mind-cluster): whole NPUs to their die id, vNPUs
    ("huawei.com/Ascend910", "Ascend910-3", PluginDevice("ascend", ASCEND, Mode.EXCLUSIVE)),
    ("huawei.com/npu", "npu-3", PluginDevice("ascend", ASCEND, Mode.EXCLUSIVE)),  # Ascend910-3
    ("huawei.com/npu", "npu-4", PluginDevice("ascend", ASCEND_4, Mode.EXCLUSIVE)),
    (
        "huawei.com/Ascend310P",
        "Ascend310P-1",  # not enumerated: taken as given
        PluginDevice("ascend", "Ascend310P-1", Mode.EXCLUSIVE),
    ),
    (
        "huawei.com/Ascend910-2c",
        "Ascend910-2c-100-3",
        PluginDevice("ascend", ASCEND, Mode.PARTITIONED, "Ascend910-2c-100-3", "2c"),
    ),
    (
        "huawei.com/Ascend310P-4c.3cpu",
        "Ascend310P-4c.3cpu-100-0",  # mind-cluster's longest name form
        PluginDevice(
            "ascend", "Ascend310P-0", Mode.PARTITIONED, "Ascend310P-4c.3cpu-100-0", "4c.3cpu"
        ),
    ),
    # Not an accelerator of ours, or not an id of the resource
    ("nvidia.com/gpumem", "GPU-x-0", None),
    ("rdma/hca_shared_devices_a", "0", None),
    ("nvidia.com/gpu", "not-a-gpu", None),
    ("huawei.com/Ascend910-2c", "Ascend910-3", None),
    ("huawei.com/npu-core", "npu-core-3", None),  # AI cores: the card is in an annotation
    ("hygon.com/dcunum", "DCU-7e8f6b3ac49bc87a-fake-0", None),  # HAMi mode: its annotation
    ("hygon.com/dcu-share-4c-16g", "0000:03:00.0", None),  # a vDCU is vdev<n>
    ("nvidia.com/gpu", "", None),
    ("nvidia.com/gpu.sliced", "not-a-gpu", None),
    ("nvidia.com/mig-1g.10gb", "not-a-gpu", None),
]


@pytest.mark.parametrize(("resource", "device_id", "expected"), CASES, ids=[c[1] for c in CASES])
def test_every_plugins_ids_name_their_card(
    resource: str, device_id: str, expected: PluginDevice | None
) -> None:
    assert device_of(resource, device_id, ALIASES) == expected


@settings(max_examples=300)
@given(st.text(max_size=80), st.text(max_size=300))
def test_any_resource_and_id_is_an_answer_never_an_exception(resource: str, device_id: str) -> None:
    device = device_of(resource, device_id, ALIASES)
    assert device is None or device.manufacturer in {
        "nvidia",
        "amd",
        "hygon",
        "metax",
        "ascend",
        "thead",
    }


def pod(uid: str, name: str, *, annotations: dict[str, str] | None = None, **status: object):  # type: ignore[no-untyped-def]
    return {
        "metadata": {
            "uid": uid,
            "name": name,
            "namespace": "ns",
            "annotations": annotations or {},
            **({"deletionTimestamp": "x"} if status.get("terminating") else {}),
        },
        "spec": {"containers": [{"name": "main"}]},
        "status": {
            "phase": status.get("phase", "Running"),
            "containerStatuses": [{"name": "main", "state": {"running": {}}}],
        },
    }


def devices(name: str, *ids: str, resource: str = "nvidia.com/gpu") -> PodDevices:
    return PodDevices("ns", name, (ContainerDevices("main", resource, ids),))


def test_pods_are_matched_by_name_and_a_recreated_one_is_not_guessed() -> None:
    index = PodIndex.of(
        [
            pod("u1", "a"),
            pod("u2", "b", phase="Succeeded"),  # the old one of a recreated pod
            pod("u3", "b"),
            pod("u4", "c"),
            pod("u5", "c"),  # two live pods of one name: which is meant cannot be told
        ]
    )
    matched = match_pods(
        [devices("a", G), devices("b", G), devices("c", G), devices("z", G)], index
    )
    assert set(matched) == {"u1", "u3"}


def gpustack(device: str, mode: int = 1) -> dict[str, str]:
    doc = {
        "main": {
            "devices": {
                "groups": [
                    {"manufacturer": "nvidia", "accelerators": [{"id": device, "mode": mode}]}
                ]
            }
        }
    }
    return {GPUSTACK_KEY: json.dumps(doc)}


def test_the_annotation_wins_and_a_disagreement_is_noted() -> None:
    """(R-X2) …unless it names a card the kubelet gave other pods and none of it to this one."""
    index = PodIndex.of(
        [
            pod("plain", "plain"),
            pod("agree", "agree", annotations=gpustack(G)),
            pod("differ", "differ", annotations=gpustack(G)),
            pod("elsewhere", "elsewhere", annotations=gpustack(G3)),
            pod("broken", "broken", annotations={GPUSTACK_KEY: "{"}),
        ]
    )
    answer = KubeletAnswer(
        pods=(
            devices("plain", f"{G}::1"),
            devices("agree", f"{G}::0"),  # GPUStack's plugin: the same card
            devices("differ", G2),
            devices("elsewhere", G2),
            devices("broken", G2),
        )
    )
    grants = node_grants(index, node_kubelet_grants(answer, index, {}))
    plain = grants.by_pod["plain"]
    assert [(g.device_id, g.mode, g.containers) for g in plain] == [(G, Mode.SHARED, ("main",))]
    assert [(g.device_id, g.mode) for g in grants.by_pod["agree"]] == [(G, Mode.EXCLUSIVE)]
    # A card nobody else holds: the annotation wins, the disagreement is noted.
    assert [(g.device_id, g.mode) for g in grants.by_pod["elsewhere"]] == [(G3, Mode.EXCLUSIVE)]
    # A card the kubelet gave other pods (`plain`, `agree`) and none of it to `differ`: refused
    # (issue 30), the disagreement noted all the same.
    assert "differ" not in grants.by_pod
    assert [g.device_id for g in grants.refused["differ"]] == [G]
    assert grants.refused_count() == {"held_by_another_pod": 1, "contested_partition": 0}
    assert set(grants.disagreements) == {"differ", "elsewhere"}
    assert G2 in str(grants.disagreements["differ"])
    # A malformed annotation still gives no grants: the kubelet cannot tell a slice from a card.
    assert "broken" not in grants.by_pod and "broken" in grants.errors


def test_two_names_of_one_card_are_no_disagreement() -> None:
    # The annotation names the card by an alias (here its PCI address, as some allocators
    # record it), the plugin by its UUID: one card, nothing to log once both are canonical.
    from devicemanager.model import Identities

    alias = "0000:1b:00.0"
    index = PodIndex.of([pod("same", "same", annotations=gpustack(alias))])
    answer = KubeletAnswer(pods=(devices("same", G),))
    recorded = node_grants(index, node_kubelet_grants(answer, index, {}))
    assert set(recorded.disagreements) == {"same"}  # as recorded, the names differ
    identities = Identities().updated("nvidia", [Card(G, 0, aliases=(alias,))])
    resolved = recorded.resolve(identities)
    assert dict(resolved.disagreements) == {}
    assert [g.device_id for g in resolved.by_pod["same"]] == [G]
    # A real difference stays one after resolving.
    other = Identities().updated("nvidia", [Card(G2, 1, aliases=(alias,)), Card(G, 0)])
    assert set(recorded.resolve(other).disagreements) == {"same"}


def test_a_pod_without_an_instance_is_its_own_instance() -> None:
    from devicemanager.figures.figures import View, exported

    index = PodIndex.of([pod("plain", "plain")])
    answer = KubeletAnswer(pods=(devices("plain", G),))
    grants = node_grants(index, node_kubelet_grants(answer, index, {}))
    (item,) = exported(index, grants, View(), ["nvidia"])
    assert (item.instance.namespace, item.instance.name, item.instance.uid) == (
        "ns",
        "plain",
        "plain",
    )


def test_aliases_come_from_what_the_library_enumerated() -> None:
    reading = VendorReading(
        "nvidia",
        cards=(Card(G, 0, aliases=("0000:1b:00.0",)), Card(G2, 1)),
        partitions=(PartitionReading(M, G), PartitionReading("MIG-lost", "")),
    )
    assert aliases_of([reading]) == {
        ("nvidia", "0"): G,  # the index strategy's ids
        ("nvidia", "1"): G2,
        ("nvidia", G): G,
        ("nvidia", G2): G2,
        ("nvidia", "0000:1b:00.0"): G,  # an alias the backend reports (a PCI bus id)
        ("nvidia", M): G,  # a partition names its parent
    }


def test_a_card_the_kubelet_allocates_and_the_library_lost_is_unhealthy() -> None:
    answer = KubeletAnswer(
        pods=(),
        allocatable=(
            ContainerDevices("", "nvidia.com/gpu", (G, f"{G2}::0", f"{G2}::1")),
            ContainerDevices("", "nvidia.com/mig-1g.10gb", (M,)),
            ContainerDevices("", "amd.com/gpu", ("0000:c1:00.0",)),
        ),
    )
    cards = allocatable_cards(answer, "nvidia", {("nvidia", M): G})
    assert cards == frozenset({G, G2})
    reading = VendorReading("nvidia", cards=(Card(G, 0),))
    known = {G2: Card(G2, 5, name="NVIDIA H100 80GB HBM3", memory_total_mib=81559)}
    (lost,) = missing_cards(reading, cards, known)
    assert (lost.id, lost.index, lost.name, lost.unhealthy) == (
        G2,
        5,
        "NVIDIA H100 80GB HBM3",
        True,
    )
    assert lost.unhealthy_reason == NOT_ENUMERATED and lost.memory_used_mib is None
    # Never seen: named by the kubelet's id, index unknown.
    (unknown,) = missing_cards(reading, cards, {})
    assert (unknown.id, unknown.index) == (G2, -1)
    # A kubelet that did not answer GetAllocatableResources says nothing is missing.
    assert missing_cards(reading, allocatable_cards(KubeletAnswer(pods=()), "nvidia", {}), {}) == ()


# -- the device-plugin-only scenario ----------------------------------------------------------


def test_the_plain_device_plugin_node_shows_what_its_expected_list_says() -> None:
    root = NODES / "a100-device-plugin-only"
    expected = json.loads((root / "expected.json").read_text())
    monitor = scenario_monitor("a100-device-plugin-only")
    published = monitor.run_round()
    monitor.stop()
    text = published.metrics.plain.decode()
    found: dict[tuple[str, str, str, str, str], dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.startswith("gpustack_instance_accelerator_"):
                key = (
                    s.labels["namespace"],
                    s.labels["instance_name"],
                    s.labels["id"],
                    s.labels["index"],
                    s.labels["mode"],
                )
                found.setdefault(key, {})[s.name.removeprefix("gpustack_instance_accelerator_")] = (
                    s.value
                )
    want = {}
    for e in expected["entries"]:
        key = (e["namespace"], e["instance"], e["id"], e["index"], e["mode"])
        want[key] = {
            k: v
            for k, v in (
                ("memory_total_mib", e["memory_total_mib"]),
                ("memory_used_mib", e["memory_used_mib"]),
                ("unhealthy", e["unhealthy"]),
            )
            if v is not None
        }
    assert set(found) == set(want)
    for key, figures in want.items():
        for name, value in figures.items():
            assert found[key][name] == value, (key, name)
        if "memory_used_mib" not in figures:  # the lost card: absent, never a zero
            assert "memory_used_mib" not in found[key] and "memory_total_mib" not in found[key]
    doc = json.loads(published.snapshot_json)
    reasons = {
        c["id"]: c["unhealthyReason"]
        for g in doc["groups"]
        for c in g["accelerators"]
        if c["unhealthy"]
    }
    assert reasons == expected["cards_unhealthy"]


def test_a_disagreement_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    from devicemanager.agent.monitor import Monitor

    index = PodIndex.of([pod("differ", "differ", annotations=gpustack(G))])
    answer = KubeletAnswer(pods=(devices("differ", G2),))
    monitor = Monitor(
        [], period=15, deadline=1, liveness_timeout=60, node="n",
        pods=lambda: index, podresources=lambda: answer,
    )  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="devicemanager.monitor"):
        for _ in range(3):
            monitor.run_round()
    lines = [r for r in caplog.records if "annotation is used" in r.getMessage()]
    assert len(lines) == 1 and "ns/differ" in lines[0].getMessage()


def test_other_manufacturers_ids_name_their_card_through_the_aliases_backends_report() -> None:
    """The aliases come from the readings, in the forms the amd, ascend and hygon backends give
    their cards and partitions; the device plugins' ids then name the library's own ids."""
    readings = [
        VendorReading(
            "amd", cards=(Card(AMD, 0, aliases=("GPU-64a005641911cdf8", "0000:05:00.0")),)
        ),
        VendorReading(
            "ascend",
            cards=(
                Card(
                    ASCEND,
                    0,
                    aliases=("E0F4EE64-0140C979-6A691492-89528485-2A0301E3", "Ascend910-3"),
                ),
            ),
        ),
        VendorReading(
            "hygon",
            cards=(Card(HYGON, 0, aliases=("DCU-0", "HCU-HCU0000K1A", "0000:03:00.0")),),
            partitions=(PartitionReading("vDCU-2", HYGON, aliases=("vdev2",)),),
        ),
    ]
    aliases = aliases_of(readings)
    assert device_of("amd.com/gpu", "0000:05:00.0", aliases) == PluginDevice(
        "amd", AMD, Mode.EXCLUSIVE
    )
    assert device_of("huawei.com/Ascend910", "Ascend910-3", aliases) == PluginDevice(
        "ascend", ASCEND, Mode.EXCLUSIVE
    )
    assert device_of("huawei.com/npu", "npu-3", aliases) == PluginDevice(
        "ascend", ASCEND, Mode.EXCLUSIVE
    )
    assert device_of("hygon.com/hcu", "0000:03:00.0", aliases) == PluginDevice(
        "hygon", HYGON, Mode.EXCLUSIVE
    )
    assert device_of("hygon.com/hcu-share-4c-16g", "vdev2", aliases) == PluginDevice(
        "hygon", HYGON, Mode.PARTITIONED, "vdev2", "4c-16g"
    )
    # What a manufacturer reports names only its own cards: the AMD bus id is no Hygon card.
    assert device_of("hygon.com/dcu", "0000:05:00.0", aliases) == PluginDevice(
        "hygon", "0000:05:00.0", Mode.EXCLUSIVE
    )


class LosingBackend:
    """Two NVIDIA cards in the first read; the second read lists only card 0, as NVML does
    once a card has fallen off the bus."""

    manufacturer = "nvidia"

    def __init__(self) -> None:
        self.reads = 0

    def open(self) -> None:
        """Nothing to open."""

    def read(self, request: object) -> dict[str, int]:
        self.reads += 1
        return {"read": self.reads}

    def parse(self, payload: dict[str, int]) -> VendorReading:
        cards = [Card(G, 0, name="NVIDIA H100 80GB HBM3", memory_total_mib=81559)]
        if payload["read"] == 1:
            cards.append(Card(G2, 5, name="NVIDIA H100 80GB HBM3", memory_total_mib=81559))
        return VendorReading("nvidia", cards=tuple(cards))

    def close(self) -> None:
        """Nothing to close."""


def test_a_card_lost_mid_run_is_reported_unhealthy_with_its_old_index() -> None:
    from devicemanager.agent.monitor import BackendWorker, Monitor

    # The kubelet still offers both cards: its device plugin has not noticed the loss.
    answer = KubeletAnswer(pods=(), allocatable=(ContainerDevices("", "nvidia.com/gpu", (G, G2)),))
    monitor = Monitor(
        [BackendWorker(LosingBackend())],  # type: ignore[arg-type]
        period=15, deadline=2, liveness_timeout=60, node="n",
        pods=lambda: PodIndex.of([]), podresources=lambda: answer,
    )  # fmt: skip

    def cards(published: object) -> dict[str, tuple[int, bool, str | None, str | None]]:
        doc = json.loads(published.snapshot_json)  # type: ignore[attr-defined]
        return {
            c["id"]: (c["index"], c["unhealthy"], c.get("unhealthyReason"), c.get("name"))
            for g in doc["groups"]
            for c in g["accelerators"]
        }

    def unhealthy(published: object) -> dict[tuple[str, str], float]:
        text = published.metrics.plain.decode()  # type: ignore[attr-defined]
        return {
            (s.labels["id"], s.labels["index"]): s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if s.name == "gpustack_accelerator_unhealthy"
        }

    try:
        first = monitor.run_round()
        second = monitor.run_round()
    finally:
        monitor.stop()
    h100 = "NVIDIA H100 80GB HBM3"
    assert cards(first) == {G: (0, False, None, h100), G2: (5, False, None, h100)}
    assert cards(second) == {G: (0, False, None, h100), G2: (5, True, NOT_ENUMERATED, h100)}
    assert unhealthy(first) == {(G, "0"): 0.0, (G2, "5"): 0.0}
    assert unhealthy(second) == {(G, "0"): 0.0, (G2, "5"): 1.0}
