"""The man pages (man/wardd.1, man/wardctl.1, shipped in the wheel under
share/man/man1) are what the commands' parsers give: the same text as
`--help`, never a copy left behind by a change of options."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "man"))

import generate  # noqa: E402  (man/generate.py)


@pytest.mark.parametrize("name", ["wardd", "wardctl"])
def test_the_committed_page_is_what_the_parser_gives(name: str) -> None:
    """`make man` has run since the last change of the command's options."""
    assert (ROOT / "man" / f"{name}.1").read_text() == generate.page(name), "run `make man`"


@pytest.mark.parametrize("name", ["wardd", "wardctl"])
def test_every_option_and_command_of_help_is_in_the_page(name: str) -> None:
    """What `NAME --help` lists (its commands and options), the page has too."""
    env = {**os.environ, "COLUMNS": "80"}
    module = {"wardd": "wardd.daemon.cli", "wardctl": "wardd.client.wardctl"}[name]
    shown = subprocess.run(
        [sys.executable, "-m", module, "--help"], capture_output=True, text=True, env=env
    ).stdout
    page = (ROOT / "man" / f"{name}.1").read_text().replace("\\-", "-")
    words = set(re.findall(r"(?<![\w-])--?[a-z][\w-]*", shown))
    commands = set(re.findall(r"^    ([a-z][\w-]+)", shown, re.M))  # below COMMAND
    assert len(commands) >= 3 and "--version" in words, shown
    for word in (words | commands) - {"--help"}:  # a page has no --help of its own
        assert word in page, word
