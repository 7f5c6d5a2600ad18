"""The metrics' cost on the hot path: the CPU one guarded ``invoke`` adds by
being counted, paired against the same loop uncounted.

One invoke makes exactly these calls into ``wardd.daemon.observe.metrics.Metrics``
(on three threads in the daemon; their CPU adds up the same on one): the
request counter and the dispatch histogram around ``Router.handle``
(``counting`` and ``dispatching``), the act histogram (``act_call``), and
two committed writer batches (the claim's and the outcome's) with the
attempt moves they made durable (``batch``). Each repetition times, on
this thread's CPU clock, N calls of a handler that does nothing through
the counting wrapper with those calls, right after N calls of the bare
handler; the figure is the median of the per-repetition differences ÷ N.
It uses a private module of ``wardd.daemon``; if its interface changed,
the bench reports the figure as unavailable.
"""

from __future__ import annotations

import time
from typing import Any


class _Req:
    method = "invoke"


async def _handler(conn: Any, req: Any) -> dict[str, Any]:
    return {"status": "succeeded"}


def _drive(fn: Any, req: Any, n: int) -> float:
    """CPU seconds of ``n`` calls of the coroutine function ``fn`` (none suspends)."""
    t0 = time.thread_time()
    for _ in range(n):
        coro = fn(None, req)
        try:
            coro.send(None)
        except StopIteration:
            pass
    return time.thread_time() - t0


def added_us(reps: int, n: int) -> list[float]:
    """Per repetition: the CPU µs one invoke's metrics calls add."""
    from wardd.daemon.observe.metrics import Metrics

    m = Metrics(boot="b" * 32, version="bench", previous_boot_clean=True, methods=["invoke"])
    claim_moves = [("echo", "prepared"), ("echo", "running")]
    outcome_moves = [("echo", "succeeded")]

    async def dispatched(conn: Any, req: Any) -> dict[str, Any]:
        m.dispatching("echo")  # Dispatcher.run
        m.batch(0.002, 1, claim_moves)  # the writer, the claim's batch
        m.act_call("echo", 1e-6)  # the worker
        m.batch(0.002, 1, outcome_moves)  # the writer, the outcome's batch
        return await _handler(conn, req)

    counted = m.counting(dispatched)
    req = _Req()
    _drive(counted, req, n // 10)  # warm: the label children exist from here on
    out = []
    for _ in range(reps):
        bare = _drive(_handler, req, n)
        with_metrics = _drive(counted, req, n)
        out.append((with_metrics - bare) / n * 1e6)
    return out
