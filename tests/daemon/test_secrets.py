"""Security over the wire and the secret audit (contract §4, §5, §6).

- Replay: every signed write is a compare-and-set or idempotent (contract §4), so
  sending an already-applied signed request again is refused by its CAS
  (``generation_mismatch``, ``epoch_mismatch``, ``policy_mismatch``,
  ``state_mismatch``, ``attempt_mismatch``, ``terminal``) or answered as an
  idempotent success (``already``), and in both cases changes nothing.
- Wrong key, wrong network and tampered params are ``unauthenticated`` (or
  ``wrong_network``) and change nothing; a token handle presented on another
  connection is ``token_invalid`` and is not consumed by that.
- The secret audit: after a workload that runs a ``cli`` act printing its
  secret on stdout and stderr (whole, and across the output cuts), crashes
  and clean stops, no token handle the test received, no byte of the
  neuron's private key and no piece of the secret appears in the daemon's
  logs, its database files (db, -wal, -shm, read raw), any read method's
  output, or any adapter result handed back.

(Peer uid refusal, ``forbidden`` then close, is tested in
``test_foundation.py::TestSocketAndLock::test_other_uid_gets_forbidden_then_close``.)
"""

from __future__ import annotations

import os
import secrets
import shlex
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests._poll import wait_for
from tests.daemon._audit import Audit, all_reads, forms, pieces
from tests.daemon.harness import NETWORK, Actor, Background, Daemon, Env, code_of
from wardd.client import Neuron, Session

# -- replay ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shared() -> Iterator[Daemon]:
    d = Daemon(Env(workers=2), shared=True)
    try:
        yield d.start()
    finally:
        d.cleanup()


def snapshot(a: Actor) -> dict[str, Any]:
    """Everything a read shows about this neuron (and the global op counts)."""
    ops = a.read("list_operations", {"neuron": a.id, "limit": 1000})["operations"]
    progs = sorted(a.root()["grants"]) or [a.prog]
    return {
        "neuron": a.root(),
        "progs": {p: a.read("get_prog", {"neuron": a.id, "prog": p}) for p in progs},
        "ops": ops,
        "detail": {o["op"]: a.op(o["op"]) for o in ops},
        "history": {o["op"]: a.history(o["op"]) for o in ops},
        "attempts": {
            s: [x for x in a.read("list_attempts", {"state": s})["attempts"] if x["neuron"] == a.id]
            for s in ("unknown", "running", "prepared")
        },
        "operations": a.read("status")["operations"],
    }


def signed_call(a: Actor, method: str, params: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """Sign, send, and return (the signed params as sent, the result)."""
    signed = a.neuron.sign(method, params, NETWORK)
    return signed, a.client.call(method, signed)


def _setup_retained(a: Actor, op: str = "r") -> None:
    a.submit(op, "echo", b"v")
    a.invoke(op)


#: method -> (set-up on a fresh actor returning the params to apply, expected replay answer)
#: The answer is an error code, or "already" for an idempotent success.
REPLAYS: dict[str, tuple[Callable[[Actor], tuple[str, dict[str, Any]]], str]] = {
    "bind_placement": (
        lambda a: (
            "bind_placement",
            {
                "expected_generation": a.root()["placement_generation"],
                "descriptor": a.descriptor(1),
            },
        ),
        "generation_mismatch",
    ),
    "release_placement": (
        lambda a: (
            "release_placement",
            {"expected_generation": a.root()["placement_generation"]},
        ),
        "generation_mismatch",
    ),
    "advance_epoch": (
        lambda a: ("advance_epoch", {"expected_epoch": a.root()["epoch"]}),
        "epoch_mismatch",
    ),
    "set_grant": (
        lambda a: (
            "set_grant",
            {
                "prog": a.prog,
                "acts": ["echo", "ledger"],
                "enabled": True,
                "expected_policy_version": a.root()["policy_version"],
            },
        ),
        "policy_mismatch",
    ),
    "set_prog_state": (
        lambda a: (
            "set_prog_state",
            {
                "prog": a.prog,
                "expected_state": "active",
                "state": "paused",
                "expected_state_version": a.get_prog()["state_version"],
            },
        ),
        "state_mismatch",
    ),
    "prepare": (
        lambda a: (a.submit("p", "echo"), ("prepare", a.prepare_params("p")))[1],
        "attempt_mismatch",
    ),
    "invoke": (
        lambda a: (a.submit("i", "echo"), ("invoke", a.prepare_params("i")))[1],
        "attempt_mismatch",
    ),
    "manual_take": (
        lambda a: (
            a.submit("m", "echo"),
            ("manual_take", {"op": "m", "expected_attempt": 1, "expected_epoch": 1}),
        )[1],
        "attempt_mismatch",
    ),
    "consume": (lambda a: (_setup_retained(a), ("consume", {"op": "r"}))[1], "terminal"),
    "submit": (
        lambda a: ("submit", {"prog": a.prog, "op": "s", "act": "echo", "args": b"x"}),
        "already",
    ),
    "cancel": (lambda a: (a.submit("c", "echo"), ("cancel", {"op": "c"}))[1], "already"),
    "rebind": (
        lambda a: (
            _setup_retained(a),
            a.call("advance_epoch", {"expected_epoch": 1}),
            ("rebind", {"op": "r", "expected_epoch": 2}),
        )[2],
        "already",
    ),
    "reconcile": (
        lambda a: (
            a.submit("u", "echo"),
            a.call("manual_take", {"op": "u", "expected_attempt": 1, "expected_epoch": 1}),
            ("reconcile", {"op": "u", "attempt": 1, "outcome": {"status": "failed"}}),
        )[2],
        "already",
    ),
    "create_prog": (lambda a: ("create_prog", {"prog": "q", "step_limit": 3}), "already"),
    "register_neuron": (lambda a: ("register_neuron", {}), "already"),
    "reserve_steps": (
        lambda a: ("reserve_steps", {"prog": a.prog, "reservation": "rs", "steps": 2}),
        "already",
    ),
    "settle_steps": (
        lambda a: (
            a.call("reserve_steps", {"prog": a.prog, "reservation": "st", "steps": 2}),
            ("settle_steps", {"prog": a.prog, "reservation": "st", "steps": 1}),
        )[1],
        "already",
    ),
    # a replay finds nothing open below `before` any more: released 0, nothing changes
    "recover_reservations": (
        lambda a: (
            a.call("reserve_steps", {"prog": a.prog, "reservation": "rr", "steps": 2}),
            (
                "recover_reservations",
                {"prog": a.prog, "before": a.get_prog()["reservation_seq"]},
            ),
        )[1],
        "already",
    ),
}


class TestReplay:
    @pytest.mark.parametrize("method", sorted(REPLAYS))
    def test_replaying_an_applied_signed_write_is_refused_or_idempotent_and_changes_nothing(
        self, shared, method
    ):
        """The same signed bytes again: its CAS refuses it (or it is an idempotent no-op)."""
        a = Actor(shared, acts=("echo", "ledger"))
        setup, answer = REPLAYS[method]
        name, params = setup(a)
        signed, _first = signed_call(a, name, params)
        before = snapshot(a)
        if answer == "already":
            again = a.client.call(name, signed)
            if name not in ("reserve_steps", "settle_steps", "recover_reservations"):
                assert again.get("already") is True, again
        else:
            assert code_of(a.client.call, name, signed).code == answer
        assert snapshot(a) == before

    def test_a_pause_replayed_after_a_resume_is_refused(self, shared):
        """contract §3.1: the state comes back, its state_version never does."""
        a = Actor(shared, acts=("echo",))
        pause, _ = signed_call(a, "set_prog_state", a.prog_state_params("active", "paused"))
        a.call("set_prog_state", a.prog_state_params("paused", "active"))
        a.submit("op")
        a.prepare("op")
        before = snapshot(a)
        err = code_of(a.client.call, "set_prog_state", pause)
        assert err.code == "state_mismatch"
        assert err.data == {"state": "active", "state_version": 3}
        assert snapshot(a) == before

    def test_a_resume_replayed_after_a_pause_and_an_epoch_advance_is_refused(self, shared):
        """Issue history 1: pause, resume (captured), pause, advance_epoch, replay the
        resume: state_mismatch, the prog stays paused and nothing runs."""
        a = Actor(shared, acts=("ledger",))
        a.submit("op", "ledger", b"x")
        a.call("set_prog_state", a.prog_state_params("active", "paused"))
        resume, _ = signed_call(a, "set_prog_state", a.prog_state_params("paused", "active"))
        a.call("set_prog_state", a.prog_state_params("active", "paused"))
        a.call("advance_epoch", {"expected_epoch": a.root()["epoch"]})
        before = snapshot(a)
        assert code_of(a.client.call, "set_prog_state", resume).code == "state_mismatch"
        assert snapshot(a) == before
        assert a.get_prog()["state"] == "paused"
        assert code_of(a.invoke, "op").code == "prog_inactive"
        assert [x for x in shared.env.ledger_lines() if a.id in x] == []

    def test_a_replayed_recover_reservations_leaves_later_reservations_alone(self, shared):
        """Issue history 2: a reservation made after the recovery was signed is not
        released by its replay, so the step limit holds."""
        a = Actor(shared, acts=("echo",), step_limit=10)
        a.call("reserve_steps", {"prog": a.prog, "reservation": "crashed", "steps": 8})
        recover, first = signed_call(
            a,
            "recover_reservations",
            {"prog": a.prog, "before": a.get_prog()["reservation_seq"]},
        )
        assert first == {"released": 1}
        a.call("reserve_steps", {"prog": a.prog, "reservation": "live", "steps": 8})
        before = snapshot(a)
        assert a.client.call("recover_reservations", recover) == {"released": 0}
        assert snapshot(a) == before
        over = {"prog": a.prog, "reservation": "more", "steps": 8}
        assert code_of(a.call, "reserve_steps", over).code == "budget_exhausted"
        settled = a.call("settle_steps", {"prog": a.prog, "reservation": "live", "steps": 8})
        assert settled["steps_used"] == 8
        prog = a.get_prog()
        assert prog["steps_used"] + prog["steps_reserved"] <= prog["step_limit"]

    def test_the_bundled_session_fences_prog_writes_with_what_get_prog_shows(self, shared):
        """contract §3.4: Session sends expected_state_version and before, read from get_prog."""
        a = Actor(shared, acts=("echo",))
        session = Session(a.client, a.neuron)
        assert session.set_prog_state(a.prog, "paused").state_version == 2
        stale = code_of(session.set_prog_state, a.prog, "active", expected_state_version=1)
        assert stale.code == "state_mismatch" and a.get_prog()["state"] == "paused"
        assert session.set_prog_state(a.prog, "active").state_version == 3
        session.reserve_steps(a.prog, "r", 1)
        assert session.recover_reservations(a.prog, before=1).released == 0
        assert session.recover_reservations(a.prog).released == 1

    def test_a_request_signed_before_advance_epoch_can_never_prepare(self, shared):
        """contract §4: what a CAS cannot fence, the epoch does."""
        a = Actor(shared, acts=("echo",))
        a.submit("op")
        old = a.neuron.sign("prepare", a.prepare_params("op"), NETWORK)
        a.call("advance_epoch", {"expected_epoch": 1})
        before = snapshot(a)
        assert code_of(a.client.call, "prepare", old).code == "epoch_mismatch"
        assert snapshot(a) == before


class TestForgery:
    def test_wrong_key_wrong_network_and_tampered_params_change_nothing(self, shared):
        """unauthenticated / wrong_network, checked before any effect."""
        a = Actor(shared, acts=("echo",))
        a.submit("op", "echo", b"x")
        stranger = Neuron.generate()
        p = a.prepare_params("op")
        before = snapshot(a)
        cases: list[tuple[str, dict[str, Any], str]] = []
        forged = stranger.sign("prepare", p, NETWORK)
        forged["neuron"] = a.id
        cases.append(("prepare", forged, "unauthenticated"))
        cases.append(("prepare", a.neuron.sign("prepare", p, "other-net"), "unauthenticated"))
        explicit = a.neuron.sign("prepare", {**p, "network": "other-net"}, "other-net")
        cases.append(("prepare", explicit, "wrong_network"))
        good = a.neuron.sign("prepare", p, NETWORK)
        cases.append(("prepare", {**good, "network": NETWORK}, "unauthenticated"))  # added
        with_net = a.neuron.sign("prepare", {**p, "network": NETWORK}, NETWORK)
        cases.append(
            ("prepare", {k: v for k, v in with_net.items() if k != "network"}, "unauthenticated")
        )
        cases.append(("invoke", good, "unauthenticated"))  # another method, same params
        for field, value in p.items():
            tampered = dict(good)
            tampered[field] = value + "x" if isinstance(value, str) else value + 1
            cases.append(("prepare", tampered, "unauthenticated"))
        flipped = bytearray(good["sig"])
        flipped[0] ^= 1
        cases.append(("prepare", {**good, "sig": bytes(flipped)}, "unauthenticated"))
        grant = {"prog": a.prog, "acts": ["echo", "ledger"], "enabled": True}
        grant["expected_policy_version"] = a.root()["policy_version"]
        g = a.neuron.sign("set_grant", grant, NETWORK)
        cases.append(("set_grant", {**g, "acts": ["echo", "ledger", "boom"]}, "unauthenticated"))
        cases.append(("set_grant", {**g, "enabled": False}, "unauthenticated"))
        s = a.neuron.sign(
            "submit", {"prog": a.prog, "op": "n", "act": "echo", "args": b"a"}, NETWORK
        )
        cases.append(("submit", {**s, "args": b"b"}, "unauthenticated"))
        unreg = stranger.sign("register_neuron", {}, NETWORK)
        cases.append(("register_neuron", {**unreg, "neuron": a.id}, "unauthenticated"))
        for method, params, code in cases:
            assert code_of(a.client.call, method, params).code == code, (method, params)
        assert snapshot(a) == before

    def test_a_token_presented_on_another_connection_is_invalid_and_not_consumed(self, shared):
        """token_invalid on a foreign connection (even the signer's own other one)."""
        a = Actor(shared, acts=("ledger",))
        b = Actor(shared, acts=("ledger",))
        a.submit("op", "ledger", b"t")
        token, _ = a.prepare("op")
        for foreign in (b.client, shared.connect(), a.daemon.connect()):
            assert code_of(foreign.call, "execute", {"token": token}).code == "token_invalid"
        assert a.op("op")["attempts"][0]["state"] == "prepared"
        assert a.execute(token)["status"] == "succeeded"
        assert code_of(a.execute, token).code == "token_invalid"
        # a token whose connection closed is gone for good
        a.submit("op2", "ledger", b"u")
        c = shared.connect()
        token2, _ = a.prepare("op2", client=c)
        c.close()
        wait_for(lambda: a.op("op2")["attempts"][0]["state"] == "void", what="token_dropped")
        assert code_of(a.execute, token2).code == "token_invalid"
        assert len([x for x in shared.env.ledger_lines() if f"{a.id}/op" in x]) == 1


# -- the secret audit -----------------------------------------------------------------------

MAX_FRAME = 131072  # the smallest allowed, so the output cuts are easy to reach
STDOUT_LIMIT = MAX_FRAME - 65536  # contract §6: max_frame - 64 KiB
STDERR_TAIL = 4096


def leaky_env(secret_file: str) -> Env:
    """Acts that print their secret: whole, across the stdout cut and the stderr cut."""
    env = Env(workers=2, max_frame=MAX_FRAME, token_ttl_s=1.0)
    q = shlex.quote
    gate = f'{q(str(env.gates))}/"$WARDD_OP.$WARDD_ATTEMPT"'
    started = f'{q(str(env.started))}/"$WARDD_OP.$WARDD_ATTEMPT"'
    fill_out = f"head -c {STDOUT_LIMIT - 10} /dev/zero | tr '\\0' x; "
    fill_err = f"head -c {STDERR_TAIL - 10} /dev/zero | tr '\\0' y >&2; "
    script = (
        'read mode || true; printf "%s\\n" "$API_TOKEN"; printf "%s\\n" "$API_TOKEN" >&2; '
        'case "$mode" in '
        f'cut-out) {fill_out}printf "%s" "$API_TOKEN"; exit 0;; '
        f'cut-err) printf "%s" "$API_TOKEN" >&2; {fill_err}exit 0;; '
        "unknown) exit 7;; nofx) exit 2;; "
        f"gated) touch {started}; i=0; while [ ! -e {gate} ]; do "
        "[ $i -ge 600 ] && exit 3; sleep 0.05; i=$((i+1)); done; exit 0;; "
        "esac; exit 0"
    )
    receipt = (
        'printf "%s\\n" "$API_TOKEN" >&2; case "$1" in */1) echo unknown; '
        'printf "%s\\n" "$API_TOKEN";; *) exit 5;; esac'
    )
    env.acts["leaky"] = {
        "adapter": "cli",
        "argv": ["/bin/sh", "-c", script],
        "no_effect_exits": [2],
        "env": {"API_TOKEN": {"file": secret_file}, "PLAIN": "not-a-secret"},
        "receipt_argv": ["/bin/sh", "-c", receipt, "receipt"],
    }
    env.write_config()
    return env


class TestSecretAudit:
    def test_no_token_key_or_adapter_secret_in_logs_database_or_reads(self, make_daemon, tmp_path):
        """contract §5: no secret in descriptors, records, token metadata, status, results, logs."""
        secret = ("S3cr3t-" + secrets.token_urlsafe(30)).encode()  # 47 bytes
        secret_file = tmp_path / "api-token"  # outside the daemon's directory
        secret_file.write_bytes(secret + b"\n")
        env = leaky_env(str(secret_file))
        d = make_daemon(env)
        seed = os.urandom(32)
        audit = Audit()
        tokens: list[bytes] = []

        a = Actor.__new__(Actor)  # an Actor whose key bytes we know
        a.daemon, a.neuron, a.client, a.prog = d, Neuron.from_seed(seed), d.connect(), "prog-a"
        a.call("register_neuron", {})
        a.call("create_prog", {"prog": a.prog, "step_limit": 100})
        a.call("create_prog", {"prog": "other", "step_limit": 100})
        a.grant(["echo", "leaky", "ledger"])
        a.grant(["echo"], prog="other")
        a.bind(0)

        def invoke(op: str, mode: bytes, attempt: int = 1) -> Any:
            if attempt == 1:
                a.submit(op, "leaky", mode)
            return audit.add("invoke", a.invoke(op, attempt))

        # every way a cli call ends, each printing the secret
        assert invoke("ok", b"ok\n")["status"] == "succeeded"
        out = invoke("cut-out", b"cut-out\n")["result"]
        assert out["truncated"] is True and len(out["stdout"]) <= STDOUT_LIMIT
        # the cut fell inside the secret: no head of it may be left at the end
        assert not any(out["stdout"].endswith(secret[:k]) for k in range(1, len(secret)))
        tail = invoke("cut-err", b"cut-err\n")["result"]["stderr_tail"].encode()
        assert len(tail) <= STDERR_TAIL and tail.endswith(b"y")
        # the tail's cut fell inside the secret: no end of it may be left at the start
        assert not any(tail.startswith(secret[-k:]) for k in range(1, len(secret)))
        assert invoke("unknown", b"unknown\n")["status"] == "unknown"
        assert invoke("nofx", b"nofx\n")["status"] == "failed"
        # tokens: executed, used twice, foreign, expired, dropped, cancelled, revoked
        a.submit("t1", "leaky", b"ok\n")
        t1, meta = a.prepare("t1")
        tokens.append(t1)
        audit.add("prepare", meta)
        audit.add("execute", a.execute(t1))
        code_of(a.execute, t1)
        code_of(d.connect().call, "execute", {"token": t1})
        for op in ("t-exp", "t-drop", "t-cancel", "t-revoke"):
            a.submit(op, "echo" if op != "t-revoke" else "ledger", b"z")
        tok, _ = a.prepare("t-exp")
        tokens.append(tok)
        wait_for(lambda: a.op("t-exp")["attempts"][0]["state"] == "void", what="expiry")
        c = d.connect()
        tok, _ = a.prepare("t-drop", client=c)
        tokens.append(tok)
        c.close()
        tok, _ = a.prepare("t-cancel")
        tokens.append(tok)
        a.call("cancel", {"op": "t-cancel"})
        tok, _ = a.prepare("t-revoke")
        tokens.append(tok)
        a.grant(["echo", "leaky"])
        code_of(a.execute, tok)
        a.grant(["echo", "leaky", "ledger"])
        # a clean stop with a token outstanding (voided: shutdown), then a restart
        a.submit("t-shut", "echo")
        tok, _ = a.prepare("t-shut")
        tokens.append(tok)
        assert d.terminate() == 0
        d.start()
        a.client = d.connect()
        a.bind(0)
        # a crash while a leaky call runs: unknown, its cli receipt prints the secret too
        a.submit("crash", "leaky", b"gated\n")
        call = Background(a.invoke, "crash", 1, d.connect())
        wait_for(env.started_marker("crash").exists, what="the gated leaky act to start")
        d.kill()
        env.open_gate("crash")
        call.done.wait(10)
        d.start()
        a.client = d.connect()
        a.bind(0)
        audit.add("check_receipts", a.call("check_receipts", {}))
        wait_for(lambda: a.read("status")["receipts_pending"] == 0, what="receipts")
        audit.add(
            "reconcile",
            a.call("reconcile", {"op": "crash", "attempt": 1, "outcome": {"status": "succeeded"}}),
        )
        # a retry of the unknown one after reconcile, a consume, a manual take
        a.call("reconcile", {"op": "unknown", "attempt": 1, "outcome": {"status": "not_executed"}})
        invoke("unknown", b"unknown\n", attempt=2)
        audit.add("consume", a.call("consume", {"op": "ok"}))
        a.submit("manual", "leaky", b"ok\n")
        audit.add(
            "manual_take",
            a.call("manual_take", {"op": "manual", "expected_attempt": 1, "expected_epoch": 1}),
        )
        a.call("advance_epoch", {"expected_epoch": 1})
        audit.add("rebind", a.call("rebind", {"op": "cut-out"}))
        all_reads(a.client, a, audit)
        db_files = sorted(env.database.parent.iterdir())
        assert any(p.name.endswith("-wal") for p in db_files), db_files
        haystacks: list[tuple[str, bytes]] = [
            (f"{p.name} (live)", p.read_bytes()) for p in db_files
        ]
        assert d.terminate() == 0

        # what must never appear, in any form
        key = a.neuron._private_pem()  # PKCS#8 of the seed, only to grep for it
        needles: dict[str, list[bytes]] = {
            "secret": [*forms(secret), *pieces(secret)],
            "private key seed": forms(seed),
            "private key pem": [key, *key.splitlines()[1:-1]],
        }
        for i, tok in enumerate(tokens):
            needles[f"token {i}"] = forms(tok)
        haystacks += audit.seen
        haystacks += [(log.name, log.read_bytes()) for log in d.logs]
        haystacks += [(p.name, p.read_bytes()) for p in env.database.parent.iterdir()]
        assert {"wardd.db", "wardd.db-wal (live)", "wardd.db-shm (live)"} <= {
            n for n, _ in haystacks
        }
        leaks = [
            f"{what} in {where}"
            for where, hay in haystacks
            for what, forms_ in needles.items()
            if any(n in hay for n in forms_)
        ]
        assert leaks == []
        # the secret did reach the outputs: the audit saw the redaction at work
        assert any(b"[redacted]" in hay for _, hay in audit.seen)
