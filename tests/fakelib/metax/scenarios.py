"""Named scenarios for the fake libmxsml, after the situations the metax backend must meet.

Card UUIDs are tests.world.gpu(n), so the same cards can be granted by tests.world.pod(); the
figures follow a recorded 8 x MXC500 node (64 GiB cards, 826 MiB used at idle, ~57 W, 36 C).
"""

from __future__ import annotations

from typing import Any

from tests.fakelib.metax import (
    BRAND_N,
    MIB,
    MODE_PF,
    MODE_VF,
    card,
    process,
    sgpu,
)
from tests.world import gpu, uid

GIB = 1024 * MIB


def sgpu_uuid(n: int, slot: int) -> str:
    return f"GPU-{uid(f'sgpu{n}/{slot}')}"


def bdf(n: int) -> str:
    return f"0000:{0x0E + n:02x}:00.0"


def whole_cards() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Three C500s: one busy, two idle; one process uses cards 0 and 2 (a row lists both)."""
    cards = [
        card(
            gpu(20),
            bdf=bdf(0),
            used_mib=59_963,
            usage=87,
            temp=52.43,
            power=(105.2, 103.9, 99.7),
        ),
        card(gpu(21), bdf=bdf(1), usage=0, power=(19.1, 19.0, 18.9)),
        card(gpu(22), bdf=bdf(2), used_mib=9_000, usage=12, power=(30.0, 30.0, 30.0)),
    ]
    return cards, [process(7001, (0, 40 * GIB), (2, 8 * GIB))]


def two_sgpus() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Card 0 whole; card 1 in sGPU mode with a busy sGPU (16 GiB, 30%, using 28.75% of the
    card) and an idle one (8 GiB, 20%), one process in each (_v3 names the sGPU)."""
    cards = [
        card(gpu(30), bdf=bdf(0), used_mib=40_000, usage=64),
        card(
            gpu(31),
            bdf=bdf(1),
            used_mib=16_223,
            usage=29,
            sgpu_toggle=1,
            sgpus=[
                sgpu(
                    0,
                    sgpu_uuid(31, 0),
                    vram_mib=16_384,
                    compute=30,
                    usage=2_875,
                    used_mib=15_020,
                    # The id MetaX's device plugin registers the sGPU under with the kubelet;
                    # its form is not published, so any string, matched verbatim.
                    annotations_id=f"{gpu(31)}::sgpu-0",
                ),
                sgpu(2, sgpu_uuid(31, 2), vram_mib=8_192, compute=20, used_mib=1_203),
            ],
        ),
    ]
    processes = [
        process(7101, (1, 15_020 * MIB, 0)),
        process(7201, (1, 1_203 * MIB, 2)),
    ]
    return cards, processes


def sgpu_off() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A carved card with sGPU mode off (the toggle answers 0) and one that does not support
    it at all (OperationNotSupport): processes run on the whole card (_v3 sGPU id -1)."""
    cards = [
        card(gpu(40), bdf=bdf(0), used_mib=12_000, usage=41, sgpu_toggle=0),
        card(gpu(41), bdf=bdf(1), used_mib=3_000, usage=5),
    ]
    processes = [process(7301, (0, 11_000 * MIB)), process(7302, (1, 2_000 * MIB))]
    return cards, processes


def vf_in_list() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """An SR-IOV host: a PF, two of its VFs, another PF. The VFs are skipped; the second PF
    keeps its sequence index 3, and its process row says gpuId 3."""
    cards = [
        card(gpu(50), bdf=bdf(0), mode=MODE_PF, usage=10),
        card(gpu(51), bdf="0000:0e:00.1", mode=MODE_VF, used_mib=4_000),
        card(gpu(52), bdf="0000:0e:00.2", mode=MODE_VF, used_mib=4_000),
        card(gpu(53), bdf=bdf(1), mode=MODE_PF, used_mib=7_000, usage=33),
    ]
    return cards, [process(7501, (3, 6 * GIB))]


def card_lost() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Four C500s; card 2 answers one round and then falls off (every call: NoDevice)."""
    cards = [card(gpu(60 + i), bdf=bdf(i), used_mib=826 + 1_000 * i, usage=i) for i in range(4)]
    cards[2]["lost_after"] = 1
    return cards, [process(7601, (2, 2 * GIB))]


def list_grows(mode: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Processes start between the probe and the read: once (asked again, whole), or always
    just more than the buffer holds (never whole: truncated)."""
    cards = [card(gpu(70), bdf=bdf(0), usage=50, grow=(20 if mode == "once" else 1, mode))]
    return cards, [process(7701, (0, GIB)), process(7702, (0, GIB))]


def n_class() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """An N-class card, whose compute is the DLA's, not Xcore's."""
    return [card(gpu(80), name="MXN100", brand=BRAND_N, total_mib=16_384, usage=17)], []


UINT32_MAX = 0xFFFFFFFF
UINT64_MAX = 0xFFFFFFFFFFFFFFFF
NOT_SUPPORTED = 3


def health() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Issue 29's figures on three C500s. Card 0 answers every one MXSML declares: SRAM and
    DRAM ECC (2 + 5 corrected, 0 + 1 uncorrected), 3 retired pages, over-power (0x4), HBM
    over-temperature (0x20) and power-brake (0x100) throttling with MetaX's "other" bit
    (0x80000000), Xcore at 1500 MHz and
    the memory controller at 1800. Card 1 answers OperationNotSupport to ECC, throttle and the
    memory clock. Card 2 answers all ones for a DRAM count, the throttle mask and the Xcore
    clock."""
    cards = [
        card(
            gpu(90),
            bdf=bdf(0),
            ecc={"sram_ce": 2, "dram_ce": 5, "dram_ue": 1, "retired": 3},
            throttle=0x4 | 0x20 | 0x100 | 0x80000000,
            clocks={"xcore": [1500, 1500], "mc0": [1800]},
        ),
        card(
            gpu(91),
            bdf=bdf(1),
            errors={
                "mxSmlGetTotalEccErrors": NOT_SUPPORTED,
                "mxSmlGetCurrentClocksThrottleReason": NOT_SUPPORTED,
            },
            clock_faults={"mc0": NOT_SUPPORTED},
        ),
        card(
            gpu(92),
            bdf=bdf(2),
            ecc={"dram_ue": UINT32_MAX},
            throttle=UINT64_MAX,
            clocks={"xcore": [UINT32_MAX]},
        ),
    ]
    return cards, []


METAXLINK, NODE, ETH = 5, 4, 7  # mxSmlGpuTopologyLevel_t


def links() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """R-X3 on four C500s (buses 0e-11). Cards 0 and 1 are joined by MetaXLink, 0 and 2 only
    through one NUMA node's host bridges (NODE); 1 against 2 answers ETH, which has no kind
    here: not placed; card 3 answers OperationNotSupport for every pair it is in."""
    cards = [card(gpu(80 + i), bdf=bdf(i)) for i in range(4)]
    cards[0]["topo"] = {"1": METAXLINK, "2": NODE}
    cards[1]["topo"] = {"2": ETH}
    return cards, []
