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
"""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import structlog

from ._metrics import CONTENT_TYPE

__all__ = ["MetricsServer"]

log = structlog.get_logger("wardd.metrics")

SCRAPER_TIMEOUT_S = 10.0  # a connection that sends or takes nothing for this long is closed
# At most this many connections are served at once, each on a thread: one more
# is closed at once, unread. A client that trickles a byte within every timeout
# holds its thread for as long as it goes on, so without a cap local clients
# could take threads without end (and starve the daemon's own thread starts).
MAX_SCRAPERS = 8


class _Server(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a stuck scraper never holds the process at exit
    block_on_close = False  # stop() never waits for a scraper's thread

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._slots = threading.BoundedSemaphore(MAX_SCRAPERS)
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        """A thread for the connection while a slot is free; otherwise it is closed now."""
        if not self._slots.acquire(blocking=False):
            log.warning("metrics_busy", max_scrapers=MAX_SCRAPERS)
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

    def __init__(self, host: str, port: int, render: Callable[[], str]) -> None:
        self._render = render
        self._lock = threading.Lock()  # one rendering at a time (its reader connection)
        server_class = _Server6 if ":" in host else _Server
        self._server = make_server(
            host, port, self._app, server_class=server_class, handler_class=_Handler
        )
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
