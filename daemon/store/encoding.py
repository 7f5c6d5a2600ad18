"""Small helpers shared by the store and the daemon: time stamps, CBOR
columns, and whether a value can be sent back on the wire."""

from __future__ import annotations

import time
from typing import Any

import cbor2

from wardd.protocol import encode_item

__all__ = ["dec", "enc", "enc_value", "now", "wire_safe"]

# How deep a stored value may sit inside the deepest reply that carries it
# (get_operation: reply → result → attempts → [i] → outcome → value).
REPLY_NESTING = 8


_ALWAYS_WIRE = frozenset({bytes, bool, type(None)})


def wire_safe(value: Any) -> tuple[Any, str | None]:
    """``(value, None)`` if ``value`` can be sent in every reply that embeds
    it; else a placeholder and why (the daemon never stores what it could
    not send back)."""
    if type(value) in _ALWAYS_WIRE:  # what most acts return: nothing to check
        return value, None
    probe: Any = value
    for _ in range(REPLY_NESTING):
        probe = [probe]
    try:
        encode_item(probe)
    except (TypeError, ValueError, OverflowError) as exc:
        why = f"a {type(value).__name__} that is not a wire value: {str(exc)[:200]}"
        return {"omitted": "not_a_wire_value"}, why
    return value, None


def now() -> str:
    """RFC 3339 UTC with milliseconds (the second's text is made once per second)."""
    t = time.time()
    second = int(t)
    global _second, _second_text
    if second != _second:
        _second_text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        _second = second
    return f"{_second_text}.{int((t - second) * 1000):03d}Z"


_second = -1
_second_text = ""


# The CBOR columns (the one definition: the store's applier writes them with
# these, its loaders and reads read them with ``dec``).


def enc(value: Any) -> bytes | None:
    """A CBOR column's bytes; None is stored as NULL (no placement, grant,
    descriptor, evidence, claim info or record data)."""
    return None if value is None else cbor2.dumps(value)


def enc_value(value: Any) -> bytes:
    """An outcome's value column: an act's value is stored as CBOR whatever
    it is, None too (None is a value an act returned)."""
    return cbor2.dumps(value)


def dec(blob: bytes | None) -> Any:
    """A CBOR column's value; NULL is None."""
    return None if blob is None else cbor2.loads(blob)
