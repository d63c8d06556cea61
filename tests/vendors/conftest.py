"""Fixtures shared by the vendor tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakelib import nvidia as fake_nvml


@pytest.fixture(scope="session")
def libnvml(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fake libnvidia-ml.so.1, compiled once per run."""
    why = fake_nvml.missing()
    if why:
        pytest.skip(f"the fake libnvidia-ml cannot be built here: {why}")
    return fake_nvml.build(tmp_path_factory.mktemp("nvml"))
