"""The small template language of URL, body and dedupe-key templates.

``{name}`` substitutes a value of the record; ``{name|slug}``, ``|lower``, ``|upper``,
``|hash`` (a stable 16-hex-digit sha1 prefix) and ``|strip`` filter it, and filters chain
left to right (``{title|lower|slug}``). ``{{`` and ``}}`` are literal braces.

``{env:NAME}`` is a reference to an environment variable (a credential). A template
keeps it as it is, unresolved: rows store it that way and only the crawl resolves it,
when it builds the request (:mod:`framework.crawl.secrets`). :data:`ENV_REF` is its
syntax for every place a spec may use it (start URLs, sub-tab URL and body templates,
``headers:``).

A :class:`Template` is compiled once (syntax and filter names are checked then) and
rendered many times; rendering is a loop over pre-split parts. A name that is absent
(or ``None``) in the render context raises :class:`MissingValue`, which the runtime turns
into a typed row error. This module owns the syntax only; which names a spec may use is
checked by :mod:`framework.spec.validate`.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote as _urlquote

from framework.errors import FrameworkError

__all__ = [
    "ENV_REF",
    "FILTERS",
    "SPEC_ENV_PREFIX",
    "MissingValue",
    "Template",
    "TemplateError",
    "env_names",
    "env_problems",
    "env_refused",
    "slug",
]

# An environment-variable reference: the POSIX name rule (letters, digits, '_').
ENV_REF = re.compile(r"\{env:([A-Za-z_][A-Za-z0-9_]*)\}")
_ENV_LOOSE = re.compile(r"\{\s*env\s*:([^{}]*)\}")


def env_names(text: str) -> list[str]:
    """The variable names ``text`` refers to with ``{env:NAME}``, in order."""
    return ENV_REF.findall(text) if "{env:" in text else []


# A spec reads only the variables named with this prefix. A spec is data copied from
# strangers, and a reference sends its variable's value to a host the spec chooses: the
# prefix is the operator's consent (as Vite exposes only VITE_* variables to the code it
# bundles). Cloud keys, CI tokens and the framework's own FRAMEWORK_* are out of reach.
SPEC_ENV_PREFIX = "FW_"


def env_refused(name: str) -> str | None:
    """Why a spec may not read variable ``name``, or None."""
    if name.startswith(SPEC_ENV_PREFIX) and len(name) > len(SPEC_ENV_PREFIX):
        return None
    return (
        f"{{env:{name}}}: a spec reads only variables named {SPEC_ENV_PREFIX}* (a spec "
        "copied from someone else could send any other, a cloud key or a CI token, to "
        "a host it chooses)"
    )


def env_problems(text: str) -> list[str]:
    """What is wrong with the ``{env:...}`` references of ``text`` (a name that is not
    a variable name, a filter, spaces)."""
    out = []
    for m in _ENV_LOOSE.finditer(text):
        if ENV_REF.fullmatch(m.group(0)) is None:
            out.append(
                f"{m.group(0)!r} is not an environment reference "
                "(letters, digits and '_', no spaces or filters)"
            )
    return out


class TemplateError(FrameworkError):
    """A template that cannot be compiled (bad braces, unknown filter) or rendered."""

    def __init__(self, message: str, *, offset: int = 0) -> None:
        self.offset = offset  # 0-based character offset in the template text
        super().__init__(message)


class MissingValue(TemplateError):
    """The render context has no value for a name the template uses."""

    def __init__(self, name: str, template: str) -> None:
        self.name = name
        self.template = template
        super().__init__(f"template {template!r} needs a value for {{{name}}}, the record has none")


_SLUG_DROP = re.compile(r"[\W_]+")


def slug(value: str) -> str:
    """Lowercase words joined by ``-``; accents dropped, non-Latin letters kept."""
    text = unicodedata.normalize("NFKD", value)
    text = "".join(c for c in text if not unicodedata.combining(c))
    return _SLUG_DROP.sub("-", text.lower()).strip("-")


def _hash(value: str) -> str:
    return hashlib.sha1(value.encode("utf-8"), usedforsecurity=False).hexdigest()[:16]


FILTERS: dict[str, Callable[[str], str]] = {
    "slug": slug,
    "lower": str.lower,
    "lowercase": str.lower,
    "upper": str.upper,
    "uppercase": str.upper,
    "hash": _hash,
    "strip": str.strip,
}

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Characters of a URL that stay as they are when a whole URL is substituted at the start.
_URL_SAFE = ":/?#[]@!$&'()*+,;=%~"


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


class Template:
    """A compiled template. ``names`` is the set of names it references."""

    __slots__ = ("_parts", "env", "names", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        # each part: a literal str, or (name, filters, at_start)
        parts: list[str | tuple[str, tuple[Callable[[str], str], ...], bool]] = []
        names: set[str] = set()
        env: list[str] = []
        literal: list[str] = []
        i, n = 0, len(text)
        while i < n:
            c = text[i]
            if c == "{":
                if text.startswith("{{", i):
                    literal.append("{")
                    i += 2
                    continue
                end = text.find("}", i + 1)
                if end < 0:
                    raise TemplateError(f"unclosed '{{' in template {text!r}", offset=i)
                body = text[i + 1 : end]
                if "{" in body:
                    raise TemplateError(f"'{{' inside a placeholder in {text!r}", offset=i)
                if body.strip().startswith("env:") or body.strip().startswith("env "):
                    ref = ENV_REF.fullmatch(text, i, end + 1)
                    if ref is None:
                        raise TemplateError(env_problems(text[i : end + 1])[0], offset=i)
                    # kept as written: resolved by the crawl, never by a template
                    literal.append(ref.group(0))
                    env.append(ref.group(1))
                    i = end + 1
                    continue
                name, *filter_names = (p.strip() for p in body.split("|"))
                if not _NAME.match(name):
                    raise TemplateError(
                        f"placeholder {{{body}}} does not name a field (letters, digits, '_')",
                        offset=i,
                    )
                filters = []
                for fname in filter_names:
                    fn = FILTERS.get(fname)
                    if fn is None:
                        known = ", ".join(sorted(FILTERS))
                        raise TemplateError(
                            f"unknown filter {fname!r} in {{{body}}} (known: {known})", offset=i
                        )
                    filters.append(fn)
                if literal:
                    parts.append("".join(literal))
                    literal = []
                parts.append((name, tuple(filters), not parts))
                names.add(name)
                i = end + 1
            elif c == "}":
                if text.startswith("}}", i):
                    literal.append("}")
                    i += 2
                    continue
                raise TemplateError(f"single '}}' in template {text!r} (write '}}}}')", offset=i)
            else:
                literal.append(c)
                i += 1
        if literal:
            parts.append("".join(literal))
        self._parts = tuple(parts)
        self.names = frozenset(names)
        self.env = tuple(env)  # names of {env:NAME} references, in order

    def render(self, context: Mapping[str, Any], *, quote: bool = False) -> str:
        """Substitute ``context`` values. ``quote`` URL-quotes each substituted value
        (a value at the very start of the template keeps URL punctuation, so that
        ``{detail_url}/tab`` works)."""
        out: list[str] = []
        for part in self._parts:
            if isinstance(part, str):
                out.append(part)
                continue
            name, filters, at_start = part
            value = context.get(name)
            if value is None:
                raise MissingValue(name, self.text)
            s = _text(value)
            for fn in filters:
                s = fn(s)
            if "{env:" in s:
                # A value comes from a page: it must not smuggle in a reference the
                # crawl would resolve (a body echoing the job's token to the page's host).
                s = s.replace("{env:", "{ env:")
            if quote:
                s = _urlquote(s, safe=_URL_SAFE if at_start else "")
            out.append(s)
        return "".join(out)

    def __repr__(self) -> str:
        return f"Template({self.text!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Template) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)
