"""Programs an earlier boot left running are killed at the next start
(contract §3.6; docs/recovery.md): after a restart no orphan of a SIGKILLed
daemon can still have its effect."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess

from tests.daemon.harness import Actor, Background, Env, wait_for
from wardd.daemon._orphans import find_orphans, kill_groups, wait_gone


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie waiting for init to reap it is dead for our purpose
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


class TestOrphans:
    def test_a_cli_program_left_by_a_sigkilled_daemon_is_killed_before_ready(self, make_daemon):
        """SIGKILL the daemon mid-call (its program lives on, as outside
        systemd); at the restart the program's group is killed before the
        daemon serves, it never has its effect, and the attempt's evidence
        says orphan_killed."""
        env = Env()
        root = shlex.quote(str(env.root))
        env.acts["slow"] = {
            "adapter": "cli",
            # the shell and its child sleep both carry the key
            "argv": [
                "/bin/sh",
                "-c",
                f"echo $$ > {root}/sh.pid; sleep 1000 & echo $! > {root}/sleep.pid; wait; "
                f"echo done >> {root}/effects",
            ],
        }
        env.write_config()
        d = make_daemon(env)
        a = Actor(d, acts=("slow",))
        a.submit("s", "slow")
        Background(a.invoke, "s", 1, d.connect())
        sleep_pid = env.root / "sleep.pid"
        wait_for(lambda: sleep_pid.exists() and sleep_pid.read_text().strip(), what="the program")
        pids = [int((env.root / n).read_text()) for n in ("sh.pid", "sleep.pid")]
        d.kill()  # the daemon only: its program lives on
        assert all(alive(p) for p in pids)
        d.start()
        assert not any(alive(p) for p in pids)
        a.client = d.connect()
        att = a.op("s")["attempts"][0]
        assert att["state"] == "unknown"
        assert att["evidence"]["orphan_killed"] is True and att["evidence"]["claimed"] is True
        assert "orphan_killed" in d.log_text()
        assert not (env.root / "effects").exists()


class TestFindOrphans:
    def test_finds_processes_by_their_key_and_nothing_else(self, tmp_path):
        """A /proc-like tree of real files: only the wanted keys are found."""
        for pid, environ in {
            "101": b"PATH=/bin\0WARDD_IDEMPOTENCY_KEY=n/a/1\0",
            "102": b"WARDD_IDEMPOTENCY_KEY=n/a/1\0HOME=/h\0",
            "103": b"WARDD_IDEMPOTENCY_KEY=n/b/1\0",
            "104": b"PATH=/bin\0",
            "self": b"WARDD_IDEMPOTENCY_KEY=n/a/1\0",
        }.items():
            (tmp_path / pid).mkdir()
            (tmp_path / pid / "environ").write_bytes(environ)
        (tmp_path / "105").mkdir()  # unreadable: no environ file
        assert find_orphans({"n/a/1", "n/c/1"}, str(tmp_path)) == {"n/a/1": [101, 102]}
        assert find_orphans(set(), str(tmp_path)) == {}
        assert find_orphans({"x"}, str(tmp_path / "missing")) == {}

    def test_never_kills_the_daemons_own_group(self):
        """kill_groups skips the caller's own process group."""
        assert kill_groups([os.getpid()]) == []


class TestWaitGone:
    def test_a_killed_process_counts_as_gone_only_once_it_has_exited(self):
        """wait_gone answers the pids still running: a live one after its
        timeout, none once SIGKILL has taken effect (an unreaped zombie is gone)."""
        child = subprocess.Popen(["sleep", "1000"])
        try:
            assert wait_gone([child.pid], 0.05) == [child.pid]
            os.kill(child.pid, signal.SIGKILL)
            assert wait_gone([child.pid], 10.0) == []
        finally:
            child.kill()
            child.wait()
