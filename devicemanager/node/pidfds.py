"""A pidfd per GPU process the agent has placed: its exit noticed without reading its stat.

A pidfd (Linux 5.3 and later) is the kernel's handle on one process, never on a later process
that reuses its PID, and it turns readable when that process ends. Held for every placed
process and polled all at once each round, it answers "is this still the process that was
identified?" with one system call for the node, where reading each `/proc/<pid>/stat` for its
start time costs an open, a read and a close per process. It also closes the one window the
start time leaves open (a PID reused within one clock tick).

Only for the live /proc of this agent's own PID namespace (a pidfd names a PID of the
caller's namespace); a fixture tree or a recording has no processes to hold. Bounded: at most
`budget` descriptors, from the descriptor limit, so the HTTP server and /proc reads always
have theirs; a process past the budget (or on a kernel without pidfds) is checked by its stat
as before.
"""

from __future__ import annotations

import errno
import os
import resource
import select

MAX_HELD = 8192


def default_budget() -> int:
    """Half of the soft descriptor limit, less a reserve, at most MAX_HELD."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_HELD
    return max(0, min(MAX_HELD, soft // 2 - 64))


class PidFds:
    def __init__(self, budget: int | None = None) -> None:
        self.budget = default_budget() if budget is None else budget
        self.available = hasattr(os, "pidfd_open")
        self._by_pid: dict[int, int] = {}
        self._by_fd: dict[int, int] = {}
        self._poll = select.poll()

    def __len__(self) -> int:
        return len(self._by_pid)

    def holds(self, pid: int) -> bool:
        return pid in self._by_pid

    def open(self, pid: int) -> bool:
        """Hold `pid`'s process (closing a handle held before on that PID). False when none
        could be opened: no pidfds here, the budget spent, or the process gone already."""
        self.close(pid)
        if not self.available or len(self._by_pid) >= self.budget:
            return False
        try:
            fd = os.pidfd_open(pid)
        except OSError as exc:
            if exc.errno in (errno.ENOSYS, errno.EPERM):
                self.available = False  # a kernel or a seccomp profile without pidfd_open
            return False
        self._by_pid[pid] = fd
        self._by_fd[fd] = pid
        self._poll.register(fd, select.POLLIN)
        return True

    def ended(self) -> set[int]:
        """The held PIDs whose process has ended (zombie or reaped) since it was opened."""
        if not self._by_pid:
            return set()
        return {self._by_fd[fd] for fd, _ in self._poll.poll(0) if fd in self._by_fd}

    def close(self, pid: int) -> None:
        fd = self._by_pid.pop(pid, None)
        if fd is None:
            return
        del self._by_fd[fd]
        self._poll.unregister(fd)
        os.close(fd)

    def close_all(self) -> None:
        for pid in list(self._by_pid):
            self.close(pid)
