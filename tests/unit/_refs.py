"""One `AttemptRef` for the unit tests that need a dispatch to point at.

Tests never import each other (tests/unit/test_layout.py); the fixture three
token and call tests shared lives here instead.
"""

from __future__ import annotations

from typing import Any

from wardd.daemon.core.records import AttemptRef


def attempt_ref(attempt_id: int = 41, **fields: Any) -> AttemptRef:
    """An `AttemptRef` of one signed op's first attempt; ``fields`` override."""
    base: dict[str, Any] = dict(
        attempt_id=attempt_id,
        neuron="n" * 64,
        neuron_id=1,
        op="op",
        op_id=1,
        attempt=1,
        act="echo",
        args=b"",
        epoch=1,
        policy_version=1,
        placement_generation=1,
        digest="d",
        worker="w0",
    )
    base.update(fields)
    return AttemptRef(**base)
