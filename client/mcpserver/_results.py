"""What the model sees: a ``tools/call`` answer from what the daemon said (pure).

- ``succeeded``: ``isError`` false; the value as text, and as
  ``structuredContent`` when it is a JSON object;
- ``failed`` (or ``not_executed``): ``isError`` true, "failed, nothing was
  done", ``structuredContent`` ``{status: "failed", op, attempt, may_have_run: false}``;
- ``unknown``, ``attempt_unknown``, or an answer lost after the request was
  sent: ``isError`` true, a text that says not to retry, ``structuredContent``
  ``{status: "unknown", op, attempt, may_have_run: true, retry_safe: false}``;
- a refusal: ``isError`` true, ``{status: "refused", code, ...}``, the code
  and message in the text.

Every result carries ``_meta["wardd/op"]``, ``_meta["wardd/key"]`` (where the
op id came from) and, when an attempt exists, ``_meta["wardd/attempt"]``;
``_meta["wardd/already"]`` is true on an outcome an earlier call produced.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Mapping
from typing import Any

import attrs
import mcp_types as types

from ._keys import FROM_RANDOM, KEY_META, OpKey

__all__ = ["Finished", "Lost", "Refused", "Unreachable", "status_of", "tool_result"]


@attrs.frozen
class Finished:
    """The attempt ended (now, or earlier: ``already``) with this outcome."""

    attempt: int
    status: str  # succeeded, failed, not_executed, unknown
    value: Any = None
    error: str | None = None
    already: bool = False
    discarded: bool = False  # succeeded, and the op's cancel discarded its value


@attrs.frozen
class Refused:
    """The daemon refused the call with this code. `in_doubt`: an attempt of
    the op may have run or is running (``attempt_unknown``, ``attempt_busy``,
    a refusal marked ``data.may_have_run``; `wardd.client._doubt`); it names
    the attempt when it can."""

    code: str
    message: str
    attempt: int | None = None
    in_doubt: bool = False


@attrs.frozen
class Lost:
    """The request was sent and its answer never came, or the op's fate is
    no longer known (pruned): it may have run."""

    why: str
    attempt: int | None = None


@attrs.frozen
class Unreachable:
    """The daemon could not be reached: nothing was sent."""

    why: str


Answer = Finished | Refused | Lost | Unreachable


def tool_result(key: OpKey, answer: Answer) -> types.CallToolResult:
    """The ``CallToolResult`` of one call whose op is `key` and answer `answer`."""
    if isinstance(answer, Finished) and answer.discarded:
        return _discarded(key, answer.attempt)
    if isinstance(answer, Finished) and answer.status == "succeeded":
        result = _result(key, answer.attempt, False, _text(answer.value), _object(answer.value))
        return _already(result) if answer.already else result
    if isinstance(answer, Finished) and answer.status in ("failed", "not_executed"):
        said = f": {answer.error}" if answer.error else ""
        text = f"failed, nothing was done (op {key.op}, attempt {answer.attempt}){said}"
        structured = _status("failed", key, answer.attempt, may_have_run=False)
        if answer.error:
            structured["error"] = answer.error
        result = _result(key, answer.attempt, True, text, structured)
        return _already(result) if answer.already else result
    if isinstance(answer, Finished):  # unknown
        return _unknown(key, answer.attempt, answer.error)
    if isinstance(answer, Lost):
        return _unknown(key, answer.attempt, answer.why)
    if isinstance(answer, Refused) and answer.in_doubt:
        return _unknown(key, answer.attempt, f"{answer.code}: {answer.message}")
    if isinstance(answer, Refused):
        text = f"refused ({answer.code}): {answer.message}; nothing was run by this call"
        structured = _status("refused", key, answer.attempt, may_have_run=False)
        structured["code"] = answer.code
        return _result(key, answer.attempt, True, text, structured)
    text = (
        f"refused (unavailable): the wardd daemon cannot be reached ({answer.why}); "
        "nothing was sent"
    )
    structured = _status("refused", key, None, may_have_run=False)
    structured["code"] = "unavailable"
    return _result(key, None, True, text, structured)


def _already(result: types.CallToolResult) -> types.CallToolResult:
    """Mark a result an earlier call of the same op produced (nothing ran now)."""
    return result.model_copy(update={"meta": {**(result.meta or {}), "wardd/already": True}})


def status_of(answer: Answer) -> str:
    """How a call ended, for its log line: an outcome, ``refused:<code>`` or ``unavailable``."""
    if isinstance(answer, Finished):
        return answer.status
    if isinstance(answer, Lost):
        return "unknown"
    if isinstance(answer, Refused):
        return "unknown" if answer.in_doubt else f"refused:{answer.code}"
    return "unavailable"


def _unknown(key: OpKey, attempt: int | None, why: str | None) -> types.CallToolResult:
    where = f"op {key.op}" + (f", attempt {attempt}" if attempt is not None else "")
    said = f" ({why})" if why else ""
    text = (
        f"unknown: this call may have run ({where}){said}. Do not retry it, with this key or "
        "another: it may already have taken effect. Tell the user; an operator resolves it "
        f"(`wardctl op show {key.op}`). Calling again with the same key never runs it again."
    )
    structured = _status("unknown", key, attempt, may_have_run=True)
    structured["retry_safe"] = False
    return _result(key, attempt, True, text, structured)


def _discarded(key: OpKey, attempt: int) -> types.CallToolResult:
    text = (
        f"succeeded earlier (op {key.op}, attempt {attempt}), but its value was discarded "
        "when the op was cancelled: it took effect. Do not run it again."
    )
    structured = _status("succeeded", key, attempt, may_have_run=True)
    structured.update(retry_safe=False, value_discarded=True)
    return _already(_result(key, attempt, True, text, structured))


def _status(status: str, key: OpKey, attempt: int | None, *, may_have_run: bool) -> dict[str, Any]:
    return {"status": status, "op": key.op, "attempt": attempt, "may_have_run": may_have_run}


def _result(
    key: OpKey, attempt: int | None, is_error: bool, text: str, structured: Any
) -> types.CallToolResult:
    if key.source == FROM_RANDOM:
        text += (
            f"\n(op {key.op} has a fresh id: a retry of this same call must pass it as "
            f'_meta["{KEY_META}"], or it is a new call)'
        )
    meta: dict[str, Any] = {"wardd/op": key.op, "wardd/key": key.source}
    if attempt is not None:
        meta["wardd/attempt"] = attempt
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=structured,
        is_error=is_error,
        _meta=meta,
    )


def jsonable(value: Any) -> Any:
    """An act's value (CBOR: bytes, maps, ...) as JSON: bytes as UTF-8 text, or
    ``{"base64": ...}`` when they are not UTF-8; map keys as strings."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(raw).decode("ascii")}
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return str(value)


def _text(value: Any) -> str:
    plain = jsonable(value)
    if isinstance(plain, str):
        return plain
    return json.dumps(plain, ensure_ascii=False, sort_keys=True)


def _object(value: Any) -> dict[str, Any] | None:
    """The value as a JSON object, when it is one: a map, or text (or UTF-8
    bytes) that parses as one."""
    plain = jsonable(value)
    if isinstance(plain, str):
        try:
            plain = json.loads(plain)
        except ValueError:
            return None
        return plain if isinstance(plain, dict) else None
    if isinstance(plain, dict) and not isinstance(value, (bytes, bytearray, memoryview)):
        return plain
    return None
