"""The client's types hold for a user's program: mypy --strict checks a small
asyncio program against the package, and catches a misuse of a result."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

USER_PROGRAM = """
import asyncio

from wardd.client import AsyncClient, AsyncSession, Dispatched, Neuron, Page, Retry, Session
from wardd.client import OperationSummary, Client
from wardd.protocol import AttemptState, OpState


async def run(path: str, neuron: Neuron) -> bytes | None:
    async with AsyncClient.connect(path) as client:
        session = AsyncSession(client, neuron)
        await session.ensure_placement("w0")
        submitted = await session.submit("p", "op-1", "echo", b"hi")
        state: OpState = submitted.state
        done: Dispatched = await session.invoke("op-1", retry=Retry(max_attempts=3))
        status: AttemptState = done.status
        listed: Page[OperationSummary] = await session.list_operations()
        states: list[OpState] = [o.state for o in listed]
        consumed = await session.consume("op-1")
        value: object = consumed.result.value
        wire: dict[str, object] = consumed.to_wire()
        print(state, status, states, value, wire)
        return value if isinstance(value, bytes) else None


def blocking(path: str, neuron: Neuron) -> int:
    with Client(path) as client:
        return Session(client, neuron).get_neuron().epoch


asyncio.run(run("/tmp/wardd.sock", Neuron.generate()))
"""

MISUSE = """
from wardd.client import Neuron, Session, Client

def bad(client: Client) -> int:
    done = Session(client, Neuron.generate()).invoke("op")
    return done.status + 1
"""


def mypy(tmp_path: Path, *programs: str) -> subprocess.CompletedProcess[str]:
    """mypy --strict on `programs` (user.py, user1.py, ...) as a user runs it in
    the README's .venv: no configuration, no search path of ours; `wardd` is
    found where it is installed (the editable install is a tree of files that
    type checkers can read, Makefile)."""
    files = []
    for n, program in enumerate(programs):
        files.append(tmp_path / f"user{n or ''}.py")
        files[-1].write_text(program)
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", *map(str, files)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        timeout=600,
    )


class TestTypes:
    def test_a_user_program_type_checks_strictly(self, tmp_path: Path) -> None:
        """Connect, submit, invoke with a retry, list, consume: every result is typed."""
        done = mypy(tmp_path, USER_PROGRAM)
        assert done.returncode == 0, done.stdout + done.stderr

    def test_a_misused_result_is_caught(self, tmp_path: Path) -> None:
        """A state is an enum, not a number: mypy says so (the check is real)."""
        done = mypy(tmp_path, MISUSE)
        assert done.returncode == 1 and "user.py:6: error" in done.stdout, done.stdout

    def test_the_manuals_examples_type_check_strictly(self, tmp_path: Path) -> None:
        """Every Python example of docs/client.md is a program mypy --strict accepts."""
        examples = re.findall(
            r"^```python\n(.*?)^```$", (ROOT / "docs" / "client.md").read_text(), re.M | re.S
        )
        assert len(examples) >= 8
        done = mypy(tmp_path, *examples)
        assert done.returncode == 0, done.stdout + done.stderr
