"""Attempts and ops under any sequence of the core's decisions (contract §2, §3.2-§3.6).

A hypothesis state machine drives one neuron, one prog and a few ops through
the pure core's decisions, applying each decision's changes to an in-memory
model of the records (the store's part, reduced to dicts: this tests the
core's decisions, not the database). After every step the model must obey
the op-state table of contract §3.3, hold at most one open attempt per op,
never follow a success with another attempt, and have moved every attempt
only along ``ATTEMPT_MOVES`` - an unknown one only by a receipt or a
reconcile. ``status``'s counts, noted from the same changes as the store's
writer notes them (daemon/store/counters.py), must equal the model's ops by
state and unknown attempts counted afresh.
"""

from __future__ import annotations

import itertools
from typing import Any

import attrs
import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from tests.unit._op_table import ACT, AT, contract_op_state
from tests.unit._world import descriptor_of
from wardd.daemon.core import changes as ch
from wardd.daemon.core.attempts import (
    CONTRADICTS,
    claim,
    invoke_claim,
    manual_take,
    mark_unknown,
    outcome,
    prepare,
    receipt,
    unknown_mark,
    void,
)
from wardd.daemon.core.budget import exhaust, reserve_steps, set_step_limit, settle_steps
from wardd.daemon.core.call import Answered
from wardd.daemon.core.call import claim as call_claim
from wardd.daemon.core.ops import cancel, consume, rebind, reconcile, submit
from wardd.daemon.core.records import (
    Attempt,
    AttemptKind,
    AttemptRef,
    BootContext,
    Grant,
    Neuron,
    Op,
    OpView,
    Outcome,
    Prog,
    ProgView,
    Reservation,
)
from wardd.daemon.core.root import advance_epoch, bind_placement, set_grant, set_prog_state
from wardd.daemon.core.states import ATTEMPT_MOVES
from wardd.daemon.store.counters import Counters, Note, note
from wardd.protocol import (
    TOKEN_VOID_REASONS,
    AttemptState,
    Internal,
    OpState,
    ProgState,
    WarddError,
)

A = AttemptState
NAMES = ("op-a", "op-b", "op-c", "op-d")
#: which attempt of an op a rule names: mostly the latest
PICK = st.sampled_from([-1, -1, -1, 0, 1, 2])
OPEN = frozenset({A.PREPARED, A.RUNNING, A.UNKNOWN})


def _descriptor(boot: str) -> dict[str, Any]:
    """A descriptor this daemon advertises in boot ``boot`` (its profile supported)."""
    return descriptor_of(boot, {ACT: 8})


def _digest(boot: str) -> str:
    return f"digest-of-{boot}"


def _marked(view: Any, attempt: Any, claimed: bool) -> ch.Decision:
    """The start's mark of ``attempt``, and the same told in figures
    (``unknown_mark``, what the start's set-wise unit asks): they agree."""
    op = view.op
    decision = mark_unknown(op, attempt, claimed=claimed, orphan_killed=False)[0]
    to = unknown_mark(
        attempt.state, attempt.attempt == op.attempts, op.state, op.cancelled, op.consumed
    )
    set_ops = [c for c in decision.changes if isinstance(c, ch.SetOp)]
    assert (set_ops[0].fields.get("state") if set_ops else None) == to
    return decision


class Records:
    """The model of the store: the records as dicts, changed only by applying
    a decision's changes. It checks each attempt move as it applies it."""

    def __init__(self) -> None:
        self.boot = "boot-1"
        self.neuron = Neuron(
            id=1,
            neuron="n" * 64,
            epoch=1,
            policy_version=1,
            placement_generation=1,
            placement=_descriptor(self.boot),
            placement_digest=_digest(self.boot),
        )
        self.prog = Prog(
            id=1,
            neuron_id=1,
            prog="p",
            state=ProgState.ACTIVE,
            state_version=1,
            step_limit=10,
            steps_used=0,
            steps_reserved=0,
            exhausted=False,
            grant=Grant(frozenset({ACT}), True),
            reservation_seq=1,
        )
        self.ops: dict[int, Op] = {}
        self.names: dict[str, int] = {}
        self.attempts: dict[tuple[int, int], Attempt] = {}
        self.outcomes: dict[tuple[int, int], Outcome] = {}
        self.claims: set[tuple[int, int]] = set()
        self.reservations: dict[str, Reservation] = {}
        self.events: list[ch.AppendEvent] = []
        self.ids = itertools.count(1)
        # (op id, attempt) -> the rules that moved it, in order
        self.moves: dict[tuple[int, int], list[tuple[AttemptState, AttemptState, str]]] = {}

    # -- views, as the store loads them ---------------------------------------------------

    def ctx(self) -> BootContext:
        return BootContext(
            boot=self.boot,
            network="testnet",
            advertised={_digest(self.boot): _descriptor(self.boot)},
            act_bounds={ACT: 8},
        )

    def op_attempts(self, op_id: int) -> tuple[Attempt, ...]:
        return tuple(a for (o, _n), a in sorted(self.attempts.items()) if o == op_id)

    def latest(self, op_id: int) -> Attempt | None:
        found = self.op_attempts(op_id)
        return found[-1] if found else None

    def op_view(self, name: str) -> OpView:
        op_id = self.names.get(name)
        op = None if op_id is None else self.ops[op_id]
        return OpView(
            neuron=self.neuron,
            name=name,
            op=op,
            prog=self.prog if op is not None else None,
            attempts=() if op_id is None else self.op_attempts(op_id),
            outcomes={n: o for (o_id, n), o in self.outcomes.items() if o_id == op_id},
            next_attempt_id=next(self.ids),
        )

    def prepared_pairs(self) -> tuple[tuple[Op, Attempt], ...]:
        pairs = []
        for op in self.ops.values():
            latest = self.latest(op.id)
            if latest is not None and latest.state == A.PREPARED:
                pairs.append((op, latest))
        return tuple(pairs)

    def prog_view(self, reservation: str | None = None) -> ProgView:
        open_ops = [o for o in self.ops.values() if not o.terminal]
        open_attempts = [a for a in self.attempts.values() if a.state in (A.RUNNING, A.UNKNOWN)]
        return ProgView(
            neuron=self.neuron,
            name="p",
            prog=self.prog,
            prepared=self.prepared_pairs(),
            reservation=self.reservations.get(reservation) if reservation else None,
            open_ops=len(open_ops),
            open_attempts=len(open_attempts),
        )

    # -- applying a decision --------------------------------------------------------------

    def apply(self, decision: ch.Decision, rule: str) -> None:
        changes = decision.changes
        for c in changes:
            if isinstance(c, ch.SetAttempt):
                self._set_attempt(c, changes, rule)
            elif isinstance(c, ch.NewOp):
                assert c.op not in self.names, "an op id names one op for ever"
                self.names[c.op] = c.id
                self.ops[c.id] = Op(
                    id=c.id,
                    neuron_id=c.neuron_id,
                    op=c.op,
                    prog_id=c.prog_id,
                    act=c.act,
                    args=c.args,
                    state=OpState.PENDING,
                    attempts=0,
                    cancelled=False,
                    consumed=False,
                    result_epoch=None,
                )
            elif isinstance(c, ch.SetOp):
                old = self.ops[c.op_id]
                assert not (old.cancelled and c.fields.get("cancelled") is False), "uncancelled"
                assert not (old.consumed and c.fields.get("consumed") is False), "unconsumed"
                self.ops[c.op_id] = attrs.evolve(old, **c.fields)
            elif isinstance(c, ch.NewAttempt):
                key = (c.op_id, c.attempt)
                assert key not in self.attempts, "an attempt number is used once"
                self.attempts[key] = Attempt(
                    id=c.id,
                    op_id=c.op_id,
                    attempt=c.attempt,
                    kind=c.kind,
                    epoch=c.epoch,
                    policy_version=c.policy_version,
                    placement_generation=c.placement_generation,
                    digest=c.digest,
                    worker=c.worker,
                    boot=c.boot,
                    state=c.state,
                    reason=None,
                    evidence=c.evidence,
                    ever_unknown=c.state == A.UNKNOWN,
                )
                self.moves[key] = [(c.state, c.state, rule)]
            elif isinstance(c, ch.NewClaim):
                key = (c.op_id, c.attempt)
                assert key not in self.claims, "one claim per attempt"
                self.claims.add(key)
            elif isinstance(c, ch.NewOutcome):
                key = (c.op_id, c.attempt)
                assert key not in self.outcomes, "one definite outcome per attempt"
                a = self.attempts[key]
                self.outcomes[key] = Outcome(a.id, c.status, c.value, c.error, c.source)
            elif isinstance(c, ch.SetNeuron):
                self.neuron = attrs.evolve(self.neuron, **c.fields)
            elif isinstance(c, ch.SetProg):
                fields = dict(c.fields)
                acts = fields.pop("grant_acts", None)
                enabled = fields.pop("grant_enabled", None)
                p = attrs.evolve(self.prog, **fields)
                if acts is not None or enabled is not None:
                    assert acts is not None and enabled is not None
                    p = attrs.evolve(p, grant=Grant(frozenset(acts), enabled))
                p = attrs.evolve(
                    p,
                    steps_reserved=p.steps_reserved + c.reserved_delta,
                    state_version=p.state_version + (1 if c.bump_version else 0),
                )
                assert p.steps_reserved >= 0
                self.prog = p
            elif isinstance(c, ch.NewReservation):
                self.reservations[c.reservation] = Reservation(
                    next(self.ids), c.prog_id, c.reservation, c.steps, "open", None, c.number
                )
            elif isinstance(c, ch.SetReservation):
                (name,) = [k for k, r in self.reservations.items() if r.id == c.reservation_id]
                self.reservations[name] = attrs.evolve(
                    self.reservations[name], state=c.state, settled=c.settled
                )
            elif isinstance(c, ch.AppendEvent):
                self.events.append(c)
            else:  # pragma: no cover - a change this model does not know
                raise AssertionError(f"unexpected change {c!r}")

    def _set_attempt(self, c: ch.SetAttempt, changes: tuple[ch.Change, ...], rule: str) -> None:
        key = (c.op_id, c.attempt)
        old = self.attempts[key]
        if old.state == A.UNKNOWN:
            assert rule in ("receipt", "reconcile"), (
                f"unknown attempt {key} changed by {rule!r} (only a receipt or reconcile may)"
            )
        if c.state is None:
            assert c.evidence is not None  # a receipt's hint
            self.attempts[key] = attrs.evolve(old, evidence=c.evidence)
            return
        kinds = {
            e.kind for e in changes if isinstance(e, ch.AppendEvent) and (e.op_id, e.attempt) == key
        }
        allowed = ATTEMPT_MOVES.get((old.state, c.state), frozenset())
        assert kinds & allowed, f"move {old.state} -> {c.state} by {kinds} is not in the table"
        self.moves[key].append((old.state, c.state, rule))
        self.attempts[key] = attrs.evolve(
            old,
            state=c.state,
            reason=c.reason if c.reason is not None else old.reason,
            evidence=c.evidence if c.evidence is not None else old.evidence,
            ever_unknown=old.ever_unknown or c.state == A.UNKNOWN,
        )


def _attempt_pick(records: Records, name: str, index: int) -> Attempt | None:
    op_id = records.names.get(name)
    if op_id is None:
        return None
    found = records.op_attempts(op_id)
    return found[index % len(found)] if found else None


class CoreMachine(RuleBasedStateMachine):
    """One neuron, one prog, four op ids; every rule is one core decision."""

    def __init__(self) -> None:
        super().__init__()
        self.r = Records()
        self.tokens: list[AttemptRef] = []  # the daemon's memory: gone at a restart
        self.counters = Counters()  # status's counts, as the writer keeps them

    @initialize()
    def start(self) -> None:
        """Three ops exist from the start (the fourth is left to ``submit``)."""
        self.r = Records()
        self.tokens = []
        self.counters = Counters()
        for name in NAMES[:3]:
            self.submit(name, b"x")

    def decide(self, rule: str, call: Any, *, internal_ok: bool = False) -> Any:
        """Run one decision; apply it, or check that its refusal is a
        documented one (``internal`` only where the rule asks for an illegal
        move on purpose)."""
        try:
            decision = call()
        except WarddError as e:
            assert internal_ok or not isinstance(e, Internal), f"{rule}: {e!r}"
            return e
        applied = decision[0] if isinstance(decision, tuple) else decision  # settle_steps
        self.r.apply(applied, rule)
        self.count(applied)
        return decision

    def count(self, decision: ch.Decision) -> None:
        """The decision's notes, added as the writer adds a committed batch's."""
        notes: list[Note] = []
        note(notes, decision.changes)
        self.counters.add(notes)

    # -- ops -------------------------------------------------------------------------------

    @rule(name=st.sampled_from(NAMES), args=st.sampled_from([b"x", b"x", b"", b"x" * 9]))
    def submit(self, name: str, args: bytes) -> None:
        r = self.r
        self.decide(
            "submit",
            lambda: submit(r.prog_view(), r.op_view(name), name, ACT, args, {ACT: 8}, next(r.ids)),
        )

    @rule(name=st.sampled_from(NAMES), off=st.sampled_from([0, 0, 0, 0, 0, 0, 0, 0, 0, 1]))
    def prepare(self, name: str, off: int) -> None:
        r = self.r
        view = r.op_view(name)
        number = (view.op.attempts if view.op else 0) + 1 + off
        p = {
            "op": name,
            "expected_attempt": number,
            "placement_generation": r.neuron.placement_generation,
            "expected_epoch": r.neuron.epoch,
        }
        out = self.decide("prepare", lambda: prepare(r.ctx(), view, p))
        if isinstance(out, ch.Decision):
            self.tokens.append(out.reply)

    @rule(name=st.sampled_from(NAMES))
    def invoke(self, name: str) -> None:
        r = self.r
        view = r.op_view(name)
        p = {
            "op": name,
            "expected_attempt": (view.op.attempts if view.op else 0) + 1,
            "placement_generation": r.neuron.placement_generation,
            "expected_epoch": r.neuron.epoch,
        }
        got = self.decide(
            "invoke",
            lambda: invoke_claim(r.ctx(), view, p, worker="w0", claim_info=None, stopping=False),
        )
        if isinstance(got, ch.Decision):
            self.check_claimed(got.reply)

    @rule(name=st.sampled_from(NAMES), args=st.sampled_from([b"x", b"x", b"x", b""]))
    def call(self, name: str, args: bytes) -> None:
        """contract §3.2.6: submit and invoke in one decision; an op with an
        attempt that reached a claim is answered, never run again."""
        r = self.r
        before = r.op_view(name)
        claimed_before = [a for a in before.attempts if a.state != A.VOID]
        p = {"prog": "p", "op": name, "act": ACT, "args": args}
        got = self.decide(
            "call",
            lambda: call_claim(
                r.ctx(),
                r.prog_view(),
                r.op_view(name),
                p,
                next_op_id=next(r.ids),
                next_attempt_id=next(r.ids),
                worker="w0",
                claim_info=None,
                stopping=False,
            ),
        )
        if not isinstance(got, ch.Decision):
            return
        if isinstance(got.reply, Answered):
            assert got.changes == () and got.reply.result["already"] is True
        elif isinstance(got.reply, AttemptRef):
            assert not claimed_before, "a call ran an op that had already run"
            self.check_claimed(got.reply)

    @rule(name=st.sampled_from(NAMES))
    def manual(self, name: str) -> None:
        r = self.r
        view = r.op_view(name)
        p = {"op": name, "expected_attempt": (view.op.attempts if view.op else 0) + 1}
        self.decide("manual_take", lambda: manual_take(r.ctx(), view, p))

    @precondition(lambda self: self.tokens)
    @rule(index=st.integers(0, 20), stopping=st.booleans(), keep=st.booleans())
    def claim(self, index: int, stopping: bool, keep: bool) -> None:
        """execute with a token; ``keep``: the token is presented again later
        (a copied token, which the core must refuse)."""
        ref = self.tokens[index % len(self.tokens)]
        if not keep or stopping:
            self.tokens.remove(ref)
        r = self.r
        before = r.attempts.get((ref.op_id, ref.attempt))
        got = self.decide(
            "claim",
            lambda: claim(
                r.op_view(ref.op), ref, worker="w0", boot=r.boot, claim_info=None, stopping=stopping
            ),
        )
        if isinstance(got, ch.Decision) and got.refusal is None:
            assert before is not None and before.state == A.PREPARED and not stopping
            self.check_claimed(got.reply)
        elif isinstance(got, ch.Decision):  # token_void: nothing runs; a prepared one is void now
            assert got.refusal is not None and got.refusal.code == "token_void"
            assert before is not None
            after = r.attempts[(ref.op_id, ref.attempt)]
            assert after.state == (A.VOID if before.state == A.PREPARED else before.state)

    def check_claimed(self, ref: AttemptRef) -> None:
        """contract §3.2.2: the claim ran the attempt in the context it was
        prepared in, which is still the current one."""
        r = self.r
        a = r.attempts[(ref.op_id, ref.attempt)]
        assert a.state == A.RUNNING and (ref.op_id, ref.attempt) in r.claims
        assert not r.ops[ref.op_id].cancelled
        assert r.prog.grant is not None and r.prog.grant.allows(ref.act)
        assert (a.epoch, a.placement_generation, a.digest) == (
            r.neuron.epoch,
            r.neuron.placement_generation,
            r.neuron.placement_digest,
        )
        assert r.prog.state == ProgState.ACTIVE and not r.prog.exhausted

    @rule(
        name=st.sampled_from(NAMES),
        index=PICK,
        status=st.sampled_from([A.SUCCEEDED, A.FAILED, A.NOT_EXECUTED, A.UNKNOWN]),
        aborted=st.booleans(),
    )
    def outcome(self, name: str, index: int, status: AttemptState, aborted: bool) -> None:
        """An adapter's answer for an attempt of the op: only a running latest
        attempt takes it; any other (a late answer) is refused."""
        r = self.r
        a = _attempt_pick(r, name, index)
        if a is None:
            return
        op = r.ops[a.op_id]
        legal = a.state == A.RUNNING and a.attempt == op.attempts
        got = self.decide(
            "outcome",
            lambda: outcome(r.op_view(name), a.id, status, "v", "e", aborted=aborted),
            internal_ok=not legal,
        )
        assert isinstance(got, ch.Decision) == legal, (a, got)

    @rule(
        name=st.sampled_from(NAMES),
        index=PICK,
        reason=st.sampled_from(sorted(TOKEN_VOID_REASONS)),
    )
    def void(self, name: str, index: int, reason: str) -> None:
        r = self.r
        a = _attempt_pick(r, name, index)
        if a is None:
            return
        got = self.decide("void", lambda: void(r.op_view(name), a.id, reason))
        assert got.reply == (a.state == A.PREPARED)

    # -- disruptions: one rule, so that together they are as likely as one op rule ---------

    @rule(
        what=st.sampled_from(
            ["restart", "release", "exhaust", "epoch", "revoke", "pause", "cancel"]
        ),
        name=st.sampled_from(NAMES),
        enabled=st.booleans(),
    )
    def disrupt(self, what: str, name: str, enabled: bool) -> None:
        """Something that ends or stales attempts: a crash and restart, a
        released placement, an exhausted budget, a new epoch, a revoked grant,
        a pause, a cancel."""
        if what == "restart":
            self.restart()
        elif what == "release":
            self.release()
        elif what == "exhaust":
            self.exhaust_via_settle()
        elif what == "epoch":
            self.advance_epoch()
        elif what == "revoke":
            self.set_grant(enabled=enabled, granted=not enabled)
        elif what == "pause":
            self.pause_or_resume()
        else:
            self.decide("cancel", lambda: cancel(self.r.op_view(name)))

    def restart(self) -> None:
        """A new boot: tokens are gone, every open prepared or running attempt
        of the earlier boot becomes unknown (contract §3.6)."""
        r = self.r
        self.tokens = []
        r.boot = f"boot-{next(r.ids)}"
        for op in list(r.ops.values()):
            a = r.latest(op.id)
            if a is not None and a.state in (A.PREPARED, A.RUNNING):
                claimed = a.state == A.RUNNING
                view = r.op_view(op.op)
                self.decide("mark_unknown", lambda v=view, a=a, c=claimed: _marked(v, a, c))

    def release(self) -> None:
        """release_placement: prepare is placement_unbound until a bind."""
        r = self.r
        got = self.decide(
            "release",
            lambda: bind_placement(r.prog_view(), r.neuron.placement_generation, None, None),
        )
        assert isinstance(got, ch.Decision) and r.neuron.placement is None

    @precondition(lambda self: self.r.neuron.placement_digest != _digest(self.r.boot))
    @rule()
    def bind(self) -> None:
        """Bind this boot's descriptor (the only way past placement_stale)."""
        r = self.r
        self.decide(
            "bind",
            lambda: bind_placement(
                r.prog_view(),
                r.neuron.placement_generation,
                _descriptor(r.boot),
                _digest(r.boot),
            ),
        )

    @rule(
        name=st.sampled_from(NAMES),
        index=PICK,
        answer=st.sampled_from(["executed", "not_executed", "executed", "unknown"]),
        applies=st.sampled_from([True, True, False]),
        detail=st.sampled_from([None, "d1", "d2"]),
    )
    def receipt(self, name: str, index: int, answer: str, applies: bool, detail: str | None):
        """A receipt's answer for any attempt, the resolved ones included (an
        answer that comes after a reconcile): a resolved attempt's outcome
        never changes, and an answer that contradicts it is kept as
        ``receipt_conflict`` (contract §3.4)."""
        r = self.r
        a = _attempt_pick(r, name, index)
        if a is None or a.kind == AttemptKind.MANUAL:  # receipts never ask for a manual one
            return
        key = (a.op_id, a.attempt)
        recorded = r.outcomes.get(key)
        events = len(r.events)
        got = self.decide(
            "receipt",
            lambda: receipt(
                r.op_view(name), a.id, answer, "rv", None, detail, applies=applies, at=AT
            ),
        )
        after = r.attempts[key]
        if a.state == A.UNKNOWN:
            assert got.reply.conflict is None
            return
        assert after.state == a.state and r.outcomes.get(key) == recorded
        assert not got.reply.resolved
        contradicts = recorded is not None and recorded.status in CONTRADICTS.get(answer, ())
        assert (got.reply.conflict == recorded) if contradicts else got.reply.conflict is None
        if not contradicts:
            assert not got.changes and after.evidence == a.evidence
            return
        kept = (after.evidence or {})["receipt_conflict"]
        assert kept["answer"] == answer and kept["at"] == AT
        assert kept.get("value") == ("rv" if answer == "executed" else None)
        assert kept.get("detail") == detail
        if got.changes:  # a new conflict: one receipt record says which outcome it contradicts
            (record,) = r.events[events:]
            assert record.kind == "receipt" and record.data["applied"] is False
            assert record.data["conflict"] == {
                "status": recorded.status.value,
                "source": recorded.source,
            }
        else:  # the same conflict again: nothing new to record
            assert (a.evidence or {}).get("receipt_conflict") == kept

    @rule(
        name=st.sampled_from(NAMES),
        index=st.sampled_from([-1, -1, -1, 0, 1, 2, 7]),
        status=st.sampled_from([A.SUCCEEDED, A.FAILED, A.NOT_EXECUTED]),
        value=st.sampled_from([None, 1, True, "v", "rv"]),
    )
    def reconcile(self, name: str, index: int, status: AttemptState, value: Any) -> None:
        """Reconcile an attempt of the op (index 7: one it does not have)."""
        r = self.r
        picked = _attempt_pick(r, name, index)
        number = 7 if index == 7 or picked is None else picked.attempt
        before = r.attempts.get((picked.op_id, number)) if picked else None
        recorded = r.outcomes.get((picked.op_id, number)) if picked else None
        got = self.decide("reconcile", lambda: reconcile(r.op_view(name), number, status, value))
        op_id = r.names.get(name)
        a = None if op_id is None else r.attempts.get((op_id, number))
        if isinstance(got, ch.Decision) and not got.reply.get("already"):
            assert before is not None and before.attempt == number
            assert before.state == A.UNKNOWN and a is not None and a.state == status
        if before is not None and before.ever_unknown and recorded is not None:
            # resolved already: the same outcome is `already`, another `conflict`
            same = recorded.status == status and (
                type(recorded.value) is type(value) and recorded.value == value
            )
            if isinstance(got, ch.Decision):
                assert same and got.reply.get("already"), (recorded, status, value)
            else:
                assert got.code in ("conflict", "grant_disabled"), got
                assert got.code == "grant_disabled" or not same
        if a is not None and not a.ever_unknown:
            assert isinstance(got, WarddError) and got.code in (
                "not_reconcilable",
                "grant_disabled",
            ), got

    @rule(name=st.sampled_from(NAMES))
    def consume(self, name: str) -> None:
        r = self.r
        before = r.op_view(name)
        got = self.decide("consume", lambda: consume(r.op_view(name)))
        if isinstance(got, ch.Decision):
            assert before.op is not None and before.op.state == OpState.RETAINED
            result = got.reply["result"]
            assert result["status"] == "succeeded" and result["epoch"] == r.neuron.epoch
            assert before.latest is not None and result["attempt"] == before.latest.attempt

    @rule(name=st.sampled_from(NAMES), stale=st.booleans())
    def rebind(self, name: str, stale: bool) -> None:
        r = self.r
        self.decide("rebind", lambda: rebind(r.op_view(name), r.neuron.epoch - int(stale)))

    # -- the prog and the neuron -----------------------------------------------------------

    def exhaust_via_settle(self) -> None:
        """Reserve what is left of the budget and settle it all: the settle
        exhausts the prog and ends its open ops (contract §3.4)."""
        r = self.r
        steps = r.prog.step_limit - r.prog.steps_used - r.prog.steps_reserved
        if steps <= 0 or r.prog.exhausted or not r.prog.grant_enabled:
            return
        res = f"r{r.prog.reservation_seq}"
        self.decide("reserve", lambda: reserve_steps(r.prog_view(), res, steps))
        got = self.decide("settle", lambda: settle_steps(r.prog_view(res), res, steps))
        assert isinstance(got, tuple) and got[1], "a settle that reaches the limit exhausts"
        open_ops = tuple(
            (o, r.latest(o.id))
            for o in sorted(r.ops.values(), key=lambda o: o.id)
            if not o.terminal
        )
        unknown_before = {k for k, a in r.attempts.items() if a.state == A.UNKNOWN}
        self.decide("exhaust", lambda: exhaust(r.prog, open_ops))
        assert all(r.ops[o.id].cancelled for o, _a in open_ops)
        assert all(r.attempts[k].state == A.UNKNOWN for k in unknown_before)

    @precondition(lambda self: self.r.prog.exhausted)
    @rule()
    def raise_limit(self) -> None:
        r = self.r
        self.decide(
            "set_step_limit",
            lambda: set_step_limit(r.prog_view(), r.prog.step_limit + 10, r.prog.state_version),
        )

    def advance_epoch(self) -> None:
        """A new epoch voids every prepared attempt (contract §3.1)."""
        r = self.r
        self.decide("advance_epoch", lambda: advance_epoch(r.prog_view(), r.neuron.epoch))
        assert not r.prepared_pairs()

    @precondition(lambda self: not (self.r.prog.grant and self.r.prog.grant.allows(ACT)))
    @rule()
    def regrant(self) -> None:
        self.set_grant(enabled=True, granted=True)

    def set_grant(self, enabled: bool, granted: bool) -> None:
        r = self.r
        acts = [ACT] if granted else ["other"]
        self.decide(
            "set_grant",
            lambda: set_grant(r.prog_view(), acts, enabled, r.neuron.policy_version),
        )

    @precondition(lambda self: self.r.prog.state == ProgState.PAUSED)
    @rule()
    def resume(self) -> None:
        self.pause_or_resume()

    def pause_or_resume(self) -> None:
        r = self.r
        now = r.prog.state
        to = ProgState.PAUSED if now == ProgState.ACTIVE else ProgState.ACTIVE
        self.decide(
            "set_prog_state",
            lambda: set_prog_state(r.prog_view(), now, to, r.prog.state_version),
        )

    # -- invariants ------------------------------------------------------------------------

    @invariant()
    def op_state_follows_the_table(self) -> None:
        for op in self.r.ops.values():
            latest = self.r.latest(op.id)
            want = contract_op_state(op, None if latest is None else latest.state)
            assert op.state == want, (op, latest)

    @invariant()
    def status_counts_equal_a_fresh_count(self) -> None:
        ops: dict[str, int] = {}
        for op in self.r.ops.values():
            ops[op.state.value] = ops.get(op.state.value, 0) + 1
        unknown = sum(a.state == A.UNKNOWN for a in self.r.attempts.values())
        shown, shown_unknown, _ = self.counters.figures.wire()
        assert (shown, shown_unknown) == (ops, unknown)

    @invariant()
    def attempts_are_numbered_from_one(self) -> None:
        for op in self.r.ops.values():
            numbers = [a.attempt for a in self.r.op_attempts(op.id)]
            assert numbers == list(range(1, op.attempts + 1))

    @invariant()
    def at_most_one_open_attempt_per_op(self) -> None:
        for op in self.r.ops.values():
            open_ = [a for a in self.r.op_attempts(op.id) if a.state in OPEN]
            assert len(open_) <= 1, open_

    @invariant()
    def an_ended_op_holds_no_prepared_attempt(self) -> None:
        """cancel (and an exhaustion) voids a prepared attempt; consume needs a result."""
        for op in self.r.ops.values():
            latest = self.r.latest(op.id)
            if op.terminal and latest is not None:
                assert latest.state != A.PREPARED, (op, latest)
            if op.consumed:
                assert latest is not None and latest.state == A.SUCCEEDED

    @invariant()
    def a_prepared_attempt_is_bound_to_the_current_context(self) -> None:
        """Every change of epoch, placement, grant, prog state or budget, a
        cancel and a restart void or mark a prepared attempt (contract §3.1,
        §3.4, §3.6): one still prepared can be claimed."""
        r = self.r
        for op, a in r.prepared_pairs():
            assert not op.terminal and a.boot == r.boot
            assert (a.epoch, a.placement_generation, a.digest) == (
                r.neuron.epoch,
                r.neuron.placement_generation,
                r.neuron.placement_digest,
            )
            assert r.prog.grant is not None and r.prog.grant.allows(op.act)
            assert r.prog.state == ProgState.ACTIVE and not r.prog.exhausted

    @invariant()
    def a_result_is_held_only_by_a_retained_op(self) -> None:
        for op in self.r.ops.values():
            if op.state == OpState.RETAINED:
                assert op.result_epoch is not None
            if op.cancelled:
                assert op.result_epoch is None, op

    @invariant()
    def no_attempt_follows_a_success(self) -> None:
        for op in self.r.ops.values():
            found = self.r.op_attempts(op.id)
            for a in found[:-1]:
                assert a.state != A.SUCCEEDED, found

    @invariant()
    def unknown_left_only_by_receipt_or_reconcile(self) -> None:
        for key, moves in self.r.moves.items():
            for before, _after, rule_name in moves[1:]:
                if before == A.UNKNOWN:
                    assert rule_name in ("receipt", "reconcile"), (key, moves)

    @invariant()
    def outcomes_match_their_attempts(self) -> None:
        """One outcome per attempt, its state; an adapter's needs the claim."""
        for key, a in self.r.attempts.items():
            if a.state == A.RUNNING:
                assert key in self.r.claims
        for key, out in self.r.outcomes.items():
            a = self.r.attempts[key]
            assert a.state == out.status
            if out.source == "adapter":
                assert key in self.r.claims
            if out.source in ("receipt", "reconcile"):
                assert a.ever_unknown


class TestCoreDecisionsKeepTheStateRules(CoreMachine.TestCase):
    """Any sequence of core decisions keeps the op-state table, one open
    attempt per op, and an unknown attempt left only by receipt or reconcile."""

    settings = settings(max_examples=400, stateful_step_count=50, deadline=None)
