"""An MCP host for tests: the official SDK's client against a real ``wardd mcp``.

`stdio_host` starts ``wardd mcp`` as a host does (``stdio_client``: the
server's stdin and stdout are the protocol); `http_host` starts it with
``--http 127.0.0.1:0``, reads the address it logged (``mcp_listening``) and
connects the streamable HTTP client. Either yields an initialized
``ClientSession``, and ends the process on the way out, pass or fail.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import mcp_types as types
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests._poll import wait_until
from tests.daemon.harness import Env, child_env, toml_value
from wardd.client import Neuron

START_TIMEOUT = 30.0


class KeyedParams(types.CallToolRequestParams):
    """``tools/call`` params with MCP's proposed ``idempotencyKey`` field."""

    idempotency_key: str | None = None


class KeyedCall(types.Request[KeyedParams, Literal["tools/call"]]):
    method: Literal["tools/call"] = "tools/call"
    params: KeyedParams
    name_param = "name"


def write_mcp_config(
    env: Env, tools: dict[str, dict[str, Any]], *, name: str = "mcp.toml", **top: Any
) -> Path:
    """An mcp.toml beside the daemon's config (a fresh neuron key unless `key`
    is given); returns its path."""
    key = env.root / f"{name}.key"
    if "key" not in top and not key.exists():
        Neuron.generate().save(key)
    token = env.root / f"{name}.token"  # what --http requires of every request
    if not token.exists():
        token.write_text(secrets.token_hex(32) + "\n")
        token.chmod(0o600)
    values = {
        "socket": str(env.socket),
        "key": str(key),
        "prog": "agent",
        "http_token_file": str(token),
        **top,
    }
    values = {k: v for k, v in values.items() if v is not None}  # None: leave the key out
    lines = [f"{k} = {toml_value(v)}" for k, v in values.items()]
    for act, table in tools.items():
        lines.append(f"\n[tools.{json.dumps(act)}]")
        lines.extend(f"{k} = {toml_value(v)}" for k, v in table.items())
    path = env.root / name
    path.write_text("\n".join(lines) + "\n")
    return path


def mcp_argv(config: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "wardd.daemon.cli", "mcp", "--config", str(config), *extra]


@asynccontextmanager
async def stdio_host(
    config: Path, log: Path, *, modern: bool = False
) -> AsyncIterator[ClientSession]:
    """``wardd mcp`` over stdio, its stderr in `log`; `modern`: the 2026-07-28
    protocol (``server/discover``, every request in its own envelope) instead
    of the ``initialize`` handshake."""
    argv = mcp_argv(config)
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=child_env())
    with open(log, "a") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await (session.discover() if modern else session.initialize())
                yield session


@asynccontextmanager
async def http_server(config: Path, log: Path) -> AsyncIterator[str]:
    """``wardd mcp --http 127.0.0.1:0``; yields the URL it logged, ends it after."""
    with open(log, "ab") as errlog:
        proc = subprocess.Popen(
            mcp_argv(config, "--http", "127.0.0.1:0"),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=errlog,
            env=child_env(),
        )
    try:
        yield await _listening(proc, log)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def bearer(config: Path) -> dict[str, str]:
    """The Authorization header ``--http`` requires, from the config's token file."""
    token = (config.parent / f"{config.name}.token").read_text().strip()
    return {"Authorization": f"Bearer {token}"}


@asynccontextmanager
async def http_host(config: Path, log: Path) -> AsyncIterator[ClientSession]:
    """`http_server` and the streamable HTTP client (with the bearer token) on its /mcp."""
    async with (
        http_server(config, log) as url,
        create_mcp_http_client(headers=bearer(config)) as http,
    ):
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


async def _listening(proc: subprocess.Popen[bytes], log: Path) -> str:
    """The URL the server logged once it listens (bounded polling of its log)."""

    def url() -> str | None:
        complete = log.read_text(errors="replace").split("\n")[:-1]  # not a line half written
        for line in complete:
            if line.startswith("{") and json.loads(line).get("event") == "mcp_listening":
                return str(json.loads(line)["url"])
        if proc.poll() is not None:
            raise AssertionError(f"wardd mcp exited {proc.returncode}:\n{log.read_text()}")
        return None

    return await wait_until(url, START_TIMEOUT, "wardd mcp to listen", seen=log.read_text)


async def call(
    session: ClientSession,
    tool: str,
    arguments: dict[str, Any],
    *,
    key: str | None = None,
    meta: dict[str, Any] | None = None,
) -> types.CallToolResult:
    """One ``tools/call``; `key` goes in ``params.idempotencyKey``."""
    if key is None:
        return await session.call_tool(tool, arguments, meta=meta)  # type: ignore[arg-type]
    request = KeyedCall(
        params=KeyedParams(name=tool, arguments=arguments, idempotency_key=key, _meta=meta)
    )
    return await session.send_request(request, types.CallToolResult)


def run_mcp(config: Path, *extra: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    """``wardd mcp`` with stdin closed at once: how a start ends (its status, stderr)."""
    return subprocess.run(
        mcp_argv(config, *extra),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=timeout,
    )
