"""The ``file.append`` receipt finds our key anywhere after the claim's offset
(contract §6), on real files.

``not_executed`` only when the key (and its tab) occurs nowhere after the
offset, as a line start or inside a line; ``executed`` when an occurrence
is followed by the rest of our record, complete; ``unknown`` otherwise.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

from wardd.adapters import ActRequest, FileAppendAdapter, Receipt, build_adapter
from wardd.adapters import _file_append as fa
from wardd.adapters._file_append import _CHUNK, scan_for_key

NEURON = "cd" * 32
KEY = f"{NEURON}/pay/1"
PREFIX = (KEY + "\t").encode()
RECORD = PREFIX + b"78\n"  # args b"x"
OTHER = f"{NEURON}/other/1\t31\n".encode()  # a complete line of ours, another attempt


def appender(path: Path) -> FileAppendAdapter:
    adapter = build_adapter(
        "notes", {"adapter": "file.append", "path": str(path)}, max_frame=1 << 20
    )
    assert isinstance(adapter, FileAppendAdapter)
    return adapter


def claimed(path: Path, before: bytes = OTHER) -> tuple[FileAppendAdapter, dict[str, Any]]:
    """A ledger holding ``before`` (complete lines, one of ours) and the claim's record of it."""
    path.write_bytes(before)
    adapter = appender(path)
    return adapter, adapter.claim_info()


def after_claim(path: Path, data: bytes) -> Receipt:
    """The receipt once ``data`` was appended after the claim."""
    adapter, info = claimed(path)
    with path.open("ab") as f:
        f.write(data)
    return adapter.receipt(KEY, info)


class ShortReads(io.RawIOBase):
    """Bytes served at most ``piece`` at a time, as a growing file's reads can be."""

    def __init__(self, data: bytes, piece: int) -> None:
        self._data, self._piece, self._at = data, piece, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        assert whence == io.SEEK_SET
        self._at = offset
        return offset

    def readinto(self, b: Any) -> int:
        got = self._data[self._at : self._at + min(len(b), self._piece)]
        b[: len(got)] = got
        self._at += len(got)
        return len(got)


class TestWhereTheKeyIsFound:
    def test_our_record_glued_to_a_foreign_partial_line_is_executed(self, tmp_path: Path) -> None:
        """``ab<key>\\t78\\n``: the key inside a line, its record complete."""
        assert after_claim(tmp_path / "l", b"ab" + RECORD) == Receipt("executed")

    def test_a_glued_record_ended_by_later_lines_is_executed(self, tmp_path: Path) -> None:
        """Foreign bytes before it, complete lines after it: still found."""
        data = b"foreign\nab" + RECORD + b"more foreign\n" + OTHER
        assert after_claim(tmp_path / "l", data) == Receipt("executed")

    def test_our_record_at_a_line_start_is_executed(self, tmp_path: Path) -> None:
        assert after_claim(tmp_path / "l", b"foreign\n" + RECORD) == Receipt("executed")

    def test_a_key_whose_record_is_torn_is_unknown(self, tmp_path: Path) -> None:
        """Glued or not, the file ends inside our record: a write began, partly."""
        for data in (b"ab" + PREFIX + b"7", b"ab" + PREFIX, PREFIX + b"78"):
            path = tmp_path / f"l{len(data)}"
            got = after_claim(path, data)
            assert got.answer == "unknown" and "torn or malformed" in (got.detail or "")

    def test_a_key_in_the_middle_of_a_foreign_line_is_unknown(self, tmp_path: Path) -> None:
        """Foreign bytes on both sides of the key: not our complete record, but not absent."""
        got = after_claim(tmp_path / "l", b"foreign " + PREFIX + b"78 and more\n")
        assert got.answer == "unknown"

    def test_a_partial_record_after_the_key_ended_by_a_later_append_is_unknown(
        self, tmp_path: Path
    ) -> None:
        """Odd hex, or hex followed by foreign bytes, then a newline: malformed, unknown."""
        for i, rest in enumerate((b"7\n", b"78ab\tx\n", b"7g\n", b"78\t\n")):
            got = after_claim(tmp_path / f"l{i}", b"ab" + PREFIX + rest)
            assert got.answer == "unknown", rest

    def test_a_damaged_occurrence_then_a_whole_one_is_executed(self, tmp_path: Path) -> None:
        data = b"ab" + PREFIX + b"7\n" + b"cd" + RECORD
        assert after_claim(tmp_path / "l", data) == Receipt("executed")

    def test_the_key_absent_is_not_executed(self, tmp_path: Path) -> None:
        """Foreign partial lines and other attempts' lines, but not our key."""
        data = b"ab" + OTHER + b"foreign line\n" + f"{NEURON}/pay/12\t78\n".encode() + b"cd"
        assert after_claim(tmp_path / "l", data) == Receipt("not_executed")

    def test_a_key_cut_short_before_its_tab_names_no_attempt(self, tmp_path: Path) -> None:
        """A torn key (the file ends inside the key itself, glued or at a line
        start) is no key: bytes that name no attempt are no attempt's effect."""
        for i, data in enumerate((b"ab" + KEY.encode()[:-4], KEY.encode(), b"ab" + KEY.encode())):
            assert after_claim(tmp_path / f"l{i}", data) == Receipt("not_executed"), data

    def test_a_key_before_the_claims_offset_does_not_count(self, tmp_path: Path) -> None:
        """Only bytes after the offset can be this attempt's write."""
        path = tmp_path / "l"
        adapter, info = claimed(path, OTHER + b"ab" + RECORD)
        assert adapter.receipt(KEY, info) == Receipt("not_executed")

    def test_the_key_straddling_a_read_chunk_is_found(self, tmp_path: Path) -> None:
        """Glued keys and records that cross the 1 MiB read chunks are found."""
        for cut in (1, len(PREFIX) - 1, len(PREFIX) + 1):
            path = tmp_path / f"l{cut}"
            adapter, info = claimed(path)
            pad = _CHUNK - cut
            with path.open("ab") as f:
                f.write(b"y" * pad + RECORD)  # a foreign partial line our record is glued to
            assert adapter.receipt(KEY, info) == Receipt("executed"), cut

    def test_short_reads_never_hide_the_key(self) -> None:
        """A read may come back short (a file that grows while it is read):
        a key split across such reads is still found."""
        data = OTHER + b"ab" + RECORD
        for piece in (1, 5, len(PREFIX) // 2, len(PREFIX) - 1):
            got = scan_for_key(ShortReads(data, piece), PREFIX, len(OTHER))
            assert got == Receipt("executed"), piece
            got = scan_for_key(ShortReads(data[:-1], piece), PREFIX, len(OTHER))
            assert got.answer == "unknown", piece

    def test_a_never_claimed_attempt_reads_the_whole_file_the_same_way(
        self, tmp_path: Path
    ) -> None:
        path = tmp_path / "l"
        path.write_bytes(OTHER + b"ab" + RECORD)
        assert appender(path).receipt(KEY) == Receipt("executed")
        path.write_bytes(OTHER + b"ab" + PREFIX + b"7")
        assert appender(path).receipt(KEY).answer == "unknown"

    def test_the_adapter_itself_writes_what_the_receipt_finds(self, tmp_path: Path) -> None:
        """A real call after a foreign partial line: the call ends the torn line
        first, and the receipt finds the record."""
        path = tmp_path / "l"
        adapter, info = claimed(path)
        with path.open("ab") as f:
            f.write(b"ab")
        adapter.call(ActRequest(neuron=NEURON, op="pay", attempt=1, act="notes", args=b"x"))
        assert path.read_bytes() == OTHER + b"ab\n" + RECORD
        assert adapter.receipt(KEY, info) == Receipt("executed")


def rotate_after_the_identity_check(
    monkeypatch: pytest.MonkeyPatch, rotate: Callable[[], None]
) -> None:
    """Run ``rotate`` once, right after the receipt's identity check and
    before its scan: a fault-injection point, the only way to place a
    rotation between the two steps without timing. The check itself is the
    real one, on the real file; ``rotate`` acts on the real file too."""
    real = fa._change_since_claim
    rotated = False

    def check_then_rotate(*args: Any) -> str | None:
        nonlocal rotated
        changed = real(*args)
        if not rotated:
            rotated = True
            rotate()
        return changed

    monkeypatch.setattr(fa, "_change_since_claim", check_then_rotate)


class TestARotationWhileTheReceiptReads:
    """A rotation between the identity check and the scan never turns an
    executed attempt into ``not_executed``: the identity is checked again
    after the scan."""

    def test_copytruncate_between_identity_check_and_scan(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The call appended our record after the claim's offset; logrotate's
        copytruncate empties the file after the check passed, so the scan
        from the offset reads EOF: that is no proof of absence."""
        path = tmp_path / "log"
        adapter, info = claimed(path)
        with path.open("ab") as f:
            f.write(RECORD)
        rotate_after_the_identity_check(monkeypatch, lambda: os.truncate(path, 0))
        got = adapter.receipt(KEY, info)
        assert got.answer == "unknown"
        assert "truncated" in (got.detail or "")

    def test_copytruncate_then_regrowth_past_the_offset(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Truncated and written again past where the scan stops: the file is
        long enough, but the bytes before the claim's offset are others."""
        path = tmp_path / "log"
        adapter, info = claimed(path)
        with path.open("ab") as f:
            f.write(RECORD)

        def copytruncate_and_append() -> None:
            os.truncate(path, 0)
            with path.open("ab") as f:
                f.write(f"{NEURON}/later/1\t{'00' * 64}\n".encode())

        rotate_after_the_identity_check(monkeypatch, copytruncate_and_append)
        got = adapter.receipt(KEY, info)
        assert got.answer == "unknown"
        assert "other bytes" in (got.detail or "")

    def test_rename_between_identity_check_and_scan(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Rotated with ``create`` after the check: the path names a new file
        the claim says nothing about, so the claim's file read to its end
        proves nothing about the name the call opened."""
        path = tmp_path / "log"
        adapter, info = claimed(path)

        def rename_and_create() -> None:
            path.rename(tmp_path / "log.1")
            path.write_bytes(b"a foreign line\n")

        rotate_after_the_identity_check(monkeypatch, rename_and_create)
        got = adapter.receipt(KEY, info)
        assert got.answer == "unknown"
        assert "renamed" in (got.detail or "")

    def test_rename_away_between_identity_check_and_scan(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        path = tmp_path / "log"
        adapter, info = claimed(path)
        rotate_after_the_identity_check(monkeypatch, lambda: path.rename(tmp_path / "log.1"))
        got = adapter.receipt(KEY, info)
        assert got.answer == "unknown"
        assert "gone" in (got.detail or "")

    def test_a_record_in_the_renamed_file_is_still_executed(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The open file is the claim's: our record read in it stands."""
        path = tmp_path / "log"
        adapter, info = claimed(path)
        with path.open("ab") as f:
            f.write(RECORD)
        rotate_after_the_identity_check(monkeypatch, lambda: path.rename(tmp_path / "log.1"))
        assert adapter.receipt(KEY, info) == Receipt("executed")


# pieces a ledger's bytes after the offset are drawn from: parts of our record,
# of the key, of other keys, foreign bytes, newlines and tabs
_PIECES = st.sampled_from(
    [
        PREFIX,
        PREFIX[:20],
        PREFIX[:-1],
        KEY.encode()[-8:],
        b"78",
        b"7",
        b"\n",
        b"\t",
        b"ab",
        b"zz",
        b"/",
        OTHER,
        f"{NEURON}/pay/12\t".encode(),
    ]
)
_WHOLE = re.compile(re.escape(PREFIX) + rb"(?:[0-9a-f]{2})*\n")


class TestTheRuleOnAnyBytes:
    @settings(
        max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @given(st.lists(_PIECES, max_size=12))
    def test_the_answer_follows_the_rule(self, tmp_path: Path, pieces: list[bytes]) -> None:
        """``executed`` iff the key is followed by a complete record somewhere
        after the offset; ``not_executed`` iff the key occurs nowhere there;
        ``unknown`` in every other case."""
        data = b"".join(pieces)
        path = tmp_path / "ledger"
        adapter, info = claimed(path)
        with path.open("ab") as f:
            f.write(data)
        got = adapter.receipt(KEY, info).answer
        if _WHOLE.search(data):
            assert got == "executed"
        elif PREFIX in data:
            assert got == "unknown"
        else:
            assert got == "not_executed"
