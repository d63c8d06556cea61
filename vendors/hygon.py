"""The hygon backend: not in this release yet (see vendors/_pending.py)."""

from __future__ import annotations

from devicemanager.backend import Library
from vendors._pending import PendingBackend


class HygonBackend(PendingBackend):
    manufacturer = "hygon"
    libraries = (Library("rocm_smi", ("librocm_smi64.so",)),)
