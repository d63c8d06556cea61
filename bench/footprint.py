"""Resident memory of `devicemanager serve` after 20 rounds of the biggest replay scenario.

The baseline, measured in the same run, is a bare interpreter that imports the same libraries
the agent serves with and does nothing: the ratio is what the agent itself adds. Goal: the
agent under 64 MiB.

    python bench/footprint.py [--rounds 20]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import REPO, report, start_agent

MIB = 1048576
IMPORTS = (
    "import uvicorn, uvloop, httptools, starlette.applications, prometheus_client, "
    "cryptography.x509, httpx"
)


def biggest_scenario() -> Path:
    nodes = [p for p in (REPO / "fixtures" / "nodes").iterdir() if (p / "scenario.json").exists()]
    return max(nodes, key=lambda p: sum(f.stat().st_size for f in p.rglob("*") if f.is_file()))


def baseline_rss() -> int:
    proc = subprocess.Popen([sys.executable, "-c", f"{IMPORTS}; import time; time.sleep(30)"])
    try:
        time.sleep(3)
        return int(psutil.Process(proc.pid).memory_info().rss)
    finally:
        proc.kill()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--period", type=float, default=0.1)
    args = parser.parse_args()
    scenario = biggest_scenario()
    agent, port = start_agent(["--replay", str(scenario), "--monitor-period", str(args.period)])
    try:
        stamps: set[str] = set()
        deadline = time.monotonic() + 60
        with httpx.Client(verify=False) as client:
            while len(stamps) < args.rounds and time.monotonic() < deadline:
                stamps.add(
                    client.get(f"https://127.0.0.1:{port}/monitor/snapshot").json()["timestamp"]
                )
                client.get(f"https://127.0.0.1:{port}/metrics")
                time.sleep(args.period / 2)
        if len(stamps) < args.rounds:
            raise SystemExit(f"only {len(stamps)} rounds seen")
        rss = int(psutil.Process(agent.pid).memory_info().rss)
    finally:
        agent.terminate()
    floor = baseline_rss()
    print(
        f"scenario {scenario.name}: agent RSS {rss / MIB:.1f} MiB after {len(stamps)} rounds; "
        f"bare interpreter with the same imports {floor / MIB:.1f} MiB"
    )
    report(
        {
            "bench": "footprint",
            "scenario": scenario.name,
            "rounds": len(stamps),
            "agent_rss_mib": round(rss / MIB, 1),
            "baseline_rss_mib": round(floor / MIB, 1),
            "agent_over_baseline": round(rss / floor, 3),
            "goal_under_64_mib": rss < 64 * MIB,
        }
    )


if __name__ == "__main__":
    main()
