"""What each group of handlers may use: never the daemon, never more than the group needs.

Each method of the table (:data:`~wardd.daemon.dispatch.handlers.METHODS`)
declares its group (:class:`Uses`); the router hands its handler that
group's value and nothing else. The daemon builds one :class:`Services`
holding every group (:mod:`~wardd.daemon.life.app`).
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from wardd.adapters import Adapter

from ..core.records import BootContext
from ..life.recovery import Recovery
from ..store.reads import Reads
from ..store.writer import Writer
from .dispatcher import Dispatcher
from .tokens import Tokens
from .voids import Voids
from .workers import WorkerPool

__all__ = ["Aborts", "Attempts", "Introspection", "Receipts", "Services", "Uses", "Writes"]


class Uses(enum.Enum):
    """The group a method's handler belongs to: the value it is handed."""

    WRITES = "writes"  # :class:`Writes`
    ATTEMPTS = "attempts"  # :class:`Attempts`
    ABORTS = "aborts"  # :class:`Aborts`
    RECEIPTS = "receipts"  # :class:`Receipts`
    READS = "reads"  # the store's :class:`~wardd.daemon.store.reads.Reads`
    DAEMON = "daemon"  # :class:`Introspection`


@attrs.frozen(eq=False)
class Writes:
    """The signed writes that are one writer unit each (contract §3.1, §3.3, §3.4)."""

    writer: Writer
    ctx: BootContext  # ``submit``'s act bounds
    descriptors: list[dict[str, Any]]  # ``bind_placement`` admits one of these
    registered: Callable[[str], None]  # told each neuron whose ``register_neuron`` committed


@attrs.frozen(eq=False)
class Attempts:
    """``prepare``, ``execute``, ``invoke``, ``call`` and ``manual_take`` (contract §3.2)."""

    writer: Writer
    reads: Reads  # the checks on arrival
    ctx: BootContext
    pool: WorkerPool  # whether a worker is this daemon's
    tokens: Tokens
    voids: Voids
    stopping: threading.Event  # set once the daemon's stop has begun


@attrs.frozen(eq=False)
class Aborts:
    """``abort`` (contract §3.8): the call's adapter, its worker, its answer."""

    reads: Reads
    adapters: Mapping[str, Adapter]
    pool: WorkerPool
    dispatcher: Dispatcher


@attrs.frozen(eq=False)
class Receipts:
    """``reconcile`` and ``check_receipts`` (contract §3.4)."""

    writer: Writer
    recovery: Recovery


@attrs.frozen(eq=False)
class Introspection:
    """``status``, ``metrics`` and ``list_workers``: what the daemon says of itself."""

    descriptors: list[dict[str, Any]]
    digests: Sequence[str]
    status: Callable[[], dict[str, Any]]  # the daemon's components' snapshots, merged
    metrics_text: Callable[[], str]  # every series in the Prometheus text format


@attrs.frozen(eq=False)
class Services:
    """Every group's value; the router hands each handler its own."""

    writes: Writes
    attempts: Attempts
    aborts: Aborts
    receipts: Receipts
    reads: Reads
    daemon: Introspection

    def of(self, uses: Uses) -> Any:
        """The value of the group ``uses``."""
        return getattr(self, uses.value)
