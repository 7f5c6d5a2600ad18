"""Which answers to a ``call`` leave the op's act in doubt (pure; one table for
`GuardedTool`, ``wardd mcp`` and ``wardctl call``).

The rule: an answer after which the act may have run, or may be running,
says "may have run", never "nothing ran". Only a refusal that comes before
any claim of the op says that nothing was done.

- an error that can come after this request's claim
  (`wardd.protocol.may_have_run`: ``internal`` after the claim, a code
  this client does not know); the sessions raise it as `MayHaveRun`;
- ``attempt_unknown``: an attempt of the op may have run;
- ``attempt_busy``: an attempt of the op is running now;
- a refusal the daemon marks ``data.may_have_run: true``: the request ran
  nothing, but it was refused before the op's state was read (the grant, the
  act, the args' bound) and the op exists with an attempt that reached its
  claim, or ended and was pruned;
- a pruned op's answer (``pruned: true``): it ended, its result and records
  are gone, and whether it ran is no longer known;
- a cancelled op whose attempt succeeded: it ran; its value was discarded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from wardd.protocol import WarddError, may_have_run

__all__ = ["IN_DOUBT_CODES", "PRUNED_TEXT", "discarded", "refusal_in_doubt"]

#: Codes that answer a ``call`` (or ``invoke``) while an attempt of its op may
#: have run or is running.
IN_DOUBT_CODES: Final = frozenset({"attempt_unknown", "attempt_busy"})

#: What is true of a pruned op (contract §3.9), for a person or a model.
PRUNED_TEXT: Final = (
    "it ended and was pruned: its result and records are gone, so whether it ran is no "
    "longer known (it may have run); it can never run again under this op id"
)


def refusal_in_doubt(exc: WarddError) -> bool:
    """Whether an error answering a ``call`` leaves an attempt of its op in doubt."""
    data = exc.data if isinstance(exc.data, Mapping) else {}
    return (
        may_have_run("call", exc) or exc.code in IN_DOUBT_CODES or data.get("may_have_run") is True
    )


def discarded(status: Any, state: Any) -> bool:
    """A cancelled op whose attempt succeeded: it ran, and its value is gone."""
    return (
        status is not None
        and str(status) == "succeeded"
        and state is not None
        and str(state) == "cancelled"
    )
