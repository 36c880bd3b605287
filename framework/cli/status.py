"""`framework status <job>`: what is done, pending and misbehaving, from the workspace.

Owns the rendering of :func:`framework.workspace.status.build_status` (a table, or the
same dict as one JSON object with ``--json``). It reads the workspace only: no spec is
needed (the job name is the folder under ``var/``; ``max_attempts`` is what the crawl
recorded in the workspace's meta), no network, and it works while a crawl runs.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import click

from framework.cli.target import workspace_target
from framework.cli.words import counted
from framework.errors import WorkspaceBroken
from framework.jsontext import escape_json
from framework.project import find_root
from framework.terminal import printable
from framework.workspace import fill
from framework.workspace.integrity import Integrity
from framework.workspace.sqlite_base import workspace_fault
from framework.workspace.status import build_status
from framework.workspace.workspace import Workspace

DEFAULT_MAX_ATTEMPTS = 3


def open_job_workspace(job: str, override: str | None, *, readonly: bool) -> Workspace:
    """The job's existing workspace (never creates one): WorkspaceError when missing,
    UsageError when ``job`` is not a job name (``../x``, ``/etc``)."""
    path = workspace_target(find_root(), job, override)
    return Workspace.open(path, create=False, readonly=readonly)


def recorded_max_attempts(ws: Workspace) -> int:
    raw = ws.store.get_meta("max_attempts")
    try:
        return int(raw) if raw is not None else DEFAULT_MAX_ATTEMPTS
    except ValueError:
        return DEFAULT_MAX_ATTEMPTS


@click.command("status")
@click.argument("job")
@click.option(
    "--workspace", "workspace", default=None, help="Workspace folder or postgresql:// URL."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object for scripts.")
@click.option(
    "--top",
    default=10,
    show_default=True,
    type=click.IntRange(min=1),
    help="Rows listed under exhausted rows and under misbehaving URLs.",
)
def status(job: str, workspace: str | None, as_json: bool, top: int) -> int:
    """Show rows per kind and status, items, exhausted and misbehaving URLs, last run.

    Exit 0, or 4 when the workspace is damaged or lost committed rows (one line on
    stderr says what to do; the report, when it can be read, is printed first)."""
    with open_job_workspace(job, workspace, readonly=True) as ws:
        try:
            report = build_status(ws, max_attempts=recorded_max_attempts(ws), top=top)
        except sqlite3.DatabaseError as exc:  # a page open() did not read was damaged
            fault = workspace_fault(exc, ws.state_path)
            if fault is None:
                raise
            raise fault from exc
        problem = Integrity(
            lost_rows=report["integrity"]["lost_ok_rows"],
            examples=report["integrity"]["lost_examples"],
        ).problem(ws)
    if as_json:
        # held keys and error texts are a site's: what a terminal obeys as \u escapes
        click.echo(escape_json(json.dumps(report, ensure_ascii=False, indent=2)))
    else:
        click.echo(render(job, report))
    if problem is not None:
        raise WorkspaceBroken(problem)
    return 0


# how each state reads, with the exit code the crawl gave (or will give) for it
STATES = {
    "done": "done (exit 0)",
    "unfinished": "unfinished: {to_fetch} rows to fetch (exit 3: run the crawl again)",
    "not_started": "not started: no rows yet (exit 3: run the crawl)",
    "needs_attention": "needs attention: {exhausted} rows in error (exit 4: see below, "
    "then requeue or fix the spec)",
    "halted": "halted by the last run (exit 4: a human must look)",
    "held": "needs attention: {held} records held back, never shipped (exit 4: see "
    "below; fix the spec or `framework review` the changes)",
    "extracted_nothing": "extracted nothing: every page read, no item stored (exit 4: see "
    "the warnings below; `expect_empty: true` in the spec if that is right)",
    "incomplete": "incomplete: a list yielded other than the total its pages declare (exit "
    "4: see total_mismatch below; fix the spec's selectors, or a `tolerance` on the total)",
    "broken": "BROKEN: the workspace lost committed rows (exit 4)",
}


def _table(headers: list[str], rows: list[list[Any]]) -> list[str]:
    cells = [[("" if c is None else str(c)) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out = [line.rstrip(), "  ".join("-" * w for w in widths)]
    for row in cells:
        out.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return out


def _clip(text: Any, width: int) -> str:
    s = "" if text is None else " ".join(str(text).split())
    return s if len(s) <= width else s[: width - 1] + "…"


def _workers(w: dict[str, Any] | None) -> list[str]:
    """The crawl processes while several run (`--processes`), hold leases or died."""
    listed = (w or {}).get("list") or []
    dead = any(x["state"] == "dead" for x in listed)
    if not w or (w["live"] < 2 and not w["leased_rows"] and not dead):
        return []  # one crawl process at most: the state line says whether it runs
    lines = [f"workers: {w['live']} running, {w['leased_rows']} rows leased"]
    for x in listed[:8]:
        lines.append(
            f"  #{x['id']} pid {x['pid']} on {x['host']}: {x['state']}, "
            f"{x['leased_rows']} leased, heartbeat {x['heartbeat_age_s']}s ago"
        )
    return lines


def _rows_table(rows: list[dict[str, Any]]) -> list[str]:
    """Rows that need a look, one line each."""
    return _table(
        # failures ever recorded / attempts counted toward max_attempts (a requeue or a
        # host that was down gives attempts back, not failures)
        ["row", "kind", "status", "fails/counted", "http", "last error", "url"],
        [
            [
                m["row_id"],
                m["kind"],
                m["status"],
                f"{m['failures']}/{m['attempts']}",
                m["last_http_status"],
                _clip(f"{m['last_error_kind'] or ''} {m['last_error'] or ''}", 40),
                _clip(m["url"], 70),
            ]
            for m in rows
        ],
    )


def _drift_line(d: dict[str, Any]) -> str:
    where = ", ".join(d.get("examples") or [])
    if d.get("reason") == "volume":  # a kind read whole gave less than the last time
        return (
            f"drift: {d.get('kind')} {d.get('now', 0)} {d.get('what')}, the last whole crawl "
            f"{d.get('before', 0)} (a pagination or follow that stops early? e.g. {where})"
        )
    what = (
        f"matched fallback {(d.get('selectors') or ['?'])[-1]!r} {d.get('count', 0)} times"
        if d.get("reason") == "fallback"
        else f"filled {d.get('before', 0):.0%} -> {d.get('now', 0):.0%} of records"
    )
    return f"drift: {d.get('kind')}.{d.get('field')} {what} (e.g. {where})"


def _held(job: str, held: dict[str, Any]) -> list[str]:
    """The held records: by status, then each broken rule with its keys (a key that
    breaks two rules is under both)."""
    if not held.get("total"):
        return []
    statuses = ", ".join(f"{n} {s}" for s, n in sorted(held["by_status"].items()))
    out = [f"held back (never shipped): {statuses}"]
    keys = (held.get("keys") or {}).get("by_rule") or {}
    for rule, n in sorted(held["by_rule"].items(), key=lambda kv: (-kv[1], kv[0])):
        listed = keys.get(rule) or []
        more = f" ... ({n - len(listed)} more)" if n > len(listed) else ""
        shown = ": " + ", ".join(printable(k, keep="") for k in listed) if listed else ""
        out.append(f"  {rule} ({n}){shown}{more}")
    if held["by_status"].get("review_required"):
        out.append(f"  `framework review {job}` shows the changes and accepts or rejects them")
    return out


def _lists(c: dict[str, Any] | None) -> list[str]:
    """The lists compared with their declared totals (`total:`), and why some were not."""
    if not c:
        return []
    out = [
        f"lists with a declared total: {c.get('lists', 0)}, {c.get('checked', 0)} checked, "
        f"{c.get('mismatched', 0)} not matching, {c.get('not_checked', 0)} not checked"
    ]
    for m in c.get("mismatches") or []:
        out.append(
            f"  {m.get('kind')} {m.get('url')}: expected {m.get('expected')}, found "
            f"{m.get('found')} over {counted(m.get('pages') or 0, 'page')}"
        )
    for m in (c.get("not_checked_examples") or [])[:3]:
        out.append(f"  not checked: {m.get('kind')} {m.get('url')}: {m.get('why')}")
    return out


def _counts(counts: dict[str, Any]) -> str:
    """A run's counts on one line: ``requests 291, errors 75 (http_4xx 71, http_5xx 3)``;
    a count by kind is shown in words too, not as a Python dict."""
    out = []
    for name, value in counts.items():
        if isinstance(value, dict):
            inner = ", ".join(f"{k} {v}" for k, v in value.items())
            out.append(f"{name} ({inner or 'none'})")
        else:
            out.append(f"{name} {value}")
    return ", ".join(out)


def render(job: str, r: dict[str, Any]) -> str:
    out: list[str] = []
    held = r.get("held") or {}
    state = STATES.get(r["state"], r["state"]).format(**r["queue"], held=held.get("total", 0))
    if r["crawl_running"]:
        state += " (a crawl is running)"
    out.append(f"job {job}: {state}   workspace {r['workspace']}")
    out.append("")
    rows = [
        [kind, c["pending"], c["ok"], c["error"], c["total"]]
        for kind, c in sorted(r["rows"]["by_kind"].items())
    ]
    total = r["rows"]["by_status"]
    rows.append(["total", total["pending"], total["ok"], total["error"], r["rows"]["total"]])
    out += _table(["kind", "pending", "ok", "error", "total"], rows)
    q = r["queue"]
    out.append("")
    out.append(
        f"next run fetches {q['to_fetch']} rows ({q['pending']} pending, {q['retryable']} "
        f"errors to retry); {q['exhausted']} exhausted (not retryable, or failed "
        f"max_attempts {r['max_attempts']} times)"
    )
    it = r["items"]
    out.append(f"items: {it['complete']} complete, {it['incomplete']} incomplete")
    out += _workers(r.get("workers"))
    for d in r.get("drift") or []:
        out.append(_drift_line(d))
    out += _lists(r.get("completeness"))
    out += _held(job, held)
    if it["incomplete_keys"]:
        more = " ..." if it["incomplete_keys_truncated"] else ""
        out.append("  incomplete: " + ", ".join(it["incomplete_keys"]) + more)
    # a row that is both (an error row that failed every try) is listed once, under
    # "exhausted"; the JSON keeps both lists whole for scripts
    if r["exhausted"]:
        listed, total = len(r["exhausted"]), q["exhausted"]
        more = f" (the first {listed} of {total}; --top N lists more)" if total > listed else ""
        out += ["", f"exhausted rows{more}:", *_rows_table(r["exhausted"])]
    shown = {m["row_id"] for m in r["exhausted"]}
    others = [m for m in r["misbehaving"] if m["row_id"] not in shown]
    also = len(r["misbehaving"]) - len(others)
    if others:
        besides = f" (besides the {counted(also, 'exhausted row')} above)" if also else ""
        out += ["", f"misbehaving URLs{besides}:", *_rows_table(others)]
    elif also:
        out += ["", f"misbehaving URLs: the {counted(also, 'exhausted row')} above"]
    for d in r.get("deferrals", []):
        out.append(
            f"deferred: {d['host']} asked not to be called before {d['until']} (Retry-After;"
            " `framework requeue --clear-deferrals` lifts it)"
        )
    out.append("")
    run = r["last_run"]
    if run is None:
        out.append("last run: none recorded")
    else:
        dur = f", {run['duration_s']}s" if run["duration_s"] is not None else ""
        out.append(
            f"last run: {run['mode']} {run['started']}, "
            f"{'finished ' + str(run['finished']) if run['finished'] else 'not finished'}"
            f" ({run['reason']}{dur})"
        )
        if run["counts"]:
            out.append("  " + _counts(run["counts"]))
        blocked = run.get("blocked")
        if blocked:
            out.append(
                f"  blocked: {blocked.get('url')} matched the blocked rule {blocked.get('rule')}"
                " (its row stays pending: run again once the site lets the crawler in)"
            )
    reparse = r.get("last_reparse")
    if reparse is not None:
        dur = f" ({reparse['duration_s']}s)" if reparse["duration_s"] is not None else ""
        out.append(f"last reparse: finished {reparse['finished']}{dur}, no request made")
        if reparse["counts"]:
            out.append("  " + _counts(reparse["counts"]))
        unlinked = reparse.get("unlinked")
        if unlinked and unlinked.get("rows"):
            examples = unlinked.get("examples") or []
            out.append(
                f"  {unlinked['rows']} rows no longer linked by the pages that found them"
                f"{' (e.g. ' + str(examples[0]) + ')' if examples else ''}: they and their"
                " items stay, pending ones are still fetched; `crawl --fresh` starts over"
            )
    found = fill.render_lines(r)
    if found:
        out.append("")
        out += found
    spec = r["spec"]
    if spec["changes"]:
        last = spec["changes"][-1]
        times = f"{spec['changes_total']}{'+' if spec['history_truncated'] else ''}"
        out.append(f"spec changed {times}x, last at {last.get('time')}")
    for name, section in r["plugins"].items():
        out.append("")
        if isinstance(section, str):
            out.append(f"{name}: {section}")
        else:
            out.append(f"{name}:")
            out += [f"  {k}: {_plain(v)}" for k, v in section.items()]
    return "\n".join(out)


def _plain(value: Any) -> str:
    """A plugin section's value in words (``--json`` has it as data): a mapping as
    ``key value, ...`` with nested ones in parentheses, a list comma-separated, text
    as it is, null as ``-``, a flag as yes/no."""
    if isinstance(value, dict):
        return ", ".join(f"{k} {_nested(v)}" for k, v in value.items()) or "-"
    if isinstance(value, list):
        return ", ".join(_nested(v) for v in value) or "-"
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _nested(value: Any) -> str:
    text = _plain(value)
    return f"({text})" if isinstance(value, dict | list) and value else text


__all__ = ["open_job_workspace", "recorded_max_attempts", "render", "status"]
