"""Crash scenarios more than one test file replays on a real daemon."""

from __future__ import annotations

from tests._poll import wait_for
from tests.daemon.harness import Actor, Background, Daemon, key


def crash_with_a_blocked_call_and_a_landed_write(
    d: Daemon, a: Actor, extra_env: dict[str, str] | None = None
) -> None:
    """SIGKILL ``d`` while op ``g1`` (act ``gated``) is blocked in its act and
    op ``l1`` (act ``ledger``, prepared) has its line in the ledger already,
    then start it again (with ``extra_env``): ``g1``'s program is killed as an
    orphan and marked unknown, ``l1`` is marked unknown and its receipt
    (``executed``) resolves it. ``a`` is reconnected; nothing is bound."""
    a.submit("g1", "gated")
    a.submit("l1", "ledger", b"x")
    a.prepare("l1")
    with open(d.env.ledger, "a") as f:
        f.write(f"{key(a, 'l1')}\t{b'x'.hex()}\n")
    call = Background(a.invoke, "g1", 1, d.connect())
    wait_for(d.env.started_marker("g1").exists, what="the gated act to start")
    d.kill()
    call.done.wait(10)
    d.start(extra_env)
    a.client = d.connect()
