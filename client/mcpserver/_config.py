"""``mcp.toml``: TOML → a frozen :class:`McpConfig` (docs/configuration.md, "wardd mcp").

Refusals are the daemon's own (`wardd.daemon.config.ConfigError`): one line
naming the file, the key by its dotted path (``tools."pay.charge".key``) and
the reason; ``wardd mcp`` prints it and exits 78, as ``wardd check-config``
does. Unknown keys are refused, not ignored. Nothing here talks to the
daemon: whether the acts exist is checked at start, against the worker's
descriptor.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from wardd.client import default_key_path
from wardd.client._paths import socket_path
from wardd.daemon.config import ConfigError, read_toml
from wardd.protocol import is_id

__all__ = [
    "KEY_ARGUMENTS",
    "McpConfig",
    "ToolConfig",
    "http_token",
    "load_mcp_config",
    "parse_mcp_config",
]

KEY_ARGUMENTS = "arguments"
"""``key = "arguments"``: with no key given, the op id is a digest of the arguments."""

DEFAULT_WORKER = "w0"
DEFAULT_STEP_LIMIT = 1000
_TOP_KEYS = ("socket", "key", "prog", "worker", "step_limit", "http_token_file", "tools")
_TOOL_KEYS = ("description", "input_schema", "key")
_MAX_STEP_LIMIT = 2**63 - 1


@attrs.frozen
class ToolConfig:
    """One ``[tools."<act>"]`` table: the act exposed as a tool of the same name."""

    act: str
    description: str
    input_schema: Mapping[str, Any]
    key_from_arguments: bool


@attrs.frozen
class McpConfig:
    source: str
    socket: Path
    key: Path
    prog: str
    worker: str
    step_limit: int
    tools: tuple[ToolConfig, ...]
    http_token_file: Path | None = None  # required by --http (read at start)

    def tool(self, name: str) -> ToolConfig | None:
        """The tool of that name, or None."""
        return next((t for t in self.tools if t.act == name), None)


def load_mcp_config(path: str | os.PathLike[str]) -> McpConfig:
    """Read and validate ``path``; raises `ConfigError`."""
    source = os.fspath(path)
    return parse_mcp_config(read_toml(source), source)


def parse_mcp_config(data: Mapping[str, Any], source: str) -> McpConfig:
    """Validate a parsed document; the first error in key order is the one raised."""
    for name in data:
        if name not in _TOP_KEYS:
            raise ConfigError(source, _quote(name), "unknown key")
    prog = data.get("prog")
    if prog is None:
        raise ConfigError(source, "prog", "is required: the prog whose granted acts become tools")
    if not isinstance(prog, str) or not is_id(prog):
        raise ConfigError(source, "prog", "must be 1-128 characters of [A-Za-z0-9._:-]")
    worker = data.get("worker", DEFAULT_WORKER)
    if not isinstance(worker, str) or not is_id(worker):
        raise ConfigError(source, "worker", 'must be a worker id such as "w0"')
    step_limit = data.get("step_limit", DEFAULT_STEP_LIMIT)
    if isinstance(step_limit, bool) or not isinstance(step_limit, int):
        raise ConfigError(source, "step_limit", "must be an integer")
    if not 1 <= step_limit <= _MAX_STEP_LIMIT:
        raise ConfigError(source, "step_limit", f"must be at least 1, not {step_limit}")
    return McpConfig(
        source=source,
        socket=_file(source, "socket", data.get("socket"), socket_path()),
        key=_file(source, "key", data.get("key"), _key_default()),
        prog=prog,
        worker=worker,
        step_limit=step_limit,
        tools=_tools(source, data.get("tools")),
        http_token_file=(
            None
            if data.get("http_token_file") is None
            else _file(source, "http_token_file", data["http_token_file"], "")
        ),
    )


#: The shortest bearer token ``--http`` accepts (characters).
MIN_TOKEN = 32


def http_token(config: McpConfig) -> str:
    """The bearer token ``--http`` requires of every request, read from
    ``http_token_file``: a regular file only its owner can read or write
    (as a key file), holding one line of at least `MIN_TOKEN` visible ASCII
    characters; a file that does not exist is created so (64 random hex
    digits, mode 0600), for the host's config to copy. Raises `ConfigError`
    naming ``http_token_file``."""
    where = "http_token_file"
    path = config.http_token_file
    if path is None:
        raise ConfigError(
            config.source,
            where,
            "is required with --http: any local user can reach a loopback port, so every "
            "request must carry this file's token (Authorization: Bearer ...)",
        )
    try:
        _create_token(path)
        info = os.stat(path)
        with open(path, "rb") as f:
            raw = f.read(4097)
    except OSError as exc:
        raise ConfigError(config.source, where, f"cannot read {path}: {exc.strerror}") from None
    if not stat.S_ISREG(info.st_mode) or info.st_mode & 0o077:
        raise ConfigError(
            config.source, where, f"{path} must be a regular file of mode 0600 (chmod 600)"
        )
    token = raw.decode("ascii", "replace").strip()
    if len(token) < MIN_TOKEN or not all(33 <= ord(c) < 127 for c in token):
        raise ConfigError(
            config.source,
            where,
            f"{path} must hold one token of at least {MIN_TOKEN} visible ASCII characters "
            "(e.g. from: openssl rand -hex 32)",
        )
    return token


def _create_token(path: Path) -> None:
    """Write a fresh token to `path` (mode 0600) unless the file exists."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32) + "\n")


def _key_default() -> str:
    return os.environ.get("WARDD_KEY") or default_key_path()


def _file(source: str, key: str, value: Any, default: str) -> Path:
    """An absolute path (``~`` expanded); `default` when the key is left out."""
    if value is None:
        return Path(default)
    if not isinstance(value, str) or not value or "\x00" in value:
        raise ConfigError(source, key, "must be a non-empty path string")
    path = Path(os.path.expanduser(value))
    if not path.is_absolute():
        raise ConfigError(source, key, f"must be an absolute path, not {value!r}")
    if key == "socket" and len(os.fsencode(str(path))) > 107:
        raise ConfigError(source, key, "path is longer than a Unix socket allows (107 bytes)")
    return path


def _tools(source: str, value: Any) -> tuple[ToolConfig, ...]:
    if value is None:
        raise ConfigError(source, "tools", 'is required: one [tools."<act>"] table per tool')
    if not isinstance(value, dict) or not value:
        raise ConfigError(source, "tools", 'must hold at least one [tools."<act>"] table')
    return tuple(_tool(source, act, table) for act, table in value.items())


def _tool(source: str, act: str, table: Any) -> ToolConfig:
    where = f"tools.{_quote(act)}"
    if not is_id(act):
        raise ConfigError(source, where, "act tags are 1-128 characters of [A-Za-z0-9._:-]")
    if ":" in act:
        # MCP tool names are [A-Za-z0-9._-]: a host would refuse or rename the tool
        raise ConfigError(source, where, "an MCP tool name cannot hold ':'")
    if not isinstance(table, dict):
        raise ConfigError(source, where, "must be a table")
    for name in table:
        if name not in _TOOL_KEYS:
            raise ConfigError(source, f"{where}.{_quote(name)}", "unknown key")
    description = table.get("description")
    if not isinstance(description, str) or not description.strip():
        raise ConfigError(
            source, f"{where}.description", "is required: a non-empty string the model reads"
        )
    key = table.get("key")
    if key is not None and key != KEY_ARGUMENTS:
        raise ConfigError(
            source,
            f"{where}.key",
            f'must be "{KEY_ARGUMENTS}" (or left out: a call without an idempotency key '
            "gets a fresh op id)",
        )
    return ToolConfig(
        act=act,
        description=description,
        input_schema=_schema(source, f"{where}.input_schema", table.get("input_schema")),
        key_from_arguments=key == KEY_ARGUMENTS,
    )


def _schema(source: str, where: str, value: Any) -> Mapping[str, Any]:
    """A JSON Schema (draft 2020-12 unless it names another) for an object."""
    from jsonschema import exceptions, validators

    if value is None:
        raise ConfigError(source, where, "is required: the JSON Schema of the tool's arguments")
    if not isinstance(value, dict) or value.get("type") != "object":
        raise ConfigError(source, where, 'must be a table with type = "object"')
    try:
        validators.validator_for(value).check_schema(value)
    except exceptions.SchemaError as exc:
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{_quote(str(p))}" for p in exc.path)
        raise ConfigError(source, where + path, f"not a valid JSON Schema: {exc.message}") from None
    unresolved = unresolvable_ref(value)
    if unresolved is not None:
        raise ConfigError(
            source,
            where,
            f"$ref {unresolved!r} cannot be resolved within the schema (only references "
            "into the schema itself are followed; nothing is fetched)",
        )
    return value


def unresolvable_ref(schema: Mapping[str, Any]) -> str | None:
    """The first ``$ref`` of `schema` that does not resolve within the schema
    itself (None: every one does). Nothing is fetched: a remote reference is
    unresolvable."""
    from referencing import Registry
    from referencing.exceptions import Unresolvable
    from referencing.jsonschema import specification_with

    spec = specification_with(
        str(schema.get("$schema", "https://json-schema.org/draft/2020-12/schema"))
    )
    resolver = Registry().resolver_with_root(spec.create_resource(schema))
    for ref in _refs(schema):
        try:
            resolver.lookup(ref)
        except Unresolvable:
            return ref
    return None


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def _quote(key: str) -> str:
    plain = key and all(c.isascii() and (c.isalnum() or c in "_-") for c in key)
    return key if plain else '"' + key.replace('"', '\\"') + '"'
