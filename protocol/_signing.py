"""Neuron signatures (contract §4): Ed25519 over a deterministic CBOR signing input.

A signed request's params carry ``neuron`` (lowercase hex of the 32-byte
Ed25519 public key) and ``sig`` (64 bytes): the signature over
``cbor(["wardd/1", network, method, params-without-sig])`` in RFC 8949
§4.2.1 deterministic encoding, where ``sig`` and the trace context
(``traceparent``, ``tracestate``: ``_trace``) are removed (``neuron`` and
``network``, if present, stay in). The network signed is the daemon's
own, so a request signed for another network never verifies here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import cbor2
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from nacl.bindings import crypto_sign_open
from nacl.exceptions import CryptoError

from ._cbor import encode_item
from ._constants import SIGNING_DOMAIN
from ._trace import UNSIGNED

__all__ = ["check_signature", "neuron_id", "sign", "signing_input", "verify"]

_HEX_DIGITS = frozenset("0123456789abcdef")
_SIG_LENGTH = 64


def signing_input(network: str, method: str, params: Mapping[str, Any]) -> bytes:
    """The bytes a neuron signs: ``cbor(["wardd/1", network, method, params - sig])``
    (the trace context params are left out too: a tracer may set them)."""
    signed = {key: value for key, value in params.items() if key not in UNSIGNED}
    return encode_item([SIGNING_DOMAIN, network, method, signed], canonical=True)


def neuron_id(key: Ed25519PrivateKey | Ed25519PublicKey) -> str:
    """The neuron id of a key: lowercase hex of its raw 32-byte public key."""
    public = key.public_key() if isinstance(key, Ed25519PrivateKey) else key
    return public.public_bytes(Encoding.Raw, PublicFormat.Raw).hex()


def verify(
    neuron_hex: str, sig: bytes, network: str, method: str, params: Mapping[str, Any]
) -> bool:
    """True iff `sig` is `neuron_hex`'s signature of this request on `network`.

    Never raises: a malformed neuron id (anything but 64 lowercase hex
    digits), a `sig` that is not 64 bytes, params that cannot be encoded or an
    invalid signature are all simply False.
    """
    if not (
        isinstance(neuron_hex, str)
        and len(neuron_hex) == 64
        and _HEX_DIGITS.issuperset(neuron_hex)
        and isinstance(sig, bytes)
        and len(sig) == _SIG_LENGTH
        and isinstance(network, str)
        and isinstance(method, str)
        and isinstance(params, Mapping)
    ):
        return False
    try:
        message = signing_input(network, method, params)
        check_signature(bytes.fromhex(neuron_hex), sig, message)
    except (InvalidSignature, ValueError, TypeError, cbor2.CBOREncodeError):
        return False
    return True


def check_signature(public: bytes, sig: bytes, message: bytes) -> None:
    """Raise `InvalidSignature` unless `sig` is `public`'s Ed25519 signature of
    `message`.

    Always by libsodium (PyNaCl): 53 µs a check on this project's machines
    against 106 µs for OpenSSL's (`cryptography`, which still signs and
    derives keys). One verifier only, so that what a daemon accepts never
    depends on what happens to be installed: libsodium checks the standard
    Ed25519 equation and also refuses small-order keys and signature points,
    where OpenSSL's rules differ (no key pair of ours produces either).
    """
    if len(public) != 32:
        raise ValueError("an Ed25519 public key is 32 bytes")
    try:
        crypto_sign_open(sig + message, public)
    except CryptoError as exc:
        raise InvalidSignature from exc


def sign(
    private_key: Ed25519PrivateKey, network: str, method: str, params: Mapping[str, Any]
) -> dict[str, Any]:
    """A copy of `params` with ``neuron`` (this key's id) and ``sig`` set for `method`.

    Any ``sig`` already in `params` is replaced; any ``neuron`` is replaced
    by the signer's own id.
    """
    signed = {key: value for key, value in params.items() if key != "sig"}
    signed["neuron"] = neuron_id(private_key)
    signed["sig"] = private_key.sign(signing_input(network, method, signed))
    return signed
