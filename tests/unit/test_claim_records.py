"""What a claim records about its adapter, and what a receipt is asked with (contract §3.4)."""

from __future__ import annotations

from pathlib import Path

from wardd.adapters import Adapter, build_adapter, echo_adapter
from wardd.daemon.dispatch.claims import claim_record, receipt_question

MAX_FRAME = 1 << 20


def file_append(path: Path) -> Adapter:
    return build_adapter(
        "notes", {"adapter": "file.append", "path": str(path)}, max_frame=MAX_FRAME
    )


def cli() -> Adapter:
    return build_adapter("notes", {"adapter": "cli", "argv": ["/bin/true"]}, max_frame=MAX_FRAME)


class TestClaimRecord:
    def test_a_claim_records_the_adapter_kind_and_its_record(self, tmp_path: Path) -> None:
        """Each built-in adapter's claim names its kind; file.append adds its file record."""
        fa = claim_record(file_append(tmp_path / "n.log"))
        assert fa["adapter"] == "file.append"
        assert fa["record"] == {"path": str(tmp_path / "n.log"), "file": None}
        assert claim_record(cli()) == {"adapter": "cli", "record": None}
        assert claim_record(echo_adapter()) == {"adapter": "echo", "record": None}


class TestReceiptQuestion:
    def test_never_claimed_is_asked_with_none_and_binds(self, tmp_path: Path) -> None:
        """An attempt with no claim row never reached an adapter: its answer applies."""
        q = receipt_question(file_append(tmp_path / "n.log"), False, None)
        assert (q.claim_info, q.binding) == (None, True)

    def test_a_claim_of_the_same_kind_is_asked_with_its_record(self, tmp_path: Path) -> None:
        """The adapter gets exactly what its own claim recorded, and its answer applies."""
        adapter = file_append(tmp_path / "n.log")
        stored = claim_record(adapter)
        q = receipt_question(adapter, True, stored)
        assert (q.claim_info, q.binding) == (stored["record"], True)

    def test_a_claim_under_another_adapter_is_a_hint_only(self, tmp_path: Path) -> None:
        """cli to file.append and back: the receipt's answer is never applied."""
        to_file = receipt_question(file_append(tmp_path / "n.log"), True, claim_record(cli()))
        assert (to_file.claim_info, to_file.binding) == ({}, False)
        assert "'cli'" in (to_file.why or "") and "'file.append'" in (to_file.why or "")
        stored = claim_record(file_append(tmp_path / "n.log"))
        to_cli = receipt_question(cli(), True, stored)
        assert (to_cli.claim_info, to_cli.binding) == ({}, False)

    def test_a_claim_without_an_adapter_record_is_a_hint_only(self, tmp_path: Path) -> None:
        """An older wardd's claim (no info, or a bare path record) is never applied."""
        adapter = file_append(tmp_path / "n.log")
        none = receipt_question(adapter, True, None)
        assert (none.claim_info, none.binding) == ({}, False)
        older = receipt_question(adapter, True, {"path": "/x"})
        assert (older.claim_info, older.binding) == ({"path": "/x"}, False)
        assert "older" in (older.why or "")
