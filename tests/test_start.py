"""How `serve` starts (R-O2: ready once the first round is published, as early as it can be).

The start builds what lives as long as the process (modules, classes, the first round's
records) and makes next to no garbage, so the cyclic collector is off from the moment the flags
are read until the first round: its passes over the growing heap cost 15 to 35 ms of the time
to ready (docs/performance.md). At the first round what was built is frozen, out of the
collector's sight, as the gc module's documentation advises (disable early, freeze, enable),
and the collector is turned back on. These tests hold what makes that safe: what the start
leaves for the collector, frozen with the rest, is small and bounded; the collector is on again
after the start; a refused start does not leave it off.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from devicemanager import cli
from devicemanager.agent.wiring import settle_interpreter
from tests.conftest import NODES, REPO, agent_env

pytestmark = pytest.mark.timeout(60)
H100 = NODES / "h100-8gpu-mixed"

# Runs the real `serve` over a replay up to the moment its first round would start, where it
# freezes what the start built (`gc.freeze`, replaced here by a probe): what the collector would
# find there, and whether it was off until then.
PROBE = """
import gc, json, os, sys

def probe():
    report = {"enabled_before": gc.isenabled()}
    gc.set_debug(gc.DEBUG_SAVEALL)
    report["objects"] = gc.collect()
    report["bytes"] = sum(sys.getsizeof(o) for o in gc.garbage)
    report["types"] = sorted({type(o).__name__ for o in gc.garbage})
    print(json.dumps(report), flush=True)
    os._exit(0)

gc.freeze = probe
from devicemanager.cli import main
sys.exit(main(sys.argv[1:]))
"""
# What the start leaves for the collector, frozen with the rest instead (measured: 195 objects,
# 54 KB, all of them the classes `dataclass(slots=True)` makes and then replaces with their
# slotted copy, and their tuples and dictionaries); a bound on it, so that a start that began
# to leave real garbage behind is seen.
FROZEN_GARBAGE_BYTES = 128 * 1024


@pytest.fixture
def interpreter_state() -> Iterator[None]:
    """Whatever a test does to the collector and the switch interval is undone after it."""
    interval = sys.getswitchinterval()
    yield
    gc.unfreeze()
    gc.enable()
    sys.setswitchinterval(interval)


def test_what_the_start_leaves_for_the_collector_is_bounded() -> None:
    """Freezing without a full collection (15 to 25 ms with the start's heap) keeps whatever
    cyclic garbage the start made for the life of the process. The argument parser's cycles
    are collected before the collector goes off; what is left is the classes the dataclass
    machinery replaces, a few dozen KB, once."""
    done = subprocess.run(
        [
            *(sys.executable, "-c", PROBE, "serve", "--replay", str(H100)),
            *("--bind-address", "127.0.0.1", "--secure-port", "0", "--log-level", "warning"),
        ],
        env=agent_env(),
        cwd=REPO,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.decode().splitlines()[-1])
    assert report["enabled_before"] is False  # the start ran with the collector off
    assert "type" in report["types"]  # the replaced classes: the probe sees the start's garbage
    assert "HelpFormatter" not in report["types"]  # the parser's were collected before
    assert report["bytes"] <= FROZEN_GARBAGE_BYTES, report


def test_the_first_round_freezes_the_start_and_turns_the_collector_on(
    interpreter_state: None,
) -> None:
    gc.disable()
    before = gc.get_freeze_count()
    settle_interpreter()
    assert gc.isenabled()
    assert gc.get_freeze_count() > before


def test_a_refused_start_leaves_the_collector_on(tmp_path: Path, interpreter_state: None) -> None:
    """`serve` called in a process that goes on (a test, an embedding) and refused at start,
    after the collector went off: it is on again when `serve` returns."""
    with pytest.raises(SystemExit) as exit_:
        cli.main(
            [
                *("serve", "--replay", str(H100), "--proc-root", str(tmp_path / "gone")),
                *("--secure-port", "0"),
            ]
        )
    assert exit_.value.code == 2
    assert gc.isenabled()
