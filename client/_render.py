"""Turning daemon values into text for people and JSON for programs.

Byte strings are shown as their UTF-8 text when that is printable, else as
``hex:…``; in JSON they become ``{"hex": "…"}`` (JSON has no byte strings).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["duration", "human_size", "scalar", "to_json", "tree", "write_json"]


def to_json(obj: Any) -> Any:
    """`obj` with every value JSON can hold as is, and bytes as ``{"hex": ...}``."""
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return {"hex": bytes(obj).hex()}
    if isinstance(obj, Mapping):
        return {str(k): to_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [to_json(v) for v in obj]
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    return str(obj)


def write_json(obj: Any) -> None:
    print(json.dumps(to_json(obj), indent=2, ensure_ascii=False))


def _text(value: str) -> str:
    if value == "":
        return '""'
    if value.isprintable() and value.strip() == value:
        return value
    return json.dumps(value, ensure_ascii=False)


def scalar(value: Any) -> str:
    """One value on one line: text, numbers, null/true/false, bytes readably."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            return f"hex:{raw.hex()}"
        if (
            text
            and not text.isprintable()
            and not all(c.isprintable() or c in "\n\r\t" for c in text)
        ):
            return f"hex:{raw.hex()}"
        return _text(text)
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, Mapping) and not value:
        return "{}"
    if isinstance(value, (list, tuple)) and not value:
        return "[]"
    if isinstance(value, (list, tuple)) and all(
        isinstance(v, (str, int)) and not isinstance(v, bool) for v in value
    ):
        return ", ".join(_text(v) if isinstance(v, str) else str(v) for v in value)
    return str(value)


def _is_leaf(value: Any) -> bool:
    if isinstance(value, Mapping):
        return not value
    if isinstance(value, (list, tuple)):
        return not value or all(
            isinstance(v, (str, int)) and not isinstance(v, bool) for v in value
        )
    return True


def tree(value: Any, indent: int = 0) -> list[str]:
    """Nested maps and lists as indented ``key: value`` lines."""
    pad = "  " * indent
    lines: list[str] = []
    if isinstance(value, Mapping) and value:
        for key, item in value.items():
            if _is_leaf(item):
                lines.append(f"{pad}{key}: {scalar(item)}")
            else:
                lines.append(f"{pad}{key}:")
                lines.extend(tree(item, indent + 1))
    elif isinstance(value, (list, tuple)) and not _is_leaf(value):
        for item in value:
            sub = tree(item, indent + 1)
            if sub:
                lines.append(f"{pad}- {sub[0].lstrip()}")
                lines.extend(sub[1:])
            else:
                lines.append(f"{pad}-")
    else:
        lines.append(f"{pad}{scalar(value)}")
    return lines


def duration(seconds: float) -> str:
    """``3d 4h 5m 6s`` style."""
    total = int(seconds)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{days}d"] if days else []
    if days or hours:
        parts.append(f"{hours}h")
    if days or hours or minutes:
        parts.append(f"{minutes}m")
    parts.append(f"{secs}s")
    return " ".join(parts)


def human_size(size: int) -> str:
    """Bytes in B, KiB, MiB or GiB."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"
