"""The checks that still run when the models refuse a spec's shape.

Without a model there is no meaning to check across keys, but each expression is
where the models would have put it (page kinds under ``pages:``, ``list:`` and
``detail:``; their ``each``, fields, follow rules, pagination, forms and sub-tabs),
so a bad selector is reported in the same run as the structural errors, not after
they are fixed. Only the raw data is read: a value of the wrong shape is the models'
problem, said once, not again here.
"""

from __future__ import annotations

from typing import Any

from framework.spec.checks.expressions import expression, regex, selector
from framework.spec.checks.fields import field, records
from framework.spec.checks.report import Path_, Report

__all__ = ["raw_page"]


def raw_page(r: Report, path: Path_, raw: dict[str, Any]) -> None:
    """The expressions of one page kind, written as ``raw``."""
    json_page = raw.get("format") == "json"
    # records that are data in the page are JSON values: `json:` paths read them
    fields_json = json_page or isinstance(raw.get("each"), dict)
    if isinstance(raw.get("each"), dict):
        records(r, (*path, "each"), raw["each"], json_page=json_page)

    def text(p: Path_, expr: Any, *, json: bool = json_page) -> None:
        if isinstance(expr, str):  # not text: the models say so
            expression(r, p, expr, json_page=json)

    text((*path, "each"), raw.get("each"))
    if "id" in raw:
        field(r, (*path, "id"), raw["id"], json_page=fields_json)
    fields = raw.get("fields")
    if isinstance(fields, dict):
        for name, fraw in fields.items():
            field(r, (*path, "fields", name), fraw, json_page=fields_json)
    follow = raw.get("follow")
    rules = list(enumerate(follow)) if isinstance(follow, list) else [(None, follow)]
    for i, rule in rules:
        rpath: Path_ = (*path, "follow") if i is None else (*path, "follow", i)
        if isinstance(rule, str):
            selector(r, rpath, rule, kind="any")
        elif isinstance(rule, dict):
            for key in ("css", "xpath"):
                if isinstance(rule.get(key), str):
                    selector(r, (*rpath, key), rule[key], kind=key)
            if isinstance(rule.get("pattern"), str):
                regex(r, (*rpath, "pattern"), rule["pattern"])
            deny = rule.get("deny")
            for j, expr in enumerate(deny) if isinstance(deny, list) else [(None, deny)]:
                if isinstance(expr, str):
                    regex(r, (*rpath, "deny") if j is None else (*rpath, "deny", j), expr)
    text((*path, "next"), raw.get("next"))
    pagination = raw.get("pagination")
    if isinstance(pagination, dict):
        text((*path, "pagination", "next"), pagination.get("next"))
    forms = raw.get("forms")
    for i, form in list(enumerate(forms)) if isinstance(forms, list) else [(None, forms)]:
        if isinstance(form, dict):
            fpath: Path_ = (*path, "forms") if i is None else (*path, "forms", i)
            for key in ("css", "xpath"):
                if isinstance(form.get(key), str):
                    selector(r, (*fpath, key), form[key], kind=key)
    subtabs = raw.get("subtabs")
    for tname, tab in subtabs.items() if isinstance(subtabs, dict) else ():
        if not isinstance(tab, dict):
            continue
        tpath: Path_ = (*path, "subtabs", tname)
        each = tab.get("each")
        tab_json = tab.get("format") == "json" or isinstance(each, dict)
        text((*tpath, "each"), each, json=tab_json)
        tab_fields = tab.get("fields")
        if isinstance(tab_fields, dict):
            for fname, fraw in tab_fields.items():
                field(r, (*tpath, "fields", fname), fraw, json_page=tab_json)
