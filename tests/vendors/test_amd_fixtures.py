"""AMD payloads under fixtures/vendors/amd/: parse() table tests that need no compiler, a check
that each file is still exactly what read() records from the fake ROCm install
(UPDATE_GOLDEN=1 re-records them), and payloads of any shape never making parse() raise."""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devicemanager.agent.replay import load_recording
from devicemanager.model import ReadRequest, Reason, VendorReading
from tests.conftest import FIXTURES
from tests.fakelib import amd as fake
from tests.fakelib.amd import GIB, scenarios
from tests.vendors.shapes import parsed_or_refused
from vendors import amd

DIR = FIXTURES / "vendors" / "amd"
PERIOD = 15.0


def carved(*ids: str) -> ReadRequest:
    return ReadRequest(carved_device_ids=frozenset(ids))


CPX_PARENT = fake.gpustack_id(1)
ALL_720 = carved(fake.uuid_of(0), fake.uuid_of(1), fake.uuid_of(2, 0))

# name -> (scenario, request, rounds read (the last is recorded), facts parse() must find)
TABLE: dict[str, tuple[Callable[[], dict[str, Any]], ReadRequest, int, dict[str, Any]]] = {
    "mi300x-spx-first-round": (
        scenarios.spx_pair,
        carved(fake.uuid_of(0)),
        1,
        {
            "cards": 2,
            "rows": {fake.uuid_of(0): [(4101, 40 * GIB, None), (4102, 16 * GIB, None)]},
            "reasons": {fake.uuid_of(0): (None, Reason.NO_BASELINE)},
        },
    ),
    "mi300x-spx-engine-time": (
        scenarios.spx_pair,
        carved(fake.uuid_of(0)),
        2,
        {
            "cards": 2,
            # 3 s of engine time in 15 s; a KFD process's CUs: 76 of 304.
            "rows": {fake.uuid_of(0): [(4101, 40 * GIB, 20.0), (4102, 16 * GIB, 25.0)]},
            "reasons": {fake.uuid_of(0): (None, None)},
        },
    ),
    "mi300x-cpx-eight-xcps": (
        scenarios.cpx_eight_xcps,
        ReadRequest(
            carved_device_ids=frozenset({fake.uuid_of(1, 2)}),
            partition_ids=frozenset(
                {(CPX_PARENT, fake.uuid_of(1, 0)), (CPX_PARENT, fake.uuid_of(1, 1))}
            ),
        ),
        2,
        {
            "cards": 10,
            "rows": {fake.uuid_of(1, 2): [(5301, 8 * GIB, 50.0)]},
            "reasons": {fake.uuid_of(1, 2): (None, None)},
            "partitions": {
                fake.uuid_of(1, 0): (24_574, 20_480, 91.0),
                # N/A on its handle; the card's GPU metrics table states its own busy, 0.
                fake.uuid_of(1, 1): (24_574, 12, 0.0),
            },
        },
    ),
    "mi300x-cu-occupancy-invalid": (
        scenarios.cu_occupancy_invalid,
        carved(fake.uuid_of(0)),
        2,
        {
            "cards": 1,
            "rows": {
                fake.uuid_of(0): [
                    (6101, 10 * GIB, 32.89),
                    (6102, 10 * GIB, None),
                    (6103, 8 * GIB, 12.5),
                ]
            },
            "reasons": {fake.uuid_of(0): (None, None)},
        },
    ),
    "mi300x-process-list-truncated": (
        scenarios.out_of_resources,
        carved(fake.uuid_of(0)),
        1,
        {
            "cards": 2,
            "rows": {fake.uuid_of(0): []},
            "reasons": {fake.uuid_of(0): (Reason.TRUNCATED, Reason.TRUNCATED)},
        },
    ),
    "mi300x-device-lost": (
        scenarios.device_lost_mid_read,
        ReadRequest(),
        2,
        {"cards": 4, "unhealthy": {fake.uuid_of(2): "device_lost"}},
    ),
    "mi300x-device-lost-within-read": (
        scenarios.device_lost_within_read,
        carved(fake.uuid_of(0), fake.gpustack_id(1), fake.uuid_of(2)),
        2,
        {
            "cards": 3,
            "unhealthy": {fake.uuid_of(1): "device_lost", fake.uuid_of(2): "device_lost"},
            # Card 0's one process: engine time still, CUs not available.
            "rows": {fake.uuid_of(0): [(9500, GIB, None)], fake.uuid_of(1): []},
            "reasons": {
                fake.uuid_of(0): (None, None),
                fake.uuid_of(1): (Reason.TRANSIENT_DRIVER_ERROR, Reason.TRANSIENT_DRIVER_ERROR),
            },
        },
    ),
    "mi300x-ecc-uncorrectable": (
        scenarios.ecc_uncorrectable,
        ReadRequest(),
        1,
        {
            "cards": 2 + 2 * (1 + 8),
            "unhealthy": {
                fake.uuid_of(0): "ecc_uncorrectable",
                fake.gpustack_id(2): "ecc_uncorrectable",
                fake.uuid_of(2, 0): "ecc_uncorrectable",  # the XCP the board is read on
            },
        },
    ),
    "mi300x-rocm720-rocm-smi": (
        scenarios.rocm_720,
        ALL_720,
        1,
        {
            "cards": 11,
            "via": amd.VIA_ROCM_SMI,
            "rows": {
                fake.uuid_of(0): [(9101, 30 * GIB, 50.0), (9102, 2 * GIB, None)],
                fake.uuid_of(1): [(9201, 8 * GIB, 25.0)],
                fake.uuid_of(2, 0): [(9301, 3 * GIB, 50.0)],
            },
            "reasons": {fake.uuid_of(1): (None, None)},
        },
    ),
}


def recorded(name: str) -> dict[str, Any]:
    meta, payload = load_recording(DIR / f"{name}.json")
    assert meta["kind"] == "synthetic" and "tests/fakelib/amd" in meta["source"]
    return payload


def answers(reading: VendorReading) -> dict[str, Any]:
    return {a.device_id: a for a in reading.processes}


@pytest.mark.parametrize("name", sorted(TABLE))
def test_parse_over_the_fixture(name: str) -> None:
    _, _, _, facts = TABLE[name]
    reading = amd.parse(recorded(name))
    assert len(reading.cards) == facts["cards"]
    assert reading.via == facts.get("via", amd.VIA_AMDSMI)
    got = answers(reading)
    for device, rows in facts.get("rows", {}).items():
        assert [(r.pid, r.memory_bytes, r.cores_percent) for r in got[device].rows] == rows
    for device, reasons in facts.get("reasons", {}).items():
        assert (got[device].memory_reason, got[device].cores_reason) == reasons
    partitions = {p.id: p for p in reading.partitions}
    for pid, (total, used, cores) in facts.get("partitions", {}).items():
        assert (
            partitions[pid].memory_total_mib,
            partitions[pid].memory_used_mib,
            partitions[pid].cores_percent,
        ) == (total, used, cores)
        assert partitions[pid].parent_id == CPX_PARENT
    for card in reading.cards:
        assert card.unhealthy_reason == facts.get("unhealthy", {}).get(card.id)


def record(rocm_root: Path, name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    build, request, rounds, _ = TABLE[name]
    doc = build()
    monkeypatch.setenv(fake.SCENARIO_ENV, str(fake.write(tmp_path / "s.txt", doc)))
    ticks = iter(1000.0 + PERIOD * i for i in range(rounds))
    backend = amd.AmdBackend(
        {"amd_smi": str(rocm_root)},
        clock=lambda: next(ticks),
        sysfs=fake.sysfs(tmp_path / "sys", doc["devices"]),
    )
    backend.open()
    try:
        payloads = [backend.read(request) for _ in range(rounds)]
    finally:
        backend.close()
    return payloads[-1], build.__name__


@pytest.mark.parametrize("name", sorted(TABLE))
def test_the_fixture_is_what_read_records_from_the_fake(
    name: str, rocm_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    payload, scenario = record(rocm_root, name, tmp_path, monkeypatch)
    path = DIR / f"{name}.json"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        DIR.mkdir(parents=True, exist_ok=True)
        driver = amd.parse(payload).driver_version
        meta = {
            "kind": "synthetic",
            "manufacturer": "amd",
            "driver": driver,
            "sdk": "amdsmi 7.0.2",
            "rocm": payload["rocmVersion"],
            "source": "devicemanager read() over the fake ROCm install of tests/fakelib/amd "
            f"(fake_amdsmi.c through the amdsmi wheel), scenario {scenario}",
        }
        path.write_text(
            json.dumps({"meta": meta, "payload": payload}, indent=1, sort_keys=True) + "\n"
        )
    assert payload == recorded(name), f"{path} is stale; UPDATE_GOLDEN=1 re-records it"


# -- any payload ---------------------------------------------------------------------------------

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**64), 2**64)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from(["N/A", "", "0x", "GPU-", "zz", "7.2.0", "rocm_smi", "withheld"]),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(JSON)
def test_parse_never_raises_on_any_json(payload: Any) -> None:
    reading = parsed_or_refused(
        amd.parse, payload if isinstance(payload, dict) else {"sockets": payload}, "sockets"
    )
    assert reading is None or reading.manufacturer == "amd"


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


BASES = [recorded(n) for n in sorted(TABLE) if (DIR / f"{n}.json").exists()]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_parse_never_raises_on_a_damaged_recording(data: st.DataObject) -> None:
    if not BASES:
        pytest.skip("no recorded fixtures yet")
    doc = copy.deepcopy(data.draw(st.sampled_from(BASES)))
    for _ in range(data.draw(st.integers(1, 4))):
        paths = [p for p in _paths(doc) if p]
        path = data.draw(st.sampled_from(paths))
        parent = doc
        for step in path[:-1]:
            parent = parent[step]
        parent[path[-1]] = data.draw(JSON)
    reading = parsed_or_refused(amd.parse, doc, "sockets")
    if reading is None:
        return
    for card in reading.cards:
        assert card.id and isinstance(card.index, int)
    for answer in reading.processes:
        assert answer.memory_reason is None or answer.rows == ()
