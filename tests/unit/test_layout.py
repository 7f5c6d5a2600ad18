"""The test suite's own layout rules."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
IMPORT_OF_A_TEST_MODULE = re.compile(r"^\s*(from|import)\s+tests\.\w+\.test_\w+", re.M)


def test_tests_import_helpers_from_the_harness_never_from_another_test_module() -> None:
    """Shared helpers live in tests/daemon/harness.py (or a _private module);
    a test module never imports another test module."""
    offenders = [
        str(path.relative_to(TESTS))
        for path in sorted(TESTS.rglob("*.py"))
        if IMPORT_OF_A_TEST_MODULE.search(path.read_text())
    ]
    assert offenders == []
