"""Write the blocking `Session` from the async one, as httpcore does with unasync.

`AsyncSession` in `_async_session.py` is the one source. `unasync` rewrites it
line by line (drop ``async`` and ``await``, rename the async names) into
`_sync_session.py`, which is committed, so that it reads, imports and
type-checks like any other module. ``python client/_unasync.py`` writes it
(`make unasync`); with ``--check`` it only says whether the committed file is
what it would write (exit 1 if not), as a unit test does. Run as a script it
imports nothing of wardd, so it works while the generated file is missing
or broken.

The rules are few on purpose. Each must match somewhere, so a rule the
source outgrew shows; and the result must not keep a trace of the async
side, so a construct the rules do not cover (``async with``, an anyio call)
is refused rather than written out wrong.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Final

__all__ = ["SOURCE", "TARGET", "UnasyncError", "unasync"]

_HERE = Path(__file__).resolve().parent
SOURCE: Final = _HERE / "_async_session.py"
TARGET: Final = _HERE / "_sync_session.py"

_HEADER: Final = (
    "# Generated from client/_async_session.py by client/_unasync.py: do not edit.\n"
    "# Edit _async_session.py, then run `make unasync` (a unit test fails while they differ).\n"
)

# (pattern, replacement), applied in this order to each line.
_RULES: Final = tuple(
    (re.compile(pattern), replacement)
    for pattern, replacement in (
        (r"^    from \._async import AsyncClient$", "    from ._sync import Client"),
        (r"^from \. import _async as _io$", "from . import _sync as _io"),
        (r"over an `AsyncClient` \(same API, awaited\)", "over a blocking `Client`"),
        (r"\ban `AsyncClient`", "a `Client`"),
        (r"\bAsyncSession\b", "Session"),
        (r"\bAsyncClient\b", "Client"),
        (r"\basync def\b", "def"),
        (r"\bawait ", ""),
    )
)

# What must not survive into the blocking module.
_LEFTOVER: Final = re.compile(
    r"\b(?:async|await|trio|anyio|aclose)\b|Trio|Async|__a(?:enter|exit|iter|next)__"
)


class UnasyncError(ValueError):
    """The source holds what the rules cannot turn into blocking code, or a rule is stale."""


def unasync(source: str) -> str:
    """The blocking module written from the async `source` (the text of a module)."""
    used: set[int] = set()
    lines = []
    for number, line in enumerate(source.splitlines(keepends=True), 1):
        for index, (pattern, replacement) in enumerate(_RULES):
            line, count = pattern.subn(replacement, line)
            if count:
                used.add(index)
        leftover = _LEFTOVER.search(line)
        if leftover is not None:
            raise UnasyncError(
                f"line {number}: {leftover.group()!r} has no blocking form: {line.strip()!r}"
            )
        lines.append(line)
    stale = [_RULES[i][0].pattern for i in range(len(_RULES)) if i not in used]
    if stale:
        raise UnasyncError(f"rules that match nothing in the source: {stale}")
    return _HEADER + "".join(lines)


def main(argv: list[str]) -> int:
    """Write `TARGET` from `SOURCE`; with ``--check``, only compare (exit 1 if they differ)."""
    try:
        expected = unasync(SOURCE.read_text())
    except UnasyncError as exc:
        print(f"{SOURCE.name}: {exc}", file=sys.stderr)
        return 2
    if "--check" in argv:
        if TARGET.read_text() != expected:
            print(
                f"{TARGET.name} is not what {SOURCE.name} generates: run `make unasync`",
                file=sys.stderr,
            )
            return 1
        return 0
    TARGET.write_text(expected)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
