"""Programs an earlier boot left running (contract §3.6).

A clean stop kills every `cli` process group before the daemon exits, and
under the systemd unit a dead daemon's cgroup is emptied. A daemon run by
hand that is SIGKILLed (or whose parent shell dies with it) leaves its
running `cli` programs behind, without a parent: such a program can still
have its effect after the restart, so that whatever an operator decides
from what it has done *so far* may be wrong. At start, before anything is
marked or answered, recovery looks for them and kills their process groups,
so that after the restart no orphan of an earlier boot can still have its
effect, as after a clean stop.

An orphan is found by its environment: every `cli` program gets
``WARDD_IDEMPOTENCY_KEY=<neuron>/<op>/<attempt>`` and ``WARDD_BOOT=<boot>``,
the boot of the daemon that claimed the call (its children inherit both
unless they clear them). The key alone does not make a program ours:
another wardd on another database, serving the same neuron, runs its own
attempt with the same ``<neuron>/<op>/<attempt>``. A program is this
daemon's orphan only when its key is that of a claimed call of an earlier
boot *and* its ``WARDD_BOOT`` is the boot this database recorded with that
claim: a random id of that one daemon run, which no daemon on another
database ever gives its programs.

A program that carries the key and *no* boot was started by an earlier
release, before programs carried their boot: after an upgrade, the
orphans of the old daemon have only their key. Such a program is the
orphan of the claimed call whose key it carries, if it runs under the
daemon's own user (a root daemon reads every process's environment, and
an earlier release ran its programs as itself). Its limit: a program of
an *earlier release* of wardd running now on another database, for the
same neuron, op and attempt number, would be taken for one; a program of
this release never is (it carries its boot). ``cli`` receipt programs
carry ``WARDD_RECEIPT=1`` and are never orphans (they have no effect to
fence). Only processes whose environment the daemon may read are seen.
Linux ``/proc`` only; elsewhere nothing is found.

A found orphan's groups are first stopped (SIGSTOP: from then on it can
do nothing), then the kill is recorded, then they are killed: a start
SIGKILLed between the record and the kill leaves them stopped, and the
next start finds them again (``stop_groups``, ``kill_groups``).

An ``mcp`` act's stdio server is not one call's program: it is started
once and serves many calls, so it carries no key. It carries
``WARDD_MCP_ACT=<act>`` and ``WARDD_BOOT`` (the daemon gives the adapter
its boot when it builds it). A
server of an earlier boot may still be running a call of that boot (the
daemon died in its middle): at start, a live process with both marks whose
boot is that of a claimed call left open is killed, group and all, before
any receipt asks a new server about that call; each open attempt of that
act and boot is then marked with ``orphan_killed: true``.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Collection, Iterable, Iterator, Mapping

__all__ = [
    "ACT_VAR",
    "BOOT_VAR",
    "KEY_VAR",
    "RECEIPT_VAR",
    "any_marked",
    "find_orphans",
    "find_servers",
    "kill_groups",
    "stop_groups",
    "wait_gone",
]

KEY_VAR = b"WARDD_IDEMPOTENCY_KEY="
BOOT_VAR = b"WARDD_BOOT="
ACT_VAR = b"WARDD_MCP_ACT="
RECEIPT_VAR = b"WARDD_RECEIPT="  # a `cli` receipt run: never an orphan
_ENVIRON_MAX = 1 << 20  # an environment larger than this is not one of ours


def find_orphans(
    wanted: Mapping[str, str], proc: str = "/proc", uid: int | None = None
) -> dict[str, list[int]]:
    """``key -> pids`` of the live processes that are orphans of ``wanted``'s
    claims (``key -> the boot that claimed it``): those holding a wanted key
    with the boot it maps to, and those holding a wanted key and no boot at
    all that run as ``uid`` (default: this process's effective uid)."""
    want = {k.encode(): b.encode() for k, b in wanted.items()}
    found: dict[str, list[int]] = {}
    if not want:
        return found
    uid = os.geteuid() if uid is None else uid
    for pid, key, boot, owner in _marked(proc):
        claim = want.get(key)
        if claim is not None and (boot == claim if boot is not None else owner == uid):
            found.setdefault(key.decode(), []).append(pid)
    for pids in found.values():
        pids.sort()
    return found


def find_servers(boots: Collection[str], proc: str = "/proc") -> dict[tuple[str, str], list[int]]:
    """``(act, boot) -> pids`` of the live processes marked as an ``mcp`` act's
    server (``WARDD_MCP_ACT``) of one of ``boots``."""
    want = {b.encode() for b in boots}
    found: dict[tuple[str, str], list[int]] = {}
    for pid, mark, boot, _owner in _marked(proc):
        if mark.startswith(ACT_VAR) and boot is not None and boot in want:
            act = mark[len(ACT_VAR) :].decode("utf-8", "replace")
            found.setdefault((act, boot.decode()), []).append(pid)
    for pids in found.values():
        pids.sort()
    return found


def any_marked(proc: str = "/proc") -> bool:
    """Whether a live process (but this one) holds a key (with a boot or
    without one, not as a receipt run) or an mcp server's mark: without one,
    no orphan can be found, and the daemon need not list the claimed calls
    it would look for (a crash after thousands of claims)."""
    return next(_marked(proc), None) is not None


def _marked(proc: str) -> Iterator[tuple[int, bytes, bytes | None, int | None]]:
    """(pid, key, boot or None, owner uid) of each live process but this one
    that holds a key and is not a receipt run; an mcp server's "key" is its
    whole ``WARDD_MCP_ACT=<act>`` item."""
    me = os.getpid()
    try:
        entries = list(os.scandir(proc))
    except OSError:
        return
    for entry in entries:
        if entry.name.isdigit() and int(entry.name) != me:
            key, boot, receipt = _marks_of(os.path.join(entry.path, "environ"))
            if key is not None and not receipt:
                yield int(entry.name), key, boot, _owner(entry.path)


def _owner(path: str) -> int | None:
    """The uid a /proc entry belongs to (None: gone meanwhile)."""
    try:
        return os.stat(path).st_uid
    except OSError:
        return None


def _marks_of(path: str) -> tuple[bytes | None, bytes | None, bool]:
    """The ``WARDD_IDEMPOTENCY_KEY`` value (or the whole ``WARDD_MCP_ACT`` item),
    the ``WARDD_BOOT`` value in an environ file, and whether it holds
    ``WARDD_RECEIPT``."""
    try:
        with open(path, "rb") as f:
            environ = f.read(_ENVIRON_MAX)
    except OSError:  # gone meanwhile, or another uid's
        return None, None, False
    key = boot = None
    receipt = False
    for item in environ.split(b"\0"):
        if item.startswith(KEY_VAR):
            key = item[len(KEY_VAR) :]
        elif item.startswith(ACT_VAR) and key is None:
            key = item
        elif item.startswith(BOOT_VAR):
            boot = item[len(BOOT_VAR) :]
        elif item.startswith(RECEIPT_VAR):
            receipt = True
    return key, boot, receipt


def stop_groups(pids: Iterable[int]) -> list[int]:
    """SIGSTOP the process group of each pid (never the daemon's own); the
    groups stopped. A stopped group runs no further until it is killed (or
    continued); one that is gone is not in the answer."""
    return _signal_groups(pids, signal.SIGSTOP)


def kill_groups(pids: Iterable[int]) -> list[int]:
    """SIGKILL the process group of each pid (never the daemon's own); the groups killed."""
    return _signal_groups(pids, signal.SIGKILL)


def _signal_groups(pids: Iterable[int], sig: signal.Signals) -> list[int]:
    own = os.getpgrp()
    done: list[int] = []
    for pid in pids:
        try:
            pgid = os.getpgid(pid)
        except ProcessLookupError:
            continue
        if pgid == own or pgid in done:
            continue
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            continue
        done.append(pgid)
    return done


def _gone(pid: int, proc: str = "/proc") -> bool:
    """The process has exited (a zombie waiting to be reaped has: it can do nothing)."""
    try:
        with open(f"{proc}/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1][:1] in ("Z", "X")
    except (OSError, IndexError):
        return True


def wait_gone(pids: Iterable[int], timeout_s: float) -> list[int]:
    """Wait until every pid has exited, at most ``timeout_s``; the ones still
    there. A SIGKILL is delivered asynchronously: a process can still be
    running for a moment after ``killpg`` returns."""
    left = [p for p in pids if not _gone(p)]
    deadline = time.monotonic() + timeout_s
    while left and time.monotonic() < deadline:
        time.sleep(0.005)
        left = [p for p in left if not _gone(p)]
    return left
