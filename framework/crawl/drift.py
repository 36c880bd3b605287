"""Selector drift: a layout change the crawl absorbed, reported instead of hidden.

Owns two signals, each a ``drift`` event naming the kind, the field, the selectors and
a few example URLs:

* ``fallback``: a field's first source stopped matching and a later one (a fallback
  selector) gave the value: said at the first record, with the first selector and the
  one that matched, and summed up (count, examples) in the run's ``run_finished``;
* ``fill_rate``: at the end of a run, a field's fill rate (records with a value over
  records) fell by more than the spec's ``drift.fill_drop`` (percentage points, 25%
  by default) below the previous crawl's, both runs having read at least
  ``drift.min_records`` records of the kind; the examples are URLs of records without
  the value;
* ``volume``: at the end of a crawl that read every page of a kind (a ``--fresh`` run,
  or a first one), the kind's pages or records fell by more than ``drift.volume_drop``
  (a share, 25% by default) below the last crawl that read it whole: a ``next`` or a
  ``follow`` that broke since stores part of the harvest, and every row of it is ok.

The crawl runtime feeds it and writes the events; it does no I/O of its own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from framework.crawl.findings import filled

__all__ = ["EXAMPLES_MAX", "Drift"]

EXAMPLES_MAX = 3


class Drift:
    def __init__(
        self,
        event: Callable[..., None],
        log: logging.Logger,
        *,
        fill_drop: float,
        min_records: int,
    ) -> None:
        self._event = event
        self._log = log
        self.fill_drop = fill_drop
        self.min_records = min_records
        # (kind, field) -> {"first", "used", "count", "examples"}
        self._fallbacks: dict[tuple[str, str], dict[str, Any]] = {}
        # the previous crawl's fill counts, {kind: {records, fields: {name: filled}}}
        self._before: dict[str, Any] = {}
        self._empty_at: dict[tuple[str, str], list[str]] = {}  # examples of no value

    def previous_fill(self, fill: Mapping[str, Any]) -> None:
        self._before = {
            k: v
            for k, v in fill.items()
            if isinstance(v, Mapping) and isinstance(v.get("records"), int)
        }

    def watching(self, kind: str) -> bool:
        """Whether records of ``kind`` are compared with a previous crawl."""
        return kind in self._before

    def fallback(self, kind: str, field: str, first: str | None, used: str, url: str) -> None:
        entry = self._fallbacks.get((kind, field))
        if entry is None:
            entry = self._fallbacks[(kind, field)] = {
                "first": first,
                "used": used,
                "count": 0,
                "examples": [],
            }
            self._event(
                "drift",
                reason="fallback",
                kind=kind,
                field=field,
                selectors=[s for s in (first, used) if s is not None],
                examples=[url],
            )
        entry["count"] += 1
        if len(entry["examples"]) < EXAMPLES_MAX and url not in entry["examples"]:
            entry["examples"].append(url)

    def record(self, kind: str, url: str, values: Mapping[str, Any]) -> None:
        """One kept record of a watched kind: remember where its fields had no value."""
        before = self._before.get(kind)
        if before is None:
            return
        for name in before.get("fields", {}):
            if not filled(values.get(name)):
                urls = self._empty_at.setdefault((kind, name), [])
                if len(urls) < EXAMPLES_MAX:
                    urls.append(url)

    def volume(
        self,
        now: Mapping[str, Mapping[str, int]],
        before: Mapping[str, Mapping[str, Any]],
        drop: float,
        examples: Callable[[str], list[str]],
    ) -> list[dict[str, Any]]:
        """The kinds read whole this run (``now``: pages and records) whose pages or
        records fell by more than ``drop`` (a share) below the last whole crawl's
        (``before``), that one having had at least ``min_records`` of them; each also a
        ``drift`` event now. ``examples(kind)``: URLs of the kind's pages this run."""
        out: list[dict[str, Any]] = []
        for kind, counts in sorted(now.items()):
            was = before.get(kind)
            if not isinstance(was, Mapping):
                continue
            for what in ("pages", "records"):
                b, n = was.get(what), counts.get(what, 0)
                if not isinstance(b, int) or b < self.min_records or n >= b * (1 - drop):
                    continue
                entry = {
                    "reason": "volume",
                    "kind": kind,
                    "what": what,
                    "before": b,
                    "now": n,
                    "examples": examples(kind),
                }
                out.append(entry)
                self._log.warning(
                    "part of the harvest missing? %s gave %d %s this crawl, the last whole "
                    "crawl %d (a pagination or a follow that stops early? see "
                    "`framework status`)",
                    kind,
                    n,
                    what,
                    b,
                )
                self._event("drift", **entry)
        return out

    def finish(
        self, fill: Mapping[str, Any], selectors: Callable[[str, str], list[str]]
    ) -> list[dict[str, Any]]:
        """The run's drift (for ``run_finished``): every fallback seen, and the fields
        whose fill rate fell past the threshold (each also a ``drift`` event now).
        ``selectors(kind, field)`` names a field's sources, for the report."""
        out: list[dict[str, Any]] = [
            {
                "reason": "fallback",
                "kind": kind,
                "field": field,
                "selectors": [s for s in (e["first"], e["used"]) if s is not None],
                "count": e["count"],
                "examples": list(e["examples"]),
            }
            for (kind, field), e in sorted(self._fallbacks.items())
        ]
        for kind, now in sorted(fill.items()):
            before = self._before.get(kind)
            n_now = now.get("records", 0) if isinstance(now, Mapping) else 0
            if before is None or n_now < self.min_records or before["records"] < self.min_records:
                continue
            for name, was_filled in sorted(before.get("fields", {}).items()):
                if not isinstance(was_filled, int):
                    continue
                rate_before = was_filled / before["records"]
                rate_now = now.get("fields", {}).get(name, 0) / n_now
                if rate_before - rate_now <= self.fill_drop:
                    continue
                entry = {
                    "reason": "fill_rate",
                    "kind": kind,
                    "field": name,
                    "selectors": selectors(kind, name),
                    "before": round(rate_before, 3),
                    "now": round(rate_now, 3),
                    "examples": list(self._empty_at.get((kind, name), [])),
                }
                out.append(entry)
                self._log.warning(
                    "layout changed? field %r of %s has a value in %.0f%% of records, the "
                    "previous crawl %.0f%% (e.g. %s)",
                    name,
                    kind,
                    rate_now * 100,
                    rate_before * 100,
                    ", ".join(entry["examples"]) or "-",
                )
                self._event("drift", **entry)
        return out
