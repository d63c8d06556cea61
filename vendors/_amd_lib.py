"""How the amd backend reaches its libraries: the `amdsmi` wheel (which loads libamd_smi.so
itself, once per process, at its first import) and our own ctypes declaration of the one
entry point of librocm-core it needs (`getROCmVersion`, from ROCm/rocm-core's public header).

The wheel's loader (amdsmi_wrapper.find_smi_library) tries `$ROCM_HOME/lib/libamd_smi.so`
(else `$ROCM_PATH/lib/…`), then the dynamic linker, then its own directory, then
`${ROCM_PATH:-/opt/rocm}/lib`; it reads those variables at import, binds every symbol as a
module attribute, and never looks again. Without a library it prints two lines to stdout and
raises KeyError. So the file the agent chose is handed to the wheel by pointing ROCM_HOME at
a ROCm-shaped directory holding it, for the duration of the import only, with stdout kept,
and any later choice of another file in the same process is refused with a reason.
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import os
import re
import shutil
import sys
import tempfile
import threading
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from devicemanager.backend import BackendUnavailable

SONAME = "libamd_smi.so"
# The only place the wheel binds its library, keyed by this name.
_BINDING_KEY = "libamd_smi.so"
_IMPORT_LOCK = threading.Lock()
# The file this module had the wheel bind, once it has; the wheel never binds another.
_bound: str | None = None


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def bound_library(module: ModuleType) -> str | None:
    """The path the imported wheel bound, as it gave it to dlopen."""
    wrapper = getattr(module, "amdsmi_wrapper", None)
    libraries = getattr(wrapper, "_libraries", None)
    lib = libraries.get(_BINDING_KEY) if isinstance(libraries, dict) else None
    name = getattr(lib, "_name", None)
    return name if isinstance(name, str) else None


@contextlib.contextmanager
def _rocm_home(target: str) -> Iterator[None]:
    """ROCM_HOME set, for the wheel's import only, to a directory whose lib/libamd_smi.so is
    `target`: its own ROCm root when it already lies there, else a private one linking it.
    The previous value (or its absence) is restored, and a private root removed, afterwards."""
    directory, name = os.path.split(os.path.abspath(target))
    made: str | None = None
    if name == SONAME and os.path.basename(directory) == "lib":
        root = os.path.dirname(directory)
    else:
        made = root = tempfile.mkdtemp(prefix="devicemanager-rocm-")
        os.mkdir(os.path.join(root, "lib"))
        os.symlink(os.path.abspath(target), os.path.join(root, "lib", SONAME))
    previous = os.environ.get("ROCM_HOME")
    os.environ["ROCM_HOME"] = root
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("ROCM_HOME", None)
        else:
            os.environ["ROCM_HOME"] = previous
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)


def _why(exc: BaseException) -> str:
    """One line saying why the wheel could not bind its library, naming no host path."""
    if isinstance(exc, AttributeError):
        # ctypes: "<path>: undefined symbol: amdsmi_x": the library is older than the wheel.
        symbol = re.search(r"undefined symbol: (\w+)", str(exc))
        missing = symbol.group(1) if symbol else "an entry point"
        return f"{SONAME} lacks {missing}, which the amdsmi package binds (version skew)"
    return f"{SONAME} cannot be loaded"


def import_amdsmi(target: str) -> ModuleType:
    """The `amdsmi` module bound to `target` (a path, or the bare soname for the wheel's own
    search). Raises BackendUnavailable, with nothing written to stdout, when the package is
    missing, the library cannot be loaded, or the process already bound another file."""
    global _bound
    with _IMPORT_LOCK:
        loaded = sys.modules.get("amdsmi")
        if loaded is not None:
            bound = _bound or bound_library(loaded)
            if os.sep in target and bound is not None and not _same_file(bound, target):
                raise BackendUnavailable(
                    f"the amdsmi package is already bound to another {SONAME} in this process "
                    "(it loads its library once); restart the agent to load another"
                )
            return loaded
        if os.sep in target and not os.path.exists(target):
            # Checked first: the wheel would otherwise go on to the linker and /opt/rocm and
            # bind a library nobody chose, for the rest of the process.
            raise BackendUnavailable(f"{SONAME} cannot be loaded")
        scope = _rocm_home(target) if os.sep in target else contextlib.nullcontext()
        try:
            with scope, contextlib.redirect_stdout(io.StringIO()):
                import amdsmi

                bound = bound_library(amdsmi)
                # Compared while a private root still links the chosen file.
                chosen = bound is not None and (os.sep not in target or _same_file(bound, target))
        except ModuleNotFoundError as exc:
            if exc.name == "amdsmi":
                raise BackendUnavailable("the amdsmi package is not installed") from None
            _purge()
            raise BackendUnavailable(_why(exc)) from None
        except Exception as exc:  # the wheel raises KeyError, not ImportError, without its library
            _purge()
            raise BackendUnavailable(_why(exc)) from None
        if not chosen:
            # The chosen file failed to load and the wheel went on to another one: refuse it
            # rather than read a library nobody chose.
            raise BackendUnavailable(f"{SONAME} cannot be loaded")
        _bound = os.path.realpath(target) if os.sep in target else bound
        module: ModuleType = amdsmi
        return module


def _purge() -> None:
    """Forget a half-imported wheel so the next round imports it afresh."""
    # A copy of the names first: this runs on the backend's thread while the main thread may
    # be importing (the server starts beside the first round), and iterating sys.modules
    # itself then fails with "dictionary changed size during iteration". list() copies the
    # keys without giving up the interpreter lock.
    for name in [n for n in list(sys.modules) if n == "amdsmi" or n.startswith("amdsmi.")]:
        del sys.modules[name]


def processors_of(smi: ModuleType, socket: Any) -> list[Any]:
    """The processor handles of one socket (one physical card; each XCP of a partitioned card
    is one of them), through the wheel's own binding of amdsmi_get_processor_handles: its
    Python interface only offers every socket's handles flattened together."""
    wrapper = smi.amdsmi_wrapper
    count = ctypes.c_uint32(0)
    code = int(wrapper.amdsmi_get_processor_handles(socket, ctypes.byref(count), None))
    if code != 0:
        raise smi.AmdSmiLibraryException(code)
    handles = (wrapper.amdsmi_processor_handle * count.value)()
    code = int(wrapper.amdsmi_get_processor_handles(socket, ctypes.byref(count), handles))
    if code != 0:
        raise smi.AmdSmiLibraryException(code)
    return [wrapper.amdsmi_processor_handle(handles[i]) for i in range(count.value)]


def rocm_version(lib: ctypes.CDLL) -> str:
    """`major.minor.patch` from librocm-core's getROCmVersion (VerErrors: 0 is success)."""
    fn = lib.getROCmVersion
    fn.argtypes = [ctypes.POINTER(ctypes.c_uint32)] * 3
    fn.restype = ctypes.c_uint32
    major, minor, patch = ctypes.c_uint32(), ctypes.c_uint32(), ctypes.c_uint32()
    code = int(fn(ctypes.byref(major), ctypes.byref(minor), ctypes.byref(patch)))
    if code != 0:
        raise OSError(f"getROCmVersion answered {code}")
    return f"{major.value}.{minor.value}.{patch.value}"
