"""From an act's TOML table to its settings (`act_settings`, once) and its
adapter (``settings.build(boot)``, once) (contract §6).

``adapter = "file.append"``, ``adapter = "cli"``, ``adapter = "http"`` and
``adapter = "mcp"`` are built in. Any other
name is looked up in the ``wardd.adapters`` entry-point group
(``importlib.metadata.entry_points``); the loaded object (a class, or any
callable returning an adapter) is called once, when the table is validated,
with the table's other keys as keyword arguments, without ``adapter`` and
``max_arg_bytes``. What it made is fitted to the `Adapter` protocol then,
once (`EntryPointSettings`), and wrapped in an `EntryPointAdapter` at the
start: the act's tag, the act's ``max_arg_bytes`` (the table's, else the
object's own, else 65536), ``in_process`` (the object's own ``True``, else
False: only an adapter that declares it gets automatic ``not_executed``
receipts), ``abortable`` (True only when the object declares it and has an
``abort(key)``), its ``receipt`` (called with or without ``claim_info`` as
its signature allows), ``claim_info()`` and ``kill_all()`` when it has them;
a member it lacks takes `BaseAdapter`'s default. Nothing else of the object
is read (a ``receipt_resends`` or a ``check_at_start`` of its own is not).

``adapter = "python"`` is built in too: a function of the operator's own,
imported from ``callable`` (`wardd.adapters._python`).
"""

from __future__ import annotations

import importlib.metadata
import inspect
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from . import _config
from ._base import (
    DEFAULT_MAX_ARG_BYTES,
    ActRequest,
    ActSettings,
    Adapter,
    AdapterConfigError,
    BaseAdapter,
    Receipt,
    as_receipt,
)

ENTRY_POINT_GROUP = "wardd.adapters"

# adapter name -> (its module, its adapter class, its settings class): a
# built-in adapter's module is imported when an act uses it, not with the
# package (``http`` brings urllib3, ``cli`` its process handling, ``mcp`` the
# MCP SDK: a daemon without such an act starts without them)
_BUILT_IN: dict[str, tuple[str, str, str]] = {
    "cli": ("_cli", "CliAdapter", "CliSettings"),
    "file.append": ("_file_append", "FileAppendAdapter", "FileAppendSettings"),
    "python": ("_python", "PythonAdapter", "PythonSettings"),
    "http": ("_http", "HttpAdapter", "HttpSettings"),
    "mcp": ("_mcp", "McpAdapter", "McpSettings"),
}


def built_in(name: str, *, settings: bool = False) -> Any:
    """The adapter class (``settings``: the settings class) of the built-in
    adapter ``name``, its module imported now."""
    module, adapter_cls, settings_cls = _BUILT_IN[name]
    found = importlib.import_module(f"{__package__}.{module}")
    return getattr(found, settings_cls if settings else adapter_cls)


def act_settings(tag: str, table: Mapping[str, Any], *, max_frame: int) -> ActSettings:
    """Validate act ``tag``'s ``[acts."<tag>"]`` table into its settings, once:
    ``wardd check-config`` and the start call this, and the start builds the
    act's adapter from what it returns (``settings.build(boot)``).

    Raises `AdapterConfigError` with the offending key (relative to the table)
    and the reason. ``max_frame`` is the daemon's frame bound; the ``cli``
    adapter keeps at most ``max_frame - 65536`` bytes of stdout.
    """
    if max_frame <= 65536:
        raise ValueError(f"max_frame must exceed 65536, got {max_frame}")
    if "adapter" not in table:
        raise AdapterConfigError("adapter", f"missing ({_known_names()})")
    name = table["adapter"]
    if not isinstance(name, str):
        raise AdapterConfigError("adapter", "must be a string")
    if name in _BUILT_IN:
        settings: ActSettings = built_in(name, settings=True).from_table(
            tag, table, max_frame=max_frame
        )
        return settings
    return _from_entry_point(tag, name, table, max_frame=max_frame)


def build_adapter(
    tag: str, table: Mapping[str, Any], *, max_frame: int, boot: str | None = None
) -> Adapter:
    """Validate act ``tag``'s table and build its adapter (`act_settings`, then
    ``build``); ``boot`` is the running daemon's (None for tests)."""
    return act_settings(tag, table, max_frame=max_frame).build(boot)


def _entry_points() -> importlib.metadata.EntryPoints:
    return importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)


def _known_names() -> str:
    built_in = ", ".join(sorted(_BUILT_IN))
    plugged = ", ".join(sorted({ep.name for ep in _entry_points()})) or "none"
    return f"built-in: {built_in}; entry points: {plugged}"


def _from_entry_point(
    tag: str, name: str, table: Mapping[str, Any], *, max_frame: int
) -> EntryPointSettings:
    found = {(ep.value, ep.name) for ep in _entry_points() if ep.name == name}
    if not found:
        raise AdapterConfigError("adapter", f"unknown adapter {name!r} ({_known_names()})")
    if len(found) > 1:
        values = ", ".join(sorted(value for value, _ in found))
        raise AdapterConfigError("adapter", f"adapter {name!r} is ambiguous: {values}")
    (entry,) = (ep for ep in _entry_points() if ep.name == name)
    try:
        factory = entry.load()
    except Exception as exc:
        raise AdapterConfigError(
            "adapter", f"cannot load entry point {name!r} ({entry.value}): {exc!r}"
        ) from exc
    kwargs = {k: v for k, v in table.items() if k not in ("adapter", "max_arg_bytes")}
    try:
        inner = factory(**kwargs)
    except AdapterConfigError:
        raise
    except Exception as exc:
        raise AdapterConfigError(
            "adapter", f"entry point {name!r} refused its table: {type(exc).__name__}: {exc}"
        ) from exc
    if not callable(getattr(inner, "call", None)):
        raise AdapterConfigError("adapter", f"entry point {name!r} made an object without call()")
    if "max_arg_bytes" in table:
        bound = _config.max_arg_bytes(table, max_frame=max_frame)
    else:
        bound = getattr(inner, "max_arg_bytes", DEFAULT_MAX_ARG_BYTES)
        if not _config.is_int(bound) or not 1 <= bound <= max_frame:
            raise AdapterConfigError(
                "max_arg_bytes", f"entry point {name!r} declares an invalid bound {bound!r}"
            )
    return EntryPointSettings.fit(tag, inner, int(bound), kind=name)


@attrs.frozen
class Fitted:
    """What of a plug-in's object the daemon uses, read from it once
    (the module docstring): its ``Adapter`` members, defaults filled in."""

    in_process: bool
    abortable: bool
    receipt: Callable[..., Any] | None
    receipt_takes_claim: bool
    claim_info: Callable[[], Any] | None
    kill_all: Callable[[], Any] | None

    @classmethod
    def of(cls, inner: Any) -> Fitted:
        """Read ``inner``'s members (a missing or ill-typed one takes the default)."""
        abort = getattr(inner, "abort", None)
        receipt = _method(inner, "receipt")
        return cls(
            in_process=getattr(inner, "in_process", False) is True,
            abortable=getattr(inner, "abortable", False) is True and callable(abort),
            receipt=receipt,
            receipt_takes_claim=receipt is not None and _accepts_two(receipt),
            claim_info=_method(inner, "claim_info"),
            kill_all=_method(inner, "kill_all"),
        )


@attrs.frozen
class EntryPointSettings:
    """A plug-in act's table, validated: the object its entry point made from
    it (once), and that object's members, fitted to the `Adapter` protocol."""

    tag: str
    kind: str
    inner: Any
    max_arg_bytes: int
    fitted: Fitted

    @classmethod
    def fit(cls, tag: str, inner: Any, max_arg_bytes: int, *, kind: str = "") -> EntryPointSettings:
        """Fit ``inner`` (the entry point's object) for act ``tag``; tell it its
        act, when it allows it."""
        try:
            inner.tag = tag
        except (AttributeError, TypeError):
            pass
        kind = kind or f"entry point {type(inner).__qualname__}"
        return cls(tag, kind, inner, max_arg_bytes, Fitted.of(inner))

    def build(self, boot: str | None = None) -> Adapter:
        """The act's adapter: the object, wrapped (it is not made again)."""
        return _config.adapter_from(EntryPointAdapter, self)


@attrs.define(eq=False)
class EntryPointAdapter(BaseAdapter, EntryPointSettings):
    """A third-party adapter, given the act's tag and bound (see the module docstring)."""

    @property
    def in_process(self) -> bool:
        """The object's own ``in_process``, when it is True."""
        return self.fitted.in_process

    @property
    def abortable(self) -> bool:
        """True when the object declares it and has an ``abort(key)``."""
        return self.fitted.abortable

    @property
    def receipt_supported(self) -> bool:
        """True when the wrapped object has a ``receipt`` method."""
        return self.fitted.receipt is not None

    def call(self, request: ActRequest) -> Any:
        """The wrapped object's ``call``; its exceptions pass through unchanged."""
        return self.inner.call(request)

    def answer(self, idempotency_key: str, claim_info: Mapping[str, Any] | None = None) -> Receipt:
        """The wrapped receipt, its answer normalised; never raises."""
        fn = self.fitted.receipt
        if fn is None:
            return Receipt("unknown", detail="the adapter has no receipt")
        try:
            if self.fitted.receipt_takes_claim:
                answer = fn(idempotency_key, claim_info)
            else:
                answer = fn(idempotency_key)
        except Exception as exc:  # noqa: BLE001 - a plug-in's receipt that raises answers unknown
            return Receipt("unknown", detail=f"receipt raised {type(exc).__name__}")
        return as_receipt(answer)

    def abort(self, idempotency_key: str) -> None:
        """The wrapped object's ``abort`` (only called when ``abortable``)."""
        self.inner.abort(idempotency_key)

    def claim_info(self) -> dict[str, Any] | None:
        """The wrapped object's ``claim_info()``, if it has one."""
        fn = self.fitted.claim_info
        return fn() if fn is not None else None

    def kill_all(self) -> None:
        """The wrapped object's ``kill_all()``, if it has one."""
        if self.fitted.kill_all is not None:
            self.fitted.kill_all()


def _method(inner: Any, name: str) -> Callable[..., Any] | None:
    method = getattr(inner, name, None)
    return method if callable(method) else None


def _accepts_two(method: Callable[..., Any]) -> bool:
    try:
        inspect.signature(method).bind("key", None)
    except TypeError:
        return False
    except ValueError:  # no signature to inspect (a builtin): call with the key only
        return False
    return True
