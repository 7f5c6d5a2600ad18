"""The wire-fuzz soak's stall probe: a quiet client in a process of its own.

    python -m tests.daemon._stall_probe SOCKET

The child connects with the bundled blocking client and sends ``status``,
one request after the other, 5 ms apart; a connection the daemon loses (a
restart of the fuzz's daemon) is made again. It prints ``ready`` after its
first round trip and, once its stdin has a line or is closed, one JSON line
of figures (`StallFigures`) and exits 0.

A frame the daemon works on in its event loop holds every other client for
as long: the worst round trip bounds the longest the loop was held by any
one frame sent meanwhile (plus the probe's own round trip, its median). In
a process of its own, the figures are not the fuzzing process's: neither
hypothesis's generation nor its garbage collection nor the GIL its main
thread holds counts in them.

`StallProbe` is the test's side: it starts the child, ends it, and reads
its figures; `during` names the batch a moment fell in.
"""

from __future__ import annotations

import array
import json
import select
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import attrs

from wardd.client import Client, ClientError
from wardd.protocol import WarddError

__all__ = [
    "Span",
    "StallFigures",
    "StallProbe",
    "StallProbeFailed",
    "during",
    "figures_of",
    "report",
]

REPO = Path(__file__).resolve().parents[2]
PACING_S = 0.005  # between two round trips: the probe is not a load
RETRY_S = 0.1  # before connecting again to a daemon being restarted
TIMEOUT_S = 120.0  # one round trip; one that times out counts with this wait
READY_S = 60.0  # the child's start (an interpreter, then a first round trip)
END_S = 30.0  # from the stop to the figures


@attrs.frozen
class StallFigures:
    """A probe's round trips: how many, their spread, and when the worst ended
    (``time.monotonic()``, which is the machine's, and wall-clock seconds)."""

    count: int
    median_s: float
    p99_s: float
    p999_s: float
    worst_s: float
    worst_end: float
    worst_end_wall: float


@attrs.frozen
class Span:
    """A batch the fuzz ran, from ``start`` to ``end`` (``time.monotonic()``)."""

    name: str
    start: float
    end: float


def figures_of(samples: Sequence[float], worst_end: float, worst_end_wall: float) -> StallFigures:
    """The figures of these round trips (seconds); the worst is their largest."""
    ordered = sorted(samples) or [0.0]

    def rank(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(len(ordered) * q))]

    return StallFigures(
        count=len(samples),
        median_s=ordered[len(ordered) // 2],
        p99_s=rank(0.99),
        p999_s=rank(0.999),
        worst_s=ordered[-1],
        worst_end=worst_end,
        worst_end_wall=worst_end_wall,
    )


def during(spans: Sequence[Span], moment: float) -> str:
    """The batch that was running at ``moment``; ``-`` between batches."""
    return next((s.name for s in spans if s.start <= moment <= s.end), "-")


def report(figures: StallFigures, spans: Sequence[Span]) -> str:
    """The soak's line of figures: the worst with the batch it ended in and when."""
    f = figures
    at = datetime.fromtimestamp(f.worst_end_wall, UTC).strftime("%H:%M:%S UTC")
    return (
        f"stall_probes={f.count} stall_worst_ms={f.worst_s * 1000:.1f} "
        f"(in {during(spans, f.worst_end)}, {at}) stall_p99_ms={f.p99_s * 1000:.1f} "
        f"stall_p99.9_ms={f.p999_s * 1000:.1f} stall_median_ms={f.median_s * 1000:.2f}"
    )


# -- the child ----------------------------------------------------------------------


class _Prober:
    """The round trips of one child: all kept (8 bytes each), the worst's end noted."""

    def __init__(self, path: str, stdin: IO[str]) -> None:
        self.path = path
        self.stdin = stdin
        self.samples = array.array("d")
        self.worst = (0.0, 0.0, 0.0)  # seconds, monotonic end, wall-clock end

    def told_to_stop(self, wait_s: float) -> bool:
        """Wait up to ``wait_s``; whether stdin has a line or is closed meanwhile."""
        readable, _, _ = select.select([self.stdin], [], [], wait_s)
        return bool(readable)

    def note(self, rtt: float) -> None:
        self.samples.append(rtt)
        if rtt > self.worst[0]:
            self.worst = (rtt, time.monotonic(), time.time())
        if len(self.samples) == 1:
            print("ready", flush=True)

    def run(self) -> None:
        """Round trips until told to stop, connecting again whenever the connection fails."""
        while True:
            try:
                with Client(self.path, timeout=TIMEOUT_S, client_name="fuzz-stall-probe") as c:
                    while True:
                        self.round_trip(c)
                        if self.told_to_stop(PACING_S):
                            return
            except (ClientError, OSError, WarddError):
                if self.told_to_stop(RETRY_S):
                    return

    def round_trip(self, client: Client) -> None:
        t0 = time.monotonic()
        try:
            client.call("status")
        except TimeoutError:
            self.note(time.monotonic() - t0)  # held at least this long
            raise
        self.note(time.monotonic() - t0)

    def figures(self) -> StallFigures:
        return figures_of(self.samples, *self.worst[1:])


def main(argv: list[str]) -> int:
    prober = _Prober(argv[1], sys.stdin)
    prober.run()
    print(json.dumps(attrs.asdict(prober.figures())), flush=True)
    return 0


# -- the test's side ----------------------------------------------------------------


class StallProbeFailed(AssertionError):
    """The probe did not start, or ended without its figures."""


@attrs.define(eq=False)
class StallProbe:
    """One running child; `finish` stops it and returns its figures, `end`
    (for a fixture's ``finally``) kills it if it is still running."""

    proc: subprocess.Popen[bytes]
    started: float  # time.monotonic() just before the child was started

    @classmethod
    def start(cls, path: str) -> StallProbe:
        started = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.daemon._stall_probe", path],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        probe = cls(proc, started)
        try:
            probe._await_ready()
        except BaseException:
            probe.end()
            raise
        return probe

    def _await_ready(self) -> None:
        assert self.proc.stdout is not None
        readable, _, _ = select.select([self.proc.stdout], [], [], READY_S)
        if readable and self.proc.stdout.readline().strip() == b"ready":
            return
        if self.proc.poll() is None:
            self.proc.kill()
        _, err = self.proc.communicate()
        raise StallProbeFailed(
            f"the stall probe did not start (exit {self.proc.returncode}): "
            + err.decode(errors="replace")
        )

    def finish(self) -> StallFigures:
        """Stop the probe and read its figures."""
        try:
            out, err = self.proc.communicate(b"stop\n", timeout=END_S)
        except subprocess.TimeoutExpired:
            raise StallProbeFailed(
                f"the stall probe did not end {END_S:.0f} s after its stop"
            ) from None
        if self.proc.returncode != 0 or not out.strip():
            raise StallProbeFailed(
                f"the stall probe exited {self.proc.returncode}: {err.decode(errors='replace')}"
            )
        said: dict[str, Any] = json.loads(out.splitlines()[-1])
        return StallFigures(**said)

    def end(self) -> None:
        """Kill the probe if it still runs, and reap it (pass or fail)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
