"""The client's types hold for a user's program: mypy --strict checks a small
asyncio program against the package, and catches a misuse of a result."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

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


def mypy(tmp_path: Path, program: str) -> subprocess.CompletedProcess[str]:
    """mypy --strict on `program`, with the package's folders mapped into the
    `wardd` namespace as the build maps them (a tree of symlinks)."""
    tree = tmp_path / "path" / "wardd"
    tree.mkdir(parents=True)
    for folder in ("client", "protocol"):
        (tree / folder).symlink_to(ROOT / folder)
    (tmp_path / "user.py").write_text(program)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-incremental",
            "--namespace-packages",
            "--explicit-package-bases",
            "--config-file",
            str(tmp_path / "none.ini"),
            str(tmp_path / "user.py"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"MYPYPATH": str(tmp_path / "path"), "PATH": "/usr/bin:/bin"},
        timeout=600,
    )


@pytest.fixture
def config(tmp_path: Path) -> None:
    (tmp_path / "none.ini").write_text("[mypy]\n[mypy-cbor2.*]\nignore_missing_imports = True\n")


class TestTypes:
    def test_a_user_program_type_checks_strictly(self, tmp_path: Path, config: None) -> None:
        """Connect, submit, invoke with a retry, list, consume: every result is typed."""
        done = mypy(tmp_path, USER_PROGRAM)
        assert done.returncode == 0, done.stdout + done.stderr

    def test_a_misused_result_is_caught(self, tmp_path: Path, config: None) -> None:
        """A state is an enum, not a number: mypy says so (the check is real)."""
        done = mypy(tmp_path, MISUSE)
        assert done.returncode == 1 and "user.py:6: error" in done.stdout, done.stdout
