"""The ``python`` built-in adapter: an operator's own function, called in-process (contract §6).

Table keys: ``adapter``, ``callable`` (required, ``"module:function"``),
``receipt`` (optional, ``"module:function"``), ``python_path`` (optional,
a list of absolute paths put before ``sys.path``), ``max_arg_bytes``.

Both functions are imported when the table is built: by ``wardd
check-config`` and at every start, so a module that does not import, a
missing attribute, something that is not callable or a spec without ``:``
is refused there, in one line naming the key, never met at a call.

How a call ends (the function gets the attempt's `ActRequest` on the
worker's thread):

- it returns a wire value (what CBOR carries back in every reply: None,
  bool, int, float, str, bytes, lists and maps of them) → succeeded, with
  that value;
- it raises `DefiniteFailure` → failed, with the exception's message;
- it raises anything else, or returns a value that is not a wire value
  (the effect may have happened, but its result cannot be recorded) →
  `OutcomeUnknown`, with ``"<type>: <message>"``.

What an error text holds: the exception's type and ``str(exc)``, cut to
the worker's bound, and nothing else — no traceback, no locals, no
arguments, no chained cause. So a secret reaches a record or a log only
if the function (or a library it calls) puts it in an exception's message.

Decisions:

- The call runs in the daemon's process and cannot be preempted: the
  adapter is not ``abortable`` (``wardctl abort`` answers ``not_abortable``,
  contract §3.8), and a call still running when the shutdown grace ends is
  left claimed and becomes unknown at the next start (contract §3.6). While
  it holds the GIL it slows the whole daemon (contract §3.7).
- ``in_process`` is True: its receipt's ``not_executed`` is applied
  automatically, at start and on ``check_receipts`` (contract §3.4), like
  ``file.append``'s. The operator's receipt must therefore say
  ``not_executed`` only when the effect has not happened and never will.
- The claim records the ``callable`` it calls (`claim_info`). The receipt
  of a claim made with another ``callable`` (the act was reconfigured since)
  may still answer ``executed``, but its ``not_executed`` is taken as
  ``unknown``: the new function's receipt need not know the old one's
  effects. An attempt that was never claimed never reached the function:
  its receipt is ``not_executed`` without asking.
- The receipt function gets the idempotency key and returns
  ``"executed"``, ``"not_executed"``, ``"unknown"`` or ``("executed",
  value)`` (a value that is not a wire value makes the answer ``unknown``,
  as for a call). It runs on a thread of its own and is given `RECEIPT_TIMEOUT_S`
  (as ``cli``'s receipt program), so that a receipt that hangs cannot hold
  the start forever; past it the answer is ``unknown`` and the thread is
  left to end on its own. A receipt that raises, returns anything else or
  times out is ``unknown``, logged (``receipt_failed``), with a ``detail``
  kept in the attempt's evidence.
- ``sys.path`` and ``sys.modules`` are the process's: ``python_path``
  entries go in front of ``sys.path`` for every later import, and two acts
  naming one module share it. The function may be called by several workers
  at once, and must be thread-safe.
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any, Self

import attrs
import structlog

from wardd.daemon.store.encoding import wire_safe
from wardd.protocol import RECEIPT_ANSWERS

from . import _config
from ._base import (
    ActRequest,
    Adapter,
    AdapterConfigError,
    BaseAdapter,
    DefiniteFailure,
    OutcomeUnknown,
    Receipt,
    as_receipt,
)

__all__ = ["PythonAdapter"]

log = structlog.get_logger("wardd.adapter.python")

_KEYS = ("adapter", "callable", "receipt", "python_path", "max_arg_bytes")
RECEIPT_TIMEOUT_S = 30.0
_MESSAGE_CHARS = 300  # of an import error's text in a config error
_DOTTED = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
_SPEC = re.compile(rf"({_DOTTED}):({_DOTTED})")


@attrs.frozen
class PythonSettings:
    """A ``python`` act's table, validated: its functions imported."""

    tag: str
    spec: str  # the configured "module:function", recorded with each claim
    function: Callable[[ActRequest], Any]
    receipt_function: Callable[[str], Any] | None
    max_arg_bytes: int
    receipt_timeout_s: float = RECEIPT_TIMEOUT_S

    @classmethod
    def from_table(cls, tag: str, table: Mapping[str, Any], *, max_frame: int) -> Self:
        """Validate the act's table, importing both functions; raises `AdapterConfigError`."""
        _config.refuse_unknown_keys(table, _KEYS)
        bound = _config.max_arg_bytes(table, max_frame=max_frame)
        _put_before_sys_path(_python_path(table.get("python_path", [])))
        if "callable" not in table:
            raise AdapterConfigError("callable", 'missing (a "module:function" is required)')
        spec = _config.text(table["callable"], "callable", what='a "module:function" string')
        function = load_function(spec, "callable")
        receipt = None
        if "receipt" in table:
            receipt_spec = _config.text(table["receipt"], "receipt", what="a string")
            receipt = load_function(receipt_spec, "receipt")
        return cls(tag, spec, function, receipt, bound)

    def build(self, boot: str | None = None) -> Adapter:
        """The act's adapter, from these settings."""
        return _config.adapter_from(PythonAdapter, self)


@attrs.define(eq=False)
class PythonAdapter(BaseAdapter, PythonSettings):
    """Calls ``function(request)`` in-process; ``receipt_function(key)`` answers for a key."""

    kind: str = attrs.field(default="python", init=False)
    in_process: bool = attrs.field(default=True, init=False)

    @property
    def receipt_supported(self) -> bool:
        """Only an act with a ``receipt`` function has a receipt."""
        return self.receipt_function is not None

    def claim_info(self) -> dict[str, Any]:
        """The function this claim calls: a receipt after a reconfiguration knows it."""
        return {"callable": self.spec}

    def call(self, request: ActRequest) -> Any:
        """Call the function once; its end is read as in the module docstring."""
        try:
            value = self.function(request)
        except DefiniteFailure:
            raise
        except BaseException as exc:
            raise OutcomeUnknown(describe(exc)) from exc
        _, why = wire_safe(value)
        if why is not None:
            raise OutcomeUnknown(f"the function returned {why}")
        return value

    def answer(self, idempotency_key: str, claim_info: Mapping[str, Any] | None = None) -> Receipt:
        """The receipt function's answer about ``idempotency_key``; never raises."""
        if claim_info is None:  # never claimed: the function was never called
            return Receipt("not_executed")
        if self.receipt_function is None:
            return Receipt("unknown", detail="the act has no receipt function")
        got = self._ask(idempotency_key)
        recorded = claim_info.get("callable") if isinstance(claim_info, Mapping) else None
        if got.answer == "not_executed" and recorded != self.spec:
            was = f"callable {recorded!r}" if isinstance(recorded, str) else "no callable on record"
            return Receipt(
                "unknown",
                detail=f"claimed with {was}, the act now calls {self.spec!r}: its "
                "receipt's not_executed is not taken for the earlier function",
            )
        return got

    def _ask(self, key: str) -> Receipt:
        """Run the receipt function on a thread of its own, ``receipt_timeout_s`` at most."""
        assert self.receipt_function is not None
        fn = self.receipt_function
        done = threading.Event()
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                box["answer"] = fn(key)
            except BaseException as exc:  # noqa: BLE001 - a failing receipt is unknown
                box["error"] = exc
            finally:
                done.set()

        threading.Thread(target=run, name=f"wardd-receipt-{self.tag}", daemon=True).start()
        if not done.wait(self.receipt_timeout_s):
            late = f"the receipt did not answer within {self.receipt_timeout_s:g} s"
            return _failed(key, "timeout", late)
        if "error" in box:
            exc = box["error"]
            return _failed(key, type(exc).__name__, f"the receipt raised {describe(exc)}")
        answer = box["answer"]
        if not _is_answer(answer):
            what = f"the receipt returned a value of type {type(answer).__name__}, not an answer"
            return _failed(key, "no_answer", what)
        got = as_receipt(answer)
        _, why = wire_safe(got.value)
        if why is not None:  # as for a call: the result could not be recorded
            return _failed(key, "no_answer", f"the receipt answered {got.answer} with {why}")
        return got


def describe(exc: BaseException) -> str:
    """``"<type>: <message>"`` of an exception: its ``str()`` only (module docstring)."""
    cls = type(exc)
    name = cls.__qualname__
    if cls.__module__ != "builtins":
        name = f"{cls.__module__}.{name}"
    try:
        message = str(exc)
    except Exception:  # noqa: BLE001 - an exception whose str() raises
        message = ""
    return f"{name}: {message}" if message else name


def load_function(spec: str, key: str) -> Callable[..., Any]:
    """Import ``"module:attr.attr"`` and check it is a synchronous function of one argument."""
    match = _SPEC.fullmatch(spec)
    if match is None:
        why = "no ':' between them" if ":" not in spec else "not dotted Python names"
        raise AdapterConfigError(key, f'must be "module:function", got {spec!r} ({why})')
    module_name, attr = match.groups()
    try:
        importlib.invalidate_caches()  # a package written since the last import is found
        obj: Any = importlib.import_module(module_name)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the module's own code ran
        raise AdapterConfigError(
            key, f"module {module_name!r} does not import: {_one_line(describe(exc))}"
        ) from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except Exception:  # noqa: BLE001 - AttributeError, or a module __getattr__ that raised
            raise AdapterConfigError(
                key, f"module {module_name!r} has no attribute {attr!r}"
            ) from None
    if not callable(obj):
        kind = type(obj).__name__
        raise AdapterConfigError(key, f"{spec!r} is not callable (its type is {kind})")
    if inspect.iscoroutinefunction(obj) or inspect.isasyncgenfunction(obj):
        raise AdapterConfigError(key, f"{spec!r} is async: the call must be a plain function")
    try:
        inspect.signature(obj).bind(None)
    except TypeError:
        raise AdapterConfigError(key, f"{spec!r} does not take one positional argument") from None
    except ValueError:  # no signature to inspect (a builtin): its call will tell
        pass
    return obj  # type: ignore[no-any-return]


def _python_path(value: object) -> list[str]:
    """``python_path``: a list of absolute paths that exist (directories, or zip files)."""
    if not isinstance(value, list):
        raise AdapterConfigError("python_path", "must be a list of absolute path strings")
    paths = []
    for i, item in enumerate(value):
        path = _config.absolute_path(item, f"python_path[{i}]")
        if not os.path.exists(path):
            raise AdapterConfigError(f"python_path[{i}]", f"{path!r} does not exist")
        paths.append(path)
    return paths


def _put_before_sys_path(paths: list[str]) -> None:
    """Put ``paths`` in front of ``sys.path``, in their order (moved there if already in it)."""
    if not paths:
        return
    sys.path[:] = paths + [p for p in sys.path if p not in paths]


def _is_answer(answer: object) -> bool:
    """An answer word, an ``(answer, value)`` pair, or a `Receipt` (see `as_receipt`)."""
    if isinstance(answer, Receipt):
        return True
    if isinstance(answer, str):
        return answer in RECEIPT_ANSWERS
    return (
        isinstance(answer, tuple)
        and len(answer) == 2
        and isinstance(answer[0], str)
        and answer[0] in RECEIPT_ANSWERS
    )


def _failed(key: str, error: str, detail: str) -> Receipt:
    """An ``unknown`` receipt for a receipt function that failed, logged."""
    neuron, op, attempt = (key.split("/", 2) + ["", ""])[:3]  # <neuron>/<op>/<attempt>
    log.warning(
        "receipt_failed",
        neuron=neuron,
        op=op,
        attempt=int(attempt) if attempt.isdigit() else attempt,
        error=error,
    )
    return Receipt("unknown", detail=detail)


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MESSAGE_CHARS else text[: _MESSAGE_CHARS - 3] + "..."
