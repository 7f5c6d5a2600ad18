"""Length-prefixed frames (contract §4), sans-IO: bytes in, decoded items out.

A frame is a 4-byte big-endian unsigned length N, 1 <= N <= max_frame,
followed by N bytes holding exactly one CBOR item. `FrameDecoder` is shaped
like h11's `Connection`: `feed` whatever the socket produced, in any
chunking, then call `next_item` until it returns `NEED_DATA`.

A length outside the bounds is refused on the header alone, as soon as its
four bytes are buffered: the decoder never waits for (or buffers) the body of
a frame it will refuse. A bad frame is fatal to the connection (contract §4: the
daemon answers `bad_frame` with id null and closes), so once `next_item` has
raised `BadFrame` the decoder stays failed: every later call raises the same
error again, and further data is discarded.
"""

from __future__ import annotations

import enum
import struct
from typing import Any, Final

from ._cbor import decode_item, encode_item
from ._constants import DEFAULT_MAX_FRAME
from ._errors import BadFrame

__all__ = ["NEED_DATA", "FrameDecoder", "NeedData", "encode_frame"]

_HEADER = struct.Struct(">I")
_HEADER_SIZE = _HEADER.size


class NeedData(enum.Enum):
    """Type of the `NEED_DATA` sentinel (an enum, so ``is NEED_DATA`` narrows types)."""

    NEED_DATA = "NEED_DATA"

    def __repr__(self) -> str:
        return "NEED_DATA"


#: Returned by `FrameDecoder.next_item` when no whole frame is buffered yet.
NEED_DATA: Final = NeedData.NEED_DATA


class FrameDecoder:
    """Incremental frame decoder for one connection's incoming byte stream."""

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        if max_frame < 1:
            raise ValueError("max_frame must be at least 1")
        self.max_frame = max_frame
        self._buffer = bytearray()
        self._error: BadFrame | None = None

    def feed(self, data: bytes) -> None:
        """Append bytes received from the peer (any chunk size, including empty)."""
        if self._error is None:
            self._buffer += data

    def next_item(self) -> Any:
        """The decoded item of the next whole frame, or `NEED_DATA`.

        Raises `BadFrame` for a length outside 1..max_frame (as soon as the
        header is buffered) or a body that is not exactly one well-formed
        CBOR item; the decoder then stays failed.
        """
        body = self.next_body()
        if body is NEED_DATA:
            return NEED_DATA
        try:
            return decode_item(body)
        except BadFrame as exc:
            raise self._fail(exc) from None

    def next_body(self) -> bytes | NeedData:
        """The undecoded body of the next whole frame, or `NEED_DATA`, for a
        caller that decodes large bodies elsewhere (`decode_item`); a body
        that then fails to decode is the caller's to report.

        Raises `BadFrame` for a length outside 1..max_frame, as soon as the
        header is buffered; the decoder then stays failed.
        """
        if self._error is not None:
            raise BadFrame(self._error.message)
        buffer = self._buffer
        if len(buffer) < _HEADER_SIZE:
            return NEED_DATA
        (length,) = _HEADER.unpack_from(buffer)
        if not 1 <= length <= self.max_frame:
            raise self._fail(BadFrame(f"frame length {length} outside 1..{self.max_frame}"))
        end = _HEADER_SIZE + length
        if len(buffer) < end:
            return NEED_DATA
        with memoryview(buffer) as view:  # one copy of the body, not two
            body = bytes(view[_HEADER_SIZE:end])
        del buffer[:end]
        return body

    @property
    def buffered(self) -> int:
        """Bytes received and not yet returned as an item (0 once failed)."""
        return len(self._buffer)

    @property
    def failed(self) -> bool:
        """True once `next_item` has raised `BadFrame`."""
        return self._error is not None

    def _fail(self, error: BadFrame) -> BadFrame:
        self._error = error
        self._buffer.clear()
        return error


def encode_frame(obj: Any, *, max_frame: int = DEFAULT_MAX_FRAME) -> bytes:
    """One frame holding `obj`: the 4-byte length, then its CBOR encoding.

    Raises ValueError if the body would exceed `max_frame` (contract §4: no frame
    the daemon sends exceeds it), and TypeError/ValueError for a value that is
    not a wire value (see `check_value`).
    """
    body = encode_item(obj)
    if len(body) > max_frame:
        raise ValueError(f"frame body of {len(body)} bytes exceeds max_frame {max_frame}")
    return _HEADER.pack(len(body)) + body
