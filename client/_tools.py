"""`GuardedTool`: an agent framework's tool whose every run is one `call` (contract §3.2.6).

An agent's runtime retries, resumes and re-plans; a tool with an effect
must then run at most once per *intended* call. A `GuardedTool` is bound to
an `AsyncSession`, a prog and an act; each await runs one `call` whose op
id is the key the caller gives, so the same key never runs the act twice:
a repeat answers the first run's value. The key is a string, or a function
of the arguments (`arguments_key`: a stable scope, such as a run or thread
id, plus a digest of the arguments — a framework's tool-call id can change
when the model re-plans, the arguments do not).

The act's args are the arguments as canonical JSON (`canonical_json`:
UTF-8, sorted keys, no whitespace, an integral number written as an
integer), so the same arguments are the same op content and other
arguments under the same key are ``op_conflict``. ``wardd mcp`` uses the
same function.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from wardd.protocol import Terminal, WarddError, is_id

from ._doubt import PRUNED_TEXT, discarded, refusal_in_doubt
from ._errors import ActFailed, ConnectionClosed, MayHaveRun, NotSent

if TYPE_CHECKING:
    from ._async_session import AsyncSession
    from ._results import Called

__all__ = ["GuardedTool", "Key", "arguments_key", "canonical_arguments", "canonical_json"]

#: A call's key: the op id itself, or a function of the call's arguments that gives it.
Key = str | Callable[[Mapping[str, Any]], str]


def canonical_arguments(arguments: Mapping[str, Any]) -> bytes:
    """The arguments as canonical JSON (`canonical_json`)."""
    return canonical_json(arguments)


def canonical_json(value: Any) -> bytes:
    """`value` as canonical JSON: UTF-8, sorted keys, no whitespace, and one
    spelling per number: a float with an integral value (``1200.0``,
    ``1.2e3``, ``-0.0``) is written as that integer (``1200``, ``0``), as
    JSON has one number type. The same arguments, however spelled, are
    the same bytes: the same op content, the same key.

    Raises `TypeError` for a value JSON cannot carry, `ValueError` for a
    float that is not finite: refused before anything is sent."""
    text = json.dumps(
        _numbers(value),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    )
    return text.encode("utf-8")


_EXACT = 2**53  # beyond it a float's integer value is no longer exact


def _numbers(value: Any) -> Any:
    """`value` with each integral float within ±2**53 as an int."""
    if isinstance(value, float):
        if math.isfinite(value) and value.is_integer() and abs(value) <= _EXACT:
            return int(value)
        return value
    if isinstance(value, Mapping):
        return {k: _numbers(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_numbers(v) for v in value]
    return value


def arguments_key(scope: str) -> Callable[[Mapping[str, Any]], str]:
    """A key function: ``"<scope>:<digest of the canonical arguments>"``.

    `scope` is what stays the same when the framework asks again for the
    same intended call (a run, thread or conversation id): 1-80 characters
    of ``[A-Za-z0-9._:-]``. An intended second call with the same arguments
    needs another scope (or a string key)."""
    if not is_id(scope) or len(scope) > 80:
        raise ValueError("scope must be 1-80 characters of [A-Za-z0-9._:-]")

    def key(arguments: Mapping[str, Any]) -> str:
        return f"{scope}:{hashlib.sha256(canonical_arguments(arguments)).hexdigest()[:40]}"

    return key


class GuardedTool:
    """An async callable that runs `act` of `prog` once per key, through one `call`.

    ``await tool(key, arguments)`` returns the act's value, from this run or
    from the first run under the same key. It raises:

    - `MayHaveRun` (naming the op, and the attempt when the daemon named
      it) when the outcome is unknown, an attempt of the op is unknown or
      still running (``attempt_busy``), the daemon answered an error that
      can come after the claim (``internal``), a refusal says an earlier
      attempt of the op may have run (``data.may_have_run``), the op was
      pruned (its fate is gone), a cancelled op's success had its value
      discarded, or the answer was lost after the request was sent: never
      ask again; resolve it first (docs/recovery.md);
    - `NotSent` when the request never went out (its connection had
      failed: a daemon restart without ``reconnect=True``): nothing ran;
    - `ActFailed` when the act failed with no effect (``failed`` or
      ``not_executed``);
    - `wardd.protocol.Terminal` when the op was cancelled before any
      attempt of it reached its claim (nothing ran);
    - any other refusal as its `wardd.protocol.WarddError` subclass
      (``op_conflict``: the key was used with other arguments).

    `rebind_stale` (default True): after a daemon restart the first call is
    refused ``placement_stale`` (nothing written); the session binds this
    boot and asks again.
    """

    def __init__(
        self, session: AsyncSession, prog: str, act: str, *, rebind_stale: bool = True
    ) -> None:
        self.session = session
        self.prog = prog
        self.act = act
        self.rebind_stale = rebind_stale

    def __repr__(self) -> str:
        return f"GuardedTool(prog={self.prog!r}, act={self.act!r})"

    async def __call__(self, key: Key, arguments: Mapping[str, Any]) -> Any:
        op = key if isinstance(key, str) else key(arguments)
        args = canonical_arguments(arguments)
        try:
            called = await self.session.call(
                self.prog, op, self.act, args, rebind_stale=self.rebind_stale
            )
        except WarddError as exc:
            if not refusal_in_doubt(exc):
                raise
            attempt = exc.data.get("attempt") if isinstance(exc.data, Mapping) else None
            raise MayHaveRun(op, attempt, f"{exc.code}: {exc.message}") from exc
        except NotSent:  # nothing went out: nothing ran
            raise
        except ConnectionClosed as exc:
            raise MayHaveRun(op, None, str(exc)) from exc
        return value_of(called)


def value_of(called: Called) -> Any:
    """The value of a `call`'s answer, or the typed error that says why there is none."""
    status = called.status
    if status in ("failed", "not_executed"):
        raise ActFailed(called.op, called.attempt, str(status), called.error)
    if called.pruned:  # its fate is no longer known
        raise MayHaveRun(called.op, called.attempt, PRUNED_TEXT)
    if discarded(status, called.state):
        raise MayHaveRun(
            called.op,
            called.attempt,
            "it succeeded, and its value was discarded when the op was cancelled",
        )
    if status == "succeeded":
        return called.result
    if status is None:  # cancelled before any attempt reached its claim: nothing ran
        state = None if called.state is None else str(called.state)
        raise Terminal(
            f"operation {called.op!r} is {state} and holds no value",
            {"state": state, "pruned": called.pruned},
        )
    raise MayHaveRun(called.op, called.attempt, called.error)  # unknown, or still running
