"""The systemd user units in systemd/ (contract §6 "The systemd user unit", §3.6, §4).

Two kinds of check: a parse of the unit files against what docs/contract.md and
docs/operations.md promise, and, where ``systemd-analyze`` exists, systemd's
own ``verify`` in user mode. ``verify`` needs no running systemd (it works
as root in a container too), but it resolves ``%h``/``%t`` from ``$HOME``
and ``$XDG_RUNTIME_DIR`` and refuses a unit whose ``ExecStart`` binary is
missing, so it runs with both pointed at a temporary directory holding a
stand-in ``~/.local/bin/wardd``; the unit files themselves are used as
shipped. Unknown keys and unparsable values are only warnings (exit status
0), so the check also requires that systemd printed nothing about them.
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from wardd.daemon import install_units as units

UNITS = Path(__file__).resolve().parents[2] / "systemd"
SERVICE = UNITS / "wardd.service"
SOCKET = UNITS / "wardd.socket"

# contract §6 default; TimeoutStopSec must stay above it.
DEFAULT_SHUTDOWN_GRACE_S = 30
# The exit codes the daemon uses (docs/operations.md): sysexits.h EX_CONFIG
# for a configuration error, EX_TEMPFAIL for a database lock held elsewhere.
EX_CONFIG = 78
EX_TEMPFAIL = 75

Unit = dict[str, dict[str, list[str]]]


def parse_unit(path: Path) -> Unit:
    """A minimal systemd.syntax(7) reader: sections of repeated ``Key=value``.

    Comments (``#``/``;``) and blank lines are skipped and a trailing
    backslash continues a line, which is all these units use.
    """
    unit: Unit = {}
    section: dict[str, list[str]] | None = None
    pending = ""
    for raw in path.read_text().splitlines():
        line = pending + raw.strip()
        pending = ""
        if not line or line[0] in "#;":
            continue
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if line.startswith("[") and line.endswith("]"):
            section = unit.setdefault(line[1:-1], {})
            continue
        assert section is not None, f"{path.name}: {line!r} outside any section"
        key, sep, value = line.partition("=")
        assert sep, f"{path.name}: {line!r} is not Key=value"
        section.setdefault(key.strip(), []).append(value.strip())
    return unit


def only(unit: Unit, section: str, key: str) -> str:
    values = unit.get(section, {}).get(key, [])
    assert len(values) == 1, f"[{section}] {key}= should be set once, found {values}"
    return values[0]


def seconds(value: str) -> float:
    """systemd.time(7) spans as used here: '45', '45s', '1min', '2min 30s'."""
    scale = {"": 1, "s": 1, "sec": 1, "min": 60, "m": 60, "h": 3600, "ms": 0.001}
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)", value)
    assert parts and "".join(n + u for n, u in parts) == value.replace(" ", ""), value
    return sum(float(n) * scale[u] for n, u in parts)


@pytest.fixture(scope="module")
def service() -> Unit:
    return parse_unit(SERVICE)


@pytest.fixture(scope="module")
def socket_unit() -> Unit:
    return parse_unit(SOCKET)


class TestServiceUnit:
    def test_notify_readiness_from_the_main_process_only(self, service: Unit) -> None:
        """Type=notify with NotifyAccess=main: READY=1 comes from the daemon after recovery."""
        assert only(service, "Service", "Type") == "notify"
        assert only(service, "Service", "NotifyAccess") == "main"

    def test_runs_the_daemon_in_the_foreground(self, service: Unit) -> None:
        """ExecStart is an absolute `wardd run` (user units do not search ~/.local/bin)."""
        argv = only(service, "Service", "ExecStart").split()
        assert argv[0] == "%h/.local/bin/wardd"
        assert argv[1:] == ["run"]

    def test_watchdog_is_enabled(self, service: Unit) -> None:
        """WatchdogSec is set, so systemd passes WATCHDOG_USEC and restarts a hung daemon."""
        assert seconds(only(service, "Service", "WatchdogSec")) == 30

    def test_sigterm_reaches_only_the_daemon(self, service: Unit) -> None:
        """KillMode=mixed: the daemon runs its grace; the cgroup is SIGKILLed at the end."""
        assert only(service, "Service", "KillMode") == "mixed"
        assert service["Service"].get("KillSignal", ["SIGTERM"]) == ["SIGTERM"]
        assert service["Service"].get("SendSIGKILL", ["yes"]) == ["yes"]

    def test_stop_timeout_exceeds_the_shutdown_grace(self, service: Unit) -> None:
        """TimeoutStopSec leaves the daemon its whole shutdown_grace_s and then some."""
        assert seconds(only(service, "Service", "TimeoutStopSec")) > DEFAULT_SHUTDOWN_GRACE_S

    def test_start_timeout_leaves_room_past_the_receipt_budget(self, service: Unit) -> None:
        """The in-process receipts' budget before READY=1 is a fraction of
        TimeoutStartSec: a hanging receipt cannot make every start time out."""
        from wardd.daemon.life.recovery import START_RECEIPT_BUDGET_S

        assert seconds(only(service, "Service", "TimeoutStartSec")) >= 3 * START_RECEIPT_BUDGET_S

    def test_restarts_on_failure_but_not_for_config_or_lock_errors(self, service: Unit) -> None:
        """Restart=on-failure, except exit 78 (EX_CONFIG) and 75 (EX_TEMPFAIL, lock held)."""
        assert only(service, "Service", "Restart") == "on-failure"
        assert seconds(only(service, "Service", "RestartSec")) == 2
        prevented = {
            word
            for value in service["Service"]["RestartPreventExitStatus"]
            for word in value.split()
        }
        assert {str(EX_CONFIG), str(EX_TEMPFAIL)} <= prevented

    def test_files_are_private_to_the_user(self, service: Unit) -> None:
        """UMask=0077 keeps the database, lock and socket unreadable to others."""
        assert only(service, "Service", "UMask") == "0077"

    def test_hardening_stays_within_what_a_user_manager_can_do(self, service: Unit) -> None:
        """Only settings that work unprivileged and that cli tools can live with."""
        settings = service["Service"]
        assert settings["NoNewPrivileges"] == ["yes"]
        needs_mount_namespace = {
            "PrivateTmp",
            "PrivateDevices",
            "PrivateNetwork",
            "PrivateUsers",
            "ProtectSystem",
            "ProtectHome",
            "ProtectKernelTunables",
            "ProtectKernelModules",
            "ProtectControlGroups",
            "ProtectHostname",
            "ProtectClock",
            "ReadOnlyPaths",
            "InaccessiblePaths",
            "TemporaryFileSystem",
            "BindPaths",
        }
        breaks_cli_tools = {"MemoryDenyWriteExecute", "RestrictAddressFamilies"}
        assert not (needs_mount_namespace | breaks_cli_tools) & set(settings)

    def test_socket_unit_comes_first_and_is_enabled_with_it(self, service: Unit) -> None:
        """Wants/After wardd.socket, and enabling the service enables the socket (Also=)."""
        assert "wardd.socket" in service["Unit"]["Wants"]
        assert "wardd.socket" in service["Unit"]["After"]
        assert "wardd.socket" in service["Install"]["Also"]
        assert only(service, "Install", "WantedBy") == "default.target"


class TestSocketUnit:
    def test_listens_on_the_default_socket_path(self, socket_unit: Unit) -> None:
        """ListenStream is $XDG_RUNTIME_DIR/wardd/wardd.sock (%t in a user unit), contract §4."""
        assert only(socket_unit, "Socket", "ListenStream") == "%t/wardd/wardd.sock"

    def test_socket_and_directory_are_private(self, socket_unit: Unit) -> None:
        """Socket 0600 in a 0700 directory, as the daemon creates them itself (contract §4)."""
        assert only(socket_unit, "Socket", "SocketMode") == "0600"
        assert only(socket_unit, "Socket", "DirectoryMode") == "0700"

    def test_activates_wardd_service_with_one_listener(self, socket_unit: Unit) -> None:
        """Service=wardd.service, and Accept=no so the daemon gets the listening socket."""
        assert only(socket_unit, "Socket", "Service") == "wardd.service"
        assert socket_unit["Socket"].get("Accept", ["no"]) == ["no"]
        assert only(socket_unit, "Install", "WantedBy") == "sockets.target"

    @pytest.mark.parametrize("module", ["wardd.daemon.config", "wardd.client"])
    def test_matches_the_default_socket_path(
        self, socket_unit: Unit, module: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """%t/wardd/wardd.sock is where the daemon binds and the client looks by default."""
        try:
            default_socket_path = importlib.import_module(module).default_socket_path
        except (ImportError, AttributeError) as exc:  # a sibling module still being written
            pytest.skip(f"{module}.default_socket_path is not importable yet: {exc}")
        monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/4242")
        listen = only(socket_unit, "Socket", "ListenStream")
        assert str(default_socket_path()) == listen.replace("%t", "/run/user/4242")


# ---------------------------------------------------------------------------
# systemd's own verdict

SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
needs_systemd_analyze = pytest.mark.skipif(
    SYSTEMD_ANALYZE is None, reason="systemd-analyze is not installed (no systemd here)"
)


@pytest.fixture
def user_session() -> Iterator[dict[str, str]]:
    """HOME and XDG_RUNTIME_DIR for `verify --user`, with a stand-in wardd binary.

    A short temporary directory, so that %t/wardd/wardd.sock fits in sun_path.
    """
    with tempfile.TemporaryDirectory(prefix="wsd-") as name:
        yield _session(Path(name))


def _session(root: Path) -> dict[str, str]:
    home = root / "home"
    (home / ".local" / "bin").mkdir(parents=True)
    (home / ".local" / "bin" / "wardd").symlink_to(shutil.which("true") or "/bin/true")
    runtime = root / "run"
    runtime.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "SYSTEMD_"))}
    env.update(HOME=str(home), XDG_RUNTIME_DIR=str(runtime), SYSTEMD_PAGER="", LC_ALL="C")
    return env


def verify(units: list[Path], env: dict[str, str]) -> tuple[int, list[str]]:
    """Run `systemd-analyze verify --user`; return its status and its lines about wardd."""
    assert SYSTEMD_ANALYZE is not None
    proc = subprocess.run(
        [SYSTEMD_ANALYZE, "verify", "--user", "--man=no", *map(str, units)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = (proc.stdout + proc.stderr).splitlines()
    # In a real login session systemd may also mention other units it loads
    # (default.target, ...): only what it says about ours counts.
    return proc.returncode, [line for line in lines if "wardd" in line]


@needs_systemd_analyze
class TestSystemdVerify:
    def test_units_verify_cleanly_in_user_mode(self, user_session: dict[str, str]) -> None:
        """systemd accepts every key and value of both units, with no warning."""
        status, complaints = verify([SERVICE, SOCKET], user_session)
        assert (status, complaints) == (0, [])

    def test_verify_here_does_catch_a_broken_unit(
        self, user_session: dict[str, str], tmp_path: Path
    ) -> None:
        """The check above is not vacuous: a bogus key and a bad value are reported."""
        broken = tmp_path / "units" / "wardd.service"
        broken.parent.mkdir()
        text = SERVICE.read_text().replace("KillMode=mixed", "KillMode=bogus\nNoSuchKey=1")
        broken.write_text(text)
        shutil.copy(SOCKET, broken.parent / "wardd.socket")
        _, complaints = verify([broken, broken.parent / "wardd.socket"], user_session)
        assert any("NoSuchKey" in line for line in complaints), complaints
        assert any("bogus" in line for line in complaints), complaints

    def test_verify_refuses_a_missing_executable(self, user_session: dict[str, str]) -> None:
        """%h resolves to $HOME: without ~/.local/bin/wardd the service does not verify."""
        (Path(user_session["HOME"]) / ".local" / "bin" / "wardd").unlink()
        status, complaints = verify([SERVICE, SOCKET], user_session)
        assert status != 0
        assert any(".local/bin/wardd" in line for line in complaints), complaints


class TestInstallUnits:
    """`wardd install-units`: the reference units with this install's ExecStart."""

    def test_the_written_units_are_the_reference_but_for_the_header_and_exec_start(
        self, tmp_path: Path
    ) -> None:
        """Every line of the reference from [Unit] on is kept, ExecStart excepted,
        which runs the given wardd (and --config when given)."""
        rendered = units.render(["/opt/w/bin/wardd"], "/etc/w.toml", tmp_path)
        assert [u.path for u in rendered] == [tmp_path / "wardd.service", tmp_path / "wardd.socket"]
        for unit, reference in zip(rendered, (SERVICE, SOCKET), strict=True):
            ref = reference.read_text()
            body = unit.text[unit.text.index("\n[Unit]\n") + 1 :]
            assert unit.text.startswith("# Written by `wardd install-units`")
            want = ref[ref.index("\n[Unit]\n") + 1 :].replace(
                "ExecStart=%h/.local/bin/wardd run",
                "ExecStart=/opt/w/bin/wardd run --config /etc/w.toml",
            )
            assert body == want
        assert "ExecStart=/opt/w/bin/wardd run --config /etc/w.toml\n" in rendered[0].text

    def test_exec_start_words_are_escaped_for_systemd(self) -> None:
        """%, $ and spaces cannot change what systemd runs (systemd.service(5))."""
        line = units.exec_start(["/home/a b/100%/$x/wardd"], None)
        assert line == 'ExecStart="/home/a b/100%%/$$x/wardd" run'
        assert units.exec_start(["/usr/bin/python3", "-m", "wardd.daemon.cli"], None) == (
            "ExecStart=/usr/bin/python3 -m wardd.daemon.cli run"
        )

    def test_exec_start_is_the_running_scripts_resolved_path(self, tmp_path: Path) -> None:
        """A console script named wardd (pipx's symlink resolved); else python -m."""
        real = tmp_path / "venv" / "bin" / "wardd"
        real.parent.mkdir(parents=True)
        real.write_text("#!/bin/sh\n")
        link = tmp_path / "bin" / "wardd"
        link.parent.mkdir()
        link.symlink_to(real)
        assert units.running_wardd(str(link), "/v/bin/python") == [str(real)]
        assert units.running_wardd("/x/cli.py", "/v/bin/python") == [
            "/v/bin/python", "-m", "wardd.daemon.cli",
        ]  # fmt: skip

    def test_the_user_unit_folder_follows_xdg_config_home(self) -> None:
        assert units.user_unit_dir({"XDG_CONFIG_HOME": "/c", "HOME": "/h"}) == Path(
            "/c/systemd/user"
        )
        for env in ({"HOME": "/h"}, {"XDG_CONFIG_HOME": "rel", "HOME": "/h"}):
            assert units.user_unit_dir(env) == Path("/h/.config/systemd/user")

    def test_install_writes_keeps_refuses_and_enables(self, tmp_path: Path, capsys) -> None:
        """Written and said; unchanged said; other content kept unless --force;
        --enable reloads the user manager, then enables the socket, in that order."""
        rendered = units.render(["/w"], None, tmp_path / "user")
        ran: list[list[str]] = []

        def run(argv: list[str]) -> int:
            ran.append(argv)
            return 0

        assert units.install(rendered, dry_run=True, force=False, enable=True, run=run) == 0
        assert not (tmp_path / "user").exists() and ran == []
        assert "(not written: --dry-run)" in capsys.readouterr().out
        assert units.install(rendered, dry_run=False, force=False, enable=False, run=run) == 0
        assert f"wrote {tmp_path / 'user' / 'wardd.service'}" in capsys.readouterr().out
        assert (tmp_path / "user" / "wardd.socket").read_text() == rendered[1].text
        (tmp_path / "user" / "wardd.service").write_text("mine\n")
        assert units.install(rendered, dry_run=False, force=False, enable=True, run=run) == 1
        assert "exists with other content" in capsys.readouterr().err and ran == []
        assert (tmp_path / "user" / "wardd.service").read_text() == "mine\n"
        assert units.install(rendered, dry_run=False, force=True, enable=True, run=run) == 0
        assert ran == [
            ["systemctl", "--user", "daemon-reload"],
            ["systemctl", "--user", "enable", "wardd.socket"],
        ]
        out = capsys.readouterr().out
        assert "unchanged:" in out and "enabled wardd.socket" in out
        assert (
            units.install(rendered, dry_run=False, force=False, enable=True, run=lambda a: 5) == 1
        )

    @needs_systemd_analyze
    def test_what_it_writes_verifies(self, user_session: dict[str, str]) -> None:
        """systemd-analyze verify accepts the written units, ExecStart a real program."""
        home = Path(user_session["HOME"])
        rendered = units.render([str(home / ".local" / "bin" / "wardd")], None, home / "u")
        for unit in rendered:
            unit.path.parent.mkdir(exist_ok=True)
            unit.path.write_text(unit.text)
        status, complaints = verify([u.path for u in rendered], user_session)
        assert (status, complaints) == (0, [])
