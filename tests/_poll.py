"""The one bounded wait of the suite: poll an outside effect until it holds.

`wait_for` polls from a plain thread, `wait_until` from a task of a trio or
asyncio loop (it sleeps with the loop's own sleep, so the loop's other tasks
run meanwhile). Both measure their bound in real time, ``time.monotonic``:
what they wait on is outside the loop (a process, a file, a daemon), and a
trio test's mock clock must not make the bound pass at once. A wait that
times out raises an AssertionError naming what it waited for (and, with
``seen``, what it saw last).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import anyio

T = TypeVar("T")

#: The pause between two looks: short beside any bound, long beside a look.
EVERY = 0.01


def wait_for(
    pred: Callable[[], T],
    timeout: float = 20.0,
    what: str = "condition",
    *,
    seen: Callable[[], object] | None = None,
    every: float = EVERY,
) -> T:
    """Bounded polling of an outside process's effect (a file, a state, a
    status field): the observable the test waits on, never a fixed sleep.
    Returns ``pred``'s first true value."""
    deadline = time.monotonic() + timeout
    while not (got := pred()):
        if time.monotonic() > deadline:
            raise AssertionError(_timed_out(what, seen))
        time.sleep(every)
    return got


async def wait_until(
    pred: Callable[[], T | Awaitable[T]],
    timeout: float = 20.0,
    what: str = "condition",
    *,
    seen: Callable[[], object] | None = None,
) -> T:
    """`wait_for` for a task of an event loop: ``pred`` may be a coroutine
    function (a call to the daemon); between two looks the loop runs on."""
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if inspect.isawaitable(got):
            got = await got
        if got:
            return got  # type: ignore[return-value]  # an awaitable's value is a T
        if time.monotonic() > deadline:
            raise AssertionError(_timed_out(what, seen))
        await anyio.sleep(EVERY)


def _timed_out(what: str, seen: Callable[[], object] | None) -> str:
    return f"timed out waiting for {what}" + ("" if seen is None else f"; seen: {seen()}")


def wait_for_file(path: Path, timeout: float = 30.0) -> None:
    """Until an outside process has made ``path`` (a marker: it may be empty)."""
    wait_for(path.exists, timeout, f"{path} to appear")


async def wait_until_file(path: Path, timeout: float = 30.0) -> None:
    """`wait_for_file` for a task of an event loop."""
    await wait_until(path.exists, timeout, f"{path} to appear")


def file_written(path: Path, timeout: float = 30.0, *, line: bool = False) -> str:
    """The text a child process wrote to ``path``, once it is there and not
    empty (with ``line``: once it ends with a newline)."""

    def done() -> bool:
        if not path.exists():
            return False
        text = path.read_text()
        return text.endswith("\n") if line else bool(text.strip())

    wait_for(done, timeout, f"{path} to be written")
    return path.read_text()


def pid_written(path: Path, timeout: float = 30.0) -> int:
    """The pid a child process wrote to ``path`` as a whole line (``echo $$ > path``)."""
    return int(file_written(path, timeout, line=True))
