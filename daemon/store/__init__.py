"""The store: every SQL statement of the daemon.

The schema and its migrations, the writer thread, the read-only readers,
the loaders that turn rows into the core's typed records, and the applier
that writes a decision's changes.
"""
