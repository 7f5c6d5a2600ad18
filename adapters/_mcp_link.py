"""The ``mcp`` adapter's link to its server: one event-loop thread per act (docs/configuration.md).

The official SDK (``mcp``) is async (anyio); adapters are synchronous and
run on the daemon's worker threads. A `Link` bridges them:

- it owns one event loop, on a thread of its own (``wardd-mcp-<tag>``,
  started at the first call or receipt), through an anyio blocking portal;
- a worker submits a `ToolCall` (a frozen value) and blocks on the
  `concurrent.futures.Future` the portal gives back, for a bounded time;
- inside the loop one task holds the connection open (the transport's and
  the `ClientSession`'s context managers are entered and left by that one
  task, as anyio requires) and every call is a task of its own on the
  shared session; a call never raises: it returns a `Reply` (a frozen
  value) that says how far it got, which `wardd.adapters._mcp.judge` turns
  into the attempt's outcome.

The connection is opened when a call or receipt needs it (a stdio server is
started then), listed once (``tools/list``, all pages), and opened anew by
the next call after it ended: the transport's read stream is relayed to the
session through a task of ours, so the end of that stream (the server's
stdout closed, the HTTP stream gone) marks the connection dead at once,
and a call never goes out on a connection known to be dead.

A stdio server is started in its own session (process group) by the SDK,
with an environment of the SDK's defaults (``HOME``, ``LOGNAME``, ``PATH``,
``SHELL``, ``TERM``, ``USER``), the configured ``env`` (secrets read from
their files at each server start), and the marks ``WARDD_MCP_ACT`` (the
act), ``WARDD_MCP_SERVER`` (a random id of this one server run) and
``WARDD_BOOT`` (the daemon's boot, given to the adapter when it is built).
Its leader's pid is found by the server-run mark, so that an ``abort`` and
the daemon's stop can SIGKILL its process group at once (the SDK's own
close waits seconds between its steps). Its stderr goes to ``/dev/null``: a server may print
its environment, secrets included, and nothing of it reaches wardd's logs.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import secrets as _random
import signal
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TextIO

import anyio
import anyio.abc
import anyio.from_thread
import attrs
import jsonschema
from anyio.streams.memory import MemoryObjectSendStream
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CallToolRequest,
    CallToolRequestParams,
    CallToolResult,
    Implementation,
    PaginatedRequestParams,
)

__all__ = ["ACT_VAR", "SERVER_VAR", "Endpoint", "Link", "Reply", "ToolCall"]

SERVER_VAR = "WARDD_MCP_SERVER"
ACT_VAR = "WARDD_MCP_ACT"
BOOT_VAR = "WARDD_BOOT"
_ENVIRON_MAX = 1 << 20
_ABORTED_KEPT = 1024  # keys are unique per attempt: an old one never matches again
STOP_WAIT_S = 10.0  # the loop thread's end at the daemon's stop, at most


@attrs.frozen
class Endpoint:
    """Where the server is: ``command`` (stdio) or ``url`` (streamable HTTP)."""

    command: tuple[str, ...] | None
    url: str | None
    # the stdio server's environment, secrets read at each server start
    environment: Callable[[], tuple[dict[str, str], list[bytes]]] = attrs.field(eq=False)


@attrs.frozen
class ToolCall:
    """One ``tools/call`` to make: what crosses from a worker to the loop."""

    key: str  # the idempotency key (a receipt's: "receipt <key>"): abort finds the call by it
    tool: str
    arguments: Mapping[str, Any]
    meta: Mapping[str, Any] | None
    idempotency_key: str | None  # params.idempotencyKey, or None
    timeout_s: float
    probe: bool = False  # only connect and look the tool up: nothing is called


@attrs.frozen
class Reply:
    """How far a call got; never an exception. ``sent`` is True once the
    request's write began (from then on the server may have acted)."""

    sent: bool
    result: Mapping[str, Any] | None = None  # the complete CallToolResult, as JSON
    error_code: int | None = None  # a JSON-RPC error answered (or the SDK's)
    why: str = ""
    listed: bool = True  # False: the tool is not in tools/list (nothing sent)
    timed_out: bool = False
    aborted: bool = False


@attrs.define
class _Progress:
    """Whether the request's write began: set by the loop's call task only."""

    sent: bool = False


@attrs.define(eq=False)
class _Conn:
    """One open connection, as seen by the calls that use it."""

    session: Any
    tools: Mapping[str, Any]  # each listed tool's inputSchema
    pid: int | None  # the stdio server's leader (its process group)
    instance: str
    dead: anyio.Event
    close: anyio.Event


class Link:
    """The event-loop thread, the connection it holds, and the calls in flight."""

    def __init__(self, tag: str, endpoint: Endpoint, boot: str | None = None) -> None:
        self.tag = tag
        self.endpoint = endpoint
        self.boot = boot  # the daemon's, for WARDD_BOOT (None: check-config, tests)
        self._lock = threading.Lock()
        self._cm: contextlib.AbstractContextManager[anyio.from_thread.BlockingPortal] | None = None
        self._portal: anyio.from_thread.BlockingPortal | None = None
        self._closed = False
        self._conn: _Conn | None = None
        self._opening: anyio.Lock | None = None
        self._group: anyio.abc.TaskGroup | None = None
        self._scopes: dict[str, anyio.CancelScope] = {}
        self._aborted: dict[str, None] = {}
        self._pids: dict[int, str] = {}  # live stdio leaders and their run marks, for the stop
        self._devnull: TextIO | None = None

    # -- the workers' side ------------------------------------------------------------------

    def submit(self, call: ToolCall) -> Reply:
        """Run ``call`` in the loop and wait for its `Reply` (bounded: the call's
        own timeout bounds it inside the loop; this wait is a backstop)."""
        portal = self._started()
        if portal is None:
            return Reply(sent=False, why="the adapter has been shut down; nothing was sent")
        try:
            future: concurrent.futures.Future[Reply] = portal.start_task_soon(self._serve, call)
        except RuntimeError:  # the loop stopped meanwhile (the daemon's stop)
            return Reply(sent=False, why="the adapter has been shut down; nothing was sent")
        try:
            return future.result(timeout=call.timeout_s + STOP_WAIT_S)
        except concurrent.futures.TimeoutError:
            future.cancel()
            return Reply(sent=True, timed_out=True, why="no answer from the event loop")
        except concurrent.futures.CancelledError:
            return Reply(sent=True, why="the call's task was cancelled by the adapter's stop")

    def abort(self, key: str) -> None:
        """End the call for ``key``: close the connection it runs on (a stdio
        server's process group is killed); a call not begun yet never sends."""
        with self._lock:
            self._aborted[key] = None
            while len(self._aborted) > _ABORTED_KEPT:
                del self._aborted[next(iter(self._aborted))]
            portal = self._portal
            conn = self._conn
        if conn is not None and conn.pid is not None and key in self._scopes:
            _kill_group(conn.pid, conn.instance)
        if portal is not None:
            with contextlib.suppress(RuntimeError):
                portal.start_task_soon(self._abort_in_loop, key)

    def close(self) -> None:
        """The daemon's stop: refuse new calls, SIGKILL the stdio server's
        group, end the loop (its connection closed) and its thread."""
        with self._lock:
            self._closed = True
            cm, portal, pids = self._cm, self._portal, dict(self._pids)
            self._cm = self._portal = None
        for pid, instance in pids.items():
            _kill_group(pid, instance)
        if portal is not None and cm is not None:
            with contextlib.suppress(RuntimeError):
                portal.call(portal.stop, True)
            with contextlib.suppress(Exception):
                cm.__exit__(None, None, None)
        if self._devnull is not None:
            self._devnull.close()

    def _started(self) -> anyio.from_thread.BlockingPortal | None:
        with self._lock:
            if self._closed:
                return None
            if self._portal is None:
                cm = anyio.from_thread.start_blocking_portal(
                    "asyncio", name=f"wardd-mcp-{self.tag}"
                )
                self._portal = cm.__enter__()
                self._cm = cm
                self._devnull = open(os.devnull, "w")
                self._portal.start_task(self._group_task)
            return self._portal

    # -- the loop's side ----------------------------------------------------------------------

    async def _group_task(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """The loop's one task group, where every connection is held."""
        self._opening = anyio.Lock()
        async with anyio.create_task_group() as group:
            self._group = group
            task_status.started()
            await anyio.sleep_forever()

    async def _abort_in_loop(self, key: str) -> None:
        scope = self._scopes.get(key)
        conn = self._conn
        if scope is None:
            return
        scope.cancel()
        if conn is not None:
            conn.close.set()  # abort closes the session (and so ends the stdio server)

    async def _serve(self, call: ToolCall) -> Reply:
        """One call, bounded by its timeout; an abort cancels it (module docstring)."""
        progress = _Progress()
        deadline = anyio.CancelScope()
        with anyio.CancelScope() as scope:
            self._scopes[call.key] = scope
            try:
                with anyio.move_on_after(call.timeout_s) as deadline:
                    return await self._send(call, progress)
            finally:
                self._scopes.pop(call.key, None)
        sent = progress.sent
        if scope.cancel_called or call.key in self._aborted:
            return Reply(sent=sent, aborted=True, why="closed by the abort")
        if deadline.cancelled_caught:
            return Reply(sent=sent, timed_out=True, why=f"timed out after {call.timeout_s:g} s")
        return Reply(sent=sent, why="the call ended without an answer")

    async def _send(self, call: ToolCall, progress: _Progress) -> Reply:
        """Connect (or reuse), check the tool is listed, send; never raises but a cancel."""
        try:
            if call.key in self._aborted:
                return Reply(sent=False, aborted=True, why="aborted before it was sent")
            conn = await self._connection(call.timeout_s)
            if call.tool not in conn.tools:
                return Reply(sent=False, listed=False, why="not in the server's tools/list")
            if call.probe:
                return Reply(sent=False, why="listed")
            refused = _schema_refusal(conn.tools[call.tool], call.arguments)
            if refused is not None:
                return Reply(sent=False, why=refused)
            if conn.dead.is_set():
                return Reply(sent=False, why="the connection ended before the request was sent")
            progress.sent = True
            result = await conn.session.send_request(_request(call), CallToolResult)
            return Reply(sent=True, result=result.model_dump(mode="json", by_alias=True))
        except MCPError as exc:
            return Reply(
                sent=progress.sent, error_code=exc.code, why=f"MCP error {exc.code}: {exc}"
            )
        except Exception as exc:  # noqa: BLE001 - how far it got decides, not what broke
            return Reply(sent=progress.sent, why=_describe(exc))

    async def _connection(self, timeout_s: float) -> _Conn:
        """The open connection, or a new one (started now) when there is none or it ended."""
        assert self._opening is not None and self._group is not None
        async with self._opening:
            conn = self._conn
            if conn is not None and not conn.dead.is_set():
                return conn
            new: _Conn = await self._group.start(self._hold, timeout_s)
            self._conn = new
            return new

    async def _hold(self, timeout_s: float, *, task_status: anyio.abc.TaskStatus[_Conn]) -> None:
        """Open the transport and the session, list the tools, hand the
        connection over; keep it until it ends or is closed. What goes wrong
        before the hand-over is raised to the caller of ``start`` (nothing was
        sent); after it, the connection's end, however it came, is only its end."""
        dead, close = anyio.Event(), anyio.Event()
        instance = _random.token_hex(8)
        conn: _Conn | None = None
        pid: int | None = None
        try:
            async with self._transport(instance) as (read, write):
                pid = await self._leader(instance)  # spawned (exec done): its group is known
                relay_in, relay_out = anyio.create_memory_object_stream[Any](0)
                async with anyio.create_task_group() as group:
                    group.start_soon(_relay, read, relay_in, dead, close)
                    async with ClientSession(relay_out, write, client_info=_CLIENT) as session:
                        with anyio.fail_after(timeout_s):
                            await session.initialize()
                            tools = await _list_tools(session)
                        conn = _Conn(session, tools, pid, instance, dead, close)
                        task_status.started(conn)
                        await close.wait()
                    group.cancel_scope.cancel()
        except Exception:
            if conn is None:
                raise
        finally:
            dead.set()
            if pid is not None:
                with self._lock:
                    self._pids.pop(pid, None)

    async def _leader(self, instance: str) -> int | None:
        if self.endpoint.command is None:
            return None
        pid = await anyio.to_thread.run_sync(_find_leader, instance)
        if pid is not None:
            with self._lock:
                self._pids[pid] = instance
        return pid

    def _transport(self, instance: str) -> contextlib.AbstractAsyncContextManager[Any]:
        if self.endpoint.url is not None:
            return streamable_http_client(self.endpoint.url)
        assert self.endpoint.command is not None
        env, _ = self.endpoint.environment()
        env[ACT_VAR] = self.tag
        env[SERVER_VAR] = instance
        if self.boot is not None:
            env[BOOT_VAR] = self.boot
        argv = self.endpoint.command
        params = StdioServerParameters(command=argv[0], args=list(argv[1:]), env=env)
        assert self._devnull is not None
        return stdio_client(params, errlog=self._devnull)


async def _relay(
    read: Any, out: MemoryObjectSendStream[Any], dead: anyio.Event, close: anyio.Event
) -> None:
    """Pass the transport's messages to the session; their end marks the
    connection dead (and closes it) before the session even sees it."""
    try:
        async with out:
            async for item in read:
                await out.send(item)
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
        pass
    finally:
        dead.set()
        close.set()


async def _list_tools(session: Any) -> dict[str, Any]:
    names: dict[str, Any] = {}
    cursor: str | None = None
    for _ in range(1000):  # a server that pages for ever is not listed for ever
        params = None if cursor is None else PaginatedRequestParams(cursor=cursor)
        page = await session.list_tools(params=params)
        names.update((tool.name, tool.input_schema) for tool in page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return names


def _schema_refusal(schema: Any, arguments: Mapping[str, Any]) -> str | None:
    """Why ``arguments`` do not match the tool's listed ``inputSchema`` (None:
    they do, or the schema cannot be used). Checked before anything is sent,
    so that a mismatch is a definite ``failed``: once a request is sent, a
    JSON-RPC "invalid params" is no proof that nothing ran."""
    try:
        validator = jsonschema.validators.validator_for(schema)(schema)
        error = jsonschema.exceptions.best_match(validator.iter_errors(dict(arguments)))
    except Exception:  # noqa: BLE001 - a schema we cannot use decides nothing: send
        return None
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "(the arguments)"
    # the rule's keyword, never the value: args may hold personal data
    return f"the args do not match the tool's inputSchema at {where} ({error.validator!s:.40})"


def _describe(exc: BaseException) -> str:
    """``Type: message`` of the first error inside a task group's exception group."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"


def _kill_group(pid: int, instance: str) -> None:
    """SIGKILL the group led by ``pid``, when it is still our server run (its
    mark checked just before: a reaped pid may have been reused)."""
    if _marked_instance(pid) != instance:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _environ(pid: int) -> Iterator[bytes]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            data = f.read(_ENVIRON_MAX)
    except OSError:
        return
    yield from data.split(b"\0")


def _marked_instance(pid: int) -> str | None:
    prefix = f"{SERVER_VAR}=".encode()
    for item in _environ(pid):
        if item.startswith(prefix):
            return item[len(prefix) :].decode("ascii", "replace")
    return None


def _find_leader(instance: str) -> int | None:
    """The pid of the process that leads its group and carries the run mark."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    for name in names:
        if not name.isdigit():
            continue
        pid = int(name)
        if _marked_instance(pid) == instance:
            with contextlib.suppress(OSError):
                if os.getpgid(pid) == pid:
                    return pid
    return None


def _request(call: ToolCall) -> Any:
    """The ``tools/call`` request, with the fence key where the act puts it."""
    params: dict[str, Any] = {"name": call.tool, "arguments": dict(call.arguments)}
    if call.meta is not None:
        params["_meta"] = dict(call.meta)
    if call.idempotency_key is not None:
        params["idempotencyKey"] = call.idempotency_key
    return _FencedCall.model_validate({"method": "tools/call", "params": params})


class _FencedParams(CallToolRequestParams):
    """``tools/call`` params with the fence key as ``idempotencyKey``."""

    idempotency_key: str | None = None


class _FencedCall(CallToolRequest):
    params: _FencedParams


_CLIENT = Implementation(name="wardd", version="1")
