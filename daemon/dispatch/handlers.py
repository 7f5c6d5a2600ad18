"""The method table: one entry per wire method (contract §4), and the handlers.

Each entry says everything the daemon needs to serve its method: the params
spec (checked first, ``bad_request``), whether it is signed (then the
network, the signature and the registration are checked next, in that
order), how it takes the neuron's ward guard, whether it is served while
the daemon stops (contract §3.6: reads and ``execute``, whose token is void
by then), whether it waits for the start-up recovery (all but ``status``,
``metrics`` and ``list_workers``), and its handler. The router
(:class:`~wardd.daemon.dispatch.router.Router`) applies each entry as it is declared.

A handler is ``async (group, connection, neuron, params) -> result``;
the neuron is the verified signer for a signed method and ``None``
otherwise; ``group`` is the value of the group its entry declares
(``uses``, :mod:`~wardd.daemon.dispatch.services`): the components that
group of handlers may use, never the daemon. What the handler returns depends on the
entry's guard: ``NONE``, the answer; ``EXCLUSIVE``, the writer unit the
router runs holding the guard exclusively; ``DISPATCH``, the worker and the
:class:`~wardd.daemon.dispatch.dispatches.Dispatch` the router hands to it (or, for a ``call``
that runs nothing, its :class:`~wardd.daemon.dispatch.dispatches.Answered`). The decision itself
is a writer unit (:mod:`~wardd.daemon.dispatch.attempt_units`,
:mod:`~wardd.daemon.dispatch.management_units`).
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Generic, TypeVar

import attrs
import structlog

from wardd.protocol import (
    ATTEMPT_LIST_STATES,
    DEFAULT_PAGE_LIMIT,
    BadRequest,
    Internal,
    NotAbortable,
    NotRunning,
    OpState,
    ProgState,
    canonical_digest,
)

from ..core.call import Answered
from ..life.bridge import ThreadReply
from ..observe.metrics import CONTENT_TYPE
from ..store.encoding import wire_safe
from ..store.reads import Reads
from ..store.writer import Unit
from ..wire.params import (
    NO_PARAMS,
    PAGE,
    TRACE,
    Spec,
    act_list,
    boolean,
    byte_string,
    descriptor,
    ident,
    neuron_id,
    one_of,
    outcome,
    uint,
)
from ..wire.server import Connection
from . import attempt_units
from . import management_units as mgmt
from .descriptors import check_descriptor
from .dispatches import Call, Dispatch, Execute, Invoke
from .services import Aborts, Attempts, Introspection, Receipts, Uses, Writes

__all__ = ["METHODS", "Guard", "Method"]

log = structlog.get_logger("wardd")
N = TypeVar("N", str, None)  # the neuron a handler gets: the signer, or None (unsigned)
# a handler's first argument is its group's value (``Method.uses``)
Handler = Callable[[Any, Connection, N, dict[str, Any]], Awaitable[Any]]
UnitBuilder = Callable[[Writes, str, dict[str, Any]], Unit]


class Guard(enum.Enum):
    """How a method takes the neuron's ward guard (contract §3.1, §3.2)."""

    NONE = "none"  # never waits for the guard
    EXCLUSIVE = "exclusive"  # its unit (the handler's answer) runs holding the guard exclusively
    DISPATCH = "dispatch"  # its dispatch goes to a worker, which holds it shared
    # around the claim and the call


@attrs.frozen
class Method(Generic[N]):
    """One wire method: its params, its checks and its handler."""

    params: Spec
    signed: bool
    handler: Handler[N]
    uses: Uses  # the group whose value the handler gets
    guard: Guard = Guard.NONE
    served_while_stopping: bool = False
    waits_for_recovery: bool = True
    # answered in its connection's read loop, in the same trio batch as its
    # frame's arrival, rather than by a task of its own (one batch later):
    # only for a handler that never waits (``status``)
    inline: bool = False


def _signed(
    params: Spec, handler: Handler[str], uses: Uses, guard: Guard = Guard.NONE
) -> Method[str]:
    return Method(params, signed=True, handler=handler, uses=uses, guard=guard)


def _write(params: Spec, build: UnitBuilder, guard: Guard = Guard.NONE) -> Method[str]:
    """A signed write that is one writer unit. Its checks (a descriptor's,
    say) come before the guard: an ``EXCLUSIVE`` write answers its unit,
    which the router runs holding the guard."""

    if guard is Guard.EXCLUSIVE:

        async def prepared(s: Writes, conn: Connection, neuron: str, p: dict[str, Any]) -> Any:
            return build(s, neuron, p)

        return _signed(params, prepared, Uses.WRITES, guard)

    async def handler(s: Writes, conn: Connection, neuron: str, p: dict[str, Any]) -> Any:
        return await s.writer.run(build(s, neuron, p))

    return _signed(params, handler, Uses.WRITES, guard)


def _introspect(handler: Handler[None], *, inline: bool = False) -> Method[None]:
    """An unsigned question about the daemon itself: no params, answered while
    the daemon stops and before its recovery ends."""
    return Method(
        NO_PARAMS,
        signed=False,
        handler=handler,
        uses=Uses.DAEMON,
        served_while_stopping=True,
        waits_for_recovery=False,
        inline=inline,
    )


def _page(p: Mapping[str, Any]) -> tuple[Any, int]:
    """A paged read's cursor and limit (contract §4), with the one default."""
    return p.get("after"), p.get("limit", DEFAULT_PAGE_LIMIT)


def _read(params: Spec, fn: Callable[[Reads, dict[str, Any]], Any]) -> Method[None]:
    """An unsigned read, in one read transaction: a prune (or any write)
    that commits meanwhile is seen whole or not at all."""

    async def handler(reads: Reads, conn: Connection, neuron: None, p: dict[str, Any]) -> Any:
        with reads.snapshot():
            return fn(reads, p)

    return Method(
        params, signed=False, handler=handler, uses=Uses.READS, served_while_stopping=True
    )


# -- the handlers that are more than one unit -------------------------------------


async def _prepare(s: Attempts, conn: Connection, neuron: str, p: dict[str, Any]) -> Any:
    ref = await s.writer.run(attempt_units.prepare(s.ctx, neuron, p))
    if s.stopping.is_set():  # admitted before the shutdown began: never a live token
        raise await s.voids.refuse(ref.attempt_id)
    if conn.closed:  # the connection went away meanwhile: its token is dropped
        await s.voids.void(ref.attempt_id, "token_dropped")
        raise Internal("the connection closed")
    handle = s.tokens.issue(conn.id, ref)
    log.debug("prepared", neuron=ref.neuron, op=ref.op, attempt=ref.attempt, worker=ref.worker)
    return {"token": handle, "attempt": ref.public()}


async def _execute(
    s: Attempts, conn: Connection, neuron: None, p: dict[str, Any]
) -> tuple[str, Dispatch]:
    ref = await s.tokens.redeem(p["token"], conn.id)
    if ref.attempt_id is None or ref.worker is None or not s.pool.has(ref.worker):
        if ref.attempt_id is not None:
            await s.voids.void(ref.attempt_id, "claim_failed")
        raise Internal("the attempt names no worker of this daemon")
    return ref.worker, Dispatch(ref.neuron, ref.act, Execute(ref))


async def _invoke(
    s: Attempts, conn: Connection, neuron: str, p: dict[str, Any]
) -> tuple[str, Dispatch]:
    # contract §3.2.5: prepare's checks on arrival, on a read, so that a
    # refusal (attempt_busy for a running attempt, say) is answered at once
    # and only a request that passes waits in its worker's queue; the
    # claim unit checks again, under the guard. The op's act is read here:
    # its claim record is computed on the worker's thread, before the claim
    # unit (invoke and execute claim alike)
    with s.reads.snapshot() as rconn:
        worker, act = attempt_units.invoke_precheck(rconn, s.ctx, neuron, p)
    if not s.pool.has(worker):
        raise Internal("the placement names no worker of this daemon")
    return worker, Dispatch(neuron, act, Invoke(p))


async def _call(
    s: Attempts, conn: Connection, neuron: str, p: dict[str, Any]
) -> tuple[str, Dispatch] | Answered:
    # contract §3.2.6: submit's and invoke's checks on arrival, on a read; an
    # op that already is (retained, failed, consumed, pruned) is answered
    # here and runs nothing; the claim unit decides again, under the guard
    with s.reads.snapshot() as rconn:
        start = attempt_units.call_precheck(rconn, s.ctx, neuron, p)
    if isinstance(start, Answered):
        return start
    worker, act = start
    if not s.pool.has(worker):
        raise Internal("the placement names no worker of this daemon")
    return worker, Dispatch(neuron, act, Call(p))


async def _register_neuron(s: Writes, conn: Connection, neuron: str, p: dict[str, Any]) -> Any:
    result = await s.writer.run(mgmt.register_neuron(neuron))
    s.registered(neuron)  # committed: its next signed request needs no read
    return result


async def _manual_take(s: Attempts, conn: Connection, neuron: str, p: dict[str, Any]) -> Any:
    ref = await s.writer.run(attempt_units.manual_take(s.ctx, neuron, p))
    return {
        "attempt": {
            "op": ref.op,
            "attempt": ref.attempt,
            "kind": "manual",
            "epoch": ref.epoch,
            "policy_version": ref.policy_version,
        }
    }


async def _reconcile(s: Receipts, conn: Connection, neuron: str, p: dict[str, Any]) -> Any:
    await s.recovery.wait_for_receipt(neuron, p["op"], p["attempt"])
    out = p["outcome"]
    if wire_safe(out.get("value"))[1] is not None:
        raise BadRequest("outcome.value nests too deep to be sent back", {"param": "outcome"})
    # the traces tell a reconcile that resolved an unknown attempt (docs/operations.md)
    traced = s.recovery.traced_unknown(neuron, p["op"], p["attempt"])
    got = await s.writer.run(
        mgmt.reconcile(neuron, p["op"], p["attempt"], out["status"], out.get("value"))
    )
    if traced:
        s.recovery.reconciled(neuron, p["op"], p["attempt"], out["status"])
    return got


async def _check_receipts(s: Receipts, conn: Connection, neuron: str, p: dict[str, Any]) -> Any:
    return await s.recovery.check_receipts(neuron)


async def _abort(s: Aborts, conn: Connection, neuron: str, p: dict[str, Any]) -> Any:
    """contract §3.8: end a hung call. The checks run on a read (the
    claim registered the call before a read can show it running); the
    call's process group is killed, its outcome is recorded ``unknown``
    by its own worker, and the reply leaves once that is durable, saying
    which happened: ``aborted: true`` when the abort ended the call,
    ``aborted: false`` when the call ended unknown on its own before the
    kill reached it. It never waits for the ward guard."""
    op, attempt = p["op"], p["attempt"]
    with s.reads.snapshot() as rconn:
        attempt_id, act = attempt_units.abort_target(rconn, neuron, op, attempt)
    adapter = s.adapters.get(act)
    if adapter is None or not adapter.abortable:
        raise NotAbortable(f"act {act!r} runs in an adapter that cannot be stopped from outside")
    reply = ThreadReply()
    if not s.pool.abort(attempt_id, reply):
        raise NotRunning("nothing to abort: the call ended before the abort")
    log.warning("abort", neuron=neuron, op=op, attempt=attempt, act=act)
    end = await s.dispatcher.wait(reply)
    if end.status != "unknown":  # the call ended on its own before the kill reached it
        raise NotRunning(f"nothing to abort: the call ended before the abort ({end.status})")
    return {"op": op, "attempt": attempt, "status": "unknown", "aborted": end.aborted is True}


def _bind_placement(s: Writes, neuron: str, p: dict[str, Any]) -> Unit:
    admitted = check_descriptor(p["descriptor"], s.descriptors)
    return mgmt.bind_placement(
        neuron, p["expected_generation"], admitted, canonical_digest(admitted)
    )


async def _list_workers(s: Introspection, conn: Connection, neuron: None, p: dict[str, Any]) -> Any:
    return {
        "workers": [
            {"worker": desc["executor"]["worker"], "descriptor": desc, "digest": g}
            for desc, g in zip(s.descriptors, s.digests, strict=True)
        ]
    }


async def _status(s: Introspection, conn: Connection, neuron: None, p: dict[str, Any]) -> Any:
    return s.status()


async def _metrics(s: Introspection, conn: Connection, neuron: None, p: dict[str, Any]) -> Any:
    """Every series (docs/operations.md "Metrics") in the Prometheus text format."""
    return {"content_type": CONTENT_TYPE, "text": s.metrics_text()}


# -- the table ----------------------------------------------------------------------

_PREPARE: Spec = (
    {"op": ident, "expected_attempt": uint, "placement_generation": uint},
    {"expected_epoch": uint},
)
_OP: Spec = ({"op": ident}, {})
_STEPS: Spec = ({"prog": ident, "reservation": ident, "steps": uint}, {})
_EXCL = Guard.EXCLUSIVE

#: Every method but ``hello`` (which the server answers), by name.
METHODS: Final[Mapping[str, Method[Any]]] = {
    # the neuron root (contract §3.1)
    "register_neuron": _signed(NO_PARAMS, _register_neuron, Uses.WRITES),
    "bind_placement": _write(
        ({"expected_generation": uint, "descriptor": descriptor}, {}), _bind_placement, _EXCL
    ),
    "release_placement": _write(
        ({"expected_generation": uint}, {}),
        lambda s, n, p: mgmt.bind_placement(n, p["expected_generation"], None, None),
        _EXCL,
    ),
    "advance_epoch": _write(
        ({"expected_epoch": uint}, {}),
        lambda s, n, p: mgmt.advance_epoch(n, p["expected_epoch"]),
        _EXCL,
    ),
    "set_grant": _write(
        (
            {"prog": ident, "acts": act_list, "enabled": boolean, "expected_policy_version": uint},
            {},
        ),
        lambda s, n, p: mgmt.set_grant(
            n, p["prog"], p["acts"], p["enabled"], p["expected_policy_version"]
        ),
        _EXCL,
    ),
    # progs (contract §3.4)
    "create_prog": _write(
        ({"prog": ident, "step_limit": uint}, {}),
        lambda s, n, p: mgmt.create_prog(n, p["prog"], p["step_limit"]),
    ),
    "set_prog_state": _write(
        (
            {"prog": ident, "expected_state": one_of(*ProgState), "state": one_of(*ProgState)},
            {"expected_state_version": uint},
        ),
        lambda s, n, p: mgmt.set_prog_state(
            n, p["prog"], p["expected_state"], p["state"], p.get("expected_state_version")
        ),
        _EXCL,
    ),
    "set_step_limit": _write(
        ({"prog": ident, "step_limit": uint, "expected_state_version": uint}, {}),
        lambda s, n, p: mgmt.set_step_limit(
            n, p["prog"], p["step_limit"], p["expected_state_version"]
        ),
    ),
    "reserve_steps": _write(
        _STEPS,
        lambda s, n, p: mgmt.reserve_steps(n, p["prog"], p["reservation"], p["steps"]),
    ),
    "settle_steps": _write(
        _STEPS,
        lambda s, n, p: mgmt.settle_steps(n, p["prog"], p["reservation"], p["steps"]),
    ),
    "recover_reservations": _write(
        ({"prog": ident}, {"before": uint}),
        lambda s, n, p: mgmt.recover_reservations(n, p["prog"], p.get("before")),
    ),
    # ops and attempts (contract §3.2, §3.3)
    "submit": _write(
        ({"prog": ident, "op": ident, "act": ident, "args": byte_string}, {}),
        lambda s, n, p: mgmt.submit(n, p["prog"], p["op"], p["act"], p["args"], s.ctx.act_bounds),
    ),
    "prepare": _signed(_PREPARE, _prepare, Uses.ATTEMPTS),
    "invoke": _signed(
        (_PREPARE[0], {**_PREPARE[1], **TRACE}), _invoke, Uses.ATTEMPTS, Guard.DISPATCH
    ),
    "call": _signed(
        (
            {"prog": ident, "op": ident, "act": ident, "args": byte_string},
            {"placement_generation": uint, "expected_epoch": uint, **TRACE},
        ),
        _call,
        Uses.ATTEMPTS,
        Guard.DISPATCH,
    ),
    "manual_take": _signed(
        ({"op": ident, "expected_attempt": uint}, {"expected_epoch": uint}),
        _manual_take,
        Uses.ATTEMPTS,
    ),
    "reconcile": _signed(
        ({"op": ident, "attempt": uint, "outcome": outcome}, {}), _reconcile, Uses.RECEIPTS
    ),
    "cancel": _write(_OP, lambda s, n, p: mgmt.cancel(n, p["op"])),
    "consume": _write(_OP, lambda s, n, p: mgmt.consume(n, p["op"])),
    "rebind": _write(
        ({"op": ident}, {"expected_epoch": uint}),
        lambda s, n, p: mgmt.rebind(n, p["op"], p.get("expected_epoch")),
    ),
    "check_receipts": _signed(NO_PARAMS, _check_receipts, Uses.RECEIPTS),
    "abort": _signed(({"op": ident, "attempt": uint}, {}), _abort, Uses.ABORTS),
    # unsigned: the daemon, execute and the reads (contract §4)
    "status": _introspect(_status, inline=True),
    "metrics": _introspect(_metrics),
    "list_workers": _introspect(_list_workers),
    "execute": Method(  # its token is void by then (token_void, shutdown)
        ({"token": byte_string}, TRACE),
        signed=False,
        handler=_execute,
        uses=Uses.ATTEMPTS,
        guard=Guard.DISPATCH,
        served_while_stopping=True,
    ),
    "get_neuron": _read(
        ({"neuron": neuron_id}, {}), lambda reads, p: reads.get_neuron(p["neuron"])
    ),
    "get_prog": _read(
        ({"neuron": neuron_id, "prog": ident}, {}),
        lambda reads, p: reads.get_prog(p["neuron"], p["prog"]),
    ),
    "get_operation": _read(
        ({"neuron": neuron_id, "op": ident}, {}),
        lambda reads, p: reads.get_operation(p["neuron"], p["op"]),
    ),
    "list_operations": _read(
        ({"neuron": neuron_id}, {"state": one_of(*OpState), "prog": ident, **PAGE}),
        lambda reads, p: reads.list_operations(
            p["neuron"], p.get("state"), p.get("prog"), *_page(p)
        ),
    ),
    "history": _read(
        ({"neuron": neuron_id, "op": ident}, PAGE),
        lambda reads, p: reads.history(p["neuron"], p["op"], *_page(p)),
    ),
    "list_attempts": _read(
        ({"state": one_of(*ATTEMPT_LIST_STATES)}, PAGE),
        lambda reads, p: reads.list_attempts(p["state"], *_page(p)),
    ),
}
