"""The ``cli`` adapter tells an abort that ended its call from a call that
ended on its own (contract §3.8): real child processes, real SIGKILLs."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from pathlib import Path

import pytest

from tests._poll import pid_written
from wardd.adapters import ActRequest, CallAborted, CliAdapter, OutcomeUnknown, build_adapter
from wardd.adapters._process import ProcessGroups

NEURON = "ef" * 32
KEY = f"{NEURON}/op1/1"


def request() -> ActRequest:
    return ActRequest(neuron=NEURON, op="op1", attempt=1, act="t", args=b"")


def cli(script: str) -> CliAdapter:
    adapter = build_adapter(
        "t", {"adapter": "cli", "argv": ["/bin/sh", "-c", script]}, max_frame=1 << 20
    )
    assert isinstance(adapter, CliAdapter)
    return adapter


class TestCliAbort:
    def test_an_abort_that_kills_the_running_program_raises_call_aborted(
        self, tmp_path: Path
    ) -> None:
        """The abort's SIGKILL ends the program: CallAborted (an OutcomeUnknown)."""
        pidfile = tmp_path / "pid"
        adapter = cli(f"echo $$ > {pidfile}; exec sleep 1000")
        ended: list[BaseException] = []

        def run() -> None:
            try:
                adapter.call(request())
            except BaseException as exc:  # noqa: BLE001 - the test inspects it
                ended.append(exc)

        t = threading.Thread(target=run)
        t.start()
        try:
            pid_written(pidfile)  # the program runs
            adapter.abort(KEY)
        finally:
            t.join(30)
            adapter.kill_all()
        assert not t.is_alive()
        assert len(ended) == 1 and isinstance(ended[0], CallAborted)
        assert "killed by the operator's abort" in str(ended[0])

    def test_an_abort_before_the_program_starts_raises_call_aborted(self) -> None:
        """Nothing runs: CallAborted, said to have come before the start."""
        adapter = cli("exit 0")
        adapter.abort(KEY)
        with pytest.raises(CallAborted, match="before its program started"):
            adapter.call(request())

    def test_a_program_killed_by_something_else_is_not_the_aborts(self) -> None:
        """A death by SIGKILL with no abort asked stays a plain OutcomeUnknown."""
        with pytest.raises(OutcomeUnknown, match="SIGKILL") as info:
            cli("kill -9 $$").call(request())
        assert not isinstance(info.value, CallAborted)


def finish(groups: ProcessGroups, proc: subprocess.Popen[bytes]) -> tuple[int, bool]:
    """Reap as `_process.run` does, and close the pipes the test did not read."""
    try:
        return groups.finish(proc)
    finally:
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


class TestProcessGroupsTellWhoEndedIt:
    def test_a_leader_that_exited_before_the_aborts_kill_keeps_its_own_status(self) -> None:
        """The program exits 3 on its own; the abort comes before it is
        reaped (its kill reaches a zombie): finish answers its own status
        with the abort asked, so the call is not the abort's."""
        groups = ProcessGroups()
        proc = groups.spawn(["/bin/sh", "-c", "exit 3"], {}, stdin=False, key=KEY)
        try:
            os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped
            groups.abort(KEY)
        finally:
            returncode, asked = finish(groups, proc)
        assert (returncode, asked) == (3, True)

    def test_a_leader_the_abort_killed_died_of_sigkill(self) -> None:
        groups = ProcessGroups()
        proc = groups.spawn(["sleep", "1000"], {}, stdin=False, key=KEY)
        try:
            groups.abort(KEY)
            os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
        finally:
            returncode, asked = finish(groups, proc)
        assert (returncode, asked) == (-signal.SIGKILL, True)

    def test_no_abort_asked_is_said(self) -> None:
        groups = ProcessGroups()
        proc = groups.spawn(["/bin/sh", "-c", "exit 3"], {}, stdin=False, key=KEY)
        try:
            os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # it ends on its own
        finally:
            got = finish(groups, proc)
        assert got == (3, False)
