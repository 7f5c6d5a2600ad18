"""decode_item's fast path (cbor2's decoder) against the pure-Python reference decoder."""

from __future__ import annotations

import math
import struct
from typing import Any

import cbor2
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from wardd.protocol import BadFrame, _cbor, decode_item, encode_item, reference_decode

SETTINGS = settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))


# -- raw CBOR, including everything the reference refuses ---------------------------------


def head(major: int, arg: int, width: int) -> bytes:
    """An initial byte and argument; width 0 is the preferred one, 1/2/4/8 force one."""
    if width == 0:
        width = 0 if arg < 24 else 1 if arg < 256 else 2 if arg < 65536 else 4 if arg < 2**32 else 8
    if width == 0:
        return bytes([major << 5 | arg])
    ai = {1: 24, 2: 25, 4: 26, 8: 27}[width]
    return bytes([major << 5 | ai]) + (arg % (1 << (8 * width))).to_bytes(width, "big")


widths = st.sampled_from([0, 0, 0, 1, 2, 4, 8])
args = st.integers(0, 30) | st.integers(0, 2**64 - 1)


@st.composite
def raw_scalars(draw: st.DrawFn) -> bytes:
    kind = draw(
        st.sampled_from(
            [
                "uint",
                "nint",
                "bytes",
                "text",
                "badtext",
                "float",
                "simple",
                "simple1",
                "reserved",
                "break",
            ]
        )
    )
    if kind in ("uint", "nint"):
        return head(0 if kind == "uint" else 1, draw(args), draw(widths))
    if kind == "bytes":
        b = draw(st.binary(max_size=12))
        return head(2, len(b), draw(widths)) + b
    if kind == "text":
        t = draw(st.text(max_size=8)).encode("utf-8", "surrogatepass")
        return head(3, len(t), draw(widths)) + t
    if kind == "badtext":
        t = draw(st.binary(max_size=6))
        return head(3, len(t), 0) + t
    if kind == "float":
        size = draw(st.sampled_from([2, 4, 8]))
        bits = draw(st.integers(0, 2 ** (8 * size) - 1))
        return bytes([0xE0 | {2: 25, 4: 26, 8: 27}[size]]) + bits.to_bytes(size, "big")
    if kind == "simple":
        return bytes([0xE0 | draw(st.integers(0, 23))])
    if kind == "simple1":
        return bytes([0xF8, draw(st.integers(0, 255))])
    if kind == "reserved":
        return bytes([draw(st.integers(0, 7)) << 5 | draw(st.integers(28, 31))])
    return b"\xff"


TAGS = st.sampled_from([0, 1, 2, 3, 4, 5, 24, 25, 28, 29, 30, 35, 37, 256, 258, 55799, 1000])
keys = st.sampled_from(
    [
        b"\x00",
        b"\x01",
        b"\x61a",
        b"\x61b",
        b"\x41a",
        b"\xf9\x3c\x00",
        b"\xf5",
        b"\xf6",
        b"\x80",
        b"\xa0",
        b"\xf9\x7e\x00",
        b"\x18\x01",
    ]
)


def raw_containers(children: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    @st.composite
    def build(draw: st.DrawFn) -> bytes:
        kind = draw(
            st.sampled_from(["array", "map", "array_indef", "map_indef", "tag", "str_indef"])
        )
        if kind in ("array", "array_indef"):
            items = draw(st.lists(children, max_size=4))
            if kind == "array":
                return head(4, len(items), draw(widths)) + b"".join(items)
            return b"\x9f" + b"".join(items) + b"\xff"
        if kind in ("map", "map_indef"):
            pairs = draw(st.lists(st.tuples(keys | children, children), max_size=3))
            body = b"".join(k + v for k, v in pairs)
            return (
                (head(5, len(pairs), draw(widths)) if kind == "map" else b"\xbf")
                + body
                + (b"" if kind == "map" else b"\xff")
            )
        if kind == "tag":
            return head(6, draw(TAGS), draw(widths)) + draw(children)
        major = draw(st.sampled_from([2, 3]))
        chunks = draw(st.lists(st.binary(max_size=4), max_size=3))
        return (
            bytes([major << 5 | 31])
            + b"".join(head(major, len(c), 0) + c for c in chunks)
            + b"\xff"
        )

    return build()


raw_items = st.recursive(raw_scalars(), raw_containers, max_leaves=12)


@st.composite
def raw_bodies(draw: st.DrawFn) -> bytes:
    """An item of raw CBOR, sometimes cut short or followed by more bytes."""
    data = draw(raw_items)
    how = draw(st.sampled_from(["as is", "as is", "truncated", "trailing"]))
    if how == "truncated" and data:
        return data[: draw(st.integers(0, len(data) - 1))]
    if how == "trailing":
        return data + draw(st.binary(min_size=1, max_size=3))
    return data


def nested(depth: int, inner: bytes, map_level: bool) -> bytes:
    opener = b"\xa1\x61k" if map_level else b"\x81"
    return opener * depth + inner


# -- the comparison -----------------------------------------------------------------------


def outcome(decode: Any, data: bytes, **kw: Any) -> tuple[str, Any]:
    try:
        return "value", decode(data, **kw)
    except BadFrame as err:
        return "error", err.message


def identical(a: Any, b: Any) -> bool:
    """Same types all the way down, same key order, floats equal bit for bit."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return struct.pack(">d", a) == struct.pack(">d", b)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(identical(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, (dict, cbor2.frozendict)):
        return len(a) == len(b) and all(
            identical(ka, kb) and identical(va, vb)
            for (ka, va), (kb, vb) in zip(a.items(), b.items(), strict=True)
        )
    return bool(a == b)


def assert_agree(data: bytes, **kw: Any) -> None:
    fast, ref = outcome(decode_item, data, **kw), outcome(reference_decode, data, **kw)
    assert fast[0] == ref[0], (data.hex(), fast, ref)
    if fast[0] == "error":
        assert fast[1] == ref[1]
    else:
        assert identical(fast[1], ref[1]), (data.hex(), fast, ref)


# -- properties -----------------------------------------------------------------------------


class TestFastPathAgreesWithTheReference:
    def test_the_fast_path_is_on_with_this_cbor2(self) -> None:
        """The installed cbor2 passes the import-time check, so decode_item is fast."""
        assert _cbor._FAST_PATH

    @SETTINGS
    @given(raw_bodies())
    @example(bytes.fromhex("c24101"))  # a bignum cbor2 would make an int
    @example(bytes.fromhex("d9d9f701"))  # self-described CBOR, which cbor2 strips
    @example(bytes.fromhex("a201000100"))  # a duplicate key
    @example(bytes.fromhex("a2f93c0000f50000"))  # 1.0 and true: duplicate as decoded values
    @example(bytes.fromhex("a2f97e0000f97e0000"))  # the same NaN key twice
    @example(bytes.fromhex("7f62c3a9ff"))  # an indefinite text
    @example(bytes.fromhex("7f61c361a9ff"))  # UTF-8 split over two chunks
    @example(bytes.fromhex("f97e01"))  # a NaN with a payload
    @example(bytes.fromhex("a2616100820102f6"))  # an array key after a text key
    @example(bytes.fromhex("bf6161a0a10100ff"))  # an integer key in a nested map
    def test_raw_cbor_gets_the_same_answer(self, data: bytes) -> None:
        """Any raw CBOR (tags, simple values, indefinite lengths, duplicate keys,
        bad UTF-8, truncation, trailing bytes): the same value or the same error."""
        assert_agree(data)

    @SETTINGS
    @given(st.binary(max_size=64))
    def test_random_bytes_get_the_same_answer(self, data: bytes) -> None:
        """Random bytes: the same value or the same error."""
        assert_agree(data)

    @settings(max_examples=300, deadline=None)
    @given(
        st.integers(55, 70),
        st.booleans(),
        st.sampled_from([b"\x01", b"\x80", b"\xa0", b"\xf7"]),
        st.integers(1, 70),
    )
    def test_nesting_gets_the_same_answer(
        self, depth: int, map_level: bool, inner: bytes, max_depth: int
    ) -> None:
        """Around the depth limit, for any max_depth: the same value or the same error."""
        assert_agree(nested(depth, inner, map_level), max_depth=max_depth)
        assert_agree(nested(depth, inner, map_level))

    @settings(max_examples=300, deadline=None)
    @given(
        st.recursive(
            st.none()
            | st.booleans()
            | st.integers(-(2**64), 2**64 - 1)
            | st.floats(allow_nan=False)
            | st.text(max_size=10)
            | st.binary(max_size=10),
            lambda c: (
                st.lists(c, max_size=4)
                | st.dictionaries(st.text(max_size=6) | st.binary(max_size=4), c, max_size=4)
            ),
            max_leaves=20,
        )
    )
    def test_wire_values_take_the_fast_path(self, value: Any) -> None:
        """What clients send (text or byte keys, no NaN, shallow) is decoded by
        cbor2 and not left to the reference, and equals the reference's value."""
        data = encode_item(value)
        fast = _cbor._fast_decode(data, _cbor.MAX_DEPTH)
        assert fast is not _cbor._UNSURE
        assert identical(fast, reference_decode(data))

    def test_a_large_item_followed_by_a_byte_is_trailing_bytes(self) -> None:
        """The position after a body longer than cbor2's read-ahead is exact."""
        data = encode_item([b"x" * 5000, "y" * 10_000]) + b"\x00"
        assert_agree(data)
        assert outcome(decode_item, data) == ("error", "1 trailing bytes after the CBOR item")

    def test_nan_values_keep_the_reference_bits(self) -> None:
        """A NaN is decoded by the reference, bit for bit."""
        for h in ("f97e01", "fa7fc00001", "fb7ff8000000000001", "81f9fe00"):
            assert_agree(bytes.fromhex(h))
            value = decode_item(bytes.fromhex(h))
            assert math.isnan(value if isinstance(value, float) else value[0])
