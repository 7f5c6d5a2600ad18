"""The soak's checker can fail: each invariant fires on a view that breaks it.

A checker that never reports anything proves nothing; these tests feed
``_invariants`` hand-made views (and a hand-made record log) that break one
rule each, and a clean one that breaks none.
"""

from __future__ import annotations

import sqlite3
from collections import Counter

import cbor2
import pytest

from tests.soak._invariants import (
    Acks,
    Attempt,
    Op,
    check_acks,
    check_all_acks,
    check_counts,
    check_fences,
    check_op,
    read_effects,
)
from wardd.daemon.store.schema import migrate

N = "ab" * 32
BOOT, OLD = "b" * 32, "a" * 32


def att(n=1, state="succeeded", *, claimed=True, boot=BOOT, outcome="auto", evidence=None, **kw):
    if outcome == "auto":
        outcome = (state, "adapter") if state in ("succeeded", "failed", "not_executed") else None
    return Attempt(
        attempt=n,
        kind=kw.pop("kind", "guarded"),
        state=state,
        boot=boot,
        claimed=claimed,
        evidence=evidence,
        reason=kw.pop("reason", None),
        outcome=outcome,
        claimed_events=kw.pop("claimed_events", int(claimed)),
        marked_events=kw.pop("marked_events", 0),
    )


def op(*attempts, state=None, act="ledger"):
    o = Op(N, "op", act, state or "pending", list(attempts))
    if state is None:
        latest = attempts[-1].state if attempts else None
        o.state = {
            None: "pending",
            "void": "pending",
            "failed": "pending",
            "not_executed": "pending",
            "succeeded": "retained",
        }.get(latest, latest)
    return o


def effects(*keys):
    return Counter({(N, "op", k): 1 for k in keys})


def problems(o, fx=None, open_boots=(BOOT,)):
    return check_op(o, fx if fx is not None else Counter(), open_boots=open_boots)


class TestCheckOp:
    def test_a_clean_history_passes(self):
        """void, unknown-then-reconciled-not-executed, then one effect that succeeded."""
        o = op(
            att(1, "void", claimed=False),
            att(
                2,
                "not_executed",
                outcome=("not_executed", "reconcile"),
                evidence={"claimed": True, "boot": OLD},
                boot=OLD,
                marked_events=1,
            ),
            att(3, "succeeded"),
        )
        assert problems(o, effects(3)) == []

    @pytest.mark.parametrize(
        "attempt, fx, needle",
        [
            (att(1, "succeeded"), Counter({(N, "op", 1): 2}), "2 effects for one attempt"),
            (
                att(
                    1,
                    "unknown",
                    claimed=False,
                    evidence={"claimed": False, "boot": OLD},
                    boot=OLD,
                    marked_events=1,
                ),
                effects(1),
                "without a durable claim",
            ),
            (att(1, "failed"), effects(1), "an effect, but the attempt is failed"),
            (
                att(1, "not_executed", outcome=("not_executed", "receipt")),
                effects(1),
                "an effect, but the attempt is not_executed",
            ),
            (att(1, "succeeded"), effects(), "no effect in the ledger"),
            (att(1, "void", claimed=True), effects(), "claimed but void"),
            (att(1, "running", boot=OLD), effects(), "after a restart"),
            (att(1, "prepared", claimed=False, boot=OLD), effects(), "after a restart"),
            (att(1, "unknown", evidence=None), effects(), "unknown without evidence"),
            (
                att(1, "unknown", evidence={"claimed": False, "boot": BOOT}),
                effects(),
                "evidence.claimed",
            ),
            (
                att(1, "unknown", evidence={"claimed": True, "boot": OLD}, marked_events=1),
                effects(),
                "evidence.boot",
            ),
            (
                att(1, "unknown", evidence={"claimed": True, "boot": BOOT}, marked_events=2),
                effects(),
                "marked unknown 2 times",
            ),
            (att(1, "succeeded", claimed_events=0), effects(1), "claimed records"),
            (att(1, "failed", outcome=None), effects(), "but outcome"),
        ],
    )
    def test_each_broken_rule_is_reported(self, attempt, fx, needle):
        found = problems(op(attempt), fx)
        assert any(needle in p for p in found), found

    def test_two_successes_and_a_wrong_op_state_are_reported(self):
        o = op(att(1, "succeeded"), att(2, "succeeded"))
        assert any("2 succeeded attempts" in p for p in problems(o, effects(1, 2)))
        assert any("2 effects over its attempts" in p for p in problems(o, effects(1, 2)))
        o = op(att(1, "failed"), state="retained", act="echo")
        assert any("contract §3.3" in p for p in problems(o))


class TestAcks:
    def test_acknowledged_outcomes_must_survive(self):
        ops = {(N, "op"): op(att(1, "failed"), att(2, "unknown", evidence={"claimed": True}))}
        acks = Acks()
        acks.outcome = {(N, "op", 1): "succeeded", (N, "op", 2): "unknown", (N, "op", 3): "void"}
        found = check_acks(ops, acks, list(acks.outcome))
        assert len(found) == 2 and "acknowledged succeeded" in found[0] and "gone" in found[1]

    def test_an_acknowledged_unknown_may_be_resolved_only_by_receipt_or_reconcile(self):
        acks = Acks(outcome={(N, "op", 1): "unknown"})
        ok = {(N, "op"): op(att(1, "succeeded", outcome=("succeeded", "reconcile")))}
        assert check_acks(ok, acks, list(acks.outcome)) == []
        bad = {(N, "op"): op(att(1, "succeeded"))}
        assert check_acks(bad, acks, list(acks.outcome)) != []

    def test_terminal_submit_and_prepare_acks(self):
        acks = Acks(terminal={(N, "op"): "cancelled"}, submitted={(N, "gone")})
        acks.prepared = {(N, "op", 2)}
        found = check_all_acks({(N, "op"): op(att(1, "void", claimed=False))}, acks)
        assert len(found) == 3


def test_torn_ledger_lines_are_not_effects(tmp_path):
    p = tmp_path / "ledger"
    p.write_bytes(f"{N}/a/1\t00\n{N}/b/1\n{N}/c/1".encode())
    fx, torn = read_effects(p, tmp_path / "missing")
    assert fx == Counter({(N, "a", 1): 1, (N, "b", 1): 1}) and torn == 1


def test_an_effect_in_a_rotated_ledger_forbids_not_executed(tmp_path):
    """A line renamed or copied away by a rotation is still an effect for the checks."""
    live, rotated = tmp_path / "ledger.log", tmp_path / "ledger.log.1"
    live.write_bytes(b"")
    rotated.write_bytes(f"{N}/op/1\t00\n".encode())
    fx, _ = read_effects(live, rotated)
    found = problems(op(att(1, "not_executed", outcome=("not_executed", "receipt"))), fx)
    assert any("an effect, but the attempt is not_executed" in f for f in found)


class TestFences:
    """check_fences replays records; a claim or a surviving prepare in a stale context fires."""

    def db(self, events):
        conn = sqlite3.connect(":memory:")
        migrate(conn)
        conn.execute(
            "INSERT INTO neurons(id, neuron, epoch, policy_version, placement_generation,"
            " created_at) VALUES (1, ?, 1, 0, 0, 't')",
            (N,),
        )
        conn.execute(
            "INSERT INTO progs(id, neuron_id, prog, state, step_limit) VALUES (1, 1, 'pa',"
            " 'active', 9)"
        )
        conn.execute(
            "INSERT INTO operations(id, neuron_id, op, prog_id, act, args, state) VALUES"
            " (1, 1, 'op', 1, 'ledger', x'', 'running')"
        )
        conn.execute(
            "INSERT INTO attempts(op_id, attempt, kind, epoch, policy_version,"
            " placement_generation, digest, worker, boot, created_at, state) VALUES"
            " (1, 1, 'guarded', 1, 1, 1, 'd', 'w0', ?, 't', 'running')",
            (BOOT,),
        )
        for seq, (kind, op_id, attempt, data) in enumerate(events, 1):
            conn.execute(
                "INSERT INTO events(seq, at, kind, neuron_id, op_id, attempt, data)"
                " VALUES (?, 't', ?, 1, ?, ?, ?)",
                (seq, kind, op_id, attempt, cbor2.dumps(data)),
            )
        return conn

    START = [
        ("registered", None, None, {}),
        ("prog_created", None, None, {"prog": "pa"}),
        ("grant_set", None, None, {"prog": "pa", "acts": ["ledger"], "enabled": True}),
        (
            "placement_bound",
            None,
            None,
            {"placement_generation": 1, "digest": "d", "worker": "w0", "boot": BOOT},
        ),
        ("prepared", 1, 1, {}),
    ]
    CLAIM = ("claimed", 1, 1, {"worker": "w0", "boot": BOOT})

    def test_a_claim_in_the_current_context_passes(self):
        assert check_fences(self.db([*self.START, self.CLAIM])) == []

    @pytest.mark.parametrize(
        "change, needle",
        [
            (("grant_set", None, None, {"prog": "pa", "acts": [], "enabled": True}), "act ledger"),
            (
                ("grant_set", None, None, {"prog": "pa", "acts": ["ledger"], "enabled": False}),
                "enabled grant",
            ),
            (("epoch_advanced", None, None, {"epoch": 2}), "epoch 1"),
            (("placement_released", None, None, {"placement_generation": 2}), "generation"),
            (("prog_state_set", None, None, {"prog": "pa", "state": "paused"}), "prog pa"),
        ],
    )
    def test_a_change_that_does_not_void_the_prepared_attempt_is_reported(self, change, needle):
        found = check_fences(self.db([*self.START, change, self.CLAIM]))
        assert any("still prepared after" in f and needle in f for f in found), found
        assert any("claimed with" in f for f in found), found

    def test_a_void_in_the_same_write_keeps_the_fence(self):
        voided = ("voided", 1, 1, {"reason": "revoked"})
        change = ("grant_set", None, None, {"prog": "pa", "acts": [], "enabled": True})
        assert check_fences(self.db([*self.START, voided, change])) == []

    def test_a_claim_under_another_boot_or_worker_is_reported(self):
        found = check_fences(self.db([*self.START, ("claimed", 1, 1, {"worker": "w0"})]))
        assert any("boot None" in f for f in found)
        found = check_fences(
            self.db([*self.START, ("claimed", 1, 1, {"worker": "w1", "boot": BOOT})])
        )
        assert any("worker w1" in f for f in found)

    def test_op_counts_that_drift_from_the_ops_are_reported(self):
        conn = self.db(self.START)
        assert check_counts(conn) == []
        conn.execute("""UPDATE counts SET ops = '{"running": 1}'""")
        assert check_counts(conn) != []
