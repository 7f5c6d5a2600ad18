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
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Collection, Mapping
from typing import Any

import attrs
import structlog
import trio

from wardd.adapters import Adapter, Receipt, SentCall, as_receipt, has_receipt
from wardd.adapters._hold import hold
from wardd.protocol import OpState, Overloaded, WarddError

from ..core import attempts as core
from ..dispatch.claims import ReceiptQuestion, receipt_question
from ..observe.logs import log_lines
from ..observe.tracing import NO_TRACER, Tracer
from ..store import load
from ..store.apply import apply
from ..store.encoding import now, wire_safe
from ..store.marks import Mark, open_attempts, write_marks
from ..store.reads import Candidate, Reads, Resend
from ..store.writer import Writer
from .orphans import (
    any_marked,
    find_orphans,
    find_servers,
    kill_groups,
    stop_groups,
    wait_gone,
)

__all__ = ["Recovery"]

log = structlog.get_logger("wardd.recovery")
RECEIPT_CONCURRENCY = 4
# before READY=1, for the in-process receipts in all (module docstring); well
# within the shipped unit's TimeoutStartSec=90 (docs/operations.md)
START_RECEIPT_BUDGET_S = 10.0
ORPHAN_EXIT_WAIT_S = 5.0  # a SIGKILLed group is gone well within this
# the test hook (adapters/_hold.py): a start waits at `orphans_recorded` (the
# orphans stopped and their kill committed, not yet killed) and at
# `orphans_killed` (killed, the other marks not yet committed)
HOLD_ENV = "WARDD_TEST_RECOVERY_HOLD"


def mark_unknown(
    boot: str,
    marks: list[tuple[dict[str, Any], dict[str, Any]]] | None = None,
    orphans: Collection[int] = frozenset(),
    only: Collection[int] | None = None,
) -> Any:
    """The start-time unit: earlier boots' open attempts become unknown.

    Each marked attempt is also appended to ``marks``, where it is (neuron,
    op, attempt, act) and its evidence, for the log and the notify hook
    once the unit is committed. An attempt in
    ``orphans`` had a program that outlived its boot, killed at this start
    (``_orphans``): its evidence says ``orphan_killed: true``. ``only``
    (None: all) limits the marks to those attempt ids. Thousands
    after a crash: the core decides each attempt from its row's figures
    and the marks are written set-wise (``store/marks.py``).
    """

    def unit(conn: sqlite3.Connection) -> list[int]:
        decided = []
        for o in open_attempts(conn, boot):
            if only is not None and o.id not in only:
                continue
            op_to = core.unknown_mark(
                o.state,
                o.attempt == o.op_attempts,
                o.op_state,
                o.cancelled,
                o.op_state == OpState.CONSUMED,
            )
            evidence = core.unknown_evidence(o.claimed, o.boot, o.id in orphans)
            decided.append(Mark(o, op_to, evidence))
            if marks is not None:
                where = {"neuron": o.neuron, "op": o.op, "attempt": o.attempt, "act": o.act}
                marks.append((where, evidence))
        write_marks(conn, decided)
        return [m.open.id for m in decided]

    return unit


def record_orphans(
    boot: str, attempt_ids: Collection[int], marks: list[tuple[dict[str, Any], dict[str, Any]]]
) -> Any:
    """The unit committed before an orphan is killed (its groups are
    stopped already): each attempt in ``attempt_ids`` says ``orphan_killed:
    true``. One an earlier boot left open is marked unknown now, as
    :func:`mark_unknown` marks it (and appended to ``marks``); one already
    unknown gets it added to its evidence (``core.orphan_killed``). A start
    SIGKILLed after this commit loses nothing: the fact is durable, and the
    stopped program is found and killed by the next start. Returns the ids
    marked."""
    mark = mark_unknown(boot, marks, attempt_ids, only=attempt_ids)

    def unit(conn: sqlite3.Connection) -> list[int]:
        marked: list[int] = mark(conn)
        for attempt_id in sorted(set(attempt_ids) - set(marked)):
            op_id = load.op_id_of_attempt(conn, attempt_id)
            if op_id is not None:
                apply(conn, core.orphan_killed(load.op_attempts(conn, op_id), attempt_id))
        return marked

    return unit


def apply_receipt(c: Candidate, receipt: Receipt, in_process: bool, binding: bool = True) -> Any:
    """Record a receipt's answer: applied when ``binding`` allows (contract §3.4),
    otherwise kept as a hint in the evidence (answer and detail); for an
    attempt resolved meanwhile, a contradicting answer is kept as
    ``receipt_conflict``. The unit returns a :class:`core.ReceiptEffect`."""
    value, why = wire_safe(receipt.value)
    applies = binding and (receipt.answer == "executed" or in_process)

    def unit(conn: sqlite3.Connection) -> core.ReceiptEffect:
        op_id = load.op_id_of_attempt(conn, c.attempt_id)
        if op_id is None:
            return core.ReceiptEffect()
        view = load.op_attempts(conn, op_id)
        decision = core.receipt(
            view,
            c.attempt_id,
            receipt.answer,
            value,
            why,
            receipt.detail,
            applies=applies,
            at=now(),
        )
        effect: core.ReceiptEffect = apply(conn, decision)
        return effect

    return unit


class Recovery:
    def __init__(
        self,
        writer: Writer,
        reads: Reads,
        adapters: Mapping[str, Adapter],
        boot: str,
        *,
        tracer: Tracer = NO_TRACER,
    ) -> None:
        self._writer = writer
        self._tracer = tracer
        self._reads = reads
        self._adapters = adapters
        self._boot = boot
        self._pending: dict[int, trio.Event] = {}  # attempt_id -> done
        # checks that ended without an answer recorded (see the module docstring)
        self._unanswered: set[int] = set()
        self._stopping = False
        self.marked = 0
        self._marked_ids: set[int] = set()
        self.resolved_by_receipt = 0  # of the attempts this start marked (contract §3.8)
        self.on_receipt: Callable[[str], None] = _ignore  # told each answer recorded
        self.notify: Callable[..., None] = _ignore_event  # the notify hook's post
        self._hold = os.environ.get(HOLD_ENV) or None  # the test hook (HOLD_ENV)

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
        return bool(getattr(self._adapters[c.act], "in_process", False))

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
        self._marked_ids = set(await self._kill_orphans(marks))
        self._marked_ids.update(await self._writer.run(mark_unknown(self._boot, marks)))
        self.marked = len(self._marked_ids)
        # one line per attempt: an operator reconciles each (docs/recovery.md)
        log_lines(log, "warning", "marked_unknown", ({**w, **e} for w, e in marks))
        for where, evidence in marks:
            self.notify("attempt_unknown", **where, evidence=evidence)
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

    async def _kill_orphans(self, marks: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[int]:
        """Kill what an earlier boot's claimed calls left running (``_orphans``):
        their ``cli`` programs and the ``mcp`` servers of their boots. Their
        groups are stopped, the fact committed (``record_orphans``, which marks
        their attempts and appends to ``marks``), then they are killed. The
        attempt ids marked."""
        # no process carries a key (the usual start): no claimed call to list
        if not await trio.to_thread.run_sync(any_marked):
            return []
        calls = self._reads.claimed_calls_of_earlier_boots(self._boot)
        by_key = {c.key: c for c in calls}
        if not by_key:
            return []
        wanted = {k: c.boot for k, c in by_key.items()}  # ours: the key and its claim's boot
        found = await trio.to_thread.run_sync(find_orphans, wanted)
        servers = await trio.to_thread.run_sync(find_servers, {c.boot for c in calls})
        # stopped first: from here on an orphan does nothing until it is killed
        programs = {key: pids for key, pids in found.items() if stop_groups(pids)}
        served = {ab: pids for ab, pids in servers.items() if stop_groups(pids)}
        ids = {by_key[key].attempt_id for key in programs}
        ids |= {c.attempt_id for c in calls if (c.act, c.boot) in served}
        if not ids:
            return []
        marked: list[int] = await self._writer.run(record_orphans(self._boot, ids, marks))
        await self._held("orphans_recorded")
        for key, pids in programs.items():
            call = by_key[key]
            await self._kill_logged(pids, neuron=call.neuron, op=call.op, attempt=call.attempt)
        for (act, boot), pids in served.items():
            await self._kill_logged(pids, act=act, boot=boot)
        await self._held("orphans_killed")
        return marked

    async def _held(self, point: str) -> None:
        """The test hook (``HOLD_ENV``): nothing unless a test named a directory."""
        if self._hold is not None:
            await trio.to_thread.run_sync(hold, self._hold, point)

    async def _kill_logged(self, pids: list[int], **where: Any) -> bool:
        """Kill the groups of ``pids`` (stopped, their kill recorded) and wait
        for them gone (killed means gone before anything else is marked or
        served); whether any was killed."""
        groups = kill_groups(pids)
        if not groups:
            return False
        left = await trio.to_thread.run_sync(wait_gone, pids, ORPHAN_EXIT_WAIT_S)
        log.warning(
            "orphan_killed",
            **where,
            pids=pids,
            groups=groups,
            **({"still_exiting": left} if left else {}),
        )
        return True

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
            resend = self._reads.resend(c.attempt_id) if _resends(adapter) else None
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
            in_process = bool(getattr(adapter, "in_process", False))
            try:
                effect: core.ReceiptEffect = await self._writer.run(
                    apply_receipt(c, receipt, in_process, question.binding)
                )
            except WarddError as err:
                log.error("receipt_not_recorded", op=c.op, attempt=c.attempt, error=err.message)
                return False
            answered = True
            self.on_receipt(receipt.answer)
            about = {"neuron": c.neuron, "op": c.op, "attempt": c.attempt, "answer": receipt.answer}
            log.info("receipt", **about, applicable=question.binding, resolved=effect.resolved)
            if effect.conflict is not None:  # contract §3.4: never dropped, and said out loud
                out = effect.conflict
                log.warning("receipt_conflict", **about, status=out.status.value, source=out.source)
            if effect.resolved:
                self._trace_resolved("receipt", c.neuron, c.op, c.attempt, receipt.answer)
                detail = {"detail": receipt.detail} if receipt.detail else {}
                self.notify(
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


def _ignore(answer: str) -> None:
    """``on_receipt`` until the daemon sets its own."""


def _ignore_event(event: str, **about: Any) -> None:
    """``notify`` until the daemon sets its own."""


def _resends(adapter: Adapter) -> bool:
    """The adapter's receipt sends the call again (``receipt_resends``)."""
    return getattr(adapter, "receipt_resends", False) is True


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
        fn = adapter.receipt  # type: ignore[attr-defined]
        # the dispatch span the claim kept, for a receipt that passes it on
        traced = traceparent is not None and getattr(adapter, "receipt_traced", False) is True
        kw = {"traceparent": traceparent} if traced else {}
        if _resends(adapter):
            got = fn(c.key, claim_info, sent, **kw)
        elif kw:
            got = fn(c.key, claim_info, **kw)
        elif hasattr(adapter, "claim_info"):
            got = fn(c.key, claim_info)
        else:
            got = fn(c.key)
    except Exception as exc:  # noqa: BLE001 - a failing receipt is an unknown answer
        log.warning(
            "receipt_failed", neuron=c.neuron, op=c.op, attempt=c.attempt, error=type(exc).__name__
        )
        return Receipt("unknown", detail=f"the receipt raised {type(exc).__name__}")
    return as_receipt(got)
