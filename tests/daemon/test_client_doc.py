"""docs/client.md is true: every Python example in it runs, as the complete
program it is, in its own process, against a real daemon."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "client.md"
EXAMPLES = re.findall(r"^```python\n(.*?)^```$", DOC.read_text(), re.M | re.S)


def example_id(source: str) -> str:
    """The example's first statement after its imports, for the test id."""
    lines = [
        line for line in source.splitlines() if line and not line.startswith(("from", "import"))
    ]
    return lines[0][:40]


def test_the_manual_has_its_examples() -> None:
    """Blocking, asyncio and trio programs are all there."""
    assert len(EXAMPLES) >= 8
    assert any("asyncio.run(main())" in e for e in EXAMPLES)
    assert any("trio.run(main)" in e for e in EXAMPLES)


@pytest.fixture(scope="module")
def doc_daemon():
    """One daemon for every example (each example registers its own neuron)."""
    from tests.daemon.harness import Daemon, Env

    d = Daemon(Env(), shared=True)  # module-scoped: the leftover guard spares it till the end
    try:
        d.start()
        yield d
    finally:
        d.cleanup()


@pytest.mark.parametrize("source", EXAMPLES, ids=[example_id(e) for e in EXAMPLES])
def test_each_example_runs(doc_daemon, source: str, tmp_path: Path) -> None:
    program = tmp_path / "example.py"
    program.write_text(source)
    env = {**os.environ, "WARDD_SOCKET": str(doc_daemon.env.socket)}
    done = subprocess.run(
        [sys.executable, str(program)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
