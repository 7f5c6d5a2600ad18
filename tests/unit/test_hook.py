"""The notify hook's queue, in-process, with real child programs."""

from __future__ import annotations

import structlog.testing

from wardd.daemon.observe.notify_hook import QUEUE_BOUND, NotifyHook


class TestQueue:
    def test_a_full_queue_drops_the_event_and_says_so(self, tmp_path) -> None:
        """Posting never blocks: past QUEUE_BOUND waiting events, one more is
        dropped and logged; stopping kills the hook that hangs."""
        started = tmp_path / "started"
        hook = NotifyHook(["/bin/sh", "-c", f"touch {started}; exec sleep 600"], "b" * 32)
        hook.start()
        try:
            with structlog.testing.capture_logs() as logs:
                for i in range(QUEUE_BOUND + 2):  # the first may be taken by the thread
                    hook.post("attempt_unknown", op=f"op-{i}", attempt=1)
            dropped = [e for e in logs if e["event"] == "notify_dropped"]
            assert 1 <= len(dropped) <= 2
            assert dropped[-1]["op"] == f"op-{QUEUE_BOUND + 1}"
        finally:
            hook.stop()

    def test_without_argv_nothing_runs(self) -> None:
        """An empty notify_argv is no hook: posting does nothing, no thread starts."""
        hook = NotifyHook([], "b" * 32)
        hook.start()
        hook.post("attempt_unknown")
        hook.stop()
        assert not hook.enabled
