"""The traces' cost on the hot path: the CPU one guarded ``invoke`` adds when
``[tracing] exporter = "otlp"``, paired against the same loop untraced.

One invoke makes exactly these calls into the tracer (``wardd.daemon.observe.tracing``,
``_otel``): ``incoming`` and the ``Dispatch`` evolved with its ``TraceIn``
(``Dispatcher.run``, on the event loop); ``dispatch`` (the span's start), the
claim record's ``trace`` key, ``claimed`` and ``ended`` (on the worker). Each
repetition times, on this thread's CPU clock, chunks of 1,000 such span
lives (below the export queue's 2,048, so nothing is dropped) right after
the same number of bare loops; the figure is the median of the
per-repetition differences ÷ N. The export itself runs on the SDK's thread:
it is measured apart, as the whole process's CPU (``process_time``) over the
same loops, each chunk flushed to a collector in a process of its own (a
stdlib HTTP server answering 200), so that the collector's CPU is not
counted. It uses private modules of ``wardd.daemon``; if their interface
changed, the bench reports the figure as unavailable.
"""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

CHUNK = 1000
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
# a collector of its own: answers 200 to every export, prints its port first
COLLECTOR = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"""


def added_us(reps: int, chunks: int) -> tuple[list[float], list[float]]:
    """Per repetition: the CPU µs one invoke's tracing adds on the threads that
    serve it, and the process's CPU µs with the export included."""
    import attrs

    from wardd.daemon.config import TracingConfig
    from wardd.daemon.core.records import AttemptRef
    from wardd.daemon.dispatch.dispatches import Dispatch, Invoke
    from wardd.daemon.observe.tracers import make_tracer
    from wardd.daemon.observe.tracing import CLAIM_KEY

    server = subprocess.Popen([sys.executable, "-c", COLLECTOR], stdout=subprocess.PIPE)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        endpoint = f"http://127.0.0.1:{port}/v1/traces"
        tracer = make_tracer(TracingConfig("otlp", endpoint, "bench"), "bench")
        params = {"op": "op-1", "expected_attempt": 1, "placement_generation": 1,
                  "traceparent": TRACEPARENT}  # fmt: skip
        d = Dispatch("a" * 64, "echo", Invoke(params))
        ref = AttemptRef(1, "a" * 64, 1, "op-1", 1, 1, "echo", b"", 1, 1, 1, "d", "w0", "p")

        def bare(k: int) -> None:
            for _ in range(k):
                dd = attrs.evolve(d)  # the untraced run hands on the same Dispatch
                info: dict[str, Any] = {"adapter": "echo", "record": None}
                del dd, info

        def traced(k: int) -> None:
            for _ in range(k):
                dd = attrs.evolve(d, trace=tracer.incoming(params))
                span = tracer.dispatch(dd)
                info: dict[str, Any] = {"adapter": "echo", "record": None}
                info[CLAIM_KEY] = span.traceparent
                span.claimed(ref)
                span.ended("succeeded")

        flush = tracer._processor.force_flush  # type: ignore[attr-defined]
        traced(CHUNK)
        flush()  # warm: the exporter's connection is open from here on
        hot, whole = [], []
        for _ in range(reps):
            t_bare = p_bare = t_traced = p_traced = 0.0
            for _ in range(chunks):
                t0, p0 = time.thread_time(), time.process_time()
                bare(CHUNK)
                t1, p1 = time.thread_time(), time.process_time()
                traced(CHUNK)
                t2 = time.thread_time()
                flush()
                p2 = time.process_time()
                t_bare, p_bare = t_bare + t1 - t0, p_bare + p1 - p0
                t_traced, p_traced = t_traced + t2 - t1, p_traced + p2 - p1
            n = CHUNK * chunks
            hot.append((t_traced - t_bare) / n * 1e6)
            whole.append((p_traced - p_bare) / n * 1e6)
        tracer.shutdown()
        return hot, whole
    finally:
        server.kill()
        server.wait()
