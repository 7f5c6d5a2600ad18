"""What a decision asks the store to write: plain values, applied in order.

The core never writes; it returns a :class:`Decision` whose changes the store
applies in one writer unit (one SAVEPOINT), so a decision is kept whole or
not at all. Records are named by their row ids; the id of a new record is
allocated from the view the store loaded (never an id a pruned record held,
contract §2). An attempt's changes name it by op and number (unique for
ever). Times are the store's: it stamps each record when it applies it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from wardd.protocol import AttemptState, OpState, WarddError

__all__ = [
    "AppendEvent",
    "Change",
    "Decision",
    "NewAttempt",
    "NewClaim",
    "NewNeuron",
    "NewOp",
    "NewOutcome",
    "NewProg",
    "NewReservation",
    "ReleaseReservations",
    "SetAttempt",
    "SetNeuron",
    "SetOp",
    "SetProg",
    "SetReservation",
]


@attrs.frozen
class NewNeuron:
    id: int
    neuron: str


@attrs.frozen
class SetNeuron:
    neuron_id: int
    # epoch, policy_version, placement_generation, placement, placement_digest
    fields: Mapping[str, Any]


@attrs.frozen
class NewProg:
    id: int
    neuron_id: int
    prog: str
    step_limit: int


@attrs.frozen
class SetProg:
    """Set columns of a prog; ``bump_version`` for a state change (contract
    §3.1): ``state_version`` + 1 in the same write, never to come back."""

    prog_id: int
    fields: Mapping[str, Any]
    bump_version: bool = False
    # added to steps_reserved (a reservation or a settle/release moves it)
    reserved_delta: int = 0


@attrs.frozen
class NewOp:
    id: int
    neuron_id: int
    op: str
    prog_id: int
    act: str
    args: bytes


@attrs.frozen
class SetOp:
    op_id: int
    # state, cancelled, consumed, result_epoch, attempts (from states.change_op);
    # consumed is no column: the state says it
    fields: Mapping[str, Any]
    # the state the op leaves when ``fields`` sets one: not stored, only
    # counted once committed (``status.operations``, store/counters.py)
    was: OpState | None = attrs.field(default=None, eq=False)


@attrs.frozen
class NewAttempt:
    id: int
    op_id: int
    attempt: int
    kind: str
    epoch: int
    policy_version: int
    placement_generation: int | None
    descriptor: Mapping[str, Any] | None
    digest: str | None
    worker: str | None
    boot: str
    state: AttemptState
    evidence: Mapping[str, Any] | None


@attrs.frozen
class SetAttempt:
    """An attempt's new state (with its void reason) or evidence: only
    ever produced by :func:`wardd.daemon.core.states.move_attempt` (state)
    or by a receipt kept in the evidence, as a hint or a conflict
    (``attempts._keep_receipt``). ``act`` is the op's act, set with a new
    state: it is not stored, only counted once committed (``wardd_attempts_total``)."""

    op_id: int
    attempt: int
    state: AttemptState | None = None
    reason: str | None = None
    evidence: Mapping[str, Any] | None = None
    act: str | None = attrs.field(default=None, eq=False)
    # the state it leaves, set with a new state: counted once committed
    # (``status.unknown_attempts``, store/counters.py)
    was: AttemptState | None = attrs.field(default=None, eq=False)


@attrs.frozen
class NewClaim:
    attempt_id: int
    op_id: int
    attempt: int
    placement_generation: int | None
    digest: str | None
    worker: str
    boot: str
    claim_info: Mapping[str, Any] | None


@attrs.frozen
class NewOutcome:
    attempt_id: int
    op_id: int
    attempt: int
    status: AttemptState
    value: Any
    error: str | None
    source: str


@attrs.frozen
class NewReservation:
    prog_id: int
    reservation: str
    steps: int
    number: int


@attrs.frozen
class SetReservation:
    reservation_id: int
    state: str
    settled: int | None = None


@attrs.frozen
class ReleaseReservations:
    """Release the prog's open reservations (numbered below ``before``)."""

    prog_id: int
    before: int | None


@attrs.frozen
class AppendEvent:
    """One record of the append-only log (contract §2); the store gives it
    its seq and links it to the op's previous record (``follows``)."""

    kind: str
    neuron_id: int
    op_id: int | None = None
    attempt: int | None = None
    data: Mapping[str, Any] | None = None


Change = (
    NewNeuron
    | SetNeuron
    | NewProg
    | SetProg
    | NewOp
    | SetOp
    | NewAttempt
    | SetAttempt
    | NewClaim
    | NewOutcome
    | NewReservation
    | SetReservation
    | ReleaseReservations
    | AppendEvent
)


@attrs.frozen
class Decision:
    """The core's answer: the changes to apply, then the reply.

    ``reply`` is the request's answer; a :class:`WarddError` there is a
    refusal that keeps its changes (``token_void`` voids the attempt
    durably, then refuses). A refusal that writes nothing is raised."""

    changes: tuple[Change, ...]
    reply: Any = None

    @property
    def refusal(self) -> WarddError | None:
        return self.reply if isinstance(self.reply, WarddError) else None
