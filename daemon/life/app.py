"""The daemon: the composition root that builds the components and wires them.

A request's way: bytes → :mod:`wardd.protocol` → :mod:`~wardd.daemon.wire.server`
→ the router (:mod:`~wardd.daemon.dispatch.router`), which applies the request's
entry in the method table (:mod:`~wardd.daemon.dispatch.handlers`) → a writer unit
(:mod:`~wardd.daemon.dispatch.attempt_units`,
:mod:`~wardd.daemon.dispatch.management_units`) → for ``execute``/``invoke`` a
:class:`~wardd.daemon.dispatch.dispatches.Dispatch` to a worker
(:mod:`~wardd.daemon.dispatch.workers`) → the adapter → the outcome unit. Params
are checked first (``bad_request``), then the signature (contract §4), then a
unit decides. The life around the requests (signals, watchdog, ``STATUS=``, the
stop) is :mod:`~wardd.daemon.life.lifecycle`.
"""

from __future__ import annotations

import functools
import importlib.metadata
import math
import os
import secrets
import socket
import sqlite3
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import structlog
import trio

from wardd.adapters import Adapter, echo_adapter
from wardd.protocol import PROTOCOL_VERSION, canonical_digest

from ..config import Config
from ..core.records import BootContext
from ..dispatch.calls import Calls
from ..dispatch.descriptors import build_descriptors, device_id
from ..dispatch.dispatcher import Dispatcher, Settler
from ..dispatch.guard import GuardTable
from ..dispatch.handlers import METHODS
from ..dispatch.router import Authenticator, Lifecycle, Router
from ..dispatch.services import Aborts, Attempts, Introspection, Receipts, Services, Writes
from ..dispatch.tokens import Tokens
from ..dispatch.voids import Voids
from ..dispatch.workers import WorkerPool, worker_ids
from ..observe.metrics import Metrics, db_size, read_figures, writer_snapshot
from ..observe.metrics_http import MetricsServer
from ..observe.notify_hook import NotifyHook
from ..observe.sd_notify import Notifier, scrub_environment, watchdog_interval
from ..observe.tracers import make_tracer
from ..store.attempt_reads import AttemptReads
from ..store.boots import record_boot
from ..store.encoding import now
from ..store.prune import Pruner
from ..store.reads import Reads
from ..store.schema import SCHEMA_VERSION, migrate
from ..store.writer import Writer, connect, connect_reader
from ..wire.activation import listen_fds
from ..wire.server import Connection, Server, bind_unix
from . import lifecycle as life_
from .lock import OwnerLock
from .recovery import Recovery
from .signals import CAUGHT_SIGNALS, EarlySignals

__all__ = ["VERSION", "Daemon"]

log = structlog.get_logger("wardd")
VERSION = importlib.metadata.version("wardd")
EXIT_FAIL_STOP = 70


class Daemon:
    """One daemon for one ``Config``, built in one step: the constructor takes
    the owner lock, migrates the store, records this boot and builds every
    component in order, each given its collaborators and observers;
    :meth:`run` serves. It serves no request itself
    (:class:`~wardd.daemon.dispatch.router.Router`)."""

    def __init__(self, config: Config, early_signals: EarlySignals | None = None) -> None:
        self.config = config
        # signals caught before the event loop took them over (the CLI's)
        self.early_signals = early_signals
        self.boot = secrets.token_hex(16)
        self.version = VERSION
        self.started_at = now()
        self.t0 = time.monotonic()
        self.lock = OwnerLock(config.database)
        self.db_path = self.lock.database
        self.life = Lifecycle()
        self.signals = life_.SignalWatch()
        self.guards = GuardTable()
        self.adapters = build_adapters(config, self.boot)
        self.act_bounds: dict[str, int] = {tag: a.max_arg_bytes for tag, a in self.adapters.items()}
        self._db_size = SizeOnDisk(self.db_path)
        self._trio_token: trio.lowlevel.TrioToken | None = None  # the event loop's (run)
        self._background: trio.Nursery | None = None  # the connections' nursery (run)
        self.http: MetricsServer | None = None  # ``metrics_listen``'s server (run)
        self.lock.acquire()  # before the store is opened (contract §3.6)
        wconn, self.schema_from, self.previous_boot = open_store(
            self.db_path, self.boot, self.started_at
        )
        self.metrics, self.hook = observers(config, self.boot, self.previous_boot)
        self.writer = Writer(wconn, self._on_fatal, on_batch=self.metrics.batch)
        self.writer.counters.seed(wconn)  # status's counts (store/counters.py)
        rconn = connect_reader(self.db_path)  # the reads' and the daemon's own, on the loop
        self.reads = Reads(rconn, config.max_frame)
        attempts = AttemptReads(rconn)
        self.voids = Voids(self.writer)
        self.tokens = Tokens(
            ttl_s=config.token_ttl_s, void=self.voids.void, attempt_state=attempts.attempt_state
        )
        self.device = device_id(self.db_path)
        self.descriptors, self.digests, self.ctx = describe(
            config, self.device, self.boot, self.act_bounds
        )
        # nothing of OpenTelemetry is imported unless [tracing] asks for it
        self.tracer = make_tracer(config.tracing, VERSION)
        self.settler, self.pool, self.dispatcher = self._dispatch()
        self.recovery = Recovery(
            self.writer,
            attempts,
            self.adapters,
            self.boot,
            on_receipt=self.metrics.receipt,
            notify=self.hook.post,
            tracer=self.tracer,
        )
        self.auth = Authenticator(config.network, self.reads.neuron_exists)
        self.router = self._router()
        self.pruner = Pruner(
            self.writer,
            self.db_path,
            retention_s=config.retention_s,
            interval_s=config.prune_interval_s,
            stopping=lambda: self.life.stopping or self.writer.fatal is not None,
        )
        self.server = self._server()

    # -- composition ------------------------------------------------------------------

    def _dispatch(self) -> tuple[Settler, WorkerPool, Dispatcher]:
        """The way of a dispatch: the settler (the way back, told of each
        recorded outcome), the workers, the dispatcher (the way there)."""
        calls = Calls()
        settler = Settler(calls, worker_ids(self.config.workers), notify=self.hook.post)
        pool = WorkerPool(
            self.config.workers,
            guards=self.guards,
            writer=self.writer,
            adapters=self.adapters,
            ctx=self.ctx,
            calls=calls,
            on_recorded=settler.recorded,
            on_act=self.metrics.act_call,
            stopping=self.life.stop_begun,
            tracer=self.tracer,
        )
        dispatcher = Dispatcher(
            pool, self.voids, on_dispatch=self.metrics.dispatching, tracer=self.tracer
        )
        return settler, pool, dispatcher

    def _router(self) -> Router:
        """The router, and each group of handlers' value (``services``)."""
        services = Services(
            writes=Writes(self.writer, self.ctx, self.descriptors, self.auth.registered.add),
            attempts=Attempts(
                self.writer,
                self.reads,
                self.ctx,
                self.pool,
                self.tokens,
                self.voids,
                stopping=self.life.stop_begun,
            ),
            aborts=Aborts(self.reads, self.adapters, self.pool, self.dispatcher),
            receipts=Receipts(self.writer, self.recovery),
            reads=self.reads,
            daemon=Introspection(self.descriptors, self.digests, self.status, self._metrics_text),
        )
        return Router(
            services,
            life=self.life,
            auth=self.auth,
            guards=self.guards,
            writer=self.writer,
            dispatcher=self.dispatcher,
        )

    def _server(self) -> Server:
        """The socket server (it listens once :meth:`run` hands it the listener)."""
        return Server(
            handle=self.metrics.counting(self.router.handle),
            hello=functools.partial(hello, self.config, self.boot),
            allowed_uids={os.getuid(), *self.config.allowed_uids},
            max_frame=self.config.max_frame,
            max_connections=self.config.max_connections,
            max_in_flight=self.config.max_in_flight,
            on_close=self._connection_closed,
            inline=frozenset(name for name, m in METHODS.items() if m.inline),
        )

    def _on_fatal(self, why: str) -> None:
        # Called on the writer thread: contract §3.2.3 fail-stop.
        self.life.fatal = why
        log.critical("fail_stop", reason=why)
        assert self._trio_token is not None  # the writer thread starts in run
        self._trio_token.run_sync_soon(self.signals.stop.set)

    # -- running ----------------------------------------------------------------------

    async def run(self) -> int:
        """Serve until a stop signal (0) or a fail-stop (non-zero).

        The owner lock is never released here: the process holds it until
        it is gone (contract §3.6), even when a call is still running in it."""
        self._trio_token = trio.lowlevel.current_trio_token()
        notifier = Notifier.from_env()
        wd = watchdog_interval(os.environ)
        lsock = listener_socket(self.config)  # reads LISTEN_FDS before the scrub
        scrub_environment(os.environ)  # no child ever inherits NOTIFY_SOCKET or LISTEN_*
        self._start_threads()
        self._start_server()
        with trio.open_signal_receiver(*CAUGHT_SIGNALS) as signals:
            # signals that came before the receiver took over (during start-up)
            for sig in self.early_signals.take() if self.early_signals else []:
                self.signals.on_signal(sig)
            # connections outlive requests, so that replies computed during the
            # shutdown still find their connection open
            async with trio.open_nursery() as conns:
                self._background = conns
                self._start_watchers(conns, notifier, wd, signals)
                async with trio.open_nursery() as requests:
                    listener = trio.socket.from_stdlib_socket(lsock)
                    await self._serve(notifier, listener, requests, conns)
                    lsock.close()
                    await life_.shut_down(
                        self.pool,
                        self.writer,
                        self.life,
                        self.adapters,
                        self.config.shutdown_grace_s,
                        self.signals.grace_cut,
                    )
                    # past the grace: calls still running are left claimed (unknown
                    # at the next start); their callers get no answer
                    self.dispatcher.unshield()
                    requests.cancel_scope.cancel()
                # every request has answered (replies are shielded, bounded)
                conns.cancel_scope.cancel()
        stoppers = (
            self.http.stop if self.http else None,
            self.writer.stop,
            self.hook.stop,
            self.tracer.shutdown,
        )
        clean = await life_.finish(self.writer, self.life, self.boot, stoppers)
        return 0 if clean else EXIT_FAIL_STOP

    def _start_threads(self) -> None:
        self.writer.start()
        self.pool.start()
        self.hook.start()
        prev = self.previous_boot
        if prev is not None and not prev["clean"]:
            self.hook.post("previous_boot_unclean", evidence={"previous_boot": prev["boot"]})

    def _start_server(self) -> None:
        if self.config.metrics_listen is not None:
            host, port = self.config.metrics_listen
            self.http = serve_metrics(
                host, port, self.db_path, self.config.max_frame, self._metrics_page
            )
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

    def _start_watchers(
        self, conns: trio.Nursery, notifier: Notifier, wd: float | None, signals: Any
    ) -> None:
        if wd:  # kept alive through the shutdown grace
            conns.start_soon(life_.watchdog, notifier, wd, self.writer, self.pool, self.life)
        # watched through the grace: a second stop signal ends it
        conns.start_soon(self.signals.watch, signals)
        if notifier.enabled:
            conns.start_soon(life_.report_status, notifier, self.life, self.writer, self.recovery)

    async def _serve(
        self,
        notifier: Notifier,
        listener: trio.socket.SocketType,
        requests: trio.Nursery,
        conns: trio.Nursery,
    ) -> None:
        """Recover, serve until a stop, then begin the stop (contract §3.6)."""
        async with trio.open_nursery() as services:
            accepting = trio.CancelScope()
            services.start_soon(within, accepting, self.server.serve, listener, requests, conns)
            services.start_soon(self.tokens.run)
            await self.recovery.at_start(services)
            self.life.recovered.set()
            services.start_soon(self.recovery.background_receipts)
            services.start_soon(self.pruner.run)  # contract §3.9
            services.start_soon(life_.check_acts, self.adapters)
            notifier.ready()
            log.info("ready", boot=self.boot)
            await self.signals.stop.wait()
            notifier.stopping()
            log.info(
                "stopping",
                boot=self.boot,
                reason=self.life.fatal or "signal",
                busy=life_.busy_calls(self.pool),  # the grace waits for these; a 2nd signal ends it
                grace_s=self.config.shutdown_grace_s,
            )
            await life_.begin_stop(
                accepting, self.server, self.life, self.recovery, self.pool, self.tokens, self.voids
            )
            services.cancel_scope.cancel()

    def _connection_closed(self, conn: Connection) -> None:
        refs = self.tokens.drop_connection(conn.id)
        if refs and self._background is not None:
            for ref in refs:
                self._background.start_soon(self.voids.void, ref.attempt_id, "token_dropped")

    # -- what the daemon answers itself ---------------------------------------------------

    def status(self) -> dict[str, Any]:
        """``status``: the daemon's own figures and each component's snapshot."""
        return {
            "version": self.version,
            "protocol": PROTOCOL_VERSION,
            "boot": self.boot,
            "started_at": self.started_at,
            "uptime": round(time.monotonic() - self.t0, 3),
            "network": self.config.network,
            **merged_status(
                self.writer.counters.figures.wire(),  # kept by the writer: no statement
                self.db_path,
                self._db_size(),  # the size: at most a second old
                workers=self.pool.snapshot(),
                counts=self.settler.counts(),
                digests=self.digests,
                recovery=self.recovery.snapshot(),
                previous_boot=self.previous_boot,
                writer=writer_snapshot(self.writer.backlog, self.writer.stats),
                server=self.server.snapshot(),
            ),
            "tokens": len(self.tokens),
            "recovering": not self.life.recovered.is_set(),
        }

    def _metrics_text(self) -> str:
        return self._metrics_page(self.reads)

    def _metrics_page(self, reads: Reads) -> str:
        conns = len(self.server.connections)
        return self.metrics.render(read_figures(reads.metrics_figures, self.db_path, conns))


class SizeOnDisk:
    """``status.db.size``: the database file plus its WAL (``db_size``), read
    from the file system at most once every ``max_age_s``. Each ``stat``
    lets go of the GIL, and ``status`` runs on the event loop: under load,
    taking the GIL back behind a busy thread cost the two of them 2 ms at
    p99 (measured, about a third of ``status``'s own time at p50). A size at
    most a second old is still the size (it moves with every commit)."""

    def __init__(self, database: Path, max_age_s: float = 1.0) -> None:
        self._database = database
        self._max_age_s = max_age_s
        self._size = 0
        self._at = -math.inf

    def __call__(self) -> int:
        t = time.monotonic()
        if t - self._at >= self._max_age_s:
            self._size, self._at = db_size(self._database), t
        return self._size


def hello(config: Config, boot: str) -> dict[str, Any]:
    """``hello``'s answer (contract §4): the same for the whole boot."""
    return {
        "protocol": PROTOCOL_VERSION,
        "daemon": f"wardd {VERSION}",
        "boot": boot,
        "network": config.network,
        "max_frame": config.max_frame,
    }


async def within(
    scope: trio.CancelScope, serve: Callable[..., Awaitable[None]], *args: Any
) -> None:
    """``serve(*args)`` inside ``scope`` (the stop cancels it: no more accepting)."""
    with scope:
        await serve(*args)


def open_store(
    db_path: Path, boot: str, started_at: str
) -> tuple[sqlite3.Connection, int, dict[str, Any] | None]:
    """The writer's connection to the migrated store, with this boot recorded;
    the schema version it was found at, and the previous boot's record."""
    wconn = connect(db_path)
    wconn.row_factory = sqlite3.Row
    schema_from, _ = migrate(wconn)
    previous_boot = record_boot(
        wconn, boot=boot, started_at=started_at, pid=os.getpid(), version=VERSION
    )
    return wconn, schema_from, previous_boot


def observers(
    config: Config, boot: str, previous_boot: dict[str, Any] | None
) -> tuple[Metrics, NotifyHook]:
    """What the writer, the workers, recovery and the settler tell: the
    metrics and the notify hook."""
    metrics = Metrics(
        boot=boot,
        version=VERSION,
        previous_boot_clean=previous_boot is None or previous_boot["clean"],
        methods=METHODS,
    )
    hook = NotifyHook(config.notify_argv, boot, timeout_s=config.notify_timeout_s)
    return metrics, hook


def build_adapters(config: Config, boot: str | None = None) -> dict[str, Adapter]:
    """Each configured act's adapter, built once from the settings its table was
    validated into, and ``echo``'s (always present); ``boot`` goes to the
    adapters whose processes outlive a call (``mcp``'s servers)."""
    adapters: dict[str, Adapter] = {"echo": echo_adapter()}
    for act in config.acts:
        adapters[act.tag] = act.settings.build(boot)
    return adapters


def describe(
    config: Config, device: str, boot: str, act_bounds: dict[str, int]
) -> tuple[list[dict[str, Any]], list[str], BootContext]:
    """The workers' descriptors (as ``list_workers`` shows them), their
    digests, and the boot's context the units decide in."""
    descriptors = build_descriptors(
        workers=config.workers,
        network=config.network,
        version=VERSION,
        device=device,
        boot=boot,
        act_bounds=act_bounds,
    )
    digests = [canonical_digest(d) for d in descriptors]
    ctx = BootContext(
        boot=boot,
        network=config.network,
        advertised=dict(zip(digests, descriptors, strict=True)),
        act_bounds=act_bounds,
    )
    return descriptors, digests, ctx


def merged_status(
    figures: tuple[dict[str, Any], int, dict[str, Any]],
    db_path: Path,
    size: int,
    *,
    workers: list[dict[str, Any]],
    counts: dict[str, dict[str, int]],
    digests: list[str],
    recovery: dict[str, Any],
    previous_boot: Any,
    writer: dict[str, Any],
    server: dict[str, Any],
) -> dict[str, Any]:
    """``status``'s middle, in its wire order: the store's figures and the
    components' snapshots (each worker gets its descriptor's digest)."""
    ops, unknown, retention = figures
    return {
        "db": {
            "path": str(db_path),
            "schema_version": SCHEMA_VERSION,
            "size": size,
            **retention,  # pruned_ops, last_pruned_at (contract §3.9)
        },
        "workers": [
            {"id": w["id"], "digest": digest, "busy_op": w["busy_op"], "counts": counts[w["id"]]}
            for w, digest in zip(workers, digests, strict=True)
        ],
        "operations": ops,
        "unknown_attempts": unknown,
        "receipts_pending": recovery["receipts_pending"],
        "previous_boot": previous_boot,
        "recovery": recovery["recovery"],
        "writer": writer,
        **server,  # connections
    }


def listener_socket(config: Config) -> socket.socket:
    """The socket systemd passed (socket activation), or the configured one."""
    fds = listen_fds()
    if fds:
        return fds[0]
    path = config.socket
    if config.socket_is_default:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(path.parent, 0o700)
    return bind_unix(str(path))


def serve_metrics(
    host: str, port: int, db_path: Path, max_frame: int, page: Callable[[Reads], str]
) -> MetricsServer:
    """``metrics_listen``: GET /metrics on threads of its own, its figures
    read through a reader connection of its own (``_metrics_http``)."""
    reads = Reads(connect_reader(db_path), max_frame)
    http = MetricsServer(host, port, lambda: page(reads))
    http.start()
    shown = f"[{host}]" if ":" in host else host
    log.info("metrics_listening", address=f"{shown}:{http.port}")
    return http
