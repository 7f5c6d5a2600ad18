"""Unit tests of wardd.protocol's signing (contract §4): fixed vectors of the
signed bytes, and the signing input, signatures and their verification."""

from __future__ import annotations

from typing import Any

import cbor2
import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

import wardd.protocol as wp
from wardd.protocol import sign, signing_input, verify


class TestSigningVectors:
    """Fixed bytes for two requests: the signed bytes depend on cbor2's canonical
    encoding (hence its pin, `cbor2>=6.2,<7`), and a change there must fail here
    before a client and a daemon of different builds stop verifying each other."""

    key = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
    neuron = "03a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b8"
    submit = {"prog": "notes", "op": "op-1", "act": "echo", "args": b"hello\x00"}
    submit_input = (
        "846777617264642f31656c6f63616c667375626d6974a6626f70646f702d3163616374646563686f"
        "64617267734668656c6c6f006470726f67656e6f746573666e6575726f6e78403033613130376266"
        "6633636531306265316437306464313865373462633039393637653464363330396261353064356631"
        "646463383636343132353533316238676e6574776f726b656c6f63616c"
    )
    submit_sig = (
        "8f1e2142357160597c8938a46ce78dbd19ff2e4f72c7ab531b727efbb13cf0b6"
        "42adb4dbbc164a3c9f6f0c7db1afe61225002f2215b2c4b9dc8e0eaf575c8b0f"
    )
    bind = {
        "expected_generation": 2**32,
        "descriptor": {
            "worker": "w0",
            "boot": "0123456789abcdef0123456789abcdef",
            "tags": ["a", "bb"],
            "n": -1,
            "ok": True,
            "none": None,
        },
    }
    bind_input = (
        "846777617264642f31656c6f63616c6e62696e645f706c6163656d656e74a3666e6575726f6e7840"
        "3033613130376266663363653130626531643730646431386537346263303939363765346436333039"
        "62613530643566316464633836363431323535333162386a64657363726970746f72a6616e20626f6b"
        "f564626f6f7478203031323334353637383961626364656630313233343536373839616263646566"
        "646e6f6e65f6647461677382616162626266776f726b65726277307365787065637465645f67656e"
        "65726174696f6e1b0000000100000000"
    )
    bind_sig = (
        "65bd58ecd19f85c745eac1528bd6d064b4ce8a84dc294c251f7d68b6f39b408a"
        "f27c784c6178b8d3c402351ee065e22762cb6da85ba242a2d49217f40e6d9700"
    )

    @pytest.mark.parametrize("which", ["submit", "bind"])
    def test_the_signing_input_and_signature_are_these_bytes(self, which: str) -> None:
        """A submit (bytes args, the network signed in) and a bind_placement (a
        nested descriptor: a list, a negative, a bool, a null, a 64-bit int)."""
        method = {"submit": "submit", "bind": "bind_placement"}[which]
        params = dict(getattr(self, which))
        if which == "submit":
            params["network"] = "local"
        signed = sign(self.key, "local", method, params)
        assert signed["neuron"] == self.neuron
        assert signing_input("local", method, signed).hex() == getattr(self, f"{which}_input")
        assert signed["sig"].hex() == getattr(self, f"{which}_sig")
        assert verify(self.neuron, signed["sig"], "local", method, signed)


class TestSigning:
    key = Ed25519PrivateKey.generate()

    def test_signing_input_is_the_contract_array(self) -> None:
        """cbor(["wardd/1", network, method, params-without-sig]), deterministic."""
        params = {"sig": b"s" * 64, "neuron": "ab", "network": "local", "op": "x"}
        expected = cbor2.dumps(
            ["wardd/1", "local", "prepare", {"neuron": "ab", "network": "local", "op": "x"}],
            canonical=True,
        )
        assert signing_input("local", "prepare", params) == expected

    def test_signing_input_ignores_key_order(self) -> None:
        """Two dicts with the same content sign the same bytes."""
        a = signing_input("n", "m", {"a": 1, "bb": 2, "c": [1]})
        b = signing_input("n", "m", {"c": [1], "bb": 2, "a": 1})
        assert a == b

    def test_sign_then_verify(self) -> None:
        """A signed request verifies with the neuron it names."""
        signed = sign(self.key, "local", "advance_epoch", {"expected_epoch": 1})
        assert set(signed) == {"expected_epoch", "neuron", "sig"}
        assert signed["neuron"] == wp.neuron_id(self.key)
        assert signed["neuron"] == wp.neuron_id(self.key.public_key())
        assert len(signed["sig"]) == 64
        assert verify(signed["neuron"], signed["sig"], "local", "advance_epoch", signed)

    def test_sign_replaces_sig_and_neuron(self) -> None:
        """An old sig or someone else's neuron in params is replaced, never signed."""
        signed = sign(self.key, "n", "m", {"sig": b"old", "neuron": "00" * 32, "a": 1})
        assert signed["neuron"] == wp.neuron_id(self.key)
        assert verify(signed["neuron"], signed["sig"], "n", "m", signed)

    def test_sign_does_not_mutate_params(self) -> None:
        """sign returns a copy."""
        params = {"a": 1}
        sign(self.key, "n", "m", params)
        assert params == {"a": 1}

    @pytest.mark.parametrize(
        "tamper",
        ["param", "added param", "method", "network", "network param", "sig", "neuron"],
    )
    def test_tampering_is_detected(self, tamper: str) -> None:
        """Any change to what was signed makes verify False."""
        params = {"op": "o1", "expected_attempt": 1, "network": "local"}
        signed = sign(self.key, "local", "prepare", params)
        neuron, sig, network, method = signed["neuron"], signed["sig"], "local", "prepare"
        if tamper == "param":
            signed["expected_attempt"] = 2
        elif tamper == "added param":
            signed["expected_epoch"] = 1
        elif tamper == "method":
            method = "invoke"
        elif tamper == "network":
            network = "other"
        elif tamper == "network param":
            signed["network"] = "other"
        elif tamper == "sig":
            sig = bytes([sig[0] ^ 1]) + sig[1:]
        else:
            other = Ed25519PrivateKey.generate()
            neuron = signed["neuron"] = wp.neuron_id(other)
        assert not verify(neuron, sig, network, method, signed)

    @pytest.mark.parametrize(
        ("neuron", "sig"),
        [
            ("zz" * 32, b"s" * 64),
            ("AB" * 32, b"s" * 64),
            ("ab" * 31, b"s" * 64),
            ("ab" * 33, b"s" * 64),
            ("", b"s" * 64),
            (None, b"s" * 64),
            (b"\x00" * 32, b"s" * 64),
            ("ab" * 32, b"s" * 63),
            ("ab" * 32, b"s" * 65),
            ("ab" * 32, "s" * 64),
            ("ab" * 32, None),
            ("ab" * 32, bytearray(64)),
        ],
        ids=repr,
    )
    def test_malformed_inputs_are_false_not_errors(self, neuron: Any, sig: Any) -> None:
        """verify never raises: a bad key or signature shape is simply False."""
        assert verify(neuron, sig, "local", "m", {"a": 1}) is False

    def test_uppercase_neuron_does_not_verify(self) -> None:
        """Only the lowercase hex spelling of a key is its neuron id."""
        signed = sign(self.key, "n", "m", {})
        assert not verify(signed["neuron"].upper(), signed["sig"], "n", "m", signed)

    @pytest.mark.parametrize(
        "params",
        [{"x": object()}, {"x": 2**70}, {"x": {1, 2}}, "not a map", None],
        # ids the same in every process (an object's repr holds its address):
        # pytest-xdist's workers must collect the same names
        ids=["object", "2**70", "set", "not a map", "None"],
    )
    def test_unencodable_params_are_false(self, params: Any) -> None:
        """Params that cannot be encoded make verify False, not an exception."""
        assert verify("ab" * 32, b"s" * 64, "n", "m", params) is False

    def test_wrong_network_arguments_are_false(self) -> None:
        """Non-text network or method are simply False."""
        signed = sign(self.key, "n", "m", {})
        not_text: Any = None
        assert not verify(signed["neuron"], signed["sig"], not_text, "m", signed)
        assert not verify(signed["neuron"], signed["sig"], "n", not_text, signed)

    def test_a_low_order_public_key_does_not_verify(self) -> None:
        """The identity point as a key never verifies a signature of ours."""
        identity = "01" + "00" * 31
        assert not verify(identity, bytes(64), "n", "m", {})

    def test_the_daemons_check_agrees_with_openssls_on_honest_and_tampered_signatures(
        self,
    ) -> None:
        """The daemon checks with libsodium only; on the signatures a client of
        ours makes (and tampered ones, foreign keys, the identity point) it
        decides as OpenSSL's check does."""
        from wardd.protocol._signing import check_signature, signing_input

        def both(public: bytes, sig: bytes, message: bytes) -> tuple[bool, bool]:
            got = []
            for check in (
                check_signature,
                lambda k, s, m: Ed25519PublicKey.from_public_bytes(k).verify(s, m),
            ):
                try:
                    check(public, sig, message)
                    got.append(True)
                except (InvalidSignature, ValueError):
                    got.append(False)
            return got[0], got[1]

        signed = sign(self.key, "n", "m", {"a": 1})
        public, sig = bytes.fromhex(signed["neuron"]), signed["sig"]
        message = signing_input("n", "m", signed)
        assert both(public, sig, message) == (True, True)
        assert both(public, sig, signing_input("n", "m", {**signed, "a": 2})) == (False, False)
        assert both(public, sig[:-1] + bytes([sig[-1] ^ 1]), message) == (False, False)
        other = bytes.fromhex(wp.neuron_id(Ed25519PrivateKey.generate()))
        assert both(other, sig, message) == (False, False)
        assert both(bytes.fromhex("01" + "00" * 31), bytes(64), message) == (False, False)
