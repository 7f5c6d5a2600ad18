"""Workers: one dedicated thread each, running the guarded dispatch (contract §3.2).

On its thread a worker takes the neuron's ward guard shared, submits the
claim to the writer and waits for its COMMIT on a thread-level future, then
— still holding the guard — calls the adapter synchronously. This is the
linearization boundary. The guard is released before the outcome is
accepted through the writer, pinned to the original op and attempt.

A worker serves its queue in order per neuron; a dispatch whose neuron's
guard is held exclusively is set aside and the next neuron's dispatch is
served meanwhile (dispatches of different neurons never wait for each
other's guard): which dispatch a worker takes next is
:mod:`~wardd.daemon.dispatch.queues`'.

A worker takes a frozen :class:`~wardd.daemon.dispatch.dispatches.Dispatch` and the reply it
completes, and hands the writer values too: the claim unit gets the call it
enters in the call table as a frozen :class:`~wardd.daemon.dispatch.calls.ClaimEntry`, and the
outcome unit gets the call's end as a frozen :class:`~wardd.daemon.dispatch.calls.CallEnd`,
made where the adapter's call ends (:func:`call_act`). The writer thread
writes none of the pool's state: outside SQL it makes the call table's
``claimed`` move, inside the claim unit, and the settler's settle once an
outcome is durable (:meth:`~wardd.daemon.dispatch.dispatcher.Settler.settle`, told through
``on_recorded``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import structlog

from wardd.adapters import ActRequest, Adapter, CallAborted, DefiniteFailure, idempotency_key
from wardd.protocol import AttemptState, Internal, WarddError

from ..core.attempts import Reroute
from ..core.call import Answered
from ..core.records import AttemptRef, BootContext
from ..life.bridge import ThreadReply
from ..observe.tracing import CLAIM_KEY, NO_SPAN, NO_TRACER, DispatchSpan, Tracer
from ..store.encoding import wire_safe
from ..store.writer import Writer
from . import attempt_units
from .calls import CallEnd, Calls, ClaimEntry
from .claims import claim_record
from .dispatches import Dispatch, Recorded, claim_unit
from .guard import GuardTable
from .queues import Job, WorkerQueues, WorkerState
from .voids import shutdown_refusal

__all__ = ["WorkerPool", "after_claim", "call_act", "lost_outcome", "worker_ids"]

log = structlog.get_logger("wardd.worker")
A = AttemptState
ERROR_TEXT_MAX = 2000


class WorkerPool:
    def __init__(
        self,
        n: int,
        *,
        guards: GuardTable,
        writer: Writer,
        adapters: Mapping[str, Adapter],
        ctx: BootContext,
        calls: Calls,
        on_recorded: Callable[[Recorded, ThreadReply], None],
        on_act: Callable[[str, float], None] = lambda act, seconds: None,
        stopping: threading.Event | None = None,
        tracer: Tracer = NO_TRACER,
    ) -> None:
        self._guards = guards
        self._tracer = tracer
        self._writer = writer
        self._adapters = adapters
        self._ctx = ctx
        # the daemon's stop has begun: read by the claim units, on the writer's thread
        self._claim_stopping = stopping if stopping is not None else threading.Event()
        self._queues = WorkerQueues(guards, worker_ids(n))
        self.states: list[WorkerState] = self._queues.states
        self.calls = calls
        self._grace_over = False
        # told each adapter call's act and duration (the daemon's metrics)
        self._on_act = on_act
        # told each outcome once its write is done, on the writer thread: it
        # answers the reply (the Settler's; it writes none of this pool's state)
        self._on_recorded = on_recorded
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
        return self._queues.has(worker)

    def submit(self, worker: str, d: Dispatch) -> ThreadReply | None:
        """Queue ``d`` on ``worker``: the reply its worker completes (on the
        event loop's thread); None once the pool is stopping (never claimed)."""
        reply = ThreadReply()
        return reply if self._queues.put(worker, (d, reply)) else None

    def begin_stop(self) -> list[Job]:
        """Claim nothing more: returns the queued, unclaimed dispatches."""
        return self._queues.begin_stop()

    def join(self, grace: float) -> bool:
        """Wait up to ``grace`` seconds for calls in progress (after
        :meth:`begin_stop`); True if every worker finished."""
        deadline = time.monotonic() + grace
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return self.end_grace()

    def end_grace(self) -> bool:
        """End the grace (it passed, or a second stop signal, contract §3.6):
        a call still running now is left claimed without an outcome (unknown
        at the next start, with its evidence), even if killing its process
        group makes it return in this boot. True if no worker runs a call."""
        finished = not any(t.is_alive() for t in self._threads)
        if not finished:
            self._grace_over = True
        return finished

    # -- abort ------------------------------------------------------------------

    def abort(
        self, attempt_id: int, on_done: Callable[[CallEnd | None, WarddError | None], None]
    ) -> bool:
        """Abort the call of a running attempt (contract §3.8).

        True if the abort was taken: the call's process group is killed (or
        the call is never started, if it has not begun) and ``on_done(end,
        error)`` is called with a `CallEnd` once the attempt's outcome is
        durable (``error`` if it could not be stored). That outcome is
        ``unknown`` with ``aborted: true`` when the abort ended the call
        (the adapter raised `CallAborted`, or the call never started), and
        ``unknown`` with ``aborted: false`` when the call ended unknown on
        its own before the kill reached it; a call that ended on its own
        succeeded or failed keeps that outcome. False if the adapter had
        already returned: nothing is changed."""
        try:
            calling = self.calls.abort(attempt_id, on_done)
        except LookupError:
            return False
        if calling is not None:
            _kill(self._adapters.get(calling.ref.act), calling.ref)
        return True

    # -- the thread -------------------------------------------------------------

    def _loop(self, state: WorkerState) -> None:
        while True:
            job = self._queues.take(state)
            if job is None:
                return
            try:
                self._dispatch(state, *job)
            except BaseException as exc:
                log.critical("worker_crashed", worker=state.id, error=repr(exc), exc_info=True)
                job[1](None, Internal("the worker failed"))

    def _dispatch(self, state: WorkerState, d: Dispatch, reply: ThreadReply) -> None:
        """Run with the neuron's guard held shared (taken by ``WorkerQueues.take``).

        contract §3.6: once the claim is durable, nothing that goes wrong
        leaves the attempt ``running`` for the rest of the boot: an
        exception anywhere between the claim and the outcome (in the
        adapter, in checking its value, here) records ``unknown`` with the
        error's text, and if even that cannot be stored, the daemon
        fail-stops."""
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self._guards.release_shared(d.neuron)

        ref: AttemptRef | None = None
        span = self._tracer.dispatch(d)
        try:
            ref = self._claim(state, d, reply, release, span)
            if ref is None:
                return
            state.busy = ref
            if self.calls.begin(ref.attempt_id):
                adapter = self._adapters[ref.act]
                end = call_act(adapter, ref, self._ctx.boot, self._on_act, span)
            else:
                end = CallEnd(A.UNKNOWN, error="the call was not started", killed=True)
        except BaseException as exc:
            if ref is None:
                ref = self.calls.owned_by(reply)  # its claim unit ran: it may be durable
            if ref is None:
                span.ended(None, "internal")
                raise  # before the claim: nothing was started (the loop answers)
            log.error("worker_fault", op=ref.op, attempt=ref.attempt, error=repr(exc))
            end = CallEnd(A.UNKNOWN, error=_fault(exc))
        finally:
            release()
            state.busy = None
        self._ended(state, reply, ref, end, span)

    def _ended(
        self,
        state: WorkerState,
        reply: ThreadReply,
        ref: AttemptRef,
        end: CallEnd,
        span: DispatchSpan,
    ) -> None:
        """The call ended (the guard is released): record its outcome (and
        end its span with it once it is submitted)."""
        if self.calls.end(ref.attempt_id):
            # contract §3.8: an abort was taken. A call that ended unknown may
            # have had its effect (never guessed); its evidence says which
            # ended it, the abort or the call itself before the kill reached it
            end = end.after_abort()
        try:
            recorded = self._accept(state, reply, ref, end)
        except BaseException as exc:  # noqa: BLE001 - the outcome must still be recorded
            # _accept raises only before its outcome is submitted
            log.error("worker_fault", op=ref.op, attempt=ref.attempt, error=repr(exc))
            end = attrs.evolve(end, status=A.UNKNOWN, value=None, error=_fault(exc))
            try:
                recorded = self._accept(state, reply, ref, end)
            except BaseException as again:
                span.ended(None, "fail_stop")
                self._writer.fail_stop(f"an outcome could not be recorded: {again!r}")
                # answered before the worker ends (the stop joins the workers
                # before it closes the connections): the attempt may have run;
                # an abort taken on it is answered the same
                lost = lost_outcome(ref)
                self.calls.settle(ref.attempt_id, lost)
                reply(None, lost)
                raise
        # an outcome left unrecorded (the stop's grace passed) is unknown at the next start
        span.ended(end.status.value if recorded else None, None if recorded else "shutdown")

    def _claim(
        self,
        state: WorkerState,
        d: Dispatch,
        reply: ThreadReply,
        release: Callable[[], None],
        span: DispatchSpan,
    ) -> AttemptRef | None:
        """Commit the claim of ``d``; its attempt, or None when it was
        answered here (a refusal, a call that runs nothing, a reroute)."""
        try:
            info = claim_record(self._adapters[d.act])
            if span.traceparent is not None:  # the span's ids, kept with the attempt
                info[CLAIM_KEY] = span.traceparent
            unit = claim_unit(
                d,
                self._ctx,
                worker=state.id,
                claim_info=info,
                stopping=self._claim_stopping,
                entry=ClaimEntry(self.calls, reply),  # entered in the unit: before a read
            )
            got = self._writer.call(unit)
            if isinstance(got, Reroute):  # the placement now names another worker
                release()
                span.ended(None)  # its next worker's span follows
                self._reroute(got.worker, d, reply)
                return None
            if isinstance(got, Answered):  # a call that runs nothing: its answer
                release()
                span.ended(None)
                reply(got.result, None)
                return None
            ref: AttemptRef = got
        except Exception as exc:  # noqa: BLE001 - a refusal, a failed commit, a failing claim_info
            release()
            err = _refused(self._writer, self.calls, d, reply, exc)
            span.ended("voided" if err.code == "token_void" else None, err.code)
            reply(None, err)
            return None
        span.claimed(ref)
        log.debug("claimed", neuron=ref.neuron, op=ref.op, attempt=ref.attempt, worker=state.id)
        return ref

    def _reroute(self, worker: str, d: Dispatch, reply: ThreadReply) -> None:
        if not self.has(worker):
            reply(None, Internal("the placement names no worker of this daemon"))
        elif not self._queues.put(worker, (d, reply)):
            reply(None, shutdown_refusal(True))  # an invoke or a call: no attempt was written

    def _accept(
        self, state: WorkerState, reply: ThreadReply, ref: AttemptRef, end: CallEnd
    ) -> bool:
        """Submit the outcome and move on: the reply is made once the outcome
        is durable (contract §3.2.3, ``on_recorded``), so the
        worker serves its next dispatch while the outcome waits for its
        batch, and outcomes of several workers share one fsync. The outcome
        is critical: if it cannot be stored, the daemon fail-stops."""
        if self._grace_over:
            log.warning(
                "outcome_left_unrecorded",
                neuron=ref.neuron,
                op=ref.op,
                attempt=ref.attempt,
                status=end.status.value,
            )
            lost = Internal("the daemon stopped before the outcome")
            self.calls.settle(ref.attempt_id, lost)
            return False
        fut = self._writer.submit(attempt_units.outcome(ref, end), critical=True)
        rec = Recorded(ref, state.id, end, fut)
        settled = self._on_recorded
        fut.add_done_callback(lambda _f: settled(rec, reply))
        return True

    def snapshot(self) -> list[dict[str, Any]]:
        """Its part of ``status``: each worker's call in progress."""
        return [
            {
                "id": s.id,
                "busy_op": None
                if (busy := s.busy) is None
                else {"neuron": busy.neuron, "op": busy.op, "attempt": busy.attempt},
            }
            for s in self.states
        ]


def worker_ids(n: int) -> list[str]:
    """The ids of a pool of ``n`` workers, in order (``w0``, ``w1``, ...)."""
    return [f"w{i}" for i in range(n)]


def _kill(adapter: Adapter | None, ref: AttemptRef) -> None:
    """Kill the call's process group (an abort during the call)."""
    if adapter is not None:
        try:
            adapter.abort(idempotency_key(ref.neuron, ref.op, ref.attempt))
        except Exception as exc:  # noqa: BLE001 - the outcome is unknown either way
            log.error("abort_failed", act=ref.act, error=repr(exc))


def _refused(
    writer: Writer, calls: Calls, d: Dispatch, reply: ThreadReply, exc: Exception
) -> WarddError:
    """The answer to a claim that was refused or failed."""
    # a claim unit that registered its call and whose batch then failed to
    # commit: drop the registration (the attempt never ran)
    claimed = calls.owned_by(reply)
    if claimed is not None:
        calls.settle(claimed.attempt_id, Internal("the claim was not committed"))
    if isinstance(exc, WarddError) and not isinstance(exc, Internal):
        return exc
    # contract §3.2.2: a failed claim voids the attempt (claim_failed); an
    # invoke's attempt and claim were one unit, so nothing is left
    prepared = d.prepared
    if prepared is not None:
        try:
            writer.call(attempt_units.void(prepared.attempt_id, "claim_failed"), critical=True)
        except WarddError:
            # contract §3.6: fail-stop; the next start marks it unknown
            # with claimed: false
            writer.fail_stop("a void (claim_failed) could not be written")
    return Internal("the claim could not be committed", {"reason": "claim_failed"})


def call_act(
    adapter: Adapter,
    ref: AttemptRef,
    boot: str,
    on_act: Callable[[str, float], None],
    span: DispatchSpan = NO_SPAN,
) -> CallEnd:
    """Call the adapter: how the call ended (no abort is known here:
    ``aborted`` is unset). The act gets the dispatch span's trace context
    (None when tracing is off)."""
    request = ActRequest(
        neuron=ref.neuron,
        op=ref.op,
        attempt=ref.attempt,
        act=ref.act,
        args=ref.args,
        boot=boot,
        traceparent=span.traceparent,
        tracestate=span.tracestate,
    )
    t0 = time.perf_counter()
    try:
        value = adapter.call(request)
    except DefiniteFailure as exc:
        return CallEnd(A.FAILED, error=_text(exc) or "the act failed without an effect")
    except BaseException as exc:  # noqa: BLE001 - any other end is an unknown outcome
        killed = isinstance(exc, CallAborted)
        return CallEnd(A.UNKNOWN, error=_text(exc) or type(exc).__name__, killed=killed)
    finally:
        on_act(ref.act, time.perf_counter() - t0)
    # it returned: the effect happened; a value we could not send back is
    # replaced by a placeholder and the reason is kept as the error text
    value, why = wire_safe(value)
    return CallEnd(A.SUCCEEDED, value, why)


def _text(exc: BaseException) -> str:
    try:
        return str(exc)[:ERROR_TEXT_MAX]
    except Exception:  # noqa: BLE001 - an exception whose str() raises
        return type(exc).__name__


def after_claim(ref: AttemptRef) -> dict[str, Any]:
    """The ``data`` of an error answered after the claim: the attempt that may
    have run (the caller of an ``execute`` knows only its token)."""
    return {"op": ref.op, "attempt": ref.attempt}


def lost_outcome(ref: AttemptRef) -> Internal:
    """The answer of a call whose outcome cannot be recorded (the daemon
    fail-stops): after the claim, so it names the attempt that may have run."""
    return Internal("the outcome could not be stored", {"reason": "fail_stop", **after_claim(ref)})


def _fault(exc: BaseException) -> str:
    """The error text recorded for a fault after the claim."""
    return f"the worker failed after the claim: {type(exc).__name__}: {_text(exc)}"[:ERROR_TEXT_MAX]
