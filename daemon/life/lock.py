"""The exclusive owner lock (contract §2).

One writer per database: ``flock(LOCK_EX | LOCK_NB)`` on a lock file beside
the database's *resolved* path (``realpath``, so a symlink or another
spelling of the path cannot make a second writer) and on the database file
itself (so a hard link cannot either). SQLite's own locks are POSIX
``fcntl`` locks, which are independent of ``flock`` on Linux.

The lock is never released by the daemon (contract §3.6): there is no release
method, and both descriptors stay open until the process is gone, when the
kernel closes them. Until then a second daemon gets `LockHeld`, even after
the first one has logged ``stopped``: a call may still be in progress in
it (an in-process adapter stuck past the grace). The descriptors are
``O_CLOEXEC``, so no ``cli`` child inherits them and holds the lock on; a
``flock`` belongs to its open file, so SQLite opening and closing the
database file itself never drops it.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

__all__ = ["LockHeld", "OwnerLock"]


class LockHeld(Exception):
    """Another process owns the database."""


class OwnerLock:
    def __init__(self, database: Path) -> None:
        self.database = Path(os.path.realpath(database))
        self.lock_path = self.database.with_name(self.database.name + ".lock")
        self._fds: list[int] = []

    def acquire(self) -> None:
        self.database.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            who = f" by pid {holder}" if holder else ""
            raise LockHeld(
                f"database {self.database} is in use: lock {self.lock_path} is held{who}"
            ) from None
        self._fds.append(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        dbfd = os.open(self.database, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(dbfd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(dbfd)
            self._drop_after_failed_acquire()
            raise LockHeld(
                f"database {self.database} is in use: it is locked by another process "
                "(a hard link or another lock file)"
            ) from None
        self._fds.append(dbfd)

    def _drop_after_failed_acquire(self) -> None:
        # only while acquiring, before this process owns the database
        while self._fds:
            os.close(self._fds.pop())


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode().strip()
        return int(text) if text else None
    except (OSError, ValueError):
        return None
