"""The start's orphan kill: the programs an earlier boot left running (contract §3.6).

:mod:`~wardd.daemon.life.orphans` finds them (``/proc``) and signals their
groups; :class:`OrphanKill` runs the kill in its order, before recovery
marks anything else or serves: the groups are stopped, the fact is
committed (:func:`~wardd.daemon.life.recovery_units.record_orphans`), then
they are killed and waited for.
"""

from __future__ import annotations

import os
from typing import Any

import structlog
import trio

from wardd.adapters._hold import hold

from ..store.attempt_reads import AttemptReads
from ..store.writer import Writer
from .orphans import (
    any_marked,
    find_orphans,
    find_servers,
    kill_groups,
    stop_groups,
    wait_gone,
)
from .recovery_units import record_orphans

__all__ = ["HOLD_ENV", "OrphanKill"]

log = structlog.get_logger("wardd.recovery")
ORPHAN_EXIT_WAIT_S = 5.0  # a SIGKILLed group is gone well within this
# the test hook (adapters/_hold.py): a start waits at `orphans_recorded` (the
# orphans stopped and their kill committed, not yet killed) and at
# `orphans_killed` (killed, the other marks not yet committed)
HOLD_ENV = "WARDD_TEST_RECOVERY_HOLD"


class OrphanKill:
    """Kills, once at start, what the claimed calls of earlier boots left running."""

    def __init__(self, writer: Writer, reads: AttemptReads, boot: str) -> None:
        self._writer = writer
        self._reads = reads
        self._boot = boot
        self._hold = os.environ.get(HOLD_ENV) or None  # the test hook (HOLD_ENV)

    async def run(self, marks: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[int]:
        """Kill what an earlier boot's claimed calls left running (``orphans``):
        their ``cli`` programs and the ``mcp`` servers of their boots. Their
        groups are stopped, the fact committed (``record_orphans``, which marks
        their attempts and appends to ``marks``), then they are killed. The
        attempt ids marked."""
        # no process carries a key (the usual start): no claimed call to list
        if not await trio.to_thread.run_sync(any_marked):
            return []
        calls = self._reads.claimed_calls_of_earlier_boots(self._boot)
        by_key = {c.key: c for c in calls}
        if not by_key:
            return []
        wanted = {k: c.boot for k, c in by_key.items()}  # ours: the key and its claim's boot
        found = await trio.to_thread.run_sync(find_orphans, wanted)
        servers = await trio.to_thread.run_sync(find_servers, {c.boot for c in calls})
        # stopped first: from here on an orphan does nothing until it is killed
        programs = {key: pids for key, pids in found.items() if stop_groups(pids)}
        served = {ab: pids for ab, pids in servers.items() if stop_groups(pids)}
        ids = {by_key[key].attempt_id for key in programs}
        ids |= {c.attempt_id for c in calls if (c.act, c.boot) in served}
        if not ids:
            return []
        marked: list[int] = await self._writer.run(record_orphans(self._boot, ids, marks))
        await self._held("orphans_recorded")
        for key, pids in programs.items():
            call = by_key[key]
            await self._kill_logged(pids, neuron=call.neuron, op=call.op, attempt=call.attempt)
        for (act, boot), pids in served.items():
            await self._kill_logged(pids, act=act, boot=boot)
        await self._held("orphans_killed")
        return marked

    async def _held(self, point: str) -> None:
        """The test hook (``HOLD_ENV``): nothing unless a test named a directory."""
        if self._hold is not None:
            await trio.to_thread.run_sync(hold, self._hold, point)

    async def _kill_logged(self, pids: list[int], **where: Any) -> bool:
        """Kill the groups of ``pids`` (stopped, their kill recorded) and wait
        for them gone (killed means gone before anything else is marked or
        served); whether any was killed."""
        groups = kill_groups(pids)
        if not groups:
            return False
        left = await trio.to_thread.run_sync(wait_gone, pids, ORPHAN_EXIT_WAIT_S)
        log.warning(
            "orphan_killed",
            **where,
            pids=pids,
            groups=groups,
            **({"still_exiting": left} if left else {}),
        )
        return True
