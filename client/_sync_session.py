# Generated from client/_async_session.py by client/_unasync.py: do not edit.
# Edit _async_session.py, then run `make unasync` (a unit test fails while they differ).
"""`Session`: signed and read calls for one neuron over a `Client` (contract §3, §4).

`_async_session.py` is the one source of both sessions: `_unasync.py` writes
the blocking `Session` into `_sync_session.py` from it, as httpcore does with
unasync (`make unasync`; a unit test fails while the two differ). What each
method sends, and which compare-and-set values it reads first, is written
once, as a plan, in `_session.py`; `_drive` runs a plan on the client.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from wardd.protocol import WarddError, may_have_run

from . import _sync as _io
from ._core import HelloResult
from ._errors import ConnectionClosed
from ._neuron import Neuron
from ._results import (
    Aborted,
    Called,
    Cancelled,
    Consumed,
    Dispatched,
    EpochChanged,
    GrantChanged,
    HistoryRecord,
    ListedAttempt,
    ManualTaken,
    NeuronRoot,
    Operation,
    OperationSummary,
    Page,
    PlacementChanged,
    Prepared,
    Prog,
    ProgCreated,
    ProgStateChanged,
    Rebound,
    ReceiptsChecked,
    Reconciled,
    Record,
    Registered,
    Released,
    Reservation,
    Status,
    StepLimitChanged,
    Submitted,
    Worker,
    _page,
)
from ._session import (
    NO_VALUE,
    Plan,
    Retry,
    _ask,
    _Call,
    _claimed,
    _execute,
    _Fences,
    _in_doubt,
    _lost,
    _outcome,
    _SessionBase,
    _Sleep,
    _timed_out,
)

if TYPE_CHECKING:  # annotations only; the client is whatever the caller passes
    from ._sync import Client

__all__ = ["Session"]

T = TypeVar("T")
R = TypeVar("R", bound=Record)


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
        super().__init__(neuron, network, epoch, self._boot)
        self.client = client

    def _run(self, plan: Plan[T]) -> T:
        return _drive(self.client, plan, self._wire_params)

    def _run_typed(self, record: type[R], plan: Plan[Any]) -> R:
        return record.from_wire(self._run(plan))

    def signed(self, method: str, params: Mapping[str, Any] | None = None) -> Any:
        """Sign and send any method (the escape hatch for what has no helper)."""
        return self._run(_ask(method, dict(params or {})))

    # -- reads ----------------------------------------------------------------------
    def status(self) -> Status:
        """The daemon's `status` (contract §4)."""
        return self._run_typed(Status, _ask("status", {}, signed=False))

    def workers(self) -> Page[Worker]:
        """`list_workers`: each worker's descriptor and digest."""
        workers = self._run(_ask("list_workers", {}, signed=False))
        return _page(Worker, workers, "workers")

    def get_neuron(self) -> NeuronRoot:
        """This neuron's root: epoch, policy_version, placement, grants."""
        return self._run_typed(NeuronRoot, self._plans.root())

    def get_prog(self, prog: str) -> Prog:
        """One prog of this neuron."""
        return self._run_typed(Prog, self._plans.prog(prog))

    def get_operation(self, op: str) -> Operation:
        """One op of this neuron with its attempts and result."""
        return self._run_typed(Operation, self._plans.operation(op))

    def list_operations(
        self, state: str | None = None, prog: str | None = None
    ) -> Page[OperationSummary]:
        """Every op of this neuron (all pages), optionally by state and prog."""
        wire = self._run(self._plans.operations(state, prog))
        return _page(OperationSummary, wire, "operations")

    def history(self, op: str) -> Page[HistoryRecord]:
        """Every event record of one op (all pages); ``pruned`` if the op was pruned."""
        return _page(HistoryRecord, self._run(self._plans.history(op)), "records")

    def list_attempts(self, state: str) -> Page[ListedAttempt]:
        """Every attempt in `state` (unknown, running, prepared) of every neuron."""
        return _page(ListedAttempt, self._run(self._plans.attempts(state)), "attempts")

    # -- neuron root ----------------------------------------------------------------
    def _boot(self) -> str:
        """This connection's boot (asked when needed: a reconnect changes it)."""
        return self.client.hello_result.boot

    def register(self) -> Registered:
        """`register_neuron` for this neuron (idempotent: ``already: true``)."""
        return self._run_typed(Registered, _ask("register_neuron", {}))

    def ensure_placement(self, worker: str | None = None) -> PlacementChanged:
        """Make the placement name this boot: bind `worker`'s current descriptor
        (default: the worker the placement names, else ``w0``) by compare-and-set
        when the placement is unbound or names an earlier boot; do nothing when
        it already names this boot. Returns ``{placement_generation, bound}``.

        After every restart each `prepare`/`invoke` is ``placement_stale`` until
        this (or `bind`) runs: a new boot never inherits a placement (contract §3.1).
        """
        return self._run_typed(PlacementChanged, self._plans.ensure_placement(worker))

    def bind(
        self, worker: str = "w0", *, expected_generation: int | None = None
    ) -> PlacementChanged:
        """Bind the placement to `worker`'s current descriptor (from `list_workers`)."""
        return self._run_typed(
            PlacementChanged, self._plans.bind(worker, expected_generation)
        )

    def release(self, *, expected_generation: int | None = None) -> PlacementChanged:
        """`release_placement`: the placement becomes null."""
        return self._run_typed(PlacementChanged, self._plans.release(expected_generation))

    def advance_epoch(self, *, expected_epoch: int | None = None) -> EpochChanged:
        """`advance_epoch`: retires every request signed for the older epoch."""
        return self._run_typed(EpochChanged, self._plans.advance_epoch(expected_epoch))

    def grant(
        self,
        prog: str,
        acts: Iterable[str] | None,
        *,
        enabled: bool = True,
        expected_policy_version: int | None = None,
    ) -> GrantChanged:
        """`set_grant` for `prog`; `acts=None` keeps its current act set."""
        return self._run_typed(
            GrantChanged, self._plans.grant(prog, acts, enabled, expected_policy_version)
        )

    # -- progs ----------------------------------------------------------------------
    def create_prog(self, prog: str, step_limit: int) -> ProgCreated:
        """`create_prog` (the same content again answers ``already: true``)."""
        return self._run_typed(
            ProgCreated, _ask("create_prog", {"prog": prog, "step_limit": step_limit})
        )

    def set_prog_state(
        self,
        prog: str,
        state: str,
        *,
        expected_state: str | None = None,
        expected_state_version: int | None = None,
    ) -> ProgStateChanged:
        """`set_prog_state`, always fenced by ``expected_state_version``; both
        expected values default to the prog's current ones (read first)."""
        return self._run_typed(
            ProgStateChanged,
            self._plans.set_prog_state(prog, state, expected_state, expected_state_version),
        )

    def set_step_limit(
        self, prog: str, step_limit: int, *, expected_state_version: int | None = None
    ) -> StepLimitChanged:
        """`set_step_limit`, always fenced by ``expected_state_version`` (default:
        the prog's current one, read first). Raising the limit of an exhausted
        prog lets new work pass; what the exhaustion cancelled stays cancelled."""
        return self._run_typed(
            StepLimitChanged, self._plans.set_step_limit(prog, step_limit, expected_state_version)
        )

    def abort(self, op: str, attempt: int | None = None) -> Aborted:
        """`abort` a hung call of a running attempt (default: the op's latest
        attempt): its process group is killed and the attempt ends
        ``unknown`` with ``aborted: true``, for a later ``reconcile``. The
        answer's ``aborted`` is false when the call ended unknown on its own
        before the kill reached it."""
        return self._run_typed(Aborted, self._plans.abort(op, attempt))

    def reserve_steps(self, prog: str, reservation: str, steps: int) -> Reservation:
        """`reserve_steps` (contract §3.4)."""
        params = {"prog": prog, "reservation": reservation, "steps": steps}
        return self._run_typed(Reservation, _ask("reserve_steps", params))

    def settle_steps(self, prog: str, reservation: str, steps: int) -> Reservation:
        """`settle_steps` (contract §3.4)."""
        params = {"prog": prog, "reservation": reservation, "steps": steps}
        return self._run_typed(Reservation, _ask("settle_steps", params))

    def recover_reservations(self, prog: str, *, before: int | None = None) -> Released:
        """`recover_reservations`, always with ``before``: only open reservations
        numbered below it are released (default: the prog's current
        ``reservation_seq``, read first, i.e. every reservation made so far)."""
        return self._run_typed(Released, self._plans.recover_reservations(prog, before))

    # -- operations -----------------------------------------------------------------
    def submit(self, prog: str, op: str, act: str, args: bytes = b"") -> Submitted:
        """`submit` an op (idempotent for identical content)."""
        params = {"prog": prog, "op": op, "act": act, "args": bytes(args)}
        return self._run_typed(Submitted, _ask("submit", params))

    def prepare(
        self,
        op: str,
        *,
        expected_attempt: int | None = None,
        placement_generation: int | None = None,
        expected_epoch: int | None = None,
        rebind_stale: bool = False,
    ) -> Prepared:
        """`prepare` the next attempt: ``{token, attempt}``; `execute` it on this connection.

        `rebind_stale`: on ``placement_stale`` (refused before any attempt
        exists), run `ensure_placement` once and ask again.
        """
        fences = _Fences(expected_attempt, placement_generation, expected_epoch)
        plan = self._plans.placed_attempt("prepare", op, fences, rebind_stale=rebind_stale)
        prepared = self._run_typed(Prepared, plan)
        return self._prepared(op, prepared)

    def execute(self, token: bytes) -> Dispatched:
        """`execute` a token prepared on this session's connection (an error that
        leaves it in doubt names the op and attempt the token was prepared for)."""
        return self._run_typed(Dispatched, _execute(token, self._runs(token)))

    def invoke(
        self,
        op: str,
        *,
        expected_attempt: int | None = None,
        placement_generation: int | None = None,
        expected_epoch: int | None = None,
        rebind_stale: bool = False,
        retry: Retry | None = None,
    ) -> Dispatched:
        """`invoke`: prepare and execute the next attempt in one request.

        `rebind_stale`: on ``placement_stale`` (refused before any attempt
        exists), run `ensure_placement` once and ask again. `retry`: ask again
        only after answers that prove no effect (see `Retry`); with it, an
        ``unknown`` outcome raises `MayHaveRun` instead of being returned.
        """
        fences = _Fences(expected_attempt, placement_generation, expected_epoch)
        plan = self._plans.invoke(op, fences, rebind_stale=rebind_stale, retry=retry)
        return self._run_typed(Dispatched, plan)

    def call(
        self,
        prog: str,
        op: str,
        act: str,
        args: bytes = b"",
        *,
        placement_generation: int | None = None,
        expected_epoch: int | None = None,
        rebind_stale: bool = False,
    ) -> Called:
        """`call`: submit the op and run it in one request (contract §3.2.6).

        The same op with the same content never runs again: the answer is
        what the op already is (``already: true``: its retained value, its
        failure, its consumed state), ``attempt_unknown`` (raised, naming
        the op and attempt: it may have run), or a refusal; other content is
        ``op_conflict``. ``expected_epoch`` is always sent: the one given,
        the session's pinned epoch, or the neuron's epoch as the session's
        first `call` read it (once; kept for the session's life, so that a
        call's signed bytes replayed after `advance_epoch` run nothing:
        after an advance by someone else the session's calls are refused
        ``epoch_mismatch``, and a new session reads the new epoch);
        ``placement_generation`` when given (else the daemon takes the
        current one). `rebind_stale`: on ``placement_stale`` (a
        refused call writes nothing), run `ensure_placement` once and ask again.
        """
        params = {"prog": prog, "op": op, "act": act, "args": bytes(args)}
        return self._run_typed(
            Called,
            self._plans.call(
                params,
                placement_generation,
                expected_epoch,
                rebind_stale=rebind_stale,
            ),
        )

    def manual_take(
        self, op: str, *, expected_attempt: int | None = None, expected_epoch: int | None = None
    ) -> ManualTaken:
        """`manual_take`: an unfenced, potentially executed attempt (contract §3.5)."""
        return self._run_typed(
            ManualTaken,
            self._plans.attempt("manual_take", op, _Fences(expected_attempt, None, expected_epoch)),
        )

    def reconcile(
        self, op: str, attempt: int, status: str, value: Any = NO_VALUE
    ) -> Reconciled:
        """`reconcile` an unknown attempt to succeeded, failed or not_executed."""
        params = {"op": op, "attempt": attempt, "outcome": _outcome(status, value)}
        return self._run_typed(Reconciled, _ask("reconcile", params))

    def cancel(self, op: str) -> Cancelled:
        """`cancel` an op (never executes anything)."""
        return self._run_typed(Cancelled, _ask("cancel", {"op": op}))

    def consume(self, op: str) -> Consumed:
        """`consume` the op's retained result."""
        return self._run_typed(Consumed, _ask("consume", {"op": op}))

    def rebind(self, op: str, *, expected_epoch: int | None = None) -> Rebound:
        """`rebind` a retained result to the current epoch (executes nothing)."""
        return self._run_typed(Rebound, self._plans.rebind(op, expected_epoch))

    def check_receipts(self) -> ReceiptsChecked:
        """`check_receipts` for this neuron's unknown guarded attempts."""
        return self._run_typed(ReceiptsChecked, _ask("check_receipts", {}))


def _drive(
    client: Client,
    plan: Plan[T],
    wire_params: Callable[[_Call, HelloResult], dict[str, Any]],
) -> T:
    """Run `plan` on `client`, the session's one way to the daemon.

    Each call the plan yields is sent with the params `wire_params` makes
    (signed or not) and its result is sent back into the plan; a refusal is
    thrown into the plan, which may answer it (retry, rebind). An error that
    can come after a dispatch's claim, an answer lost after sending, or a
    wait ended by the caller raises, naming the attempt that may have run.
    A `_Sleep` is a retry's backoff."""
    try:
        step = next(plan)
        while True:
            if isinstance(step, _Sleep):  # a retry's backoff
                _io.pause(step.seconds)
                step = plan.send(None)
                continue
            params = wire_params(step, client.hello_result)
            deadline = _io.deadline()  # the caller's, before the wait
            # raising, `send` sent nothing the daemon could apply
            rid = client.send(step.method, params)
            try:
                result = client.recv(rid)
            except ConnectionClosed as exc:
                raise _lost(step, exc) from exc
            except WarddError as exc:
                if may_have_run(step.method, exc):  # an answer after the claim
                    raise _claimed(step, exc) from exc
                step = plan.throw(exc)  # a refusal: the plan may answer it (retry, rebind)
                continue
            except BaseException as exc:  # cancelled, timed out, interrupted
                timed_out = _timed_out(step) if _io.timed_out(exc, deadline) else None
                if timed_out is not None:
                    raise timed_out from exc
                _in_doubt(step, exc)
                raise
            step = plan.send(result)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    finally:
        plan.close()
