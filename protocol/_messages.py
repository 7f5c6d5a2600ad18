"""Requests and replies (contract §4): validated shapes of decoded frame items.

- Request  ``{id: uint, method: text, params: map}``, nothing else;
- Response ``{id, result: any}``;
- ErrorReply ``{id, error: {code: text, message: text, data?: map}}``, where
  `id` is null for an error about the connection (``bad_frame``, or a
  ``protocol_error`` about a request whose id could not be read).

`parse_request` is the daemon's way in, `parse_reply` the client's; both take
an item `decode_item` produced and raise `ProtocolError` for a wrong shape.
What is *inside* `params` (types, ranges, key names) is the handlers' check
(``bad_request``), not this module's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeGuard

import attrs

from ._errors import ProtocolError, WarddError, error_for

__all__ = ["ErrorReply", "Request", "Response", "parse_reply", "parse_request"]

_UINT_LIMIT = 1 << 64
_REQUEST_KEYS = frozenset({"id", "method", "params"})
_ERROR_KEYS = frozenset({"code", "message", "data"})


def _is_uint(value: object) -> TypeGuard[int]:
    """A CBOR unsigned integer: an int (not a bool) in [0, 2**64)."""
    return type(value) is int and 0 <= value < _UINT_LIMIT


@attrs.frozen
class Request:
    """A request as the daemon receives it."""

    id: int
    method: str
    params: dict[str, Any]

    def to_wire(self) -> dict[str, Any]:
        """The request map ``{id, method, params}``."""
        return {"id": self.id, "method": self.method, "params": self.params}


@attrs.frozen
class Response:
    """A successful reply."""

    id: int
    result: Any

    def to_wire(self) -> dict[str, Any]:
        """The reply map ``{id, result}``."""
        return {"id": self.id, "result": self.result}


@attrs.frozen
class ErrorReply:
    """An error reply; `id` is None for one about the connection as a whole."""

    id: int | None
    error: WarddError

    def to_wire(self) -> dict[str, Any]:
        """The reply map ``{id, error: {code, message, data?}}``."""
        return {"id": self.id, "error": self.error.to_wire()}


def parse_request(item: Any) -> Request:
    """Validate a decoded item as a request.

    Raises `ProtocolError` (contract §4: the connection stays open) if it is not
    a map of exactly ``id`` (uint), ``method`` (text) and ``params`` (map);
    its `request_id` is the id when that could be read, else None.
    """
    if not isinstance(item, dict):
        raise ProtocolError("the request is not a map")
    rid = item.get("id")
    if not _is_uint(rid):
        raise ProtocolError("the request has no uint 'id'")
    if not isinstance(item.get("method"), str):
        raise ProtocolError("the request has no text 'method'", request_id=rid)
    if not isinstance(item.get("params"), dict):
        raise ProtocolError("the request has no map 'params'", request_id=rid)
    if len(item) != len(_REQUEST_KEYS):
        raise ProtocolError(
            "the request has keys other than 'id', 'method' and 'params'", request_id=rid
        )
    return Request(rid, item["method"], item["params"])


def parse_reply(item: Any) -> Response | ErrorReply:
    """Validate a decoded item as a reply (for clients).

    Raises `ProtocolError` if it is neither ``{id: uint, result}`` nor
    ``{id: uint | null, error: {code: text, message: text, data?: map}}``.
    The error of an `ErrorReply` is the `WarddError` subclass of its code.
    """
    if not isinstance(item, dict) or "id" not in item or len(item) != 2:
        raise ProtocolError("the reply is not a map of 'id' and 'result' or 'error'")
    rid = item["id"]
    if "result" in item:
        if not _is_uint(rid):
            raise ProtocolError("the reply's id is not a uint")
        return Response(rid, item["result"])
    error = item.get("error")
    if rid is not None and not _is_uint(rid):
        raise ProtocolError("the error reply's id is neither a uint nor null")
    if not isinstance(error, Mapping) or not _ERROR_KEYS.issuperset(error):
        raise ProtocolError("the reply's error is not a map of code, message, data?")
    code, message, data = error.get("code"), error.get("message"), error.get("data")
    if not isinstance(code, str) or not isinstance(message, str):
        raise ProtocolError("the reply's error needs a text code and a text message")
    if data is not None and not isinstance(data, dict):
        raise ProtocolError("the reply's error data is not a map")
    return ErrorReply(rid, error_for(code, message, data))
