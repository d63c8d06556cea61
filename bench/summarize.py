"""`devicemanager summarize` over a big cluster's scrapes.

A scheduler scrape of 1,000 GPUs on 125 nodes with 4,000 containers (current and legacy
names, as `--legacy-metrics=true` publishes them) and the monitor scrapes of every node:
32,000 series and 5 MB of text in all. Measured in the same run, alternated in pairs: the
whole report (read, summarize, render JSON) against `prometheus_client.parser` only turning
the same text into samples, the least any summary has to do. Reported: median and range of
each, and their ratio.

    python bench/summarize.py [--pairs 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from prometheus_client.parser import text_string_to_metric_families

from bench.common import report
from devicemanager.report import summarize_texts, to_json

MIB = 1048576
NODES, GPUS, PODS_PER_GPU = 125, 8, 4


def scheduler_text() -> str:
    lines: list[str] = []
    for n in range(NODES):
        node = f"gpu-{n:03d}"
        for g in range(GPUS):
            uuid = f"GPU-{n:04d}{g:04d}-0000-0000-0000-000000000000"
            dev = f'device_index="{g}",device_type="NVIDIA-A100",device_uuid="{uuid}",node="{node}"'
            old = f'deviceidx="{g}",devicetype="NVIDIA-A100",deviceuuid="{uuid}",nodeid="{node}"'
            for name, legacy, value in (
                ("hami_gpu_core_limit_ratio", "GPUDeviceCoreLimit", 100),
                ("hami_gpu_memory_limit_bytes", "GPUDeviceMemoryLimit", 81920 * MIB),
                ("hami_gpu_core_allocated_ratio", "GPUDeviceCoreAllocated", 80),
                ("hami_gpu_memory_allocated_bytes", "GPUDeviceMemoryAllocated", 40960 * MIB),
                ("hami_gpu_shared_count", "GPUDeviceSharedNum", PODS_PER_GPU),
            ):
                lines.append(f'{name}{{{dev},zone="vGPU"}} {value}')
                lines.append(f'{legacy}{{{old},zone="vGPU"}} {value}')
            for p in range(PODS_PER_GPU):
                pod = f"job-{n}-{g}-{p}"
                ns = f"team-{(n * GPUS + g) % 40}"
                new = (
                    f'container_index="0",device_uuid="{uuid}",namespace="{ns}",node="{node}",'
                    f'pod="{pod}",zone="vGPU"'
                )
                lines.append(f"hami_vgpu_core_allocated_ratio{{{new}}} 20")
                lines.append(f"hami_vgpu_memory_allocated_bytes{{{new}}} {10240 * MIB}")
    return "\n".join(lines) + "\n"


def monitor_text(n: int) -> str:
    lines: list[str] = []
    node = f"gpu-{n:03d}"
    for g in range(GPUS):
        uuid = f"GPU-{n:04d}{g:04d}-0000-0000-0000-000000000000"
        host = f'device_index="{g}",device_type="NVIDIA-A100",device_uuid="{uuid}",node="{node}"'
        lines.append(f"hami_host_gpu_utilization_ratio{{{host}}} 55")
        lines.append(f"hami_host_gpu_memory_used_bytes{{{host}}} {30000 * MIB}")
        for p in range(PODS_PER_GPU):
            ctr = (
                f'container="main",device_uuid="{uuid}",namespace="team-{(n * GPUS + g) % 40}",'
                f'pod="job-{n}-{g}-{p}",vdevice_index="0"'
            )
            lines.append(f"hami_vgpu_memory_used_bytes{{{ctr}}} {7000 * MIB}")
            lines.append(f"hami_vgpu_memory_limit_bytes{{{ctr}}} {10240 * MIB}")
            lines.append(f"hami_container_device_utilization_ratio{{{ctr}}} 12")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=5)
    args = parser.parse_args()
    texts = [("scheduler", scheduler_text())] + [
        (f"monitor-{n}", monitor_text(n)) for n in range(NODES)
    ]
    series = sum(t.count("\n") for _, t in texts)
    size = sum(len(t) for _, t in texts)
    ours: list[float] = []
    floor: list[float] = []
    findings = 0
    for _ in range(args.pairs):
        started = time.perf_counter()
        for _, text in texts:
            for family in text_string_to_metric_families(text):
                for _sample in family.samples:
                    pass
        floor.append(time.perf_counter() - started)
        started = time.perf_counter()
        result = summarize_texts(texts)
        to_json(result)
        ours.append(time.perf_counter() - started)
        findings = len(result.findings)
    report(
        {
            "series": series,
            "bytes": size,
            "devices": NODES * GPUS,
            "containers": NODES * GPUS * PODS_PER_GPU,
            "findings": findings,
            "summarize_s_median": round(statistics.median(ours), 3),
            "summarize_s_range": [round(min(ours), 3), round(max(ours), 3)],
            "parse_only_s_median": round(statistics.median(floor), 3),
            "parse_only_s_range": [round(min(floor), 3), round(max(floor), 3)],
            "ratio_summarize_to_parse_only": round(
                statistics.median(ours) / statistics.median(floor), 2
            ),
        }
    )


if __name__ == "__main__":
    main()
