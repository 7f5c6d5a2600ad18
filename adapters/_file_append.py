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
- The torn-line check and the write are two steps, and another process can
  append between them: a partial line of its own (no newline) then glues our
  record to it, ``ab<key>\t<hex>\n``. So the receipt looks for the key
  and its tab *anywhere*, as a line start or inside a line, never only after
  a newline. It answers ``executed`` when the key is followed by the rest of
  our record, complete: well-formed hex (even length, lowercase), then a
  newline. A key whose rest is torn (the file ends inside it) or malformed
  (torn, then ended by a later append) answers ``unknown``: a write of this
  attempt began, its effect is partial, and that is not for a receipt to
  decide. (A record cut at an even number of hex digits and later ended
  cannot be told from a whole one: it answers ``executed``.) The key is
  unique to its attempt, and no other well-formed record can hold it (a key
  starts with 64 hex digits and a ``/``, an op name holds no ``/``, and the
  rest is hex), so our record found anywhere is that attempt's effect.

What the claim records, and what the receipt makes of it (contract §6,):

- `claim_info` is computed just before the claim is committed, and the call
  runs only after that commit, so it describes the file as it was before
  this attempt's write: ``{"path", "file"}``, ``file`` being ``None`` when
  the file does not exist (or cannot be inspected), else its ``dev``,
  ``ino``, ``size`` and ``digest``. The daemon computes it on the worker
  thread (for ``execute`` and ``invoke`` alike), never on the writer thread,
  so a slow file system stalls one worker only.
- Why ``size`` is a lower bound of where this attempt's line lands: the
  call appends (``O_APPEND``) at the end of the file as it is at the write,
  after an optional newline that ends a torn last line. Between the record
  and the write the file can only grow through appends (our other workers',
  serialised by the per-file lock, or another process's), so the line starts
  at or after ``size`` — unless the file was truncated meanwhile, which the
  receipt detects (below). So the receipt needs to look only after ``size``.
- ``path`` is the configured path, the name the call opens — not a
  ``realpath``: the receipt must look up the same name, so that a file
  renamed or replaced under it, or a symlink repointed, reads as another
  file (another device or inode) rather than as an unchanged one. The
  receipt reads the recorded path even when the act's path was
  reconfigured since: that is where the call wrote.
- ``digest`` is the SHA-256 of the file's first and last 4 KiB before
  ``size`` (of the whole of it when shorter). Device, inode and size alone
  cannot tell a copy-truncate (logrotate's ``copytruncate``) followed by new
  appends past ``size`` from an untouched file; the digest can: the bytes at
  the start of a file truncated and written again are other lines, with
  other keys.
- The receipt answers ``not_executed`` only when the file at ``path`` is the
  claim's file — same device and inode, no shorter than ``size``, the same
  digest — its sampled bytes held a complete line of this adapter
  (``keyed``), and the key occurs nowhere at or after ``size``, neither as
  a line start nor inside a line. The identity is checked before the scan
  and again after it (the open file, and the path naming it still), and
  the file must be no shorter than where the scan stopped: a copy-truncate
  or a rename while the scan reads would otherwise hide our record. The
  ``keyed`` condition makes the digest proof of identity: a line of ours
  carries a key that names one attempt for ever, so no one writes those
  bytes again by accident, whereas a file holding only, say, a header that
  a rotation hook writes again after a copy-truncate would look unchanged. For a file
  that was empty at the claim (``size`` 0) there is nothing to compare, and a
  truncation back to empty cannot be ruled out: no key there is
  ``unknown``. Every other case is ``unknown`` with a ``detail`` saying why
  (renamed, rotated, replaced, truncated, deleted, absent at the claim,
  unreadable, torn record, no record), except that our complete record
  found in the file now at ``path`` is still ``executed``. So a rotation
  (a rename or a copy-truncate) can never make an executed attempt read as
  ``not_executed``; it leaves it ``unknown``, for the operator to check the
  rotated files and ``reconcile``.
- A claim record without ``file`` (made before contract 2.2 had the claim
  record the file's identity, §6: it kept only the path) is read the same
  way: ``executed`` for our record in the file, otherwise ``unknown``.
- An attempt that was never claimed (``claim_info`` is ``None``) never
  reached the adapter: its receipt reads the configured file as a whole,
  ``executed`` or ``not_executed``. A missing file answers ``not_executed``
  only when its directory exists; a missing directory (say, a file system
  not mounted yet) is ``unknown``.

A test hook, never reached from a request: when the daemon's environment
names a directory in ``WARDD_TEST_FILE_APPEND_HOLD`` and that directory holds
a FIFO named ``checked`` (or ``written``), each call stops after its
torn-line check, before its write (or after its write and fsync, before it
returns): it opens the FIFO for reading, which blocks until a test opens it
for writing, and goes on once the test closes it. The real-process tests use
it to let another process append between the check and the write, and to
SIGKILL the daemon after the write and before the outcome commits, without
timing. Unset (always, outside the tests), it costs one attribute test per
call. Only whoever starts the daemon sets its environment.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
import threading
from collections.abc import Mapping
from typing import IO, Any, Self

import attrs

from wardd.protocol import ID_PATTERN, NEURON_ID_PATTERN

from . import _config
from ._base import (
    ActRequest,
    Adapter,
    AdapterConfigError,
    BaseAdapter,
    DefiniteFailure,
    OutcomeUnknown,
    Receipt,
)
from ._hold import hold as _hold

_KEYS = ("adapter", "path", "max_arg_bytes")
HOLD_ENV = "WARDD_TEST_FILE_APPEND_HOLD"  # the test hook (module docstring)
_NOT_HEX = re.compile(rb"[^0-9a-f]")
_CHUNK = 1 << 20
_SAMPLE = 4096  # bytes at each end of the file before the claim's offset, digested
# one line of ours: the idempotency key <neuron>/<op>/<attempt>, a tab, the args in hex
_KEY_LINE = re.compile(
    rf"{NEURON_ID_PATTERN}/{ID_PATTERN}/[0-9]+\t(?:[0-9a-f]{{2}})*\n".encode("ascii")
)

_file_locks: dict[tuple[int, int], threading.Lock] = {}
_file_locks_guard = threading.Lock()


def _lock_for(st: os.stat_result) -> threading.Lock:
    """The process-wide lock that serialises appends to the file ``st`` describes."""
    with _file_locks_guard:
        return _file_locks.setdefault((st.st_dev, st.st_ino), threading.Lock())


@attrs.frozen
class FileAppendSettings:
    """A ``file.append`` act's table, validated."""

    tag: str
    path: str
    max_arg_bytes: int
    hold: str | None = None  # the test hook's directory (module docstring)

    @classmethod
    def from_table(cls, tag: str, table: Mapping[str, Any], *, max_frame: int) -> Self:
        """Validate the act's table; raises `AdapterConfigError`."""
        _config.refuse_unknown_keys(table, _KEYS)
        if "path" not in table:
            raise AdapterConfigError("path", "missing (an absolute path is required)")
        path = _config.absolute_path(table["path"], "path")
        bound = _config.max_arg_bytes(table, max_frame=max_frame)
        return cls(tag, path, bound, hold=os.environ.get(HOLD_ENV) or None)

    def build(self, boot: str | None = None) -> Adapter:
        """The act's adapter, from these settings."""
        return _config.adapter_from(FileAppendAdapter, self)


@attrs.define(eq=False)
class FileAppendAdapter(BaseAdapter, FileAppendSettings):
    """Appends one line per call to ``path``; in-process, with a receipt."""

    kind: str = attrs.field(default="file.append", init=False)
    in_process: bool = attrs.field(default=True, init=False)
    receipt_supported: bool = attrs.field(default=True, init=False)

    def claim_info(self) -> dict[str, Any]:
        """The file as it is just before the call, stored with the claim (module docstring)."""
        return {"path": self.path, "file": file_identity(self.path)}

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
        if self.hold is not None:
            _hold(self.hold, "checked")
        # From here on some bytes may reach the file: every error is unknown.
        _write_durably(fd, data, self.path)
        if size == 0:
            _fsync_directory(self.path)
        if self.hold is not None:
            _hold(self.hold, "written")

    def answer(self, idempotency_key: str, claim_info: Mapping[str, Any] | None = None) -> Receipt:
        """Look the key up as the claim's record allows (contract §6); never raises.

        ``claim_info`` is ``None`` for an attempt that was never claimed, else
        what `claim_info` recorded (``{}`` for a claim holding no such record).
        """
        if "\t" in idempotency_key or "\n" in idempotency_key:
            return Receipt("unknown", detail="idempotency key holds a tab or a newline")
        prefix = idempotency_key.encode() + b"\t"
        if claim_info is None:  # never claimed: never reached the adapter
            return _whole_file_receipt(self.path, prefix)
        return claimed_receipt(claim_info, prefix)


def file_identity(path: str) -> dict[str, Any] | None:
    """``{dev, ino, size, digest}`` of the regular file at ``path``, or None.

    None when the file does not exist, is not a regular file, cannot be
    read, or shrank while it was read: the receipt then never answers
    ``not_executed`` for the claim. Opened ``O_NONBLOCK`` (a FIFO never
    blocks the worker) and read-only (a read lease is not broken).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        sample = _prefix_sample(fd, st.st_size)
    except OSError:
        return None
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
    if sample is None:
        return None
    digest, keyed = sample
    return {
        "dev": st.st_dev,
        "ino": st.st_ino,
        "size": st.st_size,
        "digest": digest,
        "keyed": keyed,
    }


def _prefix_sample(fd: int, size: int) -> tuple[str, bool] | None:
    """(digest, keyed) of the first and last `_SAMPLE` bytes before ``size``;
    None if they are gone. ``keyed``: the sample holds a complete line of
    this adapter (a key and its hex), bytes that no one can write again by
    accident, since a key names one attempt for ever."""
    if size <= 2 * _SAMPLE:
        spans = [(0, size)]
    else:
        spans = [(0, _SAMPLE), (size - _SAMPLE, _SAMPLE)]
    h = hashlib.sha256()
    keyed = False
    for offset, length in spans:
        data = _pread_exactly(fd, length, offset)
        if data is None:
            return None
        h.update(data)
        keyed = keyed or _KEY_LINE.search(data) is not None
    return h.hexdigest(), keyed


def _prefix_digest(fd: int, size: int) -> str | None:
    got = _prefix_sample(fd, size)
    return None if got is None else got[0]


def _pread_exactly(fd: int, length: int, offset: int) -> bytes | None:
    parts: list[bytes] = []
    while length > 0:
        got = os.pread(fd, length, offset)
        if not got:
            return None  # the file is shorter than it was: truncated meanwhile
        parts.append(got)
        length -= len(got)
        offset += len(got)
    return b"".join(parts)


def claimed_receipt(claim_info: Mapping[str, Any], prefix: bytes) -> Receipt:
    """The receipt of a claimed attempt from its claim record (see the module docstring)."""
    path = claim_info.get("path") if isinstance(claim_info, Mapping) else None
    if not isinstance(path, str) or not os.path.isabs(path):
        return Receipt("unknown", detail="the claim holds no record of the file")
    if "file" not in claim_info:
        return _executed_or_unknown(
            path, prefix, "the claim holds no record of the file's identity (an older claim)"
        )
    recorded = _recorded_identity(claim_info["file"])
    if recorded is None:
        if claim_info["file"] is not None:
            return Receipt("unknown", detail="the claim's record of the file is malformed")
        why = f"{path} did not exist at the claim: a file created and rotated away since"
        return _executed_or_unknown(path, prefix, why + " cannot be ruled out")
    dev, ino, size, digest = recorded
    try:
        f = _open_for_reading(path)
    except FileNotFoundError:
        return Receipt("unknown", detail=f"{path} is gone since the claim (renamed or deleted)")
    except OSError as exc:
        return Receipt("unknown", detail=f"cannot open {path}: {exc.strerror}")
    try:
        with f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                return Receipt("unknown", detail=f"{path} is not a regular file")
            changed = _change_since_claim(f.fileno(), st, dev, ino, size, digest)
            if changed is not None:
                return _scan_answer(scan_for_key(f, prefix), f"{path} {changed}")
            found = scan_for_key(f, prefix, size)
            if found.answer == "not_executed":
                # The scan reads the file while a rotation may act on it:
                # absence counts only if the file is still the claim's, no
                # shorter than where the scan stopped, once the scan is done.
                changed = _change_during_scan(f, path, dev, ino, size, digest)
                if changed is not None:
                    return Receipt("unknown", detail=f"{path} {changed}")
    except OSError as exc:
        return Receipt("unknown", detail=f"cannot read {path}: {exc.strerror}")
    if found.answer == "not_executed" and size == 0:
        return Receipt(
            "unknown",
            detail=f"{path} was empty at the claim: a truncation since cannot be ruled out",
        )
    if found.answer == "not_executed" and claim_info["file"].get("keyed") is not True:
        return Receipt(
            "unknown",
            detail=f"{path} held no line of this adapter before the claim's offset: a "
            "copy-truncate that wrote the same bytes again cannot be ruled out",
        )
    return found


def _recorded_identity(value: object) -> tuple[int, int, int, str] | None:
    if not isinstance(value, Mapping):
        return None
    fields = (value.get("dev"), value.get("ino"), value.get("size"))
    digest = value.get("digest")
    if not all(type(x) is int and x >= 0 for x in fields) or not isinstance(digest, str):
        return None
    dev, ino, size = fields
    return dev, ino, size, digest  # type: ignore[return-value]


def _change_since_claim(
    fd: int, st: os.stat_result, dev: int, ino: int, size: int, digest: str
) -> str | None:
    """How the open file differs from the claim's, or None when it is the same file."""
    if (st.st_dev, st.st_ino) != (dev, ino):
        return "is not the claim's file (renamed, rotated or replaced since the claim)"
    if st.st_size < size:
        return f"is shorter than at the claim ({st.st_size} < {size} bytes: truncated since)"
    if _prefix_digest(fd, size) != digest:
        return "holds other bytes before the claim's offset (truncated and rewritten since)"
    return None


def _change_during_scan(
    f: IO[bytes], path: str, dev: int, ino: int, size: int, digest: str
) -> str | None:
    """How the file changed while a scan that found no key read it, or None.

    Checked after the scan, as `_change_since_claim` was before it: a
    copy-truncate between the two cuts the file the scan then reads from
    the claim's offset, and its EOF would hide our record. So the open file
    must still be the claim's (device, inode, digest), no shorter than the
    offset the scan reached, and the path must still name it (not renamed
    or replaced meanwhile).
    """
    reached = max(f.tell(), size)
    st = os.fstat(f.fileno())
    changed = _change_since_claim(f.fileno(), st, dev, ino, size, digest)
    if changed is not None:
        return f"changed while it was read: it {changed}"
    if st.st_size < reached:
        return (
            f"is shorter than where the scan stopped ({st.st_size} < {reached} bytes: "
            "truncated while it was read)"
        )
    try:
        now = os.stat(path)
    except FileNotFoundError:
        return "is gone (renamed or deleted while it was read)"
    if (now.st_dev, now.st_ino) != (dev, ino):
        return "now names another file (renamed or replaced while it was read)"
    return None


def _scan_answer(found: Receipt, not_found: str) -> Receipt:
    """A scan's answer where the file cannot show absence: ``not_executed`` becomes
    ``unknown`` with ``not_found`` as its detail; ``executed`` and ``unknown`` stand."""
    if found.answer == "not_executed":
        return Receipt("unknown", detail=not_found)
    return found


def _open_for_reading(path: str) -> IO[bytes]:
    """Open read-only, ``O_NONBLOCK``: a FIFO put at the path never blocks a receipt."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _executed_or_unknown(path: str, prefix: bytes, why: str) -> Receipt:
    """A line for the key in the file now at ``path`` is ``executed``; anything else ``unknown``."""
    try:
        with _open_for_reading(path) as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return Receipt("unknown", detail=f"{path} is not a regular file")
            return _scan_answer(scan_for_key(f, prefix), why)
    except FileNotFoundError:
        return Receipt("unknown", detail=why)
    except OSError as exc:
        return Receipt("unknown", detail=f"cannot read {path}: {exc.strerror}")


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


def _whole_file_receipt(path: str, prefix: bytes) -> Receipt:
    """The receipt of an attempt never claimed (contract §6): the configured file as a whole."""
    try:
        f = _open_for_reading(path)
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
            return scan_for_key(f, prefix)
    except OSError as exc:
        return Receipt("unknown", detail=f"cannot read the file: {exc.strerror}")


def scan_for_key(f: IO[bytes], prefix: bytes, start: int = 0) -> Receipt:
    """Stream ``f`` from ``start`` for ``prefix`` (the key and its tab) anywhere (contract §6).

    The key is looked for as a line start *and* inside a line: a line of
    ours can land glued to a foreign partial line (another process appended
    bytes without a newline after our torn-line check), so a key inside a
    line may be our record. ``executed`` when an occurrence is followed by
    the rest of a record, complete: lowercase hex of even length, then a
    newline. ``not_executed`` only when the key occurs nowhere from
    ``start``; a key cut short before its tab is no key: bytes that name
    no attempt are no attempt's effect. ``unknown`` in any other case:
    every occurrence's rest is torn or malformed (with a ``detail``).

    A record of another attempt can never hold ours: a key starts with 64
    hex digits and a ``/``, and no well-formed line holds that inside its
    key (an op name has no ``/``) or its hex. Reads in chunks of at most
    1 MiB: memory stays bounded however large the file or its lines are.
    """
    damaged = False
    keep = len(prefix) - 1
    f.seek(start)
    buf, base = b"", start  # base: the file offset of buf[0]
    while True:
        chunk = f.read(_CHUNK)
        buf += chunk
        hit = buf.find(prefix)
        if hit != -1:
            rest_at = base + hit + len(prefix)
            if _rest_is_whole(f, rest_at):
                return Receipt("executed")
            damaged = True
            f.seek(rest_at)  # a torn rest may hold the key again
            buf, base = b"", rest_at
            continue
        if not chunk:
            break
        tail = buf[max(0, len(buf) - keep) :]
        base += len(buf) - len(tail)
        buf = tail
    if damaged:
        return Receipt("unknown", detail="the key is followed by a torn or malformed record")
    return Receipt("not_executed")


def _rest_is_whole(f: IO[bytes], offset: int) -> bool:
    """Whether the bytes from ``offset`` are the rest of a record: lowercase
    hex of even length, then a newline. Reads only up to the first byte that
    is not a hex digit (at most one chunk past it), so a long foreign line
    after a key costs little."""
    f.seek(offset)
    length = 0
    size = 256
    while True:
        piece = f.read(size)
        if not piece:
            return False  # torn: the file ends inside the record
        other = _NOT_HEX.search(piece)
        if other is not None:
            at = other.start()
            return piece[at : at + 1] == b"\n" and (length + at) % 2 == 0
        length += len(piece)
        size = min(size * 4, _CHUNK)
