"""The one bridge from a thread-level future to the trio loop.

The writer and the workers answer through `concurrent.futures.Future`s
completed on their own threads; the event loop waits for one by letting
the future's done-callback set a `trio.Event` through the loop's token
(never by blocking a thread on ``result()``).
"""

from __future__ import annotations

import concurrent.futures
import math
from typing import Any

import trio

__all__ = ["wait_future"]


async def wait_future(
    fut: concurrent.futures.Future[Any], *, timeout: float = math.inf, shield: bool = False
) -> bool:
    """Wait for ``fut`` (at most ``timeout`` seconds; ``shield``: not even a
    cancellation stops the wait); whether it is done."""
    done = trio.Event()
    token = trio.lowlevel.current_trio_token()

    def wake(_: object) -> None:
        try:
            token.run_sync_soon(done.set)
        except trio.RunFinishedError:
            pass

    fut.add_done_callback(wake)
    with trio.move_on_after(timeout) as scope:
        scope.shield = shield
        await done.wait()
    return fut.done()
