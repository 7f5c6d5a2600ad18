"""What a test leaves running: its processes (found through /proc) and its threads.

A test that starts a thread or a process ends it, pass or fail, in
``finally`` or a fixture. The guard in ``tests/conftest.py`` checks that
after every test with these helpers, and ends what is left.

- A process is named by its pid *and* its start time (field 22 of
  ``/proc/PID/stat``): a pid the kernel has handed to another process since
  is never mistaken for it.
- It is signalled through a pidfd opened and then checked against that
  name, so a signal reaches that very process or none: never another
  user's, never one of another engineer's on a shared machine.
- A tree is ended top-down, each process stopped before its children are
  listed, then all are SIGKILLed: a parent cannot start a child after the
  walk has passed it, and a child whose parent died first is still ended
  (it is known by its name, not found through its parent).
- `alive` is the suite's one "is this process still there" check: a zombie
  nobody has reaped yet counts as gone.

Linux only, like the daemon's orphan search (``daemon/life/orphans.py``).
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
import time
import traceback
from collections.abc import Collection, Iterable

import attrs

_SIGKILL_BIT = 1 << (signal.SIGKILL - 1)
#: The states of /proc/PID/stat of a process that has exited: a zombie, or dead.
_EXITED = ("Z", "X")


@attrs.frozen
class Proc:
    """One process, for ever: its pid and its start time (clock ticks after boot)."""

    pid: int
    start: int

    def describe(self) -> str:
        """``pid 123: sleep 1000`` (its command line, as far as it can still be read)."""
        try:
            with open(f"/proc/{self.pid}/cmdline", "rb") as f:
                argv = f.read(400).replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            argv = "?"
        return f"pid {self.pid}: {argv}"


@attrs.frozen
class _Stat:
    state: str
    ppid: int
    start: int


def _stat(pid: int) -> _Stat | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:  # gone
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses
    fields = raw[raw.rindex(b")") + 2 :].split()
    return _Stat(state=fields[0].decode(), ppid=int(fields[1]), start=int(fields[19]))


def identify(pid: int) -> Proc | None:
    """The process now running as ``pid`` (None: none)."""
    st = _stat(pid)
    return None if st is None else Proc(pid, st.start)


def alive(pid: int) -> bool:
    """``pid`` names a process that has not exited. A zombie (exited, not yet
    reaped by its parent or init) counts as gone: it can do nothing more.

    The one check of the suite for "is this process still there" (wait on it
    with ``tests/_poll.py``: ``wait_for(lambda: not alive(pid), ...)``). By pid
    alone, as a test names a program by the pid it wrote: a pid reused since
    names the new process (``Proc`` and `running` tell the two apart).
    """
    st = _stat(pid)
    return st is not None and st.state not in _EXITED


def reaped(pid: int) -> bool:
    """``pid`` is gone for good: exited and reaped (no zombie left). Stricter
    than ``not alive(pid)``, for a process the daemon must wait for itself
    (its own child: a daemon that never reaps fills the process table)."""
    return _stat(pid) is None


def stopped(pid: int) -> bool:
    """``pid`` is stopped by a signal (SIGSTOP): it runs no further until continued or killed."""
    st = _stat(pid)
    return st is not None and st.state == "T"


def _children_by_parent() -> dict[int, list[Proc]]:
    """Every process's live children (one pass over /proc; no zombies)."""
    found: dict[int, list[Proc]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        st = _stat(int(name))
        if st is not None and st.state not in _EXITED:
            found.setdefault(st.ppid, []).append(Proc(int(name), st.start))
    return found


def _has_children() -> bool:
    """This process has a child, running or not yet reaped (one system call,
    where a walk of /proc reads a file per process on the machine)."""
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    return True


def descendants(root: int | None = None, *, spare: Collection[int] = ()) -> list[Proc]:
    """The live processes below ``root`` (default: this one), parents first.

    A pid in ``spare`` is left out with everything below it (a daemon a
    module-scoped fixture keeps for several tests).
    """
    if root is None and not _has_children():
        return []
    tree = _children_by_parent()
    out: list[Proc] = []
    todo = [os.getpid() if root is None else root]
    while todo:
        for child in tree.get(todo.pop(0), []):
            if child.pid not in spare:
                out.append(child)
                todo.append(child.pid)
    return out


def _dying(pid: int) -> bool:
    """SIGKILL is pending: the process is on its way out (it was killed, not left)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("SigPnd:", "ShdPnd:")) and int(line.split()[1], 16) & (
                    _SIGKILL_BIT
                ):
                    return True
    except OSError:
        return True  # gone
    return False


def running(procs: Iterable[Proc]) -> list[Proc]:
    """Those of ``procs`` still running: not gone, not a zombie, not already being killed."""
    out = []
    for p in procs:
        st = _stat(p.pid)
        if st is not None and st.start == p.start and st.state not in _EXITED:
            if not _dying(p.pid):
                out.append(p)
    return out


def _pidfd(p: Proc) -> int | None:
    """A pidfd for ``p``, or None when it is gone (its pid may now name another)."""
    try:
        fd = os.pidfd_open(p.pid)
    except OSError:
        return None
    st = _stat(p.pid)  # checked *after* the open: the pidfd holds the process checked
    if st is None or st.start != p.start:
        os.close(fd)
        return None
    return fd


def end(procs: Iterable[Proc], within: float = 10.0) -> list[Proc]:
    """SIGKILL ``procs`` and every process below them; wait (bounded) until
    they have exited. Returns those still there after ``within`` seconds."""
    fds: dict[Proc, int] = {}
    todo = list(procs)
    try:
        while todo:
            p = todo.pop(0)
            if p in fds or (fd := _pidfd(p)) is None:
                continue
            fds[p] = fd
            _send(fd, signal.SIGSTOP)  # no new child from here on
            todo.extend(descendants(p.pid))
        for fd in fds.values():
            _send(fd, signal.SIGKILL)
        # not a poll (tests/_poll.py): select wakes on the exits themselves
        deadline = time.monotonic() + within
        left = dict(fds)
        while left and (wait := deadline - time.monotonic()) > 0:
            # a pidfd polls readable once its process has exited (reaped or not)
            ready, _, _ = select.select(list(left.values()), [], [], wait)
            left = {p: fd for p, fd in left.items() if fd not in ready}
        return list(left)
    finally:
        for fd in fds.values():
            os.close(fd)


def _send(fd: int, sig: int) -> None:
    try:
        signal.pidfd_send_signal(fd, sig)
    except ProcessLookupError:
        pass  # exited meanwhile


def non_daemon_threads() -> list[threading.Thread]:
    """The live threads that would keep the interpreter from exiting."""
    main = threading.main_thread()
    return [t for t in threading.enumerate() if t is not main and not t.daemon and t.is_alive()]


def join(threads: Iterable[threading.Thread], within: float) -> list[threading.Thread]:
    """Join ``threads`` for at most ``within`` seconds in all; those still alive."""
    threads = list(threads)
    # not a poll (tests/_poll.py): each join wakes on its thread's end, in one shared budget
    deadline = time.monotonic() + within
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    return [t for t in threads if t.is_alive()]


def stack_of(thread: threading.Thread) -> str:
    """Where ``thread`` is now (for a report)."""
    frame = sys._current_frames().get(thread.ident or -1)
    if frame is None:
        return f"thread {thread.name!r}: no stack"
    where = "".join(traceback.format_stack(frame)[-6:])
    return f"thread {thread.name!r} (daemon={thread.daemon}) is at:\n{where}"
