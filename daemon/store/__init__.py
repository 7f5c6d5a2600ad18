"""The store: every SQL statement of the daemon lives in this package.

- `schema`: the tables, triggers and migrations (``migrate``);
- `writer`: the writer thread, the only connection that writes, with group
  commit;
- `reads`: the readers, on a connection opened read-only
  (``PRAGMA query_only``): the unsigned reads, the signed requests' neuron
  check, and recovery's reads (receipt candidates, orphan suspects);
- `boots`: the boot records (this start, the previous one, a clean stop);
- `prune`: retention, storage maintenance (tombstones, vacuum, checkpoint);
- `load`: the loaders, rows in, the core's typed records out;
- `apply`: the applier, a decision's changes in, SQL out;
- `marks`: the start's marks of thousands of open attempts, read and
  written set-wise (one statement per shape), as `apply` would write the
  core's decisions one by one;
- `counters`: the counts ``status`` shows, kept by the writer in memory
  (seeded when the store opens, added to by each committed batch).

Outside this package the daemon issues no SQL: tests/unit/test_layout.py
pins that.
"""
