"""The node's DRA inventory from the API server (R-X6): ResourceSlices of every served version
parsed as the public drivers publish them, the slices of this node and those that reach it
kept current by list-then-watch against the fake API server, claims read with a bounded,
cached get, and a cluster without the resource.k8s.io API holding no DRA grants, said once."""

from __future__ import annotations

import copy
import json
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from devicemanager.grants import dra
from devicemanager.grants.allocations import Mode
from devicemanager.kube.client import KubeClient, config_from
from devicemanager.kube.dra import (
    MALFORMED,
    MAX_DEVICES_PER_SLICE,
    MAX_SLICE_BYTES,
    TOO_LARGE,
    TOO_MANY_DEVICES,
    TOO_MANY_SLICES,
    DraSource,
    RecordedDra,
    RefusedSlice,
    SliceEntry,
    current_devices,
    parse_claim,
    parse_rule,
    parse_slice,
)
from tests.conftest import FIXTURES
from tests.kube_server import FakeApiServer

DRA = FIXTURES / "dra"
NODE = "gpu-h100-07"
UUID0 = "GPU-064ced55-7d73-6035-047e-86b5e5288ac1"
UUID3 = "GPU-da0a3442-34af-5b36-ecd5-4257d0eb2ac9"
MIG_PARENT = "GPU-641877a3-0fe7-f856-fc93-30f42be9ea97"
ALIASES = {
    ("nvidia", u): u
    for u in (
        UUID0,
        "GPU-adbc90e4-ad9a-343a-5f8d-311a3894e66a",
        "GPU-9ddb99ae-a4e5-0573-4236-0fdb4497e6d8",
        UUID3,
        MIG_PARENT,
    )
}


def items(name: str) -> list[dict[str, Any]]:
    doc: dict[str, Any] = json.loads((DRA / name).read_text())
    return list(doc["items"])


def nvidia_slice() -> dict[str, Any]:
    return items("nvidia-h100-slice-v1.json")[0]


# -- parsing the drivers' slices (R-X6) -----------------------------------------------------------


def test_a_v1_nvidia_slice_gives_each_device_its_bare_attributes_capacity_and_taints() -> None:
    entry = parse_slice(nvidia_slice(), NODE)
    assert isinstance(entry, SliceEntry) and (entry.driver, entry.pool, entry.generation) == (
        "gpu.nvidia.com",
        NODE,
        3,
    )
    by_name = {d.name: d for d in entry.devices}
    gpu0 = by_name["gpu-0"]
    assert gpu0.attributes["uuid"] == UUID0 and gpu0.attributes["type"] == "gpu"
    # the standard domain is dropped, as the driver's own is; a version is its text
    assert gpu0.attributes["pciBusID"] == "0000:18:00.0"
    assert gpu0.attributes["driverVersion"] == "550.54.15"
    assert gpu0.capacity["memory"] == 81559 * 2**20
    assert by_name["gpu-3"].taints == (dra.DeviceTaint("gpu.nvidia.com/xid", "79", "NoSchedule"),)
    mig = by_name["gpu-4-mig-1g10gb-0-0"]
    assert dra.resolve(mig, ALIASES) == dra.Resolved(
        "nvidia", MIG_PARENT, "MIG-b167ea09-62c5-25ea-14a4-00a849298dce", "1g.10gb"
    )


def test_a_v1beta1_slice_keeps_its_fields_under_basic() -> None:
    (obj,) = items("amd-mi300x-slice-v1beta1.json")
    entry = parse_slice(obj, "mi300x-02")
    assert isinstance(entry, SliceEntry)
    whole, part = entry.devices
    assert whole.attributes["pciBusID"] == "0000:29:00.0" and whole.attributes["numaNode"] == 0
    assert whole.capacity == {"memory": 192 * 2**30, "computeUnits": 304}
    aliases = {("amd", "0000:29:00.0"): "amd-card-1", ("amd", "0000:39:00.0"): "amd-card-2"}
    assert dra.resolve(whole, aliases) == dra.Resolved("amd", "amd-card-1")
    # a partition named only by its parent's bus id (which all its siblings share) is not
    # guessed at: unmatched, so counted
    assert dra.resolve(part, aliases) is None


def test_another_domains_attribute_never_passes_for_one_the_agent_reads() -> None:
    obj = nvidia_slice()
    obj["spec"]["devices"] = [
        {"name": "x", "attributes": {"example.com/uuid": {"string": UUID0}}},
    ]
    entry = parse_slice(obj, NODE)
    assert isinstance(entry, SliceEntry)
    assert dict(entry.devices[0].attributes) == {"example.com/uuid": UUID0}
    assert dra.resolve(entry.devices[0], ALIASES) is None


def test_which_slices_reach_this_node() -> None:
    base = nvidia_slice()

    def spec(**where: Any) -> dict[str, Any]:
        obj = copy.deepcopy(base)
        obj["spec"].pop("nodeName")
        obj["spec"].update(where)
        return obj

    assert parse_slice(base, "another-node") is None
    assert isinstance(parse_slice(spec(allNodes=True), NODE), SliceEntry)
    named = {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": [NODE]}]}]}  # fmt: skip
    assert isinstance(parse_slice(spec(nodeSelector=named), NODE), SliceEntry)
    assert parse_slice(spec(nodeSelector=named), "another-node") is None
    by_label = {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "pool", "operator": "In", "values": ["a"]}]}]}  # fmt: skip
    assert parse_slice(spec(nodeSelector=by_label), NODE) is None  # labels are not read
    per_device = spec(perDeviceNodeSelection=True)
    per_device["spec"]["devices"][0]["nodeName"] = NODE
    per_device["spec"]["devices"][1]["allNodes"] = True
    entry = parse_slice(per_device, NODE)
    assert isinstance(entry, SliceEntry) and [d.name for d in entry.devices] == ["gpu-0", "gpu-1"]


def test_only_a_pools_newest_generation_counts() -> None:
    old = SliceEntry("d", "p", 1, (dra.DraDevice("d", "p", "gpu-0"),))
    new = SliceEntry("d", "p", 2, (dra.DraDevice("d", "p", "gpu-0"),))
    other = SliceEntry("d", "q", 1, (dra.DraDevice("d", "q", "gpu-0"),))
    devices = current_devices([old, new, other])
    inventory = dra.inventory_of(devices)
    assert len(devices) == 2 and not inventory.duplicates


@pytest.mark.parametrize(
    "junk", [None, [], {"spec": {"driver": 7}}, {"spec": {"driver": "d", "pool": "p"}}]
)
def test_an_object_that_is_not_a_slice_of_this_node_is_no_slice(junk: Any) -> None:
    assert parse_slice(junk, NODE) is None


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"devices": "not-a-list"}, MALFORMED),
        ({"devices": {"gpu-0": {}}}, MALFORMED),
        ({"devices": [{"name": "gpu-0"}, "gpu-1"]}, MALFORMED),
        ({"devices": [{"name": "gpu-0"}, {"attributes": {}}]}, MALFORMED),
        ({"devices": [{"name": "x" * 254}]}, MALFORMED),
        ({"driver": 7}, MALFORMED),
        ({"pool": {"name": NODE, "generation": "4"}}, MALFORMED),
        ({"pool": {"name": NODE, "generation": -1}}, MALFORMED),
        ({"devices": [{"name": f"gpu-{i}"} for i in range(129)]}, TOO_MANY_DEVICES),
    ],
)
def test_a_slice_of_this_node_the_api_server_would_never_store_is_refused_saying_why(
    change: dict[str, Any], reason: str
) -> None:
    obj = nvidia_slice()
    obj["spec"].update(change)
    refused = parse_slice(obj, NODE)
    assert isinstance(refused, RefusedSlice) and refused.reason == reason
    assert isinstance(parse_slice({"spec": []}, NODE), RefusedSlice)
    # at the bound it is a slice: Kubernetes' own limit is 128 devices
    obj = nvidia_slice()
    obj["spec"]["devices"] = [{"name": f"gpu-{i}"} for i in range(MAX_DEVICES_PER_SLICE)]
    obj["spec"]["pool"] = {"name": NODE, "generation": 4}
    entry = parse_slice(obj, NODE)
    assert isinstance(entry, SliceEntry) and len(entry.devices) == MAX_DEVICES_PER_SLICE


def test_a_claims_status_says_admin_access_the_share_and_who_holds_it() -> None:
    claims = {(c.namespace, c.name): c for c in map(parse_claim, items("claims.json")) if c}
    share = claims[("team-c", "share-20g")].results[0]
    assert share.share_id == "8e7acdf9-0290-4ecd-a801-a654b021d2b7"
    assert share.consumed_capacity == {"memory": 20 * 2**30}
    assert claims[("monitoring", "all-gpus")].results[0].admin_access is True
    assert claims[("team-b", "shared-gpu")].reserved_for == ("pod-web-0", "pod-web-1")


# -- against the API server (R-X6) ----------------------------------------------------------------


@pytest.fixture
def api(tmp_path: Path) -> Iterator[FakeApiServer]:
    server = FakeApiServer(tmp_path).start()
    yield server
    server.stop()


def client_of(api: FakeApiServer, tmp_path: Path) -> KubeClient:
    config = config_from(api.kubeconfig(tmp_path / "kubeconfig"), tmp_path / "none")
    assert config is not None
    client = KubeClient(config)
    api.closers.append(client.close)
    return client


def until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.02)
    raise AssertionError("never happened")


def claim_of(uid: str, *claims: tuple[str, str, str]) -> list[dra.ContainerClaim]:
    return [
        dra.ContainerClaim("main", ns, name, (dra.ClaimDevice("gpu.nvidia.com", NODE, device),))
        for ns, name, device in claims
    ]


def test_the_source_watches_this_nodes_slices_and_those_for_every_node(
    api: FakeApiServer, tmp_path: Path
) -> None:
    api.put_slice(nvidia_slice())
    other = nvidia_slice()
    other["metadata"]["name"] = "another-node-slice"
    other["spec"]["nodeName"] = "another-node"
    other["spec"]["pool"]["name"] = "another-node"
    api.put_slice(other)
    network = nvidia_slice()
    network["metadata"]["name"] = "fabric"
    network["spec"].pop("nodeName")
    network["spec"].update(allNodes=True, pool={"name": "fabric", "generation": 1})
    network["spec"]["devices"] = [{"name": "nic-0", "attributes": {}}]
    api.put_slice(network)
    source = DraSource(client_of(api, tmp_path), NODE, backoff=(0.05, 0.2))
    source.start()
    try:
        until(lambda: all(r.synced for r in source.reflectors))
        inventory = source(frozenset())
        assert inventory is not None and inventory.error is None
        pools = {key[1] for key in inventory.devices}
        assert pools == {NODE, "fabric"}  # never another node's
        assert len(inventory.devices) == 6
        # the driver taints a device: the watch carries it
        tainted = nvidia_slice()
        tainted["spec"]["devices"][0]["taints"] = [
            {"key": "gpu.nvidia.com/gpu-lost", "effect": "NoSchedule"}
        ]
        api.put_slice(tainted, "MODIFIED")

        def lost() -> bool:
            inv = source(frozenset())
            return inv is not None and bool(inv.devices[("gpu.nvidia.com", NODE, "gpu-0")].taints)

        until(lost)
        inv = source(frozenset())
        assert inv is not None
        assert dra.tainted(inv, ALIASES)[("nvidia", UUID0)] == "gpu.nvidia.com/gpu-lost"
        selectors = {q.get("fieldSelector", [""])[0] for k, q in api.requests if k == "slices"}
        assert selectors == {f"spec.nodeName={NODE}", "spec.nodeName="}
    finally:
        source.stop()
        api.cut()


def test_claims_are_read_once_cached_and_say_how_each_device_is_held(
    api: FakeApiServer, tmp_path: Path
) -> None:
    api.put_slice(nvidia_slice())
    for obj in items("claims.json"):
        api.claims[(obj["metadata"]["namespace"], obj["metadata"]["name"])] = obj
    source = DraSource(client_of(api, tmp_path), NODE, backoff=(0.05, 0.2), claim_wait=5.0)
    source.start()
    try:
        until(lambda: all(r.synced for r in source.reflectors))
        refs = frozenset(
            {("team-a", "train-gpu-x2bq"), ("monitoring", "all-gpus"), ("team-x", "gone")}
        )
        inventory = source(refs)
        assert inventory is not None
        assert inventory.missing_claims == {("team-x", "gone")} and not inventory.pending_claims
        train = dra.pod_allocations(
            claim_of("pod-train-0", ("team-a", "train-gpu-x2bq", "gpu-0")),
            inventory,
            ALIASES,
            "pod-train-0",
        )
        assert [(a.device_id, a.mode) for a in train.allocations] == [(UUID0, Mode.EXCLUSIVE)]
        monitor = dra.pod_allocations(
            claim_of("pod-dcgm-0", ("monitoring", "all-gpus", "gpu-0")),
            inventory,
            ALIASES,
            "pod-dcgm-0",
        )
        assert monitor == dra.PodClaims()  # admin access: no grant, nothing unresolved
        gets = source.claims.gets
        source(refs)
        assert source.claims.gets == gets  # cached: no GET per round
    finally:
        source.stop()
        api.cut()


def test_a_claim_the_api_server_is_slow_to_give_is_pending_never_guessed(
    api: FakeApiServer, tmp_path: Path
) -> None:
    api.put_slice(nvidia_slice())
    obj = items("claims.json")[3]  # admin access: guessing "exclusive" would be a lie
    api.claims[("monitoring", "all-gpus")] = obj
    api.delays["claim"] = 1.0
    source = DraSource(client_of(api, tmp_path), NODE, backoff=(0.05, 0.2), claim_wait=0.05)
    source.start()
    try:
        until(lambda: all(r.synced for r in source.reflectors))
        refs = frozenset({("monitoring", "all-gpus")})
        inventory = source(refs)
        assert inventory is not None and inventory.pending_claims == refs
        held = dra.pod_allocations(
            claim_of("pod-dcgm-0", ("monitoring", "all-gpus", "gpu-0")), inventory, ALIASES
        )
        assert held.allocations == () and [u.reason for u in held.unresolved] == [dra.NO_CLAIM]

        def read() -> bool:
            inv = source(refs)
            return inv is not None and not inv.pending_claims

        until(read)
    finally:
        source.stop()
        api.cut()


def test_a_cluster_without_the_dra_api_has_no_dra_said_once(
    api: FakeApiServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    api.dra_versions = []
    caplog.set_level(logging.INFO, "devicemanager.kube.dra")
    source = DraSource(client_of(api, tmp_path), NODE, backoff=(0.05, 0.2), absent_retry=30)
    source.start()
    try:
        until(lambda: all(r.absent for r in source.reflectors))
        assert source(frozenset({("a", "b")})) is None
        said = [r for r in caplog.records if "serves no resource.k8s.io" in r.getMessage()]
        assert len(said) == 1
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    finally:
        source.stop()


def test_only_an_older_version_served_is_read_in_its_own_layout(
    api: FakeApiServer, tmp_path: Path
) -> None:
    api.dra_versions = ["v1beta1"]
    (amd,) = items("amd-mi300x-slice-v1beta1.json")
    amd["spec"]["nodeName"] = NODE
    api.put_slice(amd)
    source = DraSource(client_of(api, tmp_path), NODE, backoff=(0.05, 0.2))
    source.start()
    try:
        until(lambda: all(r.synced for r in source.reflectors))
        inventory = source(frozenset())
        assert inventory is not None
        assert set(inventory.devices) == {
            ("gpu.amd.com", "mi300x-02", "gpu-1-129"),
            ("gpu.amd.com", "mi300x-02", "gpu-2-130"),
        }
        # (the fake server answers 404 on a version it does not serve: these came from v1beta1)
    finally:
        source.stop()
        api.cut()


def test_slices_that_cannot_be_read_are_an_error_for_the_claims_only(
    api: FakeApiServer, tmp_path: Path
) -> None:
    api.failures["slices"] = [403] * 1000
    source = DraSource(client_of(api, tmp_path), NODE, backoff=(0.05, 0.1))
    source.start()
    try:
        until(lambda: any(r.last_error for r in source.reflectors))
        inventory = source(frozenset())
        assert inventory is not None and inventory.error is not None and "403" in inventory.error
        held = dra.pod_allocations(claim_of("p", ("ns", "c", "gpu-0")), inventory, ALIASES, "p")
        assert [u.reason for u in held.unresolved] == [dra.NO_INVENTORY]
    finally:
        source.stop()
        api.cut()


def test_replay_reads_recorded_slices_through_the_same_parsers() -> None:
    source = RecordedDra(NODE, DRA / "nvidia-h100-slice-v1.json", DRA / "claims.json")
    refs = frozenset({("team-c", "share-20g"), ("team-z", "not-recorded")})
    inventory = source(refs)
    assert inventory is not None and len(inventory.devices) == 5
    assert inventory.missing_claims == {("team-z", "not-recorded")}
    share = dra.ContainerClaim(
        "main",
        "team-c",
        "share-20g",
        (dra.ClaimDevice("gpu.nvidia.com", NODE, "gpu-2", "8e7acdf9-0290-4ecd-a801-a654b021d2b7"),),
    )
    (held,) = dra.pod_allocations([share], inventory, ALIASES, "pod-infer-0").allocations
    assert held.mode is Mode.SLICED and held.memory_mib == 20 * 1024


# -- the kubelet's word on device health (KEP-4680; R-X6) ----------------------------------------


def test_the_kubelets_allocated_resources_status_marks_the_card_it_names() -> None:
    from devicemanager.node.pods import pod_info

    pod = {
        "metadata": {"uid": "u1", "namespace": "team-a", "name": "train-0"},
        "spec": {"containers": [{"name": "main"}]},
        "status": {
            "containerStatuses": [
                {
                    "name": "main",
                    "allocatedResourcesStatus": [
                        {
                            "name": "claim:train-gpu-x2bq/gpu",
                            "resources": [
                                {
                                    "resourceID": f"gpu.nvidia.com/{NODE}/gpu-0",
                                    "health": "Unhealthy",
                                    "message": "XID 79: fallen off the bus",
                                },
                                {"resourceID": f"gpu.nvidia.com/{NODE}/gpu-1", "health": "Healthy"},
                            ],
                        },
                        {
                            "name": "nvidia.com/gpu",
                            "resources": [{"resourceID": UUID3, "health": "Unknown"}],
                        },
                        {"name": "junk", "resources": [{"resourceID": 7}, "x", None]},
                    ],
                }
            ]
        },
    }
    info = pod_info(pod)
    assert info is not None
    assert info.device_health == (
        (f"gpu.nvidia.com/{NODE}/gpu-0", "Unhealthy", "XID 79: fallen off the bus"),
        (UUID3, "Unknown", None),
    )
    entry = parse_slice(nvidia_slice(), NODE)
    assert isinstance(entry, SliceEntry)
    inventory = dra.inventory_of(entry.devices)
    # R-X11: the message rides in the reason; Unknown is said, not a reason
    assert dra.kubelet_health(info.device_health, inventory, ALIASES) == {
        ("nvidia", UUID0): dra.KubeletSays("kubelet:Unhealthy:XID 79: fallen off the bus"),
        ("nvidia", UUID3): dra.KubeletSays(None, True),
    }
    # an id that names no card the libraries enumerate is not placed
    assert dra.kubelet_health([("GPU-nope", "Unhealthy", None)], inventory, ALIASES) == {}


# -- a node whose GPUs are all granted through DRA (R-X6) ----------------------------------------


def test_the_dra_only_node_shows_what_its_expected_list_says() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from tests.conftest import NODES, scenario_monitor

    expected = json.loads((NODES / "a100-dra-only" / "expected.json").read_text())
    monitor = scenario_monitor("a100-dra-only")
    published = monitor.run_round()
    monitor.stop()
    found: dict[tuple[str, ...], dict[str, float]] = {}
    unresolved: dict[str, float] = {}
    success: dict[str, float] = {}
    for family in text_string_to_metric_families(published.metrics.plain.decode()):
        for s in family.samples:
            if s.name.startswith("gpustack_instance_accelerator_"):
                key = tuple(
                    s.labels[k] for k in ("namespace", "instance_name", "id", "index", "mode")
                )
                name = s.name.removeprefix("gpustack_instance_accelerator_")
                found.setdefault(key, {})[name] = s.value
            elif s.name == "gpustack_accelerator_dra_unresolved_devices":
                unresolved[s.labels["reason"]] = s.value
            elif s.name == "gpustack_instance_metrics_collector_success":
                success[s.labels["source"]] = s.value
    want = {
        (e["namespace"], e["instance"], e["id"], e["index"], e["mode"]): e
        for e in expected["entries"]
    }
    assert set(found) == set(want)  # the admin-access pod and the FPGA hold nothing
    for key, e in want.items():
        for name in ("memory_total_mib", "memory_used_mib", "unhealthy"):
            if e[name] is None:
                assert name not in found[key], (key, name)  # absent, never a zero
            else:
                assert found[key][name] == e[name], (key, name)
    assert unresolved == expected["dra_unresolved"]
    assert success["dra"] == 1.0
    doc = json.loads(published.snapshot_json)
    reasons = {
        c["id"]: c["unhealthyReason"]
        for g in doc["groups"]
        for c in g["accelerators"]
        if c["unhealthy"]
    }
    assert reasons == expected["cards_unhealthy"]
    # R-X11: every taint is published with its effect, the None ones (card 2's XID 43, card 5's
    # dry-run rule) on healthy cards; the kubelet's Unknown is said, its Unhealthy is a reason.
    taints = {
        c["id"]: [[t["key"], t["value"], t["effect"]] for t in c["deviceTaints"]]
        for g in doc["groups"]
        for c in g["accelerators"]
        if "deviceTaints" in c
    }
    assert taints == expected["device_taints"]
    kubelet = {
        c["id"]: c["kubeletHealth"]
        for g in doc["groups"]
        for c in g["accelerators"]
        if "kubeletHealth" in c
    }
    assert kubelet == expected["kubelet_health"]
    info = {
        (s.labels["id"], s.labels["key"], s.labels["value"], s.labels["effect"])
        for family in text_string_to_metric_families(published.metrics.plain.decode())
        for s in family.samples
        if s.name == "gpustack_accelerator_device_taint_info" and s.value == 1.0
    }
    assert info == {(c, *t) for c, ts in expected["device_taints"].items() for t in ts}


def test_a_claim_deleted_while_its_pod_runs_keeps_the_status_last_read(
    api: FakeApiServer, tmp_path: Path
) -> None:
    api.put_slice(nvidia_slice())
    obj = items("claims.json")[3]  # admin access
    api.claims[("monitoring", "all-gpus")] = obj
    source = DraSource(
        client_of(api, tmp_path), NODE, backoff=(0.05, 0.2), claim_wait=5.0, claim_max_age=0.0
    )
    source.start()
    try:
        until(lambda: all(r.synced for r in source.reflectors))
        refs = frozenset({("monitoring", "all-gpus")})
        first = source(refs)
        assert first is not None and [c.name for c in first.claims.values()] == ["all-gpus"]
        del api.claims[("monitoring", "all-gpus")]  # deleted; its pod still runs
        gets = source.claims.gets
        until(lambda: source(refs) is not None and source.claims.gets > gets + 1)
        later = source(refs)
        assert later is not None and not later.missing_claims
        held = dra.pod_allocations(
            claim_of("pod-dcgm-0", ("monitoring", "all-gpus", "gpu-0")), later, ALIASES
        )
        assert held == dra.PodClaims()  # still admin access: still no grant
    finally:
        source.stop()
        api.cut()


# -- what a malformed or oversized slice costs (issue 44, item 3) -------------------------------


def gpu0_held(inventory: dra.DraInventory | None) -> list[tuple[str, Mode]]:
    held = dra.pod_allocations(
        claim_of("pod-train-0", ("team-a", "train-gpu-x2bq", "gpu-0")),
        inventory,
        ALIASES,
        "pod-train-0",
    )
    return [(a.device_id, a.mode) for a in held.allocations]


def newer_generation(name: str, devices: Any) -> dict[str, Any]:
    """A slice of the node's own pool, one generation newer than the fixture's."""
    obj = nvidia_slice()
    obj["metadata"]["name"] = name
    obj["spec"]["pool"] = {"name": NODE, "generation": 4, "resourceSliceCount": 1}
    obj["spec"]["devices"] = devices
    return obj


def test_a_malformed_newer_slice_never_erases_the_pools_devices(
    api: FakeApiServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A slice of the node's own pool with a newer generation whose `devices` is not a list
    used to make the pool's newest generation an empty one: every DRA pod lost every series,
    while `collector_success{source="dra"}` stayed 1 and nothing was counted. Kubernetes'
    own informers never admit an object that does not decode (the scheduler keeps the last
    one that did): the agent skips it, counts it, says so, and keeps the pool's devices."""
    caplog.set_level(logging.WARNING, "devicemanager.kube.dra")
    api.put_slice(nvidia_slice())
    api.put_slice(newer_generation("listed-bad", "not-a-list"))  # there at the first list
    source = DraSource(client_of(api, tmp_path), NODE, backoff=(0.05, 0.2), claim_wait=5.0)
    api.claims[("team-a", "train-gpu-x2bq")] = items("claims.json")[0]
    source.start()
    try:
        until(lambda: all(r.synced for r in source.reflectors))
        own = source.reflectors[0]
        refs = frozenset({("team-a", "train-gpu-x2bq")})
        inventory = source(refs)
        assert inventory is not None and inventory.error is None
        assert len(inventory.devices) == 5
        assert gpu0_held(inventory) == [(UUID0, Mode.EXCLUSIVE)]
        assert own.refused == {MALFORMED: 1} and own.malformed == 1
        # one arriving by the watch, of every malformed shape, is skipped the same way
        api.put_slice(newer_generation("watched-bad", [{"name": "gpu-0"}, "gpu-1"]))
        # and the node's valid slice turning malformed keeps its last valid version
        broken = nvidia_slice()
        broken["spec"]["pool"]["generation"] = 5
        broken["spec"]["devices"] = {"gpu-0": {}}
        api.put_slice(broken, "MODIFIED")
        until(lambda: own.malformed == 3)
        inventory = source(refs)
        assert inventory is not None and len(inventory.devices) == 5
        assert gpu0_held(inventory) == [(UUID0, Mode.EXCLUSIVE)]
        said = [r for r in caplog.records if "resource slice was refused" in r.getMessage()]
        assert [getattr(r, "slice", None) for r in said] == [
            "listed-bad",
            "watched-bad",
            nvidia_slice()["metadata"]["name"],
        ]
        assert all(getattr(r, "reason", None) == MALFORMED for r in said)
        # a valid newer generation is the pool's, as before
        api.put_slice(newer_generation("watched-bad", [{"name": "gpu-9"}]), "MODIFIED")
        until(
            lambda: (
                ("gpu.nvidia.com", NODE, "gpu-9") in (source(refs) or dra.DraInventory()).devices
            )
        )
        inventory = source(refs)
        assert inventory is not None and set(inventory.devices) == {
            ("gpu.nvidia.com", NODE, "gpu-9")
        }
    finally:
        source.stop()
        api.cut()


def test_a_slice_past_its_bounds_is_refused_and_counted_never_decoded(
    api: FakeApiServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A slice of 100,000 devices took the agent to 287 MiB. Now a slice's JSON past 2 MiB is
    refused by its length, in a list page or a watch line, before it is decoded; one under it
    with more than Kubernetes' 128 devices is refused by its count; slices past 256 per watch
    are refused too. Each is counted and logged; the pool's valid devices stay."""
    caplog.set_level(logging.WARNING, "devicemanager.kube.dra")
    device = {"name": "gpu-0", "attributes": {"uuid": {"string": UUID0}}}
    huge = newer_generation(
        "huge", [{**device, "name": f"gpu-{i}"} for i in range(MAX_SLICE_BYTES // 60)]
    )
    assert len(json.dumps(huge)) > MAX_SLICE_BYTES
    api.put_slice(nvidia_slice())
    api.put_slice(huge)
    source = DraSource(client_of(api, tmp_path), NODE, backoff=(0.05, 0.2))
    source.start()
    try:
        until(lambda: all(r.synced for r in source.reflectors))
        own = source.reflectors[0]
        inventory = source(frozenset())
        assert inventory is not None and len(inventory.devices) == 5
        assert own.refused == {TOO_LARGE: 1}
        # by the watch: a line past the bound is dropped as it arrives (a skipped line)
        api.put_slice(huge, "MODIFIED")
        until(lambda: own.malformed == 2)
        # under 2 MiB, over 128 devices: refused by its count
        api.put_slice(newer_generation("many", [{"name": f"gpu-{i}"} for i in range(129)]))
        until(lambda: own.refused.get(TOO_MANY_DEVICES) == 1)
        # past the slices a watch keeps
        for i in range(256):
            extra = nvidia_slice()
            extra["metadata"]["name"] = f"extra-{i:03d}"
            extra["spec"]["pool"] = {"name": f"pool-{i}", "generation": 1}
            extra["spec"]["devices"] = []
            api.put_slice(extra)
        until(lambda: own.refused.get(TOO_MANY_SLICES) == 1)
        assert own.malformed == 4
        inventory = source(frozenset())
        assert inventory is not None and len(inventory.devices) == 5
        reasons = [getattr(r, "reason", None) for r in caplog.records]
        assert reasons.count(TOO_LARGE) == 1 and reasons.count(TOO_MANY_SLICES) == 1
    finally:
        source.stop()
        api.cut()


# -- admins' DeviceTaintRules (R-X11) -------------------------------------------------------------


def taint_rule(
    name: str,
    selector: dict[str, Any] | None,
    taint: dict[str, Any],
    version: str = "v1",
) -> dict[str, Any]:
    """A DeviceTaintRule as the API server serves it (KEP-5055): cluster-scoped, one taint,
    a selector by driver, pool and device, the time the taint was added, a status."""
    spec: dict[str, Any] = {"taint": {**taint, "timeAdded": "2026-11-30T08:14:02Z"}}
    if selector is not None:
        spec["deviceSelector"] = selector
    return {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": "DeviceTaintRule",
        "metadata": {
            "name": name,
            "uid": "5d1c7a0e-0b8e-4c43-9b1e-2f0c3f5a6b7c",
            "generation": 1,
            "creationTimestamp": "2026-11-30T08:14:02Z",
        },
        "spec": spec,
        "status": {
            "conditions": [
                {
                    "type": "EvictionInProgress",
                    "status": "False",
                    "reason": "Completed",
                    "lastTransitionTime": "2026-11-30T08:14:09Z",
                    "observedGeneration": 1,
                }
            ]
        },
    }


RMA = {"key": "example.com/maintenance", "value": "hbm-rma", "effect": "NoExecute"}


def test_a_device_taint_rule_is_read_as_its_selector_and_taint() -> None:
    """R-X11: driver, pool and device select; an unset field matches any. A rule without a
    selector matches no device (Kubernetes' rule), and one selecting by a device class or CEL
    (v1alpha3) is one the agent cannot evaluate: neither is applied."""
    got = parse_rule(taint_rule("rma", {"driver": "gpu.nvidia.com", "device": "gpu-0"}, RMA))
    assert got == dra.DeviceTaintRule(
        "rma",
        dra.DeviceTaint("example.com/maintenance", "hbm-rma", "NoExecute"),
        "gpu.nvidia.com",
        None,
        "gpu-0",
    )
    assert parse_rule(taint_rule("none", None, RMA)) is None
    cel = {"selectors": [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].index == 0"}}]}
    assert parse_rule(taint_rule("cel", cel, RMA, "v1alpha3")) is None
    assert parse_rule(taint_rule("cls", {"deviceClassName": "gpu.nvidia.com"}, RMA)) is None
    assert parse_rule(taint_rule("bad", {"pool": 7}, RMA)) is None
    assert parse_rule(taint_rule("nokey", {}, {"effect": "NoSchedule"})) is None
    assert parse_rule({"spec": {}}) is None


def test_device_taint_rules_are_listed_watched_and_applied_with_the_slices_taints(
    api: FakeApiServer, tmp_path: Path
) -> None:
    """R-X11: the agent lists and watches the cluster's DeviceTaintRules (the newest version
    that serves them: here v1beta2 of a cluster whose slices are v1) and applies each to the
    devices it selects, cumulatively with the slices' own taints; a deleted rule stops
    counting."""
    api.dra_versions = ["v1", "v1beta2"]
    api.rule_versions = ["v1beta2"]
    api.put_slice(nvidia_slice())
    api.put_rule(
        taint_rule(
            "rma-gpu-0",
            {"driver": "gpu.nvidia.com", "pool": NODE, "device": "gpu-0"},
            RMA,
            "v1beta2",
        )
    )
    source = DraSource(client_of(api, tmp_path), NODE, backoff=(0.05, 0.2))
    source.start()
    try:
        until(lambda: all(r.synced for r in source.reflectors) and source.rules.synced)
        inventory = source(frozenset())
        assert inventory is not None
        # the slice's own NoSchedule taint on gpu-3 still counts beside the rule's
        assert dra.tainted(inventory, ALIASES) == {
            ("nvidia", UUID0): "example.com/maintenance=hbm-rma",
            ("nvidia", UUID3): "gpu.nvidia.com/xid=79",
        }
        # a rule added while the agent runs reaches it through the watch
        note = {"key": "example.com/audit", "value": "q4", "effect": "None"}
        api.put_rule(taint_rule("audit-all", {"driver": "gpu.nvidia.com"}, note, "v1beta2"))
        until(lambda: len(source.rules.rules()) == 2)
        inventory = source(frozenset())
        assert inventory is not None
        taints = dra.card_taints(inventory, ALIASES)
        assert taints[("nvidia", UUID3)] == (
            dra.DeviceTaint("example.com/audit", "q4", "None"),
            dra.DeviceTaint("gpu.nvidia.com/xid", "79", "NoSchedule"),
        )
        assert dra.tainted(inventory, ALIASES) == {
            ("nvidia", UUID0): "example.com/maintenance=hbm-rma",
            ("nvidia", UUID3): "gpu.nvidia.com/xid=79",
        }
        # a rule that selects by CEL is not applied: counted, the others stand
        cel = {"selectors": [{"cel": {"expression": "true"}}]}
        api.put_rule(taint_rule("by-cel", cel, RMA, "v1beta2"))
        until(lambda: source.rules.refused == 1)
        assert [r.name for r in source.rules.rules()] == ["audit-all", "rma-gpu-0"]
        api.put_rule(taint_rule("rma-gpu-0", {}, RMA), "DELETED")
        until(lambda: [r.name for r in source.rules.rules()] == ["audit-all"])
        inventory = source(frozenset())
        assert inventory is not None
        assert dra.tainted(inventory, ALIASES) == {("nvidia", UUID3): "gpu.nvidia.com/xid=79"}
        rule_paths = {k for k, _ in api.requests if k.startswith("rule")}
        assert rule_paths == {"rules", "rule-watch"}
    finally:
        source.stop()
        api.cut()


def test_a_cluster_that_serves_no_device_taint_rules_still_has_its_slices_taints(
    api: FakeApiServer, tmp_path: Path
) -> None:
    """R-X11: without the DeviceTaintRule API (a cluster before 1.33, or the gate off) the rule
    reader holds none and waits to ask again; the slices are read as before."""
    api.rule_versions = []
    tainted = nvidia_slice()
    tainted["spec"]["devices"][0]["taints"] = [
        {"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}
    ]
    api.put_slice(tainted)
    source = DraSource(client_of(api, tmp_path), NODE, backoff=(0.05, 0.2))
    source.start()
    try:
        until(lambda: all(r.synced for r in source.reflectors) and source.rules.synced)
        assert source.rules.absent and source.rules.rules() == ()
        inventory = source(frozenset())
        assert inventory is not None
        assert dra.tainted(inventory, ALIASES) == {
            ("nvidia", UUID0): "gpu.nvidia.com/xid=79",
            ("nvidia", UUID3): "gpu.nvidia.com/xid=79",
        }
    finally:
        source.stop()
        api.cut()
