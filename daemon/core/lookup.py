"""The first checks of every request: is the neuron registered, does the
op or prog exist (or was the op pruned), does the prog hold an enabled
grant; and whether a descriptor's profile is one this daemon supports.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wardd.protocol import (
    GrantDisabled,
    Terminal,
    UnknownNeuron,
    UnknownOperation,
    UnknownProg,
    UnsupportedGuarantee,
    UnsupportedProfile,
    WarddError,
)

from .records import Neuron, Op, OpView, Prog, ProgView, Tombstone

__all__ = [
    "managed_op",
    "profile_refusal",
    "pruned_terminal",
    "require_enabled_grant",
    "require_neuron",
    "require_op",
    "require_prog",
]


def require_neuron(neuron: Neuron | None) -> Neuron:
    if neuron is None:
        raise UnknownNeuron("neuron is not registered")
    return neuron


def require_prog(view: ProgView) -> tuple[Neuron, Prog]:
    n = require_neuron(view.neuron)
    if view.prog is None:
        raise UnknownProg(f"no prog {view.name!r} for this neuron")
    return n, view.prog


def pruned_terminal(tomb: Tombstone) -> Terminal:
    """contract §3.9: every write naming a pruned op but ``submit`` is ``terminal``."""
    return Terminal(
        f"the operation was {tomb.state} and has been pruned",
        {"state": tomb.state.value, "pruned": True},
    )


def require_op(view: OpView) -> tuple[Neuron, Op, Prog]:
    """The op the request names: ``unknown_operation``, or ``terminal`` for
    a pruned op (contract §3.9)."""
    n = require_neuron(view.neuron)
    if view.op is None:
        if view.tombstone is not None:
            raise pruned_terminal(view.tombstone)
        raise UnknownOperation(f"no operation {view.name!r} for this neuron")
    assert view.prog is not None
    return n, view.op, view.prog


def require_enabled_grant(prog: Prog) -> None:
    """contract §3.4: management writes need a current, enabled grant."""
    if not prog.grant_enabled:
        raise GrantDisabled("the prog has no enabled grant")


def managed_op(view: OpView) -> tuple[Neuron, Op, Prog]:
    """The op of a management write (contract §3.4's second group, and
    ``abort``): ownership (``unknown_operation``), then the prog's grant
    (``grant_disabled``), before any other answer; a pruned op (§3.9)
    passes both and is then ``terminal``."""
    n = require_neuron(view.neuron)
    if view.op is None and view.tombstone is None:
        raise UnknownOperation(f"no operation {view.name!r} for this neuron")
    assert view.prog is not None
    require_enabled_grant(view.prog)
    if view.op is None:
        assert view.tombstone is not None
        raise pruned_terminal(view.tombstone)
    return n, view.op, view.prog


def profile_refusal(d: Mapping[str, Any], ours: Mapping[str, Any]) -> WarddError | None:
    """contract §3.1, §3.2.1 check 12: a descriptor's profile is supported when
    it names this daemon's machine, environment, proof, network and executor
    (``unsupported_profile``) and no hard limit (``unsupported_guarantee``)."""
    for field in ("machine", "environment", "proof", "network"):
        if d[field] != ours[field]:
            return UnsupportedProfile(f"descriptor names another {field} than this daemon's")
    for field in ("backend", "warrior", "device"):
        if d["executor"][field] != ours["executor"][field]:
            return UnsupportedProfile(f"descriptor names another executor {field}")
    if any(v is not None for v in d["limits"].values()):
        return UnsupportedGuarantee("hard cpu/time/memory limits are not offered")
    return None
