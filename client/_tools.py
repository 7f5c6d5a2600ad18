"""`GuardedTool`: an agent framework's tool whose every run is one `call` (contract §3.2.6).

An agent's runtime retries, resumes and re-plans; a tool with an effect
must then run at most once per *intended* call. A `GuardedTool` is bound to
an `AsyncSession`, a prog and an act; each await runs one `call` whose op
id is the key the caller gives, so the same key never runs the act twice:
a repeat answers the first run's value. The key is a string, or a function
of the arguments (`arguments_key`: a stable scope, such as a run or thread
id, plus a digest of the arguments — a framework's tool-call id can change
when the model re-plans, the arguments do not).

The act's args are the arguments as canonical JSON (`canonical_arguments`:
UTF-8, sorted keys, no whitespace), so the same arguments are the same op
content and other arguments under the same key are ``op_conflict``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from wardd.protocol import AttemptUnknown, Terminal, is_id

from ._errors import ActFailed, ConnectionClosed, MayHaveRun

if TYPE_CHECKING:
    from ._async_session import AsyncSession
    from ._results import Called

__all__ = ["GuardedTool", "Key", "arguments_key", "canonical_arguments"]

#: A call's key: the op id itself, or a function of the call's arguments that gives it.
Key = str | Callable[[Mapping[str, Any]], str]


def canonical_arguments(arguments: Mapping[str, Any]) -> bytes:
    """The arguments as canonical JSON: UTF-8, sorted keys, no whitespace.

    Raises `TypeError` for a value JSON cannot carry, `ValueError` for a
    float that is not finite: refused before anything is sent."""
    text = json.dumps(
        arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    return text.encode("utf-8")


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
      it) when the outcome is unknown, an earlier attempt of the op is
      unknown, the daemon answered an error that can come after the claim
      (``internal``), or the answer was lost after the request was sent:
      never ask again; resolve it first (docs/recovery.md);
    - `ActFailed` when the act failed with no effect (``failed`` or
      ``not_executed``);
    - `wardd.protocol.Terminal` when the op was cancelled (or pruned) and
      holds no value;
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
        except AttemptUnknown as exc:
            attempt = exc.data.get("attempt") if isinstance(exc.data, Mapping) else None
            raise MayHaveRun(op, attempt, exc.message) from exc
        except ConnectionClosed as exc:
            raise MayHaveRun(op, None, str(exc)) from exc
        return value_of(called)


def value_of(called: Called) -> Any:
    """The value of a `call`'s answer, or the typed error that says why there is none."""
    status = called.status
    if status == "succeeded":
        return called.result
    if status in ("failed", "not_executed"):
        raise ActFailed(called.op, called.attempt, str(status), called.error)
    if status is None:  # cancelled or pruned: no value is held
        state = None if called.state is None else str(called.state)
        raise Terminal(
            f"operation {called.op!r} is {state} and holds no value",
            {"state": state, "pruned": called.pruned},
        )
    raise MayHaveRun(called.op, called.attempt, called.error)  # unknown, or still running
