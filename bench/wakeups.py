"""How often the agent wakes while nobody is looking (issue 32).

The agent replays a recorded node at the default period (15 s) and is left alone for
`--seconds`, then scraped once every 15 s (gzip, one keep-alive connection, as Prometheus) for
as long. A wake-up is a voluntary context switch: a thread that slept (a timer, a poll, a lock)
and ran again. Counted from `/proc/<pid>/task/<tid>/status` at the start and end of each
window, by thread name, and the process's CPU time (`/proc/<pid>/stat`, user + system) with it.

    python bench/wakeups.py [--seconds 30] [--node mi300x-8gpu-cpx-mixed] [--baseline PATH]

`--baseline` measures another checkout's agent first (`git worktree add /tmp/base <commit>`),
with this interpreter. Prints one JSON line last.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.common import REPO, report, start_agent

TICKS = os.sysconf("SC_CLK_TCK")


def threads(pid: int) -> dict[str, int]:
    """Voluntary context switches so far, by thread name (threads of one name summed)."""
    out: dict[str, int] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            status = (task / "status").read_text()
        except OSError:
            continue  # a thread that ended meanwhile
        switches = next(
            int(line.split()[1])
            for line in status.splitlines()
            if line.startswith("voluntary_ctxt_switches")
        )
        key = "main" if task.name == str(pid) else name
        out[key] = out.get(key, 0) + switches
    return out


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def window(pid: int, seconds: float, port: int | None) -> dict[str, object]:
    """Wake-ups per second and millicores over one window; a scraper every 15 s if port."""
    stop = threading.Event()
    scrapes: list[int] = []

    def scrape() -> None:
        assert port is not None
        with httpx.Client(verify=False, timeout=5, headers={"Accept-Encoding": "gzip"}) as client:
            while not stop.is_set():
                scrapes.append(client.get(f"https://127.0.0.1:{port}/metrics").status_code)
                stop.wait(15)

    scraper = threading.Thread(target=scrape) if port is not None else None
    before, cpu0, t0 = threads(pid), cpu_seconds(pid), time.monotonic()
    if scraper is not None:
        scraper.start()
    time.sleep(seconds)
    after, cpu1, t1 = threads(pid), cpu_seconds(pid), time.monotonic()
    stop.set()
    if scraper is not None:
        scraper.join(10)
    elapsed = t1 - t0
    per_thread = {
        name: round((after[name] - before.get(name, 0)) / elapsed, 2) for name in sorted(after)
    }
    return {
        "wakeups_per_second": round(sum(per_thread.values()), 2),
        "by_thread": per_thread,
        "millicores": round(1000 * (cpu1 - cpu0) / elapsed, 2),
        "scrapes": len(scrapes),
    }


def measure(repo: Path, node: str, seconds: float, warmup: float) -> dict[str, object]:
    agent, port = start_agent(
        ["--replay", str(REPO / "fixtures" / "nodes" / node)],
        env={"PYTHONPATH": str(repo)},
        cwd=repo,
    )
    try:
        time.sleep(warmup)
        idle = window(agent.pid, seconds, None)
        scraped = window(agent.pid, seconds, port)
    finally:
        agent.terminate()
        agent.wait(15)
    return {"idle": idle, "one_scraper_every_15s": scraped}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--node", default="mi300x-8gpu-cpx-mixed")
    parser.add_argument("--baseline", type=Path, help="another checkout, measured first")
    parser.add_argument("--warmup", type=float, default=3)
    args = parser.parse_args()
    figures: dict[str, object] = {
        "benchmark": "wakeups",
        "node": args.node,
        "period_seconds": 15,
        "seconds": args.seconds,
    }
    if args.baseline is not None:
        base = args.baseline.resolve()
        figures["baseline"] = {
            "commit": subprocess.run(
                ["git", "-C", str(base), "rev-parse", "--short", "HEAD"],
                capture_output=True,
                text=True,
                check=False,
            ).stdout.strip(),
            **measure(base, args.node, args.seconds, args.warmup),
        }
    figures.update(measure(REPO, args.node, args.seconds, args.warmup))
    idle = figures["idle"]
    assert isinstance(idle, dict)
    figures["goal_no_idle_wakeups"] = idle["by_thread"].get("main", 0) == 0
    report(figures)


if __name__ == "__main__":
    main()
