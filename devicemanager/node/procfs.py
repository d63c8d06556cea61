"""Reading /proc/<pid>/{cgroup,stat,comm} under an injectable root, failures as reasons.

The root is a parameter so tests and replay point it at a fixture tree; in a pod with
`hostPID: true` it is the host's /proc.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path

from devicemanager.model import Reason


class ProcError(Exception):
    """A /proc read that failed, with the reason a row gets for it."""

    def __init__(self, reason: Reason, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Stat:
    state: str  # R, S, D, Z, X, … (proc(5))
    start_ticks: int  # field 22: start time in clock ticks after boot; with the PID, an identity


# cgroup, stat and comm are a few hundred bytes; a cgroup file lists at most one path (4 KiB
# each) per hierarchy. Anything longer is not what the kernel writes there.
MAX_READ = 64 * 1024


def read_bytes(path: str, limit: int = MAX_READ) -> bytes:
    """The file's first `limit` + 1 bytes at most, with plain system calls: this runs twice
    per PID per round, and an io object per read costs more than the read.

    One read is the whole file: /proc's stat, cgroup and comm are made in one piece when first
    read (single_open seq files) and handed out up to the size asked for, and a regular file
    of a fixture tree reads whole too. So a /proc read is one open, one read and one close;
    every system call also hands the interpreter lock to the HTTP server and back."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, limit + 1)
    finally:
        os.close(fd)


def read_raw(root: Path | str, pid: int, name: str) -> bytes:
    """`<root>/<pid>/<name>` as bytes, a failure as the reason its row gets."""
    try:
        # A formatted string, not Path arithmetic: this runs once per PID per round.
        data = read_bytes(f"{root}/{pid}/{name}")
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError) as exc:
        # The normal race: the process ended between the vendor's answer and this read.
        raise ProcError(Reason.EXITED, str(exc)) from exc
    except PermissionError as exc:
        raise ProcError(Reason.PERMISSION, str(exc)) from exc
    except OSError as exc:
        # ESRCH surfaces as an OSError on some kernels when the task is being reaped.
        reason = Reason.EXITED if exc.errno == errno.ESRCH else Reason.UNREADABLE
        raise ProcError(reason, str(exc)) from exc
    if len(data) > MAX_READ:
        raise ProcError(Reason.UNREADABLE, f"{name} of {pid} is larger than {MAX_READ} bytes")
    return data


def text_of(data: bytes, pid: int, name: str) -> str:
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        raise ProcError(Reason.UNREADABLE, f"{name} of {pid} is not text") from exc


def read(root: Path | str, pid: int, name: str) -> str:
    return text_of(read_raw(root, pid, name), pid, name)


def parse_stat(text: str) -> Stat:
    """State and start time. comm (field 2) may hold spaces and ')': split after the last ')'."""
    _, paren, rest = text.rpartition(")")
    fields = rest.split(None, 20)  # only fields 3..22 are wanted
    if not paren or len(fields) < 20:
        raise ValueError("not a /proc/<pid>/stat line")
    return Stat(state=fields[0], start_ticks=int(fields[19]))


def read_stat(root: Path | str, pid: int) -> Stat:
    text = read(root, pid, "stat")
    try:
        return parse_stat(text)
    except ValueError as exc:
        raise ProcError(Reason.UNREADABLE, f"stat of {pid}: {exc}") from exc
