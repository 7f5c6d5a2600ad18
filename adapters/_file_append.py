"""The ``file.append`` built-in adapter (contract §6).

Each call appends one line ``"<idempotency key>\\t<hex args>\\n"`` to the
configured file and fsyncs it; the receipt looks the key up in that file.

How a call ends:

- The file cannot be opened or inspected (``ENOENT`` on the directory,
  ``EACCES``, not a regular file): `DefiniteFailure`, nothing was written.
- Anything that goes wrong once ``write`` was called (a short write,
  ``ENOSPC``, ``EIO``, a failed ``fsync`` or ``close``): `OutcomeUnknown`
  (unknown), never failed: some bytes may be in the file.
- Otherwise the line is durable and the call returns None.

Decisions:

- The file is opened ``O_RDWR|O_APPEND|O_CREAT|O_CLOEXEC``, mode 0600 when
  created. ``O_RDWR`` rather than ``O_WRONLY`` because the last byte is read
  to find a torn line. The torn-line newline and the record go out in a
  single ``write``.
- Appends to one file are serialised inside the process (a lock per open
  file's device and inode, so two acts naming one file by different paths
  share it), so two workers never interleave the torn-line check and the
  write. Other processes appending to the file are not coordinated with (no
  ``flock``: a stuck outside holder could otherwise hold a worker forever).
- When the file was empty (just created), its directory is fsynced too, so
  that the new file's name is as durable as its content.
- The receipt answers ``executed`` for a complete line that starts with the
  key and a tab *and* whose rest is well-formed hex (even length, lowercase).
  A line with the key that is torn (no newline at the end of the file) or was
  torn and then ended by a later append (its hex is malformed) answers
  ``unknown``: a write of this attempt began, its effect is partial, and
  that is not for a receipt to decide. (A torn line cut at an even number of
  hex digits and later ended cannot be told from a whole one: it answers
  ``executed``.)
- A missing file answers ``not_executed`` only when its directory exists; a
  missing directory (say, a file system not mounted yet) is ``unknown``.
- Renaming or rotating the file away makes every earlier key read as
  ``not_executed``: do not rotate a file while its act has unknown attempts.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Mapping
from typing import IO, Any

import attrs

from . import _config
from ._base import (
    ActRequest,
    AdapterConfigError,
    DefiniteFailure,
    OutcomeUnknown,
    Receipt,
    ReceiptAnswer,
)

_KEYS = ("adapter", "path", "max_arg_bytes")
_HEX_DIGITS = b"0123456789abcdef"
_CHUNK = 1 << 20

_file_locks: dict[tuple[int, int], threading.Lock] = {}
_file_locks_guard = threading.Lock()


def _lock_for(st: os.stat_result) -> threading.Lock:
    """The process-wide lock that serialises appends to the file ``st`` describes."""
    with _file_locks_guard:
        return _file_locks.setdefault((st.st_dev, st.st_ino), threading.Lock())


@attrs.define(eq=False)
class FileAppendAdapter:
    """Appends one line per call to ``path``; in-process, with a receipt."""

    tag: str
    path: str
    max_arg_bytes: int
    in_process: bool = attrs.field(default=True, init=False)
    receipt_supported: bool = attrs.field(default=True, init=False)

    @classmethod
    def from_table(cls, tag: str, table: Mapping[str, Any], *, max_frame: int) -> FileAppendAdapter:
        """Build from the act's table; raises `AdapterConfigError`."""
        _config.refuse_unknown_keys(table, _KEYS)
        if "path" not in table:
            raise AdapterConfigError("path", "missing (an absolute path is required)")
        path = _config.absolute_path(table["path"], "path")
        return cls(tag, path, _config.max_arg_bytes(table, max_frame=max_frame))

    def claim_info(self) -> dict[str, Any]:
        """``{"path": <configured path>}``, stored with the claim for the receipt."""
        return {"path": self.path}

    def call(self, request: ActRequest) -> None:
        """Append the request's line and fsync it (see the module docstring for failures)."""
        key = request.idempotency_key
        if "\t" in key or "\n" in key:
            raise DefiniteFailure("idempotency key holds a tab or a newline")
        if len(request.args) > self.max_arg_bytes:
            raise DefiniteFailure(f"args of {len(request.args)} bytes exceed {self.max_arg_bytes}")
        line = b"%s\t%s\n" % (key.encode(), request.args.hex().encode())
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
        try:
            fd = os.open(self.path, flags, 0o600)
        except OSError as exc:
            raise DefiniteFailure(f"cannot open {self.path}: {exc.strerror}") from exc
        try:
            with _lock_for(_regular_file_stat(fd, self.path)):
                self._append(fd, line)
        finally:
            try:
                os.close(fd)
            except OSError as exc:
                raise OutcomeUnknown(f"close of {self.path} failed: {exc.strerror}") from exc

    def _append(self, fd: int, line: bytes) -> None:
        size = _regular_file_stat(fd, self.path).st_size  # now that no thread of ours appends
        torn = size > 0 and _last_byte(fd, size, self.path) != b"\n"
        data = b"\n" + line if torn else line
        # From here on some bytes may reach the file: every error is unknown.
        _write_durably(fd, data, self.path)
        if size == 0:
            _fsync_directory(self.path)

    def receipt(self, idempotency_key: str, claim_info: Mapping[str, Any] | None = None) -> Receipt:
        """Look the key up in the claimed file (contract §6); never raises."""
        if claim_info is None:
            path: object = self.path  # an unclaimed attempt never reached the adapter
        else:
            path = claim_info.get("path") if isinstance(claim_info, Mapping) else None
        if not isinstance(path, str):
            return Receipt("unknown", detail="claim info holds no path")
        if path != self.path:
            return Receipt("unknown", detail="the configured path changed since the claim")
        if "\t" in idempotency_key or "\n" in idempotency_key:
            return Receipt("unknown", detail="idempotency key holds a tab or a newline")
        return _receipt_from_file(path, idempotency_key.encode() + b"\t")


def _regular_file_stat(fd: int, path: str) -> os.stat_result:
    try:
        st = os.fstat(fd)
    except OSError as exc:
        raise DefiniteFailure(f"cannot stat {path}: {exc.strerror}") from exc
    if not stat.S_ISREG(st.st_mode):
        raise DefiniteFailure(f"{path} is not a regular file")
    return st


def _last_byte(fd: int, size: int, path: str) -> bytes:
    try:
        return os.pread(fd, 1, size - 1)
    except OSError as exc:
        raise DefiniteFailure(f"cannot read the end of {path}: {exc.strerror}") from exc


def _write_durably(fd: int, data: bytes, path: str) -> None:
    try:
        written = os.write(fd, data)
    except OSError as exc:
        raise OutcomeUnknown(f"write to {path} failed: {exc.strerror}") from exc
    if written != len(data):
        raise OutcomeUnknown(f"short write to {path}: {written} of {len(data)} bytes")
    try:
        os.fsync(fd)
    except OSError as exc:
        raise OutcomeUnknown(f"fsync of {path} failed: {exc.strerror}") from exc


def _fsync_directory(path: str) -> None:
    directory = os.path.dirname(path) or "/"
    try:
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError as exc:
        raise OutcomeUnknown(f"fsync of the directory of {path} failed: {exc.strerror}") from exc


def _receipt_from_file(path: str, prefix: bytes) -> Receipt:
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        if os.path.isdir(os.path.dirname(path) or "/"):
            return Receipt("not_executed")
        return Receipt("unknown", detail="the file's directory does not exist")
    except OSError as exc:
        return Receipt("unknown", detail=f"cannot open the file: {exc.strerror}")
    try:
        with f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return Receipt("unknown", detail="not a regular file")
            answer = scan_for_key(f, prefix)
    except OSError as exc:
        return Receipt("unknown", detail=f"cannot read the file: {exc.strerror}")
    if answer == "unknown":
        return Receipt("unknown", detail="the key's line is torn or malformed")
    return Receipt(answer)


def scan_for_key(f: IO[bytes], prefix: bytes) -> ReceiptAnswer:
    """Stream ``f`` for a line starting with ``prefix`` (the key and a tab).

    ``executed`` for a complete, well-formed line; ``unknown`` when the only
    such lines are torn or malformed; ``not_executed`` when the whole file was
    read without one. Reads in chunks of 1 MiB: memory stays bounded however
    large the file or its lines are.
    """
    needle = b"\n" + prefix
    keep = len(needle) - 1
    damaged = False
    buf = b"\n"  # a virtual newline before the first byte: the first line starts a line
    base = -1  # file offset of buf[0]
    while True:
        chunk = f.read(_CHUNK)
        buf += chunk
        hit = buf.find(needle)
        if hit != -1:
            rest_at = base + hit + len(needle)
            whole, next_line = _check_rest(f, rest_at)
            if whole:
                return "executed"
            damaged = True
            if next_line is None:
                break
            f.seek(next_line)
            buf, base = b"\n", next_line - 1
            continue
        if not chunk:
            break
        tail = buf[-keep:]
        base += len(buf) - len(tail)
        buf = tail
    return "unknown" if damaged else "not_executed"


def _check_rest(f: IO[bytes], offset: int) -> tuple[bool, int | None]:
    """Read the line's rest from ``offset``: (well-formed hex?, offset of the next line or None)."""
    f.seek(offset)
    length = 0
    valid = True
    while True:
        piece = f.readline(_CHUNK)
        if not piece:
            return False, None  # torn: the file ends inside the line
        complete = piece.endswith(b"\n")
        body = piece[:-1] if complete else piece
        length += len(body)
        valid = valid and not body.translate(None, _HEX_DIGITS)
        if complete:
            return valid and length % 2 == 0, f.tell()
