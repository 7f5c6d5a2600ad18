"""The manual renders as written: every fence in README.md and docs/ is closed,
every ```toml block parses and every ```python block compiles."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MANUAL = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")


def blocks(text: str, name: str) -> list[tuple[int, str, str]]:
    """(line, info string, body) of each fenced block of ``text``; an
    AssertionError names a fence that is never closed (CommonMark: a fence
    with an info string cannot close a block, so a forgotten close swallows
    everything up to the next bare fence)."""
    found: list[tuple[int, str, str]] = []
    opened: tuple[int, str, str] | None = None  # line, fence, info
    body: list[str] = []
    for n, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if opened is None:
            if m:
                opened, body = (n, m.group(1), m.group(2).strip()), []
            continue
        start, fence, info = opened
        if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
            assert not m.group(2).strip(), (
                f"{name}:{start}: the ```{info} block is never closed (line {n} opens another)"
            )
            found.append((start, info, "\n".join(body) + "\n"))
            opened = None
        else:
            body.append(line)
    assert opened is None, f"{name}:{opened[0]}: the ```{opened[2]} block is never closed"
    return found


class TestFences:
    def test_an_unclosed_fence_is_named_with_its_line(self) -> None:
        """A block left open when the next one opens, or at the end, is named."""
        with pytest.raises(AssertionError, match=r"^doc.md:1: the ```toml block is never closed"):
            blocks("```toml\na = 1\n\ntext\n```toml\nb = 2\n```\n", "doc.md")
        with pytest.raises(AssertionError, match=r"^doc.md:2: the ```python block is never"):
            blocks("text\n```python\nx = 1\n", "doc.md")
        assert blocks("````md\n```toml\n````\n~~~\nx\n~~~\n", "doc.md") == [
            (1, "md", "```toml\n"),
            (4, "", "x\n"),
        ]

    @pytest.mark.parametrize("path", MANUAL, ids=[str(p.relative_to(ROOT)) for p in MANUAL])
    def test_every_block_is_closed_and_its_toml_and_python_read(self, path: Path) -> None:
        """Each ```toml block is TOML (tomllib) and each ```python block compiles."""
        name = str(path.relative_to(ROOT))
        for line, info, body in blocks(path.read_text(), name):
            if info == "toml":
                try:
                    tomllib.loads(body)
                except tomllib.TOMLDecodeError as exc:
                    pytest.fail(f"{name}:{line}: {exc}")
            elif info == "python":
                compile(body, f"{name}:{line}", "exec")
