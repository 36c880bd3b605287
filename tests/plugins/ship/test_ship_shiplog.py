"""framework_ship.shiplog and .index: the attempt log and its side index."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from framework_ship.index import ShipIndex, digest
from framework_ship.shiplog import Attempt, ShipLog, read_attempts

from framework.errors import WorkspaceError
from tests.fixtures import procs

H1 = "sha256:" + "1" * 64
H2 = "sha256:" + "2" * 64


def attempt(key: str, h: str, outcome: str, n: int = 1) -> Attempt:
    return Attempt(key, h, n, 201 if outcome == "accepted" else 500, outcome, 1.5)


def test_one_line_per_attempt_with_the_contract_fields(tmp_path: Path) -> None:
    log_path = tmp_path / "ship-log.jsonl"
    with ShipLog(log_path) as log:
        log.write([attempt("t:1", H1, "error"), attempt("t:1", H1, "accepted", 2)])
    lines = [json.loads(line) for line in log_path.read_text().splitlines()]
    assert [(r["attempt"], r["outcome"], r["http_status"]) for r in lines] == [
        (1, "error", 500),
        (2, "accepted", 201),
    ]
    for field in ("time", "dedupe_key", "content_hash", "latency_ms", "error_class", "batch_id"):
        assert field in lines[0]


def test_torn_last_line_is_skipped_and_terminated_before_the_next(tmp_path: Path) -> None:
    log_path = tmp_path / "ship-log.jsonl"
    with ShipLog(log_path) as log:
        log.write([attempt("t:1", H1, "accepted")])
    with open(log_path, "ab") as fh:
        fh.write(b'{"v":1,"dedupe_key":"t:2","outc')  # killed mid-write
    assert [r["dedupe_key"] for r, _ in read_attempts(log_path)] == ["t:1"]
    with ShipLog(log_path) as log:
        log.write([attempt("t:3", H1, "accepted")])
    assert [r["dedupe_key"] for r, _ in read_attempts(log_path)] == ["t:1", "t:3"]


def test_index_answers_latest_success_per_key(tmp_path: Path) -> None:
    log_path = tmp_path / "ship-log.jsonl"
    index = ShipIndex.open(tmp_path, log_path)
    with ShipLog(log_path, on_written=index.on_written) as log:
        log.write([attempt("t:1", H1, "error"), attempt("t:1", H1, "accepted", 2)])
        log.write([attempt("t:2", H1, "rejected")])
        log.write([attempt("t:1", H2, "error")])
    index.close()
    with ShipIndex.open(tmp_path, log_path) as again:
        one = again.lookup("t:1")
        assert one is not None
        assert one.ok_hash == digest(H1)
        assert one.hash == digest(H2)
        assert one.outcome == "error"
        two = again.lookup("t:2")
        assert two is not None
        assert two.ok_hash is None
        assert two.outcome == "rejected"
        assert again.lookup("t:3") is None
        assert again.outcome_counts() == {"error": 1, "rejected": 1}


def test_index_catches_up_with_lines_it_never_saw(tmp_path: Path) -> None:
    # A kill -9 between the log write and the index commit: the log is the truth.
    log_path = tmp_path / "ship-log.jsonl"
    ShipIndex.open(tmp_path, log_path).close()
    with ShipLog(log_path) as log:  # no index attached
        log.write([attempt("t:9", H1, "accepted")])
    with ShipIndex.open(tmp_path, log_path) as index:
        found = index.lookup("t:9")
        assert found is not None
        assert found.ok_hash == digest(H1)


def test_readonly_index_never_writes_and_sees_the_tail(tmp_path: Path) -> None:
    log_path = tmp_path / "ship-log.jsonl"
    ShipIndex.open(tmp_path, log_path).close()
    db = tmp_path / "ship-index.sqlite"
    before = db.read_bytes()
    with ShipLog(log_path) as log:
        log.write([attempt("t:5", H1, "accepted")])
    with ShipIndex.open(tmp_path, log_path, readonly=True) as ro:
        found = ro.lookup("t:5")
        assert found is not None
        assert found.outcome == "accepted"
        assert ro.outcome_counts() == {"accepted": 1}
    assert db.read_bytes() == before


def test_readonly_without_an_index_file_reads_the_log(tmp_path: Path) -> None:
    log_path = tmp_path / "ship-log.jsonl"
    with ShipLog(log_path) as log:
        log.write([attempt("t:1", H1, "accepted"), attempt("t:2", H1, "error")])
    with ShipIndex.open(tmp_path, log_path, readonly=True) as ro:
        assert ro.outcome_counts() == {"accepted": 1, "error": 1}
    assert not (tmp_path / "ship-index.sqlite").exists()


def test_a_replaced_log_rebuilds_the_index(tmp_path: Path) -> None:
    log_path = tmp_path / "ship-log.jsonl"
    index = ShipIndex.open(tmp_path, log_path)
    with ShipLog(log_path, on_written=index.on_written) as log:
        log.write([attempt(f"t:{i}", H1, "accepted") for i in range(5)])
    index.close()
    log_path.unlink()
    with ShipLog(log_path) as log:
        log.write([attempt("t:0", H2, "error")])
    with ShipIndex.open(tmp_path, log_path) as rebuilt:
        assert rebuilt.outcome_counts() == {"error": 1}
        assert rebuilt.lookup("t:3") is None


@pytest.mark.process
def test_a_shipper_killed_mid_transaction_leaves_a_hot_journal_readers_survive(
    tmp_path: Path,
) -> None:
    log_path = tmp_path / "ship-log.jsonl"
    with ShipLog(log_path) as log:
        log.write([attempt("t:1", H1, "accepted")])
    ShipIndex.open(tmp_path, log_path).close()
    # A child writes inside a transaction and dies without committing (kill -9).
    script = (
        "import os, sys; from pathlib import Path\n"
        "from framework_ship.index import ShipIndex\n"
        "from framework_ship.shiplog import Attempt, ShipLog\n"
        f"d = Path({str(tmp_path)!r}); idx = ShipIndex.open(d, d / 'ship-log.jsonl')\n"
        "log = ShipLog(d / 'ship-log.jsonl', on_written=idx.on_written)\n"
        "log.write([Attempt(f't:{i}', 'sha256:' + '2' * 64, 1, 201, 'accepted', 1.0)"
        " for i in range(2, 500)])\n"
        "os._exit(0)\n"
    )
    procs.run([sys.executable, "-c", script], check=True)
    assert (tmp_path / "ship-index.sqlite-journal").exists()
    with ShipIndex.open(tmp_path, log_path, readonly=True) as ro:  # cannot roll back
        assert ro.outcome_counts() == {"accepted": 499}
    with ShipIndex.open(tmp_path, log_path) as rw:  # rolls back, then replays the log
        assert rw.outcome_counts() == {"accepted": 499}
        found = rw.lookup("t:300")
        assert found is not None
        assert found.ok_hash == digest(H2)


def test_a_ship_log_that_is_a_symlink_is_refused_and_its_target_kept(tmp_path: Path) -> None:
    target = tmp_path / "profile"
    target.write_bytes(b"# mine\n")
    link = tmp_path / "ship-log.jsonl"
    link.symlink_to(target)
    with pytest.raises(WorkspaceError, match="is a symbolic link"):
        ShipLog(link)
    assert target.read_bytes() == b"# mine\n"
