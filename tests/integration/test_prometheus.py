"""A real Prometheus server scraping ``metrics_listen`` (``make integration``).

Opt-in: run by ``make integration`` (which sets WARDD_INTEGRATION=1), and
skipped, saying why, when Debian's ``prometheus`` and ``promtool`` are not
installed (``apt-get install prometheus``).
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import subprocess
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from tests._poll import wait_for
from tests.daemon.crashes import crash_with_a_blocked_call_and_a_landed_write
from tests.daemon.harness import Actor, Env

PROMETHEUS, PROMTOOL = shutil.which("prometheus"), shutil.which("promtool")

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not os.environ.get("WARDD_INTEGRATION"),
        reason="integration: run by `make integration` (WARDD_INTEGRATION)",
    ),
    pytest.mark.skipif(
        not (PROMETHEUS and PROMTOOL),
        reason="prometheus and promtool are not installed (apt-get install prometheus)",
    ),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(port: int, path: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read()
    except OSError:
        return 0, b""
    finally:
        conn.close()


def query(port: int, expr: str) -> list[dict[str, Any]]:
    """An instant query through Prometheus's HTTP API: its result vector."""
    status, body = get(port, "/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    if status != 200:
        return []
    answer = json.loads(body)
    assert answer["status"] == "success", answer
    return list(answer["data"]["result"])


@pytest.fixture
def prometheus(tmp_path: Path):
    """``start(target_port)`` → the web port of a real Prometheus scraping it every second."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(target: int) -> int:
        web = free_port()
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: wardd\n    static_configs:\n"
            f"      - targets: ['127.0.0.1:{target}']\n"
        )
        log = open(tmp_path / "prometheus.log", "wb")
        procs.append(
            subprocess.Popen(
                [
                    PROMETHEUS,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{web}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        )
        log.close()
        wait_for(lambda: get(web, "/-/ready")[0] == 200, 60, "Prometheus to be ready")
        return web

    yield start
    for p in procs:
        p.kill()
        p.wait()


class TestPrometheus:
    def test_prometheus_scrapes_the_unknown_attempts_a_crash_left(self, make_daemon, prometheus):
        """Prometheus scrapes metrics_listen; after a SIGKILL during a blocked
        call its API shows the unknown attempt and the unclean previous boot
        of the new boot; promtool accepts the exposition."""
        port = free_port()
        d = make_daemon(Env(metrics_listen=f"127.0.0.1:{port}"))
        web = prometheus(port)
        wait_for(lambda: query(web, 'up{job="wardd"} == 1'), 60, "a first successful scrape")
        a = Actor(d, acts=("echo", "gated", "ledger"))
        crash_with_a_blocked_call_and_a_landed_write(d, a)
        boot = d.boot

        # the gauge, scraped from the new boot (its boot_info series is there)
        expr = f'wardd_unknown_attempts * on() group_left(boot) wardd_boot_info{{boot="{boot}"}}'

        def seen() -> bool:
            got = query(web, expr)
            return bool(got) and got[0]["value"][1] == "1"

        wait_for(seen, 60, "Prometheus to see the new boot's unknown attempt")
        (clean,) = query(web, "wardd_previous_boot_clean")
        assert clean["value"][1] == "0"
        status, body = get(port, "/metrics")
        assert status == 200
        check = subprocess.run([PROMTOOL, "check", "metrics"], input=body,
                               capture_output=True, timeout=60)  # fmt: skip
        assert check.returncode == 0, check.stdout + check.stderr
