"""The demo site's data: court cases generated deterministically from a seed.

Owns the facts (what each case *is*), not how they are shown (:mod:`.pages`) nor what a
crawl should extract from them (:mod:`.truth`). The same ``(cases, seed)`` always yields
the same data, on every machine and every run: ``random.Random(seed)`` is the only source
of variation and nothing reads the clock.

Besides the ``cases`` good cases, two broken list rows are added (when ``edge_cases``):
one whose detail page answers 404 and one whose detail page has no title (a required
field). One good case's ``hearings`` sub-tab always answers 500.
"""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass

DEFAULT_SEED = 20240203
DEFAULT_CASES = 70
PER_PAGE = 10

COURTS: tuple[tuple[str, str], ...] = (
    ("pn-jaksel", "PN Jakarta Selatan"),
    ("pn-bandung", "PN Bandung"),
    ("pn-surabaya", "PN Surabaya"),
)
CATEGORIES = ("Perdata", "Niaga", "Tata Usaha", "Waris")
STATUSES = ("Ongoing", "Decided", "Appeal", "Settled")
PEOPLE = (
    "Budi Santoso",
    "Siti Rahayu",
    "Hans Müller",
    "Dewi Lestari",
    "Agus Wijaya",
    "Maria Sjöström",
    "Rina Kusuma",
    "Joko Prasetyo",
    "Ana Ñúñez",
    "Teguh Hartono",
)
COMPANIES = (
    "PT Maju Jaya",
    "PT Sinar & Co",
    "CV Abadi",
    "PT Bank Nusantara",
    "Koperasi Sejahtera",
    "PT Kereta <Api> Logistik",
)
JUDGES = ("H. Abdullah", "R. Sitompul", "M. Hidayat", "L. Wulandari", "S. Gunawan", "T. Nasution")
VERDICTS = ("granted", "dismissed", "partially granted", "adjourned")
AGENDAS = (
    "Mediation",
    "Reading of the claim",
    "Answer by the defendant",
    "Witness hearing",
    "Evidence",
    "Conclusions",
)
DOC_NAMES = ("Claim", "Power of attorney", "Answer", "Evidence list", "Minutes")


@dataclass(frozen=True)
class Ruling:
    no: int
    date: dt.date
    verdict: str


@dataclass(frozen=True)
class Hearing:
    date: dt.date
    agenda: str


@dataclass(frozen=True)
class Document:
    name: str
    path: str  # root-relative; pages show some of them as absolute links


@dataclass(frozen=True)
class Case:
    index: int  # 1-based position in the listing order
    id: str
    title: str | None  # None: the detail page has no title (a broken page)
    court_slug: str
    court: str
    category: str
    status: str
    filed: dt.date
    amount_cents: int
    plaintiff: str
    defendant: str
    judges: tuple[str, ...]
    room: str | None  # optional: some detail pages do not show it
    amount_variant: bool  # the layout variant: `.amount` gone, `[data-field=amount]` left
    rulings: tuple[Ruling, ...]
    hearings: tuple[Hearing, ...]
    documents: tuple[Document, ...]
    detail_missing: bool = False  # the list row links to a detail page that is 404

    @property
    def amount(self) -> float:
        return self.amount_cents / 100

    @property
    def good(self) -> bool:
        return self.title is not None and not self.detail_missing


@dataclass(frozen=True)
class Dataset:
    cases: tuple[Case, ...]  # listing order, broken rows included
    seed: int
    failing_tab: tuple[str, str] | None  # (case id, tab) that always answers 500

    @property
    def good(self) -> tuple[Case, ...]:
        return tuple(c for c in self.cases if c.good)

    def list_pages(self) -> list[list[Case]]:
        """Rows of /cases?page=N: ``PER_PAGE`` good cases per page, broken rows extra."""
        return _paginate(self.cases)

    def court_pages(self, slug: str) -> list[list[Case]]:
        return _paginate(tuple(c for c in self.cases if c.court_slug == slug))


def _paginate(cases: tuple[Case, ...]) -> list[list[Case]]:
    pages: list[list[Case]] = []
    current: list[Case] = []
    good_on_page = 0
    for case in cases:
        if case.good and good_on_page == PER_PAGE:
            pages.append(current)
            current, good_on_page = [], 0
        current.append(case)
        good_on_page += case.good
    if current or not pages:
        pages.append(current)
    return pages


def case_id(index: int) -> str:
    return f"C2024-{index:04d}"


def generate(
    cases: int = DEFAULT_CASES, seed: int = DEFAULT_SEED, edge_cases: bool = True
) -> Dataset:
    """The whole data set. Broken rows get ids outside the good range (``C2024-E404``,
    ``C2024-E422``)."""
    if cases < 1:
        raise ValueError("the demo site needs at least one case")
    rng = random.Random(seed)
    made = [_case(rng, i) for i in range(1, cases + 1)]
    failing: tuple[str, str] | None = None
    if edge_cases:
        # Broken rows sit after the 3rd and 6th page's good rows (or at the end of a
        # small site), so they share a page with good rows as on a real site.
        missing = _broken(_case(rng, 9404), detail_missing=True)
        untitled = _broken(_case(rng, 9422), untitled=True)
        made.insert(min(3 * PER_PAGE, len(made)), missing)
        made.insert(min(6 * PER_PAGE + 1, len(made)), untitled)
        failing = (case_id(min(7, cases)), "hearings")
    return Dataset(cases=tuple(made), seed=seed, failing_tab=failing)


def _broken(case: Case, *, detail_missing: bool = False, untitled: bool = False) -> Case:
    fields = dict(case.__dict__)
    # Ids outside the numeric range, so no size of site collides with them.
    fields["id"] = f"C2024-E{case.index % 1000}"
    fields["detail_missing"] = detail_missing
    if untitled:
        fields["title"] = None
    return Case(**fields)


def _case(rng: random.Random, index: int) -> Case:
    cid = case_id(index)
    court_slug, court = rng.choice(COURTS)
    plaintiff = rng.choice(PEOPLE + COMPANIES)
    defendant = rng.choice([p for p in PEOPLE + COMPANIES if p != plaintiff])
    filed = dt.date(2022, 1, 1) + dt.timedelta(days=rng.randrange(3 * 365))
    # A spread of magnitudes, so some amounts have no thousands separator at all.
    amount_cents = rng.randrange(10_000, 10 ** rng.randrange(6, 12))
    n_rulings = rng.randrange(0, 4)
    rulings = tuple(
        Ruling(
            no=k,
            date=filed + dt.timedelta(days=30 * k + rng.randrange(20)),
            verdict=rng.choice(VERDICTS),
        )
        for k in range(1, n_rulings + 1)
    )
    hearings = tuple(
        Hearing(date=filed + dt.timedelta(days=14 * (k + 1)), agenda=rng.choice(AGENDAS))
        for k in range(rng.randrange(0, 5))
    )
    documents = tuple(
        Document(name=f"{rng.choice(DOC_NAMES)} {k}", path=f"/docs/{cid}/{k}.pdf")
        for k in range(1, rng.randrange(1, 4) + 1)
    )
    return Case(
        index=index,
        id=cid,
        title=f"{plaintiff} v. {defendant}",
        court_slug=court_slug,
        court=court,
        category=rng.choice(CATEGORIES),
        status=rng.choice(STATUSES),
        filed=filed,
        amount_cents=amount_cents,
        plaintiff=plaintiff,
        defendant=defendant,
        judges=tuple(rng.sample(JUDGES, rng.randrange(1, 4))),
        room=None if rng.random() < 0.2 else f"Ruang {rng.randrange(1, 9)}",
        amount_variant=index % 13 == 5,
        rulings=rulings,
        hearings=hearings,
        documents=documents,
    )
