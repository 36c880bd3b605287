"""JsonlLog on real files: whole lines, torn tails, concurrent appenders, redaction."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from framework.workspace import JsonlLog, redact
from framework.workspace.jsonl import REDACTED, redact_url
from tests.fixtures import procs
from tests.paths import REPO


def test_append_writes_one_compact_utf8_line_per_record(tmp_path: Path) -> None:
    log = JsonlLog(tmp_path / "a.jsonl")
    log.append({"event": "run_started", "title": "Žilina sąd ő", "n": 1})
    log.append({"event": "run_finished", "nested": {"x": [1, 2]}})
    log.close()
    text = (tmp_path / "a.jsonl").read_text(encoding="utf-8")
    assert text == (
        '{"event":"run_started","title":"Žilina sąd ő","n":1}\n'
        '{"event":"run_finished","nested":{"x":[1,2]}}\n'
    )
    assert [r["event"] for r in JsonlLog(tmp_path / "a.jsonl")] == ["run_started", "run_finished"]


def test_reading_a_missing_log_yields_nothing(tmp_path: Path) -> None:
    log = JsonlLog(tmp_path / "none.jsonl")
    assert list(log) == []
    assert log.tail(5) == []


def test_torn_last_line_is_skipped_on_read_and_truncated_on_append(tmp_path: Path) -> None:
    path = tmp_path / "urls.jsonl"
    log = JsonlLog(path)
    for i in range(3):
        log.append({"i": i})
    log.close()
    with path.open("ab") as f:
        f.write(b'{"i": 3, "url": "http://si')  # the writer died here
    reader = JsonlLog(path)
    assert [r["i"] for r in reader.read()] == [0, 1, 2]
    assert reader.skipped == 1
    assert [r["i"] for r in reader.tail(2)] == [1, 2]
    writer = JsonlLog(path)
    writer.append({"i": 4})
    writer.close()
    assert writer.repaired == 1
    assert path.read_bytes() == b'{"i":0}\n{"i":1}\n{"i":2}\n{"i":4}\n'
    assert [r["i"] for r in reader] == [0, 1, 2, 4]
    assert reader.skipped == 0


def test_whole_record_missing_its_newline_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'{"i":0}\n{"i":1}')
    assert [r["i"] for r in JsonlLog(path)] == [0]  # not yet whole on read
    with JsonlLog(path) as log:
        log.append({"i": 2})
    assert [r["i"] for r in JsonlLog(path)] == [0, 1, 2]


def test_torn_file_without_any_newline_is_emptied(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'{"i":')
    with JsonlLog(path) as log:
        log.append({"i": 1})
    assert path.read_bytes() == b'{"i":1}\n'


def test_invalid_lines_in_the_middle_are_skipped_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"i":0}\nnot json\n[1,2]\n\n{"i":1}\n')
    log = JsonlLog(path)
    assert [r["i"] for r in log] == [0, 1]
    assert log.skipped == 3
    assert [r["i"] for r in log.tail(1)] == [1]


def test_tail_reads_across_blocks(tmp_path: Path) -> None:
    log = JsonlLog(tmp_path / "big.jsonl")
    pad = "x" * 3000
    for i in range(200):  # ~600 KB: many 64 KB blocks
        log.append({"i": i, "pad": pad})
    log.close()
    assert [r["i"] for r in log.tail(3)] == [197, 198, 199]
    assert [r["i"] for r in log.tail(50)] == list(range(150, 200))
    assert len(log.tail(1000)) == 200
    assert log.tail(0) == []


def test_tail_reads_further_back_past_invalid_lines(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"i":0}\n{"i":1}\n' + b"garbage\n" * 20000 + b'{"i":2}\n{"i":3')
    assert [r["i"] for r in JsonlLog(path).tail(3)] == [0, 1, 2]


@pytest.mark.parametrize("block", [1, 7, 64, 65536])
@pytest.mark.parametrize(
    "data",
    [
        b"",
        b'{"i":0}\n',
        b'{"i":0}',  # torn: no record
        b'{"i":0}\n{"i":1}\n{"i":2',  # torn tail
        b'{"i":0}\ngarbage\n[1]\n\n{"i":1}\n',  # lines that are not records
        b'{"i":0,"pad":"' + b"x" * 300 + b'"}\n{"i":1}\n',  # a line longer than blocks
        b"\n".join(b'{"i":%d}' % i for i in range(500)) + b"\n",
        # events asked for, one named only in another field, one with spaces
        b'{"event":"a","i":0}\n{"event":"b","note":"a"}\n{"event": "c"}\n"a" [\n{"event":"a"',
    ],
)
def test_newest_first_is_the_log_read_backwards(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: bytes, block: int
) -> None:
    monkeypatch.setattr("framework.workspace.jsonl._BLOCK", block)
    path = tmp_path / "n.jsonl"
    path.write_bytes(data)
    log = JsonlLog(path)
    forward = list(log.read())
    skipped = log.skipped
    assert list(log.newest_first()) == list(reversed(forward))
    assert log.skipped == skipped  # the same lines are not records, either way
    wanted = [r for r in reversed(forward) if r.get("event") in {"a", "c"}]
    assert list(log.newest_first({"a", "c"})) == wanted


def test_last_finds_the_newest_record_of_the_named_events(tmp_path: Path) -> None:
    log = JsonlLog(tmp_path / "e.jsonl")
    assert log.last({"run_finished"}) is None  # no file yet
    log.append_many(
        [
            {"event": "run_finished", "n": 1},
            {"event": "reparse_finished", "n": 2},
            {"event": "items_changed", "n": 3},
        ]
    )
    assert log.last({"run_finished", "reparse_finished"}) == {"event": "reparse_finished", "n": 2}
    assert log.last({"run_finished"}) == {"event": "run_finished", "n": 1}
    assert log.last({"run_started"}) is None
    log.close()
    assert JsonlLog(tmp_path / "missing.jsonl").last({"run_finished"}) is None


def test_fsync_policy_still_writes_lines(tmp_path: Path) -> None:
    with JsonlLog(tmp_path / "s.jsonl", fsync=True) as log:
        log.append({"a": 1})
    assert [r["a"] for r in JsonlLog(tmp_path / "s.jsonl")] == [1]


APPENDER = textwrap.dedent(
    """
    import sys
    from framework.workspace import JsonlLog

    log = JsonlLog(sys.argv[1])
    who = sys.argv[2]
    for i in range(int(sys.argv[3])):
        # lines from 30 bytes to ~200 KB, larger than a pipe buffer or a page
        size = (i * 7919) % 200_000 if i % 50 == 0 else i % 97
        log.append({"who": who, "i": i, "pad": who * size})
    log.close()
    """
)


@pytest.mark.process
def test_concurrent_appenders_in_two_processes_never_interleave(tmp_path: Path) -> None:
    path = tmp_path / "urls.jsonl"
    path.write_bytes(b'{"torn":')  # both race to repair it too
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    n = 3000
    children = [
        procs.popen([sys.executable, "-c", APPENDER, str(path), who, str(n)], env=env)
        for who in ("a", "b")
    ]
    assert [p.wait(timeout=120) for p in children] == [0, 0]
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b""
    records = [json.loads(line) for line in lines[:-1]]  # every line parses whole
    for who in ("a", "b"):
        mine = [r for r in records if r["who"] == who]
        assert [r["i"] for r in mine] == list(range(n))
        assert all(set(r["pad"]) <= {who} for r in mine)


def test_redact_masks_secret_keys_at_any_depth() -> None:
    record = {
        "Authorization": "Bearer abc",
        "headers": {"Cookie": "s=1", "set-cookie": "s=2", "X-Api-Key": "k", "Accept": "*/*"},
        "nested": [{"password": "p", "csrf_token": "t", "token": "t2", "ok": 1}],
        "api_key": "k",
        "dedupe_key": "t:1",
        "content_hash": "sha256:00",
        "url": "https://user:pw@site/x?a=1&access_token=SECRET&sig=S&b=2",
        "final_url": "https://site/x?page=2",
    }
    out = redact(record)
    assert out == {
        "Authorization": REDACTED,
        "headers": {
            "Cookie": REDACTED,
            "set-cookie": REDACTED,
            "X-Api-Key": REDACTED,
            "Accept": "*/*",
        },
        "nested": [{"password": REDACTED, "csrf_token": REDACTED, "token": REDACTED, "ok": 1}],
        "api_key": REDACTED,
        "dedupe_key": "t:1",
        "content_hash": "sha256:00",
        "url": f"https://{REDACTED}@site/x?a=1&access_token={REDACTED}&sig={REDACTED}&b=2",
        "final_url": "https://site/x?page=2",
    }
    assert record["Authorization"] == "Bearer abc"  # the caller's record is not touched


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://site/a?b=c", "http://site/a?b=c"),
        ("http://site/a?apiKey=1", f"http://site/a?apiKey={REDACTED}"),
        ("mailto-like text with = sign", "mailto-like text with = sign"),
        ("http://site/a?email=x@y", "http://site/a?email=x@y"),
        ("http://site/a?author=kim&page=2", "http://site/a?author=kim&page=2"),
        ("http://site/a;jsessionid=AB12?x=1", f"http://site/a;jsessionid={REDACTED}?x=1"),
        (
            "http://site/a?X-Amz-Signature=ff&key=k",
            f"http://site/a?X-Amz-Signature={REDACTED}&key={REDACTED}",
        ),
    ],
)
def test_redact_url(url: str, expected: str) -> None:
    assert redact_url(url) == expected


def test_secrets_never_reach_the_file(tmp_path: Path) -> None:
    path = tmp_path / "urls.jsonl"
    with JsonlLog(path) as log:
        log.append({"url": "http://site/?token=hunter2", "headers": {"Authorization": "hunter2"}})
    assert b"hunter2" not in path.read_bytes()
