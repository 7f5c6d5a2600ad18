"""Where the daemon's CPU goes during sequential guarded dispatch: cProfile on every thread.

    .venv/bin/python bench/cpu_profile.py            # 2,000 invokes of echo, top 25 per thread
    .venv/bin/python bench/cpu_profile.py -n 5000 --top 40
    .venv/bin/python bench/cpu_profile.py --stretches --workers 4   # no profile: see below

A real daemon (``_profiled.py``: ``wardd run`` with one cProfile per
thread, on each thread's CPU clock) serves one blocking client: ops submitted and requests signed
beforehand, then ``n`` invokes of ``echo``, as in ``run.py``'s sequential
section. After a clean stop, each thread's profile is printed: the
functions by own time, then by cumulative time, with per-invoke figures
(total of the thread ÷ n). cProfile roughly doubles the cost of Python
function calls, so read the shares, not the absolute figures; without
profiling, ``run.py`` gives the daemon's real CPU per invoke.

``--stretches`` profiles nothing: it runs ``run.py``'s concurrent load (16
clients over 4 neurons, submit+invoke cycles, a prober process calling
``status`` every 5 ms) on a daemon whose event loop is timed between two
waits on ``epoll`` (``_profiled.py --stretches``), and prints those
stretches' percentiles (wall and loop CPU) beside ``status``'s latency and
the daemon's CPU: how much of a ``status`` tail is the loop being busy
with other requests, and how much is waiting for a core or the GIL.
"""

from __future__ import annotations

import argparse
import io
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _wardd import Actor, Daemon  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("-n", type=int, default=2000, help="invokes (default 2000)")
    p.add_argument("--top", type=int, default=25, help="functions per thread and order")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument(
        "--save",
        default=None,
        metavar="DIR",
        help="keep the .prof files here (for pstats, snakeviz, ...)",
    )
    p.add_argument(
        "--stretches",
        action="store_true",
        help="time the event loop's stretches under the concurrent load instead",
    )
    p.add_argument("--per-client", type=int, default=100, help="cycles per client (--stretches)")
    args = p.parse_args()
    if args.stretches:
        return stretches(args.workers, args.per_client)
    with tempfile.TemporaryDirectory(prefix="wardd-profile-") as tmp:
        out = Path(tmp) / "prof"
        d = Daemon(
            Path(tmp) / "d",
            workers=args.workers,
            command=[sys.executable, str(HERE / "_profiled.py"), str(out), "--"],
        )
        try:
            d.start()
            c = d.connect()
            actor = Actor(c)
            ops = [f"p-{i}" for i in range(args.n)]
            for op in ops:
                c.call("submit", actor.submit_params(op))
            invs = [actor.invoke_params(op) for op in ops]
            # the set-up above is profiled too: reset by counting from here on
            t0 = time.perf_counter()
            for params in invs:
                c.call("invoke", params)
            wall = time.perf_counter() - t0
            c.close()
        finally:
            d.stop()
            d.cleanup()
        if args.save:
            Path(args.save).mkdir(parents=True, exist_ok=True)
            for path in out.glob("*.prof"):
                shutil.copy(path, Path(args.save) / path.name)
        print(
            f"{args.n} sequential invokes in {wall:.2f} s under cProfile "
            f"({args.n / wall:,.0f}/s; the same number of submits ran before them)"
        )
        for path in sorted(out.glob("*.prof")):
            st = pstats.Stats(str(path))
            total = st.total_tt  # type: ignore[attr-defined]
            if total < 0.05:
                continue
            print(
                f"\n== thread {path.stem}: {total:.2f} s of CPU "
                f"({total / args.n * 1e6:.0f} µs per invoke, its submit included)"
            )
            for order in ("tottime", "cumulative"):
                buf = io.StringIO()
                pstats.Stats(str(path), stream=buf).sort_stats(order).print_stats(args.top)
                lines = buf.getvalue().splitlines()
                start = next(i for i, line in enumerate(lines) if "ncalls" in line)
                print(f"   -- by {order}")
                for line in lines[start:]:
                    if line.strip():
                        print("   " + line.replace(str(HERE.parent) + "/", ""))
    return 0


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def stretches(workers: int, per_client: int) -> int:
    import functools
    import json

    import _dispatch

    with tempfile.TemporaryDirectory(prefix="wardd-stretches-") as tmp:
        out = Path(tmp) / "out"
        cmd = [sys.executable, str(HERE / "_profiled.py"), "--stretches", str(out), "--"]
        _dispatch.Daemon = functools.partial(Daemon, command=cmd)  # type: ignore[misc]
        r = _dispatch.concurrent(
            Path(tmp),
            workers=workers,
            clients=16,
            neurons=4,
            per_client=per_client,
            probe_interval=0.005,
            rep=0,
        )
        # the daemon is restarted once: the last file covers the timed phases
        last = max(out.glob("stretches-*.json"), key=lambda f: f.stat().st_mtime)
        got = json.loads(last.read_text())
    ms = 1e3
    for phase, res in (("invoke", r), ("submit+invoke cycles", r["cycle"])):
        st = res["status_lat"]
        print(
            f"{phase}, workers={workers}: {res['rate']:,.0f}/s, daemon busy "
            f"{res['cpu_share']:.2f} cores; status p50 {_pct(st, 0.5) * ms:.2f} ms, "
            f"p99 {_pct(st, 0.99) * ms:.2f} ms ({len(st)} calls)"
        )
    wall, cpu = got["wall"], got["cpu"]
    busy = [w for w in wall if w > 20e-6]
    print(
        f"event loop, both phases and the set-up: {len(wall):,} stretches between epoll waits,"
        f" {len(busy):,} longer than 20 µs"
    )
    for label, xs in (
        ("wall", busy),
        ("loop CPU", [c for w, c in zip(wall, cpu, strict=True) if w > 20e-6]),
    ):
        print(
            f"   {label:8}: p50 {_pct(xs, 0.5) * ms:.3f} ms, p90 {_pct(xs, 0.9) * ms:.3f} ms, "
            f"p99 {_pct(xs, 0.99) * ms:.3f} ms, p99.9 {_pct(xs, 0.999) * ms:.3f} ms, "
            f"max {max(xs) * ms:.3f} ms"
        )
    late = sum(1 for w, c in zip(wall, cpu, strict=True) if w - c > 1e-3)
    print(
        f"   stretches whose wall time exceeds their CPU by > 1 ms (waiting for a core or "
        f"the GIL): {late:,}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
