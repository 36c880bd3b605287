"""A demo site whose data changes while it runs: what a re-crawl must notice.

:class:`ChangingSite` is a :class:`~framework.demo.site.DemoSite` with one more method,
:meth:`ChangingSite.change`, that swaps in changed data (a case's amount multiplied, a
field of a case removed) and, with ``redesign=True``, a redesigned detail page (element
ids and classes renamed, the semantic ``data-field`` attributes kept), and serves the new
pages from the next request on, at the same address, so a second crawl of the same
workspace sees a site that changed (the row URLs stay valid). Change limits, rules and
selector drift (issue 12) are tested against it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from framework.demo.data import Case, Dataset
from framework.demo.http import encode
from framework.demo.js import js_routes
from framework.demo.pages import Page, render
from framework.demo.site import DemoSite

__all__ = ["ChangingSite"]

# the case fields that may be removed (shown as absent on the detail page)
REMOVABLE = ("room",)
# the redesign of a detail page: ids and classes change, data-field attributes stay
REDESIGN = (
    (b'<span id="case-number">', b'<span id="case-no" data-field="case-number">'),
    (b'class="amount" data-field="amount"', b'class="claim" data-field="amount"'),
)


class ChangingSite(DemoSite):
    def change(
        self,
        *,
        amount_factor: Mapping[str, int] | None = None,
        remove: Mapping[str, str] | None = None,
        redesign: bool = False,
    ) -> Dataset:
        """Multiply the amount of each case id in ``amount_factor`` by its factor and
        remove the field ``remove[case id]`` (one of :data:`REMOVABLE`); with
        ``redesign``, every detail page from now on has the :data:`REDESIGN` markup.
        Returns the new data (also ``self.data``, so :meth:`truth` describes it)."""
        self._redesigned = self._redesigned or redesign
        factors, removed = dict(amount_factor or {}), dict(remove or {})
        unknown = (set(factors) | set(removed)) - {c.id for c in self.data.cases}
        if unknown:
            raise ValueError(f"no such case: {', '.join(sorted(unknown))}")
        bad = set(removed.values()) - set(REMOVABLE)
        if bad:
            raise ValueError(f"cannot remove {', '.join(sorted(bad))}: one of {REMOVABLE}")

        def changed(case: Case) -> Case:
            if case.id in factors:
                case = dataclasses.replace(case, amount_cents=case.amount_cents * factors[case.id])
            if removed.get(case.id) == "room":
                case = dataclasses.replace(case, room=None)
            return case

        self.data = dataclasses.replace(self.data, cases=tuple(changed(c) for c in self.data.cases))
        if self.url:  # running: the next request sees the new pages (one assignment)
            self._routes = {
                key: (page.status, encode(page.status, page.content_type, self._body(key, page)))
                for key, page in {
                    **render(self.data, self.url),
                    **js_routes(self.data, self.url),
                }.items()
            }
        return self.data

    _redesigned = False

    def _body(self, key: str, page: Page) -> bytes:
        body = page.body
        if self._redesigned and key.startswith("GET /cases/") and "/tab/" not in key:
            for old, new in REDESIGN:
                body = body.replace(old, new)
        return body
