"""Named scenarios for the fake libhgml.so, after what the public notes on HGML describe.

Card UUIDs are tests.world.gpu(n), so the same cards can be granted by tests.world.pod().
"""

from __future__ import annotations

from typing import Any

from tests.fakelib.thead import GIB, device
from tests.world import gpu

DRIVER_NOT_LOADED = 9
NOT_SUPPORTED = 3
NO_PERMISSION = 4
GPU_IS_LOST = 15
FUNCTION_NOT_FOUND = 13
U32_MAX = 0xFFFFFFFF
U64_MAX = 0xFFFFFFFFFFFFFFFF
# Microsecond time stamps of three samples of one PID, returned out of order.
T1, T2, T3 = 1_764_000_000_000_001, 1_764_000_000_500_002, 1_764_000_001_000_003


def mig_uuid(n: int) -> str:
    return f"MIG-{gpu(200 + n)[4:]}"


def whole(n: int, **options: Any) -> dict[str, Any]:
    return device(gpu(n), index=n - 40, **options)


def slices_one_busy() -> dict[str, Any]:
    """Two slices on one PPU: PID 8101 busy with three samples in one answer (the newest, 55%,
    counts, not the largest), PID 8201 listed without a sample (idle)."""
    return whole(
        41,
        used_mib=46_200,
        util=(55, 20),
        temp=47,
        power=231_000,
        processes=[(8101, 40 * GIB), (8201, 6 * GIB)],
        samples=[(8101, T1, 30, 10), (8101, T3, 55, 20), (8101, T2, 70, 22)],
    )


def mig_card(gpm: bool = True) -> dict[str, Any]:
    """A PPU in MIG mode: slot 0 a busy 2g.24gb (GPU instance 1), slot 1 empty, slot 2 an
    idle 1g.12gb (GPU instance 3). GPM answers each instance's SM activity."""
    return whole(
        42,
        used_mib=20_600,
        temp=41,
        power=150_000,
        mig_mode=(1, 1),
        gpm=int(gpm),
        processes=[(8301, 20 * GIB, 1, 0)],
        migs=[
            {
                "slot": 0,
                "uuid": mig_uuid(0),
                "gi": 1,
                "total_mib": 24_192,
                "used_mib": 20_512,
                "sm": 64.5,
            },
            {"slot": 2, "uuid": mig_uuid(1), "gi": 3, "total_mib": 12_032, "sm": 0},
        ],
    )


def ppu_mixed() -> list[dict[str, Any]]:
    """Four PPUs: card 0 whole and busy, card 1 two slices (one busy), card 2 in MIG mode,
    card 3 carved and idle (the sample call answers NOT_FOUND)."""
    return [
        whole(40, used_mib=88_100, util=(91, 63), temp=58, power=372_000),
        slices_one_busy(),
        mig_card(),
        whole(43, used_mib=1_030, util=(0, 0), temp=33, power=61_000, processes=[(8401, GIB)]),
    ]


def lost_one_of_four() -> list[dict[str, Any]]:
    """Four PPUs; card 2 answers once and then falls off (GPU_IS_LOST from every call)."""
    cards = [whole(40 + i, used_mib=1_000 * i, util=(i, 0)) for i in range(4)]
    cards[2]["lost_after"] = 1
    return cards


def memory_sentinel() -> list[dict[str, Any]]:
    """A process whose memory HGML reports as HGML_VALUE_NOT_AVAILABLE."""
    return [whole(41, processes=[(8101, 4 * GIB), (8201, "na")], samples=[(8101, T1, 10, 2)])]


def ppu_health() -> list[dict[str, Any]]:
    """Issue 29's figures on three PPUs. Card 0 answers every one: ECC counts, remapped rows
    (one pending), 98,765,432 mJ, SW power cap and HW slowdown active, its clocks, 3 PCIe
    replays. Card 1 answers none: ECC off, NOT_SUPPORTED from the rest (the clocks-event call
    missing, the older throttle call refused, one clock domain refused), and a driver without
    the plain temperature call, whose versioned call answers 44 °C. Card 2 answers the types'
    all-ones "not available" for energy, replays, its SM clock and one ECC counter, and only
    the older throttle call."""
    return [
        whole(
            40,
            ecc={
                "corrected_volatile": 5,
                "uncorrected_volatile": 1,
                "corrected_aggregate": 210,
                "uncorrected_aggregate": 3,
            },
            remapped=(2, 1, 1, 0),
            energy=98_765_432,
            throttle=0x4 | 0x8,
            clocks={"graphics": 1450, "sm": 1450, "memory": 1600},
            pcie_replays=3,
            temp=52,
        ),
        whole(
            41,
            ecc_off=1,
            temp=44,
            errors={
                "hgmlDeviceGetTemperature": FUNCTION_NOT_FOUND,
                "hgmlDeviceGetRemappedRows": NOT_SUPPORTED,
                "hgmlDeviceGetTotalEnergyConsumption": NOT_SUPPORTED,
                "hgmlDeviceGetCurrentClocksEventReasons": FUNCTION_NOT_FOUND,
                "hgmlDeviceGetCurrentClocksThrottleReasons": NOT_SUPPORTED,
                "hgmlDeviceGetPcieReplayCounter": NOT_SUPPORTED,
            },
            clock_faults={"memory": NOT_SUPPORTED},
        ),
        whole(
            42,
            ecc={"corrected_volatile": U64_MAX},
            energy=U64_MAX,
            pcie_replays=U32_MAX,
            clocks={"sm": U32_MAX},
            throttle=0x1,
            errors={"hgmlDeviceGetCurrentClocksEventReasons": FUNCTION_NOT_FOUND},
        ),
    ]


def bus(n: int) -> str:
    """The PCI bus id the fake gives card n by default."""
    return f"00000000:{0x10 + n:02X}:00.0"


ICN_SWITCH_BUS = "00000000:D0:00.0"


def ppu_links() -> list[dict[str, Any]]:
    """R-X3's links and placement on four PPUs through HGML's ICN links. Cards 0 and 1 are
    joined by three direct ICN links (and a fourth of card 0 that is down) and share a PCIe
    switch (PIX); cards 2 and 3 each have two active links into an ICN switch and share a host
    bridge (PHB); 0/1 against 2/3 are across NUMA nodes (SYS), except card 3, which HGML cannot
    place against card 0 (NOT_SUPPORTED) and whose PCI device names no NUMA node in sysfs. Card
    1's link 1 answers NOT_SUPPORTED, a gap the links after it are read past (issue 43)."""
    switch = {"state": 1, "remote": ICN_SWITCH_BUS, "type": 2}
    return [
        whole(
            50,
            nvlinks=[{"state": 1, "remote": bus(1)}] * 3 + [{"state": 0, "remote": bus(1)}],
            ancestor={"1": 10, "2": 50},
        ),
        whole(
            51,
            nvlinks=[
                {"state": 1, "remote": bus(0)},
                {"error": 3},
                *[{"state": 1, "remote": bus(0)}] * 2,
            ],
            ancestor={"2": 50, "3": 50},
        ),
        whole(52, nvlinks=[switch, switch], ancestor={"3": 30}),
        whole(53, nvlinks=[switch, switch]),
    ]
