from __future__ import annotations

import pytest

from tests.daemon.harness import Daemon, Env


@pytest.fixture
def make_daemon():
    """``make_daemon(start=True, **Env kwargs)`` → a real daemon process."""
    daemons: list[Daemon] = []

    def factory(env: Env | None = None, start: bool = True, **kw):
        d = Daemon(env or Env(**kw))
        daemons.append(d)
        if start:
            d.start()
        return d

    yield factory
    for d in reversed(daemons):
        d.cleanup()


@pytest.fixture
def daemon(make_daemon):
    return make_daemon()
