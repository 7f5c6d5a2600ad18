"""The bench's summary: the performance targets' table, its verdicts, and the raw reference loop."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import _raw  # noqa: E402
import run  # noqa: E402
from _common import Results  # noqa: E402

# the targets table, in its order; then the rows printed below it
ROWS = [
    "cpu",
    "wal_pages",
    "seq_dbos",
    "conc_dbos",
    "call_cpu",
    "call_seq_dbos",
    "call_conc_dbos",
    "prune_large",
    "prune_backlog",
    "prune_p99",
    "status_w2",
    "status_w4",
    "status_1m",
    "recovery",
]
KEPT = ["engine", "seq_raw4", "conc_raw4", "rss", "tombstone", "metrics", "traces"]


def _results(**over: float) -> Results:
    """Figures of a run whose every paired ratio and value is given by ``over``."""
    R = Results()
    fig = {
        "seq.cpu_us": 600.0,
        "engine.ratio": 0.7,
        "seq.wal_pages": 5.0,
        "seq.raw4_ratio": 0.5,
        "seq.dbos_cycle_ratio": 1.8,
        "conc.w4.raw4_ratio": 1.0,
        "conc.w4.dbos_ratio": 1.5,
        "recovery.ready_s": 0.8,
        "rss.conns_mib": 50.0,
        "conc.w2.cycle": 100.0,
        "conc.w4.cycle": 200.0,
        "call.cpu_us": 600.0,
        "call.seq_dbos_ratio": 2.0,
        "call.w4.dbos_ratio": 1.2,
        "call.w4.conc": 300.0,
    }
    fig |= {"prune.large_s": 5.0, "prune.backlog_s": 25.0}
    fig.update({k.replace("__", "."): v for k, v in over.items()})
    for key, x in fig.items():
        if key.startswith("prune."):  # the prune section's figures are single values
            R.value(key, x)
        else:
            R.stat(key, [x])
    R.value("conc.best_workers", 4)
    R.value("call.best_workers", 4)
    R.value("conc.w2.cycle_status_p99_ms", 4.0)
    R.value("conc.w4.cycle_status_p99_ms", 3.0)
    R.value("status1m.w2.cycle_status_p99_ms", 3.5)
    R.value("status1m.w4.cycle_status_p99_ms", 4.0)
    R.value("recovery.db", {"events": 1_000_000, "in_flight": 10_000})
    R.value("prune.large_n", 2000)
    R.value("prune.backlog_n", 100_000)
    R.value("prune.conc_during_p99_ms", 6.0)
    R.value("prune.conc_after_p99_ms", 4.0)
    return R


def test_summary_prints_the_target_rows_in_order(capsys: pytest.CaptureFixture[str]) -> None:
    """Every row of the targets table is printed once, in its order, with its verdict."""
    rows = run.summary(_results())
    out = capsys.readouterr().out
    assert [t.key for t in run.TARGETS] == ROWS
    assert [t.key for t in run.EXTRA_TARGETS] == KEPT
    targets, kept = out.split("not part of the performance targets' table:")
    at = [targets.index(rows[k]["figure"] + ":") for k in ROWS]
    assert at == sorted(at)
    assert all(rows[k]["verdict"] == "HOLDS" and rows[k]["in_targets"] for k in ROWS)
    assert targets.count("[HOLDS ]") == len(ROWS)
    assert all(rows[k]["figure"] + ":" in kept and not rows[k]["in_targets"] for k in KEPT)


def test_every_row_says_how_its_value_is_measured() -> None:
    """Each row of the table is data: a unique key, a comparison, and a value
    function whose docstring says how the figure is measured."""
    table = run.TARGETS + run.EXTRA_TARGETS
    assert len({t.key for t in table}) == len(table)
    assert all(t.cmp in (">=", "<=") and t.target > 0 for t in table)
    assert all((t.value.__doc__ or "").strip() for t in table)


def test_values_at_their_target_hold_and_past_it_miss() -> None:
    """A value equal to its target holds; one just past it misses, for ≥ and ≤ rows alike."""
    rows = run.summary(_results(engine__ratio=0.69, seq__cpu_us=701.0))
    assert rows["engine"]["verdict"] == "MISSED"
    assert rows["cpu"]["verdict"] == "MISSED"
    assert rows["seq_raw4"]["verdict"] == "HOLDS"
    rows = run.summary(
        _results(conc__w4__raw4_ratio=0.99, recovery__ready_s=0.81, prune__backlog_s=25.1)
    )
    assert rows["conc_raw4"]["verdict"] == "MISSED"
    assert rows["recovery"]["verdict"] == "MISSED"
    assert rows["prune_backlog"]["verdict"] == "MISSED"
    assert rows["prune_large"]["verdict"] == "HOLDS"


def test_rss_target_is_in_decimal_megabytes() -> None:
    """RSS is compared in MB of 10^6 bytes: 57.3 MiB is 60.08 MB and misses 60 MB."""
    rows = run.summary(_results(rss__conns_mib=57.3))
    assert rows["rss"]["value"] == pytest.approx(57.3 * 2**20 / 1e6)
    assert rows["rss"]["verdict"] == "MISSED"


def test_rows_without_their_section_are_na() -> None:
    """A run without its sections reports each row as n/a rather than a verdict."""
    rows = run.summary(Results())
    assert all(rows[k]["verdict"] == "n/a" and rows[k]["value"] is None for k in ROWS)


def test_raw_reference_loop_commits_four_rows_per_cycle(tmp_path: Path) -> None:
    """The raw reference loop inserts four rows per cycle, one per commit, in a WAL database."""
    db = tmp_path / "raw4.db"
    rate, lat = _raw.cycle_loop(db, 0.05, commits=4)
    assert rate > 0 and lat
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == 4 * len(lat)
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()
