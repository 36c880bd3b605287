"""Where a page keeps data in its scripts: the hints ``framework preview`` gives when a
kind's ``each`` finds no record.

A page that renders its records with JavaScript often carries them in a script: an
object or list literal assigned to a variable (``window.__CASE__ = {...}``), JSON in a
script element (``<script id="__NEXT_DATA__" type="application/json">``), or JSON-LD
objects of a schema.org type. Each of those is one ``each:`` away
(:mod:`framework.extract.embedded`, :mod:`framework.extract.records`); this module only
names them, so the spec author need not read the page source to find the name. It reads
the page and nothing else, and gives at most ``HINTS_MAX`` names of each sort.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from parsel import Selector

HINTS_MAX = 10
SCRIPT_CHARS = 2_000_000  # of all scripts' text scanned: a hint, not an extraction

# an assignment of an object or list literal: `var x = {`, `window.x = [`, `a.b.c = {`
# (not `==`, `=>`, `!=`: the `=` must be followed by the literal's opening bracket).
# A page's scripts are hostile text: a name starts only where no name goes on (the
# lookbehind) and its parts are bounded, so a megabyte of one identifier is read in one
# pass, not tried from every character
_ASSIGN = re.compile(
    r"(?:\b(?:var|let|const)[ \t]+|(?<![\w$.\]\)]))"
    r"((?:[A-Za-z_$][\w$]{0,63}\.){0,8}[A-Za-z_$][\w$]{0,63})[ \t]*=[ \t]*[\[{]"
)
_JSON_TYPES = ("application/json", "application/ld+json")
SCRIPTED_TEXT = 200  # characters of text a page shows below which its scripts build it
_SHOWN_TEXT = "//body//text()[not(ancestor::script or ancestor::style or ancestor::noscript)]"


@dataclass
class ScriptData:
    assigned: list[str] = field(default_factory=list)  # variable or property names
    json_scripts: list[str] = field(default_factory=list)  # CSS selectors of JSON scripts
    jsonld_types: list[str] = field(default_factory=list)  # schema.org @type values
    # little text outside the scripts, more inside them: a page JavaScript builds
    scripted: bool = False

    def __bool__(self) -> bool:
        return bool(self.assigned or self.json_scripts or self.jsonld_types or self.scripted)

    def lines(self) -> list[str]:
        """What to tell the spec author, one line per sort found."""
        out = []
        if self.assigned:
            names = ", ".join(self.assigned)
            out.append(f"scripts assign objects or lists to: {names} (embedded: {{var: NAME}})")
        if self.json_scripts:
            where = ", ".join(self.json_scripts)
            out.append(f"scripts hold JSON: {where} (embedded: {{script: SELECTOR}})")
        if self.jsonld_types:
            types = ", ".join(self.jsonld_types)
            out.append(f"JSON-LD objects of type: {types} (jsonld: TYPE)")
        if self.scripted:
            out.append(
                "the page has little text outside its scripts: JavaScript may build it "
                "(`render: playwright` on the kind renders it in Chromium, docs/rendering.md)"
            )
        return out


def script_data(sel: Selector, *, rendered: bool = False) -> ScriptData:
    """The names under which ``sel``'s page keeps data in its scripts; ``rendered``:
    the page came from the browser already (no hint to render it)."""
    found = ScriptData()
    budget = SCRIPT_CHARS
    script_chars = 0
    for script in sel.xpath("//script"):
        text = script.xpath("string(.)").get() or ""
        script_chars += len(text)
        if budget <= 0:
            break
        text, budget = text[:budget], budget - len(text)
        kind = (script.attrib.get("type") or "").split(";")[0].strip().lower()
        if kind == "application/ld+json":
            for t in _jsonld_types(text):
                _add(found.jsonld_types, t)
        elif kind in _JSON_TYPES or kind.endswith("+json"):
            _add(found.json_scripts, _selector_of(script, kind))
        elif kind in ("", "text/javascript", "application/javascript", "module"):
            for m in _ASSIGN.finditer(text):
                _add(found.assigned, m.group(1))
    if not rendered and script_chars > SCRIPTED_TEXT:
        shown = sel.xpath(_SHOWN_TEXT).getall()
        found.scripted = sum(len(t.strip()) for t in shown) < SCRIPTED_TEXT
    return found


def _add(names: list[str], name: str | None) -> None:
    if name and name not in names and len(names) < HINTS_MAX:
        names.append(name)


def _selector_of(script: Selector, kind: str) -> str:
    ident = script.attrib.get("id")
    if ident and re.fullmatch(r"[A-Za-z_][\w-]*", ident):
        return f"script#{ident}"
    return f'script[type="{kind}"]'


def _jsonld_types(text: str) -> list[str]:
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or nested past the parser (hostile)
        return []
    out: list[str] = []

    def walk(value: Any, depth: int) -> None:
        if depth > 3:
            return
        if isinstance(value, list):
            for v in value:
                walk(v, depth + 1)
        elif isinstance(value, dict):
            t = value.get("@type")
            for one in t if isinstance(t, list) else [t]:
                if isinstance(one, str) and one not in out:
                    out.append(one)
            walk(value.get("@graph"), depth + 1)

    walk(doc, 0)
    return out


__all__ = ["HINTS_MAX", "ScriptData", "script_data"]
