"""Signed calls for one neuron, over either client (contract §3, §4).

Each operation is written once, as a *plan*: a generator that yields the
calls it needs (`_Call`) and receives their results, so a multi-step
operation (read the current generation, then bind with it) is plain
sequential code that does no I/O. `Session` runs plans on a blocking
`Client`, `TrioSession` on a `TrioClient`.

Compare-and-set values the caller leaves out are read fresh from the daemon
(`get_neuron`, `get_operation`, `get_prog`) just before the write. That is
what an operator at a prompt wants, but it means the write fences against
nothing that happened before the read. A program that must be fenced by
the epoch it was started under pins it: ``Session(client, neuron,
epoch=N)`` sends ``expected_epoch=N`` on every `prepare`, `invoke`,
`manual_take` and `rebind` (contract §4: the bundled clients always send it),
so `advance_epoch` retires everything that program would still sign.

The same holds for the prog fences (contract §3.4): `set_prog_state` always
sends ``expected_state_version`` and `recover_reservations` always sends
``before``, read from `get_prog` unless given, so the signed request can
never be replayed after a later state change, nor release a reservation
made after it was signed.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Mapping
from typing import Any, Final, TypeVar

import attrs

from ._core import HelloResult
from ._errors import ClientError, ConnectionClosed, RemoteProtocolError
from ._neuron import Neuron
from ._sync import Client
from ._trio import TrioClient

__all__ = ["NO_VALUE", "Session", "TrioSession"]

T = TypeVar("T")


class _NoValue:
    """The type of `NO_VALUE`."""

    _instance: _NoValue | None = None

    def __new__(cls) -> _NoValue:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NO_VALUE"


NO_VALUE: Final = _NoValue()
"""Marks a reconcile outcome sent without a ``value`` key (unlike ``None``, a null value)."""

_PAGE_LIMIT = 1000  # contract §4: reads return at most 1000 per page


@attrs.frozen
class _Call:
    method: str
    params: dict[str, Any]
    signed: bool


Plan = Generator[_Call, Any, T]

_DISPATCHES = ("invoke", "execute")


def _lost(call: _Call, exc: ConnectionClosed) -> ConnectionClosed:
    """The answer to ``call`` was lost: for a dispatch, say the attempt may have run."""
    if call.method not in _DISPATCHES:
        return exc
    op = call.params.get("op")
    look = f"`wardctl op show {op}`" if op else "get_operation (`wardctl op show OP`)"
    return ConnectionClosed(
        f"{exc}: the attempt may have run (its claim may be durable); look with {look} "
        "before anything else"
    )


def _ask(method: str, params: dict[str, Any], signed: bool) -> Plan[dict[str, Any]]:
    """One call whose result is a map (every method's is, contract §4)."""
    result: dict[str, Any] = yield _Call(method, params, signed)
    return result


class _Plans:
    """The plan of every operation, for the neuron `neuron_id`."""

    def __init__(self, neuron_id: str, epoch: int | None) -> None:
        self.neuron_id = neuron_id
        self.epoch = epoch

    # -- reads ------------------------------------------------------------------
    def root(self) -> Plan[dict[str, Any]]:
        return (yield from _ask("get_neuron", {"neuron": self.neuron_id}, False))

    def operation(self, op: str) -> Plan[dict[str, Any]]:
        return (yield from _ask("get_operation", {"neuron": self.neuron_id, "op": op}, False))

    def prog(self, prog: str) -> Plan[dict[str, Any]]:
        return (yield from _ask("get_prog", {"neuron": self.neuron_id, "prog": prog}, False))

    def pages(self, method: str, params: dict[str, Any], key: str) -> Plan[list[Any]]:
        """Every item of a paged read (contract §4: pass `next` back as `after`)."""
        items: list[Any] = []
        after: Any = None
        while True:
            page_params = dict(params, limit=_PAGE_LIMIT)
            if after is not None:
                page_params["after"] = after
            page = yield _Call(method, page_params, False)
            items.extend(page.get(key, []))
            following = page.get("next")
            if following is None:
                return items
            if following == after:
                raise RemoteProtocolError(f"{method} returned the same page cursor twice")
            after = following

    def operations(self, state: str | None, prog: str | None) -> Plan[list[dict[str, Any]]]:
        params: dict[str, Any] = {"neuron": self.neuron_id}
        if state is not None:
            params["state"] = state
        if prog is not None:
            params["prog"] = prog
        return (yield from self.pages("list_operations", params, "operations"))

    def history(self, op: str) -> Plan[list[dict[str, Any]]]:
        return (yield from self.pages("history", {"neuron": self.neuron_id, "op": op}, "records"))

    def attempts(self, state: str) -> Plan[list[dict[str, Any]]]:
        return (yield from self.pages("list_attempts", {"state": state}, "attempts"))

    # -- placement, epoch, policy (contract §3.1) --------------------------------------
    def bind(self, worker: str, expected_generation: int | None) -> Plan[dict[str, Any]]:
        listed = (yield _Call("list_workers", {}, False))["workers"]
        match = [w for w in listed if w.get("worker") == worker]
        if not match:
            hosted = ", ".join(str(w.get("worker")) for w in listed) or "none"
            raise ClientError(f"the daemon hosts no worker {worker!r} (it hosts: {hosted})")
        if expected_generation is None:
            expected_generation = (yield from self.root())["placement_generation"]
        params = {"expected_generation": expected_generation, "descriptor": match[0]["descriptor"]}
        return (yield from _ask("bind_placement", params, True))

    def release(self, expected_generation: int | None) -> Plan[dict[str, Any]]:
        if expected_generation is None:
            expected_generation = (yield from self.root())["placement_generation"]
        params = {"expected_generation": expected_generation}
        return (yield from _ask("release_placement", params, True))

    def advance_epoch(self, expected_epoch: int | None) -> Plan[dict[str, Any]]:
        if expected_epoch is None:
            expected_epoch = (yield from self.root())["epoch"]
        return (yield from _ask("advance_epoch", {"expected_epoch": expected_epoch}, True))

    def grant(
        self, prog: str, acts: Iterable[str] | None, enabled: bool, expected: int | None
    ) -> Plan[dict[str, Any]]:
        if expected is None or acts is None:
            root = yield from self.root()
            if expected is None:
                expected = root["policy_version"]
            if acts is None:  # keep the prog's current act set
                acts = (root.get("grants") or {}).get(prog, {}).get("acts", [])
        params = {
            "prog": prog,
            "acts": sorted(set(acts)),
            "enabled": enabled,
            "expected_policy_version": expected,
        }
        return (yield from _ask("set_grant", params, True))

    # -- progs ------------------------------------------------------------------
    def set_prog_state(
        self, prog: str, state: str, expected_state: str | None, expected_version: int | None
    ) -> Plan[dict[str, Any]]:
        """Always with ``expected_state_version`` (contract §3.4), so a captured
        pause or resume can never be replayed after a later state change."""
        if expected_state is None or expected_version is None:
            current = yield from self.prog(prog)
            if expected_state is None:
                expected_state = current["state"]
            if expected_version is None:
                expected_version = current["state_version"]
        params = {
            "prog": prog,
            "expected_state": expected_state,
            "state": state,
            "expected_state_version": expected_version,
        }
        return (yield from _ask("set_prog_state", params, True))

    def recover_reservations(self, prog: str, before: int | None) -> Plan[dict[str, Any]]:
        """Always with ``before`` (contract §3.4), so a replay never releases a
        reservation made after this request was signed."""
        if before is None:
            before = (yield from self.prog(prog))["reservation_seq"]
        params = {"prog": prog, "before": before}
        return (yield from _ask("recover_reservations", params, True))

    def set_step_limit(
        self, prog: str, step_limit: int, expected_version: int | None
    ) -> Plan[dict[str, Any]]:
        """Always fenced by ``expected_state_version`` (read from ``get_prog``
        when not given), like ``set_prog_state``."""
        if expected_version is None:
            expected_version = (yield from self.prog(prog))["state_version"]
        params = {
            "prog": prog,
            "step_limit": step_limit,
            "expected_state_version": expected_version,
        }
        return (yield from _ask("set_step_limit", params, True))

    def abort(self, op: str, attempt: int | None) -> Plan[dict[str, Any]]:
        """`abort` the op's running attempt (default: its latest attempt)."""
        if attempt is None:
            attempts = (yield from self.operation(op))["attempts"]
            attempt = attempts[-1]["attempt"] if attempts else 1
        return (yield from _ask("abort", {"op": op, "attempt": attempt}, True))

    # -- attempts (contract §3.2, §3.5) ------------------------------------------------
    def _attempt_params(
        self,
        op: str,
        expected_attempt: int | None,
        placement_generation: int | None,
        expected_epoch: int | None,
        *,
        placed: bool,
    ) -> Plan[dict[str, Any]]:
        if expected_epoch is None:
            expected_epoch = self.epoch
        needs_root = expected_epoch is None or (placed and placement_generation is None)
        if needs_root:
            root = yield from self.root()
            if expected_epoch is None:
                expected_epoch = root["epoch"]
            if placed and placement_generation is None:
                placement_generation = root["placement_generation"]
        if expected_attempt is None:
            # a pruned op has no attempts listed: the daemon answers `terminal`
            expected_attempt = 1 + len((yield from self.operation(op)).get("attempts") or [])
        params: dict[str, Any] = {
            "op": op,
            "expected_attempt": expected_attempt,
            "expected_epoch": expected_epoch,
        }
        if placed:
            params["placement_generation"] = placement_generation
        return params

    def attempt(
        self,
        method: str,
        op: str,
        expected_attempt: int | None,
        placement_generation: int | None,
        expected_epoch: int | None,
    ) -> Plan[dict[str, Any]]:
        """`prepare`, `invoke` or `manual_take`, always with ``expected_epoch``."""
        placed = method != "manual_take"
        params = yield from self._attempt_params(
            op, expected_attempt, placement_generation, expected_epoch, placed=placed
        )
        return (yield from _ask(method, params, True))

    def rebind(self, op: str, expected_epoch: int | None) -> Plan[dict[str, Any]]:
        if expected_epoch is None:
            expected_epoch = self.epoch
        if expected_epoch is None:
            expected_epoch = (yield from self.root())["epoch"]
        return (yield from _ask("rebind", {"op": op, "expected_epoch": expected_epoch}, True))

    @staticmethod
    def one(method: str, params: dict[str, Any], *, signed: bool = True) -> Plan[Any]:
        return (yield from _ask(method, params, signed))


def _outcome(status: str, value: Any) -> dict[str, Any]:
    outcome: dict[str, Any] = {"status": status}
    if value is not NO_VALUE:
        outcome["value"] = value
    return outcome


class _SessionBase:
    def __init__(self, neuron: Neuron, network: str | None, epoch: int | None) -> None:
        self.neuron = neuron
        self._network = network
        self._plans = _Plans(neuron.id, epoch)

    @property
    def id(self) -> str:
        """The neuron id this session signs as."""
        return self.neuron.id

    @property
    def epoch(self) -> int | None:
        """The pinned epoch sent as ``expected_epoch`` (None: read it per call)."""
        return self._plans.epoch

    @epoch.setter
    def epoch(self, value: int | None) -> None:
        self._plans.epoch = value

    def _wire_params(self, call: _Call, hello: HelloResult) -> dict[str, Any]:
        if not call.signed:
            return call.params
        params = dict(call.params)
        if self._network is not None:
            # Naming the network makes a mismatch `wrong_network` (contract §4)
            # rather than a bare `unauthenticated`.
            params["network"] = self._network
        return self.neuron.sign(call.method, params, self._network or hello.network)


class Session(_SessionBase):
    """Signed and read calls for one neuron over a blocking `Client`.

    Each write signs with the daemon's network (from `hello`) unless
    `network` is given, in which case it is also sent in the params.
    Compare-and-set values left as None are read from the daemon first.
    """

    def __init__(
        self,
        client: Client,
        neuron: Neuron,
        *,
        network: str | None = None,
        epoch: int | None = None,
    ) -> None:
        super().__init__(neuron, network, epoch)
        self.client = client

    def _run(self, plan: Plan[T]) -> T:
        try:
            call = next(plan)
            while True:
                params = self._wire_params(call, self.client.hello_result)
                try:
                    result = self.client.call(call.method, params)
                except ConnectionClosed as exc:
                    raise _lost(call, exc) from exc
                call = plan.send(result)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        finally:
            plan.close()

    def signed(self, method: str, params: Mapping[str, Any] | None = None) -> Any:
        """Sign and send any method (the escape hatch for what has no helper)."""
        return self._run(self._plans.one(method, dict(params or {})))

    # -- reads ----------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """The daemon's `status` (contract §4)."""
        return self._run(self._plans.one("status", {}, signed=False))

    def workers(self) -> list[dict[str, Any]]:
        """`list_workers`: ``[{worker, descriptor, digest}]``."""
        workers = self._run(self._plans.one("list_workers", {}, signed=False))
        return workers["workers"]  # type: ignore[no-any-return]

    def get_neuron(self) -> dict[str, Any]:
        """This neuron's root: epoch, policy_version, placement, grants."""
        return self._run(self._plans.root())

    def get_prog(self, prog: str) -> dict[str, Any]:
        """One prog of this neuron."""
        return self._run(self._plans.prog(prog))

    def get_operation(self, op: str) -> dict[str, Any]:
        """One op of this neuron with its attempts and result."""
        return self._run(self._plans.operation(op))

    def list_operations(self, state: str | None = None, prog: str | None = None) -> list[Any]:
        """Every op of this neuron (all pages), optionally by state and prog."""
        return self._run(self._plans.operations(state, prog))

    def history(self, op: str) -> list[Any]:
        """Every event record of one op (all pages)."""
        return self._run(self._plans.history(op))

    def list_attempts(self, state: str) -> list[Any]:
        """Every attempt in `state` (unknown, running, prepared) of every neuron."""
        return self._run(self._plans.attempts(state))

    # -- neuron root ----------------------------------------------------------------
    def register(self) -> dict[str, Any]:
        """`register_neuron` for this neuron (idempotent: ``already: true``)."""
        return self._run(self._plans.one("register_neuron", {}))

    def bind(self, worker: str = "w0", *, expected_generation: int | None = None) -> dict[str, Any]:
        """Bind the placement to `worker`'s current descriptor (from `list_workers`)."""
        return self._run(self._plans.bind(worker, expected_generation))

    def release(self, *, expected_generation: int | None = None) -> dict[str, Any]:
        """`release_placement`: the placement becomes null."""
        return self._run(self._plans.release(expected_generation))

    def advance_epoch(self, *, expected_epoch: int | None = None) -> dict[str, Any]:
        """`advance_epoch`: retires every request signed for the older epoch."""
        return self._run(self._plans.advance_epoch(expected_epoch))

    def grant(
        self,
        prog: str,
        acts: Iterable[str] | None,
        *,
        enabled: bool = True,
        expected_policy_version: int | None = None,
    ) -> dict[str, Any]:
        """`set_grant` for `prog`; `acts=None` keeps its current act set."""
        return self._run(self._plans.grant(prog, acts, enabled, expected_policy_version))

    # -- progs ----------------------------------------------------------------------
    def create_prog(self, prog: str, step_limit: int) -> dict[str, Any]:
        """`create_prog` (the same content again answers ``already: true``)."""
        return self._run(self._plans.one("create_prog", {"prog": prog, "step_limit": step_limit}))

    def set_prog_state(
        self,
        prog: str,
        state: str,
        *,
        expected_state: str | None = None,
        expected_state_version: int | None = None,
    ) -> dict[str, Any]:
        """`set_prog_state`, always fenced by ``expected_state_version``; both
        expected values default to the prog's current ones (read first)."""
        return self._run(
            self._plans.set_prog_state(prog, state, expected_state, expected_state_version)
        )

    def set_step_limit(
        self, prog: str, step_limit: int, *, expected_state_version: int | None = None
    ) -> dict[str, Any]:
        """`set_step_limit`, always fenced by ``expected_state_version`` (default:
        the prog's current one, read first). Raising the limit of an exhausted
        prog lets new work pass; what the exhaustion cancelled stays cancelled."""
        return self._run(
            self._plans.set_step_limit(prog, step_limit, expected_state_version)
        )

    def abort(self, op: str, attempt: int | None = None) -> dict[str, Any]:
        """`abort` a hung call of a running attempt (default: the op's latest
        attempt): its process group is killed and the attempt ends
        ``unknown`` with ``aborted: true``, for a later ``reconcile``."""
        return self._run(self._plans.abort(op, attempt))

    def reserve_steps(self, prog: str, reservation: str, steps: int) -> dict[str, Any]:
        """`reserve_steps` (contract §3.4)."""
        params = {"prog": prog, "reservation": reservation, "steps": steps}
        return self._run(self._plans.one("reserve_steps", params))

    def settle_steps(self, prog: str, reservation: str, steps: int) -> dict[str, Any]:
        """`settle_steps` (contract §3.4)."""
        params = {"prog": prog, "reservation": reservation, "steps": steps}
        return self._run(self._plans.one("settle_steps", params))

    def recover_reservations(self, prog: str, *, before: int | None = None) -> dict[str, Any]:
        """`recover_reservations`, always with ``before``: only open reservations
        numbered below it are released (default: the prog's current
        ``reservation_seq``, read first, i.e. every reservation made so far)."""
        return self._run(self._plans.recover_reservations(prog, before))

    # -- operations -----------------------------------------------------------------
    def submit(self, prog: str, op: str, act: str, args: bytes = b"") -> dict[str, Any]:
        """`submit` an op (idempotent for identical content)."""
        params = {"prog": prog, "op": op, "act": act, "args": bytes(args)}
        return self._run(self._plans.one("submit", params))

    def prepare(
        self,
        op: str,
        *,
        expected_attempt: int | None = None,
        placement_generation: int | None = None,
        expected_epoch: int | None = None,
    ) -> dict[str, Any]:
        """`prepare` the next attempt: ``{token, attempt}``; `execute` it on this connection."""
        return self._run(
            self._plans.attempt(
                "prepare", op, expected_attempt, placement_generation, expected_epoch
            )
        )

    def execute(self, token: bytes) -> dict[str, Any]:
        """`execute` a token prepared on this session's connection."""
        return self._run(self._plans.one("execute", {"token": token}, signed=False))

    def invoke(
        self,
        op: str,
        *,
        expected_attempt: int | None = None,
        placement_generation: int | None = None,
        expected_epoch: int | None = None,
    ) -> dict[str, Any]:
        """`invoke`: prepare and execute the next attempt in one request."""
        return self._run(
            self._plans.attempt(
                "invoke", op, expected_attempt, placement_generation, expected_epoch
            )
        )

    def manual_take(
        self, op: str, *, expected_attempt: int | None = None, expected_epoch: int | None = None
    ) -> dict[str, Any]:
        """`manual_take`: an unfenced, potentially executed attempt (contract §3.5)."""
        return self._run(
            self._plans.attempt("manual_take", op, expected_attempt, None, expected_epoch)
        )

    def reconcile(
        self, op: str, attempt: int, status: str, value: Any = NO_VALUE
    ) -> dict[str, Any]:
        """`reconcile` an unknown attempt to succeeded, failed or not_executed."""
        params = {"op": op, "attempt": attempt, "outcome": _outcome(status, value)}
        return self._run(self._plans.one("reconcile", params))

    def cancel(self, op: str) -> dict[str, Any]:
        """`cancel` an op (never executes anything)."""
        return self._run(self._plans.one("cancel", {"op": op}))

    def consume(self, op: str) -> dict[str, Any]:
        """`consume` the op's retained result."""
        return self._run(self._plans.one("consume", {"op": op}))

    def rebind(self, op: str, *, expected_epoch: int | None = None) -> dict[str, Any]:
        """`rebind` a retained result to the current epoch (executes nothing)."""
        return self._run(self._plans.rebind(op, expected_epoch))

    def check_receipts(self) -> dict[str, Any]:
        """`check_receipts` for this neuron's unknown guarded attempts."""
        return self._run(self._plans.one("check_receipts", {}))


class TrioSession(_SessionBase):
    """Signed and read calls for one neuron over a `TrioClient` (same API, awaited).

    Each write signs with the daemon's network (from `hello`) unless
    `network` is given, in which case it is also sent in the params.
    Compare-and-set values left as None are read from the daemon first.
    """

    def __init__(
        self,
        client: TrioClient,
        neuron: Neuron,
        *,
        network: str | None = None,
        epoch: int | None = None,
    ) -> None:
        super().__init__(neuron, network, epoch)
        self.client = client

    async def _run(self, plan: Plan[T]) -> T:
        try:
            call = next(plan)
            while True:
                params = self._wire_params(call, self.client.hello_result)
                try:
                    result = await self.client.call(call.method, params)
                except ConnectionClosed as exc:
                    raise _lost(call, exc) from exc
                call = plan.send(result)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        finally:
            plan.close()

    async def signed(self, method: str, params: Mapping[str, Any] | None = None) -> Any:
        """Sign and send any method (the escape hatch for what has no helper)."""
        return await self._run(self._plans.one(method, dict(params or {})))

    # -- reads ----------------------------------------------------------------------
    async def status(self) -> dict[str, Any]:
        """The daemon's `status` (contract §4)."""
        return await self._run(self._plans.one("status", {}, signed=False))

    async def workers(self) -> list[dict[str, Any]]:
        """`list_workers`: ``[{worker, descriptor, digest}]``."""
        workers = await self._run(self._plans.one("list_workers", {}, signed=False))
        return workers["workers"]  # type: ignore[no-any-return]

    async def get_neuron(self) -> dict[str, Any]:
        """This neuron's root: epoch, policy_version, placement, grants."""
        return await self._run(self._plans.root())

    async def get_prog(self, prog: str) -> dict[str, Any]:
        """One prog of this neuron."""
        return await self._run(self._plans.prog(prog))

    async def get_operation(self, op: str) -> dict[str, Any]:
        """One op of this neuron with its attempts and result."""
        return await self._run(self._plans.operation(op))

    async def list_operations(self, state: str | None = None, prog: str | None = None) -> list[Any]:
        """Every op of this neuron (all pages), optionally by state and prog."""
        return await self._run(self._plans.operations(state, prog))

    async def history(self, op: str) -> list[Any]:
        """Every event record of one op (all pages)."""
        return await self._run(self._plans.history(op))

    async def list_attempts(self, state: str) -> list[Any]:
        """Every attempt in `state` (unknown, running, prepared) of every neuron."""
        return await self._run(self._plans.attempts(state))

    # -- neuron root ----------------------------------------------------------------
    async def register(self) -> dict[str, Any]:
        """`register_neuron` for this neuron (idempotent: ``already: true``)."""
        return await self._run(self._plans.one("register_neuron", {}))

    async def bind(
        self, worker: str = "w0", *, expected_generation: int | None = None
    ) -> dict[str, Any]:
        """Bind the placement to `worker`'s current descriptor (from `list_workers`)."""
        return await self._run(self._plans.bind(worker, expected_generation))

    async def release(self, *, expected_generation: int | None = None) -> dict[str, Any]:
        """`release_placement`: the placement becomes null."""
        return await self._run(self._plans.release(expected_generation))

    async def advance_epoch(self, *, expected_epoch: int | None = None) -> dict[str, Any]:
        """`advance_epoch`: retires every request signed for the older epoch."""
        return await self._run(self._plans.advance_epoch(expected_epoch))

    async def grant(
        self,
        prog: str,
        acts: Iterable[str] | None,
        *,
        enabled: bool = True,
        expected_policy_version: int | None = None,
    ) -> dict[str, Any]:
        """`set_grant` for `prog`; `acts=None` keeps its current act set."""
        return await self._run(self._plans.grant(prog, acts, enabled, expected_policy_version))

    # -- progs ----------------------------------------------------------------------
    async def create_prog(self, prog: str, step_limit: int) -> dict[str, Any]:
        """`create_prog` (the same content again answers ``already: true``)."""
        return await self._run(
            self._plans.one("create_prog", {"prog": prog, "step_limit": step_limit})
        )

    async def set_prog_state(
        self,
        prog: str,
        state: str,
        *,
        expected_state: str | None = None,
        expected_state_version: int | None = None,
    ) -> dict[str, Any]:
        """`set_prog_state`, always fenced by ``expected_state_version``; both
        expected values default to the prog's current ones (read first)."""
        return await self._run(
            self._plans.set_prog_state(prog, state, expected_state, expected_state_version)
        )

    async def set_step_limit(
        self, prog: str, step_limit: int, *, expected_state_version: int | None = None
    ) -> dict[str, Any]:
        """`set_step_limit`, always fenced by ``expected_state_version`` (default:
        the prog's current one, read first). Raising the limit of an exhausted
        prog lets new work pass; what the exhaustion cancelled stays cancelled."""
        return await self._run(
            self._plans.set_step_limit(prog, step_limit, expected_state_version)
        )

    async def abort(self, op: str, attempt: int | None = None) -> dict[str, Any]:
        """`abort` a hung call of a running attempt (default: the op's latest
        attempt): its process group is killed and the attempt ends
        ``unknown`` with ``aborted: true``, for a later ``reconcile``."""
        return await self._run(self._plans.abort(op, attempt))

    async def reserve_steps(self, prog: str, reservation: str, steps: int) -> dict[str, Any]:
        """`reserve_steps` (contract §3.4)."""
        params = {"prog": prog, "reservation": reservation, "steps": steps}
        return await self._run(self._plans.one("reserve_steps", params))

    async def settle_steps(self, prog: str, reservation: str, steps: int) -> dict[str, Any]:
        """`settle_steps` (contract §3.4)."""
        params = {"prog": prog, "reservation": reservation, "steps": steps}
        return await self._run(self._plans.one("settle_steps", params))

    async def recover_reservations(self, prog: str, *, before: int | None = None) -> dict[str, Any]:
        """`recover_reservations`, always with ``before``: only open reservations
        numbered below it are released (default: the prog's current
        ``reservation_seq``, read first, i.e. every reservation made so far)."""
        return await self._run(self._plans.recover_reservations(prog, before))

    # -- operations -----------------------------------------------------------------
    async def submit(self, prog: str, op: str, act: str, args: bytes = b"") -> dict[str, Any]:
        """`submit` an op (idempotent for identical content)."""
        params = {"prog": prog, "op": op, "act": act, "args": bytes(args)}
        return await self._run(self._plans.one("submit", params))

    async def prepare(
        self,
        op: str,
        *,
        expected_attempt: int | None = None,
        placement_generation: int | None = None,
        expected_epoch: int | None = None,
    ) -> dict[str, Any]:
        """`prepare` the next attempt: ``{token, attempt}``; `execute` it on this connection."""
        return await self._run(
            self._plans.attempt(
                "prepare", op, expected_attempt, placement_generation, expected_epoch
            )
        )

    async def execute(self, token: bytes) -> dict[str, Any]:
        """`execute` a token prepared on this session's connection."""
        return await self._run(self._plans.one("execute", {"token": token}, signed=False))

    async def invoke(
        self,
        op: str,
        *,
        expected_attempt: int | None = None,
        placement_generation: int | None = None,
        expected_epoch: int | None = None,
    ) -> dict[str, Any]:
        """`invoke`: prepare and execute the next attempt in one request."""
        return await self._run(
            self._plans.attempt(
                "invoke", op, expected_attempt, placement_generation, expected_epoch
            )
        )

    async def manual_take(
        self, op: str, *, expected_attempt: int | None = None, expected_epoch: int | None = None
    ) -> dict[str, Any]:
        """`manual_take`: an unfenced, potentially executed attempt (contract §3.5)."""
        return await self._run(
            self._plans.attempt("manual_take", op, expected_attempt, None, expected_epoch)
        )

    async def reconcile(
        self, op: str, attempt: int, status: str, value: Any = NO_VALUE
    ) -> dict[str, Any]:
        """`reconcile` an unknown attempt to succeeded, failed or not_executed."""
        params = {"op": op, "attempt": attempt, "outcome": _outcome(status, value)}
        return await self._run(self._plans.one("reconcile", params))

    async def cancel(self, op: str) -> dict[str, Any]:
        """`cancel` an op (never executes anything)."""
        return await self._run(self._plans.one("cancel", {"op": op}))

    async def consume(self, op: str) -> dict[str, Any]:
        """`consume` the op's retained result."""
        return await self._run(self._plans.one("consume", {"op": op}))

    async def rebind(self, op: str, *, expected_epoch: int | None = None) -> dict[str, Any]:
        """`rebind` a retained result to the current epoch (executes nothing)."""
        return await self._run(self._plans.rebind(op, expected_epoch))

    async def check_receipts(self) -> dict[str, Any]:
        """`check_receipts` for this neuron's unknown guarded attempts."""
        return await self._run(self._plans.one("check_receipts", {}))
