"""The dispatch plumbing in-process: the router and the worker pool beside fakes.

Like httpcore's ``MockBackend`` or huey's ``MemoryHuey``: the pool runs its
real worker threads, claim units and outcome units against a real writer on
a temporary SQLite store, with scripted adapters (``echo``, and ``hold``,
whose call waits until released or killed). The router runs against a
fake writer that runs units inline. The real-process tests
(tests/daemon/test_dispatch.py, test_stop.py, ...) cover the same ways
through a daemon process; these show each hop without one.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from wardd.adapters import CallAborted, echo_adapter
from wardd.client import Neuron
from wardd.daemon.core.records import BootContext
from wardd.daemon.dispatch import attempt_units
from wardd.daemon.dispatch import management_units as mgmt
from wardd.daemon.dispatch.calls import CallEnd, Calls
from wardd.daemon.dispatch.descriptors import build_descriptors, check_descriptor
from wardd.daemon.dispatch.dispatcher import Dispatcher, Settler
from wardd.daemon.dispatch.dispatches import Dispatch, Execute, Invoke
from wardd.daemon.dispatch.guard import GuardTable
from wardd.daemon.dispatch.handlers import METHODS, Guard, Method
from wardd.daemon.dispatch.router import Authenticator, Lifecycle, Router
from wardd.daemon.dispatch.services import Services, Uses, Writes
from wardd.daemon.dispatch.tokens import Tokens
from wardd.daemon.dispatch.voids import Voids
from wardd.daemon.dispatch.workers import WorkerPool, worker_ids
from wardd.daemon.life.bridge import ThreadReply
from wardd.daemon.life.lifecycle import void_shutdown
from wardd.daemon.store.attempt_reads import AttemptReads
from wardd.daemon.store.boots import record_boot
from wardd.daemon.store.reads import Reads
from wardd.daemon.store.schema import migrate
from wardd.daemon.store.writer import Writer, connect, connect_reader
from wardd.protocol import (
    AttemptMismatch,
    BadRequest,
    Internal,
    Overloaded,
    Request,
    TokenVoid,
    Unauthenticated,
    UnknownMethod,
    UnknownNeuron,
    WrongNetwork,
    canonical_digest,
)

BOOT = "b" * 32
NETWORK = "testnet"
NEURON = "a" * 64
OTHER = "c" * 64  # a second neuron, placed on w0 too
PROG = "p"


@attrs.define
class HoldAdapter:
    """A scripted act: its call waits until `release` or an abort's kill."""

    tag: str = "hold"
    kind: str = "hold"
    in_process: bool = True
    max_arg_bytes: int = 1024
    abortable: bool = True
    entered: threading.Event = attrs.field(factory=threading.Event)
    release: threading.Event = attrs.field(factory=threading.Event)
    killed: list[str] = attrs.field(factory=list)

    def call(self, request: Any) -> bytes:
        self.entered.set()
        if not self.release.wait(30):
            raise TimeoutError("never released")
        if self.killed:
            raise CallAborted("killed")
        return b"held"

    def abort(self, key: str) -> None:
        self.killed.append(key)
        self.release.set()

    def claim_info(self) -> None:
        return None


@attrs.define(eq=False)
class World:
    writer: Writer
    reads: Reads
    pool: WorkerPool
    dispatcher: Dispatcher
    settler: Settler
    voids: Voids
    life: Lifecycle
    ctx: BootContext
    hold: HoldAdapter
    generations: dict[str, int]
    notified: list[tuple[str, dict[str, Any]]]
    guards: GuardTable

    @property
    def generation(self) -> int:
        return self.generations[NEURON]

    def submit_op(
        self, op: str, act: str = "echo", args: bytes = b"x", neuron: str = NEURON
    ) -> None:
        self.writer.call(mgmt.submit(neuron, PROG, op, act, args, self.ctx.act_bounds))

    def params(self, op: str, attempt: int = 1, neuron: str = NEURON) -> dict[str, Any]:
        generation = self.generations[neuron]
        return {"op": op, "expected_attempt": attempt, "placement_generation": generation}

    def invoke(self, op: str, act: str = "echo", neuron: str = NEURON) -> Dispatch:
        return Dispatch(neuron, act, Invoke(self.params(op, neuron=neuron)))

    def state(self, op: str, neuron: str = NEURON) -> str:
        return str(self.reads.get_operation(neuron, op)["state"])


@pytest.fixture
def world(tmp_path) -> Iterator[World]:
    db = tmp_path / "w.db"
    conn = connect(db)
    conn.row_factory = sqlite3.Row
    migrate(conn)
    record_boot(conn, boot=BOOT, started_at="2026-01-01T00:00:00Z", pid=1, version="t")
    writer = Writer(conn, on_fatal=lambda why: None)
    hold = HoldAdapter()
    adapters: dict[str, Any] = {"echo": echo_adapter(), "hold": hold}
    bounds = {tag: a.max_arg_bytes for tag, a in adapters.items()}
    descriptors = build_descriptors(
        workers=2, network=NETWORK, version="t", device="dev", boot=BOOT, act_bounds=bounds
    )
    digests = [canonical_digest(d) for d in descriptors]
    ctx = BootContext(
        boot=BOOT,
        network=NETWORK,
        advertised=dict(zip(digests, descriptors, strict=True)),
        act_bounds=bounds,
    )
    life = Lifecycle()
    guards = GuardTable()
    notified: list[tuple[str, dict[str, Any]]] = []
    calls = Calls()
    settler = Settler(
        calls, worker_ids(2), notify=lambda event, **about: notified.append((event, about))
    )
    pool = WorkerPool(
        2,
        guards=guards,
        writer=writer,
        adapters=adapters,
        ctx=ctx,
        calls=calls,
        on_recorded=settler.recorded,
        stopping=life.stop_begun,
    )
    voids = Voids(writer)
    dispatcher = Dispatcher(pool, voids)
    reads = Reads(connect_reader(db), 1 << 20)
    writer.start()
    pool.start()
    try:
        admitted = check_descriptor(descriptors[0], descriptors)  # the placement names w0
        generations = {}
        for neuron in (NEURON, OTHER):
            writer.call(mgmt.register_neuron(neuron))
            writer.call(mgmt.bind_placement(neuron, 0, admitted, canonical_digest(admitted)))
            writer.call(mgmt.create_prog(neuron, PROG, 100))
            root = reads.get_neuron(neuron)
            acts = ["echo", "hold"]
            writer.call(mgmt.set_grant(neuron, PROG, acts, True, root["policy_version"]))
            generations[neuron] = reads.get_neuron(neuron)["placement_generation"]
        yield World(
            writer,
            reads,
            pool,
            dispatcher,
            settler,
            voids,
            life,
            ctx,
            hold,
            generations,
            notified,
            guards,
        )
    finally:
        hold.release.set()
        pool.begin_stop()
        pool.join(10)
        writer.stop()


async def wait_entered(hold: HoldAdapter) -> None:
    """Until the worker is inside the hold act (a thread event, waited off the loop)."""
    assert await trio.to_thread.run_sync(hold.entered.wait, 10)


def _no_outcome_unit(ref: Any, end: Any) -> Any:
    """In place of ``attempt_units.outcome``: the outcome's unit cannot be made."""
    raise MemoryError("injected: the outcome's unit cannot be made")


class TestWorkerPool:
    async def test_an_invoke_is_claimed_called_recorded_and_answered(self, world):
        """submit → claim unit → adapter → outcome unit → the reply, once durable."""
        world.submit_op("op1", args=b"hello")
        got = await world.dispatcher.run("w0", world.invoke("op1"))
        assert got == {"op": "op1", "attempt": 1, "status": "succeeded", "result": b"hello"}
        assert world.state("op1") == "retained"
        assert len(world.pool.calls) == 0  # the call left the table once settled
        counts = {w: c["succeeded"] for w, c in world.settler.counts().items()}
        assert counts == {"w0": 1, "w1": 0}

    async def test_an_execute_claims_its_prepared_attempt(self, world):
        """The same way for a token's attempt: Execute(ref) claims exactly that attempt."""
        world.submit_op("op2")
        ref = world.writer.call(attempt_units.prepare(world.ctx, NEURON, world.params("op2")))
        d = Dispatch(NEURON, ref.act, Execute(ref))
        got = await world.dispatcher.run(ref.worker, d)
        assert (got["attempt"], got["status"]) == (ref.attempt, "succeeded")

    async def test_a_dispatch_sent_to_the_wrong_worker_is_rerouted(self, world):
        """The claim unit answers Reroute when the placement names another
        worker: the dispatch runs there, and is answered once."""
        world.submit_op("op3")
        got = await world.dispatcher.run("w1", world.invoke("op3"))
        assert got["status"] == "succeeded"
        counts = {w: c["succeeded"] for w, c in world.settler.counts().items()}
        assert counts == {"w0": 1, "w1": 0}

    async def test_a_refused_claim_answers_its_refusal_and_writes_nothing(self, world):
        """A refusal inside the claim unit (the attempt number is stale) is the answer."""
        world.submit_op("op4")
        d = Dispatch(NEURON, "echo", Invoke(world.params("op4", attempt=5)))
        with pytest.raises(AttemptMismatch):
            await world.dispatcher.run("w0", d)
        assert world.state("op4") == "pending"
        assert len(world.pool.calls) == 0

    async def test_a_dispatch_whose_guard_is_held_waits_and_others_pass_it(self, world):
        """A dispatch whose neuron's guard is held exclusively is set aside:
        its worker serves another neuron's dispatch meanwhile (woken by that
        dispatch, not by a release), and runs the first once the guard is
        released (woken by the release)."""
        world.submit_op("a1")
        world.submit_op("b1", neuron=OTHER)
        await world.guards.acquire_exclusive_async(NEURON)
        with trio.fail_after(30):  # a worker nobody wakes would hang here (unshielded waits)
            first = world.pool.submit("w0", world.invoke("a1"))
            other = world.pool.submit("w0", world.invoke("b1", neuron=OTHER))
            assert first is not None and other is not None
            await other.done.wait()
            assert other.result()["status"] == "succeeded"
            assert not first.done.is_set() and world.state("a1") == "pending"
            world.guards.release_exclusive(NEURON)
            await first.done.wait()
        assert first.result()["status"] == "succeeded"

    async def test_an_abort_during_the_call_kills_it_and_answers_both(self, world):
        """contract §3.8: the kill ends the call unknown (aborted: true); the
        dispatch and the abort are answered once that outcome is durable."""
        world.submit_op("held", act="hold")
        async with trio.open_nursery() as nursery:
            answers: list[Any] = []

            async def dispatch() -> None:
                answers.append(await world.dispatcher.run("w0", world.invoke("held", "hold")))

            nursery.start_soon(dispatch)
            await wait_entered(world.hold)
            with world.reads.snapshot() as rconn:  # as the abort handler reads it
                attempt_id, _act = attempt_units.abort_target(rconn, NEURON, "held", 1)
            abort_reply = ThreadReply()
            assert world.pool.abort(attempt_id, abort_reply)
            end = await world.dispatcher.wait(abort_reply)
        assert isinstance(end, CallEnd)
        assert (end.status, end.killed, end.aborted) == ("unknown", True, True)
        assert world.hold.killed == [f"{NEURON}/held/1"]  # the idempotency key
        (got,) = answers
        assert got["status"] == "unknown" and got["error"].startswith("aborted by the operator")
        assert [e for e, _ in world.notified] == ["attempt_unknown"]
        assert not world.pool.abort(attempt_id, ThreadReply())  # it has ended

    async def test_the_stop_voids_and_answers_what_was_never_claimed(self, world):
        """contract §3.6: begin_stop hands back the queued dispatches; each is
        answered token_void (shutdown) once the voids are durable, and a
        dispatch submitted after it is refused the same way."""
        world.submit_op("busy", act="hold")
        world.submit_op("queued")
        ref = world.writer.call(attempt_units.prepare(world.ctx, NEURON, world.params("queued")))
        attempts = AttemptReads(world.reads.conn)  # on the reads' connection, as in the daemon
        tokens = Tokens(ttl_s=60, void=world.voids.void, attempt_state=attempts.attempt_state)
        async with trio.open_nursery() as nursery:
            errors: list[Any] = []

            async def run(worker: str, d: Dispatch) -> None:
                try:
                    await world.dispatcher.run(worker, d)
                except TokenVoid as err:
                    errors.append(err.data)

            nursery.start_soon(run, "w0", world.invoke("busy", "hold"))
            await wait_entered(world.hold)  # w0 is busy: the next dispatch waits in its queue
            nursery.start_soon(run, "w0", Dispatch(NEURON, "echo", Execute(ref)))
            await trio.testing.wait_all_tasks_blocked()
            world.life.stop_begun.set()
            queued = world.pool.begin_stop()
            assert [d.how for d, _reply in queued] == [Execute(ref)]
            await void_shutdown(world.voids, queued, tokens, [])
            await trio.testing.wait_all_tasks_blocked()
            assert errors == [{"reason": "shutdown"}]
            assert attempts.attempt_state(ref.attempt_id) == ("void", "shutdown")
            with pytest.raises(TokenVoid):  # submitted after the stop began
                await world.dispatcher.run("w1", world.invoke("queued"))
            world.hold.release.set()  # the call in progress ends within the grace
        assert world.state("busy") == "retained"

    async def test_an_outcome_that_cannot_be_submitted_answers_may_have_run(
        self, world, monkeypatch
    ):
        """contract §3.2.3: the outcome's unit cannot even be made (twice): the
        daemon fail-stops, and the caller is answered at once with the attempt
        that may have run (never left to the stop's closed connection)."""
        world.submit_op("lost")

        monkeypatch.setattr(attempt_units, "outcome", _no_outcome_unit)
        with pytest.raises(Internal) as lost:
            await world.dispatcher.run("w0", world.invoke("lost"))
        assert lost.value.data == {"reason": "fail_stop", "op": "lost", "attempt": 1}
        assert world.writer.fatal is not None  # the daemon is told to stop
        assert world.state("lost") == "running"  # unknown at the next start, never guessed

    async def test_an_abort_of_a_call_whose_outcome_is_lost_is_answered_too(
        self, world, monkeypatch
    ):
        """The abort's caller waits on the same outcome: it is answered the
        same "may have run", not left waiting until the stop drops it."""
        world.submit_op("held", act="hold")

        async with trio.open_nursery() as nursery:
            answers: list[BaseException] = []

            async def dispatch() -> None:
                with pytest.raises(Internal) as lost:
                    await world.dispatcher.run("w0", world.invoke("held", "hold"))
                answers.append(lost.value)

            nursery.start_soon(dispatch)
            await wait_entered(world.hold)
            monkeypatch.setattr(attempt_units, "outcome", _no_outcome_unit)
            with world.reads.snapshot() as rconn:
                attempt_id, _act = attempt_units.abort_target(rconn, NEURON, "held", 1)
            abort_reply = ThreadReply()
            assert world.pool.abort(attempt_id, abort_reply)
            with trio.fail_after(10):  # unshielded, unlike the dispatcher's own wait
                await abort_reply.done.wait()
            with pytest.raises(Internal) as aborted:
                abort_reply.result()
        claimed = {"reason": "fail_stop", "op": "held", "attempt": 1}
        assert aborted.value.data == claimed
        assert [a.data for a in answers] == [claimed]
        assert len(world.pool.calls) == 0  # the call left the table


# -- the router ---------------------------------------------------------------------------


class FakeWriter:
    """Runs each unit inline (a unit here is a plain function of None)."""

    def __init__(self) -> None:
        self.ran: list[Any] = []

    async def run(self, unit: Any, *, critical: bool = False) -> Any:
        self.ran.append(unit)
        return unit(None)


class FakeReads:
    def __init__(self, neurons: set[str]) -> None:
        self.neurons = neurons

    def neuron_exists(self, neuron: str) -> bool:
        return neuron in self.neurons


def router(
    life: Lifecycle,
    guards: GuardTable,
    writer: FakeWriter,
    auth: Any,
    methods: dict[str, Method[Any]] | None = None,
) -> Router:
    """A router over the fake writer; of the handlers' groups only ``writes`` is real."""
    groups: dict[str, Any] = {a.name: None for a in attrs.fields(Services)}
    writes = Writes(writer, ctx=None, descriptors=[], registered=lambda neuron: None)
    services = Services(**{**groups, "writes": writes})
    return Router(
        services,
        life=life,
        auth=auth,
        guards=guards,
        writer=writer,
        dispatcher=None,
        **({} if methods is None else {"methods": methods}),
    )


def request(method: str, params: dict[str, Any]) -> Request:
    return Request(id=1, method=method, params=params)


class SignedBy:
    """A real Ed25519 signer, so that the router's checks run for real."""

    def __init__(self) -> None:
        self.neuron = Neuron.generate()

    def params(self, method: str, params: dict[str, Any], network: str = NETWORK) -> dict[str, Any]:
        return self.neuron.sign(method, params, network)


class TestRouter:
    async def test_a_method_declared_exclusive_runs_its_unit_under_the_exclusive_guard(self):
        """The table is the single source: EXCLUSIVE in the entry is what takes
        the guard, around the unit the handler answers; NONE does not."""
        guards, writer, life = GuardTable(), FakeWriter(), Lifecycle()
        life.recovered.set()
        signer = SignedBy()
        neuron = signer.neuron.id
        auth = Authenticator(NETWORK, FakeReads({neuron}).neuron_exists)

        def unit(tx: Any) -> bool:  # what a worker would see: can it take the guard shared?
            with guards.cond:
                shared = guards.try_shared_locked(neuron)
            if shared:
                guards.release_shared(neuron)
            return not shared

        async def handler(s: Any, conn: Any, n: str, p: Any) -> Any:
            return unit

        async def plain(s: Any, conn: Any, n: str, p: Any) -> Any:
            return await s.writer.run(unit)

        table = {
            "excl": Method(
                ({}, {}), signed=True, handler=handler, uses=Uses.WRITES, guard=Guard.EXCLUSIVE
            ),
            "free": Method(
                ({}, {}), signed=True, handler=plain, uses=Uses.WRITES, guard=Guard.NONE
            ),
        }
        r = router(life, guards, writer, auth, table)
        assert await r.handle(None, request("excl", signer.params("excl", {}))) is True
        assert await r.handle(None, request("free", signer.params("free", {}))) is False

    def test_the_real_tables_exclusive_writes_answer_their_unit_for_the_router(self):
        """Each EXCLUSIVE entry of METHODS leaves the guard to the router."""
        exclusive = [n for n, m in METHODS.items() if m.guard is Guard.EXCLUSIVE]
        assert exclusive and all(METHODS[n].signed for n in exclusive)

    async def test_the_checks_come_in_the_contracts_order(self):
        """stopping, then unknown method, then params, then network, signature,
        registration: each refusal is the first check that fails."""
        guards, writer, life = GuardTable(), FakeWriter(), Lifecycle()
        life.recovered.set()
        signer, stranger = SignedBy(), SignedBy()
        auth = Authenticator(NETWORK, FakeReads({signer.neuron.id}).neuron_exists)
        r = router(life, guards, writer, auth)
        good = signer.params("advance_epoch", {"expected_epoch": 0})
        with pytest.raises(UnknownMethod):
            await r.handle(None, request("nope", good))
        with pytest.raises(BadRequest):  # params before the signature
            await r.handle(None, request("advance_epoch", {**good, "expected_epoch": "x"}))
        other_net = signer.params("advance_epoch", {"expected_epoch": 0}, network="elsewhere")
        with pytest.raises(WrongNetwork):  # the network before the signature
            await r.handle(None, request("advance_epoch", {**other_net, "network": "elsewhere"}))
        with pytest.raises(Unauthenticated):
            await r.handle(None, request("advance_epoch", {**good, "sig": bytes(64)}))
        with pytest.raises(UnknownNeuron):  # a good signature of an unregistered neuron
            await r.handle(
                None,
                request("advance_epoch", stranger.params("advance_epoch", {"expected_epoch": 0})),
            )
        life.stop_begun.set()
        for method in ("advance_epoch", "nope"):  # once stopping, before anything else
            with pytest.raises(Overloaded):
                await r.handle(None, request(method, {"expected_epoch": "x"}))
        assert writer.ran == []

    async def test_only_the_declared_methods_wait_for_the_recovery(self):
        """A read waits until the start-up recovery is done; status does not."""
        guards, writer, life = GuardTable(), FakeWriter(), Lifecycle()
        table = {
            "early": Method(
                ({}, {}),
                signed=False,
                handler=_answer,
                uses=Uses.READS,
                waits_for_recovery=False,
            ),
            "late": Method(({}, {}), signed=False, handler=_answer, uses=Uses.READS),
        }
        r = router(life, guards, writer, None, table)
        assert await r.handle(None, request("early", {})) == "answered"
        answered: list[Any] = []
        async with trio.open_nursery() as nursery:

            async def late() -> None:
                answered.append(await r.handle(None, request("late", {})))

            nursery.start_soon(late)
            await trio.testing.wait_all_tasks_blocked()
            assert answered == []
            life.recovered.set()
        assert answered == ["answered"]


async def _answer(s: Any, conn: Any, neuron: Any, p: Any) -> str:
    return "answered"


class TestBridge:
    async def test_replies_answered_together_from_a_thread_all_arrive(self):
        """The writer answers a batch's replies in a row from its thread: the
        loop is woken once for several of them, and every one arrives, each
        with its own answer."""
        replies = [ThreadReply() for _ in range(5)]

        def answer_all() -> None:
            for i, reply in enumerate(replies):
                reply(i, None)

        await trio.to_thread.run_sync(answer_all)
        with trio.fail_after(30):
            for reply in replies:
                await reply.done.wait()
        assert [r.result() for r in replies] == list(range(5))
        late = ThreadReply()  # and the next answer, after that flush, wakes the loop again
        await trio.to_thread.run_sync(late, "late", None)
        with trio.fail_after(30):
            await late.done.wait()
        assert late.result() == "late"
