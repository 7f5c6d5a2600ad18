"""``wardd``: run the daemon, check a configuration, print the version.

Exit statuses (the systemd unit's ``RestartPreventExitStatus`` names the
first two): 78 a configuration error, 75 the database is owned by another
daemon, 70 fail-stop (an outcome could not be stored), 1 another start-up
failure, 0 a clean stop on SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

import structlog
import trio

EXIT_CONFIG = 78
EXIT_LOCKED = 75
EXIT_START = 1


_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def configure_logging(level: str = "info") -> None:
    """structlog JSON lines on stderr: ISO UTC time, level, event name; below ``level`` dropped."""
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(sort_keys=False),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )


def _parser() -> argparse.ArgumentParser:
    from wardd.daemon.app import VERSION

    p = argparse.ArgumentParser(
        prog="wardd",
        description="wardd: local worker dispatch and fencing daemon. Runs registered acts "
        "for signed progs at most once per attempt and surfaces every effect whose fate "
        "is unknown.",
        epilog="Exit statuses: 0 clean stop, 78 configuration error, 75 database owned by "
        "another daemon, 70 fail-stop (an outcome could not be stored), 1 other start-up "
        "failure. Docs: README.md, docs/operations.md, docs/recovery.md.",
    )
    p.add_argument("--version", action="version", version=f"wardd {VERSION}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    run = sub.add_parser(
        "run",
        help="run the daemon in the foreground (logs JSON to stderr)",
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
    sub.add_parser(
        "default-config",
        help="print the embedded default configuration: every key, commented",
        description="Print a complete, commented configuration holding every key's "
        "default; it is the configuration `wardd run` uses without --config.",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from wardd.daemon.config import DEFAULT_TOML, ConfigError, load_config

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
        return 0
    if args.command != "run":
        _parser().print_help()
        return 2
    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        print(f"wardd: config error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    configure_logging(cfg.log_level)
    return run(cfg)


def run(cfg: object) -> int:
    from wardd.daemon._lock import LockHeld
    from wardd.daemon._schema import SchemaTooNew
    from wardd.daemon.app import Daemon
    from wardd.daemon.config import Config

    assert isinstance(cfg, Config)
    log = structlog.get_logger("wardd")
    try:
        daemon = Daemon(cfg)
        daemon.open_store()
    except LockHeld as exc:
        print(f"wardd: {exc}", file=sys.stderr)
        return EXIT_LOCKED
    except SchemaTooNew as exc:
        print(f"wardd: {exc}", file=sys.stderr)
        return EXIT_START
    except OSError as exc:
        print(f"wardd: cannot open the database {cfg.database}: {exc}", file=sys.stderr)
        return EXIT_START
    try:
        return trio.run(daemon.run)
    except OSError as exc:
        log.error("start_failed", error=str(exc))
        print(f"wardd: {exc}", file=sys.stderr)
        return EXIT_START


if __name__ == "__main__":
    sys.exit(main())
