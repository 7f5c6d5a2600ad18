"""Guarded dispatch over the wire: sequential and concurrent ``invoke`` and ``call`` of ``echo``.

Every ``invoke`` needs a fresh op (``submit``, its own commit): ops are
submitted and every request is signed *before* the timed part, so the
timed part measures ``invoke`` alone. The full submit+invoke cycle (the CPU
round's figure: it is divided by a raw loop of 4 commits per cycle) is timed
separately, its requests signed beforehand too. A ``call`` (submit and
invoke in one request) needs no op beforehand: each timed ``call`` names a
fresh op. Clients are the project's blocking ``wardd.client.Client``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from _common import rss_kib
from _recovery import copy_db
from _wardd import Actor, Daemon

from wardd.client import Client

HERE = Path(__file__).resolve().parent


def cpu_s(pid: int) -> float:
    """utime+stime of a process, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def thread_cpu(pid: int, workers: int) -> dict[str, float]:
    """CPU seconds (user+sys) of the daemon's threads, by role. Python does
    not name its threads for the OS, so roles go by creation order: the
    event loop is the main thread, then ``Daemon.run`` starts the writer,
    then the workers; trio's helper threads name themselves."""
    tick = os.sysconf("SC_CLK_TCK")
    rows = []
    for name in os.listdir(f"/proc/{pid}/task"):
        tid = int(name)
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue
        rows.append((tid, comm, (int(fields[11]) + int(fields[12])) / tick))
    out = {"event loop": 0.0, "writer": 0.0, "workers": 0.0, "other": 0.0}
    plain = sorted(r for r in rows if r[0] != pid and not r[1].startswith("Trio"))
    for tid, comm, cpu in rows:
        if tid == pid:
            out["event loop"] += cpu
        elif comm.startswith("Trio"):
            out["other"] += cpu
    for i, (_tid, _comm, cpu) in enumerate(plain):
        out["writer" if i == 0 else "workers" if i <= workers else "other"] += cpu
    return out


def _self_cpu() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def submit_all(client: Client, params: list[dict[str, Any]]) -> float:
    """Submit pre-signed ops one by one; returns submits/s."""
    t0 = time.perf_counter()
    for p in params:
        client.call("submit", p)
    return len(params) / (time.perf_counter() - t0)


def timed_calls(
    client: Client, method: str, params: list[dict[str, Any]]
) -> tuple[float, list[float]]:
    """Call ``method`` once per pre-signed params: (calls/s, latencies)."""
    lat: list[float] = []
    t0 = time.perf_counter()
    for p in params:
        t = time.perf_counter()
        r = client.call(method, p)
        lat.append(time.perf_counter() - t)
        if method in ("invoke", "call") and r["status"] != "succeeded":
            raise RuntimeError(f"{method} did not succeed: {r}")
    return len(params) / (time.perf_counter() - t0), lat


def sequential(
    d: Daemon,
    actor: Actor,
    client: Client,
    n: int,
    rep: int,
    workers: int = 2,
    before_cycles: Any = None,
) -> dict[str, Any]:
    """One repetition: submit n ops, then invoke them (timed), then n/2 full
    submit+invoke cycles (timed). ``before_cycles()``, if given, runs right
    before the cycles (a paired raw sample); its result is kept as ``paired``."""
    ops = [f"s{rep}-{i}" for i in range(n)]
    subs = [actor.submit_params(op) for op in ops]
    submit_rate = submit_all(client, subs)
    invs = [actor.invoke_params(op) for op in ops]
    c0 = cpu_s(d.pid)
    t0 = thread_cpu(d.pid, workers)
    rate, lat = timed_calls(client, "invoke", invs)
    cpu = (cpu_s(d.pid) - c0) / n
    t1 = thread_cpu(d.pid, workers)
    threads = {k: (t1[k] - t0[k]) / n for k in t1}
    # the full cycle: a fresh op submitted and invoked, both timed
    cyc_ops = [f"c{rep}-{i}" for i in range(n // 2)]
    pairs = [(actor.submit_params(op), actor.invoke_params(op)) for op in cyc_ops]
    paired = before_cycles() if before_cycles is not None else None
    cyc_rate, cyc_lat = _cycles(client, pairs)
    return {
        "submit_rate": submit_rate,
        "rate": rate,
        "lat": lat,
        "cpu_per_invoke": cpu,
        "threads": threads,
        "cycle_rate": cyc_rate,
        "cycle_lat": cyc_lat,
        "paired": paired,
    }


def sequential_call(
    d: Daemon, actor: Actor, client: Client, n: int, rep: int, workers: int = 2
) -> dict[str, Any]:
    """One repetition: n ``call`` s of fresh ops on one connection (timed), with
    the daemon's CPU per call, in all and per thread."""
    params = [actor.call_params(f"call{rep}-{i}") for i in range(n)]
    c0 = cpu_s(d.pid)
    t0 = thread_cpu(d.pid, workers)
    rate, lat = timed_calls(client, "call", params)
    cpu = (cpu_s(d.pid) - c0) / n
    t1 = thread_cpu(d.pid, workers)
    return {
        "rate": rate,
        "lat": lat,
        "cpu_per_call": cpu,
        "threads": {k: (t1[k] - t0[k]) / n for k in t1},
    }


def concurrent_call(
    root: Path,
    *,
    workers: int,
    clients: int,
    neurons: int,
    per_client: int,
    probe_interval: float,
    rep: int,
) -> dict[str, Any]:
    """One repetition on a fresh daemon: ``clients`` threads, each with its own
    connection, over ``neurons`` neurons bound round-robin to the workers,
    each running ``per_client`` ``call`` s of fresh ops, while a prober process
    calls ``status`` (the load shape of `concurrent`'s cycles)."""
    d = Daemon(root / f"call-w{workers}-{rep}", workers=workers)
    conns: list[Client] = []
    try:
        d.start()
        admin = d.connect()
        conns.append(admin)
        actors = [Actor(admin, worker=f"w{i % workers}") for i in range(neurons)]
        for _ in range(clients):
            conns.append(d.connect())
        cl = conns[1:]
        params = [
            [actors[j % neurons].call_params(f"m{j}-{i}") for i in range(per_client)]
            for j in range(clients)
        ]
        out = _loaded(
            d,
            admin,
            [lambda j=j: timed_calls(cl[j], "call", params[j]) for j in range(clients)],
            clients * per_client,
            probe_interval,
        )
        return out
    finally:
        for c in conns:
            c.close()
        d.stop()
        d.cleanup()


def status_latencies(client: Client, n: int) -> list[float]:
    lat = []
    for _ in range(n):
        t = time.perf_counter()
        client.call("status")
        lat.append(time.perf_counter() - t)
    return lat


class Prober:
    """The ``status`` prober process (see ``_probe.py``)."""

    def __init__(self, socket_path: Path, interval: float) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "_probe.py"), str(socket_path), str(interval)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None and self.proc.stdin is not None
        if self.proc.stdout.readline().strip() != "ready":
            self.proc.kill()
            raise RuntimeError("the status prober did not start")

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def stop(self) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("stop\n")
        self.proc.stdin.flush()
        out = self.proc.stdout.readline()
        self.proc.wait(30)
        return json.loads(out)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _parallel(fns: list[Any]) -> list[Any]:
    """Run each fn in its own thread, all released at once; their results."""
    barrier = threading.Barrier(len(fns) + 1)
    out: list[Any] = [None] * len(fns)
    errors: list[BaseException] = []

    def body(i: int) -> None:
        barrier.wait()
        try:
            out[i] = fns[i]()
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(len(fns))]
    for t in threads:
        t.start()
    barrier.wait()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return out


def _cycles(
    client: Client, pairs: list[tuple[dict[str, Any], dict[str, Any]]]
) -> tuple[float, list[float]]:
    """Full cycles on one connection, each a pre-signed ``submit`` then the
    ``invoke`` of that op: (cycles/s, cycle latencies)."""
    lat: list[float] = []
    t0 = time.perf_counter()
    for sp, ip in pairs:
        t = time.perf_counter()
        client.call("submit", sp)
        r = client.call("invoke", ip)
        lat.append(time.perf_counter() - t)
        if r["status"] != "succeeded":
            raise RuntimeError(f"invoke did not succeed: {r}")
    return len(pairs) / (time.perf_counter() - t0), lat


def _loaded(
    d: Daemon, admin: Client, fns: list[Any], count: int, probe_interval: float
) -> dict[str, Any]:
    """Run ``fns`` (one per client thread, ``count`` calls or cycles in all)
    while a prober process calls ``status``; the rate, the daemon's CPU and
    the writer's batches over that phase alone."""
    before = admin.call("status")["writer"]
    prober = Prober(d.socket, probe_interval)
    try:
        prober.go()
        c0 = cpu_s(d.pid)
        self0 = _self_cpu()
        t0 = time.perf_counter()
        results = _parallel(fns)
        elapsed = time.perf_counter() - t0
        cpu = cpu_s(d.pid) - c0
        self_cpu = _self_cpu() - self0
        probe = prober.stop()
    finally:
        prober.kill()
    w = admin.call("status")["writer"]
    units = w["mean_batch"] * w["batches"] - before["mean_batch"] * before["batches"]
    batches = w["batches"] - before["batches"]
    return {
        "rate": count / elapsed,
        "lat": [x for _, ls in results for x in ls],
        "cpu_per_call": cpu / count,
        "cpu_share": cpu / elapsed,
        "client_cpu_share": self_cpu / elapsed,
        "batches": batches,
        "mean_batch": units / batches if batches else 0.0,
        "max_batch": w["max_batch"],
        "status_lat": probe["latencies"],
    }


def concurrent(
    root: Path,
    *,
    workers: int,
    clients: int,
    neurons: int,
    per_client: int,
    probe_interval: float,
    rep: int,
    before_cycles: Any = None,
    database: Path | None = None,
) -> dict[str, Any]:
    """One repetition on a fresh daemon: ``clients`` threads, each with its
    own connection, over ``neurons`` neurons bound round-robin to the
    workers. Ops are submitted first (concurrently: that is group commit on
    the writer alone), then the daemon is restarted so that its writer
    statistics cover the timed invokes only (the neurons rebind to the new
    boot), then every client invokes its ops; then every client runs
    ``per_client`` full submit+invoke cycles of fresh ops (the targets'
    "16 concurrent clients over 4 neurons"). A prober process calls
    ``status`` every ``probe_interval`` seconds during each of the two
    timed phases, whose latencies are kept apart. ``before_cycles()``, if
    given, runs right before the cycles (a paired raw sample, the daemon
    idle); its result is kept as ``paired``. ``database``: a database to
    start from (copied), instead of an empty one."""
    d = Daemon(root / f"conc-w{workers}-{rep}", workers=workers)
    if database is not None:
        copy_db(database, d.database)
    conns: list[Client] = []
    try:
        d.start()
        admin = d.connect()
        conns.append(admin)
        actors = [Actor(admin, worker=f"w{i % workers}") for i in range(neurons)]
        for _ in range(clients):
            conns.append(d.connect())
        cl = conns[1:]
        ops = [[f"k{j}-{i}" for i in range(per_client)] for j in range(clients)]
        subs = [[actors[j % neurons].submit_params(op) for op in ops[j]] for j in range(clients)]
        t0 = time.perf_counter()
        _parallel([lambda j=j: submit_all(cl[j], subs[j]) for j in range(clients)])
        submit_rate = clients * per_client / (time.perf_counter() - t0)
        for c in conns:
            c.close()
        conns.clear()
        # restart: writer stats from zero, and a new boot to bind
        d.stop()
        d.start()
        admin = d.connect()
        conns.append(admin)
        for a in actors:
            a.bind(admin)
        for _ in range(clients):
            conns.append(d.connect())
        cl = conns[1:]
        total = clients * per_client
        invs = [[actors[j % neurons].invoke_params(op) for op in ops[j]] for j in range(clients)]
        inv = _loaded(
            d,
            admin,
            [lambda j=j: timed_calls(cl[j], "invoke", invs[j]) for j in range(clients)],
            total,
            probe_interval,
        )
        # the full cycle under the same load shape: fresh ops, pre-signed
        pairs = [
            [
                (
                    actors[j % neurons].submit_params(f"q{j}-{i}"),
                    actors[j % neurons].invoke_params(f"q{j}-{i}"),
                )
                for i in range(per_client)
            ]
            for j in range(clients)
        ]
        paired = before_cycles() if before_cycles is not None else None
        cyc = _loaded(
            d,
            admin,
            [lambda j=j: _cycles(cl[j], pairs[j]) for j in range(clients)],
            total,
            probe_interval,
        )
        after = admin.call("status")
        rss = rss_kib(d.pid) / 1024
        counts = {s["id"]: s["counts"]["succeeded"] for s in after["workers"]}
        return {
            "rate": inv["rate"],
            "submit_rate": submit_rate,
            "lat": inv["lat"],
            "cpu_per_invoke": inv["cpu_per_call"],
            "cpu_share": inv["cpu_share"],
            "client_cpu_share": inv["client_cpu_share"],
            "batches": inv["batches"],
            "mean_batch": inv["mean_batch"],
            "max_batch": inv["max_batch"],
            "status_lat": inv["status_lat"],
            "cycle": cyc,
            "paired": paired,
            "per_worker": counts,
            "rss_mib": rss,
        }
    finally:
        for c in conns:
            c.close()
        d.stop()
        d.cleanup()
