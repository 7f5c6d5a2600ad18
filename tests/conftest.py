"""Fixtures shared by the whole suite, and the guard that keeps it from hanging.

The guard (docs/reliability.md, "A suite that never hangs"): after each
test, once its fixtures are torn down, no process it started may still run
and no non-daemon thread it started may still be alive. What is left is
ended (processes SIGKILLed, with everything below them) and the test fails
at teardown, named. Processes are looked for twice: below this process after
the teardown, and among those that ran below it when the test's own part
ended (a program whose daemon the teardown killed no longer has us as an
ancestor). A daemon a module-scoped fixture keeps for several tests is
spared until its module ends (``Daemon(env, shared=True)``). At the end of
the session everything still below this process is ended and fails the run,
and a non-daemon thread still alive cannot hold the interpreter at exit.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import weakref
from collections.abc import Callable, Iterator

import pytest

from tests import _leftovers
from tests.daemon import harness
from tests.daemon.harness import Daemon, Env

#: How long a thread the test started may take to end after its teardown (it
#: may have been waiting on a process the guard just killed); the guard's own
#: test shortens it.
THREAD_GRACE_S = float(os.environ.get("WARDD_TEST_THREAD_GRACE_S", "10"))
_THREADS_BEFORE = pytest.StashKey[set[threading.Thread]]()
_SESSION: list[pytest.Session] = []
_REPORTED: weakref.WeakSet[threading.Thread] = weakref.WeakSet()  # failed a test already


@pytest.fixture
def make_daemon() -> Iterator:
    """``make_daemon(start=True, **Env kwargs)`` → a real daemon process."""
    daemons: list[Daemon] = []

    def factory(env: Env | None = None, start: bool = True, **kw):
        d = Daemon(env or Env(**kw))
        daemons.append(d)
        if start:
            d.start()
        return d

    try:
        yield factory
    finally:
        _call_each([d.cleanup for d in reversed(daemons)])


@pytest.fixture
def daemon(make_daemon):
    return make_daemon()


@pytest.fixture
def start_thread() -> Iterator[Callable[..., threading.Thread]]:
    """``start_thread(fn, *args, stop=None)`` → a started thread running ``fn(*args)``.

    At the test's end, pass or fail, each ``stop`` is called (it ends what
    the thread waits on: a child process, a connection) and the threads are
    joined, bounded; one still alive then fails the test (the guard).
    """
    threads: list[threading.Thread] = []
    stops: list[Callable[[], object]] = []

    def start(fn: Callable[..., object], *args: object, stop: Callable[[], object] | None = None):
        t = threading.Thread(target=fn, args=args, name=f"test thread {fn.__name__}")
        if stop is not None:
            stops.append(stop)
        t.start()
        threads.append(t)
        return t

    try:
        yield start
    finally:
        try:
            _call_each(stops)
        finally:
            _leftovers.join(threads, THREAD_GRACE_S)


def _call_each(fns: list[Callable[[], object]]) -> None:
    """Call each, also when one of them raises."""
    if fns:
        try:
            fns[0]()
        finally:
            _call_each(fns[1:])


# -- the guard ------------------------------------------------------------------------


def pytest_sessionstart(session: pytest.Session) -> None:
    _SESSION.append(session)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    item.stash[_THREADS_BEFORE] = set(threading.enumerate())
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    ran = _leftovers.descendants(spare=harness.shared_pids())
    try:
        result = yield
    except BaseException as exc:  # the teardown failed: its error stays the one shown
        said = _left_behind(item, ran)
        if said:
            exc.add_note(said)
        raise
    said = _left_behind(item, ran)
    if said:
        pytest.fail(said, pytrace=False)
    return result


def _left_behind(item: pytest.Item, ran: list[_leftovers.Proc]) -> str:
    """End what ``item`` left running; what it was ("" when nothing)."""
    below = _leftovers.descendants(spare=harness.shared_pids())
    problems = _end_processes(_leftovers.running(dict.fromkeys([*ran, *below])))
    before = item.stash.get(_THREADS_BEFORE, set())
    threads = [t for t in _leftovers.non_daemon_threads() if t not in before]
    problems += _stuck_threads(threads)
    return f"{item.nodeid} left behind:\n" + "\n".join(problems) if problems else ""


def _end_processes(procs: list[_leftovers.Proc]) -> list[str]:
    if not procs:
        return []
    names = [p.describe() for p in procs]
    stuck = _leftovers.end(procs)
    said = [f"  a process still running (now SIGKILLed): {n}" for n in names]
    said += [f"  a process that did not die of SIGKILL: {p.describe()}" for p in stuck]
    return said


def _stuck_threads(threads: list[threading.Thread]) -> list[str]:
    stuck = _leftovers.join([t for t in threads if t not in _REPORTED], THREAD_GRACE_S)
    _REPORTED.update(stuck)
    return [f"  a non-daemon thread still alive: {_leftovers.stack_of(t)}" for t in stuck]


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Whatever is still below this process fails the run and is ended."""
    problems = _end_processes(_leftovers.running(_leftovers.descendants()))
    if problems:
        sys.stderr.write("\nleft behind at the end of the session:\n" + "\n".join(problems) + "\n")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """The summary is out: a non-daemon thread cannot keep the run from ending.

    Python joins every non-daemon thread at exit, so one that never ends
    (a test's thread blocked for ever) would hold the run without a word.
    It fails the run here instead, after its stack is shown; the exit
    handlers (the harness's temp dir, coverage data) still run.
    """
    left = _leftovers.non_daemon_threads()
    stuck = _leftovers.join([t for t in left if t not in _REPORTED], THREAD_GRACE_S)
    stuck += [t for t in left if t in _REPORTED and t.is_alive()]
    if not stuck:
        return
    said = "\n".join(_leftovers.stack_of(t) for t in stuck)
    sys.stderr.write(f"\nnon-daemon threads still alive at exit, not waited for:\n{said}\n")
    status = int(_SESSION[0].exitstatus) if _SESSION else 1
    sys.stdout.flush()
    sys.stderr.flush()
    atexit._run_exitfuncs()
    os._exit(status or int(pytest.ExitCode.TESTS_FAILED))
