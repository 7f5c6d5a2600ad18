"""`build_adapter`: from an act's TOML table to an adapter (contract §6).

``adapter = "file.append"``, ``adapter = "cli"``, ``adapter = "http"`` and
``adapter = "mcp"`` are built in. Any other
name is looked up in the ``wardd.adapters`` entry-point group
(``importlib.metadata.entry_points``); the loaded object (a class, or any
callable returning an adapter) is called with the table's other keys as
keyword arguments, without ``adapter`` and ``max_arg_bytes``. The result is
wrapped in an `EntryPointAdapter`, which gives it the act's tag, the act's
``max_arg_bytes`` (the table's, else the object's own, else 65536) and
``in_process`` (the object's own, else False: only an adapter that declares
it gets automatic ``not_executed`` receipts), ``abortable`` (True only when
the object declares it and has an ``abort(key)``), and which calls its
``receipt`` with or without ``claim_info`` as its signature allows.

``adapter = "python"`` is built in too: a function of the operator's own,
imported from ``callable`` (`wardd.adapters._python`).
"""

from __future__ import annotations

import importlib.metadata
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from . import _config
from ._base import (
    DEFAULT_MAX_ARG_BYTES,
    ActRequest,
    Adapter,
    AdapterConfigError,
    Receipt,
    as_receipt,
)

ENTRY_POINT_GROUP = "wardd.adapters"

# adapter name -> (its module, its class): a built-in adapter's module is
# imported when an act uses it, not with the package (``http`` brings urllib3,
# ``cli`` its process handling, ``mcp`` the MCP SDK: a daemon without such an act
# starts without them)
_BUILT_IN: dict[str, tuple[str, str]] = {
    "cli": ("_cli", "CliAdapter"),
    "file.append": ("_file_append", "FileAppendAdapter"),
    "python": ("_python", "PythonAdapter"),
    "http": ("_http", "HttpAdapter"),
    "mcp": ("_mcp", "McpAdapter"),
}


def built_in(name: str) -> Any:
    """The class of the built-in adapter ``name`` (its module imported now)."""
    module, cls = _BUILT_IN[name]
    return getattr(importlib.import_module(f"{__package__}.{module}"), cls)


def build_adapter(
    tag: str, table: Mapping[str, Any], *, max_frame: int, boot: str | None = None
) -> Adapter:
    """Build the adapter of act ``tag`` from its ``[acts."<tag>"]`` table.

    Raises `AdapterConfigError` with the offending key (relative to the table)
    and the reason. ``max_frame`` is the daemon's frame bound; the ``cli``
    adapter keeps at most ``max_frame - 65536`` bytes of stdout. ``boot`` is
    the running daemon's (None for ``check-config``): a built-in adapter that
    declares ``uses_boot`` gets it, to mark the processes it keeps across
    calls (``mcp``'s stdio servers) as this boot's.
    """
    if max_frame <= 65536:
        raise ValueError(f"max_frame must exceed 65536, got {max_frame}")
    if "adapter" not in table:
        raise AdapterConfigError("adapter", f"missing ({_known_names()})")
    name = table["adapter"]
    if not isinstance(name, str):
        raise AdapterConfigError("adapter", "must be a string")
    if name in _BUILT_IN:
        cls = built_in(name)
        build: Callable[..., Adapter] = cls.from_table
        if getattr(cls, "uses_boot", False):
            return build(tag, table, max_frame=max_frame, boot=boot)
        return build(tag, table, max_frame=max_frame)
    return _from_entry_point(tag, name, table, max_frame=max_frame)


def _entry_points() -> importlib.metadata.EntryPoints:
    return importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)


def _known_names() -> str:
    built_in = ", ".join(sorted(_BUILT_IN))
    plugged = ", ".join(sorted({ep.name for ep in _entry_points()})) or "none"
    return f"built-in: {built_in}; entry points: {plugged}"


def _from_entry_point(
    tag: str, name: str, table: Mapping[str, Any], *, max_frame: int
) -> EntryPointAdapter:
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
    return EntryPointAdapter(tag, inner, int(bound), kind=name)


class EntryPointAdapter:
    """A third-party adapter, given the act's tag and bound (see the module docstring)."""

    def __init__(self, tag: str, inner: Any, max_arg_bytes: int, *, kind: str = "") -> None:
        self.tag = tag
        self.kind = kind or f"entry point {type(inner).__qualname__}"
        self.inner = inner
        self.max_arg_bytes = max_arg_bytes
        self.in_process = getattr(inner, "in_process", False) is True
        self.abortable = getattr(inner, "abortable", False) is True and callable(
            getattr(inner, "abort", None)
        )
        receipt = getattr(inner, "receipt", None)
        self._receipt: Callable[..., Any] | None = receipt if callable(receipt) else None
        self._receipt_takes_claim = self._receipt is not None and _accepts_two(self._receipt)
        try:  # let the object know its act, when it allows it
            inner.tag = tag
        except (AttributeError, TypeError):
            pass

    @property
    def receipt_supported(self) -> bool:
        """True when the wrapped object has a ``receipt`` method."""
        return self._receipt is not None

    def call(self, request: ActRequest) -> Any:
        """The wrapped object's ``call``; its exceptions pass through unchanged."""
        return self.inner.call(request)

    def receipt(self, idempotency_key: str, claim_info: Mapping[str, Any] | None = None) -> Receipt:
        """The wrapped receipt, its answer normalised; never raises."""
        if self._receipt is None:
            return Receipt("unknown", detail="the adapter has no receipt")
        try:
            if self._receipt_takes_claim:
                answer = self._receipt(idempotency_key, claim_info)
            else:
                answer = self._receipt(idempotency_key)
        except Exception as exc:  # noqa: BLE001 - a plug-in's receipt that raises answers unknown
            return Receipt("unknown", detail=f"receipt raised {type(exc).__name__}")
        return as_receipt(answer)

    def abort(self, idempotency_key: str) -> None:
        """The wrapped object's ``abort`` (only called when ``abortable``)."""
        self.inner.abort(idempotency_key)

    def claim_info(self) -> dict[str, Any] | None:
        """The wrapped object's ``claim_info()``, if it has one."""
        method = getattr(self.inner, "claim_info", None)
        return method() if callable(method) else None

    def kill_all(self) -> None:
        """The wrapped object's ``kill_all()``, if it has one."""
        method = getattr(self.inner, "kill_all", None)
        if callable(method):
            method()


def _accepts_two(method: Callable[..., Any]) -> bool:
    try:
        inspect.signature(method).bind("key", None)
    except TypeError:
        return False
    except ValueError:  # no signature to inspect (a builtin): call with the key only
        return False
    return True
