"""The fake-library kit (tests/fakelib): the scenario format, the faults every vendor's fake
shares, and the ABI probe, exercised through ctypes the way a vendor's fake is loaded."""

from __future__ import annotations

import ctypes
import threading
import time
from pathlib import Path

import pytest

from tests import fakelib
from tests.fakelib import FakeLibrary, flatten, layout, write_scenario

SELFTEST = FakeLibrary(
    source=fakelib.KIT / "selftest.c", soname="libkitselftest.so", scenario_env="KIT_SCENARIO"
)


def test_a_scenario_flattens_to_dotted_keys_with_list_lengths() -> None:
    doc = {
        "driver": "1.2",
        "init": 9,
        "devices": [{"uuid": "A", "lost": True, "faults": {"x": 3}}, {"uuid": "B", "n": None}],
    }
    assert list(flatten(doc)) == [
        ("driver", "1.2"),
        ("init", "9"),
        ("devices.#", "2"),
        ("devices.0.uuid", "A"),
        ("devices.0.lost", "1"),
        ("devices.0.faults.x", "3"),
        ("devices.1.uuid", "B"),
    ]
    with pytest.raises(ValueError, match="tab or a newline"):
        list(flatten({"name": "two\nlines"}))


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    if why := SELFTEST.missing():
        pytest.skip(f"the kit's fake cannot be built here: {why}")
    lib = ctypes.CDLL(str(SELFTEST.build(tmp_path_factory.mktemp("kit"))))
    for name in ("kit_str",):
        getattr(lib, name).restype = ctypes.c_char_p
    lib.kit_int.restype = ctypes.c_longlong
    lib.kit_int.argtypes = [ctypes.c_char_p, ctypes.c_longlong]
    return lib


def load(kit: ctypes.CDLL, tmp: Path, monkeypatch: pytest.MonkeyPatch, doc: dict) -> int:  # type: ignore[type-arg]
    monkeypatch.setenv("KIT_SCENARIO", str(write_scenario(tmp / "kit.txt", doc)))
    return int(kit.kit_init())


def test_values_lists_and_init_codes(
    kit: ctypes.CDLL, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KIT_SCENARIO", raising=False)
    assert kit.kit_init() == -1  # no scenario: the fake says its driver is not there
    doc = {"init": 9, "devices": [{"uuid": "GPU-a", "memory": 1 << 40}, {"uuid": "GPU-b"}]}
    assert load(kit, tmp_path, monkeypatch, doc) == 9  # driver not loaded, as NVML's code 9
    assert kit.kit_count(b"devices") == 2
    assert kit.kit_str(b"devices.1.uuid") == b"GPU-b"
    assert kit.kit_str(b"devices.2.uuid") == b"(absent)"
    assert kit.kit_int(b"devices.0.memory", -1) == 1 << 40
    assert kit.kit_int(b"devices.1.memory", -1) == -1
    assert load(kit, tmp_path, monkeypatch, {"devices": []}) == 0
    assert kit.kit_count(b"devices") == 0  # a node without devices


def test_faults_per_entry_point_and_per_device(
    kit: ctypes.CDLL, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = {
        "faults": {"getPower": 3},
        "devices": [{"faults": {"getProcesses": 4}}, {}],
    }
    load(kit, tmp_path, monkeypatch, doc)
    assert kit.kit_fault(b"getProcesses", 0) == 4  # no permission on card 0 only
    assert kit.kit_fault(b"getProcesses", 1) == 0
    assert kit.kit_fault(b"getPower", 1) == 3  # not supported anywhere
    assert kit.kit_fault(b"getPower", -1) == 3
    assert kit.kit_fault(b"getName", 0) == 0


def test_a_device_lost_mid_read_and_one_that_leaves_enumeration(
    kit: ctypes.CDLL, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = {"devices": [{"lost_after": 2}, {"gone_after": 1}, {"lost": True}]}
    load(kit, tmp_path, monkeypatch, doc)
    assert [kit.kit_identity(0) for _ in range(3)] == [0, 0, 1]
    assert kit.kit_identity(2) == 1  # lost from the start
    assert [kit.kit_devices() for _ in range(3)] == [3, 2, 2]
    load(kit, tmp_path, monkeypatch, doc)  # a re-init starts the counts over
    assert kit.kit_identity(0) == 0 and kit.kit_devices() == 3


def test_a_process_list_that_grows_between_probe_and_read(
    kit: ctypes.CDLL, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    load(kit, tmp_path, monkeypatch, {"devices": [{"grow": 10}, {"grow": 1, "grow_always": 1}]})
    # Once: the probe sees the 2 listed, the read finds 10 more, which then stay.
    assert kit.kit_extra_rows(0, 0, 2, 0) == 0
    assert kit.kit_extra_rows(0, 1, 2, 2) == 10
    assert kit.kit_extra_rows(0, 0, 2, 0) == 10
    # Always: whatever room a read has, one more than that.
    assert kit.kit_extra_rows(1, 0, 2, 0) == 0
    assert kit.kit_extra_rows(1, 1, 2, 12) == 11
    assert kit.kit_extra_rows(1, 1, 2, 40) == 39


def test_a_call_that_hangs(
    kit: ctypes.CDLL, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    load(kit, tmp_path, monkeypatch, {"hang": {"slow": 0.3}})
    done = threading.Event()
    started = time.monotonic()
    thread = threading.Thread(target=lambda: (kit.kit_hang(b"slow"), done.set()), daemon=True)
    thread.start()
    assert not done.wait(0.1)  # still inside the call
    assert done.wait(5)
    assert time.monotonic() - started >= 0.3
    kit.kit_hang(b"fast")  # an entry point the scenario does not name returns at once


def test_abi_probe_reports_what_gcc_lays_out(tmp_path: Path) -> None:
    if why := fakelib.gcc_missing():
        pytest.skip(why)
    header = "typedef struct { int pid; unsigned long long bytes; char tag; } row_t;"
    (got,) = layout(header, {"row_t": ["pid", "bytes", "tag"]}, directory=tmp_path).values()
    # x86-64 and aarch64 alike: 4 bytes of padding after pid, 7 after tag.
    assert got.size == 24 and dict(got.offsets) == {"pid": 0, "bytes": 8, "tag": 16}

    class Row(ctypes.Structure):
        _fields_ = [("pid", ctypes.c_int), ("bytes", ctypes.c_ulonglong), ("tag", ctypes.c_char)]

    assert fakelib.ctypes_layout(Row) == got
