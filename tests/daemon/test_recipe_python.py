"""docs/recipes.md "Guard a Python function" stays true: its package and config, run for real."""

from __future__ import annotations

import json
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.daemon.harness import Actor, Env, key
from wardd.adapters import PythonAdapter, Receipt, build_adapter

ROOT = Path(__file__).resolve().parents[2]


def section() -> str:
    text = (ROOT / "docs" / "recipes.md").read_text()
    start = text.index("## Guard a Python function")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def block(language: str, containing: str) -> str:
    blocks = re.findall(rf"^```{language}\n(.*?)^```", section(), re.M | re.S)
    (found,) = [b for b in blocks if containing in b]
    return found


@pytest.fixture
def recipe(tmp_path: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """The recipe's package written under tmp_path, and its act table pointing there."""
    package = tmp_path / "lib" / "mytools"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "crm.py").write_text(block("python", "def receipt(key)"))
    table = tomllib.loads(block("toml", 'adapter = "python"'))["acts"]["crm.create"]
    table["python_path"] = [str(tmp_path / "lib")]
    return table, {"MYTOOLS_CRM_DB": str(tmp_path / "crm.db")}


def test_the_recipes_package_creates_once_refuses_a_duplicate_and_its_receipt_tells(
    make_daemon, recipe, monkeypatch
):
    """The documented calls give the documented outcomes in a real daemon, and the
    documented receipt answers executed (with the row) or not_executed for a key."""
    table, env_vars = recipe
    d = make_daemon(Env(acts={"crm.create": table}), start=False)
    d.start(env_vars)
    a = Actor(d, acts=("crm.create",))
    a.submit("cust-1", "crm.create", json.dumps({"name": "Acme"}).encode())
    a.submit("cust-2", "crm.create", json.dumps({"name": "Acme"}).encode())
    a.submit("cust-x", "crm.create", b"not json")
    assert a.invoke("cust-1")["result"] == {"id": 1, "name": "Acme"}
    dup = a.invoke("cust-2")
    assert dup["status"] == "failed" and dup["error"] == "a customer named 'Acme' exists already"
    bad = a.invoke("cust-x")
    assert bad["status"] == "failed" and bad["error"].startswith("args must be JSON with a name")
    # the receipt, asked as the daemon asks it at start (here in this process)
    monkeypatch.setenv("MYTOOLS_CRM_DB", env_vars["MYTOOLS_CRM_DB"])
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(sys, "modules", dict(sys.modules))
    adapter = build_adapter("crm.create", table, max_frame=1 << 20)
    assert isinstance(adapter, PythonAdapter)
    claim = adapter.claim_info()
    created = Receipt("executed", {"id": 1, "name": "Acme"})
    assert adapter.receipt(key(a, "cust-1"), claim) == created
    for op in ("cust-2", "cust-9"):  # refused, and never submitted
        assert adapter.receipt(key(a, op), claim) == Receipt("not_executed")
