"""Forms a crawl submits: a page kind's ``forms:`` (crawl/forms.py: the form's
selector, the kind of its response, the field templates, credentials only in a POST
body) and the ``login:`` (crawl/session.py: where it goes, what it fills, how it
judges that it worked or that the session expired).
"""

from __future__ import annotations

from urllib.parse import urljoin, urlsplit

from framework.spec.checks.expressions import (
    jsonpath,
    regex,
    selector,
    selectors,
    template,
)
from framework.spec.checks.kinds import Graph
from framework.spec.checks.places import http_url, without_env
from framework.spec.checks.report import Path_, Report, strings
from framework.spec.checks.secrets import HEADER_NAME, env_refs, literal_secret, url_secrets
from framework.spec.template import env_names

__all__ = ["forms", "login"]


def forms(r: Report, g: Graph, name: str) -> None:
    """A page kind's ``forms:`` (crawl/forms.py): the form's selector, the kind of its
    response, the field templates, and credentials only in a POST body."""
    kind, path, kinds = g.kinds[name], g.paths[name], g.kinds
    known = g.known_names(name)
    for i, form in enumerate(kind.forms):
        fpath = r.item((*path, "forms"), i)
        if kind.format.value != "html":
            r.add(
                fpath,
                f"a form on a `format: {kind.format.value}` page is never submitted",
                "`forms:` on an HTML page kind",
                key=True,
            )
        selectors(r, fpath, form.css, form.xpath)
        if form.to not in kinds:
            r.add(
                (*fpath, "to"),
                f"`to: {form.to}` names no page kind",
                f"one of: {', '.join(kinds)}",
            )
        for fname, fld in form.fields.items():
            vpath: Path_ = (*fpath, "fields", fname)
            texts = [fld.value] if fld.value is not None else list(fld.values or ())
            raw = r.raw(vpath)
            for j, text in enumerate(texts):
                tpath: Path_ = vpath
                if isinstance(raw, list):
                    tpath = (*vpath, j)
                elif isinstance(raw, dict):
                    tpath = (*vpath, "value") if fld.value is not None else (*vpath, "values", j)
                template(r, tpath, text, known, "form field template")
                env_refs(r, tpath, text)
                if env_names(text) and form.method != "POST":
                    r.add(
                        tpath,
                        f"an {{env:...}} reference in form field '{fname}' of a form "
                        "whose method the page decides (a GET would put it in a URL)",
                        "`method: POST` on this form",
                    )
                literal_secret(r, tpath, str(fname), text, "form field")


def login(r: Report) -> None:
    """``login:``: where it goes, what it fills, how it judges (crawl/session.py)."""
    login = r.spec.login
    if login is None:
        return
    path: Path_ = ("login",)
    url = urljoin(r.spec.start_urls[0], without_env(login.url))
    url_secrets(r, (*path, "url"), login.url, "login URL")
    if not http_url(url):
        r.add((*path, "url"), f"login URL {login.url!r} is not http(s)", "/login")
    else:
        host = (urlsplit(url).hostname or "").lower()
        allowed = r.spec.allowed_domains
        hosts = (
            list(allowed)
            if allowed is not None
            else [urlsplit(without_env(u)).hostname or "" for u in r.spec.start_urls]
        )
        if hosts and not any(host == h or host.endswith("." + h) for h in hosts):
            r.add(
                (*path, "url"),
                f"login URL host {host!r} is not one the job may request",
                f"a host of start_urls or allowed_domains ({', '.join(hosts)})",
            )
    if login.form is not None:
        selector(r, (*path, "form"), login.form, kind="css")
    for name, value in login.fields.items():
        fpath: Path_ = (*path, "fields", name)
        env_refs(r, fpath, value)
        literal_secret(r, fpath, str(name), value, "login field")
    for p, v in strings(login.json_body, (*path, "json")):
        env_refs(r, p, v)
        if isinstance(p[-1], str):
            literal_secret(r, p, p[-1], v, "login JSON field")
    if login.success.css is not None:
        selector(r, (*path, "success", "css"), login.success.css, kind="css")
    if login.expired.css is not None:
        selector(r, (*path, "expired", "css"), login.expired.css, kind="css")
    if login.expired.url is not None:
        regex(r, (*path, "expired", "url"), login.expired.url)
    if login.token is not None:
        tpath: Path_ = (*path, "token")
        jsonpath(r, (*tpath, "json"), login.token.json_path)
        if not HEADER_NAME.match(login.token.header):
            r.add((*tpath, "header"), f"header name {login.token.header!r}", "Authorization")
        if "{token}" not in login.token.value or "\n" in login.token.value:
            r.add((*tpath, "value"), "a token header without {token}", '"Bearer {token}"')
    if r.spec.settings.get("COOKIES_ENABLED") is False and login.token is None:
        r.add(
            ("settings", "COOKIES_ENABLED"),
            "COOKIES_ENABLED: false with a `login:` (the session is a cookie)",
            "cookies enabled (leave the setting out)",
        )
