"""``wardd install-units``: the systemd user units, written for this install.

The units are the reference ones (``systemd/``, shipped in the package as
``wardd/daemon/systemd/``) with two changes: a header saying where they came
from, and ``ExecStart`` naming the ``wardd`` that runs this command, resolved
(a pipx, ``uv tool`` or virtualenv install alike), so that systemd starts
the very install the operator used. Rendering is pure (`render`); `install`
writes, and with ``enable`` asks the user manager to load them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from pathlib import Path

import attrs

__all__ = ["UnitFile", "exec_start", "install", "render", "user_unit_dir"]

NAMES = ("wardd.service", "wardd.socket")
#: The reference service's ExecStart line, which `render` replaces.
_REFERENCE_EXEC = "ExecStart=%h/.local/bin/wardd run"
#: Characters a word of an ExecStart line cannot hold unquoted (systemd.service(5)).
_SPECIAL = set(" \t\n\"'\\;")


@attrs.frozen
class UnitFile:
    """One unit: where it goes and what it holds."""

    path: Path
    text: str


def reference(name: str) -> str:
    """The text of a reference unit (``systemd/<name>``)."""
    return resources.files("wardd.daemon").joinpath("systemd", name).read_text()


def user_unit_dir(env: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CONFIG_HOME/systemd/user`` (``~/.config/systemd/user``): where the
    user manager looks for units of its own user (`env`: default, this process's)."""
    env = os.environ if env is None else env
    config = env.get("XDG_CONFIG_HOME") or ""
    base = Path(config) if os.path.isabs(config) else Path(env.get("HOME", "~")) / ".config"
    return base.expanduser() / "systemd" / "user"


def running_wardd(argv0: str, executable: str) -> list[str]:
    """The command that runs this install's ``wardd``: the console script that
    runs now, its symlinks resolved; under ``python -m`` that interpreter (its
    path kept as it is: a virtualenv's python is a symlink that must stay one)."""
    script = Path(argv0)
    if script.name == "wardd" and script.is_file():
        return [str(script.resolve())]
    return [executable, "-m", "wardd.daemon.cli"]


def _word(arg: str) -> str:
    """One ExecStart word: ``%`` and ``$`` escaped, quoted when it must be."""
    arg = arg.replace("%", "%%").replace("$", "$$")
    if _SPECIAL & set(arg):
        return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return arg


def exec_start(command: Sequence[str], config: str | None) -> str:
    """The ExecStart line running ``command run [--config CONFIG]``."""
    args = [*command, "run", *(["--config", config] if config else [])]
    return "ExecStart=" + " ".join(_word(a) for a in args)


def render(command: Sequence[str], config: str | None, directory: Path) -> list[UnitFile]:
    """The two units for ``directory``: the reference ones, with this header and
    the service's ExecStart running ``command``."""
    header = (
        "# Written by `wardd install-units` from the reference units (systemd/ in the\n"
        "# source; docs/operations.md). ExecStart runs the wardd that wrote it.\n"
    )
    out = []
    for name in NAMES:
        body = reference(name)
        body = body[body.index("\n[Unit]\n") + 1 :]  # the reference's install notes go
        if name == "wardd.service":
            assert body.count(f"\n{_REFERENCE_EXEC}\n") == 1
            body = body.replace(f"\n{_REFERENCE_EXEC}\n", f"\n{exec_start(command, config)}\n")
        out.append(UnitFile(directory / name, header + body))
    return out


Run = Callable[[list[str]], int]


def _systemctl(argv: list[str]) -> int:
    try:
        return subprocess.run(argv, check=False).returncode
    except OSError as exc:
        print(f"wardd: cannot run {argv[0]}: {exc.strerror or exc}", file=sys.stderr)
        return 127


def install(
    units: list[UnitFile], *, dry_run: bool, force: bool, enable: bool, run: Run = _systemctl
) -> int:
    """Write `units` (or show them), then with `enable` reload the user manager
    and enable the socket. A file that exists with other content is left as it
    is unless `force`. Returns the exit status; says what it did on stdout."""
    for unit in units:
        if dry_run:
            print(f"# {unit.path} (not written: --dry-run)\n{unit.text}")
            continue
        old = unit.path.read_text() if unit.path.exists() else None
        if old == unit.text:
            print(f"unchanged: {unit.path}")
            continue
        if old is not None and not force:
            print(
                f"wardd: {unit.path} exists with other content: left as it is "
                "(--force replaces it; --dry-run shows what would be written)",
                file=sys.stderr,
            )
            return 1
        unit.path.parent.mkdir(parents=True, exist_ok=True)
        unit.path.write_text(unit.text)
        print(f"wrote {unit.path}")
    if dry_run or not enable:
        if not dry_run:
            print("next: systemctl --user daemon-reload && systemctl --user enable wardd.socket")
        return 0
    for argv in (
        ["systemctl", "--user", "daemon-reload"],
        ["systemctl", "--user", "enable", "wardd.socket"],
    ):
        print("running: " + " ".join(argv))
        status = run(argv)
        if status != 0:
            print(f"wardd: {' '.join(argv)} exited {status}", file=sys.stderr)
            return 1
    print(
        "enabled wardd.socket: it listens from your next login, or now after "
        "`systemctl --user start wardd.socket`; the daemon starts at the first connection"
    )
    return 0
