"""Semantic checks of a spec whose shape the models accepted, each located to
``file:line:col``.

Owns the meaning across keys: selectors, regexes and JSON paths compile; start URLs
and the ship endpoint are absolute http(s) URLs; ``to:``/``start:`` name existing page
kinds; templates (URL, body, dedupe key) name only known fields and filters;
pagination can stop; selectors on ``format: json`` pages are JSON paths. This module
is the driver: each concern is a module of :mod:`framework.spec.checks`, which walk the
raw YAML data (for the marks) alongside the model (for the meaning). None of them
reads files or parses YAML: that is :mod:`framework.spec.load`.
"""

from __future__ import annotations

from typing import cast

from framework.errors import SpecError, SpecProblem
from framework.spec.checks import forms, kinds, pages, pagination, places, secrets
from framework.spec.checks.kinds import BUILTIN_NAMES
from framework.spec.checks.pages import RESERVED_FIELDS
from framework.spec.checks.places import is_start_url
from framework.spec.checks.raw import raw_page
from framework.spec.checks.report import Path_, Report
from framework.spec.checks.settings import SPEC_SETTINGS, check_settings, spec_settings
from framework.spec.load import Document
from framework.spec.models import JobSpec
from framework.spec.render import render_problems

__all__ = [
    "BUILTIN_NAMES",
    "RESERVED_FIELDS",
    "SPEC_SETTINGS",
    "check",
    "check_raw",
    "is_start_url",
    "spec_settings",
    "validate",
]


def _check_job(r: Report) -> None:
    """Every check of a spec the models accepted (their order does not matter: the
    problems are sorted by position)."""
    spec = r.spec
    places.check_places(r, list(spec.start_urls), list(spec.allowed_domains or ()))
    places.check_ship(r)
    check_settings(r, spec.settings)
    secrets.credentials(r)
    forms.login(r)
    pagination.blocked_rules(r, ("blocked",), spec.blocked)
    graph = kinds.Graph.of(spec)
    kinds.check_graph(r, graph)
    for name in graph.kinds:
        pages.page(r, graph, name)


def check_raw(doc: Document) -> list[SpecProblem]:
    """What can be checked of a spec whose shape the models refused.

    Without a model there is no meaning to check across keys, but the start URLs (and
    credentials in them), allowed domains, job-level headers and settings are where they
    are, and each expression is where the models would have put it
    (:mod:`framework.spec.checks.raw`), so a bad selector is reported in the same run as
    the structural errors, not after they are fixed. Only the raw data is read: a value
    of the wrong shape is the models' problem, said once, not again here."""
    r = Report(cast(JobSpec, None), doc)  # the raw checks never read the model
    data = doc.data if isinstance(doc.data, dict) else {}
    urls = data.get("start_urls")
    places.check_places(r, urls, data.get("allowed_domains"))
    for i, url in enumerate(urls if isinstance(urls, list) else ()):
        if isinstance(url, str):
            secrets.url_secrets(r, ("start_urls", i), url, "start URL")  # a literal credential
    headers = data.get("headers")
    if isinstance(headers, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        secrets.headers(r, ("headers",), headers, resolved=True)
    settings = data.get("settings")
    if isinstance(settings, dict):  # names that are not text: the models say so
        check_settings(r, {k: v for k, v in settings.items() if isinstance(k, str)})
    page_kinds: list[tuple[Path_, object]] = [((k,), data.get(k)) for k in ("list", "detail")]
    pages_raw = data.get("pages")
    if isinstance(pages_raw, dict):
        page_kinds += [(("pages", name), raw) for name, raw in pages_raw.items()]
    for path, raw in page_kinds:
        if isinstance(raw, dict):
            raw_page(r, path, raw)
    return r.problems


def check(spec: JobSpec, doc: Document) -> list[SpecProblem]:
    """Every semantic problem of the spec, sorted by position."""
    r = Report(spec, doc)
    _check_job(r)
    problems = r.problems + render_problems(spec, doc)  # `render`/`browser`, renderers
    return sorted(set(problems), key=lambda p: (p.line, p.col, p.what))


def validate(spec: JobSpec, doc: Document) -> JobSpec:
    """Return the spec, or raise :class:`SpecError` with every problem found."""
    problems = check(spec, doc)
    if problems:
        raise SpecError(problems)
    return spec
