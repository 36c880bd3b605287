"""Every page of the demo site, rendered once to bytes.

Owns the markup (what a crawler sees): list pages, court listings, detail pages, the
three AJAX sub-tabs, the JSON API, robots.txt. It renders from a :class:`Dataset` and the
site's base URL (some links are absolute on purpose) into a route table
``"METHOD target" -> Page``; it knows nothing of sockets, faults or counters.

Quirks a spec must cope with are deliberate and listed in :mod:`.truth`: odd whitespace,
HTML entities, mixed relative/absolute links, optional rows missing, a layout variant.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from html import escape

from framework.demo.data import COURTS, PER_PAGE, Case, Dataset

HTML = "text/html; charset=utf-8"
JSON = "application/json"


@dataclass(frozen=True)
class Page:
    status: int
    content_type: str
    body: bytes


def render(data: Dataset, base: str) -> dict[str, Page]:
    """The route table of a whole site. ``base`` is ``http://host:port`` (no slash)."""
    routes: dict[str, Page] = {}
    routes["GET /robots.txt"] = Page(200, "text/plain", b"User-agent: *\nDisallow:\n")
    routes["GET /"] = html_page("Demo courts", _index())
    pages = data.list_pages()
    for number, rows in enumerate(pages, start=1):
        page = html_page(f"Cases, page {number}", _list(rows, number, len(pages), base, "/cases"))
        routes[f"GET /cases?page={number}"] = page
        if number == 1:
            routes["GET /cases"] = page
    routes["GET /courts"] = html_page("Courts", _courts(data))
    for slug, name in COURTS:
        court_pages = data.court_pages(slug)
        for number, rows in enumerate(court_pages, start=1):
            body = _list(rows, number, len(court_pages), base, f"/courts/{slug}", name)
            page = html_page(f"{name}, page {number}", body)
            routes[f"GET /courts/{slug}?page={number}"] = page
            if number == 1:
                routes[f"GET /courts/{slug}"] = page
    for case in data.cases:
        if not case.detail_missing:
            routes[f"GET /cases/{case.id}"] = html_page(f"Case {case.id}", _detail(case))
        routes.update(_tabs(case, base, data.failing_tab))
        for doc in case.documents:
            routes[f"GET {doc.path}"] = Page(200, "application/pdf", b"%PDF-1.4\n% demo\n")
    api = api_pages(data)
    for number, payload in enumerate(api, start=1):
        routes[f"GET /api/cases?page={number}"] = Page(200, JSON, payload)
    routes["GET /api/cases"] = routes["GET /api/cases?page=1"]
    return routes


def api_item(case: Case) -> dict[str, object]:
    return {
        "id": case.id,
        "title": case.title,
        "court": case.court,
        "filed": case.filed.isoformat(),
        "amount": case.amount,
        "status": case.status,
    }


def api_slice(data: Dataset, offset: int, limit: int = PER_PAGE) -> bytes:
    """``/api/cases?offset=K``: ``limit`` good cases from ``offset``, and whether more exist."""
    good = data.good
    items = [api_item(c) for c in good[max(offset, 0) : max(offset, 0) + limit]]
    more = offset + limit < len(good)
    return _json({"offset": offset, "items": items, "has_more": more})


def api_pages(data: Dataset) -> list[bytes]:
    """``/api/cases?page=N`` for every page, plus one empty page past the end."""
    good = data.good
    count = -(-len(good) // PER_PAGE)
    out = []
    for number in range(1, count + 2):
        chunk = good[(number - 1) * PER_PAGE : number * PER_PAGE]
        out.append(
            _json(
                {"page": number, "items": [api_item(c) for c in chunk], "has_more": number < count}
            )
        )
    return out


def _json(value: object) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def html_page(title: str, body: str) -> Page:
    """A whole HTML document with ``title`` and ``body`` (already escaped markup)."""
    doc = (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title></head>\n<body>\n{body}\n</body></html>\n"
    )
    return Page(200, HTML, doc.encode("utf-8"))


def odd(text: str, k: int) -> str:
    """``text`` escaped, with whitespace a crawler must normalise (three flavours)."""
    safe = escape(text, quote=False)
    if k % 3 == 0:
        return f"\n      {safe}   \n    "
    if k % 3 == 1:
        return "  " + safe.replace(" ", "  ") + " "
    return safe.replace(" ", " \t\n ", 1)


def _index() -> str:
    return (
        '<h1>Demo courts</h1><ul><li><a href="/cases">All cases</a></li>'
        '<li><a href="/courts">By court</a></li><li><a href="/api/cases?page=1">API</a></li></ul>'
    )


def _courts(data: Dataset) -> str:
    items = []
    for slug, name in COURTS:
        n = sum(1 for c in data.cases if c.court_slug == slug)
        items.append(f'<li><a class="court" href="/courts/{slug}">{escape(name)}</a> ({n})</li>')
    return '<h1>Courts</h1>\n<ul class="courts">\n' + "\n".join(items) + "\n</ul>"


def _detail_href(case: Case, base: str, listing: str) -> str:
    # Three link styles, so a spider must resolve every one of them.
    if case.index % 3 == 0:
        return f"/cases/{case.id}"
    if case.index % 3 == 1:
        return f"cases/{case.id}" if listing == "/cases" else f"../cases/{case.id}"
    return f"{base}/cases/{case.id}"


def _next_href(number: int, base: str, listing: str) -> str:
    if number % 3 == 0:
        return f"?page={number + 1}"
    if number % 3 == 1:
        return f"{listing}?page={number + 1}"
    return f"{base}{listing}?page={number + 1}"


def _list(
    rows: list[Case], number: int, total: int, base: str, listing: str, court: str = ""
) -> str:
    out = [f"<h1>{escape(court or 'All cases')}</h1>", '<table class="cases">']
    out.append(
        "<thead><tr><th>No</th><th>Case</th><th>Court</th><th>Status</th></tr></thead><tbody>"
    )
    for case in rows:
        label = escape(case.title or case.id)
        out.append(
            f'<tr><td class="no">{case.id}</td>'
            f'<td><a class="detail" href="{_detail_href(case, base, listing)}">{label}</a></td>'
            f'<td class="court">{escape(case.court)}</td>'
            f'<td class="status">{odd(case.status, case.index)}</td></tr>'
        )
    out.append("</tbody></table>")
    nav = ['<div class="pager">']
    if number > 1:
        nav.append(f'<a class="prev" href="{listing}?page={number - 1}">Previous</a>')
    nav.append(f"<span>Page {number} of {total}</span>")
    if number < total:
        nav.append(f'<a class="next" href="{_next_href(number, base, listing)}">Next</a>')
    nav.append("</div>")
    return "\n".join(out + nav)


def format_amount(cents: int) -> str:
    """``Rp 1.234.567,50``: dots group thousands, a comma marks the cents."""
    whole, rest = divmod(cents, 100)
    return "Rp " + f"{whole:,}".replace(",", ".") + f",{rest:02d}"


def _detail(case: Case) -> str:
    k = case.index
    amount_attr = (
        'data-field="amount"' if case.amount_variant else 'class="amount" data-field="amount"'
    )
    room = f'<tr><th>Room</th><td class="room">{escape(case.room)}</td></tr>' if case.room else ""
    title = f'<h1 class="title">{odd(case.title, k)}</h1>' if case.title is not None else ""
    judges = "".join(f"<li>{odd(j, k + i)}</li>" for i, j in enumerate(case.judges))
    embedded = json.dumps({"id": case.id, "category": case.category, "court": case.court_slug})
    tabs = "".join(
        f'<a class="tab" data-tab="{t}" href="/cases/{case.id}/tab/{t}">{t.title()}</a>'
        for t in ("rulings", "hearings", "documents")
    )
    return f"""<nav><a href="/cases">All cases</a> | <a href="/courts">Courts</a></nav>
<div class="case">
<p>Case number: <span id="case-number">{odd(case.id, k + 1)}</span></p>
{title}
<table class="info">
<tr><th>Court</th><td class="court">{escape(case.court)}</td></tr>
<tr><th>Filed</th><td class="filed">{case.filed.strftime("%d.%m.%Y")}</td></tr>
<tr><th>Claim</th><td {amount_attr}>{format_amount(case.amount_cents)}</td></tr>
{room}
</table>
<div class="parties">
<p>Plaintiff: <span class="plaintiff">{odd(case.plaintiff, k)}</span></p>
<p>Defendant: <span class="defendant">{odd(case.defendant, k + 2)}</span></p>
</div>
<ul class="judges">{judges}</ul>
<div class="tabs" data-case="{case.id}">{tabs}</div>
</div>
<script>window.__CASE__ = {embedded};</script>"""


def _tabs(case: Case, base: str, failing: tuple[str, str] | None) -> dict[str, Page]:
    prefix = f"/cases/{case.id}/tab"
    rulings = {
        "case": case.id,
        "rows": [
            {"no": r.no, "date": r.date.isoformat(), "verdict": r.verdict} for r in case.rulings
        ],
    }
    hearings = "".join(
        f'<tr><td class="date">{h.date.strftime("%d.%m.%Y")}</td>'
        f'<td class="agenda">{odd(h.agenda, i)}</td></tr>'
        for i, h in enumerate(case.hearings)
    )
    docs = "".join(
        f'<li><a href="{doc.path if i % 2 == 0 else base + doc.path}">{escape(doc.name)}</a></li>'
        for i, doc in enumerate(case.documents)
    )
    out = {
        f"GET {prefix}/rulings": Page(200, JSON, _json(rulings)),
        f"GET {prefix}/hearings": Page(
            200,
            HTML,
            (
                '<table class="hearings"><thead><tr><th>Date</th><th>Agenda</th></tr></thead>'
                f"<tbody>{hearings}</tbody></table>"
            ).encode(),
        ),
        f"POST {prefix}/documents": Page(200, HTML, f'<ul class="documents">{docs}</ul>'.encode()),
    }
    if failing is not None and failing[0] == case.id:
        out[f"GET {prefix}/{failing[1]}"] = Page(500, "text/plain", b"internal error\n")
    return out
