"""The two sessions are one source: `Session` is generated from `AsyncSession`.

`client/_unasync.py` writes `client/_sync_session.py` from
`client/_async_session.py`; these tests hold the committed file to what it
generates and pin the public surface both sessions share.
"""

from __future__ import annotations

import inspect
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from wardd.client import Session, TrioSession
from wardd.client._unasync import SOURCE, TARGET, UnasyncError, unasync

# The public API of both sessions (methods and properties), pinned.
PUBLIC = {
    "id",
    "epoch",
    "signed",
    # reads
    "status",
    "workers",
    "get_neuron",
    "get_prog",
    "get_operation",
    "list_operations",
    "history",
    "list_attempts",
    # neuron root
    "register",
    "ensure_placement",
    "bind",
    "release",
    "advance_epoch",
    "grant",
    # progs
    "create_prog",
    "set_prog_state",
    "set_step_limit",
    "abort",
    "reserve_steps",
    "settle_steps",
    "recover_reservations",
    # operations
    "submit",
    "prepare",
    "execute",
    "invoke",
    "call",
    "manual_take",
    "reconcile",
    "cancel",
    "consume",
    "rebind",
    "check_receipts",
}
PROPERTIES = {"id", "epoch"}


def public_names(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


def run_generator(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run a copy of the generator as a script in `folder`, as `make unasync` does."""
    return subprocess.run(
        [sys.executable, "-I", str(folder / "_unasync.py"), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def copied(tmp_path: Path) -> Path:
    """The generator and its source, alone in a folder outside the package."""
    shutil.copy(SOURCE.with_name("_unasync.py"), tmp_path)
    shutil.copy(SOURCE, tmp_path)
    return tmp_path


class TestGeneratedSession:
    def test_the_committed_blocking_session_is_what_the_trio_session_generates(self) -> None:
        """client/_sync_session.py is exactly what _unasync.py writes from _async_session.py."""
        assert TARGET.read_text() == unasync(SOURCE.read_text())

    def test_the_generator_writes_the_blocking_session_without_importing_wardd(
        self, copied: Path
    ) -> None:
        """Run as a script beside its source, it writes the committed file even where none was."""
        done = run_generator(copied)
        assert (done.returncode, done.stderr) == (0, "")
        assert (copied / TARGET.name).read_text() == TARGET.read_text()

    def test_check_fails_when_the_blocking_session_was_edited_by_hand(self, copied: Path) -> None:
        """--check exits 1 and says to run make unasync when the generated file differs."""
        edited = TARGET.read_text().replace("(the escape hatch", "(an escape hatch")
        (copied / TARGET.name).write_text(edited)
        done = run_generator(copied, "--check")
        assert done.returncode == 1
        assert "make unasync" in done.stderr
        assert (copied / TARGET.name).read_text() == edited

    def test_check_passes_on_the_generated_file(self, copied: Path) -> None:
        """--check exits 0 when the file is what the source generates."""
        shutil.copy(TARGET, copied)
        assert run_generator(copied, "--check").returncode == 0

    def test_a_construct_without_a_blocking_form_is_refused(self) -> None:
        """Source the rules cannot make blocking (here `async with`) is refused, naming its line."""
        extra = "\n\nasync def hold(lock):\n    async with lock:\n        pass\n"
        source = SOURCE.read_text() + extra
        last = len(source.splitlines()) - 1
        with pytest.raises(UnasyncError, match=f"line {last}: 'async'"):
            unasync(source)

    def test_a_rule_that_matches_nothing_is_refused(self) -> None:
        """A rule the source no longer needs is reported, so the table stays exact."""
        with pytest.raises(UnasyncError, match="await"):
            unasync(SOURCE.read_text().replace("await ", ""))


class TestSessionSurface:
    @pytest.mark.parametrize("cls", [Session, TrioSession])
    def test_both_sessions_offer_exactly_the_pinned_public_api(self, cls: type) -> None:
        """Session and TrioSession each have exactly the listed public methods and properties."""
        assert public_names(cls) == PUBLIC
        assert {n for n in PUBLIC if isinstance(inspect.getattr_static(cls, n), property)} == (
            PROPERTIES
        )

    @pytest.mark.parametrize("name", sorted(PUBLIC - PROPERTIES))
    def test_each_method_is_the_same_in_both_sessions_but_awaited_in_trio(self, name: str) -> None:
        """Same signature and docstring; only TrioSession's is a coroutine function."""
        blocking, awaited = getattr(Session, name), getattr(TrioSession, name)
        assert inspect.signature(blocking) == inspect.signature(awaited)
        assert blocking.__doc__ == awaited.__doc__
        assert blocking.__doc__ and blocking.__doc__.strip()
        assert not inspect.iscoroutinefunction(blocking)
        assert inspect.iscoroutinefunction(awaited)

    def test_both_sessions_are_built_the_same_way(self) -> None:
        """The constructors take the same arguments and defaults; only the client's type differs."""

        def shape(cls: type) -> list[tuple[str, object, object]]:
            params = inspect.signature(cls.__init__).parameters.values()
            return [(p.name, p.kind, p.default) for p in params]

        assert shape(Session) == shape(TrioSession)
        assert [name for name, _, _ in shape(Session)] == [
            "self",
            "client",
            "neuron",
            "network",
            "epoch",
        ]
        assert inspect.signature(Session.__init__).parameters["client"].annotation == "Client"
        assert (
            inspect.signature(TrioSession.__init__).parameters["client"].annotation == "AsyncClient"
        )
