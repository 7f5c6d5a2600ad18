"""The one bridge from the daemon's threads to the trio loop.

The writer and the workers answer on their own threads: through a
`concurrent.futures.Future` (the writer) or a reply callback (a dispatch,
an abort). The event loop waits for either by letting the thread set a
`trio.Event` through the loop's token, never by blocking a thread.
"""

from __future__ import annotations

import concurrent.futures
import math
import threading
from typing import Any

import trio

from wardd.protocol import WarddError

__all__ = ["ThreadReply", "wait_future"]


class _Waker:
    """Sets events on the trio loop from other threads, several per wake-up.

    Each ``run_sync_soon`` writes a byte to the loop's wake-up socket (a
    system call, during which the thread gives up the GIL and, under load,
    waits to get it back from the busy loop). The writer answers every
    reply of a committed batch in a row: the first of them schedules one
    flush, the others only join its list."""

    def __init__(self, token: trio.lowlevel.TrioToken) -> None:
        self._token = token
        self._lock = threading.Lock()
        self._events: list[trio.Event] = []

    def set_soon(self, event: trio.Event) -> None:
        """Set ``event`` on the loop, soon (from any thread)."""
        with self._lock:
            self._events.append(event)
            if len(self._events) > 1:
                return  # a flush is already scheduled: it takes this one too
        try:
            self._token.run_sync_soon(self._flush)
        except trio.RunFinishedError:
            pass

    def _flush(self) -> None:
        with self._lock:
            events, self._events = self._events, []
        for event in events:
            event.set()


_WAKER: trio.lowlevel.RunVar[_Waker] = trio.lowlevel.RunVar("wardd_waker")


def _waker() -> _Waker:
    """This trio run's waker (on the loop's thread)."""
    try:
        return _WAKER.get()
    except LookupError:
        waker = _Waker(trio.lowlevel.current_trio_token())
        _WAKER.set(waker)
        return waker


class ThreadReply:
    """One answer a thread hands to the trio loop: call it (from any thread)
    with ``(value, error)``; the loop awaits `done`, then takes `result`.
    The first answer counts. Made on the loop's thread."""

    def __init__(self) -> None:
        self._waker = _waker()
        self.done = trio.Event()
        self._got: tuple[Any, WarddError | None] | None = None

    def __call__(self, value: Any, error: WarddError | None) -> None:
        if self._got is None:
            self._got = (value, error)
        self._waker.set_soon(self.done)

    def result(self) -> Any:
        """The value, or raise the error (once `done` is set)."""
        assert self._got is not None
        value, error = self._got
        if error is not None:
            raise error
        return value


async def wait_future(
    fut: concurrent.futures.Future[Any], *, timeout: float = math.inf, shield: bool = False
) -> bool:
    """Wait for ``fut`` (at most ``timeout`` seconds; ``shield``: not even a
    cancellation stops the wait); whether it is done."""
    reply = ThreadReply()
    fut.add_done_callback(lambda _: reply(None, None))
    with trio.move_on_after(timeout) as scope:
        scope.shield = shield
        await reply.done.wait()
    return fut.done()
