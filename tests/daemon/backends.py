"""Run one async test body under asyncio and under trio (anyio picks the loop).

pytest-trio's ``trio_mode`` runs every ``async def`` test under trio, so a
test meant for both loops is a plain function taking the `backend` fixture
and handing its body to `run_on`, which starts a fresh event loop of that
kind (``anyio.run``). The daemon it talks to is a real process either way.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import pytest

BACKENDS = ("asyncio", "trio")
T = TypeVar("T")


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The event loop a test body runs under: each test runs once per loop."""
    return str(request.param)


def run_on(backend: str, body: Callable[..., Awaitable[T]], *args: Any) -> T:
    """Run ``body(*args)`` in a fresh event loop of `backend` and return its result."""
    return anyio.run(body, *args, backend=backend)
