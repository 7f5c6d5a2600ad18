"""`check_params` (`wardd.daemon.wire.params`): the same refusal, message and order, as its
two-pass definition, for any params a frame can carry."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wardd.daemon.dispatch.handlers import METHODS
from wardd.daemon.wire.params import _SIG_FIELDS, Spec, _no_floats, check_params, text
from wardd.protocol import BadRequest


def two_pass(spec: Spec, params: Mapping[str, Any], *, signed: bool) -> None:
    """The definition: the whole value walked for floats and key types first, then the names."""
    required, optional = spec
    if signed:
        required = {**required, **_SIG_FIELDS}
        optional = {**optional, "network": text}
        if not _no_floats(params):
            raise BadRequest("signed params use text keys only and no floats")
    for key in params:
        if not isinstance(key, str):
            raise BadRequest("param names must be text")
        if key not in required and key not in optional:
            shown = key[:64]
            raise BadRequest(f"unknown param {shown!r}", {"param": shown})
    for key, check in required.items():
        if key not in params:
            raise BadRequest(f"missing param {key!r}", {"param": key})
        problem = check(params[key])
        if problem:
            raise BadRequest(f"param {key!r} {problem}", {"param": key})
    for key, check in optional.items():
        if key in params:
            problem = check(params[key])
            if problem:
                raise BadRequest(f"param {key!r} {problem}", {"param": key})


def outcome(fn: Any, *args: Any, **kw: Any) -> tuple[str, Any] | None:
    try:
        fn(*args, **kw)
    except BadRequest as err:
        return err.message, err.data
    return None


NAMES = sorted({k for m in METHODS.values() for part in m.params for k in part}) + [
    "neuron", "sig", "network", "extra",
]  # fmt: skip
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-2, 2**64), st.floats(allow_nan=False),
    st.text(max_size=4), st.binary(max_size=64), st.sampled_from(["a" * 64, "op-1", "echo"]),
)  # fmt: skip
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.one_of(st.text(max_size=3), st.integers(0, 3)), inner, max_size=3),
    ),
    max_leaves=8,
)
keys = st.one_of(st.sampled_from(NAMES), st.integers(0, 3), st.binary(max_size=2))
params = st.dictionaries(keys, values, max_size=8)


def same_refusal(method: str, params: dict[Any, Any]) -> None:
    m = METHODS[method]
    assert outcome(check_params, m.params, params, signed=m.signed) == outcome(
        two_pass, m.params, params, signed=m.signed
    )


SOAK = bool(int(os.environ.get("WARDD_SOAK_CASES", "0") or 0))


class TestCheckParams:
    # The default suite draws as many examples as its other properties (200-400);
    # `make soak` draws ten times more (the soak form below).
    @settings(max_examples=300, deadline=None)
    @given(method=st.sampled_from(sorted(METHODS)), params=params)
    def test_one_walk_refuses_as_the_two_pass_definition(self, method, params):
        """Any params: the same refusal (message and details) or none, for every method."""
        same_refusal(method, params)

    @pytest.mark.soak
    @pytest.mark.skipif(not SOAK, reason="soak: run by `make soak` (WARDD_SOAK_CASES)")
    @settings(max_examples=3000, deadline=None)
    @given(method=st.sampled_from(sorted(METHODS)), params=params)
    def test_one_walk_refuses_as_the_two_pass_definition_soak(self, method, params):
        """The same property as above, over ten times as many params (`make soak`)."""
        same_refusal(method, params)
