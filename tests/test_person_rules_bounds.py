"""Rules the semantic mutation run over the newest code (scripts/mutate --semantic, issue 45)
found unpinned: each a bug a person writes (a guard after the step it guards, a duplicate kept
first in silence, a bound off by one, a count a round late, a unit slip), pinned by a test with
a hand-written expected value. The modules: grants/dra.py, kube/dra.py, figures/ranges.py,
serve/, agent/selfmetrics.py, kube/podresources.py and the vendors' health reads."""

from __future__ import annotations

import asyncio
import io
import logging
import shutil
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from types import MappingProxyType
from typing import Any, cast

import pytest
from prometheus_client.parser import text_string_to_metric_families
from uvicorn.config import Config
from uvicorn.server import ServerState

from devicemanager.agent.monitor import BackendWorker, Monitor
from devicemanager.agent.selfmetrics import SelfMetrics
from devicemanager.figures.ranges import plausible_reading
from devicemanager.grants import dra
from devicemanager.grants.deviceplugins import KubeletAnswer
from devicemanager.grants.dra import (
    AllocationResult,
    ClaimDevice,
    ClaimStatus,
    ContainerClaim,
    DraDevice,
    inventory_of,
)
from devicemanager.kube import dra as kube_dra
from devicemanager.kube import podresources_messages as pb
from devicemanager.kube.client import KubeClient, KubeError, WatchEvent
from devicemanager.kube.podresources import PodResourcesClient, PodResourcesPoller, from_list
from devicemanager.model import DeviceProcesses, ProcessRow, Reason, VendorReading
from devicemanager.node import jsonlist
from devicemanager.serve import access, mint
from devicemanager.serve import http as http_module
from devicemanager.serve.app import accepts_gzip
from devicemanager.serve.counters import HttpCounters
from devicemanager.serve.http import (
    Answer,
    BoundedHttpProtocol,
    Connections,
    Limits,
    protocol_for,
)
from tests.conftest import NODES
from tests.fakes import StaticBackend
from tests.podresources_server import Behaviour, load, serving
from tests.vendors.test_nvidia_parse import parse_card as nvidia_card
from vendors._nvml_family import parse_xid_counts

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


# -- ranges: a per-process row at its bounds (issue 30) ------------------------------------------


def _rows(*rows: ProcessRow) -> tuple[tuple[str, ...], DeviceProcesses]:
    answer = DeviceProcesses("GPU-0", rows)
    got, refused = plausible_reading(VendorReading("nvidia", (), processes=(answer,)))
    return refused, got.processes[0]


def test_a_process_row_at_exactly_its_bounds_is_kept_and_one_past_them_refused() -> None:
    """R-V3: a row's memory is within 0 and 16 TiB (17,592,186,044,416 bytes: 16 Mi MiB, in
    binary units), its cores within 0 and 100 %: at exactly either end kept, past them the
    device's entry point absent with invalid_data."""
    edge = 17_592_186_044_416
    refused, kept = _rows(ProcessRow(1, 0, 0.0), ProcessRow(2, edge, 100.0))
    assert refused == ()
    assert (kept.memory_reason, kept.cores_reason) == (None, None)
    refused, cut = _rows(ProcessRow(1, edge + 1, 100.0))
    assert refused == ("processes[0].memory_bytes",)
    assert (cut.memory_reason, cut.cores_reason) == (Reason.INVALID_DATA, None)
    refused, cut = _rows(ProcessRow(1, -1, -0.5))
    assert refused == ("processes[0].memory_bytes", "processes[0].cores_percent")


# -- the self-signed pair's child: the names it is made out to (R-O1) ----------------------------


def test_the_child_takes_64_names_of_253_bytes_and_refuses_a_65th_or_a_254th_byte() -> None:
    """R-O1: a self-signed pair names at most 64 hosts of at most 253 bytes each: exactly
    those go through the message and back whole; one more name, or one more byte, is refused
    on either side."""
    hosts = [f"{n:03d}" + "h" * 250 for n in range(64)]
    assert {len(h.encode()) for h in hosts} == {253}
    message = mint.names_message(hosts)
    assert mint.read_names(io.BytesIO(message)) == hosts
    with pytest.raises(ValueError):
        mint.names_message([*hosts, "one-more"])
    with pytest.raises(ValueError):
        mint.names_message(["h" * 254])
    with pytest.raises(ValueError, match="more than 64"):
        mint.read_names(io.BytesIO(message[:-1] + b"one-more\n\n"))
    with pytest.raises(ValueError, match="longer than 253"):
        mint.read_names(io.BytesIO(b"h" * 254 + b"\n\n"))


# -- access review: the token and the verdicts kept (R-X4) ---------------------------------------


def _bearer(value: bytes) -> str | None:
    return access.bearer({"type": "http", "headers": [(b"authorization", value)]})


def test_a_bearer_token_is_taken_up_to_16_kib_and_refused_past_it() -> None:
    """R-X4: a bearer token of up to 16 KiB, 16,384 characters (not 16,000), is reviewed; one
    character more is refused without a review; whitespace around the scheme and the token is
    not part of them."""
    assert _bearer(b"Bearer " + b"t" * 16384) == "t" * 16384
    assert _bearer(b"Bearer " + b"t" * 16385) is None
    assert _bearer(b"  bearer   tok  ") == "tok"
    assert _bearer(b"Basic tok") is None


class _Allowing:
    """An API server that knows every token and allows it."""

    def create(self, path: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        if path == access.TOKEN_REVIEWS:
            return {"status": {"authenticated": True, "user": {"username": "someone"}}}
        return {"status": {"allowed": True}}


def test_the_verdict_cache_holds_exactly_max_entries_the_oldest_leaving_first() -> None:
    """R-X4: `max_entries` verdicts are kept: with 2, two tokens are each reviewed once however
    often they come; a third makes the oldest verdict leave, which is then reviewed again."""
    reviewer = access.Reviewer(cast(KubeClient, _Allowing()), max_entries=2)

    async def checks(*tokens: str) -> None:
        for token in tokens:
            assert (await reviewer.check(token, "/metrics")).status == 200

    asyncio.run(checks("a", "b", "a", "b", "a"))
    assert reviewer.reviews == 2
    asyncio.run(checks("c", "b"))  # c pushes out a, the oldest; b stays
    assert reviewer.reviews == 3
    asyncio.run(checks("a"))
    assert reviewer.reviews == 4


def test_a_bucket_of_20_starts_20_new_reviews_at_once_and_refuses_the_21st() -> None:
    """R-X4: new tokens' reviews start at most `new_burst` at once, refilled at
    `new_per_second`: 20 at one instant, the 21st refused; a tenth of a second later one
    more (10 a second)."""
    clock = _Clock()
    bucket = access._Bucket(10.0, 20, clock)
    assert [bucket.take() for _ in range(21)] == [True] * 20 + [False]
    clock.now = 0.1
    assert [bucket.take(), bucket.take()] == [True, False]


class _Failing:
    """An API server whose slice list fails with `status`."""

    def __init__(self, status: int) -> None:
        self.status = status

    def list_bounded(self, *_: object) -> Any:
        raise KubeError("the list failed", self.status)


def test_only_a_404_makes_the_watch_forget_the_served_version() -> None:
    """R-X6: a slice list that fails with 404 means the version went away (a downgrade): it is
    discovered again. Any other failure (500, a timeout) keeps it: a flaky API server must not
    cost a discovery on every retry."""
    for status, forgotten in ((500, 0), (None, 0), (404, 1)):
        calls: list[None] = []
        reflector = kube_dra.SliceReflector(
            cast(KubeClient, _Failing(status)),
            NODE,
            "sel",
            lambda: "v1",
            partial(calls.append, None),
            absent_retry=0.0,
        )
        try:
            reflector.run_once()
        except KubeError:
            assert status != 404
        assert len(calls) == forgotten, status


# -- the server's bounds, one connection at a time (R-X8) ----------------------------------------
# The protocol uvicorn runs, fed bytes by hand over a transport that keeps what it is given: the
# bounds at exactly their value, one under and one over, and what each refusal counts.


class _Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = self.aborted = False

    @property
    def out(self) -> bytes:
        return b"".join(self.writes)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))

    def writelines(self, lines: Any) -> None:
        self.writes.extend(bytes(line) for line in lines)

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = self.aborted = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 50000), "sockname": ("127.0.0.1", 8443)}.get(
            name, default
        )

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0


async def _silent_app(scope: Any, receive: Any, send: Any) -> None:
    """Never answers: a request it takes stays the one being answered (no loop runs it)."""


class _Routes:
    """One fast route, `/x`, answering a body of `size` bytes."""

    paths = frozenset({b"/x"})

    def __init__(self, size: int) -> None:
        self.size = size

    def fast(self, path: bytes, accept_encoding: bytes | None) -> Answer:
        return Answer(200, ((b"content-type", b"text/plain"),), b"a" * self.size)


class _Server:
    """One registry's protocol class, and connections made to it by hand."""

    def __init__(self, limits: Limits, routes: _Routes | None = None) -> None:
        self.cls, self.registry = protocol_for(limits, routes)
        self.config = Config(app=_silent_app, http=self.cls, log_level="critical", lifespan="off")
        self.config.load()
        self.loop = asyncio.new_event_loop()
        self.state = ServerState()

    def connect(self) -> tuple[BoundedHttpProtocol, _Transport]:
        protocol = self.cls(
            config=self.config, server_state=self.state, app_state={}, _loop=self.loop
        )
        transport = _Transport()
        protocol.connection_made(transport)
        return protocol, transport

    def close(self) -> None:
        for task in asyncio.all_tasks(self.loop):
            task.cancel()
        self.loop.run_until_complete(asyncio.sleep(0))
        self.loop.close()


@pytest.fixture
def server() -> Any:
    made: list[_Server] = []

    def make(limits: Limits | None = None, routes: _Routes | None = None) -> _Server:
        made.append(_Server(limits or Limits(), routes))
        return made[-1]

    yield make
    for s in made:
        s.close()


def _request(*headers: bytes, target: bytes = b"/") -> bytes:
    return b"GET " + target + b" HTTP/1.1\r\n" + b"".join(h + b"\r\n" for h in headers) + b"\r\n"


def _status(transport: _Transport) -> bytes:
    return transport.out[9:12]


def test_100_header_fields_are_taken_and_the_101st_refused_and_counted(server: Any) -> None:
    """R-X8: at most `--http-max-headers` (100) fields: 100 taken, 101 answered 431 and
    counted `too_many_headers` once."""
    s = server()
    fields = [b"H%d: v" % n for n in range(100)]
    protocol, at = s.connect()
    protocol.data_received(_request(*fields))
    assert at.out == b"" and not at.closed
    protocol, over = s.connect()
    protocol.data_received(_request(*fields, b"H100: v"))
    assert _status(over) == b"431" and over.closed
    assert s.registry.counters.refused["too_many_headers"] == 1


def test_a_header_section_of_exactly_32_kib_is_taken_and_one_byte_more_refused(
    server: Any,
) -> None:
    """R-X8: `--http-max-header-bytes` is 32 KiB, 32,768 bytes (not 32,000): the target and
    each field (name, value and 4 bytes of separators) count; at exactly 32,768 taken, at
    32,769 answered 431 and counted `oversized` once."""
    s = server()
    # "/" (1) + "Host: x" (4 + 1 + 4) + "X: v..." (1 + n + 4) = 32,768
    n = 32768 - 1 - 9 - 5
    protocol, at = s.connect()
    protocol.data_received(_request(b"Host: x", b"X: " + b"v" * n))
    assert at.out == b"" and not at.closed
    protocol, over = s.connect()
    protocol.data_received(_request(b"Host: x", b"X: " + b"v" * (n + 1)))
    assert _status(over) == b"431"
    assert s.registry.counters.refused["oversized"] == 1


def test_a_header_section_still_arriving_is_bounded_by_the_bytes_read(server: Any) -> None:
    """R-X8: a header section not yet ended counts what was read of it: 32,768 bytes read
    unended are still taken, the next byte makes it 431 (one endless line never grows past)."""
    s = server()
    protocol, transport = s.connect()
    head = b"GET / HTTP/1.1\r\nX: "
    protocol.data_received(head + b"v" * (32768 - len(head)))
    assert transport.out == b"" and not transport.closed
    protocol.data_received(b"v")
    assert _status(transport) == b"431"
    assert s.registry.counters.refused["oversized"] == 1


def test_a_body_of_exactly_64_kib_is_taken_and_one_byte_more_refused(server: Any) -> None:
    """R-X8: no route takes a body, and one past 64 KiB (65,536 bytes, not 64,000) is refused
    at once (413, counted `body`), declared or chunked; one of exactly 65,536 is read."""
    s = server()
    protocol, at = s.connect()
    protocol.data_received(_request(b"Host: x", b"Content-Length: 65536"))
    assert at.out == b""
    protocol, over = s.connect()
    protocol.data_received(_request(b"Host: x", b"Content-Length: 65537"))
    assert _status(over) == b"413"
    protocol, chunked = s.connect()
    protocol.data_received(_request(b"Host: x", b"Transfer-Encoding: chunked"))
    protocol.data_received(b"8000\r\n" + b"b" * 32768 + b"\r\n")
    protocol.data_received(b"8000\r\n" + b"b" * 32768 + b"\r\n")
    assert chunked.out == b""  # 65,536 read
    protocol.data_received(b"1\r\nb\r\n")
    assert _status(chunked) == b"413"
    assert s.registry.counters.refused["body"] == 2


def test_32_requests_queue_behind_the_one_answered_and_the_33rd_aborts(server: Any) -> None:
    """R-X8: a connection may queue 32 requests behind the one being answered: 1 + 32 are
    taken, one more aborts the connection, counted `pipelined` once."""
    s = server()
    protocol, at = s.connect()
    protocol.data_received(_request(b"Host: x") * 33)
    assert not at.closed
    protocol, over = s.connect()
    protocol.data_received(_request(b"Host: x") * 34)
    assert over.aborted
    assert s.registry.counters.refused["pipelined"] == 1


def test_a_fast_answer_of_up_to_64_kib_goes_out_in_one_write(server: Any) -> None:
    """R-X8: a fast answer's head and body are one write (one TLS record) up to 64 KiB of body,
    65,536 bytes; past that the body is written on its own, not copied."""
    for size, writes in ((65536, 1), (65537, 2)):
        s = server(Limits(), _Routes(size))
        protocol, transport = s.connect()
        protocol.data_received(_request(b"Host: x", target=b"/x"))
        assert len(transport.writes) == writes, size
        assert transport.out.endswith(b"a" * size)


# -- the kubelet's pod-resources answer: its bound in bytes (R-X2) -------------------------------

RECORDED = NODES / "a100-device-plugin-only" / "podresources.json"


def _read_from(behaviour: Behaviour) -> KubeletAnswer:
    # A short directory: a unix socket path is limited to 107 bytes.
    root = Path(tempfile.mkdtemp(prefix="podres-", dir="/tmp"))
    try:
        with serving(root / "kubelet.sock", behaviour):
            return PodResourcesClient(root / "kubelet.sock", timeout=10).read()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_an_answer_without_a_message_says_the_status_its_trailers_carry() -> None:
    """R-X2: a kubelet that sends its headers and then fails sends no message: the call's
    error is the status in its trailers (the length of what arrived is judged before its
    first byte is read)."""
    answer = _read_from(Behaviour(load(RECORDED), fail_after_headers=True))
    assert answer.pods is None
    assert answer.error == "List: UNAVAILABLE: the kubelet is shutting down"


def test_an_answer_of_exactly_16_mib_is_read_whole() -> None:
    """R-X2: the kubelet's answer is bounded at 16 MiB, 16,777,216 bytes (not 16,000,000): an
    answer of exactly that many is read whole (here zero bytes, so then found to be no
    message), not refused by its length."""
    answer = _read_from(Behaviour(load(RECORDED), answer_bytes=16_777_216, serve_allocatable=False))
    assert answer.pods is None and answer.error is not None
    assert answer.error.startswith("List: INTERNAL: the answer is no List response")


def test_a_list_answer_at_exactly_its_bounds_is_whole_and_one_past_is_cut() -> None:
    """R-X2: 2,048 pods, 64 containers a pod, 256 device ids a resource are taken whole with no
    error; one more of any is cut, and the answer says what was cut."""
    ids = tuple(f"d{n}" for n in range(256))
    devices = (pb.ContainerDevices(resource_name="nvidia.com/gpu", device_ids=ids),)
    containers = tuple(pb.ContainerResources(name=f"c{n}", devices=devices) for n in range(64))
    pods = tuple(pb.PodResources(name=f"p{n}", namespace="ns") for n in range(2047))
    full = pb.ListPodResourcesResponse(
        pod_resources=(*pods, pb.PodResources(name="big", namespace="ns", containers=containers))
    )
    got, error = from_list(full)
    assert error is None
    assert len(got) == 2048 and len(got[-1].devices) == 64
    assert got[-1].devices[0].device_ids == tuple(ids)
    more_ids = (pb.ContainerDevices(resource_name="nvidia.com/gpu", device_ids=(*ids, "d256")),)
    over = pb.ListPodResourcesResponse(
        pod_resources=(
            *pods,
            pb.PodResources(name="p2047", namespace="ns"),
            pb.PodResources(name="p2048", namespace="ns"),
        )
    )
    assert from_list(over)[1] == "answer cut to bounds: 1 pods past 2048"
    wide = pb.PodResources(
        name="w",
        namespace="ns",
        containers=(*containers, pb.ContainerResources(name="c64", devices=more_ids)),
    )
    _, error = from_list(pb.ListPodResourcesResponse(pod_resources=(wide,)))
    assert error == "answer cut to bounds: containers of ns/w past 64"
    long = pb.PodResources(
        name="l", namespace="ns", containers=(pb.ContainerResources(name="c", devices=more_ids),)
    )
    (pod,), error = from_list(pb.ListPodResourcesResponse(pod_resources=(long,)))
    assert error == "answer cut to bounds: devices of ns/l past 256"
    assert pod.devices[0].device_ids == tuple(ids)


def test_at_exactly_max_connections_none_is_shed_and_one_more_sheds_the_oldest_idle(
    server: Any,
) -> None:
    """R-X8: `--http-max-connections` (here 2) open connections are all kept; a third makes
    room by closing the one idle the longest, counted `shed_idle`."""
    s = server(Limits(max_connections=2))
    (first, a), (_, b) = s.connect(), s.connect()
    assert not a.closed and not b.closed
    s.connect()
    assert a.closed and not b.closed
    assert s.registry.counters.refused["shed_idle"] == 1
    assert first.closing


def test_a_newcomer_that_sheds_an_incomplete_request_is_served_in_full(server: Any) -> None:
    """R-X8: at the bound, the oldest incomplete request is refused (503, `shed_incomplete`) to
    make room, and the newcomer is then a connection like any other, not held to probes."""
    s = server(Limits(max_connections=1))
    old, transport = s.connect()
    old.data_received(b"GET / HTTP/1.1\r\nHost: x\r\n")  # not ended
    new, _ = s.connect()
    assert _status(transport) == b"503"
    assert s.registry.counters.refused["shed_incomplete"] == 1
    assert new.probes_only is False


def test_a_refusal_on_a_connection_already_closing_is_not_counted_as_answered(
    server: Any,
) -> None:
    """R-X8: `http_requests_total` counts answers sent: a refusal that finds its connection
    closing sends nothing and counts nothing."""
    s = server()
    protocol, transport = s.connect()
    transport.closed = True
    protocol.refuse(503, "busy\n")
    assert transport.writes == []
    assert s.registry.counters.requests == {}


def test_a_deadline_between_requests_is_not_a_slow_request(server: Any) -> None:
    """R-X8: a connection that sent a whole request and is waiting between requests is not
    `slow` when a deadline fires; one with a request half sent is, once."""
    s = server()
    protocol, _ = s.connect()
    protocol.data_received(_request(b"Host: x"))
    protocol.on_response_complete()
    protocol._expired()
    assert s.registry.counters.refused["slow"] == 0
    half, _ = s.connect()
    half.data_received(b"GET / HTTP/1.1\r\nHost: x\r\n")
    half._expired()
    assert s.registry.counters.refused["slow"] == 1


def test_a_connection_lost_in_its_handshake_ends_without_error(server: Any) -> None:
    """R-X8: a protocol whose TLS handshake never finished was never made: losing it only
    forgets it (serve/handshake.py), it has no transport to close."""
    s = server()
    never = s.cls(config=s.config, server_state=s.state, app_state={}, _loop=s.loop)
    never.connection_lost(None)
    assert never.transport is None


def test_the_server_counts_into_the_counters_it_is_given() -> None:
    """R-X8: the counters self-metrics read are the ones the server counts into."""
    counters = HttpCounters()
    _, registry = protocol_for(Limits(), counters=counters)
    assert registry.counters is counters


def test_freed_memory_is_given_back_after_exactly_64_connections_end() -> None:
    """R-X8: the allocator is asked to give pages back once 64 connections have ended (the
    64th schedules it), not before."""
    registry = Connections(Limits())

    async def end(n: int) -> bool:
        for _ in range(n):
            registry.ended()
        scheduled = registry.trim is not None
        if registry.trim is not None:
            registry.trim.cancel()
        return scheduled

    assert asyncio.run(end(63)) is False
    assert asyncio.run(end(1)) is True


def test_the_date_header_is_renewed_when_a_new_second_begins() -> None:
    """R-X8: the default headers carry this second's date: renewed on the first request of a
    new second, kept within it."""
    registry = Connections(Limits())
    config = Config(app=_silent_app)
    state = ServerState()
    state.default_headers = []
    registry.renew_date(state, config)
    (name, value), *_ = state.default_headers
    assert name == b"date" and value.endswith(b" GMT")
    registry.date_second -= 1  # a second went by
    state.default_headers = []
    registry.renew_date(state, config)
    assert state.default_headers[0][0] == b"date"


class _Gate:
    """A connection in the gate: aborted, it leaves the registry (as TlsGate's loss does)."""

    def __init__(self, registry: Connections) -> None:
        self.registry = registry
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True
        self.registry.waiting.pop(cast(Any, self), None)
        self.registry.handshaking.pop(cast(Any, self), None)


def test_handshakes_at_exactly_max_connections_are_all_let_through() -> None:
    """R-X8: accepted connections count against the bound from their accept: at exactly the
    bound (2), none is aborted, even one silent for 5 s; a third aborts the one silent the
    longest, counted `handshakes`."""
    registry = Connections(Limits(max_connections=2))
    now = time.monotonic()
    old, new = _Gate(registry), _Gate(registry)
    registry.waiting = cast(Any, {old: now - 5.0, new: now})
    registry.gate_room(cast(Any, new))
    assert not old.aborted and not new.aborted
    assert registry.counters.refused["handshakes"] == 0
    third = _Gate(registry)
    registry.waiting[cast(Any, third)] = now
    registry.gate_room(cast(Any, third))
    assert old.aborted and not new.aborted and not third.aborted
    assert registry.counters.refused["handshakes"] == 1


def test_past_the_bound_with_nobody_silent_the_oldest_still_silent_newcomer_goes() -> None:
    """R-X8: with every waiting connection fresh, past the bound of handshakes (2) the oldest
    other silent one is aborted; at exactly the bound none is."""
    registry = Connections(Limits(max_connections=2))
    now = time.monotonic()
    gates = [_Gate(registry), _Gate(registry), _Gate(registry)]
    registry.handshaking = cast(Any, {gates[0]: now})
    registry.waiting = cast(Any, {gates[1]: now})
    registry.gate_room(cast(Any, gates[1]))
    assert not any(g.aborted for g in gates)
    registry.waiting[cast(Any, gates[2])] = now + 0.001
    registry.gate_room(cast(Any, gates[2]))
    assert [g.aborted for g in gates] == [False, True, False]


def test_a_poller_never_read_says_so() -> None:
    """R-X2: before its first read the poller has no answer, and says that, not a crash."""
    poller = PodResourcesPoller(PodResourcesClient(Path("/nonexistent")), interval=10)
    answer = poller()
    assert answer.pods is None
    assert answer.error == "the kubelet's pod-resources have not been read yet"


# -- the vendors' health reads (R-X7) ------------------------------------------------------------


def test_a_remap_failure_outranks_a_pending_remap_when_both_are_flagged() -> None:
    """R-X7: the unhealthy reason is the most severe signal: rows that failed to remap before
    rows waiting for a reset, when NVML flags both."""
    (card,) = nvidia_card(nvmlDeviceGetRemappedRows={"isPending": 1, "failureOccurred": 1})
    assert card.unhealthy is True and card.unhealthy_reason == "row_remap_failure"


def test_xid_counts_hold_64_codes_and_other_and_a_count_short_of_the_sentinel() -> None:
    """R-X7: a card's XID counts are at most 64 codes and `other` (65 entries; 66 is no answer
    the backend writes: invalid_data), each count from 1 to UINT64_MAX - 1 (UINT64_MAX is
    NVML's "not available", never a count)."""
    full = {str(n): 1 for n in range(1, 65)} | {"other": 3}
    counts, reason = parse_xid_counts(full)
    assert reason is None and counts is not None and len(counts) == 65
    assert counts[-1] == ("other", 3)
    assert parse_xid_counts({**full, "65": 1}) == (None, Reason.INVALID_DATA)
    assert parse_xid_counts({"79": 18446744073709551614}) == (
        (("79", 18446744073709551614),),
        None,
    )
    assert parse_xid_counts({"79": 18446744073709551615}) == (None, Reason.INVALID_DATA)
    assert parse_xid_counts({"79": 0}) == (None, Reason.INVALID_DATA)


def test_a_nameless_refusal_takes_no_slot_among_the_named_ones(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """R-X6: a list item refused without a name (past 2 MiB, never decoded) is counted and
    logged, and takes none of the 256 slots of refused slices named in the log: with 255
    named and one nameless, the 256th named one is still logged."""
    caplog.set_level(logging.WARNING, "devicemanager.kube.dra")
    reflector = _reflector()
    broken = [{"metadata": {"name": f"bad-{n:03d}"}, "spec": "not a spec"} for n in range(255)]
    reflector.replace_all(broken, "1", [jsonlist.Refused(0, jsonlist.TOO_LARGE, 3 << 20)])
    assert reflector.refused == {"malformed": 255, "too_large": 1}
    reflector.apply(WatchEvent("ADDED", {"metadata": {"name": "bad-255"}, "spec": "no"}))
    logged = [r for r in caplog.records if r.name == "devicemanager.kube.dra"]
    assert len(logged) == 257


def test_the_kubelets_word_on_an_id_naming_no_card_is_left_out() -> None:
    """R-X7: a device the kubelet reports unhealthy that names no card the agent knows (a DRA
    id the slices do not hold, or a plugin id no alias names) marks nothing."""
    aliases = {("acme", "card-a"): "card-a"}
    inventory = inventory_of([_device("d0", serial="card-a")])
    reports = [(f"{DRIVER}/pool/gone", "Unhealthy", None), ("no-such-id", "Unhealthy", None)]
    assert dra.kubelet_health(reports, inventory, aliases) == {}
    marked = dra.kubelet_health([(f"{DRIVER}/pool/d0", "Unhealthy", None)], inventory, aliases)
    assert marked == {("acme", "card-a"): dra.KubeletSays("kubelet:Unhealthy")}


def test_a_capacity_is_a_quantity_string_or_a_whole_number_of_base_units() -> None:
    """R-X6: a device's capacity is read as `{value: "80Gi"}`, `{value: 1024}` or, as some
    servers wrote it, the bare quantity; a negative one, or a string past 64 characters, is
    left out."""
    entry = _parsed(
        [
            {
                "name": "d0",
                "capacity": {
                    "text": {"value": "2Ki"},
                    "number": {"value": 1024},
                    "bare": 4096,
                    "negative": {"value": -1},
                    "long": {"value": "1" * 65},
                },
            }
        ]
    )
    assert isinstance(entry, kube_dra.SliceEntry)
    assert dict(entry.devices[0].capacity) == {"text": 2048, "number": 1024, "bare": 4096}


def test_the_childs_names_say_which_bound_they_broke() -> None:
    """R-O1: past 64 names a line too long is refused as too long (the line is judged before
    the count), and the empty line ends the names however many came before."""
    hosts = [f"h{n}" for n in range(64)]
    message = mint.names_message(hosts)
    with pytest.raises(ValueError, match="longer than 253"):
        mint.read_names(io.BytesIO(message[:-1] + b"h" * 254 + b"\n\n"))


def test_a_slice_that_names_its_node_reaches_only_that_node() -> None:
    """R-X6: a slice's `nodeName` decides where it is when set, before `allNodes`: one naming
    another node is not this node's, whatever else it says."""
    obj = _slice("s", [{"name": "d0"}])
    obj["spec"] |= {"nodeName": "node-2", "allNodes": True}
    assert kube_dra.parse_slice(obj, NODE) is None
    obj["spec"] |= {"nodeName": "", "allNodes": True}
    assert isinstance(kube_dra.parse_slice(obj, NODE), kube_dra.SliceEntry)


def test_devices_that_are_no_list_are_malformed_whatever_their_size() -> None:
    """R-X6: `devices` that is no list is a malformed slice (judged before it is counted): a
    number, or a string of 200 characters, is not 200 devices."""
    for devices in (7, "d" * 200, {"d": 1}):
        refused = kube_dra.parse_slice(_slice("s", cast(Any, devices)), NODE)
        assert isinstance(refused, kube_dra.RefusedSlice), devices
        assert refused.reason == "malformed", devices


class _Held:
    """An API server whose TokenReviews wait until `go` is set."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.reviews = 0

    def create(self, path: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        if path == access.TOKEN_REVIEWS:
            self.reviews += 1
            self.go.wait(10)
            return {"status": {"authenticated": True, "user": {"username": "someone"}}}
        return {"status": {"allowed": True}}


def test_a_request_for_a_token_under_review_joins_it_without_a_new_start() -> None:
    """R-X4: a token already being reviewed is answered by that review: the second request
    waits for it, takes nothing from the bucket of new starts (here 1) and is never refused."""
    api, refusals = _Held(), []
    reviewer = access.Reviewer(
        cast(KubeClient, api),
        new_burst=1,
        new_per_second=0.001,
        refused=refusals.append,
        clock=_Clock(),
    )

    async def scenario() -> list[access.Verdict]:
        first = asyncio.create_task(reviewer.check("t", "/metrics"))
        while not api.reviews:  # the review started on its thread
            await asyncio.sleep(0.001)
        second = asyncio.create_task(reviewer.check("t", "/metrics"))
        await asyncio.sleep(0)
        api.go.set()
        return list(await asyncio.gather(first, second))

    verdicts = asyncio.run(scenario())
    assert [v.status for v in verdicts] == [200, 200]
    assert (api.reviews, refusals) == (1, [])


def test_the_guard_leaves_other_routes_and_methods_to_the_app() -> None:
    """R-X4: only a guarded route is the guard's: a POST to another path, and a scope that is
    no HTTP request, go to the app as they are (its own 404 or 405), never the guard's 405."""
    seen: list[tuple[str, str]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append((scope["type"], scope.get("path", "")))

    guard = access.Guard(app, routes={"/metrics"})

    async def send(message: Any) -> None:
        raise AssertionError(f"the guard answered: {message}")

    async def receive() -> Any:
        return {}

    asyncio.run(guard({"type": "http", "path": "/other", "method": "POST"}, receive, send))
    asyncio.run(guard({"type": "lifespan"}, receive, send))
    assert seen == [("http", "/other"), ("lifespan", "")]


def test_a_deadline_closes_a_silent_connection_once_and_leaves_a_closing_one_alone(
    server: Any,
) -> None:
    """R-X8: at its deadline a connection that never sent a byte is closed and counted
    `silent`; one already closing is neither counted nor closed again."""
    s = server()
    protocol, transport = s.connect()
    protocol._expired()
    assert transport.closed and s.registry.counters.refused["silent"] == 1
    protocol, transport = s.connect()
    transport.closed = True
    protocol._expired()
    assert s.registry.counters.refused["silent"] == 1


def test_a_header_section_past_its_bound_is_counted_oversized_once(server: Any) -> None:
    """R-X8: the header past the bound refuses the request (431, `oversized`); the fields
    after it are not judged again."""
    s = server()
    protocol, transport = s.connect()
    protocol.data_received(_request(b"X: " + b"v" * 40000, b"A: 1", b"B: 2", b"C: 3"))
    assert _status(transport) == b"431"
    assert s.registry.counters.refused["oversized"] == 1


def test_too_many_header_fields_are_refused_as_such_before_the_body_is_judged(
    server: Any,
) -> None:
    """R-X8: a request with too many fields is 431 `too_many_headers`, even when it also
    declares a body past 64 KiB; a CONNECT that declares one is 413 before it is 405."""
    s = server()
    protocol, transport = s.connect()
    fields = [b"H%d: v" % n for n in range(100)]
    protocol.data_received(_request(b"Content-Length: 70000", *fields))
    assert _status(transport) == b"431"
    assert s.registry.counters.refused["too_many_headers"] == 1
    assert s.registry.counters.refused["body"] == 0
    protocol, transport = s.connect()
    protocol.data_received(
        b"CONNECT x:443 HTTP/1.1\r\nHost: x:443\r\nContent-Length: 70000\r\n\r\n"
    )
    assert _status(transport) == b"413"


def test_a_fast_routes_get_with_a_body_past_64_kib_is_refused_and_not_answered(
    server: Any,
) -> None:
    """R-X8: the body bound holds on the fast path too: a GET of a fast route with a chunked
    body past 64 KiB is 413 (counted `body`), and the route's answer is never written after
    it."""
    s = server(Limits(), _Routes(5))
    protocol, transport = s.connect()
    body = b"10001\r\n" + b"b" * 65537 + b"\r\n0\r\n\r\n"
    protocol.data_received(_request(b"Host: x", b"Transfer-Encoding: chunked", target=b"/x") + body)
    assert _status(transport) == b"413"
    assert b"HTTP/1.1 200" not in transport.out
    assert s.registry.counters.refused["body"] == 1
    assert s.registry.counters.requests == {("other", 413): 1}  # /x is no route the agent names


def test_a_fast_routes_get_with_a_small_body_is_answered_and_the_body_dropped(
    server: Any,
) -> None:
    """R-X8: a GET of a fast route that carries a body within the bound is answered by the
    fast path; the body, which no route reads, is dropped."""
    s = server(Limits(), _Routes(5))
    protocol, transport = s.connect()
    protocol.data_received(_request(b"Host: x", b"Content-Length: 5", target=b"/x") + b"hello")
    assert transport.out.startswith(b"HTTP/1.1 200")
    assert transport.out.endswith(b"aaaaa")


def test_the_silent_and_stalled_grace_periods_hold_from_exactly_their_length(
    server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R-X8: past the bound (2: one open connection and two accepted), room is made from a
    connection silent for exactly 1 s, else a handshake stalled for exactly 3 s (counted
    `handshakes`); a hair younger, none of them goes."""
    monkeypatch.setattr(http_module.time, "monotonic", lambda: 100.0)
    for age, goes in ((1.0, True), (0.999, False)):
        s = server(Limits(max_connections=2))
        s.connect()
        old, new = _Gate(s.registry), _Gate(s.registry)
        s.registry.waiting = cast(Any, {old: 100.0 - age, new: 100.0})
        s.registry.gate_room(cast(Any, new))
        assert (old.aborted, new.aborted) == (goes, False), age
        assert s.registry.counters.refused["handshakes"] == int(goes)
    for age, goes in ((3.0, True), (2.999, False)):
        s = server(Limits(max_connections=2))
        s.connect()
        stalled, new = _Gate(s.registry), _Gate(s.registry)
        s.registry.handshaking = cast(Any, {stalled: 100.0 - age})
        s.registry.waiting = cast(Any, {new: 100.0})
        s.registry.gate_room(cast(Any, new))
        assert (stalled.aborted, new.aborted) == (goes, False), age


def test_an_open_connection_that_never_spoke_for_exactly_1_s_makes_room(
    server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R-X8: at the bound, an open connection that finished its handshake and has sent nothing
    for exactly 1 s is aborted to make room (`shed_idle`)."""
    clock = [100.0]
    monkeypatch.setattr(http_module.time, "monotonic", lambda: clock[0])
    s = server(Limits(max_connections=1))
    _, mute = s.connect()
    clock[0] = 101.0
    newcomer = _Gate(s.registry)
    s.registry.waiting[cast(Any, newcomer)] = 101.0
    s.registry.gate_room(cast(Any, newcomer))
    assert mute.aborted and not newcomer.aborted
    assert s.registry.counters.refused["shed_idle"] == 1


# -- self-metrics: counts in the round they describe (R-X8) --------------------------------------


def test_rounds_total_counts_the_round_that_publishes_it() -> None:
    """R-X8: `rounds_total` includes the round it is published with: 1 in the first round's
    exposition, 2 in the second's, never a round behind."""
    monitor = Monitor(
        [BackendWorker(StaticBackend())],
        period=15.0,
        deadline=2.0,
        liveness_timeout=30.0,
        node="n1",
        own=SelfMetrics(HttpCounters()).families,
    )
    try:
        seen = []
        for _ in range(2):
            monitor.run_round()
            text = monitor.current.metrics.plain.decode()
            (total,) = (
                s.value
                for f in text_string_to_metric_families(text)
                for s in f.samples
                if s.name == "gpustack_device_manager_rounds_total"
            )
            seen.append(total)
        assert seen == [1.0, 2.0]
    finally:
        monitor.stop()


def test_accept_encoding_codings_may_carry_spaces() -> None:
    """R-E1: Accept-Encoding's codings may carry spaces around them and before their
    parameters (`gzip ;q=0.5`): still gzip; `q=0` with spaces still refuses it."""
    assert accepts_gzip("deflate , gzip ;q=0.5") is True
    assert accepts_gzip("gzip ; q = 0") is False


def test_a_target_refused_in_its_middle_is_counted_under_other(server: Any) -> None:
    """R-X8: a refusal is labelled by its route only when its target arrived whole: a target
    whose part past the header bound comes in a later read (`/metrics` and then 40,000 bytes
    more) is 431 under `other`, not under the route its first part spells; a target that
    arrived whole before its headers broke the bound keeps its route."""
    s = server()
    protocol, transport = s.connect()
    protocol.data_received(b"GET /metrics")
    protocol.data_received(b"a" * 40000)
    assert _status(transport) == b"431"
    assert s.registry.counters.requests == {("other", 431): 1}
    protocol, transport = s.connect()
    protocol.data_received(_request(b"X: " + b"v" * 40000, target=b"/metrics"))
    assert _status(transport) == b"431"
    assert s.registry.counters.requests == {("other", 431): 1, ("/metrics", 431): 1}


# -- DRA health (issue 42): DeviceTaintRules held and refused, reasons bounded (R-X6) ---------

_RMA = {"key": "example.com/maintenance", "value": "hbm-rma", "effect": "NoExecute"}


def _rule(name: str, selector: dict[str, Any] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"taint": _RMA}
    if selector is not None:
        spec["deviceSelector"] = selector
    return {"kind": "DeviceTaintRule", "metadata": {"name": name}, "spec": spec}


def test_1024_taint_rules_are_held_and_the_1025th_refused_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """R-X6: the cluster's DeviceTaintRules are held up to exactly 1,024; the 1,025th is refused
    (counted, logged once by its name), and listing the same rules again counts it again
    without logging it again. A rule named again replaces its own entry at the bound."""
    caplog.set_level(logging.INFO, "devicemanager.kube.dra")
    reflector = kube_dra.RuleReflector(cast(KubeClient, None))
    rules = [_rule(f"r{n:04d}", {"device": f"gpu-{n}"}) for n in range(1025)]
    reflector.replace_all(rules, "1")
    held = reflector.rules()
    assert len(held) == 1024 and held[-1].name == "r1023"
    assert reflector.refused == 1
    logged = [r for r in caplog.records if r.getMessage() == "a device taint rule is not applied"]
    assert [getattr(r, "rule", None) for r in logged] == ["r1024"]
    reflector.replace_all(rules, "2")
    assert reflector.refused == 2 and len(reflector.rules()) == 1024
    again = [r for r in caplog.records if r.getMessage() == "a device taint rule is not applied"]
    assert len(again) == 1  # the same rule refused again: counted, not logged again


def test_refused_taint_rules_are_logged_by_name_up_to_1024_names(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """R-X6: rules the agent cannot apply (no selector) are each logged once by name, for at
    most 1,024 names; the 1,025th is counted, not logged."""
    caplog.set_level(logging.INFO, "devicemanager.kube.dra")
    reflector = kube_dra.RuleReflector(cast(KubeClient, None))
    reflector.replace_all([_rule(f"n{n:04d}", None) for n in range(1025)], "1")
    assert reflector.rules() == () and reflector.refused == 1025
    logged = [r for r in caplog.records if r.getMessage() == "a device taint rule is not applied"]
    assert len(logged) == 1024
    assert getattr(logged[-1], "rule", None) == "n1023"


def test_a_rule_is_read_up_to_64_kib() -> None:
    """R-X6: one DeviceTaintRule's JSON is read up to 64 KiB (65,536 bytes), as
    docs/kubernetes.md states; a longer one is refused whole by the list and the watch."""
    assert kube_dra.MAX_RULE_BYTES == 65_536


def test_a_cards_reason_from_dra_and_the_kubelet_is_cut_at_1024_characters() -> None:
    """R-X6: the reasons DRA and the kubelet give a card, joined, are at most 1,024
    characters; under that they are whole."""
    assert len(dra.joined("a" * 700, "b" * 700)) == 1024
    assert dra.joined("a" * 700, "b" * 323) == "a" * 700 + "," + "b" * 323  # 1,024 exactly


def test_a_tainted_device_that_names_no_card_taints_nothing() -> None:
    """R-X6: a device whose taint the slices carry but which names no card the libraries know
    is left out of the cards' taints (the taint of a device the agent cannot place)."""
    taint = dra.DeviceTaint("example.com/maintenance", "hbm-rma", "NoExecute")
    device = DraDevice(DRIVER, "pool", "d0", MappingProxyType({"uuid": "nowhere"}), taints=(taint,))
    placed = DraDevice(DRIVER, "pool", "d1", MappingProxyType({"uuid": "card-a"}), taints=(taint,))
    aliases = {("acme", "card-a"): "card-a"}
    assert dra.card_taints(inventory_of([device]), aliases) == {}
    assert dra.card_taints(inventory_of([device, placed]), aliases) == {
        ("acme", "card-a"): (taint,)
    }
