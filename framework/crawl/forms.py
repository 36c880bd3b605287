"""Forms a page submits: ``FormRequest.from_response`` semantics, as requests to store.

A page kind's ``forms:`` (:class:`~framework.spec.models.FormSpec`) name a form of the
page and what to set in it. This module reads the form the way Scrapy 2.19's
``FormRequest.from_response`` does (``scrapy/http/request/form.py``), so a spec behaves
like the spider its author would have written:

* the form: the first element matched by ``css``/``xpath`` and its nearest ``<form>``
  ancestor-or-self (formcss/formxpath), else the ``index``-th ``<form>`` (formnumber);
* its inputs as the page has them (hidden ones: CSRF tokens, ``__VIEWSTATE``,
  ``__EVENTVALIDATION``), textareas, selects (a single select with nothing selected
  sends its first option), checked checkboxes and radios; no submit, image or reset
  input; a name the spec sets is taken out and appended, in the spec's order;
* the submit element (clickdata): ``click`` attributes, ``{nr: n}`` the n-th input, or
  the first submit element; ``dont_click: true`` sends none;
* the URL: the form's ``action`` joined to the page's base URL (the page's own URL when
  there is none); the method: the spec's, else the form's (anything but POST is GET);
  GET puts the fields in the query, replacing the action's own query.

What this module adds: fan-out (a field with ``values`` or ``options`` makes one request
per value, one per combination when several do), bounded by ``max_requests`` *before*
anything is built; a page-controlled text that looks like an ``{env:NAME}`` reference
(a hidden input, an option, a record value put in by a template) is defused in the
encoded body (its ``e`` percent-encoded: the server reads the same text, the crawl never
resolves it), so a page cannot make the crawler send a credential the spec did not put
in that field. Only the spec's own template text may refer to one.

Pure functions over a parsed page: no I/O, no workspace. Whether the action may be
requested at all (scheme, ``allowed_domains``) is the page's :class:`Guard` decision,
made by :mod:`framework.crawl.page`, which turns :class:`FormError` into a page error.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode, urljoin, urlsplit, urlunsplit

from lxml import etree
from parsel import Selector
from w3lib.html import strip_html5_whitespace

from framework.errors import PageLevelError
from framework.extract.fields import compile_css, compile_xpath
from framework.extract.patterns import budget
from framework.spec.models import FormField, FormSpec
from framework.spec.template import MissingValue, Template

__all__ = ["CompiledForm", "FormError", "Submission"]

# What a page-controlled `{env:` becomes before encoding, and what that encodes to after:
# `%65` is `e`, so the server decodes `{env:` while no reference pattern matches.
_MARK = "\x1e\x1f"
_MARK_ENCODED = "%1E%1F"
_DEFUSED = "%7B%65nv%3A"
_NO_INPUT_TYPES = frozenset({"submit", "image", "reset"})
_CHECKABLE = frozenset({"checkbox", "radio"})


class FormError(PageLevelError):
    """The page does not have the form the spec names, or submitting it as the spec says
    is impossible (no such select, no such submit element, too many requests)."""


@dataclass
class Submission:
    """One form request, ready to become a row."""

    kind: str  # the page kind of the response (`to:`)
    url: str
    method: str
    body: str | None  # url-encoded fields of a POST
    body_type: str | None  # "form" with a body
    carry: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Axis:
    """The values one field takes: a single one, or one per request (fan-out)."""

    name: str
    spec: FormField
    choices: list[tuple[str, str | None]]  # (value, the option's label)


class CompiledForm:
    """One ``forms:`` entry of a page kind, compiled once per spec."""

    def __init__(self, kind: str, index: int, spec: FormSpec) -> None:
        self.label = f"{kind}.forms[{index}]"
        self.spec = spec
        self.to = spec.to
        if spec.css is not None:
            self.where: etree.XPath | None = compile_css(spec.css)
            self.where_text = f"css {spec.css!r}"
        elif spec.xpath is not None:
            self.where = compile_xpath(spec.xpath)
            self.where_text = f"xpath {spec.xpath!r}"
        else:
            self.where = None
            self.where_text = f"form number {spec.index or 0}"
        self.templates: dict[str, list[Template]] = {
            name: [Template(v) for v in (f.values if f.values is not None else [f.value or ""])]
            for name, f in spec.fields.items()
            if not f.options
        }

    # ------------------------------------------------------------------ public
    def submissions(
        self,
        sel: Selector,
        encoding: str,
        ctx: Mapping[str, Any],
        carry: Mapping[str, Any],
        admit: Callable[[str], bool],
    ) -> list[Submission]:
        """The requests this form makes on the page ``sel`` (fields encoded as the page
        is, Scrapy's way): none when the action is
        refused by ``admit`` (the guard counts and tells why) or an optional form is
        absent; :class:`FormError` when the page cannot be submitted as the spec says."""
        form = self._find(sel)
        if form is None:
            if self.spec.required:
                raise FormError(f"{self.label}: the page has no form ({self.where_text})")
            return []
        axes = [self._axis(form, name, f, ctx) for name, f in self.spec.fields.items()]
        total = math.prod(len(a.choices) for a in axes)
        if total > self.spec.max_requests:
            sizes = ", ".join(f"{a.name}: {len(a.choices)}" for a in axes if a.spec.fans_out)
            raise FormError(
                f"{self.label} would make {total} requests ({sizes}), over its max_requests "
                f"({self.spec.max_requests}); none were made. Raise `max_requests` if "
                "that many are meant, or narrow the values"
            )
        if total == 0:  # a select with no option to choose: nothing to ask
            return []
        url = _action(form)
        method = self.spec.method or ("POST" if form.method.upper() == "POST" else "GET")
        if not admit(url):
            return []
        page_pairs = self._inputs(form)
        out: list[Submission] = []
        seen: set[str] = set()
        for combo in itertools.product(*(a.choices for a in axes)):
            pairs = [*page_pairs, *((a.name, v) for a, (v, _) in zip(axes, combo, strict=True))]
            query = _encode(pairs, encoding)
            if query in seen:  # the same option listed twice is one request
                continue
            seen.add(query)
            next_carry = dict(carry)
            for a, (value, text) in zip(axes, combo, strict=True):
                if a.spec.carry is not None:
                    next_carry[a.spec.carry] = _unmark(value)
                if a.spec.carry_label is not None:
                    next_carry[a.spec.carry_label] = text
            if method == "POST":
                out.append(Submission(self.to, url, method, query, "form", next_carry))
            else:
                parts = urlsplit(url)
                target = urlunsplit(parts._replace(query=query, fragment=""))
                out.append(Submission(self.to, target, method, None, None, next_carry))
        return out

    # ------------------------------------------------------------------ the form
    def _find(self, sel: Selector) -> Any:
        root = sel.root
        if root is None or isinstance(root, str):
            return None
        if self.where is not None:
            found = self.where(root)
            nodes = found if isinstance(found, list) else []
            el = next((n for n in nodes if isinstance(n, etree._Element)), None)
            while el is not None and el.tag != "form":
                el = el.getparent()
            return el
        forms = root.xpath("//form")
        index = self.spec.index or 0
        return forms[index] if index < len(forms) else None

    def _inputs(self, form: Any) -> list[tuple[str, str]]:
        """The page's own name=value pairs (Scrapy's ``_get_inputs``), without the
        names the spec sets, with the submit element's pair unless told not to."""
        own = set(self.spec.fields)
        elements = form.xpath("descendant::textarea|descendant::select|descendant::input")
        budget().matches(len(elements), f"{self.label}: the form's inputs")
        pairs: list[tuple[str, str]] = []
        for el in elements:
            if el.tag == "input":
                kind = (el.get("type") or "").lower()
                if kind in _NO_INPUT_TYPES:
                    continue
                if kind in _CHECKABLE and el.get("checked") is None:
                    continue
            name = el.get("name")
            if not name or name in own:
                continue
            for value in _values(el):
                pairs.append((_mark(name), _mark(value)))
        if not self.spec.dont_click:
            clicked = self._clicked(form)
            if clicked is not None and clicked[0] and clicked[0] not in own:
                pairs.append((_mark(clicked[0]), _mark(clicked[1])))
        return pairs

    def _clicked(self, form: Any) -> tuple[str, str] | None:
        click = self.spec.click
        if click is None:
            for el in form.iter("input", "button"):
                kind = (el.get("type") or "").lower()
                if (el.tag == "input" and kind in ("submit", "image")) or (
                    el.tag == "button" and kind in ("", "submit")
                ):
                    return el.get("name") or "", el.get("value") or ""
            return None
        nr = click.get("nr")
        if isinstance(nr, int):
            inputs = list(form.inputs)
            if 0 <= nr < len(inputs):
                el = inputs[nr]
                return el.get("name") or "", el.get("value") or ""
        wanted = {k: str(v) for k, v in click.items() if k != "nr"}
        matches = [
            el
            for el in form.iter()
            if isinstance(el.tag, str)
            and el is not form
            and all(el.get(k) == v for k, v in wanted.items())
        ]
        if len(matches) != 1:
            what = "several elements match" if matches else "no element matches"
            raise FormError(f"{self.label}: {what} `click: {dict(click)}` in the form")
        return matches[0].get("name") or "", matches[0].get("value") or ""

    def _axis(self, form: Any, name: str, spec: FormField, ctx: Mapping[str, Any]) -> _Axis:
        if not spec.options:
            safe = {k: _mark_value(v) for k, v in ctx.items()}
            try:
                values = [t.render(safe) for t in self.templates[name]]
            except MissingValue as exc:
                raise FormError(f"{self.label}: field {name!r}: {exc}") from None
            return _Axis(name, spec, [(v, None) for v in dict.fromkeys(values)])
        selects = form.xpath("descendant::select[@name=$n]", n=name)
        if not selects:
            raise FormError(f"{self.label}: the form has no <select name={name!r}> for options")
        options = selects[0].xpath("descendant::option")
        budget().matches(len(options), f"{self.label}: the options of {name!r}")
        skip = set(spec.exclude)
        choices: dict[str, str] = {}
        for opt in options:
            if opt.get("disabled") is not None:
                continue  # a browser cannot choose it
            label = " ".join((opt.text_content() or "").split())
            value = opt.get("value")
            if value is None:  # lxml's (and a browser's) value of <option>text</option>
                value = (opt.text or "").strip()
            if not value.strip() or value in skip:
                continue  # the "choose one" placeholder, or excluded by the spec
            choices.setdefault(_mark(value), label)
        return _Axis(name, spec, list(choices.items()))


# ---------------------------------------------------------------------- helpers
def _action(form: Any) -> str:
    base = form.base_url or ""
    action = form.get("action")
    if action is None:
        return str(base)
    return urljoin(base, strip_html5_whitespace(action))


def _values(el: Any) -> Sequence[str]:
    """What one input sends (Scrapy's ``_value``/``_select_value``)."""
    if el.tag == "select":
        if el.multiple:
            return list(el.value)
        value = el.value
        if value is None:
            options = el.value_options
            return [options[0]] if options else []
        return [value]
    value = el.value
    return ["" if value is None else value]


def _encode(pairs: Iterable[tuple[str, str]], encoding: str) -> str:
    data = [
        (k.encode(encoding, "xmlcharrefreplace"), v.encode(encoding, "xmlcharrefreplace"))
        for k, v in pairs
    ]
    return urlencode(data).replace(_MARK_ENCODED, _DEFUSED)


def _mark(text: str) -> str:
    return text.replace("{env:", _MARK) if "{env:" in text else text


def _unmark(text: str) -> str:
    return text.replace(_MARK, "{env:") if _MARK in text else text


def _mark_value(value: Any) -> Any:
    return _mark(value) if isinstance(value, str) else value
