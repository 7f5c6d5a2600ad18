"""What the ``http`` adapter puts on the wire and takes from it, beside urllib3 (contract §6).

`HeaderValue` is a header value: a string, or a secret read from its file
(`wardd.adapters._config.SecretFile`). The rest of this module is the rule
that a response is an answer only once its own framing has ended.

http.client (under urllib3) reads a response leniently: an end of file in
the header block is taken for the block's end, and a body with neither a
``Content-Length`` nor chunks is read up to the close and called complete.
So ``HTTP/1.1 404 Not Found\\r\\n`` followed by a close reads as a whole 404
— and a 404 or a no-effect status is a *definite* answer, one that lets the
attempt fail or a receipt say ``not_executed`` after an effect the server
may have made before its connection was cut.

`FramedResponse` is http.client's response that watches the lines it reads
(the status line, the header lines, chunk sizes, the trailer: http.client
reads all of them with ``readline``), so that it can say whether the
response ended as its framing says (RFC 9112 §6.3):

- the header block ended with its blank line; and
- the body ended by its own framing: ``Content-Length`` bytes were read, or
  the last chunk (``0``) and the trailer's blank line; or the response has
  no body by definition (204, 304, an answer to ``HEAD``);
- it is a final response: http.client passes over ``100 Continue`` only,
  and returns any other 1xx (``103 Early Hints``) as if it were the answer,
  leaving the final one unread; an interim response is never whole.

A body that runs to the close (no length, not chunked) can never be told
from a cut one: it never counts as ended. The connection classes here make
http.client build a `FramedResponse` for every response and keep the last
one, so the adapter can ask it once the body has been read.
"""

from __future__ import annotations

import http.client
import re
import socket
from typing import Any

from urllib3.connection import HTTPConnection, HTTPSConnection

from ._config import SecretFile

__all__ = [
    "BAD_VALUE",
    "Connection",
    "FramedConnection",
    "FramedResponse",
    "FramedTlsConnection",
    "HeaderValue",
    "ResponseCut",
]

_BLANK = (b"\r\n", b"\n")  # the lines that end a header block or a trailer (http.client's)
BAD_VALUE = re.compile(r"[\x00\r\n]")  # never in a header value


HeaderValue = str | SecretFile


class ResponseCut(Exception):
    """The response ended before its framing did: it answers nothing, whatever its status."""


class _Lines:
    """The response's file, remembering the last line read; everything else is the file's."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw
        self.last: bytes | None = None

    def readline(self, limit: int = -1) -> bytes:
        line: bytes = self._raw.readline(limit)
        self.last = line
        return line

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


class FramedResponse(http.client.HTTPResponse):
    """http.client's response that can tell whether it ended as its framing says."""

    def __init__(
        self,
        sock: socket.socket,
        debuglevel: int = 0,
        method: str | None = None,
        url: str | None = None,
    ) -> None:
        super().__init__(sock, debuglevel, method, url)
        self._lines = _Lines(self.fp)
        self.fp = self._lines  # type: ignore[assignment]
        self.head_ended = False

    def begin(self) -> None:
        """Read the status line and headers; `head_ended` says whether a blank line ended them."""
        super().begin()
        # http.client stops at a blank line *or* at an end of file (b"") or a line
        # cut by it: only the blank line is the header block's end
        self.head_ended = self._lines.last in _BLANK

    def cut(self) -> str | None:
        """Why the response is not whole (None when it is), asked once the body
        has been read to its end (a read answered ``b""``)."""
        if not self.head_ended:
            return "the header block never ended (no blank line before the close)"
        if self.status < 200:
            return f"an interim {self.status} response is no final answer"
        if self.chunked:
            if self._lines.last in _BLANK:  # the trailer's blank line, after the last chunk
                return None
            return "the chunked body ended before its last chunk and trailer"
        if self.length is None:
            return "the body has no Content-Length and is not chunked: its end is only the close"
        if self.length:
            return f"the body ended {self.length} bytes short of its Content-Length"
        return None


class _Framed:
    """A connection whose responses are `FramedResponse`s; the last one is `framed`."""

    framed: FramedResponse | None = None

    def response_class(  # http.client's hook (a class there), a method here
        self,
        sock: socket.socket,
        debuglevel: int = 0,
        method: str | None = None,
        url: str | None = None,
    ) -> FramedResponse:
        self.framed = FramedResponse(sock, debuglevel, method, url)
        return self.framed


class FramedConnection(_Framed, HTTPConnection):  # type: ignore[misc]  # response_class
    """urllib3's plain connection, its responses framed."""


class FramedTlsConnection(_Framed, HTTPSConnection):  # type: ignore[misc]  # response_class
    """urllib3's TLS connection, its responses framed."""


Connection = FramedConnection | FramedTlsConnection
