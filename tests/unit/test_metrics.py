"""The metrics in-process: the exposition of every series, and the writer
counting only the attempt moves it committed."""

from __future__ import annotations

import datetime
import socket
import sqlite3
import time

import pytest
import structlog.testing
import trio
from prometheus_client.parser import text_string_to_metric_families

from tests._poll import wait_for
from tests.unit._store import Store, dispatched_op, neuron_and_prog
from wardd.daemon.core.changes import Decision, SetAttempt
from wardd.daemon.observe.metrics import SERIES, Figures, Metrics
from wardd.daemon.observe.metrics_http import MetricsServer, Refusals
from wardd.daemon.store.apply import apply
from wardd.daemon.store.writer import Writer
from wardd.protocol import AttemptState, BadRequest, UnknownOperation

FIGURES = Figures(
    unknown_attempts=3,
    oldest_unknown_created_at="2026-01-01T00:00:00.000Z",
    pruned_ops=7,
    db_size_bytes=4096,
    connections=2,
)
NOW = datetime.datetime(2026, 1, 1, 0, 1, 30, tzinfo=datetime.UTC).timestamp()


def metrics(clean: bool = True) -> Metrics:
    return Metrics(boot="b" * 32, version="9.9", previous_boot_clean=clean, methods=["invoke"])


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


class Req:
    def __init__(self, method: str) -> None:
        self.method = method


class TestExposition:
    def test_every_series_is_rendered_in_table_order(self) -> None:
        """The families come in SERIES order, each of its kind, with its help."""
        fams = list(text_string_to_metric_families(metrics().render(FIGURES, NOW)))
        want = [s.name.removesuffix("_total") if s.kind == "counter" else s.name for s in SERIES]
        assert [f.name for f in fams] == want
        by_name = dict(zip(want, SERIES, strict=True))
        for f in fams:
            assert f.type == by_name[f.name].kind and f.documentation == by_name[f.name].help

    def test_gauges_show_the_figures_read_for_the_rendering(self) -> None:
        """The database figures, the boot and the previous boot's stop are shown as given."""
        s = samples(metrics(clean=False).render(FIGURES, NOW))
        assert s[("wardd_unknown_attempts", frozenset())] == 3
        assert s[("wardd_oldest_unknown_age_seconds", frozenset())] == 90
        assert s[("wardd_pruned_ops_total", frozenset())] == 7
        assert s[("wardd_db_size_bytes", frozenset())] == 4096
        assert s[("wardd_connections", frozenset())] == 2
        assert s[("wardd_previous_boot_clean", frozenset())] == 0
        info = frozenset({("boot", "b" * 32), ("version", "9.9")})
        assert s[("wardd_boot_info", info)] == 1

    def test_no_unknown_attempt_is_an_age_of_zero(self) -> None:
        """With no unknown attempt the oldest one's age is 0."""
        none = Figures(0, None, 0, 0, 0)
        assert (
            samples(metrics().render(none, NOW))[("wardd_oldest_unknown_age_seconds", frozenset())]
            == 0
        )


class TestCounting:
    def test_only_outcomes_are_counted_and_void_is_voided(self) -> None:
        """prepared and running are not outcomes; void is shown as voided."""
        m = metrics()
        m.batch(0.001, 2, [("echo", "prepared"), ("echo", "running"), ("echo", "void")])
        m.batch(0.002, 1, [("cli", "unknown"), ("cli", "succeeded"), ("cli", "not_executed")])
        s = samples(m.render(FIGURES, NOW))
        attempts = {lab: v for (n, lab), v in s.items() if n == "wardd_attempts_total"}
        assert attempts == {
            frozenset({("act", "echo"), ("outcome", "voided")}): 1,
            frozenset({("act", "cli"), ("outcome", "unknown")}): 1,
            frozenset({("act", "cli"), ("outcome", "succeeded")}): 1,
            frozenset({("act", "cli"), ("outcome", "not_executed")}): 1,
        }
        assert s[("wardd_commit_batch_size_sum", frozenset())] == 3
        assert s[("wardd_commit_duration_seconds_count", frozenset())] == 2

    async def test_requests_are_counted_by_method_and_code(self) -> None:
        """An answer is ok, a refusal its code, anything else internal; a
        dispatch's duration is counted only once it reached a worker."""
        m = metrics()

        async def handle(conn: object, req: Req) -> str:
            if req.method == "invoke":
                m.dispatching("echo")
                await trio.lowlevel.checkpoint()
                return "done"
            if req.method == "refused":
                raise UnknownOperation("no")
            raise RuntimeError("bug")

        counted = m.counting(handle)
        assert await counted(None, Req("invoke")) == "done"
        with pytest.raises(UnknownOperation):
            await counted(None, Req("refused"))
        with pytest.raises(RuntimeError):
            await counted(None, Req("invoke-ish"))
        s = samples(m.render(FIGURES, NOW))
        reqs = {lab: v for (n, lab), v in s.items() if n == "wardd_requests_total"}
        assert reqs == {
            frozenset({("method", "invoke"), ("code", "ok")}): 1,
            frozenset({("method", "other"), ("code", "unknown_operation")}): 1,
            frozenset({("method", "other"), ("code", "internal")}): 1,
        }
        assert s[("wardd_dispatch_duration_seconds_count", frozenset({("act", "echo")}))] == 1


@pytest.fixture
def running(store: Store) -> sqlite3.Connection:
    """The migrated store with two ops (1 and 2), each with its attempt running."""
    store.write(*neuron_and_prog())
    for op_id in (1, 2):
        store.write(*dispatched_op(op_id, 1, "running", "b" * 32))
    return store.conn


def _move(op_id: int, act: str):
    decision = Decision((SetAttempt(op_id, 1, state=AttemptState.SUCCEEDED, act=act),))

    def unit(tx):
        return apply(tx, decision)

    return unit


def _refused(op_id: int, act: str):
    move = _move(op_id, act)

    def unit(tx):
        move(tx)
        raise BadRequest("refused after its move")

    return unit


class TestWriterCountsCommittedMoves:
    def test_a_refused_unit_s_moves_are_not_counted(self, running: sqlite3.Connection) -> None:
        """The observer hears of a batch's moves once committed, without those
        of a unit that was rolled back."""
        seen: list[tuple[int, list[tuple[str, str]]]] = []
        w = Writer(
            running,
            on_fatal=lambda why: None,
            on_batch=lambda s, n, moves: seen.append((n, list(moves))),
        )
        w.start()
        try:
            with pytest.raises(BadRequest):
                w.call(_refused(1, "gone"))
            w.call(_move(2, "echo"))
        finally:
            w.stop()
        assert [m for _, m in seen] == [[], [("echo", "succeeded")]]

    def test_a_failing_observer_loses_only_its_counts(self, running: sqlite3.Connection) -> None:
        """An observer that raises is logged; the batch stays committed and answered."""

        def boom(s: float, n: int, moves: list[tuple[str, str]]) -> None:
            raise ValueError("observer bug")

        w = Writer(running, on_fatal=lambda why: None, on_batch=boom)
        w.start()
        try:
            with structlog.testing.capture_logs() as logs:
                w.call(_move(1, "echo"))
        finally:
            w.stop()
        assert [e["event"] for e in logs] == ["observer_failed"]
        assert w.fatal is None


class TestRefusalsAreCountedNotLoggedEach:
    def test_the_first_is_said_at_once_then_one_line_per_interval_with_the_count(self):
        """``Refusals``: a line for the first refusal, none within the
        interval after a line, then one with every refusal since; nothing
        when none is pending."""
        r = Refusals(10.0)
        assert r.due(0.0) is None
        assert r.refused(100.0) == 1
        assert [r.refused(100.0 + i / 10) for i in range(1, 50)] == [None] * 49
        assert r.due(109.9) is None
        assert r.due(110.0) == 49
        assert r.due(125.0) is None  # none pending
        assert r.refused(125.0) == 1  # the interval has passed: said at once
        assert r.refused(126.0) is None and r.due(135.0) == 1

    def test_a_flood_of_refused_connections_is_a_few_lines_with_its_count(self):
        """A real server on 127.0.0.1 with every slot held by a silent
        connection: 40 connections more are each closed unread, and the log
        says so in a line at once and one after the interval (flushed by the
        server's loop, no refusal after it), whose counts add up to 40."""
        server = MetricsServer("127.0.0.1", 0, lambda: "x 1\n", busy_log_interval_s=0.5)
        held: list[socket.socket] = []
        with structlog.testing.capture_logs() as logs:
            server.start()
            try:
                held = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(8)]
                for s in held:
                    s.sendall(b"GET /metr")
                t0 = time.monotonic()
                for _ in range(40):
                    extra = socket.create_connection(("127.0.0.1", server.port), timeout=10)
                    try:
                        try:
                            assert extra.recv(16) == b""  # closed unread
                        except ConnectionResetError:
                            pass
                    finally:
                        extra.close()
                elapsed = time.monotonic() - t0

                def said() -> list[int]:
                    return [e["refused"] for e in logs if e["event"] == "metrics_busy"]

                wait_for(lambda: sum(said()) >= 40, 10, "the refusals' count to reach 40")
            finally:
                for s in held:
                    s.close()
                server.stop()
        counts = said()
        assert sum(counts) == 40 and counts[0] == 1
        assert len(counts) <= 2 + int(elapsed / 0.5)
