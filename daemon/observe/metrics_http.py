"""``metrics_listen``: ``GET /metrics`` over HTTP on a loopback address, for
a Prometheus server to scrape (docs/operations.md "Metrics").

The HTTP is the standard library's WSGI server (``wsgiref``: it parses
the request; nothing here does), each connection on a thread of its own,
with a socket timeout, so a slow or silent scraper holds only its own
thread: never the event loop, the writer or a worker. The exposition is
rendered on that thread, its database figures read through a reader
connection of its own (one statement, one scrape at a time).

Off by default; only a loopback address is accepted (the configuration
refuses any other): there is no authentication on it.

A connection refused because every slot is taken is counted, not logged
one line each (a local client could otherwise drive the log's rate without
bound): the first refusal is logged at once, then at most one
``metrics_busy`` line per ``BUSY_LOG_INTERVAL_S`` with the number refused
since the last line (:class:`Refusals`), flushed by the server's own loop
even when no refusal follows.
"""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

import structlog

from .metrics import CONTENT_TYPE

__all__ = ["MetricsServer", "Refusals"]

log = structlog.get_logger("wardd.metrics")

SCRAPER_TIMEOUT_S = 10.0  # a connection that sends or takes nothing for this long is closed
# At most this many connections are served at once, each on a thread: one more
# is closed at once, unread. A client that trickles a byte within every timeout
# holds its thread for as long as it goes on, so without a cap local clients
# could take threads without end (and starve the daemon's own thread starts).
MAX_SCRAPERS = 8
BUSY_LOG_INTERVAL_S = 10.0  # at most one metrics_busy line per this long


class Refusals:
    """The refused connections, and when to say so: the first at once, then
    at most one line per ``interval_s`` with the number refused since the
    last line. Used from the server's loop thread only."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.pending = 0  # refused since the last line
        self._said_at: float | None = None  # when the last line was due

    def refused(self, now: float) -> int | None:
        """One more refused at ``now``; the number to log now, if a line is due."""
        self.pending += 1
        return self.due(now)

    def due(self, now: float) -> int | None:
        """The number to log now (None: no line due): the refusals not said
        yet, once ``interval_s`` has passed since the last line."""
        if not self.pending or (
            self._said_at is not None and now - self._said_at < self.interval_s
        ):
            return None
        count, self.pending, self._said_at = self.pending, 0, now
        return count


class _Server(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a stuck scraper never holds the process at exit
    block_on_close = False  # stop() never waits for a scraper's thread

    def __init__(self, address: tuple[str, int], app: Any, refusals: Refusals) -> None:
        self._slots = threading.BoundedSemaphore(MAX_SCRAPERS)
        self.refusals = refusals
        super().__init__(address, _Handler)
        self.set_app(app)

    def _say_refused(self, count: int | None) -> None:
        if count is not None:
            log.warning(
                "metrics_busy",
                max_scrapers=MAX_SCRAPERS,
                refused=count,
                interval_s=self.refusals.interval_s,
            )

    def service_actions(self) -> None:
        """The loop's turn between connections (every half second at most):
        the refusals not said yet, once their line is due."""
        self._say_refused(self.refusals.due(time.monotonic()))

    def process_request(self, request: Any, client_address: Any) -> None:
        """A thread for the connection while a slot is free; otherwise it is closed now."""
        if not self._slots.acquire(blocking=False):
            self._say_refused(self.refusals.refused(time.monotonic()))
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()  # the thread did not start: its slot is free again
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


class _Server6(_Server):
    address_family = socket.AF_INET6


class _Handler(WSGIRequestHandler):
    timeout = SCRAPER_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:
        """No access log: a scrape every few seconds is not news."""


class MetricsServer:
    """Serves ``render()`` at ``GET /metrics`` on ``host:port`` from threads of its own."""

    def __init__(
        self,
        host: str,
        port: int,
        render: Callable[[], str],
        busy_log_interval_s: float = BUSY_LOG_INTERVAL_S,
    ) -> None:
        self._render = render
        self._lock = threading.Lock()  # one rendering at a time (its reader connection)
        server_class = _Server6 if ":" in host else _Server
        self._server = server_class((host, port), self._app, Refusals(busy_log_interval_s))
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="wardd-metrics-http", daemon=True
        )

    @property
    def port(self) -> int:
        """The port bound (the configured one, or the kernel's pick for 0)."""
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop accepting; a scrape in progress finishes on its own thread."""
        self._server.shutdown()
        self._server.server_close()

    def _app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != "/metrics":
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"wardd serves GET /metrics only\n"]
        if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
            start_response("405 Method Not Allowed", [("Allow", "GET, HEAD")])
            return [b""]
        try:
            with self._lock:
                body = self._render().encode()
        except Exception as exc:  # noqa: BLE001 - a failed scrape never ends the server
            log.error("metrics_failed", error=repr(exc))
            start_response("500 Internal Server Error", [("Content-Type", "text/plain")])
            return [b"the metrics could not be read\n"]
        start_response(
            "200 OK", [("Content-Type", CONTENT_TYPE), ("Content-Length", str(len(body)))]
        )
        return [body] if environ["REQUEST_METHOD"] == "GET" else [b""]
