"""Did each list give what it says it has? The ``total_mismatch`` check of a run's end.

A page kind with ``total:`` declares its list's size on its pages ("Showing 1-20 of
2,000"). Each of its pages keeps, with its outcome, the total it read and what it
yielded (its records when they are the items, else the distinct links it found: the
row's context ``listing``, written in the page's own transaction: write.py). At the end
of a run this module reads those rows back from the workspace and compares, per list,
the declared total with the sum over its pages. A list is the first page of the kind
reached from a start URL or by a follow (its context has no ``page`` past 1) plus the
pages its pagination reached from it (``page`` 2, 3, ... whose ``parent_id`` is the page
before). Read from the workspace, not from the run, so a crawl killed and resumed
compares whole lists.

A list is not compared, and is said to be not checked, while a page of it is not done
(pending, or in error), when no page of it said a total, when it was read before totals
were kept, or when its pagination stopped at ``max_pages``. A difference over the
total's ``tolerance`` is a ``total_mismatch`` finding (logged once per figures, an
event, counted in ``framework status``), and a crawl that would drain exits 4.

It reads the store and notes findings; it writes nothing itself.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from framework.redact import redact_url
from framework.workspace.records import LISTING, Row, RowStatus

if TYPE_CHECKING:
    from framework.crawl.findings import Findings
    from framework.crawl.page import CompiledJob
    from framework.spec.models import TotalSpec
    from framework.workspace.store import Store

__all__ = ["EXAMPLES_MAX", "Completeness", "check", "compare"]

EXAMPLES_MAX = 20  # mismatches and lists not checked kept in the run's summary
NO_TOTAL = "no page of the list said its total"


@dataclass
class Completeness:
    """The lists of a run's end: compared, differing, not checked (with why)."""

    lists: int = 0
    checked: int = 0
    mismatches: list[dict[str, Any]] = field(default_factory=list)
    mismatched: int = 0
    not_checked: list[dict[str, Any]] = field(default_factory=list)
    unchecked: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "lists": self.lists,
            "checked": self.checked,
            "mismatched": self.mismatched,
            "mismatches": list(self.mismatches),
            "not_checked": self.unchecked,
            "not_checked_examples": list(self.not_checked),
        }


def _page(row: Row) -> int:
    try:
        return int(row.context.get("page", 1))
    except (TypeError, ValueError):
        return 1


def lists_of(rows: Iterable[Row]) -> list[list[Row]]:
    """The rows of one kind as lists: each head with the pages its pagination reached,
    in order. A next page found again by another list keeps its first parent: it is
    part of that one only."""
    by_id: dict[int, Row] = {}
    after: dict[int, list[Row]] = {}
    heads: list[Row] = []
    for row in rows:
        by_id[row.id] = row
    for row in by_id.values():
        if _page(row) > 1 and row.parent_id in by_id:
            after.setdefault(row.parent_id, []).append(row)
        else:
            heads.append(row)
    out: list[list[Row]] = []
    for head in heads:
        chain, todo = [], [head]
        while todo:
            row = todo.pop(0)
            chain.append(row)
            todo.extend(after.get(row.id, ()))
        out.append(chain)
    return out


def compare(kind: str, chain: list[Row], total: TotalSpec, max_pages: int | None) -> dict[str, Any]:
    """One list's verdict: ``{"kind", "url", ...}`` with ``expected`` and ``found`` when
    it was compared, else ``why`` it was not."""
    out: dict[str, Any] = {"kind": kind, "url": chain[0].url, "pages": len(chain)}
    open_ = sum(1 for r in chain if r.status is not RowStatus.OK)
    if open_:
        return {**out, "why": f"{open_} page{'s' if open_ != 1 else ''} of the list not done"}
    counted = [r.context.get(LISTING) for r in chain]
    if any(not isinstance(c, Mapping) for c in counted):
        return {**out, "why": "pages read before totals were kept: crawl or reparse them"}
    declared = [c.get("total") for c in counted if isinstance(c, Mapping)]
    expected = next((t for t in declared if isinstance(t, int)), None)
    if expected is None:
        return {**out, "why": NO_TOTAL}
    if max_pages is not None and len(chain) >= max_pages:
        return {**out, "why": f"its pagination stopped at max_pages ({max_pages})"}
    found = sum(c.get("found") or 0 for c in counted if isinstance(c, Mapping))
    return {**out, "expected": expected, "found": found, "tolerance": total.allowed(expected)}


def check(job: CompiledJob, store: Store, findings: Findings, log: logging.Logger) -> Completeness:
    """Compare every list of every kind with a ``total`` (see the module's docstring);
    each difference over its tolerance is noted as ``total_mismatch``."""
    done = Completeness()
    silent: dict[str, Any] | None = None  # the first list whose pages said no total
    for name, kind in job.kinds.items():
        total = kind.spec.total
        if total is None:
            continue
        max_pages = kind.pagination.max_pages if kind.pagination is not None else None
        for chain in lists_of(store.iter_rows(kind=name)):
            done.lists += 1
            verdict = compare(name, chain, total, max_pages)
            if "why" in verdict:
                done.unchecked += 1
                if verdict["why"] == NO_TOTAL and silent is None:
                    silent = verdict
                if len(done.not_checked) < EXAMPLES_MAX:
                    done.not_checked.append(verdict)
                continue
            done.checked += 1
            expected, found = verdict["expected"], verdict["found"]
            if abs(found - expected) <= verdict["tolerance"]:
                continue
            done.mismatched += 1
            if len(done.mismatches) < EXAMPLES_MAX:
                done.mismatches.append(verdict)
                short = "short by" if found < expected else "over by"
                detail = f"expected {expected}, found {found} ({short} {abs(found - expected)})"
                findings.note("total_mismatch", name, verdict["url"], detail=detail)
    if done.unchecked:
        # a list whose pages never said their total is the `total` source finding
        # nothing (a warning: the check the spec asked for did not run); a page not
        # done yet is what the next run finishes
        first = silent or done.not_checked[0]
        (log.warning if silent else log.info)(
            "completeness: %d of %d lists not checked, e.g. %s: %s%s",
            done.unchecked,
            done.lists,
            redact_url(first["url"]),
            first["why"],
            " (check the `total` source with `framework preview URL --kind KIND`)"
            if silent
            else "",
        )
    return done
