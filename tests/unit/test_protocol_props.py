"""Property tests of wardd.protocol's codecs (hypothesis)."""

from __future__ import annotations

from typing import Any

import cbor2
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wardd.protocol import (
    NEED_DATA,
    BadFrame,
    FrameDecoder,
    ProtocolError,
    decode_item,
    encode_frame,
    encode_item,
    parse_reply,
    parse_request,
    sign,
    verify,
)

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- strategies -----------------------------------------------------------------------------

uints = st.integers(min_value=0, max_value=2**64 - 1)
ints = st.integers(min_value=-(2**64), max_value=2**64 - 1)
floats = st.floats(allow_nan=False)
scalars = st.none() | st.booleans() | ints | floats | st.text(max_size=40) | st.binary(max_size=40)
# Keys Python keeps apart from each other (no bool/int/float collisions).
#: Map keys: text or bytes only (contract §4).
keys = st.text(max_size=12) | st.binary(max_size=8)


def _containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(children, max_size=6) | st.dictionaries(keys, children, max_size=6)


#: Values the wire carries, as decode_item gives them back (lists and dicts).
wire_values = st.recursive(scalars, _containers, max_leaves=16)

#: Signed params: text keys, no floats (contract §4).
signed_values = st.recursive(
    st.none() | st.booleans() | ints | st.text(max_size=20) | st.binary(max_size=20),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
    max_leaves=12,
)
signed_params = st.dictionaries(st.text(max_size=10), signed_values, max_size=6)


@st.composite
def mutated_encodings(draw: st.DrawFn) -> bytes:
    """The encoding of a wire value with a few bytes flipped, inserted or removed."""
    data = bytearray(cbor2.dumps(draw(wire_values)))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        pos = draw(st.integers(0, len(data)))
        if op == "flip" and pos < len(data):
            data[pos] = draw(st.integers(0, 255))
        elif op == "insert":
            data[pos:pos] = bytes([draw(st.integers(0, 255))])
        elif op == "delete" and pos < len(data):
            del data[pos]
        elif op == "truncate":
            del data[pos:]
    return bytes(data)


garbage = st.binary(max_size=200) | mutated_encodings()


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    """`data` cut at the given offsets (taken modulo its length, sorted)."""
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:], strict=False)]


def same(a: Any, b: Any) -> bool:
    """Equal as CBOR values (NaN equals NaN, list equals tuple)."""
    return bool(cbor2.dumps(a, canonical=True) == cbor2.dumps(b, canonical=True))


# -- properties -----------------------------------------------------------------------------


class TestCborProperties:
    @SETTINGS
    @given(wire_values)
    def test_round_trip(self, value: Any) -> None:
        """decode_item(encode_item(v)) == v, plain and canonical."""
        assert decode_item(encode_item(value)) == value
        assert decode_item(encode_item(value, canonical=True)) == value

    @SETTINGS
    @given(wire_values, st.randoms(use_true_random=False))
    def test_canonical_encoding_ignores_insertion_order(self, value: Any, rnd: Any) -> None:
        """The deterministic encoding of a map does not depend on its key order."""

        def shuffled(v: Any) -> Any:
            if isinstance(v, dict):
                items = list(v.items())
                rnd.shuffle(items)
                return {k: shuffled(x) for k, x in items}
            if isinstance(v, list):
                return [shuffled(x) for x in v]
            return v

        assert encode_item(value, canonical=True) == encode_item(shuffled(value), canonical=True)

    @SETTINGS
    @given(garbage)
    def test_arbitrary_bytes_raise_only_bad_frame(self, data: bytes) -> None:
        """decode_item returns a value or raises BadFrame, nothing else; a value it
        accepts is what cbor2 makes of the same bytes."""
        try:
            value = decode_item(data)
        except BadFrame:
            return
        assert same(value, cbor2.loads(data))

    @SETTINGS
    @given(garbage)
    def test_whatever_cbor2_rejects_we_reject(self, data: bytes) -> None:
        """We are never more lenient than cbor2 about well-formedness."""
        try:
            cbor2.loads(data)
        except Exception:  # noqa: BLE001 - cbor2 raises several types on garbage
            try:
                decode_item(data)
            except BadFrame:
                return
            raise AssertionError("decode_item accepted what cbor2 rejects") from None


class TestFrameProperties:
    @SETTINGS
    @given(
        st.lists(wire_values, min_size=1, max_size=4), st.lists(st.integers(0, 10_000), max_size=12)
    )
    def test_any_chunking_gives_the_same_items(self, values: list[Any], cuts: list[int]) -> None:
        """However the stream is cut into chunks, the same items come out in order."""
        stream = b"".join(encode_frame(v) for v in values)
        dec = FrameDecoder()
        out = []
        for chunk in split(stream, cuts):
            dec.feed(chunk)
            while (item := dec.next_item()) is not NEED_DATA:
                out.append(item)
        assert out == values
        assert dec.buffered == 0

    @SETTINGS
    @given(st.lists(garbage | st.binary(min_size=4, max_size=8), max_size=6))
    def test_arbitrary_chunks_raise_only_bad_frame(self, chunks: list[bytes]) -> None:
        """A decoder fed anything yields items, NEED_DATA or BadFrame, nothing else."""
        dec = FrameDecoder(max_frame=4096)
        try:
            for chunk in chunks:
                dec.feed(chunk)
                while dec.next_item() is not NEED_DATA:
                    pass
        except BadFrame:
            assert dec.failed

    @SETTINGS
    @given(st.lists(garbage, min_size=1, max_size=4))
    def test_framed_garbage_bodies_raise_only_bad_frame(self, bodies: list[bytes]) -> None:
        """Well-framed bodies of garbage give items or BadFrame, nothing else."""
        dec = FrameDecoder()
        for body in bodies:
            dec.feed(len(body).to_bytes(4, "big") + body)
        try:
            while dec.next_item() is not NEED_DATA:
                pass
        except BadFrame:
            pass


class TestMessageProperties:
    @SETTINGS
    @given(wire_values)
    def test_parse_request_raises_only_protocol_error(self, item: Any) -> None:
        """Any decoded item is a Request or a ProtocolError."""
        try:
            parse_request(item)
        except ProtocolError:
            pass

    @SETTINGS
    @given(uints, st.text(max_size=20), st.dictionaries(st.text(max_size=8), scalars, max_size=6))
    def test_request_round_trip(self, rid: int, method: str, params: dict[str, Any]) -> None:
        """A request map survives the wire."""
        item = {"id": rid, "method": method, "params": params}
        req = parse_request(decode_item(encode_item(item)))
        assert req.to_wire() == item

    @SETTINGS
    @given(wire_values)
    def test_parse_reply_raises_only_protocol_error(self, item: Any) -> None:
        """Any decoded item is a reply or a ProtocolError."""
        try:
            parse_reply(item)
        except ProtocolError:
            pass


class TestSigningProperties:
    key = Ed25519PrivateKey.generate()

    @settings(max_examples=200, deadline=None)
    @given(st.text(max_size=10), st.text(max_size=12), signed_params)
    def test_sign_verify_round_trip(self, network: str, method: str, params: Any) -> None:
        """What sign makes, verify accepts, also after a trip over the wire."""
        signed = sign(self.key, network, method, params)
        wire = decode_item(encode_item(signed))
        assert verify(wire["neuron"], wire["sig"], network, method, wire)

    @settings(max_examples=200, deadline=None)
    @given(signed_params, st.integers(0, 63), st.integers(1, 255))
    def test_any_flipped_signature_byte_fails(self, params: Any, index: int, mask: int) -> None:
        """Changing any bit of the signature makes verify False."""
        signed = sign(self.key, "local", "m", params)
        sig = bytearray(signed["sig"])
        sig[index] ^= mask
        assert not verify(signed["neuron"], bytes(sig), "local", "m", signed)
