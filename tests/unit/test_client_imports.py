"""The client is a library agents can depend on: importing it (and using it)
loads none of the daemon's dependencies. Checked in a fresh interpreter,
through ``sys.modules``."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: What the daemon alone needs (docs/client.md "What the client needs").
DAEMON_ONLY = ("trio", "structlog", "prometheus_client", "urllib3", "shtab", "sqlite3")
#: The client's own dependencies, as docs/client.md lists them.
CLIENT_NEEDS = {"anyio", "attrs", "cbor2", "cryptography", "nacl"}

PROGRAM = """
import json, sys
before = set(sys.modules)
import wardd.client, wardd.protocol
from wardd.client import AsyncClient, Client, Neuron, Session, AsyncSession
signed = Neuron.generate().sign("submit", {"prog": "p", "op": "o", "act": "echo"}, "local")
assert wardd.protocol.verify(signed["neuron"], signed["sig"], "local", "submit", signed)
print(json.dumps(sorted({m.split(".")[0] for m in set(sys.modules) - before})))
"""


def loaded() -> set[str]:
    done = subprocess.run(
        [sys.executable, "-I", "-c", PROGRAM], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout))


class TestClientImports:
    def test_the_client_and_protocol_load_none_of_the_daemons_dependencies(self) -> None:
        """Import, sign, verify: no trio, structlog, prometheus_client, urllib3, shtab
        or sqlite3 in sys.modules (and so none need be installed for a client)."""
        top = loaded()
        assert top.isdisjoint({*DAEMON_ONLY, "_sqlite3", "wardd.daemon"}), top
        assert CLIENT_NEEDS <= top  # the check sees third-party imports at all

    def test_the_manual_names_what_the_client_needs(self) -> None:
        """docs/client.md lists the client's packages, each a dependency of ours."""
        text = (ROOT / "docs" / "client.md").read_text()
        section = text[text.index("### What the client needs") :]
        section = section[: section.index("\n#", 1)]
        deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
        names = {"anyio", "attrs", "cbor2", "cryptography", "pynacl"}
        for name in names:
            assert f"`{name}" in section, name
            assert any(d.startswith(name) for d in deps), name
        for name in DAEMON_ONLY[:-1]:
            assert name.replace("_", "-") in section or name in section, name
