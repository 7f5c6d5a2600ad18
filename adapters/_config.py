"""Checks shared by the built-in adapters' table parsers.

Each function takes the act's table (already parsed TOML) and a key, and
either returns the checked value or raises `AdapterConfigError` naming the key
relative to the table and why. TOML booleans are never accepted as integers.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar, cast

import attrs

from ._base import DEFAULT_MAX_ARG_BYTES, AdapterConfigError

T = TypeVar("T")

#: The largest secret file read (a token, a key): more is a mistake.
SECRET_FILE_MAX_BYTES = 65536


@attrs.frozen
class SecretFile:
    """A ``{file = "/abs/path"}`` value of an act's table (a ``cli`` or ``mcp``
    ``env`` value, an ``http`` header): a secret, read from its file at each
    use, whose content is never recorded, logged or shown."""

    path: str

    def read(self, *, header: bool = False) -> bytes:
        """The secret, one trailing newline stripped; `OSError` when the file
        cannot be read, `ValueError` (saying why) when its content is unusable:
        over 64 KiB, a NUL byte, or for a ``header`` a CR or LF byte."""
        with open(self.path, "rb") as f:
            data = f.read(SECRET_FILE_MAX_BYTES + 1)
        if len(data) > SECRET_FILE_MAX_BYTES:
            raise ValueError("exceeds 64 KiB")
        if data.endswith(b"\r\n"):
            data = data[:-2]
        elif data.endswith(b"\n"):
            data = data[:-1]
        if header and (b"\0" in data or b"\r" in data or b"\n" in data):
            raise ValueError("holds a NUL, CR or LF byte (not allowed in a header value)")
        if b"\0" in data:
            raise ValueError("holds a NUL byte")
        return data


def adapter_from(cls: type[T], settings: Any, **more: Any) -> T:
    """An adapter of class ``cls`` (a subclass of ``settings``' class: an
    adapter is its act's validated settings and what it runs) holding
    ``settings``' fields, and ``more`` (``mcp``'s ``boot``): an act's adapter,
    built once from its table validated once."""
    fields: tuple[attrs.Attribute[Any], ...] = attrs.fields(cast(Any, cls))
    names = {f.alias or f.name: f.name for f in fields if f.init}
    kept = {arg: getattr(settings, name) for arg, name in names.items() if arg not in more}
    return cls(**kept, **more)


def refuse_unknown_keys(table: Mapping[str, Any], allowed: Iterable[str]) -> None:
    """Refuse the first key (in sorted order) that the adapter does not know."""
    known = set(allowed)
    for key in sorted(table):
        if key not in known:
            raise AdapterConfigError(str(key), "unknown key")


def is_int(value: object) -> bool:
    """True for an integer that is not a bool (TOML ``true`` is not ``1``)."""
    return isinstance(value, int) and not isinstance(value, bool)


def max_arg_bytes(table: Mapping[str, Any], *, max_frame: int) -> int:
    """``max_arg_bytes``: an integer from 1 to ``max_frame`` (no larger args can arrive)."""
    value = table.get("max_arg_bytes", DEFAULT_MAX_ARG_BYTES)
    if not is_int(value):
        raise AdapterConfigError("max_arg_bytes", "must be an integer")
    if not 1 <= value <= max_frame:
        raise AdapterConfigError(
            "max_arg_bytes", f"must be between 1 and max_frame ({max_frame}), got {value}"
        )
    return int(value)


def text(value: object, key: str, *, what: str = "a string") -> str:
    """A non-empty string without NUL bytes (which no path, argument or variable may hold)."""
    if not isinstance(value, str):
        raise AdapterConfigError(key, f"must be {what}")
    if not value:
        raise AdapterConfigError(key, "must not be empty")
    if "\0" in value:
        raise AdapterConfigError(key, "must not contain a NUL character")
    return value


def absolute_path(value: object, key: str) -> str:
    """An absolute path string, kept as written (the receipt compares it as text)."""
    path = text(value, key, what="an absolute path string")
    if not os.path.isabs(path):
        raise AdapterConfigError(key, f"must be an absolute path, got {path!r}")
    return path


def argv(value: object, key: str) -> tuple[str, ...]:
    """A non-empty list of non-empty strings."""
    if not isinstance(value, list) or not value:
        raise AdapterConfigError(key, "must be a non-empty list of strings")
    return tuple(text(item, f"{key}[{i}]") for i, item in enumerate(value))


def exit_codes(value: object, key: str) -> frozenset[int]:
    """A list of exit codes 1-255 (0 is success, never a no-effect exit)."""
    if not isinstance(value, list):
        raise AdapterConfigError(key, "must be a list of integers")
    codes = set()
    for i, item in enumerate(value):
        if not is_int(item) or not 0 <= item <= 255:
            raise AdapterConfigError(f"{key}[{i}]", "must be an integer from 1 to 255")
        if item == 0:
            raise AdapterConfigError(f"{key}[{i}]", "0 is success and cannot be a no-effect exit")
        codes.add(int(item))
    return frozenset(codes)


#: The longest duration a config key takes (about 116 days): past it a
#: timeout or an interval is a mistake, not a choice.
MAX_SECONDS = 10**7


def seconds_problem(value: object) -> str | None:
    """Why ``value`` is no duration a config key takes (None: it is one): a
    number of seconds above zero, finite, at most `MAX_SECONDS`. The one rule
    for every such key, the daemon's and the adapters'."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"must be a number of seconds, not {type(value).__name__}"
    if not math.isfinite(value) or not 0 < value <= MAX_SECONDS:
        return f"must be a positive number of seconds up to {MAX_SECONDS:,}, not {value}"
    return None


def positive_seconds(value: object, key: str) -> float:
    """A number of seconds (`seconds_problem`); `AdapterConfigError` naming ``key``."""
    problem = seconds_problem(value)
    if problem is not None:
        raise AdapterConfigError(key, problem)
    assert isinstance(value, int | float)
    return float(value)
