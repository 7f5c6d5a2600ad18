"""Contract §3.3's op-state table and §2's event kinds about an op, written
out again for the core's tests (not the core's own), shared by the state
machine (test_core_state_machine.py) and the move table's tests
(test_core_moves.py)."""

from __future__ import annotations

from wardd.daemon.core.records import Op
from wardd.protocol import AttemptState, OpState

__all__ = ["ACT", "AT", "EVENT_KINDS", "contract_op_state"]

A = AttemptState
ACT = "echo"
AT = "2026-01-02T03:04:05.678Z"  # the time a receipt's answer is recorded
#: every event kind of contract §2 about an op
EVENT_KINDS = (
    "submitted",
    "prepared",
    "voided",
    "claimed",
    "outcome",
    "marked_unknown",
    "orphan_killed",
    "receipt",
    "reconciled",
    "rebound",
    "consumed",
    "cancelled",
)


def contract_op_state(op: Op, latest: AttemptState | None) -> OpState:
    """contract §3.3's table, written out again here (not the core's own)."""
    if op.cancelled:
        return OpState.CANCELLED
    if op.consumed:
        return OpState.CONSUMED
    table = {
        None: OpState.PENDING,
        A.VOID: OpState.PENDING,
        A.FAILED: OpState.PENDING,
        A.NOT_EXECUTED: OpState.PENDING,
        A.PREPARED: OpState.PREPARED,
        A.RUNNING: OpState.RUNNING,
        A.UNKNOWN: OpState.UNKNOWN,
        A.SUCCEEDED: OpState.RETAINED,
    }
    return table[latest]
