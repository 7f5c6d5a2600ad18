"""Run ``wardd run`` with cProfile on every thread (used by ``cpu_profile.py``).

    python _profiled.py OUT_DIR -- run --config X
    python _profiled.py --stretches OUT_DIR -- run --config X

With ``--stretches`` nothing is profiled: a trio instrument times each
stretch of the event loop between two waits on ``epoll`` (one trio batch:
every task that was ready runs to its next await), in wall time and in the
loop thread's CPU time, and writes them to ``OUT_DIR/stretches-<pid>.json``
at the stop. A request that arrives during a stretch waits at least for its
end (``cpu_profile.py --stretches``).

Each thread (the event loop, the writer, the workers, trio's helper
threads) gets its own ``cProfile.Profile``, started by a ``threading``
profile hook on the thread's first event; at a clean stop each is dumped to
``OUT_DIR/<thread name>-<n>.prof``. The clock is the thread's own CPU time
(``time.thread_time``), so a thread blocked on a queue or in ``epoll``
counts nothing. cProfile slows Python-heavy code about
twofold: the figures rank where the time goes, they are not the daemon's
speed.
"""

from __future__ import annotations

import cProfile
import itertools
import sys
import threading
import time
from pathlib import Path
from typing import Any

_profiles: list[tuple[str, cProfile.Profile]] = []
_lock = threading.Lock()


def _start_thread_profile(frame: Any, event: str, arg: Any) -> None:
    sys.setprofile(None)
    prof = cProfile.Profile(time.thread_time)
    with _lock:
        _profiles.append((threading.current_thread().name, prof))
    prof.enable()


class StretchMeter:
    """A trio instrument: the event loop's stretches between two ``epoll`` waits."""

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self._t0: float | None = None
        self._c0 = 0.0

    def after_io_wait(self, timeout: float) -> None:
        self._t0, self._c0 = time.perf_counter(), time.thread_time()

    def before_io_wait(self, timeout: float) -> None:
        if self._t0 is not None:
            self.wall.append(time.perf_counter() - self._t0)
            self.cpu.append(time.thread_time() - self._c0)


def stretches(out: Path, args: list[str]) -> int:
    import json
    import os

    import trio

    from wardd.daemon.cli import main as wardd_main

    meter = StretchMeter()
    run = trio.run

    def instrumented(*a: Any, **kw: Any) -> Any:
        kw["instruments"] = [*kw.get("instruments", ()), meter]
        return run(*a, **kw)

    trio.run = instrumented  # type: ignore[assignment]
    try:
        return wardd_main(args)
    finally:
        (out / f"stretches-{os.getpid()}.json").write_text(
            json.dumps({"wall": meter.wall, "cpu": meter.cpu})
        )


def main() -> int:
    if sys.argv[1] == "--stretches":
        out = Path(sys.argv[2])
        out.mkdir(parents=True, exist_ok=True)
        return stretches(out, sys.argv[4:] if sys.argv[3:4] == ["--"] else sys.argv[3:])
    out = Path(sys.argv[1])
    args = sys.argv[3:] if sys.argv[2:3] == ["--"] else sys.argv[2:]
    out.mkdir(parents=True, exist_ok=True)
    from wardd.daemon.cli import main as wardd_main

    threading.setprofile(_start_thread_profile)
    main_prof = cProfile.Profile(time.thread_time)
    _profiles.append(("event-loop", main_prof))
    main_prof.enable()
    try:
        return wardd_main(args)
    finally:
        main_prof.disable()
        counter = itertools.count()
        with _lock:
            for name, prof in _profiles:
                prof.create_stats()
                prof.dump_stats(out / f"{name}-{next(counter)}.prof")


if __name__ == "__main__":
    sys.exit(main())
