"""Fixtures shared by the vendor tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Agent
from tests.fakelib import nvidia as fake_nvml


@pytest.fixture(scope="session")
def libnvml(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fake libnvidia-ml.so.1, compiled once per run."""
    why = fake_nvml.missing()
    if why:
        pytest.skip(f"the fake libnvidia-ml cannot be built here: {why}")
    return fake_nvml.build(tmp_path_factory.mktemp("nvml"))


@pytest.fixture(scope="session")
def rocm_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fake ROCm install (lib/libamd_smi.so, librocm_smi64.so.7, librocm-core.so.1), compiled
    once per run. The amdsmi wheel binds its library once per process, so every in-process AMD
    test loads this one; tests that need another run in a subprocess."""
    from tests.fakelib import amd as fake_amd

    why = fake_amd.missing()
    if why:
        pytest.skip(f"the fake ROCm libraries cannot be built here: {why}")
    return fake_amd.build(tmp_path_factory.mktemp("rocm"))


class ManualClock:
    """A monotonic clock the test moves, one monitor period at a time, so the times a payload
    records are the same on every run (the fakes still see the real time between samples)."""

    def __init__(self, start: float = 100.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float = 15.0) -> None:
        self.now += seconds


def serve_fake_library(
    launch: Any,
    manufacturer: str,
    library: Path,
    tmp_path: Path,
    env: dict[str, str],
    pods: list[dict[str, Any]] | None = None,
) -> Agent:
    """A real `devicemanager serve` over a fake vendor library (`env` names its scenario), on a
    node of `pods` (none by default) whose /proc is `tmp_path/proc` (empty unless the test put
    processes there), rounds every 0.5 s; returned once it is ready."""
    (tmp_path / "proc").mkdir(exist_ok=True)
    (tmp_path / "pods.json").write_text(json.dumps({"kind": "PodList", "items": pods or []}))
    agent: Agent = launch(
        "--manufacturer",
        manufacturer,
        "--vendor-library",
        f"{manufacturer}={library}",
        "--pods-file",
        str(tmp_path / "pods.json"),
        "--proc-root",
        str(tmp_path / "proc"),
        "--monitor-period",
        "0.5",
        env=env,
    )
    agent.wait_for("/readyz", 200)
    return agent


def links_of(card: Any) -> set[tuple[str, str, int | None]]:
    """A parsed card's links as (peer, kind, count); the card must carry them."""
    assert card.links is not None
    return {(x.peer_id, x.link, x.count) for x in card.links}


def topology_reads(backend: Any, clock: ManualClock, rounds: int) -> list[tuple[float, int]]:
    """(readAt, cards) of the topology each of `rounds` reads carries, the backend's clock
    moved one 15 s period after each; the backend is opened and closed here."""
    from devicemanager.model import ReadRequest

    backend.open()
    try:
        out = []
        for _ in range(rounds):
            topology = backend.read(ReadRequest())["topology"]
            out.append((topology["readAt"], len(topology["devices"])))
            clock.advance(15.0)
        return out
    finally:
        backend.close()
