"""``wardd mcp --config PATH [--http HOST:PORT]`` (the parser is `wardd`'s: daemon/cli.py).

Exit statuses: 0 once the host closed stdin (or, with ``--http``, on SIGINT
or SIGTERM); 78 a configuration error (one line naming the file and the
dotted key, as ``wardd check-config``), an address that is not loopback,
or ``--http`` without a usable ``http_token_file``;
1 a start-up failure (the key file, the daemon cannot be reached or refused
the set-up, an act the daemon does not have).
"""

from __future__ import annotations

import sys

import anyio
import structlog

from wardd.client import KeyFileError, Neuron
from wardd.daemon.config import ConfigError, loopback_listen
from wardd.daemon.observe.logs import configure_logging

from ._config import McpConfig, http_token, load_mcp_config
from ._guard import Guard, SetUpFailed
from ._server import build_server, serve_http, serve_stdio

__all__ = ["run_mcp"]

EXIT_CONFIG = 78
EXIT_START = 1

log = structlog.get_logger("wardd.mcp")


def run_mcp(config_path: str, http: str | None, version: str) -> int:
    """Load the config, set the daemon up, then serve until the host goes."""
    try:
        config = load_mcp_config(config_path)
        listen = loopback_listen("--http", "", http, why="the tools") if http else None
        token = http_token(config) if http else None
    except ConfigError as exc:
        print(f"wardd: config error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    configure_logging("info", "auto")
    try:
        neuron = Neuron.load(config.key)
    except KeyFileError as exc:
        print(f"wardd: key: {exc}", file=sys.stderr)  # a missing file's hint is in it, once
        return EXIT_START
    guard = Guard(config, neuron)
    return anyio.run(_main, config, guard, listen, token, version, backend="asyncio")


async def _main(
    config: McpConfig,
    guard: Guard,
    listen: tuple[str, int] | None,
    token: str | None,
    version: str,
) -> int:
    try:
        await guard.set_up()
    except SetUpFailed as exc:
        print(f"wardd: {config.source}: {exc}", file=sys.stderr)
        return EXIT_START
    server = build_server(config, guard, version)
    log.info(
        "mcp_ready",
        neuron=guard.neuron.id,
        prog=config.prog,
        tools=[t.act for t in config.tools],
        transport="http" if listen else "stdio",
    )
    if listen is None or token is None:
        await serve_stdio(server)
    else:
        await serve_http(server, *listen, token)
    return 0
