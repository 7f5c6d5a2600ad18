"""wardd.client.mcpserver: ``wardd mcp``, an MCP server whose tools are guarded acts.

A client process (it talks to the daemon as any client does) built on the
official MCP Python SDK, started by an MCP host over stdio or listening on
loopback for streamable HTTP. The manual is docs/recipes.md ("Guard the
tools of an MCP host") and docs/configuration.md ("wardd mcp").

- `_config`: ``mcp.toml`` → a frozen `McpConfig` (the daemon's config errors);
- `_keys`: which op a tool call is (its idempotency key) and its args (pure);
- `_results`: what the model sees for each outcome (pure);
- `_guard`: the set-up at start, placement, one guarded call per tool call;
- `_server`: the SDK server and its two transports;
- `_cli`: ``wardd mcp --config PATH [--http HOST:PORT]``.

The SDK is an extra (``pip install 'wardd[mcp]'``): the daemon and the client
library never import this package.
"""

from __future__ import annotations

from ._cli import run_mcp

__all__ = ["run_mcp"]
