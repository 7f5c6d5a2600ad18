"""Configuration: TOML (stdlib ``tomllib``) → a frozen :class:`Config` (docs/configuration.md).

Every refusal names the file, the key by its full dotted path (for example
``acts."tool.run".adapter``) and the reason, in one line, so that
``wardd check-config`` and a failed start say exactly what to fix. Unknown
keys are refused rather than ignored: a typo in a safety setting must not
silently fall back to a default.

With no file the daemon runs on an embedded default (:data:`DEFAULT_TOML`):
XDG paths, network ``local``, 2 workers, act ``echo``. ``wardd
default-config`` prints it: every key with its default, commented.

Checks beyond the types and bounds:

- a ``cli`` act's program (``argv[0]``, and ``receipt_argv[0]``) must be an
  absolute path to an existing executable file, so that a typo is found by
  ``check-config`` and at start, not as a failed call later (the adapter
  still answers a program removed after the start with a failed call);
- a ``python`` act's ``callable`` and ``receipt`` are imported (the
  adapter's table parser does it), so a module that does not import or a
  function that is not there is a config error, not a failed call;
- an ``http`` act's secret header files (``headers.NAME = {file = ...}``) are
  read when its adapter is built, so ``check-config`` and a start refuse a
  missing or unreadable one, naming the key, never the content;
- ``shutdown_grace_s`` must be above 0: a zero grace would leave every call
  in progress unknown at every stop. To end a grace early, send a second
  SIGTERM.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import os
import re
import tomllib
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from wardd.adapters import ActSettings, AdapterConfigError, act_settings
from wardd.adapters._config import seconds_problem
from wardd.protocol import DEFAULT_MAX_FRAME, MAX_MAX_FRAME, MIN_MAX_FRAME, is_id
from wardd.protocol import default_socket_path as _default_socket_path

__all__ = [
    "DEFAULT_TOML",
    "Config",
    "ConfigError",
    "TracingConfig",
    "load_config",
    "loopback_listen",
    "parse_config",
    "read_toml",
]

DEFAULT_TOML = """\
# wardd configuration: every key with its default value (docs/configuration.md).
# This is also the embedded default, used when `wardd run` gets no --config.
# Check a file with `wardd check-config PATH`.

# The network name signed into every request; clients must use the same one.
network = "local"

# The Unix socket (default $XDG_RUNTIME_DIR/wardd/wardd.sock, or
# /tmp/wardd-<uid>/wardd/wardd.sock without XDG_RUNTIME_DIR) and the SQLite
# database (default $XDG_STATE_HOME/wardd/wardd.db, or
# ~/.local/state/wardd/wardd.db). Absolute paths; ~ is expanded.
# socket = "/run/user/1000/wardd/wardd.sock"
# database = "/home/me/.local/state/wardd/wardd.db"

# Workers, each with its own thread (w0, w1, ...): 1 to 256.
workers = 2

# Uids allowed to talk to the daemon besides its own (they also need file
# access to the socket).
allowed_uids = []

# Seconds a prepared dispatch token stays usable.
token_ttl_s = 60

# The largest frame in bytes, either way (131072 to 1073741824).
max_frame = 1048576

# Seconds a stop waits for act calls in progress (above 0). Keep the systemd
# unit's TimeoutStopSec above it.
shutdown_grace_s = 30

# Connection and per-connection request limits (at least 1).
max_connections = 4096
max_in_flight = 256

# Log level of the lines on stderr: debug, info, warning or error.
log_level = "info"
# Their format: "json" (one object per line), "text" (readable key=value
# lines, the same fields), or "auto": text when stderr is a terminal, JSON
# otherwise. Under journald each line also gets its priority prefix.
log_format = "auto"

# Retention (docs/operations.md): whole seconds a finished (consumed or
# cancelled) op keeps its records before it is pruned to a tombstone, which
# keeps its id idempotent for ever; 0 keeps every finished op for ever.
retention_s = 2592000
# Whole seconds between two looks for prunable ops (at least 1).
prune_interval_s = 60

# A program run, never through a shell, when an attempt becomes unknown, when a
# receipt resolves one, and when a start finds the previous boot did not stop
# cleanly: one JSON object on its stdin (docs/operations.md, "Notify hook").
# argv[0] is an absolute path to an executable. Empty: no hook.
notify_argv = []
# Seconds a hook may run; past it its process group is killed and the event dropped.
notify_timeout_s = 10

# Serve GET /metrics (Prometheus) over HTTP at this address, e.g.
# "127.0.0.1:9469" (port 0: any free one, logged). Loopback addresses only:
# there is no authentication. Empty: not served (`wardctl metrics` always is).
metrics_listen = ""

# Acts besides the built-in `echo` (which returns its args). Examples:
#
# [acts."notes.append"]          # one line "<neuron>/<op>/<attempt>\\t<hex args>\\n" per call
# adapter = "file.append"
# path = "/home/me/notes.log"
#
# [acts."tool.run"]              # runs a program; args on its stdin
# adapter = "cli"
# argv = ["/usr/bin/python3", "/opt/tool.py"]   # argv[0]: an absolute, executable path
# max_arg_bytes = 65536          # 1 to max_frame
# no_effect_exits = [2]          # exit statuses that mean "nothing happened" -> failed
# timeout_s = 600                # optional: past it the process group is killed -> unknown
# env = { API_TOKEN = { file = "/run/secrets/token" } }   # a secret: read per call, redacted
# receipt_argv = ["/opt/tool-receipt"]   # optional: prints executed/not_executed/unknown
#
# [acts."crm.create"]            # calls a Python function of yours in the daemon's process
# adapter = "python"
# callable = "mytools.crm:create"   # module:function, imported at start; gets the ActRequest
# receipt = "mytools.crm:receipt"   # optional: key -> executed/not_executed/unknown
# python_path = ["/opt/mytools"]    # optional: absolute paths put before sys.path
# max_arg_bytes = 65536
# [acts."pay.charge"]            # one HTTP request per call; args are the body
# adapter = "http"
# url = "https://api.example.com/v1/charges"   # http or https; never from args
# method = "POST"
# headers = { "Content-Type" = "application/json", Authorization = { file = "/run/secrets/pay" } }
#                                # {file = ...}: a secret, read at start and per call, redacted
# idempotency_header = "Idempotency-Key"       # carries the fence key; "" sends none
# idempotency_format = "key"     # "key" = <neuron>/<op>/<attempt>; "uuid5" = a UUIDv5 of it
# timeout_s = 30                 # the whole call; past it -> unknown
# no_effect_statuses = [400, 401, 403, 404, 405, 415, 422]   # -> failed; other non-2xx -> unknown
# receipt_url = "https://api.example.com/v1/charges/by-key/{key}"   # optional: a GET by key:
#                                # 200 -> executed, 404 -> not_executed, else unknown
# receipt = "replay"             # instead of receipt_url, for an API with no lookup by key
#                                # (Stripe-style): send the same request, same key, again:
#                                # 2xx -> executed, no_effect_statuses -> not_executed, else unknown
# replay_window_s = 86400        # required with replay: how long the API keeps a key; a claim
#                                # older than this is never sent again (-> unknown)
# max_response_bytes = 983040    # default max_frame - 65536; the body beyond is cut (truncated)
#
# [acts."gh.create_issue"]       # one tools/call of another MCP server's tool per call
# adapter = "mcp"
# command = ["/usr/local/bin/github-mcp", "--stdio"]   # a stdio server, started and kept by wardd;
# # url = "http://127.0.0.1:8931/mcp"                  # or a streamable HTTP server (one of them)
# tool = "create_issue"          # the server's tool; args are its arguments (a JSON object)
# idempotency = "meta"           # the fence key in _meta["wardd/idempotency_key"] and
#                                # params.idempotencyKey; "argument:NAME": also as that argument;
#                                # "none": not sent
# env = { GITHUB_TOKEN = { file = "/run/secrets/gh" } }   # stdio only; {file = ...}: a secret
# timeout_s = 60                 # the whole call; past it -> unknown (before sending: failed)
# tool_errors = "unknown"        # a result with isError: true -> unknown; "failed": definite
# receipt_tool = "find_issue_by_key"   # optional: called with {"key": <fence key>}, answers
#                                # {"status": "executed", "value": …} or {"status": "not_executed"}
# max_arg_bytes = 65536

# Traces (docs/operations.md, "Traces"): a span per dispatch and per recovery
# step, exported in batches over OTLP/HTTP (protobuf) by a thread of their own.
# "otlp" needs the optional packages: pip install 'wardd[otel]'.
[tracing]
exporter = "none"                               # "none": nothing is loaded or costs; or "otlp"
endpoint = "http://127.0.0.1:4318/v1/traces"    # an http:// or https:// URL
service_name = "wardd"                          # the spans' service.name
"""

LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("auto", "json", "text")

DEFAULT_RETENTION_S = 2_592_000  # 30 days (contract §3.9)
MAX_SECONDS_KEY = 2**32 - 1  # ~136 years: anything longer is a typo
_NETWORK_RE = re.compile(r"[A-Za-z0-9._:-]{1,64}")
_TOP_KEYS = {
    "network",
    "socket",
    "database",
    "workers",
    "allowed_uids",
    "token_ttl_s",
    "max_frame",
    "shutdown_grace_s",
    "acts",
    "max_connections",
    "max_in_flight",
    "log_level",
    "log_format",
    "notify_argv",
    "notify_timeout_s",
    "metrics_listen",
    "retention_s",
    "prune_interval_s",
    "tracing",
}
TRACING_EXPORTERS = ("none", "otlp")
DEFAULT_TRACES_ENDPOINT = "http://127.0.0.1:4318/v1/traces"
# what `exporter = "otlp"` imports (the `otel` extra): checked by name, never imported here
_OTEL_MODULES = ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http")


class ConfigError(Exception):
    """A refused configuration: ``<file>: <key>: <reason>``."""

    def __init__(self, file: str, key: str, reason: str) -> None:
        self.file = file
        self.key = key
        self.reason = reason
        super().__init__(f"{file}: {key}: {reason}" if key else f"{file}: {reason}")


@attrs.frozen
class ActConfig:
    """One ``[acts."<tag>"]`` table, as written and validated once into its
    adapter's settings (the start builds the adapter from them, once)."""

    tag: str
    table: Mapping[str, Any]
    settings: ActSettings


@attrs.frozen
class TracingConfig:
    """The ``[tracing]`` table (docs/operations.md, "Traces")."""

    exporter: str = "none"
    endpoint: str = DEFAULT_TRACES_ENDPOINT
    service_name: str = "wardd"

    @property
    def enabled(self) -> bool:
        return self.exporter != "none"


@attrs.frozen
class Config:
    source: str
    network: str
    socket: Path
    socket_is_default: bool
    database: Path
    workers: int
    allowed_uids: tuple[int, ...]
    token_ttl_s: float
    max_frame: int
    shutdown_grace_s: float
    max_connections: int
    max_in_flight: int
    acts: tuple[ActConfig, ...]
    log_level: str = "info"
    log_format: str = "auto"
    notify_argv: tuple[str, ...] = ()
    notify_timeout_s: float = 10.0
    metrics_listen: tuple[str, int] | None = None  # (loopback host, port)
    database_is_default: bool = False
    retention_s: int = DEFAULT_RETENTION_S  # 0 keeps every finished op for ever
    prune_interval_s: int = 60
    tracing: TracingConfig = TracingConfig()


def _xdg(var: str, fallback: str) -> Path:
    value = os.environ.get(var)
    if value and os.path.isabs(value):
        return Path(value)
    return Path.home() / fallback


def default_socket_path() -> Path:
    return Path(_default_socket_path())


def default_database_path() -> Path:
    return _xdg("XDG_STATE_HOME", ".local/state") / "wardd" / "wardd.db"


def _quote(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else '"' + key + '"'


def _dotted(key: str) -> str:
    """An adapter's key as a dotted path, each part quoted as needed: a part an
    adapter already quoted (``headers."X-Api-Key".file``) is kept as it is, and
    list indices stay outside the quotes (``python_path[0]``)."""
    if '"' not in key:
        return _indexed(key)
    parts = re.findall(r'"[^"]*"|[^.]+', key)
    return ".".join(p if p.startswith('"') else _indexed(p) for p in parts)


def _indexed(key: str) -> str:
    match = re.fullmatch(r"(.+?)((?:\[[0-9]+\])*)", key)
    return _quote(key) if match is None else _quote(match[1]) + match[2]


def _uint(file: str, key: str, value: Any, *, minimum: int = 0, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(file, key, f"must be an integer, not {type(value).__name__}")
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"between {minimum} and {maximum}" if maximum is not None else f"at least {minimum}"
        raise ConfigError(file, key, f"must be {bound}, not {value}")
    return value


def _seconds(file: str, key: str, value: Any) -> float:
    problem = seconds_problem(value)
    if problem is not None:
        raise ConfigError(file, key, problem)
    return float(value)


def _path(file: str, key: str, value: Any) -> Path:
    if not isinstance(value, str) or not value:
        raise ConfigError(file, key, "must be a non-empty path string")
    if "\x00" in value:
        raise ConfigError(file, key, "must not contain NUL")
    p = Path(os.path.expanduser(value))
    if not p.is_absolute():
        raise ConfigError(file, key, f"must be an absolute path, not {value!r}")
    return p


def parse_config(data: Mapping[str, Any], source: str) -> Config:
    """Validate a parsed TOML document; raises :class:`ConfigError`.

    The keys are checked in a fixed order (the first error is the one
    reported): unknown keys, then where the daemon lives, its limits, its
    logs and pruning, and last its acts."""
    for key in data:
        if key not in _TOP_KEYS:
            raise ConfigError(source, _quote(key), "unknown key")
    places = _places(data, source)
    limits = _limits(data, source)
    rest = _logs_and_upkeep(data, source)
    acts = _acts(data, source, limits["max_frame"])
    return Config(source=source, **places, **limits, **rest, acts=acts)


def _places(data: Mapping[str, Any], source: str) -> dict[str, Any]:
    """network, socket and database (and whether the last two are the defaults)."""
    network = data.get("network", "local")
    if not isinstance(network, str) or not _NETWORK_RE.fullmatch(network):
        raise ConfigError(source, "network", "must be 1-64 characters of [A-Za-z0-9._:-]")
    socket_is_default = "socket" not in data
    socket = default_socket_path() if socket_is_default else _path(source, "socket", data["socket"])
    if len(os.fsencode(str(socket))) > 107:
        raise ConfigError(source, "socket", "path is longer than a Unix socket allows (107 bytes)")
    database = (
        default_database_path()
        if "database" not in data
        else _path(source, "database", data["database"])
    )
    return {
        "network": network,
        "socket": socket,
        "socket_is_default": socket_is_default,
        "database": database,
        "database_is_default": "database" not in data,
    }


def _limits(data: Mapping[str, Any], source: str) -> dict[str, Any]:
    """workers, allowed_uids, and the bounds on tokens, frames, shutdown and connections."""
    workers = _uint(source, "workers", data.get("workers", 2), minimum=1, maximum=256)
    uids_raw = data.get("allowed_uids", [])
    if not isinstance(uids_raw, list):
        raise ConfigError(source, "allowed_uids", "must be a list of uids")
    uids = tuple(
        _uint(source, f"allowed_uids[{i}]", u, maximum=2**32 - 1) for i, u in enumerate(uids_raw)
    )
    token_ttl_s = _seconds(source, "token_ttl_s", data.get("token_ttl_s", 60))
    max_frame = _uint(
        source,
        "max_frame",
        data.get("max_frame", DEFAULT_MAX_FRAME),
        minimum=MIN_MAX_FRAME,
        maximum=MAX_MAX_FRAME,
    )
    grace_raw = data.get("shutdown_grace_s", 30)
    if grace_raw == 0 and not isinstance(grace_raw, bool):
        raise ConfigError(
            source,
            "shutdown_grace_s",
            "must be above 0: a zero grace leaves every call in progress unknown at each "
            "stop (a second SIGTERM ends a grace early)",
        )
    return {
        "workers": workers,
        "allowed_uids": uids,
        "token_ttl_s": token_ttl_s,
        "max_frame": max_frame,
        "shutdown_grace_s": _seconds(source, "shutdown_grace_s", grace_raw),
        "max_connections": _uint(
            source, "max_connections", data.get("max_connections", 4096), minimum=1
        ),
        "max_in_flight": _uint(source, "max_in_flight", data.get("max_in_flight", 256), minimum=1),
    }


def _logs_and_upkeep(data: Mapping[str, Any], source: str) -> dict[str, Any]:
    """Logging, pruning, the notify hook and the metrics listener."""
    log_level = data.get("log_level", "info")
    if log_level not in LOG_LEVELS:
        raise ConfigError(source, "log_level", f"must be one of {', '.join(LOG_LEVELS)}")
    log_format = data.get("log_format", "auto")
    if log_format not in LOG_FORMATS:
        raise ConfigError(source, "log_format", f"must be one of {', '.join(LOG_FORMATS)}")
    # contract §3.9: whole seconds; 0 keeps every finished op for ever
    retention_s = _uint(
        source,
        "retention_s",
        data.get("retention_s", DEFAULT_RETENTION_S),
        maximum=MAX_SECONDS_KEY,
    )
    prune_interval_s = _uint(
        source,
        "prune_interval_s",
        data.get("prune_interval_s", 60),
        minimum=1,
        maximum=MAX_SECONDS_KEY,
    )
    return {
        "log_level": log_level,
        "log_format": log_format,
        "retention_s": retention_s,
        "prune_interval_s": prune_interval_s,
        "notify_argv": _notify_argv(source, data.get("notify_argv", [])),
        "notify_timeout_s": _seconds(source, "notify_timeout_s", data.get("notify_timeout_s", 10)),
        "metrics_listen": loopback_listen(
            source, "metrics_listen", data.get("metrics_listen", ""), why="the metrics"
        ),
        "tracing": _tracing(source, data.get("tracing", {})),
    }


def _tracing(source: str, table: Any) -> TracingConfig:
    """``[tracing]``: the exporter, its endpoint (an http(s) URL) and the service name."""
    if not isinstance(table, Mapping):
        raise ConfigError(source, "tracing", "must be a table")
    for key in table:
        if key not in ("exporter", "endpoint", "service_name"):
            raise ConfigError(source, f"tracing.{_quote(key)}", "unknown key")
    exporter = table.get("exporter", "none")
    if exporter not in TRACING_EXPORTERS:
        raise ConfigError(source, "tracing.exporter", 'must be "none" or "otlp"')
    endpoint = table.get("endpoint", DEFAULT_TRACES_ENDPOINT)
    if not isinstance(endpoint, str) or (why := _not_http_url(endpoint)) is not None:
        raise ConfigError(source, "tracing.endpoint", why or "must be a string")
    name = table.get("service_name", "wardd")
    if not isinstance(name, str) or not name.strip() or len(name) > 255:
        raise ConfigError(
            source, "tracing.service_name", "must be a non-empty string (at most 255)"
        )
    if exporter == "otlp":
        missing = [m for m in _OTEL_MODULES if not _importable(m)]
        if missing:
            raise ConfigError(
                source,
                "tracing.exporter",
                f"\"otlp\" needs {missing[0]}: pip install 'wardd[otel]'",
            )
    return TracingConfig(exporter, endpoint, name)


def _not_http_url(value: str) -> str | None:
    """Why ``value`` is not an http:// or https:// URL with a host (None: it is one)."""
    try:
        url = urllib.parse.urlsplit(value)
        url.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError:
        return f"{value[:200]!r} is not a URL"
    if url.scheme not in ("http", "https") or not url.hostname:
        return f"{value[:200]!r}: must be an http:// or https:// URL with a host"
    if any(c.isspace() or ord(c) < 32 for c in value):
        return "must not contain spaces or control characters"
    return None


def _importable(module: str) -> bool:
    """Whether ``module`` can be imported, without importing it (its parents are)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _acts(data: Mapping[str, Any], source: str, max_frame: int) -> tuple[ActConfig, ...]:
    """The configured acts, each table validated into its adapter's settings."""
    acts_raw = data.get("acts", {})
    if not isinstance(acts_raw, dict):
        raise ConfigError(source, "acts", "must be a table of act tables")
    acts: list[ActConfig] = []
    for tag, table in acts_raw.items():
        where = f"acts.{_quote(tag)}"
        if not is_id(tag):
            raise ConfigError(source, where, "act tags are 1-128 characters of [A-Za-z0-9._:-]")
        if tag == "echo":
            raise ConfigError(source, where, "'echo' is built in and cannot be configured")
        if not isinstance(table, dict):
            raise ConfigError(source, where, "must be a table")
        try:
            settings = act_settings(tag, table, max_frame=max_frame)
        except AdapterConfigError as exc:
            raise ConfigError(
                source, f"{where}.{_dotted(exc.key)}" if exc.key else where, exc.reason
            ) from None
        _check_programs(source, where, table)
        acts.append(ActConfig(tag=tag, table=dict(table), settings=settings))
    return tuple(acts)


def _check_programs(source: str, where: str, table: Mapping[str, Any]) -> None:
    """A ``cli`` act's programs, and an ``mcp`` act's stdio server, are
    absolute paths to existing executable files."""
    keys = {"cli": ("argv", "receipt_argv"), "mcp": ("command",)}.get(str(table.get("adapter")))
    for key in keys or ():
        if key not in table:
            continue
        program = table[key][0]  # a non-empty list of strings: the adapter checked it
        why = _not_executable(program)
        if why:
            raise ConfigError(source, f"{where}.{key}[0]", f"{program!r} {why}")


def _notify_argv(source: str, value: Any) -> tuple[str, ...]:
    """``notify_argv``: empty (no hook) or strings whose first is an executable's absolute path."""
    if not isinstance(value, list) or not all(isinstance(x, str) and x for x in value):
        raise ConfigError(source, "notify_argv", "must be a list of non-empty strings")
    if value:
        why = _not_executable(value[0])
        if why:
            raise ConfigError(source, "notify_argv[0]", f"{value[0]!r} {why}")
    return tuple(value)


def loopback_listen(source: str, key: str, value: Any, *, why: str) -> tuple[str, int] | None:
    """``"host:port"`` (``"[::1]:port"`` for IPv6) with a loopback IP, or "" (None).

    `why` names what would be served without authentication (``"the
    metrics"``): the reason a non-loopback address is refused. ``wardd mcp
    --http`` is checked here too."""
    if not isinstance(value, str):
        raise ConfigError(source, key, 'must be a string "host:port" (or "" for none)')
    if not value:
        return None
    host, sep, port = value.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        raise ConfigError(
            source, key, f"{value!r}: the host must be a loopback IP address, such as 127.0.0.1"
        ) from None
    if not ip.is_loopback:
        raise ConfigError(
            source, key, f"{value!r} is not a loopback address: {why} have no authentication"
        )
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(source, key, f"{value!r}: the port must be a number from 0 to 65535")
    return str(ip), int(port)


def _not_executable(program: str) -> str | None:
    if not os.path.isabs(program):
        return "is not an absolute path (no PATH search is made)"
    if not os.path.exists(program):
        return "does not exist"
    if not os.path.isfile(program):
        return "is not a file"
    if not os.access(program, os.X_OK):
        return "is not executable"
    return None


def load_config(path: str | os.PathLike[str] | None) -> Config:
    """Read and validate ``path`` (None: the embedded default)."""
    if path is None:
        return parse_config(tomllib.loads(DEFAULT_TOML), "<embedded default>")
    source = os.fspath(path)
    return parse_config(read_toml(source), source)


def read_toml(source: str) -> dict[str, Any]:
    """The TOML file ``source`` as a table; `ConfigError` (the file named,
    no key) when it cannot be read, is not UTF-8 or is not TOML."""
    try:
        with open(source, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise ConfigError(source, "", f"cannot read: {exc.strerror or exc}") from None
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(source, "", "not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(source, "", f"invalid TOML: {exc}") from None
