"""The one bounded wait of the suite: poll an outside effect until it holds."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path


def wait_for(pred: Callable[[], object], timeout: float = 20.0, what: str = "condition") -> None:
    """Bounded polling of an outside process's effect (a file, a state, a
    status field): the observable the test waits on, never a fixed sleep."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


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
