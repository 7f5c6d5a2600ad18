"""The suite's own guard (tests/conftest.py, tests/_leftovers.py): nothing a test
starts outlives it, and nothing it did not start is ever signalled."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from tests import _leftovers
from tests._poll import pid_written, wait_for

ROOT = Path(__file__).resolve().parents[2]


class TestEnd:
    def test_a_tree_is_ended_whole_also_a_child_whose_parent_dies_first(self, tmp_path):
        """end() kills a process and all below it; a grandchild known by name is
        ended after its parent is gone (it no longer has us as an ancestor)."""
        pidfile = tmp_path / "sleep.pid"
        sh = subprocess.Popen(["/bin/sh", "-c", f"sleep 1000 & echo $! > {pidfile}; wait"])
        try:
            sleeper = pid_written(pidfile)
            tree = _leftovers.descendants()
            assert {p.pid for p in tree} >= {sh.pid, sleeper}
            orphan = [p for p in tree if p.pid == sleeper]
            sh.kill()
            sh.wait()  # the sleep is now an orphan, reparented away from us
            assert sleeper not in {p.pid for p in _leftovers.descendants()}
            assert _leftovers.running(orphan) == orphan
            assert _leftovers.end(orphan) == []
            assert _leftovers.running(orphan) == []
        finally:
            sh.kill()
            sh.wait()

    def test_a_pid_that_names_another_process_now_is_never_signalled(self):
        """A name whose start time differs (the pid was reused) is not running
        and end() leaves the process that has the pid now alone."""
        child = subprocess.Popen(["sleep", "1000"])
        try:
            me = _leftovers.identify(child.pid)
            assert me is not None
            reused = _leftovers.Proc(child.pid, me.start + 1)
            assert _leftovers.running([reused]) == []
            assert _leftovers.end([reused]) == []
            assert child.poll() is None  # untouched
            assert _leftovers.running([me]) == [me]
        finally:
            child.kill()
            child.wait()


class TestAlive:
    def test_a_zombie_is_gone_and_a_name_with_parentheses_is_read_right(self, tmp_path):
        """alive() is true while the process runs, also stopped, and false once
        it has exited, before its parent reaps it (reaped() only after); a program named ``x) Z (y``
        (its name stands between parentheses in /proc/PID/stat) is read by its
        own state, not by a letter of its name."""
        prog = tmp_path / "x) Z (y"
        prog.symlink_to(shutil.which("sleep") or "/bin/sleep")
        child = subprocess.Popen([str(prog), "1000"])
        try:
            assert _leftovers.alive(child.pid) and not _leftovers.stopped(child.pid)
            child.send_signal(signal.SIGSTOP)
            wait_for(lambda: _leftovers.stopped(child.pid), what="the program to stop")
            assert _leftovers.alive(child.pid)
            child.kill()
            os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped
            assert not _leftovers.alive(child.pid) and not _leftovers.stopped(child.pid)
            assert not _leftovers.reaped(child.pid)  # a zombie is still in the table
        finally:
            child.kill()
            child.wait()
        assert not _leftovers.alive(child.pid) and _leftovers.reaped(child.pid)


LEAKY = """
import subprocess
import threading


def test_leaves_a_process(tmp_path):
    with open("{pidfile}", "w") as f:
        f.write(f"{{subprocess.Popen(['sleep', '1000']).pid}}\\n")


def test_leaves_a_thread():
    threading.Thread(target=threading.Event().wait, name="stuck-for-ever").start()


def test_leaves_nothing():
    pass
"""


class TestGuard:
    def test_a_test_that_leaves_a_process_or_a_thread_fails_and_the_run_still_ends(self, tmp_path):
        """A real pytest run with the guard: each leaking test fails at teardown,
        named; its process is dead; the stuck thread does not hold the exit."""
        pidfile = tmp_path / "leaked.pid"
        (tmp_path / "test_leaky.py").write_text(LEAKY.format(pidfile=pidfile))
        out = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-c", os.devnull]
            + ["--rootdir", str(tmp_path), "-q", "-p", "no:cacheprovider", str(tmp_path)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            env={**os.environ, "WARDD_TEST_THREAD_GRACE_S": "0.5"},
            timeout=120,  # a hung run fails here: that is what is tested
        )
        text = out.stdout + out.stderr
        assert out.returncode == 1, text
        assert "2 errors" in text and "3 passed" in text, text
        assert "test_leaky.py::test_leaves_a_process left behind" in text
        assert "(now SIGKILLed)" in text and "sleep 1000" in text
        assert "test_leaky.py::test_leaves_a_thread left behind" in text
        assert "'stuck-for-ever'" in text
        assert "non-daemon threads still alive at exit" in text
        assert "test_leaves_nothing left behind" not in text
        leaked = _leftovers.identify(int(pidfile.read_text()))
        assert leaked is None or _leftovers.running([leaked]) == []
