"""The store: every SQL statement of the daemon lives in this package.

- `schema`: the tables, triggers and migrations (``migrate``);
- `writer`: the writer thread, the only connection that writes, with group
  commit;
- `reads`: the readers, on connections opened read-only
  (``PRAGMA query_only``), for the unsigned reads and for recovery;
- `prune`: retention, storage maintenance (tombstones, vacuum, checkpoint);
- later: the loaders of typed records and the applier of the changes the
  daemon's pure core decides.

Outside this package the daemon issues no SQL (a test pins that).
"""
