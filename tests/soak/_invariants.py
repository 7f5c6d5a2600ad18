"""The invariants a crash must never break, checked on one normalized view.

A view is built either from the daemon's reads (``get_operation`` and
``history``, live, after a restart) or from the database file opened
read-only after a SIGKILL; the same checks run on both. Effects come from
the ledgers the acts write themselves, never from the daemon.

Each check cites the contract clause (docs/contract.md) it enforces.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs
import cbor2

from tests.daemon.harness import counts_differ

#: Acts whose every run leaves exactly one ledger line keyed by its attempt.
EFFECT_ACTS = frozenset({"ledger", "quick", "slow", "flaky", "tool"})
#: Acts whose success always left one: the above, and the http acts ``pay``
#: and ``charge`` (their APIs record the key before they answer 2xx, and
#: ``charge``'s replays answer the saved 2xx; a no-effect call leaves none).
SUCCESS_EFFECT_ACTS = EFFECT_ACTS | {"pay", "charge"}
DEFINITE = ("succeeded", "failed", "not_executed")
STATES = ("prepared", "void", "running", "succeeded", "failed", "not_executed", "unknown")

Key = tuple[str, str, int]  # (neuron, op, attempt): the idempotency key's parts


@attrs.define
class Attempt:
    attempt: int
    kind: str
    state: str
    boot: str
    claimed: bool
    evidence: dict[str, Any] | None
    reason: str | None
    outcome: tuple[str, str] | None  # (status, source)
    claimed_events: int | None = None  # from the records, when the view has them
    marked_events: int | None = None


@attrs.define
class Op:
    neuron: str
    op: str
    act: str
    state: str
    attempts: list[Attempt]
    follows_ok: bool = True


@attrs.define
class Acks:
    """What clients saw acknowledged (contract §3.2.3: every write replies only after
    its records are committed, so each of these must survive any crash)."""

    outcome: dict[Key, str] = attrs.field(factory=dict)  # status, "void", or reconciled
    terminal: dict[tuple[str, str], str] = attrs.field(factory=dict)  # consumed | cancelled
    prepared: set[Key] = attrs.field(factory=set)
    submitted: set[tuple[str, str]] = attrs.field(factory=set)
    epoch: dict[str, int] = attrs.field(factory=dict)
    policy: dict[str, int] = attrs.field(factory=dict)
    generation: dict[str, int] = attrs.field(factory=dict)

    def at_least(self, table: dict[str, int], neuron: str, value: int) -> None:
        table[neuron] = max(table.get(neuron, 0), value)


# -- effects -----------------------------------------------------------------------------


def read_effects(*ledgers: Path) -> tuple[Counter[Key], int]:
    """Complete ledger lines by key, and the number of torn (unterminated) lines."""
    effects: Counter[Key] = Counter()
    torn = 0
    for path in ledgers:
        if not path.exists():
            continue
        data = path.read_bytes()
        lines = data.split(b"\n")
        if lines and lines[-1]:
            torn += 1  # a last line without its newline is not a (complete) effect
        for line in lines[:-1]:
            key = line.split(b"\t", 1)[0].decode()
            neuron, op, attempt = key.split("/")
            effects[(neuron, op, int(attempt))] += 1
    return effects, torn


# -- views -------------------------------------------------------------------------------


def view_from_reads(get_operation: Any, history: Any, neuron: str, op: str) -> Op:
    """One op as the daemon's reads show it (contract §4 get_operation, history)."""
    info = get_operation(neuron, op)
    records = history(neuron, op)
    claimed_ev: Counter[int] = Counter()
    marked_ev: Counter[int] = Counter()
    follows_ok = True
    prev = None
    for r in records:
        if r["follows"] != prev:
            follows_ok = False
        prev = r["seq"]
        if r["kind"] == "claimed":
            claimed_ev[r["attempt"]] += 1
        elif r["kind"] == "marked_unknown":
            marked_ev[r["attempt"]] += 1
    attempts = []
    for a in info["attempts"]:
        out = a.get("outcome")
        attempts.append(
            Attempt(
                attempt=a["attempt"],
                kind=a["kind"],
                state=a["state"],
                boot=a["boot"],
                claimed=a["claimed"],
                evidence=a.get("evidence"),
                reason=a.get("reason"),
                outcome=None if out is None else (out["status"], out["source"]),
                claimed_events=claimed_ev[a["attempt"]],
                marked_events=marked_ev[a["attempt"]],
            )
        )
    return Op(neuron, op, info["act"], info["state"], attempts, follows_ok)


# The claimed and marked_unknown records of each (op, attempt), counted in one
# pass over the records: since schema 6 `events` has no index on op_id, and a
# correlated count per attempt made each look quadratic in the soak's length.
_ATTEMPTS_SQL = """
WITH marks AS (
    SELECT op_id, attempt, sum(kind = 'claimed') AS claimed_events,
           sum(kind = 'marked_unknown') AS marked_events
    FROM events WHERE kind IN ('claimed', 'marked_unknown') GROUP BY op_id, attempt
)
SELECT n.neuron, o.op, o.act, o.state AS op_state, a.attempt, a.kind, a.state, a.boot,
       a.evidence, a.reason, c.attempt_id IS NOT NULL AS claimed, oc.status, oc.source,
       coalesce(m.claimed_events, 0), coalesce(m.marked_events, 0)
FROM attempts a JOIN operations o ON o.id = a.op_id JOIN neurons n ON n.id = o.neuron_id
LEFT JOIN claims c ON c.attempt_id = a.id LEFT JOIN outcomes oc ON oc.attempt_id = a.id
LEFT JOIN marks m ON m.op_id = o.id AND m.attempt = a.attempt
ORDER BY o.id, a.attempt
"""


@attrs.define
class DbView:
    integrity: list[str]
    ops: dict[tuple[str, str], Op]
    boots: list[str]  # in start order
    figures: dict[str, int]
    fences: list[str]  # what check_fences and check_counts found


def view_from_database(path: Path) -> DbView:
    """The whole database, opened read-only (after a SIGKILL: -wal and -shm as left)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        integrity = [r[0] for r in conn.execute("PRAGMA integrity_check")]
        ops: dict[tuple[str, str], Op] = {}
        for neuron, op, act, state in conn.execute(
            "SELECT n.neuron, o.op, o.act, o.state FROM operations o"
            " JOIN neurons n ON n.id = o.neuron_id"
        ):
            ops[(neuron, op)] = Op(neuron, op, act, state, [])
        for r in conn.execute(_ATTEMPTS_SQL):
            (neuron, op, _act, _st, attempt, kind, state, boot, evidence, reason) = r[:10]
            claimed, status, source, claimed_events, marked_events = r[10:]
            ops[(neuron, op)].attempts.append(
                Attempt(
                    attempt=attempt,
                    kind=kind,
                    state=state,
                    boot=boot,
                    claimed=bool(claimed),
                    evidence=None if evidence is None else cbor2.loads(evidence),
                    reason=reason,
                    outcome=None if status is None else (status, source),
                    claimed_events=claimed_events,
                    marked_events=marked_events,
                )
            )
        fences = check_fences(conn) + check_counts(conn)
        boots = [r[0] for r in conn.execute("SELECT boot_id FROM boots ORDER BY id")]
        figures = dict(conn.execute("SELECT kind, count(*) FROM events GROUP BY kind").fetchall())
        (ever_unknown,) = conn.execute(
            "SELECT count(*) FROM attempts WHERE evidence IS NOT NULL"
        ).fetchone()
        figures["attempts_ever_unknown"] = ever_unknown
    finally:
        conn.close()
    return DbView(integrity, ops, boots, figures, fences)


# -- the checks ------------------------------------------------------------------------------


def expected_op_state(op: Op) -> str | None:
    """contract §3.3; None when a terminal state overrides (checked separately)."""
    if op.state in ("consumed", "cancelled"):
        return None
    latest = op.attempts[-1].state if op.attempts else None
    if latest is None or latest in ("void", "failed", "not_executed"):
        return "pending"
    return {"succeeded": "retained"}.get(latest, latest)


def check_op(
    op: Op,
    effects: Mapping[Key, int],
    *,
    open_boots: Iterable[str],
) -> list[str]:
    """Every per-op invariant; ``open_boots`` are the boots whose attempts may
    still be prepared/running (the live boot, or the boot just killed)."""
    bad: list[str] = []
    where = f"{op.neuron[:8]}/{op.op}"
    open_set = set(open_boots)
    if [a.attempt for a in op.attempts] != list(range(1, len(op.attempts) + 1)):
        bad.append(f"{where}: attempts not numbered 1..n")
    if not op.follows_ok:
        bad.append(f"{where}: history records do not follow each other (contract §2)")
    succeeded = [a for a in op.attempts if a.state == "succeeded"]
    if len(succeeded) > 1:
        n = len(succeeded)
        bad.append(f"{where}: {n} succeeded attempts (contract §3.2.1 already_succeeded)")
    if op.state == "consumed" and not succeeded:
        bad.append(f"{where}: consumed without a succeeded attempt")
    want = expected_op_state(op)
    if want is not None and want != op.state:
        bad.append(f"{where}: op state {op.state}, its attempts say {want} (contract §3.3)")
    op_effects = 0
    for a in op.attempts:
        at = f"{where}/{a.attempt}"
        key = (op.neuron, op.op, a.attempt)
        n = effects.get(key, 0)
        op_effects += n
        if a.state not in STATES:
            bad.append(f"{at}: unknown state {a.state}")
        if a.state in ("prepared", "running") and a.boot not in open_set:
            bad.append(f"{at}: {a.state} from boot {a.boot[:8]} after a restart (contract §3.6)")
        if a.claimed and a.state in ("prepared", "void"):
            bad.append(f"{at}: claimed but {a.state}")
        if not a.claimed and a.state == "running":
            bad.append(f"{at}: running without a claim")
        if not a.claimed and a.outcome and a.outcome[1] == "adapter":
            bad.append(f"{at}: an adapter outcome without a claim (contract §3.2.2)")
        if (a.state in DEFINITE) != (a.outcome is not None) or (
            a.outcome is not None and a.outcome[0] != a.state
        ):
            bad.append(f"{at}: state {a.state} but outcome {a.outcome}")
        if a.state == "unknown" and a.kind == "guarded":
            ev = a.evidence
            if not isinstance(ev, dict) or not isinstance(ev.get("claimed"), bool):
                bad.append(f"{at}: unknown without evidence {{claimed, ...}}: {ev}")
            elif ev["claimed"] != a.claimed:
                bad.append(f"{at}: evidence.claimed {ev['claimed']} but claimed {a.claimed}")
            elif "boot" in ev and ev["boot"] != a.boot:
                bad.append(f"{at}: evidence.boot {ev['boot']} is not the attempt's {a.boot}")
        if a.marked_events is not None and a.marked_events > 1:
            bad.append(f"{at}: marked unknown {a.marked_events} times (contract §3.6: once)")
        if a.marked_events and not (isinstance(a.evidence, dict) and "boot" in a.evidence):
            bad.append(f"{at}: marked unknown without evidence.boot: {a.evidence}")
        if a.claimed_events is not None and a.claimed_events != int(a.claimed):
            bad.append(f"{at}: {a.claimed_events} claimed records, claim row {a.claimed}")
        # effects, from the acts' own ledgers
        if n > 1:
            bad.append(f"{at}: {n} effects for one attempt (contract §1: at most once)")
        if n and not a.claimed:
            bad.append(f"{at}: an effect without a durable claim (contract §3.2.2)")
        if n and a.state in ("void", "prepared", "failed", "not_executed"):
            bad.append(f"{at}: an effect, but the attempt is {a.state} {a.outcome}")
        if op.act in SUCCESS_EFFECT_ACTS and a.state == "succeeded" and not n:
            bad.append(f"{at}: succeeded ({a.outcome}) but no effect in the ledger")
    if op_effects > 1:
        bad.append(f"{where}: {op_effects} effects over its attempts")
    return bad


def check_acks(ops: Mapping[tuple[str, str], Op], acks: Acks, keys: Iterable[Key]) -> list[str]:
    """Every acknowledged outcome is still there, with the same status."""
    bad = []
    for key in keys:
        want = acks.outcome[key]
        op = ops.get(key[:2])
        a = None if op is None else next((x for x in op.attempts if x.attempt == key[2]), None)
        at = f"{key[0][:8]}/{key[1]}/{key[2]}"
        if a is None:
            bad.append(f"{at}: acknowledged {want}, but the attempt is gone")
        elif want == "unknown":
            if a.state != "unknown" and (a.outcome is None or a.outcome[1] == "adapter"):
                bad.append(f"{at}: acknowledged unknown, now {a.state} {a.outcome}")
        elif want == "void":
            if a.state != "void":
                bad.append(f"{at}: acknowledged void (token_void), now {a.state}")
        elif a.state != want:
            bad.append(f"{at}: acknowledged {want}, now {a.state} {a.outcome}")
    return bad


def check_all_acks(ops: Mapping[tuple[str, str], Op], acks: Acks) -> list[str]:
    bad = check_acks(ops, acks, list(acks.outcome))
    for key, want in list(acks.terminal.items()):
        op = ops.get(key)
        if op is None or op.state != want:
            bad.append(f"{key[0][:8]}/{key[1]}: acknowledged {want}, now {op and op.state}")
    for key in list(acks.submitted):
        if key not in ops:
            bad.append(f"{key[0][:8]}/{key[1]}: acknowledged submit, but the op is gone")
    for key in list(acks.prepared):
        op = ops.get(key[:2])
        if op is None or len(op.attempts) < key[2]:
            bad.append(f"{key[0][:8]}/{key[1]}/{key[2]}: acknowledged prepare, attempt gone")
    return bad


# -- the fences, replayed from the records ---------------------------------------------------


@attrs.define
class _Context:
    """A neuron's context as its records have built it so far."""

    epoch: int = 1
    generation: int = 0
    digest: str | None = None
    worker: str | None = None
    boot: str | None = None
    grants: dict[str, tuple[frozenset[str], bool]] = attrs.field(factory=dict)
    progs: dict[str, str] = attrs.field(factory=dict)
    prepared: dict[tuple[int, int], str] = attrs.field(factory=dict)  # (op_id, n) -> why


def check_fences(conn: sqlite3.Connection) -> list[str]:
    """Replay every record in ``seq`` order (the writer's linearization) and check
    that each prepare and each claim happened in a context that allowed it, and
    that no prepared attempt outlived a change of its context (contract §3.1, §3.2).

    At a ``prepared`` and at a ``claimed`` record the attempt's binding must be the
    neuron's current epoch, placement generation and descriptor digest, the claim
    must run on the attempt's worker under the placement's boot, and the prog must
    be active with an enabled grant holding the act. After each exclusive write
    (grant, placement, epoch, prog state) every attempt still prepared must still
    pass those checks: the write must have voided the others in its own unit.
    """
    binding = {
        (r[0], r[1]): r[2:]
        for r in conn.execute(
            "SELECT a.op_id, a.attempt, a.epoch, a.placement_generation, a.digest, a.worker,"
            " a.kind, p.prog, o.act, o.op FROM attempts a JOIN operations o ON o.id = a.op_id"
            " JOIN progs p ON p.id = o.prog_id"
        )
    }
    ctx: dict[int, _Context] = {}
    bad: list[str] = []

    def stale(c: _Context, key: tuple[int, int]) -> str | None:
        epoch, gen, digest, worker, _kind, prog, act, _op = binding[key]
        grant = c.grants.get(prog)
        if epoch != c.epoch:
            return f"epoch {epoch} (current {c.epoch})"
        if gen != c.generation or digest != c.digest:
            return f"placement generation {gen} (current {c.generation})"
        if worker != c.worker:
            return f"worker {worker} (placement {c.worker})"
        if c.progs.get(prog) != "active":
            return f"prog {prog} {c.progs.get(prog)}"
        if grant is None or not grant[1] or act not in grant[0]:
            return f"act {act} not in an enabled grant {grant}"
        return None

    rows = conn.execute(
        "SELECT seq, kind, neuron_id, op_id, attempt, data FROM events ORDER BY seq"
    )
    for seq, kind, neuron_id, op_id, attempt, blob in rows:
        c = ctx.setdefault(neuron_id, _Context())
        data = cbor2.loads(blob) if blob is not None else {}
        key = (op_id, attempt)
        if kind == "placement_bound":
            c.generation, c.digest = data["placement_generation"], data["digest"]
            c.worker, c.boot = data["worker"], data["boot"]
        elif kind == "placement_released":
            c.generation, c.digest, c.worker, c.boot = (
                data["placement_generation"],
                None,
                None,
                None,
            )
        elif kind == "epoch_advanced":
            c.epoch = data["epoch"]
        elif kind == "grant_set":
            c.grants[data["prog"]] = (frozenset(data["acts"]), bool(data["enabled"]))
        elif kind == "prog_created":
            c.progs[data["prog"]] = "active"
        elif kind == "prog_state_set":
            c.progs[data["prog"]] = data["state"]
        elif kind == "prepared" and binding.get(key, ("",) * 5)[4] == "guarded":
            why = stale(c, key)
            if why:
                bad.append(f"seq {seq}: {binding[key][7]}/{attempt} prepared with {why}")
            c.prepared[key] = "prepared"
        elif kind == "claimed":
            why = stale(c, key)
            if why is None and data.get("boot") != c.boot:
                why = f"boot {data.get('boot')} (placement boot {c.boot})"
            if why is None and data.get("worker") != binding[key][3]:
                why = f"worker {data.get('worker')} (attempt's {binding[key][3]})"
            if why:
                bad.append(f"seq {seq}: {binding[key][7]}/{attempt} claimed with {why}")
            c.prepared.pop(key, None)
        elif kind in ("voided", "marked_unknown"):
            c.prepared.pop(key, None)
        if kind in ("placement_bound", "placement_released", "epoch_advanced", "grant_set"):
            pass
        elif kind != "prog_state_set":
            continue
        for open_key in list(c.prepared):
            why = stale(c, open_key)
            if why:
                bad.append(
                    f"seq {seq}: {binding[open_key][7]}/{open_key[1]} still prepared after "
                    f"{kind} with {why} (contract §3.1: the write voids it)"
                )
                c.prepared.pop(open_key)
    return bad


def check_counts(conn: sqlite3.Connection) -> list[str]:
    """The counts ``status`` starts from (schema 7: the counts' snapshot plus
    the catch-up over the ops written after it, as the next start seeds them;
    the pruning figures) equal the rows, after any crash."""
    if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'counts'").fetchone():
        return []
    drift = counts_differ(conn)
    return [] if drift is None else [f"{drift} (status.operations, status.db)"]
