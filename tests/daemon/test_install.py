"""The install of docs/operations.md, done for real: `pip install --user .` from a copy of
the checkout into a temporary HOME, then the installed script and the installed unit."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.daemon.harness import Daemon, Env

ROOT = Path(__file__).resolve().parents[2]
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")


def tracked_copy(dest: Path) -> Path:
    """The checkout's tracked files, as a fresh clone would have them."""
    names = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    for name in names:
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / name).is_file():
            shutil.copy2(ROOT / name, target)
    return dest


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """HOME and environment after `python3 -m pip install --user .` in a copy of the checkout."""
    root = Path(str(tmp_path_factory.mktemp("inst")))
    src = tracked_copy(root / "src")
    home = root / "home"
    home.mkdir()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTHON", "PIP_USER", "VIRTUAL_ENV", "XDG_", "NOTIFY_", "LISTEN_"))
    }
    env["HOME"] = str(home)
    python = getattr(sys, "_base_executable", sys.executable)  # pip refuses --user in a venv
    proc = subprocess.run(
        [python, "-m", "pip", "install", "-q", "--user", "--no-warn-script-location", "."],
        cwd=src,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    return env


class InstalledDaemon(Daemon):
    """A daemon run from the installed console script, as the unit's ExecStart runs it."""

    def __init__(self, env: Env, script: Path, base: dict[str, str]) -> None:
        super().__init__(env)
        self.script = script
        self.base = base

    def argv(self) -> list[str]:
        return [str(self.script), "run", "--config", str(self.env.config)]

    def spawn(self, extra_env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        return super().spawn({"HOME": self.base["HOME"], **(extra_env or {})})


class TestInstallFromTheCheckout:
    def test_pip_install_user_puts_wardd_where_the_unit_runs_it(self, installed):
        """`pip install --user .` gives ~/.local/bin/wardd and wardctl, which run."""
        bin_dir = Path(installed["HOME"]) / ".local" / "bin"
        for script in ("wardd", "wardctl"):
            out = subprocess.run(
                [str(bin_dir / script), "--version"],
                env=installed,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert out.returncode == 0 and out.stdout.startswith(script), out.stderr
        unit = (ROOT / "systemd" / "wardd.service").read_text()
        assert "\nExecStart=%h/.local/bin/wardd run\n" in unit

    def test_the_installed_daemon_serves(self, installed, make_daemon):
        """The installed script starts a daemon that answers status."""
        script = Path(installed["HOME"]) / ".local" / "bin" / "wardd"
        d = InstalledDaemon(Env(), script, installed)
        try:
            d.start()
            with d.connect() as c:
                assert c.call("status", {})["boot"] == d.boot
            assert d.terminate() == 0
        finally:
            d.cleanup()

    @pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="systemd-analyze is not installed")
    def test_the_installed_units_verify(self, installed, tmp_path):
        """The units copied as the docs say verify with systemd against the installed script."""
        home = Path(installed["HOME"])
        units = home / ".config" / "systemd" / "user"
        units.mkdir(parents=True, exist_ok=True)
        for name in ("wardd.service", "wardd.socket"):
            shutil.copy(ROOT / "systemd" / name, units / name)
        runtime = tmp_path / "run"
        runtime.mkdir(mode=0o700)
        env = {**installed, "XDG_RUNTIME_DIR": str(runtime), "SYSTEMD_PAGER": "", "LC_ALL": "C"}
        assert SYSTEMD_ANALYZE is not None
        proc = subprocess.run(
            [
                SYSTEMD_ANALYZE,
                "verify",
                "--user",
                "--man=no",
                str(units / "wardd.service"),
                str(units / "wardd.socket"),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        complaints = [x for x in (proc.stdout + proc.stderr).splitlines() if "wardd" in x]
        assert (proc.returncode, complaints) == (0, [])
