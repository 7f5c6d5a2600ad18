"""Disk faults: a write that fails inside a commit (contract §3.2.3).

The fault is real: the daemon's RLIMIT_FSIZE is lowered with prlimit(2) to
the current size of its WAL file, so the next append to it fails with EFBIG
as on a full file system (Python ignores SIGXFSZ). Raising the limit again
is "space returns".
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys

import anyio
import pytest

from tests._poll import wait_for, wait_until_file
from tests.daemon._mcp_host import call, stdio_host, write_mcp_config
from tests.daemon._wardctl import environ, set_up, wardctl
from tests.daemon.backends import run_on
from tests.daemon.harness import Actor, Background, code_of
from wardd.client import MayHaveRun, Retry, Session
from wardd.protocol import Internal, WarddError

UNLIMITED = (resource.RLIM_INFINITY, resource.RLIM_INFINITY)


def wal_size(daemon) -> int:
    return os.stat(f"{daemon.env.database}-wal").st_size


def fill_disk(daemon) -> None:
    size = wal_size(daemon)
    resource.prlimit(daemon.proc.pid, resource.RLIMIT_FSIZE, (size, resource.RLIM_INFINITY))


def free_disk(daemon) -> None:
    resource.prlimit(daemon.proc.pid, resource.RLIMIT_FSIZE, UNLIMITED)


def invoke_then_fill_disk(daemon) -> tuple[Actor, Background]:
    """Op g of the gated act invoked in the background; once its call has
    begun (claimed), the disk is full: its outcome cannot be stored."""
    a = Actor(daemon, acts=("gated",))
    a.submit("g", "gated")
    call = Background(a.invoke, "g", 1, daemon.connect())
    wait_for(daemon.env.started_marker("g").exists, what="the gated act to start")
    fill_disk(daemon)
    return a, call


@pytest.mark.skipif(not hasattr(resource, "prlimit"), reason="needs prlimit(2)")
class TestDiskFull:
    def test_a_failed_write_is_a_clear_error_changes_nothing_and_recovers(self, daemon):
        a = Actor(daemon, acts=("echo",))
        a.submit("before", "echo", b"x")
        fill_disk(daemon)
        refused = []
        for i in range(5):
            try:
                a.submit(f"op-{i}", "echo", os.urandom(30000))
            except WarddError as e:
                refused.append((f"op-{i}", e))
        assert refused, "no write failed with the file size limit at the WAL's size"
        for op, e in refused:
            assert e.code == "internal" and e.data["reason"] == "commit_failed", e
            # the refused request left nothing behind
            assert code_of(a.op, op).code == "unknown_operation"
        st = a.read("status")  # reads and status keep answering
        assert st["boot"] == daemon.boot
        free_disk(daemon)
        assert a.submit("after", "echo", b"y")["state"] == "pending"
        assert a.invoke("after")["status"] == "succeeded"
        assert a.state("before") == "pending"

    def test_an_outcome_that_cannot_be_stored_fail_stops(self, daemon):
        """contract §3.2.3: the call answers internal, the daemon exits non-zero,
        and the next start marks the attempt unknown."""
        env = daemon.env
        a, call = invoke_then_fill_disk(daemon)
        env.open_gate("g")
        with pytest.raises(WarddError) as ei:
            call.result()
        assert ei.value.code == "internal"
        assert daemon.proc.wait(30) == 70
        assert "fail_stop" in daemon.log_text()
        daemon.start()
        a.client = daemon.connect()
        att = a.op("g")["attempts"][0]
        assert att["state"] == "unknown" and att["evidence"]["claimed"] is True
        # the effect happened once; nothing re-ran it
        assert env.ledger_lines(env.cli_ledger) == [f"{a.id}/g/1"]

    @pytest.mark.parametrize("command", [("invoke", "g"), ("call", "p", "g", "gated")])
    def test_wardctl_says_a_dispatch_whose_outcome_was_lost_may_have_run(self, daemon, command):
        """The act had its effect, the outcome's write failed (fail-stop): the
        internal answered to invoke (or call) is no refusal. wardctl exits 3
        naming the attempt, and the next start marks it unknown."""
        env = daemon.env
        set_up(env, "gated")
        if command[0] == "invoke":
            wardctl(env, "submit", "p", "g", "gated")
        invoke = subprocess.Popen(
            [sys.executable, "-m", "wardd.client.wardctl", *command],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environ(env),
        )
        try:
            wait_for(env.started_marker("g").exists, what="the gated act to start")
            fill_disk(daemon)
            env.open_gate("g")
            out, err = invoke.communicate(timeout=60)
        finally:
            if invoke.poll() is None:
                invoke.kill()
                invoke.wait()
        assert invoke.returncode == 3, (out, err)
        # the daemon answers before its fail-stop closes the connection (the
        # writer tells the daemon only once the lost outcome's caller is
        # answered): internal, naming the attempt, even for a call, which
        # never learnt its attempt's number otherwise
        assert "attempt 1 of op g may have run" in err and "internal" in err, err
        assert "wardctl op show g" in err
        assert daemon.proc.wait(30) == 70
        daemon.start()
        shown = json.loads(wardctl(env, "--json", "op", "show", "g").stdout)
        assert shown["attempts"][0]["state"] == "unknown"
        assert len(env.ledger_lines(env.cli_ledger)) == 1

    def test_a_stop_during_which_an_outcome_is_lost_is_a_fail_stop(self, daemon):
        """SIGTERM begins the stop while a call runs; its outcome then cannot
        be stored: the caller hears the attempt may have run, and the stop is a
        fail-stop (exit 70, ``stopped`` with clean false), never a clean one."""
        env = daemon.env
        a, call = invoke_then_fill_disk(daemon)
        daemon.proc.send_signal(signal.SIGTERM)
        wait_for(lambda: '"stopping"' in daemon.log_text(), what="the stop to begin")
        env.open_gate("g")
        lost = call.error_of(60)
        assert isinstance(lost, Internal), lost
        assert lost.data == {"reason": "fail_stop", "op": "g", "attempt": 1}
        assert daemon.proc.wait(30) == 70
        (stopped,) = daemon.logged("stopped")
        assert stopped["clean"] is False
        daemon.start()
        a.client = daemon.connect()
        assert a.op("g")["attempts"][0]["state"] == "unknown"
        assert env.ledger_lines(env.cli_ledger) == [f"{a.id}/g/1"]  # once

    def test_wardd_mcp_says_a_call_whose_outcome_was_lost_may_have_run(self, daemon):
        """The act had its effect, the outcome's write failed (fail-stop): the
        model is told unknown (may have run, do not retry), never refused."""
        env = daemon.env
        tool = {"description": "Wait for the gate", "input_schema": {"type": "object"}}
        config = write_mcp_config(env, {"gated": tool})

        async def body() -> object:
            results: list[object] = []
            async with stdio_host(config, env.root / "mcp.log") as session:

                async def first() -> None:
                    results.append(await call(session, "gated", {}, key="g"))

                async with anyio.create_task_group() as tg:
                    tg.start_soon(first)
                    await wait_until_file(env.started_marker("g"))
                    fill_disk(daemon)
                    env.open_gate("g")
            return results[0]

        lost = run_on("asyncio", body)
        structured = lost.structured_content  # type: ignore[attr-defined]
        assert structured["status"] == "unknown", structured
        assert (structured["may_have_run"], structured["retry_safe"]) == (True, False)
        assert structured["attempt"] == 1 and "internal" in lost.content[0].text  # type: ignore[attr-defined]
        assert daemon.proc.wait(30) == 70
        assert len(env.ledger_lines(env.cli_ledger)) == 1

    def test_the_session_raises_may_have_run_naming_the_attempt(self, daemon, start_thread):
        """Session.invoke(retry=...) after a lost outcome raises MayHaveRun (its
        cause the daemon's internal), never the plain Internal a refusal would be."""
        env = daemon.env
        a = Actor(daemon, acts=("gated",))
        a.submit("g", "gated")
        session = Session(daemon.connect(), a.neuron)
        call = Background(lambda: session.invoke("g", retry=Retry(backoff=0)))
        wait_for(env.started_marker("g").exists, what="the gated act to start")
        fill_disk(daemon)
        env.open_gate("g")
        exc = call.error_of(60)
        assert isinstance(exc, MayHaveRun) and (exc.op, exc.attempt) == ("g", 1)
        assert isinstance(exc.__cause__, Internal)
        assert exc.__cause__.data == {"reason": "fail_stop", "op": "g", "attempt": 1}
        assert daemon.proc.wait(30) == 70
