"""Redaction of configured secret values from what an adapter hands back (contract §5, §6).

Every occurrence of a secret is replaced by ``[redacted]``. Output is kept
only in part (a bounded head of stdout, a tail of stderr), and a cut must
never leave a piece of a secret behind: `redact_window` redacts a window of
a longer buffer and widens any occurrence that crosses the window's edge to
a whole ``[redacted]``. Callers keep ``longest_secret`` bytes more than they
show beyond each cut edge, so that an occurrence crossing the edge is still
whole in the buffer and therefore found.
"""

from __future__ import annotations

from collections.abc import Sequence

MARK = b"[redacted]"


def _spans(data: bytes, secrets: Sequence[bytes]) -> list[tuple[int, int]]:
    """Merged [start, end) intervals of every (possibly overlapping) occurrence."""
    found = []
    for secret in secrets:
        if not secret:
            continue
        at = data.find(secret)
        while at != -1:
            found.append((at, at + len(secret)))
            at = data.find(secret, at + 1)
    found.sort()
    merged: list[tuple[int, int]] = []
    for start, end in found:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def redact_window(
    data: bytes, secrets: Sequence[bytes], start: int = 0, end: int | None = None
) -> bytes:
    """``data[start:end]`` with every secret occurrence that touches it replaced by MARK."""
    stop = len(data) if end is None else end
    out = bytearray()
    pos = start
    for span_start, span_end in _spans(data, secrets):
        if span_end <= start or span_start >= stop:
            continue
        if span_start > pos:
            out += data[pos:span_start]
        out += MARK
        pos = span_end
    if pos < stop:
        out += data[pos:stop]
    return bytes(out)


def redact_text(text: str, secrets: Sequence[bytes]) -> str:
    """``text`` with every secret (as UTF-8, or as decoded with replacement) replaced."""
    for secret in sorted(secrets, key=len, reverse=True):
        if not secret:
            continue
        for form in {secret.decode("utf-8", "replace"), secret.decode("latin-1")}:
            if form:
                text = text.replace(form, MARK.decode())
    return text


def longest(secrets: Sequence[bytes]) -> int:
    """The length of the longest secret (0 without any)."""
    return max((len(s) for s in secrets), default=0)
