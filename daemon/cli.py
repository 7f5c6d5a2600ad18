"""``wardd``: run the daemon, check a configuration, print the version.

Exit statuses (the systemd unit's ``RestartPreventExitStatus`` names the
first three, which a restart cannot fix):

- 78 a configuration error: a bad config file, a non-socket file at the
  socket path, a socket-activation descriptor of the wrong kind;
- 75 another daemon is in the way: it owns the database (its lock is held)
  or listens on the socket;
- 65 the database file is not a usable wardd database (not SQLite, corrupt,
  or written by a newer version);
- 70 fail-stop (an outcome could not be stored);
- 1 another start-up failure;
- 0 a clean stop on SIGTERM, SIGINT, SIGHUP or SIGQUIT (see
  `wardd.daemon.life.signals`).

``wardd mcp`` (an MCP server, a client of the daemon: `wardd.client.mcpserver`) has
statuses of its own: 0, 78 and 1, as `wardd.client.mcpserver._cli` says.

Each start-up failure is one line on stderr: ``wardd: <what>``. The checks
that need no database (the config, the activation descriptors, the socket
path) run before the database is opened, so a refused start creates no
database.
"""

from __future__ import annotations

import argparse
import os
import socket
import sqlite3
import stat
import sys
from collections.abc import Sequence
from typing import Any

import structlog
import trio

from wardd.daemon.observe.logs import configure_logging

EXIT_CONFIG = 78
EXIT_LOCKED = 75
EXIT_DATA = 65
EXIT_START = 1

__all__ = ["main", "run"]


def _parser() -> argparse.ArgumentParser:
    from wardd.daemon.life.app import VERSION

    p = argparse.ArgumentParser(
        prog="wardd",
        description="wardd: local worker dispatch and fencing daemon. Runs registered acts "
        "for signed progs at most once per attempt and surfaces every effect whose fate "
        "is unknown.",
        epilog="Exit statuses: 0 clean stop (SIGTERM, SIGINT, SIGHUP, SIGQUIT), 78 "
        "configuration error, 75 another daemon owns the database or listens on the socket, "
        "65 the database file is not usable, 70 "
        "fail-stop (an outcome could not be stored), 1 other start-up failure. Docs: "
        "README.md, docs/configuration.md, docs/operations.md, docs/recovery.md.",
    )
    p.add_argument("--version", action="version", version=f"wardd {VERSION}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    run = sub.add_parser(
        "run",
        help="run the daemon in the foreground (logs to stderr: text on a terminal, else JSON)",
        description="Run the daemon in the foreground. Without --config it "
        "uses the embedded default: XDG paths, network 'local', 2 workers, "
        "act 'echo'.",
    )
    run.add_argument(
        "--config", metavar="PATH", help="TOML configuration file (docs/configuration.md)"
    )
    chk = sub.add_parser(
        "check-config",
        help="validate a configuration file and exit",
        description="Validate PATH; prints 'ok' or one line naming the file, "
        "the key and the reason.",
    )
    chk.add_argument("path", metavar="PATH")
    _mcp_parser(sub)
    sub.add_parser(
        "default-config",
        help="print the embedded default configuration: every key, commented",
        description="Print a complete, commented configuration holding every key's "
        "default; it is the configuration `wardd run` uses without --config.",
    )
    _units_parser(sub)
    return p


def _mcp_parser(sub: Any) -> None:
    mcp = sub.add_parser(
        "mcp",
        help="serve the acts of a prog as the tools of an MCP host (docs/recipes.md)",
        description="An MCP server whose tools are guarded acts: each tools/call runs its act "
        "at most once per idempotency key (params.idempotencyKey, _meta "
        '"wardd/idempotency_key", a digest of the arguments for a tool with key = '
        '"arguments", else a fresh op id). It is a client of the daemon: at start it '
        "registers the neuron of the config's key, creates the prog and grants it the "
        "tools' acts when the prog is missing (an existing grant is left as it is), and "
        "places the neuron on the configured worker (again "
        "after every daemon restart). By default it serves one host over stdin and stdout "
        "(an MCP host starts it); with --http it serves streamable HTTP at /mcp.",
        epilog="Exit statuses: 0 the host closed stdin (with --http: SIGINT or SIGTERM), 78 "
        "configuration error (one line naming the file and the key, as check-config), an "
        "--http address that is not loopback, or --http without a usable http_token_file, "
        "1 other start-up failure (the key file, the "
        "daemon cannot be reached or refused the set-up, an act the daemon lacks). Needs "
        "the MCP SDK: pip install 'wardd[mcp]'. Docs: docs/recipes.md ('Guard the tools of "
        "an MCP host'), docs/configuration.md ('wardd mcp').",
    )
    mcp.add_argument(
        "--config",
        metavar="PATH",
        required=True,
        help="the mcp.toml: socket, key, prog, worker, step_limit, http_token_file and one "
        '[tools."<act>"] table per tool (docs/configuration.md)',
    )
    mcp.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio; HOST must be a "
        "loopback IP address (127.0.0.1, [::1]), and every request must carry "
        "'Authorization: Bearer TOKEN', TOKEN from the config's http_token_file (required: "
        "any local user can reach the port). Port 0 takes a free port (logged as "
        "mcp_listening)",
    )


def _run_mcp(args: argparse.Namespace) -> int:
    from wardd.daemon.life.app import VERSION

    try:
        from wardd.client.mcpserver import run_mcp
    except ImportError as exc:
        print(
            f"wardd: `wardd mcp` needs the MCP SDK ({exc}): pip install 'wardd[mcp]'",
            file=sys.stderr,
        )
        return EXIT_START
    return run_mcp(args.config, args.http, VERSION)


def _units_parser(sub: Any) -> None:
    units = sub.add_parser(
        "install-units",
        help="write wardd.service and wardd.socket for the systemd user manager",
        description="Write wardd.service and wardd.socket to $XDG_CONFIG_HOME/systemd/user "
        "(~/.config/systemd/user): the reference units, with ExecStart running this "
        "wardd (its resolved path). Prints what it wrote. A unit file that exists with "
        "other content is left as it is unless --force.",
    )
    units.add_argument(
        "--user",
        action="store_true",
        help="for the user manager: the default, and the only kind (the units are user units)",
    )
    units.add_argument(
        "--enable",
        action="store_true",
        help="then run `systemctl --user daemon-reload` and `systemctl --user enable wardd.socket`",
    )
    units.add_argument("--dry-run", action="store_true", help="print the units, write nothing")
    units.add_argument("--force", action="store_true", help="replace unit files that differ")
    units.add_argument(
        "--config", metavar="PATH", help="ExecStart runs with this configuration file"
    )


def _install_units(args: argparse.Namespace) -> int:
    from wardd.daemon import install_units as units

    command = units.running_wardd(sys.argv[0], sys.executable)
    config = os.path.abspath(args.config) if args.config else None
    rendered = units.render(command, config, units.user_unit_dir())
    return units.install(rendered, dry_run=args.dry_run, force=args.force, enable=args.enable)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from wardd.daemon.config import DEFAULT_TOML, ConfigError, load_config

    if args.command == "mcp":
        return _run_mcp(args)
    if args.command == "install-units":
        return _install_units(args)
    if args.command == "default-config":
        sys.stdout.write(DEFAULT_TOML)
        return 0
    if args.command == "check-config":
        try:
            cfg = load_config(args.path)
        except ConfigError as exc:
            print(f"wardd: config error: {exc}", file=sys.stderr)
            return EXIT_CONFIG
        print(
            f"ok: {cfg.source}: network {cfg.network!r}, {cfg.workers} workers, "
            f"acts: {', '.join(['echo', *(a.tag for a in cfg.acts)])}\n"
            f"socket: {cfg.socket}{' (default)' if cfg.socket_is_default else ''}\n"
            f"database: {cfg.database}{' (default)' if cfg.database_is_default else ''}"
        )
        for warning in _config_warnings(cfg):
            print(f"warning: {warning}")
        return 0
    if args.command != "run":
        _parser().print_help()
        return 2
    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        print(f"wardd: config error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    configure_logging(cfg.log_level, cfg.log_format)
    return run(cfg)


def _config_warnings(cfg: Any) -> list[str]:
    """What a valid config may still meet at a call (not refused: files can
    appear before the first call, and secrets are read at each call)."""
    out: list[str] = []
    for act in cfg.acts:
        table = act.table
        where = f'acts."{act.tag}"'
        if table.get("adapter") == "file.append" and isinstance(table.get("path"), str):
            directory = os.path.dirname(table["path"]) or "/"
            if not os.path.isdir(directory):
                out.append(
                    f"{where}.path: the directory {directory} does not exist (yet): "
                    "every call fails until it does"
                )
        env = table.get("env")
        if table.get("adapter") in ("cli", "mcp") and isinstance(env, dict):
            for name, value in env.items():
                path = value.get("file") if isinstance(value, dict) else None
                if isinstance(path, str) and not os.access(path, os.R_OK):
                    out.append(
                        f'{where}.env."{name}": the secret file {path} cannot be read (yet): '
                        "every call fails until it can"
                    )
    return out


def run(cfg: object) -> int:
    from wardd.daemon.config import Config
    from wardd.daemon.life.app import Daemon
    from wardd.daemon.life.lock import LockHeld
    from wardd.daemon.life.signals import EarlySignals
    from wardd.daemon.store.schema import SchemaTooNew, SQLiteTooOld, check_sqlite

    assert isinstance(cfg, Config)
    log = structlog.get_logger("wardd")
    refused = _preflight(cfg, log)
    if refused is not None:
        return refused
    try:
        check_sqlite()
    except SQLiteTooOld as exc:  # before the database is opened (or created)
        print(f"wardd: {exc}", file=sys.stderr)
        return EXIT_START
    # from here on no caught signal ends the process by its default action: one
    # that comes before the event loop is handed to the daemon, which stops
    early = EarlySignals()
    early.install()
    try:
        daemon = Daemon(cfg, early)  # the owner lock, then the store
    except LockHeld as exc:
        print(f"wardd: {exc}", file=sys.stderr)
        return EXIT_LOCKED
    except SchemaTooNew as exc:
        print(f"wardd: {exc}", file=sys.stderr)
        return EXIT_DATA
    except sqlite3.DatabaseError as exc:
        print(
            f"wardd: the database {cfg.database} is not a usable wardd database ({exc}); "
            "move it aside to start with a new one (docs/operations.md)",
            file=sys.stderr,
        )
        return EXIT_DATA
    except OSError as exc:
        print(f"wardd: cannot open the database {cfg.database}: {exc}", file=sys.stderr)
        return EXIT_START
    try:
        status: int = trio.run(daemon.run)
    except OSError as exc:
        log.error("start_failed", error=str(exc))
        print(f"wardd: {exc}", file=sys.stderr)
        return EXIT_START
    early.stopped(status)
    return status


def _preflight(cfg: Any, log: Any) -> int | None:
    """The socket checks, made before the database is opened (or created).

    Socket activation: every passed descriptor must be a listening Unix
    stream socket (else exit 78); a socket on another path than the
    configured one is served, and said so. Otherwise: a file at the socket
    path that is not a socket (78) or a socket something listens on (75)
    refuses the start.
    """
    from wardd.daemon.wire.activation import listen_fds

    try:
        passed = listen_fds(dict(os.environ))  # a copy: the daemon reads them again
    except ValueError as exc:
        print(f"wardd: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if passed:
        names = [s.getsockname() for s in passed]
        for s in passed:
            s.detach()  # leave the descriptors open for the daemon
        path = names[0] if isinstance(names[0], str) else repr(names[0])
        if path != str(cfg.socket):
            log.warning("activated_socket", socket=path, configured=str(cfg.socket))
        return None
    path = str(cfg.socket)
    if not os.path.lexists(path):
        return None
    if not stat.S_ISSOCK(os.lstat(path).st_mode):
        print(f"wardd: {path} exists and is not a socket; refusing to replace it", file=sys.stderr)
        return EXIT_CONFIG
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except OSError:
        return None  # a stale socket file: the daemon replaces it
    finally:
        probe.close()
    print(
        f"wardd: another process is listening on {path} (another wardd? "
        f"`wardctl --socket {path} status`); nothing was started",
        file=sys.stderr,
    )
    return EXIT_LOCKED


if __name__ == "__main__":
    sys.exit(main())
