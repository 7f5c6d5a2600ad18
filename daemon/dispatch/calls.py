"""The calls of this boot: a claimed attempt until its outcome is durable (contract §3.8).

A call moves only through :func:`move_call`, which refuses any move not in
:data:`CALL_MOVES`::

    claimed ──begin──▶ calling ──end──▶ done
       │                  │
     abort              abort
       ▼                  ▼
    cancelled ──end──▶ aborted ◀──end── killing

``cancelled``: an abort came before the adapter was called (it never is);
``killing``: an abort came during the call (its process group is killed).
A call that is ``done`` or ``aborted`` takes no abort: the adapter has
returned. The call leaves :class:`Calls` once its outcome is durable (or
could not be stored), answering the aborts that wait for it.

The one move made off a worker's thread is ``claimed``: it is made inside
the claim's writer unit, so that the call exists whenever a read shows its
attempt ``running`` (an ``abort`` reads that first). :class:`Calls` is
therefore its own lock-guarded table, shared by the claim unit, the
workers and the event loop; the worker pool keeps no call state.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs

from wardd.protocol import AttemptState, WarddError

from ..core.records import AttemptRef

__all__ = [
    "CALL_MOVES",
    "Call",
    "CallEnd",
    "CallEvent",
    "CallPhase",
    "Calls",
    "ClaimEntry",
    "IllegalCallMove",
    "move_call",
]


# str-valued: the table's keys hash as strings (an Enum's own hash is Python code,
# and two moves of it run on every dispatch)
class CallPhase(enum.StrEnum):
    CLAIMED = "claimed"  # the claim is written; the adapter is not called yet
    CALLING = "calling"  # in the adapter
    CANCELLED = "cancelled"  # an abort came first: the adapter is never called
    KILLING = "killing"  # an abort came during the call: its process group is killed
    DONE = "done"  # the adapter returned (or the worker failed), no abort taken
    ABORTED = "aborted"  # ended after an abort was taken


class CallEvent(enum.StrEnum):
    BEGIN = "begin"  # the worker enters the adapter call
    ABORT = "abort"  # an operator's abort is taken
    END = "end"  # the adapter returned, raised, or was never called


P, E = CallPhase, CallEvent

#: (phase, event) -> the next phase; any other move is illegal.
CALL_MOVES: Final[Mapping[tuple[CallPhase, CallEvent], CallPhase]] = {
    (P.CLAIMED, E.BEGIN): P.CALLING,
    (P.CLAIMED, E.ABORT): P.CANCELLED,
    (P.CLAIMED, E.END): P.DONE,  # a fault between the claim and the call
    (P.CALLING, E.ABORT): P.KILLING,
    (P.CALLING, E.END): P.DONE,
    (P.CANCELLED, E.BEGIN): P.CANCELLED,  # the worker learns it must not call
    (P.CANCELLED, E.ABORT): P.CANCELLED,  # a second abort waits with the first
    (P.CANCELLED, E.END): P.ABORTED,
    (P.KILLING, E.ABORT): P.KILLING,  # a second abort kills again
    (P.KILLING, E.END): P.ABORTED,
}


class IllegalCallMove(RuntimeError):
    """A call move not in :data:`CALL_MOVES` (a bug in the daemon)."""


def move_call(phase: CallPhase, event: CallEvent) -> CallPhase:
    """The phase after ``event``; an illegal move raises."""
    nxt = CALL_MOVES.get((phase, event))
    if nxt is None:
        raise IllegalCallMove(f"a call cannot move from {phase.value} by {event.value}")
    return nxt


def takes_abort(phase: CallPhase) -> bool:
    """Whether a call in ``phase`` takes an abort (its adapter has not returned)."""
    return (phase, E.ABORT) in CALL_MOVES


@attrs.frozen
class CallEnd:
    """How an adapter call ended: one value, made where the call ends
    (:func:`~.workers.call_act`, or the worker when the call never started
    or failed after the claim), carried to the outcome's writer unit and,
    once the outcome is durable, to the aborts that wait for it (contract
    §3.2.3, §3.8).

    ``status`` is the outcome's; ``value`` the act's result (succeeded);
    ``error`` its text (failed, unknown, or why a result was replaced).
    ``killed``: an abort ended the call (the adapter raised ``CallAborted``,
    or the call never started because an abort came first). ``aborted`` is
    the outcome's evidence, set by :meth:`after_abort`: None when no abort
    was taken for the call or it did not end unknown; True when the abort
    ended it; False when it ended unknown on its own first."""

    status: AttemptState
    value: Any = None
    error: str | None = None
    killed: bool = False
    aborted: bool | None = None

    def after_abort(self) -> CallEnd:
        """This end, for a call an abort was taken for: an unknown end says
        which ended it (a call that succeeded or failed on its own keeps
        that outcome, and the abort answers ``not_running``)."""
        if self.status != AttemptState.UNKNOWN:
            return self
        error = self.error
        if self.killed:
            error = f"aborted by the operator ({error or 'no detail'})"
        return attrs.evolve(self, error=error, aborted=self.killed)


@attrs.frozen
class ClaimEntry:
    """The call a claim enters in the call table, handed to the claim's
    writer unit as a value: the table and the ``owner`` (the dispatch's
    reply) the call is entered under. The unit enters it on the writer
    thread once the claim is written (:meth:`enter`), so the call exists
    before a read can show its attempt ``running``."""

    calls: Calls
    owner: object

    def enter(self, ref: AttemptRef) -> None:
        """The claim of ``ref`` is written (inside its unit)."""
        self.calls.claimed(ref, self.owner)


Waiter = Callable[[CallEnd | None, WarddError | None], None]


@attrs.define(eq=False)
class Call:
    """One claimed attempt of this boot; ``owner`` is the dispatch's reply."""

    ref: AttemptRef
    owner: object
    phase: CallPhase = CallPhase.CLAIMED
    waiters: list[Waiter] = attrs.field(factory=list)


class Calls:
    """Attempt row id → its call, safe from any thread."""

    def __init__(self) -> None:
        self._calls: dict[int, Call] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._calls)

    def claimed(self, ref: AttemptRef, owner: object) -> None:
        """The claim of ``ref`` is written (inside its unit, on the writer thread)."""
        with self._lock:
            self._calls[ref.attempt_id] = Call(ref, owner)

    def _move(self, attempt_id: int, event: CallEvent) -> tuple[CallPhase, CallPhase] | None:
        with self._lock:
            call = self._calls.get(attempt_id)
            if call is None:
                return None
            before, call.phase = call.phase, move_call(call.phase, event)
            return before, call.phase

    def begin(self, attempt_id: int) -> bool:
        """Enter the adapter call; False if an abort came first (not called)."""
        moved = self._move(attempt_id, E.BEGIN)
        return moved is None or moved[1] is P.CALLING

    def end(self, attempt_id: int) -> bool:
        """The adapter returned (or was never called); True if an abort was taken."""
        moved = self._move(attempt_id, E.END)
        return moved is not None and moved[1] is P.ABORTED

    def abort(self, attempt_id: int, on_done: Waiter) -> Call | None:
        """Take an abort: ``on_done(end, error)`` is told once the outcome is
        durable. The call, if it is in the adapter now (its process group is
        to be killed); None otherwise. Raises `LookupError` if no call takes it."""
        with self._lock:
            call = self._calls.get(attempt_id)
            if call is None or not takes_abort(call.phase):
                raise LookupError(attempt_id)
            call.phase = move_call(call.phase, E.ABORT)
            call.waiters.append(on_done)
            return call if call.phase is P.KILLING else None

    def settle(self, attempt_id: int, error: WarddError | None, end: CallEnd | None = None) -> None:
        """The outcome is durable (``end``) or could not be stored (``error``)."""
        with self._lock:
            call = self._calls.pop(attempt_id, None)
        for notify in call.waiters if call is not None else ():
            notify(end, error)

    def owned_by(self, owner: object) -> AttemptRef | None:
        """The attempt whose claim unit ran for ``owner`` (rare paths only: a scan)."""
        with self._lock:
            for call in self._calls.values():
                if call.owner is owner:
                    return call.ref
        return None
