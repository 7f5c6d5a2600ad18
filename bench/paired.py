"""Before and after, paired in one run: the daemon CPU per sequential ``invoke``
of an earlier tree against this one (``make bench-paired BEFORE=<commit>``).

Both daemons run at once, each on a temp dir of its own, driven by this
tree's blocking client (the wire is the same). The repetitions alternate,
before, after, before, ...: a machine that gets busier halfway through the
run weighs on both sides alike, which two separate runs cannot promise.
Each repetition submits ``n`` ops, then times their ``invoke`` and reads the
daemon's CPU (user+sys, all threads, from ``/proc``) around it, as section 2
of ``run.py`` does.

    python bench/paired.py --before /path/to/old/tree/.venv/bin/python
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import _dispatch  # bench/ is on the path: this file runs as a script
from _wardd import Actor, Daemon


def side(root: Path, python: str) -> tuple[Daemon, Any, Actor]:
    d = Daemon(root, workers=2, command=[python, "-m", "wardd.daemon.cli"])
    d.start()
    c = d.connect()
    return d, c, Actor(c)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", required=True, help="the python of the earlier tree's venv")
    ap.add_argument("--after", default=sys.executable, help="(default: this python)")
    ap.add_argument("--reps", type=int, default=8, help="repetitions per side (8)")
    ap.add_argument("-n", type=int, default=2000, help="invokes per repetition (2,000)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="wardd-paired-") as tmp:
        sides = {
            "before": side(Path(tmp, "before"), args.before),
            "after": side(Path(tmp, "after"), args.after),
        }
        cpu: dict[str, list[float]] = {k: [] for k in sides}
        rate: dict[str, list[float]] = {k: [] for k in sides}
        try:
            for rep in range(args.reps):
                for name, (d, c, actor) in sides.items():
                    o = _dispatch.sequential(d, actor, c, args.n, rep)
                    cpu[name].append(o["cpu_per_invoke"] * 1e6)
                    rate[name].append(o["rate"])
        finally:
            for d, c, _ in sides.values():
                c.close()
                d.stop()
                d.cleanup()
    print(f"paired: {args.reps} repetitions per side, {args.n} invokes each, alternating")
    for name in sides:
        print(
            f"  {name:<6} daemon CPU per invoke median {statistics.median(cpu[name]):7.1f} µs"
            f" (min {min(cpu[name]):.1f}, max {max(cpu[name]):.1f});"
            f" invokes/s median {statistics.median(rate[name]):.0f}"
        )
    ratios = [a / b for a, b in zip(cpu["after"], cpu["before"], strict=True)]
    print(
        f"  after ÷ before, per pair: median {statistics.median(ratios):.3f}"
        f" (min {min(ratios):.3f}, max {max(ratios):.3f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
