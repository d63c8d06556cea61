"""Named scenarios for the fake ROCm install, after the situations the amd backend must meet.
Each returns the scenario document (tests/fakelib/amd.scenario) for a node; ids come from
tests.fakelib.amd.uuid_of / gpustack_id, so tests can grant the same devices."""

from __future__ import annotations

from typing import Any

from tests.fakelib.amd import GIB, NOT_SUPPORTED, card, cpx_card, process, scenario

SECOND = 1_000_000_000  # ns


def spx_pair() -> dict[str, Any]:
    """Two whole MI300X: card 0 busy with two processes (one whose engine time advances 3 s in
    each 15 s round, one KFD process whose counter never moves and whose CUs are known), card 1
    idle."""
    return scenario(
        [
            card(
                0,
                used_mib=61_440,
                gfx=87,
                power_w=612,
                hotspot=71,
                processes=[
                    process(4101, 40 * GIB, gfx_ns=7 * SECOND, gfx_step_ns=3 * SECOND, cu=152),
                    process(4102, 16 * GIB, cu=76),
                ],
            ),
            card(1, used_mib=283, gfx=0, power_w=131, hotspot=38),
        ]
    )


def cpx_eight_xcps() -> dict[str, Any]:
    """Card 0 whole; card 1 in CPX mode: eight XCPs with eight UUIDs on one socket, the
    secondary ones answering N/A for activity, power and temperature; XCP 0 and XCP 2 busy
    (the card's GPU metrics table states each XCP's own GFX busy: 91 and 64, the others 0)."""
    return scenario(
        [
            card(0, used_mib=1_024, gfx=3, power_w=140, hotspot=41),
            *cpx_card(
                1,
                render_base=129,
                xcps=[
                    {
                        "used_mib": 20_480,
                        "gfx": 91,
                        "processes": [process(5101, 19 * GIB, cu=38)],
                    },
                    {"used_mib": 12},
                    {
                        "used_mib": 9_216,
                        "xcc_busy": [64],  # N/A on its handle; its own in the table
                        "processes": [process(5301, 8 * GIB, cu=19)],
                    },
                ],
            ),
        ]
    )


def cu_occupancy_invalid() -> dict[str, Any]:
    """Three KFD processes on one card, the middle one's cu_occupancy 0xFFFFFFFF."""
    return scenario(
        [
            card(
                0,
                used_mib=30_000,
                gfx=60,
                processes=[
                    process(6101, 10 * GIB, cu=100),
                    process(6102, 10 * GIB, cu=None),
                    process(6103, 8 * GIB, cu=38),
                ],
            )
        ]
    )


def engine_time_advancing() -> dict[str, Any]:
    """One process whose GFX engine time advances 6 s in every 15 s round (40%), another 1.5 s
    (10%), on one card."""
    return scenario(
        [
            card(
                0,
                used_mib=50_000,
                gfx=55,
                processes=[
                    process(7101, 30 * GIB, gfx_ns=100 * SECOND, gfx_step_ns=6 * SECOND, cu=200),
                    process(7102, 12 * GIB, gfx_ns=4 * SECOND, gfx_step_ns=3 * SECOND // 2, cu=30),
                ],
            )
        ]
    )


def out_of_resources() -> dict[str, Any]:
    """A card whose process list is longer than every buffer the wheel passes (1,024 rows):
    the list grows past the buffer at each read, so the call answers OUT_OF_RESOURCES."""
    return scenario(
        [
            card(
                0,
                used_mib=150_000,
                gfx=99,
                processes=[process(8101, 2 * GIB, cu=10)],
                grow=40,
                grow_always=True,
            ),
            card(1, used_mib=0),
        ]
    )


def device_lost_mid_read() -> dict[str, Any]:
    """Four whole cards; card 2 answers its identity once and then falls off (NOT_FOUND)."""
    cards = [card(i, used_mib=1_000 * (i + 1), gfx=10 * i) for i in range(4)]
    cards[2]["lost_after"] = 1
    return scenario(cards)


def ecc_uncorrectable() -> dict[str, Any]:
    """Card 0 whole with 3 uncorrectable ECC errors; card 1 whole with correctable ones only
    (healthy); card 2 in CPX mode whose XCP 0 (where the board is read) counts 1 uncorrectable
    error; card 3 in CPX mode whose XCP 3 alone counts one (the board's count is read on XCP 0
    only, so nothing of it is read)."""
    return scenario(
        [
            card(0, used_mib=2_000, gfx=12, ecc={"correctable": 0, "uncorrectable": 3}),
            card(1, used_mib=1_000, gfx=5, ecc={"correctable": 7, "uncorrectable": 0}),
            *cpx_card(
                2,
                render_base=130,
                xcps=[{"used_mib": 500, "gfx": 4, "ecc": {"correctable": 2, "uncorrectable": 1}}],
            ),
            *cpx_card(
                3,
                bus=0x75,
                render_base=138,
                xcps=[{}, {}, {}, {"ecc": {"correctable": 0, "uncorrectable": 1}}],
            ),
        ]
    )


def device_lost_within_read() -> dict[str, Any]:
    """Three whole cards, every one with a process: card 1 answers its UUID in the second read
    and then NOT_FOUND to every other call of that same read (it fell off the bus between two
    calls); card 2 does the same in the very first read, so nothing else of it was ever known."""
    cards = [
        card(i, used_mib=1_000 * (i + 1), gfx=10 * (i + 1), processes=[process(9500 + i, GIB)])
        for i in range(3)
    ]
    cards[1]["lost_within"] = 2
    cards[2]["lost_within"] = 1
    return scenario(cards)


def unaligned_process_bytes(**top: Any) -> dict[str, Any]:
    """One whole card with one process holding 10 GiB and one byte of VRAM, and one holding
    exactly 2 GiB; `rocm` picks the release (7.2.0: ROCm SMI answers the same rows)."""
    return scenario(
        [
            card(
                0,
                used_mib=12_300,
                gfx=40,
                processes=[process(9601, 10 * GIB + 1, cu=152), process(9602, 2 * GIB, cu=38)],
            )
        ],
        **top,
    )


def rocm_720(**top: Any) -> dict[str, Any]:
    """ROCm 7.2.0, where amdsmi's per-device process list ignores the handle (every process
    under every GPU): two whole cards and one in CPX, processes on each; ROCm SMI enumerates
    the devices in reverse order, so it is matched by PCI id."""
    return scenario(
        [
            card(
                0,
                used_mib=40_000,
                gfx=70,
                processes=[process(9101, 30 * GIB, cu=152), process(9102, 2 * GIB, cu=None)],
            ),
            card(1, used_mib=9_000, gfx=20, processes=[process(9201, 8 * GIB, cu=76)]),
            *cpx_card(
                2,
                render_base=130,
                xcps=[{"used_mib": 4_000, "gfx": 33, "processes": [process(9301, 3 * GIB, cu=19)]}],
            ),
        ],
        rocm="7.2.0",
        process_list_ignores_handle=True,
        rsmi_reverse=True,
        **top,
    )


def health_figures() -> dict[str, Any]:
    """R-X7's figures on three MI300X. Card 0 answers them: 1,000,000 counts of 15.3 µJ of
    energy, 2,100 and 1,300 MHz, 4 PCIe replays. Card 1 answers NOT_SUPPORTED to the energy
    and replay calls and to its memory clock. Card 2 answers UINT64_MAX replays, the wheel's
    "N/A" (UINT32_MAX) for its graphics clock and 0xFFFF for its memory clock, the mark ROCm SMI
    writes into a 16-bit GPU-metrics field it does not have (issue 43)."""
    return scenario(
        [
            card(
                0,
                energy={"accumulator": 1_000_000, "resolution": 15.3},
                clocks={"gfx": 2100, "mem": 1300},
                pcie_replays=4,
            ),
            card(
                1,
                faults={
                    "amdsmi_get_energy_count": NOT_SUPPORTED,
                    "amdsmi_get_gpu_pci_replay_counter": NOT_SUPPORTED,
                },
                clock_faults={"mem": NOT_SUPPORTED},
            ),
            card(2, pcie_replays=0xFFFFFFFFFFFFFFFF, clocks={"gfx": 0xFFFFFFFF, "mem": 0xFFFF}),
        ]
    )


UINT64_MAX = 0xFFFFFFFFFFFFFFFF
RESERVED, PENDING, UNRESERVABLE = 0, 1, 2  # amdsmi_memory_page_status_t
NA8 = 0xFF  # a violation flag amdsmi does not support


def page(status: int, n: int = 0) -> dict[str, int]:
    """One bad-page record: a 4 KiB page at an HBM address."""
    return {"address": 0x3F_0000_0000 + n * 0x1000, "size": 4096, "status": status}


def ecc_pages_throttle() -> dict[str, Any]:
    """R-X7's ECC, bad pages and throttling on four MI300X. Card 0 answers them all: 12
    correctable errors, 3 deferred, two pages retired and one pending, package power and HBM
    thermal violations active. Card 1 answers NOT_SUPPORTED to every one of these calls. Card
    2's total ECC call is NOT_SUPPORTED while its blocks answer (UMC 5 and GFX 2 correctable,
    SDMA NOT_SUPPORTED: 7), a page it could not retire, and every violation flag UINT8_MAX
    (unsupported). Card 3 answers UINT64_MAX uncorrectable errors (a sentinel) and 2^63 + 1
    correctable ones (past any counter), and a page status amdsmi does not define."""
    return scenario(
        [
            card(
                0,
                ecc={"correctable": 12, "uncorrectable": 0, "deferred": 3},
                bad_pages=[page(RESERVED, 0), page(RESERVED, 1), page(PENDING, 2)],
                violation={"ppt": 1, "socket": 0, "hbm": 1, "prochot": 0, "vr": 1},
            ),
            card(
                1,
                faults={
                    "amdsmi_get_gpu_total_ecc_count": NOT_SUPPORTED,
                    "amdsmi_get_gpu_ecc_enabled": NOT_SUPPORTED,
                    "amdsmi_get_gpu_bad_page_info": NOT_SUPPORTED,
                    "amdsmi_get_violation_status": NOT_SUPPORTED,
                },
            ),
            card(
                2,
                faults={"amdsmi_get_gpu_total_ecc_count": NOT_SUPPORTED},
                ecc_enabled=0x7,  # UMC, SDMA, GFX
                ecc_blocks={"UMC": {"correctable": 5}, "GFX": {"correctable": 2}},
                ecc_block_faults={"SDMA": NOT_SUPPORTED},
                bad_pages=[page(UNRESERVABLE)],
                violation={f: NA8 for f in ("prochot", "ppt", "socket", "vr", "hbm", "gfx_clk")},
            ),
            card(
                3,
                ecc={"correctable": 2**63 + 1, "uncorrectable": UINT64_MAX},
                bad_pages=[page(7)],
            ),
        ]
    )


XGMI, PCIE = 2, 1  # amdsmi_link_type_t


def links_and_numa() -> dict[str, Any]:
    """R-X3 on four MI300X sockets. Cards 0 and 1 (SPX) are joined by xGMI, on NUMA node 0; the
    CPX card on socket 2 (eight XCPs, its board the first) is joined to card 0 by xGMI, on NUMA
    node 1; card 3 (SPX) reaches card 0 over PCIe (two hops) and has no NUMA node (the call
    NOT_SUPPORTED). Card 1 and card 3 answer the link type 0 (INTERNAL, or older headers'
    UNDEFINED): not placed; card 1 against the CPX card and card 3 against it answer
    NOT_SUPPORTED."""
    xcps = cpx_card(2, bus=0x65)
    xcps[0]["numa"] = 1
    return scenario(
        [
            card(
                0,
                numa=0,
                links={
                    "1": {"type": XGMI, "hops": 1},
                    "2": {"type": XGMI},
                    "10": {"type": PCIE, "hops": 2},
                },
            ),
            card(1, numa=0, links={"10": {"type": 0}}),
            *xcps,
            card(3, bus=0xF5),
        ]
    )
