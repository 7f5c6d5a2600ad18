"""The crash-injection soak: a mixed workload against a real daemon, SIGKILLed
at random moments, restarted, and checked after every kill and restart.

One cycle:

1. start the daemon (READY=1), or, now and then, start it and SIGKILL it at
   a random moment of its start-up and recovery instead;
2. after READY, with no client yet: no attempt of an earlier boot is
   ``prepared`` or ``running`` (``list_attempts``), every unknown attempt
   carries evidence, in-process receipts are done, and every op touched so
   far passes the checks of ``_invariants`` through the daemon's reads;
3. bind every neuron to this boot (a boot never inherits a placement);
4. run the workload: one driver thread per neuron (submit, invoke,
   prepare/execute, abandoned and dropped tokens, retries, consume with
   rebind, truthful reconcile of unknown attempts) and one chaos thread
   (revoke and re-grant, rebind to the other worker, advance_epoch, cancel,
   pause/resume, release and bind);
5. after a random delay, check ``status`` answers, then SIGKILL;
6. wait until no process of the acts is left (an orphaned ``cli`` act may
   still write its effect after the daemon died), then open the database
   read-only: ``PRAGMA integrity_check`` and every invariant, over the
   whole database, against the acts' own ledgers and the clients' acks;
   and until the ``http`` acts' APIs (a `KeyLedger` and a `SavedByKey` on
   127.0.0.1 in this process) serve no request any more (a request of the
   dead daemon may still land its effect);
7. now and then, while the daemon is dead, rotate the ``file.append``
   ledger (rename it away, with or without a new empty file, or copy it and
   truncate it: logrotate's ``create`` and ``copytruncate``), and give the
   acts ``ledger`` and ``quick`` each other's adapter for the next start
   (an act reconfigured from ``file.append`` to ``cli`` and back). Rotated
   files stay ledgers: every check reads them all.

A reconcile is always truthful: the soak only reconciles an attempt whose
fate the ledgers settle (its act can no longer run: the call ended, or the
daemon that ran it is dead and its orphans are gone). For the ``http`` act
``pay`` the truth is the API's own receipt answer, which fences a key it
answers 404 for, as ``receipt_url`` does at each start; for ``charge``
(``receipt = "replay"``) it is the API's `SavedByKey.truth`, which fences a
key it made no effect for once its request is no longer served.
"""

from __future__ import annotations

import json
import os
import random
import shlex
import shutil
import signal
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tests._poll import wait_for
from tests.daemon._http_peer import KeyLedger, Peer, SavedByKey
from tests.daemon.harness import NETWORK, Daemon, Env
from tests.soak._invariants import (
    EFFECT_ACTS,
    Acks,
    check_acks,
    check_all_acks,
    check_op,
    read_effects,
    view_from_database,
    view_from_reads,
)
from wardd.client import Client, ClientError, Neuron
from wardd.protocol import Pager, RebindRequired, TokenVoid, UnknownOperation, WarddError

PROGS = ("pa", "pb")
MCP_PEER = Path(__file__).resolve().parents[1] / "daemon" / "_mcp_peer.py"  # the mcp act's server
#: act -> weight in the workload
ACTS = {
    "ledger": 5,
    "quick": 4,
    "slow": 3,
    "flaky": 1,
    "echo": 3,
    "nofx": 1,
    "pay": 3,
    "tool": 3,
    "charge": 2,
}
#: the http act's requests (KeyLedger modes), by weight
PAY_MODES = {"ok": 4, "slow-pre": 2, "slow-post": 2, "after-500": 1, "fail": 1}
#: the mcp act's calls (the peer's ``soak`` tool modes), by weight
TOOL_MODES = {"ok": 4, "pre": 2, "post": 2, "error": 1}
#: the replay act's requests (SavedByKey's outcome and first delivery), by weight
CHARGE_MODES = {
    "ok": 3,
    "ok slow 0.1": 2,
    "ok slow 0.3": 1,
    "ok lost": 1,
    "ok dropped": 1,
    "bad dropped": 1,
    "bad": 1,
}
WORKERS = ("w0", "w1")
ORPHAN_TIMEOUT = 30.0
#: logrotate's ways of rotating the file.append ledger: the first kills do each
#: once the ledger exists, later kills draw them
ROTATIONS = ("rename", "create", "copytruncate")


def soak_env(api: Peer) -> Env:
    """The acts write their idempotency key to a ledger of their own; slow ones
    write it before or after a pause, so a kill lands before or after the effect.
    ``pay`` is an ``http`` act whose API (``api``) keeps its own ledger;
    ``charge`` another, whose API keeps its answers by key and whose receipt
    is a replay (``/replay/…`` on the same server); ``tool`` is an ``mcp`` act
    whose stdio server (the tests' MCP peer) keeps its own, with a receipt tool
    that reads it."""
    env = Env(workers=2, token_ttl_s=1.0)
    peer = env.root / "mcp-peer"
    peer.mkdir()
    env.acts["tool"] = {
        "adapter": "mcp",
        "command": [
            sys.executable,
            str(MCP_PEER),
            *("--record", str(peer / "record.jsonl")),
            *("--ledger", str(env.root / "mcp-ledger.log")),
            *("--marks", str(peer)),
        ],
        "tool": "soak",
        "receipt_tool": "find_by_key",
        "timeout_s": 10,
    }
    env.acts["pay"] = {
        "adapter": "http",
        "url": api.url("/charges"),
        "receipt_url": api.url("/by-key/{key}"),
        "timeout_s": 10,
    }
    env.acts["charge"] = {
        "adapter": "http",
        "url": api.url("/replay/charges"),
        "receipt": "replay",
        "replay_window_s": 3600,
        "timeout_s": 10,
    }
    led = shlex.quote(str(env.cli_ledger))
    key = '"$WARDD_IDEMPOTENCY_KEY"'
    env.acts["slow"] = {
        "adapter": "cli",
        "argv": [
            "/bin/sh",
            "-c",
            "read mode d || true; "
            f'if [ "$mode" = pre ]; then echo {key} >> {led}; fi; sleep "${{d:-0}}"; '
            f'if [ "$mode" = post ]; then echo {key} >> {led}; fi',
        ],
    }
    env.acts["flaky"] = {  # the effect happens, then an exit that proves nothing: unknown
        "adapter": "cli",
        "argv": ["/bin/sh", "-c", f"echo {key} >> {led}; exit 7"],
    }
    env.write_config()
    return env


def reconfigure(env: Env, swapped: bool) -> None:
    """``ledger`` and ``quick`` served by each other's adapter (``swapped``), or as usual."""
    appends = {"adapter": "file.append", "path": str(env.ledger)}
    runs = env.default_acts()["quick"]
    env.acts["ledger"], env.acts["quick"] = (runs, appends) if swapped else (appends, runs)
    env.write_config()


class Stats:
    """Thread-safe counters for the figures."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.c: Counter[str] = Counter()

    def add(self, name: str, n: int = 1) -> None:
        with self.lock:
            self.c[name] += n


class Cluster:
    """The daemon, its neurons, the acks, and the figures."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.seed = seed
        self.api_ledger: KeyLedger | None = None
        self.api = Peer(self._serve_api)
        self.env = soak_env(self.api)
        self.api_ledger = KeyLedger(self.env.root / "api-ledger.log")
        self.replay_api = SavedByKey(ledger=self.env.root / "replay-ledger.log")
        self.daemon = Daemon(self.env)
        self.neurons: list[Neuron] = []
        self.acks = Acks()
        self.acks_lock = threading.Lock()
        self.stats = Stats()
        self.violations: list[str] = []
        self.touched: set[tuple[str, str]] = set()  # ops to re-check through the reads
        self.cycle_acks: set[tuple[str, str, int]] = set()
        self.ops_seq = 0
        self.ready_boots: list[str] = []
        self.fences_seen: set[str] = set()
        self.rotated: list[Path] = []  # the file.append ledger's rotated files, still ledgers
        self.swapped = False  # ledger and quick serve with each other's adapter

    # -- requests ------------------------------------------------------------------------

    def signed(self, client: Client, n: Neuron, method: str, params: dict[str, Any]) -> Any:
        return self.request(client, method, n.sign(method, params, NETWORK))

    def request(self, client: Client, method: str, params: dict[str, Any]) -> Any:
        """One request; refusals are counted by code, and ``internal`` is a violation
        (nothing in this workload may make the daemon fail)."""
        self.stats.add("requests")
        try:
            return client.call(method, params)
        except WarddError as err:
            self.stats.add(f"refused.{err.code}")
            if err.code == "internal":
                self.violations.append(f"internal error for {method}: {err}")
            raise

    def ack_outcome(self, n: Neuron, op: str, attempt: int, status: str) -> None:
        with self.acks_lock:
            self.acks.outcome[(n.id, op, attempt)] = status
            self.cycle_acks.add((n.id, op, attempt))
            self.touched.add((n.id, op))
        self.stats.add(f"acked.{status}")

    def touch(self, n: Neuron, op: str) -> None:
        with self.acks_lock:
            self.touched.add((n.id, op))

    def _serve_api(self, r: Any) -> Any:
        assert self.api_ledger is not None
        if r.path.startswith("/replay/"):
            return self.replay_api(r)
        return self.api_ledger(r)

    def effects(self) -> tuple[Counter[tuple[str, str, int]], int]:
        return read_effects(
            self.env.ledger,
            *self.rotated,
            self.env.cli_ledger,
            self.env.root / "api-ledger.log",
            self.env.root / "mcp-ledger.log",
            self.env.root / "replay-ledger.log",
        )

    def api_truth(self, key: str) -> str:
        """The http act's truth for an attempt, from its API's receipt (which
        fences a key it has no effect for): succeeded or not_executed."""
        assert self.api_ledger is not None
        return "succeeded" if self.api_ledger.receipt_answer(key) == 200 else "not_executed"

    def cleanup(self) -> None:
        """No daemon and no API outlive the run."""
        try:
            self.daemon.cleanup()
        finally:
            self.api.close()

    def file_append_acts(self) -> set[str]:
        return {t for t, a in self.env.acts.items() if a["adapter"] == "file.append"}

    # -- set-up --------------------------------------------------------------------------

    def setup(self, neurons: int) -> None:
        self.start()
        with self.daemon.connect() as c:
            for _ in range(neurons):
                n = Neuron.generate()
                self.neurons.append(n)
                self.signed(c, n, "register_neuron", {})
                for prog in PROGS:
                    self.signed(c, n, "create_prog", {"prog": prog, "step_limit": 10**9})
                    self.grant(c, n, prog, sorted(ACTS), True)
        self.rebind_all()

    def grant(self, c: Client, n: Neuron, prog: str, acts: list[str], enabled: bool) -> None:
        pv = self.request(c, "get_neuron", {"neuron": n.id})["policy_version"]
        r = self.signed(
            c,
            n,
            "set_grant",
            {"prog": prog, "acts": acts, "enabled": enabled, "expected_policy_version": pv},
        )
        with self.acks_lock:
            self.acks.at_least(self.acks.policy, n.id, r["policy_version"])

    def bind(self, c: Client, n: Neuron, worker: str) -> None:
        desc = next(
            w["descriptor"]
            for w in self.request(c, "list_workers", {})["workers"]
            if w["worker"] == worker
        )
        gen = self.request(c, "get_neuron", {"neuron": n.id})["placement_generation"]
        r = self.signed(c, n, "bind_placement", {"expected_generation": gen, "descriptor": desc})
        with self.acks_lock:
            self.acks.at_least(self.acks.generation, n.id, r["placement_generation"])

    def rebind_all(self) -> None:
        """A new boot inherits no placement (contract §3.1); now and then also undo
        what the chaos left (a revoked grant, a paused prog)."""
        with self.daemon.connect() as c:
            for n in self.neurons:
                self.bind(c, n, self.rng.choice(WORKERS))
                if self.rng.random() < 0.5:
                    for prog in PROGS:
                        self.grant(c, n, prog, sorted(ACTS), True)  # set_prog_state needs it
                        p = self.request(c, "get_prog", {"neuron": n.id, "prog": prog})
                        if p["state"] == "paused":
                            self.signed(
                                c,
                                n,
                                "set_prog_state",
                                {
                                    "prog": prog,
                                    "expected_state": "paused",
                                    "state": "active",
                                    "expected_state_version": p["state_version"],
                                },
                            )

    # -- the daemon's life ---------------------------------------------------------------

    def start(self) -> None:
        self.daemon.start()
        assert self.daemon.boot is not None
        self.ready_boots.append(self.daemon.boot)
        self.stats.add("starts")

    def kill(self) -> None:
        self.daemon.kill()
        self.stats.add("kills")

    def kill_during_start(self) -> None:
        """SIGKILL at a random moment of start-up, migration and recovery."""
        self.daemon.spawn()
        time.sleep(self.rng.uniform(0.0, 0.4))  # the random moment is the point
        self.kill()
        self.stats.add("kills_during_start")

    def rotate(self, how: str) -> None:
        """While the daemon is dead: rotate the file.append ledger (logrotate's ways);
        nothing while there is no ledger yet (no file.append has run)."""
        ledger = self.env.ledger
        if not ledger.exists():
            return
        rotated = ledger.with_name(f"{ledger.name}.{len(self.rotated) + 1}")
        if how == "copytruncate":
            shutil.copyfile(ledger, rotated)
            with ledger.open("r+b") as f:
                f.truncate(0)
        else:
            ledger.rename(rotated)
            if how == "create":
                ledger.touch(mode=0o600)
        self.rotated.append(rotated)
        self.stats.add(f"rotations.{how}")

    def reconfigure(self) -> None:
        """While the daemon is dead: swap the adapters of ``ledger`` and ``quick``."""
        self.swapped = not self.swapped
        reconfigure(self.env, self.swapped)
        self.stats.add("reconfigurations")

    def between_lives(self, rotate: float, reconf: float) -> None:
        """The operator's actions while the daemon is down: a rotation, a reconfiguration.
        The first kills reconfigure twice for sure, and each of logrotate's three ways is
        done for sure at the first kills after the ledger exists (a rotation of a ledger
        that is not there yet is owed, not skipped); later kills draw them."""
        kills = self.stats.c["kills"]
        forced = {3: "reconfigure", 7: "reconfigure"}
        step = forced.get(kills)
        owed = [how for how in ROTATIONS if not self.stats.c[f"rotations.{how}"]]
        if step is None and kills >= 2 and owed:
            self.rotate(owed[0])
        elif step is None and self.rng.random() < rotate:
            self.rotate(self.rng.choice(ROTATIONS))
        if step == "reconfigure" or (kills not in forced and self.rng.random() < reconf):
            self.reconfigure()

    def wait_for_orphans(self) -> None:
        """No act of the dead daemon may still be running before the ledgers are read."""
        assert self.api_ledger is not None
        self.api_ledger.wait_idle(ORPHAN_TIMEOUT)
        self.replay_api.wait_idle(ORPHAN_TIMEOUT)
        marker = str(self.env.root).encode()

        def alive() -> list[int]:
            return [pid for pid in _pids() if marker in _cmdline(pid)]

        try:
            wait_for(lambda: not alive(), ORPHAN_TIMEOUT, "the act processes to end", seen=alive)
        except AssertionError:
            for pid in alive():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            raise

    # -- checks --------------------------------------------------------------------------

    def check_after_kill(self) -> None:
        """Offline: the database as the kill left it, read-only, whole."""
        view = view_from_database(self.env.database)
        if view.integrity != ["ok"]:
            self.violations.append(f"integrity_check: {view.integrity}")
        self.violations += [f for f in view.fences if f not in self.fences_seen]
        self.fences_seen.update(view.fences)  # the checks cover the whole history each time
        effects, torn = self.effects()
        self.stats.c["torn_lines"] = torn
        # Attempts of boots started before the last boot that reached READY were
        # marked by its recovery; the boots since may still hold open attempts.
        last_ready = view.boots.index(self.ready_boots[-1])
        open_boots = view.boots[last_ready:]
        for op in view.ops.values():
            self.violations += check_op(op, effects, open_boots=open_boots)
        known = {(o.neuron, o.op, a.attempt) for o in view.ops.values() for a in o.attempts}
        for key in effects:
            if key not in known:
                self.violations.append(f"an effect for an attempt the daemon never had: {key}")
        with self.acks_lock:
            self.violations += check_all_acks(view.ops, self.acks)
        self.last_db = view

    def check_after_restart(self) -> None:
        """Live, through the reads, before any client acts in this boot."""
        boot = self.daemon.boot
        assert boot is not None
        with self.daemon.connect() as c:
            for state in ("prepared", "running"):
                left = self.pages(c, state)
                if left:
                    self.violations.append(
                        f"after restart, {len(left)} attempts still {state} "
                        f"(contract §3.6): {left[:3]}"
                    )
            unknown = self.pages(c, "unknown")
            st = self.request(c, "status", {})
            if st["unknown_attempts"] != len(unknown):
                self.violations.append(
                    f"status.unknown_attempts {st['unknown_attempts']} but "
                    f"list_attempts has {len(unknown)}"
                )
            for u in unknown:
                ev = u.get("evidence")
                where = f"{u['neuron'][:8]}/{u['op']}/{u['attempt']}"
                if not isinstance(ev, dict) or ev.get("claimed") is not u["claimed"]:
                    self.violations.append(f"{where}: unknown with evidence {ev}")
                elif "boot" in ev and ev["boot"] != u["boot"]:
                    self.violations.append(f"{where}: evidence.boot {ev} vs boot {u['boot']}")
                if (
                    u["act"] in self.file_append_acts()
                    and u["kind"] == "guarded"
                    and not (isinstance(ev, dict) and "receipt_hint" in ev)
                ):
                    # a rotation or a reconfiguration leaves it unknown, but with the
                    # hint of the receipt that ran before serving
                    self.violations.append(
                        f"{where}: a file.append attempt unknown after READY without a "
                        "receipt hint (contract §3.6: in-process receipts are checked before "
                        "serving)"
                    )
                elif u["act"] in self.file_append_acts():
                    self.stats.add("file_append_unknown_after_ready")
                if u["act"] in ("pay", "tool") and u["kind"] == "guarded":
                    # in-process receipts run before serving and the API (the mcp
                    # act's receipt tool) always answers
                    self.violations.append(
                        f"{where}: an {u['act']} attempt unknown after READY: {ev} (§3.6)"
                    )
            self.check_touched(c, boot)

    def pages(self, c: Client, state: str) -> list[dict[str, Any]]:
        return self.paged(c, "list_attempts", {"state": state}, "attempts")

    def paged(
        self, c: Client, method: str, params: dict[str, Any], key: str
    ) -> list[dict[str, Any]]:
        """Every entry of a paged read, following ``next``."""
        pager = Pager(params, key)
        while not pager.done:
            pager.feed(self.request(c, method, pager.request()))
        return pager.items

    def check_touched(self, c: Client, boot: str, *, every: bool = False) -> None:
        """The per-op invariants through get_operation/history for the ops the last
        cycle touched (or every op), and the acks of the last cycle."""
        with self.acks_lock:
            if every:
                todo = sorted({k[:2] for k in self.acks.outcome} | self.acks.submitted)
            else:
                todo = sorted(self.touched)
            self.touched = set()
            acked = sorted(self.cycle_acks) if not every else sorted(self.acks.outcome)
            self.cycle_acks = set()
        effects, _ = self.effects()

        def get_operation(neuron: str, op: str) -> Any:
            return self.request(c, "get_operation", {"neuron": neuron, "op": op})

        def history(neuron: str, op: str) -> list[dict[str, Any]]:
            return self.paged(c, "history", {"neuron": neuron, "op": op}, "records")

        ops = {}
        for neuron, op in todo:
            try:
                view = view_from_reads(get_operation, history, neuron, op)
            except UnknownOperation:
                if (neuron, op) in self.acks.submitted:
                    self.violations.append(f"{neuron[:8]}/{op}: acknowledged submit, op gone")
                continue  # its submit never got through (the kill, or a refusal)
            ops[(neuron, op)] = view
            self.violations += check_op(view, effects, open_boots={boot})
        with self.acks_lock:
            self.violations += check_acks(ops, self.acks, [k for k in acked if k[:2] in ops])
        self.stats.add("ops_checked_through_reads", len(todo))

    # -- one cycle -----------------------------------------------------------------------

    def cycle(self, delay: tuple[float, float]) -> None:
        stop = threading.Event()
        threads = [
            threading.Thread(target=Driver(self, n, stop).run, name=f"driver-{i}", daemon=True)
            for i, n in enumerate(self.neurons)
        ]
        threads.append(threading.Thread(target=Chaos(self, stop).run, name="chaos", daemon=True))
        try:
            for t in threads:
                t.start()
            time.sleep(self.rng.uniform(*delay))  # the random moment is the point
            try:
                with Client(str(self.env.socket), timeout=10) as c:
                    c.call("status")
            except (ClientError, OSError) as exc:
                self.violations.append(f"status did not answer before the kill: {exc!r}")
            self.kill()
        finally:  # also when the cycle failed: no driver outlives it
            stop.set()
            for t in threads:
                if t.ident is None:
                    continue  # never started
                t.join(30)
                if t.is_alive():
                    self.violations.append(f"{t.name} still blocked 30 s after the kill")

    @staticmethod
    def pay_keys(db: Any, act: str = "pay") -> set[tuple[str, str, int]]:
        return {(o.neuron, o.op, a.attempt) for o, a in _act_attempts(db, act)}

    @staticmethod
    def by_receipt(db: Any, act: str, status: str) -> int:
        """How many of ``act``'s attempts a receipt resolved to ``status``."""
        return sum(1 for _, a in _act_attempts(db, act) if a.outcome == (status, "receipt"))

    def figures(self) -> dict[str, Any]:
        effects, torn = self.effects()
        db = self.last_db
        c = self.stats.c
        return {
            "seed": self.seed,
            "kills": c["kills"],
            "kills_during_start": c["kills_during_start"],
            "starts": c["starts"],
            "neurons": len(self.neurons),
            "ops": len(db.ops),
            "attempts": sum(len(o.attempts) for o in db.ops.values()),
            "requests": c["requests"],
            "acked_outcomes": sum(v for k, v in c.items() if k.startswith("acked.")),
            "effects": sum(effects.values()),
            "torn_ledger_lines": torn,
            "unknowns": db.figures.get("attempts_ever_unknown", 0),
            "marked_unknown_at_restart": db.figures.get("marked_unknown", 0),
            "resolved_by_receipt": db.figures.get("receipt", 0),
            "reconciled": db.figures.get("reconciled", 0),
            "still_unknown": sum(
                1 for o in db.ops.values() for a in o.attempts if a.state == "unknown"
            ),
            "voided": db.figures.get("voided", 0),
            "claims": db.figures.get("claimed", 0),
            "rotations": {
                k.split(".", 1)[1]: v for k, v in sorted(c.items()) if k.startswith("rotations.")
            },
            "reconfigurations": c["reconfigurations"],
            "rotated_ledgers": len(self.rotated),
            "file_append_unknown_after_ready": c["file_append_unknown_after_ready"],
            "http": {
                "attempts": sum(len(o.attempts) for o in db.ops.values() if o.act == "pay"),
                "effects": sum(effects[k] for k in self.pay_keys(db)),
                "receipt_executed": self.by_receipt(db, "pay", "succeeded"),
                "receipt_not_executed": self.by_receipt(db, "pay", "not_executed"),
            },
            "mcp": {
                "attempts": sum(len(o.attempts) for o in db.ops.values() if o.act == "tool"),
                "effects": sum(
                    n for (nid, op, _), n in effects.items() if _act_of(db, nid, op) == "tool"
                ),
                "receipt_executed": self.by_receipt(db, "tool", "succeeded"),
                "receipt_not_executed": self.by_receipt(db, "tool", "not_executed"),
            },
            "replay": {
                "attempts": len(_act_attempts(db, "charge")),
                "effects": sum(effects[k] for k in self.pay_keys(db, "charge")),
                "receipt_executed": self.by_receipt(db, "charge", "succeeded"),
                "receipt_not_executed": self.by_receipt(db, "charge", "not_executed"),
                "left_unknown": sum(
                    1 for _, a in _act_attempts(db, "charge") if a.state == "unknown"
                ),
            },
            "unknown_with_receipt_hint": sum(
                1
                for o in db.ops.values()
                for a in o.attempts
                if a.state == "unknown"
                and isinstance(a.evidence, dict)
                and "receipt_hint" in a.evidence
            ),
            "refusals": {
                k.split(".", 1)[1]: v for k, v in sorted(c.items()) if k.startswith("refused.")
            },
            "violations": len(self.violations),
        }


def _act_of(db: Any, neuron: str, op: str) -> str | None:
    o = db.ops.get((neuron, op))
    return None if o is None else str(o.act)


def _act_attempts(db: Any, act: str = "pay") -> list[tuple[Any, Any]]:
    return [(o, a) for o in db.ops.values() if o.act == act for a in o.attempts]


def _pids() -> list[int]:
    me = os.getpid()
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != me]


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


# -- the workload -------------------------------------------------------------------------


class Worker:
    """A thread with its own connection; it ends quietly when the daemon is killed."""

    def __init__(self, cluster: Cluster, stop: threading.Event) -> None:
        self.k = cluster
        self.stop = stop
        self.rng = random.Random(cluster.rng.random())
        self.client: Client | None = None

    def run(self) -> None:
        try:
            self.client = Client(str(self.k.env.socket), timeout=30)
            while not self.stop.is_set():
                try:
                    self.step()
                except WarddError:
                    pass  # counted by Cluster.signed; races are the workload's point
        except (ClientError, OSError):
            return  # the kill
        except Exception as exc:  # noqa: BLE001 - a surprise is a finding, not a crash
            self.k.violations.append(f"{type(self).__name__} failed: {exc!r}")
        finally:
            if self.client is not None:
                self.client.close()

    def step(self) -> None:
        raise NotImplementedError

    @property
    def c(self) -> Client:
        assert self.client is not None
        return self.client

    def root(self, n: Neuron) -> dict[str, Any]:
        return self.k.request(self.c, "get_neuron", {"neuron": n.id})

    def pick_op(self, n: Neuron, state: str | None = None) -> str | None:
        params: dict[str, Any] = {"neuron": n.id, "limit": 50}
        if state:
            params["state"] = state
        ops = self.k.request(self.c, "list_operations", params)["operations"]
        if not ops:
            return None
        return self.rng.choice(ops)["op"]


class Driver(Worker):
    """One neuron's dispatches: every way an attempt can begin and end."""

    def __init__(self, cluster: Cluster, n: Neuron, stop: threading.Event) -> None:
        super().__init__(cluster, stop)
        self.n = n

    def step(self) -> None:
        r = self.rng.random()
        if r < 0.5:
            self.new_op()
        elif r < 0.62:
            op = self.pick_op(self.n, "pending")
            if op is not None:
                self.dispatch(op, len(self.op(op)["attempts"]) + 1)
        elif r < 0.77:
            self.consume()
        elif r < 0.92:
            self.reconcile()
        else:
            op = self.pick_op(self.n)
            if op is not None:
                self.op(op)

    def op(self, op: str) -> dict[str, Any]:
        return self.k.request(self.c, "get_operation", {"neuron": self.n.id, "op": op})

    def new_op(self) -> None:
        k, n = self.k, self.n
        with k.acks_lock:
            k.ops_seq += 1
            op = f"o{k.ops_seq}"
        act = self.rng.choices(list(ACTS), weights=list(ACTS.values()))[0]
        args = b"x"
        if act == "pay":
            mode = self.rng.choices(list(PAY_MODES), weights=list(PAY_MODES.values()))[0]
            args = f"{mode} {self.rng.choice(['0', '0.02', '0.1', '0.2'])}".encode()
        if act == "tool":
            mode = self.rng.choices(list(TOOL_MODES), weights=list(TOOL_MODES.values()))[0]
            delay = self.rng.choice([0, 0.02, 0.1, 0.2])
            args = json.dumps({"mode": mode, "delay": delay}).encode()
        if act == "charge":
            args = self.rng.choices(list(CHARGE_MODES), weights=list(CHARGE_MODES.values()))[0]
            args = args.encode()
        if act == "slow":
            mode = self.rng.choice(["pre", "post"])
            args = f"{mode} {self.rng.choice(['0', '0.02', '0.1', '0.2'])}\n".encode()
        prog = self.rng.choice(PROGS)
        k.touch(n, op)
        k.signed(self.c, n, "submit", {"prog": prog, "op": op, "act": act, "args": args})
        with k.acks_lock:
            k.acks.submitted.add((n.id, op))
        self.dispatch(op, 1)

    def params(self, op: str, attempt: int) -> dict[str, Any]:
        root = self.root(self.n)
        return {
            "op": op,
            "expected_attempt": attempt,
            "placement_generation": root["placement_generation"],
            "expected_epoch": root["epoch"],
        }

    def dispatch(self, op: str, attempt: int) -> None:
        """invoke, or prepare then execute (maybe cancelled between), or an
        abandoned token (expired, or dropped with its connection)."""
        k, n = self.k, self.n
        k.touch(n, op)
        r = self.rng.random()
        if r < 0.5:
            res = k.signed(self.c, n, "invoke", self.params(op, attempt))
            k.ack_outcome(n, op, res["attempt"], res["status"])
            return
        res = k.signed(self.c, n, "prepare", self.params(op, attempt))
        token, number = res["token"], res["attempt"]["attempt"]
        with k.acks_lock:
            k.acks.prepared.add((n.id, op, number))
        if r < 0.88:
            if self.rng.random() < 0.1:
                self.cancel(op)
            try:
                out = self.k.request(self.c, "execute", {"token": token})
            except TokenVoid:
                k.ack_outcome(n, op, number, "void")  # contract §4: it durably voids its attempt
                return
            k.ack_outcome(n, op, number, out["status"])
        elif r < 0.94:
            k.stats.add("tokens_dropped")
            self.client.close()  # type: ignore[union-attr]
            self.client = Client(str(self.k.env.socket), timeout=30)
        else:
            k.stats.add("tokens_left_to_expire")

    def cancel(self, op: str) -> None:
        r = self.k.signed(self.c, self.n, "cancel", {"op": op})
        with self.k.acks_lock:
            self.k.acks.terminal[(self.n.id, op)] = r["state"]

    def consume(self) -> None:
        k, n = self.k, self.n
        op = self.pick_op(n, "retained")
        if op is None:
            return
        k.touch(n, op)
        try:
            r = k.signed(self.c, n, "consume", {"op": op})
        except RebindRequired:
            k.signed(self.c, n, "rebind", {"op": op, "expected_epoch": self.root(n)["epoch"]})
            r = k.signed(self.c, n, "consume", {"op": op})
        with k.acks_lock:
            k.acks.terminal[(n.id, op)] = "consumed"
        assert r["op"] == op

    def reconcile(self) -> None:
        """Resolve unknown attempts with the truth the ledgers settle."""
        k, n = self.k, self.n
        op = self.pick_op(n, "unknown")
        if op is None:
            return
        k.touch(n, op)
        info = self.op(op)
        effects, _ = k.effects()
        for a in info["attempts"]:
            if a["state"] != "unknown":
                continue
            done = effects.get((n.id, op, a["attempt"]), 0) > 0
            if info["act"] == "pay":
                status = k.api_truth(f"{n.id}/{op}/{a['attempt']}")
            elif info["act"] == "charge":
                status = k.replay_api.truth(f"{n.id}/{op}/{a['attempt']}")
            elif info["act"] in EFFECT_ACTS:
                status = "succeeded" if done else "not_executed"
            elif info["act"] == "echo" and a["claimed"]:
                status = self.rng.choice(["succeeded", "not_executed"])  # no outside effect
            else:
                status = "not_executed"  # nofx has no effect; unclaimed never ran
            outcome: dict[str, Any] = {"status": status}
            res = k.signed(
                self.c, n, "reconcile", {"op": op, "attempt": a["attempt"], "outcome": outcome}
            )
            k.ack_outcome(n, op, a["attempt"], res["status"])
            k.stats.add("reconciles")


class Chaos(Worker):
    """Management writes racing the dispatches (each holds the ward guard exclusively)."""

    def step(self) -> None:
        k = self.k
        n = self.rng.choice(k.neurons)
        r = self.rng.random()
        if r < 0.25:
            prog = self.rng.choice(PROGS)
            g = self.root(n)["grants"].get(prog)
            full = g is not None and g["enabled"] and set(g["acts"]) == set(ACTS)
            if full:
                acts = self.rng.sample(sorted(ACTS), self.rng.randrange(len(ACTS)))
                k.grant(self.c, n, prog, acts, self.rng.random() < 0.8)
                k.stats.add("revokes")
            else:
                k.grant(self.c, n, prog, sorted(ACTS), True)
        elif r < 0.45:
            k.bind(self.c, n, self.rng.choice(WORKERS))
            k.stats.add("rebinds")
        elif r < 0.57:
            res = k.signed(self.c, n, "advance_epoch", {"expected_epoch": self.root(n)["epoch"]})
            with k.acks_lock:
                k.acks.at_least(k.acks.epoch, n.id, res["epoch"])
            k.stats.add("epoch_advances")
        elif r < 0.72:
            op = self.pick_op(n)
            if op is not None:
                k.touch(n, op)
                res = k.signed(self.c, n, "cancel", {"op": op})
                with k.acks_lock:
                    k.acks.terminal[(n.id, op)] = res["state"]
                k.stats.add("cancels")
        elif r < 0.85:
            prog = self.rng.choice(PROGS)
            p = k.request(self.c, "get_prog", {"neuron": n.id, "prog": prog})
            new = "paused" if p["state"] == "active" else "active"
            k.signed(
                self.c,
                n,
                "set_prog_state",
                {
                    "prog": prog,
                    "expected_state": p["state"],
                    "state": new,
                    "expected_state_version": p["state_version"],
                },
            )
            k.stats.add("pauses" if new == "paused" else "resumes")
        else:
            gen = self.root(n)["placement_generation"]
            res = k.signed(self.c, n, "release_placement", {"expected_generation": gen})
            with k.acks_lock:
                k.acks.at_least(k.acks.generation, n.id, res["placement_generation"])
            k.bind(self.c, n, self.rng.choice(WORKERS))
        self.stop.wait(self.rng.uniform(0.005, 0.04))  # pacing, not synchronization


# -- the run -------------------------------------------------------------------------------


def run_soak(
    *,
    kills: int,
    neurons: int,
    delay: tuple[float, float],
    kill_during_start: float = 0.1,
    rotate: float = 0.2,
    reconfigure: float = 0.1,
    seed: int | None = None,
    budget_s: float = 0.0,
) -> tuple[dict[str, Any], list[str], Cluster]:
    """Run `kills` crash cycles; return (figures, violations, cluster). After a kill,
    ``rotate`` and ``reconfigure`` are the chances of a ledger rotation and of an act
    reconfiguration before the next start. ``budget_s`` (0: none): no new cycle
    begins once it has passed (the last checks still run; ``budget_reached`` in
    the figures)."""
    seed = random.randrange(1 << 32) if seed is None else seed
    k = Cluster(seed)
    try:
        return _run(k, kills, neurons, delay, kill_during_start, (rotate, reconfigure), budget_s)
    except BaseException:
        k.cleanup()  # no daemon and no API outlive a failed run
        raise


def _run(
    k: Cluster,
    kills: int,
    neurons: int,
    delay: tuple[float, float],
    kill_during_start: float,
    operator: tuple[float, float],
    budget_s: float = 0.0,
) -> tuple[dict[str, Any], list[str], Cluster]:
    t0 = time.monotonic()
    k.setup(neurons)
    over = False
    while k.stats.c["kills"] < kills:
        if budget_s and time.monotonic() - t0 > budget_s:
            over = True
            break
        if k.stats.c["kills"]:
            k.between_lives(*operator)
        if k.rng.random() < kill_during_start and k.stats.c["kills"]:
            k.kill_during_start()
        else:
            if k.stats.c["kills"]:
                k.start()
                k.check_after_restart()
                k.rebind_all()
            k.cycle(delay)
        k.wait_for_orphans()
        k.check_after_kill()
    # a last start: everything through the reads, then a clean stop
    k.start()
    k.check_after_restart()
    with k.daemon.connect() as c:
        k.check_touched(c, k.daemon.boot or "", every=True)
    code = k.daemon.terminate()
    if code != 0:
        k.violations.append(f"SIGTERM after the soak: exit status {code}")
    k.check_after_kill()
    figures = k.figures()
    figures["seconds"] = round(time.monotonic() - t0, 1)
    if over:
        figures["budget_reached"] = budget_s
    (k.env.root / "soak-figures.json").write_text(json.dumps(figures, indent=2))
    return figures, k.violations, k
