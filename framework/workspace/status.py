"""What a workspace says about its job: done, pending, misbehaving, last run.

Owns the status report as a plain dict (the `framework status --json` contract). It
reads the workspace only (the store, ``events.jsonl`` and the lock files): it works
while a crawl runs, needs no network and never writes. Rendering is the CLI's.
Plugins add sections through the ``framework.status`` entry point group: each entry
point is a callable ``(ws: Workspace) -> dict | None`` and its result goes under
``plugins[<name>]``; a plugin that fails is reported as an error string there.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from importlib.metadata import entry_points
from typing import Any

from framework.redact import redact
from framework.workspace import deferrals, fill, holds, integrity, leases
from framework.workspace.records import SCHEMA_VERSION, Row, RowStatus
from framework.workspace.workspace import SPEC_HISTORY_MAX, Workspace

STATUS_GROUP = "framework.status"
RUN_EVENTS = ("run_started", "run_resumed")
INCOMPLETE_KEYS_MAX = 50
SPEC_CHANGES_MAX = 10
# the events status reads (the others, one per changed item, are passed over unparsed)
SCANNED = frozenset((*RUN_EVENTS, "run_finished", "requeued", *fill.EXTRACTION_EVENTS))
# a worker silent this long is dead to status; a single-process crawl never beats (its
# lock tells), so only a worker of `--processes N` is judged by its heartbeat
WORKER_STALE_S = leases.LEASE_SECONDS

Section = Callable[[Workspace], Mapping[str, Any] | None]


def _workers(ws: Workspace) -> dict[str, Any]:
    """The latest crawl processes, live or dead, and the open rows under a lease."""
    now = time.time()
    # asked of the store (a database's by its clock)
    found, leased = leases.workers(ws.store), leases.leased_rows(ws.store)
    live = [w for w in found if w.alive(now, WORKER_STALE_S)]
    return {
        "live": len(live),
        "leased_rows": leased,
        "list": [
            {
                "id": w.id,
                "host": w.host,
                "pid": w.pid,
                "state": "running" if w in live else "stopped" if w.stopped_at else "dead",
                "started": datetime.fromtimestamp(w.started_at, UTC).isoformat(timespec="seconds"),
                "heartbeat_age_s": round(now - w.heartbeat_at, 1),
                "leased_rows": w.leased,
            }
            for w in found
        ],
    }


def build_status(
    ws: Workspace,
    *,
    max_attempts: int,
    top: int = 10,
    sections: Mapping[str, Section] | None = None,
) -> dict[str, Any]:
    """The whole report. ``sections`` replaces entry point discovery (tests)."""
    store = ws.store
    by_kind: dict[str, dict[str, int]] = {}
    by_status = {s.value: 0 for s in RowStatus}
    for kind, counts in store.row_counts().items():
        entry = {s.value: counts.get(s, 0) for s in RowStatus}
        entry["total"] = sum(counts.values())
        by_kind[kind] = entry
        for s, n in counts.items():
            by_status[s.value] += n
    queue = store.counts(max_attempts)
    items = store.item_counts()
    incomplete_keys = store.incomplete_keys(INCOMPLETE_KEYS_MAX + 1)
    exhausted = store.exhausted(max_attempts, limit=top)
    workers = _workers(ws)
    report: dict[str, Any] = {
        "workspace": ws.where,  # a database's URL with its password masked
        "schema_version": _schema_version(ws),
        "max_attempts": max_attempts,
        "done": queue["pending"] == 0 and queue["retryable"] == 0,
        # a shared lock (the workers of `crawl --processes N`) does not show to the probe
        # of lock_holder: their rows in the workers table do
        "crawl_running": ws.lock_holder("crawl") is not None or workers["live"] > 0,
        # the crawl processes (leases.py): several with `crawl --processes N`
        "workers": workers,
        "rows": {
            "total": sum(by_status.values()),
            "by_status": by_status,
            "by_kind": by_kind,
        },
        # `to_fetch` is what the next run issues: pending rows plus retryable errors.
        "queue": {**queue, "to_fetch": queue["pending"] + queue["retryable"]},
        "exhausted": [_row_summary(ws, r) for r in exhausted],
        "items": {
            "total": items["complete"] + items["incomplete"],
            "complete": items["complete"],
            "incomplete": items["incomplete"],
            "incomplete_keys": incomplete_keys[:INCOMPLETE_KEYS_MAX],
            "incomplete_keys_truncated": len(incomplete_keys) > INCOMPLETE_KEYS_MAX,
        },
        # candidates held back instead of stored (broke a rule of the spec, or a change
        # limit): counts by status and by every rule broken, and the keys under each
        "held": store.hold_counts(keys=holds.HELD_KEYS_MAX),
        "misbehaving": [_row_summary(ws, r) for r in store.misbehaving(top)],
        # hosts that asked (Retry-After) not to be called before a time still ahead
        "deferrals": _deferrals(ws),
        "last_run": None,
        # the reparse since the last crawl's end, if one ran (None: the crawl's is newer)
        "last_reparse": None,
        "spec": _spec_changes(ws),
        # unreadable lines among those read that name an event status reads (the log's
        # end, back to the last run's start)
        "events_skipped": 0,
        "plugins": {},
    }
    report["last_run"], last = _scan_events(ws)
    extraction = fill.last_extraction(last) if last is not None else {}
    report["last_reparse"] = _reparse_summary(last)
    # found-nothing warnings and fill rates (issue 9): see framework/workspace/fill.py
    report.update(fill.sections(extraction, store.fill_counts()))
    report["drift"] = extraction.get("drift", [])  # of the last crawl (crawl/drift.py)
    # the lists compared with their declared totals by the last crawl or reparse
    lists = last.get("completeness") if last is not None else None
    report["completeness"] = lists if isinstance(lists, dict) else None
    report["integrity"] = integrity.check(ws).as_dict()
    report["state"], report["exit_code"] = _verdict(report)
    report["done"] = report["state"] == "done"
    report["events_skipped"] = ws.events.skipped
    report["plugins"] = _plugin_sections(ws, sections)
    # Stored URLs and error texts are kept as they were (the row must be refetchable);
    # what leaves for a terminal or a CI log is masked like every log line.
    masked: dict[str, Any] = redact(report)
    return masked


def _verdict(r: dict[str, Any]) -> tuple[str, int]:
    """The workspace's state and the exit code the crawl gave (or would give) for it:
    ``done`` 0, ``unfinished`` / ``not_started`` 3, ``needs_attention`` (rows in error),
    ``halted`` (the last run stopped for a human: breaker, full disk), ``held``
    (every row read, records held back: the crawl exits 4 on them too),
    ``extracted_nothing`` (every row read, no item stored, and the last crawl or
    reparse said so: the spec did not say ``expect_empty``), ``incomplete`` (every
    row read, and a list yielded other than the total its pages declare:
    ``total_mismatch``) and ``broken`` (lost or damaged state) 4."""
    run = r["last_run"]
    if not r["integrity"]["whole"]:
        return "broken", 4
    if r["rows"]["total"] == 0:
        # killed before its start rows were written: nothing was done yet
        return "not_started", 3
    if r["queue"]["to_fetch"]:
        if run is not None and run["exit_code"] == 4 and not run["requeued_since"]:
            return "halted", 4  # a breaker or a full disk stopped it: rows remain
        return "unfinished", 3
    if r["queue"]["exhausted"]:
        return "needs_attention", 4
    if r["held"]["total"]:
        return "held", 4  # what a drained crawl exits with (crawl/verdict.py)
    if not r["items"]["total"] and (r.get("found_nothing") or {}).get("nothing_extracted"):
        return "extracted_nothing", 4  # what the crawl exits with again (runtime.py)
    warnings = (r.get("found_nothing") or {}).get("warnings") or ()
    if any(w.get("what") == "total_mismatch" for w in warnings):
        return "incomplete", 4  # a list short of its declared total (crawl/completeness.py)
    return "done", 0


def _row_summary(ws: Workspace, row: Row) -> dict[str, Any]:
    return {
        "row_id": row.id,
        "kind": row.kind,
        "url": row.url,
        "method": row.method,
        "status": row.status.value,
        "attempts": row.attempts,
        "failures": ws.store.failures(row.id),
        "retryable": row.retryable,
        "last_error_kind": row.last_error_kind.value if row.last_error_kind else None,
        "last_error": row.last_error,
        "last_http_status": row.last_http_status,
        "updated_at": row.updated_at,
    }


def _scan_events(ws: Workspace) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The last run, and the newest crawl's or reparse's end (whose warnings and fill
    counts status shows), reading the log from its end back to the last run's start, and
    further only until the newest crawl's or reparse's end is found: what status needs
    costs the last run's lines, not the log's history (a reparse writes a line per page
    it changed). The result is what one pass over the whole log gave
    (tests/workspace/test_status_scan.py holds that pass as its reference)."""
    start: dict[str, Any] | None = None
    finished: dict[str, Any] | None = None  # the first run_finished after the start
    last: dict[str, Any] | None = None  # the newest run_finished or reparse_finished
    requeued = False
    # Events are data another process wrote (or a human edited): every field is read
    # for its type, and a malformed one reads as absent rather than crashing status.
    for event in ws.events.newest_first(SCANNED):
        name = event.get("event")
        if last is None and name in fill.EXTRACTION_EVENTS:
            last = event
        if start is None:
            if name in RUN_EVENTS:
                start = event
            elif name == "run_finished":
                finished = event  # read newest first: the last one seen is the first
            elif name == "requeued" or _queued_pages(event):
                # a requeue, or a reparse that queued new pages (a fixed follow rule):
                # what the run stopped on may be behind, the next step is a crawl
                requeued = True
        if start is not None and last is not None:
            break
    if start is None:
        return None, last
    run: dict[str, Any] = {
        "mode": "resumed" if start.get("event") == "run_resumed" else "started",
        "started": _text(start.get("time")),
        "finished": None,
        "reason": None,
        "duration_s": None,
        "counts": {},
        "exit_code": None,
        "requeued_since": requeued,
    }
    if finished is None:
        run["reason"] = "running" if ws.lock_holder("crawl") else "interrupted"
        return run, last
    run["finished"] = _text(finished.get("time")) or "unknown"
    run["reason"] = _text(finished.get("reason"))
    counts = finished.get("counts")
    run["counts"] = counts if isinstance(counts, dict) else {}
    code = finished.get("exit_code")
    run["exit_code"] = code if _number(code) and isinstance(code, int) else None
    duration = finished.get("duration_s")
    run["duration_s"] = duration if _number(duration) else _seconds(run["started"], run["finished"])
    blocked = finished.get("blocked")  # the soft ban that stopped it (crawl/blocking.py)
    if isinstance(blocked, dict):
        run["blocked"] = blocked  # url, rule, status
    return run, last


def _queued_pages(event: dict[str, Any]) -> bool:
    """Whether ``event`` is a reparse that left new pages to fetch."""
    if event.get("event") != "reparse_finished":
        return False
    counts = event.get("counts")
    pending = counts.get("rows_pending") if isinstance(counts, dict) else None
    return isinstance(pending, int) and pending > 0


def _reparse_summary(event: dict[str, Any] | None) -> dict[str, Any] | None:
    """What a ``reparse_finished`` event says of its run (each field read for its
    type); None for any other event: the reparse's figures were superseded by a crawl."""
    if event is None or event.get("event") != "reparse_finished":
        return None
    counts = event.get("counts")
    duration = event.get("duration_s")
    unlinked = event.get("unlinked")
    return {
        "finished": _text(event.get("time")),
        "duration_s": duration if _number(duration) else None,
        "counts": counts if isinstance(counts, dict) else {},
        # rows the pages it read no longer link (framework/crawl/reparse.py)
        "unlinked": unlinked
        if isinstance(unlinked, dict) and isinstance(unlinked.get("rows"), int)
        else None,
    }


def _spec_changes(ws: Workspace) -> dict[str, Any]:
    """The spec's recorded changes, from the workspace's meta ``spec_history`` (each
    hash a crawl or a reparse was run with, when it differed from the one before): the
    last ``SPEC_CHANGES_MAX`` of them and how many the history holds. It keeps the last
    ``SPEC_HISTORY_MAX`` hashes: with it full, older changes are forgotten."""
    try:
        history = [h for h in ws.spec_history() if isinstance(h, dict)]
    except (ValueError, TypeError):  # a damaged value reads as no history, not a crash
        history = []
    changes = [
        {"time": _text(new.get("time")), "spec_hash": new.get("hash"), "previous": old.get("hash")}
        for old, new in itertools.pairwise(history)
    ]
    return {
        "hash": ws.spec_hash(),
        "changes": changes[-SPEC_CHANGES_MAX:],
        "changes_total": len(changes),
        "history_truncated": len(history) >= SPEC_HISTORY_MAX,
    }


def _schema_version(ws: Workspace) -> int:
    if ws.is_database:  # counted apart from the SQLite file's (postgres_base.py)
        from framework.workspace.postgres_base import PG_SCHEMA_VERSION

        return PG_SCHEMA_VERSION
    return SCHEMA_VERSION


def _deferrals(ws: Workspace) -> list[dict[str, Any]]:
    """The hosts' deadlines still ahead: the workspace's meta, and on a database the
    ones every worker shares (the later of the two per host)."""
    found = deferrals.active(ws.store)
    if ws.hosts is None:
        return found
    now = time.time()
    shared = {d["host"]: d for d in found}
    for host, until in ws.hosts.deadlines().items():
        if host not in shared or shared[host]["seconds_left"] < until - now:
            shared[host] = {
                "host": host,
                "until": deferrals.iso(until),
                "seconds_left": round(until - now, 1),
            }
    return sorted(shared.values(), key=lambda d: (d["seconds_left"], d["host"]))


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _seconds(start: Any, end: Any) -> float | None:
    try:
        delta = datetime.fromisoformat(str(end)) - datetime.fromisoformat(str(start))
    except (TypeError, ValueError):  # also an aware time against a naive one
        return None
    return round(delta.total_seconds(), 3)


def _plugin_sections(ws: Workspace, sections: Mapping[str, Section] | None) -> dict[str, Any]:
    found: dict[str, Any] = {}
    if sections is None:
        loaded: dict[str, Section] = {}
        for ep in entry_points(group=STATUS_GROUP):
            try:
                loaded[ep.name] = ep.load()
            except Exception as exc:  # a broken plugin only breaks its own section
                found[ep.name] = f"error: {type(exc).__name__}: {exc}"
        sections = loaded
    for name, section in sections.items():
        try:
            result = section(ws)
        except Exception as exc:
            found[name] = f"error: {type(exc).__name__}: {exc}"
            continue
        if result is not None:
            found[name] = dict(result)
    return found


__all__ = ["STATUS_GROUP", "build_status"]
