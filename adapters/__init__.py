"""wardd.adapters: the acts' adapters and the contract between them and the daemon.

Built in: ``echo`` (always present), ``file.append``, ``cli``, ``python``, ``http`` and ``mcp``
(contract §6).
Third-party adapters register in the ``wardd.adapters`` entry-point group.
An act's table is validated once into its settings (`act_settings`), and its
adapter built once from them (``settings.build(boot)``; `build_adapter` does
both): see `wardd.adapters._registry`. Every adapter answers the whole
`Adapter` protocol; `BaseAdapter` holds the optional members' defaults.

How an adapter's ``call`` ends decides its attempt's outcome (contract §3.2.4): a
returned value is succeeded, `DefiniteFailure` is failed (no effect), any
other exception is unknown.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._base import (
    DEFAULT_MAX_ARG_BYTES,
    RECEIPT_ANSWERS,
    ActRequest,
    ActSettings,
    Adapter,
    AdapterConfigError,
    BaseAdapter,
    CallAborted,
    DefiniteFailure,
    OutcomeUnknown,
    Receipt,
    ReceiptAnswer,
    SentCall,
    as_receipt,
    has_receipt,
    idempotency_key,
)
from ._echo import EchoAdapter, echo_adapter
from ._registry import (
    _BUILT_IN,
    ENTRY_POINT_GROUP,
    EntryPointAdapter,
    act_settings,
    build_adapter,
    built_in,
)

if TYPE_CHECKING:
    from ._cli import CliAdapter
    from ._config import SecretFile
    from ._file_append import FileAppendAdapter
    from ._http import HttpAdapter
    from ._mcp import McpAdapter
    from ._python import PythonAdapter

# the built-in adapters' classes, imported on first use: class name -> adapter
# name, from ``_registry``'s one table of them
_LAZY = {cls: name for name, (_module, cls, _settings) in _BUILT_IN.items()}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return built_in(_LAZY[name])
    if name == "SecretFile":
        from ._config import SecretFile

        return SecretFile
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_MAX_ARG_BYTES",
    "ENTRY_POINT_GROUP",
    "RECEIPT_ANSWERS",
    "ActRequest",
    "ActSettings",
    "Adapter",
    "AdapterConfigError",
    "BaseAdapter",
    "CallAborted",
    "CliAdapter",
    "DefiniteFailure",
    "EchoAdapter",
    "EntryPointAdapter",
    "FileAppendAdapter",
    "HttpAdapter",
    "McpAdapter",
    "OutcomeUnknown",
    "PythonAdapter",
    "Receipt",
    "ReceiptAnswer",
    "SecretFile",
    "SentCall",
    "act_settings",
    "as_receipt",
    "build_adapter",
    "echo_adapter",
    "has_receipt",
    "idempotency_key",
]
