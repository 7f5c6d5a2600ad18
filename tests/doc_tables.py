"""Tables of the docs that tests compare with what the daemon does."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def documented_fields() -> dict[str, set[str]]:
    """event -> every name in backticks in its fields column (docs/operations.md's
    events table): the fields a log line of that event may carry."""
    text = (ROOT / "docs" / "operations.md").read_text()
    rows = re.findall(r"^\| `([a-z_]+)` \| [a-z;, `]+? \| (.*?) \| .* \|$", text, re.M)
    return {event: set(re.findall(r"`([a-z_]+)`", fields)) for event, fields in rows}
