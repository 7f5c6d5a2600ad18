"""The workers' queues: which dispatch a worker takes next (contract §3.2).

Each worker has a queue of its own. It takes the first dispatch whose
neuron's ward guard it can take shared at once; a dispatch whose neuron's
guard is held or wanted exclusively is set aside, keeping each neuron's
order, and the next neuron's dispatch is served meanwhile (dispatches of
different neurons never wait for each other's guard). Everything here runs
under the guards' lock; what a worker does with the dispatch it took is
:mod:`~wardd.daemon.dispatch.workers`'.
"""

from __future__ import annotations

import collections
import threading

import attrs

from ..core.records import AttemptRef
from ..life.bridge import ThreadReply
from .dispatches import Dispatch
from .guard import GuardTable

__all__ = ["Job", "WorkerQueues", "WorkerState"]

#: A queued dispatch and the reply it completes.
Job = tuple[Dispatch, ThreadReply]


@attrs.define(eq=False)
class WorkerState:
    """One worker: its call in progress, and how it waits for work."""

    id: str
    # what it waits on when idle: a condition of its own over the guards'
    # lock, so that a dispatch queued on another worker, or a guard released,
    # does not wake it (a wake costs a futex and a GIL hand-over)
    wake: threading.Condition
    busy: AttemptRef | None = None
    # True while it waits for a guard (every guard release wakes it)
    on_guard: bool = False


class WorkerQueues:
    """The queue of each worker of ``ids``, under the guards' lock."""

    def __init__(self, guards: GuardTable, ids: list[str]) -> None:
        self._guards = guards
        self._lock = guards.lock
        self.states = [WorkerState(w, threading.Condition(guards.lock)) for w in ids]
        self._by_id = {s.id: s for s in self.states}
        self._queues: dict[str, collections.deque[Job]] = {
            s.id: collections.deque() for s in self.states
        }
        self._stopping = False

    def has(self, worker: str) -> bool:
        return worker in self._queues

    def put(self, worker: str, job: Job) -> bool:
        """Queue ``job`` on ``worker`` and wake it; False once stopping (not queued)."""
        with self._lock:
            if self._stopping:
                return False
            self._queues[worker].append(job)
            _wake(self._by_id[worker], self._guards)
            return True

    def begin_stop(self) -> list[Job]:
        """Take nothing more: returns the queued dispatches, and wakes every
        worker (each then takes None)."""
        with self._lock:
            self._stopping = True
            queued = [job for q in self._queues.values() for job in q]
            for q in self._queues.values():
                q.clear()
            for state in self.states:
                _wake(state, self._guards)
        return queued

    def take(self, state: WorkerState) -> Job | None:
        """The next dispatch of ``state``'s worker, its neuron's guard now
        held shared (waiting until there is one); None once stopping."""
        q = self._queues[state.id]
        with self._lock:
            while True:
                if self._stopping:
                    return None
                set_aside: set[str] = set()
                for job in q:
                    neuron = job[0].neuron
                    if neuron in set_aside:
                        continue  # keep each neuron's order
                    if self._guards.try_shared_locked(neuron):
                        q.remove(job)
                        return job
                    set_aside.add(neuron)
                _wait(state, self._guards, bool(set_aside))


def _wake(state: WorkerState, guards: GuardTable) -> None:
    """Wake ``state``'s worker wherever it waits (holding the guards' lock)."""
    if state.on_guard:
        guards.cond.notify_all()
    else:
        state.wake.notify()


def _wait(state: WorkerState, guards: GuardTable, set_aside: bool) -> None:
    """Wait (holding the guards' lock) until a dispatch is queued on
    ``state``'s worker or, if it set one aside, until any guard is released."""
    if not set_aside:  # idle: only a dispatch queued here wakes it
        state.wake.wait()
        return
    state.on_guard = True
    try:
        guards.cond.wait()
    finally:
        state.on_guard = False
