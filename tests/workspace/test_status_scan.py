"""`framework status` reads the events log from its end: the last run and the last
extraction cost the lines since the last run's start, not the log's history, and give
what a pass over the whole log gave (the reference below is that pass, as status ran it
before it read from the end)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from framework.cli.status import render
from framework.workspace import NewRow, Workspace
from framework.workspace import fill as fill_mod
from framework.workspace.status import SPEC_CHANGES_MAX, _scan_events, build_status
from framework.workspace.workspace import SPEC_HISTORY_MAX


def forward_pass(events: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """The whole-log pass: the newest run start, its first run_finished, a requeue (or
    a reparse that queued pages) since, and the newest crawl's or reparse's extraction."""
    run: dict[str, Any] | None = None
    finished: dict[str, Any] | None = None
    requeued = False
    extraction: dict[str, Any] = {}
    for event in events:
        name = event.get("event")
        if name in fill_mod.EXTRACTION_EVENTS:
            extraction = fill_mod.last_extraction(event)
        if name in ("run_started", "run_resumed"):
            run, finished, requeued = event, None, False
        elif name == "run_finished" and run is not None and finished is None:
            finished = event
        elif name == "requeued" and run is not None:
            requeued = True
        elif name == "reparse_finished" and run is not None:
            requeued = requeued or event["counts"].get("rows_pending", 0) > 0
    if run is None:
        return None, extraction
    summary = {
        "mode": "resumed" if run["event"] == "run_resumed" else "started",
        "started": run.get("time"),
        "requeued_since": requeued,
        "finished": None if finished is None else finished.get("time"),
        "reason": "interrupted" if finished is None else finished.get("reason"),
        "counts": {} if finished is None else finished.get("counts"),
    }
    return summary, extraction


def random_log(rng: random.Random, n: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for i in range(n):
        t = f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}+00:00"
        name = rng.choice(
            [
                "run_started",
                "run_resumed",
                "run_finished",
                "run_finished",
                "reparse_finished",
                "requeued",
                "items_changed",
                "items_changed",
                "spec_changed",
            ]
        )
        event: dict[str, Any] = {"event": name, "time": t}
        if name.endswith("_finished"):
            event.update(
                reason=rng.choice(["finished", "shutdown"]),
                counts={"i": i, "rows_pending": rng.choice([0, 0, 3])},
                fill={"detail": {"records": i, "fields": {"a": i % 3}}},
                warnings=[{"kind": "detail", "n": i}],
            )
        events.append(event)
    return events


@pytest.mark.parametrize("seed", range(40))
def test_reading_from_the_end_gives_what_the_whole_log_gave(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    events = random_log(rng, rng.choice([0, 1, 2, 5, 30, 200]))
    with Workspace.open(tmp_path / "ws") as ws:
        ws.events.append_many(events)
        run, last = _scan_events(ws)
    extraction = fill_mod.last_extraction(last) if last is not None else {}
    want_run, want_extraction = forward_pass(events)
    assert extraction == want_extraction
    if want_run is None:
        assert run is None
        return
    assert run is not None
    assert {k: run[k] for k in want_run} == want_run


def write_lines(path: Path, lines: list[Any]) -> None:
    with path.open("ab") as fh:
        for line in lines:
            fh.write(line if isinstance(line, bytes) else json.dumps(line).encode() + b"\n")


def test_lines_before_the_last_run_are_not_read(tmp_path: Path) -> None:
    """Unreadable lines naming an event status reads (counted when read) stand for the
    history: a finished last run stops the read at its start; a killed one (no
    run_finished of its own) is read back to the run before's extraction, no further.
    Lines that cannot name such an event are not parsed at all."""
    with Workspace.open(tmp_path / "ws") as ws:
        ws.store.seed([NewRow("list", "http://site/")])
        path = ws.events.path
    old = {"event": "run_finished", "time": "t1", "reason": "finished", "fill": {"k": {}}}
    write_lines(path, [b'"run_finished" 1\n', {"event": "run_started", "time": "t0"}, old])
    write_lines(path, [b'"requeued" %d\n' % i for i in range(2, 12)])
    write_lines(path, [b"garbage, no event name\n" * 5])
    write_lines(path, [{"event": "run_started", "time": "t2"}, b'"run_started" 12\n'])
    with Workspace.open(tmp_path / "ws", readonly=True) as ws:
        r = build_status(ws, max_attempts=3, sections={})
        assert r["last_run"]["started"] == "t2"
        assert r["last_run"]["reason"] == "interrupted"
        assert r["found_nothing"]["time"] == "t1"  # the run before's, read past 10 lines
        assert r["events_skipped"] == 11  # garbage 2-12: not garbage 1
    write_lines(path, [{"event": "run_finished", "time": "t3", "reason": "finished"}])
    with Workspace.open(tmp_path / "ws", readonly=True) as ws:
        r = build_status(ws, max_attempts=3, sections={})
        assert (r["last_run"]["started"], r["last_run"]["finished"]) == ("t2", "t3")
        assert r["events_skipped"] == 1  # garbage 12 only: the read stopped at t2


def test_spec_changes_come_from_the_meta_history(tmp_path: Path) -> None:
    """A change applied by `reparse` (which records the hash and announces nothing in
    the events) counts too; a full history says its count is a lower bound."""
    with Workspace.open(tmp_path / "ws") as ws:
        ws.store.seed([NewRow("list", "http://site/")])
        assert build_status(ws, max_attempts=3, sections={})["spec"]["changes"] == []
        for i in range(SPEC_CHANGES_MAX + 3):
            ws.record_spec(f"sha256:{i}")
        spec = build_status(ws, max_attempts=3, sections={})["spec"]
        assert spec["hash"] == f"sha256:{SPEC_CHANGES_MAX + 2}"
        assert spec["changes_total"] == SPEC_CHANGES_MAX + 2
        assert not spec["history_truncated"]
        assert [c["previous"] for c in spec["changes"]] == [
            f"sha256:{i}" for i in range(2, SPEC_CHANGES_MAX + 2)
        ]
        assert "spec changed 12x, last at " in render("job", build_status(ws, max_attempts=3))
        for i in range(SPEC_HISTORY_MAX):
            ws.record_spec(f"sha256:more-{i}")
        spec = build_status(ws, max_attempts=3, sections={})["spec"]
        assert spec["changes_total"] == SPEC_HISTORY_MAX - 1
        assert spec["history_truncated"]
        assert f"spec changed {SPEC_HISTORY_MAX - 1}+x" in render(
            "job", build_status(ws, max_attempts=3)
        )
        for damaged in ("[{", '{"a": 1}', "7"):  # hand-edited: no history, no crash
            ws.store.set_meta("spec_history", damaged)
            assert build_status(ws, max_attempts=3, sections={})["spec"]["changes"] == []


def test_the_last_reparse_is_shown_until_a_crawl_finishes_after_it(tmp_path: Path) -> None:
    reparse = {
        "event": "reparse_finished",
        "time": "t2",
        "duration_s": 1.5,
        "counts": {"pages": 9, "items_changed": 3},
        "fill": {"detail": {"records": 3, "fields": {"a": 3}}},
    }
    with Workspace.open(tmp_path / "ws") as ws:
        ws.store.seed([NewRow("list", "http://site/")])
        ws.events.append_many(
            [
                {"event": "run_started", "time": "t0"},
                {"event": "run_finished", "time": "t1", "reason": "finished"},
                reparse,
                {"event": "items_changed", "time": "t2"},
            ]
        )
        r = build_status(ws, max_attempts=3, sections={})
        assert r["last_reparse"] == {
            "finished": "t2",
            "duration_s": 1.5,
            "counts": {"pages": 9, "items_changed": 3},
            "unlinked": None,
        }
        assert r["last_run"]["finished"] == "t1"  # the crawl stays the last run
        text = render("job", r)
        assert (
            "last reparse: finished t2 (1.5s), no request made\n  pages 9, items_changed 3" in text
        )
        assert "fill rates (share of records with a value): last reparse / all" in text
        ws.events.append_many(
            [
                {"event": "run_started", "time": "t3"},
                {"event": "run_finished", "time": "t4", "fill": reparse["fill"]},
            ]
        )
        r = build_status(ws, max_attempts=3, sections={})
        assert r["last_reparse"] is None
        assert "last reparse" not in render("job", r)
        assert "last crawl / all" in render("job", r)
