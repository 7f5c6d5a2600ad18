"""Strict CBOR (RFC 8949) for frame bodies: a bounded decoder and a checked encoder.

contract §4: a frame body must be *exactly one well-formed CBOR item*. We do not
trust a general-purpose decoder with that promise, so `decode_item` is a
small pure-Python decoder that walks the bytes once, checks every rule below
and builds the value as it goes. Anything else is `BadFrame`:

- truncation, and bytes after the one item;
- reserved additional-information values 28-30 (RFC 8949 §3), and an
  indefinite length (31) on an integer, a tag or inside an indefinite string;
- a "break" (0xff) outside an indefinite-length container;
- invalid UTF-8 in a text string (each chunk of an indefinite one on its own,
  RFC 8949 §3.2.3);
- a declared length larger than what is left of the body, refused before
  anything is allocated (an n-element array needs at least n more bytes);
- container nesting deeper than `max_depth` (contract §4: the top-level item is
  at depth 1, so 64 nested arrays or maps are fine and 65 are not). Depth
  counts containers only: a scalar inside the 64th array is still fine;
- a map key that is not a text or byte string (contract §4), refused on
  its initial byte, before the key is decoded or any dict entry is made.
  Python hashes text and bytes with a per-process random key; integers,
  floats and the tuples an array key would become hash predictably (``i``
  and ``i + 2**61 - 1`` collide), so a frame of colliding keys would make
  building its dict quadratic (seconds of event loop per 64 KiB frame). A
  value that needs other keys travels as bytes;
- a map with a duplicate key (text and bytes never equal each other);
- **our decisions beyond well-formedness**: every CBOR tag (major type 6;
  wardd uses none, and tags would let the peer choose Python types such as
  bignums, datetimes or sets), and every simple value except false, true
  and null (``undefined``, unassigned and one-byte simple values). Floats
  (half, single, double) are allowed here; signed params forbid them one
  level up (contract §4).

Non-preferred serializations (e.g. ``0x18 0x05`` for 5) and indefinite-length
strings, arrays and maps are well-formed and accepted. Arrays decode to
`list` and maps to `dict`.

The work is linear in the body's length whatever its shape (no step is
worse than a dict insertion of a randomly hashed key); the daemon bounds
what one frame may cost its event loop by decoding only small bodies there
(`wardd.daemon.wire.server`).

`reference_decode` is that decoder: the definition of what is accepted and
the source of every `BadFrame` message. `decode_item` first tries a fast
path, cbor2's compiled decoder with its strict options (definite lengths
only, no duplicate keys, text or byte string keys only, one nesting level
less than `max_depth` since cbor2 counts a scalar inside the deepest
container as one more level), every tag refused by hooks, the position
after the item checked, then a walk of the value that refuses anything but
plain wire types (simple values other than false/true/null come back as
cbor2 objects; NaN floats are left to the reference so their bits are the
reference's). Whenever the fast path refuses or is unsure, the body goes
to `reference_decode`, which gives the answer: the fast path only ever
returns a value the reference returns too (equal, same types, same key
order), so every error, message included, is the reference's.

`encode_item` is ``cbor2.dumps`` behind a check that the value stays inside
what `decode_item` accepts (so the daemon never sends a frame its own
clients refuse); ``canonical=True`` gives RFC 8949 §4.2.1 core deterministic
encoding, which `canonical_digest` hashes.
"""

from __future__ import annotations

import hashlib
import io
import struct
from typing import Any, NoReturn

import cbor2

from ._constants import MAX_DEPTH
from ._errors import BadFrame

__all__ = [
    "canonical_digest",
    "check_value",
    "decode_item",
    "encode_item",
    "reference_decode",
]

_U16 = struct.Struct(">H").unpack_from
_U32 = struct.Struct(">I").unpack_from
_U64 = struct.Struct(">Q").unpack_from
_F16 = struct.Struct(">e").unpack_from
_F32 = struct.Struct(">f").unpack_from
_F64 = struct.Struct(">d").unpack_from

_BREAK = 0xFF
_SIMPLE = {20: False, 21: True, 22: None}
# A fast path for array elements and map values: the immutable items that are
# a single byte (small integers, false, true, null, "" and b""), by that byte.
_NOT_ONE_BYTE: Any = object()
_ONE_BYTE: list[Any] = [_NOT_ONE_BYTE] * 256
for _n in range(24):
    _ONE_BYTE[_n] = _n
    _ONE_BYTE[0x20 + _n] = -1 - _n
_ONE_BYTE[0x40], _ONE_BYTE[0x60] = b"", ""
_ONE_BYTE[0xF4], _ONE_BYTE[0xF5], _ONE_BYTE[0xF6] = False, True, None
del _n
# The initial bytes a map key may start with: text and byte strings, definite
# or indefinite (major types 2 and 3).
_KEY_MAJORS = frozenset({2, 3})
_UINT_LIMIT = 1 << 64
# Python types encode_item passes without a look inside (bool: True/False).
_SCALAR_TYPES = frozenset({str, bytes, bytearray, float, bool, type(None)})


def decode_item(body: bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """Decode `body`, which must be exactly one well-formed CBOR item.

    Raises `BadFrame` for anything else (see the module docstring for the
    rules). `max_depth` bounds container nesting; the top-level item is at
    depth 1. Same answers as `reference_decode`, faster.
    """
    data = bytes(body)
    if max_depth >= 1 and _FAST_PATH:
        value = _fast_decode(data, max_depth)
        if value is not _UNSURE:
            return value
    return reference_decode(data, max_depth=max_depth)


# -- the fast path ------------------------------------------------------------------------

_UNSURE: Any = object()
# Types a value from the fast path may hold; any other (CBORSimpleValue,
# undefined, CBORTag, a tag's Python object) sends the body to the reference.
_PLAIN_LEAVES = frozenset({str, bytes, int, float, bool, type(None)})
_SCALARS_NOT_FLOAT = _PLAIN_LEAVES - {float}
_WALKED = _PLAIN_LEAVES | {dict, list}


def _refuse_tag(*_args: Any) -> NoReturn:
    raise ValueError("wardd allows no CBOR tag")


class _EveryTag(dict):  # type: ignore[type-arg]
    """cbor2's ``semantic_decoders``, answering every tag number with a refusal
    (cbor2 decodes some tags, such as bignums and 55799, to plain values
    before ``tag_hook`` would see them). The known numbers are also real
    keys, in case a cbor2 version copies the mapping."""

    def __getitem__(self, key: Any) -> Any:
        return _refuse_tag

    def get(self, key: Any, default: Any = None) -> Any:
        return _refuse_tag

    def __contains__(self, key: object) -> bool:
        return True


_EVERY_TAG = _EveryTag(
    dict.fromkeys(
        (0, 1, 2, 3, 4, 5, 24, 25, 28, 29, 30, 35, 36, 37, 100, 256, 258, 260, 261, 1004, 55799),
        _refuse_tag,
    )
)


def _fast_decode(data: bytes, max_depth: int) -> Any:
    """The value of `data` by cbor2's decoder, or `_UNSURE` (then the reference decides)."""
    stream = io.BytesIO(data)
    try:
        value = cbor2.CBORDecoder(
            stream,
            max_depth=max_depth - 1,
            allow_indefinite=False,
            allow_duplicate_keys=False,
            strict_hashable_types=True,
            semantic_decoders=_EVERY_TAG,
            tag_hook=_refuse_tag,
        ).decode()
    except Exception:  # noqa: BLE001 - any refusal or failure: the reference decides
        return _UNSURE
    if stream.tell() != len(data):  # trailing bytes
        return _UNSURE
    kind = type(value)
    if kind is dict or kind is list:
        return value if _plain(value) else _UNSURE
    if kind in _PLAIN_LEAVES and not (kind is float and value != value):
        return value
    return _UNSURE


def _plain(container: Any) -> bool:
    """True if a decoded container holds only wire types (and no NaN)."""
    values = container.values() if type(container) is dict else container
    kinds = set(map(type, values))  # one pass in C: large arrays of scalars stay cheap
    if kinds <= _SCALARS_NOT_FLOAT:
        return True
    if not kinds <= _WALKED:
        return False
    for value in values:
        kind = type(value)
        if kind is float:
            if value != value:
                return False
        elif (kind is dict or kind is list) and value and not _plain(value):
            return False
    return True


def _fast_path_is_sound() -> bool:
    """Whether this cbor2 refuses, with our options, what the reference refuses
    and cbor2 alone would turn into plain values (checked once, at import)."""
    tricky = (
        "c24101",  # bignum 1
        "c34100",  # negative bignum -1
        "d9d9f701",  # self-described CBOR
        "d81c01",  # shareable
        "d90100816161",  # string reference namespace
        "d901008263616263d81900",  # string reference
        "c101",  # epoch datetime
        "d9fffff6",  # an unassigned tag
        "f7",  # undefined
        "e0",  # simple value 0
        "0102",  # trailing bytes
        "a201000100",  # duplicate key
        "9f01ff",  # indefinite array
        "a10100",  # an integer map key
        "a182010200",  # an array map key
    )
    return all(_fast_decode(bytes.fromhex(h), MAX_DEPTH) is _UNSURE for h in tricky)


def reference_decode(body: bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """`decode_item` by the pure-Python decoder alone: the definition of what is
    accepted, and the source of every `BadFrame` message."""
    data = bytes(body)
    if not data:
        raise BadFrame("empty frame body")
    try:
        value, pos = _item(data, 0, max_depth)
    except (IndexError, struct.error):
        raise BadFrame("truncated CBOR item") from None
    except RecursionError:
        raise BadFrame("CBOR item nested too deeply") from None
    if pos != len(data):
        raise BadFrame(f"{len(data) - pos} trailing bytes after the CBOR item")
    return value


# Checked last: it calls _fast_decode (above) and needs MAX_DEPTH.
_FAST_PATH = True
_FAST_PATH = _fast_path_is_sound()


def _item(data: bytes, pos: int, depth: int) -> tuple[Any, int]:
    """Decode the item at `pos`; return it and the position after it.

    `depth` is how many more containers may be opened here (>= 1 to open one).
    """
    start = pos
    ib = data[pos]
    major = ib >> 5
    ai = ib & 0x1F
    pos += 1
    if ai < 24:
        arg = ai
    elif ai == 24:
        arg = data[pos]
        pos += 1
    elif ai == 25:
        arg = _U16(data, pos)[0]
        pos += 2
    elif ai == 26:
        arg = _U32(data, pos)[0]
        pos += 4
    elif ai == 27:
        arg = _U64(data, pos)[0]
        pos += 8
    elif ai == 31:
        return _indefinite(data, pos, major, depth)
    else:
        raise BadFrame(f"reserved additional information {ai} at offset {start}")

    if major == 3:
        end = pos + arg
        if end > len(data):
            raise BadFrame("text string longer than the frame")
        try:
            return data[pos:end].decode("utf-8"), end
        except UnicodeDecodeError:
            raise BadFrame(f"invalid UTF-8 in the text string at offset {pos}") from None
    if major == 0:
        return arg, pos
    if major == 5:
        if depth < 1:
            raise BadFrame("CBOR item nested too deeply")
        if arg > (len(data) - pos) >> 1:
            raise BadFrame("map longer than the frame")
        result: dict[Any, Any] = {}
        for _ in range(arg):
            pos = _map_entry(data, pos, depth - 1, result)
        return result, pos
    if major == 2:
        end = pos + arg
        if end > len(data):
            raise BadFrame("byte string longer than the frame")
        return data[pos:end], end
    if major == 4:
        if depth < 1:
            raise BadFrame("CBOR item nested too deeply")
        if arg > len(data) - pos:
            raise BadFrame("array longer than the frame")
        items = []
        for _ in range(arg):
            value = _ONE_BYTE[data[pos]]
            if value is _NOT_ONE_BYTE:
                value, pos = _item(data, pos, depth - 1)
            else:
                pos += 1
            items.append(value)
        return items, pos
    if major == 1:
        return -1 - arg, pos
    if major == 7:
        if ai == 25:
            return _F16(data, pos - 2)[0], pos
        if ai == 26:
            return _F32(data, pos - 4)[0], pos
        if ai == 27:
            return _F64(data, pos - 8)[0], pos
        if ai in _SIMPLE:
            return _SIMPLE[ai], pos
        # Our decision: undefined (23), unassigned simple values (0-19) and
        # every one-byte simple value (24; those below 32 are not even
        # well-formed, RFC 8949 §3.3) are refused.
        raise BadFrame(f"unsupported simple value at offset {start}")
    # major == 6. Our decision: wardd's protocol uses no tags.
    raise BadFrame(f"CBOR tag at offset {start} (wardd allows none)")


def _map_entry(data: bytes, pos: int, depth: int, result: dict[Any, Any]) -> int:
    """Decode one key/value pair at `pos` into `result`; return the position after it."""
    start = pos
    if data[pos] >> 5 not in _KEY_MAJORS:  # before anything is built (contract §4)
        raise BadFrame(f"map key at offset {start} is not a text or byte string")
    key, pos = _item(data, pos, depth)
    if key in result:
        raise BadFrame(f"duplicate map key at offset {start}")
    value = _ONE_BYTE[data[pos]]
    if value is _NOT_ONE_BYTE:
        value, pos = _item(data, pos, depth)
    else:
        pos += 1
    result[key] = value
    return pos


def _indefinite(data: bytes, pos: int, major: int, depth: int) -> tuple[Any, int]:
    """Decode an indefinite-length item whose initial byte ended just before `pos`."""
    if major == 2 or major == 3:
        chunks = []
        while data[pos] != _BREAK:
            if data[pos] >> 5 != major or (data[pos] & 0x1F) == 31:
                raise BadFrame(f"bad chunk in an indefinite-length string at offset {pos}")
            chunk, pos = _item(data, pos, depth)
            chunks.append(chunk)
        joined: Any = "".join(chunks) if major == 3 else b"".join(chunks)
        return joined, pos + 1
    if major == 4:
        if depth < 1:
            raise BadFrame("CBOR item nested too deeply")
        items = []
        while data[pos] != _BREAK:
            value, pos = _item(data, pos, depth - 1)
            items.append(value)
        return items, pos + 1
    if major == 5:
        if depth < 1:
            raise BadFrame("CBOR item nested too deeply")
        result: dict[Any, Any] = {}
        while data[pos] != _BREAK:
            pos = _map_entry(data, pos, depth - 1, result)
        return result, pos + 1
    if major == 7:
        raise BadFrame(f"break outside an indefinite-length item at offset {pos - 1}")
    raise BadFrame(f"indefinite length on major type {major} at offset {pos - 1}")


def check_value(obj: Any, *, max_depth: int = MAX_DEPTH) -> None:
    """Raise TypeError/ValueError unless `decode_item` would accept `obj`'s encoding.

    Allowed: None, bool, int in [-2**64, 2**64), float, str, bytes,
    bytearray, list, tuple, dict whose keys are str or bytes (contract §4),
    containers nested at most `max_depth` deep.
    """
    _check(obj, max_depth)


def _check(obj: Any, depth: int) -> None:
    kind = type(obj)
    if kind in _SCALAR_TYPES:
        return
    if kind is int or isinstance(obj, int):  # bool was handled above
        if not -_UINT_LIMIT <= obj < _UINT_LIMIT:
            raise ValueError("integer outside the CBOR 64-bit range (bignum tags are refused)")
        return
    if kind is dict or isinstance(obj, dict):
        if depth < 1:
            raise ValueError("value nested deeper than the CBOR depth limit")
        for key, item in obj.items():
            if type(key) is not str and not isinstance(key, (str, bytes)):
                raise TypeError(f"a {type(key).__name__} map key (keys are text or bytes)")
            _check(item, depth - 1)
        return
    if kind is list or isinstance(obj, (list, tuple)):
        if depth < 1:
            raise ValueError("value nested deeper than the CBOR depth limit")
        for item in obj:
            _check(item, depth - 1)
        return
    if isinstance(obj, (str, bytes, bytearray, float)):
        return
    raise TypeError(f"{type(obj).__name__} is not a wardd wire value")


def encode_item(obj: Any, *, canonical: bool = False) -> bytes:
    """Encode `obj` as one CBOR item (``canonical``: RFC 8949 §4.2.1 deterministic).

    Raises TypeError or ValueError for a value `decode_item` would refuse
    (see `check_value`): tags, undefined, bignums, sets, datetimes, ...
    """
    _check(obj, MAX_DEPTH)
    return cbor2.dumps(obj, canonical=canonical)


def canonical_digest(obj: Any) -> str:
    """Lowercase hex sha256 of `obj`'s deterministic encoding (descriptor digests, §2)."""
    return hashlib.sha256(encode_item(obj, canonical=True)).hexdigest()
