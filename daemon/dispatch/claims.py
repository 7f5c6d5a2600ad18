"""What a claim records about its adapter, and what a receipt is asked with (contract §3.4, §6).

Every claim stores, in its ``claim_info`` column, which adapter served it and
what that adapter recorded just before its call::

    {"adapter": <the adapter's kind: "file.append", "cli", an entry point's name>,
     "record": <the adapter's claim_info(), or None>}

A receipt is asked only with what the claim recorded (contract §3.4):

- an attempt never claimed never reached an adapter: its receipt gets
  ``claim_info=None`` and its answer is applied as usual;
- a claim recorded by the adapter kind that serves the act now: its receipt
  gets that record, and its answer is applied as usual;
- any other claim — made under another adapter (the act was reconfigured
  since), or holding no adapter record (made before contract 2.2 had every
  claim record its adapter, §3.4) — gets ``{}`` (or the older record it
  holds): its answer, whatever it is, is only a hint, and the attempt stays
  unknown for ``reconcile``.

This module is pure except `claim_record`, which calls the adapter (for
``file.append`` a stat and a read of the file): the workers call it on their
own thread, never on the writer thread.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from wardd.adapters import Adapter

from ..observe.tracing import stored_traceparent

__all__ = ["ReceiptQuestion", "claim_record", "receipt_question"]


def claim_record(adapter: Adapter) -> dict[str, Any]:
    """What a claim of ``adapter`` stores: its kind and its ``claim_info()`` (may raise)."""
    return {"adapter": adapter.kind, "record": adapter.claim_info()}


@attrs.frozen
class ReceiptQuestion:
    """How one attempt's receipt is asked, and whether its answer may be applied."""

    claim_info: Any  # handed to ``receipt(key, claim_info)``
    binding: bool  # False: the answer is a hint only, the attempt stays unknown
    why: str | None = None  # for a hint: why the answer cannot be applied
    # the dispatch span the claim kept (docs/operations.md, "Traces"), for an
    # adapter whose receipt passes it on (``http``)
    traceparent: str | None = None


def receipt_question(adapter: Adapter, claimed: bool, stored: object) -> ReceiptQuestion:
    """The receipt question for an attempt (``stored``: its claim's decoded ``claim_info``)."""
    if not claimed:
        return ReceiptQuestion(None, True)
    kind = adapter.kind
    if _is_claim_record(stored):
        assert isinstance(stored, Mapping)
        if stored["adapter"] == kind:
            return ReceiptQuestion(stored["record"], True, None, stored_traceparent(stored))
        why = f"claimed under adapter {stored['adapter']!r}; the act is now served by {kind!r}"
        return ReceiptQuestion({}, False, why)
    older = dict(stored) if isinstance(stored, Mapping) else {}
    why = "the claim holds no record of its adapter (a claim of an older wardd)"
    return ReceiptQuestion(older, False, why)


def _is_claim_record(stored: object) -> bool:
    return (
        isinstance(stored, Mapping)
        and isinstance(stored.get("adapter"), str)
        and "record" in stored
    )
