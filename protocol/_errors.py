"""The one error table (contract §4): wire code -> exception class -> meaning.

Every error the daemon answers with is a `WarddError` subclass named after its
code in CamelCase (``bad_frame`` -> `BadFrame`). The class docstring is the
code's one-line meaning: it is the documentation (``python -m
wardd.protocol.errors`` prints the table as markdown) and the default message.
The order of the classes below is the order of the table: connection and
framing first, then the checks of a request in roughly the order the daemon
makes them.

Errors are values on the wire and exceptions in Python: `WarddError.to_wire`
gives the ``{code, message, data?}`` map of an error reply, and `error_for`
turns such a map's parts back into the matching exception.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Any, ClassVar, Final

__all__ = [
    "AFTER_CLAIM_CODES",
    "DISPATCH_METHODS",
    "ERRORS",
    "TOKEN_VOID_REASONS",
    "ActNotAccepted",
    "ActNotGranted",
    "AlreadySucceeded",
    "ArgsTooLarge",
    "AttemptBusy",
    "AttemptMismatch",
    "AttemptUnknown",
    "BadFrame",
    "BadRequest",
    "BadTransition",
    "BudgetExhausted",
    "ClaimConflict",
    "Conflict",
    "EpochMismatch",
    "Forbidden",
    "GenerationMismatch",
    "GrantDisabled",
    "Internal",
    "NotAbortable",
    "NotReconcilable",
    "NotRetained",
    "NotRunning",
    "OpConflict",
    "OpenOperations",
    "Overloaded",
    "PlacementStale",
    "PlacementUnbound",
    "PolicyMismatch",
    "ProgConflict",
    "ProgInactive",
    "ProtocolError",
    "RebindRequired",
    "StateMismatch",
    "Terminal",
    "TokenInvalid",
    "TokenVoid",
    "Unauthenticated",
    "UnknownAct",
    "UnknownMethod",
    "UnknownNeuron",
    "UnknownOperation",
    "UnknownProg",
    "UnsupportedGuarantee",
    "UnsupportedProfile",
    "WarddError",
    "WrongNetwork",
    "error_for",
    "markdown_table",
    "may_have_run",
]

_TABLE: dict[str, tuple[type[WarddError], str]] = {}


class WarddError(Exception):
    """Base of every error with a wire code.

    `message` is human text for the peer (never a secret); `data` an optional
    map of machine-readable detail (e.g. ``{"reason": "revoked"}`` on
    `TokenVoid`). Raising the bare base class answers ``internal``.
    """

    code: ClassVar[str] = "internal"
    #: The code can answer a dispatch after its claim (see `may_have_run`)...
    after_claim: ClassVar[bool] = False
    #: ...except with one of these ``data.reason``: decided before the claim.
    before_claim_reasons: ClassVar[frozenset[str]] = frozenset()

    def __init_subclass__(cls, *, listed: bool = True, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not listed:
            return
        meaning = " ".join((cls.__doc__ or "").split())
        if not meaning or cls.code in _TABLE:
            raise TypeError(f"{cls.__name__}: each code needs one class with a docstring")
        _TABLE[cls.code] = (cls, meaning)

    def __init__(self, message: str | None = None, data: dict[str, Any] | None = None) -> None:
        if message is None:
            message = _TABLE[self.code][1] if self.code in _TABLE else self.code
        super().__init__(message)
        self.message = message
        self.data = data

    def to_wire(self) -> dict[str, Any]:
        """The ``error`` map of an error reply: ``{code, message, data?}`` (contract §4)."""
        wire: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            wire["data"] = self.data
        return wire

    def __reduce__(self) -> tuple[Any, ...]:
        # Copies and pickles keep message, data and any extra attribute
        # (ProtocolError.request_id), not just the message.
        return (type(self), (self.message, self.data), self.__dict__)

    def __repr__(self) -> str:
        extra = f", {self.data!r}" if self.data is not None else ""
        return f"{type(self).__name__}({self.message!r}{extra})"


# -- connection and framing -------------------------------------------------------------


class BadFrame(WarddError):
    """A frame's length is outside 1..max_frame, or its body is not exactly one well-formed
    CBOR item; answered with id null, then the connection is closed."""

    code = "bad_frame"


class ProtocolError(WarddError):
    """A well-formed item that is not a valid request (shape, `hello` not first, another
    protocol version); carries the request id when one could be read."""

    code = "protocol_error"

    def __init__(
        self,
        message: str | None = None,
        data: dict[str, Any] | None = None,
        *,
        request_id: int | None = None,
    ) -> None:
        super().__init__(message, data)
        #: The id of the offending request, when it could be read (else None).
        self.request_id = request_id


class Forbidden(WarddError):
    """The peer's uid (SO_PEERCRED) may not talk to this daemon; the connection is closed."""

    code = "forbidden"


class Overloaded(WarddError):
    """The daemon did not admit the request now; nothing changed, retry later. `data.reason`:
    `shutdown` (it is stopping), `receipt_pending` (a reconcile whose attempt's receipt check
    did not finish: send it again once a check has answered), absent at a capacity limit."""

    code = "overloaded"


class Internal(WarddError):
    """The daemon failed internally (e.g. a claim commit failed: `data.reason`); it never
    reports an outcome it has not stored. To a dispatch it can come after the claim: the
    attempt may have run (`data.op`, `data.attempt` name it when the daemon knows it)."""

    code = "internal"
    after_claim = True
    before_claim_reasons = frozenset({"claim_failed"})


class UnknownMethod(WarddError):
    """The method is not one this daemon serves."""

    code = "unknown_method"


class BadRequest(WarddError):
    """The params fail their type, enum, range or shape check (made before any lookup)."""

    code = "bad_request"


# -- who is asking -----------------------------------------------------------------------


class WrongNetwork(WarddError):
    """The signed request's `network` is not this daemon's network."""

    code = "wrong_network"


class Unauthenticated(WarddError):
    """The Ed25519 signature does not verify over this daemon's network."""

    code = "unauthenticated"


class UnknownNeuron(WarddError):
    """The neuron is not registered with this daemon."""

    code = "unknown_neuron"


# -- what it names -----------------------------------------------------------------------


class UnknownProg(WarddError):
    """The neuron has no prog of that id."""

    code = "unknown_prog"


class UnknownOperation(WarddError):
    """The neuron has no op of that id."""

    code = "unknown_operation"


class UnknownAct(WarddError):
    """The act tag is not registered with this daemon."""

    code = "unknown_act"


# -- compare-and-set and idempotency -----------------------------------------------------


class GenerationMismatch(WarddError):
    """The expected placement generation is not the neuron's current one."""

    code = "generation_mismatch"


class EpochMismatch(WarddError):
    """`expected_epoch` is not the neuron's current epoch."""

    code = "epoch_mismatch"


class PolicyMismatch(WarddError):
    """`expected_policy_version` is not the neuron's current policy version."""

    code = "policy_mismatch"


class StateMismatch(WarddError):
    """`expected_state` is not the prog's current state, or `expected_state_version` is not
    its current `state_version` (data: `state`, `state_version`)."""

    code = "state_mismatch"


class BadTransition(WarddError):
    """The prog state change is not one of active to paused and back, active or paused to
    retired, retired to archived."""

    code = "bad_transition"


class OpenOperations(WarddError):
    """The prog cannot be archived while an op of it is neither consumed nor cancelled, or
    an attempt of it is running or unknown."""

    code = "open_operations"


class ProgConflict(WarddError):
    """`create_prog` names an existing prog with different content."""

    code = "prog_conflict"


class OpConflict(WarddError):
    """`submit` or `call` names an existing op with different content."""

    code = "op_conflict"


class Conflict(WarddError):
    """A different outcome for an already resolved attempt, or a reservation id reused with
    different content."""

    code = "conflict"


# -- placement and execution profile -----------------------------------------------------


class PlacementUnbound(WarddError):
    """The neuron has no placement bound."""

    code = "placement_unbound"


class PlacementStale(WarddError):
    """The descriptor or placement is this daemon's executor but not what it advertises now
    (an earlier boot, a worker it does not host, another field)."""

    code = "placement_stale"


class UnsupportedProfile(WarddError):
    """The descriptor names another executor than this daemon's (machine, environment,
    proof, network, backend, warrior or device)."""

    code = "unsupported_profile"


class UnsupportedGuarantee(WarddError):
    """The descriptor asks for a hard cpu, time or memory guarantee, which this daemon
    cannot give."""

    code = "unsupported_guarantee"


# -- prepare, invoke, manual_take (contract §3.2, in their order) -----------------------------


class Terminal(WarddError):
    """The op is consumed or cancelled, or was and has been pruned (data: `state`, `pruned`)."""

    code = "terminal"


class ProgInactive(WarddError):
    """The prog is not active (paused, retired or archived)."""

    code = "prog_inactive"


class BudgetExhausted(WarddError):
    """The prog's step budget is exhausted, or the reservation would exceed its step
    limit."""

    code = "budget_exhausted"


class GrantDisabled(WarddError):
    """The prog has no grant, or its grant is disabled."""

    code = "grant_disabled"


class ActNotGranted(WarddError):
    """The op's act is not in the prog's current grant."""

    code = "act_not_granted"


class ActNotAccepted(WarddError):
    """The placement's descriptor does not accept the op's act."""

    code = "act_not_accepted"


class ArgsTooLarge(WarddError):
    """The args exceed the act's configured bound."""

    code = "args_too_large"


class AttemptMismatch(WarddError):
    """`expected_attempt` is not 1 + the number of attempts the op already has."""

    code = "attempt_mismatch"


class AttemptBusy(WarddError):
    """An attempt of the op is prepared or running (from `call`: `data: {op, attempt}`)."""

    code = "attempt_busy"


class AttemptUnknown(WarddError):
    """An attempt of the op is unknown; only a receipt or `reconcile` resolves it
    (from `call`: `data: {op, attempt}`, the attempt that may have run)."""

    code = "attempt_unknown"


class AlreadySucceeded(WarddError):
    """An attempt of the op has succeeded."""

    code = "already_succeeded"


# -- execute ------------------------------------------------------------------------------


class TokenInvalid(WarddError):
    """The dispatch token is unknown, already used, or presented on another connection than
    the one that prepared it."""

    code = "token_invalid"


class TokenVoid(WarddError):
    """The token's attempt was voided before its claim; `data.reason` says why (see
    TOKEN_VOID_REASONS)."""

    code = "token_void"


class ClaimConflict(WarddError):
    """Another dispatch already claimed this attempt; the adapter was not called."""

    code = "claim_conflict"


# -- reconcile, consume, rebind -----------------------------------------------------------


class NotReconcilable(WarddError):
    """The attempt is not, and never was, unknown."""

    code = "not_reconcilable"


class NotRetained(WarddError):
    """The op holds no retained result."""

    code = "not_retained"


class RebindRequired(WarddError):
    """The retained result belongs to an older epoch: `rebind` it before `consume`."""

    code = "rebind_required"


# -- abort ------------------------------------------------------------------------------


class NotRunning(WarddError):
    """`abort`: the attempt is not running (of any kind, or the op has no such attempt);
    nothing was changed."""

    code = "not_running"


class NotAbortable(WarddError):
    """`abort`: the attempt runs in an adapter that cannot be stopped from outside (an
    in-process call cannot be preempted); nothing was changed."""

    code = "not_abortable"


#: code -> (exception class, one-line meaning), in table order.
ERRORS: Final[Mapping[str, tuple[type[WarddError], str]]] = types.MappingProxyType(_TABLE)

#: The codes that can answer a dispatch after its claim (the attempt may have run).
AFTER_CLAIM_CODES: Final = tuple(code for code, (cls, _) in _TABLE.items() if cls.after_claim)

#: The values `TokenVoid`'s `data.reason` takes (contract §4).
TOKEN_VOID_REASONS: Final = frozenset(
    {
        "placement_changed",
        "epoch_changed",
        "revoked",
        "prog_inactive",
        "budget_exhausted",
        "cancelled",
        "token_dropped",
        "token_expired",
        "claim_failed",
        "shutdown",
    }
)


#: The methods that dispatch an attempt: the adapter may be called once the claim is
#: durable, and only an answer that comes before it proves that nothing ran.
DISPATCH_METHODS: Final = frozenset({"invoke", "execute", "call"})


def may_have_run(method: str, error: WarddError) -> bool:
    """Whether `error`, the answer to a request of `method`, leaves the attempt in doubt.

    True for a dispatch (`DISPATCH_METHODS`) answered with a code that can come after
    the claim (`AFTER_CLAIM_CODES`), unless its ``data.reason`` says it was decided
    before (``internal`` with ``claim_failed``: the act was not called), or with a
    code this table does not know (a newer daemon's): the act may have had its
    effect, and the answer is no refusal. Every other answer refuses a dispatch
    before its claim: nothing ran.
    """
    if method not in DISPATCH_METHODS:
        return False
    if error.code not in _TABLE:
        return True
    reason = error.data.get("reason") if isinstance(error.data, Mapping) else None
    return error.after_claim and reason not in type(error).before_claim_reasons


def error_for(code: str, message: str, data: dict[str, Any] | None = None) -> WarddError:
    """The exception for an error reply's ``{code, message, data?}``.

    A code this table does not list (a newer daemon's) still gives a
    `WarddError` whose `code` is that string, so callers can match on it.
    """
    entry = _TABLE.get(code)
    if entry is not None:
        return entry[0](message, data)
    cls = types.new_class(
        "UnlistedError", (WarddError,), {"listed": False}, lambda ns: ns.update(code=code)
    )
    error: WarddError = cls(message, data)
    return error


def _after_claim_code(code: str) -> str:
    """`code` as the table's note names it, with the reasons decided before the claim."""
    reasons = sorted(_TABLE[code][0].before_claim_reasons)
    if not reasons:
        return f"`{code}`"
    said = ", ".join(f"`{r}`" for r in reasons)
    return f"`{code}` (except with `data.reason` {said}, decided before the claim)"


def markdown_table() -> str:
    """The error table as markdown: one row per code, with its class and meaning."""
    lines = ["| code | exception | meaning |", "|---|---|---|"]
    for code, (cls, meaning) in _TABLE.items():
        lines.append(f"| `{code}` | `{cls.__name__}` | {meaning} |")
    reasons = ", ".join(f"`{r}`" for r in sorted(TOKEN_VOID_REASONS))
    lines += ["", f"`token_void` `data.reason` is one of: {reasons}."]
    *first, last = (f"`{m}`" for m in sorted(DISPATCH_METHODS))
    dispatches = f"{', '.join(first)} and {last}" if first else last
    after = ", ".join(_after_claim_code(code) for code in AFTER_CLAIM_CODES)
    lines += [
        "",
        f"Codes that can answer {dispatches} after the claim: {after}. Such an answer, "
        "or a code this table does not list, says that the attempt **may have run**, not "
        "that the request was refused: the bundled clients raise `MayHaveRun` naming the "
        "op and attempt, and `wardctl` exits 3. Every other code answers a dispatch before "
        "its claim: nothing ran.",
    ]
    return "\n".join(lines) + "\n"
