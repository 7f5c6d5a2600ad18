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

from typing import Any, Protocol, runtime_checkable

import attrs

from wardd.protocol import RECEIPT_ANSWERS, ReceiptAnswer

__all__ = [
    "DEFAULT_MAX_ARG_BYTES",
    "RECEIPT_ANSWERS",
    "ActRequest",
    "Adapter",
    "AdapterConfigError",
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
    """What the daemon needs from an act's adapter.

    Optional members, looked up with ``getattr`` by the daemon:

    - ``kind``: the adapter's name as configured (``"file.append"``,
      ``"cli"``, an entry point's name). The daemon stores it with every
      claim, so that a receipt is only ever asked about a claim its own kind
      of adapter made (contract §3.4).
    - ``receipt(idempotency_key, claim_info=None) -> Receipt``: answers
      whether the attempt with that key had its effect; never raises (a
      failure to tell is ``Receipt("unknown")``). Use `has_receipt` to ask
      whether an adapter offers one. ``claim_info`` is None for an attempt
      that was never claimed (it never reached the adapter) and for a claim
      whose ``claim_info()`` recorded None; ``{}`` (or an older wardd's
      record) for a claim that holds no record of this adapter's — the
      daemon then takes the answer as a hint only.
    - ``receipt_resends: bool`` (built-in adapters; an entry point's is not
      forwarded): the receipt sends the call's request again (``http``
      with ``receipt = "replay"``), so the daemon also hands it
      what it holds of the call: ``receipt(idempotency_key, claim_info,
      sent)``, ``sent`` a `SentCall` (None for an attempt never claimed).
    - ``claim_info() -> dict | None``: facts stored with the dispatch claim,
      computed on the worker thread just before the claim is committed (so
      before the call), and handed back to ``receipt`` (``file.append``: the
      file's path, device, inode, size and a digest of its content).
    - ``receipt_traced: bool``: True when ``receipt`` also takes a keyword
      ``traceparent``: the dispatch span the call was given (docs/operations.md,
      "Traces"), passed when the claim kept one (``http`` sends it on its
      receipt's request).
    - ``kill_all() -> None``: SIGKILL every process group the adapter still
      runs (``cli``); called by the daemon at shutdown after its grace.
    - ``abortable: bool`` and ``abort(idempotency_key) -> None``: the call
      with that key can be stopped from outside (``cli``: its process group
      is killed), so that the operator's ``abort`` can end a hung call. An
      adapter without them answers ``abort`` with ``not_abortable``. The
      call that the abort ended raises `CallAborted`; any other unknown end
      is the call's own (the abort then answers ``aborted: false``).
    """

    tag: str
    in_process: bool
    max_arg_bytes: int

    def call(self, request: ActRequest) -> Any:
        """Run the act once for ``request``; see the module docstring for how its end is read."""
        ...


def has_receipt(adapter: object) -> bool:
    """Whether ``adapter`` offers an executor receipt.

    An adapter may say so with a ``receipt_supported`` attribute (the
    built-in ``cli`` adapter has a ``receipt`` method but answers only when
    ``receipt_argv`` is configured); otherwise a callable ``receipt`` counts.
    """
    supported = getattr(adapter, "receipt_supported", None)
    if isinstance(supported, bool):
        return supported
    return callable(getattr(adapter, "receipt", None))
