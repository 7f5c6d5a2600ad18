"""Prometheus metrics: the series, what counts them, and their text exposition.

The daemon counts with ``prometheus_client`` (its counters and histograms
are thread-safe, and its exposition writer is the format's reference): a
request's method and answer code (:meth:`Metrics.counting`, around
``Router.handle``), a dispatch's time from arrival to reply
(:meth:`Metrics.dispatching`), an adapter call's time (on the worker),
each committed writer batch with the attempt moves it committed
(:meth:`Metrics.batch`, on the writer), each receipt answer. Counters live
as long as the boot (Prometheus sees the reset). The gauges that come from
the database are read when the series are rendered, in one statement
(:meth:`~.store.reads.Reads.metrics_figures`).

Labels are bounded: an act tag (from the configuration), an outcome, a
method of the table, an error code, a receipt answer. Never a neuron, an
op or anything secret.

:data:`SERIES` is the table docs/operations.md shows (a test keeps both equal).
"""

from __future__ import annotations

import contextvars
import datetime
import os
import time
from collections.abc import Awaitable, Callable, Collection, Iterator
from typing import TYPE_CHECKING, Any, Final, TypeVar

import attrs
import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from wardd.protocol import WarddError

if TYPE_CHECKING:
    from ..store.writer import WriterStats

__all__ = ["CONTENT_TYPE", "SERIES", "Figures", "Metrics", "Series", "db_size", "read_figures"]

#: The exposition format served (Prometheus text format 0.0.4).
CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"


@attrs.frozen
class Series:
    """One series family: its name (with its labels as the docs write
    them), its kind and what it means."""

    name: str
    labels: tuple[str, ...]
    kind: str
    help: str

    @property
    def shown(self) -> str:
        return f"{self.name}{{{','.join(self.labels)}}}" if self.labels else self.name


SERIES: Final = (
    Series(
        "wardd_attempts_total",
        ("act", "outcome"),
        "counter",
        "attempts that reached an outcome this boot, by act and outcome (succeeded, failed,"
        " not_executed, unknown, voided), whatever recorded it: the adapter, a receipt, a"
        " reconcile, the start's marking",
    ),
    Series("wardd_unknown_attempts", (), "gauge", "attempts unknown now (from the database)"),
    Series(
        "wardd_oldest_unknown_age_seconds",
        (),
        "gauge",
        "age of the oldest unknown attempt, since it was created (0 when none)",
    ),
    Series(
        "wardd_receipts_total",
        ("answer",),
        "counter",
        "executor receipt answers recorded this boot, applied or kept as a hint",
    ),
    Series(
        "wardd_dispatch_duration_seconds",
        ("act",),
        "histogram",
        "an invoke, execute or call that reached a worker: from its arrival to its reply",
    ),
    Series("wardd_act_duration_seconds", ("act",), "histogram", "the adapter call alone"),
    Series(
        "wardd_commit_duration_seconds",
        (),
        "histogram",
        "a writer batch: its whole transaction, the commit's fsync included",
    ),
    Series("wardd_commit_batch_size", (), "histogram", "units per committed writer batch"),
    Series(
        "wardd_requests_total",
        ("method", "code"),
        "counter",
        "requests answered by method (other: a name no method has) and code (ok or the error code)",
    ),
    Series("wardd_connections", (), "gauge", "client connections open now"),
    Series(
        "wardd_pruned_ops_total",
        (),
        "counter",
        "ops pruned since the database was created (from the database)",
    ),
    Series("wardd_db_size_bytes", (), "gauge", "the database file and its WAL, in bytes"),
    Series("wardd_boot_info", ("boot", "version"), "gauge", "this boot and version; always 1"),
    Series(
        "wardd_previous_boot_clean",
        (),
        "gauge",
        "1 if the boot before this one stopped through its stop path (or there was none), else 0",
    ),
)
_BY_NAME: Final = {s.name: s for s in SERIES}

# a dispatch is a millisecond or two, an act anything from microseconds to minutes
_DURATION_BUCKETS: Final = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0, 300.0,
)  # fmt: skip
_COMMIT_BUCKETS: Final = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
)  # fmt: skip
_BATCH_BUCKETS: Final = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
# the attempt states that are an outcome, by the word the series uses
_OUTCOMES: Final = {
    "succeeded": "succeeded",
    "failed": "failed",
    "not_executed": "not_executed",
    "unknown": "unknown",
    "void": "voided",
}
_DISPATCHES: Final = frozenset({"invoke", "execute", "call"})
_dispatch_act: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "wardd_dispatch_act", default=None
)
R = TypeVar("R")


@attrs.frozen
class Figures:
    """The gauges read when the series are rendered."""

    unknown_attempts: int
    oldest_unknown_created_at: str | None  # RFC 3339, of the oldest unknown attempt
    pruned_ops: int
    db_size_bytes: int
    connections: int


def db_size(database: os.PathLike[str] | str) -> int:
    """The database file plus its WAL, in bytes (0 for a file missing)."""
    size = 0
    for suffix in ("", "-wal"):
        try:
            size += os.stat(os.fspath(database) + suffix).st_size
        except OSError:
            pass
    return size


def writer_snapshot(backlog: int, stats: WriterStats) -> dict[str, Any]:
    """The writer's part of ``status``: its backlog and batches."""
    batches = stats.batches
    return {
        "backlog": backlog,
        "batches": batches,
        "mean_batch": round(stats.units / batches, 2) if batches else 0,
        "max_batch": stats.max_batch,
    }


def read_figures(
    metrics_figures: Callable[[], tuple[int, str | None, int]],
    database: os.PathLike[str] | str,
    connections: int,
) -> Figures:
    """The gauges' figures: the database's (``Reads.metrics_figures``, one
    statement), its size on disk, and the connections open."""
    unknown, oldest, pruned = metrics_figures()
    return Figures(
        unknown_attempts=unknown,
        oldest_unknown_created_at=oldest,
        pruned_ops=pruned,
        db_size_bytes=db_size(database),
        connections=connections,
    )


def _age_s(created_at: str | None, now: float) -> float:
    if created_at is None:
        return 0.0
    created = datetime.datetime.fromisoformat(created_at).timestamp()
    return max(0.0, round(now - created, 3))


class Metrics:
    """This boot's counters and histograms, and the exposition of every series."""

    def __init__(
        self, *, boot: str, version: str, previous_boot_clean: bool, methods: Collection[str]
    ) -> None:
        prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = reg = CollectorRegistry(auto_describe=True)
        self._boot = boot
        self._version = version
        self._previous_clean = previous_boot_clean
        self._methods = frozenset(methods)

        def counter(name: str) -> Counter:
            s = _BY_NAME[name]
            return Counter(name, s.help, s.labels, registry=reg)

        def histogram(name: str, buckets: tuple[float, ...]) -> Histogram:
            s = _BY_NAME[name]
            return Histogram(name, s.help, s.labels, registry=reg, buckets=buckets)

        # the labelled children, looked up once: labels() costs more than inc()
        self._children: dict[tuple[Any, ...], Any] = {}
        self._attempts = counter("wardd_attempts_total")
        self._receipts = counter("wardd_receipts_total")
        self._requests = counter("wardd_requests_total")
        self._dispatch = histogram("wardd_dispatch_duration_seconds", _DURATION_BUCKETS)
        self._act = histogram("wardd_act_duration_seconds", _DURATION_BUCKETS)
        self._commit = histogram("wardd_commit_duration_seconds", _COMMIT_BUCKETS)
        self._batch = histogram("wardd_commit_batch_size", _BATCH_BUCKETS)

    # -- counting (one call per counted event) ---------------------------------------

    def _child(self, family: Counter | Histogram, *labels: str) -> Any:
        key = (id(family), *labels)
        child = self._children.get(key)
        if child is None:  # two threads may both get here: labels() gives both the same
            child = self._children[key] = family.labels(*labels)
        return child

    def counting(
        self, handle: Callable[[Any, Any], Awaitable[R]]
    ) -> Callable[[Any, Any], Awaitable[R]]:
        """``handle`` (the daemon's, taking a connection and a request), counting
        each request by method and answer code, and timing each dispatch."""

        async def counted(conn: Any, req: Any) -> R:
            method = req.method if req.method in self._methods else "other"
            t0 = time.perf_counter()
            code = "internal"  # anything but a WarddError is answered internal
            token = _dispatch_act.set(None) if method in _DISPATCHES else None
            try:
                result = await handle(conn, req)
                code = "ok"
                return result
            except WarddError as err:
                code = err.code
                raise
            finally:
                self._child(self._requests, method, code).inc()
                if token is not None:
                    act = _dispatch_act.get()
                    if act is not None:
                        self._child(self._dispatch, act).observe(time.perf_counter() - t0)
                    _dispatch_act.reset(token)

        return counted

    def dispatching(self, act: str) -> None:
        """The request being handled reached a worker with ``act``: its
        time to the reply is counted (``wardd_dispatch_duration_seconds``)."""
        _dispatch_act.set(act)

    def act_call(self, act: str, seconds: float) -> None:
        """An adapter call took ``seconds`` (on its worker's thread)."""
        self._child(self._act, act).observe(seconds)

    def batch(self, seconds: float, units: int, moves: list[tuple[str, str]]) -> None:
        """A writer batch committed (on the writer's thread): its time, its
        size, and the attempt moves it made durable."""
        self._commit.observe(seconds)
        self._batch.observe(units)
        for act, state in moves:
            outcome = _OUTCOMES.get(state)
            if outcome is not None:
                self._child(self._attempts, act, outcome).inc()

    def receipt(self, answer: str) -> None:
        """A receipt's answer was recorded."""
        self._child(self._receipts, answer).inc()

    # -- the exposition ---------------------------------------------------------------

    def render(self, figures: Figures, now: float | None = None) -> str:
        """Every series in the text exposition format 0.0.4, in :data:`SERIES` order."""
        return prometheus_client.generate_latest(_View(self, figures, now)).decode()

    def _gauges(self, f: Figures, now: float) -> Iterator[Metric]:
        def gauge(name: str, value: float, labels: dict[str, str] | None = None) -> Metric:
            s = _BY_NAME[name]
            g = GaugeMetricFamily(name, s.help, labels=list(labels or ()))
            g.add_metric(list((labels or {}).values()), value)
            return g

        yield gauge("wardd_unknown_attempts", f.unknown_attempts)
        yield gauge("wardd_oldest_unknown_age_seconds", _age_s(f.oldest_unknown_created_at, now))
        yield gauge("wardd_connections", f.connections)
        pruned = _BY_NAME["wardd_pruned_ops_total"]
        yield CounterMetricFamily(pruned.name, pruned.help, value=f.pruned_ops)
        yield gauge("wardd_db_size_bytes", f.db_size_bytes)
        yield gauge("wardd_boot_info", 1, {"boot": self._boot, "version": self._version})
        yield gauge("wardd_previous_boot_clean", int(self._previous_clean))


class _View:
    """What one exposition collects: the boot's counters and the figures read for it."""

    def __init__(self, metrics: Metrics, figures: Figures, now: float | None) -> None:
        self._m = metrics
        self._f = figures
        self._now = time.time() if now is None else now

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        for family in (*self._m.registry.collect(), *self._m._gauges(self._f, self._now)):
            name = family.name + "_total" if family.type == "counter" else family.name
            families[name] = family
        for s in SERIES:
            yield families[s.name]
