"""The daemon's life around its requests: signals, the watchdog, ``STATUS=``, the stop.

Each piece is given only the components it watches or stops; the daemon
(:mod:`~wardd.daemon.life.app`) starts them in its nurseries.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any

import structlog
import trio

from wardd.adapters import Adapter
from wardd.protocol import WarddError

from ..dispatch.queues import Job
from ..dispatch.router import Lifecycle
from ..dispatch.tokens import DispatchToken, Tokens
from ..dispatch.voids import Voids, shutdown_refusal
from ..dispatch.workers import WorkerPool
from ..observe.sd_notify import Notifier
from ..store.boots import mark_clean_stop
from ..store.encoding import now
from ..store.writer import Tx, Writer
from ..wire.server import Server
from .bridge import wait_future
from .recovery import Recovery
from .signals import STOP_SIGNALS, signal_name

__all__ = [
    "SignalWatch",
    "begin_stop",
    "busy_calls",
    "finish",
    "report_status",
    "shut_down",
    "void_shutdown",
    "watchdog",
]

log = structlog.get_logger("wardd")
STATUS_INTERVAL_S = 2.0  # how often STATUS= is refreshed (sent only when it changed)


class SignalWatch:
    """contract §3.6: the first stop signal starts the stop; another one
    during the grace ends the grace at once; the others are logged."""

    def __init__(self) -> None:
        self.stop = trio.Event()  # a stop signal, or a fail-stop
        self.grace_cut = trio.Event()  # a second stop signal

    async def watch(self, signals: AsyncIterator[int]) -> None:
        async for sig in signals:
            self.on_signal(sig)

    def on_signal(self, sig: int) -> None:
        name = signal_name(sig)
        if sig not in STOP_SIGNALS:
            log.warning("signal_ignored", signal=name)
        elif not self.stop.is_set():
            log.info("signal", signal=name, action="stop")
            self.stop.set()
        elif not self.grace_cut.is_set():
            log.warning("signal", signal=name, action="end_grace")
            self.grace_cut.set()
        else:
            log.info("signal", signal=name, action="none")


async def watchdog(
    notifier: Notifier, interval: float, writer: Writer, pool: WorkerPool, life: Lifecycle
) -> None:
    """``WATCHDOG=1`` every ``interval``, each only once the daemon proved alive.

    The event loop is alive if this task runs; the writer thread if a no-op
    unit sent through its queue comes back (so a writer stuck in a batch
    for longer than the interval withholds the pings, and systemd kills
    the daemon at the watchdog period); the workers if their threads run
    (a worker busy in a long act is alive: acts have their own timeouts).
    """
    withheld = False
    while True:
        probe = writer.submit(_noop)
        while not await wait_future(probe, timeout=interval):
            if not withheld:
                log.warning("watchdog_withheld", reason="writer", waited_s=interval)
                withheld = True
        workers_ok = life.stopping or pool.threads_alive()
        if probe.exception() is None and workers_ok:
            notifier.watchdog()
            withheld = False
        elif not withheld:
            why = "workers" if probe.exception() is None else "writer"
            log.warning("watchdog_withheld", reason=why, waited_s=0)
            withheld = True
        await trio.sleep(interval)


def _noop(tx: Tx) -> None:
    """The watchdog's probe unit: it writes nothing."""


async def report_status(
    notifier: Notifier, life: Lifecycle, writer: Writer, recovery: Recovery
) -> None:
    """``STATUS=`` for ``systemctl status``: recovering, serving with counts, stopping."""
    sent = None
    while True:
        if life.stopping:
            text = "stopping"
        elif not life.recovered.is_set():
            text = "recovering"
        else:
            unknown = writer.counters.figures.unknown_attempts  # no statement on the loop
            pending = recovery.pending
            text = f"serving, {unknown} unknown attempts, {pending} receipts pending"
        if text != sent:
            notifier.status(text)
            sent = text
        await trio.sleep(STATUS_INTERVAL_S)


async def begin_stop(
    accepting: trio.CancelScope,
    server: Server,
    life: Lifecycle,
    recovery: Recovery,
    pool: WorkerPool,
    tokens: Tokens,
    voids: Voids,
) -> None:
    """The stop's first steps (contract §3.6), once ``stopping`` is logged."""
    # in this order and before any await: stop accepting, refuse new writes,
    # claim no queued dispatch, and mark every unconsumed token void (its
    # execute waits for the void to be durable)
    accepting.cancel()
    # contract §4 [2.3]: a stop never waits for a decode
    server.stop_decoding()
    life.stop_begun.set()
    # a reconcile waiting for a receipt check is refused
    # (receipt_pending): the check will not finish now
    recovery.stop()
    queued = pool.begin_stop()
    live = tokens.void_all("shutdown")
    await void_shutdown(voids, queued, tokens, live)


async def void_shutdown(
    voids: Voids, queued: list[Job], tokens: Tokens, live: list[tuple[bytes, DispatchToken]]
) -> None:
    """Void, in one unit, the attempts of unclaimed dispatches and unused
    tokens (``shutdown``); answer only once that is durable. A void that
    cannot be written fail-stops (the next start marks them unknown)."""
    prepared = [d.prepared for d, _reply in queued]
    ids = [ref.attempt_id for ref in prepared if ref is not None]
    ids += [t.ref.attempt_id for _h, t in live]
    ok = await voids.void_shutdown(ids)
    tokens.voids_written(live, ok)
    for d, reply in queued:
        reply(None, shutdown_refusal(ok or d.prepared is None))


async def shut_down(
    pool: WorkerPool,
    writer: Writer,
    life: Lifecycle,
    adapters: Mapping[str, Adapter],
    grace_s: float,
    grace_cut: trio.Event,
) -> None:
    """contract §3.6: wait up to the grace for calls in progress, then kill
    `cli` process groups so no orphan can have its effect later."""
    finished = await _join_workers(pool, grace_s, grace_cut)
    # outcomes the workers submitted are answered once committed: a unit
    # queued behind them returns only after they are (the queue is FIFO).
    # Also through a fail-stop: the writer answers (refuses) this unit only
    # after the outcomes queued before it, lost or not, are answered
    try:
        await writer.run(_noop)
    except WarddError:
        pass
    if not finished:
        log.warning(
            "shutdown_grace_passed",
            busy=[{"op": s.busy.op, "attempt": s.busy.attempt} for s in pool.states if s.busy],
        )
    for adapter in adapters.values():
        adapter.kill_all()


async def _join_workers(pool: WorkerPool, grace_s: float, grace_cut: trio.Event) -> bool:
    """Wait for the workers up to the grace, or until a second stop
    signal ends it; True if every call in progress finished."""
    finished: bool | None = None

    async def join(scope: trio.CancelScope) -> None:
        nonlocal finished
        finished = await trio.to_thread.run_sync(
            pool.join, grace_s, abandon_on_cancel=True, limiter=trio.CapacityLimiter(1)
        )
        scope.cancel()

    async def cut(scope: trio.CancelScope) -> None:
        await grace_cut.wait()
        scope.cancel()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(join, nursery.cancel_scope)
        nursery.start_soon(cut, nursery.cancel_scope)
    if finished is None:  # ended by a second signal (the join thread is left behind)
        log.warning("shutdown_grace_ended", reason="second signal")
        finished = pool.end_grace()
    return finished


async def finish(
    writer: Writer, life: Lifecycle, boot: str, stoppers: Iterable[Callable[[], None] | None]
) -> bool:
    """After the last request: record a clean stop (unless a fail-stop),
    stop the threads; True if the stop was clean (recorded, and no fail-stop)."""
    clean = life.fatal is None and writer.fatal is None
    if clean:
        try:
            await writer.run(mark_clean_stop(boot, now()))
        except WarddError as err:
            log.error("stop_record_failed", error=err.message)
            clean = False  # the next start recovers this boot as an unclean one
    for stop in stoppers:
        if stop is not None:
            stop()
    clean = clean and writer.fatal is None  # a fail-stop marked meanwhile
    # contract §3.6: the owner lock stays held until the process is gone (a
    # call may still be in progress in it); the kernel drops it at exit
    log.info("stopped", boot=boot, clean=clean)
    return clean


def busy_calls(pool: WorkerPool) -> list[dict[str, Any]]:
    """The calls in progress, as the ``stopping`` event lists them."""
    return [
        {"neuron": b.neuron, "op": b.op, "attempt": b.attempt}
        for b in (st.busy for st in pool.states)
        if b is not None
    ]


async def check_acts(adapters: Mapping[str, Adapter]) -> None:
    """After ``READY=1``, in the background: each adapter's start-time check
    (``check_at_start() -> str | None``: the ``mcp`` adapter's look-up of its
    tool; the others have nothing to check) runs on a thread; a reason is
    logged at warning (``act_check_failed``), nothing else changes."""
    for tag, adapter in adapters.items():
        try:
            reason = await trio.to_thread.run_sync(adapter.check_at_start, abandon_on_cancel=True)
        except Exception as exc:  # noqa: BLE001 - a check never stops the daemon
            reason = f"the check raised {type(exc).__name__}"
        if reason is not None:
            log.warning("act_check_failed", act=tag, reason=reason)
