"""One page kind's own checks: its records (``each``), id and fields, ``required_any``,
its sub-tabs (templates over known names, rows and fields), and the parts that would
validate as shapes but would never be sent (sub-tabs of a kind without an id).

Links and pagination are :mod:`.pagination`, forms :mod:`.forms`, the graph of kinds
:mod:`.kinds`; this module calls them for each kind.
"""

from __future__ import annotations

from typing import Any

from framework.spec.checks.expressions import template
from framework.spec.checks.fields import field, row_fields, rows
from framework.spec.checks.forms import forms
from framework.spec.checks.kinds import Graph
from framework.spec.checks.pagination import blocked_rules, follow_rules, pagination
from framework.spec.checks.report import Path_, Report, strings
from framework.spec.models import PageKind

__all__ = ["RESERVED_FIELDS", "page"]

# Keys every item carries; a field of that name would be overwritten.
RESERVED_FIELDS = frozenset({"dedupe_key", "source_type", "source_id"})


def page(r: Report, g: Graph, name: str) -> None:
    """Every check of page kind ``name``."""
    kind, path = g.kinds[name], g.paths[name]
    json_page = kind.format.value == "json"
    raw = r.raw(path) or {}
    fields_json = rows(r, (*path, "each"), raw.get("each"), kind.each, json_page=json_page)
    if "id" in raw:
        field(r, (*path, "id"), raw["id"], json_page=fields_json)
        if isinstance(raw["id"], dict) and raw["id"].get("helper"):
            r.add(
                (*path, "id", "helper"),
                "`helper` on the id (it is the item's source_id)",
                "`helper: true` on other fields",
            )
    for fname, fraw in (raw.get("fields") or {}).items():
        if fname in RESERVED_FIELDS:
            r.add(
                (*path, "fields", fname),
                f"field name '{fname}' is reserved",
                "another name",
                key=True,
            )
        field(r, (*path, "fields", fname), fraw, json_page=fields_json)
    known = {*kind.fields, "id"} if kind.id is not None else set(kind.fields)
    for i, group in enumerate(kind.required_any):
        for fname in group:
            if fname not in known:
                r.add(
                    (*path, "required_any", i)
                    if len(kind.required_any) > 1
                    else (*path, "required_any"),
                    f"required_any names unknown field '{fname}'",
                    f"one of: {', '.join(sorted(known))}",
                )
    if "total" in raw:
        _total(r, (*path, "total"), raw["total"], kind, json_page=json_page)
    follow_rules(r, g, name, raw)
    pagination(r, kind, path, json_page=json_page)
    blocked_rules(r, (*path, "blocked"), kind.blocked)
    forms(r, g, name)
    _subtabs(r, g, name)


def _total(r: Report, path: Path_, raw: Any, kind: PageKind, *, json_page: bool) -> None:
    """A declared total is read from the whole page (a field's sources), and only a kind
    that lists something (records, or links to follow) has a count to compare it with."""
    if kind.each is None and not kind.follow:
        r.add(
            path,
            "`total` on a kind that lists nothing (no `each`, no `follow`)",
            "`total` on the list kind whose pages say how many records there are",
        )
    if isinstance(raw, dict):
        raw = {k: v for k, v in raw.items() if k != "tolerance"}  # the total's, no field's
    field(r, path, raw, json_page=json_page)


def _subtabs(r: Report, g: Graph, name: str) -> None:
    kind, path = g.kinds[name], g.paths[name]
    known = g.known_names(name)
    for tname, tab in kind.subtabs.items():
        tpath: Path_ = (*path, "subtabs", tname)
        if kind.id is None:
            r.add(
                tpath,
                f"sub-tab '{tname}' is never sent: sub-tabs are requested once per "
                f"record with an id, and page kind '{name}' has no `id`",
                f"`id:` on '{name}' (its records become items), or the sub-tab on the "
                "kind that has one",
                key=True,
            )
        if tname in kind.fields or tname in RESERVED_FIELDS:
            r.add(
                tpath,
                f"sub-tab '{tname}' has the name of a field",
                "a name of its own",
                key=True,
            )
        template(r, (*tpath, "url"), tab.url, known, "URL template")
        if tab.body is not None:
            if tab.body.form is not None:
                for k, v in tab.body.form.items():
                    template(r, (*tpath, "body", "form", k), v, known, "body template")
            else:
                for p, v in strings(tab.body.json_body, (*tpath, "body", "json")):
                    template(r, p, v, known, "body template")
        raw_tab = r.raw(tpath) or {}
        tab_json = rows(
            r, (*tpath, "each"), raw_tab.get("each"), tab.each, json_page=tab.format.value == "json"
        )
        fields = raw_tab.get("fields") or {}
        row_fields(r, (*tpath, "fields"), fields, json_page=tab_json, of="a sub-tab")
