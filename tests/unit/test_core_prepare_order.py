"""Contract §3.2.1 as a table: prepare's (and manual_take's) checks answer in their order.

Each row breaks one check while every later check is broken too and every
earlier one passes: the answer must be that row's code, so a check moved
after a later one, or dropped, fails here. The records are built in memory
and handed to the pure core (no daemon, no database).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest

from tests.unit._world import ACT, BOUND, DIGEST, OLD_BOOT, World, build
from wardd.daemon.core.attempts import (
    invoke_claim,
    invoke_precheck,
    manual_take,
    prepare,
    prepare_checks,
)
from wardd.daemon.core.records import AttemptRef, BootContext, OpView
from wardd.protocol import AttemptState, ProgState, WarddError

A = AttemptState


Break = Callable[[World], None]
Row = tuple[int, str, str, Break]


def _set(**fields: Any) -> Break:
    def apply(w: World) -> None:
        for k, v in fields.items():
            setattr(w, k, v)

    return apply


def _add_open(state: AttemptState) -> Break:
    def apply(w: World) -> None:
        w.open_states = (*w.open_states, state)

    return apply


# (position in contract §3.2.1's table, id, code, the break). Rows at one
# position are variants of one check (same code): none counts as "later"
# than another. Position 0: the signer's neuron, checked before the table
# (a request of an unregistered neuron is `unknown_neuron`, contract §4).
# Position 1 (params well formed, `bad_request`) is the protocol layer's:
# the core is handed well-formed params. Position 12 (`unsupported_profile`,
# `unsupported_guarantee`) cannot fail through the daemon (bind_placement
# admits only a descriptor this daemon advertised, contract §3.1); the core
# checks it all the same, so the records below make it fail directly.
GUARDED: list[Row] = [
    (0, "neuron-unregistered", "unknown_neuron", _set(neuron=False)),
    (2, "op-absent", "unknown_operation", _set(op="absent")),
    (3, "op-cancelled", "terminal", _set(cancelled=True)),
    (3, "op-consumed", "terminal", _set(consumed=True)),
    (3, "op-pruned", "terminal", _set(op="pruned")),
    (4, "epoch-stale", "epoch_mismatch", _set(expected_epoch="stale")),
    (5, "prog-paused", "prog_inactive", _set(prog_state=ProgState.PAUSED)),
    (5, "prog-retired", "prog_inactive", _set(prog_state=ProgState.RETIRED)),
    (6, "budget-exhausted", "budget_exhausted", _set(exhausted=True)),
    (7, "grant-disabled", "grant_disabled", _set(grant="disabled")),
    (7, "grant-missing", "grant_disabled", _set(grant="missing")),
    (8, "act-not-granted", "act_not_granted", _set(act_granted=False)),
    (9, "placement-unbound", "placement_unbound", _set(placement=False)),
    (10, "generation-old", "generation_mismatch", _set(generation_current=False)),
    (11, "placement-earlier-boot", "placement_stale", _set(placement_boot=OLD_BOOT)),
    (11, "placement-not-advertised", "placement_stale", _set(advertised=False)),
    (12, "profile-other-machine", "unsupported_profile", _set(profile="other_machine")),
    (12, "profile-other-backend", "unsupported_profile", _set(profile="other_backend")),
    (12, "profile-hard-limit", "unsupported_guarantee", _set(profile="limited")),
    (13, "act-not-in-descriptor", "act_not_accepted", _set(descriptor_accepts=False)),
    (14, "args-over-bound", "args_too_large", _set(args_len=BOUND + 1)),
    (15, "expected-attempt-wrong", "attempt_mismatch", _set(expected_attempt_right=False)),
    (16, "attempt-prepared", "attempt_busy", _add_open(A.PREPARED)),
    (16, "attempt-running", "attempt_busy", _add_open(A.RUNNING)),
    (17, "attempt-unknown", "attempt_unknown", _add_open(A.UNKNOWN)),
    (18, "attempt-succeeded", "already_succeeded", _set(succeeded=True)),
]

# manual_take (contract §3.5): prepare's checks without those of the
# placement and descriptor; the act's configured bound stands in for the
# descriptor's, and an act the daemon no longer has (its config changed
# since the submit) is `act_not_accepted` where check 13 stands.
MANUAL: list[Row] = [row for row in GUARDED if not 9 <= row[0] <= 13]
MANUAL.insert(
    [r[0] for r in MANUAL].index(14),
    (13, "act-not-configured", "act_not_accepted", _set(act_configured=False)),
)


def _world(table: list[Row], index: int, base: World, *, own: bool = True) -> World:
    """``base`` with every row at a later position than row ``index`` broken,
    and (``own``) row ``index`` itself."""
    w = attrs.evolve(base)
    position = table[index][0]
    # later rows first, so that the row's own break has the last word on a
    # shared knob (op absent vs pruned)
    for pos, _id, _code, brk in reversed(table):
        if pos > position:
            brk(w)
    if own:
        table[index][3](w)
    return w


def _next_code(table: list[Row], index: int) -> str | None:
    """The code of the first check after row ``index``'s position (None: none left)."""
    return next((code for pos, _i, code, _b in table if pos > table[index][0]), None)


def _code(call: Callable[[], Any]) -> str | None:
    try:
        call()
    except WarddError as e:
        return e.code
    return None


def test_a_request_that_passes_every_check_prepares_the_next_attempt():
    """With every check passing, prepare answers a new attempt numbered 1 + the op's attempts."""
    ctx, view, params = build(World())
    ref = prepare(ctx, view, params).reply
    assert isinstance(ref, AttemptRef)
    assert (ref.attempt, ref.epoch, ref.placement_generation, ref.digest) == (3, 3, 5, DIGEST)
    assert invoke_precheck(ctx, view, params) == ("w0", ACT)
    assert isinstance(_invoke(ctx, view, params).reply, AttemptRef)
    params.pop("expected_epoch")
    assert _code(lambda: prepare_checks(ctx, view, params)) is None  # "when given"


def _invoke(ctx: BootContext, view: OpView, params: dict[str, Any]) -> Any:
    return invoke_claim(ctx, view, params, worker="w0", claim_info=None, stopping=False)


#: prepare, and invoke both on arrival and in its claim unit (contract §3.2.5:
#: it fails with prepare's codes)
GUARDED_METHODS = {"prepare": prepare, "invoke_precheck": invoke_precheck, "invoke": _invoke}


@pytest.mark.parametrize("method", list(GUARDED_METHODS))
@pytest.mark.parametrize("index", range(len(GUARDED)), ids=[r[1] for r in GUARDED])
def test_prepare_answers_the_first_failing_check_in_contract_order(index, method):
    """prepare (and invoke) answer the first failing check's code, however many later ones fail."""
    call = GUARDED_METHODS[method]
    ctx, view, params = build(_world(GUARDED, index, World()))
    assert _code(lambda: call(ctx, view, params)) == GUARDED[index][2]
    # the later checks really fail: with this row passing, the next one answers
    ctx, view, params = build(_world(GUARDED, index, World(), own=False))
    assert _code(lambda: call(ctx, view, params)) == _next_code(GUARDED, index)


@pytest.mark.parametrize("index", range(len(MANUAL)), ids=[r[1] for r in MANUAL])
def test_manual_take_answers_the_first_failing_check_in_contract_order(index):
    """manual_take answers the code of its first failing check, placement checks skipped."""
    # no placement at all, from another boot's descriptor: never asked
    base = World(placement=False, generation_current=False, placement_boot=OLD_BOOT)
    w = _world(MANUAL, index, base)
    ctx, view, params = build(w)
    assert _code(lambda: manual_take(ctx, view, params)) == MANUAL[index][2]
    ctx, view, params = build(_world(MANUAL, index, base, own=False))
    assert _code(lambda: manual_take(ctx, view, params)) == _next_code(MANUAL, index)


def test_manual_take_passes_without_a_placement():
    """manual_take needs no placement: with its own checks passing it takes an unknown attempt."""
    ctx, view, params = build(World(placement=False, placement_boot=OLD_BOOT, advertised=False))
    ref = manual_take(ctx, view, params).reply
    assert isinstance(ref, AttemptRef)
    assert (ref.attempt, ref.digest, ref.placement_generation, ref.worker) == (3, None, None, None)


def test_each_row_alone_fails_with_its_code():
    """Each check, broken alone with every other passing, answers its own code (the row is live)."""
    for _pos, row_id, code, brk in GUARDED:
        w = World()
        brk(w)
        ctx, view, params = build(w)
        assert _code(lambda: prepare(ctx, view, params)) == code, row_id  # noqa: B023
