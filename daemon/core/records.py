"""The daemon's records as typed, frozen values (contract §2).

The store loads these from the database and the core decides on them; no
decision ever reads a database row by a column name. States are the
``StrEnum`` s of :mod:`wardd.protocol`, so a record's state is also its wire
and database word.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from wardd.protocol import AttemptState, OpState, ProgState

__all__ = [
    "Attempt",
    "AttemptKind",
    "AttemptRef",
    "BootContext",
    "Grant",
    "Neuron",
    "Op",
    "OpView",
    "Outcome",
    "Prog",
    "ProgView",
    "Reservation",
    "Tombstone",
]


class AttemptKind:
    """How an attempt came to be (contract §3.2, §3.4)."""

    GUARDED = "guarded"  # prepare/invoke: claimed, then called
    MANUAL = "manual"  # manual_take: the operator acts outside the daemon


@attrs.frozen
class BootContext:
    """What a decision needs to know about this boot."""

    boot: str
    network: str
    advertised: Mapping[str, Mapping[str, Any]]  # digest -> descriptor
    act_bounds: Mapping[str, int]


@attrs.frozen
class Neuron:
    id: int
    neuron: str
    epoch: int
    policy_version: int
    placement_generation: int
    placement: Mapping[str, Any] | None  # the bound descriptor
    placement_digest: str | None


@attrs.frozen
class Grant:
    acts: frozenset[str]
    enabled: bool

    def allows(self, act: str) -> bool:
        return self.enabled and act in self.acts


@attrs.frozen
class Prog:
    id: int
    neuron_id: int
    prog: str
    state: ProgState
    state_version: int
    step_limit: int
    steps_used: int
    steps_reserved: int
    exhausted: bool
    grant: Grant | None
    reservation_seq: int

    @property
    def grant_enabled(self) -> bool:
        return self.grant is not None and self.grant.enabled


@attrs.frozen
class Op:
    id: int
    neuron_id: int
    op: str
    prog_id: int
    act: str
    args: bytes
    state: OpState
    attempts: int  # how many attempts it has (the latest is number ``attempts``)
    cancelled: bool
    consumed: bool
    result_epoch: int | None
    # the seq of the op's latest record: the store links the next one to it
    # (contract §2 ``follows``); no decision reads it
    last_seq: int | None = None

    @property
    def terminal(self) -> bool:
        return self.cancelled or self.consumed


@attrs.frozen
class Attempt:
    id: int
    op_id: int
    attempt: int
    kind: str  # AttemptKind
    epoch: int
    policy_version: int
    placement_generation: int | None
    digest: str | None
    worker: str | None
    boot: str
    state: AttemptState
    reason: str | None  # a void's reason
    evidence: Mapping[str, Any] | None
    # recorded fact: the attempt's own records show it entered `unknown`
    # (an outcome `unknown`, a mark at start-up, or a manual take)
    ever_unknown: bool


@attrs.frozen
class Outcome:
    attempt_id: int
    status: AttemptState
    value: Any
    error: str | None
    source: str  # adapter | receipt | reconcile


@attrs.frozen
class Reservation:
    id: int
    prog_id: int
    reservation: str
    steps: int
    state: str  # open | settled | released
    settled: int | None
    number: int


@attrs.frozen
class Tombstone:
    """What stays of a pruned op for ever (contract §3.9)."""

    op: str
    prog_id: int
    act: str
    args_digest: bytes
    state: OpState


@attrs.frozen
class AttemptRef:
    """An attempt's public metadata (contract §3.2.1) and its routing facts:
    what a token, a worker and an outcome carry from the claim on."""

    attempt_id: int
    neuron: str
    neuron_id: int
    op: str
    op_id: int
    attempt: int
    act: str
    args: bytes
    epoch: int
    policy_version: int
    placement_generation: int | None
    digest: str | None
    worker: str | None
    prog: str | None = None  # its op's prog, for the traces (None: not loaded)

    def public(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "attempt": self.attempt,
            "epoch": self.epoch,
            "policy_version": self.policy_version,
            "placement_generation": self.placement_generation,
            "digest": self.digest,
        }


@attrs.frozen
class OpView:
    """What a decision about one op reads, loaded in one go: the neuron (None:
    not registered), the op (None: no such op, or pruned: ``tombstone``), the
    op's prog, its attempts in order with their outcomes, and the id the next
    new attempt gets."""

    neuron: Neuron | None
    name: str  # the op id the request named
    op: Op | None
    prog: Prog | None
    attempts: tuple[Attempt, ...] = ()
    outcomes: Mapping[int, Outcome] = attrs.field(factory=dict)  # by attempt number
    tombstone: Tombstone | None = None
    next_attempt_id: int = 0

    def attempt(self, number: int) -> Attempt | None:
        if 1 <= number <= len(self.attempts):
            found = self.attempts[number - 1]
            return found if found.attempt == number else None
        return None

    @property
    def latest(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None


@attrs.frozen
class ProgView:
    """A prog with its neuron; ``prepared``: the prepared attempts a write
    about it may void (with their ops); ``reservation``: the one the
    request names."""

    neuron: Neuron | None
    name: str
    prog: Prog | None
    prepared: tuple[tuple[Op, Attempt], ...] = ()
    reservation: Reservation | None = None
    open_ops: int = 0  # ops not consumed or cancelled (archive check)
    open_attempts: int = 0  # attempts running or unknown (archive check)
