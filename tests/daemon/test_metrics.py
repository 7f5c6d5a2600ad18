"""The ``metrics`` method and ``wardctl metrics``: every series, read by a real
Prometheus text parser after a known sequence of invokes, unknowns (a real
SIGKILL during a blocked call, then a restart), receipts and prunes."""

from __future__ import annotations

import http.client
import socket
import subprocess
import sys
import time
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests._poll import wait_for
from tests.daemon.crashes import crash_with_a_blocked_call_and_a_landed_write
from tests.daemon.harness import Actor, Env, run_wardctl
from wardd.daemon.observe.metrics import CONTENT_TYPE, SERIES
from wardd.daemon.observe.metrics_http import BUSY_LOG_INTERVAL_S, MAX_SCRAPERS

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
FAST_PRUNE = {"retention_s": 1, "prune_interval_s": 1}


def scrape(actor: Actor) -> tuple[dict[str, Any], Samples]:
    """The families by name (as the parser names them) and every sample."""
    got = actor.read("metrics")
    assert got["content_type"] == CONTENT_TYPE
    families = {f.name: f for f in text_string_to_metric_families(got["text"])}
    samples: Samples = {}
    for fam in families.values():
        for s in fam.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return families, samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def labelled(samples: Samples, name: str) -> dict[frozenset[tuple[str, str]], float]:
    return {lab: v for (n, lab), v in samples.items() if n == name}


def check_every_series_present(families: dict[str, Any]) -> None:
    """Each series of the table is a family of the kind it says (a counter's
    family is named without ``_total`` by the parser)."""
    for s in SERIES:
        name = s.name.removesuffix("_total") if s.kind == "counter" else s.name
        assert families[name].type == s.kind, s.name


class TestMetrics:
    def test_every_series_follows_invokes_unknowns_receipts_and_prunes(self, make_daemon):
        """After a known sequence, each series says what happened in this boot
        (counters) or what the database holds (gauges); a SIGKILL resets the
        counters and shows in ``wardd_previous_boot_clean``."""
        env = Env(**FAST_PRUNE)
        d = make_daemon(env)
        a = Actor(d, acts=("echo", "boom", "nofx", "ledger", "gated"))
        for op in ("e1", "e2"):
            a.submit(op)
            assert a.invoke(op)["status"] == "succeeded"
        a.call("consume", {"op": "e1"})  # finished: pruned after retention_s
        a.submit("b1", "boom")
        assert a.invoke("b1")["status"] == "unknown"  # exit 7: not a no-effect exit
        a.submit("f1", "nofx")
        assert a.invoke("f1")["status"] == "failed"
        a.submit("v1")
        a.prepare("v1")
        a.call("cancel", {"op": "v1"})  # voids its prepared attempt; cancelled, it is pruned too
        # both finished ops pruned: no look of the pruner (every second) can
        # move the count between the scrape and the status compared below
        wait_for(lambda: a.read("status")["db"]["pruned_ops"] >= 2, what="e1 and v1 pruned")

        families, s = scrape(a)
        check_every_series_present(families)
        assert labelled(s, "wardd_attempts_total") == {
            frozenset({("act", "echo"), ("outcome", "succeeded")}): 2,
            frozenset({("act", "boom"), ("outcome", "unknown")}): 1,
            frozenset({("act", "nofx"), ("outcome", "failed")}): 1,
            frozenset({("act", "echo"), ("outcome", "voided")}): 1,
        }
        assert value(s, "wardd_unknown_attempts") == 1
        assert value(s, "wardd_oldest_unknown_age_seconds") > 0
        assert value(s, "wardd_requests_total", method="invoke", code="ok") == 4
        assert value(s, "wardd_requests_total", method="prepare", code="ok") == 1
        for act, n in (("echo", 2), ("boom", 1), ("nofx", 1)):
            assert value(s, "wardd_dispatch_duration_seconds_count", act=act) == n
            assert value(s, "wardd_act_duration_seconds_count", act=act) == n
            assert value(s, "wardd_act_duration_seconds_bucket", act=act, le="+Inf") == n
        status = a.read("status")
        assert value(s, "wardd_pruned_ops_total") == status["db"]["pruned_ops"] == 2
        assert value(s, "wardd_db_size_bytes") > 0
        assert value(s, "wardd_connections") >= 1
        commits = value(s, "wardd_commit_duration_seconds_count")
        assert commits >= 12  # at least one per write above
        assert value(s, "wardd_commit_batch_size_count") == commits
        assert value(s, "wardd_commit_batch_size_sum") >= commits
        assert value(s, "wardd_boot_info", boot=d.boot, version=status["version"]) == 1
        assert value(s, "wardd_previous_boot_clean") == 1  # a new database
        assert labelled(s, "wardd_receipts_total") == {}

        # a call blocked in its act when the daemon is SIGKILLed, and a
        # file.append whose write landed just before: unknown at the restart,
        # the second resolved by its receipt
        crash_with_a_blocked_call_and_a_landed_write(d, a)
        wait_for(lambda: a.read("status")["receipts_pending"] == 0, what="receipts")

        families, s = scrape(a)
        check_every_series_present(families)
        # this boot's counters only: the marks, and the receipt's success
        assert labelled(s, "wardd_attempts_total") == {
            frozenset({("act", "gated"), ("outcome", "unknown")}): 1,
            frozenset({("act", "ledger"), ("outcome", "unknown")}): 1,
            frozenset({("act", "ledger"), ("outcome", "succeeded")}): 1,
        }
        assert labelled(s, "wardd_receipts_total") == {frozenset({("answer", "executed")}): 1}
        assert value(s, "wardd_unknown_attempts") == 2  # b1 and g1
        assert value(s, "wardd_previous_boot_clean") == 0
        assert value(s, "wardd_boot_info", boot=d.boot, version=status["version"]) == 1
        assert labelled(s, "wardd_dispatch_duration_seconds_count") == {}
        assert value(s, "wardd_requests_total", method="invoke", code="ok") == 0

        # resolved by the operator, stopped cleanly, started again
        for op in ("b1", "g1"):
            a.call("reconcile", {"op": op, "attempt": 1, "outcome": {"status": "not_executed"}})
        _, s = scrape(a)
        assert value(s, "wardd_unknown_attempts") == 0
        assert value(s, "wardd_oldest_unknown_age_seconds") == 0
        assert value(s, "wardd_attempts_total", act="gated", outcome="not_executed") == 1
        assert d.terminate() == 0
        d.start()
        a.client = d.connect()
        _, s = scrape(a)
        assert value(s, "wardd_previous_boot_clean") == 1

    def test_refusals_are_counted_by_code_and_unknown_methods_by_one_label(self, daemon):
        """An answer code is a label; a method name no method has is ``other``,
        so that a client cannot grow the label set."""
        a = Actor(daemon, acts=("echo",))
        for name in ("no_such_method_1", "no_such_method_2"):
            try:
                a.client.call(name, {})
            except Exception:  # noqa: BLE001 - refused: unknown_method
                pass
        try:
            a.read("get_operation", {"neuron": a.id, "op": "nope"})
        except Exception:  # noqa: BLE001 - refused: unknown_operation
            pass
        _, s = scrape(a)
        assert value(s, "wardd_requests_total", method="other", code="unknown_method") == 2
        assert (
            value(s, "wardd_requests_total", method="get_operation", code="unknown_operation") == 1
        )
        names = {dict(lab)["method"] for lab in labelled(s, "wardd_requests_total")}
        assert not any(n.startswith("no_such") for n in names)

    def test_labels_never_carry_a_neuron_or_an_op(self, daemon):
        """No label value names the neuron or an op."""
        a = Actor(daemon, acts=("echo",))
        a.submit("distinctive-op-name")
        a.invoke("distinctive-op-name")
        text = a.read("metrics")["text"]
        assert "distinctive-op-name" not in text
        assert a.id not in text

    def test_wardctl_metrics_prints_the_exposition(self, daemon):
        """``wardctl metrics`` prints text a Prometheus parser reads whole."""
        out = run_wardctl(daemon.env, "metrics").stdout
        names = {f.name for f in text_string_to_metric_families(out)}
        assert {"wardd_boot_info", "wardd_unknown_attempts", "wardd_requests"} <= names


def _listening_port(d: Any) -> int:
    def line() -> dict[str, Any] | None:
        return next(iter(d.logged("metrics_listening", run=-1)), None)

    wait_for(lambda: line() is not None, what="the metrics_listening line")
    found = line()
    assert found is not None
    return int(found["address"].rsplit(":", 1)[1])


def _get(port: int, path: str = "/metrics", method: str = "GET") -> tuple[int, str, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path)
        r = conn.getresponse()
        return r.status, r.getheader("Content-Type") or "", r.read().decode()
    finally:
        conn.close()


class TestMetricsListen:
    def test_get_metrics_serves_every_series_and_nothing_else(self, make_daemon):
        """GET /metrics answers the exposition a parser reads whole; other
        paths are 404 and other methods 405."""
        d = make_daemon(Env(metrics_listen="127.0.0.1:0"))
        a = Actor(d, acts=("echo",))
        a.submit("e1")
        a.invoke("e1")
        port = _listening_port(d)
        status, ctype, body = _get(port)
        assert (status, ctype) == (200, CONTENT_TYPE)
        families = {f.name: f for f in text_string_to_metric_families(body)}
        check_every_series_present(families)
        samples = {(s.name, frozenset(s.labels.items())): s.value
                   for f in families.values() for s in f.samples}  # fmt: skip
        assert value(samples, "wardd_attempts_total", act="echo", outcome="succeeded") == 1
        assert _get(port, "/")[0] == 404
        assert _get(port, "/metrics", "POST")[0] == 405

    def test_a_silent_scraper_holds_up_neither_dispatch_nor_other_scrapes(self, make_daemon):
        """A connection that sends half a request and then nothing ties up only
        its own thread: invokes are answered and another scrape is served."""
        d = make_daemon(Env(metrics_listen="127.0.0.1:0"))
        port = _listening_port(d)
        stuck = [socket.create_connection(("127.0.0.1", port)) for _ in range(4)]
        try:
            for s in stuck:
                s.sendall(b"GET /metr")
            a = Actor(d, acts=("echo",))
            a.submit("e1")
            assert a.invoke("e1")["status"] == "succeeded"
            status, _, body = _get(port)
            assert status == 200 and "wardd_boot_info" in body
        finally:
            for s in stuck:
                s.close()

    def test_connections_past_the_cap_are_closed_at_once_and_the_slots_come_back(self, make_daemon):
        """MAX_SCRAPERS silent connections take every slot: each one more is
        closed unread, and the log says so once (metrics_busy, refused: 1),
        not once per connection (the next line, at most every 10 s, counts
        the rest); once they go, a scrape is served."""
        d = make_daemon(Env(metrics_listen="127.0.0.1:0"))
        port = _listening_port(d)
        stuck = [socket.create_connection(("127.0.0.1", port)) for _ in range(MAX_SCRAPERS)]
        try:
            for s in stuck:
                s.sendall(b"GET /metr")
            t0 = time.monotonic()
            for _ in range(20):
                extra = socket.create_connection(("127.0.0.1", port), timeout=30)
                try:
                    try:
                        extra.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
                        got = extra.recv(4096)
                    except ConnectionResetError:  # closed with our request unread: a reset
                        got = b""
                    assert got == b""  # closed, not served
                finally:
                    extra.close()
            elapsed = time.monotonic() - t0

            def busy() -> list[dict[str, Any]]:
                return d.logged("metrics_busy", run=-1)

            wait_for(lambda: busy(), what="metrics_busy")
            if elapsed < BUSY_LOG_INTERVAL_S:  # the rest are counted for the next line
                assert [e["refused"] for e in busy()] == [1]
        finally:
            for s in stuck:
                s.close()

        def served() -> bool:
            try:
                return _get(port)[0] == 200
            except OSError:
                return False

        wait_for(served, what="a scrape once the silent connections closed")

    def test_check_config_refuses_an_address_that_is_not_loopback(self, tmp_path):
        """metrics_listen takes a loopback IP and a port; anything else is a
        config error naming the key (there is no authentication on it)."""
        for bad in ("0.0.0.0:9469", "192.168.1.2:9469", "localhost:9469", "[::]:9469",
                    "127.0.0.1", "127.0.0.1:99999", "127.0.0.1:x"):  # fmt: skip
            path = tmp_path / "c.toml"
            path.write_text(f'metrics_listen = "{bad}"\n')
            out = _wardd("check-config", str(path))
            assert out.returncode == 78 and "metrics_listen" in out.stderr, bad
        for good in ("127.0.0.1:9469", "[::1]:9469", "127.0.0.2:0"):
            path = tmp_path / "c.toml"
            path.write_text(f'metrics_listen = "{good}"\n')
            assert _wardd("check-config", str(path)).returncode == 0, good


def _wardd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wardd.daemon.cli", *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
