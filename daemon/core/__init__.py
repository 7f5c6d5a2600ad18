"""The pure core: every rule of contract §3 as a function of records.

Each decision takes typed records (:mod:`.records`) and the request, and
returns a :class:`~.changes.Decision` (the changes to write, then the reply)
or raises the :class:`~wardd.protocol.WarddError` that refuses the request
with nothing written. Nothing here imports ``sqlite3``, ``trio``,
``threading`` or does I/O (a test pins that): the store loads the records
and applies the changes, in one writer unit.

- :mod:`.states`: the attempt move table and the op-state projection;
- :mod:`.lookup`: the first checks (neuron, op or tombstone, prog, grant);
- :mod:`.attempts`: prepare's checks, the claim, outcomes, voids, the
  start-up mark, receipts, abort's checks;
- :mod:`.ops`: submit, cancel, consume, rebind, reconcile;
- :mod:`.root`: registration, placement, epoch, grants, prog states;
- :mod:`.budget`: reservations, settling, exhaustion, the step limit.
"""
