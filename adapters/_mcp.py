"""The ``mcp`` built-in adapter: one ``tools/call`` of another MCP server's tool per call (§6).

Table keys: ``adapter``, ``command`` or ``url`` (one of them), ``tool``
(required), ``idempotency``, ``env`` (``command`` only), ``timeout_s``,
``receipt_tool``, ``tool_errors``, ``max_arg_bytes``.

Built on the official MCP SDK's client (``mcp``): its stdio and streamable
HTTP transports and its ``ClientSession``; the connection is kept by
`wardd.adapters._mcp_link`, which also says how the server is started,
restarted and stopped.

The args are a JSON object, given as a CBOR map or as UTF-8 JSON bytes
(empty args are ``{}``), passed as the tool's ``arguments``; anything else
is `DefiniteFailure` before anything is sent.

The fence key (the idempotency key ``<neuron>/<op>/<attempt>``) travels
with ``idempotency = "meta"`` (the default) in the request's
``_meta["wardd/idempotency_key"]`` and in ``params.idempotencyKey``; with
``"argument:NAME"`` in both of those and as the tool argument ``NAME`` (the
args may not hold it); with ``"none"`` nowhere.
With tracing on, ``_meta`` also carries the dispatch span's
``traceparent`` (and ``tracestate``), whatever ``idempotency`` says.

How a call ends (`judge`):

- nothing was sent — the server could not be started or connected, the
  session could not be initialized, the tool is not in the server's
  ``tools/list``, a secret file could not be read, ``timeout_s`` passed
  before the request went out, the adapter was stopped — `DefiniteFailure`;
- args that do not match the tool's listed ``inputSchema`` → `DefiniteFailure`,
  checked before the request is sent;
- a JSON-RPC error answered after the request was sent → `OutcomeUnknown`,
  whatever its code: the SDK's own server answers an ``MCPError`` raised
  inside a tool (``-32602`` from a nested request, after the tool's effect)
  as the call's error, and the SDK's client makes ``-32601`` out of a bare
  HTTP 404, read without its body; with ``tool_errors = "failed"`` the
  "not executed" codes (``-32601``, ``-32602``) are `DefiniteFailure`, as the
  operator declares;
- a result whose ``resultType`` is not ``complete`` (``input_required``, a
  task) → `OutcomeUnknown`: the call has not ended;
- a complete result with ``isError: false`` → succeeded, with its
  ``structuredContent``, or its ``content`` list when there is none;
- a complete result with ``isError: true`` → `OutcomeUnknown` (a tool error
  may follow a partial effect), or `DefiniteFailure` with ``tool_errors =
  "failed"`` (the operator declares the tool's errors definite);
- once the request's write began, anything else — another JSON-RPC error,
  ``timeout_s`` passing, the server's process or the connection ending, a
  response cut or not a valid result — `OutcomeUnknown`; an ``abort``
  (which closes the session, killing a stdio server's process group) →
  `CallAborted`.

The receipt (``receipt_tool``) calls that tool with ``{"key": <fence
key>}``, never the original tool: a result whose structured content is
``{"status": "executed", "value": …}`` → ``executed``; ``{"status":
"not_executed"}`` → ``not_executed``; anything else, an error or a timeout
→ ``unknown``. The adapter declares ``in_process``, so its receipts run at
start and on ``check_receipts`` and a ``not_executed`` is applied: the
receipt tool must answer it only for a key whose call has had no effect
and never will. The claim records the server, the tool and the key's
placement; a claim made with another server or tool, or with
``idempotency = "none"``, gets at most ``executed``. An attempt never
claimed never reached the server: ``not_executed`` without asking.

Secrets (``env.NAME = {file = "/path"}``) are read at each start of the
stdio server and redacted (``[redacted]``) from every value and error text
the adapter hands back; the server's stderr is discarded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Self

import attrs
import cbor2

from . import _config, _redact
from ._base import (
    ActRequest,
    Adapter,
    AdapterConfigError,
    BaseAdapter,
    CallAborted,
    DefiniteFailure,
    OutcomeUnknown,
    Receipt,
)
from ._cli import EnvValue, _base_environment, _parse_env, read_env_secret
from ._config import SecretFile
from ._mcp_link import Endpoint, Link, Reply, ToolCall

__all__ = ["McpAdapter", "decode_args", "judge"]

_KEYS = (
    "adapter",
    "command",
    "url",
    "tool",
    "idempotency",
    "env",
    "timeout_s",
    "receipt_tool",
    "tool_errors",
    "max_arg_bytes",
)
META_KEY = "wardd/idempotency_key"
DEFAULT_TIMEOUT_S = 60.0
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
NOT_EXECUTED_CODES = frozenset({METHOD_NOT_FOUND, INVALID_PARAMS})
_MESSAGE_CHARS = 256
_ARGUMENT = re.compile(r"argument:([A-Za-z_][A-Za-z0-9_.-]*)\Z")


# -- pure parts ----------------------------------------------------------------------------


def decode_args(args: bytes) -> dict[str, Any]:
    """The tool's ``arguments`` from the act's args (module docstring); `DefiniteFailure`."""
    if not args.strip():
        return {}
    if 0xA0 <= args[0] <= 0xBF:  # a CBOR map (major type 5); JSON's "{" is 0x7b
        try:
            value = cbor2.loads(args)
        except Exception as exc:  # noqa: BLE001 - bad input, nothing sent
            raise DefiniteFailure(f"args are not a valid CBOR map ({type(exc).__name__})") from None
    else:
        try:
            value = json.loads(args.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise DefiniteFailure("args are neither a CBOR map nor a JSON object") from None
    if not isinstance(value, dict):
        raise DefiniteFailure("args must be a JSON object (a CBOR map or JSON bytes)")
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        raise DefiniteFailure("args hold values JSON cannot carry (bytes, tags, NaN)") from None
    return value


def judge(reply: Reply, tag: str, *, tool_errors: str = "unknown") -> Any:
    """The attempt's outcome from a call's `Reply` (module docstring): a value or a raise."""
    if not reply.listed:
        raise DefiniteFailure(
            f"{tag}: the tool is not in the server's tools/list; nothing was sent"
        )
    if reply.aborted:
        raise CallAborted(f"{tag}: {reply.why}")
    if not reply.sent:
        raise DefiniteFailure(f"{tag}: {reply.why}; nothing was sent")
    if reply.timed_out:
        raise OutcomeUnknown(f"{tag}: {reply.why}; the server may have acted")
    if reply.error_code in NOT_EXECUTED_CODES and tool_errors == "failed":
        raise DefiniteFailure(f"{tag}: {reply.why} (declared definite)")
    result = reply.result
    if result is None:
        raise OutcomeUnknown(f"{tag}: {reply.why} after the request was sent")
    if result.get("resultType", "complete") != "complete":
        # input_required, a task: the call has not ended, whatever it holds
        raise OutcomeUnknown(
            f"{tag}: the result is not complete (resultType {str(result['resultType'])[:40]!r})"
        )
    if result.get("isError") is True:
        said = _excerpt(result)
        if tool_errors == "failed":
            raise DefiniteFailure(f"{tag}: the tool answered an error (declared definite){said}")
        raise OutcomeUnknown(f"{tag}: the tool answered an error{said}")
    structured = result.get("structuredContent")
    return structured if structured is not None else result.get("content", [])


def receipt_of(result: Mapping[str, Any] | None, why: str) -> Receipt:
    """A receipt tool's answer from its result (module docstring)."""
    if result is None:
        return Receipt("unknown", detail=f"receipt tool: {why}")
    if result.get("isError") is True:
        return Receipt("unknown", detail=f"receipt tool answered an error{_excerpt(result)}")
    answer = result.get("structuredContent")
    status = answer.get("status") if isinstance(answer, Mapping) else None
    if status == "executed":
        assert isinstance(answer, Mapping)
        return Receipt("executed", answer.get("value"))
    if status == "not_executed":
        return Receipt("not_executed")
    return Receipt("unknown", detail="receipt tool gave no recognised status")


def _excerpt(result: Mapping[str, Any]) -> str:
    for block in result.get("content") or []:
        if isinstance(block, Mapping) and isinstance(block.get("text"), str):
            return f": {block['text'][:_MESSAGE_CHARS]!r}"
    return ""


def redact_value(value: Any, secrets: Sequence[bytes]) -> Any:
    """``value`` with every secret redacted from its strings (map keys included)."""
    if not secrets:
        return value
    if isinstance(value, str):
        return _redact.redact_text(value, secrets)
    if isinstance(value, list):
        return [redact_value(v, secrets) for v in value]
    if isinstance(value, dict):
        return {redact_value(k, secrets): redact_value(v, secrets) for k, v in value.items()}
    return value


# -- configuration -------------------------------------------------------------------------


def _idempotency(value: object) -> tuple[str, str | None]:
    if value in ("meta", "none"):
        return str(value), None
    match = _ARGUMENT.match(value) if isinstance(value, str) else None
    if match is None:
        raise AdapterConfigError(
            "idempotency", 'must be "meta", "none" or "argument:NAME" (NAME a tool argument)'
        )
    return "argument", match.group(1)


def _url(value: object) -> str:
    from ._http import Target

    url = _config.text(value, "url", what="an http:// or https:// URL string")
    Target.parse(url, "url")
    return url


# -- the adapter ---------------------------------------------------------------------------


@attrs.frozen
class McpSettings:
    """An ``mcp`` act's table, validated (nothing is started)."""

    tag: str
    tool: str
    max_arg_bytes: int
    command: tuple[str, ...] | None = None
    url: str | None = None
    idempotency: str = "meta"
    argument: str | None = None
    env: tuple[tuple[str, EnvValue], ...] = ()
    timeout_s: float = DEFAULT_TIMEOUT_S
    receipt_tool: str | None = None
    tool_errors: str = "unknown"

    @classmethod
    def from_table(cls, tag: str, table: Mapping[str, Any], *, max_frame: int) -> Self:
        """Validate the act's table (nothing is started); raises `AdapterConfigError`."""
        _config.refuse_unknown_keys(table, _KEYS)
        if ("command" in table) == ("url" in table):
            raise AdapterConfigError(
                "command", "exactly one of command (a stdio server) or url (streamable HTTP)"
            )
        if "env" in table and "command" not in table:
            raise AdapterConfigError("env", "only a stdio server (command) gets an environment")
        if "tool" not in table:
            raise AdapterConfigError("tool", "missing (the server's tool to call)")
        idempotency, argument = _idempotency(table.get("idempotency", "meta"))
        receipt = table.get("receipt_tool")
        if receipt is not None and idempotency == "none":
            raise AdapterConfigError(
                "receipt_tool", 'needs idempotency "meta" or "argument:NAME": the key is never sent'
            )
        tool_errors = table.get("tool_errors", "unknown")
        if tool_errors not in ("unknown", "failed"):
            raise AdapterConfigError("tool_errors", 'must be "unknown" or "failed"')
        return cls(
            tag=tag,
            tool=_config.text(table["tool"], "tool", what="a tool name string"),
            max_arg_bytes=_config.max_arg_bytes(table, max_frame=max_frame),
            command=_config.argv(table["command"], "command") if "command" in table else None,
            url=_url(table["url"]) if "url" in table else None,
            idempotency=idempotency,
            argument=argument,
            env=_parse_env(table.get("env", {})),
            timeout_s=_config.positive_seconds(
                table.get("timeout_s", DEFAULT_TIMEOUT_S), "timeout_s"
            ),
            receipt_tool=None
            if receipt is None
            else _config.text(receipt, "receipt_tool", what="a tool name string"),
            tool_errors=str(tool_errors),
        )

    def build(self, boot: str | None = None) -> Adapter:
        """The act's adapter, from these settings; ``boot`` is the running
        daemon's (None for tests), which its stdio servers carry."""
        return _config.adapter_from(McpAdapter, self, boot=boot)


@attrs.define(eq=False)
class McpAdapter(BaseAdapter, McpSettings):
    """Calls one tool of an MCP server per call; in-process, abortable, optional receipt."""

    boot: str | None = None  # the daemon's: its stdio servers carry it (WARDD_BOOT)
    kind: str = attrs.field(default="mcp", init=False)
    in_process: bool = attrs.field(default=True, init=False)
    abortable: bool = attrs.field(default=True, init=False)
    _link: Link = attrs.field(
        init=False,
        default=attrs.Factory(
            lambda self: Link(
                self.tag, Endpoint(self.command, self.url, self._environment), self.boot
            ),
            takes_self=True,
        ),
    )

    @property
    def receipt_supported(self) -> bool:
        """A receipt is offered only when ``receipt_tool`` is configured."""
        return self.receipt_tool is not None

    def claim_info(self) -> dict[str, Any]:
        """The server, tool and key placement the call uses, for its receipt."""
        return {"server": self._server(), "tool": self.tool, "idempotency": self.idempotency}

    def abort(self, idempotency_key: str) -> None:
        """Close the session of the call for ``idempotency_key``: it ends unknown."""
        self._link.abort(idempotency_key)

    def kill_all(self) -> None:
        """The daemon's stop: kill the stdio server's group, end the loop, refuse calls."""
        self._link.close()

    def check_at_start(self) -> str | None:
        """The daemon's start-time check of a ``url`` server (in the background,
        after ``READY=1``): connect and list its tools. None when the tool is
        listed (or the server is a stdio one, started at its first call);
        otherwise why not, free of secrets, for the log."""
        if self.url is None:
            return None
        probe = ToolCall(
            key=f"check {self.tag}",
            tool=self.tool,
            arguments={},
            meta=None,
            idempotency_key=None,
            timeout_s=self.timeout_s,
            probe=True,
        )
        reply = self._link.submit(probe)
        if not reply.listed:
            return f"the tool {self.tool!r} is not in the server's tools/list"
        if reply.why != "listed":
            return f"the server is not reachable now ({reply.why}); checked again at the first call"
        return None

    def call(self, request: ActRequest) -> Any:
        """Call the tool once (see the module docstring for how it ends)."""
        if len(request.args) > self.max_arg_bytes:
            raise DefiniteFailure(f"args of {len(request.args)} bytes exceed {self.max_arg_bytes}")
        arguments = decode_args(request.args)
        key = request.idempotency_key
        meta = None if self.idempotency == "none" else {META_KEY: key}
        if self.argument is not None:
            if self.argument in arguments:
                raise DefiniteFailure(
                    f"args must not hold {self.argument!r}: the fence key goes there"
                )
            arguments[self.argument] = key
        sent_key = meta is not None
        # the dispatch span's W3C context (docs/operations.md, "Traces"), as
        # OpenTelemetry's MCP conventions carry it: in the request's _meta
        context = {"traceparent": request.traceparent, "tracestate": request.tracestate}
        trace = {k: v for k, v in context.items() if v is not None}
        if trace:
            meta = {**(meta or {}), **trace}
        call = ToolCall(
            key=key,
            tool=self.tool,
            arguments=arguments,
            meta=meta,
            idempotency_key=key if sent_key else None,
            timeout_s=self.timeout_s,
        )
        secrets = self._secrets()
        try:
            value = judge(self._link.submit(call), self.tag, tool_errors=self.tool_errors)
        except (DefiniteFailure, OutcomeUnknown) as exc:
            # Not chained: only the redacted text may travel on.
            raise type(exc)(_redact.redact_text(str(exc), secrets)) from None
        return redact_value(value, secrets)

    def answer(self, idempotency_key: str, claim_info: Mapping[str, Any] | None = None) -> Receipt:
        """Ask ``receipt_tool`` about the key; never raises (module docstring)."""
        if self.receipt_tool is None:
            return Receipt("unknown", detail="no receipt_tool configured")
        if claim_info is None:  # never claimed: the call never began, so nothing was sent
            return Receipt("not_executed")
        call = ToolCall(
            key=f"receipt {idempotency_key}",
            tool=self.receipt_tool,
            arguments={"key": idempotency_key},
            meta=None,
            idempotency_key=None,
            timeout_s=self.timeout_s,
        )
        secrets = self._secrets()
        try:
            reply = self._link.submit(call)
            got = receipt_of(reply.result, reply.why if reply.listed else "not listed")
        except Exception as exc:  # noqa: BLE001 - a receipt never raises: it cannot tell
            got = Receipt("unknown", detail=f"receipt failed ({type(exc).__name__})")
        detail = None if got.detail is None else _redact.redact_text(got.detail, secrets)
        hint = self._hint(claim_info)
        if got.answer == "not_executed" and hint is not None:
            return Receipt("unknown", detail=f"receipt tool answered not_executed, but {hint}")
        return Receipt(got.answer, redact_value(got.value, secrets), detail)

    def _hint(self, claim_info: Mapping[str, Any]) -> str | None:
        """Why a ``not_executed`` about this claim proves nothing, or None."""
        if not isinstance(claim_info, Mapping) or "tool" not in claim_info:
            return "the claim holds no record of this adapter's"
        if claim_info.get("server") != self._server() or claim_info.get("tool") != self.tool:
            return "the claim was made with another server or tool"
        if claim_info.get("idempotency") == "none":
            return 'the call sent no key (idempotency = "none")'
        return None

    def _server(self) -> Any:
        return self.url if self.url is not None else list(self.command or ())

    def _environment(self) -> tuple[dict[str, str], list[bytes]]:
        """The stdio server's configured environment and its secrets (read now)."""
        env = {k: v for k, v in _base_environment().items() if k == "LANG"}
        secrets: list[bytes] = []
        for name, value in self.env:
            if isinstance(value, SecretFile):
                data = read_env_secret(name, value)
                env[name] = data.decode("utf-8", "surrogateescape")
                if data:
                    secrets.append(data)
            else:
                env[name] = value
        return env, secrets

    def _secrets(self) -> list[bytes]:
        found: list[bytes] = []
        for name, value in self.env:
            if isinstance(value, SecretFile):
                try:
                    data = read_env_secret(name, value)
                except DefiniteFailure:
                    continue
                if data:
                    found.append(data)
        return found
