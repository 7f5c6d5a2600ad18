"""What the sessions return: one frozen record per result shape (contract §4).

Each record has the fields the contract names for that result, its states
as the protocol's `StrEnum`s (`OpState`, `AttemptState`, `ProgState`), and
``to_wire()`` for the raw map exactly as the daemon sent it (fields this
version does not know included). A field the result may lack is ``None``
(or ``False`` for the ``already``/``pruned`` flags). A result that breaks
its shape (a state no enum has, a nested value of the wrong kind) is a
`RemoteProtocolError`: the daemon said something the contract does not allow.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

import attrs

from wardd.protocol import AttemptState, OpState, ProgState

from ._errors import RemoteProtocolError

__all__ = [
    "Aborted",
    "Attempt",
    "Called",
    "Cancelled",
    "Consumed",
    "Dispatched",
    "EpochChanged",
    "GrantChanged",
    "HistoryRecord",
    "ListedAttempt",
    "ManualTaken",
    "NeuronRoot",
    "Operation",
    "OperationSummary",
    "Outcome",
    "Page",
    "PlacementChanged",
    "Prepared",
    "Prog",
    "ProgCreated",
    "ProgStateChanged",
    "Rebound",
    "ReceiptsChecked",
    "Reconciled",
    "Registered",
    "Released",
    "Reservation",
    "Status",
    "StepLimitChanged",
    "Submitted",
    "Worker",
]

R = TypeVar("R", bound="Record")
T = TypeVar("T")


def _field(default: Any = None, convert: Callable[[Any], Any] | None = None) -> Any:
    """A record field: its default when the result lacks it, and how a wire value becomes it."""
    return attrs.field(default=default, metadata={"from_wire": convert})


def _required(convert: Callable[[Any], Any] | None = None) -> Any:
    return attrs.field(metadata={"from_wire": convert, "required": True})


class Record:
    """Base of the result records: `from_wire` builds one, `to_wire` gives the map back."""

    _wire: Mapping[str, Any]

    @classmethod
    def from_wire(cls: type[R], wire: Any) -> R:
        """The record of a result map; a map that breaks its shape is a `RemoteProtocolError`."""
        if not isinstance(wire, Mapping):
            raise RemoteProtocolError(f"a {cls.__name__} result is not a map")
        values: dict[str, Any] = {}
        for field in attrs.fields(cls):  # type: ignore[arg-type]
            if field.name == "_wire":
                continue
            if field.name not in wire:
                if field.metadata.get("required"):
                    raise RemoteProtocolError(f"a {cls.__name__} result has no {field.name!r}")
                continue
            value = wire[field.name]
            convert = field.metadata.get("from_wire")
            if convert is not None and value is not None:
                try:
                    value = convert(value)
                except (ValueError, TypeError, RemoteProtocolError) as exc:
                    raise RemoteProtocolError(
                        f"a {cls.__name__} result has a bad {field.name!r}: {exc}"
                    ) from exc
            values[field.name] = value
        return cls(wire=dict(wire), **values)  # type: ignore[call-arg]  # attrs subclasses

    def to_wire(self) -> dict[str, Any]:
        """The result as the daemon sent it (a copy)."""
        return dict(self._wire)


def _wire() -> Any:
    return attrs.field(eq=False, repr=False, alias="wire", kw_only=True)


def _many(cls: type[R]) -> Callable[[Any], tuple[R, ...]]:
    def convert(items: Any) -> tuple[R, ...]:
        if not isinstance(items, list | tuple):
            raise TypeError("not a list")
        return tuple(cls.from_wire(item) for item in items)

    return convert


def _flag(value: Any) -> bool:
    return value is True


# -- attempts and outcomes ---------------------------------------------------------------


@attrs.frozen
class Outcome(Record):
    """An attempt's definite result, or an op's retained one (contract §2)."""

    status: AttemptState = _required(AttemptState)
    value: Any = _field()
    source: str | None = _field()
    attempt: int | None = _field()
    epoch: int | None = _field()
    _wire: Mapping[str, Any] = _wire()


@attrs.frozen
class Attempt(Record):
    """One attempt of an op: its binding, state and (once known) outcome."""

    attempt: int = _required()
    state: AttemptState | None = _field(convert=AttemptState)  # absent in prepare's answer
    op: str | None = _field()
    kind: str | None = _field()
    epoch: int | None = _field()
    policy_version: int | None = _field()
    placement_generation: int | None = _field()
    digest: str | None = _field()
    worker: str | None = _field()
    boot: str | None = _field()
    claimed: bool | None = _field()
    evidence: Mapping[str, Any] | None = _field()
    reason: str | None = _field()
    outcome: Outcome | None = _field(convert=Outcome.from_wire)
    _wire: Mapping[str, Any] = _wire()


@attrs.frozen
class Dispatched(Record):
    """What `invoke` and `execute` answer: the attempt's outcome as it ended."""

    op: str = _required()
    attempt: int = _required()
    status: AttemptState = _required(AttemptState)
    result: Any = _field()
    error: str | None = _field()
    _wire: Mapping[str, Any] = _wire()


@attrs.frozen
class Called(Record):
    """What `call` answers (contract §3.2.6).

    When the call ran its act now: ``op``, ``attempt``, ``status`` and
    ``result`` or ``error``, as `Dispatched`. When it ran nothing
    (``already``): what the op already is, its ``state`` and, when an
    attempt of it ran, that attempt's ``attempt``, ``status`` and
    ``result`` (succeeded) or ``error``; ``pruned`` when the op was pruned
    (then only its state is known)."""

    op: str = _required()
    attempt: int | None = _field()
    status: AttemptState | None = _field(convert=AttemptState)
    result: Any = _field()
    error: str | None = _field()
    state: OpState | None = _field(convert=OpState)
    already: bool = _field(False, _flag)
    pruned: bool = _field(False, _flag)
    _wire: Mapping[str, Any] = _wire()


@attrs.frozen
class Prepared(Record):
    """`prepare`'s answer: the token (bound to this connection) and the attempt it runs."""

    # the handle is a capability: never in a repr, hence never in a log line
    token: bytes = attrs.field(repr=False, metadata={"from_wire": None, "required": True})
    attempt: Attempt = _required(Attempt.from_wire)
    _wire: Mapping[str, Any] = _wire()


@attrs.frozen
class ManualTaken(Record):
    """`manual_take`'s answer: the unfenced attempt, unknown until reconciled."""

    attempt: Attempt = _required(Attempt.from_wire)
    _wire: Mapping[str, Any] = _wire()


@attrs.frozen
class Reconciled(Record):
    op: str = _required()
    attempt: int = _required()
    status: AttemptState = _required(AttemptState)
    already: bool = _field(False, _flag)
    _wire: Mapping[str, Any] = _wire()


@attrs.frozen
class Consumed(Record):
    """`consume`'s answer: the retained result, now given out once."""

    op: str = _required()
    attempt: int = _required()
    result: Outcome = _required(Outcome.from_wire)
    _wire: Mapping[str, Any] = _wire()


@attrs.frozen
class Aborted(Record):
    """`abort`'s answer: the attempt is ``unknown``; ``aborted`` says whether the
    abort ended the call (true) or the call ended unknown on its own first (false)."""

    op: str = _required()
    attempt: int = _required()
    status: AttemptState = _required(AttemptState)
    aborted: bool = _field(False, _flag)
    _wire: Mapping[str, Any] = _wire()


# -- operations ----------------------------------------------------------------------------


@attrs.frozen
class Submitted(Record):
    """`submit`'s answer; ``pruned`` when it came from a pruned op's tombstone."""

    op: str = _required()
    state: OpState = _required(OpState)
    already: bool = _field(False, _flag)
    pruned: bool = _field(False, _flag)
    _wire: Mapping[str, Any] = _wire()


@attrs.frozen
class Cancelled(Record):
    op: str = _required()
    state: OpState = _required(OpState)
    already: bool = _field(False, _flag)
    was: str | None = _field()
    _wire: Mapping[str, Any] = _wire()


@attrs.frozen
class Rebound(Record):
    op: str = _required()
    epoch: int = _required()
    already: bool = _field(False, _flag)
    _wire: Mapping[str, Any] = _wire()


@attrs.frozen
class Operation(Record):
    """`get_operation`: the op, its attempts in order and its retained result; a
    pruned op is its tombstone (``pruned``, ``ended_at``, ``pruned_at``, no attempts)."""

    op: str = _required()
    state: OpState = _required(OpState)
    prog: str | None = _field()
    act: str | None = _field()
    args: bytes | None = _field()
    attempts: tuple[Attempt, ...] = _field((), _many(Attempt))
    result: Outcome | None = _field(convert=Outcome.from_wire)
    pruned: bool = _field(False, _flag)
    ended_at: str | None = _field()
    pruned_at: str | None = _field()
    _wire: Mapping[str, Any] = _wire()


@attrs.frozen
class OperationSummary(Record):
    """One item of `list_operations` (``attempts`` is a count)."""

    op: str = _required()
    state: OpState = _required(OpState)
    prog: str | None = _field()
    act: str | None = _field()
    attempts: int = _field(0)
    pruned: bool = _field(False, _flag)
    _wire: Mapping[str, Any] = _wire()


@attrs.frozen
class HistoryRecord(Record):
    """One event record of an op (contract §4 `history`)."""

    seq: int = _required()
    kind: str = _required()
    at: str | None = _field()
    attempt: int | None = _field()
    data: Any = _field()
    _wire: Mapping[str, Any] = _wire()


@attrs.frozen
class ListedAttempt(Record):
    """One item of `list_attempts`, across neurons."""

    neuron: str = _required()
    op: str = _required()
    attempt: int = _required()
    state: AttemptState = _required(AttemptState)
    prog: str | None = _field()
    act: str | None = _field()
    kind: str | None = _field()
    boot: str | None = _field()
    claimed: bool | None = _field()
    evidence: Mapping[str, Any] | None = _field()
    _wire: Mapping[str, Any] = _wire()


@attrs.frozen
class Page(Generic[T]):
    """Every item of a paged read, in the daemon's order (iterate, index, ``len``).
    ``pruned``: the op of a `history` was pruned (its records are gone)."""

    items: tuple[T, ...]
    key: str
    pruned: bool = False

    def __iter__(self) -> Iterator[T]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> T:
        return self.items[index]

    def to_wire(self) -> dict[str, Any]:
        """The items as one page of the read would carry them."""
        wire: dict[str, Any] = {
            self.key: [item.to_wire() if isinstance(item, Record) else item for item in self]
        }
        if self.pruned:
            wire["pruned"] = True
        return wire


def _page(item: type[R], wire: Any, key: str) -> Page[R]:
    """The `Page` of a paged read's items, from ``{key: [...], pruned?}``."""
    if not isinstance(wire, Mapping) or not isinstance(wire.get(key), list | tuple):
        raise RemoteProtocolError(f"a {key} listing is not a list")
    return Page(tuple(item.from_wire(x) for x in wire[key]), key, wire.get("pruned") is True)


# -- the neuron root, progs, budget ----------------------------------------------------------


@attrs.frozen
class NeuronRoot(Record):
    """`get_neuron`: epoch, policy version, placement (a descriptor or None), grants."""

    neuron: str = _required()
    epoch: int = _required()
    policy_version: int = _required()
    placement_generation: int = _required()
    placement: Mapping[str, Any] | None = _field()
    grants: Mapping[str, Any] = _field(attrs.Factory(dict))
    _wire: Mapping[str, Any] = _wire()


@attrs.frozen
class Registered(Record):
    neuron: str = _required()
    epoch: int = _required()
    already: bool = _field(False, _flag)
    _wire: Mapping[str, Any] = _wire()


@attrs.frozen
class PlacementChanged(Record):
    """`bind`, `release` and `ensure_placement`; ``bound`` is set by `ensure_placement`
    only (False: the placement already named this boot, nothing was signed)."""

    placement_generation: int = _required()
    bound: bool | None = _field()
    _wire: Mapping[str, Any] = _wire()


@attrs.frozen
class EpochChanged(Record):
    epoch: int = _required()
    _wire: Mapping[str, Any] = _wire()


@attrs.frozen
class GrantChanged(Record):
    policy_version: int = _required()
    voided: int = _field(0)
    _wire: Mapping[str, Any] = _wire()


@attrs.frozen
class Prog(Record):
    """`get_prog`: state and its version, step budget, reservations, grant."""

    prog: str = _required()
    state: ProgState = _required(ProgState)
    state_version: int | None = _field()
    step_limit: int | None = _field()
    steps_used: int | None = _field()
    steps_reserved: int | None = _field()
    reservation_seq: int | None = _field()
    grant: Mapping[str, Any] | None = _field()
    _wire: Mapping[str, Any] = _wire()


@attrs.frozen
class ProgCreated(Record):
    prog: str = _required()
    already: bool = _field(False, _flag)
    _wire: Mapping[str, Any] = _wire()


@attrs.frozen
class ProgStateChanged(Record):
    prog: str = _required()
    state: ProgState = _required(ProgState)
    state_version: int | None = _field()
    _wire: Mapping[str, Any] = _wire()


@attrs.frozen
class StepLimitChanged(Record):
    prog: str = _required()
    step_limit: int = _required()
    state_version: int | None = _field()
    _wire: Mapping[str, Any] = _wire()


@attrs.frozen
class Reservation(Record):
    """`reserve_steps` and `settle_steps` (``steps_used``: the prog's total, settle only)."""

    reservation: str = _required()
    steps: int = _required()
    steps_used: int | None = _field()
    _wire: Mapping[str, Any] = _wire()


@attrs.frozen
class Released(Record):
    released: int = _required()
    _wire: Mapping[str, Any] = _wire()


@attrs.frozen
class ReceiptsChecked(Record):
    checked: int = _required()
    resolved: int = _required()
    _wire: Mapping[str, Any] = _wire()


# -- the daemon ----------------------------------------------------------------------------


@attrs.frozen
class Worker(Record):
    """One item of `list_workers`: the descriptor a placement binds, and its digest."""

    worker: str = _required()
    descriptor: Mapping[str, Any] = _required()
    digest: str | None = _field()
    _wire: Mapping[str, Any] = _wire()


@attrs.frozen
class Status(Record):
    """`status` (contract §4); the nested maps are as the daemon sent them."""

    boot: str = _required()
    network: str = _required()
    version: str | None = _field()
    protocol: int | None = _field()
    started_at: str | None = _field()
    uptime: float | None = _field()
    db: Mapping[str, Any] = _field(attrs.Factory(dict))
    workers: tuple[Mapping[str, Any], ...] = _field((), tuple)
    operations: Mapping[str, int] = _field(attrs.Factory(dict))
    unknown_attempts: int | None = _field()
    receipts_pending: int | None = _field()
    writer: Mapping[str, Any] = _field(attrs.Factory(dict))
    connections: int | None = _field()
    _wire: Mapping[str, Any] = _wire()
