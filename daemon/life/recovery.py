"""Crash recovery and executor receipts (contract §3.4, §3.6).

At start, under the owner lock and before serving anything but ``hello``
and ``status``, every attempt of an earlier boot that is prepared or
claimed without an outcome becomes ``unknown`` — durably, once, with
evidence ``{claimed, boot}``. No token is recreated and nothing is
redispatched.

Then receipts: an adapter's ``receipt(key)`` may resolve an unknown guarded
attempt (``source: receipt``). ``executed`` is applied for every adapter;
``not_executed`` only for adapters that ran inside the daemon process
(``in_process``), since recovery never concludes that an outside executor
has stopped; any other answer is kept as a hint in the evidence and the
attempt stays unknown for ``reconcile``. Receipts never resolve a manual
attempt. In-process receipts run before serving, one after the other, for
``START_RECEIPT_BUDGET_S`` at most in all: a receipt that hangs (a
blackholed ``receipt_url``, a stuck receipt function) must not hold
``READY=1`` past the service manager's start timeout, or every restart
would be killed in the same place and the daemon would never serve. Past
the budget the check under way goes on and those not begun join the
others, which run in the background with bounded concurrency; all count
in ``receipts_pending`` from the start.

A ``reconcile`` of an attempt whose check is pending or running waits for
it. An attempt is pending from the moment a check that will reach it is
asked for: at start, and for every attempt queued in one
``check_receipts``, not only once its own receipt runs. A receipt that
answers for an attempt resolved meanwhile (a reconcile that was committed
before the check listed it) and contradicts its outcome is never dropped:
it is kept as ``evidence.receipt_conflict`` and logged at warning
(``receipt_conflict``). A check *answers* when its answer is recorded (applied, or kept as a
hint). One that does not (the daemon began to stop, the check was
abandoned, or it raised) leaves its attempt *unanswered*: a waiting
reconcile records nothing and is refused (``overloaded``, ``data.reason:
receipt_pending``), and so is any later one until a check of that attempt
answers (``check_receipts``, or the next start). Once the stop has begun no
check answers: a ``cli`` receipt killed by the shutdown would only say
``unknown``.

A receipt is asked only with what the claim recorded (``_claims``): an
attempt claimed under another adapter than the act's current one, or whose
claim holds no adapter record, gets no automatic answer at all — whatever
its receipt says is a hint (``evidence.receipt_hint`` and
``evidence.receipt_detail``), and the attempt stays unknown. Never claimed
(``claimed: false``) and "claimed without a record" are told apart by the
claim row, not by the record. An adapter whose receipt sends the call
again (``receipt_resends``: ``http`` with ``receipt = "replay"``) is also
handed the op's args and the claim's time (`SentCall`), read just before.

The start's first step, the orphan kill, is
:class:`~wardd.daemon.life.orphan_kill.OrphanKill`; the writer units are in
:mod:`~wardd.daemon.life.recovery_units`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs
import structlog
import trio

from wardd.adapters import Adapter, Receipt, SentCall, as_receipt, has_receipt
from wardd.protocol import Overloaded, WarddError

from ..core import attempts as core
from ..dispatch.claims import ReceiptQuestion, receipt_question
from ..observe.logs import log_lines
from ..observe.tracing import NO_TRACER, Tracer
from ..store.attempt_reads import AttemptReads, Candidate, Resend
from ..store.writer import Writer
from .orphan_kill import OrphanKill
from .recovery_units import apply_receipt, mark_unknown

__all__ = ["Recovery"]

log = structlog.get_logger("wardd.recovery")
RECEIPT_CONCURRENCY = 4
# before READY=1, for the in-process receipts in all (module docstring); well
# within the shipped unit's TimeoutStartSec=90 (docs/operations.md)
START_RECEIPT_BUDGET_S = 10.0


class Recovery:
    def __init__(
        self,
        writer: Writer,
        reads: AttemptReads,
        adapters: Mapping[str, Adapter],
        boot: str,
        *,
        on_receipt: Callable[[str], None] = lambda answer: None,
        notify: Callable[..., None] = lambda event, **about: None,
        tracer: Tracer = NO_TRACER,
    ) -> None:
        self._writer = writer
        self._tracer = tracer
        self._reads = reads
        self._adapters = adapters
        self._boot = boot
        self._pending: dict[int, trio.Event] = {}  # attempt_id -> done
        self._later: list[Candidate] = []  # checks for the background (at_start)
        # checks that ended without an answer recorded (see the module docstring)
        self._unanswered: set[int] = set()
        self._stopping = False
        self.marked = 0
        self._marked_ids: set[int] = set()
        self.resolved_by_receipt = 0  # of the attempts this start marked (contract §3.8)
        self._on_receipt = on_receipt  # told each answer recorded (the metrics)
        self._notify = notify  # the notify hook's post
        self._orphans = OrphanKill(writer, reads, boot)  # the first step of at_start

    @property
    def pending(self) -> int:
        """``receipts_pending``: checks to run, running, or ended unanswered."""
        return len(self._pending.keys() | self._unanswered)

    def snapshot(self) -> dict[str, Any]:
        """Its part of ``status``."""
        return {
            "receipts_pending": self.pending,
            "recovery": {
                "marked_unknown": self.marked,
                "resolved_by_receipt": self.resolved_by_receipt,
            },
        }

    def stop(self) -> None:
        """The daemon is stopping: no check answers from now on, and every
        reconcile waiting for one is refused (``receipt_pending``)."""
        self._stopping = True
        for done in self._pending.values():
            done.set()

    def _candidates(
        self, neuron: str | None = None, states: tuple[str, ...] = ("unknown",)
    ) -> list[Candidate]:
        acts = [t for t, a in self._adapters.items() if has_receipt(a)]
        return self._reads.receipt_candidates(acts, states, neuron)

    def _in_process(self, c: Candidate) -> bool:
        return self._adapters[c.act].in_process

    async def at_start(self, nursery: trio.Nursery) -> None:
        """Mark what earlier boots left open, then run the in-process receipts
        for ``START_RECEIPT_BUDGET_S`` at most; a check still under way then
        goes on in ``nursery`` (module docstring)."""
        # Before the first await: status counts every receipt still to run
        # from the moment the daemon serves (contract §3.6), including those of
        # attempts this recovery is about to mark.
        for c in self._candidates(states=("unknown", "prepared", "running")):
            self._pending[c.attempt_id] = trio.Event()
        marks: list[tuple[dict[str, Any], dict[str, Any]]] = []
        self._marked_ids = set(await self._orphans.run(marks))
        self._marked_ids.update(await self._writer.run(mark_unknown(self._boot, marks)))
        self.marked = len(self._marked_ids)
        # one line per attempt: an operator reconciles each (docs/recovery.md)
        log_lines(log, "warning", "marked_unknown", ({**w, **e} for w, e in marks))
        for where, evidence in marks:
            self._notify("attempt_unknown", **where, evidence=evidence)
        self._trace_marks(marks)
        cands = self._candidates()
        ids = {c.attempt_id for c in cands}
        for attempt_id in [i for i in self._pending if i not in ids]:
            self._pending.pop(attempt_id).set()
        for c in cands:
            self._pending.setdefault(c.attempt_id, trio.Event())
        self._later = [c for c in cands if not self._in_process(c)]
        first = [c for c in cands if self._in_process(c)]
        finished = trio.Event()
        nursery.start_soon(self._in_turn, first, finished)
        with trio.move_on_after(START_RECEIPT_BUDGET_S):
            await finished.wait()
        if not finished.is_set():
            # no await from here to background_receipts' start: each check is
            # run once, by _in_turn (the one under way) or in the background
            left = [c for c in cands if self._in_process(c) and c.attempt_id in self._pending]
            log.warning("receipts_deferred", checks=len(left), budget_s=START_RECEIPT_BUDGET_S)
            self._later.extend(first)
            first.clear()

    def _trace_marks(self, marks: list[tuple[dict[str, Any], dict[str, Any]]]) -> None:
        """A ``wardd.mark_unknown`` span per attempt marked, linked to its
        dispatch span (read only when tracing is on)."""
        if not self._tracer.enabled or not self._marked_ids:
            return
        try:
            self._emit_marks(marks)
        except Exception as exc:  # noqa: BLE001 - the traces never change a recovery
            log.error("trace_read_failed", error=repr(exc))

    def _emit_marks(self, marks: list[tuple[dict[str, Any], dict[str, Any]]]) -> None:
        claimed = {(w["neuron"], w["op"], w["attempt"]): e.get("claimed") for w, e in marks}
        for at in self._reads.attempt_traces(sorted(self._marked_ids)):
            facts: dict[str, str | bool] = {"wardd.outcome": "unknown"}
            was = claimed.get((at.neuron, at.op, at.attempt))
            if isinstance(was, bool):
                facts["wardd.claimed"] = was
            self._tracer.recovered("mark_unknown", at, facts)

    async def _in_turn(self, queue: list[Candidate], finished: trio.Event) -> None:
        """Check ``queue`` one after the other; what at_start takes out of it
        meanwhile is not checked here."""
        while queue:
            await self._check(queue.pop(0))
        finished.set()

    async def background_receipts(self) -> None:
        limiter = trio.CapacityLimiter(RECEIPT_CONCURRENCY)
        async with trio.open_nursery() as nursery:
            for c in self._later:
                nursery.start_soon(self._check_limited, c, limiter)

    async def _check_limited(self, c: Candidate, limiter: trio.CapacityLimiter) -> None:
        async with limiter:
            await self._check(c)

    async def _check(self, c: Candidate) -> bool:
        adapter = self._adapters[c.act]
        done = self._pending.setdefault(c.attempt_id, trio.Event())
        answered = False
        try:
            if self._stopping:
                return False
            question = receipt_question(adapter, c.claimed, c.claim_info)
            resend = self._reads.resend(c.attempt_id) if adapter.receipt_resends else None
            refusal = None if resend is None else _resend_refusal(resend)
            if refusal is not None:  # sent again, the request could act now: never
                receipt = Receipt("unknown", detail=refusal)
            else:
                sent = None if resend is None else resend.sent
                receipt = await trio.to_thread.run_sync(
                    _receipt, adapter, c, question, sent, abandon_on_cancel=True
                )
            if self._stopping:  # a receipt the shutdown killed says only "unknown"
                return False
            try:
                effect: core.ReceiptEffect = await self._writer.run(
                    apply_receipt(c, receipt, adapter.in_process, question.binding)
                )
            except WarddError as err:
                log.error("receipt_not_recorded", op=c.op, attempt=c.attempt, error=err.message)
                return False
            answered = True
            self._on_receipt(receipt.answer)
            about = {"neuron": c.neuron, "op": c.op, "attempt": c.attempt, "answer": receipt.answer}
            log.info("receipt", **about, applicable=question.binding, resolved=effect.resolved)
            if effect.conflict is not None:  # contract §3.4: never dropped, and said out loud
                out = effect.conflict
                log.warning("receipt_conflict", **about, status=out.status.value, source=out.source)
            if effect.resolved:
                self._trace_resolved("receipt", c.neuron, c.op, c.attempt, receipt.answer)
                detail = {"detail": receipt.detail} if receipt.detail else {}
                self._notify(
                    "resolved_by_receipt",
                    neuron=c.neuron,
                    op=c.op,
                    attempt=c.attempt,
                    act=c.act,
                    evidence={"answer": receipt.answer, **detail},
                )
            if effect.resolved and c.attempt_id in self._marked_ids:
                self.resolved_by_receipt += 1
            return effect.resolved
        finally:
            if answered:
                self._unanswered.discard(c.attempt_id)
            else:
                self._unanswered.add(c.attempt_id)
            self._pending.pop(c.attempt_id, None)
            done.set()

    def _trace_resolved(
        self, how: str, neuron: str, op: str, attempt: int, answer: str, outcome: str | None = None
    ) -> None:
        """A ``wardd.receipt`` or ``wardd.reconcile`` span for an unknown
        attempt resolved, linked to its dispatch span."""
        if not self._tracer.enabled:
            return
        try:
            at = self._reads.attempt_trace_of(neuron, op, attempt)
        except Exception as exc:  # noqa: BLE001 - the traces never change a resolution
            log.error("trace_read_failed", error=repr(exc))
            return
        if at is None:
            return
        if outcome is None:  # a receipt's answer, applied
            outcome = "succeeded" if answer == "executed" else answer
        facts: dict[str, str | bool] = {
            "wardd.answer": answer,
            "wardd.source": how,
            "wardd.outcome": outcome,
        }
        self._tracer.recovered(how, at, facts)

    def traced_unknown(self, neuron: str, op: str, attempt: int) -> bool:
        """Whether tracing is on and the attempt is unknown now (a reconcile
        of it then makes a span); False on any failure to tell."""
        if not self._tracer.enabled:
            return False
        try:
            attempt_id = self._reads.attempt_id(neuron, op, attempt)
            state = None if attempt_id is None else self._reads.attempt_state(attempt_id)
        except Exception as exc:  # noqa: BLE001 - the traces never change a reconcile
            log.error("trace_read_failed", error=repr(exc))
            return False
        return state is not None and state[0] == "unknown"

    def reconciled(self, neuron: str, op: str, attempt: int, status: str) -> None:
        """A reconcile resolved an unknown attempt: its span (when tracing is on)."""
        self._trace_resolved("reconcile", neuron, op, attempt, status, status)

    async def check_receipts(self, neuron: str) -> dict[str, int]:
        """``check_receipts``: every unknown guarded attempt of ``neuron``
        whose adapter has a receipt is asked, one after the other.

        Each counts as pending from the moment the check is asked for, not
        only once its own receipt runs (contract §3.4): a reconcile of an
        attempt queued behind a slow receipt waits for its turn, so the
        receipt's ``executed`` is never overridden by it. An attempt another
        check is already on (the start's background checks, another
        ``check_receipts``) is left to it and counted as it decided."""
        cands = self._candidates(neuron)
        # before the first await: nothing can come between the list and its marks
        theirs = {
            c.attempt_id: self._pending[c.attempt_id]
            for c in cands
            if c.attempt_id in self._pending
        }
        mine = {c.attempt_id: trio.Event() for c in cands if c.attempt_id not in theirs}
        self._pending.update(mine)
        resolved = 0
        try:
            for c in cands:
                if c.attempt_id in mine:
                    resolved += await self._check(c)
        finally:
            for attempt_id, done in mine.items():
                if self._pending.get(attempt_id) is done:  # never reached: cut short
                    del self._pending[attempt_id]
                    self._unanswered.add(attempt_id)
                    done.set()
        for attempt_id, done in theirs.items():  # count what the other check decided
            await done.wait()
            record = self._reads.attempt_state(attempt_id)
            resolved += record is None or record[0] != "unknown"
        return {"checked": len(cands), "resolved": resolved}

    async def wait_for_receipt(self, neuron: str, op: str, attempt: int) -> None:
        """contract §3.4: a reconcile waits for a pending receipt check first, and
        is refused (``overloaded``, ``receipt_pending``) if no check of its
        attempt has answered: the check was abandoned (the daemon is
        stopping) or raised."""
        if not self._pending and not self._unanswered:
            return
        attempt_id = self._reads.attempt_id(neuron, op, attempt)
        if attempt_id is None:
            return  # the reconcile itself answers unknown_operation
        # a check asked for while this one waited (it may find the effect) is waited for too
        while (done := self._pending.get(attempt_id)) is not None and not self._stopping:
            log.info("reconcile_waiting", op=op, attempt=attempt)
            await done.wait()
        if attempt_id in self._pending or attempt_id in self._unanswered:
            raise Overloaded(
                "the attempt's receipt check did not finish; send the reconcile again "
                "once a check has answered (check_receipts, or after the restart)",
                {"reason": "receipt_pending"},
            )


def _resend_refusal(r: Resend) -> str | None:
    """Why the call must not be sent again now (its op could not run it), or None."""
    why = core.resend_refusal(r.cancelled, r.grant, r.exhausted, r.prog_state, r.act)
    if why is None:
        return None
    return f"the request was not sent again: the op could not run its act now ({why})"


def _receipt(
    adapter: Adapter, c: Candidate, question: ReceiptQuestion, sent: SentCall | None
) -> Receipt:
    """Ask the adapter (on a thread); a hint-only answer's detail says why it is one.
    ``sent`` is what the daemon holds of the call, for an adapter whose receipt
    sends it again (``receipt_resends``); None for any other."""
    got = _ask(adapter, c, question.claim_info, sent, question.traceparent)
    if question.binding:
        return got
    detail = question.why if not got.detail else f"{question.why}; {got.detail}"
    return attrs.evolve(got, detail=detail)


def _ask(
    adapter: Adapter,
    c: Candidate,
    claim_info: Any,
    sent: SentCall | None,
    traceparent: str | None,
) -> Receipt:
    try:
        # the dispatch span the claim kept, for a receipt that passes it on
        got = adapter.receipt(c.key, claim_info, sent, traceparent=traceparent)
    except Exception as exc:  # noqa: BLE001 - a failing receipt is an unknown answer
        log.warning(
            "receipt_failed", neuron=c.neuron, op=c.op, attempt=c.attempt, error=type(exc).__name__
        )
        return Receipt("unknown", detail=f"the receipt raised {type(exc).__name__}")
    return as_receipt(got)
