"""Unit tests of wardd.protocol's messages (contract §4): the error table,
requests and replies parsed, the vocabulary of the wire, and the pager."""

from __future__ import annotations

import copy
import pickle
import subprocess
import sys
from typing import Any

import pytest

import wardd.protocol as wp
from wardd.protocol import (
    ERRORS,
    BadFrame,
    ErrorReply,
    ProtocolError,
    Request,
    Response,
    WarddError,
    error_for,
    parse_reply,
    parse_request,
)

# Every error code docs/contract.md names (§2-§4), spelled as on the wire.
CONTRACT_CODES = """
    protocol_error bad_frame bad_request unknown_method unauthenticated forbidden
    wrong_network unknown_neuron unknown_prog unknown_operation unknown_act
    not_reconcilable terminal overloaded internal token_invalid token_void
    claim_conflict generation_mismatch epoch_mismatch policy_mismatch placement_stale
    placement_unbound unsupported_profile unsupported_guarantee act_not_accepted
    act_not_granted args_too_large attempt_mismatch attempt_busy attempt_unknown
    already_succeeded prog_inactive budget_exhausted grant_disabled op_conflict
    prog_conflict conflict state_mismatch bad_transition open_operations
    rebind_required not_retained not_abortable not_running
""".split()


class TestErrors:
    def test_every_contract_code_has_a_class(self) -> None:
        """ERRORS lists every code docs/contract.md names, and only those."""
        assert sorted(ERRORS) == sorted(CONTRACT_CODES)

    @pytest.mark.parametrize("code", CONTRACT_CODES)
    def test_class_is_named_after_its_code(self, code: str) -> None:
        """bad_frame -> BadFrame, exported from wardd.protocol, with a one-line meaning."""
        cls, meaning = ERRORS[code]
        assert cls.__name__ == "".join(part.capitalize() for part in code.split("_"))
        assert getattr(wp, cls.__name__) is cls
        assert cls.code == code
        assert issubclass(cls, WarddError)
        assert meaning and "\n" not in meaning and "|" not in meaning

    def test_to_wire_without_data(self) -> None:
        """to_wire gives {code, message} and no data key when there is none."""
        assert wp.UnknownProg("no such prog").to_wire() == {
            "code": "unknown_prog",
            "message": "no such prog",
        }

    def test_to_wire_with_data(self) -> None:
        """data rides along as a map."""
        err = wp.TokenVoid("voided", {"reason": "revoked"})
        assert err.to_wire() == {
            "code": "token_void",
            "message": "voided",
            "data": {"reason": "revoked"},
        }

    def test_default_message_is_the_meaning(self) -> None:
        """Without a message, the table's meaning is the message."""
        assert wp.Terminal().message == ERRORS["terminal"][1]
        assert str(wp.Terminal()) == ERRORS["terminal"][1]

    def test_bare_base_class_answers_internal(self) -> None:
        """Raising WarddError itself puts `internal` on the wire."""
        assert WarddError("oops").to_wire()["code"] == "internal"

    def test_error_for_known_code(self) -> None:
        """error_for rebuilds the subclass of a listed code."""
        err = error_for("token_void", "gone", {"reason": "shutdown"})
        assert type(err) is wp.TokenVoid
        assert (err.message, err.data) == ("gone", {"reason": "shutdown"})

    def test_error_for_unknown_code(self) -> None:
        """An unlisted code still gives a WarddError carrying that code."""
        err = error_for("from_the_future", "new")
        assert isinstance(err, WarddError)
        assert err.code == "from_the_future"
        assert err.to_wire() == {"code": "from_the_future", "message": "new"}
        assert "from_the_future" not in ERRORS

    def test_copies_keep_data_and_request_id(self) -> None:
        """copy and pickle keep everything an error carries."""
        err = ProtocolError("bad", {"supported": [1]}, request_id=3)
        for twin in (copy.copy(err), pickle.loads(pickle.dumps(err))):
            assert type(twin) is ProtocolError
            assert (twin.message, twin.data, twin.request_id) == ("bad", {"supported": [1]}, 3)

    def test_protocol_error_carries_the_request_id(self) -> None:
        """ProtocolError.request_id defaults to None."""
        assert ProtocolError("x").request_id is None
        assert ProtocolError("x", request_id=5).request_id == 5

    def test_token_void_reasons(self) -> None:
        """The reasons contract §4 lists for token_void."""
        assert wp.TOKEN_VOID_REASONS == {
            "placement_changed", "epoch_changed", "revoked", "prog_inactive",
            "budget_exhausted", "cancelled", "token_dropped", "token_expired",
            "claim_failed", "shutdown",
        }  # fmt: skip

    def test_which_answers_to_a_dispatch_may_have_run(self) -> None:
        """internal (unless its reason is claim_failed) and a code the table does not
        list can answer a dispatch after the claim; every other code refuses before it;
        other methods are never in doubt this way."""
        assert wp.DISPATCH_METHODS == {"invoke", "execute", "call"}
        assert wp.AFTER_CLAIM_CODES == ("internal",)
        newer = wp.error_for("from_the_future", "new")
        for method in ("invoke", "execute", "call"):
            assert wp.may_have_run(method, wp.Internal("x"))
            assert wp.may_have_run(method, newer)
            for code, (cls, _meaning) in wp.ERRORS.items():
                assert wp.may_have_run(method, cls("x")) is (code == "internal")
            # the claim's commit failed: the act was not called
            assert not wp.may_have_run(method, wp.Internal("x", {"reason": "claim_failed"}))
            assert wp.may_have_run(method, wp.Internal("x", {"reason": "fail_stop"}))
        assert not wp.may_have_run("cancel", wp.Internal("x"))
        assert not wp.may_have_run("prepare", newer)

    def test_module_prints_the_table_as_markdown(self) -> None:
        """`python -m wardd.protocol.errors` prints one row per code, warning-free."""
        proc = subprocess.run(
            [sys.executable, "-W", "error", "-m", "wardd.protocol.errors"],
            capture_output=True,
            text=True,
            check=True,
        )
        assert proc.stderr == ""
        for code in CONTRACT_CODES:
            assert f"| `{code}` |" in proc.stdout


class TestParseRequest:
    def test_valid_request(self) -> None:
        """{id, method, params} parses into a Request."""
        req = parse_request({"id": 3, "method": "status", "params": {}})
        assert req == Request(3, "status", {})
        assert req.to_wire() == {"id": 3, "method": "status", "params": {}}

    def test_id_zero_and_max_are_uints(self) -> None:
        """0 and 2**64-1 are valid ids."""
        assert parse_request({"id": 0, "method": "m", "params": {}}).id == 0
        assert parse_request({"id": 2**64 - 1, "method": "m", "params": {}}).id == 2**64 - 1

    @pytest.mark.parametrize("item", [[1, "status", {}], 7, "x", None, b"{}"], ids=repr)
    def test_not_a_map(self, item: Any) -> None:
        """A non-map is protocol_error without an id."""
        with pytest.raises(ProtocolError) as info:
            parse_request(item)
        assert info.value.request_id is None

    @pytest.mark.parametrize(
        "rid", [None, True, False, -1, 2**64, 1.0, "1", b"\x01", [1]], ids=repr
    )
    def test_id_not_a_uint(self, rid: Any) -> None:
        """An id that is missing, a bool, negative, too big or not an int: no id to echo."""
        item: dict[str, Any] = {"method": "status", "params": {}}
        if rid is not None:
            item["id"] = rid
        with pytest.raises(ProtocolError) as info:
            parse_request(item)
        assert info.value.request_id is None
        assert info.value.code == "protocol_error"

    @pytest.mark.parametrize(
        "item",
        [
            {"id": 9, "params": {}},
            {"id": 9, "method": b"status", "params": {}},
            {"id": 9, "method": 1, "params": {}},
            {"id": 9, "method": "status"},
            {"id": 9, "method": "status", "params": None},
            {"id": 9, "method": "status", "params": []},
            {"id": 9, "method": "status", "params": {}, "extra": 1},
            {"id": 9, "method": "status", "params": {}, 1: 1},
        ],
        ids=["no method", "bytes method", "int method", "no params", "null params",
             "list params", "extra key", "extra int key"],
    )  # fmt: skip
    def test_bad_shape_with_a_readable_id(self, item: Any) -> None:
        """A bad method, params or extra key is protocol_error carrying the id."""
        with pytest.raises(ProtocolError) as info:
            parse_request(item)
        assert info.value.request_id == 9


class TestReplies:
    def test_response_to_wire_and_back(self) -> None:
        """A Response survives to_wire -> parse_reply."""
        resp = Response(4, {"ok": True})
        assert resp.to_wire() == {"id": 4, "result": {"ok": True}}
        assert parse_reply(resp.to_wire()) == resp

    def test_result_may_be_null(self) -> None:
        """`result: any` includes null."""
        assert parse_reply({"id": 1, "result": None}) == Response(1, None)

    def test_error_reply_to_wire_and_back(self) -> None:
        """An ErrorReply survives to_wire -> parse_reply as the matching subclass."""
        wire = ErrorReply(5, wp.TokenVoid("void", {"reason": "revoked"})).to_wire()
        assert wire == {
            "id": 5,
            "error": {"code": "token_void", "message": "void", "data": {"reason": "revoked"}},
        }
        back = parse_reply(wire)
        assert isinstance(back, ErrorReply)
        assert back.id == 5
        assert isinstance(back.error, wp.TokenVoid)
        assert back.error.data == {"reason": "revoked"}

    def test_connection_error_has_null_id(self) -> None:
        """bad_frame goes out with id null."""
        wire = ErrorReply(None, BadFrame("bad")).to_wire()
        assert wire == {"id": None, "error": {"code": "bad_frame", "message": "bad"}}
        back = parse_reply(wire)
        assert isinstance(back, ErrorReply) and back.id is None
        assert isinstance(back.error, BadFrame)

    def test_unknown_error_code(self) -> None:
        """A code the client does not know still comes back as a WarddError."""
        back = parse_reply({"id": 1, "error": {"code": "brand_new", "message": "m"}})
        assert isinstance(back, ErrorReply)
        assert back.error.code == "brand_new"

    @pytest.mark.parametrize(
        "item",
        [
            [1, None],
            {"id": 1},
            {"result": 1},
            {"id": 1, "result": 1, "error": {"code": "x", "message": "y"}},
            {"id": None, "result": 1},
            {"id": True, "result": 1},
            {"id": -1, "result": 1},
            {"id": "1", "error": {"code": "x", "message": "y"}},
            {"id": 1, "error": "internal"},
            {"id": 1, "error": {"code": 1, "message": "y"}},
            {"id": 1, "error": {"code": "x"}},
            {"id": 1, "error": {"code": "x", "message": "y", "data": [1]}},
            {"id": 1, "error": {"code": "x", "message": "y", "extra": 1}},
            {"id": 1, "result": 1, "extra": 2},
        ],
        ids=repr,
    )
    def test_malformed_reply(self, item: Any) -> None:
        """A reply of another shape is a ProtocolError for the client."""
        with pytest.raises(ProtocolError):
            parse_reply(item)


class TestVocabulary:
    def test_state_enums_carry_the_wire_words(self) -> None:
        """contract §2, §3.3: each state enum's values are exactly the record and wire words."""
        assert list(wp.AttemptState) == [
            "prepared", "void", "running", "succeeded", "failed", "not_executed", "unknown",
        ]  # fmt: skip
        assert list(wp.OpState) == [
            "pending", "prepared", "running", "unknown", "retained", "consumed", "cancelled",
        ]  # fmt: skip
        assert list(wp.ProgState) == ["active", "paused", "retired", "archived"]
        assert list(wp.ATTEMPT_LIST_STATES) == ["unknown", "running", "prepared"]
        assert list(wp.OUTCOME_STATUSES) == ["succeeded", "failed", "not_executed"]
        assert wp.RECEIPT_ANSWERS == {"executed", "not_executed", "unknown"}
        assert wp.decode_item(wp.encode_item(wp.OpState.RETAINED)) == "retained"

    @pytest.mark.parametrize(
        ("value", "ok"),
        [(0, True), (2**63 - 1, True), (2**63, False), (-1, False), (True, False), (1.0, False),
         ("1", False)],
    )  # fmt: skip
    def test_uint_is_an_int_from_0_to_2_63_minus_1(self, value: object, ok: bool) -> None:
        """An unsigned integer param is an int (never a bool) from 0 to 2**63 - 1."""
        assert wp.is_uint(value) is ok

    def test_ids_and_neuron_ids(self) -> None:
        """An id is 1-128 of [A-Za-z0-9._:-]; a neuron id 64 lowercase hex digits."""
        assert wp.is_id("a") and wp.is_id("A.b_c:d-9" * 14 + "x" * 2)
        assert not any(wp.is_id(v) for v in ("", "x" * 129, "a/b", "é", 7, None))
        assert wp.is_neuron_id("0" * 64) and wp.is_neuron_id("ab" * 32)
        assert not any(wp.is_neuron_id(v) for v in ("A" * 64, "0" * 63, "0" * 65, b"0" * 64))

    def test_default_socket_path_follows_xdg_runtime_dir(self) -> None:
        """contract §6: $XDG_RUNTIME_DIR/wardd/wardd.sock, else under /tmp/wardd-<uid>/."""
        assert wp.default_socket_path({"XDG_RUNTIME_DIR": "/run/user/7"}) == (
            "/run/user/7/wardd/wardd.sock"
        )
        for env in ({}, {"XDG_RUNTIME_DIR": "relative"}, {"XDG_RUNTIME_DIR": ""}):
            assert wp.default_socket_path(env, uid=42) == "/tmp/wardd-42/wardd/wardd.sock"


class TestPager:
    def test_pages_pass_next_as_after_until_a_page_has_none(self) -> None:
        """contract §4: each page's `next` is the following request's `after`; the
        page without `next` is the last, and the items are every page's, in order."""
        pager = wp.Pager({"neuron": "n"}, "operations", limit=2)
        asked = []
        replies = iter([{"operations": [1, 2], "next": 2}, {"operations": [3], "next": 3}, {}])
        while not pager.done:
            asked.append(pager.request())
            pager.feed(next(replies))
        assert pager.items == [1, 2, 3]
        assert asked == [
            {"neuron": "n", "limit": 2},
            {"neuron": "n", "limit": 2, "after": 2},
            {"neuron": "n", "limit": 2, "after": 3},
        ]

    def test_a_repeated_cursor_is_refused_not_looped_on(self) -> None:
        """A page whose `next` equals the `after` it answered would loop for ever: refused."""
        pager = wp.Pager({}, "records")
        pager.feed({"records": [1], "next": 5})
        with pytest.raises(wp.PagingError):
            pager.feed({"records": [1], "next": 5})

    def test_a_page_that_is_not_a_map_is_refused(self) -> None:
        """A page result that is not a map is a PagingError, never an AttributeError."""
        with pytest.raises(wp.PagingError):
            wp.Pager({}, "records").feed([1, 2])
