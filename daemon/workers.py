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

from wardd.adapters import ActRequest, Adapter, CallAborted, DefiniteFailure
from wardd.protocol import Internal, WarddError

from . import _units
from ._claims import claim_record
from ._records import wire_safe
from ._units import AttemptRef, Reroute
from .guard import GuardTable
from .store.writer import Writer

__all__ = ["Dispatch", "WorkerPool"]

log = structlog.get_logger("wardd.worker")
ERROR_TEXT_MAX = 2000


ClaimUnit = Callable[[str, Any, Callable[[AttemptRef], None]], _units.Unit]


@attrs.define(eq=False)
class Dispatch:
    """One accepted ``execute`` or ``invoke``: both take the same way from here.

    ``claim(worker, claim_info, on_claim)`` builds the claim's writer unit
    (``_units.claim`` for a token's attempt, ``_units.invoke_claim`` for an
    invoke); ``claim_info`` is the claim record of ``act``, computed on the
    worker thread just before (the adapter's ``claim_info()`` is a stat and
    a read of a file for ``file.append``: never on the writer's thread).
    The unit answers the claimed :class:`AttemptRef`, a refusal, or a
    :class:`~._units.Reroute` to another worker.
    """

    neuron: str
    reply: Callable[[Any, WarddError | None], None]  # thread-safe
    claim: ClaimUnit
    act: str
    ref: AttemptRef | None = None  # an execute's attempt (known before its claim)
    claimed_ref: AttemptRef | None = None  # set inside the claim unit


@attrs.frozen
class CallEnd:
    """How an aborted call ended, once its outcome is durable (contract §3.8):
    its ``status``, and ``aborted``: True when the abort ended it, False when
    it ended unknown on its own before the kill reached it, None when it
    did not end unknown."""

    status: str
    aborted: bool | None = None


@attrs.define(eq=False)
class Call:
    """A claimed attempt of this boot until its outcome is durable (contract §3.8
    ``abort``): registered inside the claim unit, so it exists whenever
    a read shows the attempt ``running``."""

    key: str  # the idempotency key
    act: str
    phase: str = "claimed"  # claimed -> calling -> done (the adapter returned)
    aborted: bool = False
    waiters: list[Callable[[CallEnd | None, WarddError | None], None]] = attrs.field(
        factory=list
    )


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
        self._calls: dict[int, Call] = {}  # attempt row id -> its call
        self._calls_lock = threading.Lock()
        self._grace_over = False
        # told each adapter call's act and duration (the daemon's metrics)
        self.on_act: Callable[[str, float], None] = _ignore_call
        # told each attempt that became unknown, once durable (the notify hook)
        self.notify: Callable[..., None] = _ignore_event
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
        with self._calls_lock:
            call = self._calls.get(attempt_id)
            if call is None or call.phase == "done":
                return False
            call.aborted = True
            call.waiters.append(on_done)
            calling = call.phase == "calling"
        if calling:
            self._kill(call)
        return True

    def _kill(self, call: Call) -> None:
        kill = getattr(self._adapters.get(call.act), "abort", None)
        if callable(kill):
            try:
                kill(call.key)
            except Exception as exc:  # noqa: BLE001 - the outcome is unknown either way
                log.error("abort_failed", act=call.act, error=repr(exc))

    def _registrar(self, d: Dispatch) -> Callable[[AttemptRef], None]:
        """The ``on_claim`` of ``d``'s claim unit (run on the writer thread)."""

        def register(ref: AttemptRef) -> None:
            key = f"{ref.neuron}/{ref.op}/{ref.attempt}"
            with self._calls_lock:
                self._calls[ref.attempt_id] = Call(key=key, act=ref.act)
            d.claimed_ref = ref

        return register

    def _unregister(
        self, attempt_id: int, error: WarddError | None, end: CallEnd | None = None
    ) -> None:
        with self._calls_lock:
            call = self._calls.pop(attempt_id, None)
        for notify in call.waiters if call is not None else ():
            notify(end, error)

    def _begin_call(self, ref: AttemptRef) -> bool:
        """Enter the adapter call; False if an abort came first (not called)."""
        with self._calls_lock:
            call = self._calls.get(ref.attempt_id)
            if call is None:
                return True
            call.phase = "calling"
            return not call.aborted

    def _end_call(self, ref: AttemptRef) -> bool:
        """The adapter returned; True if an abort was taken before that."""
        with self._calls_lock:
            call = self._calls.get(ref.attempt_id)
            if call is None:
                return False
            call.phase = "done"
            return call.aborted

    def end_grace(self) -> bool:
        """End the grace at once (a second stop signal, contract §3.6): calls
        still running are left claimed without an outcome, as when the grace
        passes. True if no worker was running a call any more."""
        finished = not any(t.is_alive() for t in self._threads)
        if not finished:
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
        """Run with the neuron's guard held shared (taken by ``_next``).

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
        try:
            ref = self._claim(state, d, release)
            if ref is None:
                return
            state.busy = ref
            if self._begin_call(ref):
                status, value, error, by_abort = self._call(ref)
            else:
                status, value, error = "unknown", None, "the call was not started"
                by_abort = True
        except BaseException as exc:  # noqa: BLE001 - after the claim: unknown, never running
            if ref is None:
                ref = d.claimed_ref  # set inside the claim unit: the claim may be durable
            if ref is None:
                raise  # before the claim: nothing was started (the loop answers)
            log.error("worker_fault", op=ref.op, attempt=ref.attempt, error=repr(exc))
            status, value, error, by_abort = "unknown", None, _fault(exc), False
        finally:
            release()
            state.busy = None
        aborted: bool | None = None
        if self._end_call(ref) and status == "unknown":
            # contract §3.8: an abort was taken and the call ended unknown. The
            # effect may have happened; never guessed. Its evidence says which
            # ended it: the abort (aborted: true), or the call itself before
            # the kill reached it (aborted: false). A call that ended on its
            # own succeeded or failed keeps that outcome: the abort then
            # answers not_running
            aborted = by_abort
            if aborted:
                error = f"aborted by the operator ({error or 'no detail'})"
        try:
            self._accept(state, d, ref, status, value, error, aborted=aborted)
        except BaseException as exc:  # noqa: BLE001 - the outcome must still be recorded
            # _accept raises only before its outcome is submitted
            log.error("worker_fault", op=ref.op, attempt=ref.attempt, error=repr(exc))
            try:
                self._accept(state, d, ref, "unknown", None, _fault(exc), aborted=aborted)
            except BaseException as again:
                self._writer.fail_stop(f"an outcome could not be recorded: {again!r}")
                raise

    def _claim(
        self, state: WorkerState, d: Dispatch, release: Callable[[], None]
    ) -> AttemptRef | None:
        try:
            info = claim_record(self._adapters.get(d.act))
            got = self._writer.call(d.claim(state.id, info, self._registrar(d)))
            if isinstance(got, Reroute):  # the placement now names another worker
                release()
                if not self.has(got.worker):
                    d.reply(None, Internal("the placement names no worker of this daemon"))
                elif not self.submit(got.worker, d):
                    d.reply(None, _units.shutdown_void())
                return None
            ref: AttemptRef = got
        except Exception as exc:  # noqa: BLE001 - a refusal, a failed commit, a failing claim_info
            release()
            self._forget_claim(d)
            err = exc if isinstance(exc, WarddError) else Internal("the claim failed")
            if isinstance(err, Internal):
                # contract §3.2.2: a failed claim voids the attempt (claim_failed); an
                # invoke's attempt and claim were one unit, so nothing is left
                if d.ref is not None:
                    try:
                        self._writer.call(
                            _units.void(d.ref.attempt_id, "claim_failed"), critical=True
                        )
                    except WarddError:
                        # contract §3.6: fail-stop; the next start marks it
                        # unknown with claimed: false
                        self._writer.fail_stop("a void (claim_failed) could not be written")
                err = Internal("the claim could not be committed", {"reason": "claim_failed"})
            d.reply(None, err)
            return None
        log.debug("claimed", neuron=ref.neuron, op=ref.op, attempt=ref.attempt, worker=state.id)
        return ref

    def _forget_claim(self, d: Dispatch) -> None:
        """A claim unit that registered its call and whose batch then failed
        to commit: drop the registration (the attempt never ran)."""
        if d.claimed_ref is not None:
            self._unregister(d.claimed_ref.attempt_id, Internal("the claim was not committed"))
            d.claimed_ref = None

    def _call(self, ref: AttemptRef) -> tuple[str, Any, str | None, bool]:
        """Call the adapter: (status, value, error, whether an abort ended it)."""
        adapter = self._adapters[ref.act]
        request = ActRequest(
            neuron=ref.neuron,
            op=ref.op,
            attempt=ref.attempt,
            act=ref.act,
            args=ref.args,
            boot=self._boot,
        )
        t0 = time.perf_counter()
        try:
            value = adapter.call(request)
        except DefiniteFailure as exc:
            return "failed", None, _text(exc) or "the act failed without an effect", False
        except BaseException as exc:  # noqa: BLE001 - any other end is an unknown outcome
            by_abort = isinstance(exc, CallAborted)
            return "unknown", None, _text(exc) or type(exc).__name__, by_abort
        finally:
            self.on_act(ref.act, time.perf_counter() - t0)
        # it returned: the effect happened; a value we could not send back is
        # replaced by a placeholder and the reason is kept as the error text
        value, why = wire_safe(value)
        return "succeeded", value, why, False

    def _accept(
        self,
        state: WorkerState,
        d: Dispatch,
        ref: AttemptRef,
        status: str,
        value: Any,
        error: str | None,
        *,
        aborted: bool | None = None,
    ) -> None:
        """Submit the outcome and move on: the reply is sent from the
        commit's callback (contract §3.2.3: only once the outcome is durable),
        so the worker serves its next dispatch while the outcome waits for
        its batch, and outcomes of several workers share one fsync. The
        outcome is critical: if it cannot be stored, the daemon fail-stops."""
        if self._grace_over:
            log.warning(
                "outcome_left_unrecorded",
                neuron=ref.neuron,
                op=ref.op,
                attempt=ref.attempt,
                status=status,
            )
            self._unregister(ref.attempt_id, Internal("the daemon stopped before the outcome"))
            return
        fut = self._writer.submit(
            _units.outcome(ref, status, value, error, "adapter", aborted=aborted), critical=True
        )

        def committed(f: concurrent.futures.Future[Any]) -> None:
            try:
                _answer(f)
            except BaseException as exc:  # noqa: BLE001 - a reply must always leave
                log.error("reply_failed", op=ref.op, attempt=ref.attempt, error=repr(exc))
                d.reply(None, Internal("the outcome's reply failed"))

        def _answer(f: concurrent.futures.Future[Any]) -> None:
            if f.exception() is not None:
                # never report an outcome that is not stored
                lost = Internal("the outcome could not be stored", {"reason": "fail_stop"})
                self._unregister(ref.attempt_id, lost)
                d.reply(None, lost)
                return
            self._unregister(ref.attempt_id, None, CallEnd(status, aborted))
            with self._counts_lock:
                state.counts[status] += 1
            where = {"neuron": ref.neuron, "op": ref.op, "attempt": ref.attempt, "worker": state.id}
            if status == "unknown":  # an operator must act on it: reconcile (docs/recovery.md)
                log.warning("outcome", **where, status=status, error=error)
                evidence: dict[str, Any] = {"claimed": True, "error": error}
                if aborted:
                    evidence["aborted"] = True
                self.notify(
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
                result["result"] = value
            else:
                result["error"] = error
            d.reply(result, None)

        fut.add_done_callback(committed)

    def counts(self, state: WorkerState) -> dict[str, int]:
        with self._counts_lock:
            return dict(state.counts)


def _ignore_call(act: str, seconds: float) -> None:
    """``on_act`` until the daemon sets its own."""


def _ignore_event(event: str, **about: Any) -> None:
    """``notify`` until the daemon sets its own."""


def _text(exc: BaseException) -> str:
    try:
        return str(exc)[:ERROR_TEXT_MAX]
    except Exception:  # noqa: BLE001 - an exception whose str() raises
        return type(exc).__name__


def _fault(exc: BaseException) -> str:
    """The error text recorded for a fault after the claim."""
    return f"the worker failed after the claim: {type(exc).__name__}: {_text(exc)}"[:ERROR_TEXT_MAX]
