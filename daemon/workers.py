"""Workers: one dedicated thread each, running the guarded dispatch (contract §3.2).

On its thread a worker takes the neuron's ward guard shared, submits the
claim to the writer and waits for its COMMIT on a thread-level future, then
— still holding the guard — calls the adapter synchronously. This is the
linearization boundary. The guard is released before the outcome is
accepted through the writer, pinned to the original op and attempt.

A worker serves its queue in order per neuron; a dispatch whose neuron's
guard is held exclusively is set aside and the next neuron's dispatch is
served meanwhile (dispatches of different neurons never wait for each
other's guard).
"""

from __future__ import annotations

import collections
import concurrent.futures
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import structlog

from wardd.adapters import ActRequest, Adapter, DefiniteFailure
from wardd.protocol import Internal, WarddError

from . import _units
from ._records import wire_safe
from ._units import AttemptRef
from ._writer import Writer
from .guard import GuardTable

__all__ = ["Dispatch", "WorkerPool"]

log = structlog.get_logger("wardd.worker")
ERROR_TEXT_MAX = 2000


@attrs.define(eq=False)
class Dispatch:
    """One accepted ``execute`` (``ref`` set) or ``invoke`` (``invoke_unit``)."""

    neuron: str
    reply: Callable[[Any, WarddError | None], None]  # thread-safe
    ref: AttemptRef | None = None
    invoke_unit: Callable[[str], _units.Unit] | None = None


@attrs.define
class WorkerState:
    id: str
    busy: AttemptRef | None = None
    counts: dict[str, int] = attrs.field(
        factory=lambda: {"succeeded": 0, "failed": 0, "unknown": 0}
    )


class WorkerPool:
    def __init__(
        self,
        n: int,
        *,
        guards: GuardTable,
        writer: Writer,
        adapters: Mapping[str, Adapter],
        boot: str,
    ) -> None:
        self._guards = guards
        self._cond = guards.cond
        self._writer = writer
        self._adapters = adapters
        self._boot = boot
        self.states = [WorkerState(f"w{i}") for i in range(n)]
        self._queues: dict[str, collections.deque[Dispatch]] = {
            s.id: collections.deque() for s in self.states
        }
        self._stopping = False
        self._counts_lock = threading.Lock()
        self._grace_over = False
        self._threads = [
            threading.Thread(target=self._loop, args=(s,), name=f"wardd-worker-{s.id}", daemon=True)
            for s in self.states
        ]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def threads_alive(self) -> bool:
        """Whether every worker thread still runs (the watchdog asks, until the stop)."""
        return all(t.is_alive() for t in self._threads)

    def has(self, worker: str) -> bool:
        return worker in self._queues

    def submit(self, worker: str, d: Dispatch) -> bool:
        """Queue ``d``; False once the pool is stopping (the caller refuses it)."""
        with self._cond:
            if self._stopping:
                return False
            self._queues[worker].append(d)
            self._cond.notify_all()
            return True

    def begin_stop(self) -> list[Dispatch]:
        """Claim nothing more: returns the queued, unclaimed dispatches."""
        with self._cond:
            self._stopping = True
            queued = [d for q in self._queues.values() for d in q]
            for q in self._queues.values():
                q.clear()
            self._cond.notify_all()
        return queued

    def join(self, grace: float) -> bool:
        """Wait up to ``grace`` seconds for calls in progress (after
        :meth:`begin_stop`); True if every worker finished."""
        deadline = time.monotonic() + grace
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        finished = not any(t.is_alive() for t in self._threads)
        if not finished:
            # contract §3.6: a call still running now is left claimed without an
            # outcome (unknown at the next start, with its evidence), even if
            # killing its process group makes it return in this boot
            self._grace_over = True
        return finished

    # -- the thread -------------------------------------------------------------

    def _next(self, state: WorkerState) -> Dispatch | None:
        q = self._queues[state.id]
        with self._cond:
            while True:
                if self._stopping:
                    return None
                set_aside: set[str] = set()
                for d in q:
                    if d.neuron in set_aside:
                        continue  # keep each neuron's order
                    if self._guards.try_shared_locked(d.neuron):
                        q.remove(d)
                        return d
                    set_aside.add(d.neuron)
                self._cond.wait()

    def _loop(self, state: WorkerState) -> None:
        while True:
            d = self._next(state)
            if d is None:
                return
            try:
                self._dispatch(state, d)
            except BaseException as exc:  # noqa: BLE001 - a worker must never die silently
                log.critical("worker_crashed", worker=state.id, error=repr(exc), exc_info=True)
                d.reply(None, Internal("the worker failed"))

    def _dispatch(self, state: WorkerState, d: Dispatch) -> None:
        """Run with the neuron's guard held shared (taken by ``_next``)."""
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self._guards.release_shared(d.neuron)

        try:
            ref = self._claim(state, d, release)
            if ref is None:
                return
            state.busy = ref
            status, value, error = self._call(ref)
        finally:
            release()
            state.busy = None
        self._accept(state, d, ref, status, value, error)

    def _claim(
        self, state: WorkerState, d: Dispatch, release: Callable[[], None]
    ) -> AttemptRef | None:
        try:
            if d.invoke_unit is not None:
                got = self._writer.call(d.invoke_unit(state.id))
                if isinstance(got, str):  # the placement names another worker
                    release()
                    if not self.has(got):
                        d.reply(None, Internal("the placement names no worker of this daemon"))
                    elif not self.submit(got, d):
                        d.reply(None, _units.shutdown_void())
                    return None
                ref: AttemptRef = got
            else:
                assert d.ref is not None
                info = _claim_info(self._adapters.get(d.ref.act))
                ref = self._writer.call(
                    _units.claim(
                        d.ref,
                        worker=state.id,
                        boot=self._boot,
                        claim_info=info,
                        stopping=lambda: self._stopping,
                    )
                )
        except Exception as exc:  # noqa: BLE001 - a refusal, a failed commit, a failing claim_info
            release()
            err = exc if isinstance(exc, WarddError) else Internal("the claim failed")
            if isinstance(err, Internal):
                # contract §3.2.2: a failed claim voids the attempt (claim_failed); an
                # invoke's attempt and claim were one unit, so nothing is left
                if d.ref is not None:
                    try:
                        self._writer.call(_units.void(d.ref.attempt_id, "claim_failed"))
                    except WarddError:
                        pass  # recovery marks it unknown with claimed: false
                err = Internal("the claim could not be committed", {"reason": "claim_failed"})
            d.reply(None, err)
            return None
        log.debug("claimed", neuron=ref.neuron, op=ref.op, attempt=ref.attempt, worker=state.id)
        return ref

    def _call(self, ref: AttemptRef) -> tuple[str, Any, str | None]:
        adapter = self._adapters[ref.act]
        request = ActRequest(
            neuron=ref.neuron, op=ref.op, attempt=ref.attempt, act=ref.act, args=ref.args
        )
        try:
            value = adapter.call(request)
        except DefiniteFailure as exc:
            return "failed", None, _text(exc) or "the act failed without an effect"
        except BaseException as exc:  # noqa: BLE001 - any other end is an unknown outcome
            return "unknown", None, _text(exc) or type(exc).__name__
        # it returned: the effect happened; a value we could not send back is
        # replaced by a placeholder and the reason is kept as the error text
        value, why = wire_safe(value)
        return "succeeded", value, why

    def _accept(
        self,
        state: WorkerState,
        d: Dispatch,
        ref: AttemptRef,
        status: str,
        value: Any,
        error: str | None,
    ) -> None:
        """Submit the outcome and move on: the reply is sent from the
        commit's callback (contract §3.2.3: only once the outcome is durable),
        so the worker serves its next dispatch while the outcome waits for
        its batch, and outcomes of several workers share one fsync."""
        if self._grace_over:
            log.warning(
                "outcome_left_unrecorded",
                neuron=ref.neuron,
                op=ref.op,
                attempt=ref.attempt,
                status=status,
            )
            return
        fut = self._writer.submit(
            _units.outcome(ref, status, value, error, "adapter"), critical=True
        )

        def committed(f: concurrent.futures.Future[Any]) -> None:
            if f.exception() is not None:
                # never report an outcome that is not stored
                d.reply(None, Internal("the outcome could not be stored", {"reason": "fail_stop"}))
                return
            with self._counts_lock:
                state.counts[status] += 1
            where = {"neuron": ref.neuron, "op": ref.op, "attempt": ref.attempt, "worker": state.id}
            if status == "unknown":  # an operator must act on it: reconcile (docs/recovery.md)
                log.warning("outcome", **where, status=status, error=error)
            elif status == "failed":
                log.info("outcome", **where, status=status, error=error)
            else:
                log.info("outcome", **where, status=status)
            result: dict[str, Any] = {"op": ref.op, "attempt": ref.attempt, "status": status}
            if status == "succeeded":
                result["result"] = value
            else:
                result["error"] = error
            d.reply(result, None)

        fut.add_done_callback(committed)

    def counts(self, state: WorkerState) -> dict[str, int]:
        with self._counts_lock:
            return dict(state.counts)


def _claim_info(adapter: Adapter | None) -> dict[str, Any] | None:
    fn = getattr(adapter, "claim_info", None)
    return fn() if callable(fn) else None


def _text(exc: BaseException) -> str:
    return str(exc)[:ERROR_TEXT_MAX]
