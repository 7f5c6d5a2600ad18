"""The neuron: a signing subject holding an Ed25519 key (contract §2, §4).

A `Neuron` signs requests; it is never sent anywhere but as its public id.
Key material stays inside the object: it is not in `repr`/`str`, not in any
exception message this module raises, and the object refuses to be pickled
or copied (a copy of a key is a second holder to keep track of).
"""

from __future__ import annotations

import binascii
import os
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
    load_pem_private_key,
)

from wardd.protocol import sign as _protocol_sign

from ._errors import KeyFileError

__all__ = ["Neuron"]

_SEED_BYTES = 32
_PEM_MARKER = b"-----BEGIN"
# Key files are tiny; refusing big ones keeps a wrong --key from reading a disk image.
_MAX_KEY_FILE = 16 * 1024


class Neuron:
    """An Ed25519 signing subject; `id` is the lowercase hex of its public key.

    Create one with `generate`, `load` or `from_private_key`; `save` writes it.
    """

    __slots__ = ("_key", "_id")

    def __init__(self, private_key: Ed25519PrivateKey) -> None:
        if not isinstance(private_key, Ed25519PrivateKey):
            raise TypeError("a Neuron needs an Ed25519 private key")
        self._key = private_key
        raw = private_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self._id = raw.hex()

    # -- construction ------------------------------------------------------------
    @classmethod
    def generate(cls) -> Neuron:
        """A neuron with a fresh random key."""
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_private_key(cls, private_key: Ed25519PrivateKey) -> Neuron:
        """A neuron for an existing `cryptography` Ed25519 key."""
        return cls(private_key)

    @classmethod
    def from_seed(cls, seed: bytes) -> Neuron:
        """A neuron from a raw 32-byte Ed25519 seed (private key bytes)."""
        if len(seed) != _SEED_BYTES:
            raise ValueError(f"an Ed25519 seed is {_SEED_BYTES} bytes, not {len(seed)}")
        return cls(Ed25519PrivateKey.from_private_bytes(bytes(seed)))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Neuron:
        """Read a key file: unencrypted PKCS#8 PEM, a raw 32-byte seed, or 64 hex digits.

        Raises `KeyFileError` naming the path and what is wrong (never the
        file's content).
        """
        where = os.fspath(path)
        try:
            with open(where, "rb") as f:
                data = f.read(_MAX_KEY_FILE + 1)
        except OSError as exc:
            missing = isinstance(exc, FileNotFoundError)
            hint = f" (create one with: wardctl --key {where} keygen)" if missing else ""
            raise KeyFileError(
                f"cannot read key file {where}: {exc.strerror or exc}{hint}"
            ) from None
        if len(data) > _MAX_KEY_FILE:
            _refuse(where, "too large to be a key file")
        return cls(_parse_key(where, data))

    # -- persistence ---------------------------------------------------------------
    def _private_pem(self) -> bytes:
        # The key as unencrypted PKCS#8 PEM: only `save` needs it.
        return self._key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())

    def save(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> None:
        """Write the key as PKCS#8 PEM, mode 0600, durably.

        An existing file is refused (`FileExistsError`) unless `overwrite`;
        an overwrite replaces the file atomically. Missing parent directories
        are created with mode 0700.
        """
        target = Path(path)
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        data = self._private_pem()
        if overwrite:
            _write_replacing(target, data)
        else:
            _write_new(target, data)

    # -- identity and signing ------------------------------------------------------
    @property
    def id(self) -> str:
        """The neuron id: lowercase hex of the raw 32-byte public key (contract §2)."""
        return self._id

    @property
    def public_key(self) -> bytes:
        """The raw 32-byte public key."""
        return bytes.fromhex(self._id)

    def sign(self, method: str, params: Mapping[str, Any], network: str) -> dict[str, Any]:
        """A copy of `params` with ``neuron`` and ``sig`` added (contract §4).

        ``sig`` covers ``["wardd/1", network, method, params-without-sig]`` in
        deterministic CBOR; it is computed by `wardd.protocol.sign`. A stale
        ``sig`` in `params` is replaced.
        """
        unsigned = {k: v for k, v in params.items() if k != "sig"}
        signed: dict[str, Any] = _protocol_sign(self._key, network, method, unsigned)
        return signed

    # -- hygiene -----------------------------------------------------------------
    def __repr__(self) -> str:
        return f"Neuron(id={self._id!r})"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Neuron):
            return NotImplemented
        return self._id == other._id

    def __hash__(self) -> int:
        return hash(self._id)

    def __reduce__(self) -> NoReturn:
        raise TypeError("a Neuron holds a private key and cannot be pickled; save() it instead")

    def __copy__(self) -> NoReturn:
        raise TypeError("a Neuron holds a private key and cannot be copied")

    def __deepcopy__(self, memo: Any) -> NoReturn:
        raise TypeError("a Neuron holds a private key and cannot be copied")


def _refuse(where: str, why: str) -> NoReturn:
    raise KeyFileError(f"key file {where}: {why}")


def _parse_key(where: str, data: bytes) -> Ed25519PrivateKey:
    if len(data) == _SEED_BYTES:  # no PEM is this short: a raw seed
        return Ed25519PrivateKey.from_private_bytes(data)
    if data.lstrip().startswith(_PEM_MARKER):
        return _parse_pem(where, data)
    text = data.strip()
    if len(text) == 2 * _SEED_BYTES:
        try:
            seed = binascii.unhexlify(text)
        except (binascii.Error, ValueError):
            seed = None
        if seed is not None:
            return Ed25519PrivateKey.from_private_bytes(seed)
    _refuse(
        where,
        f"not a key ({len(data)} bytes): expected unencrypted PKCS#8 PEM, "
        "a raw 32-byte seed, or 64 hex digits",
    )


def _parse_pem(where: str, data: bytes) -> Ed25519PrivateKey:
    try:
        key = load_pem_private_key(data, password=None)
    except TypeError:
        _refuse(where, "the PEM key is encrypted; wardd needs an unencrypted key")
    except (ValueError, UnsupportedAlgorithm):
        # cryptography's messages name the format problem, not the content,
        # but they are not ours to vouch for: say it in our own words.
        _refuse(where, "not a readable PKCS#8 PEM private key")
    if not isinstance(key, Ed25519PrivateKey):
        _refuse(where, f"holds a {type(key).__name__.lstrip('_')}, not an Ed25519 key")
    return key


def _write_new(target: Path, data: bytes) -> None:
    # O_EXCL: refuse an existing file (or symlink) without a race.
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(target, flags, 0o600)
    except FileExistsError:
        raise FileExistsError(f"key file {target} already exists") from None
    try:
        _fill(fd, data)
    except BaseException:
        os.close(fd)
        target.unlink(missing_ok=True)
        raise
    os.close(fd)
    _fsync_dir(target.parent)


def _write_replacing(target: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        _fill(fd, data)
        os.close(fd)
        fd = -1
        os.replace(tmp, target)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(target.parent)


def _fill(fd: int, data: bytes) -> None:
    # The mode is set explicitly: O_CREAT's mode is filtered by the umask.
    os.fchmod(fd, stat.S_IRUSR | stat.S_IWUSR)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.fsync(fd)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
