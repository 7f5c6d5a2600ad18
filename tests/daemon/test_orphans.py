"""Programs an earlier boot left running are killed at the next start
(contract §3.6; docs/recovery.md): after a restart no orphan of a SIGKILLed
daemon can still have its effect."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import _leftovers
from tests._leftovers import alive, stopped
from tests._poll import pid_written, wait_for
from tests.daemon.harness import DATA, Actor, Background, Daemon, Env, Hold, on_fixture
from wardd.client import Neuron
from wardd.daemon.life.orphan_kill import HOLD_ENV
from wardd.daemon.life.orphans import any_marked, find_orphans, find_servers, kill_groups, wait_gone


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
        pids = [pid_written(env.root / n) for n in ("sh.pid", "sleep.pid")]
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


def gated_act(env: Env) -> dict[str, object]:
    """A `cli` act that records its pid, waits for its gate file, then notes its effect."""
    root = shlex.quote(str(env.root))
    return {
        "adapter": "cli",
        "argv": [
            "/bin/sh",
            "-c",
            f"echo $$ > {root}/prog.pid; while [ ! -e {root}/gate ]; do sleep 0.05; done; "
            f'echo "$WARDD_IDEMPOTENCY_KEY" >> {root}/effects',
        ],
    }


class TestAnotherDaemonsPrograms:
    def test_a_restart_never_kills_a_program_of_a_daemon_on_another_database(self, make_daemon):
        """Two daemons on two databases serve the same neuron, and each runs
        attempt 1 of an op of the same name: two programs with the same
        WARDD_IDEMPOTENCY_KEY. The first daemon is SIGKILLed and restarted:
        it kills its own orphan (evidence orphan_killed), never the other's
        program, whose call then ends on its own and succeeds."""
        neuron = Neuron.generate()
        envs, daemons, actors, calls = [], [], [], []
        for _ in range(2):
            env = Env()
            env.acts["gated"] = gated_act(env)
            env.write_config()
            d = make_daemon(env)
            a = Actor(d, acts=("gated",), neuron=neuron)
            a.submit("same", "gated")
            calls.append(Background(a.invoke, "same", 1, d.connect()))
            envs.append(env)
            daemons.append(d)
            actors.append(a)
        pidfiles = [env.root / "prog.pid" for env in envs]
        mine, theirs = (pid_written(p) for p in pidfiles)
        ours, other = daemons
        ours.kill()  # the daemon only: its program lives on
        assert alive(mine) and alive(theirs)
        ours.start()
        assert not alive(mine)
        assert alive(theirs)
        actors[0].client = ours.connect()
        ev = actors[0].op("same")["attempts"][0]["evidence"]
        assert ev["orphan_killed"] is True
        killed = ours.logged("orphan_killed")
        assert len(killed) == 1 and mine in killed[0]["pids"] and theirs not in killed[0]["pids"]
        assert actors[1].op("same")["attempts"][0]["state"] == "running"
        (envs[1].root / "gate").touch()
        assert calls[1].result()["status"] == "succeeded"
        assert "evidence" not in actors[1].op("same")["attempts"][0]
        assert not (envs[0].root / "effects").exists()


def earlier_release_program(
    root: Path, key: str, user: int | None = None
) -> tuple[subprocess.Popen[bytes], Path]:
    """A `cli` program started as wardd started them before programs carried
    their boot: in its own session, ``WARDD_IDEMPOTENCY_KEY`` (and the op,
    attempt and act) in its environment, no ``WARDD_BOOT``. It leaves a
    background child that writes its effect to ``<root>/effects`` once the
    gate ``<root>/gate`` exists, and writes that child's pid to the file
    returned. ``user``: run as that uid (root only)."""
    _neuron, op, attempt = key.split("/")
    q = shlex.quote
    script = (
        f"(while [ ! -e {q(str(root / 'gate'))} ]; do sleep 0.05; done; "
        f"echo $$ >> {q(str(root / 'effects'))}) & "
        f"echo $! > {q(str(root / 'child.pid'))}; wait"
    )
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "WARDD_OP": op,
        "WARDD_ATTEMPT": attempt,
        "WARDD_ACT": "gated",
        "WARDD_IDEMPOTENCY_KEY": key,
    }
    prog = subprocess.Popen(
        ["/bin/sh", "-c", script],
        env=env,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        user=user,
    )
    return prog, root / "child.pid"


@pytest.fixture
def programs() -> Iterator[Callable[..., list[int]]]:
    """``programs(root, key, user=None)`` starts an ``earlier_release_program``
    and answers the pids of its shell and its child, once both run; every
    process of them is ended after the test."""
    started: list[tuple[subprocess.Popen[bytes], list[_leftovers.Proc]]] = []

    def start(root: Path, key: str, user: int | None = None) -> list[int]:
        prog, pidfile = earlier_release_program(root, key, user)
        procs: list[_leftovers.Proc] = []
        started.append((prog, procs))
        pids = [prog.pid, pid_written(pidfile)]
        procs.extend(p for p in map(_leftovers.identify, pids) if p is not None)
        return pids

    try:
        yield start
    finally:
        for prog, procs in started:
            _leftovers.end([*procs, *_leftovers.descendants(prog.pid)])
            prog.kill()
            prog.wait()


def v5_claim(env: Env) -> tuple[str, str]:
    """The key of schema-v5.db's claimed call (attempt 1, left running when
    that daemon was killed) and the boot that claimed it. Its op, ``running``
    in the fixture, is renamed in this copy to a name of this test's own: a
    program of an earlier release is found by its key alone, and every daemon
    started on a v5 copy looks for the fixture's key, so with the same key a
    test's daemon on the other xdist worker (or in another run on the machine)
    could take this test's program for its own orphan and kill it."""
    neuron = (DATA / "schema-v5.neuron").read_text().strip()
    op = f"running-{uuid.uuid4().hex[:12]}"
    db = sqlite3.connect(env.database)
    try:
        with db:
            db.execute("UPDATE operations SET op = ? WHERE op = 'running'", (op,))
        (boot,) = db.execute("SELECT boot FROM claims").fetchone()
    finally:
        db.close()
    return f"{neuron}/{op}/1", boot


class TestAnEarlierReleasesOrphans:
    def test_a_program_with_the_key_and_no_boot_is_killed_at_the_upgraded_start(
        self, make_daemon, programs
    ):
        """An earlier wardd (schema 5) was SIGKILLed during a `cli` call whose
        program, started with the key and no WARDD_BOOT, left a child that
        writes the effect later. This wardd starts on that database: before
        READY=1 the program and its child are gone, the attempt is unknown
        with orphan_killed, and the effect never happens."""
        env = on_fixture(5)
        key, old_boot = v5_claim(env)
        pids = programs(env.root, key)
        assert all(alive(p) for p in pids)
        d = make_daemon(env)
        assert not any(alive(p) for p in pids)
        (env.root / "gate").touch()
        with d.connect() as c:
            neuron, op, _attempt = key.split("/")
            att = c.call("get_operation", {"neuron": neuron, "op": op})["attempts"][0]
        assert att["state"] == "unknown"
        assert att["evidence"] == {"claimed": True, "boot": old_boot, "orphan_killed": True}
        (killed,) = d.logged("orphan_killed")
        assert set(pids) <= set(killed["pids"]) and killed["op"] == op
        assert not (env.root / "effects").exists()

    @pytest.mark.skipif(os.geteuid() != 0, reason="another user's process needs root")
    def test_another_users_program_with_the_key_and_no_boot_is_left_alone(
        self, make_daemon, programs
    ):
        """A daemon that runs as root reads every process's environment: a
        program of another user that carries the claim's key and no boot is
        not taken for its orphan (it could not have started it), while its
        own is killed."""
        env = on_fixture(5)
        key, _old_boot = v5_claim(env)
        other = Path(tempfile.mkdtemp(prefix="other-", dir="/tmp"))
        try:
            os.chmod(other, 0o777)  # the other user's files
            mine = programs(env.root, key)
            theirs = programs(other, key, user=65534)
            d = make_daemon(env)
            assert not any(alive(p) for p in mine)
            assert all(alive(p) for p in theirs)
            (killed,) = d.logged("orphan_killed")
            assert not set(theirs) & set(killed["pids"])
            (env.root / "gate").touch()
            (other / "gate").touch()
            wait_for(lambda: (other / "effects").exists(), what="the other user's effect")
            assert not (env.root / "effects").exists()
        finally:
            shutil.rmtree(other, ignore_errors=True)


def attempt_row(env: Env, op: str) -> tuple[str, dict[str, Any] | None]:
    """Attempt 1 of ``op`` as the database file holds it now (state, evidence),
    read while the daemon is held: what a SIGKILL now would leave."""
    import cbor2

    db = sqlite3.connect(f"file:{env.database}?mode=ro", uri=True)
    try:
        state, evidence = db.execute(
            "SELECT a.state, a.evidence FROM attempts a JOIN operations o ON o.id = a.op_id"
            " WHERE o.op = ? AND a.attempt = 1",
            (op,),
        ).fetchone()
    finally:
        db.close()
    return state, None if evidence is None else cbor2.loads(evidence)


def crash_mid_call(env: Env, d: Daemon) -> tuple[Actor, int]:
    """Op ``s`` (act ``gated``, ``gated_act``) is claimed and its program runs;
    op ``p`` (``ledger``) is prepared, never claimed. SIGKILL the daemon: the
    program lives on. Returns the actor and the program's pid."""
    a = Actor(d, acts=("gated", "ledger"))
    a.submit("p", "ledger", b"x")
    a.prepare("p")
    a.submit("s", "gated")
    Background(a.invoke, "s", 1, d.connect())
    pid = pid_written(env.root / "prog.pid")
    d.kill()
    assert alive(pid)
    return a, pid


class TestAStartKilledWhileItKillsOrphans:
    """A start SIGKILLed after it killed (or stopped) an orphan and before its
    marks commit loses nothing: the kill is committed before it is made."""

    def _held_at(self, make_daemon: Any, point: str) -> tuple[Env, Daemon, Actor, int, Hold]:
        env = Env()
        env.acts["gated"] = gated_act(env)
        env.write_config()
        d = make_daemon(env)
        a, pid = crash_mid_call(env, d)
        hold = Hold(env.root, HOLD_ENV, (point,))
        hold.arm()
        d.spawn(hold.env)
        hold.reached(point)
        return env, d, a, pid, hold

    def _restarted(self, d: Daemon, a: Actor, hold: Hold) -> dict[str, Any]:
        d.kill()  # the start, at the held point
        hold.disarm()
        d.start()
        a.client = d.connect()
        return a.op("s")["attempts"][0]

    def test_a_sigkill_between_the_kill_and_the_marks_keeps_orphan_killed(self, make_daemon):
        """Held after the kill: the orphan is gone, its attempt is already
        unknown with orphan_killed in the file, the other open attempt not
        yet marked. SIGKILL, restart: the evidence still says orphan_killed
        (one marked_unknown record), and the effect never happens."""
        env, d, a, pid, hold = self._held_at(make_daemon, "orphans_killed")
        assert not alive(pid)
        state, evidence = attempt_row(env, "s")
        assert state == "unknown" and evidence is not None and evidence["orphan_killed"] is True
        assert attempt_row(env, "p")[0] == "prepared"  # the later marks: not committed
        att = self._restarted(d, a, hold)
        assert att["state"] == "unknown"
        assert att["evidence"]["orphan_killed"] is True and att["evidence"]["claimed"] is True
        kinds = [r["kind"] for r in a.history("s")]
        assert kinds.count("marked_unknown") == 1 and "orphan_killed" not in kinds
        assert a.op("p")["attempts"][0]["evidence"]["claimed"] is False  # marked by the restart
        (env.root / "gate").touch()
        assert not (env.root / "effects").exists()

    def test_a_sigkill_between_the_record_and_the_kill_leaves_the_orphan_stopped(self, make_daemon):
        """Held after the record, before the kill: the orphan is stopped (it can
        do nothing) and its attempt says orphan_killed. SIGKILL: it stays
        stopped, and its gate opened does not let it write; the restart finds
        it and kills it, and the evidence is recorded once."""
        env, d, a, pid, hold = self._held_at(make_daemon, "orphans_recorded")
        assert alive(pid) and stopped(pid)
        state, evidence = attempt_row(env, "s")
        assert state == "unknown" and evidence is not None
        assert evidence["orphan_killed"] is True and evidence["claimed"] is True
        d.kill()
        (env.root / "gate").touch()
        assert alive(pid) and stopped(pid)
        hold.disarm()
        d.start()
        assert not alive(pid)
        a.client = d.connect()
        att = a.op("s")["attempts"][0]
        assert att["evidence"]["orphan_killed"] is True
        assert [r["kind"] for r in a.history("s")].count("marked_unknown") == 1
        (killed,) = d.logged("orphan_killed")
        assert pid in killed["pids"]
        assert not (env.root / "effects").exists()


class TestAnOrphanOfAnAttemptAlreadyUnknown:
    def test_its_kill_is_added_to_the_evidence_with_a_record(self, make_daemon, programs):
        """A start that did not know an earlier release's orphans marked the
        attempt unknown and left its program running; the next start kills
        it: the attempt stays unknown, its evidence gains orphan_killed, and
        an orphan_killed record says when."""
        env = on_fixture(5)
        key, old_boot = v5_claim(env)
        d = make_daemon(env)  # no program yet: marked unknown, nothing killed
        assert d.terminate() == 0
        pids = programs(env.root, key)
        d.start()
        assert not any(alive(p) for p in pids)
        with d.connect() as c:
            neuron, op, _attempt = key.split("/")
            where = {"neuron": neuron, "op": op}
            att = c.call("get_operation", where)["attempts"][0]
            records = c.call("history", where)["records"]
        assert att["state"] == "unknown"
        assert att["evidence"] == {"claimed": True, "boot": old_boot, "orphan_killed": True}
        assert [r["kind"] for r in records][-2:] == ["marked_unknown", "orphan_killed"]
        assert records[-1]["data"] == att["evidence"] and records[-1]["attempt"] == 1
        (env.root / "gate").touch()
        assert not (env.root / "effects").exists()


class TestFindOrphans:
    def test_finds_processes_by_their_key_and_boot_and_nothing_else(self, tmp_path):
        """A /proc-like tree of real files: a wanted key carried with the
        boot of its claim is found, and so is a wanted key carried with no
        boot at all (a program of an earlier release); the same key with
        another daemon's boot, or in a receipt run, is not ours."""
        for pid, environ in {
            "101": b"PATH=/bin\0WARDD_IDEMPOTENCY_KEY=n/a/1\0WARDD_BOOT=b1\0",
            "102": b"WARDD_BOOT=b1\0WARDD_IDEMPOTENCY_KEY=n/a/1\0HOME=/h\0",
            "103": b"WARDD_IDEMPOTENCY_KEY=n/b/1\0WARDD_BOOT=b1\0",
            "104": b"PATH=/bin\0",
            "106": b"WARDD_IDEMPOTENCY_KEY=n/a/1\0WARDD_BOOT=other\0",  # another daemon's
            "107": b"WARDD_IDEMPOTENCY_KEY=n/a/1\0",  # an earlier release's: the key alone
            "108": b"WARDD_IDEMPOTENCY_KEY=n/a/1\0WARDD_BOOT=b1x\0",
            "109": b"WARDD_IDEMPOTENCY_KEY=n/a/1\0WARDD_RECEIPT=1\0",  # a receipt run
            "111": b"WARDD_IDEMPOTENCY_KEY=n/d/1\0",
            "self": b"WARDD_IDEMPOTENCY_KEY=n/a/1\0WARDD_BOOT=b1\0",
        }.items():
            (tmp_path / pid).mkdir()
            (tmp_path / pid / "environ").write_bytes(environ)
        (tmp_path / "105").mkdir()  # unreadable: no environ file
        wanted = {"n/a/1": "b1", "n/c/1": "b1"}
        assert find_orphans(wanted, str(tmp_path)) == {"n/a/1": [101, 102, 107]}
        assert find_orphans({"n/a/1": "other"}, str(tmp_path)) == {"n/a/1": [106, 107]}
        assert find_orphans({"n/d/1": "b1"}, str(tmp_path)) == {"n/d/1": [111]}
        assert find_orphans({}, str(tmp_path)) == {}
        assert find_orphans({"x": "b1"}, str(tmp_path / "missing")) == {}

    def test_a_key_without_a_boot_is_ours_only_under_our_own_user(self, tmp_path):
        """A program with the key and no boot is taken for an orphan only when
        it runs as the daemon's user (its /proc entry's owner); one with the
        claim's boot is ours whoever it runs as."""
        for pid, environ in {
            "201": b"WARDD_IDEMPOTENCY_KEY=n/a/1\0",
            "202": b"WARDD_IDEMPOTENCY_KEY=n/a/1\0WARDD_BOOT=b1\0",
        }.items():
            (tmp_path / pid).mkdir()
            (tmp_path / pid / "environ").write_bytes(environ)
        owner = (tmp_path / "201").stat().st_uid
        assert find_orphans({"n/a/1": "b1"}, str(tmp_path), uid=owner) == {"n/a/1": [201, 202]}
        assert find_orphans({"n/a/1": "b1"}, str(tmp_path), uid=owner + 1) == {"n/a/1": [202]}

    def test_any_marked_is_whether_a_process_carries_a_key_outside_a_receipt(self, tmp_path):
        """The start skips listing its claimed calls only when no process
        carries a key: one with a key (with a boot or without one) is enough
        to look; a boot alone, a receipt run or none is not."""
        for pid, environ in {
            "104": b"PATH=/bin\0",
            "109": b"WARDD_BOOT=b1\0",
            "112": b"WARDD_RECEIPT=1\0WARDD_IDEMPOTENCY_KEY=n/a/1\0",
        }.items():
            (tmp_path / pid).mkdir()
            (tmp_path / pid / "environ").write_bytes(environ)
        assert not any_marked(str(tmp_path))
        (tmp_path / "107").mkdir()
        (tmp_path / "107" / "environ").write_bytes(b"WARDD_IDEMPOTENCY_KEY=n/a/1\0")
        assert any_marked(str(tmp_path))
        (tmp_path / "110").mkdir()
        (tmp_path / "110" / "environ").write_bytes(b"WARDD_BOOT=zz\0WARDD_IDEMPOTENCY_KEY=q/r/9\0")
        assert any_marked(str(tmp_path))
        assert not any_marked(str(tmp_path / "missing"))

    def test_finds_mcp_servers_by_their_act_and_a_wanted_boot(self, tmp_path):
        """An mcp act's server carries WARDD_MCP_ACT and WARDD_BOOT, never a key:
        found only with a boot asked for; a server without a boot (started for a
        receipt) is never ours to kill, and a cli program is not a server."""
        for pid, environ in {
            "201": b"WARDD_MCP_ACT=gh.create\0WARDD_MCP_SERVER=aa\0WARDD_BOOT=b1\0",
            "202": b"WARDD_BOOT=b1\0WARDD_MCP_ACT=gh.create\0",  # its child: the same marks
            "203": b"WARDD_MCP_ACT=gh.list\0WARDD_BOOT=b2\0",
            "204": b"WARDD_MCP_ACT=gh.create\0",  # no boot
            "205": b"WARDD_IDEMPOTENCY_KEY=n/a/1\0WARDD_BOOT=b1\0",  # a cli program
        }.items():
            (tmp_path / pid).mkdir()
            (tmp_path / pid / "environ").write_bytes(environ)
        assert find_servers({"b1"}, str(tmp_path)) == {("gh.create", "b1"): [201, 202]}
        assert find_servers({"b1", "b2"}, str(tmp_path)) == {
            ("gh.create", "b1"): [201, 202],
            ("gh.list", "b2"): [203],
        }
        assert find_servers(set(), str(tmp_path)) == {}
        assert find_orphans({"n/a/1": "b1"}, str(tmp_path)) == {"n/a/1": [205]}
        assert any_marked(str(tmp_path))

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
