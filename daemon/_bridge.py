"""The one bridge from the daemon's threads to the trio loop.

The writer and the workers answer on their own threads: through a
`concurrent.futures.Future` (the writer) or a reply callback (a dispatch,
an abort). The event loop waits for either by letting the thread set a
`trio.Event` through the loop's token, never by blocking a thread.
"""

from __future__ import annotations

import concurrent.futures
import math
from typing import Any

import trio

from wardd.protocol import WarddError

__all__ = ["ThreadReply", "wait_future"]


class ThreadReply:
    """One answer a thread hands to the trio loop: call it (from any thread)
    with ``(value, error)``; the loop awaits `done`, then takes `result`.
    The first answer counts. Made on the loop's thread."""

    def __init__(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self.done = trio.Event()
        self._got: tuple[Any, WarddError | None] | None = None

    def __call__(self, value: Any, error: WarddError | None) -> None:
        if self._got is None:
            self._got = (value, error)
        try:
            self._token.run_sync_soon(self.done.set)
        except trio.RunFinishedError:
            pass

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
