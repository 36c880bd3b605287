"""The dashboard's HTML: the list of jobs and a job's page, rendered on the server.

Owns the markup only; the figures come from :mod:`~framework_dashboard.reader`. Every
value that reaches a page is escaped here (URLs, error notes and field names come from
the sites crawled: hostile text, never markup), and the page runs no inline script or
style (the app's Content-Security-Policy forbids both): charts and bars are inline SVG
drawn with presentation attributes, and ``static/dashboard.js`` moves them from the
live stream with ``textContent`` and ``setAttribute`` only.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from framework_dashboard.jobs import Job

DASH = "\N{EN DASH}"  # what a figure that is not there reads as
STATES = ("ok", "error", "pending")
COLOURS = {"ok": "#2e7d32", "error": "#c62828", "pending": "#9e9e9e"}
BAR_W = 1000  # the bars' viewBox width; the CSS sets their size on the page
CHART_W, CHART_H = 600, 160
EVENTS_SHOWN = 20
# log events after which the page's sections are read again (the rest only scroll by)
REFRESHING = (
    "run_started",
    "run_resumed",
    "run_finished",
    "reparse_finished",
    "requeued",
    "rows_reset",
    "row_failed",
    "blocked",
    "drift",
    "item_review_required",
    "review_accepted",
    "review_rejected",
    "run_deferred",
    "host_down",
)


def e(value: Any) -> str:
    """Escaped text; nothing (None) as a dash."""
    return DASH if value is None else html.escape(str(value), quote=True)


def page(title: str, body: str, *, bind: str) -> str:
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{e(title)}</title>"
        '<link rel="stylesheet" href="/static/dashboard.css"></head><body>'
        '<header><a class="home" href="/">framework dashboard</a>'
        f'<span class="bind">read-only, serving on {e(bind)}</span></header>'
        f"<main>{body}</main>"
        '<script src="/static/dashboard.js" defer></script></body></html>'
    )


def job_href(name: str) -> str:
    return f"/jobs/{quote(name, safe='')}"


# --- the list of jobs ------------------------------------------------------------------


def list_page(jobs: Sequence[tuple[Job, Mapping[str, Any]]], *, bind: str, root: str) -> str:
    rows = []
    for job, r in jobs:
        rows_total = (r.get("rows") or {}).get("total")
        by = (r.get("rows") or {}).get("by_status") or {}
        items = (r.get("items") or {}).get("total")
        run = r.get("last_run") or {}
        running = r.get("crawl_running")
        rows.append(
            f'<tr data-job="{e(job.name)}">'
            f'<td><a href="{job_href(job.name)}">{e(job.name)}</a></td>'
            f'<td class="state state-{e(r.get("state"))}" data-field="state">{e(r.get("state"))}'
            f"{' <span class=running>running</span>' if running else ''}</td>"
            f"<td>{_bar(by) if by else ''}</td>"
            f'<td class="num" data-field="ok">{e(by.get("ok"))}</td>'
            f'<td class="num" data-field="rows">{e(rows_total)}</td>'
            f'<td class="num" data-field="items">{e(items)}</td>'
            f"<td>{_last_run(run) if run else e(r.get('error') or 'none')}</td>"
            f'<td class="where">{e(job.where)}</td></tr>'
        )
    table = (
        '<table class="jobs"><thead><tr><th>job</th><th>state</th><th>rows</th><th>ok</th>'
        "<th>total</th><th>items</th><th>last run</th><th>workspace</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
        if rows
        else f'<p class="empty">no jobs under {e(root)}/projects</p>'
    )
    return page(
        "jobs",
        f'<h1>Jobs</h1><p class="sub">project {e(root)}</p>{table}',
        bind=bind,
    )


def _last_run(run: Mapping[str, Any]) -> str:
    finished = run.get("finished")
    when = f"finished {finished}" if finished else "not finished"
    return (
        f'<span data-field="last-run">{e(run.get("mode"))} {e(run.get("started"))}, {e(when)} '
        f"({e(run.get('reason'))})</span>"
    )


def _bar(by: Mapping[str, Any], *, cls: str = "bar") -> str:
    """Stacked ok | error | pending, as wide as their share of the rows."""
    total = sum(int(by.get(s) or 0) for s in STATES)
    x = 0.0
    rects = []
    for s in STATES:
        w = BAR_W * int(by.get(s) or 0) / total if total else 0.0
        rects.append(
            f'<rect data-s="{s}" x="{x:.1f}" y="0" width="{w:.1f}" height="10" '
            f'fill="{COLOURS[s]}"></rect>'
        )
        x += w
    return (
        f'<svg class="{cls}" viewBox="0 0 {BAR_W} 10" preserveAspectRatio="none" '
        f'role="img" aria-label="rows by state">{"".join(rects)}</svg>'
    )


# --- a job's page ----------------------------------------------------------------------


def job_page(
    job: Job,
    report: Mapping[str, Any],
    progress: Mapping[str, Any] | None,
    series: Sequence[tuple[float, float]],
    events: Sequence[tuple[int, Mapping[str, Any]]],
    cursor: int,
    *,
    bind: str,
) -> str:
    href = job_href(job.name)
    body = (
        f'<h1>{e(job.name)}</h1><p class="sub">workspace {e(job.where)}</p>'
        f'<section id="live" data-stream="{href}/stream" data-cursor="{int(cursor)}" '
        f'data-sections="{href}/sections" data-refreshing="{e(" ".join(REFRESHING))}">'
        f"{_live(progress, series)}{_events(events)}</section>"
        f'<div id="sections">{sections(report)}</div>'
    )
    return page(f"{job.name}: dashboard", body, bind=bind)


def _live(progress: Mapping[str, Any] | None, series: Sequence[tuple[float, float]]) -> str:
    p = progress or {}
    by_status = (p.get("rows") or {}).get("by_status") or {}
    by_kind = (p.get("rows") or {}).get("by_kind") or {}
    items = (p.get("items") or {}).get("total")
    running = bool(p.get("crawl_running"))
    totals = "".join(
        f'<div class="figure"><span class="label">{label}</span>'
        f'<span class="value" data-v="{key}">{e(value)}</span></div>'
        for label, key, value in (
            ("ok", "ok", by_status.get("ok")),
            ("pending", "pending", by_status.get("pending")),
            ("error", "error", by_status.get("error")),
            ("rows", "rows", (p.get("rows") or {}).get("total")),
            ("items", "items", items),
            ("requests", "requests", p.get("requests")),
            ("pages/s", "pages_per_s", p.get("pages_per_s")),
            ("ETA", "eta", eta_text(p.get("eta_s"), running)),
        )
    )
    kinds = "".join(_kind_row(kind, c) for kind, c in sorted(by_kind.items()))
    return (
        f'<h2>Progress <span class="running" data-v="running"{"" if running else " hidden"}>'
        "crawl running</span></h2>"
        f'<div class="figures">{totals}</div>'
        '<table class="kinds"><thead><tr><th>kind</th><th class="barcol">rows</th>'
        "<th>ok</th><th>pending</th><th>error</th><th>total</th></tr></thead>"
        f'<tbody id="kinds">{kinds}</tbody></table>'
        f"<h3>Pages per second</h3>{chart(series)}"
    )


def _kind_row(kind: str, c: Mapping[str, Any]) -> str:
    cells = "".join(
        f'<td class="num" data-k="{e(kind)}" data-s="{s}">{e(c.get(s, 0))}</td>'
        for s in ("ok", "pending", "error", "total")
    )
    return f'<tr data-kind="{e(kind)}"><td>{e(kind)}</td><td>{_bar(c)}</td>{cells}</tr>'


def eta_text(eta: Any, running: bool) -> str:
    if not isinstance(eta, int | float):
        return DASH
    eta = int(eta)
    if eta >= 3600:
        return f"{eta // 3600}h {eta % 3600 // 60}m"
    if eta >= 60:
        return f"{eta // 60}m {eta % 60}s"
    return f"{eta}s"


def chart(series: Sequence[tuple[float, float]]) -> str:
    """Pages/s over time as an SVG polyline (the script redraws it as samples come)."""
    top = max((v for _, v in series), default=0.0)
    return (
        f'<svg id="rate-chart" class="chart" viewBox="0 0 {CHART_W} {CHART_H}" '
        'role="img" aria-label="pages per second over time">'
        f'<rect x="0" y="0" width="{CHART_W}" height="{CHART_H}" fill="#fafafa" '
        'stroke="#ddd"></rect>'
        f'<polyline id="rate-line" fill="none" stroke="#1565c0" stroke-width="2" '
        f'points="{points(series, CHART_W, CHART_H)}"></polyline>'
        f'<text id="rate-max" x="4" y="14" font-size="12" fill="#555">max {top:g}/s</text>'
        "</svg>"
    )


def points(series: Sequence[tuple[float, float]], w: int, h: int) -> str:
    if len(series) < 2:
        return ""
    t0, t1 = series[0][0], series[-1][0]
    top = max(v for _, v in series) or 1.0
    span = (t1 - t0) or 1.0
    return " ".join(
        f"{(t - t0) / span * w:.1f},{h - 4 - v / top * (h - 24):.1f}" for t, v in series
    )


def _events(events: Sequence[tuple[int, Mapping[str, Any]]]) -> str:
    items = "".join(event_item(record) for _, record in events[-EVENTS_SHOWN:])
    return f'<h3>Event log</h3><ol id="events" class="events">{items}</ol>'


def event_item(record: Mapping[str, Any]) -> str:
    detail = {k: v for k, v in record.items() if k not in ("time", "event", "job")}
    text = json.dumps(detail, ensure_ascii=False, default=str)
    if len(text) > 200:
        text = text[:199] + "…"
    return (
        f'<li><span class="t">{e(record.get("time"))}</span> '
        f'<span class="ev">{e(record.get("event"))}</span> <span class="d">{e(text)}</span></li>'
    )


# --- the sections read from the whole report (refreshed on run events) ----------------


def sections(r: Mapping[str, Any]) -> str:
    state = r.get("state")
    if state in ("no_workspace", "unreadable"):
        why = r.get("error") or "no crawl has written this workspace yet"
        return f'<p class="state state-{e(state)}" data-field="state">{e(state)}: {e(why)}</p>'
    running = " (a crawl is running)" if r.get("crawl_running") else ""
    parts = [
        f'<p class="stateline">state <strong class="state state-{e(state)}" '
        f'data-field="state">{e(state)}</strong>{e(running)}; next run fetches '
        f'<span data-field="to-fetch">{e((r.get("queue") or {}).get("to_fetch"))}</span> rows, '
        f"{e((r.get('queue') or {}).get('exhausted'))} exhausted</p>",
        _run(r),
        _misbehaving(r),
        _fill(r),
        _drift_holds(r),
        _ship(r),
        _workers(r),
    ]
    return "".join(parts)


def _run(r: Mapping[str, Any]) -> str:
    run = r.get("last_run")
    if not run:
        return "<h2>Last run</h2><p>none recorded</p>"
    # a run still going (or killed before its end) has no counts yet: the findings read
    # are an earlier run's, not shown under this one's heading
    ended = bool(run.get("finished"))
    f = (r.get("run_findings") or {}) if ended else {}
    who = f" (summed over {f['workers']} workers)" if f.get("workers", 0) > 1 else ""
    counts = (f.get("counts") or run.get("counts") or {}) if ended else {}
    rows = "".join(f"<tr><th>{e(k)}</th><td>{_value(v)}</td></tr>" for k, v in counts.items() if v)
    took = f", {e(run['duration_s'])} s" if run.get("duration_s") else ""
    blocked = run.get("blocked")
    block = (
        f'<p class="warn">blocked: {e(blocked.get("url"))} matched the rule '
        f"{e(blocked.get('rule'))} (status {e(blocked.get('status'))})</p>"
        if isinstance(blocked, dict)
        else ""
    )
    warnings = (f.get("warnings") if f.get("workers") else None) or (
        ((r.get("found_nothing") or {}).get("warnings") or []) if ended else []
    )
    warned = "".join(
        f"<li>{e(w.get('what'))} {e(w.get('kind'))}"
        f"{'.' + e(w.get('field')) if w.get('field') else ''}: {e(w.get('count'))}x"
        f"{', e.g. ' + e((w.get('examples') or [''])[0]) if w.get('examples') else ''}</li>"
        for w in warnings
    )
    return (
        "<h2>Last run</h2>"
        f'<p data-field="last-run">{e(run.get("mode"))} {e(run.get("started"))}, '
        f"{'finished ' + e(run.get('finished')) if run.get('finished') else 'not finished'} "
        f"({e(run.get('reason'))}{took}){e(who)}</p>"
        f"{block}"
        f'<table class="counts">{rows}</table>'
        f"{_ul(warned, '<h3>Warnings</h3>')}"
    )


def _ul(items: str, head: str = "", attrs: str = "", empty: str = "") -> str:
    """``items`` (``<li>`` elements) as a list under ``head``; ``empty`` when none."""
    return f"{head}<ul{attrs}>{items}</ul>" if items else empty


def _value(v: Any) -> str:
    if isinstance(v, Mapping):
        return e(", ".join(f"{k} {n}" for k, n in v.items()) or "none")
    return e(v)


def _misbehaving(r: Mapping[str, Any]) -> str:
    seen: set[Any] = set()
    listed = []
    for m in [*(r.get("exhausted") or []), *(r.get("misbehaving") or [])]:
        if m.get("row_id") in seen:
            continue
        seen.add(m.get("row_id"))
        listed.append(m)
    body = "".join(
        f'<tr class="row-{e(m.get("status"))}"><td class="num">{e(m.get("row_id"))}</td>'
        f"<td>{e(m.get('kind'))}</td><td>{e(m.get('status'))}</td>"
        f'<td class="num">{e(m.get("failures"))}/{e(m.get("attempts"))}</td>'
        f'<td class="num">{e(m.get("last_http_status"))}</td>'
        f"<td>{e(m.get('last_error_kind'))}</td><td class=note>{e(m.get('last_error'))}</td>"
        f'<td class="url">{e(m.get("url"))}</td></tr>'
        for m in listed
    )
    table = (
        '<table class="misbehaving"><thead><tr><th>row</th><th>kind</th><th>status</th>'
        "<th>fails/counted</th><th>http</th><th>error</th><th>note</th><th>url</th></tr>"
        f"</thead><tbody>{body}</tbody></table>"
        if listed
        else "<p>none</p>"
    )
    deferred = "".join(
        f"<li>{e(d.get('host'))} asked not to be called before {e(d.get('until'))} "
        f"({e(d.get('seconds_left'))} s left, Retry-After)</li>"
        for d in r.get("deferrals") or []
    )
    deferrals = _ul(deferred, "<h3>Deferred hosts</h3>", " class=deferrals")
    return f"<h2>Misbehaving URLs</h2>{table}{deferrals}"


def _fill(r: Mapping[str, Any]) -> str:
    fill = r.get("fill_rates") or {}
    last = fill.get("last_run_all_workers") or fill.get("last_run") or {}
    stored = fill.get("stored") or {}
    if not last and not stored:
        return "<h2>Fill rates</h2><p>none yet</p>"
    out = [
        "<h2>Fill rates</h2><p class=sub>share of records with a value: last run / all items</p>"
    ]
    for kind in sorted(set(last) | set(stored)):
        a, b = last.get(kind) or {}, stored.get(kind) or {}
        fa, fb = a.get("fields") or {}, b.get("fields") or {}
        rows = "".join(
            f'<tr data-fill="{e(kind)}.{e(name)}"><td>{e(name)}</td>'
            f'<td class="num">{_pct(fa.get(name))}</td><td>{_pct_bar(fa.get(name))}</td>'
            f'<td class="num">{_pct(fb.get(name))}</td><td>{_pct_bar(fb.get(name))}</td></tr>'
            for name in sorted(set(fa) | set(fb))
        )
        out.append(
            f'<h3>{e(kind)} <span class="sub">{e(a.get("records", DASH))} / '
            f"{e(b.get('records', DASH))} records</span></h3>"
            '<table class="fill"><thead><tr><th>field</th><th colspan=2>last run</th>'
            f"<th colspan=2>all items</th></tr></thead><tbody>{rows}</tbody></table>"
        )
    return "".join(out)


def _pct(v: Any) -> str:
    return f"{100 * v:.1f}%" if isinstance(v, int | float) else DASH


def _pct_bar(v: Any) -> str:
    if not isinstance(v, int | float):
        return ""
    w = max(0.0, min(1.0, float(v))) * 100
    return (
        '<svg class="pct" viewBox="0 0 100 8" preserveAspectRatio="none">'
        f'<rect x="0" y="0" width="100" height="8" fill="#eee"></rect>'
        f'<rect x="0" y="0" width="{w:.1f}" height="8" fill="#1565c0"></rect></svg>'
    )


def _drift_holds(r: Mapping[str, Any]) -> str:
    f = r.get("run_findings") or {}
    drift = (f.get("drift") if f.get("workers") else None) or r.get("drift") or []
    items = "".join(
        f"<li>{e(d.get('kind'))}.{e(d.get('field'))}: "
        + (
            f"matched fallback {e((d.get('selectors') or ['?'])[-1])} {e(d.get('count', 0))}x"
            if d.get("reason") == "fallback"
            else f"filled {_pct(d.get('before'))} → {_pct(d.get('now'))}"
        )
        + f" (e.g. {e(', '.join(map(str, d.get('examples') or [])))})</li>"
        for d in drift
    )
    held = r.get("held") or {}
    holds = (
        "<ul>"
        + "".join(f"<li>{e(s)}: {e(n)}</li>" for s, n in sorted(held["by_status"].items()))
        + "".join(f"<li>rule {e(k)}: {e(n)}</li>" for k, n in sorted(held["by_rule"].items()))
        + "</ul>"
        if held.get("total")
        else "<p>none</p>"
    )
    return (
        f"<h2>Drift</h2>{_ul(items, empty='<p>none</p>')}"
        f'<h2>Review holds <span class="sub" data-field="held">{e(held.get("total", 0))}</span>'
        f"</h2>{holds}"
    )


def _ship(r: Mapping[str, Any]) -> str:
    section = (r.get("plugins") or {}).get("ship")
    log = r.get("ship_log") or {}
    if not section:
        return "<h2>Shipping</h2><p>nothing shipped yet</p>"
    if isinstance(section, str):
        return f"<h2>Shipping</h2><p>{e(section)}</p>"
    run = section.get("last_run") or {}
    counts = run.get("counts") or {}
    sent = sum(int(counts.get(k) or 0) for k in ("accepted", "updated", "duplicate"))
    latest = section.get("latest_outcomes") or {}
    last = log.get("last_attempt") or {}
    answers = log.get("answers") or {}
    deadline = section.get("deadline") or {}
    now = "; shipping now" if section.get("shipping_now") else ""
    return (
        "<h2>Shipping</h2>"
        '<div class="figures">'
        + "".join(
            f'<div class="figure"><span class="label">{e(label)}</span>'
            f'<span class="value" data-ship="{e(key)}">{e(value)}</span></div>'
            for label, key, value in (
                ("sent (last run)", "sent", sent if run else None),
                ("skipped", "skipped", counts.get("skipped")),
                ("rejected", "rejected", counts.get("rejected")),
                ("errors", "error", counts.get("error")),
                ("keys delivered", "delivered", section.get("keys_delivered")),
                ("complete items", "complete", section.get("complete_items")),
            )
        )
        + "</div>"
        + f"<p>last ship run: {e(run.get('time'))}, {e(run.get('reason'))} "
        f"(exit {e(run.get('exit_code'))}){now}</p>"
        + (
            f"<p>last attempt: {e(last.get('time'))} {e(last.get('dedupe_key'))} → "
            f"{e(last.get('outcome'))} (HTTP {e(last.get('http_status'))})</p>"
            if last
            else ""
        )
        + _pairs("latest outcome per key", latest, "outcome")
        + _pairs("the door's answers (HTTP status, every attempt)", answers, "answer")
        + (
            f'<p class="warn">Retry-After: {e(deadline.get("host"))} until '
            f"{e(deadline.get('until'))}</p>"
            if deadline.get("active")
            else ""
        )
    )


def _pairs(title: str, counts: Mapping[str, Any], attr: str) -> str:
    if not counts:
        return ""
    cells = "".join(
        f'<tr><th>{e(k)}</th><td class="num" data-{attr}="{e(k)}">{e(v)}</td></tr>'
        for k, v in counts.items()
    )
    return f'<h3>{e(title)}</h3><table class="counts">{cells}</table>'


def _workers(r: Mapping[str, Any]) -> str:
    w = r.get("workers") or {}
    listed: list[Mapping[str, Any]] = list(w.get("list") or [])
    rows = "".join(
        f"<tr><td>#{e(x.get('id'))}</td><td>{e(x.get('host'))}</td><td>{e(x.get('pid'))}</td>"
        f"<td>{e(x.get('state'))}</td><td class=num>{e(x.get('leased_rows'))}</td>"
        f"<td class=num>{e(x.get('heartbeat_age_s'))} s</td></tr>"
        for x in listed
    )
    dead = any(x.get("state") == "dead" for x in listed)
    if not rows or (int(w.get("live") or 0) < 2 and not w.get("leased_rows") and not dead):
        return ""  # one crawl process at most (as `status` has it): the state line says it
    return (
        f"<h2>Workers <span class=sub>{e(w.get('live'))} running</span></h2>"
        "<table><thead><tr><th>worker</th><th>host</th><th>pid</th><th>state</th>"
        f"<th>leased</th><th>heartbeat</th></tr></thead><tbody>{rows}</tbody></table>"
    )


__all__ = ["chart", "e", "event_item", "job_page", "list_page", "page", "points", "sections"]
