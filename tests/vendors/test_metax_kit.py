"""MetaX on the fake-library kit: our ctypes structs against gcc's layout of our C declarations,
and the faults every vendor's fake expresses the same way (tests/fakelib/fakelib.h), through our
real ctypes layer."""

from __future__ import annotations

import ctypes
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from devicemanager.backend import BackendUnavailable
from devicemanager.model import BackendState, ReadRequest, Reason
from tests.conftest import REPO, agent_env
from tests.fakelib import ctypes_layout, layout
from tests.fakelib import metax as fake
from tests.fakelib.metax import scenarios
from tests.vendors import kit
from tests.world import gpu
from vendors import _metax_lib as mx
from vendors.metax import MetaxBackend

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def libmxsml() -> Path:
    why = fake.missing()
    if why:
        pytest.skip(f"the fake libmxsml cannot be built here: {why}")
    return fake.built()


@pytest.fixture
def scenario(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    def _write(devices: list[dict[str, Any]], processes: Any = (), **top: Any) -> Path:
        path = fake.write(tmp_path / "scenario.txt", devices, processes, **top)
        monkeypatch.setenv(fake.SCENARIO_ENV, str(path))
        return path

    return _write


def backend(lib: Path) -> MetaxBackend:
    return MetaxBackend({"mxsml": str(lib)}, node_name="n1")


def rounds(lib: Path, request: ReadRequest, n: int = 1) -> list[Any]:
    b = backend(lib)
    b.open()
    try:
        return [b.parse(b.read(request)) for _ in range(n)]
    finally:
        b.close()


# -- ABI ----------------------------------------------------------------------------------------

STRUCTS: dict[str, tuple[type[ctypes.Structure], list[str]]] = {
    "mxSmlDeviceInfo_t": (
        mx.DeviceInfo,
        ["deviceId", "type", "bdfId", "gpuId", "nodeId", "uuid", "brand", "mode", "deviceName"],
    ),
    "mxSmlMemoryInfo_t": (
        mx.MemoryInfo,
        ["visVramTotal", "visVramUse", "vramTotal", "vramUse", "xttTotal", "xttUse"],
    ),
    "mxSmlBoardWayElectricInfo_t": (mx.BoardWayElectricInfo, ["voltage", "current", "power"]),
    "mxSmlProcessGpuInfo_t": (mx.ProcessGpuInfo, ["bdfId", "gpuId", "gpuMemoryUsage"]),
    "mxSmlProcessGpuInfo_v2_t": (
        mx.ProcessGpuInfoV2,
        ["bdfId", "gpuId", "gpuMemoryUsage", "dieId"],
    ),
    "mxSmlProcessGpuInfo_v3_t": (
        mx.ProcessGpuInfoV3,
        ["bdfId", "gpuId", "gpuMemoryUsage", "dieId", "sgpuId"],
    ),
    "mxSmlProcessInfo_t": (
        mx.ProcessInfo,
        ["processId", "processName", "gpuNumber", "processGpuInfo"],
    ),
    "mxSmlProcessInfo_v2_t": (
        mx.ProcessInfoV2,
        ["processId", "processName", "gpuNumber", "processGpuInfo"],
    ),
    "mxSmlProcessInfo_v3_t": (
        mx.ProcessInfoV3,
        ["processId", "processName", "gpuNumber", "processGpuInfo"],
    ),
    "mxSmlSgpuInfo_t": (
        mx.SgpuInfo,
        [
            "parentDeviceId",
            "sgpuId",
            "vramQuota",
            "swQueuePriority",
            "computeQuota",
            "minor",
            "deviceQueuePriority",
            "uuid",
        ],
    ),
    "mxSmlSgpuMemoryInfo_t": (mx.SgpuMemoryInfo, ["total", "used", "free"]),
    "mxSmlEccErrorCount_t": (
        mx.EccErrorCount,
        ["sramCE", "sramUE", "dramCE", "dramUE", "retiredPage"],
    ),
}


def test_our_ctypes_structs_are_laid_out_as_gcc_lays_out_our_declarations(tmp_path: Path) -> None:
    if why := fake.missing():
        pytest.skip(why)
    got = layout(
        '#include "mxsml.h"',
        {name: fields for name, (_, fields) in STRUCTS.items()},
        includes=[fake.HERE],
        directory=tmp_path,
    )
    for name, (struct, _) in STRUCTS.items():
        assert ctypes_layout(struct) == got[name], name
    if ctypes.sizeof(ctypes.c_long) == 8:  # the sizes MetaX's header gives for x86-64 (LP64)
        assert got["mxSmlProcessGpuInfo_t"].size == 48
        assert got["mxSmlProcessInfo_t"].size == 3144
        assert got["mxSmlProcessInfo_v2_t"].size == 3656
        assert got["mxSmlProcessInfo_v3_t"].size == 3656
        assert got["mxSmlDeviceInfo_t"].size == 184
        assert got["mxSmlEccErrorCount_t"].size == 20  # five unsigned counts (R-X7)


def test_every_entry_point_we_declare_is_in_our_header_and_exported_by_the_fake(
    libmxsml: Path,
) -> None:
    header = (fake.HERE / "mxsml.h").read_text()
    declared = set(re.findall(r"\b(mxSml\w+)\(", header))
    assert set(mx.PROTOTYPES) == declared
    exported = subprocess.run(
        ["nm", "-D", "--defined-only", str(libmxsml)], capture_output=True, text=True, check=True
    ).stdout
    assert {line.split()[-1] for line in exported.splitlines()} >= set(mx.PROTOTYPES)


# -- the kit's common faults ---------------------------------------------------------------------


@pytest.mark.parametrize(("code", "words"), [(fake.FAILURE, "Failure"), (26, "Unknown error")])
def test_a_library_that_cannot_initialise_makes_the_backend_unavailable(
    libmxsml: Path, scenario, code: int, words: str
) -> None:  # type: ignore[no-untyped-def]
    scenario([fake.card(gpu(0))], init=code)
    with pytest.raises(BackendUnavailable, match=f"MXSML could not be initialised: {words}"):
        backend(libmxsml).open()


def test_a_node_without_cards_reads_no_cards(libmxsml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario([])  # mxSmlInit answers NoDevice: the library works and found nothing
    (reading,) = rounds(libmxsml, ReadRequest())
    assert reading.cards == () and reading.processes == () and reading.partitions == ()


def test_a_card_that_leaves_enumeration_is_gone_from_the_next_round(
    libmxsml: Path, scenario
) -> None:  # type: ignore[no-untyped-def]
    cards = [fake.card(gpu(n)) for n in range(3)]
    cards[1]["gone_after"] = 1  # round one's enumeration, then gone
    scenario(cards)
    first, second = rounds(libmxsml, ReadRequest(), n=2)
    assert [(c.id, c.index) for c in first.cards] == [(gpu(0), 0), (gpu(1), 1), (gpu(2), 2)]
    # Re-enumerated: the last card is now sequence index 1, and is named by its own UUID.
    assert [(c.id, c.index) for c in second.cards] == [(gpu(0), 0), (gpu(2), 1)]


def test_a_hung_call_costs_its_round_a_deadline_and_then_is_stuck(libmxsml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    scenario([fake.card(gpu(0))], hang={"mxSmlGetBoardPowerInfo": 0})
    monitor = kit.hung(backend(libmxsml))
    started = time.monotonic()
    first = monitor.run_round().snapshot
    second = monitor.run_round().snapshot
    assert time.monotonic() - started < 5
    assert [b.state for b in first.backends] == [BackendState.TIMEOUT]
    assert [b.state for b in second.backends] == [BackendState.STUCK]
    assert first.groups == () and second.groups == ()


def test_not_supported_and_permission_are_said_per_figure(libmxsml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    errors = {
        "mxSmlGetTemperatureInfo": fake.NOT_SUPPORTED,
        "mxSmlGetSingleGpuProcess_v3": fake.PERMISSION_DENIED,
    }
    scenario([fake.card(gpu(0), usage=40, errors=errors)], [fake.process(7001, (0, 1 << 30))])
    (reading,) = rounds(libmxsml, ReadRequest(carved_device_ids=frozenset({gpu(0)})))
    (card,) = reading.cards
    assert card.temperature_celsius is None and card.cores_utilization_percent == 40.0
    (answer,) = reading.processes
    assert answer.rows == () and answer.memory_reason is Reason.PERMISSION
    assert answer.cores_reason is Reason.UNSUPPORTED


def test_a_process_list_that_grows_is_read_again_or_truncated(libmxsml: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    carved = ReadRequest(carved_device_ids=frozenset({gpu(70)}))
    scenario(*scenarios.list_grows("once"))
    (once,) = rounds(libmxsml, carved)
    (answer,) = once.processes
    # 2 listed at the probe, 20 more started before the read: 2n+5 rows did not hold them.
    assert answer.memory_reason is None and len(answer.rows) == 22
    scenario(*scenarios.list_grows("always"))
    (always,) = rounds(libmxsml, carved)
    (answer,) = always.processes
    assert answer.memory_reason is Reason.TRUNCATED and answer.rows == ()
    assert answer.reads_truncated == 1  # never a partial list


def test_a_library_that_is_not_there_is_unavailable_not_a_crash() -> None:
    with pytest.raises(BackendUnavailable, match=r"^libmxsml\.so cannot be loaded$") as info:
        MetaxBackend({"mxsml": "/nonexistent/libmxsml.so"}).open()
    assert "/nonexistent" not in str(info.value)
    code = (
        "from vendors.metax import MetaxBackend\n"
        "from devicemanager.backend import BackendUnavailable\n"
        "try:\n    MetaxBackend().open()\n"
        "except BackendUnavailable as e:\n    print('unavailable', e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=agent_env({"LD_LIBRARY_PATH": "/nonexistent"}),
        cwd=REPO,
        check=True,
    )
    assert out.stdout.strip() == "unavailable libmxsml.so cannot be loaded"


def test_a_library_without_the_entry_points_we_need_is_unavailable(tmp_path: Path) -> None:
    if why := fake.missing():
        pytest.skip(why)
    source = tmp_path / "empty.c"
    source.write_text("int mxSmlSomethingElse(void) { return 0; }\n")
    lib = tmp_path / "libmxsml.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(source)], check=True)
    with pytest.raises(BackendUnavailable, match="does not export mxSmlInit, mxSmlGetDeviceCount"):
        MetaxBackend({"mxsml": str(lib)}).open()


def test_read_before_open_and_close_twice_are_harmless() -> None:
    b = MetaxBackend({"mxsml": "/nonexistent/libmxsml.so"})
    with pytest.raises(BackendUnavailable):
        b.read(ReadRequest())
    b.close()
    b.close()
