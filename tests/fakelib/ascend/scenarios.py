"""Named scenarios for the fake libdcmi.so, after the situations the ascend backend must meet.

Figures follow published ones: a 910B2 has 65536 MB of HBM, 24 AI cores, idles at about
3430 MB used and 100 W (GPUStack's detector sample of eight 910B2s on driver 25.5.1); a vLLM
worker held 57280 MB on one (`npu-smi info -t proc-mem`, in a public design note); an Atlas 300I
Duo card carries two 310P3 chips of 44280 MB each, DDR with no HBM (GPUStack's 310P3 sample).
"""

from __future__ import annotations

from typing import Any

from tests.fakelib.ascend import (
    MIB,
    NOT_SUPPORTED,
    VDEV_ACTIVITY,
    VDEV_TOTAL,
    device,
    vdev,
)

B2 = {"hbm": (65536, 3432), "aicore": 0, "temp": 45, "power": 1013}
WORKER_BYTES = 57280 * MIB  # one vLLM worker on a 910B2


def two_devices_on_one_card() -> list[dict[str, Any]]:
    """An Atlas 300I Duo as card 4: two 310P3 NPUs (devices 0 and 1) and the card's MCU
    (device 2), DDR memory only: the HBM query answers not-supported, and so do the HBM's ECC
    and frequency; the DDR's answer instead."""
    no_hbm = {"dcmi_get_device_hbm_info": NOT_SUPPORTED}
    ddr = {"ecc_memory": "ddr", "freq": {"hbm": "unsupported", "ddr": 3200}}
    return [
        device(
            4,
            0,
            chip="310P3",
            logic=0,
            phy=0,
            memory=(44280, 2549),
            aicore=91,
            temp=58,
            power=0,
            errors=no_hbm,
            **ddr,
        ),
        device(
            4,
            1,
            chip="310P3",
            logic=1,
            phy=1,
            memory=(44280, 42773),
            aicore=3,
            temp=51,
            power=0,
            errors=no_hbm,
            **ddr,
        ),
        device(4, 2, type=1, n=9),  # the MCU: not an accelerator
    ]


def hbm_answers_zero() -> list[dict[str, Any]]:
    """A part whose HBM query succeeds with zeros: the general memory query answers instead."""
    return [device(0, hbm=(0, 0), memory=(21534, 20000))]


def eight_910b2(**per_card: Any) -> list[dict[str, Any]]:
    """Eight 910B2 on cards 0-7, one chip each; physical ids follow the cards."""
    cards = [device(c, n=c, **B2) for c in range(8)]
    for c, options in per_card.items():
        cards[int(c.removeprefix("npu"))].update(options)
    return cards


def busy_worker(processes: int = 1, **options: Any) -> list[dict[str, Any]]:
    """One 910B2 with `processes` workers of 57280 MB between them, plus `options`."""
    each = WORKER_BYTES // processes
    return [
        device(
            0,
            hbm=(65536, 3432 + 57280),
            aicore=87,
            temp=61,
            power=3211,
            processes=[(899293 + i, each) for i in range(processes)],
            **options,
        )
    ]


def process_list_overruns(rows: int = 40) -> list[dict[str, Any]]:
    """More processes than the 32 the read accepts: the library writes them all anyway."""
    return [
        device(
            0,
            hbm=(65536, 60000),
            aicore=70,
            processes=[(700_000 + i, 1000 * MIB) for i in range(rows)],
        )
    ]


def count_understates() -> list[dict[str, Any]]:
    """The library writes 40 rows and says 32: only the guard tail tells."""
    overrun = process_list_overruns(40)
    overrun[0]["reported_count"] = 32
    return overrun


def megabytes_for_bytes() -> list[dict[str, Any]]:
    """A driver whose process figure is MB, not bytes: 57280 where bytes were due."""
    return [device(0, hbm=(65536, 3432 + 57280), aicore=87, processes=[(899293, 57280)])]


def vnpus(activity: bool = True) -> list[dict[str, Any]]:
    """NPU 0 split into two vir04 vNPUs (vdev 100 busy, 101 idle) and NPU 1 into a vir08
    (vdev 102); without `activity` the driver refuses the activity sub-command."""
    errors = {} if activity else {VDEV_ACTIVITY: NOT_SUPPORTED}
    return [
        device(
            0,
            n=0,
            **B2,
            errors=errors,
            vdevs=[
                vdev(100, "vir04", aic=4, memory_mb=16384, util=62, used_kb=12_000 * 1024),
                vdev(101, "vir04", aic=4, memory_mb=16384, util=0, used_kb=0),
            ],
        ),
        device(
            1,
            n=1,
            **B2,
            errors=errors,
            vdevs=[
                vdev(102, "vir08", aic=8, memory_mb=32768, util=18, used_kb=9_500 * 1024),
            ],
        ),
    ]


def no_vnpu_support() -> list[dict[str, Any]]:
    """A driver that serves no VDEV_MNG query at all."""
    return [device(0, **B2, errors={VDEV_TOTAL: NOT_SUPPORTED})]


def lost_one_of_eight(at_start: bool = False) -> list[dict[str, Any]]:
    """Eight 910B2; NPU 5 answers its die once and then falls off (-8008 from every call)."""
    cards = eight_910b2()
    cards[5]["lost" if at_start else "lost_after"] = 1
    return cards


UINT32_MAX = 0xFFFFFFFF


def health_910b2() -> list[dict[str, Any]]:
    """Issue 29's figures on three 910B2. NPU 0 answers every one DCMI declares: HBM ECC (3
    single-bit and 1 double-bit error now, 40 and 2 in total, 2 and 1 pages isolated, one page
    to be isolated next), AI cores at 1650 MHz, HBM at 1600 MHz. NPU 1 has ECC off and answers
    no frequency. NPU 2 answers the all-ones "not available" for one ECC count and the AI core
    frequency, and a memory frequency above 100 GHz."""
    return [
        device(
            0,
            n=0,
            **B2,
            ecc={
                "single": 3,
                "double": 1,
                "total_single": 40,
                "total_double": 2,
                "single_isolated": 2,
                "double_isolated": 1,
                "double_next": 1,
            },
            freq={"aicore": 1650, "hbm": 1600},
        ),
        device(
            1,
            n=1,
            **B2,
            ecc={"enable": 0},
            errors={"dcmi_get_device_frequency": NOT_SUPPORTED},
        ),
        device(
            2,
            n=2,
            **B2,
            ecc={"total_single": UINT32_MAX},
            freq={"aicore": UINT32_MAX, "hbm": 100_001},
        ),
    ]


CARD_DROP = 0x40F84E00  # an error code Huawei's tools name (the reference notes, §6)
OTHER_CODE = 0x80E01801


def error_codes_910b2() -> list[dict[str, Any]]:
    """dcmi_get_device_errorcode_v2 on five 910B2. NPU 0 reports two codes, one of them twice;
    NPU 1 none; NPU 2 refuses the call (-8255, not supported); NPU 3 answers a count past the
    header's 128; NPU 4 reports 70 distinct codes, more than the agent names."""
    return [
        device(0, n=0, **B2, error_codes=[CARD_DROP, OTHER_CODE, CARD_DROP]),
        device(1, n=1, **B2),
        device(2, n=2, **B2, errors={"dcmi_get_device_errorcode_v2": NOT_SUPPORTED}),
        device(3, n=3, **B2, error_codes=[CARD_DROP], error_count=200),
        device(4, n=4, **B2, error_codes=list(range(0x1000, 0x1000 + 70))),
    ]


HCCS, PIX, SIO_OR_BUTT, HCCS_SW = 3, 5, 6, 7  # DCMI_TOPO_TYPE_*


def links_910b2() -> list[dict[str, Any]]:
    """R-X3 on four 910B2 (PCI buses 01, 11, 21, 31 by default). NPUs 0 and 1 are joined by
    HCCS, 0 and 3 by HCCS through a switch, 0 and 2 share a PCIe switch (PIX); 1 against 2
    answers 6 (SIO in the newer header, "unknown" in the older): not placed; 1 against 3 and 2
    against 3 answer DCMI_ERR_NOT_SUPPORT."""
    npus = [device(c, n=c, **B2) for c in range(4)]
    npus[0]["topo"] = {"1": HCCS, "2": PIX, "3": HCCS_SW}
    npus[1]["topo"] = {"2": SIO_OR_BUTT}
    return npus


def eight_910b2_hccs(npus: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An Atlas 800T A2's links (synthetic, after its layout): the eight NPUs all joined to each
    other by HCCS; PCI buses 0xC1, 0xC2, ... so sysfs can place them (NPUs 0-3 on NUMA node 0,
    4-7 on node 1, as the recording's sysfs says)."""
    for n, doc in enumerate(npus):
        doc["bus"] = 0xC1 + n
        doc["topo"] = {str(m): HCCS for m in range(n + 1, len(npus))}
    return npus
