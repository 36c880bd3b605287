"""The found-nothing and fill-rate sections of ``framework status``.

The last crawl or reparse records its warnings and fill counts in its
``run_finished`` / ``reparse_finished`` event (see :mod:`framework.crawl.findings`);
the stored items' fill counts come from the store (:meth:`SqliteReader.fill_counts`).
This module only shapes them into the report: a fill rate is the share of records
with a value (not null, "", [] or {}), rounded to 3 places. It reads nothing itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

EXTRACTION_EVENTS = ("run_finished", "reparse_finished")


def last_extraction(event: Mapping[str, Any]) -> dict[str, Any]:
    """What status keeps of a run_finished / reparse_finished event (each field read
    for its type: a hand-edited event reads as empty, not as a crash)."""
    warnings = event.get("warnings")
    fill = event.get("fill")
    drift = event.get("drift")
    carried = event.get("carried")  # kinds the run left unread: their figures are older
    failed = event.get("type_failed")  # fields whose values failed their type
    return {
        "by": "reparse" if event.get("event") == "reparse_finished" else "crawl",
        "time": event.get("time") if isinstance(event.get("time"), str) else None,
        "warnings": [w for w in warnings if isinstance(w, dict)]
        if isinstance(warnings, list)
        else [],
        "fill": fill if isinstance(fill, dict) else {},
        "nothing_extracted": event.get("nothing_extracted") is True,
        # selector drift of that run (framework/crawl/drift.py)
        "drift": [d for d in drift if isinstance(d, dict)] if isinstance(drift, list) else [],
        "carried": [k for k in carried if isinstance(k, str)] if isinstance(carried, list) else [],
        "type_failed": [f for f in failed if _failure(f)] if isinstance(failed, list) else [],
    }


def _failure(entry: Any) -> bool:
    return (
        isinstance(entry, dict)
        and isinstance(entry.get("kind"), str)
        and isinstance(entry.get("field"), str)
        and isinstance(entry.get("count"), int)
    )


def rates(counts: Mapping[str, Any]) -> dict[str, Any]:
    """``{kind: {records, fields: {name: filled}}}`` -> the same with shares."""
    out: dict[str, Any] = {}
    for kind, entry in sorted(counts.items()):
        if not isinstance(entry, Mapping):
            continue
        n = entry.get("records")
        fields = entry.get("fields")
        if not isinstance(n, int) or not isinstance(fields, Mapping):
            continue
        out[kind] = {
            "records": n,
            "fields": {
                name: round(filled / n, 3) if n and isinstance(filled, int) else 0.0
                for name, filled in sorted(fields.items())
            },
        }
    return out


def sections(extraction: Mapping[str, Any] | None, stored: Mapping[str, Any]) -> dict[str, Any]:
    """The report's ``found_nothing`` and ``fill_rates`` sections."""
    last = extraction or {}
    return {
        "found_nothing": {
            "by": last.get("by"),
            "time": last.get("time"),
            "nothing_extracted": bool(last.get("nothing_extracted")),
            "warnings": list(last.get("warnings", [])),
        },
        "fill_rates": {
            "last_run": rates(last.get("fill", {})),
            # kinds the last run (a reparse) left unread: their last_run figures are the
            # run's before, which read them
            "carried": list(last.get("carried", [])),
            "stored": rates(stored),
            # per kind and field, the values the last run read that failed their type
            # (count, records, examples, text), as its event has them
            "type_failed": list(last.get("type_failed", [])),
        },
    }


def render_lines(report: Mapping[str, Any]) -> list[str]:
    """The text form of both sections, for ``framework status``."""
    out: list[str] = []
    found = report.get("found_nothing") or {}
    warnings = found.get("warnings") or []
    if found.get("nothing_extracted"):
        out.append(f"the last {found.get('by')} extracted nothing: no item is stored")
    if warnings:
        out.append(f"warnings of the last {found.get('by')} ({found.get('time')}):")
        for w in warnings:
            what = w.get("what")
            name = w.get("kind", "")
            if w.get("field"):
                name += f".{w['field']}"
            if w.get("detail"):
                name += f" ({w['detail']})"
            examples = w.get("examples") or []
            eg = f", e.g. {examples[0]}" if examples else ""
            out.append(f"  {what} {name}: {w.get('count')}x{eg}")
    fill = report.get("fill_rates") or {}
    last, stored = fill.get("last_run") or {}, fill.get("stored") or {}
    carried = set(fill.get("carried") or ())
    # said beside the field's fill rate; the others (a list kind's, a nested group's)
    # below the table
    failed = {(f["kind"], f["field"]): f for f in fill.get("type_failed") or ()}
    if last or stored:
        # the last crawl's, or the reparse's since (whose event status read)
        last_by = found.get("by") or "run"
        out.append(f"fill rates (share of records with a value): last {last_by} / all stored items")
        one_sided = False  # a field with a figure on one side only: said once, below
        for kind in sorted(set(last) | set(stored)):
            a, b = last.get(kind, {}), stored.get(kind, {})
            older = (
                f" (left unread by the last {last_by}: the run before's)" if kind in carried else ""
            )
            out.append(
                f"  {kind}: {a.get('records', '-')} / {b.get('records', '-')} records{older}"
            )
            fa, fb = a.get("fields", {}), b.get("fields", {})
            for name in sorted(set(fa) | set(fb)):
                note = _failed_note(failed.pop((kind, name), None))
                out.append(f"    {name:<24} {_pct(fa.get(name))} / {_pct(fb.get(name))}{note}")
                one_sided = one_sided or (bool(a) and bool(b) and (name in fa) != (name in fb))
        if one_sided:
            out.append(
                "  (-: no figure on that side: a sub-tab's part is filled by its tab's pages, "
                "whose empty fields are warned as field_empty KIND.TAB; else a field only one "
                "side has, as after a spec edit)"
            )
    if failed:
        by = found.get("by") or "run"
        out.append(f"values that failed their type in the last {by} (fields not above):")
        for (kind, name), entry in sorted(failed.items()):
            out.append(f"  {kind}.{name}:{_failed_note(entry)}")
    return out


def _failed_note(entry: Mapping[str, Any] | None) -> str:
    """``  (21 failed their type, e.g. not a number: 'N/A' at URL)``, or ""."""
    if entry is None:
        return ""
    examples = entry.get("examples") or []
    text = entry.get("text")
    eg = ", e.g. " + (str(text) if text else "") + (f" at {examples[0]}" if examples else "")
    return f"  ({entry.get('count')} failed their type{eg if text or examples else ''})"


def _pct(value: Any) -> str:
    return f"{100 * value:5.1f}%" if isinstance(value, int | float) else "    -"


__all__ = ["EXTRACTION_EVENTS", "last_extraction", "rates", "render_lines", "sections"]
