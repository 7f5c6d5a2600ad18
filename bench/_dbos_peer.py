"""The peer: DBOS Transact for Python on its SQLite system database.

Run by ``_dbos.py`` with the bench's own DBOS venv (never the project's):

    python _dbos_peer.py DIR STEPS WORKFLOWS REPS JOURNAL
    python _dbos_peer.py DIR serve JOURNAL

The second form launches DBOS once, prints ``ready`` and then runs one
repetition per ``rep STEPS WORKFLOWS`` line on stdin (one JSON line each;
WORKFLOWS may be 0, then only steps are timed),
until ``quit``: the bench then interleaves the peer's repetitions with
wardd's, so that both are measured under the same conditions.

JOURNAL is ``wal`` (the file is created in WAL mode before DBOS opens it:
the fair comparison) or ``default`` (DBOS's own rollback
journal). Prints one JSON line: steps/s and one-step workflows/s per
repetition, and the journal mode and ``synchronous`` level DBOS ran with.
Nothing is contacted but the SQLite file: no conductor key, no OTLP.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import sys
import time


def main() -> int:
    serve = sys.argv[2] == "serve"
    if serve:
        root, journal = sys.argv[1], sys.argv[3]
        steps = workflows = reps = 0
    else:
        root, steps, workflows, reps, journal = (
            sys.argv[1],
            int(sys.argv[2]),
            int(sys.argv[3]),
            int(sys.argv[4]),
            sys.argv[5],
        )
    path = os.path.join(root, f"dbos-{journal}.sqlite")
    if journal == "wal":
        c = sqlite3.connect(path)
        assert c.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
        c.close()
    os.environ.pop("DBOS_CONDUCTOR_KEY", None)
    logging.disable(logging.WARNING)

    from dbos import DBOS, DBOSConfig

    config: DBOSConfig = {
        "name": "wardd-bench",
        "system_database_url": f"sqlite:///{path}",
        "log_level": "ERROR",
        "enable_otlp": False,
    }
    DBOS(config=config)

    @DBOS.step()
    def noop() -> None:
        return None

    @DBOS.workflow()
    def many(n: int) -> int:
        for _ in range(n):
            noop()
        return n

    @DBOS.workflow()
    def one() -> None:
        noop()

    DBOS.launch()
    try:
        many(10)  # warm up: tables, statement caches
        one()
        step_rates, wf_rates = [], []

        def rep(steps: int, workflows: int) -> None:
            t = time.perf_counter()
            many(steps)
            step_rates.append(steps / (time.perf_counter() - t))
            t = time.perf_counter()
            for _ in range(workflows):
                one()
            wf_rates.append(workflows / (time.perf_counter() - t) if workflows else 0.0)

        if serve:
            print("ready", flush=True)
            for line in sys.stdin:
                words = line.split()
                if not words or words[0] != "rep":
                    break
                rep(int(words[1]), int(words[2]))
                print(json.dumps({"steps": step_rates[-1], "workflows": wf_rates[-1]}), flush=True)
        else:
            for _ in range(reps):
                rep(steps, workflows)
    finally:
        DBOS.destroy()
    c = sqlite3.connect(path)
    mode = c.execute("PRAGMA journal_mode").fetchone()[0]
    sync = c.execute("PRAGMA synchronous").fetchone()[0]  # a new connection's default
    c.close()
    import dbos

    print(
        json.dumps(
            {
                "steps": step_rates,
                "workflows": wf_rates,
                "journal_mode": mode,
                "synchronous": {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}.get(sync),
                "version": getattr(dbos, "__version__", None) or _version(),
            }
        )
    )
    return 0


def _version() -> str | None:
    try:
        from importlib.metadata import version

        return version("dbos")
    except Exception:  # noqa: BLE001
        return None


if __name__ == "__main__":
    sys.exit(main())
