"""The shared words of the contract, defined once (contract §2, §3.3, §4, §6).

The daemon, both clients, wardctl and the adapters take these from
`wardd.protocol`: the record states and their wire values, the id and
integer checks of params, the default socket path, the receipt answers and
the paging loop of the reads. Pure: no sockets, no trio, no SQLite (the
default socket path reads the environment it is given).
"""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Mapping
from typing import Any, Final, Literal

import attrs

__all__ = [
    "ATTEMPT_LIST_STATES",
    "DEFAULT_PAGE_LIMIT",
    "ID_PATTERN",
    "MAX_PAGE_LIMIT",
    "MAX_UINT",
    "NEURON_ID_PATTERN",
    "OUTCOME_STATUSES",
    "RECEIPT_ANSWERS",
    "AttemptState",
    "OpState",
    "Pager",
    "PagingError",
    "ProgState",
    "ReceiptAnswer",
    "default_socket_path",
    "is_id",
    "is_neuron_id",
    "is_uint",
]


class AttemptState(enum.StrEnum):
    """An attempt's state (contract §2); the value is the wire and record word."""

    PREPARED = "prepared"
    VOID = "void"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    NOT_EXECUTED = "not_executed"
    UNKNOWN = "unknown"


class OpState(enum.StrEnum):
    """An operation's state (contract §3.3), derived from its latest attempt."""

    PENDING = "pending"
    PREPARED = "prepared"
    RUNNING = "running"
    UNKNOWN = "unknown"
    RETAINED = "retained"
    CONSUMED = "consumed"
    CANCELLED = "cancelled"


class ProgState(enum.StrEnum):
    """A prog's state (contract §3.1): active <-> paused, -> retired -> archived."""

    ACTIVE = "active"
    PAUSED = "paused"
    RETIRED = "retired"
    ARCHIVED = "archived"


#: The states `list_attempts` filters on (contract §4), in the order wardctl offers them.
ATTEMPT_LIST_STATES: Final = (AttemptState.UNKNOWN, AttemptState.RUNNING, AttemptState.PREPARED)
#: The outcome statuses a `reconcile` may record (contract §3.4).
OUTCOME_STATUSES: Final = (
    AttemptState.SUCCEEDED,
    AttemptState.FAILED,
    AttemptState.NOT_EXECUTED,
)

#: An executor receipt's answer about one idempotency key (contract §3.4).
ReceiptAnswer = Literal["executed", "not_executed", "unknown"]
RECEIPT_ANSWERS: Final[frozenset[str]] = frozenset({"executed", "not_executed", "unknown"})

#: The largest unsigned integer a param may carry (a signed 64-bit column holds it).
MAX_UINT: Final = 2**63 - 1
#: An id (op, prog, act tag, reservation): 1-128 characters of ``[A-Za-z0-9._:-]``.
ID_PATTERN: Final = r"[A-Za-z0-9._:-]{1,128}"
#: A neuron id: its Ed25519 public key as 64 lowercase hex digits.
NEURON_ID_PATTERN: Final = r"[0-9a-f]{64}"
_ID = re.compile(ID_PATTERN)
_NEURON_ID = re.compile(NEURON_ID_PATTERN)


def is_uint(value: Any) -> bool:
    """Whether ``value`` is an unsigned integer param: an int (never a bool), 0..`MAX_UINT`."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_UINT


def is_id(value: Any) -> bool:
    """Whether ``value`` is an id (op, prog, act tag): 1-128 characters of ``[A-Za-z0-9._:-]``."""
    return isinstance(value, str) and _ID.fullmatch(value) is not None


def is_neuron_id(value: Any) -> bool:
    """Whether ``value`` is a neuron id: 64 lowercase hex digits (an Ed25519 public key)."""
    return isinstance(value, str) and _NEURON_ID.fullmatch(value) is not None


def default_socket_path(environ: Mapping[str, str] | None = None, uid: int | None = None) -> str:
    """The daemon's default socket (contract §6): ``$XDG_RUNTIME_DIR/wardd/wardd.sock``,
    or ``/tmp/wardd-<uid>/wardd/wardd.sock`` when ``XDG_RUNTIME_DIR`` is unset or
    not absolute. The daemon binds it and the clients connect to it.

    `environ` defaults to the process environment, read at the call (never
    a default argument: ``pydoc`` would print the whole environment, tokens
    included, in the signature)."""
    runtime = (os.environ if environ is None else environ).get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime):
        base = runtime
    else:
        base = f"/tmp/wardd-{os.getuid() if uid is None else uid}"
    return os.path.join(base, "wardd", "wardd.sock")


#: The largest `limit` a paged read takes (contract §4).
MAX_PAGE_LIMIT: Final = 1000
#: The `limit` of a paged read that names none.
DEFAULT_PAGE_LIMIT: Final = 100


class PagingError(ValueError):
    """A paged read's reply breaks the paging rules (a page that is not a map,
    or the same `next` cursor twice, which would loop for ever)."""


@attrs.define
class Pager:
    """The paging loop of a read (contract §4), sans-IO.

    While not `done`, send a request with the params `request()` gives and
    `feed` it the page's result; `items` then holds every item of the read::

        pager = Pager({"neuron": n}, "operations")
        while not pager.done:
            pager.feed(call("list_operations", pager.request()))
    """

    params: Mapping[str, Any]
    key: str
    limit: int = MAX_PAGE_LIMIT
    items: list[Any] = attrs.field(factory=list, init=False)
    done: bool = attrs.field(default=False, init=False)
    _after: Any = attrs.field(default=None, init=False)

    def request(self) -> dict[str, Any]:
        """The params of the next page's request."""
        params = dict(self.params, limit=self.limit)
        if self._after is not None:
            params["after"] = self._after
        return params

    def feed(self, page: Any) -> None:
        """Take one page's result: its items, and its `next` cursor (none: the last page)."""
        if self.done:
            raise RuntimeError("the read is complete")
        if not isinstance(page, Mapping):
            raise PagingError("a page is not a map")
        self.items.extend(page.get(self.key) or [])
        following = page.get("next")
        if following is None:
            self.done = True
        elif following == self._after:
            raise PagingError("the same page cursor came twice")
        else:
            self._after = following
