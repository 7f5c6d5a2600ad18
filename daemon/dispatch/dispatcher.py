"""A dispatch's way there and back (contract §3.2, §3.2.3).

:class:`Dispatcher` is the way there, on the event loop: it hands a
:class:`~wardd.daemon.dispatch.dispatches.Dispatch` to the worker pool and
waits for its reply, shielded. :class:`Settler` is the way back, on the
writer thread: told of each :class:`~wardd.daemon.dispatch.dispatches.Recorded`
outcome once its write is done (the pool's ``on_recorded``), it makes the
answer and completes the reply. The settler is built before the pool (the
pool gets it in its constructor) and the dispatcher after it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import structlog
import trio

from wardd.protocol import Internal, WarddError

from ..life.bridge import ThreadReply
from ..observe.tracing import NO_TRACER, Tracer
from .calls import Calls
from .dispatches import Dispatch, Recorded
from .voids import Voids
from .workers import WorkerPool, after_claim, lost_outcome

__all__ = ["Dispatcher", "Settler"]

log = structlog.get_logger("wardd.worker")  # the outcome's events, as the workers log them


class Dispatcher:
    """Submit a dispatch and wait for its reply (shielded, on the event loop)."""

    def __init__(
        self,
        pool: WorkerPool,
        voids: Voids,
        *,
        on_dispatch: Callable[[str], None] = lambda act: None,
        tracer: Tracer = NO_TRACER,
    ) -> None:
        self._pool = pool
        self._tracer = tracer
        self._voids = voids
        self._on_dispatch = on_dispatch  # the metrics: the request reached a worker
        self._scopes: set[trio.CancelScope] = set()

    async def run(self, worker: str, d: Dispatch, params: Mapping[str, Any] | None = None) -> Any:
        """Dispatch ``d`` on ``worker``; its answer once its outcome is durable.
        ``params`` are its request's (the trace context it may carry)."""
        if self._tracer.enabled:
            d = attrs.evolve(d, trace=self._tracer.incoming(params or {}))
        self._on_dispatch(d.act)
        reply = self._pool.submit(worker, d)
        if reply is None:  # the pool is stopping: never claimed
            prepared = d.prepared
            raise await self._voids.refuse(None if prepared is None else prepared.attempt_id)
        return await self.wait(reply)

    async def wait(self, reply: ThreadReply) -> Any:
        """Wait for a call's answer, shielded: the effect does not depend on
        the caller; only the shutdown drops the shield once its grace has
        passed (a dispatch's outcome, or an abort's)."""
        with trio.CancelScope(shield=True) as scope:
            self._scopes.add(scope)
            try:
                await reply.done.wait()
            finally:
                self._scopes.discard(scope)
        return reply.result()

    def unshield(self) -> None:
        """Past the grace: the callers still waiting get no answer."""
        for scope in list(self._scopes):
            scope.shield = False


class Settler:
    """Make the answer of a recorded outcome once its write is done (on the
    writer thread, :meth:`settle`), keeping the outcome counts of each worker."""

    def __init__(
        self,
        calls: Calls,
        workers: Sequence[str],
        *,
        notify: Callable[..., None] = lambda event, **about: None,
    ) -> None:
        self._calls = calls  # the pool's call table: a settled call leaves it
        self._notify = notify  # the notify hook: an attempt became unknown
        self._counts = {w: {"succeeded": 0, "failed": 0, "unknown": 0} for w in workers}
        self._counts_lock = threading.Lock()

    def counts(self) -> dict[str, dict[str, int]]:
        """Its part of ``status``: each worker's outcomes made durable, by status."""
        with self._counts_lock:
            return {w: dict(c) for w, c in self._counts.items()}

    def recorded(self, rec: Recorded, reply: ThreadReply) -> None:
        """An outcome's write is done (on the writer thread, from its future):
        answer the dispatch with :meth:`settle`. The pool's ``on_recorded``."""
        try:
            result = self.settle(rec)
        except WarddError as err:
            reply(None, err)
        except BaseException as exc:  # noqa: BLE001 - a reply must always leave
            log.error("reply_failed", op=rec.ref.op, attempt=rec.ref.attempt, error=repr(exc))
            reply(None, Internal("the outcome's reply failed", after_claim(rec.ref)))
        else:
            reply(result, None)

    def settle(self, rec: Recorded) -> dict[str, Any]:
        """The answer of a recorded outcome once its write is done (never an
        outcome that is not stored): the call leaves the call table (its
        aborts are answered), the counts, the ``outcome`` event, the hook."""
        ref, end = rec.ref, rec.end
        status, error = end.status.value, end.error
        calls = self._calls
        if rec.future.exception() is not None:
            lost = lost_outcome(ref)
            calls.settle(ref.attempt_id, lost)
            raise lost
        calls.settle(ref.attempt_id, None, end)
        with self._counts_lock:
            self._counts[rec.worker][status] += 1
        where = {"neuron": ref.neuron, "op": ref.op, "attempt": ref.attempt, "worker": rec.worker}
        if status == "unknown":  # an operator must act on it: reconcile (docs/recovery.md)
            log.warning("outcome", **where, status=status, error=error)
            evidence: dict[str, Any] = {"claimed": True, "error": error}
            if end.aborted:
                evidence["aborted"] = True
            self._notify(
                "attempt_unknown",
                neuron=ref.neuron,
                op=ref.op,
                attempt=ref.attempt,
                act=ref.act,
                evidence=evidence,
            )
        elif status == "failed":
            log.info("outcome", **where, status=status, error=error)
        else:
            log.info("outcome", **where, status=status)
        result: dict[str, Any] = {"op": ref.op, "attempt": ref.attempt, "status": status}
        if status == "succeeded":
            result["result"] = end.value
        else:
            result["error"] = error
        return result
