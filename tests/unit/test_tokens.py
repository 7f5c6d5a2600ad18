"""Token expiry and voids on the event loop (`wardd.daemon.dispatch.tokens.Tokens`), on
trio's MockClock.

The durable void is a fake here (a recording async function): these tests are
about when a void is asked for and what an `execute` waiting on it is told;
the real daemon's voids are tested end to end in tests/daemon.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
import pytest
import trio
import trio.testing

from tests.unit._refs import attempt_ref
from wardd.daemon.dispatch.tokens import AttemptRecord, Tokens
from wardd.protocol import Internal, TokenInvalid, TokenVoid

TTL = 30.0
CONN = 7
REF = attempt_ref()


@attrs.define
class FakeStore:
    """Records the voids asked for; a void waits for `release` when `gated`."""

    voids: list[tuple[int, str]] = attrs.field(factory=list)
    records: dict[int, AttemptRecord] = attrs.field(factory=dict)
    pruned: set[int] = attrs.field(factory=set)
    gated: bool = False
    ok: bool = True
    release: trio.Event = attrs.field(factory=trio.Event)

    async def void(self, attempt_id: int, reason: str) -> bool:
        self.voids.append((attempt_id, reason))
        if self.gated:
            await self.release.wait()
        if self.ok:
            self.records[attempt_id] = ("void", reason)
        return self.ok

    def attempt_state(self, attempt_id: int) -> AttemptRecord | None:
        if attempt_id in self.pruned:
            return None
        return self.records.get(attempt_id, ("prepared", None))


def make_tokens(store: FakeStore, clock: Callable[[], float] = trio.current_time) -> Tokens:
    return Tokens(ttl_s=TTL, void=store.void, attempt_state=store.attempt_state, clock=clock)


@pytest.fixture
def store() -> FakeStore:
    return FakeStore()


@pytest.fixture
def running(
    store: FakeStore, autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> Tokens:
    """A `Tokens` whose expiry task runs (the test asks for the autojumping clock too)."""
    tokens = make_tokens(store)
    nursery.start_soon(tokens.run)
    return tokens


class TestExpiry:
    async def test_a_token_is_live_until_just_before_its_deadline(
        self, autojump_clock, running, store
    ):
        """Just before its deadline a token is live, nothing is voided, and it can be used."""
        handle = running.issue(CONN, REF)
        await trio.sleep_until(trio.current_time() + TTL - 0.001)
        await trio.testing.wait_all_tasks_blocked()
        assert (len(running), store.voids) == (1, [])
        assert await running.redeem(handle, CONN) == REF
        assert running.registry.held() == 0

    async def test_a_token_expires_exactly_at_its_deadline_and_is_voided_once(
        self, autojump_clock, running, store
    ):
        """At its deadline the expiry task voids the token's attempt once,
        with the reason token_expired, and the registry forgets it."""
        handle = running.issue(CONN, REF)
        await trio.sleep_until(trio.current_time() + TTL)
        await trio.testing.wait_all_tasks_blocked()
        assert store.voids == [(REF.attempt_id, "token_expired")]
        assert (len(running), running.registry.held()) == (0, 0)
        with pytest.raises(TokenVoid) as err:
            await running.redeem(handle, CONN)
        assert err.value.data == {"reason": "token_expired"}
        await trio.sleep(10 * TTL)
        assert store.voids == [(REF.attempt_id, "token_expired")]

    async def test_an_execute_at_the_deadline_before_the_timer_voids_once(
        self, store, autojump_clock
    ):
        """An execute that finds its token past the deadline before the expiry
        task ran expires it itself; the task, run later, asks for no second void."""
        tokens = make_tokens(store)
        handle = tokens.issue(CONN, REF)
        await trio.sleep(TTL)
        with pytest.raises(TokenVoid) as err:
            await tokens.redeem(handle, CONN)
        assert err.value.data == {"reason": "token_expired"}
        with trio.move_on_after(2 * TTL):
            await tokens.run()
        assert store.voids == [(REF.attempt_id, "token_expired")]

    async def test_an_execute_racing_the_expiry_waits_for_the_durable_void(
        self, autojump_clock, running, store
    ):
        """An execute that arrives while the expiry's void is being written is
        answered token_void only once that void is durable."""
        store.gated = True
        handle = running.issue(CONN, REF)
        await trio.sleep(TTL)
        await trio.testing.wait_all_tasks_blocked()
        assert store.voids == [(REF.attempt_id, "token_expired")]  # written, not yet durable
        answers: list[BaseException] = []

        async def execute() -> None:
            try:
                await running.redeem(handle, CONN)
            except (TokenVoid, TokenInvalid) as exc:
                answers.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(execute)
            await trio.sleep(5.0)  # mock time: the write stays pending however long
            assert answers == [] and running.registry.held() == 1
            store.release.set()
        assert [type(a) for a in answers] == [TokenVoid]
        assert answers[0].data == {"reason": "token_expired"}  # type: ignore[attr-defined]
        assert store.voids == [(REF.attempt_id, "token_expired")]
        assert running.registry.held() == 0

    async def test_a_void_that_cannot_be_written_answers_internal(
        self, autojump_clock, running, store
    ):
        """If the expiry's void fails (the daemon fail-stops), the execute
        waiting for it is answered internal, never token_void."""
        store.gated, store.ok = True, False
        handle = running.issue(CONN, REF)
        await trio.sleep(TTL)
        answers: list[BaseException] = []

        async def execute() -> None:
            try:
                await running.redeem(handle, CONN)
            except (Internal, TokenVoid, TokenInvalid) as exc:
                answers.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(execute)
            await trio.testing.wait_all_tasks_blocked()
            store.release.set()
        assert [type(a) for a in answers] == [Internal]

    async def test_used_and_dropped_tokens_are_never_expired(self, autojump_clock, running, store):
        """A token used before its deadline, or dropped with its connection,
        is not voided by the expiry task."""
        used = running.issue(CONN, REF)
        dropped = running.issue(CONN + 1, attrs.evolve(REF, attempt_id=42))
        assert await running.redeem(used, CONN) == REF
        assert [r.attempt_id for r in running.drop_connection(CONN + 1)] == [42]
        await trio.sleep(2 * TTL)
        assert store.voids == []
        with pytest.raises(TokenInvalid):
            await running.redeem(dropped, CONN + 1)

    async def test_deadlines_come_from_the_injected_clock(self, store, autojump_clock):
        """The deadline is read from the clock `Tokens` is given: a clock that
        has moved past it expires the token though trio's clock has not."""
        skew = 0.0
        tokens = make_tokens(store, clock=lambda: trio.current_time() + skew)
        handle = tokens.issue(CONN, REF)
        skew = TTL
        with pytest.raises(TokenVoid) as err:
            await tokens.redeem(handle, CONN)
        assert err.value.data == {"reason": "token_expired"}
        assert store.voids == [(REF.attempt_id, "token_expired")]


class TestVoids:
    async def test_a_token_whose_attempt_a_write_voided_is_answered_at_once(
        self, autojump_clock, running, store
    ):
        """A live token whose attempt a write has voided (a revocation, say) is
        answered token_void with the recorded reason, and no void is asked for."""
        handle = running.issue(CONN, REF)
        store.records[REF.attempt_id] = ("void", "revoked")
        with pytest.raises(TokenVoid) as err:
            await running.redeem(handle, CONN)
        assert err.value.data == {"reason": "revoked"}
        assert store.voids == [] and running.registry.held() == 0

    async def test_a_shutdown_void_answers_its_execute_only_once_written(
        self, autojump_clock, running, store
    ):
        """At shutdown every live token is voided in memory; an execute of one
        waits until the daemon says the voids are durable, then is token_void."""
        handle = running.issue(CONN, REF)
        voided = running.void_all("shutdown")
        assert [t.ref for _h, t in voided] == [REF] and len(running) == 0
        answers: list[BaseException] = []

        async def execute() -> None:
            try:
                await running.redeem(handle, CONN)
            except TokenVoid as exc:
                answers.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(execute)
            await trio.testing.wait_all_tasks_blocked()
            assert answers == []
            running.voids_written(voided, ok=True)
        assert [a.data for a in answers] == [{"reason": "shutdown"}]  # type: ignore[attr-defined]
        assert running.registry.held() == 0
        await trio.sleep(2 * TTL)
        assert store.voids == []  # the shutdown wrote them itself, in one unit

    async def test_a_used_handle_is_answered_from_its_attempts_record(
        self, autojump_clock, running, store
    ):
        """After a token is used its handle is token_invalid ("already used");
        once its op is pruned, token_invalid saying the attempt no longer exists."""
        handle = running.issue(CONN, REF)
        await running.redeem(handle, CONN)
        store.records[REF.attempt_id] = ("running", None)
        with pytest.raises(TokenInvalid, match="already used"):
            await running.redeem(handle, CONN)
        store.pruned.add(REF.attempt_id)
        with pytest.raises(TokenInvalid, match="no longer exists"):
            await running.redeem(handle, CONN)
