"""The adapter contract: requests, receipts, and how a call's fate is told (contract §3.2.4, §6).

An adapter's ``call`` tells the daemon the fate of one attempt by how it ends:

- it returns a value: the act **succeeded**, the value is its result;
- it raises `DefiniteFailure`: the adapter *asserts that no effect happened*,
  the attempt is **failed** (a retry may rebind future execution);
- it raises anything else (or the daemon dies meanwhile): the attempt is
  **unknown** until a receipt or a signed ``reconcile`` resolves it.

So an adapter raises `DefiniteFailure` only when it can prove that nothing
happened, and never puts a configured secret into an exception message.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import attrs

from wardd.protocol import RECEIPT_ANSWERS, ReceiptAnswer

__all__ = [
    "DEFAULT_MAX_ARG_BYTES",
    "RECEIPT_ANSWERS",
    "ActRequest",
    "ActSettings",
    "Adapter",
    "AdapterConfigError",
    "BaseAdapter",
    "CallAborted",
    "DefiniteFailure",
    "OutcomeUnknown",
    "Receipt",
    "ReceiptAnswer",
    "SentCall",
    "as_receipt",
    "has_receipt",
    "idempotency_key",
]

#: The argument bound of an act whose table does not set ``max_arg_bytes``.
DEFAULT_MAX_ARG_BYTES = 65536


class DefiniteFailure(Exception):
    """Raised by an adapter that asserts its act had no effect: the attempt is failed.

    Raise it only with proof that nothing happened (the file could not be
    opened, the program could not be spawned, the program exited with a code
    its operator declared a no-effect exit). The message is recorded as the
    attempt's error text: it must not contain a secret.
    """


class OutcomeUnknown(Exception):
    """Raised by a built-in adapter when the act may or may not have had its effect.

    The daemon maps every exception other than `DefiniteFailure` to an unknown
    attempt; this class only names the case where a built-in adapter knows it
    cannot tell (a write error after the write began, a non-zero exit, a
    timeout). Its message never contains a configured secret.
    """


class CallAborted(OutcomeUnknown):
    """Raised by an abortable adapter whose call the operator's ``abort`` ended
    (contract §3.8): its program was killed by the abort, or never started.

    The attempt is unknown either way; this class tells the daemon *which*
    happened, so that the abort's answer and the attempt's evidence say
    ``aborted: true``. A call that ended unknown on its own while an abort
    was on its way (its program had already exited, with its own status)
    raises plain `OutcomeUnknown`: ``aborted: false``.
    """


class AdapterConfigError(Exception):
    """An act's table is not a valid adapter configuration.

    ``key`` is the offending key relative to the act's table (``"argv"``,
    ``"env.API_TOKEN"``); the config loader prefixes it with the act's dotted
    path (``acts."tool.run".argv``). ``reason`` says what is wrong, in words
    fit for one line of an operator's terminal.
    """

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"{key}: {reason}")
        self.key = key
        self.reason = reason


def idempotency_key(neuron: str, op: str, attempt: int) -> str:
    """An attempt's idempotency key, ``"<neuron>/<op>/<attempt>"`` (contract §3.4):
    unique across neurons, ops and attempts. Its one definition: the adapters'
    calls and receipts, the daemon's aborts and its recovery all use it."""
    return f"{neuron}/{op}/{attempt}"


@attrs.frozen
class ActRequest:
    """One attempt's call of an act, as handed to `Adapter.call` on a worker thread."""

    neuron: str
    op: str
    attempt: int
    act: str
    args: bytes
    # the daemon boot that claimed the attempt and runs the call: a `cli`
    # program carries it as WARDD_BOOT, so that a later start of the same
    # database knows its own orphans from another daemon's programs
    boot: str | None = None
    # the W3C trace context of the dispatch span (docs/operations.md, "Traces"),
    # None when tracing is off. An adapter passes it on in its own protocol's
    # way: `http` as the traceparent/tracestate headers, `cli` as the
    # TRACEPARENT/TRACESTATE environment, `mcp` in its request's
    # `params._meta` ("traceparent", "tracestate")
    traceparent: str | None = None
    tracestate: str | None = None

    @property
    def idempotency_key(self) -> str:
        """``"<neuron>/<op>/<attempt>"`` (contract §3.4): see :func:`idempotency_key`."""
        return idempotency_key(self.neuron, self.op, self.attempt)


@attrs.frozen
class SentCall:
    """What the daemon holds durably about a claimed attempt's call, for a
    receipt that sends the request again (``receipt_resends``).

    ``args`` are the op's, stored when it was submitted (the call's
    ``ActRequest.args``); ``claimed_at`` is the claim's commit time, in
    seconds since the epoch (wall clock)."""

    args: bytes
    claimed_at: float


@attrs.frozen
class Receipt:
    """An executor receipt's answer about one idempotency key (contract §3.4).

    ``value`` is the act's result for ``executed`` when the adapter can tell
    it (the built-in ones cannot: null). ``detail`` is a short, secret-free
    note on why the answer is ``unknown`` (for logs and evidence hints); it is
    never a result.
    """

    answer: ReceiptAnswer = attrs.field(validator=attrs.validators.in_(RECEIPT_ANSWERS))
    value: Any = None
    detail: str | None = None


def as_receipt(answer: object) -> Receipt:
    """What a ``receipt`` method returned, as a `Receipt` (the one reading of it).

    A `Receipt` stands as it is; an answer word (``"executed"``,
    ``"not_executed"``, ``"unknown"``) or an ``(answer, value)`` pair is
    taken for one; anything else is ``unknown``, never a guess.
    """
    if isinstance(answer, Receipt):
        return answer
    if isinstance(answer, str) and answer in RECEIPT_ANSWERS:
        return Receipt(answer)  # type: ignore[arg-type]
    if isinstance(answer, tuple) and len(answer) == 2 and answer[0] in RECEIPT_ANSWERS:
        return Receipt(answer[0], answer[1])
    return Receipt("unknown", detail="the adapter's receipt gave no recognised answer")


@runtime_checkable
class Adapter(Protocol):
    """What the daemon needs from an act's adapter: every member below, read
    directly. A built-in adapter inherits the optional ones' defaults from
    `BaseAdapter`; an entry point's object is fitted to this protocol once, when
    it is loaded (`EntryPointAdapter`: a member it lacks takes the default).

    - ``tag``: the act's tag; ``max_arg_bytes``: the act's argument bound.
    - ``kind``: the adapter's name as configured (``"file.append"``,
      ``"cli"``, an entry point's name). The daemon stores it with every
      claim, so that a receipt is only ever asked about a claim its own kind
      of adapter made (contract §3.4).
    - ``call(request)``: runs the act once (the module docstring says how its
      end is read).
    - ``in_process`` (default False): every effect of a call happens inside
      the call, so that a receipt's ``not_executed`` may be applied.
    - ``receipt_supported`` (default False) and ``receipt(idempotency_key,
      claim_info=None, sent=None, *, traceparent=None) -> Receipt``: whether
      the attempt with that key had its effect; never raises (a failure to
      tell is ``Receipt("unknown")``). ``claim_info`` is None for an attempt
      that was never claimed (it never reached the adapter) and for a claim
      whose ``claim_info()`` recorded None; ``{}`` (or an older wardd's
      record) for a claim that holds no record of this adapter's — the
      daemon then takes the answer as a hint only. ``traceparent`` is the
      dispatch span the call was given, when the claim kept one
      (docs/operations.md, "Traces"; ``http`` sends it on its receipt's
      request).
    - ``receipt_resends`` (default False): the receipt sends the call's
      request again (``http`` with ``receipt = "replay"``), so the daemon also
      hands it what it holds of the call: ``sent``, a `SentCall` (None for an
      attempt never claimed, and for every other adapter).
    - ``claim_info() -> dict | None`` (default None): facts stored with the
      dispatch claim, computed on the worker thread just before the claim is
      committed (so before the call), and handed back to ``receipt``
      (``file.append``: the file's path, device, inode, size and a digest of
      its content).
    - ``abortable`` (default False) and ``abort(idempotency_key)``: the call
      with that key can be stopped from outside (``cli``: its process group
      is killed), so that the operator's ``abort`` can end a hung call. An
      adapter that is not abortable answers ``abort`` with ``not_abortable``.
      The call that the abort ended raises `CallAborted`; any other unknown
      end is the call's own (the abort then answers ``aborted: false``).
    - ``kill_all()`` (default: nothing): end everything the adapter still
      runs (``cli``: SIGKILL its process groups); called by the daemon at
      shutdown after its grace.
    - ``check_at_start() -> str | None`` (default None): a look at the act
      run after the daemon is ready (``mcp``: its tool is listed); a reason
      is logged, nothing else changes.
    """

    @property
    def tag(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def max_arg_bytes(self) -> int: ...
    @property
    def in_process(self) -> bool: ...
    @property
    def abortable(self) -> bool: ...
    @property
    def receipt_supported(self) -> bool: ...
    @property
    def receipt_resends(self) -> bool: ...

    def call(self, request: ActRequest) -> Any:
        """Run the act once for ``request``; see the module docstring for how its end is read."""
        ...

    def receipt(
        self,
        idempotency_key: str,
        claim_info: Mapping[str, Any] | None = None,
        sent: SentCall | None = None,
        *,
        traceparent: str | None = None,
    ) -> Receipt:
        """Whether the attempt with ``idempotency_key`` had its effect; never raises."""
        ...

    def claim_info(self) -> dict[str, Any] | None:
        """Facts stored with the claim, for the receipt."""
        ...

    def abort(self, idempotency_key: str) -> None:
        """Stop the call with ``idempotency_key`` (only asked when ``abortable``)."""
        ...

    def kill_all(self) -> None:
        """End everything the adapter still runs (the daemon's stop)."""
        ...

    def check_at_start(self) -> str | None:
        """Why the act looks unusable now (None: nothing to say)."""
        ...


class ActSettings(Protocol):
    """An act's table validated once into a typed, frozen value (each adapter
    has its own: `CliSettings`, `HttpSettings`, …): what ``wardd
    check-config`` checks, and what the start builds the act's adapter from,
    once. A secret file is read when its table is validated, to check it,
    and again only at a call (or a server's start) that needs it."""

    @property
    def tag(self) -> str: ...
    @property
    def max_arg_bytes(self) -> int: ...

    def build(self, boot: str | None = None) -> Adapter:
        """The act's adapter; ``boot`` is the running daemon's, for an adapter
        whose processes outlive a call (``mcp``'s stdio servers)."""
        ...


class BaseAdapter:
    """The defaults of `Adapter`'s optional members, which every adapter of
    wardd's (the built-in ones, `EntryPointAdapter`) inherits: not in-process,
    not abortable, no receipt, nothing to record with a claim, nothing to kill,
    nothing to check. An adapter's receipt is its `answer(idempotency_key,
    claim_info)`, unless it overrides ``receipt`` itself.

    A built-in adapter is its act's settings and what it runs:
    ``class CliAdapter(BaseAdapter, CliSettings)``. This class comes first
    among the bases, so that an adapter has identity (what it runs), whatever
    its settings compare as; a member the adapter sets is declared on the
    adapter itself, never on its settings."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)

    @property
    def in_process(self) -> bool:
        """Default: a call may act outside the daemon after it ends."""
        return False

    @property
    def abortable(self) -> bool:
        """Default: a call cannot be stopped from outside."""
        return False

    @property
    def receipt_supported(self) -> bool:
        """Default: no receipt."""
        return False

    @property
    def receipt_resends(self) -> bool:
        """Default: a receipt never sends the call again."""
        return False

    def receipt(
        self,
        idempotency_key: str,
        claim_info: Mapping[str, Any] | None = None,
        sent: SentCall | None = None,
        *,
        traceparent: str | None = None,
    ) -> Receipt:
        """The `answer` about the key and the claim's record. An adapter whose
        receipt needs the call's request or span too (``http``) overrides
        this method instead."""
        return self.answer(idempotency_key, claim_info)

    def answer(self, idempotency_key: str, claim_info: Mapping[str, Any] | None = None) -> Receipt:
        """Default: ``unknown`` (the adapter has no receipt)."""
        return Receipt("unknown", detail="the adapter has no receipt")

    def claim_info(self) -> dict[str, Any] | None:
        """Default: nothing to record with the claim."""
        return None

    def abort(self, idempotency_key: str) -> None:
        """Default: nothing to stop (the daemon asks only an ``abortable`` adapter)."""

    def kill_all(self) -> None:
        """Default: nothing runs past a call."""

    def check_at_start(self) -> str | None:
        """Default: nothing to check."""
        return None


def has_receipt(adapter: Adapter) -> bool:
    """Whether ``adapter`` offers an executor receipt (its ``receipt_supported``:
    the built-in ``cli`` adapter has a ``receipt`` method but answers only when
    ``receipt_argv`` is configured)."""
    return adapter.receipt_supported
