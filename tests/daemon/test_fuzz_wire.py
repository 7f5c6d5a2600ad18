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
  (no refused request even reaches the writer);
- slow senders (byte at a time), half-closed sockets and many idle
  connections neither stall other clients nor change the outcome of a
  request the daemon admitted.

The oracle for "what answer should this frame get" is the sans-IO protocol
code itself (``decode_item``, ``parse_request``), which has its own unit and
property tests; what is fuzzed here is the daemon around it.

The default-suite form runs a few thousand cases; ``make soak`` runs the
soak-marked form (``WARDD_SOAK_CASES``, default 100,000 cases).
"""

from __future__ import annotations

import collections
import contextlib
import math
import os
import random
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import cbor2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.daemon.harness import NETWORK, Actor, Daemon, Env
from wardd.protocol import (
    ERRORS,
    MAX_DEPTH,
    BadFrame,
    ErrorReply,
    ProtocolError,
    Response,
    decode_item,
    parse_reply,
    parse_request,
)

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

from _hostile import colliding_keys  # noqa: E402

MAX_FRAME = 1 << 20
SOAK_CASES = int(os.environ.get("WARDD_SOAK_CASES", "0") or 0)
SOAK_BUDGET_S = float(os.environ.get("WARDD_SOAK_BUDGET_S", "0") or 0)  # 0: none
#: Default-suite examples per hypothesis test (there are five such tests).
DEFAULT_EXAMPLES = 1200

# Container and float keys are drawn too: a param *key* the daemon echoed back
# in ``bad_request.data.param`` once killed it (TestRegressions).


def hyp_settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        print_blob=True,
    )


# -- the raw wire ---------------------------------------------------------------------------


class Closed(Exception):
    """The daemon closed the connection (EOF or reset)."""


class Wire:
    """One raw connection: frames out, strictly decoded frames in."""

    def __init__(self, path: str, *, timeout: float = 15.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.buf = b""
        self.next_id = 1000

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_frame(self, body: bytes) -> None:
        self.send(struct.pack(">I", len(body)) + body)

    def request(self, method: str, params: dict[str, Any] | None = None) -> int:
        self.next_id += 1
        self.send_frame(cbor2.dumps({"id": self.next_id, "method": method, "params": params or {}}))
        return self.next_id

    def frame(self) -> Any:
        """The next frame from the daemon, decoded strictly; raises Closed at EOF."""
        while True:
            if len(self.buf) >= 4:
                (n,) = struct.unpack(">I", self.buf[:4])
                assert 1 <= n <= MAX_FRAME, f"the daemon sent a frame of length {n}"
                if len(self.buf) >= 4 + n:
                    body, self.buf = self.buf[4 : 4 + n], self.buf[4 + n :]
                    return decode_item(body)  # the daemon never sends a bad frame
            try:
                chunk = self.sock.recv(1 << 16)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                raise Closed
            self.buf += chunk

    def reply(self) -> Response | ErrorReply:
        """The next reply, which must be a well-formed reply (contract §4)."""
        item = self.frame()
        try:
            return parse_reply(item)
        except ProtocolError as err:
            raise AssertionError(f"malformed reply from the daemon: {err}: {item!r:.300}") from None

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        rid = self.request(method, params)
        r = self.reply()
        assert r.id == rid
        if isinstance(r, ErrorReply):
            raise r.error
        return r.result

    def hello(self) -> Wire:
        self.send_frame(cbor2.dumps({"id": 0, "method": "hello", "params": HELLO_PARAMS}))
        r = self.reply()
        assert isinstance(r, Response) and r.result["protocol"] == 1, r
        return self

    def at_eof(self) -> bool:
        try:
            self.frame()
        except Closed:
            return True
        return False

    def close(self) -> None:
        self.sock.close()


HELLO_PARAMS = {"protocol": 1, "client": "fuzz"}


# -- one shared daemon ----------------------------------------------------------------------


class Target:
    """The shared daemon, an actor with ops in several states, and a snapshot."""

    def __init__(self) -> None:
        # the held token must not expire; and no pruner: its look (every
        # prune_interval_s) writes two batches of its own, which a batch that
        # straddles it would take for a write by a refused request
        self.env = Env(workers=2, token_ttl_s=10**6, retention_s=0)
        self.daemon = Daemon(self.env, shared=True)
        self.deaths: list[str] = []
        self.cases = 0
        try:
            self.actor = self._populate()
        except BaseException:
            self.daemon.cleanup()
            raise
        self.ops = ["fz-pending", "fz-retained", "fz-unknown", "fz-prepared"]
        self.wire: Wire | None = None

    def _populate(self) -> Actor:
        self.daemon.start()
        a = Actor(self.daemon, acts=("echo", "ledger", "boom"))
        a.submit("fz-pending", "echo", b"p")
        a.submit("fz-retained", "echo", b"r")
        a.invoke("fz-retained")
        a.submit("fz-unknown", "boom")
        a.invoke("fz-unknown")
        a.submit("fz-prepared", "ledger", b"t")
        self.token, _ = a.prepare("fz-prepared")  # held on a.client for the module's life
        return a

    @property
    def path(self) -> str:
        return str(self.env.socket)

    def alive(self) -> bool:
        return self.daemon.proc is not None and self.daemon.proc.poll() is None

    def answers(self) -> bool:
        try:
            with _closing(Wire(self.path, timeout=10).hello()) as w:
                return w.call("status")["boot"] == self.daemon.boot
        except (OSError, Closed, AssertionError):
            return False

    def ensure_alive(self) -> None:
        """Restart a dead (or dying) daemon so the next case starts clean; the death
        is recorded for the batch's check."""
        if self.alive() and (self.wire is not None or self.answers()):
            return
        assert self.daemon.proc is not None
        try:
            self.daemon.proc.wait(30)  # a dying daemon: let it finish exiting
        except Exception:  # noqa: BLE001 - a hung one is killed
            self.daemon.proc.kill()
            self.daemon.proc.wait()
        self.deaths.append(self.daemon.log_text()[-4000:])
        self.daemon.close_clients()
        self.daemon.start()
        self.actor.client = self.daemon.connect()
        self.actor.bind(0)  # a new boot inherits no placement
        self.wire = None

    @contextlib.contextmanager
    def case(self) -> Iterator[None]:
        """One fuzz case: a live daemon before; a failed case leaves no stale connection."""
        self.ensure_alive()
        self.cases += 1
        try:
            yield
        except BaseException:
            self.drop_wire()
            raise

    def greeted(self) -> Wire:
        """A greeted connection reused across cases until the daemon closes it."""
        if self.wire is None:
            self.wire = Wire(self.path).hello()
        return self.wire

    def drop_wire(self) -> None:
        if self.wire is not None:
            self.wire.close()
            self.wire = None

    def snapshot(self) -> dict[str, Any]:
        with _closing(Wire(self.path).hello()) as w:
            nid = self.actor.id
            st = w.call("status")
            snap: dict[str, Any] = {
                "boot": st["boot"],
                "operations": st["operations"],
                "unknown_attempts": st["unknown_attempts"],
                "writer_batches": st["writer"]["batches"],
                "neuron": w.call("get_neuron", {"neuron": nid}),
                "prog": w.call("get_prog", {"neuron": nid, "prog": self.actor.prog}),
                "attempts": {
                    s: w.call("list_attempts", {"state": s})["attempts"]
                    for s in ("unknown", "running", "prepared")
                },
            }
            for op in self.ops:
                snap[op] = w.call("get_operation", {"neuron": nid, "op": op})
                snap[op + ".history"] = w.call("history", {"neuron": nid, "op": op})
        return snap

    def cleanup(self) -> None:
        self.drop_wire()
        self.daemon.cleanup()


def _end_wire(w: Wire) -> None:
    """Shut the connection down (which wakes a thread blocked on it), then close it."""
    with contextlib.suppress(OSError):
        w.sock.shutdown(socket.SHUT_RDWR)
    w.close()


class _closing:
    def __init__(self, w: Wire) -> None:
        self.w = w

    def __enter__(self) -> Wire:
        return self.w

    def __exit__(self, *exc: object) -> None:
        self.w.close()


@pytest.fixture(scope="module")
def target() -> Iterator[Target]:
    t = Target()
    try:
        yield t
        print(f"\nwire fuzz: {t.cases} cases")
    finally:
        t.cleanup()


@pytest.fixture
def unchanged(target: Target) -> Iterator[Target]:
    """Snapshot before the batch; after it the daemon answers status and nothing changed."""
    before = target.snapshot()
    yield target
    target.drop_wire()
    deaths, target.deaths = target.deaths, []  # reported once, not to every later test
    target.ensure_alive()
    assert not deaths, f"the daemon died {len(deaths)} times in the batch:\n" + deaths[-1]
    assert target.alive(), "the daemon is not running:\n" + target.daemon.log_text()[-4000:]
    after = target.snapshot()
    assert after == before, "a refused request changed the daemon's state"


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


def _deep(n: int, leaf: Any = 0, *, as_map: bool = False) -> Any:
    for _ in range(n):
        leaf = {"k": leaf} if as_map else [leaf]
    return leaf


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
        inner = _deep(n - 2, as_map=as_map)
        if draw(st.booleans()):
            return cbor2.dumps({"id": 7, "method": "status", "params": {"x": inner}})
        return cbor2.dumps(_deep(n, as_map=as_map))
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
    @given(st.lists(st.binary(max_size=64) | odd_bodies().map(_framed), max_size=6), st.booleans())
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


def _framed(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


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


class TestFrameBounds:
    """Declared lengths and nesting at the edges of contract §4."""

    @pytest.mark.parametrize("length", [0, MAX_FRAME + 1, 2**31, 2**32 - 1])
    def test_a_length_outside_bounds_is_refused_on_the_header_alone(self, unchanged, length):
        """bad_frame without the daemon waiting for (or buffering) the body."""
        w = Wire(unchanged.path).hello()
        w.send(struct.pack(">I", length))
        r = w.reply()
        assert isinstance(r, ErrorReply) and r.error.code == "bad_frame" and r.id is None
        assert w.at_eof()
        w.close()

    def test_a_body_of_exactly_max_frame_is_read_and_answered(self, unchanged):
        """The largest legal frame is a request like any other (here: an unknown param)."""
        w = Wire(unchanged.path).hello()
        pad = b"\x00" * (MAX_FRAME - 64)
        item = {"id": 9, "method": "status", "params": {"pad": pad}}
        body = cbor2.dumps(item)
        body = cbor2.dumps({**item, "params": {"pad": pad + b"\x00" * (MAX_FRAME - len(body))}})
        assert len(body) == MAX_FRAME
        w.send_frame(body)
        r = w.reply()
        assert isinstance(r, ErrorReply) and (r.id, r.error.code) == (9, "bad_request")
        assert w.call("status")["boot"] == unchanged.daemon.boot
        w.close()

    @pytest.mark.parametrize("as_map", [False, True])
    def test_depth_64_is_a_request_error_and_65_a_bad_frame(self, unchanged, as_map):
        """The top-level item is at depth 1: 64 nested containers are fine, 65 are not."""
        w = Wire(unchanged.path).hello()
        w.send_frame(cbor2.dumps(_deep(MAX_DEPTH, as_map=as_map)))
        r = w.reply()
        assert isinstance(r, ErrorReply) and r.error.code == "protocol_error"
        w.send_frame(cbor2.dumps(_deep(MAX_DEPTH + 1, as_map=as_map)))
        r = w.reply()
        assert isinstance(r, ErrorReply) and r.error.code == "bad_frame"
        assert w.at_eof()
        w.close()


class TestHashFlood:
    """contract §4 [2.3]: a map key is text or bytes. Keys with predictable
    hashes (integers, the tuples array keys become) let a 64 KiB frame of
    colliding keys cost the event loop half a second (the daemon was then
    unavailable to every client, and its watchdog would have killed it)."""

    @pytest.mark.parametrize("size", [4096, 65536, MAX_FRAME], ids=["4k", "64k", "max"])
    def test_a_frame_of_colliding_keys_is_a_bad_frame(self, unchanged, size):
        """A map of array keys sharing one hash, whatever its size (decoded on the
        event loop or on a thread): bad_frame with id null, closed; others are served."""
        body = colliding_keys(size)
        assert len(body) <= size
        with _closing(Wire(unchanged.path).hello()) as w:
            w.send_frame(body)
            r = w.reply()
            assert isinstance(r, ErrorReply) and (r.id, r.error.code) == (None, "bad_frame")
            assert "map key" in r.error.message
            assert w.at_eof()
        with _closing(Wire(unchanged.path).hello()) as other:
            assert other.call("status")["boot"] == unchanged.daemon.boot

    @pytest.mark.parametrize(
        "params",
        [{1: 0}, {"a": {2**61 - 1: 0}}, {(1, 2): 0}, {1.5: 0}, {None: 0}],
        ids=["int", "nested int", "array", "float", "null"],
    )
    def test_a_request_with_a_key_that_is_not_text_or_bytes_is_a_bad_frame(self, unchanged, params):
        """The same answer a duplicate key gets, before any dict is built."""
        with _closing(Wire(unchanged.path).hello()) as w:
            w.send_frame(cbor2.dumps({"id": 3, "method": "status", "params": params}))
            r = w.reply()
            assert isinstance(r, ErrorReply) and (r.id, r.error.code) == (None, "bad_frame")
            assert w.at_eof()

    def test_byte_string_keys_are_keys_like_text(self, unchanged):
        """Bytes keys are well-formed (their hash is keyed too): a request error,
        not a bad frame, and the connection stays open."""
        with _closing(Wire(unchanged.path).hello()) as w:
            w.send_frame(cbor2.dumps({"id": 4, "method": "status", "params": {b"k": 0}}))
            r = w.reply()
            assert isinstance(r, ErrorReply) and (r.id, r.error.code) == (4, "bad_request")
            assert w.call("status")["boot"] == unchanged.daemon.boot


class TestSlowHalfClosedIdle:
    def test_byte_at_a_time_senders_interleaved_with_fast_clients(self, unchanged):
        """Twenty connections each sending hello+status one byte per round: all answered,
        and a fast client is answered between every round."""
        t = unchanged
        slow = [Wire(t.path) for _ in range(20)]
        stream = _framed(cbor2.dumps({"id": 0, "method": "hello", "params": HELLO_PARAMS}))
        stream += _framed(cbor2.dumps({"id": 1, "method": "status", "params": {}}))
        fast = Wire(t.path).hello()
        for i in range(len(stream)):
            for w in slow:
                w.send(stream[i : i + 1])
            if i % 8 == 0:
                assert fast.call("list_workers")["workers"]
        for w in slow:
            assert isinstance(w.reply(), Response)
            r = w.reply()
            assert isinstance(r, Response) and r.id == 1 and r.result["boot"] == t.daemon.boot
            w.close()
        fast.close()

    def test_thousand_idle_connections_do_not_stop_status(self, unchanged):
        """1,000 idle sockets (greeted, ungreeted, mid-header, mid-body) cost nothing."""
        t = unchanged
        base = Wire(t.path).hello()
        before = base.call("status")["connections"]
        idle = []
        for i in range(1000):
            w = Wire(t.path)
            if i % 4 == 1:
                w.hello()
            elif i % 4 == 2:
                w.send(b"\x00\x00")  # half a header
            elif i % 4 == 3:
                w.send(struct.pack(">I", 100) + b"\xa3")  # a body that never completes
            idle.append(w)
        deadline = time.monotonic() + 20
        while base.call("status")["connections"] < 1000 + 1:  # accepted at its own pace
            assert time.monotonic() < deadline, "the idle connections were not all accepted"
            time.sleep(0.02)  # bounded polling of the daemon's count
        with _closing(Wire(t.path).hello()) as fresh:
            assert fresh.call("get_neuron", {"neuron": t.actor.id})["neuron"] == t.actor.id
        for w in idle:
            w.close()
        deadline = time.monotonic() + 20
        while base.call("status")["connections"] > before:
            assert time.monotonic() < deadline, "idle connections were not released"
            time.sleep(0.02)  # bounded polling of the daemon's count
        base.close()

    def test_a_flood_of_pipelined_requests_is_answered_or_overloaded(self, unchanged, start_thread):
        """2,000 requests in one write: each gets one reply by id (a result or
        ``overloaded`` past max_in_flight), and the connection stays usable."""
        t = unchanged
        w = Wire(t.path).hello()
        ids = list(range(1, 2001))
        burst = b"".join(
            _framed(
                cbor2.dumps({"id": i, "method": "get_neuron", "params": {"neuron": t.actor.id}})
            )
            for i in ids
        )

        def send() -> None:
            with contextlib.suppress(OSError):  # the test failed and ended the connection
                w.send(burst)

        # the daemon may stop reading until we read (backpressure); a failure
        # must not leave the sender blocked: shutdown wakes its sendall
        sender = start_thread(send, stop=lambda: _end_wire(w))
        seen: dict[int, str] = {}
        while len(seen) < len(ids):
            r = w.reply()
            assert r.id not in seen, f"two replies to id {r.id}"
            seen[r.id] = "ok" if isinstance(r, Response) else r.error.code
        sender.join(15)
        assert set(seen) == set(ids) and set(seen.values()) <= {"ok", "overloaded"}
        assert w.call("status")["boot"] == t.daemon.boot
        w.close()

    def test_half_closed_mid_frame_applies_nothing(self, unchanged):
        """A signed write cut short by EOF is never admitted."""
        t = unchanged
        signed = t.actor.neuron.sign(
            "submit", {"prog": t.actor.prog, "op": "never", "act": "echo", "args": b""}, NETWORK
        )
        body = cbor2.dumps({"id": 3, "method": "submit", "params": signed})
        w = Wire(t.path).hello()
        w.send(_framed(body)[:-1])
        w.sock.shutdown(socket.SHUT_WR)
        assert w.at_eof()
        w.close()
        with _closing(Wire(t.path).hello()) as r:
            rid = r.request("get_operation", {"neuron": t.actor.id, "op": "never"})
            reply = r.reply()
            assert reply.id == rid and reply.error.code == "unknown_operation"


def _half_close(w: Wire) -> None:
    """Close our sending side, then read until the daemon closes (the reply
    may or may not come before the close)."""
    w.sock.shutdown(socket.SHUT_WR)
    while True:
        try:
            w.reply()
        except Closed:
            break
    w.close()


def test_a_write_sent_before_a_half_close_is_applied_exactly_once(target):
    """contract §3.1: a request's effect does not depend on its connection staying open."""
    t = target
    t.ensure_alive()
    op = f"half-{random.randrange(1 << 30)}"
    signed = t.actor.neuron.sign(
        "submit", {"prog": t.actor.prog, "op": op, "act": "echo", "args": b"h"}, NETWORK
    )
    w = Wire(t.path).hello()
    w.send_frame(cbor2.dumps({"id": 3, "method": "submit", "params": signed}))
    _half_close(w)
    deadline = time.monotonic() + 20
    while True:
        try:
            hist = t.actor.history(op)
            break
        except Exception:  # noqa: BLE001 - unknown_operation until it is applied
            assert time.monotonic() < deadline, "the admitted submit was never applied"
            time.sleep(0.02)
    assert [r["kind"] for r in hist] == ["submitted"]
    t.ops.append(op)  # now part of the snapshot


def test_a_prepare_on_a_half_closed_connection_drops_its_token(target):
    """contract §3.2.2/§3.6: the prepared attempt is voided with reason token_dropped."""
    t = target
    t.ensure_alive()
    op = f"drop-{random.randrange(1 << 30)}"
    t.actor.submit(op, "ledger", b"d")
    signed = t.actor.neuron.sign("prepare", t.actor.prepare_params(op), NETWORK)
    w = Wire(t.path).hello()
    w.send_frame(cbor2.dumps({"id": 4, "method": "prepare", "params": signed}))
    _half_close(w)
    deadline = time.monotonic() + 20
    while True:
        atts = t.actor.op(op)["attempts"]
        if atts and atts[0]["state"] == "void":
            break
        assert time.monotonic() < deadline, f"the dropped token's attempt is {atts}"
        time.sleep(0.02)
    assert atts[0]["reason"] == "token_dropped" and atts[0]["claimed"] is False
    assert f"{t.actor.id}/{op}/1" not in "".join(t.env.ledger_lines())
    t.ops.append(op)


class TestRegressions:
    """Daemon bugs this file found (fixed in e9d5b84): a param key the daemon echoed in
    ``bad_request.data.param`` and could not encode back made ``Connection.send`` raise
    out of the request nursery, and the daemon exited 1."""

    def test_a_param_key_holding_a_nan_map_key_does_not_kill_the_daemon(self, target):
        """A frame must never stop the daemon (contract §4); since [2.3] this one
        is a bad frame (a key that is not text or bytes)."""
        self._send_and_check(target, {cbor2.frozendict({math.nan: 1}): 1}, "bad_frame")

    def test_a_deeply_nested_param_key_does_not_kill_the_daemon(self, target):
        """A frame must never stop the daemon (contract §4); since [2.3] this one
        is a bad frame (a key that is not text or bytes)."""
        key: Any = 0
        for _ in range(MAX_DEPTH - 2):
            key = (key,)
        self._send_and_check(target, {key: 1}, "bad_frame")

    def test_an_error_message_stays_text_when_the_echo_is_too_large(self, target):
        """Every error reply has a text message, whatever the request held."""
        target.ensure_alive()
        w = Wire(target.path).hello()
        w.send_frame(cbor2.dumps({"id": 1, "method": "status", "params": {b"\x00" * 300_000: 1}}))
        r = w.reply()  # parse_reply refuses a non-text message
        assert isinstance(r, ErrorReply) and r.error.code == "bad_request"
        w.close()

    @staticmethod
    def _send_and_check(t: Target, params: dict[Any, Any], code: str = "bad_request") -> None:
        t.ensure_alive()
        w = Wire(t.path).hello()
        w.send_frame(cbor2.dumps({"id": 1, "method": "status", "params": params}))
        try:
            r = w.reply()
        except Closed:
            r = None
        w.close()
        died = not t.alive()
        if died:
            t.ensure_alive()  # the next tests get a daemon again
            t.deaths.clear()
        assert not died, "the daemon died"
        assert isinstance(r, ErrorReply) and r.error.code == code


# -- the soak form ----------------------------------------------------------------------------


class StallProbe:
    """A quiet client beside the fuzz: ``status`` on a connection of its own,
    one request after the other. A frame the daemon works on in its event
    loop holds every other client for as long: the probe's worst round trip
    bounds the longest the loop was held by any one frame sent meanwhile
    (plus the probe's own round trip, its median). ``batch`` names what the
    fuzz is sending, for the report."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.batch = ""
        self.worst = 0.0
        self.worst_in = ""
        self.samples: collections.deque[float] = collections.deque(maxlen=100_000)  # the last
        self.count = 0
        self._stop = threading.Event()
        self._wire: Wire | None = None

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                self._wire = Wire(self.path, timeout=120).hello()
                while not self._stop.is_set():
                    t0 = time.monotonic()
                    self._wire.call("status")
                    self._note(time.monotonic() - t0)
                    self._stop.wait(0.005)  # pacing: the probe is not a load
            except (OSError, Closed, AssertionError):
                self._stop.wait(0.1)  # the daemon is being restarted: try again
            finally:
                if self._wire is not None:
                    self._wire.close()

    def _note(self, rtt: float) -> None:
        self.count += 1
        self.samples.append(rtt)
        if rtt > self.worst:
            self.worst, self.worst_in = rtt, self.batch

    def stop(self) -> None:
        self._stop.set()
        wire = self._wire
        if wire is not None:
            _end_wire(wire)

    def report(self) -> str:
        ordered = sorted(self.samples) or [0.0]
        median = ordered[len(ordered) // 2]
        p999 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.999))]
        return (
            f"stall_probes={self.count} stall_worst_ms={self.worst * 1000:.1f} "
            f"(in {self.worst_in or '-'}) stall_p99.9_ms={p999 * 1000:.1f} "
            f"stall_median_ms={median * 1000:.2f}"
        )


@pytest.mark.soak
@pytest.mark.timeout(0)
@pytest.mark.skipif(not SOAK_CASES, reason="soak: run by `make soak` (WARDD_SOAK_CASES)")
def test_fuzz_soak(target, start_thread):
    """The same batches at soak size (>= 100k cases), state checked after
    each batch; a quiet client's worst round trip meanwhile is reported as
    the worst event-loop stall (``StallProbe``)."""
    per = max(1, SOAK_CASES // len(BATCHES) // 10)
    start = target.cases
    probe = StallProbe(target.path)
    start_thread(probe.run, stop=probe.stop)
    t0 = time.monotonic()
    over = False
    while target.cases - start < SOAK_CASES and not over:
        for name, batch in BATCHES.items():
            before = target.snapshot()
            probe.batch = name
            batch(target, per)
            probe.batch = ""
            target.drop_wire()
            assert not target.deaths, f"the daemon died in {name}:\n" + target.deaths[-1]
            assert target.snapshot() == before, f"a refused request changed state ({name})"
            over = bool(SOAK_BUDGET_S) and time.monotonic() - t0 > SOAK_BUDGET_S
            if over:
                break
    probe.stop()
    cases = target.cases - start
    print(
        f"\nwire fuzz soak: cases={cases} seconds={time.monotonic() - t0:.0f} "
        f"deaths={len(target.deaths)} {probe.report()}"
        + (f" budget_reached={SOAK_BUDGET_S:.0f}s" if over else "")
    )
