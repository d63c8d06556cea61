"""Named scenarios for the fake libnvidia-ml, after the situations the NVIDIA backend must meet.

Card UUIDs are tests.world.gpu(n), so the same cards can be granted by tests.world.pod().
"""

from __future__ import annotations

from typing import Any

from tests.fakelib.nvidia import device
from tests.world import gpu

NOT_SUPPORTED = 3
NO_PERMISSION = 4
FUNCTION_NOT_FOUND = 13
H100 = {"name": "NVIDIA H100 80GB HBM3", "total_mib": 81559}
A100 = {"name": "NVIDIA A100-SXM4-40GB", "total_mib": 40960}
B200 = {"name": "NVIDIA B200", "total_mib": 183359}
GIB = 1 << 30
PER_PROCESS = (
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetProcessUtilization",
    "nvmlDeviceGetProcessesUtilizationInfo",
)


# What the recorded H200's GPM answered under a quarter-duty bf16 workload (nvml.h's metric
# ids; ../shared/recorded/nvidia-h200-2026-12-04/gpm-readings.json): the ids a whole card's
# fake serves. Percent, and MiB/s for PCIe and NVLink.
GPM_QUARTER_DUTY: dict[int, float] = {
    1: 24.6582,  # GRAPHICS_UTIL
    2: 21.1868,  # SM_UTIL
    3: 3.0975,  # SM_OCCUPANCY
    4: 0.3948,  # INTEGER_UTIL
    5: 20.1394,  # ANY_TENSOR_UTIL
    6: 0.0,  # DFMA_TENSOR_UTIL
    7: 20.1394,  # HMMA_TENSOR_UTIL
    9: 0.0,  # IMMA_TENSOR_UTIL
    10: 5.3499,  # DRAM_BW_UTIL
    11: 0.0,  # FP64_UTIL
    12: 0.0,  # FP32_UTIL
    13: 0.0,  # FP16_UTIL
    20: 1.9317,  # PCIE_TX_PER_SEC
    21: 8.2348,  # PCIE_RX_PER_SEC
    60: 0.0,  # NVLINK_TOTAL_RX_PER_SEC
    61: 0.0,  # NVLINK_TOTAL_TX_PER_SEC
}


def mig_uuid(n: int) -> str:
    return f"MIG-{gpu(100 + n)[4:]}"


def h100_mig(gpm: bool = True) -> list[dict[str, Any]]:
    """Card 0 whole; card 1 in MIG mode: a busy 3g.40gb, a 1g.10gb of 9856 MiB, an idle one.
    Hopper serves GPM: each GPU instance's SM activity between two samples, and the whole
    card 0's metrics (issue 41: the H200's quarter-duty bf16 readings). `gpm=False`: a driver
    without GPM on either card."""
    return [
        device(
            gpu(0),
            **H100,
            used_mib=60_000,
            util=(80, 30),
            temp=55,
            power=500_000,
            gpm=int(gpm),
            gpm_metrics=dict(GPM_QUARTER_DUTY),
        ),
        device(
            gpu(1),
            **H100,
            used_mib=30_100,
            temp=44,
            power=210_000,
            mig_mode=(1, 1),
            processes=[(7001, 28 * GIB, 1, 0)],
            gpm=int(gpm),
            migs=[
                {
                    "slot": 0,
                    "uuid": mig_uuid(0),
                    "gi": 1,
                    "total_mib": 40192,
                    "used_mib": 28_700,
                    "sm": 87.25,
                },
                {
                    "slot": 1,
                    "uuid": mig_uuid(1),
                    "gi": 9,
                    "total_mib": 9856,
                    "used_mib": 1_400,
                    "sm": 12.5,
                },
                {"slot": 3, "uuid": mig_uuid(2), "gi": 10, "total_mib": 9856, "sm": 0},
            ],
        ),
    ]


def a100_mig_without_gpm() -> list[dict[str, Any]]:
    """An A100 in MIG mode: Ampere serves no GPM (NVML says the device is not supported)."""
    return [
        device(
            gpu(5),
            **A100,
            used_mib=4_000,
            mig_mode=(1, 1),
            migs=[{"slot": 0, "uuid": mig_uuid(5), "gi": 3, "total_mib": 9856, "used_mib": 3_900}],
        )
    ]


def a100_two_slices() -> list[dict[str, Any]]:
    """Two slices on one A100: PID 7101 busy (two samples, the newest counts), 7201 idle."""
    return [
        device(
            gpu(2),
            **A100,
            used_mib=24_000,
            util=(36, 12),
            temp=50,
            power=260_000,
            processes=[(7101, 20 * GIB), (7201, 3 * GIB)],
            samples=[(7101, 1_000_001, 30, 8), (7101, 1_000_002, 36, 12)],
        )
    ]


def per_process_not_supported() -> list[dict[str, Any]]:
    """Both per-process calls refused, as on Blackwell with driver 580.159.03."""
    errors = dict.fromkeys(PER_PROCESS, NOT_SUPPORTED)
    return [
        device(gpu(3), **B200, used_mib=97_000, util=(64, 30), errors=errors),
        device(gpu(4), **B200, used_mib=0),
    ]


def memory_sentinel() -> list[dict[str, Any]]:
    """A process whose memory the driver reports as NVML_VALUE_NOT_AVAILABLE."""
    return [
        device(
            gpu(2),
            **A100,
            used_mib=9_000,
            util=(10, 2),
            processes=[(7101, 4 * GIB), (7201, "na")],
            samples=[(7101, 5, 10, 2)],
        )
    ]


def gpu_lost_one_of_eight(lost_at_start: bool = False) -> list[dict[str, Any]]:
    """Eight H100s; card 5 answers once and then falls off the bus (GPU_IS_LOST)."""
    cards = [device(gpu(10 + i), **H100, used_mib=1_000 * i, util=(i, 0)) for i in range(8)]
    cards[5]["lost" if lost_at_start else "lost_after"] = 1
    return cards


def process_list_grows(mode: str) -> list[dict[str, Any]]:
    """Ten processes start between NVML's size probe and its read (once, or every time)."""
    return [
        device(
            gpu(2),
            **A100,
            used_mib=9_000,
            util=(40, 5),
            processes=[(7101, GIB), (7201, GIB)],
            samples=[(7101, 5, 40, 5)],
            grow=(10 if mode == "once" else 1, mode),
        )
    ]


def pid_exits_mid_round() -> list[dict[str, Any]]:
    """PID 7301 is listed but gone from /proc when read; PID 7401 appears only in samples."""
    return [
        device(
            gpu(2),
            **A100,
            used_mib=9_000,
            util=(40, 5),
            processes=[(7101, 2 * GIB), (7301, GIB)],
            samples=[(7101, 5, 30, 5), (7401, 6, 50, 1)],
        )
    ]


U32_MAX = 0xFFFFFFFF
U64_MAX = 0xFFFFFFFFFFFFFFFF


def h100_health() -> list[dict[str, Any]]:
    """Issue 29's figures on three H100s. Card 0 answers every one: ECC counts, remapped rows
    (one pending), 123,456,789 mJ, SW power cap, HW thermal slowdown and CUDA 13's Reliability
    (0x400) active, its clocks, 7
    PCIe replays. Card 1 answers none: ECC off, and NOT_SUPPORTED from the rest (the clocks-event
    call missing from the driver, the older throttle call refused, one clock domain refused).
    Card 2 is on an older driver's names (only the throttle call) and answers the types'
    all-ones "not available" for energy, replays, its SM clock and one ECC counter."""
    return [
        device(
            gpu(20),
            **H100,
            ecc={
                "corrected_volatile": 12,
                "uncorrected_volatile": 1,
                "corrected_aggregate": 345,
                "uncorrected_aggregate": 2,
            },
            remapped=(3, 1, 1, 0),
            energy=123_456_789,
            throttle=0x4 | 0x40 | 0x400,
            clocks={"graphics": 1755, "sm": 1755, "memory": 2619},
            pcie_replays=7,
        ),
        device(
            gpu(21),
            **H100,
            ecc_off=1,
            errors={
                "nvmlDeviceGetRemappedRows": NOT_SUPPORTED,
                "nvmlDeviceGetTotalEnergyConsumption": NOT_SUPPORTED,
                "nvmlDeviceGetCurrentClocksEventReasons": FUNCTION_NOT_FOUND,
                "nvmlDeviceGetCurrentClocksThrottleReasons": NOT_SUPPORTED,
                "nvmlDeviceGetPcieReplayCounter": NOT_SUPPORTED,
            },
            clock_faults={"memory": NOT_SUPPORTED},
        ),
        device(
            gpu(22),
            **H100,
            ecc={"corrected_volatile": U64_MAX},
            energy=U64_MAX,
            pcie_replays=U32_MAX,
            clocks={"sm": U32_MAX},
            throttle=0x1,
            errors={"nvmlDeviceGetCurrentClocksEventReasons": FUNCTION_NOT_FOUND},
        ),
    ]


def bus(n: int) -> str:
    """The PCI bus id the fake gives card n by default."""
    return f"00000000:{0x10 + n:02X}:00.0"


SWITCH_BUS = "00000000:C0:00.0"


def h100_links() -> list[dict[str, Any]]:
    """R-X3's links and placement on five cards. Cards 0 and 1 are joined by four direct NVLinks
    (and a fifth link of card 0 that is down; card 1's link 2 answers NOT_SUPPORTED, a gap the
    links after it are read past, as go-gpuallocator does: issue 43), share a PCIe switch (PIX)
    and sit on NUMA node 0.
    Cards 2 and 3 each have two active links into an NVSwitch, reach each other through their
    host bridge (PHB) and sit on NUMA node 1. Card 4 sits on node 1, has no NVLink, and NVML
    cannot place it against any card (every common-ancestor call NOT_SUPPORTED). Cards 0/1
    against 2/3 are across NUMA nodes (SYS). The nodes are sysfs's (`numa`, written by
    write_sysfs); card 0's nvmlDeviceGetNumaNodeId answers 4, as a coherent card (GH200) names
    its own memory's node, which is not the node the card is attached to (issue 43); the others
    answer NOT_SUPPORTED, as x86 cards do."""
    switch = {"state": 1, "remote": SWITCH_BUS, "type": 2}
    return [
        device(
            gpu(30),
            **H100,
            numa=0,
            gpu_numa=4,
            nvlinks=[{"state": 1, "remote": bus(1)}] * 4 + [{"state": 0, "remote": bus(1)}],
            ancestor={"1": 10, "2": 50, "3": 50},
        ),
        device(
            gpu(31),
            **H100,
            numa=0,
            nvlinks=[{"state": 1, "remote": bus(0)}] * 2
            + [{"error": 3}]
            + [{"state": 1, "remote": bus(0)}] * 2,
            ancestor={"2": 50, "3": 50},
        ),
        device(gpu(32), **H100, numa=1, nvlinks=[switch, switch], ancestor={"3": 30}),
        device(gpu(33), **H100, numa=1, nvlinks=[switch, switch]),
        device(gpu(34), **H100, numa=1, bus_id="00000000:9A:00.0"),
    ]
