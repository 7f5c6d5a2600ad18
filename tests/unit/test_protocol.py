"""Unit tests of wardd.protocol (contract §4), driven with byte strings: its
public names, the frame decoder, and the CBOR codec (decode and encode).
Its messages are in test_protocol_messages.py, its signing in
test_protocol_signing.py."""

from __future__ import annotations

import datetime
import hashlib
import math
import struct
from typing import Any

import cbor2
import pytest

import wardd.protocol as wp
from wardd.protocol import (
    DEFAULT_MAX_FRAME,
    NEED_DATA,
    BadFrame,
    FrameDecoder,
    decode_item,
    encode_frame,
    encode_item,
    reference_decode,
)


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
