"""wardctl for scripts, without a daemon: exit statuses against a scripted peer,
`--limit`, pruned ops said in words, shell completion, and help that never
carries the environment."""

from __future__ import annotations

import inspect
import io
import os
import pkgutil
import pydoc
import subprocess
import tomllib
from importlib import import_module
from pathlib import Path
from typing import Any

import cbor2
import pytest

import wardd
from tests.unit._wardctl_stub import ALL_COMMANDS, HANG_UP, daemon_stub, run
from wardd.client import Neuron
from wardd.client.wardctl import Exit
from wardd.protocol import AttemptBusy, Internal

__all__ = ["daemon_stub"]  # the fixture, used by name

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def key(tmp_path: Path) -> str:
    path = tmp_path / "k"
    Neuron.generate().save(path)
    return str(path)


ROOT_ANSWER = {"epoch": 1, "placement_generation": 1}


class TestExitStatuses:
    @pytest.mark.parametrize(
        ("status", "exit"),
        [("succeeded", Exit.DONE), ("failed", Exit.FAILED), ("unknown", Exit.MAY_HAVE_RUN)],
    )
    def test_invoke_exits_by_the_attempts_outcome(
        self, capsys, daemon_stub, key, status: str, exit: Exit
    ) -> None:
        """invoke: succeeded 0, failed 4 (definite, no effect), unknown 3 (it may have run)."""
        invoked = {"op": "o", "attempt": 1, "status": status}
        path, _ = daemon_stub({"get_neuron": ROOT_ANSWER, "invoke": invoked})
        code, out, _ = run(capsys, "--socket", path, "--key", key, "invoke", "o", "--attempt", "1")
        assert code == exit and f"op o attempt 1: {status}" in out

    def test_a_write_whose_answer_is_lost_after_sending_exits_3(
        self, capsys, daemon_stub, key
    ) -> None:
        """The connection ends after invoke went out: 3, and it says the attempt may have run."""
        path, seen = daemon_stub({"get_neuron": ROOT_ANSWER, "invoke": HANG_UP})
        code, _, err = run(capsys, "--socket", path, "--key", key, "invoke", "o", "--attempt", "1")
        assert code == Exit.MAY_HAVE_RUN
        assert "may have run" in err and "wardctl op show o" in err
        assert [r["method"] for r in seen] == ["hello", "get_neuron", "invoke"]

    def test_an_invoke_answered_internal_may_have_run_and_exits_3(
        self, capsys, daemon_stub, key
    ) -> None:
        """internal can come after the claim: never a refusal (1), always 3, naming the
        attempt; a refusal before the claim stays 1."""
        lost = Internal("the outcome could not be stored", {"reason": "fail_stop"})
        path, _ = daemon_stub({"get_neuron": ROOT_ANSWER, "invoke": lost})
        code, _, err = run(capsys, "--socket", path, "--key", key, "invoke", "o", "--attempt", "2")
        assert code == Exit.MAY_HAVE_RUN
        assert "attempt 2 of op o may have run" in err and "internal" in err
        assert "wardctl op show o" in err
        path, _ = daemon_stub({"get_neuron": ROOT_ANSWER, "invoke": AttemptBusy("busy")})
        code, _, err = run(capsys, "--socket", path, "--key", key, "invoke", "o", "--attempt", "2")
        assert code == Exit.REFUSED and "error: attempt_busy" in err

    def test_a_cancel_whose_answer_is_lost_exits_3(self, capsys, daemon_stub, key) -> None:
        """Any write's lost answer is 3: it may have been applied."""
        path, _ = daemon_stub({"cancel": HANG_UP})
        code, _, err = run(capsys, "--socket", path, "--key", key, "cancel", "o")
        assert code == Exit.MAY_HAVE_RUN and "may have been applied" in err

    def test_a_read_whose_answer_is_lost_exits_69(self, capsys, daemon_stub) -> None:
        """A read changes nothing: its lost answer is the daemon not reachable (69)."""
        path, _ = daemon_stub({"status": HANG_UP})
        code, _, err = run(capsys, "--socket", path, "status")
        assert code == Exit.UNREACHABLE and err.startswith("error: ")

    def test_an_unreadable_args_file_is_a_usage_error(self, capsys, tmp_path, key) -> None:
        """A file the command line names that cannot be read: 2, before anything is sent."""
        missing = str(tmp_path / "none")
        code, _, err = run(
            capsys, "--socket", "/x", "--key", key, "submit", "p", "o", "a", "--args-file", missing
        )
        assert code == Exit.USAGE and "cannot read" in err


def page_answer(ops: list[str]) -> Any:
    """list_operations over `ops`, paged as the daemon pages (limit, after → next)."""

    def answer(params: dict[str, Any]) -> dict[str, Any]:
        start = ops.index(params["after"]) + 1 if "after" in params else 0
        chunk = ops[start : start + params["limit"]]
        items = [
            {"op": o, "prog": "p", "act": "a", "state": "pending", "attempts": 0} for o in chunk
        ]
        more = start + len(chunk) < len(ops)
        return {"operations": items, "next": chunk[-1] if more else None}

    return answer


class TestLimit:
    def test_ops_limit_reads_only_what_it_shows_and_says_more_exist(
        self, capsys, daemon_stub
    ) -> None:
        """`ops --limit 2` asks for one page of 2, prints 2, and a last line saying more exist."""
        path, seen = daemon_stub({"list_operations": page_answer([f"o{i}" for i in range(5)])})
        code, out, _ = run(capsys, "--socket", path, "ops", "--neuron", "ab" * 32, "--limit", "2")
        lines = out.splitlines()
        assert code == 0 and [line.split()[0] for line in lines[:2]] == ["o0", "o1"]
        assert lines[2:] == ["(the first 2 operations shown, more exist: raise --limit)"]
        asked = [r["params"] for r in seen if r["method"] == "list_operations"]
        assert [p["limit"] for p in asked] == [2]

    def test_a_limit_that_covers_everything_adds_no_note(self, capsys, daemon_stub) -> None:
        """With no more than N items, the listing is the same as without --limit."""
        path, _ = daemon_stub({"list_operations": page_answer(["o0", "o1"])})
        argv = ("--socket", path, "ops", "--neuron", "ab" * 32)
        _, whole, _ = run(capsys, *argv)
        code, limited, _ = run(capsys, *argv, "--limit", "5")
        assert code == 0 and limited == whole and "more exist" not in whole

    def test_json_with_a_limit_is_the_first_n_items(self, capsys, daemon_stub) -> None:
        """--json --limit 3 prints a list of exactly 3 items."""
        import json

        path, _ = daemon_stub({"list_operations": page_answer([f"o{i}" for i in range(9)])})
        argv = ("--socket", path, "--json", "ops", "--neuron", "ab" * 32, "--limit", "3")
        code, out, _ = run(capsys, *argv)
        assert code == 0 and [o["op"] for o in json.loads(out)] == ["o0", "o1", "o2"]

    @pytest.mark.parametrize("bad", ["0", "-1", "x"])
    def test_a_limit_below_1_is_a_usage_error(self, capsys, bad: str) -> None:
        code, _, err = run(capsys, "ops", "--limit", bad)
        assert code == Exit.USAGE and "--limit" in err

    @pytest.mark.parametrize(
        "command", [("ops",), ("history", "o"), ("attempts", "--state", "unknown")]
    )
    def test_every_listing_takes_a_limit(self, capsys, command: tuple[str, ...]) -> None:
        code, out, _ = run(capsys, *command, "--help")
        assert code == 0 and "--limit N" in out


class TestPrunedOps:
    def test_history_of_a_pruned_op_says_so(self, capsys, daemon_stub) -> None:
        """history of a pruned op says it was pruned, not `no records`."""
        path, _ = daemon_stub({"history": {"records": [], "pruned": True}})
        code, out, _ = run(capsys, "--socket", path, "history", "o", "--neuron", "ab" * 32)
        assert code == 0 and "op o was pruned" in out and "no records" not in out

    def test_submit_of_a_pruned_op_says_so(self, capsys, daemon_stub, key) -> None:
        """submit answered from a tombstone says the op was pruned and can never run again."""
        tomb = {"op": "o", "state": "consumed", "already": True, "pruned": True}
        path, _ = daemon_stub({"submit": tomb})
        code, out, _ = run(capsys, "--socket", path, "--key", key, "submit", "p", "o", "a")
        assert code == 0 and out.startswith("op o: consumed (already); it ended and was pruned")
        assert "never run again" in out


class TestCompletion:
    @pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
    def test_the_script_names_every_command(self, capsys, shell: str) -> None:
        """Each shell's script is generated from the parser: every command is in it."""
        code, out, _ = run(capsys, "--socket", "/nowhere", "completion", shell)
        assert code == 0
        for command in ALL_COMMANDS:
            assert command[-1] in out, command

    def test_bash_completes_commands_and_choices(self, capsys, tmp_path: Path) -> None:
        """Sourced in a real bash, the script completes command names and a choice's values."""
        run(capsys, "completion", "bash")  # clear
        main_code, script, _ = run(capsys, "completion", "bash")
        (tmp_path / "c.bash").write_text(script)

        def complete(*words: str) -> list[str]:
            line = " ".join(words)
            program = (
                f"source {tmp_path / 'c.bash'}\n"
                f"COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; COMP_LINE='{line}'; "
                f"COMP_POINT=${{#COMP_LINE}}\n"
                "_shtab_wardctl wardctl\n"
                'printf "%s\\n" "${COMPREPLY[@]}"\n'
            )
            done = subprocess.run(
                ["bash", "--norc", "--noprofile", "-c", program],
                capture_output=True,
                text=True,
                timeout=30,
            )
            assert done.returncode == 0, done.stderr
            return done.stdout.split()

        assert main_code == 0
        assert {"invoke", "ops", "completion", "manual-take"} <= set(complete("wardctl", "''"))
        assert set(complete("wardctl", "completion", "''")) == {"bash", "zsh", "fish"}

    def test_an_unknown_shell_is_a_usage_error(self, capsys) -> None:
        code, _, err = run(capsys, "completion", "powershell")
        assert code == Exit.USAGE and "bash" in err


def wardd_modules() -> list[Any]:
    names = []
    for package in ("protocol", "client", "daemon", "adapters"):
        pkg = import_module(f"wardd.{package}")
        names.append(pkg.__name__)
        names.extend(m.name for m in pkgutil.walk_packages(pkg.__path__, f"{pkg.__name__}."))
    return [import_module(n) for n in names if not n.endswith((".__main__", "._unasync"))]


class TestHelpCarriesNoEnvironment:
    def test_pydoc_of_default_socket_path_prints_no_environment(self, monkeypatch) -> None:
        """`pydoc wardd.client.default_socket_path` must not print a variable's value."""
        monkeypatch.setenv("WARDD_TEST_SECRET", "tok-3f9a1c-never-print")
        text = pydoc.render_doc(wardd.client.default_socket_path, renderer=pydoc.plaintext)
        assert "default_socket_path" in text and "never-print" not in text

    def test_no_function_of_wardd_defaults_to_the_process_environment(self) -> None:
        """A mapping default is shown by help() and pydoc: os.environ never is one."""
        found = []
        for module in wardd_modules():
            for name, obj in vars(module).items():
                functions = [obj]
                if inspect.isclass(obj):
                    functions = [f for f in vars(obj).values() if callable(f)]
                    functions += [
                        f.__func__ for f in vars(obj).values() if isinstance(f, classmethod)
                    ]
                for fn in functions:
                    try:
                        params = inspect.signature(fn).parameters.values()
                    except (TypeError, ValueError):
                        continue
                    found += [
                        f"{module.__name__}.{name}({p.name})"
                        for p in params
                        if p.default is os.environ
                    ]
        assert found == []


class TestCborPin:
    def test_the_pin_admits_only_cbor2_versions_with_the_fast_decode_options(self) -> None:
        """cbor2>=6.2: `strict_hashable_types` (6.2) and `allow_duplicate_keys` (6.1)
        exist; <7: a new major may change the canonical encoding neurons sign."""
        project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
        assert "cbor2>=6.2,<7" in project["dependencies"]

    def test_the_installed_cbor2_takes_every_option_the_fast_decode_passes(self) -> None:
        """A missing option would send every decode down the slow path, silently."""
        from wardd.protocol import _cbor

        source = inspect.getsource(_cbor._fast_decode)
        options = {
            "max_depth": 4,
            "allow_indefinite": False,
            "allow_duplicate_keys": False,
            "strict_hashable_types": True,
            "semantic_decoders": _cbor._EVERY_TAG,
            "tag_hook": _cbor._refuse_tag,
        }
        assert all(f"{name}=" in source for name in options)
        decoded = cbor2.CBORDecoder(io.BytesIO(cbor2.dumps({"a": [1]})), **options).decode()
        assert decoded == {"a": [1]}
