"""The `Adapter` protocol as the daemon reads it, and an act's table validated once.

Every adapter answers every member of `Adapter` (the daemon reads them
directly): the built-in ones inherit the optional members' defaults from
`BaseAdapter`, and an entry point's object is fitted to the protocol once,
when it is loaded, a member it lacks taking the default. An act's table is
validated once into its settings (``wardd check-config`` and the start), and
the start builds the act's adapter from them once: a secret file is read
once at start, an entry point's object made once.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.daemon.harness import entry_point_plugin
from wardd.adapters import (
    ActRequest,
    Adapter,
    CliAdapter,
    EntryPointAdapter,
    HttpAdapter,
    Receipt,
    SecretFile,
    build_adapter,
    echo_adapter,
)
from wardd.daemon.config import load_config
from wardd.daemon.life.app import build_adapters

MAX_FRAME = 1 << 20

BARE = """
class Bare:
    def __init__(self, **table):
        self.table = table

    def call(self, request):
        return request.args
"""

COUNTED = """
class Counted:
    made = 0

    def __init__(self, **table):
        type(self).made += 1

    def call(self, request):
        return request.args
"""


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Install ``source`` as a real distribution whose ``wardd.adapters``
    entry points are ``entries``; the module, imported."""

    def install(module: str, source: str, entries: dict[str, str]) -> Any:
        entry_point_plugin(tmp_path, module, textwrap.dedent(source), entries)
        monkeypatch.syspath_prepend(str(tmp_path / "plugin"))
        return __import__(module)

    yield install


def write_config(tmp_path: Path, acts: str) -> Path:
    path = tmp_path / "wardd.toml"
    path.write_text(
        f'database = "{tmp_path / "wardd.db"}"\nsocket = "{tmp_path / "s"}"\n'
        + textwrap.dedent(acts)
    )
    return path


class TestMembers:
    def test_every_built_in_adapter_answers_the_whole_protocol(self, tmp_path: Path) -> None:
        """The daemon reads every member directly: each built-in adapter has them all."""
        tables: dict[str, dict[str, Any]] = {
            "file.append": {"path": str(tmp_path / "n.log")},
            "cli": {"argv": ["/bin/true"]},
            "http": {"url": "http://127.0.0.1:9/x"},
            "mcp": {"url": "http://127.0.0.1:9/mcp", "tool": "t"},
            "python": {"callable": "os.path:join"},
        }
        built = [
            build_adapter("t", {"adapter": n, **t}, max_frame=MAX_FRAME) for n, t in tables.items()
        ]
        for adapter in [echo_adapter(), *built]:
            assert isinstance(adapter, Adapter), adapter
        kinds = {a.kind: (a.in_process, a.abortable, a.receipt_resends) for a in built}
        assert kinds == {
            "file.append": (True, False, False),
            "cli": (False, True, False),
            "http": (True, True, False),
            "mcp": (True, True, False),
            "python": (True, False, False),
        }

    def test_an_entry_point_without_the_optional_members_gets_the_defaults(self, plugin) -> None:
        """A plug-in object with only ``call`` is fitted with every default:
        not in-process, not abortable, no receipt (``unknown``), nothing to
        record, kill or check; its kind is its entry point's name."""
        plugin("wardd_bare_plugin", BARE, {"bare": "Bare"})
        adapter = build_adapter("b", {"adapter": "bare", "colour": "red"}, max_frame=MAX_FRAME)
        assert isinstance(adapter, EntryPointAdapter) and isinstance(adapter, Adapter)
        assert adapter.inner.table == {"colour": "red"}
        assert (adapter.kind, adapter.tag, adapter.max_arg_bytes) == ("bare", "b", 65536)
        assert (adapter.in_process, adapter.abortable) == (False, False)
        assert (adapter.receipt_supported, adapter.receipt_resends) == (False, False)
        assert adapter.receipt("n/op/1", {}).answer == "unknown"
        assert adapter.claim_info() is None and adapter.check_at_start() is None
        adapter.kill_all()  # nothing to kill
        req = ActRequest(neuron="n", op="op", attempt=1, act="b", args=b"x")
        assert adapter.call(req) == b"x"

    def test_an_adapter_has_identity_whatever_its_settings(self) -> None:
        """Two adapters built from equal settings are two adapters (each runs its own calls)."""
        table = {"adapter": "cli", "argv": ["/bin/true"]}
        one, two = (build_adapter("t", table, max_frame=MAX_FRAME) for _ in range(2))
        assert isinstance(one, CliAdapter) and one != two and len({one, two}) == 2


class TestOnceAtStart:
    def test_a_secret_file_is_read_once_at_start(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The start reads the config (an http act's secret header file read
        once, to check it) and builds the act's adapter from what was
        validated: no second read before a call needs the secret."""
        secret = tmp_path / "token"
        secret.write_bytes(b"Bearer s3cr3t\n")
        reads: list[str] = []
        real = SecretFile.read

        def counted(self: SecretFile, *, header: bool = False) -> bytes:
            reads.append(self.path)
            return real(self, header=header)

        monkeypatch.setattr(SecretFile, "read", counted)
        path = write_config(
            tmp_path,
            f"""
            [acts.pay]
            adapter = "http"
            url = "http://127.0.0.1:9/charges"
            headers = {{ Authorization = {{ file = "{secret}" }} }}
            """,
        )
        config = load_config(path)  # what `wardd check-config` does, and the start first
        assert reads == [str(secret)]
        adapters = build_adapters(config, "boot")  # the start's adapters
        assert reads == [str(secret)]
        pay = adapters["pay"]
        assert isinstance(pay, HttpAdapter) and pay.headers == (
            ("Authorization", SecretFile(str(secret))),
        )

    def test_an_entry_point_object_is_made_once_at_start(self, tmp_path: Path, plugin) -> None:
        """The plug-in's object is made when its table is validated, and the
        start's adapter wraps that same object."""
        module = plugin("wardd_counted_plugin", COUNTED, {"counted": "Counted"})
        path = write_config(tmp_path, '[acts.c]\nadapter = "counted"\n')
        config = load_config(path)
        adapter = build_adapters(config, "boot")["c"]
        assert module.Counted.made == 1
        assert isinstance(adapter, EntryPointAdapter) and isinstance(adapter.inner, module.Counted)

    def test_a_receipt_of_an_entry_point_is_fitted_once(self, plugin) -> None:
        """A plug-in's receipt taking only the key is called with the key;
        its answer is normalised (a word, a pair, a `Receipt`)."""
        source = """
        class Keyed:
            def __init__(self, **table):
                pass

            def call(self, request):
                return None

            def receipt(self, key):
                return ("executed", key)
        """
        plugin("wardd_keyed_plugin", source, {"keyed": "Keyed"})
        adapter = build_adapter("k", {"adapter": "keyed"}, max_frame=MAX_FRAME)
        assert adapter.receipt_supported
        assert adapter.receipt("n/op/1", {"x": 1}) == Receipt("executed", "n/op/1")
