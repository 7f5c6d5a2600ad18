"""The ward guard: one readers–writer guard per neuron (contract §3.1).

A dispatch holds its neuron's guard *shared* from just before its claim is
published until its adapter call returns. Placement, epoch, grant and
prog-state writes hold it *exclusively* around their write, so each returns
only after that neuron's calls in progress have returned. A waiting
exclusive holder keeps new shared holders out (no starvation of
revocations).

All guards share one lock and one condition variable: a worker whose next
dispatch cannot take its guard sets it aside and waits on that condition,
which every release notifies (an idle worker waits on a condition of its
own over the same ``lock``, so a release does not wake it). Shared acquisition never blocks
(:meth:`try_shared_locked`); exclusive acquisition is async
(:meth:`acquire_exclusive_async`): the event loop waits on a trio event
that every release sets, so no thread is held per waiter and the event
loop and the writer never block on a guard.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import attrs
import trio

__all__ = ["GuardTable"]


@attrs.define
class _Guard:
    readers: int = 0
    writer: bool = False
    writers_waiting: int = 0


class GuardTable:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self._guards: dict[str, _Guard] = {}
        self._wakers: list[Callable[[], None]] = []

    def _released_locked(self) -> None:
        self.cond.notify_all()
        wakers, self._wakers = self._wakers, []
        for wake in wakers:
            wake()

    def _get(self, neuron: str) -> _Guard:
        g = self._guards.get(neuron)
        if g is None:
            g = self._guards[neuron] = _Guard()
        return g

    def _forget(self, neuron: str, g: _Guard) -> None:
        if not g.readers and not g.writer and not g.writers_waiting:
            self._guards.pop(neuron, None)

    # shared: the workers, holding self.cond; never blocks
    def try_shared_locked(self, neuron: str) -> bool:
        g = self._get(neuron)
        if g.writer or g.writers_waiting:
            return False
        g.readers += 1
        return True

    def release_shared(self, neuron: str) -> None:
        with self.cond:
            g = self._guards[neuron]
            g.readers -= 1
            self._forget(neuron, g)
            self._released_locked()

    # exclusive: from the trio loop, never blocking a thread
    async def acquire_exclusive_async(self, neuron: str) -> None:
        """Take the guard exclusively from the trio loop; cancellable."""
        token = trio.lowlevel.current_trio_token()
        with self.cond:
            g = self._get(neuron)
            g.writers_waiting += 1
        acquired = False
        try:
            while True:
                event = trio.Event()
                with self.cond:
                    if not g.readers and not g.writer:
                        g.writers_waiting -= 1
                        g.writer = True
                        acquired = True
                        return

                    def wake(event: trio.Event = event) -> None:
                        try:
                            token.run_sync_soon(event.set)
                        except trio.RunFinishedError:
                            pass

                    self._wakers.append(wake)
                await event.wait()
        finally:
            if not acquired:
                with self.cond:
                    g.writers_waiting -= 1
                    self._forget(neuron, g)
                    self._released_locked()

    def release_exclusive(self, neuron: str) -> None:
        with self.cond:
            g = self._guards[neuron]
            g.writer = False
            self._forget(neuron, g)
            self._released_locked()
