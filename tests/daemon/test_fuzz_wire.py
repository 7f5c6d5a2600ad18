"""Wire fuzzing against one shared real daemon (contract §4).

Promises checked, over a real Unix socket to a real ``wardd`` process:

- every frame gets the answer §4 gives it: a body that is not exactly one
  well-formed CBOR item gets ``bad_frame`` (id null) and the connection is
  closed; a well-formed item that is not a request gets ``protocol_error``
  (with the id when one could be read) and the connection stays open once
  greeted; a request gets one reply carrying its id, with a code from the
  error table and never ``internal``; every reply is itself a well-formed
  reply (``parse_reply``: ``message`` is text);
- the daemon never dies and keeps answering ``status``;
- a refused request changes nothing: ``status.operations``, the writer's
  batch count, and a neuron's ``get_neuron``/``get_prog``/``get_operation``/
  ``history``/``list_attempts`` are the same before and after each batch
  (no refused request even reaches the writer).

The oracle for "what answer should this frame get" is the sans-IO protocol
code itself (``decode_item``, ``parse_request``), which has its own unit and
property tests; what is fuzzed here is the daemon around it.

The default-suite form runs a few thousand cases; ``make soak`` runs the
soak-marked form (``WARDD_SOAK_CASES``, default 100,000 cases). Frames
written by hand are in test_fuzz_frames.py, slow, half-closed and idle
connections in test_fuzz_connections.py (the same shared daemon:
tests/daemon/_fuzz.py).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from typing import Any

import cbor2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.daemon._fuzz import Closed, Target, Wire, deep, framed
from tests.daemon._stall_probe import Span, during, figures_of, report
from tests.daemon.harness import NETWORK
from wardd.protocol import (
    ERRORS,
    MAX_DEPTH,
    BadFrame,
    ErrorReply,
    ProtocolError,
    Response,
    decode_item,
    parse_request,
)

SOAK_CASES = int(os.environ.get("WARDD_SOAK_CASES", "0") or 0)
SOAK_BUDGET_S = float(os.environ.get("WARDD_SOAK_BUDGET_S", "0") or 0)  # 0: none
#: Default-suite examples per hypothesis test (there are five such tests).
DEFAULT_EXAMPLES = 1200

# Container and float keys are drawn too: a param *key* the daemon echoed back
# in ``bad_request.data.param`` once killed it (test_fuzz_frames.py::TestRegressions).


def hyp_settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        print_blob=True,
    )


# -- strategies -----------------------------------------------------------------------------

uints = st.integers(min_value=0, max_value=2**64 - 1)
ints = st.integers(min_value=-(2**64), max_value=2**64 - 1)
scalars = (
    st.none()
    | st.booleans()
    | ints
    | st.floats()
    | st.text(max_size=24)
    | st.binary(max_size=40)
    | st.sampled_from([0, 1, 2**63 - 1, 2**63, -1, "", b"", float("nan"), float("inf")])
)


def _key_strategy(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    plain = st.text(max_size=10) | st.integers(-5, 5) | st.binary(max_size=6) | st.booleans()
    return plain | st.floats() | container_keys | deep_keys


def _nest_key(n: int) -> Any:
    key: Any = 0
    for _ in range(n):
        key = (key,)
    return key


#: Hashable keys as decode_item builds them: tuples and frozendicts, any float.
container_keys = st.recursive(
    st.floats() | st.integers(-5, 5) | st.text(max_size=4),
    lambda c: (
        st.lists(c, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=4) | st.floats(), c, max_size=3).map(cbor2.frozendict)
    ),
    max_leaves=6,
)
deep_keys = st.integers(MAX_DEPTH - 8, MAX_DEPTH - 2).map(_nest_key)


def _containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(children, max_size=5) | st.dictionaries(
        _key_strategy(children), children, max_size=5
    )


wire_values = st.recursive(scalars, _containers, max_leaves=20)


def _all_methods() -> list[str]:
    from wardd.daemon.dispatch.handlers import METHODS

    return sorted({*METHODS, "hello"})


def _all_param_names() -> list[str]:
    from wardd.daemon.dispatch.handlers import METHODS

    names = {"neuron", "sig", "network", "protocol", "client"}
    for method in METHODS.values():
        required, optional = method.params
        names.update(required)
        names.update(optional)
    return sorted(names)


METHODS = _all_methods()
PARAM_NAMES = _all_param_names()


@st.composite
def param_values(draw: st.DrawFn, t: Target) -> Any:
    """Values that look right and wrong: real ids, ops and tokens beside junk."""
    return draw(
        st.sampled_from([t.actor.id, t.actor.prog, *t.ops, "echo", "ledger", "w0", NETWORK])
        | st.binary(min_size=32, max_size=32)
        | st.binary(min_size=64, max_size=64)
        | st.sampled_from(["active", "paused", "succeeded", "unknown", "prepared"])
        | st.fixed_dictionaries({"status": st.sampled_from(["succeeded", "failed", "bogus"])})
        | uints
        | wire_values
    )


@st.composite
def request_like(draw: st.DrawFn, t: Target) -> Any:
    """A map that resembles a request, with wrong types in random places."""
    item: dict[Any, Any] = {}
    if draw(st.integers(0, 9)):
        item["id"] = draw(uints) if draw(st.integers(0, 4)) else draw(wire_values)
    if draw(st.integers(0, 9)):
        item["method"] = (
            draw(st.sampled_from(METHODS)) if draw(st.integers(0, 5)) else draw(wire_values)
        )
    if draw(st.integers(0, 9)):
        if draw(st.integers(0, 5)):
            names = st.sampled_from(PARAM_NAMES) | _key_strategy(wire_values)
            item["params"] = draw(st.dictionaries(names, param_values(t), max_size=7))
        else:
            item["params"] = draw(wire_values)
    if not draw(st.integers(0, 12)):
        item[draw(_key_strategy(wire_values))] = draw(wire_values)
    return item


@st.composite
def odd_bodies(draw: st.DrawFn) -> bytes:
    """Frame bodies: random bytes, mutated encodings, deep nesting, huge declared lengths."""
    kind = draw(st.sampled_from(["random", "mutated", "deep", "huge", "indefinite", "simple"]))
    if kind == "random":
        return draw(st.binary(min_size=1, max_size=200))
    if kind == "mutated":
        base = {"id": draw(uints), "method": draw(st.sampled_from(METHODS)), "params": {}}
        data = bytearray(cbor2.dumps(base))
        for _ in range(draw(st.integers(1, 4))):
            pos = draw(st.integers(0, len(data) - 1))
            op = draw(st.sampled_from(["flip", "insert", "delete"]))
            if op == "flip":
                data[pos] ^= 1 << draw(st.integers(0, 7))
            elif op == "insert":
                data.insert(pos, draw(st.integers(0, 255)))
            elif len(data) > 1:
                del data[pos]
        return bytes(data)
    if kind == "deep":
        n = draw(st.integers(MAX_DEPTH - 3, MAX_DEPTH + 3))
        as_map = draw(st.booleans())
        # nested *inside a request's params* or bare
        inner = deep(n - 2, as_map=as_map)
        if draw(st.booleans()):
            return cbor2.dumps({"id": 7, "method": "status", "params": {"x": inner}})
        return cbor2.dumps(deep(n, as_map=as_map))
    if kind == "huge":
        # a string, array or map header declaring far more than the frame holds
        major = draw(st.sampled_from([0x40, 0x60, 0x80, 0xA0]))
        n = draw(st.sampled_from([2**16 - 1, 2**32 - 1, 2**63, 2**64 - 1]))
        head = bytes([major | 27]) + n.to_bytes(8, "big")
        return head + draw(st.binary(max_size=16))
    if kind == "indefinite":
        opener = draw(st.sampled_from([b"\x9f", b"\xbf", b"\x5f", b"\x7f"]))
        return opener * draw(st.integers(1, 80)) + draw(st.binary(max_size=8))
    # reserved / simple values / tags
    return draw(
        st.sampled_from([b"\xf7", b"\xf8\x20", b"\xc1\x00", b"\x1c", b"\xff", b"\xf0", b"\xa1\x01"])
    )


# -- the oracle -------------------------------------------------------------------------------


def expected(body: bytes) -> tuple[str, Any]:
    """What contract §4 says the daemon answers to one frame body on a greeted connection."""
    try:
        item = decode_item(body)
    except BadFrame:
        return "bad_frame", None
    try:
        req = parse_request(item)
    except ProtocolError as err:
        return "protocol_error", err.request_id
    return "request", req


def run_case(t: Target, body: bytes, *, greet: bool = True) -> None:
    """Send one frame body; check its one reply, then that status still answers."""
    with t.case():
        _run_case(t, body, greet)


def _run_case(t: Target, body: bytes, greet: bool) -> None:
    if greet:
        w = t.greeted()
    else:
        t.drop_wire()
        w = Wire(t.path)
    what, info = expected(body)
    w.send_frame(body)
    try:
        r = w.reply()
    except Closed:
        raise AssertionError(
            f"no reply to a {what} frame; daemon alive: {t.alive()}\n" + t.daemon.log_text()[-3000:]
        ) from None
    if what == "bad_frame":
        assert isinstance(r, ErrorReply) and r.error.code == "bad_frame" and r.id is None, r
        assert w.at_eof(), "a bad frame must close the connection"
        w.close()
        t.wire = None
    elif what == "protocol_error" or not greet:
        if what == "request" and info.method == "hello":
            ok = info.params.get("protocol") == 1 and isinstance(info.params.get("client"), str)
            if ok and not isinstance(info.params.get("protocol"), bool):
                assert isinstance(r, Response), r
                w.close()
                return
        assert isinstance(r, ErrorReply) and r.error.code == "protocol_error", r
        if what == "protocol_error":
            assert r.id == info, (r.id, info)
        if not greet:
            assert w.at_eof(), "a refused first request must close the connection"
            w.close()
    else:
        req = info
        assert r.id == req.id, (r.id, req.id)
        if isinstance(r, ErrorReply):
            assert r.error.code in ERRORS, r.error.code
            assert r.error.code != "internal", f"internal error for {req.method}: {r.error}"
            if req.method == "hello":
                assert r.error.code == "unknown_method"
    if greet and t.wire is not None:
        st_ = t.wire.call("status")
        assert st_["boot"] == t.daemon.boot
    assert t.alive(), "the daemon died:\n" + t.daemon.log_text()[-4000:]


# -- the batches ------------------------------------------------------------------------------


def fuzz_random_items(t: Target, examples: int) -> None:
    @hyp_settings(examples)
    @given(wire_values)
    def case(value: Any) -> None:
        run_case(t, cbor2.dumps(value))

    case()


def fuzz_request_like(t: Target, examples: int) -> None:
    @hyp_settings(examples)
    @given(request_like(t), st.integers(0, 15))
    def case(item: Any, greet: int) -> None:
        run_case(t, cbor2.dumps(item), greet=bool(greet))

    case()


def fuzz_odd_bodies(t: Target, examples: int) -> None:
    @hyp_settings(examples)
    @given(odd_bodies())
    def case(body: bytes) -> None:
        run_case(t, body)

    case()


#: Per signed-param check in daemon/wire/params.py, values it must refuse.
WRONG = {
    "uint": [-1, 2**63, True, "1", 1.0, None, b"\x01", [1]],
    "id": ["", "a b", "x" * 129, "é", 5, None, b"op", ["op"]],
    "bool": [0, 1, "true", None, b""],
    "bytes": ["text", 5, None, [b"x"]],
    "map": [[], "d", 5, None],
    "acts": ["echo", ["bad tag"], [5], {"echo": True}, [None]],
    "outcome": [{"status": "maybe"}, {"status": "failed", "x": 1}, "failed", [], {}],
    "state": ["Active", "", 5, None],
    "neuron": ["ABC", "A" * 64, 5, b"\x00" * 32],
    "sig": [b"\x00" * 63, "s" * 64, 5, None],
    "network": [5, b"net", "n" * 257, None],
}


#: optional params in _valid_signed_params (leaving one out is no error)
OPTIONAL_SIGNED = {
    ("prepare", "expected_epoch"),
    ("set_prog_state", "expected_state_version"),
    ("recover_reservations", "before"),
}


def _valid_signed_params(t: Target) -> dict[str, tuple[dict[str, Any], dict[str, str]]]:
    """(well-formed params, field -> kind) per signed method."""
    op = {"op": "fz-pending"}
    return {
        "register_neuron": ({}, {}),
        "bind_placement": (
            {"expected_generation": 1, "descriptor": {"v": 1}},
            {"expected_generation": "uint", "descriptor": "map"},
        ),
        "release_placement": ({"expected_generation": 1}, {"expected_generation": "uint"}),
        "advance_epoch": ({"expected_epoch": 1}, {"expected_epoch": "uint"}),
        "set_grant": (
            {"prog": t.actor.prog, "acts": [], "enabled": False, "expected_policy_version": 1},
            {"prog": "id", "acts": "acts", "enabled": "bool", "expected_policy_version": "uint"},
        ),
        "create_prog": ({"prog": "p2", "step_limit": 5}, {"prog": "id", "step_limit": "uint"}),
        "set_prog_state": (
            {
                "prog": t.actor.prog,
                "expected_state": "active",
                "state": "paused",
                "expected_state_version": 1,
            },
            {
                "prog": "id",
                "expected_state": "state",
                "state": "state",
                "expected_state_version": "uint",
            },
        ),
        "submit": (
            {"prog": t.actor.prog, "op": "new", "act": "echo", "args": b""},
            {"prog": "id", "op": "id", "act": "id", "args": "bytes"},
        ),
        "prepare": (
            {**op, "expected_attempt": 1, "placement_generation": 1, "expected_epoch": 1},
            {
                "op": "id",
                "expected_attempt": "uint",
                "placement_generation": "uint",
                "expected_epoch": "uint",
            },
        ),
        "invoke": (
            {**op, "expected_attempt": 1, "placement_generation": 1},
            {"op": "id", "expected_attempt": "uint", "placement_generation": "uint"},
        ),
        "manual_take": ({**op, "expected_attempt": 1}, {"op": "id", "expected_attempt": "uint"}),
        "reconcile": (
            {**op, "attempt": 1, "outcome": {"status": "failed"}},
            {"op": "id", "attempt": "uint", "outcome": "outcome"},
        ),
        "cancel": (op, {"op": "id"}),
        "consume": (op, {"op": "id"}),
        "rebind": (op, {"op": "id"}),
        "reserve_steps": (
            {"prog": t.actor.prog, "reservation": "r", "steps": 1},
            {"prog": "id", "reservation": "id", "steps": "uint"},
        ),
        "settle_steps": (
            {"prog": t.actor.prog, "reservation": "r", "steps": 1},
            {"prog": "id", "reservation": "id", "steps": "uint"},
        ),
        "recover_reservations": (
            {"prog": t.actor.prog, "before": 1},
            {"prog": "id", "before": "uint"},
        ),
        "check_receipts": ({}, {}),
    }


def fuzz_signed_wrong_types(t: Target, examples: int) -> None:
    """Validly signed by a registered neuron, but one field wrong: always bad_request."""
    valid = _valid_signed_params(t)

    @st.composite
    def broken(draw: st.DrawFn) -> tuple[str, dict[str, Any], str]:
        method = draw(st.sampled_from(sorted(valid)))
        params, kinds = valid[method]
        params = dict(params)
        how = draw(st.sampled_from(["wrong", "missing", "extra", "float", "envelope"]))
        if how == "wrong" and kinds:
            field = draw(st.sampled_from(sorted(kinds)))
            params[field] = draw(st.sampled_from(WRONG[kinds[field]]))
        elif how == "missing" and kinds:
            required = [k for k in kinds if (method, k) not in OPTIONAL_SIGNED]
            del params[draw(st.sampled_from(required))]
        elif how == "float":
            params["acts" if method == "set_grant" else "x"] = [1.5]
        elif how == "envelope":
            field = draw(st.sampled_from(["neuron", "sig", "network"]))
            return method, params, field
        else:
            reserved = {*kinds, "neuron", "sig", "network"}
            params[draw(st.text(min_size=1, max_size=8).filter(lambda k: k not in reserved))] = 1
        return method, params, ""

    @hyp_settings(examples)
    @given(broken(), st.data())
    def case(shape: tuple[str, dict[str, Any], str], data: st.DataObject) -> None:
        method, params, envelope = shape
        signed = t.actor.neuron.sign(method, params, NETWORK)
        if envelope:
            signed[envelope] = data.draw(st.sampled_from(WRONG[envelope]))
        body = cbor2.dumps({"id": 5, "method": method, "params": signed})
        with t.case():
            w = t.greeted()
            w.send_frame(body)
            r = w.reply()
            assert isinstance(r, ErrorReply) and r.error.code == "bad_request", (method, params, r)

    case()


def fuzz_streams(t: Target, examples: int) -> None:
    """Raw random byte streams (any framing) then a half-close: replies stay well-formed."""

    @hyp_settings(examples)
    @given(st.lists(st.binary(max_size=64) | odd_bodies().map(framed), max_size=6), st.booleans())
    def case(chunks: list[bytes], greet: bool) -> None:
        with t.case():
            stream_case(t, chunks, greet)

    case()


def stream_case(t: Target, chunks: list[bytes], greet: bool) -> None:
    w = Wire(t.path)
    try:
        if greet:
            w.hello()
        try:
            for c in chunks:
                w.send(c)
            w.sock.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the daemon closed after a bad frame: what it sent is still readable
        replies = 0
        while True:
            try:
                w.reply()
            except Closed:
                break
            replies += 1
            assert replies <= 64
    finally:
        w.close()
    assert t.alive(), "the daemon died:\n" + t.daemon.log_text()[-4000:]


BATCHES: dict[str, Callable[[Target, int], None]] = {
    "random_items": fuzz_random_items,
    "request_like": fuzz_request_like,
    "odd_bodies": fuzz_odd_bodies,
    "signed_wrong_types": fuzz_signed_wrong_types,
    "streams": fuzz_streams,
}


# -- the tests --------------------------------------------------------------------------------


class TestFuzz:
    """Hypothesis-driven frames: one correct reply each, the daemon lives, nothing changes."""

    def test_random_cbor_items_get_their_contract_answer_and_change_nothing(self, unchanged):
        """Any well-formed CBOR item: protocol_error (not a request) or a request's reply."""
        fuzz_random_items(unchanged, DEFAULT_EXAMPLES)

    def test_request_shaped_maps_with_wrong_types_are_refused_and_change_nothing(self, unchanged):
        """Maps resembling requests (real method names, real ids, junk types) are refused."""
        fuzz_request_like(unchanged, DEFAULT_EXAMPLES)

    def test_odd_bodies_are_bad_frames_and_close_only_their_connection(self, unchanged):
        """Random bytes, mutations, deep nesting, huge declared lengths, tags, simple values."""
        fuzz_odd_bodies(unchanged, DEFAULT_EXAMPLES)

    def test_validly_signed_params_with_one_wrong_field_are_bad_request(self, unchanged):
        """Types are checked before anything else, even under a good signature (contract §4)."""
        fuzz_signed_wrong_types(unchanged, DEFAULT_EXAMPLES // 2)

    def test_random_byte_streams_then_half_close_never_kill_the_daemon(self, unchanged):
        """Unframed garbage, partial frames, pipelined frames, then EOF."""
        fuzz_streams(unchanged, DEFAULT_EXAMPLES // 2)


class TestStallProbe:
    """The soak's stall probe, a process of its own, reports the round trips it made."""

    def test_the_probe_reports_round_trips_made_while_it_ran(self, target, stall_probe):
        """Its figures are ordered, and its worst ended between its start and
        its stop on this process's clock (which names the batch it fell in)."""
        figures = stall_probe.finish()
        stopped = time.monotonic()
        assert figures.count >= 1, figures
        assert 0 < figures.median_s <= figures.p99_s <= figures.p999_s <= figures.worst_s
        worst_start = figures.worst_end - figures.worst_s
        assert stall_probe.started <= worst_start <= figures.worst_end <= stopped, figures
        # its wall-clock end is in seconds of the wall clock, not of another clock
        assert abs(figures.worst_end_wall - time.time()) < 600, figures

    def test_the_figures_are_ranks_of_every_round_trip(self):
        samples = [ms / 1000 for ms in range(1000, 0, -1)]  # 1 ms .. 1000 ms
        f = figures_of(samples, worst_end=5.0, worst_end_wall=6.0)
        assert (f.count, f.median_s, f.p99_s, f.p999_s, f.worst_s) == (
            1000,
            0.501,
            0.991,
            1.0,
            1.0,
        )
        assert figures_of([], 0.0, 0.0).count == 0

    def test_the_worst_is_named_by_the_batch_running_when_it_ended(self):
        spans = [Span("random_items", 10.0, 20.0), Span("request_like", 21.0, 30.0)]
        assert during(spans, 15.0) == "random_items"
        assert during(spans, 30.0) == "request_like"
        assert during(spans, 20.5) == "-"  # between batches (the state check)
        line = report(figures_of([0.002, 0.004], 25.0, 0.0), spans)
        assert line.startswith("stall_probes=2 stall_worst_ms=4.0 (in request_like, 00:00:00 UTC)")
        assert "stall_p99_ms=4.0 stall_p99.9_ms=4.0 stall_median_ms=4.00" in line


# -- the soak form ----------------------------------------------------------------------------


@pytest.mark.soak
@pytest.mark.timeout(0)
@pytest.mark.skipif(not SOAK_CASES, reason="soak: run by `make soak` (WARDD_SOAK_CASES)")
def test_fuzz_soak(target, stall_probe):
    """The same batches at soak size (>= 100k cases), state checked after
    each batch; a quiet client's worst round trip meanwhile, from a process
    of its own, is reported as the worst event-loop stall
    (tests/daemon/_stall_probe.py): reported, not asserted."""
    per = max(1, SOAK_CASES // len(BATCHES) // 10)
    start = target.cases
    spans: list[Span] = []
    t0 = time.monotonic()
    over = False
    while target.cases - start < SOAK_CASES and not over:
        for name, batch in BATCHES.items():
            before = target.snapshot()
            began = time.monotonic()
            batch(target, per)
            spans.append(Span(name, began, time.monotonic()))
            target.drop_wire()
            assert not target.deaths, f"the daemon died in {name}:\n" + target.deaths[-1]
            assert target.snapshot() == before, f"a refused request changed state ({name})"
            over = bool(SOAK_BUDGET_S) and time.monotonic() - t0 > SOAK_BUDGET_S
            if over:
                break
    seconds = time.monotonic() - t0
    stall = "stall_probe=failed"
    try:
        stall = report(stall_probe.finish(), spans)
    finally:  # the fuzz's figures, even without the probe's
        print(
            f"\nwire fuzz soak: cases={target.cases - start} seconds={seconds:.0f} "
            f"deaths={len(target.deaths)} {stall}"
            + (f" budget_reached={SOAK_BUDGET_S:.0f}s" if over else "")
        )
