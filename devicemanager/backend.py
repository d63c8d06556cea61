"""The one interface every vendor backend implements, and the registry that finds them.

The core never imports a vendor by name: backends are named by import strings and loaded
lazily, so the agent runs, and its tests pass, with no vendor SDK installed (R-V1).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from devicemanager.model import Payload, ReadRequest, VendorReading

# manufacturer -> "module:attribute" of its backend class.
BACKENDS: Mapping[str, str] = {
    "nvidia": "vendors.nvidia:NvidiaBackend",
    "thead": "vendors.thead:TheadBackend",
    "amd": "vendors.amd:AmdBackend",
    "hygon": "vendors.hygon:HygonBackend",
    "metax": "vendors.metax:MetaxBackend",
    "ascend": "vendors.ascend:AscendBackend",
}


class BackendUnavailable(Exception):
    """The vendor's library, driver or devices are not on this node. Data, not a crash.

    The message names what is missing ("libdcmi.so cannot be loaded"), never where it was
    looked for on the host: it is served in backends[] to whoever may read the snapshot.
    """


@dataclass(frozen=True, slots=True)
class Library:
    """A shared library a backend loads, and where it is looked for.

    `name` is what users configure (`--vendor-library hygon.hydmi=/opt/hyhal/lib/libhydmi.so`);
    `sonames` are tried in order in each of `directories` (where the vendor installs it, for
    libraries that are not on the linker's path) and then through the dynamic linker. `env` is
    an environment variable that names the file, where the project has always honoured one.
    """

    name: str
    sonames: tuple[str, ...]
    directories: tuple[str, ...] = ()
    env: str | None = None

    def locate(
        self,
        configured: str | None = None,
        environ: Mapping[str, str] = os.environ,
        exists: Callable[[str], bool] = os.path.exists,
    ) -> str:
        """What to hand to dlopen: a configured file (or a file of ours in a configured
        directory), then the environment's, then the first soname found in the vendor's
        directories, else the first soname for the linker to find (a failure says which)."""
        chosen = configured or (environ.get(self.env) if self.env else None) or None
        if chosen is not None:
            if os.path.isdir(chosen):
                for soname in self.sonames:
                    if exists(candidate := os.path.join(chosen, soname)):
                        return candidate
                return os.path.join(chosen, self.sonames[0])
            return chosen
        for directory in self.directories:
            for soname in self.sonames:
                if exists(candidate := os.path.join(directory, soname)):
                    return candidate
        return self.sonames[0]


@runtime_checkable
class Backend(Protocol):
    """open → read → parse → close. Only read() and open() touch the vendor library.

    `parse` is pure: recorded payloads go through the very function the live agent uses.
    A backend class is constructed as `cls(libraries)` with a mapping of library name to
    configured path (see `Library`); `cls()` must work too (replay only ever parses).
    """

    manufacturer: str

    def open(self) -> None:
        """Load and initialise the vendor library; raise BackendUnavailable when it is absent."""

    def read(self, request: ReadRequest) -> Payload:
        """Ask the library for what `request` needs; a failed call is recorded, not raised.

        A figure that needs two samples (a cumulative counter turned into a rate, NVML's GPM)
        keeps the previous sample on the backend and puts both, with their monotonic times,
        in the payload, so that `parse` stays pure and a recorded payload replays whole."""

    def parse(self, payload: Payload) -> VendorReading:
        """Turn a payload into the model. Pure: no I/O, no clock, no SDK."""

    def close(self) -> None:
        """Release the library. Safe to call when open() failed."""


def import_from_string(spec: str) -> object:
    """Resolve "package.module:attribute", the way uvicorn names pluggable implementations."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"backend {spec!r} is not of the form 'module:attribute'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"backend {spec!r} cannot be imported: {exc}") from None
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise ValueError(f"module {module_name!r} has no attribute {attribute!r}") from None


def backend_class(name: str) -> type[Backend]:
    """A manufacturer name from BACKENDS, or an import string for a backend of one's own."""
    spec = BACKENDS.get(name, name)
    if ":" not in spec:
        known = ", ".join(sorted(BACKENDS))
        raise ValueError(f"unknown manufacturer {name!r} (known: {known}; or give module:Class)")
    cls = import_from_string(spec)
    if not isinstance(cls, type):
        raise ValueError(f"{spec!r} is not a class")
    return cls


def libraries_of(cls: type[Backend]) -> tuple[Library, ...]:
    value: tuple[Library, ...] = getattr(cls, "libraries", ())
    return value


def create_backend(name: str, libraries: Mapping[str, str] | None = None) -> Backend:
    """A backend for a manufacturer with its libraries configured by name; "" names the
    backend's first (main) library. An unknown library name is a configuration error."""
    cls = backend_class(name)
    declared = libraries_of(cls)
    configured: dict[str, str] = {}
    for key, path in (libraries or {}).items():
        if key == "" and declared:
            key = declared[0].name
        if key not in {lib.name for lib in declared}:
            known = ", ".join(lib.name for lib in declared) or "none"
            raise ValueError(f"{name} loads no library {key!r} (it loads: {known})")
        configured[key] = path
    factory: Callable[..., Backend] = cls
    return factory(libraries=configured) if configured else factory()


def sdk_versions(manufacturers: Sequence[str]) -> list[str]:
    """'<distribution> <version>' of each Python vendor binding these backends use (a class
    attribute `sdk`), where it is installed; ctypes backends have none, their library's
    version being the driver's."""
    out = set()
    for name in manufacturers:
        try:
            dist: str | None = getattr(backend_class(name), "sdk", None)
        except ValueError:
            continue
        if dist is not None and (found := installed_version(dist)) is not None:
            out.add(found)
    return sorted(out)


def installed_version(distribution: str) -> str | None:
    """'<distribution> <version>' where that distribution is installed, else None."""
    # Imported where a version is asked for: `serve` asks once, for its build labels (about
    # 10 ms of its start), `record` once; the other commands never need email's parser.
    from importlib import metadata

    try:
        return f"{distribution} {metadata.version(distribution)}"
    except metadata.PackageNotFoundError:
        return None
