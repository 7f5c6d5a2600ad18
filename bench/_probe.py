"""A ``status`` prober, run as its own process so that its latencies are not
skewed by the load generator's threads (GIL) in the bench process.

    python _probe.py SOCKET INTERVAL_S

Connects (hello), prints ``ready``, waits for a ``go`` line on stdin, then
calls ``status`` every INTERVAL_S until stdin says ``stop`` (or closes), and
prints one JSON line: ``{"latencies": [...seconds], "last": <last status>}``.
"""

from __future__ import annotations

import json
import select
import sys
import time

from wardd.client import Client


def main() -> int:
    path, interval = sys.argv[1], float(sys.argv[2])
    client = Client(path, timeout=60.0, client_name="wardd-bench-probe")
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return 1
    lat: list[float] = []
    last = None
    while True:
        t = time.perf_counter()
        last = client.call("status")
        lat.append(time.perf_counter() - t)
        r, _, _ = select.select([sys.stdin], [], [], interval)
        if r:
            break
    client.close()
    keep = {k: last[k] for k in ("writer", "connections", "operations")} if last else None
    print(json.dumps({"latencies": lat, "last": keep}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
