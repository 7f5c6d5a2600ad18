"""The daemon: wiring of store, writer, guards, workers, tokens and server.

A request's way: bytes → :mod:`wardd.protocol` → :mod:`.server` →
:meth:`Daemon.handle`, a lookup in the method table (:mod:`.handlers`) → a
writer unit (:mod:`._units`, :mod:`._units_mgmt`) → for ``execute``/``invoke``
the worker (:mod:`.workers`) → the adapter → the outcome unit. Params are
checked first (``bad_request``), then the signature (contract §4), then a
unit decides.
"""

from __future__ import annotations

import importlib.metadata
import os
import secrets
import socket
import sqlite3
import time
from typing import Any

import structlog
import trio

from wardd.adapters import Adapter, build_adapter, echo_adapter
from wardd.protocol import (
    PROTOCOL_VERSION,
    Internal,
    Overloaded,
    Request,
    Unauthenticated,
    UnknownMethod,
    UnknownNeuron,
    WarddError,
    WrongNetwork,
    canonical_digest,
    verify,
)

from . import _units
from ._activation import listen_fds
from ._bridge import ThreadReply, wait_future
from ._hook import NotifyHook
from ._lock import OwnerLock
from ._metrics import Metrics, read_figures
from ._metrics_http import MetricsServer
from ._notify import Notifier, scrub_environment, watchdog_interval
from ._params import check_params
from ._records import now
from ._signals import CAUGHT_SIGNALS, STOP_SIGNALS, EarlySignals, signal_name
from .config import Config
from .descriptors import build_descriptors, device_id
from .guard import GuardTable
from .handlers import METHODS
from .recovery import Recovery
from .server import Connection, Server, bind_unix
from .store.boots import mark_clean_stop, record_boot
from .store.prune import Pruner
from .store.reads import Reads
from .store.schema import SCHEMA_VERSION, migrate
from .store.writer import Writer, connect, connect_reader
from .tokens import DispatchToken, Tokens
from .workers import Dispatch, WorkerPool

__all__ = ["Daemon", "VERSION"]

log = structlog.get_logger("wardd")
VERSION = importlib.metadata.version("wardd")
EXIT_FAIL_STOP = 70
STATUS_INTERVAL_S = 2.0  # how often STATUS= is refreshed (sent only when it changed)


class Daemon:
    reads: Reads  # set by open_store

    def __init__(self, config: Config) -> None:
        self.config = config
        self.boot = secrets.token_hex(16)
        self.version = VERSION
        self.started_at = now()
        self.t0 = time.monotonic()
        self.lock = OwnerLock(config.database)
        self.db_path = self.lock.database
        self.guards = GuardTable()
        self.tokens = Tokens(
            ttl_s=config.token_ttl_s,
            void=self.void,
            attempt_state=lambda attempt_id: self.reads.attempt_state(attempt_id),
        )
        self.recovered = trio.Event()
        # neurons known to be registered: added after a read that found one, or
        # once a register_neuron has committed; never removed (nor are neurons)
        self.registered: set[str] = set()
        self._dispatch_scopes: set[trio.CancelScope] = set()
        self.stopping = False
        self._background: trio.Nursery | None = None
        self.fatal: str | None = None
        # signals caught before the event loop took them over (set by the CLI)
        self.early_signals: EarlySignals | None = None
        self.adapters: dict[str, Adapter] = {"echo": echo_adapter()}
        for act in config.acts:
            self.adapters[act.tag] = build_adapter(act.tag, act.table, max_frame=config.max_frame)
        self.act_bounds: dict[str, int] = {tag: a.max_arg_bytes for tag, a in self.adapters.items()}

    # -- start-up -----------------------------------------------------------------

    def open_store(self) -> None:
        """Take the owner lock, migrate, record this boot (before serving)."""
        self.lock.acquire()
        wconn = connect(self.db_path)
        wconn.row_factory = sqlite3.Row
        self.schema_from, _ = migrate(wconn)
        self.previous_boot = record_boot(
            wconn, boot=self.boot, started_at=self.started_at, pid=os.getpid(), version=VERSION
        )
        self.writer = Writer(wconn, self._on_fatal)
        self.reads = Reads(connect_reader(self.db_path), self.config.max_frame)
        self.device = device_id(self.db_path)
        self.descriptors = build_descriptors(
            workers=self.config.workers,
            network=self.config.network,
            version=VERSION,
            device=self.device,
            boot=self.boot,
            act_bounds=self.act_bounds,
        )
        self.digests = [canonical_digest(d) for d in self.descriptors]
        self.ctx = _units.BootContext(
            boot=self.boot,
            network=self.config.network,
            advertised=dict(zip(self.digests, self.descriptors, strict=True)),
            act_bounds=self.act_bounds,
        )
        self.pool = WorkerPool(
            self.config.workers,
            guards=self.guards,
            writer=self.writer,
            adapters=self.adapters,
            boot=self.boot,
        )
        self.recovery = Recovery(self.writer, self.reads, self.adapters, self.boot)
        prev = self.previous_boot
        self.metrics = Metrics(
            boot=self.boot,
            version=VERSION,
            previous_boot_clean=prev is None or prev["clean"],
            methods=METHODS,
        )
        self.writer.on_batch = self.metrics.batch
        self.pool.on_act = self.metrics.act_call
        self.recovery.on_receipt = self.metrics.receipt
        self.http: MetricsServer | None = None
        self.hook = NotifyHook(
            self.config.notify_argv, self.boot, timeout_s=self.config.notify_timeout_s
        )
        self.pool.notify = self.recovery.notify = self.hook.post
        self.pruner = Pruner(
            self.writer,
            self.db_path,
            retention_s=self.config.retention_s,
            interval_s=self.config.prune_interval_s,
            stopping=lambda: self.stopping or self.writer.fatal is not None,
        )

    def _on_fatal(self, why: str) -> None:
        # Called on the writer thread: contract §3.2.3 fail-stop.
        self.fatal = why
        log.critical("fail_stop", reason=why)
        self._trio_token.run_sync_soon(self._stop_event.set)

    def _listener(self) -> socket.socket:
        fds = listen_fds()
        if fds:
            return fds[0]
        path = self.config.socket
        if self.config.socket_is_default:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            os.chmod(path.parent, 0o700)
        return bind_unix(str(path))

    async def run(self) -> int:
        """Serve until a stop signal (0) or a fail-stop (non-zero).

        The owner lock is never released here: the process holds it until
        it is gone (contract §3.6), even when a call is still running in it."""
        self._trio_token = trio.lowlevel.current_trio_token()
        self._stop_event = trio.Event()
        self._grace_cut = trio.Event()
        notifier = Notifier.from_env()
        wd = watchdog_interval(os.environ)
        lsock = self._listener()  # reads LISTEN_FDS before the scrub
        scrub_environment(os.environ)  # no child ever inherits NOTIFY_SOCKET or LISTEN_*
        self.writer.start()
        self.pool.start()
        self.hook.start()
        if self.previous_boot is not None and not self.previous_boot["clean"]:
            self.hook.post(
                "previous_boot_unclean", evidence={"previous_boot": self.previous_boot["boot"]}
            )
        listener = trio.socket.from_stdlib_socket(lsock)
        uids = {os.getuid(), *self.config.allowed_uids}
        self.server = Server(
            handle=self.metrics.counting(self.handle),
            hello=self._hello,
            allowed_uids=uids,
            max_frame=self.config.max_frame,
            max_connections=self.config.max_connections,
            max_in_flight=self.config.max_in_flight,
            on_close=self._connection_closed,
        )
        if self.config.metrics_listen is not None:
            self._serve_metrics(*self.config.metrics_listen)
        log.info(
            "starting",
            boot=self.boot,
            version=VERSION,
            network=self.config.network,
            socket=str(self.config.socket),
            database=str(self.db_path),
            workers=self.config.workers,
            schema_from=self.schema_from,
            schema=SCHEMA_VERSION,
        )
        with trio.open_signal_receiver(*CAUGHT_SIGNALS) as signals:
            # signals that came before the receiver took over (during start-up)
            for sig in self.early_signals.take() if self.early_signals else []:
                self._on_signal(sig)
            # connections outlive requests, so that replies computed during the
            # shutdown still find their connection open
            async with trio.open_nursery() as conns:
                self._background = conns
                if wd:  # kept alive through the shutdown grace
                    conns.start_soon(self._watchdog, notifier, wd)
                # watched through the grace: a second stop signal ends it
                conns.start_soon(self._watch_signals, signals)
                if notifier.enabled:
                    conns.start_soon(self._report_status, notifier)
                async with trio.open_nursery() as requests:
                    async with trio.open_nursery() as services:
                        accepting = trio.CancelScope()
                        services.start_soon(self._accept, accepting, listener, requests, conns)
                        services.start_soon(self.tokens.run)
                        await self.recovery.at_start(services)
                        self.recovered.set()
                        services.start_soon(self.recovery.background_receipts)
                        services.start_soon(self.pruner.run)  # contract §3.9
                        notifier.ready()
                        log.info("ready", boot=self.boot)
                        await self._stop_event.wait()
                        notifier.stopping()
                        busy = [
                            {"neuron": b.neuron, "op": b.op, "attempt": b.attempt}
                            for b in (st.busy for st in self.pool.states)
                            if b is not None
                        ]
                        log.info(
                            "stopping",
                            boot=self.boot,
                            reason=self.fatal or "signal",
                            busy=busy,  # the grace waits for these calls; a 2nd signal ends it
                            grace_s=self.config.shutdown_grace_s,
                        )
                        # contract §3.6, in this order and before any await: stop
                        # accepting, refuse new writes, claim no queued dispatch,
                        # and mark every unconsumed token void (its execute waits
                        # for the void to be durable)
                        accepting.cancel()
                        # contract §4 [2.3]: a stop never waits for a decode
                        self.server.stop_decoding()
                        self.stopping = True
                        # a reconcile waiting for a receipt check is refused
                        # (receipt_pending): the check will not finish now
                        self.recovery.stop()
                        queued = self.pool.begin_stop()
                        tokens = self.tokens.void_all("shutdown")
                        await self._void_shutdown(queued, tokens)
                        services.cancel_scope.cancel()
                    lsock.close()
                    await self._shutdown()
                    # past the grace: calls still running are left claimed (unknown
                    # at the next start); their callers get no answer
                    for scope in list(self._dispatch_scopes):
                        scope.shield = False
                    requests.cancel_scope.cancel()
                # every request has answered (replies are shielded, bounded)
                conns.cancel_scope.cancel()
        if self.fatal is None:
            await self._mark_clean_stop()
        if self.http is not None:
            self.http.stop()
        self.writer.stop()
        self.hook.stop()
        # contract §3.6: the owner lock stays held until the process is gone (a
        # call may still be in progress in it); the kernel drops it at exit
        log.info("stopped", boot=self.boot, clean=self.fatal is None)
        return 0 if self.fatal is None else EXIT_FAIL_STOP

    def _serve_metrics(self, host: str, port: int) -> None:
        """``metrics_listen``: GET /metrics on threads of its own, its figures
        read through a reader connection of its own (``_metrics_http``)."""
        reads = Reads(connect_reader(self.db_path), self.config.max_frame)

        def render() -> str:
            conns = len(self.server.connections)
            return self.metrics.render(read_figures(reads.metrics_figures, self.db_path, conns))

        self.http = MetricsServer(host, port, render)
        self.http.start()
        shown = f"[{host}]" if ":" in host else host
        log.info("metrics_listening", address=f"{shown}:{self.http.port}")

    async def _accept(self, scope: trio.CancelScope, *args: Any) -> None:
        with scope:
            await self.server.serve(*args)

    async def _void_shutdown(
        self, queued: list[Dispatch], tokens: list[tuple[bytes, DispatchToken]]
    ) -> None:
        """Void, in one unit, the attempts of unclaimed dispatches and unused
        tokens (``shutdown``); answer only once that is durable. A void that
        cannot be written fail-stops (the next start marks them unknown)."""
        ids = [d.ref.attempt_id for d in queued if d.ref is not None]
        ids += [t.ref.attempt_id for _h, t in tokens]
        ok = True
        if ids:
            try:
                await self.writer.run(_units.void_many(ids, "shutdown"), critical=True)
            except WarddError as err:
                log.error("void_failed", reason="shutdown", error=err.message)
                ok = False
        self.tokens.voids_written(tokens, ok)
        for d in queued:
            if ok or d.ref is None:
                d.reply(None, _units.shutdown_void())
            else:
                d.reply(None, Internal("the attempt could not be voided"))

    async def _watch_signals(self, signals: Any) -> None:
        async for sig in signals:
            self._on_signal(sig)

    def _on_signal(self, sig: int) -> None:
        """contract §3.6: the first stop signal starts the stop; another one
        during the grace ends the grace at once; the others are logged."""
        name = signal_name(sig)
        if sig not in STOP_SIGNALS:
            log.warning("signal_ignored", signal=name)
        elif not self._stop_event.is_set():
            log.info("signal", signal=name, action="stop")
            self._stop_event.set()
        elif not self._grace_cut.is_set():
            log.warning("signal", signal=name, action="end_grace")
            self._grace_cut.set()
        else:
            log.info("signal", signal=name, action="none")

    async def _watchdog(self, notifier: Notifier, interval: float) -> None:
        """``WATCHDOG=1`` every ``interval``, each only once the daemon proved alive.

        The event loop is alive if this task runs; the writer thread if a no-op
        unit sent through its queue comes back (so a writer stuck in a batch
        for longer than the interval withholds the pings, and systemd kills
        the daemon at the watchdog period); the workers if their threads run
        (a worker busy in a long act is alive: acts have their own timeouts).
        """
        withheld = False
        while True:
            probe = self.writer.submit(_noop)
            while not await wait_future(probe, timeout=interval):
                if not withheld:
                    log.warning("watchdog_withheld", reason="writer", waited_s=interval)
                    withheld = True
            workers_ok = self.stopping or self.pool.threads_alive()
            if probe.exception() is None and workers_ok:
                notifier.watchdog()
                withheld = False
            elif not withheld:
                why = "workers" if probe.exception() is None else "writer"
                log.warning("watchdog_withheld", reason=why, waited_s=0)
                withheld = True
            await trio.sleep(interval)

    async def _report_status(self, notifier: Notifier) -> None:
        """``STATUS=`` for ``systemctl status``: recovering, serving with counts, stopping."""
        sent = None
        while True:
            if self.stopping:
                text = "stopping"
            elif not self.recovered.is_set():
                text = "recovering"
            else:
                _, unknown = self.reads.counts()
                pending = self.recovery.pending
                text = f"serving, {unknown} unknown attempts, {pending} receipts pending"
            if text != sent:
                notifier.status(text)
                sent = text
            await trio.sleep(STATUS_INTERVAL_S)

    async def _shutdown(self) -> None:
        """contract §3.6: wait up to the grace for calls in progress, then kill
        `cli` process groups so no orphan can have its effect later."""
        finished = await self._join_workers()
        # outcomes the workers submitted are answered once committed: a unit
        # queued behind them returns only after they are (the queue is FIFO)
        if self.fatal is None:
            try:
                await self.writer.run(lambda conn: None)
            except WarddError:
                pass
        if not finished:
            log.warning(
                "shutdown_grace_passed",
                busy=[
                    {"op": s.busy.op, "attempt": s.busy.attempt} for s in self.pool.states if s.busy
                ],
            )
        for adapter in self.adapters.values():
            kill = getattr(adapter, "kill_all", None)
            if callable(kill):
                kill()

    async def _join_workers(self) -> bool:
        """Wait for the workers up to the grace, or until a second stop
        signal ends it; True if every call in progress finished."""
        finished: bool | None = None

        async def join(scope: trio.CancelScope) -> None:
            nonlocal finished
            finished = await trio.to_thread.run_sync(
                self.pool.join,
                self.config.shutdown_grace_s,
                abandon_on_cancel=True,
                limiter=trio.CapacityLimiter(1),
            )
            scope.cancel()

        async def cut(scope: trio.CancelScope) -> None:
            await self._grace_cut.wait()
            scope.cancel()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(join, nursery.cancel_scope)
            nursery.start_soon(cut, nursery.cancel_scope)
        if finished is None:  # ended by a second signal (the join thread is left behind)
            log.warning("shutdown_grace_ended", reason="second signal")
            finished = self.pool.end_grace()
        return finished

    async def _mark_clean_stop(self) -> None:
        try:
            await self.writer.run(mark_clean_stop(self.boot, now()))
        except WarddError as err:
            log.error("stop_record_failed", error=err.message)

    # -- tokens ---------------------------------------------------------------------

    async def void(self, attempt_id: int, reason: str) -> bool:
        """Durably void a prepared attempt; False if the write failed.

        contract §3.6: a void the daemon must write is critical: if it
        cannot be written the daemon fail-stops, so that the next start
        marks the attempt unknown and no op stays blocked by a prepared
        attempt whose token can no longer be used."""
        try:
            await self.writer.run(_units.void(attempt_id, reason), critical=True)
        except WarddError as err:
            log.error("void_failed", reason=reason, error=err.message)
            self.writer.fail_stop(f"a void ({reason}) could not be written")
            return False
        return True

    async def _refuse_dispatch(self, d: Dispatch) -> None:
        """An accepted dispatch that will never be claimed (shutdown)."""
        if d.ref is not None and not await self.void(d.ref.attempt_id, "shutdown"):
            d.reply(None, Internal("the attempt could not be voided"))
            return
        d.reply(None, _units.shutdown_void())

    def _connection_closed(self, conn: Connection) -> None:
        refs = self.tokens.drop_connection(conn.id)
        if refs and self._background is not None:
            for ref in refs:
                self._background.start_soon(self.void, ref.attempt_id, "token_dropped")

    # -- dispatch -------------------------------------------------------------------

    def _hello(self) -> dict[str, Any]:
        return {
            "protocol": PROTOCOL_VERSION,
            "daemon": f"wardd {VERSION}",
            "boot": self.boot,
            "network": self.config.network,
            "max_frame": self.config.max_frame,
        }

    async def handle(self, conn: Connection, req: Request) -> Any:
        """Serve one request by its entry in the method table (:mod:`.handlers`):
        params (``bad_request``), then for a signed method network, signature
        and registration (contract §4), then recovery, then the handler."""
        method, params = req.method, req.params
        entry = METHODS.get(method)
        if self.stopping and (entry is None or not entry.served_while_stopping):
            raise Overloaded("the daemon is shutting down", {"reason": "shutdown"})
        if entry is None:
            if method == "hello":
                raise UnknownMethod("hello was already done on this connection")
            raise UnknownMethod(f"no method {method!r}")
        check_params(entry.params, params, signed=entry.signed)
        neuron = self._authenticate(method, params) if entry.signed else None
        if entry.waits_for_recovery and not self.recovered.is_set():
            await self.recovered.wait()  # (a set Event's wait is still a schedule point)
        return await entry.handler(self, conn, neuron, params)

    def _authenticate(self, method: str, params: dict[str, Any]) -> str:
        """contract §4: network, then signature against our network, then registration."""
        network = params.get("network")
        if network is not None and network != self.config.network:
            raise WrongNetwork(
                f"this daemon serves network {self.config.network!r}",
                {"network": self.config.network},
            )
        neuron = params["neuron"]
        if not verify(neuron, params["sig"], self.config.network, method, params):
            raise Unauthenticated("the signature does not verify")
        if method != "register_neuron" and neuron not in self.registered:
            # neurons are never deleted: a yes is kept, a no is read again
            if not self.reads.neuron_exists(neuron):
                raise UnknownNeuron("neuron is not registered")
            self.registered.add(neuron)
        return str(neuron)

    async def dispatch(self, worker: str, d: Dispatch) -> Any:
        d.reply = reply = ThreadReply()
        self.metrics.dispatching(d.act)
        if not self.pool.submit(worker, d):  # shutting down: never claimed
            await self._refuse_dispatch(d)
        return await self.wait_call(reply)

    async def wait_call(self, reply: ThreadReply) -> Any:
        """Wait for a call's answer, shielded: the effect does not depend on
        the caller; only the shutdown drops the shield once its grace has
        passed (a dispatch's outcome, or an abort's)."""
        with trio.CancelScope(shield=True) as scope:
            self._dispatch_scopes.add(scope)
            try:
                await reply.done.wait()
            finally:
                self._dispatch_scopes.discard(scope)
        return reply.result()


def _noop(conn: sqlite3.Connection) -> None:
    """The watchdog's probe unit: it writes nothing."""
