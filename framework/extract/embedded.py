"""Data a page carries besides its markup: JSON and JavaScript literals in ``<script>``
elements, JSON-LD and microdata.

Owns finding such a document in one page and parsing it, bounded:

* a ``<script>`` found by selector, the first assignment to a variable (``var data =``,
  ``window.__STATE__ =``) in any script, or a regex over the page text (its group);
* the text there is read as JSON, else as a JavaScript literal by ``chompjs`` (single
  quotes, unquoted keys, trailing commas, ``undefined``);
* JSON-LD (``<script type="application/ld+json">``, ``@graph`` included) and microdata
  (``itemscope``/``itemprop``, by ``extruct``), objects picked by their type; a
  microdata item becomes ``{"@type": ..., **properties}`` so that the same ``json:``
  paths read a record whether the page gives it as JSON-LD or as microdata.

Bounds: no more than ``FRAMEWORK_MAX_MATCH_CHARS`` characters of one literal or
JSON-LD script are parsed (a larger one raises :class:`LimitExceeded`, naming the
setting, before any parsing), deep nesting is refused by the JSON parser, and the
page's time budget is checked around every parse. A literal that is there but cannot be
read raises :class:`EmbeddedError`, whose message starts with what was being read.

Every compiled :class:`EmbeddedDoc` / :class:`RecordSource` keeps the last page's
result, so the records and fields of one page parse its data once. Nothing here logs,
fetches or knows about rows or items.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from lxml import etree, html

from framework.errors import PageLevelError
from framework.extract.patterns import LimitExceeded, SafeRegex, budget, surrogates_replaced

__all__ = ["EmbeddedDoc", "EmbeddedError", "RecordSource", "parse_literal"]

_DECODER = json.JSONDecoder(strict=False)  # raw control characters occur in real scripts
_SCRIPTS = etree.XPath("//script")
_JSONLD = etree.XPath(
    "//script[translate(normalize-space(@type), 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', "
    "'abcdefghijklmnopqrstuvwxyz')='application/ld+json']"
)
# match() anchors these at the position given (\A would only match at 0)
_LEADING_COMMENT = re.compile(r"\s*(?:<!--|//[^\n]*\n|/\*.*?\*/)\s*", re.DOTALL)
# window.__STATE__ = JSON.parse('...'): the document is a JSON text in a string literal
_JSON_PARSE = re.compile(r"JSON\.parse\(\s*(['\"`])")


class EmbeddedError(PageLevelError, ValueError):
    """Embedded data was found but cannot be read (malformed, not a literal)."""


def _where(node: Any) -> str:
    """``<script id="data">`` (the attributes that tell scripts apart), for messages."""
    if node is None or not isinstance(getattr(node, "tag", None), str):
        return "the page"
    attrs = " ".join(f'{k}="{node.get(k)}"' for k in ("id", "type", "class") if node.get(k))
    return f"<{node.tag}{' ' + attrs if attrs else ''}>"


def parse_literal(text: str, start: int, what: str) -> Any:
    """The JSON value or JavaScript literal that begins at ``text[start:]`` (after
    whitespace; anything after it is ignored). At most ``FRAMEWORK_MAX_MATCH_CHARS``
    characters are read: a longer literal raises :class:`LimitExceeded`, one that cannot
    be read :class:`EmbeddedError`."""
    b = budget()
    limit = b.limits.max_chars
    m = _LEADING_COMMENT.match(text, start)
    while m is not None and m.end() > start:
        start = m.end()
        m = _LEADING_COMMENT.match(text, start)
    while start < len(text) and text[start].isspace():
        start += 1
    rest = len(text) - start
    chunk = text[start : start + limit] if rest > limit else text[start:]
    b.timeout(what)
    try:
        try:
            value, _end = _DECODER.raw_decode(chunk)
        except ValueError:
            value = _json_parse_call(chunk) if chunk.startswith("JSON.parse") else _chomp(chunk)
    except RecursionError:
        raise EmbeddedError(f"{what}: nested too deeply to read") from None
    except ValueError as exc:
        if rest > limit:
            raise LimitExceeded(
                f"{what}: {rest} characters or more, over FRAMEWORK_MAX_MATCH_CHARS ({limit})"
            ) from None
        raise EmbeddedError(
            f"{what}: neither JSON nor a JavaScript literal ({_short(exc)})"
        ) from None
    b.timeout(what)
    return surrogates_replaced(value, chunk)


def _json_parse_call(chunk: str) -> Any:
    """``JSON.parse('<JSON text>')``: the string literal unquoted, then read as JSON."""
    m = _JSON_PARSE.match(chunk)
    if m is None:
        raise ValueError("JSON.parse( without a string literal")
    quote = m.group(1)
    body: list[str] = []
    i = m.end()
    n = len(chunk)
    while i < n:  # one pass over a bounded chunk; the escapes are JavaScript's
        c = chunk[i]
        if c == quote:
            break
        if c == "\\" and i + 1 < n:
            nxt = chunk[i + 1]
            if nxt in "'`":
                body.append(nxt)
            elif nxt == "\n":  # a line continuation
                pass
            else:
                body.append(c + nxt)
            i += 2
            continue
        body.append('\\"' if c == '"' else c)
        i += 1
    else:
        raise ValueError("the string given to JSON.parse does not end")
    text = json.loads('"' + "".join(body) + '"')  # the literal's own escapes resolved
    return json.loads(text)


def _chomp(chunk: str) -> Any:
    import chompjs  # a C extension: imported by the pages that need it

    if chunk[:1] not in ("{", "["):
        raise ValueError("it does not start with { or [")
    return chompjs.parse_js_object(chunk)


def _short(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text if len(text) <= 200 else text[:200] + "..."


def _check_size(text: str, what: str) -> None:
    limit = budget().limits.max_chars
    if len(text) > limit:
        raise LimitExceeded(
            f"{what}: {len(text)} characters, over FRAMEWORK_MAX_MATCH_CHARS ({limit})"
        )


def _script_text(node: Any) -> str:
    # a script's content is one text node; "string()" would also join child comments
    return node.text or "" if isinstance(node, etree._Element) else str(node)


def _root_of(root: Any, page_text: str | None) -> Any:
    """The page's document element: from a record element, or parsed from the text."""
    if isinstance(root, etree._Element):
        return root.getroottree().getroot()
    if page_text:
        try:
            return html.fromstring(page_text)
        except (etree.ParserError, ValueError):
            return None
    return None


def _var_regex(name: str) -> SafeRegex:
    """The first assignment to ``name`` (``var``/``let``/``const``, a property such as
    ``window.__STATE__``, or a bare name); ``==`` is no assignment."""
    return SafeRegex(r"(?<![\w$])" + re.escape(name) + r"\s*=(?![=>])")


class EmbeddedDoc:
    """Where one embedded document is and how to read it (a spec's ``embedded:``).

    ``script`` (a compiled selector) narrows the text to a script's; ``var`` or
    ``pattern`` then find where the literal starts in it (without either, the whole
    script is the literal). ``load`` gives the document or ``None`` when the page has
    none; it is parsed once per page."""

    __slots__ = ("_doc", "_last", "group", "pattern", "script", "var", "what")

    def __init__(
        self,
        *,
        script: tuple[str, etree.XPath] | None = None,
        var: str | None = None,
        pattern: str | None = None,
    ) -> None:
        given = (("script", script[0] if script else None), ("var", var), ("re", pattern))
        parts = [f"{k}={v}" for k, v in given if v]
        self.what = f"embedded data ({', '.join(parts)})"
        self.script = script[1] if script is not None else None
        self.var = _var_regex(var) if var else None
        self.pattern = SafeRegex(pattern, re.DOTALL) if pattern else None
        gi = self.pattern.groupindex if self.pattern is not None else {}
        groups = self.pattern.groups if self.pattern is not None else 0
        self.group: int | str = "json" if "json" in gi else (1 if groups else 0)
        self._last: Any = None
        self._doc: Any = None

    def load(self, root: Any, page_text: str | None) -> Any:
        """The document of this page (``root``: any element of its tree)."""
        key = page_text if page_text is not None else root
        if key is not None and key is self._last:
            return self._doc
        doc = self._load(root, page_text)
        self._last, self._doc = key, doc
        return doc

    def _texts(self, root: Any, page_text: str | None) -> Iterator[tuple[str, Any]]:
        if self.script is not None:
            top = _root_of(root, page_text)
            if top is None:
                return
            found = self.script(top)
            for node in found if isinstance(found, list) else [found]:
                yield _script_text(node), node
        elif self.var is not None:
            top = _root_of(root, page_text)
            if top is None:
                return
            for node in _SCRIPTS(top):
                yield _script_text(node), node
        elif page_text is not None:
            yield page_text, None

    def _load(self, root: Any, page_text: str | None) -> Any:
        for text, node in self._texts(root, page_text):
            where = _where(node)
            if self.var is not None:
                m = self.var.search(text)
                if m is None:
                    continue
                return parse_literal(text, m.end(), f"{self.what} in {where}")
            if self.pattern is not None:
                m = self.pattern.search(text)
                if m is None:
                    continue
                start = m.start(self.group)
                if start < 0:
                    continue
                sub = m.group(self.group)
                return parse_literal(sub, 0, f"{self.what} in {where}")
            if not text.strip():
                continue
            _check_size(text, f"{self.what} in {where}")
            return parse_literal(text, 0, f"{self.what} in {where}")
        return None


def _types(obj: dict[str, Any], key: str) -> list[str]:
    t = obj.get(key)
    if isinstance(t, str):
        return [t]
    if isinstance(t, list):
        return [x for x in t if isinstance(x, str)]
    return []


def _type_matches(given: list[str], wanted: str) -> bool:
    """``Quote`` matches ``Quote``, ``schema:Quote`` and ``https://schema.org/Quote``;
    a full IRI only itself; ``*`` anything."""
    if wanted == "*":
        return True
    for t in given:
        if t == wanted:
            return True
        if ":" not in wanted and "/" not in wanted and re.split(r"[/#:]", t)[-1] == wanted:
            return True
    return False


def _pick(docs: list[Any], wanted: str, type_key: str) -> list[dict[str, Any]]:
    """Objects of type ``wanted`` anywhere in ``docs``, in document order (a match's
    own insides are not searched: its nested objects belong to it)."""
    out: list[dict[str, Any]] = []
    stack: list[Any] = list(reversed(docs))
    limit = budget().limits.max_matches
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            if _type_matches(_types(v, type_key), wanted):
                out.append(v)
                if len(out) > limit:
                    budget().matches(len(out), f"{type_key} {wanted!r}")
                continue
            stack.extend(reversed(list(v.values())))
        elif isinstance(v, list):
            stack.extend(reversed(v))
    return out


def _flat_microdata(item: Any) -> Any:
    """extruct's ``{"type", "id", "properties"}`` as ``{"@type", "@id", **properties}``."""
    if isinstance(item, list):
        return [_flat_microdata(v) for v in item]
    if not isinstance(item, dict) or ("type" not in item and "properties" not in item):
        return item
    out: dict[str, Any] = {}
    if "type" in item:
        out["@type"] = item["type"]
    if "id" in item:
        out["@id"] = item["id"]
    for name, value in (item.get("properties") or {}).items():
        out[name] = _flat_microdata(value)
    if "value" in item and "properties" not in item:
        out["value"] = item["value"]
    return out


def jsonld_documents(top: Any) -> list[Any]:
    """Every JSON-LD document of the page (lists flattened), each script bounded."""
    from extruct.jsonld import JsonLdExtractor

    scripts = _JSONLD(top)
    for node in scripts:
        _check_size(_script_text(node), f"JSON-LD in {_where(node)}")
    if not scripts:
        return []
    b = budget()
    b.timeout("JSON-LD")
    try:
        docs = JsonLdExtractor().extract_items(top)
    except RecursionError:
        raise EmbeddedError("JSON-LD of the page: nested too deeply to read") from None
    except ValueError as exc:
        raise EmbeddedError(f"JSON-LD of the page: not JSON ({_short(exc)})") from None
    b.timeout("JSON-LD")
    return list(docs)


_bounded_microdata: Any = None
# extruct finds an item's properties with an XPath whose cost grows with the square of
# the nesting (one call, not interruptible): 3000 nested items took 45 s of CPU. Real
# microdata nests a few levels; deeper is refused before extruct runs.
MAX_MICRODATA_NESTING = 64


def _microdata_shape(top: Any) -> tuple[int, int]:
    """(items, deepest nesting of items in items), in one walk of the tree."""
    items = deepest = level = 0
    b = budget()
    for n, (event, el) in enumerate(etree.iterwalk(top, events=("start", "end"))):
        if el.get("itemscope") is None:
            continue
        if event == "start":
            items += 1
            level += 1
            deepest = max(deepest, level)
        else:
            level -= 1
        if n % 8192 == 0:
            b.timeout("microdata")
    return items, deepest


def _microdata_extractor() -> Any:
    """extruct's microdata extractor checking the page's time budget at every item:
    it runs in Python, and nested items cost it more than linear time."""
    global _bounded_microdata
    if _bounded_microdata is None:
        from extruct.w3cmicrodata import MicrodataExtractor

        class Bounded(MicrodataExtractor):
            def _extract_item(self, *args: Any, **kwargs: Any) -> Any:
                budget().timeout("microdata")
                return super()._extract_item(*args, **kwargs)

        _bounded_microdata = Bounded
    return _bounded_microdata(nested=True)


def microdata_items(top: Any, base_url: str) -> list[Any]:
    """Every top-level microdata item of the page, flattened (nested items inside)."""
    b = budget()
    n, deepest = _microdata_shape(top)
    if n > b.limits.max_matches:
        b.matches(n, "microdata items")
    if deepest > MAX_MICRODATA_NESTING:
        raise EmbeddedError(
            f"microdata of the page: items nested {deepest} deep, over "
            f"{MAX_MICRODATA_NESTING}: too deep to read"
        )
    try:
        items = _microdata_extractor().extract_items(top, base_url)
    except RecursionError:
        raise EmbeddedError("microdata of the page: nested too deeply to read") from None
    b.timeout("microdata")
    return [_flat_microdata(i) for i in items]


class RecordSource:
    """Records of a page (an ``each`` mapping): an embedded document and a JSON path
    in it, or the JSON-LD / microdata objects of one type. ``records`` gives JSON
    values (an empty list when the page has none); the page's result is kept."""

    __slots__ = ("_last", "_records", "doc", "jsonld", "label", "microdata", "path")

    def __init__(
        self,
        *,
        label: str,
        doc: EmbeddedDoc | None = None,
        path: Any = None,  # a compiled JSON path (framework.extract.fields.JsonPath)
        jsonld: str | None = None,
        microdata: str | None = None,
    ) -> None:
        self.label = label
        self.doc = doc
        self.path = path
        self.jsonld = jsonld
        self.microdata = microdata
        self._last: Any = None
        self._records: list[Any] = []

    def records(self, root: Any, page_text: str | None, url: str) -> list[Any]:
        key = page_text if page_text is not None else root
        if key is not None and key is self._last:
            return self._records
        found = self._find(root, page_text, url)
        limit = budget().limits.max_matches
        if len(found) > limit:
            budget().matches(len(found), f"each: {self.label}")
        self._last, self._records = key, found
        return found

    def _find(self, root: Any, page_text: str | None, url: str) -> list[Any]:
        if self.doc is not None:
            doc = self.doc.load(root, page_text)
            if doc is None:
                return []
            found = self.path.find(doc) if self.path is not None else [doc]
            if len(found) == 1 and isinstance(found[0], list):
                return list(found[0])  # a path to the list of records
            return found
        top = _root_of(root, page_text)
        if top is None:
            return []
        if self.jsonld is not None:
            return list(_pick(jsonld_documents(top), self.jsonld, "@type"))
        assert self.microdata is not None
        return list(_pick(microdata_items(top, url), self.microdata, "@type"))
