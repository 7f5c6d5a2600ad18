"""Unit tests of wardd.protocol (contract §4), driven with byte strings."""

from __future__ import annotations

import copy
import datetime
import hashlib
import math
import pickle
import struct
import subprocess
import sys
from typing import Any

import cbor2
import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

import wardd.protocol as wp
from wardd.protocol import (
    DEFAULT_MAX_FRAME,
    ERRORS,
    NEED_DATA,
    BadFrame,
    ErrorReply,
    FrameDecoder,
    ProtocolError,
    Request,
    Response,
    WarddError,
    decode_item,
    encode_frame,
    encode_item,
    error_for,
    parse_reply,
    parse_request,
    reference_decode,
    sign,
    signing_input,
    verify,
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


def frame(body: bytes) -> bytes:
    """A length prefix and `body`, sent as is."""
    return struct.pack(">I", len(body)) + body


def h(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", ""))


def nested_arrays(n: int, inner: bytes = b"\x80") -> bytes:
    """`n` nested arrays, the innermost holding `inner` (b"\\x80": it is itself empty)."""
    if inner == b"\x80":
        return b"\x81" * (n - 1) + b"\x80"
    return b"\x81" * n + inner


class TestPublicApi:
    def test_every_exported_name_resolves(self) -> None:
        """`wardd.protocol.__all__` names only things that exist."""
        for name in wp.__all__:
            assert hasattr(wp, name), name

    def test_interfaces_names_are_exported(self) -> None:
        """The names docs/INTERFACES.md promises are importable from wardd.protocol."""
        promised = {
            "PROTOCOL_VERSION", "SIGNING_DOMAIN", "DEFAULT_MAX_FRAME", "MIN_MAX_FRAME",
            "MAX_DEPTH", "WarddError", "ERRORS", "error_for", "decode_item", "encode_item",
            "canonical_digest", "NEED_DATA", "FrameDecoder", "encode_frame", "Request",
            "Response", "ErrorReply", "parse_request", "parse_reply", "signing_input",
            "verify", "sign", "BadFrame", "ProtocolError",
        }  # fmt: skip
        assert promised <= set(wp.__all__)

    def test_the_public_surface_is_pinned(self) -> None:
        """`wardd.protocol.__all__` is exactly these names and the one error table's
        classes: adding or removing a public name is a deliberate edit here."""
        errors = {cls.__name__ for cls, _meaning in wp.ERRORS.values()}
        others = {
            "PROTOCOL_VERSION", "SIGNING_DOMAIN", "DEFAULT_MAX_FRAME", "MIN_MAX_FRAME",
            "MAX_MAX_FRAME", "MAX_DEPTH", "NEED_DATA", "NeedData", "FrameDecoder",
            "encode_frame", "decode_item", "reference_decode", "encode_item", "canonical_digest",
            "check_value",
            "Request", "Response", "ErrorReply", "parse_request", "parse_reply",
            "ERRORS", "TOKEN_VOID_REASONS", "WarddError", "Conflict", "error_for",
            "signing_input", "sign", "verify", "neuron_id",
            "TRACE_FIELDS", "traceparent_problem", "tracestate_problem",
            "AttemptState", "OpState", "ProgState", "ATTEMPT_LIST_STATES", "OUTCOME_STATUSES",
            "ID_PATTERN", "NEURON_ID_PATTERN", "MAX_UINT", "is_id", "is_neuron_id", "is_uint",
            "default_socket_path", "RECEIPT_ANSWERS", "ReceiptAnswer",
            "DEFAULT_PAGE_LIMIT", "MAX_PAGE_LIMIT", "Pager", "PagingError",
            "DISPATCH_METHODS", "AFTER_CLAIM_CODES", "may_have_run",
        }  # fmt: skip
        assert sorted(wp.__all__) == sorted(errors | others)
        assert len(wp.__all__) == len(set(wp.__all__))

    def test_constants(self) -> None:
        """The protocol constants have contract §4 and §6's values."""
        assert wp.PROTOCOL_VERSION == 1
        assert wp.SIGNING_DOMAIN == "wardd/1"
        assert wp.DEFAULT_MAX_FRAME == 1048576
        assert wp.MIN_MAX_FRAME == 131072
        assert wp.MAX_MAX_FRAME == 1073741824
        assert wp.MAX_DEPTH == 64


class TestFrameDecoder:
    def test_zero_length_is_a_bad_frame(self) -> None:
        """N = 0 is refused on the header alone."""
        dec = FrameDecoder()
        dec.feed(b"\x00\x00\x00\x00")
        with pytest.raises(BadFrame):
            dec.next_item()

    def test_over_max_frame_is_refused_on_the_header_alone(self) -> None:
        """N > max_frame raises as soon as the 4 header bytes are in, before any body."""
        dec = FrameDecoder()
        dec.feed(struct.pack(">I", DEFAULT_MAX_FRAME + 1))
        with pytest.raises(BadFrame):
            dec.next_item()

    def test_header_only_over_a_small_bound(self) -> None:
        """The bound is the decoder's own max_frame."""
        dec = FrameDecoder(max_frame=10)
        dec.feed(struct.pack(">I", 11))
        with pytest.raises(BadFrame):
            dec.next_item()

    def test_huge_length_is_refused_at_once(self) -> None:
        """A 4 GiB declared length never makes the decoder wait for a body."""
        dec = FrameDecoder()
        dec.feed(b"\xff\xff\xff\xff")
        with pytest.raises(BadFrame):
            dec.next_item()

    def test_exactly_max_frame_is_accepted(self) -> None:
        """N == max_frame is inside the bounds."""
        body = cbor2.dumps(b"x" * 8)  # 1 + 8 bytes
        dec = FrameDecoder(max_frame=len(body))
        dec.feed(frame(body))
        assert dec.next_item() == b"x" * 8

    def test_partial_header_and_body_need_data(self) -> None:
        """Until a whole frame is buffered, next_item returns NEED_DATA."""
        data = encode_frame({"id": 1})
        dec = FrameDecoder()
        assert dec.next_item() is NEED_DATA
        dec.feed(data[:3])
        assert dec.next_item() is NEED_DATA
        dec.feed(data[3:-1])
        assert dec.next_item() is NEED_DATA
        assert dec.buffered == len(data) - 1
        dec.feed(data[-1:])
        assert dec.next_item() == {"id": 1}
        assert dec.next_item() is NEED_DATA
        assert dec.buffered == 0

    def test_byte_at_a_time(self) -> None:
        """Frames fed one byte at a time come out whole and in order."""
        items: list[Any] = [{"id": 1, "method": "status", "params": {}}, [1, "two"], "x" * 300]
        stream = b"".join(encode_frame(i) for i in items)
        dec = FrameDecoder()
        out = []
        for i in range(len(stream)):
            dec.feed(stream[i : i + 1])
            item = dec.next_item()
            if item is not NEED_DATA:
                out.append(item)
        assert out == items

    def test_several_frames_in_one_chunk(self) -> None:
        """One chunk holding several frames gives them all, then NEED_DATA."""
        dec = FrameDecoder()
        dec.feed(encode_frame(1) + encode_frame(2) + encode_frame(3)[:2])
        assert [dec.next_item(), dec.next_item(), dec.next_item()] == [1, 2, NEED_DATA]

    def test_empty_feed_is_harmless(self) -> None:
        """Feeding b"" changes nothing."""
        dec = FrameDecoder()
        dec.feed(b"")
        assert dec.next_item() is NEED_DATA

    def test_bad_body_fails_the_decoder_for_good(self) -> None:
        """After a bad frame, every later call raises BadFrame and data is discarded."""
        dec = FrameDecoder()
        dec.feed(frame(b"\x01\x02") + encode_frame(3))
        with pytest.raises(BadFrame, match="trailing"):
            dec.next_item()
        assert dec.failed
        assert dec.buffered == 0
        dec.feed(encode_frame(4))
        with pytest.raises(BadFrame, match="trailing"):
            dec.next_item()

    def test_frames_before_a_bad_one_are_delivered(self) -> None:
        """A good frame ahead of a bad one in the same chunk still comes out."""
        dec = FrameDecoder()
        dec.feed(encode_frame("ok") + b"\x00\x00\x00\x00")
        assert dec.next_item() == "ok"
        with pytest.raises(BadFrame):
            dec.next_item()

    def test_max_frame_must_be_positive(self) -> None:
        """A decoder bound below 1 is a programming error."""
        with pytest.raises(ValueError):
            FrameDecoder(max_frame=0)

    def test_encode_frame_writes_the_length(self) -> None:
        """encode_frame is a 4-byte big-endian length and the CBOR body."""
        body = cbor2.dumps({"id": 7, "result": None})
        assert encode_frame({"id": 7, "result": None}) == frame(body)

    def test_encode_frame_refuses_a_body_over_max_frame(self) -> None:
        """No frame over max_frame is ever produced."""
        with pytest.raises(ValueError):
            encode_frame(b"x" * 100, max_frame=100)
        assert len(encode_frame(b"x" * 98, max_frame=100)) == 104

    def test_need_data_repr(self) -> None:
        """The sentinel prints as its name."""
        assert repr(NEED_DATA) == "NEED_DATA"


def nested_arrays_value(n: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(n - 1):
        value = [value]
    return value


# (hex body, what the test shows). Every one must be BadFrame.
BAD_BODIES = [
    ("", "empty body"),
    # truncated
    ("18", "uint missing its 1-byte argument"),
    ("19 01", "uint missing half its 2-byte argument"),
    ("1b 00 00 00 00 00 00 00", "uint missing a byte of its 8-byte argument"),
    ("63 61 62", "text string shorter than declared"),
    ("44 00 01 02", "byte string shorter than declared"),
    ("82 01", "array missing an element"),
    ("a2 01 02 03", "map missing a value"),
    ("a1 01", "map missing its only value"),
    ("9f 01 02", "indefinite array without break"),
    ("bf 61 61 01", "indefinite map without break"),
    ("5f 41 61", "indefinite byte string without break"),
    ("f9 3c", "half float missing a byte"),
    ("fb 3f f0 00 00 00 00 00", "double missing a byte"),
    # huge declared lengths, refused before allocating
    ("5b ff ff ff ff ff ff ff ff", "byte string of 2**64-1 bytes"),
    ("7a 7f ff ff ff 61", "text string of 2 GiB"),
    ("9b 00 00 00 01 00 00 00 00", "array of 2**32 elements"),
    ("ba 00 01 00 00 01 02", "map of 65536 pairs"),
    # trailing bytes
    ("00 00", "two items"),
    ("a0 ff", "an item and a break"),
    ("61 61 00", "text string and a stray byte"),
    # invalid UTF-8
    ("61 80", "lone continuation byte"),
    ("62 c3 28", "bad continuation"),
    ("62 c0 af", "overlong encoding of '/'"),
    ("63 ed a0 80", "UTF-16 surrogate"),
    ("64 f4 90 80 80", "code point above U+10FFFF"),
    ("61 c3", "truncated multi-byte sequence"),
    ("7f 61 c3 61 a9 ff", "a character split across chunks of an indefinite string"),
    ("a1 61 ff 00", "invalid UTF-8 in a map key"),
    # reserved additional information 28-30, in every major type
    *[
        (f"{(major << 5) | ai:02x}", f"reserved ai {ai} on major type {major}")
        for major in range(8)
        for ai in (28, 29, 30)
    ],
    # indefinite length where it is not allowed
    ("1f", "indefinite unsigned integer"),
    ("3f", "indefinite negative integer"),
    ("df", "indefinite tag"),
    ("5f 5f ff ff", "indefinite chunk inside an indefinite byte string"),
    ("5f 61 61 ff", "text chunk in a byte string"),
    ("7f 41 61 ff", "byte chunk in a text string"),
    ("5f 01 ff", "integer chunk in a byte string"),
    # break outside an indefinite container
    ("ff", "bare break"),
    ("81 ff", "break as an array element"),
    ("a1 ff 01", "break as a map key"),
    ("bf 01 ff", "break in place of a value"),
    # tags (our decision: none)
    ("c0 60", "tag 0 (date/time string)"),
    ("c1 00", "tag 1 (epoch time)"),
    ("c2 41 01", "tag 2 (bignum)"),
    ("d8 20 60", "tag 32 (URI), 1-byte tag number"),
    ("d9 d9 f7 00", "tag 55799 (self-described CBOR)"),
    ("81 c1 00", "a tag nested in an array"),
    # simple values other than false/true/null (our decision)
    ("f7", "undefined"),
    ("e0", "simple value 0"),
    ("f3", "simple value 19"),
    ("f8 20", "simple value 32 (one-byte form)"),
    ("f8 ff", "simple value 255"),
    ("f8 14", "false in the two-byte form (not well-formed)"),
    # duplicate keys
    ("a2 61 61 01 61 61 02", "duplicate text key"),
    ("a2 01 00 01 00", "duplicate int key"),
    ("a2 41 00 01 41 00 02", "duplicate byte-string key"),
    ("a2 18 01 01 01 02", "the same int key in two encodings"),
    ("bf 61 61 01 61 61 02 ff", "duplicate key in an indefinite map"),
    ("a2 7f 61 61 ff 01 61 61 02", "a text key and its chunked twin"),
    ("a2 01 01 f9 3c 00 02", "1 and 1.0 (one Python key)"),
    ("a2 01 01 f5 02", "1 and true (one Python key)"),
    ("a2 00 01 f4 02", "0 and false (one Python key)"),
    ("a2 f9 00 00 01 f9 80 00 02", "0.0 and -0.0 (one Python key)"),
    ("a2 f9 7e 00 01 f9 7e 00 02", "the same NaN key twice"),
    ("a2 82 01 02 01 82 01 02 02", "duplicate array key"),
    ("a2 a1 01 02 01 a1 01 02 02", "duplicate map key that is a map"),
    ("a2 f6 01 f6 02", "duplicate null key"),
    ("a1 60 a2 60 00 60 00", "duplicate key in a nested map"),
    # keys that are not text or bytes (contract §4: predictable hashes)
    ("a1 01 00", "an integer key"),
    ("a1 82 01 02 00", "an array key"),
]


class TestDecodeItem:
    @pytest.mark.parametrize(
        "body_hex", [b for b, _ in BAD_BODIES], ids=[why for _, why in BAD_BODIES]
    )
    def test_bad_body_is_bad_frame(self, body_hex: str) -> None:
        """A body that is not exactly one well-formed item we accept is BadFrame."""
        with pytest.raises(BadFrame):
            decode_item(h(body_hex))

    @pytest.mark.parametrize(
        ("body_hex", "value"),
        [
            ("00", 0),
            ("17", 23),
            ("18 18", 24),
            ("18 05", 5),  # non-preferred serialization is well-formed
            ("1b ff ff ff ff ff ff ff ff", 2**64 - 1),
            ("3b ff ff ff ff ff ff ff ff", -(2**64)),
            ("20", -1),
            ("f4", False),
            ("f5", True),
            ("f6", None),
            ("f9 3c 00", 1.0),
            ("fa 47 c3 50 00", 100000.0),
            ("fb 3f f1 99 99 99 99 99 9a", 1.1),
            ("f9 7c 00", math.inf),
            ("60", ""),
            ("62 c3 a9", "é"),
            ("64 f0 9f 98 80", "\U0001f600"),
            ("40", b""),
            ("5f 41 61 40 42 62 63 ff", b"abc"),
            ("7f 61 61 62 c3 a9 ff", "aé"),
            ("5f ff", b""),
            ("9f 01 9f ff ff", [1, []]),
            ("bf 61 61 01 ff", {"a": 1}),
            ("83 01 82 02 03 a1 61 78 f6", [1, [2, 3], {"x": None}]),
            ("a2 41 31 01 61 31 02", {b"1": 1, "1": 2}),
            ("a1 5f 41 61 ff 01", {b"a": 1}),
        ],
    )
    def test_good_body_decodes(self, body_hex: str, value: Any) -> None:
        """Well-formed items decode to the expected Python values."""
        assert decode_item(h(body_hex)) == value

    def test_nan_value_decodes(self) -> None:
        """NaN is a float like any other as a value."""
        assert math.isnan(decode_item(h("f9 7e 00")))

    @pytest.mark.parametrize(
        "body_hex",
        [
            "a1 01 00",  # an integer
            "a1 20 00",  # a negative integer
            "a1 f9 3c 00 00",  # a float
            "a1 f9 7e 00 00",  # NaN
            "a1 f5 00",  # true
            "a1 f6 00",  # null
            "a1 82 01 02 0a",  # an array (a tuple key: its hash is predictable)
            "a1 a1 01 02 0a",  # a map
            "a1 9f ff 00",  # an indefinite array
            "bf 01 00 ff",  # an integer key in an indefinite map
            "a1 61 61 a1 01 00",  # an integer key in a nested map
            "a2 61 61 00 01 00",  # after a text key
        ],
    )
    def test_a_key_that_is_not_text_or_bytes_is_a_bad_frame(self, body_hex: str) -> None:
        """contract §4: map keys are text or bytes; any other key is a bad frame,
        refused on its initial byte (the message names the key's offset)."""
        with pytest.raises(BadFrame, match="map key at offset .* is not a text or byte string"):
            decode_item(h(body_hex))
        with pytest.raises(BadFrame, match="map key at offset"):
            reference_decode(h(body_hex))

    def test_64_nested_arrays_are_fine(self) -> None:
        """contract §4: the top-level item is at depth 1; 64 nested arrays are allowed."""
        value = decode_item(nested_arrays(64))
        for _ in range(63):
            value = value[0]
        assert value == []

    def test_65_nested_arrays_are_a_bad_frame(self) -> None:
        """contract §4: 65 nested arrays are a bad frame."""
        with pytest.raises(BadFrame, match="deep"):
            decode_item(nested_arrays(65))

    def test_a_scalar_inside_the_64th_array_is_fine(self) -> None:
        """Depth counts containers: a leaf inside the deepest allowed array is fine."""
        assert decode_item(nested_arrays(64, b"\x01")) is not None

    def test_65_nested_maps_are_a_bad_frame(self) -> None:
        """Maps count like arrays, whether as keys or values."""
        ok = b"\xa1\x60" * 63 + b"\xa0"
        assert decode_item(ok) is not None
        with pytest.raises(BadFrame, match="deep"):
            decode_item(b"\xa1\x60" * 64 + b"\xa0")

    def test_65_nested_indefinite_arrays_are_a_bad_frame(self) -> None:
        """Indefinite-length containers count like definite ones."""
        assert decode_item(b"\x9f" * 64 + b"\xff" * 64) is not None
        with pytest.raises(BadFrame):
            decode_item(b"\x9f" * 65 + b"\xff" * 65)

    def test_very_deep_input_is_a_bad_frame_not_a_crash(self) -> None:
        """A frame of 100 000 nested arrays is refused without recursing through it."""
        with pytest.raises(BadFrame):
            decode_item(b"\x81" * 100_000 + b"\x00")

    def test_max_depth_is_adjustable(self) -> None:
        """max_depth bounds nesting; 1 allows one container and no more."""
        assert decode_item(b"\x80", max_depth=1) == []
        with pytest.raises(BadFrame):
            decode_item(b"\x81\x80", max_depth=1)

    def test_accepts_bytearray_and_memoryview(self) -> None:
        """Any bytes-like body is decoded."""
        assert decode_item(bytearray(b"\x01")) == 1
        assert decode_item(memoryview(b"\x02")) == 2


class TestEncodeItem:
    def test_canonical_encoding_sorts_keys(self) -> None:
        """canonical=True is RFC 8949 §4.2.1: keys sorted by their encoded bytes."""
        a = encode_item({"b": 1, "a": 2, "aa": 3}, canonical=True)
        b = encode_item({"aa": 3, "a": 2, "b": 1}, canonical=True)
        assert a == b == h("a3 61 61 02 61 62 01 62 61 61 03")

    def test_canonical_digest_is_sha256_of_the_canonical_encoding(self) -> None:
        """canonical_digest is lowercase hex sha256 of the deterministic encoding."""
        descriptor = {"v": 1, "proof": "none", "limits": {"cpu": None}}
        expected = hashlib.sha256(cbor2.dumps(descriptor, canonical=True)).hexdigest()
        assert wp.canonical_digest(descriptor) == expected

    @pytest.mark.parametrize(
        "value",
        [
            2**64,
            -(2**64) - 1,
            {1, 2},
            datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC),
            cbor2.undefined,
            cbor2.CBORTag(1, 0),
            cbor2.CBORSimpleValue(99),
            {float("nan"): 1},
            memoryview(b"x"),
            object(),
            nested_arrays_value(65),
        ],
        ids=lambda v: type(v).__name__,
    )
    def test_refuses_what_decode_item_would_refuse(self, value: Any) -> None:
        """encode_item never produces a body that decode_item refuses."""
        with pytest.raises((TypeError, ValueError)):
            encode_item(value)

    def test_64_nested_lists_encode(self) -> None:
        """The depth bound is the same on both sides."""
        value = nested_arrays_value(64)
        assert decode_item(encode_item(value)) == value

    def test_a_cycle_is_refused(self) -> None:
        """A self-referencing list is refused by the depth bound, not a crash."""
        loop: list[Any] = []
        loop.append(loop)
        with pytest.raises(ValueError):
            encode_item(loop)

    def test_subclasses_and_tuples_encode(self) -> None:
        """str/int subclasses, bytearray and tuples encode as their plain CBOR twins."""

        class Name(str):
            pass

        value = {Name("k"): (1, True, bytearray(b"z"))}
        assert decode_item(encode_item(value)) == {"k": [1, True, b"z"]}


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


class TestSigningVectors:
    """Fixed bytes for two requests: the signed bytes depend on cbor2's canonical
    encoding (hence its pin, `cbor2>=6.2,<7`), and a change there must fail here
    before a client and a daemon of different builds stop verifying each other."""

    key = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
    neuron = "03a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b8"
    submit = {"prog": "notes", "op": "op-1", "act": "echo", "args": b"hello\x00"}
    submit_input = (
        "846777617264642f31656c6f63616c667375626d6974a6626f70646f702d3163616374646563686f"
        "64617267734668656c6c6f006470726f67656e6f746573666e6575726f6e78403033613130376266"
        "6633636531306265316437306464313865373462633039393637653464363330396261353064356631"
        "646463383636343132353533316238676e6574776f726b656c6f63616c"
    )
    submit_sig = (
        "8f1e2142357160597c8938a46ce78dbd19ff2e4f72c7ab531b727efbb13cf0b6"
        "42adb4dbbc164a3c9f6f0c7db1afe61225002f2215b2c4b9dc8e0eaf575c8b0f"
    )
    bind = {
        "expected_generation": 2**32,
        "descriptor": {
            "worker": "w0",
            "boot": "0123456789abcdef0123456789abcdef",
            "tags": ["a", "bb"],
            "n": -1,
            "ok": True,
            "none": None,
        },
    }
    bind_input = (
        "846777617264642f31656c6f63616c6e62696e645f706c6163656d656e74a3666e6575726f6e7840"
        "3033613130376266663363653130626531643730646431386537346263303939363765346436333039"
        "62613530643566316464633836363431323535333162386a64657363726970746f72a6616e20626f6b"
        "f564626f6f7478203031323334353637383961626364656630313233343536373839616263646566"
        "646e6f6e65f6647461677382616162626266776f726b65726277307365787065637465645f67656e"
        "65726174696f6e1b0000000100000000"
    )
    bind_sig = (
        "65bd58ecd19f85c745eac1528bd6d064b4ce8a84dc294c251f7d68b6f39b408a"
        "f27c784c6178b8d3c402351ee065e22762cb6da85ba242a2d49217f40e6d9700"
    )

    @pytest.mark.parametrize("which", ["submit", "bind"])
    def test_the_signing_input_and_signature_are_these_bytes(self, which: str) -> None:
        """A submit (bytes args, the network signed in) and a bind_placement (a
        nested descriptor: a list, a negative, a bool, a null, a 64-bit int)."""
        method = {"submit": "submit", "bind": "bind_placement"}[which]
        params = dict(getattr(self, which))
        if which == "submit":
            params["network"] = "local"
        signed = sign(self.key, "local", method, params)
        assert signed["neuron"] == self.neuron
        assert signing_input("local", method, signed).hex() == getattr(self, f"{which}_input")
        assert signed["sig"].hex() == getattr(self, f"{which}_sig")
        assert verify(self.neuron, signed["sig"], "local", method, signed)


class TestSigning:
    key = Ed25519PrivateKey.generate()

    def test_signing_input_is_the_contract_array(self) -> None:
        """cbor(["wardd/1", network, method, params-without-sig]), deterministic."""
        params = {"sig": b"s" * 64, "neuron": "ab", "network": "local", "op": "x"}
        expected = cbor2.dumps(
            ["wardd/1", "local", "prepare", {"neuron": "ab", "network": "local", "op": "x"}],
            canonical=True,
        )
        assert signing_input("local", "prepare", params) == expected

    def test_signing_input_ignores_key_order(self) -> None:
        """Two dicts with the same content sign the same bytes."""
        a = signing_input("n", "m", {"a": 1, "bb": 2, "c": [1]})
        b = signing_input("n", "m", {"c": [1], "bb": 2, "a": 1})
        assert a == b

    def test_sign_then_verify(self) -> None:
        """A signed request verifies with the neuron it names."""
        signed = sign(self.key, "local", "advance_epoch", {"expected_epoch": 1})
        assert set(signed) == {"expected_epoch", "neuron", "sig"}
        assert signed["neuron"] == wp.neuron_id(self.key)
        assert signed["neuron"] == wp.neuron_id(self.key.public_key())
        assert len(signed["sig"]) == 64
        assert verify(signed["neuron"], signed["sig"], "local", "advance_epoch", signed)

    def test_sign_replaces_sig_and_neuron(self) -> None:
        """An old sig or someone else's neuron in params is replaced, never signed."""
        signed = sign(self.key, "n", "m", {"sig": b"old", "neuron": "00" * 32, "a": 1})
        assert signed["neuron"] == wp.neuron_id(self.key)
        assert verify(signed["neuron"], signed["sig"], "n", "m", signed)

    def test_sign_does_not_mutate_params(self) -> None:
        """sign returns a copy."""
        params = {"a": 1}
        sign(self.key, "n", "m", params)
        assert params == {"a": 1}

    @pytest.mark.parametrize(
        "tamper",
        ["param", "added param", "method", "network", "network param", "sig", "neuron"],
    )
    def test_tampering_is_detected(self, tamper: str) -> None:
        """Any change to what was signed makes verify False."""
        params = {"op": "o1", "expected_attempt": 1, "network": "local"}
        signed = sign(self.key, "local", "prepare", params)
        neuron, sig, network, method = signed["neuron"], signed["sig"], "local", "prepare"
        if tamper == "param":
            signed["expected_attempt"] = 2
        elif tamper == "added param":
            signed["expected_epoch"] = 1
        elif tamper == "method":
            method = "invoke"
        elif tamper == "network":
            network = "other"
        elif tamper == "network param":
            signed["network"] = "other"
        elif tamper == "sig":
            sig = bytes([sig[0] ^ 1]) + sig[1:]
        else:
            other = Ed25519PrivateKey.generate()
            neuron = signed["neuron"] = wp.neuron_id(other)
        assert not verify(neuron, sig, network, method, signed)

    @pytest.mark.parametrize(
        ("neuron", "sig"),
        [
            ("zz" * 32, b"s" * 64),
            ("AB" * 32, b"s" * 64),
            ("ab" * 31, b"s" * 64),
            ("ab" * 33, b"s" * 64),
            ("", b"s" * 64),
            (None, b"s" * 64),
            (b"\x00" * 32, b"s" * 64),
            ("ab" * 32, b"s" * 63),
            ("ab" * 32, b"s" * 65),
            ("ab" * 32, "s" * 64),
            ("ab" * 32, None),
            ("ab" * 32, bytearray(64)),
        ],
        ids=repr,
    )
    def test_malformed_inputs_are_false_not_errors(self, neuron: Any, sig: Any) -> None:
        """verify never raises: a bad key or signature shape is simply False."""
        assert verify(neuron, sig, "local", "m", {"a": 1}) is False

    def test_uppercase_neuron_does_not_verify(self) -> None:
        """Only the lowercase hex spelling of a key is its neuron id."""
        signed = sign(self.key, "n", "m", {})
        assert not verify(signed["neuron"].upper(), signed["sig"], "n", "m", signed)

    @pytest.mark.parametrize(
        "params",
        [{"x": object()}, {"x": 2**70}, {"x": {1, 2}}, "not a map", None],
        # ids the same in every process (an object's repr holds its address):
        # pytest-xdist's workers must collect the same names
        ids=["object", "2**70", "set", "not a map", "None"],
    )
    def test_unencodable_params_are_false(self, params: Any) -> None:
        """Params that cannot be encoded make verify False, not an exception."""
        assert verify("ab" * 32, b"s" * 64, "n", "m", params) is False

    def test_wrong_network_arguments_are_false(self) -> None:
        """Non-text network or method are simply False."""
        signed = sign(self.key, "n", "m", {})
        not_text: Any = None
        assert not verify(signed["neuron"], signed["sig"], not_text, "m", signed)
        assert not verify(signed["neuron"], signed["sig"], "n", not_text, signed)

    def test_a_low_order_public_key_does_not_verify(self) -> None:
        """The identity point as a key never verifies a signature of ours."""
        identity = "01" + "00" * 31
        assert not verify(identity, bytes(64), "n", "m", {})

    def test_the_daemons_check_agrees_with_openssls_on_honest_and_tampered_signatures(
        self,
    ) -> None:
        """The daemon checks with libsodium only; on the signatures a client of
        ours makes (and tampered ones, foreign keys, the identity point) it
        decides as OpenSSL's check does."""
        from wardd.protocol._signing import check_signature, signing_input

        def both(public: bytes, sig: bytes, message: bytes) -> tuple[bool, bool]:
            got = []
            for check in (
                check_signature,
                lambda k, s, m: Ed25519PublicKey.from_public_bytes(k).verify(s, m),
            ):
                try:
                    check(public, sig, message)
                    got.append(True)
                except (InvalidSignature, ValueError):
                    got.append(False)
            return got[0], got[1]

        signed = sign(self.key, "n", "m", {"a": 1})
        public, sig = bytes.fromhex(signed["neuron"]), signed["sig"]
        message = signing_input("n", "m", signed)
        assert both(public, sig, message) == (True, True)
        assert both(public, sig, signing_input("n", "m", {**signed, "a": 2})) == (False, False)
        assert both(public, sig[:-1] + bytes([sig[-1] ^ 1]), message) == (False, False)
        other = bytes.fromhex(wp.neuron_id(Ed25519PrivateKey.generate()))
        assert both(other, sig, message) == (False, False)
        assert both(bytes.fromhex("01" + "00" * 31), bytes(64), message) == (False, False)


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
