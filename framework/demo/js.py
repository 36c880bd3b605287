"""The JS-rendered variant of the demo site, under ``/js/``: the same cases, the same
markup once a browser has run the page's scripts, and nothing useful without one.

Owns the routes a crawl with ``render: playwright`` reads (``tests/specs/good/js_*.yaml``):

* ``/js/cases[?page=N]``: list pages whose table a script writes into the DOM after
  :data:`DELAY_MS`; ``/js/cases/<id>``: detail pages written the same way (the raw HTML
  holds the markup only base64-encoded, so a plain HTTP crawl finds no record);
* ``/js/cases/<id>/tab/hearings``: a tab that loads on click (a script fetches
  ``/cases/<id>/tab/hearings`` and writes it into ``#panel``); the case whose hearings
  tab always fails answers 500 here too;
* ``/js/scroll``: every list row on one page that grows on scroll, :data:`BATCH` rows at a time;
* ``/js/more``: the same list growing by a "Load more" button, removed once all is shown.

Records match :meth:`framework.demo.truth.Truth.records` field by field. Markup of the
detail page comes from :mod:`.pages`; this module knows nothing of sockets or counters.
"""

from __future__ import annotations

import base64
import json
from html import escape

from framework.demo.data import Case, Dataset
from framework.demo.pages import Page, _detail, html_page, odd

__all__ = ["BATCH", "DELAY_MS", "js_routes"]

DELAY_MS = 100  # how long the scripts wait before writing the records
BATCH = 10  # rows the scroll list adds per scroll

# Decodes the base64 UTF-8 markup and writes it into #app after the delay, then removes
# itself (the DOM a crawler reads holds the records once, not a second encoded copy).
_WRITE = """<script>
(function () {
  var me = document.currentScript;
  var bytes = Uint8Array.from(atob("%s"), function (c) { return c.charCodeAt(0); });
  var html = new TextDecoder().decode(bytes);
  setTimeout(function () { document.getElementById("app").innerHTML = html; me.remove(); }, %d);
})();
</script>"""

_TAB = """<div class="tabs"><button class="tab" data-tab="hearings">Hearings</button></div>
<div id="panel"></div>
<script>
document.querySelector("button.tab").addEventListener("click", function () {
  fetch("/cases/%s/tab/hearings")
    .then(function (r) { return r.text(); })
    .then(function (t) {
      setTimeout(function () { document.getElementById("panel").innerHTML = t; }, %d);
    });
});
</script>"""

_SCROLL = """<style>table.cases tr { height: 120px; }</style>
<h1>All cases</h1>
<table class="cases"><thead><tr><th>No</th><th>Case</th><th>Court</th><th>Status</th></tr>
</thead><tbody></tbody></table>
<p class="end" hidden>No more cases</p>
<script>
(function () {
  var rows = JSON.parse(new TextDecoder().decode(
    Uint8Array.from(atob("%s"), function (c) { return c.charCodeAt(0); })));
  var shown = 0, busy = false, body = document.querySelector("table.cases tbody");
  function more() {
    if (busy || shown >= rows.length) return;
    busy = true;
    setTimeout(function () {
      body.insertAdjacentHTML("beforeend", rows.slice(shown, shown + %d).join(""));
      shown = Math.min(shown + %d, rows.length);
      if (shown >= rows.length) document.querySelector("p.end").hidden = false;
      busy = false;
    }, %d);
  }
  window.addEventListener("scroll", function () {
    var el = document.documentElement;
    if (window.innerHeight + window.scrollY >= el.scrollHeight - 50) more();
  });
  more();
})();
</script>"""


_MORE = """<h1>All cases</h1>
<table class="cases"><thead><tr><th>No</th><th>Case</th><th>Court</th><th>Status</th></tr>
</thead><tbody></tbody></table>
<button class="more">Load more</button>
<script>
(function () {
  var rows = JSON.parse(new TextDecoder().decode(
    Uint8Array.from(atob("%s"), function (c) { return c.charCodeAt(0); })));
  var shown = 0, body = document.querySelector("table.cases tbody");
  var button = document.querySelector("button.more");
  function more() {
    setTimeout(function () {
      body.insertAdjacentHTML("beforeend", rows.slice(shown, shown + %d).join(""));
      shown = Math.min(shown + %d, rows.length);
      if (shown >= rows.length) button.remove();
    }, %d);
  }
  button.addEventListener("click", more);
  more();
})();
</script>"""


def js_routes(data: Dataset, base: str) -> dict[str, Page]:
    """The ``/js/`` routes of a site (``base`` is unused: every link here is root-relative)."""
    routes: dict[str, Page] = {}
    pages = data.list_pages()
    for number, rows in enumerate(pages, start=1):
        page = _written(f"Cases, page {number}", _list(rows, number, len(pages)))
        routes[f"GET /js/cases?page={number}"] = page
        if number == 1:
            routes["GET /js/cases"] = page
    for case in data.cases:
        if not case.detail_missing:
            routes[f"GET /js/cases/{case.id}"] = _written(f"Case {case.id}", _detail(case))
        if data.failing_tab == (case.id, "hearings"):
            routes[f"GET /js/cases/{case.id}/tab/hearings"] = Page(
                500, "text/plain", b"internal error\n"
            )
        elif case.good:
            routes[f"GET /js/cases/{case.id}/tab/hearings"] = html_page(
                f"Case {case.id}: hearings", _TAB % (case.id, DELAY_MS)
            )
    every_row = json.dumps([_row(case) for case in data.cases])
    routes["GET /js/scroll"] = html_page(
        "All cases", _SCROLL % (_b64(every_row), BATCH, BATCH, DELAY_MS)
    )
    routes["GET /js/more"] = html_page(
        "All cases", _MORE % (_b64(every_row), BATCH, BATCH, DELAY_MS)
    )
    return routes


def _b64(text: str) -> str:
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


def _written(title: str, markup: str) -> Page:
    """A page whose ``markup`` a script writes into ``#app`` after the delay."""
    return html_page(title, '<div id="app"></div>\n' + _WRITE % (_b64(markup), DELAY_MS))


def _row(case: Case) -> str:
    label = escape(case.title or case.id)
    return (
        f'<tr><td class="no">{case.id}</td>'
        f'<td><a class="detail" href="/js/cases/{case.id}">{label}</a></td>'
        f'<td class="court">{escape(case.court)}</td>'
        f'<td class="status">{odd(case.status, case.index)}</td></tr>'
    )


def _list(rows: list[Case], number: int, total: int) -> str:
    out = [
        "<h1>All cases</h1>",
        '<table class="cases">',
        "<thead><tr><th>No</th><th>Case</th><th>Court</th><th>Status</th></tr></thead><tbody>",
        *(_row(case) for case in rows),
        "</tbody></table>",
        '<div class="pager">',
        f"<span>Page {number} of {total}</span>",
    ]
    if number < total:
        out.append(f'<a class="next" href="/js/cases?page={number + 1}">Next</a>')
    out.append("</div>")
    return "\n".join(out)
