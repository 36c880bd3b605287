"""The integrity check's reading of the URL log: the one-scan path for lines as the
crawl writes them gives what decoding each line gives, on any mix of lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from framework.crawl.handled import Entry, url_line
from framework.workspace import integrity
from framework.workspace.jsonl import dumps_line
from framework.workspace.records import CommitResult, Outcome, Row, RowStatus


def _line(row: int, outcome: str = "ok", time: str = "2026-12-05T10:00:00.000+00:00") -> bytes:
    record = {
        "time": time,
        "method": "GET",
        "url": f"http://example.org/a?q=%22outcome%22&n={row}",
        "final_url": 'http://example.org/"outcome":"ok","row":99,',
        "status": 200,
        "bytes": 10,
        "latency_ms": 1.0,
        "outcome": outcome,
        "row": row,
        "kind": "detail",
        "attempt": 1,
    }
    return dumps_line(record)


def _both(path: Path, since: str | None) -> tuple[dict[int, int], dict[int, int]]:
    fast = integrity._ok_lines(path, since)
    slow = integrity._decoded(path.read_bytes().split(b"\n"), since)
    return dict(fast), dict(slow)


def test_the_crawls_own_lines_take_the_one_scan() -> None:
    # the scan's pattern follows url_line's shape; were it to change, the check would
    # still be right (each line decoded) but slow again: this says so
    row = Row(1, "detail", 'http://example.org/"x"', "GET", None, None, None, RowStatus.OK,
              1, True, None, None, 200, {}, "t", "t")  # fmt: skip
    entry = Entry(row=row, outcome=Outcome(row_id=1, ok=True), final_url=None, status=200,
                  size=5, latency_s=0.01)  # fmt: skip
    line = dumps_line(url_line(entry, CommitResult(status=RowStatus.OK, attempt=1)))
    assert integrity._OK_LINE.fullmatch(line.rstrip(b"\n")) is not None


def test_crawl_lines_are_read_as_decoding_reads_them(tmp_path: Path) -> None:
    path = tmp_path / "urls.jsonl"
    lines = [_line(1), _line(2, "timeout"), _line(1), _line(3, time="2026-12-05T11:00:00+00:00")]
    path.write_bytes(b"".join(lines) + _line(4)[:-10])  # a torn last line: not a record
    fast, slow = _both(path, None)
    assert fast == slow == {1: 2, 3: 1}
    fast, slow = _both(path, "2026-12-05T10:30:00")
    assert fast == slow == {3: 1}


def test_lines_written_another_way_are_decoded(tmp_path: Path) -> None:
    path = tmp_path / "urls.jsonl"
    other = [
        json.dumps({"outcome": "ok", "row": 7, "time": "2026-12-05T10:00:00+00:00"}).encode(),
        json.dumps({"time": "t", "nested": {"outcome": "ok"}, "outcome": "ok", "row": 8}).encode(),
        b'{"time":"t","outcome":"ok","row":true,"x":1}',
        b"not json at all",
    ]
    path.write_bytes(_line(1) + b"\n".join(other) + b"\n")
    fast, slow = _both(path, None)
    assert fast == slow == {1: 1, 7: 1, 8: 1}


def test_a_tail_begun_mid_line_skips_its_first_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "urls.jsonl"
    path.write_bytes(_line(1) + _line(2) + _line(3))
    monkeypatch.setattr(integrity, "TAIL_BYTES", len(_line(3)) * 2 - 5)
    assert dict(integrity._ok_lines(path, None)) == {3: 1}
