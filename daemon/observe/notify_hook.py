"""The notify hook: a program of the operator's run when an attempt needs
them (``notify_argv``; docs/operations.md "Notify hook").

Events: ``attempt_unknown`` (an attempt became unknown: an adapter's
outcome, an abort, the start's marking of an earlier boot's open attempt),
``resolved_by_receipt`` (a receipt resolved an unknown attempt), and
``previous_boot_unclean`` (a start found the boot before it did not stop
through its stop path). Each runs ``notify_argv`` once, never through a
shell, with one JSON object on its stdin: ``event``, ``op``, ``attempt``,
``act``, ``neuron`` (null for ``previous_boot_unclean``), ``boot`` (this
boot) and ``evidence`` (the attempt's evidence, or what the event found;
records hold no secret, and an adapter's error text has its secrets
redacted already).

The hook runs on a thread of its own, one event at a time, in the order
posted: posting is a bounded queue's ``put_nowait`` on the event loop, a
worker or the recovery, so a hook never delays or changes an attempt.
A hook that exits non-zero, cannot be started, or runs past
``notify_timeout_s`` (its process group is then killed) is logged
(``notify_failed``) and that event is dropped; an event that finds the
queue full (:data:`QUEUE_BOUND` waiting) is logged (``notify_dropped``)
and dropped. Events still queued when the daemon stops are not run.
"""

from __future__ import annotations

import json
import os
import queue
import threading
from collections.abc import Sequence
from typing import Any, Final

import structlog

from wardd.adapters._base import DefiniteFailure
from wardd.adapters._process import ProcessGroups, run

__all__ = ["QUEUE_BOUND", "NotifyHook"]

log = structlog.get_logger("wardd.notify")
QUEUE_BOUND: Final = 1024
_STDERR_KEPT = 512  # bytes of a failing hook's stderr in its log line
_STOP: Final = object()
_JOIN_S: Final = 5.0  # the thread ends at once: its hook, if any, was just killed


class NotifyHook:
    """Runs ``argv`` per event on its own thread; disabled when ``argv`` is empty."""

    def __init__(self, argv: Sequence[str], boot: str, *, timeout_s: float = 10.0) -> None:
        self._argv = tuple(argv)
        self._boot = boot
        self._timeout_s = timeout_s
        self._queue: queue.Queue[object] = queue.Queue(maxsize=QUEUE_BOUND)
        self._groups = ProcessGroups()
        self._thread = threading.Thread(target=self._run, name="wardd-notify", daemon=True)

    @property
    def enabled(self) -> bool:
        return bool(self._argv)

    def start(self) -> None:
        if self.enabled:
            self._thread.start()

    def stop(self) -> None:
        """Run nothing more: kill a hook still running, drop what is queued."""
        if not self.enabled:
            return
        self._groups.kill_all()
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._queue.put(_STOP)
        # A hook being spawned while kill_all ran is killed by spawn itself
        # (ProcessGroups' doomed check); wait for the thread to reap it, so
        # that nothing of the hook outlives its stop.
        if self._thread.ident is not None:  # started
            self._thread.join(_JOIN_S)

    def post(
        self,
        event: str,
        *,
        neuron: str | None = None,
        op: str | None = None,
        attempt: int | None = None,
        act: str | None = None,
        evidence: dict[str, Any] | None = None,
    ) -> None:
        """Queue one event for the hook (from any thread; never blocks)."""
        if not self.enabled:
            return
        item = {
            "event": event,
            "op": op,
            "attempt": attempt,
            "act": act,
            "neuron": neuron,
            "boot": self._boot,
            "evidence": evidence or {},
        }
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            log.warning("notify_dropped", hook_event=event, op=op, attempt=attempt)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            assert isinstance(item, dict)
            try:
                self._call(item)
            except Exception as exc:  # noqa: BLE001 - a hook's failure never ends the thread
                self._failed(item, f"{type(exc).__name__}: {exc}")

    def _call(self, item: dict[str, Any]) -> None:
        payload = (json.dumps(item, default=_text) + "\n").encode()
        try:
            done = run(
                self._groups,
                self._argv,
                os.environ,
                payload,
                timeout_s=self._timeout_s,
                stdout_head=0,
                stderr_tail=_STDERR_KEPT,
            )
        except DefiniteFailure as exc:
            self._failed(item, str(exc))
            return
        if done.timed_out:
            self._failed(item, f"timed out after {self._timeout_s:g} s (its group was killed)")
        elif done.returncode != 0:
            stderr = done.stderr_tail.decode("utf-8", "replace").strip()
            self._failed(item, f"exit status {done.returncode}", stderr)

    def _failed(self, item: dict[str, Any], why: str, stderr: str = "") -> None:
        log.warning(
            "notify_failed",
            hook_event=item["event"],
            op=item["op"],
            attempt=item["attempt"],
            error=why,
            **({"stderr": stderr} if stderr else {}),
        )


def _text(value: Any) -> str:
    """A value JSON has no form for (bytes in evidence, say): its hex or its text."""
    return value.hex() if isinstance(value, (bytes, bytearray)) else str(value)
