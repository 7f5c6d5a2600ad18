"""Dispatch tokens (contract §2, §3.2; docs/contract.md).

A token lives only in this process's memory. It cannot be copied,
deep-copied or pickled, is consumed by value exactly once, is bound to the
connection that prepared it and expires after ``token_ttl_s``. On the wire
it is a 32-byte handle that looks random: nothing public (attempt metadata,
an old signature, a history record) can construct one, and the handle is
never logged or stored (``repr`` shows only the attempt).

Memory is bounded by the *live* tokens only. A used, expired or voided
token leaves nothing behind but what its attempt's record holds: the
handle itself carries its attempt id, masked and authenticated with a key
of this boot and bound to the connection id, so a later presentation of a
dead handle is recognised (the attempt's record then says ``token_void``
and why, or that the token was used) without keeping a tombstone per token.
A token whose void is still being written is kept until that void is
durable, so that its ``execute`` answers only after it is.

A token's life is the table :data:`TOKEN_MOVES`: a token is ``live`` until
it is used, voided or dropped with its connection, and a voided token is
``voiding`` until its void is durable (``voided``) or could not be written
(``void_failed``: the daemon fail-stops). It moves only through
:func:`move_token`, which refuses any move not in the table.

:class:`TokenRegistry` is the bookkeeping, with no clock and no I/O;
:class:`Tokens` is its event-loop side: it gives each token its deadline
from an injectable clock, runs the one expiry task, redeems a handle for
``execute`` and has the daemon write each void (a function it is given).
"""

from __future__ import annotations

import collections
import enum
import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable
from typing import Any, Final, NoReturn

import attrs
import trio

from wardd.protocol import Internal, TokenInvalid, TokenVoid, WarddError

from ..core.attempts import pruned_token
from ..core.records import AttemptRef

__all__ = [
    "TOKEN_MOVES",
    "DeadHandle",
    "DispatchToken",
    "TokenRegistry",
    "TokenState",
    "Tokens",
    "move_token",
]

#: An attempt's (state, void reason) by its row id, or None if it is gone (pruned).
AttemptRecord = tuple[str, str | None]

HANDLE_BYTES = 32
_ID_BYTES = 8
_TAG_BYTES = HANDLE_BYTES - _ID_BYTES


class TokenState(enum.Enum):
    """Where a dispatch token is in its life (see :data:`TOKEN_MOVES`)."""

    LIVE = "live"
    """Issued and not yet used, voided or dropped: ``execute`` may use it."""
    USED = "used"
    """An ``execute`` took its attempt."""
    VOIDING = "voiding"
    """Voided in memory (expiry, shutdown); its attempt's void is being written."""
    VOIDED = "voided"
    """Its attempt's void is durable."""
    VOID_FAILED = "void_failed"
    """Its attempt's void could not be written: the daemon fail-stops."""
    DROPPED = "dropped"
    """Its connection closed: the daemon voids its attempt (contract §3.2.2)."""


T = TokenState

#: Every move a token may make, (from, to); ``used``, ``voided``,
#: ``void_failed`` and ``dropped`` are final.
TOKEN_MOVES: Final[frozenset[tuple[TokenState, TokenState]]] = frozenset(
    {
        (T.LIVE, T.USED),  # consume: execute takes the attempt
        (T.LIVE, T.VOIDED),  # consume_void: a write already voided its attempt durably
        (T.LIVE, T.VOIDING),  # void, expire, void_all: the expiry or the shutdown
        (T.LIVE, T.DROPPED),  # drop_connection: its connection closed
        (T.VOIDING, T.VOIDED),  # the void is durable
        (T.VOIDING, T.VOID_FAILED),  # the void could not be written
    }
)


def move_token(state: TokenState, to: TokenState) -> TokenState:
    """The one way a token changes state: returns ``to``, or raises
    ``internal`` for a move that is not in :data:`TOKEN_MOVES`."""
    if (state, to) not in TOKEN_MOVES:
        raise Internal(f"a dispatch token cannot move {state.value} -> {to.value}")
    return to


class DispatchToken:
    __slots__ = ("conn_id", "deadline", "ref", "state", "void_done", "void_reason")

    def __init__(self, conn_id: int, ref: AttemptRef, deadline: float) -> None:
        self.conn_id = conn_id
        self.ref = ref
        self.deadline = deadline
        self.state = T.LIVE
        self.void_reason: str | None = None  # set when it is voided in memory
        self.void_done: trio.Event | None = None  # set once the void is written (or failed)

    @property
    def void_ok(self) -> bool:
        """Its attempt's void is durable."""
        return self.state is T.VOIDED

    def move(self, to: TokenState) -> None:
        """Move to ``to`` (:func:`move_token`: an illegal move raises)."""
        self.state = move_token(self.state, to)

    def _refuse(self, *_: Any) -> NoReturn:
        raise TypeError("a dispatch token cannot be copied or serialized")

    __copy__ = __deepcopy__ = __reduce__ = __reduce_ex__ = __getstate__ = _refuse

    def consume(self) -> AttemptRef:
        """Take the attempt out of the token; a second use is refused."""
        if self.state is T.USED:
            raise TokenInvalid("the token was already used")
        self.move(T.USED)
        return self.ref

    def __repr__(self) -> str:
        return f"<DispatchToken op={self.ref.op!r} attempt={self.ref.attempt}>"


@attrs.frozen
class DeadHandle:
    """A handle this boot issued to this connection whose token is gone
    (used, or voided durably): its attempt's record tells which."""

    attempt_id: int


class TokenRegistry:
    """Handle → live token, owned by the event loop (single-threaded access)."""

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)
        self._live: dict[bytes, DispatchToken] = {}
        self._voiding: dict[bytes, DispatchToken] = {}  # void not yet durable
        self._by_conn: dict[int, set[bytes]] = {}

    def __len__(self) -> int:
        """The number of live tokens."""
        return len(self._live)

    def held(self) -> int:
        """Every token this registry still holds (live, or voided and not yet durable)."""
        return len(self._live) + len(self._voiding)

    # -- handles ----------------------------------------------------------------

    def _tag(self, conn_id: int, attempt_id: int) -> bytes:
        msg = b"wardd-token/1|%d|%d" % (conn_id, attempt_id)
        return hmac.digest(self._key, msg, hashlib.sha256)[:_TAG_BYTES]

    def _mask(self, tag: bytes) -> int:
        pad = hmac.digest(self._key, b"wardd-token-mask/1|" + tag, hashlib.sha256)
        return int.from_bytes(pad[:_ID_BYTES], "big")

    def _handle(self, conn_id: int, attempt_id: int) -> bytes:
        tag = self._tag(conn_id, attempt_id)
        masked = attempt_id ^ self._mask(tag)
        return masked.to_bytes(_ID_BYTES, "big") + tag

    def _attempt_of(self, handle: bytes, conn_id: int) -> int | None:
        """The attempt id a handle was issued for on ``conn_id``, or None."""
        if len(handle) != HANDLE_BYTES:
            return None
        tag = handle[_ID_BYTES:]
        attempt_id = int.from_bytes(handle[:_ID_BYTES], "big") ^ self._mask(tag)
        if not hmac.compare_digest(tag, self._tag(conn_id, attempt_id)):
            return None
        return attempt_id

    # -- the life of a token -----------------------------------------------------

    def issue(self, conn_id: int, ref: AttemptRef, deadline: float) -> tuple[bytes, DispatchToken]:
        handle = self._handle(conn_id, ref.attempt_id)
        token = DispatchToken(conn_id, ref, deadline)
        self._live[handle] = token
        self._by_conn.setdefault(conn_id, set()).add(handle)
        return handle, token

    def lookup(self, handle: Any, conn_id: int) -> DispatchToken | DeadHandle:
        """The token behind ``handle`` for ``conn_id`` (contract §3.2.2).

        A live or still-voiding token is returned; a handle this boot issued
        to this connection whose token is gone is a :class:`DeadHandle`;
        anything else (unknown, forged, another connection's handle) is
        ``token_invalid``, and a handle presented on the wrong connection
        is not consumed by that."""
        if not isinstance(handle, bytes):
            raise TokenInvalid("unknown token")
        token = self._live.get(handle) or self._voiding.get(handle)
        if token is not None:
            if token.conn_id != conn_id:
                raise TokenInvalid("unknown token")
            return token
        attempt_id = self._attempt_of(handle, conn_id)
        if attempt_id is None:
            raise TokenInvalid("unknown token")
        return DeadHandle(attempt_id)

    def consume(self, handle: bytes, token: DispatchToken) -> AttemptRef:
        if token.void_reason is not None:
            raise TokenVoid("the token's attempt was voided", {"reason": token.void_reason})
        ref = token.consume()
        self._forget(handle, token)
        return ref

    def consume_void(self, handle: bytes, token: DispatchToken) -> None:
        """Forget a live token whose attempt a write has voided durably
        (found on arrival: a pause, an exhaustion, a revocation)."""
        token.move(T.VOIDED)
        self._forget(handle, token)

    def void(self, handle: bytes, reason: str) -> DispatchToken | None:
        """Mark a live token void (``reason``); it is held until
        :meth:`void_written` says the void is durable. Returns it, or None
        if it is not live."""
        token = self._live.pop(handle, None)
        if token is None:
            return None
        token.move(T.VOIDING)
        token.void_reason = reason
        self._voiding[handle] = token
        return token

    def expire(self, handle: bytes) -> DispatchToken | None:
        """Mark a live token void (``token_expired``); returns it."""
        return self.void(handle, "token_expired")

    def void_written(self, handle: bytes) -> None:
        """The void of ``handle``'s attempt is durable (or failed, and the
        daemon fail-stops): forget the token."""
        token = self._voiding.pop(handle, None)
        if token is not None:
            self._unindex(handle, token.conn_id)

    def drop_connection(self, conn_id: int) -> list[AttemptRef]:
        """Forget a closed connection's live tokens; returns their attempts."""
        live = []
        for handle in list(self._by_conn.get(conn_id, ())):
            token = self._live.pop(handle, None)
            if token is not None:
                token.move(T.DROPPED)
                live.append(token.ref)
                self._unindex(handle, conn_id)
        return live

    def void_all(self, reason: str) -> list[tuple[bytes, DispatchToken]]:
        """At shutdown: void every live token."""
        handles = list(self._live)
        return [(h, t) for h in handles if (t := self.void(h, reason)) is not None]

    def _forget(self, handle: bytes, token: DispatchToken) -> None:
        self._live.pop(handle, None)
        self._voiding.pop(handle, None)
        self._unindex(handle, token.conn_id)

    def _unindex(self, handle: bytes, conn_id: int) -> None:
        handles = self._by_conn.get(conn_id)
        if handles is not None:
            handles.discard(handle)
            if not handles:
                del self._by_conn[conn_id]


class Tokens:
    """The tokens on the event loop: deadlines, expiry, redemption, voids.

    ``void(attempt_id, reason)`` writes a void durably and says whether it
    could (the daemon fail-stops if not); ``attempt_state(attempt_id)`` reads
    an attempt's record; ``clock()`` is the current time in the units of
    ``ttl_s`` and must advance with trio's clock (the default is trio's).
    """

    def __init__(
        self,
        *,
        ttl_s: float,
        void: Callable[[int, str], Awaitable[bool]],
        attempt_state: Callable[[int], AttemptRecord | None],
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        self.registry = TokenRegistry()
        self._ttl_s = ttl_s
        self._void = void
        self._attempt_state = attempt_state
        self._clock = clock
        # one FIFO: the TTL is constant, so deadlines come in issue order
        self._expiry: collections.deque[tuple[float, bytes]] = collections.deque()
        self._wake = trio.Event()

    def __len__(self) -> int:
        """The number of live tokens."""
        return len(self.registry)

    def issue(self, conn_id: int, ref: AttemptRef) -> bytes:
        """A new token for ``ref`` on ``conn_id``, expiring ``ttl_s`` from now; its handle."""
        deadline = self._clock() + self._ttl_s
        handle, _token = self.registry.issue(conn_id, ref, deadline)
        self._expiry.append((deadline, handle))
        self._wake.set()
        return handle

    async def run(self) -> None:
        """Expire each token at its deadline and void its attempt (``token_expired``)."""
        while True:
            if not self._expiry:
                self._wake = trio.Event()
                await self._wake.wait()
                continue
            deadline, handle = self._expiry[0]
            now = self._clock()
            if now < deadline:
                await trio.sleep(deadline - now)
                continue
            self._expiry.popleft()
            token = self.registry.expire(handle)
            if token is not None:  # not used, dropped or voided meanwhile
                await self._void_token(handle, token)

    async def redeem(self, handle: Any, conn_id: int) -> AttemptRef:
        """Consume the token behind ``handle`` for ``execute`` (contract §3.2.2).

        A dead handle is answered from its attempt's record; a token past its
        deadline is expired here if its timer has not fired yet; a token
        voided in memory is answered ``token_void`` only once its void is
        durable (``internal`` if that write failed)."""
        token = self.registry.lookup(handle, conn_id)
        if isinstance(token, DeadHandle):
            # used, or voided durably: the attempt's record says which
            raise dead_token(self._attempt_state(token.attempt_id))
        if token.state is T.LIVE and self._clock() >= token.deadline:
            self.registry.expire(handle)  # its timer has not fired yet
            await self._void_token(handle, token)
        if token.state is T.LIVE:
            # a token whose attempt a write already voided (a pause, an
            # exhaustion, a revocation) is answered at once, never after
            # waiting in a worker's queue; the claim checks again
            record = self._attempt_state(token.ref.attempt_id)
            if record is None or record[0] == "void":
                self.registry.consume_void(handle, token)
                raise dead_token(record)
        if token.state is not T.LIVE:  # voiding, or voided since
            if token.void_done is not None:
                await token.void_done.wait()  # reply only once the void is durable
            if token.state is not T.VOIDED:
                raise Internal("the attempt could not be voided")
        return self.registry.consume(handle, token)

    async def _void_token(self, handle: bytes, token: DispatchToken) -> None:
        """Void a token's attempt; a redemption of it waits for this."""
        assert token.void_reason is not None
        token.void_done = done = trio.Event()
        ok = await self._void(token.ref.attempt_id, token.void_reason)
        token.move(T.VOIDED if ok else T.VOID_FAILED)
        done.set()
        self.registry.void_written(handle)

    def void_all(self, reason: str) -> list[tuple[bytes, DispatchToken]]:
        """At shutdown: void every live token in memory; the caller writes
        their voids and then calls :meth:`voids_written`."""
        tokens = self.registry.void_all(reason)
        for _handle, token in tokens:
            token.void_done = trio.Event()
        return tokens

    def voids_written(self, tokens: list[tuple[bytes, DispatchToken]], ok: bool) -> None:
        """The voids of :meth:`void_all` are durable (``ok``) or failed: answer
        the redemptions waiting for them and forget the tokens."""
        for handle, token in tokens:
            token.move(T.VOIDED if ok else T.VOID_FAILED)
            if token.void_done is not None:
                token.void_done.set()
            self.registry.void_written(handle)

    def drop_connection(self, conn_id: int) -> list[AttemptRef]:
        """Forget a closed connection's live tokens; returns their attempts to void."""
        return self.registry.drop_connection(conn_id)


def dead_token(record: AttemptRecord | None) -> WarddError:
    """The answer to a handle whose token is gone, from its attempt's record."""
    if record is None:  # its op ended (the attempt was voided or ran) and was pruned
        return pruned_token()
    if record[0] == "void":
        return TokenVoid("the token's attempt was voided", {"reason": record[1]})
    return TokenInvalid("the token was already used")
