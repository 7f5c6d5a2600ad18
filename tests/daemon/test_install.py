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


class TestInstallUnits:
    @pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="systemd-analyze is not installed")
    def test_the_installed_wardd_writes_units_that_run_it_and_verify(self, installed, tmp_path):
        """~/.local/bin/wardd install-units: ExecStart names that very script, and
        systemd-analyze verify accepts both units as written."""
        home = Path(installed["HOME"])
        runtime = tmp_path / "run"
        runtime.mkdir(mode=0o700)
        env = {**installed, "XDG_RUNTIME_DIR": str(runtime), "SYSTEMD_PAGER": "", "LC_ALL": "C"}
        env["XDG_CONFIG_HOME"] = str(tmp_path / "config")  # this test's own
        script = home / ".local" / "bin" / "wardd"
        said = run_ok([str(script), "install-units", "--user"], env=env)
        units = tmp_path / "config" / "systemd" / "user"
        assert said.splitlines()[:2] == [
            f"wrote {units / 'wardd.service'}",
            f"wrote {units / 'wardd.socket'}",
        ]
        assert f"\nExecStart={script.resolve()} run\n" in (units / "wardd.service").read_text()
        assert SYSTEMD_ANALYZE is not None
        proc = subprocess.run(
            [SYSTEMD_ANALYZE, "verify", "--user", "--man=no", *map(str, units.iterdir())],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        complaints = [x for x in (proc.stdout + proc.stderr).splitlines() if "wardd" in x]
        assert (proc.returncode, complaints) == (0, [])

    def test_enable_reloads_the_user_manager_then_enables_the_socket(self, installed, tmp_path):
        """--enable runs `systemctl --user daemon-reload`, then `enable wardd.socket`
        (a stand-in systemctl first on PATH records what it was asked)."""
        stand_in = tmp_path / "bin" / "systemctl"
        stand_in.parent.mkdir()
        asked = tmp_path / "asked"
        stand_in.write_text(f'#!/bin/sh\necho "$*" >> {asked}\n')
        stand_in.chmod(0o755)
        env = {**installed, "PATH": f"{stand_in.parent}:{installed['PATH']}"}
        env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
        script = Path(installed["HOME"]) / ".local" / "bin" / "wardd"
        said = run_ok([str(script), "install-units", "--enable"], env=env)
        assert (tmp_path / "config" / "systemd" / "user" / "wardd.socket").is_file()
        assert asked.read_text().splitlines() == [
            "--user daemon-reload",
            "--user enable wardd.socket",
        ]
        assert "enabled wardd.socket" in said


# -- the wheel (`make dist`) ----------------------------------------------------------------

DIST = pytest.mark.skipif(
    not os.environ.get("WARDD_DIST"),
    reason="dist: builds and installs the wheel (~1 min, mostly waiting on pip): `make dist`",
)
NO_INDEX = ("No matching distribution", "Could not find a version", "NewConnectionError")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel `make dist` built ($WARDD_WHEEL), else one built here from a copy
    of the checkout's tracked files (python -m build, as `make dist` runs it)."""
    given = os.environ.get("WARDD_WHEEL")
    if given:
        return Path(given)
    root = Path(str(tmp_path_factory.mktemp("dist")))
    src = tracked_copy(root / "src")
    done = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(root / "dist"), str(src)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (found,) = (root / "dist").glob("wardd-*.whl")
    return found


def installed_from(wheel: Path, venv: Path) -> Path:
    """A fresh virtualenv with the wheel installed by pip, its dependencies from
    pip's configured index (its local wheels and cache do; skipped, saying so,
    when pip can reach no index that has them). Its bin folder."""
    python = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([python, "-m", "venv", str(venv)], check=True, timeout=300)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    if done.returncode != 0 and any(s in done.stderr for s in NO_INDEX):
        pytest.skip(f"pip cannot reach an index with wardd's dependencies: {done.stderr[-500:]}")
    assert done.returncode == 0, done.stderr[-3000:]
    return venv / "bin"


def run_ok(argv: list[str], env: dict[str, str] | None = None) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, (argv, done.stdout, done.stderr)
    return done.stdout


@DIST
@pytest.mark.timeout(1200)
class TestTheWheel:
    def test_the_wheel_installs_into_a_fresh_venv_and_its_commands_run(
        self, wheel: Path, tmp_path: Path
    ) -> None:
        """`pip install dist/wardd-*.whl`: wardd and wardctl --version, default-config,
        the man pages under share/man/man1, and install-units naming that venv's wardd."""
        bin_dir = installed_from(wheel, tmp_path / "venv")
        assert run_ok([str(bin_dir / "wardd"), "--version"]).startswith("wardd ")
        assert run_ok([str(bin_dir / "wardctl"), "--version"]).startswith("wardctl ")
        assert "network = " in run_ok([str(bin_dir / "wardd"), "default-config"])
        man = tmp_path / "venv" / "share" / "man" / "man1"
        assert {p.name for p in man.iterdir()} == {"wardd.1", "wardctl.1"}
        assert (man / "wardd.1").read_text() == (ROOT / "man" / "wardd.1").read_text()
        home = tmp_path / "home"
        env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": ""}
        said = run_ok([str(bin_dir / "wardd"), "install-units"], env=env)
        service = home / ".config" / "systemd" / "user" / "wardd.service"
        assert f"wrote {service}" in said
        assert f"\nExecStart={bin_dir.resolve() / 'wardd'} run\n" in service.read_text()

    @pytest.mark.skipif(shutil.which("pipx") is None, reason="pipx is not installed")
    def test_pipx_installs_the_wheel(self, wheel: Path, tmp_path: Path) -> None:
        """`pipx install dist/wardd-*.whl` exposes both commands, which run."""
        env = {
            **os.environ,
            "PIPX_HOME": str(tmp_path / "pipx"),
            "PIPX_BIN_DIR": str(tmp_path / "bin"),
            "PIPX_MAN_DIR": str(tmp_path / "man"),
        }
        run_ok(["pipx", "install", str(wheel)], env=env)
        for script in ("wardd", "wardctl"):
            assert run_ok([str(tmp_path / "bin" / script), "--version"], env=env)
