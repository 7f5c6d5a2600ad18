"""A daemon imports a built-in adapter's module only when an act uses it:
a start without an ``http`` act does not load urllib3 (its import is part of
every start's time to ``READY=1``, docs/performance.md)."""

from __future__ import annotations

import pytest

from tests.daemon.harness import Actor, Env


def imported(log: str) -> set[str]:
    """The modules a process imported by an import statement, from its
    ``PYTHONPROFILEIMPORTTIME`` lines (``importlib.import_module`` writes none)."""
    return {
        line.rsplit("|", 1)[1].strip()
        for line in log.splitlines()
        if line.startswith("import time:") and "|" in line
    }


class TestBuiltInAdaptersLoadWhenUsed:
    def test_a_start_without_an_http_act_never_imports_urllib3(self, make_daemon):
        """With the default test acts (file.append, cli) nothing of http's
        loads, up to READY=1 and through a request and a stop."""
        d = make_daemon(start=False)
        d.start({"PYTHONPROFILEIMPORTTIME": "1"})
        with d.connect() as c:
            c.call("status")
        assert d.terminate() == 0
        modules = imported(d.log_text())
        assert "wardd.daemon.life.app" in modules  # the lines are there
        assert not {m for m in modules if m.split(".")[0] == "urllib3"}
        assert not {m for m in modules if m.split(".")[0] in ("mcp", "mcp_types", "pydantic")}

    def test_an_http_act_imports_it(self, make_daemon):
        """The same check is not blind: with an ``http`` act configured,
        urllib3 is loaded at start, where the act is built."""
        env = Env(acts={"pay": {"adapter": "http", "url": "http://127.0.0.1:9/pay"}})
        d = make_daemon(env, start=False)
        d.start({"PYTHONPROFILEIMPORTTIME": "1"})
        assert d.terminate() == 0
        modules = imported(d.log_text())
        assert "urllib3" in modules


SDK_TOP = {"mcp", "mcp_types", "pydantic", "starlette", "uvicorn", "httpx2"}


class TestTheMcpSdkStaysOut:
    """`wardd mcp`'s SDK (an extra) and its web stack load only in `wardd mcp`."""

    def test_a_daemon_never_imports_it(self, make_daemon):
        d = make_daemon(start=False)
        d.start({"PYTHONPROFILEIMPORTTIME": "1"})
        with d.connect() as c:
            c.call("status")
        assert d.terminate() == 0
        modules = imported(d.log_text())
        assert "wardd.daemon.life.app" in modules
        assert not {m for m in modules if m.split(".")[0] in SDK_TOP}

    def test_the_client_library_never_imports_it(self):
        import subprocess
        import sys

        from tests.daemon.harness import child_env

        probe = (
            "import sys, wardd.client, wardd.client.wardctl; "
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {sorted(SDK_TOP)!r}))"
        )
        done = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, env=child_env()
        )
        assert (done.returncode, done.stdout.strip()) == (0, "[]"), done.stderr


class TestTracingLoadsWhenOn:
    def test_tracing_off_never_imports_opentelemetry(self, make_daemon):
        """``[tracing] exporter = "none"`` (the default): through a start, an
        invoke and a stop, nothing of OpenTelemetry is imported."""
        d = make_daemon(start=False)
        d.start({"PYTHONPROFILEIMPORTTIME": "1"})
        a = Actor(d)
        a.submit("op")
        assert a.invoke("op")["status"] == "succeeded"
        assert d.terminate() == 0
        modules = imported(d.log_text())
        assert "wardd.daemon.life.app" in modules
        assert not {m for m in modules if m.split(".")[0] == "opentelemetry"}
        assert "wardd.daemon.observe.otel" not in modules

    def test_tracing_on_imports_it(self, make_daemon):
        """The same check is not blind: with ``exporter = "otlp"`` the SDK loads."""
        pytest.importorskip("opentelemetry.sdk")
        env = Env(tracing={"exporter": "otlp", "endpoint": "http://127.0.0.1:9/v1/traces"})
        d = make_daemon(env, start=False)
        d.start({"PYTHONPROFILEIMPORTTIME": "1"})
        assert d.terminate() == 0
        assert "opentelemetry.sdk.trace" in imported(d.log_text())
