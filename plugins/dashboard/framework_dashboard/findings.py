"""The last run's findings with every worker's counted, not only the newest's.

A crawl in one process ends with one ``run_finished`` event; the workers of
``crawl --processes N`` or of a PostgreSQL workspace each end with their own, naming
their ``worker``. ``framework status`` shows the newest event's warnings, fill counts and
drift; a run of four workers read that way shows a quarter of what was fetched. Here the
run is every worker's last ``run_finished`` back to their starts, and their counts are
summed: fill counts per kind and field, the run's counts, the warnings (by what, kind,
field), the drift (once per kind, field and reason).

The run's boundary, read from the log's end: a ``run_finished`` without a worker is a
run of its own; with workers, the run's events are collected until each collected
worker's start has been passed, and the next ``run_finished`` belongs to an earlier run.
A ``reparse_finished`` newer than any crawl's end is the run (as ``status`` has it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from framework.workspace import Workspace, last_extraction

STARTS = ("run_started", "run_resumed")
ENDS = ("run_finished", "reparse_finished")
EXAMPLES_MAX = 3


def last_run_events(ws: Workspace) -> list[dict[str, Any]]:
    """The finishing events of the last run, newest first (empty: none finished)."""
    collected: list[dict[str, Any]] = []
    workers: set[Any] = set()
    started: set[Any] = set()
    for event in ws.events.newest_first((*STARTS, *ENDS)):
        name = event.get("event")
        worker = event.get("worker")
        if name in STARTS:
            if worker is None and collected:
                break  # a single process's start: the collected ends are newer runs'
            if worker is not None:
                started.add(worker)
            continue
        if name == "reparse_finished" or worker is None:
            if not collected:
                collected.append(event)
            break
        if collected and (worker in workers or workers <= started):
            break  # every collected worker's start is behind us: an earlier run
        collected.append(event)
        workers.add(worker)
    return collected


def merge(events: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The events' findings as one run's: ``last_extraction``'s shape, plus ``counts``,
    ``workers`` (how many ends were summed) and ``reasons``."""
    merged: dict[str, Any] = {
        "by": None,
        "time": None,
        "warnings": [],
        "fill": {},
        "nothing_extracted": False,
        "drift": [],
        "carried": [],
        "counts": {},
        "workers": 0,
        "reasons": [],
    }
    warnings: dict[tuple[Any, ...], dict[str, Any]] = {}
    drift: dict[tuple[Any, ...], dict[str, Any]] = {}
    for event in events:
        one = last_extraction(event)
        merged["workers"] += 1
        merged["by"] = merged["by"] or one["by"]
        merged["time"] = max(filter(None, (merged["time"], one["time"])), default=None)
        merged["nothing_extracted"] = merged["nothing_extracted"] or one["nothing_extracted"]
        reason = event.get("reason")
        if isinstance(reason, str) and reason not in merged["reasons"]:
            merged["reasons"].append(reason)
        _add_fill(merged["fill"], one["fill"])
        _add_counts(merged["counts"], event.get("counts"))
        for w in one["warnings"]:
            key = (w.get("what"), w.get("kind"), w.get("field"), w.get("detail"))
            if key not in warnings:
                warnings[key] = {**w, "examples": list(w.get("examples") or [])}
                continue
            seen = warnings[key]
            seen["count"] = _int(seen.get("count")) + _int(w.get("count"))
            for example in w.get("examples") or []:
                if len(seen["examples"]) < EXAMPLES_MAX and example not in seen["examples"]:
                    seen["examples"].append(example)
        for d in one["drift"]:
            drift.setdefault((d.get("reason"), d.get("kind"), d.get("field")), d)
        for kind in one["carried"]:
            if kind not in merged["carried"]:
                merged["carried"].append(kind)
    merged["warnings"] = list(warnings.values())
    merged["drift"] = list(drift.values())
    return merged


def last_run_findings(ws: Workspace) -> dict[str, Any]:
    return merge(last_run_events(ws))


def _add_fill(into: dict[str, Any], fill: Mapping[str, Any]) -> None:
    for kind, entry in fill.items():
        if not isinstance(entry, Mapping):
            continue
        mine = into.setdefault(kind, {"pages": 0, "records": 0, "fields": {}})
        mine["pages"] += _int(entry.get("pages"))
        mine["records"] += _int(entry.get("records"))
        fields = entry.get("fields")
        if isinstance(fields, Mapping):
            for name, filled in fields.items():
                mine["fields"][name] = mine["fields"].get(name, 0) + _int(filled)


def _add_counts(into: dict[str, Any], counts: Any) -> None:
    if not isinstance(counts, Mapping):
        return
    for name, value in counts.items():
        if isinstance(value, Mapping):
            inner = into.setdefault(name, {})
            if isinstance(inner, dict):
                for k, v in value.items():
                    inner[k] = inner.get(k, 0) + _int(v)
        elif isinstance(value, int) and not isinstance(value, bool):
            into[name] = _int(into.get(name)) + value


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


__all__ = ["last_run_events", "last_run_findings", "merge"]
