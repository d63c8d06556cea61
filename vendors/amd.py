"""AMD Instinct through amdsmi (the `amdsmi` wheel over libamd_smi.so), with ROCm SMI
(librocm_smi64, our own ctypes declarations) answering the per-process query on the ROCm
release where amdsmi's process list is publicly known to be wrong.

Here: the backend (where its libraries are, open, read, parse, close), its amdsmi reading, and
the parse of the whole payload: how its sockets become cards, partitions and process answers,
and which path answered the per-process query. What one processor's amdsmi answers mean is in
vendors/_amd_smi.py; ROCm SMI's per-process reading and its parse are in vendors/_amd_rocm_smi.py.

`read()` asks the libraries and writes down what each entry point answered under its C name
(the wheel's Python names are the C names); a failed call is {"error": <exception>, "code":
<amdsmi_status_t>}. The wheel's "N/A" strings are kept as they come. `parse()` is pure.

Model (amdsmi docs, conceptual/partition.md): a socket is a physical card; each compute
partition (XCP) of a CPX/DPX/… card is a processor handle of its own with its own UUID
(ROCm 7). A socket with one processor is a whole card. A socket with several becomes one
physical card (board figures only: temperature, power, health, read on its first XCP) and one
card per XCP whose `parent_id` names it (memory and utilization, read on its own handle), so
nothing is counted twice. Facts: ../shared/reference/vendors.md §3, §12.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar

from devicemanager.backend import BackendUnavailable, Library
from devicemanager.model import (
    Card,
    CardLink,
    DeviceProcesses,
    PartitionReading,
    Payload,
    ProcessRow,
    ReadRequest,
    Reason,
    VendorReading,
    as_int,
)
from vendors._amd_lib import import_amdsmi, processors_of, rocm_version
from vendors._amd_rocm_smi import read_processes, rsmi_rows
from vendors._amd_rocm_smi import rsmi_reason_for as rsmi_reason_for
from vendors._amd_smi import (
    AMD_CLOCKS,
    BAD_PAGES,
    ECC_BLOCKS,
    ECC_BLOCKS_CALL,
    ECC_ENABLED,
    INSUFFICIENT_SIZE,
    MAX_BAD_PAGES,
    METRICS,
    VIOLATIONS,
    Rows,
    amdsmi_rows,
    board_of,
    compute_units_of,
    device_aliases,
    device_uuid,
    entries,
    mapping,
    metrics_kept,
    parse_topology,
    partition_reading,
    physical_card,
    physical_id,
    processor_card,
    text,
)
from vendors._amd_smi import NO_PERM as NO_PERM
from vendors._amd_smi import NOT_FOUND as NOT_FOUND
from vendors._amd_smi import NOT_SUPPORTED as NOT_SUPPORTED
from vendors._amd_smi import OUT_OF_RESOURCES as OUT_OF_RESOURCES
from vendors._amd_smi import occupancy_percent as occupancy_percent
from vendors._amd_smi import reason_for as reason_for
from vendors._amd_smi import serial_id as serial_id
from vendors._common import (
    TOPOLOGY_PERIOD,
    Baseline,
    Sample,
    error_code,
    failed,
    finite,
    listing,
    load,
)
from vendors._rocm_smi_lib import RocmSmi, RsmiError

MANUFACTURER = "amd"

# The ROCm releases whose amdsmi per-process list is publicly known to be wrong, where ROCm SMI
# answers instead. ROCm 7.2.0: the per-device list ignores the processor handle (every process
# under every GPU) and drops processes the caller cannot inspect (ROCm/rocm-systems#8396,
# merged after 7.2.0), and keeps exited PIDs once all processes end (ROCm/rocm-systems#7331);
# GPUStack measured the per-process calls broken on this release and reads ROCm SMI there.
BROKEN_PROCESS_LIST = frozenset({"7.2.0"})

# Which path answered the per-process query (VendorReading.via, shown in backends[]).
VIA_AMDSMI = "amdsmi"
VIA_ROCM_SMI = "rocm_smi"
VIA_WITHHELD = "amdsmi; process list withheld"

ROCM_LIB = "/opt/rocm/lib"
AMD_SMI = Library("amd_smi", ("libamd_smi.so",), (ROCM_LIB,))
ROCM_SMI = Library("rocm_smi", ("librocm_smi64.so.7", "librocm_smi64.so"), (ROCM_LIB,))
ROCM_CORE = Library("rocm_core", ("librocm-core.so.1", "librocm-core.so"), (ROCM_LIB,))

# The violation status costs about 100 ms a card (the library samples twice, 100 ms apart): a
# board's answer is kept this long on the backend's clock and carried by the rounds between, so
# a short --monitor-period on eight cards does not spend its deadline on it. At the default
# 15 s period every round asks again.
VIOLATION_PERIOD = 5.0

# At most this many XCP platform devices are read from sysfs (eight cards of eight XCPs is 56).
MAX_XCP_PLATFORM_DEVICES = 1024


# -- per-process: the path that answered ------------------------------------------------------


def _rows(
    device: Mapping[str, Any],
    payload: Mapping[str, Any],
    partition: str | None,
    scale: float | None,
) -> Rows | None:
    """One device's rows by the path that answered, or None when none was asked for."""
    path = payload.get("processPath")
    if path == VIA_ROCM_SMI and "rocm_smi" in device:
        return rsmi_rows(device, payload, partition, scale)
    if path == VIA_WITHHELD and device.get("processesAsked") is True:
        return [], Reason.UNSUPPORTED, Reason.UNSUPPORTED
    if "amdsmi_get_gpu_process_list" in device:
        return amdsmi_rows(device, partition, scale)
    return None


def _answer(device_id: str, parts: Iterable[Rows]) -> DeviceProcesses:
    rows: list[ProcessRow] = []
    memory_reason: Reason | None = None
    cores_reason: Reason | None = None
    truncated = 0
    for part_rows, memory, cores in parts:
        rows.extend(part_rows)
        memory_reason = memory_reason or memory
        cores_reason = cores_reason or cores
        # One entry point answers both figures: a list too long for its buffer is one read.
        truncated += int(memory is Reason.TRUNCATED or cores is Reason.TRUNCATED)
    if memory_reason is not None:
        rows = []  # never a partial list published as if complete
    return DeviceProcesses(
        device_id=device_id,
        rows=tuple(rows),
        memory_reason=memory_reason,
        cores_reason=cores_reason,
        reads_truncated=truncated,
    )


# -- the whole payload ----------------------------------------------------------------------------


class _Socket:
    """One socket of a payload, with its devices' ids worked out once."""

    def __init__(self, position: int, doc: Mapping[str, Any], platform: Mapping[str, Any]):
        self.position = position
        self.doc = doc
        self.devices = entries(doc.get("processors"))
        self.partitioned = len(self.devices) > 1
        self.physical = physical_id(doc, self.devices) if self.partitioned else None
        self.ids: list[tuple[str, ...]] = []
        for device in self.devices:
            uuid = device_uuid(device)
            aliases = device_aliases(device, platform, whole=not self.partitioned)
            self.ids.append(((uuid,) if uuid else ()) + aliases)


def _sockets(payload: Mapping[str, Any]) -> list[_Socket]:
    platform = payload.get("xcpPlatformDevices")
    platform = platform if isinstance(platform, Mapping) else {}
    return [_Socket(i, s, platform) for i, s in enumerate(listing(payload, "sockets"))]


def _request(payload: Mapping[str, Any], key: str) -> list[Any]:
    request = payload.get("request")
    value = request.get(key) if isinstance(request, Mapping) else None
    return value if isinstance(value, list) else []


def parse_partitions(
    payload: Mapping[str, Any], sockets: list[_Socket], platform: Mapping[str, Any]
) -> tuple[PartitionReading, ...]:
    """Answer each (card, partition) read() was asked for, found only by the id the
    allocation recorded (R-V4) among the XCPs of the card it names."""
    out: list[PartitionReading] = []
    for item in _request(payload, "partitions"):
        if not (
            isinstance(item, list) and len(item) == 2 and all(isinstance(s, str) for s in item)
        ):
            continue
        parent, partition = item
        hits = [
            (s, d)
            for s in sockets
            for d, ids in zip(s.devices, s.ids, strict=True)
            if partition in ids
        ]
        reason: Reason | None = None
        if len(hits) > 1:
            reason = Reason.INVALID_DATA  # two processors claim one id: neither is trusted
        elif not hits:
            reason = Reason.TRANSIENT_DRIVER_ERROR
        else:
            ((socket, device),) = hits
            if not socket.partitioned or socket.physical is None:
                reason = Reason.UNSUPPORTED  # a whole card: not in a partition mode
            elif parent != socket.physical:
                reason = Reason.TRANSIENT_DRIVER_ERROR  # not under the card it was recorded on
            else:
                board = board_of(socket.devices)
                out.append(partition_reading(socket.physical, device, platform, board))
                continue
        out.append(
            PartitionReading(
                id=partition, parent_id=parent, memory_reason=reason, cores_reason=reason
            )
        )
    return tuple(out)


def parse_processes(
    payload: Mapping[str, Any], sockets: list[_Socket]
) -> tuple[DeviceProcesses, ...]:
    """Each device whose process list read() fetched answers for itself, its compute a share of
    that device. A partitioned card asked for whole answers with every XCP's rows, each naming
    its partition, compute restated as a share of the whole card's compute units."""
    carved = {c for c in _request(payload, "carved") if isinstance(c, str)}
    out: list[DeviceProcesses] = []
    for socket in sockets:
        whole = socket.partitioned and socket.physical is not None and socket.physical in carved
        units_total = sum(compute_units_of(d) or 0 for d in socket.devices)
        parts: list[Rows] = []
        for device, ids in zip(socket.devices, socket.ids, strict=True):
            if not ids:
                continue
            own = _rows(device, payload, None, 1.0)
            if own is not None:
                out.append(_answer(ids[0], [own]))
            if whole:
                units = compute_units_of(device)
                share = units / units_total if units and units_total else None
                part = _rows(device, payload, ids[0], share)
                failed_part: Rows = (
                    [],
                    Reason.TRANSIENT_DRIVER_ERROR,
                    Reason.TRANSIENT_DRIVER_ERROR,
                )
                parts.append(part if part is not None else failed_part)
        if whole and socket.physical is not None:
            out.append(_answer(socket.physical, parts))
    return tuple(out)


def parse(payload: Payload) -> VendorReading:
    platform = payload.get("xcpPlatformDevices")
    platform = platform if isinstance(platform, Mapping) else {}
    sockets = _sockets(payload)
    cards: list[Card] = []
    boards: dict[int, str] = {}  # socket position -> the id of its physical card
    for socket in sockets:
        if not socket.partitioned:
            for device in socket.devices:
                if (
                    card := processor_card(device, socket.position, platform, whole=True)
                ) is not None:
                    cards.append(card)
                    boards[socket.position] = card.id
            continue
        physical = physical_card(socket.doc, socket.position, socket.devices)
        if physical is not None:
            cards.append(physical)
            boards[socket.position] = physical.id
        board = board_of(socket.devices)
        for device in socket.devices:
            card = processor_card(
                device,
                socket.position,
                platform,
                whole=False,
                parent=physical.id if physical is not None else None,
                board=board,
            )
            if card is not None:
                cards.append(card)
    driver = None
    for socket in sockets:
        for device in socket.devices:
            driver = driver or text(
                mapping(device.get("amdsmi_get_gpu_driver_info")).get("driver_version")
            )
    path = payload.get("processPath")
    cards = _placed(cards, boards, parse_topology(payload))
    return VendorReading(
        manufacturer=MANUFACTURER,
        cards=tuple(cards),
        processes=parse_processes(payload, sockets),
        partitions=parse_partitions(payload, sockets, platform),
        driver_version=driver,
        via=path if isinstance(path, str) else None,
    )


def _placed(
    cards: list[Card],
    boards: Mapping[int, str],
    topology: Mapping[int, tuple[tuple[tuple[int, str], ...], int | None]],
) -> list[Card]:
    """Each physical card with its links to the others and its NUMA node (R-X3); an XCP's
    entry has neither (they are its board's)."""
    by_id = {card_id: position for position, card_id in boards.items()}
    out = []
    for card in cards:
        position = by_id.get(card.id)
        if position is None or position not in topology:
            out.append(card)
            continue
        links, numa = topology[position]
        named = tuple(CardLink(boards[peer], kind) for peer, kind in links if peer in boards)
        out.append(dataclasses.replace(card, links=named, numa_node=numa))
    return out


# -- the backend ----------------------------------------------------------------------------------


def rocm_lib_directories(environ: Mapping[str, str] = os.environ) -> tuple[str, ...]:
    """Where a ROCm install keeps its libraries, in the order the amdsmi wheel looks:
    $ROCM_HOME/lib, $ROCM_PATH/lib, then /opt/rocm/lib."""
    dirs = [os.path.join(environ[v], "lib") for v in ("ROCM_HOME", "ROCM_PATH") if environ.get(v)]
    return tuple(dict.fromkeys([*dirs, ROCM_LIB]))


def xcp_platform_devices(sysfs: str | os.PathLike[str]) -> dict[str, str]:
    """Render minor -> `amdgpu_xcp_<N>`: the platform devices the amdgpu driver creates for the
    XCPs beyond the first, by which the AMD device plugin names them (it reads the same
    /sys/devices/platform/amdgpu_xcp_*/drm/renderD*). Empty where there are none."""
    out: dict[str, str] = {}
    base = Path(sysfs) / "devices" / "platform"
    try:
        candidates = sorted(base.glob("amdgpu_xcp_*"))[:MAX_XCP_PLATFORM_DEVICES]
        for platform in candidates:
            for node in sorted((platform / "drm").glob("renderD*")):
                minor = node.name.removeprefix("renderD")
                if minor.isdigit():
                    out[str(int(minor))] = platform.name
    except OSError:
        return {}
    return out


# What a processor answers about itself, kept across rounds: the name each has in `known`.
_IDENTITY = {
    "uuid": "amdsmi_get_gpu_device_uuid",
    "bdf": "amdsmi_get_gpu_device_bdf",
    "asic": "amdsmi_get_gpu_asic_info",
    "enumeration": "amdsmi_get_gpu_enumeration_info",
}


class AmdBackend:
    """amdsmi through the `amdsmi` wheel, imported in open() only; ROCm SMI through our ctypes
    declarations where amdsmi's process list is known broken (BROKEN_PROCESS_LIST)."""

    manufacturer = MANUFACTURER
    libraries: ClassVar[tuple[Library, ...]] = (AMD_SMI, ROCM_SMI, ROCM_CORE)
    sdk: ClassVar[str] = "amdsmi"  # the distribution `record` names in its provenance

    def __init__(
        self,
        libraries: Mapping[str, str] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sysfs: str | os.PathLike[str] = "/sys",
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.configured = dict(libraries or {})
        self._clock = clock
        self._sysfs = sysfs
        self._environ = environ if environ is not None else os.environ
        self._smi: Any = None
        self._rsmi: RocmSmi | None = None
        self._path = VIA_AMDSMI
        self._rocm_version: str | None = None
        self._platform: dict[str, str] = {}
        self._baseline = Baseline()
        # What each processor answered about itself, by (socket, position): a lost device
        # stops answering even its UUID, and its grant should show it unhealthy, not vanish.
        self._known: dict[tuple[int, int], dict[str, Any]] = {}
        # The last links-and-placement read and the boards it was read for (R-X3).
        self._topology: dict[str, Any] | None = None
        self._topology_cards: tuple[str | None, ...] = ()
        # The last violation status of each board, by its UUID: (when it was read, the answer).
        self._violation: dict[str, tuple[float, Any]] = {}

    # -- locating -------------------------------------------------------------------------

    def _library(self, library: Library, near: str | None = None) -> tuple[Library, dict[str, str]]:
        """`library` searched in `near` (the directory libamd_smi came from) and the ROCm
        directories; a configured ROCm root (a directory with lib/<soname>) means its lib/."""
        directories = ((near,) if near else ()) + rocm_lib_directories(self._environ)
        located = Library(library.name, library.sonames, tuple(dict.fromkeys(directories)))
        configured = dict(self.configured)
        path = configured.get(library.name)
        if path and os.path.isdir(path):
            own = any(os.path.exists(os.path.join(path, s)) for s in library.sonames)
            root = any(os.path.exists(os.path.join(path, "lib", s)) for s in library.sonames)
            if root and not own:
                configured[library.name] = os.path.join(path, "lib")
        return located, configured

    def _locate(self, library: Library, near: str | None = None) -> str:
        located, configured = self._library(library, near)
        return located.locate(configured.get(library.name), self._environ)

    def _read_rocm_version(self, near: str | None) -> str | None:
        located, configured = self._library(ROCM_CORE, near)
        try:
            return rocm_version(load(located, configured))
        except (BackendUnavailable, OSError, AttributeError):
            return None  # no rocm-core: the release is unknown, and amdsmi answers

    # -- open / close ---------------------------------------------------------------------

    def open(self) -> None:
        target = self._locate(AMD_SMI)
        near = os.path.dirname(target) if os.sep in target else None
        self._rocm_version = self._read_rocm_version(near)
        self._path = VIA_AMDSMI
        if self._rocm_version in BROKEN_PROCESS_LIST:
            # ROCm SMI is initialised before amdsmi: GPUStack saw the other order abort.
            self._path = VIA_WITHHELD
            located, configured = self._library(ROCM_SMI, near)
            try:
                rsmi = RocmSmi(load(located, configured))
                rsmi.init()
            except (BackendUnavailable, AttributeError, RsmiError):
                pass  # no fallback here: the per-process figures are withheld, with a reason
            else:
                self._rsmi = rsmi
                self._path = VIA_ROCM_SMI
        try:
            smi = import_amdsmi(target)
            try:
                smi.amdsmi_init(smi.AmdSmiInitFlags.INIT_AMD_GPUS)
            except smi.AmdSmiException as exc:
                info = getattr(exc, "get_error_info", None)
                why = info(detailed=False) if callable(info) else type(exc).__name__
                raise BackendUnavailable(f"amdsmi could not be initialised: {why}") from None
        except BackendUnavailable:
            self._close_rsmi()
            raise
        self._smi = smi
        self._baseline = Baseline()  # a rate never spans a re-init
        self._known = {}
        self._violation = {}
        self._platform = xcp_platform_devices(self._sysfs)

    def _close_rsmi(self) -> None:
        rsmi, self._rsmi = self._rsmi, None
        if rsmi is not None:
            with contextlib.suppress(RsmiError):
                rsmi.shut_down()

    def close(self) -> None:
        smi, self._smi = self._smi, None
        if smi is not None:
            with contextlib.suppress(smi.AmdSmiException):
                smi.amdsmi_shut_down()
        self._close_rsmi()

    # -- reading --------------------------------------------------------------------------

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        smi = self._smi
        try:
            return fn(*args)
        except smi.AmdSmiException as exc:
            code = getattr(exc, "get_error_code", None)
            return failed(type(exc).__name__, int(code()) if callable(code) else -1)

    def _identity(self, handle: Any) -> dict[str, Any]:
        smi = self._smi
        return {
            "amdsmi_get_gpu_device_uuid": self._call(smi.amdsmi_get_gpu_device_uuid, handle),
            "amdsmi_get_gpu_device_bdf": self._call(smi.amdsmi_get_gpu_device_bdf, handle),
            "amdsmi_get_gpu_bdf_id": self._call(smi.amdsmi_get_gpu_bdf_id, handle),
            "amdsmi_get_gpu_kfd_info": self._call(smi.amdsmi_get_gpu_kfd_info, handle),
            "amdsmi_get_gpu_enumeration_info": self._call(
                smi.amdsmi_get_gpu_enumeration_info, handle
            ),
            "amdsmi_get_gpu_asic_info": self._call(smi.amdsmi_get_gpu_asic_info, handle),
        }

    def _remember(self, key: tuple[int, int], device: dict[str, Any]) -> None:
        """Keep what the processor answered about itself, field by field: one that falls off
        the bus between two calls of a read answers its UUID and then NOT_FOUND, and the
        identity it gave before (its serial, its PCI address) must survive that read. A
        processor whose identity call failed carries what was known of it (`known`)."""
        uuid = text(device["amdsmi_get_gpu_device_uuid"])
        known = self._known.get(key, {})
        if uuid is not None and text(known.get("uuid")) != uuid:
            known = {}  # another processor at this position: nothing of the old one is its
        answered = {
            name: device[entry]
            for name, entry in _IDENTITY.items()
            if error_code(device[entry]) is None
        }
        if uuid is not None:
            known = {**known, **answered}
            self._known[key] = known
        if known and len(answered) < len(_IDENTITY):
            device["known"] = known

    def _figures(self, handle: Any, device: dict[str, Any], board: bool, now: float) -> None:
        smi = self._smi
        device["amdsmi_get_gpu_compute_partition"] = self._call(
            smi.amdsmi_get_gpu_compute_partition, handle
        )
        device["amdsmi_get_gpu_vram_usage"] = self._call(smi.amdsmi_get_gpu_vram_usage, handle)
        device["amdsmi_get_gpu_activity"] = self._call(smi.amdsmi_get_gpu_activity, handle)
        device["amdsmi_get_gpu_driver_info"] = self._call(smi.amdsmi_get_gpu_driver_info, handle)
        if not board:
            return  # board figures are read on the first XCP only
        device["board"] = True
        # The card's GPU metrics table: one per card, each XCP's GFX busy in its `xcp_stats`
        # (issue 41); read on the board's processor only, as the other board figures.
        device[METRICS] = metrics_kept(self._call(smi.amdsmi_get_gpu_metrics_info, handle))
        device["amdsmi_get_power_info"] = self._call(smi.amdsmi_get_power_info, handle)
        kinds, metric = smi.AmdSmiTemperatureType, smi.AmdSmiTemperatureMetric.CURRENT
        device["amdsmi_get_temp_metric"] = {
            name: self._call(smi.amdsmi_get_temp_metric, handle, getattr(kinds, name), metric)
            for name in ("HOTSPOT", "EDGE")
        }
        device["amdsmi_get_gpu_total_ecc_count"] = self._call(
            smi.amdsmi_get_gpu_total_ecc_count, handle
        )
        # ECC per block, bad pages and throttling (R-X7): vendors/_amd_smi.py says what they mean.
        enabled = self._call(smi.amdsmi_get_gpu_ecc_enabled, handle)
        device[ECC_ENABLED] = enabled
        if error_code(enabled) is None and isinstance(enabled, int):
            device[ECC_BLOCKS_CALL] = {
                name: self._call(smi.amdsmi_get_gpu_ecc_count, handle, smi.AmdSmiGpuBlock[name])
                for name, bit in ECC_BLOCKS
                if enabled & bit
            }
        device[BAD_PAGES] = self._bad_pages(handle)
        # Carried only for a board that answered its own UUID this round: a lost one is asked.
        uuid = text(device["amdsmi_get_gpu_device_uuid"])
        held = self._violation.get(uuid) if uuid is not None else None
        if held is None or now - held[0] >= VIOLATION_PERIOD:
            held = (now, self._violations(handle))
            if uuid is not None:
                self._violation[uuid] = held
        device["violationReadAt"], device[VIOLATIONS] = held
        # The card's health beyond one bit (R-X7): energy, clocks, PCIe replays.
        device["amdsmi_get_energy_count"] = self._call(smi.amdsmi_get_energy_count, handle)
        device["amdsmi_get_clock_info"] = {
            name: self._call(smi.amdsmi_get_clock_info, handle, getattr(smi.AmdSmiClkType, name))
            for name in AMD_CLOCKS.values()
        }
        device["amdsmi_get_gpu_pci_replay_counter"] = self._call(
            smi.amdsmi_get_gpu_pci_replay_counter, handle
        )

    def _bad_pages(self, handle: Any) -> Any:
        """Each bad-page record's status (amdsmi_memory_page_status_t), at most MAX_BAD_PAGES;
        more is recorded as INSUFFICIENT_SIZE (`truncated`), never as a complete list."""
        pages = self._call(self._smi.amdsmi_get_gpu_bad_page_info, handle)
        if error_code(pages) is not None or not isinstance(pages, list):
            return pages
        if len(pages) > MAX_BAD_PAGES:
            return failed("more bad pages than one read keeps", INSUFFICIENT_SIZE)
        return [{"status": mapping(p).get("status")} for p in pages]

    def _violations(self, handle: Any) -> Any:
        """The violation status's current flags (`active_*`, the scalar ones): the call samples
        the card's metrics twice, 100 ms apart, inside the library (amdsmi.h's warning)."""
        answer = self._call(self._smi.amdsmi_get_violation_status, handle)
        if error_code(answer) is not None or not isinstance(answer, Mapping):
            return answer
        return {
            key: value
            for key, value in answer.items()
            if key.startswith("active_") and not isinstance(value, list)
        }

    def _processes(self, handle: Any, device: dict[str, Any], uuid: str, now: float) -> set[str]:
        """The process list of one device, with the previous round's engine time per PID."""
        smi = self._smi
        if self._path == VIA_WITHHELD:
            device["processesAsked"] = True
            return set()
        if self._path == VIA_ROCM_SMI:
            return set()  # answered host-wide in read_processes() (vendors/_amd_rocm_smi.py)
        listed = self._call(smi.amdsmi_get_gpu_process_list, handle)
        device["amdsmi_get_gpu_process_list"] = listed
        device["processAt"] = now
        seen = {f"{uuid}|"}
        previous_at = self._baseline.exchange(f"{uuid}|", Sample(0.0, now))
        device["processPreviousAt"] = previous_at.at if previous_at is not None else None
        previous: dict[str, float] = {}
        for proc in entries(listed):
            pid = as_int(proc.get("pid"))
            gfx = finite(mapping(proc.get("engine_usage")).get("gfx"))
            if pid is None or gfx is None:
                continue
            key = f"{uuid}|{pid}"
            seen.add(key)
            before = self._baseline.exchange(key, Sample(gfx, now))
            if before is not None:
                previous[str(pid)] = before.value
        device["processPrevious"] = previous
        return seen

    def read(self, request: ReadRequest) -> Payload:
        smi = self._smi
        if smi is None:
            raise BackendUnavailable("read() before open()")
        now = self._clock()
        wanted = set(request.carved_device_ids)
        sockets = smi.amdsmi_get_socket_handles()
        payload: dict[str, Any] = {
            "amdsmi_get_lib_version": self._call(smi.amdsmi_get_lib_version),
            "rocmVersion": self._rocm_version,
            "processPath": self._path,
            "request": {
                "carved": sorted(request.carved_device_ids),
                "partitions": [list(p) for p in sorted(request.partition_ids)],
            },
            "xcpPlatformDevices": dict(self._platform),
            "sockets": [],
        }
        carved_devices: list[dict[str, Any]] = []
        boards: list[tuple[int, Any, str | None]] = []  # (socket, board handle, its UUID)
        seen: set[str] = set()
        index = 0
        for s, socket in enumerate(sockets):
            doc: dict[str, Any] = {
                "amdsmi_get_socket_info": self._call(smi.amdsmi_get_socket_info, socket)
            }
            handles = self._call(processors_of, smi, socket)
            if error_code(handles) is not None:
                doc["amdsmi_get_processor_handles"] = handles
                payload["sockets"].append(doc)
                continue
            devices = []
            for p, handle in enumerate(handles):
                device: dict[str, Any] = {"index": index, **self._identity(handle)}
                index += 1
                self._remember((s, p), device)
                devices.append(device)
            partitioned = len(devices) > 1
            board = 0
            for p, device in enumerate(devices):
                kfd = mapping(device["amdsmi_get_gpu_kfd_info"])
                if as_int(kfd.get("current_partition_id")) == 0:
                    board = p
                    break
            physical = physical_id(doc, devices) if partitioned else None
            for p, (handle, device) in enumerate(zip(handles, devices, strict=True)):
                self._figures(handle, device, board=p == board, now=now)
                uuid = device_uuid(device)
                ids = {uuid, *device_aliases(device, self._platform, whole=not partitioned)}
                if uuid is not None and (
                    ids & wanted or (physical is not None and physical in wanted)
                ):
                    seen |= self._processes(handle, device, uuid, now)
                    carved_devices.append(device)
            doc["processors"] = devices
            payload["sockets"].append(doc)
            boards.append((s, handles[board], device_uuid(devices[board])))
        if self._path == VIA_ROCM_SMI and carved_devices and self._rsmi is not None:
            read_processes(self._rsmi, payload, carved_devices)
        self._baseline.keep_only(seen)
        boards_read = {uuid for _, _, uuid in boards}
        self._violation = {k: v for k, v in self._violation.items() if k in boards_read}
        payload["topology"] = self._topology_of(boards, now)
        return payload

    def _topology_of(self, boards: list[tuple[int, Any, str | None]], now: float) -> Any:
        """Links between the sockets' board processors and their NUMA nodes (R-X3): read when
        none is held, once TOPOLOGY_PERIOD has passed since the last read, or when the boards
        changed; else the last read, whose `readAt` says when it was made."""
        cards = tuple(uuid for _, _, uuid in boards)
        held = self._topology
        fresh = held is not None and now - held["readAt"] < TOPOLOGY_PERIOD
        if held is not None and fresh and cards == self._topology_cards:
            return held
        smi = self._smi
        topology = {
            "readAt": now,
            "devices": [
                {
                    "socket": s,
                    "amdsmi_topo_get_numa_node_number": self._call(
                        smi.amdsmi_topo_get_numa_node_number, handle
                    ),
                }
                for s, handle, _ in boards
            ],
            "pairs": [
                {
                    "a": a,
                    "b": b,
                    "amdsmi_topo_get_link_type": self._call(smi.amdsmi_topo_get_link_type, ha, hb),
                }
                for i, (a, ha, _) in enumerate(boards)
                for b, hb, _ in boards[i + 1 :]
            ],
        }
        self._topology, self._topology_cards = topology, cards
        return topology

    def parse(self, payload: Payload) -> VendorReading:
        return parse(payload)
