"""Which signals stop the daemon, which it only logs, and the handler that
holds them while the event loop is not running (contract §3.6).

No signal that the daemon can catch ends it without its stop path:

- `STOP_SIGNALS` (SIGTERM, SIGINT, SIGHUP, SIGQUIT) start the stop; one
  more during the shutdown grace ends the grace at once. SIGHUP is a stop
  because closing the terminal of a foreground daemon must not be a crash;
  SIGQUIT because an operator who sends it means "quit".
- `LOGGED_SIGNALS`: every other signal whose default action would end the
  process and that is sent from outside (SIGUSR1, SIGUSR2, SIGALRM,
  SIGVTALRM, SIGPROF, SIGIO, SIGPWR, SIGSTKFLT, SIGXCPU and the real-time
  signals) is logged (``signal_ignored``) and changes nothing: wardd has no
  reload or reopen to attach to them, and a stray ``kill -USR1`` must not
  turn into a crash with attempts left unknown.
- Not touched: SIGKILL and SIGSTOP (they cannot be caught); SIGPIPE and
  SIGXFSZ (Python ignores them: the write fails with an error instead);
  SIGCHLD, SIGCONT, SIGURG, SIGWINCH (ignored by default) and SIGTSTP,
  SIGTTIN, SIGTTOU (they suspend, they do not end); the fault signals
  SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP and SIGSYS, which mean a
  crash in progress (SIGABRT is also the watchdog's kill of a hung daemon):
  they end it as a crash, and the next start recovers.

Handlers, never ``SIG_IGN``: a caught signal is reset to its default in a
``cli`` adapter's child at ``exec``, an ignored one would be inherited.

`EarlySignals` catches these signals from the start of ``wardd run`` until
the event loop's receiver takes them over, and again once it has let them
go: a signal before the loop is kept and handed to the daemon, which then
stops as soon as it runs. Once the stop path has run (``stopped`` is
logged, the clean-stop mark written), the process normally exits at once;
if something keeps it alive (a thread of an in-process adapter whose call
is stuck), a stop signal then ends it at once with the stop's exit status
(`EarlySignals.stopped`). The owner lock goes with the process.
"""

from __future__ import annotations

import datetime
import os
import signal
from types import FrameType

from ..observe.logs import render_direct

__all__ = ["CAUGHT_SIGNALS", "LOGGED_SIGNALS", "STOP_SIGNALS", "EarlySignals", "signal_name"]

STOP_SIGNALS: frozenset[int] = frozenset(
    {signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT}
)


def _logged() -> frozenset[int]:
    names = ["SIGUSR1", "SIGUSR2", "SIGALRM", "SIGVTALRM", "SIGPROF", "SIGIO", "SIGPWR"]
    names += ["SIGSTKFLT", "SIGXCPU"]
    found = {int(getattr(signal, n)) for n in names if hasattr(signal, n)}
    rt_min = getattr(signal, "SIGRTMIN", None)
    rt_max = getattr(signal, "SIGRTMAX", None)
    if rt_min is not None and rt_max is not None:
        found.update(range(int(rt_min), int(rt_max) + 1))
    return frozenset(found & set(signal.valid_signals()))


LOGGED_SIGNALS: frozenset[int] = _logged()
CAUGHT_SIGNALS: tuple[int, ...] = tuple(sorted(STOP_SIGNALS | LOGGED_SIGNALS))


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        rt_min = getattr(signal, "SIGRTMIN", None)
        if rt_min is not None and signum >= rt_min:
            return f"SIGRTMIN+{signum - int(rt_min)}"
        return f"signal {signum}"


class EarlySignals:
    """Keeps every caught signal that arrives while no event loop handles them."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self._exit_status: int | None = None

    def install(self) -> None:
        for signum in CAUGHT_SIGNALS:
            signal.signal(signum, self._keep)

    def _keep(self, signum: int, frame: FrameType | None) -> None:
        if self._exit_status is not None and signum in STOP_SIGNALS:
            _exit_now(signum, self._exit_status)
        self.received.append(signum)

    def stopped(self, status: int) -> None:
        """The stop path has run and the process is about to exit with
        ``status``: from now on a stop signal ends it at once (so does one
        that came while the event loop was letting the signals go)."""
        self._exit_status = status
        for signum in self.take():
            if signum in STOP_SIGNALS:
                _exit_now(signum, status)

    def take(self) -> list[int]:
        """The signals kept so far, in order (and forget them)."""
        got, self.received = self.received, []
        return got


def _exit_now(signum: int, status: int) -> None:
    """End the process now (no interpreter clean-up waits for other threads).
    The log line is written with one ``write``: a signal handler must not
    re-enter a buffered stream the main thread may be writing."""
    line = {
        "signal": signal_name(signum),
        "action": "exit",
        "status": status,
        "event": "signal",
        "timestamp": datetime.datetime.now(datetime.UTC).isoformat().replace("+00:00", "Z"),
    }
    try:
        os.write(2, (render_direct("warning", line) + "\n").encode())
    finally:
        os._exit(status)
