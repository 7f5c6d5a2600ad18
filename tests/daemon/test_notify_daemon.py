"""What a real daemon tells systemd: STATUS= with its counts, and a watchdog that
withholds its pings while the writer thread is stuck."""

from __future__ import annotations

import socket
import sqlite3
import time
from pathlib import Path

from tests.daemon.harness import Actor, Daemon, Env


class Notify:
    """A notify socket of our own, read with bounded waits."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.seen: list[tuple[float, str]] = []

    def recv(self, timeout: float) -> list[str] | None:
        """The next datagram's lines, or None when nothing came within ``timeout``."""
        self.sock.settimeout(timeout)
        try:
            lines = self.sock.recv(4096).decode().split("\n")
        except TimeoutError:
            return None
        self.seen.extend((time.monotonic(), x) for x in lines)
        return lines

    def until(self, pred, timeout: float = 30.0) -> str:
        # not a poll (tests/_poll.py): it reads the datagrams as they come, each recv bounded
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"timed out; seen {[x for _, x in self.seen][-10:]}"
            for line in self.recv(left) or []:
                if pred(line):
                    return line

    def close(self) -> None:
        self.sock.close()


def start(d: Daemon, **extra: str) -> Notify:
    notify = Notify(d.env.root / "notify-test")
    d.spawn({"NOTIFY_SOCKET": str(notify.path), **extra})
    notify.until(lambda x: x == "READY=1")
    return notify


class TestStatusLine:
    def test_status_names_unknown_attempts_and_pending_receipts(self, make_daemon):
        """STATUS= says serving with the unknown attempts and receipts pending, then stopping."""
        d = make_daemon(start=False)
        notify = start(d)
        try:
            zero = "STATUS=serving, 0 unknown attempts, 0 receipts pending"
            notify.until(lambda x: x == zero)
            a = Actor(d, acts=("boom",))
            a.submit("op-b", "boom")
            assert a.invoke("op-b")["status"] == "unknown"
            one = "STATUS=serving, 1 unknown attempts, 0 receipts pending"
            notify.until(lambda x: x == one)
            d.close_clients()
            d.proc.terminate()
            notify.until(lambda x: x == "STATUS=stopping")
            assert d.proc.wait(30) == 0
        finally:
            notify.close()


class TestWatchdog:
    def test_a_stuck_writer_stops_the_pings_until_it_moves_again(self, make_daemon):
        """While the writer cannot commit, no WATCHDOG=1 is sent; once it can, pings resume."""
        env = Env()
        d = make_daemon(env, start=False)
        interval = 0.2  # WATCHDOG_USEC is twice the ping interval
        notify = start(d, WATCHDOG_USEC=str(int(2 * interval * 1_000_000)))
        try:
            notify.until(lambda x: x == "WATCHDOG=1")
            # the writer commits a probe every interval: BEGIN IMMEDIATE may wait for
            # one to end (under load, a thread holding the lock can be descheduled)
            outside = sqlite3.connect(str(env.database), isolation_level=None, timeout=10)
            outside.execute("BEGIN IMMEDIATE")  # the writer's next batch now waits (5 s at most)
            try:
                gap = False
                # not a poll (tests/_poll.py): a silence of five intervals is what is measured
                deadline = time.monotonic() + 3.5
                while not gap and time.monotonic() < deadline:
                    lines = notify.recv(5 * interval)
                    gap = lines is None  # five intervals without any datagram
            finally:
                outside.execute("ROLLBACK")
                outside.close()
            assert gap, "the pings went on while the writer was stuck"
            notify.until(lambda x: x == "WATCHDOG=1", timeout=10)
            with d.connect() as c:
                assert c.call("status", {})["boot"]
            d.proc.terminate()
            assert d.proc.wait(30) == 0
        finally:
            notify.close()
        withheld = d.logged("watchdog_withheld")
        assert withheld and withheld[0]["reason"] == "writer"
