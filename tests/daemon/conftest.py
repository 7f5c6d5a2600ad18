"""The fixtures of the wire's fuzz tests (tests/daemon/test_fuzz_*.py): one
shared daemon per test module (``target``), ``unchanged``, which checks
that a batch of refused requests changed nothing, and ``stall_probe``, a
quiet client beside the fuzz in a process of its own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.daemon._fuzz import Target
from tests.daemon._stall_probe import StallProbe


@pytest.fixture(scope="module")
def target() -> Iterator[Target]:
    """One shared daemon for the tests of a module; the cases sent are counted."""
    t = Target()
    try:
        yield t
        print(f"\nwire fuzz: {t.cases} cases")
    finally:
        t.cleanup()


@pytest.fixture
def unchanged(target: Target) -> Iterator[Target]:
    """Snapshot before the batch; after it the daemon answers status and nothing changed."""
    before = target.snapshot()
    yield target
    target.drop_wire()
    deaths, target.deaths = target.deaths, []  # reported once, not to every later test
    target.ensure_alive()
    assert not deaths, f"the daemon died {len(deaths)} times in the batch:\n" + deaths[-1]
    assert target.alive(), "the daemon is not running:\n" + target.daemon.log_text()[-4000:]
    after = target.snapshot()
    assert after == before, "a refused request changed the daemon's state"


@pytest.fixture
def stall_probe(target: Target) -> Iterator[StallProbe]:
    """A running stall probe on the shared daemon (tests/daemon/_stall_probe.py);
    the test reads its figures with ``finish``; ended here, pass or fail."""
    probe = StallProbe.start(target.path)
    try:
        yield probe
    finally:
        probe.end()
