"""The one reader of docs/recipes.md for the tests that follow a recipe as written."""

from __future__ import annotations

import re
from pathlib import Path

RECIPES = Path(__file__).resolve().parents[1] / "docs" / "recipes.md"


def recipe_section(heading: str) -> str:
    """The recipe under ``## heading``, up to the next ``## `` heading."""
    text = RECIPES.read_text()
    start = text.index(f"## {heading}")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def recipe_block(heading: str, language: str, containing: str) -> str:
    """The one ``language`` code block of that recipe that holds ``containing``."""
    blocks = re.findall(rf"^```{language}\n(.*?)^```", recipe_section(heading), re.M | re.S)
    (found,) = [b for b in blocks if containing in b]
    return found
