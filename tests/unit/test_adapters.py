"""The built-in adapters keep their contract: real files, real child processes, no mocks."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import attrs
import pytest

from tests._leftovers import alive
from tests._poll import pid_written, wait_for
from wardd.adapters import (
    ActRequest,
    AdapterConfigError,
    CliAdapter,
    DefiniteFailure,
    EntryPointAdapter,
    FileAppendAdapter,
    OutcomeUnknown,
    Receipt,
    _process,
    _redact,
    as_receipt,
    build_adapter,
    echo_adapter,
    has_receipt,
)
from wardd.adapters._file_append import file_identity

NEURON = "ab" * 32
MAX_FRAME = 1 << 20
SH = "/bin/sh"


def request(args: bytes = b"", op: str = "op1", attempt: int = 1, act: str = "t") -> ActRequest:
    return ActRequest(neuron=NEURON, op=op, attempt=attempt, act=act, args=args)


def key(op: str = "op1", attempt: int = 1) -> str:
    return f"{NEURON}/{op}/{attempt}"


def cli(script: str, max_frame: int = MAX_FRAME, **table: Any) -> CliAdapter:
    adapter = build_adapter(
        "t", {"adapter": "cli", "argv": [SH, "-c", script], **table}, max_frame=max_frame
    )
    assert isinstance(adapter, CliAdapter)
    return adapter


def appender(path: Path, **table: Any) -> FileAppendAdapter:
    adapter = build_adapter(
        "notes", {"adapter": "file.append", "path": str(path), **table}, max_frame=MAX_FRAME
    )
    assert isinstance(adapter, FileAppendAdapter)
    return adapter


def wait_dead(pid: int, within: float = 10.0) -> None:
    """Until ``pid`` has ended (bounded polling of /proc)."""
    wait_for(lambda: not alive(pid), within, f"pid {pid} to end")


class TestEcho:
    def test_echo_returns_args_unchanged(self) -> None:
        """echo returns its args as bytes, has no receipt and runs in-process."""
        adapter = echo_adapter()
        assert adapter.call(request(b"\x00hello\xff")) == b"\x00hello\xff"
        assert (adapter.tag, adapter.in_process, adapter.max_arg_bytes) == ("echo", True, 65536)
        assert not has_receipt(adapter)


class TestActRequest:
    def test_idempotency_key_carries_neuron_op_and_attempt(self) -> None:
        """The idempotency key is "<neuron>/<op>/<attempt>" (contract §3.4)."""
        assert request(op="x.y", attempt=7).idempotency_key == f"{NEURON}/x.y/7"

    def test_receipt_answer_is_checked(self) -> None:
        """A Receipt holds one of the three answers only."""
        answer: Any = "maybe"
        with pytest.raises(ValueError):
            Receipt(answer)

    def test_a_receipt_method_answer_is_read_one_way(self) -> None:
        """as_receipt keeps a Receipt, takes an answer word or an (answer, value) pair,
        and reads anything else as unknown, never as a guess."""
        assert as_receipt(Receipt("executed", 1)) == Receipt("executed", 1)
        assert as_receipt("not_executed") == Receipt("not_executed")
        assert as_receipt(("executed", {"v": 2})) == Receipt("executed", {"v": 2})
        for odd in ("maybe", ("maybe", 1), ["executed", 1], None, True, ("executed",)):
            assert as_receipt(odd).answer == "unknown"


class TestFileAppend:
    def test_line_format_and_fsynced_append(self, tmp_path: Path) -> None:
        """Each call appends "<key>\\t<hex args>\\n" and returns None; the file is 0600."""
        path = tmp_path / "notes.log"
        adapter = appender(path)
        assert adapter.call(request(b"hi")) is None
        assert adapter.call(request(b"", op="op2")) is None
        assert path.read_bytes() == f"{key()}\t6869\n{key('op2')}\t\n".encode()
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert adapter.in_process and has_receipt(adapter)
        assert adapter.kind == "file.append"
        st = path.stat()
        info = adapter.claim_info()
        assert info["path"] == str(path)
        assert {k: info["file"][k] for k in ("dev", "ino", "size")} == {
            "dev": st.st_dev,
            "ino": st.st_ino,
            "size": st.st_size,
        }

    def test_torn_last_line_is_ended_before_appending(self, tmp_path: Path) -> None:
        """A last line without a newline gets one first; a complete one gets nothing."""
        path = tmp_path / "notes.log"
        path.write_bytes(b"torn")
        adapter = appender(path)
        adapter.call(request(b"\x01"))
        adapter.call(request(b"\x02", op="op2"))
        assert path.read_bytes() == f"torn\n{key()}\t01\n{key('op2')}\t02\n".encode()

    def test_receipt_finds_a_complete_line(self, tmp_path: Path) -> None:
        """The receipt answers executed for the key's line and not_executed for others."""
        path = tmp_path / "notes.log"
        adapter = appender(path)
        adapter.call(request(b"0", op="op0"))
        info = adapter.claim_info()  # the claims: before their calls
        adapter.call(request(b"x", op="op1"))
        adapter.call(request(b"y", op="op12"))
        assert adapter.receipt(key("op1"), info) == Receipt("executed")
        assert adapter.receipt(key("op12"), info) == Receipt("executed")
        assert adapter.receipt(key("op1", 2), info) == Receipt("not_executed")
        assert adapter.receipt(key("op"), info) == Receipt("not_executed")
        assert adapter.receipt(key("op1")) == Receipt("executed")  # unclaimed: configured path

    def test_receipt_of_a_missing_file_is_not_executed_for_an_unclaimed_attempt(
        self, tmp_path: Path
    ) -> None:
        """No file in an existing directory and no claim: nothing was ever appended."""
        adapter = appender(tmp_path / "never.log")
        assert adapter.receipt(key()).answer == "not_executed"

    def test_receipt_reads_the_path_the_claim_recorded(self, tmp_path: Path) -> None:
        """A claim made when the act named another file is answered from that file."""
        old, new = tmp_path / "old.log", tmp_path / "new.log"
        before = appender(old)
        before.call(request(b"0", op="op0"))
        info = before.claim_info()
        before.call(request())
        after = appender(new)  # the act's path was reconfigured since
        assert after.receipt(key(), info).answer == "executed"
        assert after.receipt(key("op2"), info).answer == "not_executed"
        assert after.receipt(key(), {}).answer == "unknown"

    def test_receipt_is_unknown_when_the_file_cannot_be_read(self, tmp_path: Path) -> None:
        """A path that cannot be read (a directory, a missing directory) answers unknown."""
        (tmp_path / "dir.log").mkdir()
        adapter = appender(tmp_path / "dir.log")
        assert adapter.receipt(key(), adapter.claim_info()).answer == "unknown"
        assert adapter.receipt(key()).answer == "unknown"
        unmounted = appender(tmp_path / "missing-dir" / "notes.log")
        assert unmounted.receipt(key(), unmounted.claim_info()).answer == "unknown"
        assert unmounted.receipt(key()).answer == "unknown"

    def test_partial_line_is_not_counted_as_executed(self, tmp_path: Path) -> None:
        """A torn line with the key answers unknown; a line torn before the tab is no line."""
        path = tmp_path / "notes.log"
        adapter = appender(path)
        adapter.call(request(b"0", op="op0"))
        info = adapter.claim_info()
        with path.open("ab") as f:
            f.write(f"{key()}\t686".encode())  # the write of op1 was cut short
        assert adapter.receipt(key(), info).answer == "unknown"
        adapter.call(request(b"z", op="op2"))  # ends the torn line: its hex stays malformed
        assert adapter.receipt(key(), info).answer == "unknown"
        assert adapter.receipt(key("op2"), info).answer == "executed"
        path.write_bytes(key().encode())
        assert adapter.receipt(key()).answer == "not_executed"

    def test_receipt_streams_across_chunk_boundaries(self, tmp_path: Path) -> None:
        """Keys straddling the 1 MiB read chunks and lines longer than a chunk are found."""
        path = tmp_path / "big.log"
        with path.open("wb") as f:
            f.write(f"{key('first')}\t00\n".encode())  # a line of ours: the file is keyed
            f.write(b"x" * ((1 << 20) - 10 - 69 - len("first")) + b"\n")  # straddle the edge
            f.write(f"{key('a')}\t00\n".encode())
            f.write(b"y" * (3 << 20) + b"\n")
            f.write(f"{key('b')}\t".encode() + b"ab" * (1 << 20) + b"\n")
        adapter = appender(path)
        assert adapter.receipt(key("a")).answer == "executed"
        assert adapter.receipt(key("b")).answer == "executed"
        assert adapter.receipt(key("c")).answer == "not_executed"
        info = {"path": str(path), "file": file_identity(str(path))}
        with path.open("ab") as f:  # after the claim's offset, across the chunk edges
            f.write(b"z" * ((1 << 20) - 5) + b"\n" + f"{key('d')}\t00\n".encode())
        assert adapter.receipt(key("d"), info).answer == "executed"
        # the claim's offset bounds the search: a line before it is not this claim's
        assert adapter.receipt(key("a"), info).answer == "not_executed"

    def test_open_failure_is_a_definite_failure(self, tmp_path: Path) -> None:
        """A missing directory or a path that is a directory: nothing written, failed."""
        with pytest.raises(DefiniteFailure):
            appender(tmp_path / "missing" / "notes.log").call(request(b"a"))
        (tmp_path / "dir.log").mkdir()
        with pytest.raises(DefiniteFailure):
            appender(tmp_path / "dir.log").call(request(b"a"))

    def test_args_over_the_bound_are_refused_before_writing(self, tmp_path: Path) -> None:
        """Args above max_arg_bytes are a definite failure and leave no file."""
        path = tmp_path / "notes.log"
        with pytest.raises(DefiniteFailure):
            appender(path, max_arg_bytes=2).call(request(b"abc"))
        assert not path.exists()

    def test_error_after_the_write_began_is_unknown(self, tmp_path: Path) -> None:
        """A short write (RLIMIT_FSIZE in a child process) is unknown, never failed."""
        path = tmp_path / "notes.log"
        code = textwrap.dedent(
            f"""
            import resource, signal
            from wardd.adapters import ActRequest, DefiniteFailure, build_adapter
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            a = build_adapter("n", {{"adapter": "file.append", "path": {str(path)!r}}},
                              max_frame=1 << 20)
            resource.setrlimit(resource.RLIMIT_FSIZE, (100, 100))
            try:
                a.call(ActRequest({NEURON!r}, "op1", 1, "n", b"x" * 200))
            except DefiniteFailure:
                print("failed")
            except Exception as exc:
                print("unknown", type(exc).__name__)
            """
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True)
        assert out.stdout.split() == [b"unknown", b"OutcomeUnknown"]
        assert path.stat().st_size == 100  # the torn line the short write left
        assert appender(path).receipt(key()).answer == "unknown"

    def test_concurrent_appends_never_interleave(self, tmp_path: Path, start_thread) -> None:
        """Several worker threads appending to one file each leave one whole line."""
        path = tmp_path / "notes.log"
        adapter = appender(path)
        threads = [
            start_thread(adapter.call, request(bytes([i]) * 5000, op=f"o{i}")) for i in range(16)
        ]
        for t in threads:
            t.join(60)
        lines = path.read_bytes().split(b"\n")
        assert lines[-1] == b"" and len(lines) == 17
        for i in range(16):
            assert adapter.receipt(key(f"o{i}")).answer == "executed"

    @pytest.mark.parametrize(
        ("table", "bad_key"),
        [
            ({}, "path"),
            ({"path": "relative.log"}, "path"),
            ({"path": 3}, "path"),
            ({"path": "/tmp/x\0y"}, "path"),
            ({"path": "/tmp/x", "max_arg_bytes": True}, "max_arg_bytes"),
            ({"path": "/tmp/x", "max_arg_bytes": 0}, "max_arg_bytes"),
            ({"path": "/tmp/x", "max_arg_bytes": MAX_FRAME + 1}, "max_arg_bytes"),
            ({"path": "/tmp/x", "colour": "red"}, "colour"),
        ],
    )
    def test_bad_tables_name_the_key(self, table: dict[str, Any], bad_key: str) -> None:
        """Every bad key is refused with its name."""
        with pytest.raises(AdapterConfigError) as info:
            build_adapter("n", {"adapter": "file.append", **table}, max_frame=MAX_FRAME)
        assert info.value.key == bad_key


class TestFileAppendClaimedReceipt:
    """contract §6: the receipt of a claimed attempt, from the claim's record, on real files."""

    @staticmethod
    def claimed(path: Path) -> tuple[FileAppendAdapter, dict[str, Any]]:
        """An adapter on a file holding one earlier line, and the claim of op1 made now."""
        adapter = appender(path)
        adapter.call(request(b"0", op="op0"))
        return adapter, adapter.claim_info()

    @staticmethod
    def claimed_after_a_torn_line(
        path: Path,
    ) -> tuple[FileAppendAdapter, dict[str, Any], Path]:
        """A file holding a line of ours then a torn line, and the claim made now."""
        adapter = appender(path)
        adapter.call(request(b"0", op="op0"))  # an earlier line of ours
        with path.open("ab") as f:
            f.write(b"torn")
        return adapter, adapter.claim_info(), path

    def test_same_file_without_the_line_is_not_executed(self, tmp_path: Path) -> None:
        """The claim's file, grown by other appends only, with no line for the key."""
        adapter, info = self.claimed(tmp_path / "notes.log")
        adapter.call(request(b"1", op="other"))
        assert adapter.receipt(key(), info) == Receipt("not_executed")

    def test_line_after_the_offset_is_executed(self, tmp_path: Path) -> None:
        """Another worker's line first, then this attempt's: executed."""
        adapter, info = self.claimed(tmp_path / "notes.log")
        adapter.call(request(b"1", op="other"))
        adapter.call(request(b"x"))
        adapter.call(request(b"2", op="later"))
        assert adapter.receipt(key(), info) == Receipt("executed")

    def test_a_torn_last_line_at_the_claim_is_ended_after_the_offset(self, tmp_path: Path) -> None:
        """The newline the call adds to a torn last line keeps its line after the offset."""
        adapter, info, path = self.claimed_after_a_torn_line(tmp_path / "notes.log")
        assert adapter.receipt(key(), info) == Receipt("not_executed")
        adapter.call(request(b"x"))
        assert adapter.receipt(key(), info) == Receipt("executed")

    def test_a_key_that_continues_a_torn_line_is_executed(self, tmp_path: Path) -> None:
        """A record glued to a torn line at the offset is found inside that line (contract §6)."""
        adapter, info, path = self.claimed_after_a_torn_line(tmp_path / "notes.log")
        with path.open("ab") as f:
            f.write(f"{key()}\t00\n".encode())
        assert adapter.receipt(key(), info) == Receipt("executed")

    def test_a_file_without_a_line_of_ours_is_never_proven_unchanged(self, tmp_path: Path) -> None:
        """A header-only file, copy-truncated after the call and given the same
        header again, looks unchanged: the receipt says unknown, never
        not_executed, since only a line of ours (a unique key) proves identity."""
        path = tmp_path / "notes.log"
        path.write_bytes(b"# notes, rotated daily\n")
        adapter = appender(path)
        info = adapter.claim_info()
        assert info["file"]["keyed"] is False
        adapter.call(request(b"x"))  # the effect
        rotated = tmp_path / "notes.log.1"
        rotated.write_bytes(path.read_bytes())  # copytruncate: copy, then truncate in place
        with path.open("r+b") as f:
            f.truncate(0)
            f.write(b"# notes, rotated daily\n")  # the rotation hook writes the header again
        got = adapter.receipt(key(), info)
        assert got.answer == "unknown" and "no line of this adapter" in (got.detail or "")
        assert key().encode() in rotated.read_bytes()

    def test_rotation_by_rename_is_unknown_whether_or_not_the_line_was_written(
        self, tmp_path: Path
    ) -> None:
        """The file renamed away (a new one created or not): unknown, never not_executed."""
        path = tmp_path / "notes.log"
        adapter, info = self.claimed(path)
        adapter.call(request(b"x"))
        path.rename(tmp_path / "notes.log.1")
        gone = adapter.receipt(key(), info)
        assert gone.answer == "unknown" and "renamed" in (gone.detail or "")
        adapter.call(request(b"y", op="next"))  # a new file at the path, without the line
        fresh = adapter.receipt(key(), info)
        assert fresh.answer == "unknown" and "not the claim's file" in (fresh.detail or "")
        _, info2 = self.claimed(tmp_path / "other.log")
        assert adapter.receipt(key("never"), info2).answer == "not_executed"  # control

    def test_line_in_the_file_that_replaced_the_claims_is_executed(self, tmp_path: Path) -> None:
        """Renamed between the claim and the call: the call created a new file with the line."""
        path = tmp_path / "notes.log"
        adapter, info = self.claimed(path)
        path.rename(tmp_path / "notes.log.1")
        adapter.call(request(b"x"))
        assert adapter.receipt(key(), info) == Receipt("executed")

    def test_copy_truncate_is_unknown_even_once_the_file_grew_again(self, tmp_path: Path) -> None:
        """Copied and truncated (logrotate copytruncate), then regrown past the offset: unknown."""
        path = tmp_path / "notes.log"
        adapter, info = self.claimed(path)
        adapter.call(request(b"x"))
        rotated = tmp_path / "notes.log.1"
        rotated.write_bytes(path.read_bytes())
        with path.open("r+b") as f:
            f.truncate(0)
        short = adapter.receipt(key(), info)
        assert short.answer == "unknown" and "truncated" in (short.detail or "")
        for i in range(5):
            adapter.call(request(b"more", op=f"new{i}"))
        assert path.stat().st_size > info["file"]["size"]
        regrown = adapter.receipt(key(), info)
        assert regrown.answer == "unknown" and "other bytes" in (regrown.detail or "")

    def test_truncated_back_to_the_offset_is_not_executed(self, tmp_path: Path) -> None:
        """The same file cut back to exactly its claimed size: no line after the offset."""
        path = tmp_path / "notes.log"
        adapter, info = self.claimed(path)
        adapter.call(request(b"x"))
        with path.open("r+b") as f:
            f.truncate(info["file"]["size"])
        assert adapter.receipt(key(), info) == Receipt("not_executed")

    def test_deleted_or_replaced_by_a_directory_is_unknown(self, tmp_path: Path) -> None:
        """Deleted since the claim, or a directory now at the path: unknown."""
        path = tmp_path / "notes.log"
        adapter, info = self.claimed(path)
        path.unlink()
        assert adapter.receipt(key(), info).answer == "unknown"
        path.mkdir()
        assert adapter.receipt(key(), info).answer == "unknown"
        path.rmdir()
        os.mkfifo(path)  # opened without blocking, and no regular file
        assert adapter.receipt(key(), info).answer == "unknown"
        assert adapter.receipt(key()).answer == "unknown"

    def test_absent_or_empty_at_the_claim_is_unknown_without_the_line(self, tmp_path: Path) -> None:
        """No file, or an empty one, at the claim: a truncation since cannot be ruled out."""
        path = tmp_path / "notes.log"
        adapter = appender(path)
        absent = adapter.claim_info()
        assert absent["file"] is None
        assert adapter.receipt(key(), absent).answer == "unknown"
        path.touch()
        empty = adapter.claim_info()
        assert empty["file"] is not None and empty["file"]["size"] == 0
        assert adapter.receipt(key(), empty).answer == "unknown"
        adapter.call(request(b"x"))
        assert adapter.receipt(key(), absent) == Receipt("executed")
        assert adapter.receipt(key(), empty) == Receipt("executed")
        assert adapter.receipt(key("op2"), empty).answer == "unknown"

    def test_torn_line_after_the_offset_is_unknown(self, tmp_path: Path) -> None:
        """The key's line cut short after the offset: the write began, unknown."""
        path = tmp_path / "notes.log"
        adapter, info = self.claimed(path)
        with path.open("ab") as f:
            f.write(f"{key()}\t78".encode()[:-1])
        assert adapter.receipt(key(), info).answer == "unknown"

    def test_claims_without_the_files_record_are_never_not_executed(self, tmp_path: Path) -> None:
        """No record, an older wardd's path-only record, a malformed one: at most executed."""
        path = tmp_path / "notes.log"
        adapter, _ = self.claimed(path)
        older = {"path": str(path)}
        assert adapter.receipt(key(), {}).answer == "unknown"
        assert adapter.receipt(key(), older).answer == "unknown"
        malformed = {"path": str(path), "file": {"dev": "x"}}
        assert adapter.receipt(key(), malformed).answer == "unknown"
        assert adapter.receipt(key(), {"path": "relative"}).answer == "unknown"
        adapter.call(request(b"x"))
        assert adapter.receipt(key(), older) == Receipt("executed")

    def test_the_claim_record_is_what_the_file_was_before_the_call(self, tmp_path: Path) -> None:
        """Device, inode, size and digest describe the file as the claim saw it."""
        path = tmp_path / "notes.log"
        path.write_bytes(b"a" * 10000 + b"\n")
        info = appender(path).claim_info()
        st = path.stat()
        assert info["file"]["size"] == 10001
        assert (info["file"]["dev"], info["file"]["ino"]) == (st.st_dev, st.st_ino)
        assert file_identity(str(tmp_path)) is None  # a directory has no identity
        os.mkfifo(tmp_path / "fifo")
        assert file_identity(str(tmp_path / "fifo")) is None  # and a FIFO never blocks


class _AnnouncedGroups(_process.ProcessGroups):
    """`ProcessGroups` that tells when a child has been registered: `spawn`
    returns only once the child is in the groups, under its key."""

    def __init__(self) -> None:
        super().__init__()
        self.registered = threading.Event()

    def spawn(self, *args: Any, **kw: Any) -> subprocess.Popen[bytes]:
        proc = super().spawn(*args, **kw)
        self.registered.set()
        return proc


class TestCli:
    def test_exit_zero_returns_stdout_and_stderr_tail(self) -> None:
        """Exit 0 succeeds with stdout bytes, the stderr tail as text and truncated false."""
        result = cli("printf 'out\\377'; printf 'err' >&2").call(request())
        assert result == {"stdout": b"out\xff", "stderr_tail": "err", "truncated": False}

    def test_args_arrive_on_stdin(self) -> None:
        """The args are the program's stdin, then end of file, whatever their size."""
        adapter = build_adapter(
            "t",
            {"adapter": "cli", "argv": ["/bin/cat"], "max_arg_bytes": 300_000},
            max_frame=MAX_FRAME,
        )
        args = bytes(range(256)) * 1000
        assert adapter.call(request(args))["stdout"] == args
        assert adapter.call(request(b""))["stdout"] == b""

    def test_environment_is_minimal(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Only PATH, LANG, HOME, the configured env and WARDD_* reach the program."""
        monkeypatch.setenv("NOTIFY_SOCKET", "/run/notify")
        monkeypatch.setenv("LISTEN_FDS", "1")
        monkeypatch.setenv("SOME_DAEMON_SETTING", "leak")
        monkeypatch.setenv("LANG", "C.UTF-8")
        adapter = build_adapter(
            "t",
            {"adapter": "cli", "argv": ["/usr/bin/env"], "env": {"GREETING": "hi there"}},
            max_frame=MAX_FRAME,
        )
        out = adapter.call(request(op="op.7", attempt=3, act="tool.run"))["stdout"].decode()
        env = dict(line.split("=", 1) for line in out.splitlines())
        assert env.pop("PATH") == os.environ["PATH"]
        assert env.pop("LANG") == "C.UTF-8"
        assert env.pop("HOME")
        assert env == {
            "GREETING": "hi there",
            "WARDD_OP": "op.7",
            "WARDD_ATTEMPT": "3",
            "WARDD_ACT": "tool.run",
            "WARDD_IDEMPOTENCY_KEY": f"{NEURON}/op.7/3",
        }

    def test_no_effect_exit_is_a_definite_failure(self) -> None:
        """An exit listed in no_effect_exits asserts nothing happened: failed."""
        with pytest.raises(DefiniteFailure, match="exit status 2"):
            cli("echo nope >&2; exit 2", no_effect_exits=[2, 3]).call(request())

    def test_other_exit_is_unknown(self) -> None:
        """Any other non-zero exit is unknown, never a definite failure."""
        with pytest.raises(OutcomeUnknown, match="exit status 4") as info:
            cli("exit 4", no_effect_exits=[2]).call(request())
        assert not isinstance(info.value, DefiniteFailure)

    def test_death_by_signal_is_unknown(self) -> None:
        """A program killed by a signal has an unknown outcome."""
        with pytest.raises(OutcomeUnknown, match="SIGKILL"):
            cli("kill -9 $$").call(request())

    def test_timeout_kills_the_process_group(self, tmp_path: Path) -> None:
        """Past timeout_s the whole group is SIGKILLed (a background child too): unknown."""
        pidfile = tmp_path / "bg.pid"
        adapter = cli(f"sleep 1000 & echo $! > {pidfile}; wait", timeout_s=1)
        started = time.monotonic()
        with pytest.raises(OutcomeUnknown, match="timed out"):
            adapter.call(request())
        assert time.monotonic() - started < 30
        wait_dead(pid_written(pidfile))

    def test_leftover_children_are_killed_when_the_call_ends(self, tmp_path: Path) -> None:
        """A background child left by a successful program cannot outlive the call."""
        pidfile = tmp_path / "bg.pid"
        started = time.monotonic()
        result = cli(f"sleep 1000 & echo $! > {pidfile}; echo done").call(request())
        assert result["stdout"] == b"done\n"
        assert time.monotonic() - started < 30  # not held by the child's open stdout
        wait_dead(pid_written(pidfile))

    def test_flood_is_truncated_and_drained(self) -> None:
        """stdout keeps at most max_frame - 64 KiB; the rest is drained so the child ends."""
        flood = (
            "import sys; sys.stdout.buffer.write(b'z' * (4 << 20)); sys.stderr.write('e' * 9000)"
        )
        adapter = build_adapter(
            "t", {"adapter": "cli", "argv": [sys.executable, "-c", flood]}, max_frame=131072
        )
        result = adapter.call(request())
        assert result["stdout"] == b"z" * 65536
        assert result["truncated"] is True
        assert result["stderr_tail"] == "e" * 4096

    def test_secret_reaches_the_program_but_not_the_results(self, tmp_path: Path) -> None:
        """A secret file's value is in the child's env and redacted from results and errors."""
        secret = "s3cr3t-v4lue"
        (tmp_path / "token").write_text(secret + "\n")
        seen = tmp_path / "seen"
        table: dict[str, Any] = {
            "env": {"API_TOKEN": {"file": str(tmp_path / "token")}, "OUT": str(seen)},
            "no_effect_exits": [3],
        }
        script = 'printf %s "$API_TOKEN" > "$OUT"; echo "t=$API_TOKEN"; echo "e=$API_TOKEN" >&2'
        result = cli(script, **table).call(request())
        assert seen.read_text() == secret
        assert result["stdout"] == b"t=[redacted]\n"
        assert result["stderr_tail"] == "e=[redacted]\n"
        for code, error in ((4, OutcomeUnknown), (3, DefiniteFailure)):
            with pytest.raises(error) as info:
                cli(f"{script}; exit {code}", **table).call(request())
            assert secret not in str(info.value) and "[redacted]" in str(info.value)

    def test_secret_cut_by_the_output_bounds_leaves_no_piece(self, tmp_path: Path) -> None:
        """A secret crossing the stdout cut or the stderr tail's start is redacted whole."""
        secret = "0123456789abcdef"
        (tmp_path / "token").write_text(secret)
        code = (
            "import os, sys; s = os.environ['TOK'].encode(); "
            "sys.stdout.buffer.write(b'x' * 65530 + s + b'y' * 100); "
            "sys.stderr.buffer.write(s + b'w' * 4090)"
        )
        adapter = build_adapter(
            "t",
            {
                "adapter": "cli",
                "argv": [sys.executable, "-c", code],
                "env": {"TOK": {"file": str(tmp_path / "token")}},
            },
            max_frame=131072,
        )
        result = adapter.call(request())
        assert result["truncated"] is True and len(result["stdout"]) == 65536
        assert result["stdout"] == b"x" * 65530 + b"[redac"
        assert result["stderr_tail"] == "[redacted]" + "w" * 4090
        for i in range(4, len(secret)):
            assert secret[:i].encode() not in result["stdout"]
            assert secret[-i:] not in result["stderr_tail"]

    def test_unreadable_secret_is_a_definite_failure(self, tmp_path: Path) -> None:
        """A secret file that cannot be read fails the call before the program starts."""
        ran = tmp_path / "ran"
        adapter = cli(f"touch {ran}", env={"TOK": {"file": str(tmp_path / "missing")}})
        with pytest.raises(DefiniteFailure, match="TOK"):
            adapter.call(request())
        assert not ran.exists()

    def test_spawn_failure_is_a_definite_failure(self, tmp_path: Path) -> None:
        """A program that cannot be spawned (missing, not executable) never ran: failed."""
        not_executable = tmp_path / "tool"
        not_executable.write_text("#!/bin/sh\ntouch ran\n")
        for argv in ([str(tmp_path / "missing")], [str(not_executable)]):
            adapter = build_adapter("t", {"adapter": "cli", "argv": argv}, max_frame=MAX_FRAME)
            with pytest.raises(DefiniteFailure, match="cannot start"):
                adapter.call(request(b"args"))

    def test_program_that_drops_its_args_is_decided_by_its_exit_status(self) -> None:
        """A program that closes stdin unread succeeds on exit 0 and is unknown on exit 7."""
        big = b"a" * (4 << 20)
        ok = cli("exec 0<&-; exit 0", max_frame=8 << 20, max_arg_bytes=4 << 20)
        assert ok.call(request(big))["stdout"] == b""
        bad = cli("exec 0<&-; exit 7", max_frame=8 << 20, max_arg_bytes=4 << 20)
        with pytest.raises(OutcomeUnknown, match="exit status 7"):
            bad.call(request(big))
        nofx = cli("exec 0<&-; exit 2", max_arg_bytes=65536, no_effect_exits=[2])
        with pytest.raises(DefiniteFailure):
            nofx.call(request(b"b" * 65536))

    @pytest.mark.parametrize(
        "argv",
        [["/bin/true"], ["/usr/bin/env", "touch", "{dir}/touched"], [SH, "-c", "exit 0"]],
        ids=["true", "touch", "sh-exit-0"],
    )
    def test_programs_that_ignore_their_input_always_succeed(
        self, argv: list[str], tmp_path: Path
    ) -> None:
        """100 runs of a program that never reads stdin, small and max-size args: all succeed."""
        table = {"adapter": "cli", "argv": [a.format(dir=tmp_path) for a in argv]}
        adapter = build_adapter("t", table, max_frame=MAX_FRAME)
        for i in range(100):
            args = b"x" if i % 2 else b"y" * adapter.max_arg_bytes
            assert adapter.call(request(args, attempt=i + 1))["truncated"] is False

    def test_program_that_writes_a_megabyte_before_reading_gets_all_its_args(self) -> None:
        """A program printing 1 MB before it reads its 1 MiB of args cannot deadlock."""
        script = "head -c 1048576 /dev/zero | tr '\\0' x; cat"
        adapter = cli(script, max_frame=4 << 20, max_arg_bytes=1 << 20)
        args = os.urandom(1 << 20)
        out = adapter.call(request(args))
        assert out["stdout"] == b"x" * (1 << 20) + args and out["truncated"] is False

    def test_args_over_the_bound_are_refused(self, tmp_path: Path) -> None:
        """Args above max_arg_bytes fail before anything starts."""
        ran = tmp_path / "ran"
        with pytest.raises(DefiniteFailure):
            cli(f"touch {ran}", max_arg_bytes=1).call(request(b"ab"))
        assert not ran.exists()

    def test_receipt_argv_answers(self) -> None:
        """receipt_argv gets the key last; its first line is the answer, else unknown."""
        script = textwrap.dedent(
            """
            case "$1" in
              */op1/1) echo executed ;;
              */op1/2) echo not_executed; echo ignored ;;
              */op1/3) echo unknown ;;
              */op1/4) echo executed; exit 1 ;;
              *) echo "$WARDD_IDEMPOTENCY_KEY $WARDD_OP $WARDD_ATTEMPT $WARDD_ACT" ;;
            esac
            """
        )
        adapter = cli("true", receipt_argv=[SH, "-c", script, "receipt"])
        assert has_receipt(adapter) and not adapter.in_process
        answers = [adapter.receipt(key("op1", n)).answer for n in range(1, 6)]
        assert answers == ["executed", "not_executed", "unknown", "unknown", "unknown"]
        assert not has_receipt(cli("true"))
        assert cli("true").receipt(key()).answer == "unknown"

    def test_a_receipt_run_says_so_in_its_environment_and_a_call_does_not(self) -> None:
        """A receipt program gets WARDD_RECEIPT=1 and no WARDD_BOOT (it is never
        an orphan to kill); a call's program gets its boot and no WARDD_RECEIPT."""
        said = 'echo "receipt=${WARDD_RECEIPT-none} boot=${WARDD_BOOT-none}"'
        adapter = cli(said, receipt_argv=[SH, "-c", f"{said} >&2; exit 1"])
        got = adapter.receipt(key())
        assert got.answer == "unknown" and "receipt=1 boot=none" in (got.detail or "")
        out = adapter.call(attrs.evolve(request(), boot="b1"))
        assert out["stdout"] == b"receipt=none boot=b1\n"

    def test_kill_all_kills_running_groups_and_ends_the_adapter(
        self, tmp_path: Path, start_thread
    ) -> None:
        """kill_all SIGKILLs a call's group (its outcome unknown) and refuses new calls."""
        pidfile = tmp_path / "bg.pid"
        adapter = cli(f"sleep 1000 & echo $! > {pidfile}; wait")
        errors: list[BaseException] = []

        def run() -> None:
            try:
                adapter.call(request())
            except BaseException as exc:  # noqa: BLE001 - the thread hands every ending to the test
                errors.append(exc)

        worker = start_thread(run, stop=adapter.kill_all)
        background = pid_written(pidfile)
        adapter.kill_all()
        worker.join(timeout=30)
        assert not worker.is_alive()
        assert len(errors) == 1 and isinstance(errors[0], OutcomeUnknown)
        wait_dead(background)
        with pytest.raises(DefiniteFailure):
            adapter.call(request())

    def test_concurrent_calls_keep_their_own_output(self, start_thread) -> None:
        """Several worker threads may call one cli adapter at once."""
        adapter = build_adapter("t", {"adapter": "cli", "argv": ["/bin/cat"]}, max_frame=MAX_FRAME)
        results: dict[int, bytes] = {}

        def run(i: int) -> None:
            results[i] = adapter.call(request(str(i).encode() * 1000, op=f"o{i}"))["stdout"]

        threads = [start_thread(run, i) for i in range(12)]
        for t in threads:
            t.join(60)
        assert results == {i: str(i).encode() * 1000 for i in range(12)}

    @pytest.mark.parametrize(
        ("table", "bad_key"),
        [
            ({}, "argv"),
            ({"argv": []}, "argv"),
            ({"argv": "/bin/true"}, "argv"),
            ({"argv": ["/bin/true", 3]}, "argv[1]"),
            ({"argv": [""]}, "argv[0]"),
            ({"argv": ["/bin/true"], "max_arg_bytes": 0}, "max_arg_bytes"),
            ({"argv": ["/bin/true"], "max_arg_bytes": "10"}, "max_arg_bytes"),
            ({"argv": ["/bin/true"], "no_effect_exits": [0]}, "no_effect_exits[0]"),
            ({"argv": ["/bin/true"], "no_effect_exits": [2, 256]}, "no_effect_exits[1]"),
            ({"argv": ["/bin/true"], "no_effect_exits": [True]}, "no_effect_exits[0]"),
            ({"argv": ["/bin/true"], "no_effect_exits": 2}, "no_effect_exits"),
            ({"argv": ["/bin/true"], "timeout_s": 0}, "timeout_s"),
            ({"argv": ["/bin/true"], "timeout_s": -1.5}, "timeout_s"),
            ({"argv": ["/bin/true"], "timeout_s": "10"}, "timeout_s"),
            ({"argv": ["/bin/true"], "timeout_s": float("inf")}, "timeout_s"),
            ({"argv": ["/bin/true"], "env": ["A=b"]}, "env"),
            ({"argv": ["/bin/true"], "env": {"BAD-NAME": "x"}}, "env.BAD-NAME"),
            ({"argv": ["/bin/true"], "env": {"WARDD_OP": "x"}}, "env.WARDD_OP"),
            ({"argv": ["/bin/true"], "env": {"NOTIFY_SOCKET": "x"}}, "env.NOTIFY_SOCKET"),
            ({"argv": ["/bin/true"], "env": {"LISTEN_FDS": "3"}}, "env.LISTEN_FDS"),
            ({"argv": ["/bin/true"], "env": {"A": 1}}, "env.A"),
            ({"argv": ["/bin/true"], "env": {"A": {}}}, "env.A.file"),
            ({"argv": ["/bin/true"], "env": {"A": {"file": "rel"}}}, "env.A.file"),
            ({"argv": ["/bin/true"], "env": {"A": {"file": "/s", "mode": 1}}}, "env.A.mode"),
            ({"argv": ["/bin/true"], "receipt_argv": []}, "receipt_argv"),
            ({"argv": ["/bin/true"], "receipt_argv": [None]}, "receipt_argv[0]"),
            ({"argv": ["/bin/true"], "shell": True}, "shell"),
        ],
    )
    def test_bad_tables_name_the_key(self, table: dict[str, Any], bad_key: str) -> None:
        """Every bad key is refused with its name relative to the act's table."""
        with pytest.raises(AdapterConfigError) as info:
            build_adapter("t", {"adapter": "cli", **table}, max_frame=MAX_FRAME)
        assert info.value.key == bad_key

    @pytest.mark.parametrize("use_pidfd", [True, False])
    def test_leader_exit_is_seen_with_or_without_pidfd(
        self, tmp_path: Path, use_pidfd: bool
    ) -> None:
        """Exit, timeout and the group kill work with a pidfd and by polling (old kernels)."""
        groups = _process.ProcessGroups()
        env = {"PATH": "/usr/bin:/bin"}
        pidfile = tmp_path / "bg.pid"
        script = f"sleep 1000 & echo $! > {pidfile}; cat; echo err >&2; exit 5"
        done = _process.run(
            groups,
            [SH, "-c", script],
            env,
            b"in",
            timeout_s=None,
            stdout_head=10,
            stderr_tail=10,
            use_pidfd=use_pidfd,
        )
        assert (done.returncode, done.stdout_head, done.stderr_tail) == (5, b"in", b"err\n")
        assert not done.timed_out and done.stdin_unread == 0
        wait_dead(pid_written(pidfile))
        slow = _process.run(
            groups,
            [SH, "-c", "exec sleep 1000"],
            env,
            None,
            timeout_s=0.2,
            stdout_head=10,
            stderr_tail=10,
            use_pidfd=use_pidfd,
        )
        assert slow.timed_out and slow.returncode == -9
        assert groups.live == 0

    def test_abort_kills_a_running_call_and_refuses_one_not_yet_started(
        self, tmp_path: Path, start_thread
    ) -> None:
        """abort(key) SIGKILLs the named call's group; an abort that comes before
        the program started keeps it from starting (nothing runs)."""
        groups = _AnnouncedGroups()
        env = {"PATH": "/usr/bin:/bin"}
        pidfile = tmp_path / "hung.pid"
        box: dict[str, Any] = {}

        def hung() -> None:
            box["done"] = _process.run(
                groups,
                [SH, "-c", f"echo $$ > {pidfile}; exec sleep 1000"],
                env,
                None,
                timeout_s=None,
                stdout_head=10,
                stderr_tail=10,
                key="n/op/1",
            )

        # pass or fail, no `sleep 1000` (nor the thread waiting for it) outlives the test
        t = start_thread(hung, stop=groups.kill_all)
        # registered, not only started: the abort below must find the call by its key
        assert groups.registered.wait(30), "the call's program was never registered"
        pid = pid_written(pidfile)
        groups.abort("n/op/2")  # another call's key: nothing happens to this one
        assert groups.live == 1
        groups.abort("n/op/1")
        t.join(30)
        assert box["done"].returncode == -9
        wait_dead(pid)
        assert groups.live == 0
        marker = tmp_path / "ran"
        with pytest.raises(OutcomeUnknown, match="aborted by the operator before"):
            _process.run(
                groups,
                [SH, "-c", f"touch {marker}"],
                env,
                None,
                timeout_s=None,
                stdout_head=10,
                stderr_tail=10,
                key="n/op/2",
            )
        assert not marker.exists()

    def test_secret_file_edge_cases(self, tmp_path: Path) -> None:
        """One trailing CRLF is stripped; an oversized or NUL-holding secret fails the call."""
        token = tmp_path / "token"
        adapter = cli('printf %s "$TOK"', env={"TOK": {"file": str(token)}})
        token.write_bytes(b"abc\r\n")
        assert adapter.call(request())["stdout"] == b"[redacted]"
        for content in (b"a\0b", b"x" * 65537):
            token.write_bytes(content)
            with pytest.raises(DefiniteFailure, match="TOK"):
                adapter.call(request())


class TestRedaction:
    def test_overlapping_secrets_and_window_edges(self) -> None:
        """Overlapping occurrences merge; an occurrence crossing a window edge goes whole."""
        secrets = [b"abcd", b"cdef", b""]
        assert _redact.redact_window(b"xxabcdefyy", secrets) == b"xx[redacted]yy"
        assert _redact.redact_window(b"abcd--abcd", [b"abcd"], 2, 8) == b"[redacted]--[redacted]"
        assert _redact.redact_window(b"abcd--abcd", [b"abcd"], 4, 6) == b"--"
        assert _redact.redact_window(b"plain", []) == b"plain"

    def test_text_redaction(self) -> None:
        """Exception texts lose every secret, also one that is not valid UTF-8."""
        text = "a s3cret and \xe9t\xe9 b"
        out = _redact.redact_text(text, [b"s3cret", "\xe9t\xe9".encode("latin-1")])
        assert out == "a [redacted] and [redacted] b"


PLUGIN = """
from wardd.adapters import Receipt

class Plugin:
    in_process = True

    def __init__(self, greeting):
        self.greeting = greeting

    def call(self, request):
        return self.greeting.encode() + request.args

    def receipt(self, idempotency_key):
        return "executed" if idempotency_key.endswith("/1") else Receipt("not_executed")
"""


class TestBuildAdapter:
    def test_unknown_adapter_names_the_choices(self) -> None:
        """An adapter name that is neither built in nor an entry point is refused."""
        with pytest.raises(AdapterConfigError, match="built-in: cli, file.append") as info:
            build_adapter("t", {"adapter": "nope"}, max_frame=MAX_FRAME)
        assert info.value.key == "adapter"
        for table in ({}, {"adapter": 1}):
            with pytest.raises(AdapterConfigError) as info:
                build_adapter("t", table, max_frame=MAX_FRAME)
            assert info.value.key == "adapter"

    def test_entry_point_adapter_is_built_from_its_table(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """An entry point of group wardd.adapters gets the table's keys and the act's tag."""
        (tmp_path / "wardd_test_plugin.py").write_text(PLUGIN)
        dist = tmp_path / "wardd_test_plugin-1.0.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text(
            "Metadata-Version: 2.1\nName: wardd-test-plugin\nVersion: 1.0\n"
        )
        (dist / "entry_points.txt").write_text(
            "[wardd.adapters]\ngreeter = wardd_test_plugin:Plugin\n"
        )
        monkeypatch.syspath_prepend(str(tmp_path))
        table = {"adapter": "greeter", "greeting": "hi ", "max_arg_bytes": 10}
        adapter = build_adapter("greet", table, max_frame=MAX_FRAME)
        assert isinstance(adapter, EntryPointAdapter)
        assert (adapter.tag, adapter.max_arg_bytes, adapter.in_process) == ("greet", 10, True)
        assert adapter.call(request(b"you")) == b"hi you"
        assert has_receipt(adapter)
        assert adapter.receipt(key(), {"x": 1}) == Receipt("executed")
        assert adapter.receipt(key(attempt=2)).answer == "not_executed"
        with pytest.raises(AdapterConfigError, match="greeter"):
            build_adapter("greet", {"adapter": "greeter", "colour": 1}, max_frame=MAX_FRAME)
        with pytest.raises(AdapterConfigError, match="entry points: greeter"):
            build_adapter("t", {"adapter": "nope"}, max_frame=MAX_FRAME)
