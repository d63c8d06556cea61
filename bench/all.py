"""Every benchmark, one after the other, on a quiet machine; their results in one file.

Each benchmark ends with one JSON line; this runs them in turn and writes those lines, with
the machine they ran on, to `bench/results.json`. `bench/table.py --write` then turns that
file into the README's performance table and docs/performance.md, so the figures a reader sees
are the figures a run printed.

    sudo python bench/all.py [--only scrape,round] [--soak-seconds 300]

Needs root (cgroups for bench/round.py and bench/scrape.py's busy phase), Debian's nginx and
wrk (bench/scrape.py), and for bench/peer.py Debian's prometheus-node-exporter (skipped, and
said, where it is missing). Takes about 15 minutes.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import environment_drift

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results.json"

BENCHES: dict[str, list[str]] = {
    "scrape": ["bench/scrape.py", "--seconds", "4", "--pairs", "5"],
    "round": ["bench/round.py", "--pairs", "21"],
    "gpm": ["bench/gpm.py", "--pairs", "9"],
    "footprint": ["bench/footprint.py", "--rounds", "200"],
    "imports": ["bench/imports.py"],
    "sampler": ["bench/sampler.py", "--seconds", "10", "--pairs", "3"],
    "attribution": ["bench/attribution.py"],
    "podindex": ["bench/podindex.py"],
    "summarize": ["bench/summarize.py"],
    "soak": ["bench/soak.py"],
    "soak_hostile": ["bench/soak.py", "--hostile"],
    "wakeups": ["bench/wakeups.py", "--seconds", "30"],
    "startup": ["bench/startup.py", "--pairs", "15"],
    "peer": ["bench/peer.py"],
}


def machine() -> dict[str, Any]:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor() or "unknown",
    )
    memory_kib = int(
        next(
            line.split()[1]
            for line in Path("/proc/meminfo").read_text().splitlines()
            if line.startswith("MemTotal")
        )
    )
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(memory_kib / 1048576),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "virtualised": Path("/sys/hypervisor").exists()
        or "hypervisor" in Path("/proc/cpuinfo").read_text(),
        "date": datetime.date.today().isoformat(),
    }


def run(name: str, argv: list[str]) -> dict[str, Any]:
    print(f"== {name}: {' '.join(argv)}", flush=True)
    out = subprocess.run(
        [sys.executable, *argv], cwd=REPO, capture_output=True, text=True, check=False
    )
    sys.stdout.write(out.stdout)
    if out.returncode != 0:
        sys.stderr.write(out.stderr)
        raise SystemExit(f"{name} failed with {out.returncode}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default="", help="comma-separated benchmark names")
    parser.add_argument("--soak-seconds", type=int, default=300)
    parser.add_argument(
        "--allow-drift",
        action="store_true",
        help="run even when the environment is not requirements.lock (recorded with each result)",
    )
    parser.add_argument(
        "--baseline",
        default="",
        help="another checkout, which bench/wakeups.py, startup.py and peer.py measure beside this",
    )
    args = parser.parse_args()
    wanted = [n for n in args.only.split(",") if n] or list(BENCHES)
    previous = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"results": {}}
    results = dict(previous.get("results", {}))
    # The figures are those of requirements.lock: an environment that drifted from it is
    # refused, or, with --allow-drift, said loudly and recorded beside every result.
    drift = environment_drift()
    if drift:
        lines = [f"  {n}: lock {d['lock']}, installed {d['installed']}" for n, d in drift.items()]
        sys.stderr.write(
            "WARNING: this environment is not requirements.lock:\n" + "\n".join(lines) + "\n"
        )
        if not args.allow_drift:
            raise SystemExit(
                "refused: the figures would not be the lock's; install it "
                "(pip install -r requirements.lock) or pass --allow-drift"
            )
    here = {**machine(), "lock_drift": drift}
    for name in wanted:
        argv = BENCHES[name]
        if name == "peer" and not (
            shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
        ):
            # The peer is optional: its figures are kept from an earlier run, if any.
            sys.stderr.write(
                "peer: skipped, prometheus-node-exporter is not installed "
                "(apt-get install prometheus-node-exporter)\n"
            )
            continue
        if name in ("soak", "soak_hostile"):
            argv = [*argv, "--seconds", str(args.soak_seconds)]
        if name in ("wakeups", "startup", "peer") and args.baseline:
            argv = [*argv, "--baseline", args.baseline]
        # Each result names the machine and day it was measured on: with --only, the others
        # are kept from an earlier run, perhaps on another day or kernel.
        results[name] = {**run(name, argv), "machine": here}
    RESULTS.write_text(json.dumps({"results": results}, indent=2) + "\n")
    print(f"written: {RESULTS.relative_to(REPO)}; now: python bench/table.py --write")


if __name__ == "__main__":
    main()
