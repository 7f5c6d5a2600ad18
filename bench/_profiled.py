"""Run ``wardd run`` with cProfile on every thread (used by ``cpu_profile.py``).

    python _profiled.py OUT_DIR -- run --config X

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


def main() -> int:
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
