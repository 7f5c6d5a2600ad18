"""wardd benchmarks: dispatch cost against the disk's own limit and against DBOS.

    make bench                          # the default run (~5 min on 2 cores, 7 if loaded)
    make bench BENCH_ARGS=--quick       # ~2.5 min, fewer and smaller samples
    make bench BENCH_ARGS=--full        # more repetitions, DBOS in both journal modes
    .venv/bin/python bench/run.py --json out.json --only raw,sequential

One run measures, side by side on the same filesystem (one temp dir, by
default under /tmp, ``--dir`` to choose, holds the raw loops' files and the
daemons' databases alike; the run says whether it is also the repository's
filesystem). Results, method and analysis: docs/performance.md.

1. the physical bound: raw SQLite ``synchronous=FULL`` WAL commits (two per
   guarded ``invoke``), raw write+fsync; plus the engine floor (the daemon's
   own writer units in a plain loop), a raw loop with commits as large
   as the daemon's, and the targets' reference: a raw loop of 4 FULL commits
   per cycle;
2. sequential guarded dispatch: one blocking client, ``invoke`` of ``echo``
   on a real daemon process (ops submitted and requests signed beforehand),
   and the full submit+invoke cycle;
3. concurrent: 16 clients over 4 neurons, workers=2 and 4: ``invoke`` of
   pre-submitted ops, then full submit+invoke cycles, each under a
   ``status`` prober, with the writer's batch statistics from ``status``;
3b. ``call`` (submit and invoke in one signed request, of a fresh op each):
   one blocking client, with the daemon's CPU per call by thread, paired
   with a DBOS repetition (one-step workflows/s) after each repetition;
   then 16 clients over 4 neurons under a ``status`` prober, workers=2 and
   4, each repetition paired with DBOS steps/s (``--only call,dbos``: the
   call rows alone, with their peer);
4. the peer: DBOS Transact with its SQLite system database created in WAL
   mode, durable no-op steps/s and one-step workflows/s (its own venv,
   ``bench/.venv-dbos``, created on first use);
5. recovery time to ``READY=1`` with 1M event records and 10k in-flight
   attempts; ``status`` under the load of section 3 on a database of 1M ops
   (``status1m``: 10k of them marked unknown by the start's recovery); RSS
   idle and with 1,000 connections;
6. retention: bytes per op kept for ever once pruned, ``invoke``
   latency while a backlog of 100k prunable ops is pruned against the same
   database on a daemon that keeps everything, and a long run with retention
   on (``--retention-cycles N``; the target is for 1M, the default run does what
   fits in a few minutes) whose database size and RSS must stay flat.
   ``--only prune`` times the pruning itself: 2,000 finished ops
   with 16 KiB args pruned after a restart, a backlog of 100k small ops
   pruned under one blocking client, and ``invoke`` p99 of 16 clients
   while such a backlog is pruned ÷ the same daemon's right after
   (``_prune.py``; backlogs built through the store's own units).
7. metrics: the CPU one ``invoke``'s counting adds (``_metrics``:
   in-process, each repetition paired with the same loop uncounted).
8. traces: the CPU one ``invoke``'s tracing adds with ``[tracing] exporter =
   "otlp"`` (``_traces``: in-process, each repetition paired with the same
   loop untraced): on the threads that serve the invoke (the target), and
   the whole process's with the SDK's export thread encoding and sending
   each span to a collector in a process of its own.
9. hostile frames: ``status`` p50/p99 (from the prober process) while 20
   connections send, again and again, the worst frames we can build
   (``_hostile.py``): 64 KiB of colliding map keys, and the costliest
   shapes the decoder accepts at 4 KiB (the largest body decoded on the
   event loop) and at 1 MiB (decoded on threads).

Figures are median [min–max] over repetitions; latencies are pooled
p50/p99. Ratios to the raw bound and to DBOS are paired (the raw sample, or
the DBOS repetition, is taken right next to each wardd repetition), since
these machines are noisy. The table of performance targets closes the run, each
row with its value, target and verdict (``TARGETS``: each row's function
says how its value is computed; ``--json`` keeps them under ``values.targets``). Every daemon
and temp dir is removed at the end; nothing but local Unix sockets is used.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shutil
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _common as C  # noqa: E402
import _dbos  # noqa: E402
import _dispatch  # noqa: E402
import _engine  # noqa: E402
import _hostile  # noqa: E402
import _metrics  # noqa: E402
import _pages  # noqa: E402
import _prune  # noqa: E402
import _raw  # noqa: E402
import _recovery  # noqa: E402
import _retention  # noqa: E402
import _traces  # noqa: E402
from _common import Results, fmt_ms, fmt_rate, log, percentile, section  # noqa: E402
from _wardd import Actor, Daemon  # noqa: E402

SECTIONS = (
    "raw",
    "sequential",
    "concurrent",
    "call",
    "dbos",
    "recovery",
    "status1m",
    "rss",
    "retention",
    "prune",
    "metrics",
    "traces",
    "hostile",
)

# name -> settings; "default" took 401 s on 2 cores under a load average of 2.4
MODES: dict[str, dict[str, Any]] = {
    "quick": dict(
        reps=3,
        raw_s=0.5,
        engine_n=300,
        seq_n=300,
        conc_reps=2,
        conc_per=40,
        dbos_reps=3,
        dbos_steps=300,
        dbos_wf=100,
        rec_records=200_000,
        rec_inflight=2_000,
        rec_reps=2,
        big_ops=100_000,
        rss_reps=1,
        conns=1000,
        dbos_default=False,
        ret_bytes_n=1000,
        ret_backlog=20_000,
        ret_invokes=5000,
        ret_idle=1000,
        ret_cycles=3000,
        ret_retention_s=3,
        hostile_s=3.0,
        prune_large=500,
        prune_backlog=20_000,
        prune_invokes=5000,
        prune_per_client=60,
    ),
    "default": dict(
        reps=5,
        raw_s=1.0,
        engine_n=1000,
        seq_n=1000,
        conc_reps=3,
        conc_per=100,
        dbos_reps=5,
        dbos_steps=1000,
        dbos_wf=300,
        rec_records=1_000_000,
        rec_inflight=10_000,
        rec_reps=3,
        big_ops=1_000_000,
        rss_reps=3,
        conns=1000,
        dbos_default=False,
        ret_bytes_n=3000,
        ret_backlog=100_000,
        ret_invokes=20_000,
        ret_idle=3000,
        ret_cycles=20_000,
        ret_retention_s=5,
        hostile_s=6.0,
        prune_large=2000,
        prune_backlog=100_000,
        prune_invokes=20_000,
        prune_per_client=150,
    ),
    "full": dict(
        reps=9,
        raw_s=2.0,
        engine_n=2000,
        seq_n=2000,
        conc_reps=5,
        conc_per=200,
        dbos_reps=5,
        dbos_steps=2000,
        dbos_wf=500,
        rec_records=1_000_000,
        rec_inflight=10_000,
        rec_reps=5,
        big_ops=1_000_000,
        rss_reps=3,
        conns=1000,
        dbos_default=True,
        ret_bytes_n=3000,
        ret_backlog=100_000,
        ret_invokes=40_000,
        ret_idle=5000,
        ret_cycles=100_000,
        ret_retention_s=10,
        hostile_s=15.0,
        prune_large=2000,
        prune_backlog=100_000,
        prune_invokes=40_000,
        prune_per_client=300,
    ),
}
WORKER_COUNTS = (2, 4)
CLIENTS, NEURONS = 16, 4
PROBE_INTERVAL = 0.005
WAL_INVOKES = 40  # invokes per WAL-pages sample (under the 1,000-frame autocheckpoint)
RAW_CYCLE_COMMITS = 4  # the targets' reference loop: 4 FULL WAL commits per cycle

# -- paired samples ---------------------------------------------------------------------


def paired_bound(tmp: Path, seconds: float) -> float:
    """A raw 1-row FULL-commit sample taken right before a repetition: the
    raw sequential dispatch bound (commits/s ÷ 2) at that moment. These
    machines are noisy; a ratio of two figures measured seconds apart is
    steadier than a ratio of medians taken minutes apart."""
    rate, _ = _raw.commit_loop(_raw.fresh_db(tmp, "paired.db"), seconds)
    _raw.fresh_db(tmp, "paired.db")
    return rate / 2


def paired_raw4(tmp: Path, seconds: float) -> float:
    """The targets' raw loop of 4 FULL commits per cycle, sampled right before
    the submit+invoke cycles it is divided into: cycles/s."""
    cycles, _ = _raw.cycle_loop(_raw.fresh_db(tmp, "paired.db"), seconds, commits=RAW_CYCLE_COMMITS)
    _raw.fresh_db(tmp, "paired.db")
    return cycles


class PeerBox:
    """The DBOS peer (a long-lived process), started on first use when its
    venv is there, and run one repetition right after each sequential and
    each concurrent wardd repetition; closed by the ``dbos`` section (or at
    the end of the run)."""

    def __init__(self, R: Results, tmp: Path) -> None:
        self.R, self.tmp = R, tmp
        self.peer: _dbos.Peer | None = None
        self.failed = False
        self.closed = False

    def rep(self, steps: int, workflows: int) -> dict[str, Any] | None:
        py = self.R.values.get("dbos.python")
        if not py or self.failed or self.closed:
            return None
        try:
            if self.peer is None:
                (self.tmp / "dbos").mkdir(exist_ok=True)
                self.peer = _dbos.Peer(Path(py), self.tmp / "dbos", "wal")
            return self.peer.rep(steps, workflows)
        except Exception as exc:  # noqa: BLE001 - the peer is optional
            self.failed = True
            self.R.note(f"DBOS peer failed, no more pairing with it: {exc}")
            return None

    def close(self) -> None:
        if self.peer is not None and not self.closed:
            self.R.value("dbos.wal.final", self.peer.close())
        self.closed = True


# -- sections ---------------------------------------------------------------------------


def bench_raw(R: Results, tmp: Path, cfg: dict[str, Any]) -> None:
    section("1. physical bound (same filesystem as the daemon's database)")
    # the engine floor's database first: it tells how many pages a dispatch commit writes
    n = cfg["engine_n"]
    ereps = max(1, cfg["reps"] // 2)
    frame_n = 100
    frames = None
    try:
        db, actor = _engine.prepare_db(tmp / "engine", n * ereps + frame_n)
        frames = _engine.run(db, actor, 0, frame_n, count_frames=True)["frames_per_commit"]
        R.value("engine.frames_per_commit", frames)
    except Exception as exc:  # noqa: BLE001 - private interfaces may have moved
        R.note(f"engine floor unavailable ({type(exc).__name__}: {exc})")
    pages = max(1, round(frames)) if frames else None
    commits, lat, matched, fsync_in, fsync_app, group = [], [], [], [], [], []
    raw4, raw4_lat = [], []
    for _i in range(cfg["reps"]):  # interleaved, so that drifts hit every figure alike
        rate, ls = _raw.commit_loop(_raw.fresh_db(tmp, "raw.db"), cfg["raw_s"])
        commits.append(rate)
        lat += ls
        rate, ls = _raw.cycle_loop(
            _raw.fresh_db(tmp, "raw4.db"), cfg["raw_s"], commits=RAW_CYCLE_COMMITS
        )
        raw4.append(rate)
        raw4_lat += ls
        if pages:
            rate, _ = _raw.commit_loop(_raw.fresh_db(tmp, "rawp.db"), cfg["raw_s"], pages=pages)
            matched.append(rate)
        fsync_in.append(_raw.fsync_loop(tmp / "fsync.bin", cfg["raw_s"]))
        fsync_app.append(_raw.fsync_loop(tmp / "fsync-a.bin", cfg["raw_s"], append=True))
        group.append(_raw.group_loop(_raw.fresh_db(tmp, "group.db"), cfg["raw_s"] / 2, 16))
    for name in ("raw.db", "raw4.db", "rawp.db", "group.db"):
        _raw.fresh_db(tmp, name)
    s = R.stat("raw.commits", commits)
    print(
        f"   raw FULL WAL commits (1 row)        {s}   latency p50 {fmt_ms(percentile(lat, 50))}"
        f" p99 {fmt_ms(percentile(lat, 99))}"
    )
    b = R.stat("raw.dispatch_bound", [x / 2 for x in commits])
    print(f"   → raw sequential dispatch bound      {b}   (2 commits per invoke)")
    R.stat("raw.cycle_bound", [x / 3 for x in commits])
    print(f"   → raw submit+invoke cycle bound      {R.stats['raw.cycle_bound']}   (3 commits)")
    s = R.stat("raw.raw4", raw4, " cycles/s")
    print(
        f"   raw loop of {RAW_CYCLE_COMMITS} FULL WAL commits        {s}   cycle p50"
        f" {fmt_ms(percentile(raw4_lat, 50))} p99 {fmt_ms(percentile(raw4_lat, 99))}"
        "   (the targets' reference for submit+invoke)"
    )
    print(f"   raw write 4 KiB + fsync, in place    {R.stat('raw.fsync', fsync_in)}")
    print(f"   raw write 4 KiB + fsync, appending   {R.stat('raw.fsync_append', fsync_app)}")
    print(f"   raw group commit, 16 rows/commit     {R.stat('raw.group16_rows', group, ' rows/s')}")
    if not frames:
        return
    s = R.stat("raw.commits_page_matched", matched)
    print(
        f"   raw FULL WAL commits of {pages} pages     {s}   → dispatch bound"
        f" {fmt_rate(s.median / 2)}/s   ({frames:.1f} pages: the daemon's dispatch commit)"
    )
    rates, cshare, cms, ratio, ratio_pm = [], [], [], [], []
    try:
        for r in range(ereps):
            # paired: a 1-row and a page-matched raw sample right before each repetition
            half = cfg["raw_s"] / 2
            one, _ = _raw.commit_loop(_raw.fresh_db(tmp, "paired.db"), half)
            pm, _ = _raw.commit_loop(_raw.fresh_db(tmp, "paired.db"), half, pages=pages)
            _raw.fresh_db(tmp, "paired.db")
            out = _engine.run(db, actor, frame_n + r * n, n)
            rates.append(out["rate"])
            cshare.append(out["commit_share"] * 100)
            cms.append(out["commit_ms"])
            ratio.append(out["rate"] / (one / 2))
            ratio_pm.append(out["rate"] / (pm / 2))
    except Exception as exc:  # noqa: BLE001
        R.note(f"engine floor unavailable ({type(exc).__name__}: {exc})")
        return
    print(
        f"   engine floor: the daemon's units in a plain loop (invoke_claim + echo + outcome,"
        f" no IPC, no threads)\n"
        f"                                        {R.stat('engine.rate', rates)}\n"
        f"      commit {C.Stat(cms, ' ms')} each, {C.Stat(cshare, ' %')} of the loop"
    )
    print(
        f"      ÷ raw dispatch bound (1-row commits/s ÷ 2) sampled just before each repetition:"
        f" {R.stat('engine.ratio', ratio, '×')}"
    )
    print(
        f"      ÷ page-matched raw dispatch bound ({pages}-page commits/s ÷ 2), same pairing:"
        f" {R.stat('engine.ratio_page_matched', ratio_pm, '×')}"
    )


def bench_sequential(R: Results, tmp: Path, cfg: dict[str, Any]) -> None:
    section("2. sequential guarded dispatch: one blocking client, invoke of echo")
    n = cfg["seq_n"]
    box: PeerBox = cfg["peer"]
    d = Daemon(tmp / "seq", workers=2)
    try:
        d.start()
        c = d.connect()
        actor = Actor(c)
        out = []
        dbos_reps: list[dict[str, Any]] = []
        for rep in range(cfg["reps"]):
            bound = paired_bound(tmp, cfg["raw_s"] / 2)
            o = _dispatch.sequential(
                d, actor, c, n, rep, before_cycles=lambda: paired_raw4(tmp, cfg["raw_s"] / 2)
            )
            o["ratio"] = o["rate"] / bound
            o["raw4"] = o["paired"]
            o["raw4_ratio"] = o["cycle_rate"] / o["raw4"]
            dr = box.rep(cfg["dbos_steps"], cfg["dbos_wf"]) if rep < cfg["dbos_reps"] else None
            if dr is not None:
                o["dbos_ratio"] = o["rate"] / dr["steps"]
                o["dbos_cycle_ratio"] = o["cycle_rate"] / dr["workflows"]
                dbos_reps.append(dr)
            out.append(o)
        if dbos_reps:
            R.value("dbos.paired", dbos_reps)
        idle = _dispatch.status_latencies(c, 300)
        R.value("sequential.rss_kib", C.rss_kib(d.pid))
        wal = []
        for rep in range(cfg["reps"]):
            x = _pages.daemon_frames(d, actor, c, WAL_INVOKES, tag=f"wal{rep}")
            if x is not None:
                wal.append(x)
        c.close()
    finally:
        d.stop()
        d.cleanup()
    lat = [x for o in out for x in o["lat"]]
    clat = [x for o in out for x in o["cycle_lat"]]
    s = R.stat("seq.invoke", [o["rate"] for o in out])
    R.value("seq.invoke_p50_ms", percentile(lat, 50) * 1000)
    R.value("seq.invoke_p99_ms", percentile(lat, 99) * 1000)
    print(
        f"   invoke (ops pre-submitted)   {s}   p50 {fmt_ms(percentile(lat, 50))}"
        f" p99 {fmt_ms(percentile(lat, 99))}"
    )
    cpu = R.stat("seq.cpu_us", [o["cpu_per_invoke"] * 1e6 for o in out], " µs")
    print(f"   daemon CPU per invoke        {cpu}   (user+sys, all threads), of which:")
    for role in ("event loop", "writer", "workers", "other"):
        t = R.stat(f"seq.cpu_us.{role}", [o["threads"][role] * 1e6 for o in out], " µs")
        print(f"      {role:<12} {t}")
    s = R.stat("seq.cycle", [o["cycle_rate"] for o in out])
    print(
        f"   submit+invoke cycle          {s}   p50 {fmt_ms(percentile(clat, 50))}"
        f" p99 {fmt_ms(percentile(clat, 99))}"
    )
    sub = R.stat("seq.submit", [o["submit_rate"] for o in out])
    print(f"   submit alone                 {sub}")
    r = R.stat("seq.ratio", [o["ratio"] for o in out], "×")
    print(f"   ÷ raw dispatch bound sampled just before each repetition: {r}")
    r = R.stat("seq.raw4_ratio", [o["raw4_ratio"] for o in out], "×")
    p4 = R.stat("seq.paired_raw4", [o["raw4"] for o in out], " cycles/s")
    print(
        f"   submit+invoke cycle ÷ raw {RAW_CYCLE_COMMITS}-commit loop sampled right before the"
        f" cycles: {r}\n      (the paired samples: {p4})"
    )
    if any("dbos_ratio" in o for o in out):
        r = R.stat("seq.dbos_ratio", [o["dbos_ratio"] for o in out if "dbos_ratio" in o], "×")
        rc = R.stat(
            "seq.dbos_cycle_ratio",
            [o["dbos_cycle_ratio"] for o in out if "dbos_cycle_ratio" in o],
            "×",
        )
        print(
            f"   ÷ DBOS steps/s measured right after each repetition: {r}\n"
            f"   submit+invoke cycle ÷ DBOS one-step workflows/s, same pairing: {rc}"
        )
    R.value("status.idle_p50_ms", percentile(idle, 50) * 1000)
    R.value("status.idle_p99_ms", percentile(idle, 99) * 1000)
    print(
        f"   status, idle daemon          p50 {fmt_ms(percentile(idle, 50))}"
        f" p99 {fmt_ms(percentile(idle, 99))}  ({len(idle)} calls)"
    )
    if wal:
        s = R.stat("seq.wal_pages", wal, " pages")
        print(
            f"   WAL pages per dispatch commit {s}   (frames appended over {WAL_INVOKES}"
            " sequential invokes ÷ 2 commits each)"
        )
    try:
        units = _pages.by_unit(tmp / "pages")
    except Exception as exc:  # noqa: BLE001 - private interfaces may have moved
        R.note(f"pages per unit unavailable ({type(exc).__name__}: {exc})")
        return
    R.value("seq.wal_pages_by_unit", units)
    print("   pages each unit's commit writes, by table or index (the units in a plain loop):")
    for line in _pages.describe(units).splitlines():
        print(f"      {line}")


def bench_concurrent(R: Results, tmp: Path, cfg: dict[str, Any]) -> None:
    section(f"3. concurrent: {CLIENTS} clients (threads, blocking clients) over {NEURONS} neurons")
    box: PeerBox = cfg["peer"]
    best = None
    dbos_reps: list[dict[str, Any]] = []
    for w in WORKER_COUNTS:
        out = []
        for rep in range(cfg["conc_reps"]):
            bound = paired_bound(tmp, cfg["raw_s"] / 2)
            o = _dispatch.concurrent(
                tmp,
                workers=w,
                clients=CLIENTS,
                neurons=NEURONS,
                per_client=cfg["conc_per"],
                probe_interval=PROBE_INTERVAL,
                rep=rep,
                before_cycles=lambda: paired_raw4(tmp, cfg["raw_s"] / 2),
            )
            o["ratio"] = o["rate"] / bound
            o["raw4"] = o["paired"]
            o["raw4_ratio"] = o["cycle"]["rate"] / o["raw4"]
            dr = box.rep(cfg["dbos_steps"], 0)
            if dr is not None:
                o["dbos_ratio"] = o["cycle"]["rate"] / dr["steps"]
                o["dbos_steps"] = dr["steps"]
                dbos_reps.append({"steps": dr["steps"], "workers": w})
            out.append(o)
        lat = [x for o in out for x in o["lat"]]
        slat = [x for o in out for x in o["status_lat"]]
        s = R.stat(f"conc.w{w}.invoke", [o["rate"] for o in out])
        R.value(f"conc.w{w}.status_p50_ms", percentile(slat, 50) * 1000)
        R.value(f"conc.w{w}.status_p99_ms", percentile(slat, 99) * 1000)
        R.value(f"conc.w{w}.invoke_p50_ms", percentile(lat, 50) * 1000)
        R.value(f"conc.w{w}.invoke_p99_ms", percentile(lat, 99) * 1000)
        print(
            f"   workers={w}: invoke            {s}   p50 {fmt_ms(percentile(lat, 50))}"
            f" p99 {fmt_ms(percentile(lat, 99))}"
        )
        mb = R.stat(f"conc.w{w}.mean_batch", [o["mean_batch"] for o in out], " units")
        mx = max(o["max_batch"] for o in out)
        R.value(f"conc.w{w}.max_batch", mx)
        print(
            f"      writer: batches {C.Stat([o['batches'] for o in out], '')}, mean_batch {mb},"
            f" max_batch {mx}"
        )
        cpu = R.stat(f"conc.w{w}.cpu_us", [o["cpu_per_invoke"] * 1e6 for o in out], " µs")
        share = C.Stat([o["cpu_share"] for o in out], " cores")
        print(
            f"      daemon CPU per invoke {cpu}; daemon busy {share};"
            f" load generator {C.Stat([o['client_cpu_share'] for o in out], ' cores')}"
        )
        R.value(f"conc.w{w}.rss_mib", max(o["rss_mib"] for o in out))
        print(
            f"      status under this load: p50 {fmt_ms(percentile(slat, 50))}"
            f" p99 {fmt_ms(percentile(slat, 99))}  ({len(slat)} calls from a separate process)"
        )
        print(
            f"      concurrent submit alone (writer group commit) "
            f"{R.stat(f'conc.w{w}.submit', [o['submit_rate'] for o in out])}"
        )
        r = R.stat(f"conc.w{w}.ratio", [o["ratio"] for o in out], "×")
        print(f"      ÷ raw sequential dispatch bound sampled just before each repetition: {r}")
        # the targets' figure: every client runs full submit+invoke cycles of fresh ops
        cy = [o["cycle"] for o in out]
        clat = [x for c in cy for x in c["lat"]]
        cslat = [x for c in cy for x in c["status_lat"]]
        cs = R.stat(f"conc.w{w}.cycle", [c["rate"] for c in cy])
        R.value(f"conc.w{w}.cycle_p50_ms", percentile(clat, 50) * 1000)
        R.value(f"conc.w{w}.cycle_p99_ms", percentile(clat, 99) * 1000)
        R.value(f"conc.w{w}.cycle_status_p50_ms", percentile(cslat, 50) * 1000)
        R.value(f"conc.w{w}.cycle_status_p99_ms", percentile(cslat, 99) * 1000)
        print(
            f"   workers={w}: submit+invoke cycles {cs}   p50 {fmt_ms(percentile(clat, 50))}"
            f" p99 {fmt_ms(percentile(clat, 99))}"
        )
        mb = R.stat(f"conc.w{w}.cycle_mean_batch", [c["mean_batch"] for c in cy], " units")
        cpu = R.stat(f"conc.w{w}.cycle_cpu_us", [c["cpu_per_call"] * 1e6 for c in cy], " µs")
        share = C.Stat([c["cpu_share"] for c in cy], " cores")
        print(
            f"      writer: batches {C.Stat([c['batches'] for c in cy], '')}, mean_batch {mb};"
            f" daemon CPU per cycle {cpu}; daemon busy {share}"
        )
        print(
            f"      status under this load: p50 {fmt_ms(percentile(cslat, 50))}"
            f" p99 {fmt_ms(percentile(cslat, 99))}  ({len(cslat)} calls from a separate"
            " process)"
        )
        r = R.stat(f"conc.w{w}.raw4_ratio", [o["raw4_ratio"] for o in out], "×")
        p4 = R.stat(f"conc.w{w}.paired_raw4", [o["raw4"] for o in out], " cycles/s")
        print(
            f"      ÷ raw {RAW_CYCLE_COMMITS}-commit loop (one connection) sampled right before"
            f" the cycles: {r}\n         (the paired samples: {p4})"
        )
        _paired_dbos_steps(R, f"conc.w{w}", out, " (one workflow)")
        if best is None or cs.median > R.stats[f"conc.w{best}.cycle"].median:
            best = w
    R.value("conc.best_workers", best)
    if dbos_reps:
        R.value("dbos.paired_conc", dbos_reps)


def _paired_dbos_steps(R: Results, prefix: str, out: list[dict[str, Any]], what: str = "") -> None:
    """The concurrent repetitions' rate ÷ DBOS durable steps/s, each paired
    with the DBOS repetition run right after it (``<prefix>.dbos_ratio`` and
    ``<prefix>.paired_dbos_steps``): the one print of it, for the invoke
    cycles and for the calls."""
    if not any("dbos_ratio" in o for o in out):
        return
    r = R.stat(f"{prefix}.dbos_ratio", [o["dbos_ratio"] for o in out if "dbos_ratio" in o], "×")
    ds = R.stat(f"{prefix}.paired_dbos_steps", [o["dbos_steps"] for o in out if "dbos_steps" in o])
    print(
        f"      ÷ DBOS durable steps/s{what} measured right after each repetition: {r}\n"
        f"         (the paired DBOS repetitions: {ds})"
    )


def bench_call(R: Results, tmp: Path, cfg: dict[str, Any]) -> None:
    section("3b. call: submit and invoke in one signed request, a fresh op each")
    box: PeerBox = cfg["peer"]
    n = cfg["seq_n"]
    d = Daemon(tmp / "call-seq", workers=2)
    out: list[dict[str, Any]] = []
    try:
        d.start()
        c = d.connect()
        actor = Actor(c)
        for rep in range(cfg["reps"]):
            o = _dispatch.sequential_call(d, actor, c, n, rep)
            dr = box.rep(cfg["dbos_steps"], cfg["dbos_wf"]) if rep < cfg["dbos_reps"] else None
            if dr is not None:
                o["dbos_ratio"] = o["rate"] / dr["workflows"]
                o["dbos_workflows"] = dr["workflows"]
                R.value("dbos.paired_call", [*(R.values.get("dbos.paired_call") or []), dr])
            out.append(o)
        c.close()
    finally:
        d.stop()
        d.cleanup()
    lat = [x for o in out for x in o["lat"]]
    s = R.stat("call.seq", [o["rate"] for o in out])
    print(
        f"   sequential call              {s}   p50 {fmt_ms(percentile(lat, 50))}"
        f" p99 {fmt_ms(percentile(lat, 99))}"
    )
    cpu = R.stat("call.cpu_us", [o["cpu_per_call"] * 1e6 for o in out], " µs")
    print(f"   daemon CPU per call          {cpu}   (user+sys, all threads), of which:")
    for role in ("event loop", "writer", "workers", "other"):
        t = R.stat(f"call.cpu_us.{role}", [o["threads"][role] * 1e6 for o in out], " µs")
        print(f"      {role:<12} {t}")
    if any("dbos_ratio" in o for o in out):
        r = R.stat("call.seq_dbos_ratio", [o["dbos_ratio"] for o in out if "dbos_ratio" in o], "×")
        w = R.stat(
            "call.paired_dbos_workflows",
            [o["dbos_workflows"] for o in out if "dbos_workflows" in o],
        )
        print(
            f"   ÷ DBOS one-step workflows/s measured right after each repetition: {r}\n"
            f"      (the paired DBOS repetitions: {w})"
        )
    _call_concurrent(R, tmp, cfg, box)


def _call_concurrent(R: Results, tmp: Path, cfg: dict[str, Any], box: PeerBox) -> None:
    best = None
    for w in WORKER_COUNTS:
        out = []
        for rep in range(cfg["conc_reps"]):
            o = _dispatch.concurrent_call(
                tmp,
                workers=w,
                clients=CLIENTS,
                neurons=NEURONS,
                per_client=cfg["conc_per"],
                probe_interval=PROBE_INTERVAL,
                rep=rep,
            )
            dr = box.rep(cfg["dbos_steps"], 0)
            if dr is not None:
                o["dbos_ratio"] = o["rate"] / dr["steps"]
                o["dbos_steps"] = dr["steps"]
                R.value(
                    "dbos.paired_call",
                    [
                        *(R.values.get("dbos.paired_call") or []),
                        {"steps": dr["steps"], "workers": w},
                    ],
                )
            out.append(o)
        lat = [x for o in out for x in o["lat"]]
        slat = [x for o in out for x in o["status_lat"]]
        s = R.stat(f"call.w{w}.conc", [o["rate"] for o in out])
        print(
            f"   {CLIENTS} clients, workers={w}: call {s}   p50 {fmt_ms(percentile(lat, 50))}"
            f" p99 {fmt_ms(percentile(lat, 99))}"
        )
        cpu = R.stat(f"call.w{w}.cpu_us", [o["cpu_per_call"] * 1e6 for o in out], " µs")
        mb = C.Stat([o["mean_batch"] for o in out], " units")
        print(
            f"      daemon CPU per call {cpu}; daemon busy"
            f" {C.Stat([o['cpu_share'] for o in out], ' cores')}; writer mean_batch {mb};"
            f" status p99 {fmt_ms(percentile(slat, 99))}"
        )
        _paired_dbos_steps(R, f"call.w{w}", out)
        if best is None or s.median > R.stats[f"call.w{best}.conc"].median:
            best = w
    R.value("call.best_workers", best)


def bench_dbos(R: Results, tmp: Path, cfg: dict[str, Any]) -> None:
    section("4. the peer: DBOS Transact (Python) on its SQLite system database")
    cfg["peer"].close()
    py = R.values.get("dbos.python")
    if not py:
        R.note(f"DBOS peer skipped: {R.values.get('dbos.install')}")
        return
    paired = R.values.get("dbos.paired") or []
    conc = R.values.get("dbos.paired_conc") or []
    call = R.values.get("dbos.paired_call") or []
    final = R.values.get("dbos.wal.final") or {}
    if call:
        steps = C.Stat([x["steps"] for x in call], " /s")
        wfs = [x["workflows"] for x in call if "workflows" in x]
        print(
            f"   DBOS {final.get('version')} (WAL), paired with the call section's"
            f" repetitions: durable no-op steps {steps}"
            + (f", one-step workflows {C.Stat(wfs, ' /s')}" if wfs else "")
        )
    if paired or conc:  # measured interleaved with the wardd repetitions
        print(
            f"   DBOS {final.get('version')}, file pre-created in WAL (journal_mode="
            f"{final.get('journal_mode')}, synchronous={final.get('synchronous')}); one"
            " repetition after each sequential and each concurrent wardd repetition, in a"
            " long-lived process:"
        )
        steps = R.stat("dbos.wal.steps", [x["steps"] for x in paired + conc])
        print(
            f"      durable no-op steps (one workflow)  {steps}   ({len(paired)} after"
            f" sequential, {len(conc)} after concurrent repetitions)"
        )
        if paired:
            wfs = R.stat("dbos.wal.workflows", [x["workflows"] for x in paired])
            print(f"      one-step workflows                  {wfs}")
    modes = ["default"] if paired or call else ["wal"]
    if cfg["dbos_default"] and "default" not in modes:
        modes.append("default")
    if not cfg["dbos_default"] and (paired or call):
        return
    for journal in modes:
        try:
            out = _dbos.run_peer(
                Path(py),
                tmp,
                steps=cfg["dbos_steps"],
                workflows=cfg["dbos_wf"],
                reps=cfg["dbos_reps"],
                journal=journal,
            )
        except Exception as exc:  # noqa: BLE001 - the peer is optional
            R.note(f"DBOS peer ({journal}) failed: {exc}")
            continue
        R.value(f"dbos.{journal}.version", out.get("version"))
        how_made = "pre-created in WAL" if journal == "wal" else "as DBOS makes it"
        print(
            f"   DBOS {out.get('version')}, file {how_made}"
            f" (journal_mode={out['journal_mode']}, synchronous={out.get('synchronous')}):"
        )
        steps = R.stat(f"dbos.{journal}.steps", out["steps"])
        print(f"      durable no-op steps (one workflow)  {steps}")
        print(
            f"      one-step workflows                  "
            f"{R.stat(f'dbos.{journal}.workflows', out['workflows'])}"
        )


def bench_recovery(R: Results, tmp: Path, cfg: dict[str, Any]) -> None:
    records, inflight = cfg["rec_records"], cfg["rec_inflight"]
    section(f"5a. recovery at start: {records:,} event records, {inflight:,} in-flight attempts")
    src = tmp / "recovery-src" / "wardd.db"
    src.parent.mkdir()
    counts, t = _recovery.timed(lambda: _recovery.build(src, records=records, in_flight=inflight))
    R.value("recovery.db", counts)
    compiled = _recovery.compile_package()  # as installed: the daemon starts from bytecode
    print(f"   wardd's {len(compiled)} packages byte-compiled first (as an install does)")
    print(
        f"   built in {t:.1f} s: {counts['events']:,} events, {counts['operations']:,} ops,"
        f" {counts['in_flight']:,} in flight, {counts['bytes'] / 2**20:.0f} MiB"
    )
    ready, empty, marked, slat, rss = [], [], [], [], []
    for rep in range(cfg["rec_reps"]):
        root = tmp / f"recovery-{rep}"
        db = root / "wardd.db"
        _recovery.copy_db(src, db)
        d = Daemon(root, database=db)
        try:
            d.start()
            ready.append(d.ready_s)
            c = d.connect()
            st = c.call("status")
            marked.append(st["unknown_attempts"])
            slat += _dispatch.status_latencies(c, 20)
            rss.append(C.rss_kib(d.pid) / 1024)
            c.close()
        finally:
            d.stop()
            d.cleanup()
        for suffix in ("", "-wal", "-shm"):
            try:
                os.unlink(str(db) + suffix)
            except FileNotFoundError:
                pass
        e = Daemon(tmp / f"empty-{rep}")
        try:
            e.start()
            empty.append(e.ready_s)
        finally:
            e.stop()
            e.cleanup()
    s = R.stat("recovery.ready_s", ready, " s")
    print(f"   spawn → READY=1, recovering     {s}   (marked unknown: {sorted(set(marked))})")
    print(
        f"   spawn → READY=1, empty database {R.stat('recovery.empty_s', empty, ' s')}"
        "   (interpreter, imports, open)"
    )
    if any(m != inflight for m in marked):
        R.note(f"recovery marked {marked} attempts unknown, expected {inflight}")
    R.value("recovery.status_p50_ms", percentile(slat, 50) * 1000)
    R.value("recovery.status_p99_ms", percentile(slat, 99) * 1000)
    print(
        f"   status on this database, idle   p50 {fmt_ms(percentile(slat, 50))}"
        f" p99 {fmt_ms(percentile(slat, 99))}; RSS {C.Stat(rss, ' MiB')}"
    )
    if records != 1_000_000 or inflight != 10_000:
        R.note("recovery ran on a scaled-down database (--quick): the target is for 1M/10k")


def bench_status_1m(R: Results, tmp: Path, cfg: dict[str, Any]) -> None:
    ops, inflight = cfg["big_ops"], cfg["rec_inflight"]
    section(f"5c. status under the load of section 3 on a database of {ops:,} ops")
    src = tmp / "status-1m-src" / "wardd.db"
    src.parent.mkdir()
    counts, t = _recovery.timed(lambda: _recovery.build_ops(src, ops=ops, in_flight=inflight))
    R.value("status1m.db", counts)
    print(
        f"   built in {t:.1f} s: {counts['operations']:,} ops, {counts['events']:,} events,"
        f" {counts['in_flight']:,} in flight (marked unknown at the start),"
        f" {counts['bytes'] / 2**20:.0f} MiB"
    )
    for w in WORKER_COUNTS:
        o = _dispatch.concurrent(
            tmp / "status-1m",
            workers=w,
            clients=CLIENTS,
            neurons=NEURONS,
            per_client=cfg["conc_per"],
            probe_interval=PROBE_INTERVAL,
            rep=w,
            database=src,
        )
        for phase, lat in (("invoke", o["status_lat"]), ("cycle", o["cycle"]["status_lat"])):
            R.value(f"status1m.w{w}.{phase}_status_p50_ms", percentile(lat, 50) * 1000)
            R.value(f"status1m.w{w}.{phase}_status_p99_ms", percentile(lat, 99) * 1000)
        print(
            f"   workers={w}: submit+invoke cycles {fmt_rate(o['cycle']['rate'])}/s; status"
            f" p50 {fmt_ms(percentile(o['cycle']['status_lat'], 50))}"
            f" p99 {fmt_ms(percentile(o['cycle']['status_lat'], 99))}"
            f" ({len(o['cycle']['status_lat'])} calls); under the invoke-only load p99"
            f" {fmt_ms(percentile(o['status_lat'], 99))}"
        )
    src.unlink()
    if ops != 1_000_000:
        R.note("status1m ran on a scaled-down database (--quick): the target is for 1M ops")


def bench_rss(R: Results, tmp: Path, cfg: dict[str, Any]) -> None:
    n = cfg["conns"]
    section(f"5b. RSS idle and with {n:,} open connections")
    limit = C.raise_nofile(n + 512)
    if limit < n + 64:
        R.note(f"RLIMIT_NOFILE is {limit}: cannot open {n} connections")
        return
    idle, full, per_conn, counted = [], [], [], []
    for rep in range(cfg["rss_reps"]):
        d = Daemon(tmp / f"rss-{rep}", workers=2)
        conns = []
        try:
            d.start()
            time.sleep(0.3)
            idle.append(C.rss_kib(d.pid) / 1024)
            for _ in range(n):
                conns.append(d.connect())
            time.sleep(0.3)
            counted.append(conns[0].call("status")["connections"])
            full.append(C.rss_kib(d.pid) / 1024)
            per_conn.append((full[-1] - idle[-1]) * 1024 / n)
        finally:
            for c in conns:
                c.close()
            d.stop()
            d.cleanup()
    print(f"   RSS idle                      {R.stat('rss.idle_mib', idle, ' MiB')}")
    print(
        f"   RSS with {n:,} connections    {R.stat('rss.conns_mib', full, ' MiB')}"
        f"   (status says connections={sorted(set(counted))})"
    )
    print(f"   per connection                {R.stat('rss.per_conn_kib', per_conn, ' KiB')}")


def bench_retention(R: Results, tmp: Path, cfg: dict[str, Any]) -> None:
    n = cfg["ret_bytes_n"]
    section(
        f"6. retention: {n:,} cycles kept then pruned; dispatch while pruning"
        f" {cfg['ret_backlog']:,} ops; a long run of {cfg['ret_cycles']:,} cycles"
    )
    b = _retention.bytes_per_op(tmp, n)
    R.value("retention.bytes", b)
    print(f"   submit+invoke+consume of echo, 64-byte args, {n:,} ops:")
    print(
        f"      kept (every record)          {b['kept_per_op']:,.0f} B/op"
        "   (1,754 measured before retention)"
    )
    print(
        f"      pruned (tombstones only)     {b['pruned_per_op']:,.0f} B/op of pages in use,"
        f" {b['pruned_file_per_op']:,.0f} B/op of file; dbstat: tombstones and their index"
        f" {b['tombstone_per_op']:,.0f} B/op"
    )
    x = _retention.dispatch_under_pruning(
        tmp, cfg["ret_backlog"], cfg["ret_invokes"], cfg["ret_idle"]
    )
    idle, busy = x["idle"], x["pruning"]
    R.value("retention.idle_p50_ms", percentile(idle["lat"], 50) * 1000)
    R.value("retention.idle_p99_ms", percentile(idle["lat"], 99) * 1000)
    R.value("retention.pruning_p50_ms", percentile(busy["lat"], 50) * 1000)
    R.value("retention.pruning_p99_ms", percentile(busy["lat"], 99) * 1000)
    R.value("retention.prune_s", busy["prune_s"])
    R.value("retention.pruned_during", busy["pruned_during"])
    print(f"   backlog of {x['n']:,} prunable ops built in {x['built_s']:.0f} s (units in a loop)")
    print(
        f"      invoke, same database, nothing pruned   p50 {fmt_ms(percentile(idle['lat'], 50))}"
        f" p99 {fmt_ms(percentile(idle['lat'], 99))}  ({len(idle['lat']):,} calls)"
    )
    print(
        f"      invoke while the backlog is pruned      p50 {fmt_ms(percentile(busy['lat'], 50))}"
        f" p99 {fmt_ms(percentile(busy['lat'], 99))}  ({len(busy['lat']):,} calls,"
        f" {busy['pruned_during']:,} ops pruned meanwhile)"
    )
    if busy["after"]:
        R.value("retention.after_p50_ms", percentile(busy["after"], 50) * 1000)
        R.value("retention.after_p99_ms", percentile(busy["after"], 99) * 1000)
        after = busy["after"]
        print(
            f"      invoke right after, same daemon, pruned p50 {fmt_ms(percentile(after, 50))}"
            f" p99 {fmt_ms(percentile(after, 99))}  ({len(after):,} calls)"
        )
    rate = x["n"] / busy["prune_s"] if busy["prune_s"] else 0
    print(f"      the whole backlog pruned in {busy['prune_s']:.1f} s ({rate:,.0f} ops/s)")
    lr = _retention.long_run(tmp, cfg["ret_cycles"], cfg["ret_retention_s"])
    R.value("retention.long", lr)
    warm = lr["after_warmup"] or lr["samples"]
    sizes = [s["size"] / 2**20 for s in warm]
    dbs = [s["db"] / 2**20 for s in warm]
    rss = [s["rss_kib"] / 1024 for s in warm]
    print(
        f"   long run: {lr['cycles']:,} cycles in {lr['elapsed_s']:.0f} s"
        f" ({lr['cycles'] / lr['elapsed_s']:,.0f}/s, 4 clients), retention_s ="
        f" {lr['retention_s']}, prune_interval_s = 1; after {3 * lr['retention_s']} s:"
    )
    if sizes:
        print(
            f"      database + WAL  first {sizes[0]:.1f} MiB, min {min(sizes):.1f}, max"
            f" {max(sizes):.1f}, last {sizes[-1]:.1f} MiB"
        )
        print(
            f"      database file   first {dbs[0]:.1f} MiB, min {min(dbs):.1f}, max"
            f" {max(dbs):.1f}, last {dbs[-1]:.1f} MiB"
        )
        print(
            f"      RSS             first {rss[0]:.1f} MiB, min {min(rss):.1f}, max"
            f" {max(rss):.1f}, last {rss[-1]:.1f} MiB"
        )
        grown = warm[-1]["cycles"] - warm[0]["cycles"]
        if grown > 0:
            per = (warm[-1]["db"] - warm[0]["db"]) / grown
            R.value("retention.long_db_growth_per_cycle", per)
            print(
                f"      database file growth after warm-up: {per:,.0f} B per cycle"
                " (the tombstones: what is kept for ever)"
            )
    if lr["cycles"] < 1_000_000:
        R.note(
            f"retention long run: {lr['cycles']:,} cycles, not the 1M asked"
            " (--retention-cycles 1000000 runs them)"
        )


def _prune_log(logs: list[dict[str, Any]]) -> str:
    return "; ".join(
        f"{x.get('ops', 0):,} ops in {x.get('batches', 0):,} batches,"
        f" {x.get('pages_freed', 0):,} pages given back,"
        f" {x.get('seconds', 0):.1f} s"
        for x in logs
    )


def bench_prune(R: Results, tmp: Path, cfg: dict[str, Any]) -> None:
    n, big = cfg["prune_large"], cfg["prune_backlog"]
    section(
        f"6b. pruning: {n:,} ops with 16 KiB args after a restart; a backlog of"
        f" {big:,} small ops under one client, then under {_prune.CLIENTS} clients"
    )
    x = _prune.large_after_restart(tmp, n)
    R.value("prune.large", {k: v for k, v in x.items()})
    # done once the ops are pruned and their space is back
    R.value("prune.large_s", x["back_s"])
    R.value("prune.large_pruned_s", x["prune_s"])
    R.value("prune.large_n", n)
    print(
        f"   {n:,} ops, 16 KiB args (built in {x['built_s']:.0f} s, file"
        f" {x['file_before'] / 2**20:.0f} MiB): pruned {x['prune_s']:.2f} s after the spawn"
        f" (READY=1 at {x['ready_s']:.2f} s), {n / x['prune_s']:,.0f} ops/s"
    )
    back = x["back_s"]
    R.value("prune.large_back_s", back)
    print(
        f"      free pages left at that moment {x['free_at_end']:,} of {x['pages_at_end']:,};"
        " all but 64 given back "
        + (f"{back:.2f} s after the spawn" if back is not None else "not within 120 s")
        + f"; file after the stop {x['file_after'] / 2**20:.1f} MiB"
    )
    print(f"      daemon: {_prune_log(x['logs'])}")
    db, actors, built = _prune.build_small(tmp, big, cfg["prune_invokes"], cfg["prune_per_client"])
    print(f"   backlog of {big:,} small ops built in {built:.0f} s (units in a loop)")
    s = _prune.small_sequential(tmp, db, actors[0], big, cfg["prune_invokes"])
    R.value("prune.backlog_s", s["prune_s"])
    R.value("prune.backlog_n", big)
    R.value("prune.seq_p50_ms", percentile(s["lat"], 50) * 1000)
    R.value("prune.seq_p99_ms", percentile(s["lat"], 99) * 1000)
    print(
        f"   under one blocking client: pruned {s['prune_s']:.1f} s after the spawn"
        f" ({big / s['prune_s']:,.0f} ops/s); meanwhile {s['calls']:,} invokes,"
        f" p50 {fmt_ms(percentile(s['lat'], 50))} p99 {fmt_ms(percentile(s['lat'], 99))}"
    )
    print(f"      daemon: {_prune_log(s['logs'])}")
    i = _prune.small_idle(tmp, db, big)
    R.value("prune.backlog_idle_s", i["prune_s"])
    print(
        f"   with no client: pruned {i['prune_s']:.1f} s after the spawn"
        f" ({big / i['prune_s']:,.0f} ops/s); daemon: {_prune_log(i['logs'])}"
    )
    c = _prune.small_concurrent(tmp, db, actors, big, cfg["prune_per_client"])
    during, after = c["during"], c["after"]
    R.value("prune.conc_during_p50_ms", percentile(during, 50) * 1000)
    R.value("prune.conc_during_p99_ms", percentile(during, 99) * 1000)
    R.value("prune.conc_after_p50_ms", percentile(after, 50) * 1000)
    R.value("prune.conc_after_p99_ms", percentile(after, 99) * 1000)
    R.value("prune.conc_prune_s", c["prune_s"])
    print(
        f"   {_prune.CLIENTS} clients over {_prune.NEURONS} neurons, {len(during):,} invokes"
        f" each phase:"
    )
    print(
        f"      while pruning   p50 {fmt_ms(percentile(during, 50))}"
        f" p99 {fmt_ms(percentile(during, 99))}  ({len(during) / c['during_s']:,.0f}/s;"
        f" pruned {c['pruned_at_start']:,} → {c['pruned_at_end']:,} of {big:,})"
    )
    print(
        f"      right after     p50 {fmt_ms(percentile(after, 50))}"
        f" p99 {fmt_ms(percentile(after, 99))}  ({len(after) / c['after_s']:,.0f}/s)"
    )
    print(
        f"      the backlog pruned {c['prune_s']:.1f} s after the spawn;"
        f" daemon: {_prune_log(c['logs'])}"
    )
    if c["pruned_at_end"] >= big:
        R.note(
            "prune: the 16-client phase outlasted the pruning (the p99 ratio then"
            " covers calls made after it)"
        )
    shutil.rmtree(db.parent, ignore_errors=True)


# -- summary ------------------------------------------------------------------------------


def bench_metrics(R: Results, tmp: Path, cfg: dict[str, Any]) -> None:
    section("metrics: the CPU one invoke's counting adds (in-process, paired)")
    try:
        added = _metrics.added_us(cfg["reps"], 20_000)
    except (ImportError, AttributeError, TypeError) as exc:
        R.note(f"metrics cost unavailable: {exc!r}")
        return
    print(f"   added CPU per invoke {R.stat('metrics.added_us', added, ' µs')}")


def bench_traces(R: Results, tmp: Path, cfg: dict[str, Any]) -> None:
    section("traces: the CPU one invoke's tracing adds (in-process, paired)")
    try:
        hot, whole = _traces.added_us(cfg["reps"], 10)
    except (ImportError, AttributeError, TypeError) as exc:
        R.note(f"traces cost unavailable (the otel extra?): {exc!r}")
        return
    print(f"   added CPU per invoke, serving threads {R.stat('traces.added_us', hot, ' µs')}")
    print(f"   with the export thread (encode, send) {R.stat('traces.whole_us', whole, ' µs')}")


HOSTILE_CONNECTIONS = 20
# phase -> the frame body each attacking connection sends, again and again:
# legitimate status requests (the reference), the 64 KiB map of colliding
# keys (refused on its first key since [2.3]), then the worst shapes
# decode_item accepts, at the largest size decoded on the event loop and at
# max_frame (decoded on threads).
HOSTILE_PHASES: dict[str, Callable[[], bytes]] = {
    # the reference: the same 20 connections sending status requests
    "status_flood": lambda: b"\xa3bid\x01fmethodfstatusfparams\xa0",
    "colliding_64k": lambda: _hostile.colliding_keys(65536),
    "empties_4k": lambda: _hostile.nested_empties(4096),
    "chunks_4k": lambda: _hostile.indefinite_text_chunks(4096),
    "empties_1m": lambda: _hostile.nested_empties(1 << 20),
    "chunks_1m": lambda: _hostile.indefinite_text_chunks(1 << 20),
}


def bench_hostile(R: Results, tmp: Path, cfg: dict[str, Any]) -> None:
    """``status`` p50/p99 from the prober process while 20 connections send the
    worst frames we can build, one phase per frame shape (contract §4 [2.3])."""
    seconds = cfg["hostile_s"]
    section(
        f"8. status while {HOSTILE_CONNECTIONS} connections send hostile frames"
        f" ({seconds:.0f} s a phase)"
    )
    d = Daemon(tmp / "hostile", workers=2)
    try:
        d.start()
        for phase in ("idle", *HOSTILE_PHASES):
            body = HOSTILE_PHASES[phase]() if phase != "idle" else b""
            prober = _dispatch.Prober(d.socket, PROBE_INTERVAL)
            stop = threading.Event()
            sent = [0] * HOSTILE_CONNECTIONS
            threads = []
            if body:
                for i in range(HOSTILE_CONNECTIONS):

                    def run(
                        i: int = i,
                        sent: list[int] = sent,
                        body: bytes = body,
                        stop: threading.Event = stop,
                    ) -> None:
                        sent[i] = _hostile.attack(str(d.socket), body, stop)

                    threads.append(threading.Thread(target=run, daemon=True))
                    threads[-1].start()
            try:
                prober.go()
                time.sleep(seconds)
                probe = prober.stop()
            finally:
                stop.set()
                prober.kill()
                for t in threads:
                    t.join(120)
            lat = probe["latencies"]
            p50, p99 = percentile(lat, 50), percentile(lat, 99)
            R.value(
                f"hostile.{phase}",
                {
                    "p50": p50,
                    "p99": p99,
                    "max": max(lat),
                    "statuses": len(lat),
                    "frames": sum(sent),
                    "frame_bytes": len(body),
                },
            )
            print(
                f"   {phase:<14} status p50 {fmt_ms(p50):>10}  p99 {fmt_ms(p99):>10}"
                f"  max {fmt_ms(max(lat)):>10}   ({len(lat)} statuses,"
                f" {sum(sent) / seconds:,.0f} hostile frames/s)",
                flush=True,
            )
    finally:
        d.stop()
        d.cleanup()


def _num(x: Any) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def _btrees(unit: dict[str, Any]) -> str:
    """A unit's pages per commit by table or index, the ones of 0.1 page or more."""
    return ", ".join(f"{b} {x:.1f}" for b, x in unit["by_btree"].items() if x >= 0.1)


ROLES = ("event loop", "writer", "workers", "other")


class Figures:
    """One run's figures as the target rows read them: medians, paired ratios
    (falling back to the ratio of medians when the pairing is missing), and
    the figures several rows share."""

    def __init__(self, R: Results) -> None:
        self.st, self.v = R.stats, R.values
        self.best = self.v.get("conc.best_workers")
        self.raw4, self.bound = self.med("raw.raw4"), self.med("raw.dispatch_bound")
        self.dbos_steps = self.med("dbos.wal.steps")
        self.dbos_wf = self.med("dbos.wal.workflows")
        self.seq_cyc = self.med("seq.cycle")
        self.conc_cyc = self.med(f"conc.w{self.best}.cycle") if self.best else None

    def med(self, key: str) -> float | None:
        return _num(self.st[key].median) if key in self.st else None

    def val(self, key: str) -> float | None:
        return _num(self.v.get(key))

    @staticmethod
    def div(a: float | None, b: float | None) -> float | None:
        return a / b if a is not None and b else None

    @staticmethod
    def f(x: float | None) -> str:
        return fmt_rate(math.nan if x is None else x)

    @staticmethod
    def pick(paired: float | None, plain: float | None) -> tuple[float | None, bool]:
        return (paired, True) if paired is not None else (plain, False)


Row = dict[str, Any]


def _cpu(g: Figures, prefix: str, what: str) -> Row:
    cpu = g.med(f"{prefix}.cpu_us")
    roles = ", ".join(f"{r} {g.f(g.med(f'{prefix}.cpu_us.{r}'))} µs" for r in ROLES)
    return dict(
        value=None if cpu is None else cpu / 1000,
        paired=None,
        threads_us={r: g.med(f"{prefix}.cpu_us.{r}") for r in ROLES},
        compared=f"daemon user+sys CPU over the sequential {what} loop ÷ {what}s",
        detail=f"{roles} (medians per thread; total {g.f(cpu)} µs)",
    )


def row_cpu(g: Figures) -> Row:
    """The daemon's user+sys CPU (all its threads, from /proc) over the
    sequential invoke-only loop (ops pre-submitted), ÷ invokes; per thread by role."""
    return _cpu(g, "seq", "invoke")


def row_wal_pages(g: Figures) -> Row:
    """On the sequential section's daemon, after its repetitions: the WAL
    checkpointed and truncated from the bench's own connection, then 40
    pre-submitted ops invoked one after the other; the frames the WAL grew by
    (its size − 32 ÷ 4,120) ÷ 80 commits, one sample per repetition
    (``_pages.daemon_frames``). The detail names the pages each unit writes,
    from the daemon's units in a plain loop, each commit's frames read from
    the WAL and named by ``dbstat`` (``_pages.by_unit``)."""
    units = g.v.get("seq.wal_pages_by_unit") or {}
    return dict(
        value=g.med("seq.wal_pages"),
        paired=None,
        compared=f"WAL frames appended over {WAL_INVOKES} sequential invokes ÷ 2 commits each",
        detail="; ".join(
            f"{k} unit {u['frames_per_commit']:.1f} ({_btrees(u)})" for k, u in units.items()
        ),
    )


def row_seq_dbos(g: Figures) -> Row:
    """Sequential submit+invoke cycles/s (one client, requests signed
    beforehand, each op submitted then invoked) ÷ DBOS one-step workflows/s,
    the DBOS repetition run right after the wardd one."""
    x, paired = g.pick(g.med("seq.dbos_cycle_ratio"), g.div(g.seq_cyc, g.dbos_wf))
    return dict(
        value=x,
        paired=paired,
        compared="sequential submit+invoke cycles/s ÷ DBOS one-step workflows/s",
        detail=f"{g.f(g.seq_cyc)}/s vs {g.f(g.dbos_wf)}/s (ratio of medians"
        f" {g.f(g.div(g.seq_cyc, g.dbos_wf))}×)",
    )


def row_conc_dbos(g: Figures) -> Row:
    """16 client threads over 4 neurons, each running full submit+invoke
    cycles of fresh ops, aggregate cycles/s for the worker count (2 or 4)
    with the higher median, ÷ DBOS durable no-op steps/s (one workflow of N
    steps), paired with the DBOS repetition right after."""
    best = g.best
    x, paired = g.pick(g.med(f"conc.w{best}.dbos_ratio"), g.div(g.conc_cyc, g.dbos_steps))
    return dict(
        value=x,
        paired=paired,
        workers=best,
        compared=f"{CLIENTS} clients' submit+invoke cycles/s together (workers={best})"
        " ÷ DBOS durable no-op steps/s (one workflow)",
        detail=f"workers={best}: {g.f(g.conc_cyc)}/s vs"
        f" {g.f(g.med(f'conc.w{best}.paired_dbos_steps'))} steps/s in the"
        f" paired repetitions (ratio of medians over all DBOS repetitions"
        f" {g.f(g.div(g.conc_cyc, g.dbos_steps))}×)",
    )


def row_call_cpu(g: Figures) -> Row:
    """The daemon's user+sys CPU over the sequential ``call`` loop (a fresh op
    each: submit and invoke in one request) ÷ calls, with each thread's share."""
    return _cpu(g, "call", "call")


def row_call_seq_dbos(g: Figures) -> Row:
    """Sequential calls/s ÷ DBOS one-step workflows/s, each call repetition
    paired with the DBOS repetition run right after it."""
    seq = g.med("call.seq")
    x, paired = g.pick(g.med("call.seq_dbos_ratio"), g.div(seq, g.dbos_wf))
    return dict(
        value=x,
        paired=paired,
        compared="sequential calls/s (a fresh op each) ÷ DBOS one-step workflows/s",
        detail=f"{g.f(seq)}/s vs {g.f(g.med('call.paired_dbos_workflows'))}/s in the"
        " paired repetitions",
    )


def row_call_conc_dbos(g: Figures) -> Row:
    """16 clients' calls/s over 4 neurons (the better of workers=2 and 4) ÷
    DBOS durable no-op steps/s, each paired with the DBOS repetition run
    right after its call repetition."""
    best = g.v.get("call.best_workers")
    conc = g.med(f"call.w{best}.conc") if best else None
    others = "; ".join(
        f"workers={w}: {g.f(g.med(f'call.w{w}.conc'))}/s,"
        f" {g.f(g.med(f'call.w{w}.dbos_ratio'))}× paired"
        for w in WORKER_COUNTS
        if w != best
    )
    x, paired = g.pick(g.med(f"call.w{best}.dbos_ratio"), g.div(conc, g.dbos_steps))
    return dict(
        value=x,
        paired=paired,
        workers=best,
        compared=f"{CLIENTS} clients' calls/s together (workers={best}, the faster) ÷"
        " DBOS durable no-op steps/s (one workflow)",
        detail=f"workers={best}: {g.f(conc)}/s vs"
        f" {g.f(g.med(f'call.w{best}.paired_dbos_steps'))} steps/s in the paired"
        f" repetitions; {others}"
        if best
        else "",
    )


def _prune_row(g: Figures, key: str, want: int, what: str) -> Row:
    size = g.v.get(f"prune.{key}_n")
    scaled = " (scaled down: not the target's size)" if size != want else ""
    return dict(
        value=g.val(f"prune.{key}_s"),
        paired=None,
        compared=what,
        detail=f"{size:,} ops{scaled}" if size else "",
    )


def row_prune_large(g: Figures) -> Row:
    """``--only prune`` (``_prune.py``): spawn of a daemon with ``retention_s
    = 1`` on a backlog of 2,000 finished ops with 16 KiB args built
    beforehand, nothing else running → every op pruned and at most 64 pages
    left free. Scaled down by --quick, and then marked so."""
    row = _prune_row(
        g, "large", 2000, "daemon spawn → every op pruned and at most 64 pages left free"
    )
    if g.v.get("prune.large_pruned_s") is not None:
        row["detail"] += (
            f"; every op pruned {g.v['prune.large_pruned_s']:.2f} s after the"
            " spawn" + ("" if g.v.get("prune.large_s") else ", space not back in 120 s")
        )
    return row


def row_prune_backlog(g: Figures) -> Row:
    """The same spawn on a backlog of 100k small finished ops while one
    blocking client invokes → ``status.db.pruned_ops`` reaching it (and the
    same with no client, in the detail). Scaled down by --quick."""
    row = _prune_row(
        g,
        "backlog",
        100_000,
        "daemon spawn → status.db.pruned_ops reaching the backlog, one client invoking",
    )
    if g.v.get("prune.backlog_idle_s") is not None:
        row["detail"] += f"; with no client {g.v['prune.backlog_idle_s']:.1f} s"
    return row


def row_prune_p99(g: Figures) -> Row:
    """The p99 of 16 clients' ``invoke`` over 4 neurons while a copy of that
    backlog is pruned ÷ their p99 on the same daemon once it is pruned (the
    same number of calls)."""
    during, after = g.val("prune.conc_during_p99_ms"), g.val("prune.conc_after_p99_ms")
    return dict(
        value=g.div(during, after),
        paired=True,
        compared=f"{CLIENTS} clients' invoke p99 while the backlog is pruned ÷ right"
        " after, same daemon",
        detail=f"{g.f(during)} ms ÷ {g.f(after)} ms" if during and after else "",
    )


def _status_row(g: Figures, w: int) -> Row:
    inv = g.val(f"conc.w{w}.status_p99_ms")
    return dict(
        value=g.val(f"conc.w{w}.cycle_status_p99_ms"),
        paired=None,
        compared=f"status p99, a separate process calling it every"
        f" {PROBE_INTERVAL * 1000:.0f} ms during the {CLIENTS} clients'"
        f" submit+invoke cycles, workers={w}",
        detail=f"p50 {g.f(g.val(f'conc.w{w}.cycle_status_p50_ms'))}"
        f" ms; under the invoke-only load p99 {g.f(inv)} ms",
    )


def row_status_w2(g: Figures) -> Row:
    """p99 of ``status`` called every 5 ms by a separate process during the
    16 clients' submit+invoke cycles, workers=2."""
    return _status_row(g, 2)


def row_status_w4(g: Figures) -> Row:
    """The same, workers=4."""
    return _status_row(g, 4)


def row_status_1m(g: Figures) -> Row:
    """The same p99 during the same load shape, on a daemon started on a
    database of 1M ops (``_recovery.build_ops``; its 10k in-flight attempts
    marked unknown by that start), the worse of workers=2 and 4 (scaled down
    by --quick, and then marked so)."""
    big = [g.val(f"status1m.w{w}.cycle_status_p99_ms") for w in WORKER_COUNTS]
    big_db = g.v.get("status1m.db") or {}
    return dict(
        value=None if None in big else max(x for x in big if x is not None),
        paired=None,
        compared=f"the worse of workers={' and '.join(map(str, WORKER_COUNTS))}: status p99"
        " during the same submit+invoke cycles on a daemon started on a database of"
        " 1M ops (10k marked unknown by its recovery)",
        detail="; ".join(
            f"workers={w}: p99 {g.f(x)} ms, p50"
            f" {g.f(g.val(f'status1m.w{w}.cycle_status_p50_ms'))} ms"
            for w, x in zip(WORKER_COUNTS, big, strict=True)
        )
        + (f"; on {big_db.get('operations', 0):,} ops" if big_db else ""),
    )


def row_recovery(g: Figures) -> Row:
    """Spawn → READY=1 on a database of 1M records with 10k in-flight
    attempts (scaled down by --quick, and then marked so)."""
    db = g.v.get("recovery.db") or {}
    scaled = bool(db) and (db.get("events") != 1_000_000 or db.get("in_flight") != 10_000)
    return dict(
        value=g.med("recovery.ready_s"),
        paired=None,
        scaled_down=scaled,
        compared="spawn → READY=1 on the recovery database",
        detail=(
            f"on {db.get('events', 0):,} records, {db.get('in_flight', 0):,} in"
            " flight" + (" (scaled down: not the target's size)" if scaled else "")
        )
        if db
        else "",
    )


def row_engine(g: Figures) -> Row:
    """The engine floor's dispatches/s (``_engine``: invoke_claim + echo +
    outcome, two FULL commits per dispatch, in a plain loop) ÷ the raw
    dispatch bound, raw 1-row FULL WAL commits/s ÷ 2, paired with a raw
    sample right before each repetition. The page-matched bound (raw commits
    as many pages long as a dispatch commit, ÷ 2) is printed beside it: it
    tells how much of the gap is page writes."""
    eng, bound = g.med("engine.rate"), g.bound
    x, paired = g.pick(g.med("engine.ratio"), g.div(eng, bound))
    pm = g.med("raw.commits_page_matched")
    pages = g.v.get("engine.frames_per_commit")
    return dict(
        value=x,
        paired=paired,
        compared="engine floor dispatches/s ÷ (raw 1-row FULL WAL commits/s ÷ 2)",
        detail=f"{g.f(eng)}/s vs {g.f(bound)}/s in section 1 (ratio of medians"
        f" {g.f(g.div(eng, bound))}×); ÷ the page-matched bound ({g.f(pages)} pages per"
        f" commit, {g.f(pm / 2 if pm else None)}/s in section 1):"
        f" {g.f(g.med('engine.ratio_page_matched'))}× paired"
        if eng
        else "",
    )


def row_seq_raw4(g: Figures) -> Row:
    """Sequential submit+invoke cycles/s ÷ cycles/s of a raw loop of 4 FULL
    WAL commits of one row each (``_raw.cycle_loop``), sampled right before
    each repetition."""
    x, paired = g.pick(g.med("seq.raw4_ratio"), g.div(g.seq_cyc, g.raw4))
    return dict(
        value=x,
        paired=paired,
        compared="sequential submit+invoke cycles/s ÷ raw 4-commit loop cycles/s",
        detail=f"{g.f(g.seq_cyc)}/s; raw loop {g.f(g.med('seq.paired_raw4'))} cycles/s"
        f" in the paired samples, {g.f(g.raw4)} in section 1 (ratio of medians"
        f" {g.f(g.div(g.seq_cyc, g.raw4))}×)",
    )


def row_conc_raw4(g: Figures) -> Row:
    """The 16 clients' cycles/s (the faster worker count) ÷ the same raw
    4-commit loop (one connection, sequential: the disk's figure)."""
    best = g.best
    others = "; ".join(
        f"workers={w}: {g.f(g.med(f'conc.w{w}.cycle'))}/s,"
        f" {g.f(g.med(f'conc.w{w}.raw4_ratio'))}× and"
        f" {g.f(g.med(f'conc.w{w}.dbos_ratio'))}× paired"
        for w in WORKER_COUNTS
        if w != best
    )
    x, paired = g.pick(g.med(f"conc.w{best}.raw4_ratio"), g.div(g.conc_cyc, g.raw4))
    return dict(
        value=x,
        paired=paired,
        workers=best,
        compared=f"{CLIENTS} clients' submit+invoke cycles/s together (workers={best},"
        " the faster) ÷ raw 4-commit loop cycles/s (one connection)",
        detail=f"workers={best}: {g.f(g.conc_cyc)}/s; raw loop"
        f" {g.f(g.med(f'conc.w{best}.paired_raw4'))} cycles/s in the paired"
        f" samples, {g.f(g.raw4)} in section 1 (ratio of medians"
        f" {g.f(g.div(g.conc_cyc, g.raw4))}×); {others}",
    )


def row_rss(g: Figures) -> Row:
    """VmRSS with 1,000 connections open, in MB (10^6 bytes)."""
    rss = g.med("rss.conns_mib")
    return dict(
        value=None if rss is None else rss * 2**20 / 1e6,
        paired=None,
        compared="VmRSS with 1,000 connections open, MB = 10^6 bytes",
        detail=f"{g.f(rss)} MiB; idle {g.f(g.med('rss.idle_mib'))} MiB" if rss else "",
    )


def row_tombstone(g: Figures) -> Row:
    """Bytes per pruned op: pages in use once pruned, minus the empty database."""
    tomb = (g.v.get("retention.bytes") or {}).get("pruned_per_op")
    return dict(
        value=_num(tomb), paired=None, compared="bytes per pruned op (pages in use)", detail=""
    )


def row_metrics(g: Figures) -> Row:
    """One invoke's calls into the metrics, counted loop − bare loop (``_metrics``)."""
    return dict(
        value=g.med("metrics.added_us"),
        paired=True,
        compared="one invoke's metrics calls, counted loop − bare loop",
        detail="",
    )


def row_traces(g: Figures) -> Row:
    """One invoke's calls into the tracer, traced loop − bare loop, on the
    serving threads (``_traces``); the export thread's CPU is printed beside it."""
    whole = g.med("traces.whole_us")
    return dict(
        value=g.med("traces.added_us"),
        paired=True,
        compared="one invoke's tracer calls, traced loop − bare loop",
        detail=f"{g.f(whole)} µs with the export thread" if whole else "",
    )


@dataclasses.dataclass(frozen=True)
class Target:
    """One row of the targets' table: what it holds a figure to, and how the
    figure is read from a run (``value``'s docstring says how it is measured)."""

    key: str
    figure: str
    cmp: str  # ">=" or "<="
    target: float
    unit: str
    value: Callable[[Figures], Row]

    def verdict(self, x: float | None) -> str:
        if x is None:
            return "n/a"
        return "HOLDS" if (x >= self.target if self.cmp == ">=" else x <= self.target) else "MISSED"


# The targets table (docs/performance.md, "The targets"), in its order; ``n/a``
# when its section did not run. Every ratio is "paired": the median of
# per-repetition ratios whose two figures were measured seconds apart; the
# plain ratio of medians is printed beside it, and used only when the pairing
# is missing (a section run alone), which the row then says.
TARGETS: list[Target] = [
    Target("cpu", "daemon CPU per sequential invoke", "<=", 0.6, " ms", row_cpu),
    Target("wal_pages", "WAL pages per dispatch commit", "<=", 5.0, " pages", row_wal_pages),
    Target(
        "seq_dbos",
        "sequential submit+invoke ÷ DBOS one-step workflows/s",
        ">=",
        1.5,
        "×",
        row_seq_dbos,
    ),
    Target(
        "conc_dbos",
        f"{CLIENTS} clients over {NEURONS} neurons, submit+invoke ÷ DBOS steps/s",
        ">=",
        1.2,
        "×",
        row_conc_dbos,
    ),
    Target("call_cpu", "daemon CPU per sequential call", "<=", 0.6, " ms", row_call_cpu),
    Target(
        "call_seq_dbos",
        "sequential call ÷ DBOS one-step workflows/s",
        ">=",
        2.0,
        "×",
        row_call_seq_dbos,
    ),
    Target(
        "call_conc_dbos",
        f"{CLIENTS} clients over {NEURONS} neurons, call ÷ DBOS steps/s",
        ">=",
        1.2,
        "×",
        row_call_conc_dbos,
    ),
    Target(
        "prune_large",
        "prune 2,000 finished ops with 16 KiB args, after a restart",
        "<=",
        5.0,
        " s",
        row_prune_large,
    ),
    Target(
        "prune_backlog",
        "prune a backlog of 100k small finished ops",
        "<=",
        25.0,
        " s",
        row_prune_backlog,
    ),
    Target(
        "prune_p99",
        f"invoke p99 with {CLIENTS} clients while a backlog is pruned ÷ the"
        " same without pruning, same daemon",
        "<=",
        1.5,
        "×",
        row_prune_p99,
    ),
    Target("status_w2", "status p99 under that load, workers=2", "<=", 4.0, " ms", row_status_w2),
    Target("status_w4", "status p99 under that load, workers=4", "<=", 4.0, " ms", row_status_w4),
    Target(
        "status_1m",
        "status p99 under that load on a 1M-op database, workers=2 and 4",
        "<=",
        4.0,
        " ms",
        row_status_1m,
    ),
    Target(
        "recovery", "recovery to READY=1 (1M records, 10k in flight)", "<=", 0.8, " s", row_recovery
    ),
]
# printed below the table, not part of it: the raw-bound ratios, RSS,
# retention's tombstone (contract §3.9), the metrics' and the traces' cost
EXTRA_TARGETS: list[Target] = [
    Target(
        "engine",
        "engine floor ÷ raw dispatch bound (1-row commits/s ÷ 2)",
        ">=",
        0.7,
        "×",
        row_engine,
    ),
    Target(
        "seq_raw4", "sequential submit+invoke ÷ raw 4-commit loop", ">=", 0.5, "×", row_seq_raw4
    ),
    Target(
        "conc_raw4",
        f"{CLIENTS} clients over {NEURONS} neurons, submit+invoke ÷ raw 4-commit loop",
        ">=",
        1.0,
        "×",
        row_conc_raw4,
    ),
    Target("rss", "RSS with 1,000 connections", "<=", 60.0, " MB", row_rss),
    Target(
        "tombstone",
        "bytes per op kept for ever ≤ 10% of 1,754 (retention)",
        "<=",
        175.4,
        " B",
        row_tombstone,
    ),
    Target("metrics", "CPU the metrics add per invoke", "<=", 20.0, " µs", row_metrics),
    Target(
        "traces",
        "CPU tracing adds per invoke (the threads that serve it)",
        "<=",
        30.0,
        " µs",
        row_traces,
    ),
]


def _show(table: list[Target], g: Figures, rows: dict[str, Row], in_targets: bool) -> None:
    """Print each row of ``table`` with its value, target and verdict, and keep them."""
    for t in table:
        row = rows[t.key] = t.value(g)
        x = row["value"]
        verdict = t.verdict(x)
        sign = "≥" if t.cmp == ">=" else "≤"
        shown = "n/a" if x is None else f"{fmt_rate(x)}{t.unit}"
        how = (
            ""
            if x is None
            else {True: ", paired", False: ", ratio of medians (no pairing)"}.get(row["paired"], "")
        )
        print(
            f"   [{verdict:6}] {t.figure}: {shown}{how} (target {sign}"
            f" {fmt_rate(t.target)}{t.unit})"
        )
        if row["detail"]:
            print(f"            {row['detail']}")
        row.update(
            figure=t.figure,
            cmp=t.cmp,
            target=t.target,
            unit=t.unit.strip(),
            verdict=verdict,
            in_targets=in_targets,
        )


def _invoke_details(g: Figures) -> None:
    """The invoke-only figures beside the table: ÷ the raw bound and ÷ DBOS steps."""
    best, f = g.best, g.f
    seq, conc = g.med("seq.invoke"), g.med(f"conc.w{best}.invoke") if best else None
    if seq and g.bound:
        print(
            f"   detail: sequential invoke {fmt_rate(seq)}/s vs raw dispatch bound"
            f" {fmt_rate(g.bound)}/s = {f(g.med('seq.ratio'))}× paired"
            f" (ratio of medians {seq / g.bound:.2f}×); concurrent invoke (workers={best})"
            f" {f(conc)}/s = {f(g.med(f'conc.w{best}.ratio'))}× paired"
        )
    if seq and g.dbos_steps:
        print(
            f"   detail: sequential invoke ÷ DBOS steps/s {f(g.med('seq.dbos_ratio'))}×"
            f" paired; concurrent invoke (workers={best}) ÷ DBOS steps/s"
            f" {f(g.div(conc, g.dbos_steps))}× (ratio of medians)"
        )


def summary(R: Results) -> dict[str, Row]:
    """The performance targets' table from this run's figures: one row per
    target (``TARGETS``, then ``EXTRA_TARGETS``), with its value, the target
    and the verdict, printed and kept for ``--json``."""
    section("performance targets, medians of this run")
    g = Figures(R)
    rows: dict[str, Row] = {}
    _show(TARGETS, g, rows, True)
    print("   not part of the performance targets' table:")
    _show(EXTRA_TARGETS, g, rows, False)
    _invoke_details(g)
    R.value("targets", rows)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    g = p.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true", help="~1 minute: fewer, smaller samples")
    g.add_argument("--full", action="store_true", help="more repetitions; DBOS in both modes")
    p.add_argument(
        "--only",
        default=",".join(SECTIONS),
        help=f"comma-separated sections to run (default all: {','.join(SECTIONS)})",
    )
    p.add_argument("--dir", default=None, help="parent of the temp dir (default: the system's)")
    p.add_argument("--json", default=None, metavar="PATH", help="also write every figure here")
    p.add_argument(
        "--retention-cycles",
        type=int,
        default=None,
        metavar="N",
        help="cycles of the retention long run (1,000,000 were asked)",
    )
    p.add_argument(
        "--retention-backlog",
        type=int,
        default=None,
        metavar="N",
        help="prunable ops pruned while dispatch latency is measured (100,000)",
    )
    args = p.parse_args(argv)
    mode = "quick" if args.quick else "full" if args.full else "default"
    cfg = dict(MODES[mode])
    if args.retention_cycles is not None:
        cfg["ret_cycles"] = args.retention_cycles
    if args.retention_backlog is not None:
        cfg["ret_backlog"] = args.retention_backlog
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = set(only) - set(SECTIONS)
    if unknown:
        p.error(f"unknown sections: {', '.join(sorted(unknown))}")
    C.raise_nofile(cfg["conns"] + 512)
    R = Results()
    info = C.machine_info()
    R.value("machine", info)
    R.value("mode", mode)
    t0 = time.monotonic()
    with C.bench_tmp(args.dir) as tmp:
        probe = tmp / ".probe"
        probe.write_text("")
        print(
            f"wardd bench ({mode}) — {info.get('cpu', '?')}, {info['cores']} cores,"
            f" {info.get('mem_gib', '?')} GiB, Python {info['python']}, SQLite {info['sqlite']}"
        )
        print(
            f"temp dir {tmp} (every database of this run, raw and daemon, lives here);"
            f" load average at start {tuple(round(x, 2) for x in info.get('loadavg', ()))}"
        )
        repo_same = C.same_fs(tmp, HERE)
        print(f"same filesystem as the repository: {'yes' if repo_same else 'no'}")
        fns = {
            "raw": bench_raw,
            "sequential": bench_sequential,
            "concurrent": bench_concurrent,
            "call": bench_call,
            "dbos": bench_dbos,
            "recovery": bench_recovery,
            "status1m": bench_status_1m,
            "rss": bench_rss,
            "retention": bench_retention,
            "prune": bench_prune,
            "metrics": bench_metrics,
            "traces": bench_traces,
            "hostile": bench_hostile,
        }
        if "dbos" in only:
            py, how = _dbos.ensure_venv(log)
            R.value("dbos.install", how)
            if py is not None:
                R.value("dbos.python", str(py))
            else:
                print(f"DBOS peer unavailable, it will be skipped: {how}")
        failed = []
        cfg["peer"] = box = PeerBox(R, tmp)
        try:
            for name in SECTIONS:
                if name not in only:
                    continue
                log(f"section {name}")
                try:
                    fns[name](R, tmp, cfg)
                except KeyboardInterrupt:
                    raise
                except Exception:  # noqa: BLE001 - report it, go on with the other sections
                    failed.append(name)
                    print(f"   section {name} FAILED:\n" + traceback.format_exc(), flush=True)
        finally:
            box.close()
        summary(R)
    elapsed = time.monotonic() - t0
    try:
        R.value("loadavg_end", os.getloadavg())
    except OSError:
        pass
    print(
        f"\nrun took {elapsed:.0f} s; load average at end "
        f"{tuple(round(x, 2) for x in R.values.get('loadavg_end', ()))}"
    )
    R.value("elapsed_s", elapsed)
    if args.json:
        Path(args.json).write_text(json.dumps(R.as_dict(), indent=1, default=str))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
