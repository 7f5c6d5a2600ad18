"""The repository stands on its own: its docs and code point only inside it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# whitespace may be a line break: a citation wrapped across two lines is one
OUTSIDE = re.compile(
    r"SPEC\.md|SPEC\s+§|shared\s+folder|\bthe\s+SPEC\b|\bissues?\s+#?\d+\b|PERF-NOTES", re.I
)


def tracked_text_files() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [ROOT / f for f in out if not f.endswith((".db", ".neuron")) and (ROOT / f).is_file()]


class TestSelfContained:
    def test_no_file_points_to_a_contract_outside_the_repository(self) -> None:
        """No tracked file cites SPEC.md, a shared folder or an issue tracker number."""
        me = Path(__file__).resolve()
        hits = []
        for path in tracked_text_files():
            if path == me:
                continue
            text = path.read_text(errors="replace")
            for m in OUTSIDE.finditer(text):
                n = text.count("\n", 0, m.start()) + 1
                hits.append(f"{path.relative_to(ROOT)}:{n}: {' '.join(m.group().split())}")
        assert hits == []

    def test_every_contract_section_cited_exists(self) -> None:
        """Each "contract §N" cited in code or docs is a heading of docs/contract.md."""
        contract = (ROOT / "docs" / "contract.md").read_text()
        headings = set(re.findall(r"^#+ (\d+(?:\.\d+)*)\.? ", contract, re.M))
        cited: set[str] = set()
        for path in tracked_text_files():
            for m in re.finditer(r"contract §(\d+(?:\.\d+)*)", path.read_text(errors="replace")):
                cited.add(m.group(1))
        # §3.2.1 and the like are numbered steps inside a section: the section must exist.
        missing = {c for c in cited if not any(c == h or c.startswith(h + ".") for h in headings)}
        assert missing == set()


LOG_CALL = re.compile(r"\blog\.(debug|info|warning|error|critical|exception)\(")
LOG_EVENT = re.compile(r'\blog\.(debug|info|warning|error|critical|exception)\(\s*"([a-z_]+)"')
# many lines of one event at once (_logging.log_lines): its level, then its event
LOG_LINES = re.compile(r'\blog_lines\(\s*log,\s*"([a-z]+)",\s*"([a-z_]+)"')


def logged_events() -> dict[str, set[str]]:
    """event -> levels, from every log call in the daemon's and adapters' source."""
    events: dict[str, set[str]] = {}
    for folder in ("daemon", "adapters", "protocol"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            text = path.read_text()
            found = LOG_EVENT.findall(text)
            assert len(found) == len(LOG_CALL.findall(text)), f"{path}: an event name not literal"
            found += LOG_LINES.findall(text)
            for level, event in found:
                events.setdefault(event, set()).add(level)
    return events


def documented_events() -> dict[str, str]:
    """event -> level column, from the event table of docs/operations.md."""
    text = (ROOT / "docs" / "operations.md").read_text()
    logs = text[text.index("\n## Logs\n") :]
    logs = logs[: logs.index("\n## ", 1)]
    return dict(re.findall(r"^\| `([a-z_]+)` \| ([a-z;, `]+?) \|", logs, re.M))


class TestLogEventsDocumented:
    def test_every_event_the_daemon_logs_is_in_operations_md(self) -> None:
        """docs/operations.md lists exactly the events the source logs, each at its levels."""
        logged, documented = logged_events(), documented_events()
        assert set(logged) == set(documented)
        for event, levels in logged.items():
            assert all(level in documented[event] for level in levels), event


class TestMetricsDocumented:
    def test_the_series_table_of_operations_md_is_the_source_s(self) -> None:
        """docs/operations.md's series table is SERIES: in order, with kind and meaning."""
        from wardd.daemon.observe.metrics import SERIES

        text = (ROOT / "docs" / "operations.md").read_text()
        row = r"^\| `(wardd_[a-z_]+(?:\{[a-z,]+\})?)` \| ([a-z]+) \| (.+) \|$"
        rows = re.findall(row, text, re.M)
        assert rows == [(s.shown, s.kind, s.help) for s in SERIES]


class TestMcpLogEventsDocumented:
    def test_every_event_wardd_mcp_logs_is_in_its_recipe(self) -> None:
        """docs/recipes.md's MCP section names exactly the events client/mcpserver/ logs."""
        logged: set[str] = set()
        for path in sorted((ROOT / "client" / "mcpserver").rglob("*.py")):
            text = path.read_text()
            found = LOG_EVENT.findall(text)
            assert len(found) == len(LOG_CALL.findall(text)), f"{path}: an event name not literal"
            logged |= {event for _, event in found}
        recipes = (ROOT / "docs" / "recipes.md").read_text()
        section = recipes[recipes.index("\n## Guard the tools of an MCP host\n") :]
        documented = set(re.findall(r"`(mcp_[a-z_]+)`", section))
        assert logged and logged == documented
