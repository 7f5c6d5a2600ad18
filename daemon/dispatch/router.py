"""The router: one request through the method table's checks, in the contract's order.

For each request, :meth:`Router.handle` reads its entry in
:data:`~wardd.daemon.dispatch.handlers.METHODS` and applies what the entry declares, in this
order (contract §3.6, §4):

1. refused (``overloaded``, ``shutdown``) once the daemon stops, unless
   ``served_while_stopping``;
2. an unknown method is ``unknown_method``;
3. the params (``bad_request``);
4. for a ``signed`` method: the network, the signature, the registration;
5. ``waits_for_recovery``: held until the start-up recovery is done;
6. the handler, handed its group's value (its entry's ``uses``,
   :mod:`~wardd.daemon.dispatch.services`), then what its ``guard`` says: ``EXCLUSIVE`` runs the
   writer unit the handler returns holding the neuron's ward guard
   exclusively; ``DISPATCH`` hands the dispatch the handler returns to a
   worker (which holds the guard shared around the claim and the call),
   unless the handler answered at once (an :class:`~wardd.daemon.dispatch.dispatches.Answered`:
   a ``call`` that runs nothing).

The table is the single source: nothing else takes the exclusive guard
or dispatches.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import trio

from wardd.protocol import (
    Overloaded,
    Request,
    Unauthenticated,
    UnknownMethod,
    UnknownNeuron,
    WrongNetwork,
    verify,
)

from ..core.call import Answered
from ..store.writer import Unit, Writer
from ..wire.params import check_params
from ..wire.server import Connection
from .dispatcher import Dispatcher
from .guard import GuardTable
from .handlers import METHODS, Guard, Method
from .services import Services

__all__ = ["Authenticator", "Lifecycle", "Router"]


@attrs.define(eq=False)
class Lifecycle:
    """Where the daemon is in its life: recovering, serving, stopping, failed."""

    recovered: trio.Event = attrs.field(factory=trio.Event)
    # set once when the stop begins (on the event loop); read on any thread:
    # the claim units read it on the writer's (contract §3.6)
    stop_begun: threading.Event = attrs.field(factory=threading.Event)
    fatal: str | None = None  # why the daemon fail-stops (contract §3.2.3)

    @property
    def stopping(self) -> bool:
        return self.stop_begun.is_set()


class Authenticator:
    """contract §4: the network, then the signature, then the registration."""

    def __init__(self, network: str, neuron_exists: Callable[[str], bool]) -> None:
        self._network = network
        self._exists = neuron_exists
        # neurons known to be registered: added after a read that found one, or
        # once a register_neuron has committed; never removed (nor are neurons)
        self.registered: set[str] = set()

    def check(self, method: str, params: Mapping[str, Any]) -> str:
        """The verified signer of a signed request."""
        network = params.get("network")
        if network is not None and network != self._network:
            raise WrongNetwork(
                f"this daemon serves network {self._network!r}", {"network": self._network}
            )
        neuron = params["neuron"]
        if not verify(neuron, params["sig"], self._network, method, params):
            raise Unauthenticated("the signature does not verify")
        if method != "register_neuron" and neuron not in self.registered:
            # neurons are never deleted: a yes is kept, a no is read again
            if not self._exists(neuron):
                raise UnknownNeuron("neuron is not registered")
            self.registered.add(neuron)
        return str(neuron)


class Router:
    """Serves each request by its entry in the method table (see the module)."""

    def __init__(
        self,
        services: Services,
        *,
        life: Lifecycle,
        auth: Authenticator,
        guards: GuardTable,
        writer: Writer,
        dispatcher: Dispatcher,
        methods: Mapping[str, Method[Any]] = METHODS,
    ) -> None:
        self._life = life
        self._auth = auth
        self._guards = guards
        self._writer = writer
        self._dispatcher = dispatcher
        self._methods = methods
        # each method's handler gets its group's value, and only that
        self._groups = {name: services.of(m.uses) for name, m in methods.items()}

    async def handle(self, conn: Connection, req: Request) -> Any:
        """Serve one request by its entry in the method table (see the module)."""
        method, params = req.method, req.params
        entry = self._methods.get(method)
        if self._life.stopping and (entry is None or not entry.served_while_stopping):
            raise Overloaded("the daemon is shutting down", {"reason": "shutdown"})
        if entry is None:
            if method == "hello":
                raise UnknownMethod("hello was already done on this connection")
            raise UnknownMethod(f"no method {method!r}")
        check_params(entry.params, params, signed=entry.signed)
        neuron = self._auth.check(method, params) if entry.signed else None
        recovered = self._life.recovered
        if entry.waits_for_recovery and not recovered.is_set():
            await recovered.wait()  # (a set Event's wait is still a schedule point)
        got = await entry.handler(self._groups[method], conn, neuron, params)
        guard = entry.guard
        if guard is Guard.NONE:
            return got
        if guard is Guard.DISPATCH:
            if isinstance(got, Answered):  # a call that runs nothing (known on arrival)
                return got.result
            worker, dispatch = got
            return await self._dispatcher.run(worker, dispatch, params)
        assert neuron is not None  # EXCLUSIVE: a signed write of the neuron's root
        return await self._exclusive(neuron, got)

    async def _exclusive(self, neuron: str, unit: Unit) -> Any:
        """Run a write holding the neuron's ward guard exclusively (contract §3.1)."""
        guards = self._guards
        await guards.acquire_exclusive_async(neuron)
        try:
            return await self._writer.run(unit)
        finally:
            guards.release_exclusive(neuron)
