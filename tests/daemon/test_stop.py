"""The stop path with real processes and real signals (contract §3.4, §3.6).

Each test replays a history that once broke "no effect twice, nothing
unknown guessed": a reconcile that won against a receipt check the stop cut
short, a lock released while an in-process call was still running, a
second SIGTERM or a SIGHUP that killed the daemon without its stop.
"""

from __future__ import annotations

import os
import re
import select
import shlex
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from tests._leftovers import alive
from tests._poll import wait_for
from tests.daemon.harness import Actor, Background, Daemon, Env, boot_row, child_env
from wardd.protocol import WarddError

pytestmark = pytest.mark.timeout(120)


def logged(d: Daemon, event: str, **fields: Any) -> bool:
    """The daemon's last run logged ``event`` with these fields."""
    return bool(d.logged(event, run=-1, **fields))


def text_logged(d: Daemon, event: str) -> bool:
    """A text (not JSON) line of ``event`` with its fields, colours aside."""
    plain = re.sub(r"\x1b\[[0-9;]*m", "", d.logs[-1].read_text(errors="replace"))
    return any(
        not line.startswith("{") and re.search(rf"\b{event}\b.*\bboot=", line)
        for line in plain.splitlines()
    )


def sh(script: str) -> list[str]:
    return ["/bin/sh", "-c", script]


def gate_loop(gate: Path) -> str:
    """Shell: wait (at most ~30 s) until ``gate`` exists."""
    return (
        f"i=0; while [ ! -e {shlex.quote(str(gate))} ]; do "
        "if [ $i -ge 600 ]; then exit 3; fi; sleep 0.05; i=$((i+1)); done"
    )


def hung_env(**top: Any) -> Env:
    """``hung``: a ``cli`` act that records its pid and start, then waits
    for a gate the tests never open (its effect would follow)."""
    env = Env(**top)
    q = shlex.quote
    pids = env.root / "pids"
    pids.mkdir()
    env.acts["hung"] = {
        "adapter": "cli",
        "argv": sh(
            f'echo $$ > {q(str(pids))}/"$WARDD_OP"; '
            f'touch {q(str(env.started))}/"$WARDD_OP.$WARDD_ATTEMPT"; '
            f"{gate_loop(env.gates / 'never')}; "
            f'echo "$WARDD_IDEMPOTENCY_KEY" >> {q(str(env.cli_ledger))}'
        ),
    }
    env.write_config()
    return env


def reconcile(a: Actor, op: str, status: str, client: Any = None) -> Any:
    return a.call(
        "reconcile", {"op": op, "attempt": 1, "outcome": {"status": status}}, client=client
    )


class TestReceiptPendingAtStop:
    def test_a_reconcile_waiting_for_a_receipt_check_the_stop_cuts_records_nothing(
        self, make_daemon: Any
    ) -> None:
        """A reconcile waiting for a running cli receipt check is refused
        (overloaded, receipt_pending) when SIGTERM cuts the check, and the
        attempt stays unknown until a later check finds the effect."""
        env = Env()
        q = shlex.quote
        pids, receipts = env.root / "pids", env.root / "receipts.log"
        pids.mkdir()
        rgate = env.gates / "receipt"
        env.acts["fx"] = {
            "adapter": "cli",
            # the effect happens, then the call hangs until the daemon is killed
            "argv": sh(
                f'echo "$WARDD_IDEMPOTENCY_KEY" >> {q(str(env.cli_ledger))}; '
                f'echo $$ > {q(str(pids))}/"$WARDD_OP"; '
                f'touch {q(str(env.started))}/"$WARDD_OP.$WARDD_ATTEMPT"; '
                f"{gate_loop(env.gates / 'never')}"
            ),
            # notes each start, then answers only once the test opens its gate
            "receipt_argv": sh(
                f"echo $$ >> {q(str(receipts))}; {gate_loop(rgate)}; "
                f'if grep -qxF -- "$WARDD_IDEMPOTENCY_KEY" {q(str(env.cli_ledger))}; '
                "then echo executed; else echo not_executed; fi"
            ),
        }
        env.write_config()
        d = make_daemon(env)
        a = Actor(d, acts=("fx",))
        a.submit("op", "fx")
        Background(a.invoke, "op", 1, d.connect())
        wait_for(env.started_marker("op").exists, what="the act to start")
        old_boot = d.boot
        d.kill()  # a crash after the claim: the attempt's fate is unknown
        os.killpg(int((pids / "op").read_text()), signal.SIGKILL)

        def receipt_runs() -> int:
            return len(receipts.read_text().splitlines()) if receipts.exists() else 0

        d.start()
        a.client = d.connect()
        assert a.read("status")["receipts_pending"] == 1
        wait_for(lambda: receipt_runs() == 1, what="the background receipt check to start")
        waiting = Background(reconcile, a, "op", "not_executed", d.connect())
        wait_for(lambda: logged(d, "reconcile_waiting", op="op"), what="the reconcile to wait")
        d.proc.send_signal(signal.SIGTERM)
        err = waiting.error_of()
        assert isinstance(err, WarddError)
        assert (err.code, err.data.get("reason")) == ("overloaded", "receipt_pending")
        assert d.proc.wait(30) == 0
        assert logged(d, "stopped")

        d.start()
        a.client = d.connect()
        att = a.op("op")["attempts"][0]
        assert att["state"] == "unknown" and "outcome" not in att
        assert att["evidence"]["boot"] == old_boot
        assert "reconciled" not in [r["kind"] for r in a.history("op")]
        # sent again after the restart, it waits for the new check, which finds the effect
        wait_for(lambda: receipt_runs() == 2, what="the check to run again")
        again = Background(reconcile, a, "op", "not_executed", d.connect())
        wait_for(lambda: logged(d, "reconcile_waiting", op="op"), what="the reconcile to wait")
        rgate.touch()
        err = again.error_of()
        assert isinstance(err, WarddError) and err.code == "conflict"
        op = a.op("op")
        assert op["state"] == "retained"
        assert op["attempts"][0]["outcome"]["source"] == "receipt"
        assert env.ledger_lines(env.cli_ledger) == [f"{a.id}/op/1"]

    def test_a_reconcile_sent_while_the_daemon_stops_is_refused(self, make_daemon: Any) -> None:
        """A reconcile that arrives during the shutdown grace is refused
        (overloaded, shutdown) and records nothing."""
        d = make_daemon(hung_env(workers=1, shutdown_grace_s=60))
        a = Actor(d, acts=("hung", "boom"))
        a.submit("u", "boom")
        a.invoke("u")  # exits 7: unknown, reconcilable
        a.submit("op", "hung")
        Background(a.invoke, "op", 1, d.connect())
        wait_for(d.env.started_marker("op").exists, what="the act to start")
        d.proc.send_signal(signal.SIGTERM)
        wait_for(lambda: logged(d, "stopping"), what="the stop to begin")
        with pytest.raises(WarddError) as ei:
            reconcile(a, "u", "not_executed")
        assert (ei.value.code, ei.value.data.get("reason")) == ("overloaded", "shutdown")
        d.proc.send_signal(signal.SIGTERM)
        assert d.proc.wait(15) == 0
        d.start()
        a.client = d.connect()
        att = a.op("u")["attempts"][0]
        assert att["state"] == "unknown" and "outcome" not in att


PLUGIN = '''
"""A test-only in-process adapter, registered through a real entry point.

Like many client libraries it hands its work to a thread pool of its own;
the work blocks opening a FIFO (a system call) until the test writes to it,
then appends the key to a ledger. The pool's thread is not a daemon thread:
at exit the interpreter waits for it, so the process outlives its stop.
"""
import concurrent.futures
import os

_pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)


class Stuck:
    in_process = True

    def __init__(self, fifo, ledger, started):
        self.fifo, self.ledger, self.started = fifo, ledger, started

    def call(self, request):
        return _pool.submit(self._effect, request.idempotency_key).result()

    def _effect(self, key):
        open(self.started, "w").close()
        with open(self.fifo, "rb") as f:  # blocks until the test opens it for writing
            f.read()
        with open(self.ledger, "a") as f:
            f.write(key + "\\n")
            f.flush()
            os.fsync(f.fileno())
        return b"done"

    def receipt(self, key):
        try:
            with open(self.ledger) as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            lines = []
        return "executed" if key in lines else "not_executed"
'''


def plugin_dir(root: Path) -> Path:
    where = root / "plugin"
    (where / "wardd_stuck_plugin-1.0.dist-info").mkdir(parents=True)
    (where / "wardd_stuck_plugin.py").write_text(PLUGIN)
    dist = where / "wardd_stuck_plugin-1.0.dist-info"
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: wardd-stuck-plugin\nVersion: 1.0\n"
    )
    (dist / "entry_points.txt").write_text(
        "[wardd.adapters]\nstuck-test = wardd_stuck_plugin:Stuck\n"
    )
    return where


class Stuck:
    """An Env whose act ``stuck`` is the test plugin above, on one worker
    with a 1 s grace, and the environment a daemon needs to load it."""

    def __init__(self) -> None:
        self.env = env = Env(workers=1, shutdown_grace_s=1)
        self.fifo, self.ledger = env.root / "fifo", env.root / "stuck.log"
        self.started = env.root / "stuck.on"
        os.mkfifo(self.fifo)
        env.acts["stuck"] = {
            "adapter": "stuck-test",
            "fifo": str(self.fifo),
            "ledger": str(self.ledger),
            "started": str(self.started),
        }
        env.write_config()
        path = os.pathsep.join(
            p for p in (str(plugin_dir(env.root)), os.environ.get("PYTHONPATH")) if p
        )
        self.extra = {"PYTHONPATH": path}

    def stopped_with_a_call_stuck(self, make_daemon: Any) -> tuple[Daemon, Actor]:
        """A daemon whose stop path has run (``stopped`` logged) while its
        in-process call is still stuck, keeping the process alive."""
        d = make_daemon(self.env, start=False)
        d.start(self.extra)
        a = Actor(d, acts=("stuck",))
        a.submit("op", "stuck")
        Background(a.invoke, "op", 1, d.connect())
        wait_for(self.started.exists, what="the in-process call to start")
        d.proc.send_signal(signal.SIGTERM)
        wait_for(lambda: logged(d, "stopped"), what="the first daemon's stop path to end")
        assert logged(d, "shutdown_grace_passed")
        assert d.proc.poll() is None  # the call's thread keeps the process alive
        return d, a


class TestOwnerLock:
    def test_no_second_daemon_starts_while_a_stuck_in_process_call_keeps_the_first_alive(
        self, make_daemon: Any
    ) -> None:
        """The owner lock is held until the process is gone: past its grace
        and its ``stopped`` line, a daemon whose in-process call is still in
        progress keeps a second daemon out (exit 75), so the call's late
        effect is found by the receipt instead of run again."""
        st = Stuck()
        d, a = st.stopped_with_a_call_stuck(make_daemon)
        env_vars = {k: v for k, v in os.environ.items() if not k.startswith("NOTIFY_")}
        second = subprocess.run(
            d.argv(), env={**env_vars, **st.extra}, capture_output=True, timeout=60
        )
        assert second.returncode == 75, second.stderr.decode(errors="replace")
        assert b"is in use" in second.stderr
        assert d.proc.poll() is None

        # the stuck call now has its effect, then the first process ends
        fd = os.open(st.fifo, os.O_WRONLY)
        os.close(fd)
        assert d.proc.wait(30) == 0
        assert st.ledger.read_text().splitlines() == [f"{a.id}/op/1"]

        d.start(st.extra)  # only now can a daemon own the database
        a.client = d.connect()
        op = a.op("op")
        assert op["state"] == "retained"
        assert op["attempts"][0]["outcome"]["status"] == "succeeded"
        assert op["attempts"][0]["outcome"]["source"] == "receipt"

    def test_a_stop_signal_after_the_stop_ends_a_process_a_stuck_call_keeps_alive(
        self, make_daemon: Any
    ) -> None:
        """Once ``stopped`` is logged, another SIGTERM ends a process that a
        stuck in-process call keeps alive, with the stop's status 0; the call
        never had its effect, and the in-process receipt says so."""
        st = Stuck()
        d, a = st.stopped_with_a_call_stuck(make_daemon)
        d.proc.send_signal(signal.SIGTERM)
        assert d.proc.wait(15) == 0
        assert logged(d, "signal", signal="SIGTERM", action="exit")
        assert not st.ledger.exists()

        d.start(st.extra)
        a.client = d.connect()
        att = a.op("op")["attempts"][0]
        assert att["outcome"] == {"status": "not_executed", "source": "receipt"}
        assert a.state("op") == "pending"


# Makes the daemon a session leader whose controlling terminal is the pty on
# fds 0-2 (as a shell does for a foreground `wardd run`), then execs it.
_ON_A_TERMINAL = (
    "import fcntl, os, sys, termios; os.setsid(); "
    "fcntl.ioctl(0, termios.TIOCSCTTY, 0); os.execv(sys.argv[1], sys.argv[1:])"
)


class TerminalDaemon(Daemon):
    """A daemon running in the foreground of a real pseudo-terminal."""

    def spawn(self, extra_env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        log = self.env.root / f"tty-{len(self.logs)}.log"
        self.logs.append(log)
        env = child_env(extra_env)
        master, slave = os.openpty()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _ON_A_TERMINAL, *self.argv()],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
        )
        os.close(slave)
        self.master = master
        self._stop_r, self._stop_w = os.pipe()
        self._copier = threading.Thread(target=self._copy, args=(log,), daemon=True)
        self._copier.start()
        return self.proc

    def _copy(self, log: Path) -> None:
        """What the terminal shows goes to the log, until it is closed."""
        with open(log, "wb") as out:
            while True:
                ready, _, _ = select.select([self.master, self._stop_r], [], [])
                if self._stop_r in ready:
                    return
                try:
                    data = os.read(self.master, 65536)
                except OSError:
                    return
                if not data:
                    return
                out.write(data)
                out.flush()

    def close_terminal(self) -> None:
        """Close the terminal's master side, as a terminal emulator does when
        its window closes: the kernel hangs the terminal up (SIGHUP to the
        session leader; writes to it fail from now on)."""
        os.write(self._stop_w, b"x")
        self._copier.join(10)
        os.close(self.master)
        os.close(self._stop_r)
        os.close(self._stop_w)
        self._copier = None

    def cleanup(self) -> None:
        """Also the terminal (and its copier thread) when the test did not close it."""
        try:
            super().cleanup()
        finally:
            if getattr(self, "_copier", None) is not None:
                self.close_terminal()


class TestStopSignals:
    def test_closing_the_terminal_of_a_foreground_daemon_is_a_clean_stop(self) -> None:
        """Closing the terminal of a foreground daemon (SIGHUP, then every
        log write failing) runs the stop path: clean mark, exit 0."""
        d = TerminalDaemon(Env())
        try:
            d.start()
            boot = d.boot
            # log_format "auto" on a terminal: readable text lines, not JSON
            wait_for(lambda: text_logged(d, "ready"), what="the ready line on the terminal")
            d.close_clients()
            d.close_terminal()
            assert d.proc.wait(20) == 0
            clean, stopped_at = boot_row(d.env, boot)
            assert clean == 1 and stopped_at is not None
        finally:
            d.cleanup()

    def test_a_second_sigterm_ends_the_grace_and_the_stop_completes(self, make_daemon: Any) -> None:
        """A second SIGTERM during the grace ends it at once: the running
        call stays claimed without an outcome, its cli group is killed, and
        the stop completes (stopped logged, clean mark, exit 0)."""
        d = make_daemon(hung_env(workers=1, shutdown_grace_s=60))
        a = Actor(d, acts=("hung",))
        a.submit("op", "hung")
        call = Background(a.invoke, "op", 1, d.connect())
        wait_for(d.env.started_marker("op").exists, what="the act to start")
        pid = int((d.env.root / "pids" / "op").read_text())
        old_boot = d.boot
        assert old_boot is not None
        d.proc.send_signal(signal.SIGTERM)
        wait_for(lambda: logged(d, "stopping"), what="the stop to begin")
        assert alive(pid)  # the grace waits for it
        d.proc.send_signal(signal.SIGTERM)
        assert d.proc.wait(15) == 0
        assert logged(d, "signal", signal="SIGTERM", action="end_grace")
        assert logged(d, "shutdown_grace_ended") and logged(d, "stopped")
        clean, stopped_at = boot_row(d.env, old_boot)
        assert clean == 1 and stopped_at is not None
        wait_for(lambda: not alive(pid), what="the call's process group to be killed")
        call.error_of()  # its caller gets no outcome
        assert d.env.ledger_lines(d.env.cli_ledger) == []

        d.start()
        a.client = d.connect()
        att = a.op("op")["attempts"][0]
        assert att["state"] == "unknown" and "outcome" not in att
        assert att["evidence"] == {"claimed": True, "boot": old_boot}

    @pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGQUIT])
    def test_sighup_and_sigquit_stop_the_daemon_like_sigterm(
        self, make_daemon: Any, sig: signal.Signals
    ) -> None:
        """SIGHUP (a closed terminal) and SIGQUIT run the stop path: stopped
        logged, clean mark, exit 0."""
        d = make_daemon()
        boot = d.boot
        d.proc.send_signal(sig)
        assert d.proc.wait(20) == 0
        assert logged(d, "signal", signal=sig.name) and logged(d, "stopped")
        assert boot_row(d.env, boot)[0] == 1

    def test_other_signals_are_logged_and_change_nothing(self, make_daemon: Any) -> None:
        """SIGUSR1, SIGUSR2 and SIGALRM, whose default would kill the
        daemon, are logged and ignored: it keeps serving, then stops cleanly."""
        d = make_daemon()
        for sig in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM):
            d.proc.send_signal(sig)
            wait_for(lambda s=sig: logged(d, "signal_ignored", signal=s.name), what=sig.name)
        with d.connect() as c:
            assert c.call("status", {})["boot"] == d.boot
        assert d.proc.poll() is None
        assert d.terminate() == 0 and logged(d, "stopped")
