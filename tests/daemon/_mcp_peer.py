"""The MCP server the ``mcp`` act talks to in tests: a real one, written with the SDK's MCPServer.

Run as a script (never imported by the daemon): over stdio, started by the
daemon from an act's ``command``, or over streamable HTTP on 127.0.0.1
(``--port-file``), started by a test. It records every ``tools/call`` it
receives (its raw params, ``_meta`` and ``idempotencyKey`` included) as
one JSON line in ``--record``, and keeps a ledger of the keys whose effect
it has had (``--ledger``, one key a line, fsynced), which its receipt tool
``find_by_key`` reads: a fresh server process answers for what an earlier
one did.

Tools:

- ``create(title)``: the effect (a ledger line), then ``{"id": ..., "title"}``;
- ``boom()``: a tool error (``isError: true``);
- ``slow(mode)``: marks ``started`` in ``--marks`` and waits; ``mode =
  "after"`` has its effect first and then waits for ever (a crash leaves it
  executed), ``"before"`` waits for the gate file ``<marks>/go`` first and
  has its effect only then (a crash leaves it not executed, and a server
  killed meanwhile never has it);
- ``leak()``: answers ``$PEER_TEST_SECRET`` in its content, then fails with it;
- ``soak(mode, delay)``: the crash soak's act: ``ok`` has its effect and
  answers, ``pre`` has it and answers after ``delay`` s, ``post`` waits
  ``delay`` s and then has it, ``error`` has it and answers a tool error;
- ``nested()``: has its effect, then raises the SDK's ``MCPError`` "invalid
  params" (``-32602``), as a nested request refused inside a tool does: the
  SDK's server answers it as the call's JSON-RPC error;
- ``find_by_key(key)``: ``{"status": "executed", "value": {"key": key}}``
  for a key in the ledger, else ``{"status": "not_executed"}``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError


def _append(path: Path, line: str) -> None:
    with open(path, "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def build(record: Path, ledger: Path, marks: Path | None) -> MCPServer:
    server = MCPServer("wardd-test-peer")

    def seen(ctx: Context, tool: str) -> str | None:
        params = dict(ctx.request_context.params or {})
        _append(record, json.dumps({"tool": tool, "params": params, "pid": os.getpid()}))
        meta = params.get("_meta") or {}
        key = meta.get("wardd/idempotency_key")
        return key if isinstance(key, str) else params.get("idempotencyKey")

    @server.tool()
    def create(ctx: Context, title: str = "", key: str | None = None) -> dict[str, Any]:
        """Create a thing once per fence key."""
        fence = seen(ctx, "create")
        _append(ledger, str(fence))
        return {"id": f"thing-{fence}", "title": title}

    @server.tool()
    def boom(ctx: Context) -> str:
        """Fail as a tool."""
        seen(ctx, "boom")
        raise ToolError("boom: the tool failed half-way")

    @server.tool()
    def slow(ctx: Context, mode: str = "after") -> dict[str, Any]:
        """Take long; see the module docstring."""
        fence = seen(ctx, "slow")
        assert marks is not None
        if mode == "after":
            _append(ledger, str(fence))
        (marks / f"started-{os.getpid()}").write_text(str(fence))
        while mode == "before" and not (marks / "go").exists():
            time.sleep(0.01)
        if mode == "before":
            _append(ledger, str(fence))
            return {"done": True}
        while True:
            time.sleep(1)

    @server.tool()
    def leak(ctx: Context) -> str:
        """Put the secret in a result's text (first call) and in an error (second)."""
        seen(ctx, "leak")
        secret = os.environ.get("PEER_TEST_SECRET", "")
        if (marks is not None) and (marks / "leaked").exists():
            raise ToolError(f"denied for {secret}")
        if marks is not None:
            (marks / "leaked").write_text("1")
        return f"you run with {secret}"

    @server.tool()
    def soak(ctx: Context, mode: str = "ok", delay: float = 0) -> dict[str, Any]:
        """The crash soak's act; see the module docstring."""
        fence = str(seen(ctx, "soak"))
        if mode == "post":
            time.sleep(delay)
        _append(ledger, fence)
        if mode == "pre":
            time.sleep(delay)
        if mode == "error":
            raise ToolError("failed after the effect")
        return {"key": fence}

    @server.tool()
    def nested(ctx: Context) -> dict[str, Any]:
        """The effect, then an "invalid params" error raised inside the tool."""
        _append(ledger, str(seen(ctx, "nested")))
        raise MCPError(-32602, "a nested request was refused")

    @server.tool()
    def find_by_key(ctx: Context, key: str) -> dict[str, Any]:
        """The receipt: was the key's effect had?"""
        seen(ctx, "find_by_key")
        done = ledger.read_text().split("\n") if ledger.exists() else []
        if key in done:
            return {"status": "executed", "value": {"key": key}}
        return {"status": "not_executed"}

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--record", type=Path, required=True)
    parser.add_argument("--ledger", type=Path, required=True)
    parser.add_argument("--marks", type=Path)
    parser.add_argument("--port-file", type=Path, help="serve streamable HTTP on 127.0.0.1")
    args = parser.parse_args()
    server = build(args.record, args.ledger, args.marks)
    if args.port_file is None:
        server.run("stdio")
        return
    import uvicorn  # here only: a stdio server starts without it, as the SDK's run does

    # the socket is ours from the bind to the end: a port freed and bound again
    # later could be taken meanwhile by another process of a shared machine
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)  # connections queue from now on, until uvicorn accepts them
    tmp = args.port_file.with_suffix(".tmp")
    tmp.write_text(str(sock.getsockname()[1]))
    os.replace(tmp, args.port_file)
    app = server.streamable_http_app(host="127.0.0.1")
    config = uvicorn.Config(app, log_level=server.settings.log_level.lower())
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    sys.exit(main())
