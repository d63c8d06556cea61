"""Rules the semantic mutation run over the newest code (scripts/mutate --semantic, issue 45)
found unpinned: each a bug a person writes (a guard after the step it guards, a duplicate kept
first in silence, a bound off by one, a count a round late, a unit slip), pinned by a test with
a hand-written expected value. The modules: grants/dra.py, kube/dra.py, figures/ranges.py,
serve/, agent/selfmetrics.py, kube/podresources.py and the vendors' health reads."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from types import MappingProxyType
from typing import Any, cast

import pytest

from devicemanager.grants import dra
from devicemanager.grants.dra import (
    AllocationResult,
    ClaimDevice,
    ClaimStatus,
    ContainerClaim,
    DraDevice,
    inventory_of,
)
from devicemanager.kube import dra as kube_dra
from devicemanager.kube.client import KubeClient, KubeError

# -- DRA: the node's inventory and a device's ids (R-X6) ---------------------------------------

DRIVER = "accel.example.com"  # a driver the agent does not know: every manufacturer is asked


def _device(name: str, **attrs: str) -> DraDevice:
    return DraDevice(DRIVER, "pool", name, MappingProxyType(attrs))


def test_the_inventory_keeps_4096_devices_and_leaves_out_the_4097th() -> None:
    """R-X6: the node's slice devices are bounded at exactly 4,096: the 4,096th is kept, the
    4,097th left out (a bound off by one keeps it)."""
    got = inventory_of(_device(f"d{n}") for n in range(4097))
    assert len(got.devices) == 4096
    assert (DRIVER, "pool", "d4095") in got.devices
    assert (DRIVER, "pool", "d4096") not in got.devices


def test_the_inventory_keeps_2048_claims_and_leaves_out_the_2049th() -> None:
    """R-X6: the claims read are bounded at exactly 2,048."""
    got = inventory_of([], [ClaimStatus("ns", f"c{n}") for n in range(2049)])
    assert len(got.claims) == 2048
    assert ("ns", "c2047") in got.claims
    assert ("ns", "c2048") not in got.claims


def test_a_card_id_of_253_characters_names_its_card_and_one_of_254_names_none() -> None:
    """R-X6: an id attribute is a Kubernetes name, at most 253 characters: one of exactly 253
    resolves, one of 254 is refused before it is looked up (even if a library named it)."""
    at, over = "c" * 253, "c" * 254
    aliases = {("acme", at): "card-a", ("acme", over): "card-b"}
    assert dra.resolve(_device("d0", serial=at), aliases) == dra.Resolved("acme", "card-a")
    assert dra.resolve(_device("d1", serial=over), aliases) is None


def test_a_partition_whose_own_id_is_253_characters_is_kept_and_254_is_not() -> None:
    """R-X6: a partition's own id (`uuid`) is bounded like every name: 253 kept, 254 refused."""
    aliases = {("acme", "card-a"): "card-a"}
    at = _device("p0", type="partition", parentUUID="card-a", uuid="p" * 253)
    over = _device("p1", type="partition", parentUUID="card-a", uuid="p" * 254)
    assert dra.resolve(at, aliases) == dra.Resolved("acme", "card-a", "p" * 253)
    assert dra.resolve(over, aliases) is None


def test_a_device_named_again_past_the_bound_is_left_out_not_a_duplicate() -> None:
    """R-X6: past the 4,096th device the rest is left out before anything else is judged: a
    4,097th entry naming the first device again does not make the first a duplicate."""
    got = inventory_of([*(_device(f"d{n}") for n in range(4096)), _device("d0")])
    assert got.duplicates == frozenset()
    assert (DRIVER, "pool", "d0") in got.devices


def _admin_on(device: str) -> tuple[ContainerClaim, ClaimStatus]:
    held = ContainerClaim("exporter", "mon", "all", (ClaimDevice(DRIVER, "pool", device),))
    status = ClaimStatus(
        "mon", "all", results=(AllocationResult(DRIVER, "pool", device, admin_access=True),)
    )
    return held, status


def test_an_admin_access_claim_is_judged_before_its_device_is_looked_up() -> None:
    """R-X6: an adminAccess claim sees devices and holds none: no grant, and no unresolved
    device either, whether its device is missing from the slices, named twice, matches no
    card, or the slices could not be read at all."""
    aliases = {("acme", "card-a"): "card-a"}
    for device, devices, error in (
        ("absent", [], None),
        ("twice", [_device("twice"), _device("twice")], None),
        ("unmatched", [_device("unmatched", serial="no-such-card")], None),
        ("d0", [_device("d0", serial="card-a")], "the slices could not be listed"),
    ):
        held, status = _admin_on(device)
        inventory = inventory_of(devices, [status], error=error)
        got = dra.pod_allocations([held], inventory, aliases, "p")
        assert (got.allocations, got.unresolved) == ((), ()), device


def test_a_claimed_device_says_the_first_reason_that_stops_it() -> None:
    """R-X6: why a device gives no grant, in the order the reasons hold: no inventory before a
    claim not read yet, a claim not read yet before a device named twice."""
    aliases = {("acme", "card-a"): "card-a"}
    held = ContainerClaim("main", "ns", "c", (ClaimDevice(DRIVER, "pool", "twice"),))
    twice = [_device("twice", serial="card-a"), _device("twice", serial="card-a")]
    pending = inventory_of(twice, pending_claims=[("ns", "c")])
    (missed,) = dra.pod_allocations([held], pending, aliases, "p").unresolved
    assert missed.reason == dra.NO_CLAIM
    broken = inventory_of(twice, pending_claims=[("ns", "c")], error="403")
    (missed,) = dra.pod_allocations([held], broken, aliases, "p").unresolved
    assert missed.reason == dra.NO_INVENTORY


# -- DRA: the slices read from the API server (R-X6) -------------------------------------------

NODE = "node-1"


def _slice(name: str, devices: list[dict[str, Any]], pool: str = "pool") -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "driver": DRIVER,
            "pool": {"name": pool, "generation": 1},
            "nodeName": NODE,
            "devices": devices,
        },
    }


def _parsed(devices: list[dict[str, Any]]) -> kube_dra.SliceEntry | kube_dra.RefusedSlice | None:
    return kube_dra.parse_slice(_slice("s", devices), NODE)


def _reflector() -> kube_dra.SliceReflector:
    # replace_all never calls the client: what a list gave is admitted under the node's bounds
    return kube_dra.SliceReflector(cast(KubeClient, None), NODE, "sel", lambda: "v1")


def test_a_slice_of_128_devices_is_read_and_one_of_129_refused() -> None:
    """R-X6: Kubernetes stores at most 128 devices in a slice: 128 read, 129 refused by count."""
    at = _parsed([{"name": f"d{n}"} for n in range(128)])
    assert isinstance(at, kube_dra.SliceEntry) and len(at.devices) == 128
    over = _parsed([{"name": f"d{n}"} for n in range(129)])
    assert isinstance(over, kube_dra.RefusedSlice) and over.reason == "too_many_devices"


def test_names_and_values_are_kept_up_to_their_bound_and_dropped_past_it() -> None:
    """R-X6: a device name and an attribute's name are Kubernetes names (253 characters kept,
    254 not); a string attribute is kept up to 1,024 characters (1,000 is not the bound); a
    taint's value up to 253."""
    n253, n254 = "n" * 253, "n" * 254
    assert isinstance(_parsed([{"name": n254}]), kube_dra.RefusedSlice)
    entry = _parsed(
        [
            {
                "name": n253,
                "attributes": {
                    "a" * 253: {"string": "x"},
                    "b" * 254: {"string": "x"},
                    "s1024": {"string": "v" * 1024},
                    "s1025": {"string": "v" * 1025},
                },
                "capacity": {"c" * 253: {"value": "1"}, "d" * 254: {"value": "1"}},
                "taints": [
                    {"key": "k1", "value": n253, "effect": "NoSchedule"},
                    {"key": "k2", "value": n254, "effect": "NoSchedule"},
                ],
            }
        ]
    )
    assert isinstance(entry, kube_dra.SliceEntry)
    (device,) = entry.devices
    assert device.name == n253
    assert sorted(device.attributes) == ["a" * 253, "s1024"]
    assert device.attributes["s1024"] == "v" * 1024
    assert dict(device.capacity) == {"c" * 253: 1}
    assert [(t.key, t.value) for t in device.taints] == [("k1", n253), ("k2", "")]


def test_a_v1beta1_device_reads_its_fields_under_basic_not_beside_it() -> None:
    """R-X6: in v1beta1 a device's attributes are under `basic`; a field of the same name
    beside it is not the device's."""
    entry = _parsed(
        [
            {
                "name": "d0",
                "attributes": {"uuid": {"string": "beside"}},
                "basic": {"attributes": {"uuid": {"string": "under"}}},
            }
        ]
    )
    assert isinstance(entry, kube_dra.SliceEntry)
    assert entry.devices[0].attributes["uuid"] == "under"


def test_a_slices_json_is_bounded_at_2_mib_in_binary_units() -> None:
    """R-X6: a slice's JSON is never decoded past 2 MiB, 2,097,152 bytes (not 2,000,000), and a
    string attribute past 1,024 characters is dropped (docs/kubernetes.md)."""
    assert kube_dra.MAX_SLICE_BYTES == 2_097_152
    assert kube_dra.MAX_TEXT == 1024


def test_a_watch_keeps_256_slices_and_refuses_the_257th() -> None:
    """R-X6: at most 256 slices per watch: the 256th kept, the 257th refused and counted."""
    reflector = _reflector()
    reflector.replace_all([_slice(f"s{n:03d}", [], f"p{n}") for n in range(257)], "1")
    names = {e.pool for e in reflector.entries()}
    assert len(names) == 256 and "p255" in names and "p256" not in names
    assert reflector.refused == {"too_many_slices": 1}


def test_the_node_holds_4096_slice_devices_and_refuses_the_slice_past_them() -> None:
    """R-X6: 32 slices of 128 devices are exactly the 4,096 the node holds, all kept; a 33rd
    slice with one device is refused, and never stored first."""
    full = [
        _slice(f"s{n:02d}", [{"name": f"d{n}-{i}"} for i in range(128)], f"p{n}") for n in range(32)
    ]
    reflector = _reflector()
    reflector.replace_all(full, "1")
    assert sum(len(e.devices) for e in reflector.entries()) == 4096
    assert reflector.refused == {}
    reflector.replace_all([*full, _slice("s99", [{"name": "x"}], "p99")], "2")
    assert sum(len(e.devices) for e in reflector.entries()) == 4096
    assert "p99" not in {e.pool for e in reflector.entries()}
    assert reflector.refused == {"too_many_slices": 1}


def test_refused_slices_are_logged_by_name_up_to_256_then_only_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """R-X6: each refused slice is counted; at most 256 of them are named in the log (as many
    as are kept), the 257th only counted."""
    caplog.set_level(logging.WARNING, "devicemanager.kube.dra")
    reflector = _reflector()
    broken = [{"metadata": {"name": f"bad-{n:03d}"}, "spec": "not a spec"} for n in range(257)]
    reflector.replace_all(broken, "1")
    assert reflector.refused == {"malformed": 257}
    assert len([r for r in caplog.records if r.name == "devicemanager.kube.dra"]) == 256


class _Api:
    """A client that counts its GETs: discovery serves `v1`, a claim is found or not."""

    def __init__(self, *, dra: bool = True) -> None:
        self.dra = dra
        self.paths: list[str] = []

    def get(self, path: str, **_: object) -> Any:
        self.paths.append(path)
        if not self.dra:
            raise KubeError("not found", 404)
        if path == "/apis/resource.k8s.io":
            return {"versions": [{"version": "v1"}]}
        namespace, name = path.split("/")[-3], path.split("/")[-1]
        return {"metadata": {"namespace": namespace, "name": name}, "status": {}}


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_served_version_is_discovered_once_and_a_missing_one_asked_again_after_a_while() -> (
    None
):
    """R-X6: discovery is one GET for the agent's life while a version is served; with none
    served it is asked again only once `absent_retry` seconds have passed."""
    api, clock = _Api(), _Clock()
    source = kube_dra.DraSource(cast(KubeClient, api), NODE, absent_retry=300.0, clock=clock)
    try:
        assert source.version() == "v1"
        clock.now = 1000.0
        assert source.version() == "v1"
        assert api.paths == ["/apis/resource.k8s.io"]
    finally:
        source.stop()
    absent, clock = _Api(dra=False), _Clock()
    source = kube_dra.DraSource(cast(KubeClient, absent), NODE, absent_retry=300.0, clock=clock)
    try:
        assert source.version() is None
        clock.now = 299.0
        assert source.version() is None
        assert len(absent.paths) == 1
        clock.now = 300.0
        assert source.version() is None
        assert len(absent.paths) == 2
    finally:
        source.stop()


def _settled(reader: kube_dra.ClaimReader) -> None:
    # the reads submitted so far, finished (the reader's own pool: no sleeping, no timing)
    reader._pool.shutdown(wait=True)
    reader._pool = ThreadPoolExecutor(max_workers=1)


def test_a_claim_read_is_fresh_for_exactly_max_age_seconds_then_read_again() -> None:
    """R-X6: a claim is read once and served from the cache for `max_age` seconds: at exactly
    60 s no GET, past it one; `gets` counts the GETs made, none without a served version."""
    api, clock = _Api(), _Clock()
    reader = kube_dra.ClaimReader(cast(KubeClient, api), lambda: "v1", max_age=60.0, clock=clock)
    try:
        read, missing, pending = reader.statuses([("ns", "c")])
        assert [(c.namespace, c.name) for c in read] == [("ns", "c")]
        assert (missing, pending, reader.gets) == (set(), set(), 1)
        clock.now = 60.0
        reader.statuses([("ns", "c")])
        _settled(reader)
        assert reader.gets == 1
        clock.now = 60.5
        reader.statuses([("ns", "c")])
        _settled(reader)
        assert reader.gets == 2
    finally:
        reader.close()
    none = kube_dra.ClaimReader(cast(KubeClient, api), lambda: None, clock=clock)
    try:
        read, missing, pending = none.statuses([("ns", "c")])
        assert (read, missing, none.gets) == ([], {("ns", "c")}, 0)
    finally:
        none.close()
