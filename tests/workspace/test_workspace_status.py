"""build_status on a hand-built workspace whose truth is known row by row."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from framework.workspace import ErrorKind, ItemWrite, NewRow, Outcome, PartWrite, Workspace
from framework.workspace.status import build_status


def tab(key: str, name: str) -> NewRow:
    return NewRow(
        f"detail.{name}",
        f"http://site/{key}/{name}",
        context={"item_key": key, "tab": name, "required": True},
    )


def build(path: Path) -> dict[str, int]:
    """3 list pages (2 ok, 1 pending), 6 details, 2 sub-tabs; ids returned by name."""
    with Workspace.open(path) as ws:
        s = ws.store
        l1, l2, l3 = s.seed([NewRow("list", f"http://site/list/{i}") for i in (1, 2, 3)])
        details = s.commit(
            Outcome(
                l1.id,
                ok=True,
                http_status=200,
                new_rows=[NewRow("detail", f"http://site/case/{i}") for i in range(1, 7)],
            )
        ).inserted
        s.commit(Outcome(l2.id, ok=True, http_status=200))
        d1, d2, d3, d4, d5, d6 = details
        t1 = s.commit(
            Outcome(
                d1.id,
                ok=True,
                items=[ItemWrite("c:1", "c", "1", {"n": 1}, complete=False)],
                new_rows=[tab("c:1", "rulings")],
            )
        ).inserted[0]
        s.commit(Outcome(t1.id, ok=True, parts=[PartWrite("c:1", "rulings", [])]))
        s.commit(Outcome(d2.id, ok=False, error_kind=ErrorKind.TIMEOUT, error="read timed out"))
        t2 = s.commit(
            Outcome(
                d2.id,
                ok=True,
                items=[ItemWrite("c:2", "c", "2", {"n": 2}, complete=False)],
                new_rows=[tab("c:2", "rulings")],
            )
        ).inserted[0]
        s.commit(
            Outcome(t2.id, ok=False, http_status=500, error_kind=ErrorKind.HTTP_5XX, error="500")
        )
        for _ in range(3):
            s.commit(Outcome(d3.id, ok=False, http_status=503, error_kind=ErrorKind.HTTP_5XX))
        s.commit(Outcome(d4.id, ok=False, http_status=404, error_kind=ErrorKind.HTTP_4XX))
        s.commit(Outcome(d5.id, ok=False, error_kind=ErrorKind.CONNECT, error="refused"))
        ws.record_spec("sha256:zero")
        ws.record_spec("sha256:one")  # a change, kept in meta `spec_history`
        ws.events.append({"event": "run_started", "time": "2026-01-01T10:00:00+00:00"})
        ws.events.append(
            {
                "event": "run_finished",
                "time": "2026-01-01T10:01:30+00:00",
                "reason": "max_requests",
                "counts": {"requests": 15, "items_new": 2},
            }
        )
        ws.events.append(  # what a crawl announces; status counts the meta's history
            {"event": "spec_changed", "time": "2026-01-01T11:00:00+00:00", "old": "a", "new": "b"}
        )
        ws.events.append({"event": "run_resumed", "time": "2026-01-01T11:00:01+00:00"})
        return {
            "l3": l3.id,
            "d2": d2.id,
            "d3": d3.id,
            "d4": d4.id,
            "d5": d5.id,
            "d6": d6.id,
            "t2": t2.id,
        }


@pytest.fixture
def built(tmp_path: Path) -> Iterator[tuple[Workspace, dict[str, int]]]:
    ids = build(tmp_path / "ws")
    with Workspace.open(tmp_path / "ws", readonly=True) as ws:
        yield ws, ids


def test_status_counts_are_exact(built: tuple[Workspace, dict[str, int]]) -> None:
    ws, ids = built
    r = build_status(ws, max_attempts=3, sections={})
    assert r["rows"] == {
        "total": 11,
        "by_status": {"pending": 2, "ok": 5, "error": 4},
        "by_kind": {
            "list": {"pending": 1, "ok": 2, "error": 0, "total": 3},
            "detail": {"pending": 1, "ok": 2, "error": 3, "total": 6},
            "detail.rulings": {"pending": 0, "ok": 1, "error": 1, "total": 2},
        },
    }
    # the next run fetches l3, d6 (pending) and d5, t2 (retryable); d3 and d4 are exhausted
    assert r["queue"] == {"pending": 2, "retryable": 2, "exhausted": 2, "to_fetch": 4}
    assert r["done"] is False
    assert [(e["row_id"], e["last_error_kind"], e["last_http_status"]) for e in r["exhausted"]] == [
        (ids["d3"], "http_5xx", 503),
        (ids["d4"], "http_4xx", 404),
    ]
    assert r["items"] == {
        "total": 2,
        "complete": 1,
        "incomplete": 1,
        "incomplete_keys": ["c:2"],
        "incomplete_keys_truncated": False,
    }
    worst = r["misbehaving"]
    assert [(m["row_id"], m["status"], m["failures"], m["attempts"]) for m in worst] == [
        (ids["d3"], "error", 3, 3),
        (ids["d4"], "error", 1, 1),
        (ids["d5"], "error", 1, 1),
        (ids["t2"], "error", 1, 1),
        (ids["d2"], "ok", 1, 2),
    ]
    assert worst[0]["url"] == "http://site/case/3"
    assert worst[4]["last_error"] == "read timed out"
    assert worst[4]["last_error_kind"] == "timeout"
    assert len(build_status(ws, max_attempts=3, top=2, sections={})["misbehaving"]) == 2


def test_budget_changes_what_is_exhausted(built: tuple[Workspace, dict[str, int]]) -> None:
    ws, _ = built
    r = build_status(ws, max_attempts=5, sections={})
    assert r["queue"] == {"pending": 2, "retryable": 3, "exhausted": 1, "to_fetch": 5}


def test_last_run_comes_from_events_and_spec_changes_from_meta(
    built: tuple[Workspace, dict[str, int]],
) -> None:
    ws, _ = built
    r = build_status(ws, max_attempts=3, sections={})
    assert r["last_run"] == {
        "mode": "resumed",
        "started": "2026-01-01T11:00:01+00:00",
        "finished": None,
        "reason": "interrupted",  # no run_finished and nobody holds the crawl lock
        "duration_s": None,
        "counts": {},
        "exit_code": None,
        "requeued_since": False,
    }
    (change,) = r["spec"].pop("changes")
    assert change == {"time": change["time"], "spec_hash": "sha256:one", "previous": "sha256:zero"}
    assert isinstance(change["time"], str)
    assert r["spec"] == {"hash": "sha256:one", "changes_total": 1, "history_truncated": False}
    assert r["crawl_running"] is False


def test_finished_run_has_reason_duration_and_counts(tmp_path: Path) -> None:
    build(tmp_path / "ws")
    with Workspace.open(tmp_path / "ws") as ws:
        ws.events.append(
            {
                "event": "run_finished",
                "time": "2026-01-01T11:02:01.500+00:00",
                "reason": "drained",
                "counts": {"requests": 4},
                "exit_code": 0,
            }
        )
        with open(ws.events.path, "ab") as f:
            f.write(b'{"event": "run_sta')  # a torn line is skipped, not fatal
        with ws.lock("crawl"):
            r = build_status(ws, max_attempts=3, sections={})
    assert r["last_run"]["reason"] == "drained"
    assert r["last_run"]["duration_s"] == 120.5
    assert r["last_run"]["counts"] == {"requests": 4}
    assert r["events_skipped"] == 1
    assert r["crawl_running"] is True


def test_plugin_sections_and_a_failing_plugin(built: tuple[Workspace, dict[str, int]]) -> None:
    ws, _ = built

    def ship(w: Workspace) -> dict[str, int]:
        return {"delivered": w.store.item_counts()["complete"]}

    def broken(w: Workspace) -> dict[str, int]:
        raise RuntimeError("ship log unreadable")

    r = build_status(
        ws, max_attempts=3, sections={"ship": ship, "bad": broken, "none": lambda w: None}
    )
    assert r["plugins"] == {
        "ship": {"delivered": 1},
        "bad": "error: RuntimeError: ship log unreadable",
    }


def test_entry_point_sections_are_discovered(
    built: tuple[Workspace, dict[str, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from importlib.metadata import EntryPoint

    import framework.workspace.status as status_module

    eps = [
        EntryPoint("good", "framework.workspace.status:_seconds", "framework.status"),
        EntryPoint("missing", "framework.nowhere:nothing", "framework.status"),
    ]
    monkeypatch.setattr(status_module, "entry_points", lambda group: eps)
    r = build_status(ws := built[0], max_attempts=3)
    assert set(r["plugins"]) == {"good", "missing"}
    assert r["plugins"]["missing"].startswith("error: ModuleNotFoundError")
    assert r["plugins"]["good"].startswith("error: TypeError")  # wrong signature: reported
    assert ws.path.exists()


def test_a_drained_workspace_is_done(tmp_path: Path) -> None:
    with Workspace.open(tmp_path / "ws") as ws:
        (row,) = ws.store.seed([NewRow("list", "http://site/")])
        ws.store.commit(Outcome(row.id, ok=True, items=[ItemWrite("c:1", "c", "1", {})]))
        r = build_status(ws, max_attempts=3, sections={})
    assert r["done"] is True
    assert r["queue"]["to_fetch"] == 0
    assert r["items"]["complete"] == 1
    assert r["misbehaving"] == []
    assert r["last_run"] is None
