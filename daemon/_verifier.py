"""Signature checks beside the event loop, batched (contract §4).

Ed25519 ``verify`` releases the GIL, so a check on another thread runs
beside the loop's Python, on the other core. The checks go to one thread of
their own through a queue: it takes every check waiting at that moment,
answers them all, and hands the batch back to the loop in one
``run_sync_soon``. A ``trio.to_thread.run_sync`` per batch was measured
first: it costs the loop about as much CPU as the check it moves (~70 µs),
and under 16 clients a batch held about one check, so it saved nothing.
When no other request is in flight the check runs inline: a client waiting
alone for its reply would only wait longer for the hand-off (measured with
one sequential client: p50 2.33 ms inline, 2.99 ms on the thread).

The answer is exactly `wardd.protocol.verify`'s: the same function runs,
on the thread or inline. Each check parses its key from the neuron id
inside `verify` (about 1 µs), so no key object is shared between threads.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import trio

from wardd.protocol import verify

__all__ = ["Verifier"]


@attrs.define(eq=False)
class _Check:
    args: tuple[str, bytes, str, str, Mapping[str, Any]]
    done: trio.Event = attrs.field(factory=trio.Event)
    ok: bool = False


class Verifier:
    """Batched signature checks on a thread of their own; ``alone()`` says
    whether the caller's request is the only one in flight (then the check
    runs inline). `close` ends the thread."""

    def __init__(self, alone: Callable[[], bool]) -> None:
        self._alone = alone
        self._queue: queue.SimpleQueue[_Check | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self.batches = 0
        self.checks = 0

    async def verify(
        self, neuron: str, sig: bytes, network: str, method: str, params: Mapping[str, Any]
    ) -> bool:
        """`wardd.protocol.verify` of these arguments, inline or on the thread.

        The wait is shielded: a check is bounded (tens of µs), and its answer
        always comes back."""
        if self._alone():
            return verify(neuron, sig, network, method, params)
        if self._thread is None:
            self._start()
        check = _Check((neuron, sig, network, method, params))
        self._queue.put(check)
        with trio.CancelScope(shield=True):
            await check.done.wait()
        return check.ok

    def _start(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._thread = threading.Thread(target=self._serve, name="wardd-verify", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """End the thread once the checks queued so far are answered."""
        if self._thread is not None:
            self._queue.put(None)  # ends the thread
            self._thread.join()
            self._thread = None

    def _serve(self) -> None:
        """The thread: take what waits, check it, hand the batch back at once."""
        assert self._token is not None
        get, get_nowait = self._queue.get, self._queue.get_nowait
        while True:
            first = get()
            if first is None:
                return
            batch: list[_Check] = [first]
            stop = False
            while True:
                try:
                    nxt = get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stop = True
                    break
                batch.append(nxt)
            for c in batch:
                try:
                    c.ok = verify(*c.args)
                except Exception:  # noqa: BLE001 - verify never raises; if it did: not valid
                    c.ok = False
            try:
                self._token.run_sync_soon(self._answer, batch)
            except trio.RunFinishedError:  # the loop is gone: nobody waits any more
                return
            if stop:
                return

    def _answer(self, batch: list[_Check]) -> None:
        """On the loop: wake every check of the batch."""
        self.batches += 1
        self.checks += len(batch)
        for c in batch:
            c.done.set()
