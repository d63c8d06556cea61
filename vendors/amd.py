"""The amd backend: not in this release yet (see vendors/_pending.py)."""

from __future__ import annotations

from devicemanager.backend import Library
from vendors._pending import PendingBackend


class AmdBackend(PendingBackend):
    manufacturer = "amd"
    libraries = (Library("amd_smi", ("libamd_smi.so",)),)
