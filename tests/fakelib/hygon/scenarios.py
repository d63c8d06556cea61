"""Named scenarios for the three fake Hygon libraries, after the situations the hygon backend
must meet. Figures follow public K100_AI numbers (64 GB HBM2e: 65520 MiB as ROCm SMI reports
it, 120 CUs) and GPUStack's measurements on Hygon MIG (four 2g.15gb instances of 16380 MiB on
one card, a node-global MIG index); none was recorded on hardware.
"""

from __future__ import annotations

import hashlib
from typing import Any

from tests.fakelib.hygon import GIB, MIB, card, mig, node, process, vdev

RSMI_NOT_SUPPORTED = 2
RSMI_PERMISSION = 4
RSMI_INSUFFICIENT_SIZE = 11
DMI_VDEV_NOT_EXIST = 15
DMI_NOT_SUPPORTED = 6
MIG_2G = 16380 * MIB  # the one-slice profile's memory, as measured on a 64 GB card
MIG_4G = 32760 * MIB


def unique_id(n: int) -> int:
    """A stable 64-bit ROCm unique id for card n of the test world."""
    return int.from_bytes(hashlib.sha256(f"hygon-dcu-{n}".encode()).digest()[:8], "big") >> 1


def dcu(n: int) -> str:
    """Card n's canonical id: GPUStack's `GPU-` + hex of the unique id."""
    return f"GPU-{unique_id(n):x}"


def mig_uuid(n: int) -> str:
    """The UUID the driver writes for MIG instance n (what GPUStack records, after MIG-)."""
    return str(hashlib.md5(f"hygon-mig-{n}".encode()).hexdigest())


def bus(n: int) -> int:
    """Card n's PCI bus, as a K100_AI node spreads them."""
    return (0x03, 0x23, 0x43, 0x63, 0x83, 0xA3, 0xC3, 0xE3)[n % 8]


def k100(n: int, **options: Any) -> dict[str, Any]:
    return card(unique_id(n), bus(n), serial=f"HCU{n:04d}K1A", **options)


def eight_card_topology(cards: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Links and placement for an eight-card K100_AI node (synthetic, after the common
    two-socket layout): cards 0-3 on NUMA node 0 and 4-7 on node 1, the cards of each four
    joined by HSL, each pair across the two fours over PCIe (three hops, through the sockets'
    interconnect)."""
    for n, doc in enumerate(cards):
        doc["numa"] = n // 4
        doc["links"] = {
            str(m): {"type": 2, "hops": 1} if m // 4 == n // 4 else {"type": 1, "hops": 3}
            for m in range(n + 1, len(cards))
        }
    return cards


def k100ai_whole_and_slices() -> dict[str, Any]:
    """Eight K100_AI: cards 0-1 busy whole, card 2 carved by HAMi into a dynamic vDCU (30% of
    its CUs, 8 GiB) whose process is busy, card 3 in two GPUStack logical slices, one idle;
    card 5 carved into two static vDCUs of 16 GiB and 30 CUs each (global indexes 1 and 2),
    vDCU 1 busy 63% of its own CUs, vDCU 2 on a libhydmi that does not serve its busy percent
    (`dmiGetVDevBusyPercent` NOT_SUPPORTED)."""
    cards = eight_card_topology([k100(n, used=1 * GIB, busy=0) for n in range(8)])
    cards[0].update(vram_used=52 * GIB, busy=97, temp_edge=71_000, power=286_000_000)
    cards[1].update(vram_used=40 * GIB, busy=88, temp_edge=66_000, power=254_000_000)
    cards[2].update(vram_used=6 * GIB, busy=27, temp_edge=52_000, power=141_000_000)
    cards[3].update(vram_used=23 * GIB, busy=41, temp_edge=58_000, power=182_000_000)
    cards[5].update(vram_used=12 * GIB, busy=24, temp_edge=55_000, power=163_000_000)
    for n, memory_busy in ((0, 46), (1, 39), (2, 9), (3, 14), (5, 8)):
        cards[n]["mem_busy"] = memory_busy  # the memory's busy %, beside the cores'
    return node(
        cards,
        processes=[
            process(51201, [(0, 50 * GIB, 96)]),
            process(51305, [(1, 38 * GIB, 87)]),
            process(52110, [(2, 5 * GIB + 300 * MIB, 26)]),
            process(53007, [(3, 18 * GIB, 40)]),
            process(53118, [(3, 3 * GIB, 0)]),
            process(55012, [(5, 9 * GIB + 512 * MIB, 24)]),
            process(55107, [(5, 2 * GIB, 0)]),
        ],
        vdevs=[
            vdev(0, 2, cu=36, total=8 * GIB, used=5 * GIB + 300 * MIB, busy=88),
            vdev(1, 5, cu=30, total=16 * GIB, used=9 * GIB + 512 * MIB + 1, busy=63),
            vdev(2, 5, cu=30, total=16 * GIB, used=2 * GIB, busy=None),
        ],
        driver="6.3.8-V1.11.0",
    )


def k100ai_mig() -> dict[str, Any]:
    """Eight K100_AI with the node in multi-instance mode: card 0 carved in four 2g.15gb
    instances (GPU instances 3-6, MIG indexes 0-3, one busy, its memory busy 37% of the time),
    card 1 in one 4g.31gb (index 4).
    The rest hold no instance."""
    cards = eight_card_topology([k100(n, used=0) for n in range(8)])
    cards[0].update(vram_used=14 * GIB, busy=24, temp_edge=57_000, power=151_000_000)
    # The whole card's memory busy time: its instances' (37% and 1% on a quarter each) together.
    cards[0]["mem_busy"] = 10
    cards[0]["mig"] = {
        "migs": [
            mig(0, 3, 0, MIG_2G, 12 * GIB, 93, mem_util=37),
            mig(1, 4, 0, MIG_2G, 1 * GIB, 2, mem_util=1),
            mig(2, 5, 0, MIG_2G, 0, 0),
            mig(3, 6, 0, MIG_2G, 0, 0),
        ]
    }
    cards[1].update(vram_used=20 * GIB, busy=61, temp_edge=62_000, power=203_000_000)
    cards[1]["mem_busy"] = 9  # its one instance, half the card, 18% busy
    cards[1]["mig"] = {"max_mig": 4, "migs": [mig(4, 1, 0, MIG_4G, 20 * GIB, 61, mem_util=18)]}
    return node(cards, mig_mode=1, driver="6.3.8-V1.11.0")


def mig_registry() -> list[tuple[int, int, int, str]]:
    """The driver's /etc/dmi_mig_config entries for k100ai_mig(): (dev, gi, ci, uuid)."""
    return [
        (0, 3, 0, mig_uuid(0)),
        (0, 4, 0, mig_uuid(1)),
        (0, 5, 0, mig_uuid(2)),
        (0, 6, 0, mig_uuid(3)),
        (1, 1, 0, mig_uuid(4)),
    ]


def null_probe_insufficient() -> dict[str, Any]:
    """A build whose size probe (no buffer) answers INSUFFICIENT_SIZE with the count."""
    return node(
        [k100(0, used=9 * GIB, busy=30)],
        processes=[process(4101, [(0, 6 * GIB, 25)]), process(4102, [(0, 2 * GIB, 5)])],
        probe_code=RSMI_INSUFFICIENT_SIZE,
    )


def cu_occupancy_invalid() -> dict[str, Any]:
    """A GFX revision without the kernel's cu_occupancy: every row's is CU_OCCUPANCY_INVALID
    but one, whose memory is still measured."""
    return node(
        [k100(0, used=9 * GIB, busy=30)],
        processes=[process(4101, [(0, 6 * GIB, None)]), process(4102, [(0, 2 * GIB, 12)])],
    )


def list_grows(mode: str) -> dict[str, Any]:
    """Processes start between the size probe and the read: once (ten of them), or always."""
    return node(
        [k100(0, used=9 * GIB, busy=30)],
        processes=[process(4101, [(0, 6 * GIB, 25)]), process(4102, [(0, 2 * GIB, 5)])],
        grow=10 if mode == "once" else 1,
        grow_always=mode == "always",
    )


def by_device_not_supported() -> dict[str, Any]:
    """An older fork without the per-device row: Hygon's _v2 answers (VRAM in MiB for the whole
    process; a usage rate per GPU). PID 4102 uses two cards, so its VRAM is no one card's."""
    return node(
        [k100(0, used=9 * GIB, busy=30), k100(1, used=2 * GIB, busy=10)],
        processes=[
            process(4101, [(0, 6 * GIB, 25)], v2={"vram_mib": 6144, "rates": [25.5]}),
            process(4102, [(0, GIB, 5), (1, GIB, 9)], v2={"vram_mib": 2048, "rates": [5.0, 9.0]}),
        ],
        faults={"rsmi_compute_process_info_by_device_get": RSMI_NOT_SUPPORTED},
    )


def vdcu_calls() -> dict[str, Any]:
    """Three vDCUs: index 0 on card 1 busy, index 3 on card 0 whose busy percent the library
    does not serve, index 7 destroyed mid-round (VDEV_NOT_EXIST on its busy percent)."""
    return node(
        [k100(0, used=4 * GIB), k100(1, used=12 * GIB, busy=55)],
        vdevs=[
            vdev(0, 1, cu=60, total=16 * GIB, used=10 * GIB, busy=71, container=0xC0FFEE),
            vdev(3, 0, cu=30, total=8 * GIB, used=2 * GIB, busy=None),
            vdev(
                7,
                0,
                cu=30,
                total=8 * GIB,
                used=0,
                busy=0,
                errors={"dmiGetVDevBusyPercent": DMI_VDEV_NOT_EXIST},
            ),
        ],
    )


def lost_card() -> dict[str, Any]:
    """Four cards; card 2 answers once, then its sysfs files are gone (every call FILE_ERROR)."""
    cards = [k100(n, used=GIB * n, busy=n) for n in range(4)]
    cards[2]["lost_after"] = 1
    return node(cards)


U64_MAX = 0xFFFFFFFFFFFFFFFF
NONE_CURRENT = 0xFFFFFFFF  # rsmi_frequencies_t.current when no level is current


def k100ai_health() -> dict[str, Any]:
    """Issue 29's figures on three K100_AI. Card 0 answers every one: UMC ECC 4 corrected and
    1 uncorrected, retired pages (two reserved, one pending), an energy counter of 1,000,000
    counts of 15.3 µJ, its system clock at the top of three levels, memory at 1.6 GHz, 9 PCIe
    replays, its memory busy 35% of the time. Card 1 answers none: NOT_SUPPORTED from ECC,
    retired pages, energy, replays, the memory's busy percent and the memory clock. Card 2
    answers the all-ones "not available" for replays and ECC, no current system clock level, a
    page that could not be retired, and a memory busy percent over 100."""
    return node(
        [
            k100(
                0,
                ecc_corr=4,
                ecc_unc=1,
                pages=[0, 0, 1],
                energy=1_000_000,
                energy_resolution=15.3,
                clocks={
                    "sys": {"levels": [300_000_000, 1_000_000_000, 1_500_000_000], "current": 2},
                    "mem": {"levels": [1_600_000_000], "current": 0},
                },
                pcie_replays=9,
                mem_busy=35,
            ),
            k100(
                1,
                errors={
                    "rsmi_dev_ecc_count_get": RSMI_NOT_SUPPORTED,
                    "rsmi_dev_memory_reserved_pages_get": RSMI_NOT_SUPPORTED,
                    "rsmi_dev_energy_count_get": RSMI_NOT_SUPPORTED,
                    "rsmi_dev_pci_replay_counter_get": RSMI_NOT_SUPPORTED,
                    "rsmi_dev_memory_busy_percent_get": RSMI_NOT_SUPPORTED,
                },
                clock_faults={"mem": RSMI_NOT_SUPPORTED},
            ),
            k100(
                2,
                ecc_corr=U64_MAX,
                pages=[2],
                pcie_replays=U64_MAX,
                mem_busy=101,
                clocks={"sys": {"levels": [1_500_000_000], "current": NONE_CURRENT}},
            ),
        ]
    )


HSL, PCIE = 2, 1  # RSMI_IO_LINK_TYPE: the header's XGMI (Hygon's HSL) and PCIEXPRESS


def links_and_numa() -> dict[str, Any]:
    """R-X3 on four K100_AI. Cards 0 and 1 are joined by HSL, on NUMA node 0; card 2 reaches
    card 0 over PCIe (two hops), on NUMA node 1; card 1 against card 2 answers the link type 0
    (UNDEFINED): not placed; card 3 answers NOT_SUPPORTED for its NUMA node and for every pair
    it is in."""
    cards = [k100(n) for n in range(4)]
    cards[0].update(numa=0, links={"1": {"type": HSL, "hops": 1}, "2": {"type": PCIE, "hops": 2}})
    cards[1].update(numa=0, links={"2": {"type": 0, "hops": 1}})
    cards[2].update(numa=1)
    return node(cards)
