"""Hostile frame bodies: the most decode work an attacker can pack into a frame.

Used by the ``hostile`` bench row (``status`` p99 while connections send
them), by ``bench/micro.py``'s decode figures and by the daemon tests that
pin what the decoder does with them (tests/daemon/test_fuzz_frames.py,
test_stop.py). Each builder returns one CBOR body of at most ``size`` bytes.

- `colliding_keys`: a map whose keys are 2-integer arrays that all share
  one Python tuple hash (tuple and integer hashes are not randomized), so a
  decoder that builds a dict of them does quadratic work. wardd refuses
  such a frame at its first key (a map key must be text or bytes).
- the others are the worst *accepted* shapes we found, each forcing the
  most work per byte on one of the decoder's paths: tiny items for cbor2's
  compiled path, and indefinite lengths (which cbor2 refuses with our
  options, so the pure-Python reference decoder does all the work) for the
  other.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable, Iterator

__all__ = ["HOSTILE", "attack", "colliding_keys", "tuple_hash"]

_M = (1 << 64) - 1
_P1 = 11400714785074694791
_P2 = 14029467366897019727
_P5 = 2870177450012600261
_HASH_MOD = (1 << 61) - 1


def _rotl31(x: int) -> int:
    return ((x << 31) | (x >> 33)) & _M


def _rotr31(x: int) -> int:
    return ((x >> 31) | (x << 33)) & _M


def _int_hash(n: int) -> int:
    """CPython's hash of an int, as an unsigned 64-bit lane."""
    return hash(n) & _M


def tuple_hash(items: tuple[int, ...]) -> int:
    """CPython's (3.8+) hash of a tuple of ints, as an unsigned 64-bit value."""
    acc = _P5
    for item in items:
        acc = (_rotl31((acc + _int_hash(item) * _P2) & _M) * _P1) & _M
    return (acc + (len(items) ^ (_P5 ^ 3527539))) & _M


def _colliding_pairs(target: int) -> Iterator[tuple[int, int]]:
    """Endless ``(a, b)`` with ``hash((a, b))`` the same for all (the tuple
    hash is a bijection of its last lane, so each ``a`` has one ``b`` lane)."""
    p2_inverse = pow(_P2, -1, 1 << 64)
    p1_inverse = pow(_P1, -1, 1 << 64)
    lane_sum = _rotr31((target * p1_inverse) & _M)
    a = 0
    while True:
        acc1 = (_rotl31((_P5 + _int_hash(a) * _P2) & _M) * _P1) & _M
        lane = ((lane_sum - acc1) * p2_inverse) & _M
        if lane < _HASH_MOD:
            yield a, lane
        elif lane > (1 << 64) - _HASH_MOD and lane != _M:  # -1 hashes to -2
            yield a, lane - (1 << 64)
        a += 1


def _uint(major: int, n: int) -> bytes:
    """A CBOR head: major type and argument, in its shortest form."""
    if n < 24:
        return bytes([major << 5 | n])
    for ai, fmt in ((24, ">B"), (25, ">H"), (26, ">I"), (27, ">Q")):
        if n < 1 << (8 * struct.calcsize(fmt)):
            return bytes([major << 5 | ai]) + struct.pack(fmt, n)
    raise ValueError(n)


def _int(n: int) -> bytes:
    return _uint(0, n) if n >= 0 else _uint(1, -1 - n)


def colliding_keys(size: int) -> bytes:
    """A map of 2-integer array keys sharing one tuple hash, filling ``size`` bytes."""
    entries = []
    used = 5  # the map's head, at most
    for a, b in _colliding_pairs(0x5EED):
        entry = b"\x82" + _int(a) + _int(b) + b"\x00"
        if used + len(entry) > size:
            break
        entries.append(entry)
        used += len(entry)
    return _uint(5, len(entries)) + b"".join(entries)


def tiny_items(size: int) -> bytes:
    """An array of one-byte integers: cbor2's compiled path, most items per byte."""
    n = size - 5
    return _uint(4, n) + b"\x01" * n


def _ascii3(i: int) -> bytes:
    """The ``i``-th distinct 3-character printable ASCII text (94**3 of them)."""
    return bytes([33 + i // 8836 % 94, 33 + i // 94 % 94, 33 + i % 94])


def text_keys(size: int) -> bytes:
    """A map of distinct 3-byte text keys with one-byte values (cbor2's path)."""
    n = (size - 5) // 5
    keys = b"".join(b"\x63" + _ascii3(i) + b"\x00" for i in range(n))
    return _uint(5, n) + keys


def indefinite_small_ints(size: int) -> bytes:
    """An indefinite array of two-byte integers: all work on the reference decoder."""
    return b"\x9f" + b"\x18\x20" * ((size - 2) // 2) + b"\xff"


def indefinite_text_keys(size: int) -> bytes:
    """An indefinite map of distinct text keys: all work on the reference decoder."""
    n = (size - 2) // 5
    keys = b"".join(b"\x63" + _ascii3(i) + b"\x00" for i in range(n))
    return b"\xbf" + keys + b"\xff"


def indefinite_text_chunks(size: int) -> bytes:
    """An indefinite text string of one-character chunks (reference decoder)."""
    return b"\x7f" + b"\x61a" * ((size - 2) // 2) + b"\xff"


def nested_empties(size: int) -> bytes:
    """An array of empty arrays and maps: one container object per byte."""
    n = size - 5
    return _uint(4, n) + b"\x80\xa0" * (n // 2) + b"\x80" * (n % 2)


#: name -> builder of the accepted shapes (see the module docstring).
HOSTILE: dict[str, Callable[[int], bytes]] = {
    "tiny_items": tiny_items,
    "text_keys": text_keys,
    "nested_empties": nested_empties,
    "indefinite_small_ints": indefinite_small_ints,
    "indefinite_text_keys": indefinite_text_keys,
    "indefinite_text_chunks": indefinite_text_chunks,
}


# -- the attackers (bench/run.py, section "hostile") ------------------------------------------


def _frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


_HELLO = _frame(b"\xa3bid\x00fmethodehellofparams\xa2hprotocol\x01fclientghostile")


def _reply(sock: socket.socket) -> bytes | None:
    """One whole reply frame's body, or None once the daemon has closed."""
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack_from(">I", data)[0]:
        try:
            chunk = sock.recv(1 << 16)
        except OSError:
            return None
        if not chunk:
            return None
        data += chunk
    return data[4:]


def attack(path: str, body: bytes, stop: threading.Event) -> int:
    """Send `body` as a frame, read the answer, again, until `stop`: the frames
    sent. A frame refused as bad (the daemon closes) is sent again on a new
    connection; an accepted one (``protocol_error``) on the same."""
    sent = 0
    frame = _frame(body)
    while not stop.is_set():
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(60)
            try:
                sock.connect(path)
                sock.sendall(_HELLO)
                if _reply(sock) is None:
                    continue
                while not stop.is_set():
                    sock.sendall(frame)
                    sent += 1
                    if _reply(sock) is None:
                        break
            except OSError:
                continue
    return sent
