"""A dispatch as data: what ``execute``, ``invoke`` and ``call`` hand a worker (contract §3.2).

Each ends as one frozen :class:`Dispatch`: the neuron, the act and how
the attempt is claimed, :class:`Execute` (the token's prepared attempt),
:class:`Invoke` (prepare and claim in one unit, contract §3.2.5) or
:class:`Call` (submit, prepare and claim in one unit, contract §3.2.6). The
claim's writer unit is built from the record in one place,
:func:`claim_unit`, on the worker's thread. The worker pool's
:meth:`~wardd.daemon.dispatch.workers.WorkerPool.submit` returns the reply the worker completes;
a worker submits an outcome with its :class:`Recorded`, and once that write
is done the :class:`Dispatcher` makes the answer from it (on the writer
thread, from the future's callback: the event loop, the busiest thread
under load, only takes the result).
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs
import structlog
import trio

from wardd.protocol import Internal, WarddError

from ..core.call import Answered
from ..core.records import AttemptRef, BootContext
from ..life.bridge import ThreadReply
from ..observe.tracing import NO_TRACER, TraceIn, Tracer
from ..store.writer import Unit
from . import attempt_units
from .calls import CallEnd

if TYPE_CHECKING:
    from .voids import Voids
    from .workers import WorkerPool

__all__ = [
    "Answered",
    "Call",
    "Dispatch",
    "Dispatcher",
    "Execute",
    "Invoke",
    "Recorded",
    "claim_unit",
    "shutdown_refusal",
]

log = structlog.get_logger("wardd.worker")  # the outcome's events, as the workers log them


@attrs.frozen
class Execute:
    """``execute``: claim the token's prepared attempt (contract §3.2.2)."""

    ref: AttemptRef


@attrs.frozen
class Invoke:
    """``invoke``: the attempt and its claim in one unit (contract §3.2.5)."""

    params: Mapping[str, Any]


@attrs.frozen
class Call:
    """``call``: the op (when new), its attempt and its claim in one unit (contract §3.2.6)."""

    params: Mapping[str, Any]


@attrs.frozen
class Dispatch:
    """One accepted ``execute``, ``invoke`` or ``call``: all take the same way from here."""

    neuron: str
    act: str
    how: Execute | Invoke | Call
    trace: TraceIn | None = None  # set when tracing is on (docs/operations.md, "Traces")

    @property
    def prepared(self) -> AttemptRef | None:
        """An execute's attempt, known before its claim (an invoke or a call has none yet)."""
        how = self.how
        return how.ref if isinstance(how, Execute) else None


def claim_unit(
    d: Dispatch,
    ctx: BootContext,
    *,
    worker: str,
    claim_info: Any,
    stopping: Callable[[], bool],
    on_claim: Callable[[AttemptRef], None],
) -> Unit:
    """The claim's writer unit for ``d`` on ``worker``: the only place it is built.

    ``claim_info`` is the claim record of ``d.act``, computed on the worker
    thread just before (the adapter's ``claim_info()`` is a stat and a read
    of a file for ``file.append``: never on the writer's thread).
    ``on_claim(ref)`` runs inside the unit once the claim is written. The
    unit answers the claimed `AttemptRef`, a refusal, a
    :class:`~.core.attempts.Reroute` to another worker (invoke and call),
    or an :class:`Answered` (a call that runs nothing)."""
    how = d.how
    if isinstance(how, Execute):
        return attempt_units.claim(
            how.ref,
            worker=worker,
            boot=ctx.boot,
            claim_info=claim_info,
            stopping=stopping,
            on_claim=on_claim,
        )
    build = attempt_units.call_claim if isinstance(how, Call) else attempt_units.invoke_claim
    return build(
        ctx,
        d.neuron,
        how.params,
        worker=worker,
        claim_info=claim_info,
        stopping=stopping,
        on_claim=on_claim,
    )


@attrs.frozen
class Recorded:
    """An outcome a worker submitted: the reply is made from it once
    ``future`` says it is durable (contract §3.2.3)."""

    ref: AttemptRef
    worker: str
    status: str
    value: Any
    error: str | None
    aborted: bool | None
    future: concurrent.futures.Future[Any]


def shutdown_refusal(voided: bool) -> WarddError:
    """contract §3.6: the answer to a request the stop keeps from its claim,
    once its attempt's void is durable (or when it had none): ``token_void``
    (``shutdown``); ``internal`` if the void could not be written."""
    if voided:
        return attempt_units.shutdown_void()
    return Internal("the attempt could not be voided")


class Dispatcher:
    """A dispatch's way back: submit it and wait for its reply (shielded, on
    the event loop); make the answer of a recorded outcome (on the writer
    thread, :meth:`settle`), keeping the outcome counts of each worker."""

    def __init__(
        self,
        pool: WorkerPool,
        voids: Voids,
        *,
        on_dispatch: Callable[[str], None] = lambda act: None,
        notify: Callable[..., None] = lambda event, **about: None,
        tracer: Tracer = NO_TRACER,
    ) -> None:
        self._pool = pool
        self._tracer = tracer
        self._voids = voids
        self._on_dispatch = on_dispatch  # the metrics: the request reached a worker
        self._notify = notify  # the notify hook: an attempt became unknown
        self._scopes: set[trio.CancelScope] = set()
        self._counts = {s.id: {"succeeded": 0, "failed": 0, "unknown": 0} for s in pool.states}
        self._counts_lock = threading.Lock()
        pool.on_recorded = self._recorded

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

    def counts(self) -> dict[str, dict[str, int]]:
        """Its part of ``status``: each worker's outcomes made durable, by status."""
        with self._counts_lock:
            return {w: dict(c) for w, c in self._counts.items()}

    def _recorded(self, rec: Recorded, reply: ThreadReply) -> None:
        """An outcome's write is done (on the writer thread, from its future):
        answer the dispatch with :meth:`settle`."""
        try:
            result = self.settle(rec)
        except WarddError as err:
            reply(None, err)
        except BaseException as exc:  # noqa: BLE001 - a reply must always leave
            log.error("reply_failed", op=rec.ref.op, attempt=rec.ref.attempt, error=repr(exc))
            reply(None, Internal("the outcome's reply failed", _claimed(rec.ref)))
        else:
            reply(result, None)

    def settle(self, rec: Recorded) -> dict[str, Any]:
        """The answer of a recorded outcome once its write is done (never an
        outcome that is not stored): the call leaves the call table (its
        aborts are answered), the counts, the ``outcome`` event, the hook."""
        ref, status, error = rec.ref, rec.status, rec.error
        calls = self._pool.calls
        if rec.future.exception() is not None:
            lost = Internal(
                "the outcome could not be stored", {"reason": "fail_stop", **_claimed(ref)}
            )
            calls.settle(ref.attempt_id, lost)
            raise lost
        calls.settle(ref.attempt_id, None, CallEnd(status, rec.aborted))
        with self._counts_lock:
            self._counts[rec.worker][status] += 1
        where = {"neuron": ref.neuron, "op": ref.op, "attempt": ref.attempt, "worker": rec.worker}
        if status == "unknown":  # an operator must act on it: reconcile (docs/recovery.md)
            log.warning("outcome", **where, status=status, error=error)
            evidence: dict[str, Any] = {"claimed": True, "error": error}
            if rec.aborted:
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
            result["result"] = rec.value
        else:
            result["error"] = error
        return result

    def unshield(self) -> None:
        """Past the grace: the callers still waiting get no answer."""
        for scope in list(self._scopes):
            scope.shield = False


def _claimed(ref: AttemptRef) -> dict[str, Any]:
    """The ``data`` of an error answered after the claim: the attempt that may
    have run (the caller of an ``execute`` knows only its token)."""
    return {"op": ref.op, "attempt": ref.attempt}
