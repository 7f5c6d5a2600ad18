"""wardd.client's neuron keys: key files loaded and refused, the secret never
shown, and requests signed with the key."""

from __future__ import annotations

import copy
import os
import pickle
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    BestAvailableEncryption,
    Encoding,
    NoEncryption,
    PrivateFormat,
)

from tests.unit._client_peer import NETWORK
from wardd.client import KeyFileError, Neuron
from wardd.protocol import neuron_id, verify


def secret_forms(path: Path) -> list[str]:
    """Every spelling of a key file's secret that must never be shown."""
    data = path.read_bytes()
    key = Neuron.load(path)._key
    seed = key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    forms = [seed.hex(), seed.hex().upper(), repr(seed), data.decode("latin-1").strip()]
    pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()
    forms.append(pem.splitlines()[1])
    return forms


class TestNeuronKeys:
    def test_save_writes_pem_mode_0600_even_with_an_open_umask(self, tmp_path: Path) -> None:
        """`save` writes PKCS#8 PEM readable by the owner only, whatever the umask."""
        path = tmp_path / "sub" / "neuron.key"
        old = os.umask(0)
        try:
            neuron = Neuron.generate()
            neuron.save(path)
        finally:
            os.umask(old)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        assert path.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
        assert Neuron.load(path).id == neuron.id

    def test_save_refuses_to_overwrite_unless_asked(self, tmp_path: Path) -> None:
        """An existing key file is kept unless `overwrite=True`, which replaces it at 0600."""
        path = tmp_path / "neuron.key"
        first, second = Neuron.generate(), Neuron.generate()
        first.save(path)
        with pytest.raises(FileExistsError):
            second.save(path)
        assert Neuron.load(path).id == first.id
        os.chmod(path, 0o644)
        second.save(path, overwrite=True)
        assert Neuron.load(path).id == second.id
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert [p.name for p in tmp_path.iterdir()] == ["neuron.key"]

    def test_save_does_not_follow_a_symlink(self, tmp_path: Path) -> None:
        """A symlink where the key should go is an existing file, not a way to write elsewhere."""
        target = tmp_path / "elsewhere"
        (tmp_path / "neuron.key").symlink_to(target)
        with pytest.raises(FileExistsError):
            Neuron.generate().save(tmp_path / "neuron.key")
        assert not target.exists()

    def test_load_accepts_a_raw_32_byte_seed(self, tmp_path: Path) -> None:
        """A file of exactly 32 bytes is the raw Ed25519 seed."""
        key = Ed25519PrivateKey.generate()
        seed = key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        (tmp_path / "k").write_bytes(seed)
        assert Neuron.load(tmp_path / "k").id == neuron_id(key)

    @pytest.mark.parametrize("spell", [str.lower, str.upper, lambda h: f"  {h}\n"])
    def test_load_accepts_64_hex_digits(self, tmp_path: Path, spell: Callable[[str], str]) -> None:
        """64 hex digits (any case, surrounding whitespace) are the seed in hex."""
        key = Ed25519PrivateKey.generate()
        seed = key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        (tmp_path / "k").write_text(spell(seed.hex()))
        assert Neuron.load(tmp_path / "k").id == neuron_id(key)

    def test_load_accepts_a_foreign_pkcs8_pem(self, tmp_path: Path) -> None:
        """PEM written by another tool (cryptography here) loads to the same neuron."""
        key = Ed25519PrivateKey.generate()
        pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
        (tmp_path / "k").write_bytes(pem)
        assert Neuron.load(tmp_path / "k").id == neuron_id(key)

    def test_load_refuses_an_encrypted_pem(self, tmp_path: Path) -> None:
        """An encrypted key is refused with a message saying so."""
        key = Ed25519PrivateKey.generate()
        pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, BestAvailableEncryption(b"pw"))
        (tmp_path / "k").write_bytes(pem)
        with pytest.raises(KeyFileError, match="encrypted"):
            Neuron.load(tmp_path / "k")

    def test_load_refuses_a_key_of_another_algorithm(self, tmp_path: Path) -> None:
        """A PEM holding an EC key is not a neuron key."""
        key = ec.generate_private_key(ec.SECP256R1())
        pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
        (tmp_path / "k").write_bytes(pem)
        with pytest.raises(KeyFileError, match="not an Ed25519 key"):
            Neuron.load(tmp_path / "k")

    @pytest.mark.parametrize(
        "content",
        [b"", b"short", b"z" * 64, b"ab" * 33, b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END"],
    )
    def test_load_refuses_garbage_without_echoing_it(self, tmp_path: Path, content: bytes) -> None:
        """Anything else is a KeyFileError naming the path, never the content."""
        path = tmp_path / "k"
        path.write_bytes(content)
        with pytest.raises(KeyFileError) as info:
            Neuron.load(path)
        assert str(path) in str(info.value)
        if len(content) > 4:
            assert content.decode() not in str(info.value)

    def test_load_of_a_missing_file_names_it(self, tmp_path: Path) -> None:
        """A missing key file is a KeyFileError naming the path."""
        with pytest.raises(KeyFileError, match="cannot read key file .*missing"):
            Neuron.load(tmp_path / "missing")

    def test_id_is_lowercase_hex_of_the_raw_public_key(self) -> None:
        """contract §2: neuron = lowercase hex of the 32-byte Ed25519 public key."""
        key = Ed25519PrivateKey.generate()
        neuron = Neuron.from_private_key(key)
        assert neuron.id == neuron_id(key)
        assert len(neuron.id) == 64 and neuron.id == neuron.id.lower()
        assert neuron.public_key == bytes.fromhex(neuron.id)

    def test_no_key_material_in_repr_str_or_errors(self, tmp_path: Path) -> None:
        """repr/str show only the public id; pickling and copying are refused."""
        path = tmp_path / "k"
        neuron = Neuron.generate()
        neuron.save(path)
        shown = [repr(neuron), str(neuron), f"{neuron}", repr([neuron])]
        for exc_type, action in [
            (TypeError, lambda: pickle.dumps(neuron)),
            (TypeError, lambda: copy.copy(neuron)),
            (TypeError, lambda: copy.deepcopy(neuron)),
        ]:
            with pytest.raises(exc_type) as info:
                action()
            shown.append(str(info.value))
        for text in shown:
            for secret in secret_forms(path):
                assert secret not in text
        assert neuron.id in repr(neuron)
        assert not hasattr(neuron, "__dict__")


class TestNeuronSigning:
    def test_signature_verifies_with_the_protocol(self) -> None:
        """`sign` adds neuron and sig; wardd.protocol.verify accepts it for that network."""
        neuron = Neuron.generate()
        params = {"prog": "p", "op": "o", "act": "echo", "args": b"\x00\xff"}
        signed = neuron.sign("submit", params, NETWORK)
        assert signed["neuron"] == neuron.id and len(signed["sig"]) == 64
        assert params == {"prog": "p", "op": "o", "act": "echo", "args": b"\x00\xff"}
        assert verify(neuron.id, signed["sig"], NETWORK, "submit", signed)
        assert not verify(neuron.id, signed["sig"], "other", "submit", signed)
        assert not verify(neuron.id, signed["sig"], NETWORK, "prepare", signed)
        assert not verify(neuron.id, signed["sig"], NETWORK, "submit", dict(signed, op="x"))

    def test_a_stale_sig_and_neuron_are_replaced(self) -> None:
        """Re-signing signed params (or forging another neuron) gives this neuron's signature."""
        a, b = Neuron.generate(), Neuron.generate()
        signed = b.sign("cancel", a.sign("cancel", {"op": "o"}, NETWORK), NETWORK)
        assert signed["neuron"] == b.id
        assert verify(b.id, signed["sig"], NETWORK, "cancel", signed)
