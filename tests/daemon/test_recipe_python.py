"""docs/recipes.md "Guard a Python function" stays true: its package and config, run for real."""

from __future__ import annotations

import re
import shlex
import sys
import tomllib
from pathlib import Path

import pytest

from tests._recipes import recipe_block, recipe_section
from tests.daemon.harness import Env, run_wardctl
from wardd.adapters import PythonAdapter, Receipt, build_adapter

ROOT = Path(__file__).resolve().parents[2]


def section() -> str:
    return recipe_section("Guard a Python function")


def block(language: str, containing: str) -> str:
    return recipe_block("Guard a Python function", language, containing)


def commands(after: str) -> list[list[str]]:
    """The wardctl lines of the first ```sh block after the heading ``after``, as argv."""
    text = section()
    sh = re.findall(r"^```sh\n(.*?)^```", text[text.index(after) :], re.M | re.S)[0]
    lines = [line.split("#", 1)[0].strip() for line in sh.splitlines()]
    return [shlex.split(line)[1:] for line in lines if line.startswith("wardctl ")]


@pytest.fixture
def recipe(tmp_path: Path) -> tuple[Env, Path]:
    """The recipe as written, in a home folder of its own: the package at
    ~/mytools/mytools/, the act table in the config (``/home/me`` being that
    home), nothing else set up (no MYTOOLS_CRM_DB, no folder for its database)."""
    home = tmp_path / "me"
    package = home / "mytools" / "mytools"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "crm.py").write_text(block("python", "def receipt(key)"))
    table = block("toml", 'adapter = "python"').replace("/home/me", str(home))
    env = Env(network="local", acts=tomllib.loads(table)["acts"])
    return env, home


def test_the_recipe_runs_as_written_and_its_receipt_tells(make_daemon, recipe, monkeypatch):
    """Its commands give the outcomes its comments say in a real daemon (the
    database is made where the recipe says), and its receipt answers executed
    (with the row) or not_executed for a key."""
    env, home = recipe
    d = make_daemon(env, start=False)
    d.start({"HOME": str(home), "MYTOOLS_CRM_DB": ""})
    neuron = run_wardctl(env, "keygen").stdout.split()[-1]
    run_wardctl(env, "register")
    run_wardctl(env, "prog", "create", "notes", "--steps", "1000")
    said = {}
    for argv in commands("### 3. Run it"):
        said[tuple(argv[:2])] = out = run_wardctl(env, *argv, check=False)
        assert out.returncode in (0, 4), (argv, out.stdout, out.stderr)
    first, second = said[("invoke", "cust-1")], said[("invoke", "cust-2")]
    assert first.returncode == 0 and "succeeded" in first.stdout and "Acme" in first.stdout
    assert second.returncode == 4 and "a customer named 'Acme' exists already" in second.stdout
    assert (home / ".local" / "state" / "mytools" / "crm.db").is_file()
    run_wardctl(env, "submit", "notes", "cust-x", "crm.create", "--args", "not json")
    bad = run_wardctl(env, "invoke", "cust-x", check=False)
    assert bad.returncode == 4 and "args must be JSON with a name" in bad.stdout, bad.stdout
    # the receipt, asked as the daemon asks it at start (here in this process)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("MYTOOLS_CRM_DB", raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(sys, "modules", dict(sys.modules))
    adapter = build_adapter("crm.create", env.acts["crm.create"], max_frame=1 << 20)
    assert isinstance(adapter, PythonAdapter)
    claim = adapter.claim_info()
    created = Receipt("executed", {"id": 1, "name": "Acme"})
    assert adapter.receipt(f"{neuron}/cust-1/1", claim) == created
    for op in ("cust-2", "cust-9"):  # refused, and never submitted
        assert adapter.receipt(f"{neuron}/{op}/1", claim) == Receipt("not_executed")
