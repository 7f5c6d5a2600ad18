"""Pruning that keeps up: how fast a daemon prunes a backlog,
and what that costs the clients meanwhile.

Every backlog is built directly in a SQLite file through the daemon's own
writer units (``_retention.build``: submit, claim, outcome, consume in a
plain loop, 1,000 ops per transaction, ``synchronous=OFF``; a build, not a
measurement), after which a real daemon with ``retention_s = 1`` and
``prune_interval_s = 1`` is started on it: a restart, as after an upgrade
or a long ``retention_s = 0`` period. Each figure is timed from the spawn
of that daemon (its start-up is in it) to ``status.db.pruned_ops`` reaching
the backlog, polled every 50 ms.

1. large ops: ``n`` finished ops with 16 KiB args (and their 16 KiB echo),
   nothing else running; then until their pages are given back to the file
   system (at most 64 free pages left; 120 s at most); also the file size
   before and after, and the daemon's ``pruned`` log lines (batches, pages
   given back after the batches).
2. a backlog of small ops (64-byte args) pruned while one blocking client
   invokes pre-submitted ops back to back (at most ``invokes`` calls), the
   way ``make bench``'s retention section measured 74.7 s for 100k; and the
   same backlog with no client at all.
3. 16 clients over 4 neurons invoke pre-submitted ops, ``per_client`` each,
   first while a copy of that backlog is pruned, then, on the same daemon
   once nothing is left to prune, as many again: p99 of the first phase ÷
   p99 of the second. A fifth as many calls right after the spawn warm the
   daemon up first and are not counted (without them the first phase of a
   daemon that prunes nothing was 1.2–1.4× the second here).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import _retention
import attrs
from _dispatch import _parallel, timed_calls
from _wardd import Actor, Daemon

from wardd.client import Client

CLIENTS, NEURONS = 16, 4
RETENTION = {"retention_s": 1, "prune_interval_s": 1}
# the space of the pruned ops is back once this few pages are free
FREE_LEFT = 64


def _pruned(c: Client) -> int:
    return int(c.call("status")["db"]["pruned_ops"])


def _wait_pruned(c: Client, n: int, t0: float, timeout: float = 900.0) -> float:
    """Seconds from ``t0`` until ``n`` ops are pruned (polled every 50 ms)."""
    while _pruned(c) < n:
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(f"fewer than {n} ops pruned after {timeout} s")
        time.sleep(0.05)
    return time.monotonic() - t0


def _age(built_at: float) -> None:
    """Every op of a backlog must have ended more than ``retention_s`` ago
    when the daemon starts, else its first look leaves the newest ones to
    the next look, a ``prune_interval_s`` later."""
    time.sleep(max(0.0, built_at + RETENTION["retention_s"] + 0.2 - time.monotonic()))


def _free_pages(db: Path) -> tuple[int, int]:
    """(pages, free pages) of a database a daemon has open (a read)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return (
            conn.execute("PRAGMA page_count").fetchone()[0],
            conn.execute("PRAGMA freelist_count").fetchone()[0],
        )
    finally:
        conn.close()


def _wait_given_back(db: Path, t0: float, timeout: float = 120.0) -> float | None:
    """Seconds from ``t0`` until at most :data:`FREE_LEFT` pages of the
    database are free (polled every 50 ms); None after ``timeout``."""
    while _free_pages(db)[1] > FREE_LEFT:
        if time.monotonic() - t0 > timeout:
            return None
        time.sleep(0.05)
    return time.monotonic() - t0


def _prune_logs(d: Daemon) -> list[dict[str, Any]]:
    return [x for x in d.log_lines() if x.get("event") == "pruned"]


@attrs.define
class _Spawned:
    """A daemon spawned on an aged backlog: ``t0`` is its spawn, ``client``
    one connection to it, ``logs`` its ``pruned`` lines (once it stopped)."""

    d: Daemon
    t0: float = 0.0
    client: Client | None = None
    logs: list[dict[str, Any]] = attrs.field(factory=list)

    @property
    def c(self) -> Client:
        assert self.client is not None
        return self.client

    def stop(self) -> None:
        """Stop the daemon (again, harmlessly, on the way out) and read its logs."""
        self.d.stop()
        self.logs = _prune_logs(self.d)


@contextlib.contextmanager
def _spawn(root: Path) -> Iterator[_Spawned]:
    """A daemon with :data:`RETENTION` on ``root``'s database, spawned once the
    backlog has aged; stopped, its logs read and ``root`` removed on the way
    out, whatever happened inside."""
    _age(time.monotonic())
    run = _Spawned(Daemon(root, workers=2, **RETENTION))
    try:
        run.t0 = time.monotonic()
        run.d.start()
        run.client = run.d.connect()
        try:
            yield run
        finally:
            run.c.close()
        run.stop()
    finally:
        run.d.stop()
        run.d.cleanup()
        shutil.rmtree(root, ignore_errors=True)


# -- 1. large ops after a restart ------------------------------------------------------


def large_after_restart(tmp: Path, n: int, size: int = 16384) -> dict[str, Any]:
    root = tmp / "prune-large"
    t = time.monotonic()
    db, _ = _retention.build(root, n, [0], args=b"x" * size)
    built_s = time.monotonic() - t
    before = os.path.getsize(db)
    with _spawn(root) as run:
        took = _wait_pruned(run.c, n, run.t0)
        pages, free = _free_pages(db)
        back = _wait_given_back(db, run.t0)
        run.c.close()
        run.stop()
        after = _retention.settled_size(db)
    return {
        "n": n,
        "size": size,
        "built_s": built_s,
        "prune_s": took,
        "back_s": back,
        "ready_s": run.d.ready_s,
        "file_before": before,
        "file_after": after["file"],
        "pages_at_end": pages,
        "free_at_end": free,
        "logs": run.logs,
    }


# -- 2 and 3. a backlog of small ops -----------------------------------------------------


def build_small(
    tmp: Path, n: int, seq_invokes: int, per_client: int
) -> tuple[Path, list[Actor], float]:
    """The backlog both measurements copy: ``n`` finished ops, plus pending
    ops for one sequential client (neuron 0) and for 16 clients over 4
    neurons (two phases each)."""
    per_neuron = (2 * per_client + warm_up(per_client)) * CLIENTS // NEURONS
    pending = [max(seq_invokes, per_neuron)] + [per_neuron] * (NEURONS - 1)
    t = time.monotonic()
    db, actors = _retention.build(tmp / "prune-small", n, pending)
    return db, actors, time.monotonic() - t


def warm_up(per_client: int) -> int:
    """Calls per client right after the spawn, before the timed phase."""
    return per_client // 5


def _copy(db: Path, root: Path) -> Path:
    root.mkdir(parents=True)
    shutil.copyfile(db, root / "wardd.db")
    return root


def small_idle(tmp: Path, src: Path, n: int) -> dict[str, Any]:
    """The same backlog pruned with no client at all."""
    with _spawn(_copy(src, tmp / "prune-idle")) as run:
        took = _wait_pruned(run.c, n, run.t0)
    return {"n": n, "prune_s": took, "logs": run.logs}


def small_sequential(tmp: Path, src: Path, actor: Actor, n: int, invokes: int) -> dict[str, Any]:
    """Row 2: ``n`` small ops pruned while one client invokes back to back."""
    lat: list[float] = []
    with _spawn(_copy(src, tmp / "prune-seq")) as run:
        c = run.c
        actor.bind(c)
        for i in range(invokes):
            t = time.perf_counter()
            r = c.call("invoke", actor.invoke_params(f"lat{i}"))
            lat.append(time.perf_counter() - t)
            if r["status"] != "succeeded":
                raise RuntimeError(f"invoke did not succeed: {r}")
            if i % 50 == 49 and _pruned(c) >= n:
                break
        took = _wait_pruned(c, n, run.t0)
    return {"n": n, "prune_s": took, "calls": len(lat), "lat": lat, "logs": run.logs}


def small_concurrent(
    tmp: Path, src: Path, actors: list[Actor], n: int, per_client: int
) -> dict[str, Any]:
    """Row 3: 16 clients while the backlog is pruned, then as many calls on
    the same daemon with nothing left to prune."""
    with _spawn(_copy(src, tmp / "prune-conc")) as run:
        admin = run.c
        for a in actors:
            a.bind(admin)
        cl: list[Client] = []
        try:
            cl.extend(run.d.connect() for _ in range(CLIENTS))
            taken = [0]  # of each neuron's pending ops

            def phase(count: int) -> tuple[list[float], float]:
                # client j: neuron j % 4, its own slice of that neuron's pending ops
                base, taken[0] = taken[0], taken[0] + CLIENTS // NEURONS * count
                invs = [
                    [
                        actors[j % NEURONS].invoke_params(f"lat{base + j // NEURONS * count + i}")
                        for i in range(count)
                    ]
                    for j in range(CLIENTS)
                ]
                t = time.perf_counter()
                out = _parallel(
                    [lambda j=j: timed_calls(cl[j], "invoke", invs[j]) for j in range(CLIENTS)]
                )
                return [x for _, ls in out for x in ls], time.perf_counter() - t

            phase(warm_up(per_client))  # the daemon's caches, while pruning too: not counted
            start_pruned = _pruned(admin)
            during, during_s = phase(per_client)
            end_pruned = _pruned(admin)
            took = _wait_pruned(admin, n, run.t0)
            after, after_s = phase(per_client)
        finally:
            for c in cl:
                c.close()
    return {
        "n": n,
        "during": during,
        "after": after,
        "during_s": during_s,
        "after_s": after_s,
        "pruned_at_start": start_pruned,
        "pruned_at_end": end_pruned,
        "prune_s": took,
        "logs": run.logs,
    }
