"""Typed models of a field and of the values it holds: the part of a job spec that
says what a record is.

Owns every key of a field (its sources, type, normalisation, rules, nested rows) and
the value types with what each one takes (:data:`CAPABILITIES`): a new type is
declared here, once, and converted by :mod:`framework.extract.convert` (its
``CONVERTERS`` entry). The checks of :mod:`framework.spec.checks` read which option
and rule a type takes from here; page kinds and the job are :mod:`framework.spec.models`.
Nothing here does I/O.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "CAPABILITIES",
    "SOURCE_KEYS",
    "TYPE_OPTIONS",
    "Embedded",
    "FieldSpec",
    "Languages",
    "Records",
    "Replace",
    "Source",
    "StrictModel",
    "ValueType",
    "takes",
    "types_taking",
]

# Which keys of a field are *sources*; their order as written is the fallback order.
SOURCE_KEYS = ("css", "xpath", "json", "re", "url", "embedded", "pairs", "count", "const")


def _check_languages(value: Any) -> Any:
    """``languages:`` of a field or the job: dateparser's codes (one, or a list)."""
    if isinstance(value, str):
        value = [value]
    if isinstance(value, list | tuple) and value:
        from framework.extract.convert import known_language

        unknown = [v for v in value if isinstance(v, str) and not known_language(v)]
        if unknown:
            raise ValueError(
                f"unknown language(s) {', '.join(map(repr, unknown))}: "
                "dateparser's codes, e.g. en, id, de, pt"
            )
    return value


# dateparser's language codes, written as one or a list (a field's, the job's)
Languages = Annotated[tuple[str, ...], BeforeValidator(_check_languages)]


class StrictModel(BaseModel):
    """A part of a spec: unknown keys are refused, and it never changes once read."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


# What a field's value is converted to (``type:``); CAPABILITIES says which options and
# rules each one takes. (No docstring: the schema would ship it as the description.)
class ValueType(StrEnum):
    STRING = "string"
    INTEGER = "integer"
    NUMBER = "number"
    BOOLEAN = "boolean"
    DATE = "date"
    DATETIME = "datetime"
    URL = "url"
    PRICE = "price"  # {"amount": number, "currency": str | None}, by price-parser
    DURATION = "duration"  # seconds: PT2H30M, 2h 30m, 90 min, 1:30:00

    @property
    def takes(self) -> frozenset[str]:
        """The options and rules of a field that mean something for this type."""
        return CAPABILITIES[self]


_BOUNDED = frozenset({"min", "max", "max_change"})  # rules on a number
_READ_FROM_TEXT = frozenset({"magnitude", "pick"})  # which number of a text, how written
_TEXT = frozenset({"min_length", "max_length"})
_DATES = frozenset({"format", "languages", "date_order"})

#: The field keys that only some types take, by type. A key of :data:`TYPE_OPTIONS`
#: on a field whose type does not take it is a spec problem (framework/spec/checks);
#: every other key of a field (``enum``, ``expected``, ``pattern``, ``default``, ...)
#: means the same for every type. Declaring a new type: a row here, a member of
#: :class:`ValueType`, and its converter in ``framework.extract.convert.CONVERTERS``.
CAPABILITIES: dict[ValueType, frozenset[str]] = {
    ValueType.STRING: _TEXT | {"pairs"},
    ValueType.INTEGER: _BOUNDED | _READ_FROM_TEXT,
    ValueType.NUMBER: _BOUNDED | _READ_FROM_TEXT,
    ValueType.BOOLEAN: frozenset(),
    ValueType.DATE: _DATES,
    ValueType.DATETIME: _DATES,
    ValueType.URL: _TEXT,
    ValueType.PRICE: _BOUNDED | _READ_FROM_TEXT | {"free"},
    ValueType.DURATION: _BOUNDED,
}
TYPE_OPTIONS: frozenset[str] = frozenset().union(*CAPABILITIES.values())


def takes(type_: str) -> frozenset[str]:
    """What a field of type ``type_`` (as written) takes; nothing for an unknown type
    (the models say that one is wrong)."""
    try:
        return CAPABILITIES[ValueType(type_)]
    except ValueError:
        return frozenset()


def types_taking(option: str) -> tuple[str, ...]:
    """The types that take ``option``, in the order :class:`ValueType` declares them."""
    return tuple(t.value for t in ValueType if option in CAPABILITIES[t])


class Embedded(StrictModel):
    """JSON or a JavaScript literal embedded in the page, then a JSON path into it.

    Where the literal is: ``script`` (a css/xpath selector of the ``<script>`` whose
    text it is), ``var`` (the first assignment to that name in a script: ``data`` finds
    ``var data = [...]``, ``__STATE__`` finds ``window.__STATE__ = {...}``), or ``re``
    (a regex over the page text, or over the ``script``'s text; its group 1 or group
    ``json`` is the literal). ``var`` and ``re`` are each combinable with ``script``.
    The literal is JSON, or JavaScript that is not JSON (single quotes, unquoted keys,
    trailing commas: read by chompjs)."""

    re: str | None = None
    script: str | None = None
    var: str | None = None
    path: str = "$"

    @model_validator(mode="after")
    def _where(self) -> Embedded:
        if self.re is None and self.script is None and self.var is None:
            raise ValueError("`embedded` needs `script`, `var` or `re` (where the JSON is)")
        if self.re is not None and self.var is not None:
            raise ValueError("`embedded` takes `var` or `re`, not both")
        return self


class Records(StrictModel):
    """Records that are data in the page rather than elements of it (an ``each``
    mapping): an embedded document (its ``path`` leads to the records, or to the list
    of them), or the JSON-LD or microdata objects of one type (``Quote``,
    ``https://schema.org/Quote``; ``"*"``: every top-level object). Each record is a
    JSON value: its fields are read with ``json:`` paths."""

    embedded: Embedded | None = None
    jsonld: str | None = None
    microdata: str | None = None

    @model_validator(mode="after")
    def _one(self) -> Records:
        given = [k for k in ("embedded", "jsonld", "microdata") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                "`each` as a mapping takes exactly one of embedded, jsonld or microdata"
            )
        return self

    @property
    def label(self) -> str:
        if self.embedded is not None:
            e = self.embedded
            where = " ".join(
                f"{k}={v}" for k, v in (("script", e.script), ("var", e.var), ("re", e.re)) if v
            )
            return f"embedded {where} -> {e.path}"
        if self.jsonld is not None:
            return f"jsonld {self.jsonld}"
        return f"microdata {self.microdata}"


class Replace(StrictModel):
    """A regex substitution applied after whitespace normalisation."""

    pattern: str
    to: str = ""


class Source(StrictModel):
    """One way to find a value. A field has one or more, tried in order."""

    kind: Literal["css", "xpath", "json", "re", "url", "embedded", "pairs", "count", "const"]
    # css/xpath/json/re/url/count: the expression; embedded: an Embedded; pairs: a
    # mapping {each, key, value}; const: any value
    expr: Any


class FieldSpec(StrictModel):
    """One field of a record.

    Written in YAML either as a bare string (a CSS selector) or as a mapping with one
    or more *source* keys (``css``, ``xpath``, ``json``, ``re``, ``url``, ``embedded``,
    ``count``, ``const``), each a string or a list of fallbacks. Sources are tried in the
    order written; the first that yields a value wins, and a fallback that is not the
    first is reported (the layout changed). ``fields`` + ``each`` make a nested group of
    repeated rows (a table becomes a list of records).
    """

    sources: tuple[Source, ...] = ()
    type: ValueType = ValueType.STRING
    many: bool = False  # a list of values instead of the first one
    required: bool = False
    default: Any = None
    # normalisation (strings, before type conversion)
    strip: bool = True
    collapse: bool = True  # runs of whitespace -> one space
    lowercase: bool = False
    replace: tuple[Replace, ...] = ()
    # type details
    date_format: str | None = Field(default=None, alias="format")
    absolute: bool = True  # url: resolve against the page URL
    # date/datetime: dateparser's languages for dates the fixed forms miss ("12 Januari
    # 2024" with [id]); empty: the job's `languages`
    languages: Languages = ()
    # date/datetime: the order numeric dates are written in (12/01/2024); default: the
    # one the languages agree on, else day first (framework/extract/convert.py)
    date_order: Literal["DMY", "MDY", "YMD"] | None = None
    # number/integer/price: "63K", "1.2M", "2bn", "3 million" are read (else they fail)
    magnitude: bool = False
    # number/integer/price: which number of a range or a was/now text ("$20, now $15")
    pick: Literal["first", "last", "min", "max"] | None = None
    # price: the amount of a text that says "free" (0); unset, such a text fails
    free: int | float | None = None
    min: float | None = None
    max: float | None = None
    # rules on the converted value (a `many` field: on each value); a record that breaks
    # one is stored as `invalid`, naming the rule and the value, and never shipped
    pattern: str | None = None  # a regex the text of the value must contain (re.search)
    enum: tuple[Any, ...] | None = None  # the only values allowed
    min_length: int | None = Field(default=None, ge=0)  # of a text value
    max_length: int | None = Field(default=None, ge=0)
    # the one value this field must have (an absent value breaks it too): protects a
    # record's identity, e.g. the court a case must belong to
    expected: Any = None
    # change limits on a re-crawl of the same key (framework/crawl/changes.py): a
    # candidate over one is held as `review_required`, the accepted version ships on
    max_change: str | float | None = None  # "50%" of the old value, or an absolute amount
    frozen: bool = False  # the value must never change once stored
    # nested group of repeated rows (a mapping: records from data in the page)
    each: str | Records | None = None
    fields: dict[str, FieldSpec] | None = None
    # a value for templates (sub-tab URLs and bodies, the key, carried values), never
    # stored in the item nor part of its content hash (a CSRF token, a view state)
    helper: bool = False

    @model_validator(mode="before")
    @classmethod
    def _gather_sources(cls, data: Any) -> Any:
        if isinstance(data, str):
            return {"sources": [{"kind": "css", "expr": data}]}
        if not isinstance(data, dict) or "sources" in data:
            return data
        out: dict[str, Any] = {}
        sources: list[dict[str, Any]] = []
        for key, value in data.items():  # YAML mapping order is the fallback order
            if key in SOURCE_KEYS:
                if key in ("embedded", "pairs", "const") or not isinstance(value, list):
                    sources.append({"kind": key, "expr": value})
                else:
                    sources.extend({"kind": key, "expr": v} for v in value)
            else:
                out[key] = value
        out["sources"] = sources
        if "type" not in out and sources and all(s["kind"] == "count" for s in sources):
            out["type"] = ValueType.INTEGER  # a count is a number, not the text "5"
        return out

    @field_validator("max_change")
    @classmethod
    def _max_change(cls, value: Any) -> Any:
        if isinstance(value, str):
            text = value.strip()
            if not re.fullmatch(r"\d+(\.\d+)?%", text):
                raise ValueError("max_change is a percentage (`50%`) or a number")
            return text
        if isinstance(value, int | float) and value < 0:
            raise ValueError("max_change is at least 0")
        return value

    @model_validator(mode="after")
    def _check(self) -> FieldSpec:
        if self.fields is not None:
            if self.each is None:
                raise ValueError("a nested group needs `each` (which elements are its rows)")
        elif not self.sources and self.default is None:
            raise ValueError(
                "a field needs a source (css, xpath, json, re, url, embedded, count or const)"
            )
        return self
