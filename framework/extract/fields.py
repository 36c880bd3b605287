"""Field extraction: a spec's fields, compiled once, applied to every record.

Owns how a :class:`~framework.spec.models.FieldSpec` finds its value in a record:
sources tried in the order written (css, xpath, re over the element's text, url regex,
embedded JSON, count, json path, const), normalisation, type conversion, the field's
rules (min/max, pattern, enum, lengths, expected: reported as violations, the value
kept) and nested groups of repeated rows. It must not fetch, log, or know about items, queues
or the workspace: it returns an :class:`Extraction` and the spider decides.

Spec expressions run bounded (:mod:`framework.extract.patterns`): regexes (and XPath's
EXSLT ``re:`` functions) on the ``regex`` engine under the page's time budget, selectors
and JSON paths under a cap on matches and characters. Going over a bound raises
:class:`~framework.extract.patterns.LimitExceeded`.

This is the hot path of every crawled record, so everything that can be prepared is
prepared in :class:`FieldExtractor.__init__`: CSS is translated to XPath and compiled
with lxml once, regexes and JSON paths are compiled once, and evaluation works on the
lxml tree directly, without wrapping every match in a parsel ``Selector``. A kind with
several simple selectors (one compound CSS selector each) has them answered from one
index of the record's elements instead of one walk of the tree each
(:mod:`framework.extract.simplecss`).

A single-valued field takes the first match that is non-empty after normalisation. The
parts live beside this module: the compiled expressions in
:mod:`framework.extract.expressions`, the sources and the record's :class:`Scope` in
:mod:`framework.extract.sources`, the rules in :mod:`framework.extract.rules`; their
names used elsewhere are importable from here too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lxml import etree
from parsel import Selector

from framework.extract.convert import (
    CONVERTERS,
    ConversionError,
    ConvertContext,
    Normaliser,
    date_order_of,
)
from framework.extract.embedded import RecordSource
from framework.extract.expressions import (
    JsonPath,
    compile_css,
    compile_jsonpath,
    compile_regex,
    compile_selector,
    compile_xpath,
    looks_like_xpath,
)
from framework.extract.patterns import SafeRegex
from framework.extract.rules import Rules
from framework.extract.sources import (
    Scope,
    XPathSource,
    capped,
    compile_records,
    compile_source,
    records_of,
)

if TYPE_CHECKING:  # the models import nothing from here; avoid a package import cycle
    from framework.spec.models import FieldSpec

__all__ = [
    "FAILED",
    "FOUND",
    "NOTHING",
    "CompiledField",
    "Extraction",
    "FieldExtractor",
    "JsonPath",
    "Scope",
    "compile_css",
    "compile_jsonpath",
    "compile_records",
    "compile_regex",
    "compile_selector",
    "compile_xpath",
    "looks_like_xpath",
    "records_of",
]

# Simple selectors (simplecss.py) of one record kind from which its records' elements
# are indexed. The index costs about three XPath walks (a 1.2 KB page: 25-35 us against
# 10-15 us a walk; 9,000 elements, 6,000 with a class: 10.5 ms against 3.5 ms) and a
# lookup 1-3 us, so three selectors break even: from four on it is a gain.
INDEX_MIN_SELECTORS = 4


@dataclass(slots=True)
class Extraction:
    values: dict[str, Any]  # converted values; absent fields: default, else None ([] for lists)
    missing: list[str]  # required fields that found no usable value
    fallbacks: list[tuple[str, int, str]]  # (field, index, source) a non-first source won
    errors: list[tuple[str, str]]  # (field, message): conversion failed
    # (field, rule, value): a converted value breaks a rule of the spec (min, pattern,
    # expected, ...); the record keeps the value and is stored as invalid, not shipped
    violations: list[tuple[str, str, Any]] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.missing


# ---------------------------------------------------------------- fields

FOUND, NOTHING, FAILED = 0, 1, 2
_KEPT_AS_IS = (str, dict, list)  # what a string field keeps unconverted


class CompiledField:
    """One field, ready to run: its sources, normaliser, converter and rules."""

    __slots__ = (
        "_child",
        "_convert",
        "_ctx",
        "_each_json",
        "_each_label",
        "_each_records",
        "_each_xp",
        "_needs_base",
        "default",
        "has_default",
        "helper",
        "many",
        "name",
        "norm",
        "required",
        "rules",
        "sources",
    )

    def __init__(
        self, name: str, spec: FieldSpec, json: bool = False, languages: tuple[str, ...] = ()
    ) -> None:
        self.name = name
        self.helper = spec.helper
        self.required = spec.required
        self.default = spec.default
        self.has_default = spec.default is not None
        self.many = spec.many
        self.norm = Normaliser(
            strip=spec.strip,
            collapse=spec.collapse,
            lowercase=spec.lowercase,
            replace=tuple((SafeRegex(r.pattern), r.to) for r in spec.replace),
        )
        self.sources = tuple(compile_source(s.kind, s.expr) for s in spec.sources)
        self.rules = Rules.of(spec)
        type_name = spec.type.value
        self._convert = None if type_name == "string" else CONVERTERS[type_name]
        self._needs_base = type_name == "url"
        field_languages = spec.languages or languages  # the field's own, else the job's
        self._ctx = ConvertContext(
            date_format=spec.date_format,
            absolute=spec.absolute,
            languages=field_languages,
            date_order=date_order_of(spec.date_order, field_languages)
            if type_name in ("date", "datetime")
            else None,
            magnitude=spec.magnitude,
            pick=spec.pick,
            free=spec.free,
        )
        self._child: FieldExtractor | None = None
        self._each_xp: etree.XPath | None = None
        self._each_json: JsonPath | None = None
        self._each_records: RecordSource | None = None
        each = spec.each
        self._each_label = str(getattr(each, "label", each or ""))
        if spec.fields is not None and each is not None and not isinstance(each, str):
            # rows that are data in the page (embedded JSON, JSON-LD, microdata)
            self._child = FieldExtractor(spec.fields, json=True, languages=languages)
            self._each_records = compile_records(each)
        elif spec.fields is not None and isinstance(each, str):
            # The page's format says what `each` is (validation checks it the same way).
            self._child = FieldExtractor(spec.fields, json=json, languages=languages)
            if json or each.lstrip().startswith("$"):  # "$..." is never a selector
                self._each_json = compile_jsonpath(each)
            else:
                self._each_xp = compile_selector(each)

    def _convert_one(self, value: Any, url: str) -> Any:
        if self._convert is None:
            if isinstance(value, _KEPT_AS_IS):
                return value
            return CONVERTERS["string"](value, self._ctx)
        ctx = self._ctx
        if self._needs_base:
            ctx.base_url = url
        return self._convert(value, ctx)

    def run(self, scope: Scope) -> tuple[int, Any, int]:
        """(FOUND, value, source index) | (NOTHING, None, -1) | (FAILED, message, index).

        A source whose value fails the type or breaks a rule gives way to the next one
        (the page changed what the first source finds: a fallback, reported as drift
        like any other); when none gives a right value the first failure stands: its
        error (FAILED), or its value with the rule it breaks (FOUND, kept as invalid)."""
        if self._child is not None:
            return self._rows(scope)
        norm = self.norm
        failed: tuple[int, Any, int] | None = None
        for index, source in enumerate(self.sources):
            if self.many:
                raw = source.all(scope, norm)
                if not raw:
                    continue
                try:
                    value = [self._convert_one(v, scope.url) for v in raw]
                except ConversionError as exc:
                    failed = failed or (FAILED, str(exc), index)
                    continue
            else:
                value = source.first(scope, norm)
                if value is None or value == "":
                    continue
                try:
                    value = self._convert_one(value, scope.url)
                except ConversionError as exc:
                    failed = failed or (FAILED, str(exc), index)
                    continue
            if self.rules is not None and self.rules.check(value, self.many) is not None:
                failed = failed or (FOUND, value, index)
                continue
            return FOUND, value, index
        return failed or (NOTHING, None, -1)

    def _rows(self, scope: Scope) -> tuple[int, Any, int]:
        child = self._child
        assert child is not None
        children: list[Scope]
        if self._each_records is not None:
            children = records_of(self._each_records, scope)
        elif scope.selector is not None and self._each_xp is not None:
            root = scope.selector.root
            nodes = [] if isinstance(root, str) else self._each_xp(root)
            if isinstance(nodes, list):
                capped(nodes, f"each: {self._each_label}")
            children = [
                Scope(scope.url, Selector(root=n, type="html"), None, scope.page_text)
                for n in nodes
                if not isinstance(n, str | bool | float)
            ]
        elif scope.json is not None and self._each_json is not None:
            children = [
                Scope(scope.url, None, v, scope.page_text)
                for v in capped(self._each_json.find(scope.json), f"each: {self._each_label}")
            ]
        else:
            children = []
        if not children:
            return NOTHING, None, -1
        return FOUND, [child.extract(c) for c in children], 0


class FieldExtractor:
    """All fields of one record kind, compiled once; ``extract`` runs them on a scope."""

    __slots__ = ("_fields", "helpers")

    def __init__(
        self,
        fields: Mapping[str, FieldSpec],
        *,
        json: bool = False,
        languages: tuple[str, ...] = (),
    ) -> None:
        """``json``: the records are JSON values (a ``format: json`` page or tab), so a
        nested group's ``each`` is a JSON path; else a CSS/XPath selector. ``languages``:
        the job's, for date fields that name none."""
        self._fields = tuple(
            CompiledField(name, spec, json, languages) for name, spec in fields.items()
        )
        # fields for templates only: never part of the item (see FieldSpec.helper)
        self.helpers = frozenset(cf.name for cf in self._fields if cf.helper)
        simple = [
            src
            for cf in self._fields
            for src in cf.sources
            if isinstance(src, XPathSource) and src.simple is not None
        ]
        if len(simple) >= INDEX_MIN_SELECTORS:
            for src in simple:
                src.indexes = True

    def extract(self, scope: Scope) -> Extraction:
        values: dict[str, Any] = {}
        missing: list[str] = []
        fallbacks: list[tuple[str, int, str]] = []
        errors: list[tuple[str, str]] = []
        violations: list[tuple[str, str, Any]] = []
        for cf in self._fields:
            outcome, value, index = cf.run(scope)
            if outcome == FOUND:
                name = cf.name
                if cf._child is not None:
                    rows = []
                    for i, sub in enumerate(value):
                        rows.append(sub.values)
                        prefix = f"{name}[{i}]."
                        missing.extend(prefix + m for m in sub.missing)
                        fallbacks.extend((prefix + f, j, s) for f, j, s in sub.fallbacks)
                        errors.extend((prefix + f, msg) for f, msg in sub.errors)
                        violations.extend((prefix + f, r, v) for f, r, v in sub.violations)
                    values[name] = rows
                    continue
                values[name] = value
                if index > 0:
                    fallbacks.append((name, index, cf.sources[index].label))
                if cf.rules is not None:
                    broken = cf.rules.check(value, cf.many)
                    if broken is not None:
                        violations.append((name, *broken))
            elif outcome == NOTHING:
                if cf.rules is not None and cf.rules.expected is not None and not cf.has_default:
                    # a vanished identity value breaks `expected`: never taken as agreeing
                    violations.append((cf.name, "expected", None))
                if cf.has_default:
                    values[cf.name] = cf.default
                else:
                    # Every record has every field: an absent value is an explicit null
                    # (an empty list for lists), never invented, and the shape is stable.
                    values[cf.name] = [] if cf.many or cf._child is not None else None
                    if cf.required:
                        missing.append(cf.name)
            else:
                values[cf.name] = None
                errors.append((cf.name, value))
                if cf.required:
                    missing.append(cf.name)
        return Extraction(values, missing, fallbacks, errors, violations)
