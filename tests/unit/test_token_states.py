"""The token-state table (`wardd.daemon.dispatch.tokens.TOKEN_MOVES`), pure: no trio, no threads.

Every (from, to) pair is tried against `move_token`: the legal ones are
spelled out here again, so that a move added to or dropped from the table is
a deliberate edit of this file. Then the registry's operations are checked to
make exactly their moves (`TokenRegistry` has no clock and no I/O).
`Tokens` on the event loop is tested on trio's MockClock in test_tokens.py.
"""

from __future__ import annotations

import itertools

import attrs
import pytest

from tests.unit._refs import attempt_ref
from wardd.daemon.dispatch.tokens import (
    TOKEN_MOVES,
    DeadHandle,
    DispatchToken,
    TokenRegistry,
    TokenState,
    move_token,
)
from wardd.protocol import Internal, TokenInvalid, TokenVoid

T = TokenState
REF = attempt_ref()

LEGAL = {
    (T.LIVE, T.USED),
    (T.LIVE, T.VOIDED),
    (T.LIVE, T.VOIDING),
    (T.LIVE, T.DROPPED),
    (T.VOIDING, T.VOIDED),
    (T.VOIDING, T.VOID_FAILED),
}
PAIRS = list(itertools.product(list(T), list(T)))


class TestTheTable:
    @pytest.mark.parametrize(("frm", "to"), PAIRS, ids=[f"{f.value}-{t.value}" for f, t in PAIRS])
    def test_move_token_makes_exactly_the_moves_of_the_table(self, frm, to):
        """A (from, to) move is made iff it is legal; any other raises internal."""
        if (frm, to) in LEGAL:
            assert move_token(frm, to) is to
        else:
            with pytest.raises(Internal):
                move_token(frm, to)

    def test_the_table_is_the_legal_moves(self):
        """The table holds exactly the moves listed here."""
        assert TOKEN_MOVES == LEGAL

    def test_only_live_and_voiding_tokens_move(self):
        """Used, voided, void_failed and dropped are final; every state is
        reached from live."""
        assert {frm for frm, _to in TOKEN_MOVES} == {T.LIVE, T.VOIDING}
        reached, frontier = {T.LIVE}, [T.LIVE]
        while frontier:
            state = frontier.pop()
            for frm, to in TOKEN_MOVES:
                if frm == state and to not in reached:
                    reached.add(to)
                    frontier.append(to)
        assert reached == set(T)

    def test_an_illegal_move_leaves_the_token_as_it_was(self):
        """DispatchToken.move refuses a move not in the table and keeps its state."""
        token = DispatchToken(1, REF, 0.0)
        token.move(T.DROPPED)
        with pytest.raises(Internal):
            token.move(T.USED)
        assert token.state is T.DROPPED


class TestTheRegistryMakesItsMoves:
    def test_issue_is_live_and_consume_is_used(self):
        """A new token is live; execute's consume makes it used, once."""
        reg = TokenRegistry()
        handle, token = reg.issue(1, REF, 0.0)
        assert token.state is T.LIVE
        assert reg.consume(handle, token) is REF
        assert token.state is T.USED
        with pytest.raises(TokenInvalid, match="already used"):
            token.consume()
        assert isinstance(reg.lookup(handle, 1), DeadHandle)

    def test_a_void_is_voiding_until_it_is_written(self):
        """void (and expire, void_all) make a live token voiding; it keeps its
        reason, stays held, and cannot be consumed (token_void)."""
        reg = TokenRegistry()
        handle, token = reg.issue(1, REF, 0.0)
        assert reg.expire(handle) is token
        assert (token.state, token.void_reason, token.void_ok) == (
            T.VOIDING,
            "token_expired",
            False,
        )
        assert reg.held() == 1 and len(reg) == 0
        with pytest.raises(TokenVoid):
            reg.consume(handle, token)
        assert token.state is T.VOIDING
        assert reg.void(handle, "shutdown") is None  # no longer live: no second void
        token.move(T.VOIDED)
        reg.void_written(handle)
        assert token.void_ok and reg.held() == 0

    def test_void_all_voids_only_live_tokens(self):
        """At shutdown only live tokens are voided; a used one is left alone."""
        reg = TokenRegistry()
        used_handle, used = reg.issue(1, REF, 0.0)
        _handle, live = reg.issue(1, attrs.evolve(REF, attempt_id=42), 0.0)
        reg.consume(used_handle, used)
        assert [t for _h, t in reg.void_all("shutdown")] == [live]
        assert (used.state, live.state) == (T.USED, T.VOIDING)

    def test_a_dropped_connection_drops_its_live_tokens(self):
        """drop_connection makes its live tokens dropped; a voiding one is kept
        until its void is written."""
        reg = TokenRegistry()
        h1, live = reg.issue(1, REF, 0.0)
        h2, voiding = reg.issue(1, attrs.evolve(REF, attempt_id=42), 0.0)
        reg.void(h2, "token_expired")
        assert reg.drop_connection(1) == [REF]
        assert (live.state, voiding.state) == (T.DROPPED, T.VOIDING)
        assert reg.held() == 1

    def test_consume_void_marks_the_token_voided(self):
        """A live token found voided by a write on arrival is voided and forgotten."""
        reg = TokenRegistry()
        handle, token = reg.issue(1, REF, 0.0)
        reg.consume_void(handle, token)
        assert token.state is T.VOIDED and reg.held() == 0
        with pytest.raises(Internal):  # its attempt is gone: it cannot be used
            token.consume()
