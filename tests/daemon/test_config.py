"""Configuration as an operator meets it: default-config, check-config, refusals, log_level."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import attrs
import pytest

from tests.daemon.harness import Actor, Daemon, Env
from wardd.daemon import config as config_module

ROOT = Path(__file__).resolve().parents[2]


def wardd(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wardd.daemon.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def documented_keys() -> set[str]:
    text = (ROOT / "docs" / "configuration.md").read_text()
    return set(re.findall(r"^\| `([a-z_.]+)` \|", text, re.M))


class TestDefaultConfig:
    def test_default_config_is_accepted_by_check_config(self, tmp_path):
        """`wardd default-config` prints a file that `wardd check-config` accepts."""
        out = wardd("default-config")
        assert out.returncode == 0
        path = tmp_path / "wardd.toml"
        path.write_text(out.stdout)
        checked = wardd("check-config", str(path))
        assert checked.returncode == 0, checked.stderr
        assert checked.stdout.startswith("ok: ")

    def test_default_config_names_every_key_with_its_default(self):
        """Every top-level key is in the printed default, commented or set, at its default."""
        text = wardd("default-config").stdout
        for key in config_module._TOP_KEYS - {"acts", "tracing"}:
            assert re.search(rf"^#? ?{key} = ", text, re.M), key
        assert re.search(r"^\[tracing\]$", text, re.M)
        for key in attrs.fields_dict(config_module.TracingConfig):
            assert re.search(rf"^{key} = ", text, re.M), key
        parsed = config_module.parse_config(tomllib.loads(text), "<embedded default>")
        assert parsed == config_module.load_config(None)

    def test_every_key_is_documented(self):
        """docs/configuration.md has a row for every key the daemon and the built-in acts take."""
        from wardd.adapters import _cli, _file_append, _python

        keys = set(config_module._TOP_KEYS) | set(_cli._KEYS) | set(_file_append._KEYS)
        keys |= set(_python._KEYS)
        keys |= {f"tracing.{k}" for k in attrs.fields_dict(config_module.TracingConfig)}
        assert keys - documented_keys() == set()

    def test_a_daemon_runs_on_the_printed_default(self, make_daemon):
        """The printed default, with its own socket and database, starts a daemon that serves."""
        env = Env()
        text = wardd("default-config").stdout
        paths = f'socket = "{env.socket}"\ndatabase = "{env.database}"\n'
        env.config.write_text(paths + text.replace('network = "local"', 'network = "test-net"'))
        d = make_daemon(env)
        with d.connect() as c:
            assert c.call("status", {})["network"] == "test-net"


class TestCheckConfig:
    def test_check_config_warns_of_files_a_call_would_miss(self, tmp_path):
        """A file.append directory or a cli secret file that does not exist is
        accepted (it may appear before the first call) but named in a warning."""
        path = tmp_path / "c.toml"
        path.write_text(
            f'[acts.notes]\nadapter = "file.append"\npath = "{tmp_path}/nodir/n.log"\n'
            f'[acts.tool]\nadapter = "cli"\nargv = ["/bin/true"]\n'
            f'env = {{ TOKEN = {{ file = "{tmp_path}/missing.secret" }} }}\n'
        )
        out = wardd("check-config", str(path))
        assert out.returncode == 0, out.stderr
        assert f'warning: acts."notes".path: the directory {tmp_path}/nodir' in out.stdout
        assert f'acts."tool".env."TOKEN": the secret file {tmp_path}/missing.secret' in out.stdout
        (tmp_path / "nodir").mkdir()
        (tmp_path / "missing.secret").write_text("s3cret\n")
        assert "warning" not in wardd("check-config", str(path)).stdout

    def test_check_config_prints_the_resolved_paths(self, tmp_path):
        """check-config names the socket and database the daemon would use, defaults resolved."""
        path = tmp_path / "c.toml"
        path.write_text('network = "local"\n')
        out = wardd(
            "check-config",
            str(path),
            env={"XDG_RUNTIME_DIR": str(tmp_path / "run"), "XDG_STATE_HOME": str(tmp_path / "st")},
        )
        assert out.returncode == 0, out.stderr
        assert f"socket: {tmp_path}/run/wardd/wardd.sock (default)" in out.stdout
        assert f"database: {tmp_path}/st/wardd/wardd.db (default)" in out.stdout
        path.write_text(f'socket = "{tmp_path}/s.sock"\ndatabase = "{tmp_path}/d.db"\n')
        out = wardd("check-config", str(path))
        assert f"socket: {tmp_path}/s.sock\n" in out.stdout
        assert f"database: {tmp_path}/d.db\n" in out.stdout

    @pytest.mark.parametrize(
        "argv,why",
        [
            (["sh", "-c", "exit 0"], "not an absolute path"),
            (["/nonexistent/tool"], "does not exist"),
            (["/etc/passwd"], "not executable"),
            (["/tmp"], "not a file"),
        ],
    )
    def test_a_cli_program_that_cannot_run_is_refused(self, tmp_path, argv, why):
        """A cli argv[0] that is not an existing executable absolute path is a config error."""
        path = tmp_path / "c.toml"
        path.write_text(f'[acts."tool.run"]\nadapter = "cli"\nargv = {json.dumps(argv)}\n')
        out = wardd("check-config", str(path))
        assert out.returncode == 78
        assert 'acts."tool.run".argv[0]' in out.stderr and why in out.stderr

    def test_a_receipt_program_that_cannot_run_is_refused(self, tmp_path):
        """receipt_argv[0] is checked like argv[0]."""
        path = tmp_path / "c.toml"
        path.write_text(
            '[acts.t]\nadapter = "cli"\nargv = ["/bin/true"]\nreceipt_argv = ["/no/such"]\n'
        )
        out = wardd("check-config", str(path))
        assert out.returncode == 78 and "acts.t.receipt_argv[0]" in out.stderr

    def test_a_zero_shutdown_grace_is_refused(self, tmp_path):
        """shutdown_grace_s = 0 is refused with the reason; a start with it exits 78 too."""
        path = tmp_path / "c.toml"
        path.write_text("shutdown_grace_s = 0\n")
        for args in (("check-config", str(path)), ("run", "--config", str(path))):
            out = wardd(*args)
            assert out.returncode == 78
            assert "shutdown_grace_s" in out.stderr and "above 0" in out.stderr

    def test_an_unknown_log_level_is_refused(self, tmp_path):
        """log_level outside debug|info|warning|error is a config error naming the key."""
        path = tmp_path / "c.toml"
        path.write_text('log_level = "verbose"\n')
        out = wardd("check-config", str(path))
        assert out.returncode == 78 and "log_level" in out.stderr


def events(d: Daemon) -> list[dict[str, object]]:
    return d.events()


class TestLogLevel:
    def test_debug_makes_the_debug_events_reachable(self, make_daemon):
        """log_level = "debug" logs the debug events (claimed); the default info does not."""
        quiet = make_daemon(Env())
        loud = make_daemon(Env(log_level="debug"))
        for d in (quiet, loud):
            a = Actor(d)
            a.submit("op-1", "echo", b"x")
            assert a.invoke("op-1")["status"] == "succeeded"
            d.terminate()
        assert "claimed" in {e["event"] for e in events(loud)}
        assert "claimed" not in {e["event"] for e in events(quiet)}
        assert "outcome" in {e["event"] for e in events(quiet)}

    def test_warning_drops_the_info_events(self, make_daemon):
        """log_level = "warning" logs no info line (no ready, no outcome)."""
        d = make_daemon(Env(log_level="warning"))
        a = Actor(d)
        a.submit("op-1", "echo", b"x")
        a.invoke("op-1")
        d.terminate()
        assert {e["level"] for e in events(d)} <= {"warning", "error", "critical"}


class TestLogFormat:
    def test_an_unknown_log_format_is_refused(self, tmp_path):
        """log_format outside auto|json|text is a config error naming the key."""
        path = tmp_path / "c.toml"
        path.write_text('log_format = "xml"\n')
        out = wardd("check-config", str(path))
        assert out.returncode == 78 and "log_format" in out.stderr


class TestTracing:
    @pytest.mark.parametrize(
        ("table", "key"),
        [
            ('exporter = "jaeger"', "tracing.exporter"),
            ('endpoint = "ftp://127.0.0.1/v1/traces"', "tracing.endpoint"),
            ('endpoint = "127.0.0.1:4318"', "tracing.endpoint"),
            ('service_name = ""', "tracing.service_name"),
            ("sample_rate = 1", "tracing.sample_rate"),
        ],
    )
    def test_a_bad_tracing_key_is_one_line_naming_it(self, tmp_path, table, key):
        """A refused ``[tracing]`` key is one line naming its dotted key, exit 78."""
        path = tmp_path / "c.toml"
        path.write_text(f"[tracing]\n{table}\n")
        out = wardd("check-config", str(path))
        assert out.returncode == 78
        assert out.stderr.count("\n") == 1 and f": {key}: " in out.stderr, out.stderr

    def test_otlp_is_accepted_with_the_otel_extra(self, tmp_path):
        """With the ``otel`` extra installed, ``exporter = "otlp"`` checks out."""
        pytest.importorskip("opentelemetry.sdk")
        path = tmp_path / "c.toml"
        path.write_text(
            '[tracing]\nexporter = "otlp"\nendpoint = "https://collector:4318/v1/traces"\n'
        )
        out = wardd("check-config", str(path))
        assert out.returncode == 0, out.stderr
