"""The writer thread: the only connection that writes, with group commit.

Every write of the daemon is a *unit*: a function ``unit(tx) -> value``
run inside its own SAVEPOINT of a batch transaction (a batch of one unit
needs none: its transaction is the unit's). ``tx`` is a :class:`Tx`: the
write connection and the batch's two lists a unit adds to as it writes,
the attempt moves (for the metrics) and the notes (for ``status``'s counts,
:mod:`.counters`); the writer cuts both back when a unit rolls back. A
unit's state travels in that argument, never beside it. The writer drains its
queue, runs every queued unit in one ``BEGIN IMMEDIATE … COMMIT`` (group
commit: one fsync for the batch), and only after the COMMIT
resolves each unit's future (contract §3.2.3: every write replies only after
its records are committed).

A unit refuses by *raising* a :class:`WarddError` (its savepoint, or the
transaction of a batch of one, is rolled back: a refused request changes
nothing) or by *returning* one (its writes
are kept and the error is then raised to the caller: ``token_void`` durably
voids its attempt). Any other exception rolls the unit back and becomes
``internal``.

If a COMMIT fails, every unit of the batch fails with ``internal``
(``data.reason: commit_failed``). A batch that held a *critical* unit (an
adapter outcome) makes the writer fail-stop: it refuses every later unit
and calls ``on_fatal`` so the daemon exits non-zero (contract §3.2.3):
after it has answered each unit of that batch, so that a caller's answer
(an outcome lost after the claim: "may have run") is on its way to the event
loop before the stop that closes the connections.
"""

from __future__ import annotations

import concurrent.futures
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import attrs
import structlog

from wardd.protocol import Internal, WarddError

from ..life.bridge import wait_future
from .counters import Counters, Note

__all__ = ["Move", "Tx", "Unit", "Writer", "connect", "connect_reader"]

log = structlog.get_logger("wardd.writer")
T = TypeVar("T")
# an attempt move a unit applied: (act, new state)
Move = tuple[str, str]


@attrs.frozen
class Tx:
    """What a unit is given: ``conn``, the write connection (inside the
    unit's savepoint), and the lists of its batch that the unit's writes add
    to, ``moves`` (each attempt move, counted once the batch commits:
    ``wardd_attempts_total``) and ``notes`` (what the counts of ``status``
    move by, :func:`.counters.note`). The writer makes one per batch and
    cuts both lists back when a unit rolls back; a unit run outside the
    writer (a test, a benchmark's loader) is given a fresh one, ``Tx(conn)``,
    and its lists are dropped."""

    conn: sqlite3.Connection
    moves: list[Move] = attrs.field(factory=list)
    notes: list[Note] = attrs.field(factory=list)


# a write: run by the writer inside its batch (the one definition: the
# units' builders and the pruner name it from here)
Unit = Callable[[Tx], Any]
# after each committed batch: (seconds from BEGIN to COMMIT done, units, the
# attempt moves it committed); on the writer's thread
BatchObserver = Callable[[float, int, list[Move]], None]
MAX_BATCH = 512
WAL_SIZE_LIMIT = 4 << 20


def connect(path: Path) -> sqlite3.Connection:
    """A connection in autocommit mode (we issue BEGIN/COMMIT ourselves), in WAL mode."""
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    # a WAL that grew (a burst, a migration's VACUUM) shrinks back to this
    # when it restarts, instead of keeping its largest size (contract §3.9)
    conn.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA busy_timeout=5000")
    return conn


def connect_reader(path: Path) -> sqlite3.Connection:
    """A connection that cannot write (``PRAGMA query_only``): SQLite refuses
    any change through it (``attempt to write a readonly database``), while
    ``BEGIN … COMMIT`` read snapshots and WAL checkpoints still work."""
    conn = connect(path)
    conn.execute("PRAGMA query_only = ON")
    return conn


class _Answer:
    """The answer :meth:`Writer.call` blocks on: a lock held from the start
    and released by the writer once the answer is set. The caller waits in
    C (``Lock.acquire``), not in a `concurrent.futures.Future`'s Python
    condition: a worker waits for every claim this way."""

    __slots__ = ("_done", "_error", "_lock", "_value")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self._done = False
        self._value: Any = None
        self._error: BaseException | None = None

    def done(self) -> bool:
        return self._done

    def set_result(self, value: Any) -> None:
        self._value, self._done = value, True
        self._lock.release()

    def set_exception(self, error: BaseException) -> None:
        self._error, self._done = error, True
        self._lock.release()

    def result(self) -> Any:
        """Wait for the answer: the unit's value, or raise its error."""
        with self._lock:
            if self._error is not None:
                raise self._error
            return self._value


@attrs.define(eq=False)
class _Job:
    unit: Unit
    critical: bool
    future: concurrent.futures.Future[Any] | _Answer


class _Stop:
    pass


class _Tell:
    """A fail-stop marked off the writer's thread: the writer tells the
    daemon when it reaches this, once what was queued before is answered."""


@attrs.define
class WriterStats:
    batches: int = 0
    units: int = 0
    max_batch: int = 0


class Writer:
    """Owns the write connection on one named thread."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        on_fatal: Callable[[str], None],
        *,
        on_batch: BatchObserver | None = None,
    ) -> None:
        self._conn = conn
        self._queue: queue.SimpleQueue[_Job | _Stop | _Tell] = queue.SimpleQueue()
        self._on_fatal = on_fatal
        self._thread = threading.Thread(target=self._run, name="wardd-writer", daemon=True)
        self.stats = WriterStats()
        self.fatal: str | None = None
        self._settled = False  # the fail-stop's queue is drained: refuse at once
        self._backlog = 0
        self._lock = threading.Lock()
        self._on_batch = on_batch  # told each batch committed (the daemon's metrics)
        # status's counts: seeded by the daemon, then added to by each batch
        self.counters = Counters()

    @property
    def backlog(self) -> int:
        return self._backlog

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._queue.put(_Stop())
        self._thread.join()
        self._settle_fatal()  # a fail-stop marked while the thread was ending

    # -- submitting -----------------------------------------------------------

    def submit(self, unit: Unit, *, critical: bool = False) -> concurrent.futures.Future[Any]:
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._put(unit, critical, fut)
        return fut

    def _put(
        self, unit: Unit, critical: bool, answer: concurrent.futures.Future[Any] | _Answer
    ) -> None:
        # Until a fail-stop is settled a unit is queued, even after its mark:
        # the writer answers it (refused) after the batch in hand, so no
        # refusal overtakes an answer owed before it (the stop's barrier)
        with self._lock:
            if not self._settled:
                self._backlog += 1
                self._queue.put(_Job(unit, critical, answer))
                return
        answer.set_exception(_stopped())

    def call(self, unit: Unit, *, critical: bool = False) -> Any:
        """Run ``unit`` and wait for its COMMIT (from a worker thread)."""
        answer = _Answer()
        self._put(unit, critical, answer)
        return _unwrap(answer.result())

    async def run(self, unit: Unit, *, critical: bool = False) -> Any:
        """Run ``unit`` and wait for its COMMIT (from the trio loop).

        The wait is shielded: once submitted a unit is applied whether or not
        the caller is still interested (contract §3.1: a request's effect does
        not depend on its connection staying open)."""
        fut = self.submit(unit, critical=critical)
        await wait_future(fut, shield=True)
        return _unwrap(fut.result())

    # -- the thread -----------------------------------------------------------

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if isinstance(first, _Stop):
                self._settle_fatal()
                return
            if isinstance(first, _Tell):
                if self._settle_fatal():
                    return
                continue
            batch = [first]
            stop = False
            while len(batch) < MAX_BATCH:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if isinstance(nxt, _Stop):
                    stop = True
                    break
                if not isinstance(nxt, _Tell):  # told at the batch's end
                    batch.append(nxt)
            if self._run_batch(batch) or stop:
                return

    def _run_batch(self, batch: list[_Job]) -> bool:
        """Run one batch; True if a stop was met while settling a fail-stop."""
        try:
            self._try_batch(batch)
        except BaseException as exc:
            log.critical("writer_failed", error=repr(exc), exc_info=True)
            self._fail_batch(batch, exc, fatal=True)
        return self._settle_fatal()

    def _settle_fatal(self) -> bool:
        """After a fail-stop is marked: answer every unit still queued with the
        refusal, settle (later units are refused at once), then tell the
        daemon. So each caller's answer is on its way before the stop that
        closes the connections. True if the queue held a stop."""
        if self.fatal is None or self._settled:  # settled once, and told then
            return False
        stop = False
        while True:
            with self._lock:  # the last look and the settling are one step for _put
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    self._settled = True
                    break
            if isinstance(item, _Stop):
                stop = True
            elif isinstance(item, _Job):
                with self._lock:
                    self._backlog -= 1
                item.future.set_exception(_stopped())
        self._on_fatal(self.fatal)
        return stop

    def _rollback_unit(self, whole: bool) -> bool:
        """Undo one unit (``whole``: the unit is the batch's only one, and its
        transaction is undone); False if SQLite already rolled the whole
        transaction back (SQLITE_FULL, IOERR, NOMEM do that)."""
        conn = self._conn
        if not conn.in_transaction:
            return False
        try:
            if whole:
                conn.execute("ROLLBACK")
            else:
                conn.execute("ROLLBACK TO unit")
                conn.execute("RELEASE unit")
        except sqlite3.Error:
            return False
        return True

    def _try_batch(self, batch: list[_Job]) -> None:
        conn = self._conn
        results: list[tuple[bool, Any]] = []
        tx = Tx(conn)  # the batch's: every unit of it adds to its lists
        moves, notes = tx.moves, tx.notes
        t0 = time.perf_counter()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            self._fail_batch(batch, exc)
            return
        # a batch of one unit needs no savepoint: undoing the unit is undoing
        # the transaction (two statements fewer per write when not batched)
        alone = len(batch) == 1
        for job in batch:
            if self.fatal is not None:
                results.append((False, _stopped()))
                continue
            if not alone:
                conn.execute("SAVEPOINT unit")
            mark, nmark = len(moves), len(notes)
            try:
                value = job.unit(tx)
            except WarddError as err:
                del moves[mark:]  # the unit's moves and counts are undone with it
                del notes[nmark:]
                if not self._rollback_unit(alone):
                    self._fail_batch(batch, err)
                    return
                results.append((False, err))
                continue
            except Exception as exc:
                del moves[mark:]
                del notes[nmark:]
                log.error("unit_failed", error=repr(exc), critical=job.critical, exc_info=True)
                if not self._rollback_unit(alone):
                    self._fail_batch(batch, exc)
                    return
                if job.critical:  # an outcome that cannot be stored: fail-stop
                    self._go_fatal(f"an outcome could not be stored: {exc!r}")
                results.append((False, Internal("a write failed", {"reason": "unit_failed"})))
                continue
            if not alone:
                conn.execute("RELEASE unit")
            results.append((True, value))
        if conn.in_transaction:  # not when the only unit was undone with it
            try:
                self.counters.persist(conn, notes)  # the counts' snapshot, when due
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                self._fail_batch(batch, exc)
                return
        self.counters.add(notes)  # before any caller hears of the commit
        self._committed(batch, results, time.perf_counter() - t0, moves)

    def _committed(
        self,
        batch: list[_Job],
        results: list[tuple[bool, Any]],
        seconds: float,
        moves: list[Move],
    ) -> None:
        """The batch is committed: count it, then answer each unit's caller."""
        n = len(batch)
        with self._lock:
            self._backlog -= n
        self.stats.batches += 1
        self.stats.units += n
        self.stats.max_batch = max(self.stats.max_batch, n)
        if self._on_batch is not None:  # counted before any caller hears of the commit
            try:
                self._on_batch(seconds, n, moves)
            except Exception as exc:  # noqa: BLE001 - counting never fails a committed batch
                log.error("observer_failed", error=repr(exc))
        for job, (ok, value) in zip(batch, results, strict=True):
            if ok:
                job.future.set_result(value)
            else:
                job.future.set_exception(value)

    def fail_stop(self, why: str) -> None:
        """Stop taking writes and tell the daemon to stop (contract §3.2.3):
        something the daemon must record could not be recorded. From any
        thread: the writer tells the daemon once the units queued before are
        answered."""
        self._go_fatal(why)
        self._queue.put(_Tell())

    def _go_fatal(self, why: str) -> None:
        """Run no unit from now; the daemon hears of it when the writer
        settles the fail-stop (:meth:`_settle_fatal`), after the batch in hand."""
        with self._lock:
            if self.fatal is None:
                self.fatal = why

    def _fail_batch(self, batch: list[_Job], exc: BaseException, *, fatal: bool = False) -> None:
        """The batch's transaction is lost: every unit of it fails."""
        try:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass
        log.error("commit_failed", error=str(exc), units=len(batch))
        with self._lock:
            self._backlog -= len(batch)
        if fatal or any(job.critical for job in batch):
            self._go_fatal(f"an outcome could not be stored: {exc}")
        for job in batch:
            if not job.future.done():
                job.future.set_exception(
                    Internal("the write could not be committed", {"reason": "commit_failed"})
                )


def _stopped() -> Internal:
    return Internal("the daemon stopped taking writes", {"reason": "fail_stop"})


def _unwrap(value: Any) -> Any:
    if isinstance(value, WarddError):
        raise value
    return value
