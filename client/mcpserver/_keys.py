"""Which op a ``tools/call`` is: its idempotency key, and its args (pure).

The op id is the idempotency key, taken in this order:

1. ``params.idempotencyKey`` (the field MCP's idempotency proposal adds);
2. ``params._meta["wardd/idempotency_key"]`` (for hosts that can only set ``_meta``);
3. for a tool with ``key = "arguments"``: a digest of the tool, its canonical
   arguments and ``params._meta["wardd/scope"]`` when the host gives one;
4. else a fresh random op id (the call is still at most once; a retry of it
   is a new op unless it passes that op id back as its key).

A key that is a valid op id (1-128 characters of ``[A-Za-z0-9._:-]``) is the
op id itself, so the op id a result names can be passed back as the key; any
other non-empty string (a space, a slash, over 128 characters) is mapped to
``key-`` and the SHA-256 of its UTF-8 bytes, the same op for the same key.

The act's args are the canonical JSON of the arguments (`canonical_json`,
the one `GuardedTool` uses): UTF-8, keys sorted, no whitespace, an
integral number as an integer (``1200.0`` and ``1.2e3`` are ``1200``), so
the same arguments are the same op content, and other arguments under the
same key are ``op_conflict``.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs

from wardd.protocol import is_id

from .._tools import canonical_json

__all__ = [
    "KEY_META",
    "SCOPE_META",
    "KeyRefused",
    "OpKey",
    "canonical_json",
    "choose_op",
    "random_op",
]

KEY_META: Final = "wardd/idempotency_key"
SCOPE_META: Final = "wardd/scope"

#: Where the op id came from (``_meta["wardd/key"]`` of every result).
FROM_PARAMS: Final = "idempotencyKey"
FROM_META: Final = KEY_META
FROM_ARGUMENTS: Final = "arguments"
FROM_RANDOM: Final = "random"


class KeyRefused(ValueError):
    """The call's key or scope is not a non-empty string; nothing was sent."""


@attrs.frozen
class OpKey:
    """The op a call runs as, and where its id came from."""

    op: str
    source: str  # FROM_PARAMS, FROM_META, FROM_ARGUMENTS or FROM_RANDOM


def random_op() -> str:
    """A fresh op id (128 random bits)."""
    return "call-" + secrets.token_hex(16)


def choose_op(
    tool: str,
    key_from_arguments: bool,
    arguments: Mapping[str, Any],
    params_key: Any,
    meta: Mapping[str, Any] | None,
    fresh: Callable[[], str] = random_op,
) -> OpKey:
    """The op id of one call, by the rules in the module docstring."""
    meta = meta or {}
    if params_key is not None:
        return OpKey(_op_of_key(params_key, "idempotencyKey"), FROM_PARAMS)
    if meta.get(KEY_META) is not None:
        return OpKey(_op_of_key(meta[KEY_META], f'_meta["{KEY_META}"]'), FROM_META)
    if key_from_arguments:
        scope = meta.get(SCOPE_META)
        if scope is not None and (not isinstance(scope, str) or not scope):
            raise KeyRefused(f'_meta["{SCOPE_META}"] must be a non-empty string')
        material = canonical_json({"arguments": dict(arguments), "scope": scope, "tool": tool})
        return OpKey("args-" + hashlib.sha256(material).hexdigest(), FROM_ARGUMENTS)
    return OpKey(fresh(), FROM_RANDOM)


def _op_of_key(key: Any, where: str) -> str:
    if not isinstance(key, str) or not key:
        raise KeyRefused(f"{where} must be a non-empty string")
    if is_id(key):
        return key
    return "key-" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
