"""The secret audit's helpers: the forms a secret may take, and every read a client can make.

Shared by the secret audits of ``cli`` (test_secrets.py) and ``http``
(test_http_acts.py): each greps what these collect for its needles.
"""

from __future__ import annotations

import base64
from typing import Any

import cbor2

from tests.daemon.harness import Actor
from wardd.client import Client
from wardd.protocol import Pager


def forms(needle: bytes) -> list[bytes]:
    """The needle raw, as hex (both cases) and as base64 (standard and url-safe)."""
    out = [needle, needle.hex().encode(), needle.hex().upper().encode()]
    out += [base64.b64encode(needle).rstrip(b"="), base64.urlsafe_b64encode(needle).rstrip(b"=")]
    return out


def pieces(secret: bytes, width: int = 8) -> list[bytes]:
    """Every `width`-byte window of the secret: a cut must not leave a piece of it."""
    return [secret[i : i + width] for i in range(len(secret) - width + 1)]


class Audit:
    """Collects every read's output and every reply the workload got."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, bytes]] = []

    def add(self, where: str, value: Any) -> Any:
        self.seen.append((where, cbor2.dumps(value) + repr(value).encode()))
        return value


def all_reads(client: Client, actor: Actor, audit: Audit) -> None:
    """Every read method, every page, every state filter, every op."""
    nid = actor.id
    audit.add("status", client.call("status"))
    audit.add("list_workers", client.call("list_workers"))
    audit.add("get_neuron", client.call("get_neuron", {"neuron": nid}))
    for prog in (actor.prog, "other"):
        audit.add("get_prog", client.call("get_prog", {"neuron": nid, "prog": prog}))
    ops: list[str] = []
    for state in (None, "pending", "prepared", "running", "unknown", "retained", "consumed"):
        params: dict[str, Any] = {"neuron": nid}
        if state:
            params["state"] = state
        pager = Pager(params, "operations", limit=2)  # small pages: every cursor is audited
        while not pager.done:
            page = client.call("list_operations", pager.request())
            pager.feed(audit.add("list_operations", page))
        ops += [o["op"] for o in pager.items]
    for op in sorted(set(ops)):
        audit.add("get_operation", client.call("get_operation", {"neuron": nid, "op": op}))
        pager = Pager({"neuron": nid, "op": op}, "records", limit=3)
        while not pager.done:
            pager.feed(audit.add("history", client.call("history", pager.request())))
    for state in ("unknown", "running", "prepared"):
        audit.add("list_attempts", client.call("list_attempts", {"state": state, "limit": 1000}))
