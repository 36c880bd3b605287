"""The ground truth of the demo site: what a correct crawl must produce.

Owns the expected records (field by field, sub-tab data included), the broken pages and
what breaks on each, the layout-variant pages where a fallback selector must be used, and
the exact requests a complete crawl makes. Tests assert against this, never against
hand-copied constants. It reads :mod:`.data` only; it must not render or serve anything.

The records match the field names of ``projects/demo/job.yaml`` and the specs in
``tests/specs/good/`` (``cases.yaml``, ``courts.yaml``; ``api.yaml`` for
:meth:`Truth.api_records`). Conventions: text is stripped with whitespace runs collapsed
to one space; dates are ISO ``YYYY-MM-DD`` strings; numbers are floats, integers ints;
a missing optional field is ``None``; URLs are absolute; a sub-tab with rows is a list
of dicts (``[]`` when the tab has none).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from framework.demo.data import DEFAULT_CASES, DEFAULT_SEED, Case, Dataset, generate

SOURCE_TYPE = "sipp-demo"
API_SOURCE_TYPE = "sipp-api"
TABS = ("rulings", "hearings", "documents")


@dataclass(frozen=True)
class Broken:
    """A page a crawl cannot get a good record from, and why."""

    url: str
    kind: str  # "detail" or "detail.<tab>"
    reason: str  # "http_404", "missing_required", "http_500"
    status: int  # the HTTP status the page answers
    source_id: str | None = None
    field: str | None = None  # the missing required field, for "missing_required"


@dataclass(frozen=True)
class Request:
    method: str
    url: str
    body: str | None = None


@dataclass(frozen=True)
class Truth:
    data: Dataset
    base: str
    source_type: str = SOURCE_TYPE
    always_failing: tuple[str, ...] = field(default=())  # extra paths that always fail (faults)

    @property
    def ids(self) -> list[str]:
        return [c.id for c in self.data.good]

    def records(self) -> dict[str, dict[str, Any]]:
        """Every record a correct crawl emits, by ``source_id``. A record whose sub-tab
        fails (see :attr:`incomplete`) lacks that tab's key."""
        failing = self.incomplete
        return {c.id: self._record(c, failing.get(c.id, ())) for c in self.data.good}

    def expected_records(self) -> list[dict[str, Any]]:
        return list(self.records().values())

    @property
    def incomplete(self) -> dict[str, tuple[str, ...]]:
        """Records whose listed sub-tabs can never succeed: ``source_id -> tabs``."""
        out: dict[str, list[str]] = {}
        for case in self.data.good:
            for tab in TABS:
                if self._tab_fails(case, tab):
                    out.setdefault(case.id, []).append(tab)
        return {k: tuple(v) for k, v in out.items()}

    @property
    def complete_ids(self) -> list[str]:
        bad = self.incomplete
        return [i for i in self.ids if i not in bad]

    @property
    def fallbacks(self) -> dict[str, tuple[str, ...]]:
        """Records where the primary selector is gone and a fallback must be used."""
        return {c.id: ("amount",) for c in self.data.good if c.amount_variant}

    @property
    def broken(self) -> list[Broken]:
        out: list[Broken] = []
        for case in self.data.cases:
            url = f"{self.base}/cases/{case.id}"
            if case.detail_missing:
                out.append(Broken(url, "detail", "http_404", 404, case.id))
            elif case.title is None:
                out.append(Broken(url, "detail", "missing_required", 200, case.id, "title"))
        for case in self.data.good:
            for tab in TABS:
                if self._tab_fails(case, tab):
                    status = 500
                    out.append(
                        Broken(
                            self._tab_url(case, tab), f"detail.{tab}", "http_500", status, case.id
                        )
                    )
        return out

    def list_urls(self, listing: str = "/cases") -> list[str]:
        """List pages as a next-link crawl discovers them (page 1 is the bare URL)."""
        if listing == "/cases":
            n = len(self.data.list_pages())
        else:
            n = len(self.data.court_pages(listing.rsplit("/", 1)[-1]))
        return [f"{self.base}{listing}"] + [
            f"{self.base}{listing}?page={p}" for p in range(2, n + 1)
        ]

    def detail_urls(self) -> list[str]:
        """Every detail link on the list pages, broken ones included."""
        return [f"{self.base}/cases/{c.id}" for c in self.data.cases]

    def subtab_requests(self) -> list[Request]:
        """The sub-tab requests of every emitted record (the untitled page has none)."""
        out = []
        for case in self.data.good:
            out.append(Request("GET", self._tab_url(case, "rulings")))
            out.append(Request("GET", self._tab_url(case, "hearings")))
            out.append(Request("POST", self._tab_url(case, "documents"), f"case={case.id}"))
        return out

    def requests(self) -> list[Request]:
        """Every request a complete crawl of ``/cases`` makes once (robots.txt aside):
        list pages, detail pages (broken ones too), sub-tabs of the emitted records."""
        pages = [Request("GET", u) for u in self.list_urls() + self.detail_urls()]
        return pages + self.subtab_requests()

    def api_records(self, source_type: str = API_SOURCE_TYPE) -> dict[str, dict[str, Any]]:
        """Records of the JSON API spec (``tests/specs/good/api.yaml``), by ``source_id``."""
        out = {}
        for c in self.data.good:
            out[c.id] = {
                "dedupe_key": f"{source_type}:{c.id}",
                "source_type": source_type,
                "source_id": c.id,
                "title": c.title,
                "court": c.court,
                "filed": c.filed.isoformat(),
                "amount": c.amount,
                "status": c.status,
            }
        return out

    def _tab_url(self, case: Case, tab: str) -> str:
        return f"{self.base}/cases/{case.id}/tab/{tab}"

    def _tab_fails(self, case: Case, tab: str) -> bool:
        if self.data.failing_tab == (case.id, tab):
            return True
        return f"/cases/{case.id}/tab/{tab}" in self.always_failing

    def _record(self, case: Case, failing: tuple[str, ...]) -> dict[str, Any]:
        record: dict[str, Any] = {
            "dedupe_key": f"{self.source_type}:{case.id}",
            "source_type": self.source_type,
            "source_id": case.id,
            "status": case.status,  # carried from the list row
            "title": case.title,
            "court": case.court,
            "category": case.category,  # from the JSON embedded in a <script>
            "filed": case.filed.isoformat(),
            "amount": case.amount,
            "room": case.room,
            "plaintiff": case.plaintiff,
            "defendant": case.defendant,
            "judges": list(case.judges),
        }
        tabs: dict[str, Any] = {
            "rulings": [
                {"no": r.no, "date": r.date.isoformat(), "verdict": r.verdict} for r in case.rulings
            ],
            "hearings": [{"date": h.date.isoformat(), "agenda": h.agenda} for h in case.hearings],
            "documents": [{"name": d.name, "url": self.base + d.path} for d in case.documents],
        }
        for tab in TABS:
            if tab not in failing:
                record[tab] = tabs[tab]
        return record


def expected_records(
    base: str,
    cases: int = DEFAULT_CASES,
    seed: int = DEFAULT_SEED,
    source_type: str = SOURCE_TYPE,
) -> list[dict[str, Any]]:
    """The exact records a correct crawl of a default site at ``base`` produces."""
    return Truth(generate(cases, seed), base.rstrip("/"), source_type).expected_records()
