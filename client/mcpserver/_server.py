"""The MCP server: the official SDK's low-level `Server`, with two handlers.

- ``tools/list``: exactly the configured tools, each with its description,
  input schema and the annotations of a guarded act (not read-only, not
  idempotent, destructive: a model must not call it twice lightly).
- ``tools/call``: choose the op (`_keys`), check the arguments against the
  tool's schema, run one guarded call (`Guard.dispatch`), answer
  (`_results`). A tool the config does not list is a protocol error
  (``INVALID_PARAMS``), as MCP asks for a tool it cannot find; everything
  else is a result the model reads.

The SDK serves both transports: stdio (`serve_stdio`) and streamable HTTP at
``/mcp`` on a loopback address (`serve_http`).
"""

from __future__ import annotations

import contextlib
import hmac
import signal
import socket
from collections.abc import Iterator, Mapping
from typing import Any

import anyio
import mcp_types as types
import structlog
import uvicorn
from jsonschema import exceptions as schema_exceptions
from jsonschema import validators
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from referencing import Registry
from referencing.exceptions import Unresolvable

from ._config import McpConfig, ToolConfig
from ._guard import Guard
from ._keys import KeyRefused, canonical_json, choose_op
from ._results import status_of, tool_result

__all__ = ["GuardedCallParams", "build_server", "serve_http", "serve_stdio"]

log = structlog.get_logger("wardd.mcp")

INSTRUCTIONS = (
    "Each tool runs a side-effecting act at most once per idempotency key. A result with "
    'structuredContent.status "unknown" may have run: never retry it; tell the user.'
)


class GuardedCallParams(types.CallToolRequestParams):
    """``tools/call`` params with ``idempotencyKey`` (MCP's idempotency proposal):
    kept as sent (any JSON value) so that a wrong type gets our clear refusal."""

    idempotency_key: Any = None


def _annotations() -> types.ToolAnnotations:
    return types.ToolAnnotations(read_only_hint=False, idempotent_hint=False, destructive_hint=True)


class _Tools:
    """The configured tools with their argument validators, built once."""

    def __init__(self, config: McpConfig) -> None:
        self.config = config
        self.listed = [
            types.Tool(
                name=t.act,
                description=t.description,
                input_schema=dict(t.input_schema),
                annotations=_annotations(),
            )
            for t in config.tools
        ]
        self.validators = {  # an empty registry: no reference is ever fetched
            t.act: validators.validator_for(t.input_schema)(t.input_schema, registry=Registry())
            for t in config.tools
        }

    def find(self, name: str) -> ToolConfig:
        tool = self.config.tool(name)
        if tool is None:
            raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {name}")
        return tool

    def mismatch(self, name: str, arguments: Mapping[str, Any]) -> str | None:
        """Why `arguments` do not match the tool's schema (None: they do)."""
        try:
            error = schema_exceptions.best_match(self.validators[name].iter_errors(arguments))
        except Unresolvable as exc:  # checked at start; never a traceback
            return f"the tool's input schema cannot be used: {exc}"
        if error is None:
            return None
        where = "".join(f"[{p!r}]" for p in error.absolute_path) or "the arguments"
        return f"{where}: {error.message}"


def build_server(config: McpConfig, guard: Guard, version: str) -> Server[Any]:
    """The SDK server whose tools are the configured guarded acts."""
    tools = _Tools(config)

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools.listed)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: GuardedCallParams
    ) -> types.CallToolResult:
        return await _call(tools, guard, params)

    server: Server[Any] = Server(
        "wardd", version=version, instructions=INSTRUCTIONS, on_list_tools=list_tools
    )
    server.add_request_handler("tools/call", GuardedCallParams, call_tool)
    return server


async def _call(tools: _Tools, guard: Guard, params: GuardedCallParams) -> types.CallToolResult:
    tool = tools.find(params.name)
    arguments = dict(params.arguments or {})
    meta = dict(params.meta or {})
    try:
        key = choose_op(tool.act, tool.key_from_arguments, arguments, params.idempotency_key, meta)
    except KeyRefused as exc:
        return _bad_request(str(exc))
    except ValueError as exc:  # key = "arguments" over a NaN or an infinity
        return _bad_request(f"the arguments are not JSON: {exc}")
    why = tools.mismatch(tool.act, arguments)
    if why is not None:
        return _bad_request(f"the arguments do not match the tool's input schema: {why}")
    try:
        args = canonical_json(arguments)
    except ValueError as exc:
        return _bad_request(f"the arguments are not JSON: {exc}")
    answer = await guard.dispatch(key.op, tool.act, args)
    log.info("mcp_call", tool=tool.act, op=key.op, key=key.source, status=status_of(answer))
    return tool_result(key, answer)


def _bad_request(message: str) -> types.CallToolResult:
    """A refusal made here, before anything was sent: no op exists for it."""
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=f"refused (bad_request): {message}")],
        structured_content={"status": "refused", "code": "bad_request", "may_have_run": False},
        is_error=True,
    )


async def serve_stdio(server: Server[Any]) -> None:
    """Serve one host over stdin and stdout until it closes stdin."""
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except BaseException:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


async def serve_http(server: Server[Any], host: str, port: int, token: str) -> None:
    """Serve streamable HTTP at ``http://HOST:PORT/mcp`` (a loopback address,
    checked by the caller); port 0 takes a free port. Every request must carry
    ``Authorization: Bearer <token>`` (401 otherwise: any local user can reach
    a loopback port, and the tools sign as this neuron). Requests whose Host
    or Origin is not this loopback address are refused (DNS rebinding).
    SIGTERM or SIGINT stop it once the calls in progress have answered (a
    second SIGINT at once)."""
    shown = f"[{host}]" if ":" in host else host
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"{shown}:*", "localhost:*"],
        allowed_origins=[f"http://{shown}:*", "http://localhost:*"],
    )
    app = server.streamable_http_app(
        streamable_http_path="/mcp", host=host, transport_security=security
    )
    sock = _listen(host, port)
    config = uvicorn.Config(
        _BearerOnly(app, token),
        log_level="warning",
        lifespan="on",
        access_log=False,
        timeout_graceful_shutdown=10,
    )
    web = _Uvicorn(config)
    async with anyio.create_task_group() as tg:
        await tg.start(_stop_on_signals, web)
        log.info("mcp_listening", url=f"http://{shown}:{sock.getsockname()[1]}/mcp")
        await web.serve(sockets=[sock])
        tg.cancel_scope.cancel()


class _BearerOnly:
    """ASGI: an HTTP request without ``Authorization: Bearer <token>`` is
    answered 401 and reaches nothing (compared in constant time)."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode("ascii")

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or ()).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                body = b'{"error":"unauthorized: Authorization: Bearer <http_token_file> required"}'
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"www-authenticate", b'Bearer realm="wardd-mcp"'),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


class _Uvicorn(uvicorn.Server):
    """uvicorn's server without its signal handlers: ours (`_stop_on_signals`)
    are in place before the address is announced, and a stop exits 0 rather
    than re-raising the signal."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def _stop_on_signals(web: Any, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        task_status.started()
        async for signum in signals:
            if web.should_exit and signum == signal.SIGINT:
                web.force_exit = True
            web.should_exit = True
