"""Dispatch tokens (contract §2, §3.2).

A token lives only in this process's memory. It cannot be copied,
deep-copied or pickled, is consumed by value exactly once, is bound to the
connection that prepared it and expires after ``token_ttl_s``. On the wire
it is a 32-byte random handle: nothing public (attempt metadata, an old
signature, a history record) can construct one, and the handle is never
logged or stored (``repr`` shows only the attempt).
"""

from __future__ import annotations

import secrets
from typing import Any, NoReturn

from wardd.protocol import TokenInvalid, TokenVoid

from ._units import AttemptRef

__all__ = ["DispatchToken", "TokenRegistry"]


class DispatchToken:
    __slots__ = ("_used", "conn_id", "deadline", "ref", "void_done", "void_ok", "void_reason")

    def __init__(self, conn_id: int, ref: AttemptRef, deadline: float) -> None:
        self.conn_id = conn_id
        self.ref = ref
        self.deadline = deadline
        self.void_reason: str | None = None
        self.void_done: Any = None  # an event set once the void is durable
        self.void_ok = False
        self._used = False

    def _refuse(self, *_: Any) -> NoReturn:
        raise TypeError("a dispatch token cannot be copied or serialized")

    __copy__ = __deepcopy__ = __reduce__ = __reduce_ex__ = __getstate__ = _refuse

    def consume(self) -> AttemptRef:
        """Take the attempt out of the token; a second use is refused."""
        if self._used:
            raise TokenInvalid("the token was already used")
        self._used = True
        return self.ref

    def __repr__(self) -> str:
        return f"<DispatchToken op={self.ref.op!r} attempt={self.ref.attempt}>"


class TokenRegistry:
    """Handle → token, owned by the event loop (single-threaded access)."""

    def __init__(self) -> None:
        self._by_handle: dict[bytes, DispatchToken] = {}
        self._by_conn: dict[int, set[bytes]] = {}

    def __len__(self) -> int:
        return sum(1 for t in self._by_handle.values() if t.void_reason is None)

    def issue(self, conn_id: int, ref: AttemptRef, deadline: float) -> tuple[bytes, DispatchToken]:
        handle = secrets.token_bytes(32)
        token = DispatchToken(conn_id, ref, deadline)
        self._by_handle[handle] = token
        self._by_conn.setdefault(conn_id, set()).add(handle)
        return handle, token

    def lookup(self, handle: Any, conn_id: int) -> DispatchToken:
        """The token behind ``handle`` for ``conn_id`` (contract §3.2.2): unknown,
        used, or another connection's handle is ``token_invalid`` (and a
        handle presented on the wrong connection is not consumed by that)."""
        token = self._by_handle.get(handle) if isinstance(handle, bytes) else None
        if token is None or token.conn_id != conn_id:
            raise TokenInvalid("unknown token")
        return token

    def consume(self, handle: bytes, token: DispatchToken) -> AttemptRef:
        if token.void_reason is not None:
            raise TokenVoid("the token's attempt was voided", {"reason": token.void_reason})
        ref = token.consume()
        self._drop(handle, token)
        return ref

    def take(self, handle: Any, conn_id: int) -> AttemptRef:
        """lookup + consume."""
        return self.consume(handle, self.lookup(handle, conn_id))

    def expire(self, handle: bytes) -> DispatchToken | None:
        """Mark a live token void (``token_expired``); returns it."""
        token = self._by_handle.get(handle)
        if token is None or token.void_reason is not None:
            return None
        token.void_reason = "token_expired"
        return token

    def drop_connection(self, conn_id: int) -> list[AttemptRef]:
        """Forget a closed connection's tokens; returns the live ones' attempts."""
        live = []
        for handle in self._by_conn.pop(conn_id, set()):
            token = self._by_handle.pop(handle)
            if token.void_reason is None:
                live.append(token.ref)
        return live

    def void_all(self, reason: str) -> list[DispatchToken]:
        """At shutdown: void every live token."""
        tokens = []
        for token in self._by_handle.values():
            if token.void_reason is None:
                token.void_reason = reason
                tokens.append(token)
        return tokens

    def _drop(self, handle: bytes, token: DispatchToken) -> None:
        del self._by_handle[handle]
        handles = self._by_conn.get(token.conn_id)
        if handles is not None:
            handles.discard(handle)
