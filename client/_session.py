"""Signed calls for one neuron, over either client (contract §3, §4).

Each operation is written once, as a *plan*: a generator that yields the
calls it needs (`_Call`) and receives their results, so a multi-step
operation (read the current generation, then bind with it) is plain
sequential code that does no I/O. `AsyncSession` (`_async_session.py`) runs
plans on an `AsyncClient`; the blocking `Session` (`_sync_session.py`, written
from it by `_unasync.py`) runs them on a `Client`. `_SessionBase` holds what
the two share and does no I/O either.

Compare-and-set values the caller leaves out are read fresh from the daemon
(`get_neuron`, `get_operation`, `get_prog`) just before the write. That is
what an operator at a prompt wants, but it means the write fences against
nothing that happened before the read. A program that must be fenced by
the epoch it was started under pins it: ``Session(client, neuron,
epoch=N)`` sends ``expected_epoch=N`` on every `prepare`, `invoke`,
`call`, `manual_take` and `rebind` (contract §4: the bundled clients always
send it), so `advance_epoch` retires everything that program would still
sign. Without a pinned epoch, `call` sends the epoch the session's first
`call` read, and keeps it (one request per call, and a call's bytes are
never valid under a later epoch).

The same holds for the prog fences (contract §3.4): `set_prog_state` always
sends ``expected_state_version`` and `recover_reservations` always sends
``before``, read from `get_prog` unless given, so the signed request can
never be replayed after a later state change, nor release a reservation
made after it was signed.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Mapping
from typing import Any, Final, TypeVar

import attrs

from wardd.protocol import (
    DISPATCH_METHODS,
    Overloaded,
    Pager,
    PagingError,
    PlacementStale,
    TokenVoid,
    WarddError,
)

from ._core import HelloResult
from ._errors import (
    ClientError,
    ConnectionClosed,
    DispatchTimedOut,
    MayHaveRun,
    RemoteProtocolError,
)
from ._neuron import Neuron
from ._results import Prepared
from ._trace import current_trace

__all__ = ["NO_VALUE", "Retry"]

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


@attrs.frozen
class _Call:
    method: str
    params: dict[str, Any]
    signed: bool
    #: The op and attempt a dispatch runs when its params do not name them
    #: (an ``execute`` sends only its token): for the errors that name them.
    runs: tuple[str, int] | None = None


@attrs.frozen
class _Sleep:
    """A pause a plan asks for between two asks (a retry's backoff)."""

    seconds: float


Plan = Generator["_Call | _Sleep", Any, T]


@attrs.frozen
class _Fences:
    """The compare-and-set values an attempt is asked with (contract §3.2):
    the attempt it makes, the placement generation and the epoch; a value
    left as None is read from the daemon just before the write."""

    expected_attempt: int | None = None
    placement_generation: int | None = None
    expected_epoch: int | None = None


@attrs.frozen
class Retry:
    """When `invoke` asks again: only after an answer that proves no effect.

    - an attempt that ``failed`` (a definite outcome, no effect): a new attempt;
    - ``token_void`` (the attempt was voided before its claim, never ran);
    - ``overloaded`` (the daemon did not admit the request: nothing changed);
    - ``placement_stale``, when `invoke` was given ``rebind_stale=True``
      (refused before any attempt exists).

    Never after ``unknown``, ``attempt_unknown``, an error that can come
    after the claim (``internal``) or an answer lost after the request was
    sent: the attempt may have run, so `invoke` raises `MayHaveRun` (or the
    daemon's refusal, or `ConnectionClosed`), naming the op and attempt to
    look at. `max_attempts` counts every ask, the
    first included (1: never ask again). The pause before ask n+1 is
    ``backoff * 2**(n-1)`` seconds, at most `max_backoff`. `on_retry`, if
    given, is called before each pause with the number of asks so far and
    what answered the last one (a `WarddError`, or the failed result).
    """

    max_attempts: int = attrs.field(default=3, validator=attrs.validators.ge(1))
    backoff: float = attrs.field(default=0.1, validator=attrs.validators.ge(0))
    max_backoff: float = attrs.field(default=5.0, validator=attrs.validators.ge(0))
    on_retry: Callable[[int, Any], None] | None = None

    def pause(self, asks: int) -> float:
        """Seconds to wait after ask number `asks` before the next."""
        return float(min(self.max_backoff, self.backoff * 2 ** (asks - 1)))


def _lost(call: _Call, exc: ConnectionClosed) -> ConnectionClosed:
    """The answer to ``call`` was lost: for a dispatch, say the attempt may have run."""
    if call.method not in DISPATCH_METHODS:
        return exc
    op, attempt = _dispatched(call)
    what = f"op {op}" if op else "the token's attempt"
    if op and attempt:
        what += f" attempt {attempt}"
    look = f"`wardctl op show {op}`" if op else "get_operation (`wardctl op show OP`)"
    # The answer is lost, not the request: the daemon may have claimed and run the
    # attempt, or died before the claim (then no attempt, or one not_executed).
    return ConnectionClosed(
        f"{exc}: {what} may have run, or may never have started; look with {look} before "
        "anything else"
    )


def _dispatched(call: _Call, data: Any = None) -> tuple[str | None, int | None]:
    """The op and attempt a dispatch ran: as the daemon's error ``data`` names
    them, else as the request does (an ``invoke``'s ``expected_attempt`` is
    the attempt it makes; an ``execute`` names only its token)."""
    known = data if isinstance(data, Mapping) else {}
    op, attempt = known.get("op"), known.get("attempt")
    runs_op, runs_attempt = call.runs or (call.params.get("op"), None)
    if not isinstance(op, str):
        op = runs_op if isinstance(runs_op, str) else None
    if not isinstance(attempt, int):
        attempt = runs_attempt
        if call.method == "invoke":
            attempt = call.params.get("expected_attempt")
    return op, attempt if isinstance(attempt, int) else None


def _claimed(call: _Call, exc: WarddError) -> MayHaveRun:
    """A dispatch answered with an error that can come after its claim
    (`wardd.protocol.may_have_run`): no refusal, the attempt may have run."""
    op, attempt = _dispatched(call, exc.data)
    return MayHaveRun(op, attempt, answer=exc)


def _timed_out(call: _Call) -> DispatchTimedOut | None:
    """The caller's timeout ended the wait for ``call``'s answer after it was
    sent: for a dispatch, the exception that names the attempt in doubt."""
    if call.method not in DISPATCH_METHODS:
        return None
    op, attempt = _dispatched(call)
    return DispatchTimedOut(call.method, op, attempt)


def _in_doubt(call: _Call, exc: BaseException) -> None:
    """A wait for a dispatch's answer ended without it (cancelled, interrupted):
    the request went out and is never re-sent, so say on the exception that
    the attempt may have run."""
    if call.method in DISPATCH_METHODS:
        op, _attempt = _dispatched(call)
        what = f"op {op}" if op else "the token's op"
        exc.add_note(
            f"wardd: the {call.method} of {what} was not answered here; the attempt may have "
            "run (it is never sent again): read it back with get_operation before anything else"
        )


def _ask(method: str, params: dict[str, Any], signed: bool = True) -> Plan[dict[str, Any]]:
    """One call whose result is a map (every method's is, contract §4)."""
    result: dict[str, Any] = yield _Call(method, params, signed)
    return result


def _execute(token: bytes, runs: tuple[str, int] | None) -> Plan[dict[str, Any]]:
    """`execute` (unsigned); `runs`: the op and attempt its token was prepared for."""
    result: dict[str, Any] = yield _Call("execute", {"token": token}, False, runs)
    return result


def _pages(method: str, params: dict[str, Any], key: str) -> Plan[dict[str, Any]]:
    """Every item of a paged read (contract §4: pass `next` back as `after`), as
    one page would carry them: ``{key: items}``, and ``pruned`` if a page says so."""
    pager = Pager(params, key)
    pruned = False
    while not pager.done:
        page = yield _Call(method, pager.request(), False)
        try:
            pager.feed(page)
        except PagingError as exc:
            raise RemoteProtocolError(f"{method}: {exc}") from exc
        pruned = pruned or page.get("pruned") is True
    return {key: pager.items, "pruned": True} if pruned else {key: pager.items}


class _Plans:
    """The plan of every operation, for the neuron `neuron_id`; `boot` tells
    the boot of the client's connection (asked when a plan needs it)."""

    def __init__(self, neuron_id: str, epoch: int | None, boot: Callable[[], str]) -> None:
        self.neuron_id = neuron_id
        self.epoch = epoch
        self.boot = boot
        self.call_epoch: int | None = None  # read by the first `call` when none is pinned

    def epoch_for_call(self) -> Plan[int]:
        """The epoch every `call` sends: the pinned one, else the neuron's,
        read once by the session's first `call` and kept (never re-read on
        ``epoch_mismatch``: a refused call's bytes must not become valid)."""
        if self.epoch is not None:
            return self.epoch
        if self.call_epoch is None:
            self.call_epoch = int((yield from self.root())["epoch"])
        return self.call_epoch

    # -- reads ------------------------------------------------------------------
    def root(self) -> Plan[dict[str, Any]]:
        return (yield from _ask("get_neuron", {"neuron": self.neuron_id}, False))

    def operation(self, op: str) -> Plan[dict[str, Any]]:
        return (yield from _ask("get_operation", {"neuron": self.neuron_id, "op": op}, False))

    def prog(self, prog: str) -> Plan[dict[str, Any]]:
        return (yield from _ask("get_prog", {"neuron": self.neuron_id, "prog": prog}, False))

    def operations(self, state: str | None, prog: str | None) -> Plan[dict[str, Any]]:
        params: dict[str, Any] = {"neuron": self.neuron_id}
        if state is not None:
            params["state"] = state
        if prog is not None:
            params["prog"] = prog
        return (yield from _pages("list_operations", params, "operations"))

    def history(self, op: str) -> Plan[dict[str, Any]]:
        return (yield from _pages("history", {"neuron": self.neuron_id, "op": op}, "records"))

    def attempts(self, state: str) -> Plan[dict[str, Any]]:
        return (yield from _pages("list_attempts", {"state": state}, "attempts"))

    # -- placement, epoch, policy (contract §3.1) --------------------------------------
    def ensure_placement(self, worker: str | None) -> Plan[dict[str, Any]]:
        """Bind `worker`'s descriptor of this boot, by compare-and-set, unless the
        placement already names this boot (contract §3.1: a new boot never
        inherits a placement). `worker` None: the worker the placement names,
        else ``w0``. Returns ``{placement_generation, bound}``. The boot is asked
        once the root is read: a client that reconnected meanwhile has a new one."""
        root = yield from self.root()
        placement = root.get("placement")
        executor = placement.get("executor") if isinstance(placement, Mapping) else None
        if isinstance(executor, Mapping) and executor.get("boot") == self.boot():
            return {"placement_generation": root["placement_generation"], "bound": False}
        if worker is None:
            named = executor.get("worker") if isinstance(executor, Mapping) else None
            worker = named if isinstance(named, str) else "w0"
        result = yield from self.bind(worker, root["placement_generation"])
        return {**result, "bound": True}

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
        result = yield from _ask("advance_epoch", {"expected_epoch": expected_epoch}, True)
        if self.call_epoch is not None and isinstance(result.get("epoch"), int):
            self.call_epoch = result["epoch"]  # this session moved it: its calls follow
        return result

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
    def _attempt_params(self, op: str, fences: _Fences, *, placed: bool) -> Plan[dict[str, Any]]:
        epoch = self.epoch if fences.expected_epoch is None else fences.expected_epoch
        generation = fences.placement_generation
        if epoch is None or (placed and generation is None):
            root = yield from self.root()
            if epoch is None:
                epoch = root["epoch"]
            if placed and generation is None:
                generation = root["placement_generation"]
        attempt = fences.expected_attempt
        if attempt is None:
            # a pruned op has no attempts listed: the daemon answers `terminal`
            attempt = 1 + len((yield from self.operation(op)).get("attempts") or [])
        params: dict[str, Any] = {"op": op, "expected_attempt": attempt, "expected_epoch": epoch}
        if placed:
            params["placement_generation"] = generation
        return params

    def attempt(self, method: str, op: str, fences: _Fences) -> Plan[dict[str, Any]]:
        """`prepare`, `invoke` or `manual_take`, always with ``expected_epoch``."""
        params = yield from self._attempt_params(op, fences, placed=method != "manual_take")
        return (yield from _ask(method, params, True))

    def placed_attempt(
        self, method: str, op: str, fences: _Fences, *, rebind_stale: bool
    ) -> Plan[dict[str, Any]]:
        """`prepare` or `invoke`; with `rebind_stale`, a ``placement_stale``
        refusal (given before any attempt exists, contract §3.2.1) binds this
        boot's descriptor once (`ensure_placement`) and asks again."""
        try:
            return (yield from self.attempt(method, op, fences))
        except PlacementStale:
            if not rebind_stale:
                raise
        yield from self.ensure_placement(None)
        return (
            yield from self.attempt(method, op, attrs.evolve(fences, placement_generation=None))
        )

    def invoke(
        self, op: str, fences: _Fences, *, rebind_stale: bool, retry: Retry | None
    ) -> Plan[dict[str, Any]]:
        """`invoke`, asking again as `retry` allows (see `Retry` for when)."""
        asks = 0
        while True:
            asks += 1
            try:
                result = yield from self.placed_attempt(
                    "invoke", op, fences, rebind_stale=rebind_stale
                )
            except (TokenVoid, Overloaded) as exc:
                if retry is None or asks >= retry.max_attempts:
                    raise
                answer: Any = exc
            else:
                if retry is None:
                    return result
                if result.get("status") == "unknown":
                    raise MayHaveRun(op, result.get("attempt"), result.get("error"))
                if result.get("status") != "failed" or asks >= retry.max_attempts:
                    return result
                answer = result
            if not isinstance(answer, Overloaded):  # an attempt was made: the next one
                fences = _Fences(expected_epoch=fences.expected_epoch)
            if retry.on_retry is not None:
                retry.on_retry(asks, answer)
            yield _Sleep(retry.pause(asks))

    def call(
        self,
        params: dict[str, Any],
        placement_generation: int | None,
        expected_epoch: int | None,
        *,
        rebind_stale: bool,
    ) -> Plan[dict[str, Any]]:
        """`call` in one request, always with ``expected_epoch`` (given,
        pinned, or read once per session: `epoch_for_call`), so that its
        signed bytes replayed after an epoch advance run nothing;
        ``placement_generation`` only when given (the daemon takes the
        current one). With `rebind_stale`, a ``placement_stale`` refusal
        (a refused call writes nothing) binds this boot's descriptor once
        (`ensure_placement`) and asks again."""
        if expected_epoch is None:
            expected_epoch = yield from self.epoch_for_call()
        params["expected_epoch"] = expected_epoch
        if placement_generation is not None:
            params["placement_generation"] = placement_generation
        try:
            return (yield from _ask("call", params, True))
        except PlacementStale:
            if not rebind_stale or placement_generation is not None:
                raise
        yield from self.ensure_placement(None)
        return (yield from _ask("call", params, True))

    def rebind(self, op: str, expected_epoch: int | None) -> Plan[dict[str, Any]]:
        if expected_epoch is None:
            expected_epoch = self.epoch
        if expected_epoch is None:
            expected_epoch = (yield from self.root())["epoch"]
        return (yield from _ask("rebind", {"op": op, "expected_epoch": expected_epoch}, True))


def _outcome(status: str, value: Any) -> dict[str, Any]:
    outcome: dict[str, Any] = {"status": status}
    if value is not NO_VALUE:
        outcome["value"] = value
    return outcome


#: How many prepared tokens a session remembers the op and attempt of.
_TOKENS_KEPT = 1024


class _SessionBase:
    def __init__(
        self, neuron: Neuron, network: str | None, epoch: int | None, boot: Callable[[], str]
    ) -> None:
        self.neuron = neuron
        self._network = network
        self._plans = _Plans(neuron.id, epoch, boot)
        # token -> (op, attempt) of the tokens this session prepared, so that an
        # execute in doubt names its attempt; the newest _TOKENS_KEPT, each
        # forgotten once executed (a handle is never shown: repr(self) has none)
        self._tokens: dict[bytes, tuple[str, int]] = {}

    def _prepared(self, op: str, prepared: Prepared) -> Prepared:
        """Remember what `prepared`'s token runs; return it."""
        self._tokens[prepared.token] = (op, prepared.attempt.attempt)
        while len(self._tokens) > _TOKENS_KEPT:
            del self._tokens[next(iter(self._tokens))]
        return prepared

    def _runs(self, token: bytes) -> tuple[str, int] | None:
        """The op and attempt a token of this session's runs (forgotten now), if known."""
        return self._tokens.pop(bytes(token), None)

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
        # the caller's span, when it traces with OpenTelemetry: outside the signature
        trace = current_trace() if call.method in DISPATCH_METHODS else None
        if not call.signed:
            return {**call.params, **trace} if trace else call.params
        params = dict(call.params)
        if self._network is not None:
            # Naming the network makes a mismatch `wrong_network` (contract §4)
            # rather than a bare `unauthenticated`.
            params["network"] = self._network
        signed = self.neuron.sign(call.method, params, self._network or hello.network)
        if trace:
            signed.update(trace)
        return signed
