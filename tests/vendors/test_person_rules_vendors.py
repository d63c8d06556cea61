"""Rules a person editing the AMD, Hygon and MetaX backends could break without another test
noticing, each pinned with a hand-written expected value (docs/vendors.md states them):

- which temperature sensor a card's temperature comes from when several answer (AMD: amdsmi
  HOTSPOT, else EDGE; Hygon: ROCm SMI edge, else junction), a sensor that does not answer being
  skipped, and no sensor at all being an absent figure, never 0;
- the amdsmi wheel's "N/A" strings (and the empty string) being absent: never a card's name,
  id, alias or bus id; and what Hygon and MetaX make of empty identity strings.

The payloads are hand-written in the shape each backend's read() records (see
fixtures/vendors/<vendor>/), then the same rules end to end: read() over the fake libraries of
tests/fakelib, the real amdsmi wheel turning the fake's empty strings into its "N/A".
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from devicemanager.model import Card, ReadRequest, VendorReading
from tests.fakelib import amd as fake_amd
from tests.fakelib import hygon as fake_hygon
from vendors import amd, hygon, metax
from vendors.amd import AmdBackend
from vendors.hygon import HygonBackend

NOT_SUPPORTED_AMD = {"error": "AmdSmiLibraryException", "code": 2}  # AMDSMI_STATUS_NOT_SUPPORTED
NOT_SUPPORTED_RSMI = {"error": "RSMI_STATUS_NOT_SUPPORTED", "code": 2}
UUID = "6dff74a1-0000-1000-80cc-d9c6eeb4c48a"
SERIAL = "0x904FCA081C59A9F1"
GPUSTACK_ID = "GPU-904fca081c59a9f1"
BDF = "0000:05:00.0"


# -- AMD: hand-written payloads in read()'s shape --------------------------------------------------


def amd_processor(index: int = 0, **over: Any) -> dict[str, Any]:
    """One processor as AmdBackend.read() records it (fixtures/vendors/amd), every figure
    answered, then `over` on top."""
    doc: dict[str, Any] = {
        "index": index,
        "amdsmi_get_gpu_device_uuid": UUID,
        "amdsmi_get_gpu_device_bdf": BDF,
        "amdsmi_get_gpu_bdf_id": 1280,
        "amdsmi_get_gpu_kfd_info": {"current_partition_id": 0, "kfd_id": 0, "node_id": 2},
        "amdsmi_get_gpu_enumeration_info": {"drm_card": 0, "drm_render": 128, "hip_id": 0},
        "amdsmi_get_gpu_asic_info": {
            "asic_serial": SERIAL,
            "market_name": "AMD Instinct MI300X",
            "num_compute_units": 304,
            "vendor_name": "Advanced Micro Devices Inc. [AMD/ATI]",
        },
        "amdsmi_get_gpu_compute_partition": "SPX",
        "amdsmi_get_gpu_vram_usage": {"vram_total": 196592, "vram_used": 61440},
        "amdsmi_get_gpu_activity": {"gfx_activity": 87, "mm_activity": 0, "umc_activity": 43},
        "amdsmi_get_gpu_driver_info": {"driver_name": "amdgpu", "driver_version": "6.12.12"},
        "board": True,
        "amdsmi_get_power_info": {"average_socket_power": "N/A", "current_socket_power": 612},
        "amdsmi_get_temp_metric": {"HOTSPOT": 71, "EDGE": 52},
        "amdsmi_get_gpu_total_ecc_count": {"correctable_count": 0, "uncorrectable_count": 0},
    }
    doc.update(over)
    return doc


def amd_payload(*sockets: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {
        "processPath": "amdsmi",
        "request": {"carved": [], "partitions": []},
        "rocmVersion": "7.0.2",
        "xcpPlatformDevices": {},
        "sockets": list(sockets),
        **top,
    }


def amd_socket(*processors: dict[str, Any], info: Any = "0000:05:00") -> dict[str, Any]:
    return {"amdsmi_get_socket_info": info, "processors": list(processors)}


def amd_whole_card(**over: Any) -> Card:
    (card,) = amd.parse(amd_payload(amd_socket(amd_processor(**over)))).cards
    return card


def amd_temperature(temps: Any) -> float | None:
    return amd_whole_card(amdsmi_get_temp_metric=temps).temperature_celsius


# -- 1. AMD: which sensor --------------------------------------------------------------------------


def test_amd_hotspot_answers_before_edge_when_both_do() -> None:
    """AMD card temperature (R-V2, R-V5): amdsmi's HOTSPOT (junction) sensor answers first,
    EDGE only where HOTSPOT does not; with both answering, different values, HOTSPOT's is the
    card's, on a whole card and on a partitioned card's physical entry (read on XCP 0)."""
    assert amd_temperature({"HOTSPOT": 88, "EDGE": 45}) == 88.0
    assert amd_temperature({"EDGE": 45, "HOTSPOT": 88}) == 88.0  # the order of the keys is not it
    xcp0 = amd_processor(0, amdsmi_get_temp_metric={"HOTSPOT": 91, "EDGE": 47})
    xcp1 = amd_processor(
        1,
        amdsmi_get_gpu_device_uuid="6dff74a1-0000-1000-80cc-d9c6eeb4c48b",
        amdsmi_get_gpu_kfd_info={"current_partition_id": 1},
        board=False,
    )
    for key in ("board", "amdsmi_get_temp_metric", "amdsmi_get_power_info"):
        xcp1.pop(key)
    cards = {c.id: c for c in amd.parse(amd_payload(amd_socket(xcp0, xcp1))).cards}
    assert cards[GPUSTACK_ID].temperature_celsius == 91.0
    assert [c.temperature_celsius for c in cards.values() if c.parent_id] == [None, None]


@pytest.mark.parametrize(
    "hotspot",
    [
        NOT_SUPPORTED_AMD,  # the sensor is not there: amdsmi raises, read() writes the failure
        "N/A",  # the wheel's word for a value it does not have
        None,  # JSON null
        float("nan"),
        True,  # a bool is not a temperature
    ],
    ids=["not-supported", "N/A", "null", "nan", "bool"],
)
def test_amd_edge_answers_where_hotspot_does_not(hotspot: Any) -> None:
    """AMD card temperature (R-V2, R-V5, R-F1): a HOTSPOT that answers no number (not
    supported, "N/A") is skipped, not read as 0, and EDGE answers; a HOTSPOT never asked
    (absent from the payload) likewise."""
    assert amd_temperature({"HOTSPOT": hotspot, "EDGE": 45}) == 45.0
    assert amd_temperature({"EDGE": 45}) == 45.0


@pytest.mark.parametrize(
    "temps",
    [
        {"HOTSPOT": NOT_SUPPORTED_AMD, "EDGE": NOT_SUPPORTED_AMD},
        {"HOTSPOT": "N/A", "EDGE": "N/A"},
        {},
        NOT_SUPPORTED_AMD,  # a damaged payload: the whole entry a failure
    ],
    ids=["not-supported", "N/A", "none-asked", "failed"],
)
def test_amd_temperature_is_absent_when_no_sensor_answers(temps: Any) -> None:
    """AMD card temperature (R-V2, R-F1): no sensor answering is an absent temperature (None),
    never 0 °C; the card's other figures are unaffected."""
    card = amd_whole_card(amdsmi_get_temp_metric=temps)
    assert card.temperature_celsius is None
    assert (card.power_usage_watts, card.memory_used_mib) == (612.0, 61440)


# -- 2. AMD: the wheel's "N/A" strings -------------------------------------------------------------


@pytest.mark.parametrize("na", ["N/A", ""], ids=["N/A", "empty"])
def test_amd_na_identity_strings_are_absent_not_names_or_ids(na: str) -> None:
    """amdsmi "N/A" strings (R-V5, R-V2): a whole card whose market name, ASIC serial, PCI
    address (bdf), socket, partition mode and driver version all answer "N/A" (or the empty
    string the wheel leaves for some) has no name, no GPUStack `GPU-<serial>` alias, no bus-id
    alias and no driver version; its canonical id is still its amdsmi UUID."""
    doc = amd_processor(
        amdsmi_get_gpu_device_bdf=na,
        amdsmi_get_gpu_compute_partition=na,
        amdsmi_get_gpu_driver_info={"driver_name": na, "driver_version": na},
    )
    doc["amdsmi_get_gpu_asic_info"].update(market_name=na, asic_serial=na, vendor_name=na)
    reading = amd.parse(amd_payload(amd_socket(doc, info=na)))
    (card,) = reading.cards
    assert card.id == UUID
    assert card.name is None
    assert card.aliases == ()
    assert dict(card.address) == {"socket": 0}
    assert reading.driver_version is None
    # Each field alone: the others still answer.
    bdf_na = amd_processor(amdsmi_get_gpu_device_bdf=na)
    serial_na = amd_processor()
    serial_na["amdsmi_get_gpu_asic_info"]["asic_serial"] = na
    name_na = amd_processor()
    name_na["amdsmi_get_gpu_asic_info"]["market_name"] = na
    ((b,), (s,), (n,)) = (
        amd.parse(amd_payload(amd_socket(d))).cards for d in (bdf_na, serial_na, name_na)
    )
    assert (b.aliases, b.name) == ((GPUSTACK_ID,), "AMD Instinct MI300X")
    assert (s.aliases, s.name) == ((BDF,), "AMD Instinct MI300X")
    assert (n.aliases, n.name) == ((GPUSTACK_ID, BDF), None)


def test_amd_na_uuid_falls_back_to_the_known_uuid_else_no_card() -> None:
    """amdsmi "N/A" strings (R-V5, R-V2): a processor whose UUID answers "N/A" (or "") is named
    by the UUID it answered in an earlier round (`known`, which read() keeps); without one it
    is left out, never a card with id "N/A" nor one named by its serial or bus id."""
    for na in ("N/A", ""):
        nameless = amd_processor(amdsmi_get_gpu_device_uuid=na)
        assert amd.parse(amd_payload(amd_socket(nameless))).cards == ()
        remembered = amd_processor(amdsmi_get_gpu_device_uuid=na, known={"uuid": UUID})
        (card,) = amd.parse(amd_payload(amd_socket(remembered))).cards
        assert (card.id, card.aliases) == (UUID, (GPUSTACK_ID, BDF))


def test_amd_partitioned_card_named_by_serial_then_socket_never_na() -> None:
    """amdsmi "N/A" strings (R-V5, R-V4): a partitioned card's own id is GPUStack's
    `GPU-<ASIC serial>`, else (serial "N/A") `socket-<socket info>`, else (both "N/A") there is
    no physical card and its XCPs name no parent; an XCP whose bdf is "N/A" has no bus-id
    alias, and a partition mode "N/A" is no `compute_partition` address."""

    def xcps(serial: str, bdf: str = BDF, mode: str = "CPX") -> list[dict[str, Any]]:
        out = []
        for k in range(2):
            doc = amd_processor(
                k,
                amdsmi_get_gpu_device_uuid=f"6dff74a1-0000-1000-80cc-d9c6eeb4c4{k:02x}",
                amdsmi_get_gpu_device_bdf=bdf if k == 0 else f"0000:05:00.{k}",
                amdsmi_get_gpu_kfd_info={"current_partition_id": k},
                amdsmi_get_gpu_compute_partition=mode,
                board=k == 0,
            )
            doc["amdsmi_get_gpu_asic_info"]["asic_serial"] = serial
            out.append(doc)
        return out

    def physical(socket: dict[str, Any]) -> tuple[Card | None, list[Card]]:
        cards = amd.parse(amd_payload(socket)).cards
        tops = [c for c in cards if "xcp" not in dict(c.address)]
        return (tops[0] if tops else None), [c for c in cards if c not in tops]

    card, parts = physical(amd_socket(*xcps(SERIAL), info="0000:05:00"))
    assert card is not None and card.id == GPUSTACK_ID  # the serial first, the socket after
    assert dict(card.address) == {"socket": 0, "compute_partition": "CPX"}
    card, parts = physical(amd_socket(*xcps("N/A", bdf="N/A", mode="N/A"), info="0000:05:00"))
    assert card is not None and card.id == "socket-0000:05:00"
    assert dict(card.address) == {"socket": 0} and card.name == "AMD Instinct MI300X"
    assert [p.parent_id for p in parts] == ["socket-0000:05:00"] * 2
    assert parts[0].aliases == ()  # its bdf "N/A": no bus-id alias, and no serial on an XCP
    assert parts[1].aliases == ("0000:05:00.1",)
    card, parts = physical(amd_socket(*xcps("N/A"), info="N/A"))
    assert card is None
    assert [p.parent_id for p in parts] == [None, None]
    assert all("N/A" not in (p.id, *p.aliases) for p in parts)


# -- 1. Hygon: which sensor ------------------------------------------------------------------------


def hygon_device(**over: Any) -> dict[str, Any]:
    """One card as HygonBackend.read() records it (fixtures/vendors/hygon), then `over`."""
    doc: dict[str, Any] = {
        "index": 0,
        "rsmi_dev_unique_id_get": 0x7E8F00112233447A,
        "rsmi_dev_pci_id_get": 0x0300,
        "rsmi_dev_name_get": "K100_AI",
        "rsmi_dev_serial_number_get": "HCU0000K1A",
        "rsmi_dev_memory_total_get": 68_702_699_520,
        "rsmi_dev_memory_usage_get": 55_834_574_848,
        "rsmi_dev_busy_percent_get": 97,
        "rsmi_dev_temp_metric_get": {"edge": 71_000},
        "rsmi_dev_power_get": {"power": 286_000_000, "type": 1},
        "rsmi_dev_ecc_count_get": {"correctable_err": 0, "uncorrectable_err": 0},
    }
    doc.update(over)
    return doc


def hygon_card(**over: Any) -> Card:
    payload = {"rsmi_version_str_get": "6.3.8-V1.11.0", "devices": [hygon_device(**over)]}
    (card,) = hygon.parse(payload).cards
    return card


def hygon_temperature(temps: Any) -> float | None:
    return hygon_card(rsmi_dev_temp_metric_get=temps).temperature_celsius


def test_hygon_edge_answers_before_junction_when_both_do() -> None:
    """Hygon card temperature (R-V2, R-V5): ROCm SMI's edge sensor answers first, junction only
    where edge does not; with both answering, different values, edge's is the card's
    (millidegrees → °C)."""
    assert hygon_temperature({"edge": 51_500, "junction": 78_250}) == 51.5
    assert hygon_temperature({"junction": 78_250, "edge": 51_500}) == 51.5


@pytest.mark.parametrize(
    "edge",
    [NOT_SUPPORTED_RSMI, {"error": "RSMI_STATUS_FILE_ERROR", "code": 3}, None, "N/A", True],
    ids=["not-supported", "file-error", "null", "string", "bool"],
)
def test_hygon_junction_answers_where_edge_does_not(edge: Any) -> None:
    """Hygon card temperature (R-V2, R-V5, R-F1): an edge sensor that answers no number is
    skipped, not read as 0, and junction answers; an edge never recorded likewise."""
    assert hygon_temperature({"edge": edge, "junction": 78_250}) == 78.25
    assert hygon_temperature({"junction": 78_250}) == 78.25


@pytest.mark.parametrize(
    "temps",
    [
        {"edge": NOT_SUPPORTED_RSMI, "junction": NOT_SUPPORTED_RSMI},
        {"edge": NOT_SUPPORTED_RSMI},
        {},
        NOT_SUPPORTED_RSMI,
    ],
    ids=["both-unsupported", "junction-unasked", "none", "failed"],
)
def test_hygon_temperature_is_absent_when_no_sensor_answers(temps: Any) -> None:
    """Hygon card temperature (R-V2, R-F1): no sensor answering is an absent temperature, never
    0 °C; the card's other figures are unaffected."""
    card = hygon_card(rsmi_dev_temp_metric_get=temps)
    assert card.temperature_celsius is None
    assert (card.power_usage_watts, card.memory_total_mib) == (286.0, 65520)


# -- 2. Hygon and MetaX: empty identity strings ----------------------------------------------------


@pytest.mark.parametrize(
    ("serial", "alias"),
    [
        ("HCU0000K1A", "HCU-HCU0000K1A"),
        (" HCU0000K1A \n", "HCU-HCU0000K1A"),
        ("", None),
        ("  \t", None),
    ],
    ids=["plain", "padded", "empty", "blank"],
)
def test_hygon_empty_serial_is_no_alias_and_empty_name_no_name(
    serial: str, alias: str | None
) -> None:
    """Hygon identity strings (R-V2): the serial is stripped and an empty or blank one gives no
    HAMi `HCU-<serial>` alias (never `HCU-`); an empty name is no name. The canonical id
    (`GPU-<hex unique id>`), `DCU-<index>` and the bus id are unaffected."""
    card = hygon_card(rsmi_dev_serial_number_get=serial, rsmi_dev_name_get="")
    expected = ("DCU-0", *((alias,) if alias else ()), "0000:03:00.0")
    assert (card.id, card.aliases, card.name) == ("GPU-7e8f00112233447a", expected, None)


def metax_device(**info: Any) -> dict[str, Any]:
    """One card as MetaxBackend.read() records it (fixtures/vendors/metax), DeviceInfo fields
    replaced by `info`."""
    doc: dict[str, Any] = {
        "deviceId": 0,
        "mxSmlGetDeviceInfo": {
            "bdfId": "0000:0e:00.0",
            "brand": 2,
            "deviceId": 0,
            "deviceName": "MXC500",
            "gpuId": 1,
            "mode": 0,
            "uuid": "GPU-2000f09c-4358-ea45-1f11-e64f2bc15fdd",
        },
        "mxSmlGetDeviceState": 1,
        "mxSmlGetMemoryInfo": {"vramTotal": 67_108_864, "vramUse": 61_402_112},
        "mxSmlGetDeviceIpUsage": 87,
        "mxSmlGetTemperatureInfo": 5243,
    }
    doc["mxSmlGetDeviceInfo"].update(info)
    return doc


def test_metax_empty_identity_strings_are_absent() -> None:
    """MetaX identity strings (R-V2): an empty name is no name, an empty BDF no `bdf` address,
    an empty UUID no card at all (it cannot be named); an sGPU that gives an empty UUID is named
    `<card>/sgpu<n>`, and an empty alias or annotations id is no alias."""
    (card,) = metax.parse({"node": "n1", "devices": [metax_device(deviceName="", bdfId="")]}).cards
    assert (card.id, card.name, card.address) == (
        "GPU-2000f09c-4358-ea45-1f11-e64f2bc15fdd",
        None,
        (),
    )
    assert card.aliases == ("n1-metax-0",)
    assert metax.parse({"node": "n1", "devices": [metax_device(uuid="")]}).cards == ()
    device = metax_device()
    device["sgpu"] = {
        "mxSmlGetSgpuToggle": 1,
        "sgpus": [
            {
                "sgpuId": 0,
                "mxSmlGetSgpuInfo": {"uuid": ""},
                "mxSmlGetSgpuUsage": 2500,
                "mxSmlGetSgpuMemory": {"total": 8 << 30, "used": 1 << 30},
                "mxSmlGetSgpuAlias": "",
                "mxSmlGetSgpuAnnotationsId": "",
            }
        ],
    }
    (part,) = metax.parse({"node": "n1", "devices": [device]}).partitions
    assert (part.id, part.aliases) == ("GPU-2000f09c-4358-ea45-1f11-e64f2bc15fdd/sgpu0", ())


# -- end to end: read() over the fake libraries ----------------------------------------------------


@pytest.fixture
def amd_read(rocm_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """read() then parse() of one round over the fake ROCm install, the real wheel between."""

    def _read(devices: list[dict[str, Any]]) -> tuple[dict[str, Any], VendorReading]:
        doc = fake_amd.scenario(devices)
        monkeypatch.setenv(fake_amd.SCENARIO_ENV, str(fake_amd.write(tmp_path / "s.txt", doc)))
        sysfs = fake_amd.sysfs(tmp_path / "sys", doc["devices"])
        backend = AmdBackend({"amd_smi": str(rocm_root)}, clock=lambda: 1000.0, sysfs=sysfs)
        backend.open()
        try:
            payload = backend.read(ReadRequest())
        finally:
            backend.close()
        return payload, amd.parse(copy.deepcopy(payload))

    return _read


@pytest.mark.timeout(90)
def test_amd_read_asks_hotspot_then_edge_through_the_wheel(amd_read) -> None:  # type: ignore[no-untyped-def]
    """AMD card temperature end to end (R-V2, R-V6): read() asks amdsmi for HOTSPOT and EDGE on
    the board's processor; a card whose two sensors answer 88 and 45 °C is 88 °C, one without a
    HOTSPOT sensor (NOT_SUPPORTED) its EDGE's 45 °C, one with neither absent."""
    both = fake_amd.card(0, temp={"hotspot": 88, "edge": 45})
    edge = fake_amd.card(1, temp={"edge": 45})
    neither = fake_amd.card(2, temp={})
    payload, reading = amd_read([both, edge, neither])
    assert [c.temperature_celsius for c in reading.cards] == [88.0, 45.0, None]
    second = payload["sockets"][1]["processors"][0]["amdsmi_get_temp_metric"]
    assert second["HOTSPOT"]["code"] == amd.NOT_SUPPORTED and second["EDGE"] == 45


@pytest.mark.timeout(90)
def test_amd_wheel_na_for_an_empty_name_and_serial_is_absent(amd_read) -> None:  # type: ignore[no-untyped-def]
    """amdsmi "N/A" strings end to end (R-V5, R-V6): the library leaves the market name and the
    ASIC serial empty, the real wheel answers "N/A" for both, and the card has no name and no
    GPUStack alias; its UUID and PCI address still name it."""
    payload, reading = amd_read([fake_amd.card(0, market_name="", serial="")])
    asic = payload["sockets"][0]["processors"][0]["amdsmi_get_gpu_asic_info"]
    assert (asic["market_name"], asic["asic_serial"]) == ("N/A", "N/A")  # the wheel's word
    (card,) = reading.cards
    assert (card.id, card.name, card.aliases) == (fake_amd.uuid_of(0), None, ("0000:05:00.0",))


@pytest.fixture(scope="module")
def hygon_libs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    why = fake_hygon.missing()
    if why:
        pytest.skip(f"the fake Hygon libraries cannot be built here: {why}")
    built = fake_hygon.build(tmp_path_factory.mktemp("hygon-person-rules"))
    return {name: str(path) for name, path in built.items()}


@pytest.mark.timeout(90)
def test_hygon_read_asks_edge_then_junction(
    hygon_libs: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hygon card temperature end to end (R-V2, R-V6): read() asks ROCm SMI for the edge sensor
    and, only where it does not answer, the junction; a card whose sensors answer 51.5 and
    78.25 °C is 51.5 °C, one without edge its junction's 78.25 °C, one with neither absent."""
    cards = [
        fake_hygon.card(0x11, 0x03, temp=51_500, junction=78_250),
        fake_hygon.card(0x22, 0x23, temp=None, junction=78_250),
        fake_hygon.card(0x33, 0x43, temp=None),
    ]
    for key, value in fake_hygon.write(tmp_path / "scenario", fake_hygon.node(cards)).items():
        monkeypatch.setenv(key, value)
    backend = HygonBackend(hygon_libs, mig_config="/nonexistent")
    backend.open()
    try:
        payload = backend.read(ReadRequest())
    finally:
        backend.close()
    reading = hygon.parse(payload)
    assert [c.temperature_celsius for c in reading.cards] == [51.5, 78.25, None]
    first = payload["devices"][0]["rsmi_dev_temp_metric_get"]
    assert first == {"edge": 51_500}  # edge answered: junction is not asked


@pytest.mark.timeout(90)
def test_amd_boards_that_do_not_answer_their_uuid_each_read_their_own_violations(
    rocm_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(R-X7) The violation status is carried between rounds by the board's UUID: two boards
    that do not answer theirs share no entry. Each is asked every round, one second apart
    (inside the 5 s a UUID-keyed answer is kept), and each shows its own flags."""
    faults = {"amdsmi_get_gpu_device_uuid": fake_amd.NOT_SUPPORTED}
    doc = fake_amd.scenario(
        [
            fake_amd.card(0, faults=faults, violation={"ppt": 1, "hbm": 0}),
            fake_amd.card(1, faults=faults, violation={"ppt": 0, "hbm": 1}),
        ]
    )
    monkeypatch.setenv(fake_amd.SCENARIO_ENV, str(fake_amd.write(tmp_path / "s.txt", doc)))
    sysfs = fake_amd.sysfs(tmp_path / "sys", doc["devices"])
    ticks = iter(1000.0 + i for i in range(10))
    backend = AmdBackend({"amd_smi": str(rocm_root)}, clock=lambda: next(ticks), sysfs=sysfs)
    backend.open()
    try:
        payloads = [backend.read(ReadRequest()) for _ in range(2)]
    finally:
        backend.close()
    for n, payload in enumerate(payloads):
        boards = [s["processors"][0] for s in payload["sockets"]]
        assert [b["amdsmi_get_gpu_device_uuid"].get("code") for b in boards] == [2, 2]
        flags = [
            (b[amd.VIOLATIONS]["active_ppt_pwr"], b[amd.VIOLATIONS]["active_hbm_thrm"])
            for b in boards
        ]
        assert flags == [(True, False), (False, True)], n
        assert [b["violationReadAt"] for b in boards] == [1000.0 + n] * 2


@pytest.mark.timeout(90)
def test_amd_board_figures_come_from_the_xcp_of_partition_0_wherever_it_is_listed(
    rocm_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(R-X7) A CPX board's figures (power, temperature, ECC, violations) are read on the XCP
    whose partition id is 0, marked `board`, and on no other, even when the library lists it
    last: the card's power is that XCP's 402 W."""
    doc = fake_amd.scenario(list(reversed(fake_amd.cpx_card(0))))
    monkeypatch.setenv(fake_amd.SCENARIO_ENV, str(fake_amd.write(tmp_path / "s.txt", doc)))
    sysfs = fake_amd.sysfs(tmp_path / "sys", doc["devices"])
    backend = AmdBackend({"amd_smi": str(rocm_root)}, clock=lambda: 1000.0, sysfs=sysfs)
    backend.open()
    try:
        payload = backend.read(ReadRequest())
    finally:
        backend.close()
    (socket,) = payload["sockets"]
    processors = socket["processors"]
    assert [p["amdsmi_get_gpu_kfd_info"]["current_partition_id"] for p in processors] == [
        7,
        6,
        5,
        4,
        3,
        2,
        1,
        0,
    ]
    assert [p.get("board") for p in processors] == [None] * 7 + [True]
    assert ["amdsmi_get_power_info" in p for p in processors] == [False] * 7 + [True]


def test_nvidia_keeps_64_fatal_xid_codes_for_unhealthy_and_not_a_65th(
    libnvml: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(R-X7) A card keeps at most 64 XID codes that make it unhealthy (MAX_ERROR_CODES): of
    65 distinct fatal codes the first 64 are recorded, the 65th is counted under `other`."""
    from tests.fakelib import nvidia as fake_nvml
    from tests.world import gpu
    from vendors.nvidia import NvidiaBackend

    codes = list(range(1000, 1065))
    path = fake_nvml.write(tmp_path / "s.txt", "550.90.07", [fake_nvml.device(gpu(0), xids=codes)])
    monkeypatch.setenv("FAKE_NVML_SCENARIO", str(path))
    backend = NvidiaBackend({"nvml": str(libnvml)})
    backend.open()
    try:
        payload = backend.read(ReadRequest())
    finally:
        backend.close()
    (device,) = payload["devices"]
    assert device["xidCriticalErrors"] == list(range(1000, 1064))
    assert device["xidErrorCounts"]["other"] == 1


@pytest.mark.timeout(90)
def test_hygon_reads_4096_retired_pages_and_refuses_a_4097th(
    hygon_libs: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(R-X7) One read takes at most 4,096 retired-page records: a card with exactly 4,096
    has them all read, one with 4,097 is recorded as INSUFFICIENT_SIZE (its pages figures
    absent), never read past the bound."""
    cards = [
        fake_hygon.card(0x11, 0x03, pages=[0] * 4096),
        fake_hygon.card(0x22, 0x23, pages=[0] * 4097),
    ]
    for key, value in fake_hygon.write(tmp_path / "scenario", fake_hygon.node(cards)).items():
        monkeypatch.setenv(key, value)
    backend = HygonBackend(hygon_libs, mig_config="/nonexistent")
    backend.open()
    try:
        payload = backend.read(ReadRequest())
    finally:
        backend.close()
    at, over = (d["rsmi_dev_memory_reserved_pages_get"] for d in payload["devices"])
    assert at == [0] * 4096
    assert over["error"] == "RSMI_STATUS_INSUFFICIENT_SIZE"


def test_metax_a_lost_card_outranks_one_the_driver_marks_unavailable() -> None:
    """(R-X7) The unhealthy reason is the most severe signal: a card MXSML no longer finds is
    `device_lost` even when its last state also said not available."""
    from tests.vendors.test_metax_parse import only_card

    card = only_card(mxSmlGetDeviceState=0, mxSmlGetMemoryInfo={"error": "NoDevice", "code": 2})
    assert (card.unhealthy, card.unhealthy_reason) == (True, "device_lost")
