"""The metax backend: not in this release yet (see vendors/_pending.py)."""

from __future__ import annotations

from devicemanager.backend import Library
from vendors._pending import PendingBackend


class MetaxBackend(PendingBackend):
    manufacturer = "metax"
    libraries = (Library("mxsml", ("libmxsml.so",)),)
