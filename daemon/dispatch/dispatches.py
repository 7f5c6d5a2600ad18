"""A dispatch as data: what ``execute``, ``invoke`` and ``call`` hand a worker (contract §3.2).

Each ends as one frozen :class:`Dispatch`: the neuron, the act and how
the attempt is claimed, :class:`Execute` (the token's prepared attempt),
:class:`Invoke` (prepare and claim in one unit, contract §3.2.5) or
:class:`Call` (submit, prepare and claim in one unit, contract §3.2.6). The
claim's writer unit is built from the record in one place,
:func:`claim_unit`, on the worker's thread. The worker pool's
:meth:`~wardd.daemon.dispatch.workers.WorkerPool.submit` returns the reply the worker completes;
a worker submits an outcome with its :class:`Recorded`, and once that write
is done the :class:`~wardd.daemon.dispatch.dispatcher.Settler` makes the answer from it (on
the writer thread, from the future's callback: the event loop, the busiest
thread under load, only takes the result).
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Mapping
from typing import Any

import attrs

from ..core.records import AttemptRef, BootContext
from ..observe.tracing import TraceIn
from ..store.writer import Unit
from . import attempt_units
from .calls import CallEnd, ClaimEntry

__all__ = [
    "Call",
    "Dispatch",
    "Execute",
    "Invoke",
    "Recorded",
    "claim_unit",
]


@attrs.frozen
class Execute:
    """``execute``: claim the token's prepared attempt (contract §3.2.2)."""

    ref: AttemptRef


@attrs.frozen
class Invoke:
    """``invoke``: the attempt and its claim in one unit (contract §3.2.5)."""

    params: Mapping[str, Any]


@attrs.frozen
class Call:
    """``call``: the op (when new), its attempt and its claim in one unit (contract §3.2.6)."""

    params: Mapping[str, Any]


@attrs.frozen
class Dispatch:
    """One accepted ``execute``, ``invoke`` or ``call``: all take the same way from here."""

    neuron: str
    act: str
    how: Execute | Invoke | Call
    trace: TraceIn | None = None  # set when tracing is on (docs/operations.md, "Traces")

    @property
    def prepared(self) -> AttemptRef | None:
        """An execute's attempt, known before its claim (an invoke or a call has none yet)."""
        how = self.how
        return how.ref if isinstance(how, Execute) else None


def claim_unit(
    d: Dispatch,
    ctx: BootContext,
    *,
    worker: str,
    claim_info: Any,
    stopping: threading.Event,
    entry: ClaimEntry,
) -> Unit:
    """The claim's writer unit for ``d`` on ``worker``: the only place it is built.

    ``claim_info`` is the claim record of ``d.act``, computed on the worker
    thread just before (the adapter's ``claim_info()`` is a stat and a read
    of a file for ``file.append``: never on the writer's thread).
    ``entry`` is the call the unit enters in the call table once the claim
    is written. The unit answers the claimed `AttemptRef`, a refusal, a
    :class:`~.core.attempts.Reroute` to another worker (invoke and call),
    or an :class:`Answered` (a call that runs nothing)."""
    how = d.how
    if isinstance(how, Execute):
        return attempt_units.claim(
            how.ref,
            worker=worker,
            boot=ctx.boot,
            claim_info=claim_info,
            stopping=stopping,
            entry=entry,
        )
    build = attempt_units.call_claim if isinstance(how, Call) else attempt_units.invoke_claim
    return build(
        ctx,
        d.neuron,
        how.params,
        worker=worker,
        claim_info=claim_info,
        stopping=stopping,
        entry=entry,
    )


@attrs.frozen
class Recorded:
    """An outcome a worker submitted: the reply is made from it once
    ``future`` says it is durable (contract §3.2.3)."""

    ref: AttemptRef
    worker: str
    end: CallEnd
    future: concurrent.futures.Future[Any]
