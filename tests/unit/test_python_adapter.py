"""The ``python`` adapter keeps its contract (contract §6): real packages on disk, imported."""

from __future__ import annotations

import itertools
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import structlog

from wardd.adapters import (
    ActRequest,
    AdapterConfigError,
    DefiniteFailure,
    OutcomeUnknown,
    PythonAdapter,
    Receipt,
    build_adapter,
    has_receipt,
)
from wardd.daemon.config import ConfigError, parse_config

NEURON = "ab" * 32
KEY = f"{NEURON}/op1/1"
MAX_FRAME = 1 << 20

# One source for every test: each test writes it as a package of its own name,
# so that sys.modules never hands one test another's module.
SOURCE = textwrap.dedent(
    """
    import threading
    from wardd.adapters import DefiniteFailure

    seen = []
    gate = threading.Event()

    def create(request):
        seen.append(request)
        return {"key": request.idempotency_key, "op": request.op, "attempt": request.attempt,
                "act": request.act, "args": request.args}

    def nothing(request):
        pass

    def refuse(request):
        raise DefiniteFailure("the CRM said no: duplicate name")

    def crash(request):
        raise ConnectionResetError("peer reset the connection")

    def key_error(request):
        return {}["missing"]

    def unencodable(request):
        return {"when": object()}

    def unprintable(request):
        class Odd(Exception):
            def __str__(self):
                raise RuntimeError("no text")
        raise Odd()

    async def coroutine(request):
        return None

    def two(a, b):
        return None

    class Service:
        def call(self, request):
            return "method"

    service = Service()
    LIMIT = 3

    answers = {}

    def receipt(key):
        return answers.get(key, "not_executed")

    def receipt_raises(key):
        raise PermissionError("token expired for api.example")

    def receipt_garbage(key):
        return ["executed"]

    def receipt_unencodable(key):
        return ("executed", {1, 2})

    def receipt_waits(key):
        gate.wait()
        return "executed"
    """
)
_names = itertools.count()


@pytest.fixture
def package(tmp_path: Path) -> Iterator[Callable[..., tuple[str, str]]]:
    """``package(source=SOURCE, broken=None)`` → (its module name, the python_path entry).

    The module and its path are dropped from the process again after the test."""
    path_before = list(sys.path)
    made: list[str] = []

    def write(source: str = SOURCE) -> tuple[str, str]:
        name = f"wardd_test_tools_{next(_names)}"
        root = tmp_path / f"lib{len(made)}"
        (root / name).mkdir(parents=True)
        (root / name / "__init__.py").write_text(source)
        made.append(name)
        return name, str(root)

    yield write
    sys.path[:] = path_before
    for name in made:
        sys.modules.pop(name, None)


def build(module: str, root: str, **table: Any) -> PythonAdapter:
    table = {"adapter": "python", "python_path": [root], **table}
    table.setdefault("callable", f"{module}:create")
    adapter = build_adapter("crm.create", table, max_frame=MAX_FRAME)
    assert isinstance(adapter, PythonAdapter)
    return adapter


def request(args: bytes = b"{}") -> ActRequest:
    return ActRequest(neuron=NEURON, op="op1", attempt=1, act="crm.create", args=args)


class TestCall:
    def test_the_function_gets_the_attempts_request_and_its_value_is_the_result(self, package):
        """A wire value returned is the result; the function saw args, op, attempt, act, key."""
        mod, root = package()
        adapter = build(mod, root)
        assert adapter.call(request(b"\x01")) == {
            "key": KEY,
            "op": "op1",
            "attempt": 1,
            "act": "crm.create",
            "args": b"\x01",
        }
        assert sys.modules[mod].seen == [request(b"\x01")]

    def test_none_is_a_result(self, package):
        """A function that returns nothing succeeded with null."""
        mod, root = package()
        assert build(mod, root, callable=f"{mod}:nothing").call(request()) is None

    def test_a_method_of_a_module_object_can_be_the_callable(self, package):
        """``module:object.attr`` reaches a bound method."""
        mod, root = package()
        assert build(mod, root, callable=f"{mod}:service.call").call(request()) == "method"

    def test_definite_failure_passes_through_with_its_message(self, package):
        """DefiniteFailure is failed: the worker records its message as it is."""
        mod, root = package()
        with pytest.raises(DefiniteFailure, match="^the CRM said no: duplicate name$"):
            build(mod, root, callable=f"{mod}:refuse").call(request())

    @pytest.mark.parametrize(
        "function,text",
        [
            ("crash", "ConnectionResetError: peer reset the connection"),
            ("key_error", "KeyError: 'missing'"),
            ("unprintable", "Odd"),
        ],
    )
    def test_any_other_exception_is_unknown_with_its_type_and_message(
        self, package, function, text
    ):
        """Any other exception is unknown; the text is the exception's type and str() only."""
        mod, root = package()
        with pytest.raises(OutcomeUnknown) as raised:
            build(mod, root, callable=f"{mod}:{function}").call(request())
        assert str(raised.value).endswith(text)
        assert "Traceback" not in str(raised.value)

    def test_a_value_that_cannot_be_sent_back_is_unknown(self, package):
        """A value that is not a wire value is unknown: the effect may have happened."""
        mod, root = package()
        with pytest.raises(OutcomeUnknown, match="the function returned a dict that is not a wire"):
            build(mod, root, callable=f"{mod}:unencodable").call(request())

    def test_the_adapter_runs_in_process_and_cannot_be_aborted(self, package):
        """in_process (receipts may apply not_executed); not abortable (contract §3.8)."""
        mod, root = package()
        adapter = build(mod, root)
        assert adapter.in_process is True and adapter.kind == "python"
        assert getattr(adapter, "abortable", False) is False
        assert adapter.claim_info() == {"callable": f"{mod}:create"}


class TestReceipt:
    def test_no_receipt_function_no_receipt(self, package):
        """Without ``receipt`` the act offers none (the daemon never asks)."""
        mod, root = package()
        assert has_receipt(build(mod, root)) is False
        assert has_receipt(build(mod, root, receipt=f"{mod}:receipt")) is True

    @pytest.mark.parametrize(
        "answer,expected",
        [
            ("executed", Receipt("executed")),
            ("not_executed", Receipt("not_executed")),
            ("unknown", Receipt("unknown")),
            (("executed", {"id": 7}), Receipt("executed", {"id": 7})),
        ],
    )
    def test_the_receipt_functions_answer_is_taken(self, package, answer, expected):
        """The receipt gets the key; its word, or (executed, value), is the answer."""
        mod, root = package()
        adapter = build(mod, root, receipt=f"{mod}:receipt")
        sys.modules[mod].answers[KEY] = answer
        assert adapter.receipt(KEY, adapter.claim_info()) == expected

    @pytest.mark.parametrize(
        "function,error,detail",
        [
            ("receipt_raises", "PermissionError", "PermissionError: token expired for api.example"),
            ("receipt_garbage", "no_answer", "returned a value of type list, not an answer"),
            ("receipt_unencodable", "no_answer", "answered executed with a set that is not a wire"),
        ],
    )
    def test_a_receipt_that_raises_or_answers_garbage_is_unknown_and_logged(
        self, package, function, error, detail
    ):
        """A raising or garbage receipt is unknown, with a detail, and logged at warning."""
        mod, root = package()
        adapter = build(mod, root, receipt=f"{mod}:{function}")
        with structlog.testing.capture_logs() as logs:
            got = adapter.receipt(KEY, adapter.claim_info())
        assert got.answer == "unknown" and detail in (got.detail or "")
        assert logs == [
            {
                "event": "receipt_failed",
                "log_level": "warning",
                "neuron": NEURON,
                "op": "op1",
                "attempt": 1,
                "error": error,
            }
        ]

    def test_a_receipt_that_does_not_answer_in_time_is_unknown(self, package):
        """A hung receipt never holds the start: past its time it is unknown."""
        mod, root = package()
        adapter = attrs.evolve(
            build(mod, root, receipt=f"{mod}:receipt_waits"), receipt_timeout_s=0.05
        )
        try:
            got = adapter.receipt(KEY, adapter.claim_info())
        finally:
            sys.modules[mod].gate.set()  # the receipt's thread ends
        assert got == Receipt("unknown", detail="the receipt did not answer within 0.05 s")

    def test_an_attempt_never_claimed_is_not_executed_without_asking(self, package):
        """claim_info None: the function was never called (contract §3.8)."""
        mod, root = package()
        adapter = build(mod, root, receipt=f"{mod}:receipt_raises")
        assert adapter.receipt(KEY, None) == Receipt("not_executed")

    def test_not_executed_about_another_callables_claim_is_unknown(self, package):
        """A claim made with another callable: executed stands, not_executed does not."""
        mod, root = package()
        adapter = build(mod, root, receipt=f"{mod}:receipt")
        for claim in ({"callable": "old.tools:create"}, {}):
            got = adapter.receipt(KEY, claim)
            assert got.answer == "unknown" and f"now calls '{mod}:create'" in (got.detail or "")
            sys.modules[mod].answers[KEY] = "executed"
            assert adapter.receipt(KEY, claim) == Receipt("executed")
            sys.modules[mod].answers.clear()


class TestConfig:
    @pytest.mark.parametrize("key", ["callable", "receipt"])
    @pytest.mark.parametrize(
        "spec,reason",
        [
            ("{mod}_absent:create", "does not import: ModuleNotFoundError: No module named"),
            ("{mod}:absent", "has no attribute 'absent'"),
            ("{mod}:LIMIT", "is not callable (its type is int)"),
            ("{mod}.create", "(no ':' between them)"),
            ("{mod}:coroutine", "is async"),
            ("{mod}:two", "does not take one positional argument"),
        ],
    )
    def test_a_function_that_cannot_be_called_is_refused_naming_the_key(
        self, package, key, spec, reason
    ):
        """Each refusal is one line naming acts."crm.create".<key> and why."""
        mod, root = package()
        table = {"adapter": "python", "callable": f"{mod}:create", "python_path": [root]}
        table[key] = spec.format(mod=mod)
        with pytest.raises(ConfigError) as refused:
            parse_config({"acts": {"crm.create": table}}, "w.toml")
        text = str(refused.value)
        assert text.startswith(f'w.toml: acts."crm.create".{key}: ') and reason in text
        assert "\n" not in text

    def test_a_module_that_raises_on_import_is_refused_in_one_line(self, package):
        """An import that fails inside the module (even by sys.exit) is a config error."""
        for source in ("raise ValueError('bad\\nconfig')\n", "import sys\nsys.exit(3)\n"):
            mod, root = package(source)
            with pytest.raises(AdapterConfigError) as refused:
                build(mod, root)
            assert refused.value.key == "callable" and "does not import" in refused.value.reason
            assert "\n" not in str(refused.value)

    @pytest.mark.parametrize(
        "python_path,key,reason",
        [
            ("/opt/tools", "python_path", "must be a list"),
            ([7], "python_path[0]", "must be an absolute path string"),
            (["tools"], "python_path[0]", "must be an absolute path"),
            (["/nonexistent/wardd/tools"], "python_path[0]", "does not exist"),
        ],
    )
    def test_python_path_is_a_list_of_absolute_paths_that_exist(
        self, package, python_path, key, reason
    ):
        """python_path must be a list of strings, each an absolute path that exists."""
        mod, _ = package()
        with pytest.raises(AdapterConfigError) as refused:
            build_adapter(
                "t",
                {"adapter": "python", "callable": f"{mod}:create", "python_path": python_path},
                max_frame=MAX_FRAME,
            )
        assert refused.value.key == key and reason in refused.value.reason

    def test_python_path_goes_before_sys_path_in_its_order(self, package, tmp_path):
        """The configured entries come first, in order, each once."""
        mod, root = package()
        other = str(tmp_path)
        build(mod, root, python_path=[other, root])
        build(mod, root, python_path=[other, root])
        assert sys.path[:2] == [other, root]
        assert sys.path.count(root) == 1

    def test_unknown_keys_and_a_missing_callable_are_refused(self, package):
        """A typo is refused, not ignored; callable is required."""
        mod, root = package()
        with pytest.raises(AdapterConfigError) as refused:
            build(mod, root, callabel="x:y")
        assert refused.value.key == "callabel"
        with pytest.raises(AdapterConfigError) as refused:
            build_adapter("t", {"adapter": "python"}, max_frame=MAX_FRAME)
        assert refused.value.key == "callable"
