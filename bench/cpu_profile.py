"""Where the daemon's CPU goes during sequential guarded dispatch: cProfile on every thread.

    .venv/bin/python bench/cpu_profile.py            # 2,000 invokes of echo, top 25 per thread
    .venv/bin/python bench/cpu_profile.py -n 5000 --top 40

A real daemon (``_profiled.py``: ``wardd run`` with one cProfile per
thread, on each thread's CPU clock) serves one blocking client: ops submitted and requests signed
beforehand, then ``n`` invokes of ``echo``, as in ``run.py``'s sequential
section. After a clean stop, each thread's profile is printed: the
functions by own time, then by cumulative time, with per-invoke figures
(total of the thread ÷ n). cProfile roughly doubles the cost of Python
function calls, so read the shares, not the absolute figures; without
profiling, ``run.py`` gives the daemon's real CPU per invoke.
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
    p.add_argument("--save", default=None, metavar="DIR",
                   help="keep the .prof files here (for pstats, snakeviz, ...)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="wardd-profile-") as tmp:
        out = Path(tmp) / "prof"
        d = Daemon(Path(tmp) / "d", workers=args.workers,
                   command=[sys.executable, str(HERE / "_profiled.py"), str(out), "--"])
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
        print(f"{args.n} sequential invokes in {wall:.2f} s under cProfile "
              f"({args.n / wall:,.0f}/s; the same number of submits ran before them)")
        for path in sorted(out.glob("*.prof")):
            st = pstats.Stats(str(path))
            total = st.total_tt  # type: ignore[attr-defined]
            if total < 0.05:
                continue
            print(f"\n== thread {path.stem}: {total:.2f} s of CPU "
                  f"({total / args.n * 1e6:.0f} µs per invoke, its submit included)")
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


if __name__ == "__main__":
    sys.exit(main())
