"""Credentials of a crawl: ``{env:NAME}`` references, resolved late, masked everywhere.

A spec names its credentials only as environment-variable references, ``{env:NAME}``,
in its start URLs, sub-tab URL and body templates, its job and page-kind ``headers:`` and
``cookies:`` and its ``login:``. Rows store them unresolved. This module owns the two
directions:

* **resolve**: :meth:`Secrets.resolve` turns a row (URL, body) and the job's headers
  into what is sent, at the moment the spider builds the Scrapy request. A variable
  that is missing, empty or too short to be masked reliably is a
  :class:`~framework.errors.UsageError` when the spider class is built, before any
  request; the message names the variable, never its value.
* **mask**: the resolved value comes back (``response.url``, links and pagination built
  from it, a page that echoes it, an error text). :meth:`Secrets.mask` replaces every
  form of a value (as is, URL-quoted, form-encoded, JSON-escaped) by its ``{env:NAME}``
  reference, so what is written keeps working as a template and names no secret. The
  crawl runtime masks each outcome before it is committed (:meth:`Secrets.mask_outcome`)
  and sets the workspace logs' masker; :meth:`Secrets.mask_logs` masks every log record
  of the process (Scrapy's own "Error downloading <GET url>" included).

Only the names a spec declares are ever read from the environment, so a page that
writes ``{env:HOME}`` into a link resolves to nothing; a discovered link that carries a
``{env:...}`` text of its own is defused (its ``{`` percent-encoded) before any value
is masked back in. This module must not decide where rows or logs are written.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, quote_plus

from framework.errors import UsageError
from framework.spec.template import ENV_REF, Template, env_names, env_refused

if TYPE_CHECKING:
    from framework.spec.models import JobSpec
    from framework.workspace import Outcome, Row

__all__ = ["MIN_SECRET_CHARS", "Secrets", "spec_env_names"]

# A shorter value would mask ordinary text ("1", "abc") all over the workspace.
MIN_SECRET_CHARS = 4
# A `{env:NAME}` that a form encoding turned into %7Benv%3ANAME%7D.
_FORM_REF = re.compile(r"%7Benv%3A([A-Za-z_][A-Za-z0-9_]*)%7D", re.IGNORECASE)


def spec_env_names(spec: JobSpec) -> list[str]:
    """Every variable a spec refers to, in the order written, once each."""
    names: list[str] = []
    for url in spec.start_urls:
        names.extend(env_names(url))
    for value in [*spec.headers.values(), *spec.cookies.values()]:
        names.extend(env_names(value))
    if spec.login is not None:
        names.extend(env_names(spec.login.url))
        for text in [*spec.login.fields.values(), *_strings(spec.login.json_body)]:
            names.extend(env_names(text))
    for kind in spec.page_kinds().values():
        for value in [*kind.headers.values(), *kind.cookies.values()]:
            names.extend(env_names(value))
        for tab in kind.subtabs.values():
            names.extend(Template(tab.url).env)
            if tab.body is not None:
                for text in _strings(tab.body.form or tab.body.json_body):
                    names.extend(env_names(text))
        for form in kind.forms:  # POST form fields (framework/crawl/forms.py)
            for fld in form.fields.values():
                for value in [fld.value or "", *(fld.values or ())]:
                    names.extend(env_names(value))
    return list(dict.fromkeys(names))


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list | tuple):
        return [s for v in value for s in _strings(v)]
    return []


class Secrets:
    """The resolved values of one spec's ``{env:NAME}`` references."""

    def __init__(
        self,
        values: Mapping[str, str],
        headers: Mapping[str, str] | None = None,
        tab_urls: Mapping[str, Iterable[str]] | None = None,
        *,
        kind_headers: Mapping[str, Mapping[str, str]] | None = None,
        cookies: Mapping[str, str] | None = None,
        kind_cookies: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        self.values = dict(values)
        self._headers = dict(headers or {})  # the job's headers, unresolved
        # page kind -> its own headers and cookies (over the job's), unresolved; a
        # sub-tab row ("detail.rulings") is sent with its page kind's
        self._kind_headers = {k: dict(v) for k, v in (kind_headers or {}).items() if v}
        self._cookies = dict(cookies or {})
        self._kind_cookies = {k: dict(v) for k, v in (kind_cookies or {}).items() if v}
        # sub-tab row kind -> the names its URL template refers to (the only ones its
        # rows may carry; any other came with the page URL it was joined to)
        self._tab_urls = {k: frozenset(v) for k, v in (tab_urls or {}).items()}
        forms: dict[str, str] = {}
        for name, value in self.values.items():
            placeholder = "{env:" + name + "}"
            for form in (
                value,
                quote(value, safe=""),  # how resolve() puts it in a URL
                quote(value),
                quote_plus(value),  # a form body, or urlencode() of a query
                json.dumps(value)[1:-1],  # a JSON body (ASCII-escaped)
            ):
                forms.setdefault(form, placeholder)
        self._mask_forms(forms)

    def _mask_forms(self, forms: dict[str, str]) -> None:
        # Longest first: a value that contains another is replaced whole.
        self._forms = sorted(forms.items(), key=lambda kv: -len(kv[0]))

    def add_mask(self, label: str, value: str) -> None:
        """Mask ``value`` too from now on, as ``{label}``: a value the crawl learnt (a
        session cookie, a login form's token), never one the spec names. Too short a
        value is left alone (it would mask ordinary text)."""
        if len(value) < MIN_SECRET_CHARS:
            return
        forms = dict(self._forms)
        placeholder = "{" + label + "}"
        for form in (value, quote(value, safe=""), quote_plus(value), json.dumps(value)[1:-1]):
            forms.setdefault(form, placeholder)
        self._mask_forms(forms)

    @classmethod
    def from_spec(
        cls, spec: JobSpec, *, where: str = "the spec", environ: Mapping[str, str] | None = None
    ) -> Secrets:
        """Read the spec's variables from the environment, or say which one is unusable
        (a :class:`UsageError`, before any request). ``where`` names the spec file."""
        env = os.environ if environ is None else environ
        values: dict[str, str] = {}
        for name in spec_env_names(spec):
            refused = env_refused(name)
            if refused is not None:  # validate says so first; this is the last gate
                raise UsageError(f"{where}: {refused}")
            value = env.get(name)
            if value is None:
                raise UsageError(
                    f"{where}: environment variable {name} is not set "
                    f"(the spec refers to it as {{env:{name}}}); export it before crawling"
                )
            if len(value) < MIN_SECRET_CHARS:
                raise UsageError(
                    f"{where}: environment variable {name} is empty or shorter than "
                    f"{MIN_SECRET_CHARS} characters, too short to be kept out of the "
                    "workspace reliably"
                )
            if "\r" in value or "\n" in value:
                raise UsageError(f"{where}: environment variable {name} holds a line break")
            values[name] = value
        tab_urls = {
            f"{kind}.{tname}": Template(tab.url).env
            for kind, page in spec.page_kinds().items()
            for tname, tab in page.subtabs.items()
        }
        kinds = spec.page_kinds()
        return cls(
            values,
            spec.headers,
            tab_urls,
            kind_headers={k: page.headers for k, page in kinds.items()},
            cookies=spec.cookies,
            kind_cookies={k: page.cookies for k, page in kinds.items()},
        )

    # ------------------------------------------------------------------ resolve
    def resolve(
        self, row: Row, headers: Mapping[str, str]
    ) -> tuple[str, bytes | None, dict[str, str]]:
        """What to send for ``row``: its URL and body with references resolved, and the
        job's headers (resolved) under the request's own ``headers``."""
        return self.resolve_request(row.kind, row.url, row.body, row.body_type, headers)

    def resolve_request(
        self,
        kind: str,
        url: str,
        body: str | None,
        body_type: str | None,
        headers: Mapping[str, str],
    ) -> tuple[str, bytes | None, dict[str, str]]:
        """:meth:`resolve` for a request that has no row yet (a spider's own request):
        the same resolution, from the fields a row would hold."""
        sent_url = ENV_REF.sub(lambda m: self._value(m, quote_as="url"), url)
        sent_body: bytes | None = None
        if body is not None:
            text = body
            if body_type == "form":  # urlencode() wrote {env:X} as %7Benv%3AX%7D
                text = _FORM_REF.sub(lambda m: self._value(m, quote_as="form"), text)
                text = ENV_REF.sub(lambda m: self._value(m, quote_as="form"), text)
            elif body_type == "json":
                text = ENV_REF.sub(lambda m: self._value(m, quote_as="json"), text)
            else:
                text = ENV_REF.sub(lambda m: self._value(m, quote_as="text"), text)
            sent_body = text.encode("utf-8")
        page_kind = kind.partition(".")[0]
        out = {
            k: self.resolve_text(v)
            for k, v in {**self._headers, **self._kind_headers.get(page_kind, {})}.items()
        }
        out.update(headers)
        return sent_url, sent_body, out

    def resolve_text(self, text: str, *, quote_as: str = "text") -> str:
        """``text`` with the spec's references resolved (``quote_as``: text, url, form
        or json, how the value is written where it goes)."""
        return ENV_REF.sub(lambda m: self._value(m, quote_as=quote_as), text)

    def cookies_for(self, kind: str | None) -> dict[str, str]:
        """The cookies the spec adds to a request of ``kind`` (None: the job's only, as
        for a login), resolved; a sub-tab row kind is sent with its page kind's."""
        own = self._kind_cookies.get(kind.partition(".")[0], {}) if kind else {}
        return {k: self.resolve_text(v) for k, v in {**self._cookies, **own}.items()}

    def _value(self, m: re.Match[str], *, quote_as: str) -> str:
        value = self.values.get(m.group(1))
        if value is None:  # not a name the spec declared: never read, left as text
            return m.group(0)
        if quote_as == "url":
            return quote(value, safe="")
        if quote_as == "form":
            return quote_plus(value)
        if quote_as == "json":
            return json.dumps(value)[1:-1]
        return value

    # --------------------------------------------------------------------- mask
    def mask(self, text: str) -> str:
        """``text`` with every form of every value replaced by its reference."""
        for form, placeholder in self._forms:
            if form in text:
                text = text.replace(form, placeholder)
        return text

    def mask_value(self, value: Any) -> Any:
        """A copy of ``value`` (mappings, lists, strings at any depth) masked."""
        if not self._forms:
            return value
        if isinstance(value, str):
            return self.mask(value)
        if isinstance(value, Mapping):
            return {self.mask_value(k): self.mask_value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.mask_value(v) for v in value]
        return value

    def mask_outcome(self, outcome: Outcome) -> Outcome:
        """The outcome as it may be committed: no value in its rows, items or error."""
        if not self._forms:
            return outcome
        m, mv = self.mask, self.mask_value
        rows = []
        for row in outcome.new_rows:
            # A reference the spec did not put there came from a page (a link, a
            # redirect target): it is text, never resolved.
            own = self._tab_urls.get(row.kind, frozenset()) if "tab" in row.context else None
            url = _defuse_foreign(row.url, own or frozenset())
            rows.append(
                dataclasses.replace(
                    row,
                    url=m(url),
                    body=m(row.body) if row.body is not None else None,
                    context=mv(row.context),
                )
            )
        return dataclasses.replace(
            outcome,
            error=m(outcome.error) if outcome.error is not None else None,
            new_rows=rows,
            items=[
                dataclasses.replace(
                    i, dedupe_key=m(i.dedupe_key), source_id=m(i.source_id), data=mv(i.data)
                )
                for i in outcome.items
            ],
            parts=[
                dataclasses.replace(p, dedupe_key=m(p.dedupe_key), value=mv(p.value))
                for p in outcome.parts
            ],
            holds=[
                dataclasses.replace(
                    h,
                    dedupe_key=m(h.dedupe_key),
                    source_id=m(h.source_id),
                    data=mv(h.data),
                    reasons=mv(h.reasons),
                )
                for h in outcome.holds
            ],
        )

    def mask_logs(self) -> None:
        """Mask every log record of this process from now on (idempotent)."""
        if self._forms and self not in _LOG_MASKERS:
            _LOG_MASKERS.append(self)
            _install_record_factory()


def _defuse_foreign(url: str, own: frozenset[str]) -> str:
    """``url`` with every reference not named in ``own`` made text: ``%7Benv:X}`` is
    the same URL to a server, and no longer a reference."""
    if "{env:" not in url:
        return url
    return ENV_REF.sub(lambda r: r.group(0) if r.group(1) in own else "%7B" + r.group(0)[1:], url)


_LOG_MASKERS: list[Secrets] = []
_factory_installed = False


def _install_record_factory() -> None:
    # A record factory, not a handler filter: it sees every record of every logger,
    # whichever handlers Scrapy (or LOG_FILE) installs before or after this runs.
    global _factory_installed
    if _factory_installed:
        return
    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        _mask_record(record)
        return record

    logging.setLogRecordFactory(factory)
    _factory_installed = True


def _mask_record(record: logging.LogRecord) -> None:
    try:
        message = record.getMessage()
    except Exception:  # a broken format string: logging reports it, unmasked args stay out
        record.msg, record.args = str(record.msg), ()
        message = record.msg
    masked = message
    for secrets in _LOG_MASKERS:
        masked = secrets.mask(masked)
    if masked != message or record.args:
        record.msg, record.args = masked, ()
    if record.exc_info and not record.exc_text:
        text = logging.Formatter().formatException(record.exc_info)
        for secrets in _LOG_MASKERS:
            text = secrets.mask(text)
        record.exc_text = text
