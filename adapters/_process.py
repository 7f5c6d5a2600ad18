"""Running one child program for the ``cli`` adapter: spawn, feed, drain, kill, reap.

Rules this module keeps (docs/contract.md, "Shutdown" and "The cli adapter"):

- Every child is its own session and process group (``start_new_session``),
  started without a shell, with ``close_fds`` and the environment it is
  given, and registered in its adapter's `ProcessGroups` until it is reaped,
  so that `ProcessGroups.kill_all` can SIGKILL every group still running.
- Args go to stdin, written without blocking while stdout and stderr are
  drained (never before), so a child that writes a lot before it reads
  cannot deadlock us. A child need not read its input: a broken stdin pipe
  (the child closed stdin or exited without reading it all) ends the
  writing and is recorded in `Finished.stdin_unread`, but it is not an error:
  the exit status decides the outcome.
  stdout keeps a bounded head, stderr a bounded tail; the rest is read and
  discarded so the child never blocks on a full pipe.
- The call ends when the group's leader exits (seen through a pidfd, or by
  polling ``waitid(WNOWAIT)`` where there is none), not when the pipes close:
  a leftover background child holding stdout open cannot hold the call.
- Whatever way the call ends (exit, timeout, error), the whole group is then
  SIGKILLed *before the leader is reaped*: while the leader is an unreaped
  zombie its pid, and so the group id, cannot be reused, so the kill can
  never reach an unrelated process. Leftover background children are thus
  killed at the end of every call, so that none can have an effect after
  the attempt's outcome is recorded. (A child that leaves the group with
  ``setsid`` escapes this; systemd's ``KillMode=mixed`` still ends it when
  the service stops.)
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence

import attrs

from ._base import CallAborted, DefiniteFailure, OutcomeUnknown

_READ_SIZE = 65536
_POLL_S = 0.05  # exit polling interval where pidfd_open is unavailable
_ABORTED_KEPT = 1024  # keys are unique per attempt: an old one never matches again
_DRAIN_READS = 64  # at most 4 MiB read per pipe after the leader's exit


@attrs.frozen
class Finished:
    """What one child run left behind (raw bytes, before redaction)."""

    returncode: int
    stdout_head: bytes  # the first bytes of stdout, up to the head size asked for
    stdout_total: int
    stderr_tail: bytes  # the last bytes of stderr, up to the tail size asked for
    stderr_total: int
    timed_out: bool
    stdin_unread: int  # args bytes the child never took (it closed stdin or exited first)
    # an abort was asked for this call and its SIGKILL ended the leader (not
    # the leader's own exit, not the timeout's kill): the abort ended the call
    aborted: bool = False


class ProcessGroups:
    """The live children of one adapter, each the leader of its own process group.

    Thread-safe: calls on several worker threads register and reap their
    children here while `kill_all` may run on another thread.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: dict[int, subprocess.Popen[bytes]] = {}
        self._by_key: dict[str, int] = {}  # a call's key -> its leader's pid
        # keys of calls aborted before their program was spawned (or after it
        # was reaped: a race the caller resolves), oldest first, bounded
        self._aborted: dict[str, None] = {}
        self._closed = False

    def spawn(
        self,
        argv: Sequence[str],
        env: Mapping[str, str | bytes],
        *,
        stdin: bool,
        key: str | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start ``argv``; `DefiniteFailure` when it cannot start (it never ran).

        ``key`` names the call so that :meth:`abort` can find its group."""
        with self._lock:
            if self._closed:
                raise DefiniteFailure("the adapter has been shut down; nothing was started")
            if key is not None and key in self._aborted:
                del self._aborted[key]
                # nothing ran, but the contract records an aborted call unknown
                # (its evidence says why: an operator may reconcile not_executed)
                raise CallAborted("aborted by the operator before its program started")
        try:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=dict(env),
                close_fds=True,
                start_new_session=True,
                restore_signals=True,
            )
        except OSError as exc:
            # Popen raises only before the program's exec succeeded.
            reason = exc.strerror or type(exc).__name__
            raise DefiniteFailure(f"cannot start {argv[0]}: {reason}") from exc
        except ValueError as exc:
            raise DefiniteFailure(f"cannot start {argv[0]}: {exc}") from exc
        with self._lock:
            self._live[proc.pid] = proc
            if key is not None:
                self._by_key[key] = proc.pid
            # kill_all or an abort ran while we were spawning: it must not live on
            doomed = self._closed or (key is not None and key in self._aborted)
        if doomed:
            _kill_group(proc.pid)
        return proc

    def abort(self, key: str) -> None:
        """SIGKILL the group of the call named ``key``, now or as soon as it
        is spawned (an ``abort`` of a call whose program is starting)."""
        with self._lock:
            pid = self._by_key.get(key)
            self._aborted[key] = None
            while len(self._aborted) > _ABORTED_KEPT:
                del self._aborted[next(iter(self._aborted))]
            if pid is not None:
                _kill_group(pid)

    def finish(self, proc: subprocess.Popen[bytes]) -> tuple[int, bool]:
        """SIGKILL ``proc``'s whole group, wait for the leader to die, reap it:
        its returncode, and whether an abort was asked for its call (its
        key is among the aborted ones) before it was reaped."""
        _kill_group(proc.pid)
        try:
            os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
        except ChildProcessError as exc:
            with self._lock:
                self._live.pop(proc.pid, None)
                self._forget_key(proc.pid)
            raise OutcomeUnknown(f"lost track of child process {proc.pid}") from exc
        with self._lock:  # reap under the lock: kill_all never signals a reaped (reusable) pid
            self._live.pop(proc.pid, None)
            asked = any(p == proc.pid and k in self._aborted for k, p in self._by_key.items())
            self._forget_key(proc.pid)
            return proc.wait(), asked

    def _forget_key(self, pid: int) -> None:
        for key, live in list(self._by_key.items()):
            if live == pid:
                del self._by_key[key]
                self._aborted.pop(key, None)

    def kill_all(self) -> None:
        """SIGKILL every live group and refuse new children from now on (shutdown)."""
        with self._lock:
            self._closed = True
            for pid in list(self._live):
                _kill_group(pid)

    @property
    def live(self) -> int:
        """How many children are running or not yet reaped."""
        with self._lock:
            return len(self._live)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _close_pipes(proc: subprocess.Popen[bytes]) -> None:
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass  # a broken stdin pipe was already reported


class _Head:
    """Keeps the first ``size`` bytes of a stream and counts the rest."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.data = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.size - len(self.data)
        if room > 0:
            self.data += chunk[:room]


class _Tail:
    """Keeps the last ``size`` bytes of a stream and counts all of it."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.data = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        if not self.size:
            return
        self.data += chunk
        if len(self.data) > 2 * self.size:
            del self.data[: -self.size]

    def value(self) -> bytes:
        return bytes(self.data[-self.size :]) if self.size else b""


class _Pump:
    """Feeds stdin and drains stdout and stderr of one child until its leader exits."""

    def __init__(
        self, proc: subprocess.Popen[bytes], stdin_data: bytes | None, *, use_pidfd: bool
    ) -> None:
        self.proc = proc
        self.use_pidfd = use_pidfd
        self.sel = selectors.DefaultSelector()
        self.pidfd: int | None = None
        self.stdin_unread = 0
        self._leader_exited = False
        self._in_view = memoryview(stdin_data or b"")
        self._sinks: dict[int, _Head | _Tail] = {}

    def run(self, head: _Head, tail: _Tail, deadline: float | None) -> bool:
        """Pump until the leader exits (True) or the deadline passes (False)."""
        assert self.proc.stdout is not None and self.proc.stderr is not None
        for stream, sink in ((self.proc.stdout, head), (self.proc.stderr, tail)):
            os.set_blocking(stream.fileno(), False)
            self._sinks[stream.fileno()] = sink
            self.sel.register(stream.fileno(), selectors.EVENT_READ)
        self._start_stdin()
        self._open_pidfd()
        while not self._exited():
            wait = None if self.pidfd is not None else _POLL_S
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                wait = left if wait is None else min(wait, left)
            for key, _ in self.sel.select(wait):
                self._service(key.fd)
        self.stdin_unread += len(self._in_view)  # a leader that exited before taking them all
        self._in_view = self._in_view[:0]
        return True

    def close(self) -> None:
        """Close our pipe ends, the pidfd and the selector."""
        self.sel.close()
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None
        _close_pipes(self.proc)

    def _start_stdin(self) -> None:
        stdin = self.proc.stdin
        if stdin is None:
            return
        if not self._in_view:
            stdin.close()
            return
        os.set_blocking(stdin.fileno(), False)
        self.sel.register(stdin.fileno(), selectors.EVENT_WRITE)

    def _open_pidfd(self) -> None:
        pidfd_open = getattr(os, "pidfd_open", None)
        if pidfd_open is None or not self.use_pidfd:
            return
        try:
            self.pidfd = pidfd_open(self.proc.pid)
        except OSError:
            return  # an old kernel: poll instead
        self.sel.register(self.pidfd, selectors.EVENT_READ)

    def _exited(self) -> bool:
        if self.pidfd is not None:
            return self._leader_exited
        flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
        return os.waitid(os.P_PID, self.proc.pid, flags) is not None

    def _service(self, fd: int) -> None:
        if fd == self.pidfd:
            self._leader_exited = True
        elif fd in self._sinks:
            self._read(fd)
        else:
            self._write(fd)

    def _read(self, fd: int) -> None:
        try:
            chunk = os.read(fd, _READ_SIZE)
        except BlockingIOError:
            return
        if chunk:
            self._sinks[fd].feed(chunk)
        else:
            self.sel.unregister(fd)
            del self._sinks[fd]

    def _write(self, fd: int) -> None:
        assert self.proc.stdin is not None
        try:
            written = os.write(fd, self._in_view[:_READ_SIZE])
        except BlockingIOError:
            return
        except OSError:
            # EPIPE (or another write error): the child closed stdin, or never read it, and
            # exited. Not an error by itself: we stop writing and the exit status decides.
            self.stdin_unread = len(self._in_view)
            written = len(self._in_view)
        self._in_view = self._in_view[written:]
        if not self._in_view:
            self.sel.unregister(fd)
            try:
                self.proc.stdin.close()
            except OSError:
                pass  # nothing is buffered in it: a close error loses no data

    def drain(self) -> None:
        """After the group was killed: read what is left in the pipes, without waiting.

        Bounded, so that a child that escaped the group and keeps writing
        cannot hold the call.
        """
        for fd in list(self._sinks):
            for _ in range(_DRAIN_READS):
                if fd not in self._sinks:
                    break
                try:
                    chunk = os.read(fd, _READ_SIZE)
                except BlockingIOError:
                    break
                if chunk:
                    self._sinks[fd].feed(chunk)
                else:
                    self.sel.unregister(fd)
                    del self._sinks[fd]


def run(
    groups: ProcessGroups,
    argv: Sequence[str],
    env: Mapping[str, str | bytes],
    stdin_data: bytes | None,
    *,
    timeout_s: float | None,
    stdout_head: int,
    stderr_tail: int,
    use_pidfd: bool = True,
    key: str | None = None,
) -> Finished:
    """Run ``argv`` to its end (or its timeout), then kill its group and reap it.

    ``stdin_data`` None gives the child ``/dev/null`` as stdin. ``use_pidfd``
    False watches the leader's exit by polling, as on kernels without
    ``pidfd_open`` (the tests use it to cover that path). Raises
    `DefiniteFailure` only when the program could not be started; any other
    error propagates and means the run's effect is unknown.
    """
    proc = groups.spawn(argv, env, stdin=stdin_data is not None, key=key)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    head, tail = _Head(stdout_head), _Tail(stderr_tail)
    pump: _Pump | None = None
    exited = False
    try:  # from here on, whatever happens, the group is killed and the leader reaped
        pump = _Pump(proc, stdin_data, use_pidfd=use_pidfd)
        exited = pump.run(head, tail, deadline)
    finally:
        try:
            returncode, abort_asked = groups.finish(proc)
            if exited and pump is not None:
                pump.drain()  # what the leader wrote before it exited
        finally:
            if pump is not None:
                pump.close()
            else:
                _close_pipes(proc)
    return Finished(
        returncode=returncode,
        stdout_head=bytes(head.data),
        stdout_total=head.total,
        stderr_tail=tail.value(),
        stderr_total=tail.total,
        timed_out=not exited,
        stdin_unread=pump.stdin_unread,
        # the leader died of SIGKILL while it ran (a leader that exited on its
        # own keeps its status, whatever kill reached its zombie), and the
        # timeout did not send it: the abort's kill ended the call
        aborted=abort_asked and exited and returncode == -signal.SIGKILL,
    )
