"""wardctl tells the truth when it cannot know: real wardctl processes, a real daemon."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests._poll import wait_for, wait_for_file
from tests.daemon._wardctl import environ, set_up, wardctl
from tests.daemon.harness import Env
from wardd.client import Client

# wardctl as a terminal starts a foreground job: SIGINT at its default, which
# Python turns into KeyboardInterrupt. Started plainly, wardctl would inherit
# our disposition, and a suite run by a non-interactive shell with `&` has
# SIGINT ignored (POSIX asks that of such a shell); an ignored signal stays
# ignored through exec, and the Ctrl-C below would then do nothing at all.
_AS_A_FOREGROUND_JOB = (
    "import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "runpy.run_module('wardd.client.wardctl', run_name='__main__', alter_sys=True)"
)


@contextlib.contextmanager
def background(env: Env, *args: str) -> Iterator[subprocess.Popen[str]]:
    """A wardctl process for the ``with`` body; killed at its end, pass or fail."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _AS_A_FOREGROUND_JOB, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environ(env),
    )
    try:
        yield proc
    finally:
        proc.kill()
        proc.communicate()


def catches(pid: int, sig: int) -> bool:
    """Process ``pid`` has a handler for ``sig`` (/proc/PID/status, SigCgt)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) & (1 << (sig - 1)))
    raise AssertionError(f"no SigCgt for pid {pid}")


def answered(client: Client) -> float:
    """How many requests the daemon has answered, its metrics reads left out."""
    text = client.call("metrics", {})["text"]
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "wardd_requests_total" and s.labels["method"] != "metrics"
    )


class TestLostAnswers:
    def test_an_invoke_cut_off_by_a_crash_says_the_attempt_may_have_run(self, make_daemon):
        """The daemon dies mid-invoke: wardctl says the attempt may have run and how to look."""
        d = make_daemon()
        set_up(d.env)
        wardctl(d.env, "submit", "p", "op-g", "gated")
        with background(d.env, "invoke", "op-g") as proc:
            wait_for_file(d.env.started_marker("op-g"))
            d.kill()
            _, err = proc.communicate(timeout=60)
        assert proc.returncode == 3  # the answer was lost after sending: it may have run
        assert "op op-g attempt 1 may have run" in err and "wardctl op show op-g" in err, err

    def test_an_invoke_that_never_started_is_not_said_to_hold_a_claim(self, make_daemon):
        """An invoke waiting behind a busy worker when the daemon dies: wardctl says
        it may have run or never started (not that a claim may be durable), and
        op show, as it says to look, shows no attempt."""
        d = make_daemon(Env(workers=1))
        set_up(d.env, "gated quick")
        wardctl(d.env, "submit", "p", "op-g", "gated")
        wardctl(d.env, "submit", "p", "op-h", "quick")
        reader = d.connect()
        with background(d.env, "invoke", "op-g") as busy:
            wait_for_file(d.env.started_marker("op-g"))
            before = answered(reader)
            with background(d.env, "invoke", "op-h") as queued:

                def under_way() -> bool:  # op-h's wardctl has its first answer
                    assert queued.poll() is None, queued.communicate()
                    return answered(reader) != before

                wait_for(under_way, 30, "op-h's wardctl to have its first answer")
                d.kill()
                _, err = queued.communicate(timeout=60)
            busy.communicate(timeout=60)
        assert queued.returncode == 3, err
        assert "op-h" in err and "may have run, or may never have started" in err, err
        assert "claim may be durable" not in err
        d.start()
        assert "attempts: []" in wardctl(d.env, "op", "show", "op-h").stdout

    def test_an_interrupted_invoke_says_the_attempt_may_have_run(self, make_daemon):
        """Ctrl-C during an invoke: exit 130, and the attempt may have run (op show)."""
        d = make_daemon()
        set_up(d.env)
        wardctl(d.env, "submit", "p", "op-i", "gated")
        with background(d.env, "invoke", "op-i") as proc:
            # the act started: the request is out and wardctl waits for its answer
            wait_for_file(d.env.started_marker("op-i"))
            assert catches(proc.pid, signal.SIGINT), "wardctl would not see the Ctrl-C"
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=60)
        d.env.open_gate("op-i")
        assert proc.returncode == 130, err
        assert "interrupted" in err and "may have run" in err and "wardctl op show op-i" in err


class TestPlainAnswers:
    def test_cannot_reach_asks_whether_the_daemon_runs_and_names_the_socket(self, tmp_path):
        """No daemon: the error names the socket and asks whether the daemon is running."""
        env = Env()
        out = wardctl(env, "status", check=False)
        assert out.returncode == 69
        assert str(env.socket) in out.stderr and "Is the daemon running" in out.stderr

    def test_version(self):
        """wardctl --version prints the package version."""
        out = wardctl(Env(), "--version")
        assert out.stdout.strip() == f"wardctl {version('wardd')}"

    def test_keygen_prints_the_key_path(self):
        """keygen prints where the key was written, and the neuron id last."""
        env = Env()
        out = wardctl(env, "keygen").stdout.splitlines()
        assert str(env.root / "neuron.key") in out[0] and len(out[-1]) == 64

    def test_a_key_readable_by_others_is_refused(self, make_daemon):
        """A key file with group or other access is refused before anything is signed."""
        d = make_daemon()
        wardctl(d.env, "keygen")
        key = d.env.root / "neuron.key"
        key.chmod(0o644)
        out = wardctl(d.env, "register", check=False)
        assert out.returncode == 2  # the key it names cannot be used: nothing was sent
        assert "accessible by others" in out.stderr and f"chmod 600 {key}" in out.stderr
        with d.connect() as c:
            assert c.call("status", {})["operations"] == {}
        key.chmod(0o600)
        wardctl(d.env, "register")

    def test_cancel_of_a_retained_result_says_it_was_discarded(self, make_daemon):
        """cancel of an op holding a result says the result was discarded, never returned."""
        d = make_daemon()
        set_up(d.env, "echo")
        wardctl(d.env, "submit", "p", "op-r", "echo", "--args", "kept")
        wardctl(d.env, "invoke", "op-r")
        out = wardctl(d.env, "cancel", "op-r").stdout
        assert "cancelled" in out and "discarded" in out
        again = wardctl(d.env, "cancel", "op-r").stdout
        assert "(already)" in again and "discarded" not in again


class TestClientLibrary:
    def test_a_lost_invoke_answer_says_the_attempt_may_have_run(self, make_daemon, start_thread):
        """Session.invoke cut off by a crash raises ConnectionClosed naming op show."""
        from tests.daemon.harness import Actor
        from wardd.client import ConnectionClosed, Session

        d = make_daemon()
        a = Actor(d, acts=("gated",))
        a.submit("op-l", "gated")
        session = Session(d.connect(), a.neuron)
        caught: list[BaseException] = []

        def run() -> None:
            try:
                session.invoke("op-l")
            except BaseException as exc:  # noqa: BLE001 - handed to the test thread
                caught.append(exc)

        t = start_thread(run, stop=d.kill)
        wait_for_file(d.env.started_marker("op-l"))
        d.kill()
        t.join(60)
        (exc,) = caught
        assert isinstance(exc, ConnectionClosed)
        assert "may have run" in str(exc) and "wardctl op show op-l" in str(exc)
