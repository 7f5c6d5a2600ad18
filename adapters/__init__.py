"""wardd.adapters: the acts' adapters and the contract between them and the daemon.

Built in: ``echo`` (always present), ``file.append``, ``cli``, ``python`` and ``http``
(contract §6).
Third-party adapters register in the ``wardd.adapters`` entry-point group and
are built by `build_adapter` (see `wardd.adapters._registry`).

How an adapter's ``call`` ends decides its attempt's outcome (contract §3.2.4): a
returned value is succeeded, `DefiniteFailure` is failed (no effect), any
other exception is unknown.
"""

from __future__ import annotations

from ._base import (
    DEFAULT_MAX_ARG_BYTES,
    RECEIPT_ANSWERS,
    ActRequest,
    Adapter,
    AdapterConfigError,
    CallAborted,
    DefiniteFailure,
    OutcomeUnknown,
    Receipt,
    ReceiptAnswer,
    as_receipt,
    has_receipt,
    idempotency_key,
)
from ._cli import CliAdapter, SecretFile
from ._echo import EchoAdapter, echo_adapter
from ._file_append import FileAppendAdapter
from ._http import HttpAdapter
from ._python import PythonAdapter
from ._registry import ENTRY_POINT_GROUP, EntryPointAdapter, build_adapter

__all__ = [
    "DEFAULT_MAX_ARG_BYTES",
    "ENTRY_POINT_GROUP",
    "RECEIPT_ANSWERS",
    "ActRequest",
    "Adapter",
    "AdapterConfigError",
    "CallAborted",
    "CliAdapter",
    "DefiniteFailure",
    "EchoAdapter",
    "EntryPointAdapter",
    "FileAppendAdapter",
    "HttpAdapter",
    "OutcomeUnknown",
    "PythonAdapter",
    "Receipt",
    "ReceiptAnswer",
    "SecretFile",
    "build_adapter",
    "echo_adapter",
    "as_receipt",
    "has_receipt",
    "idempotency_key",
]
