"""Credentials enter a spec only as ``{env:NAME}``, and only where the crawl resolves
them: no literal user:password@ in a URL, no literal secret query or form parameter,
auth header or session cookie (a spec is stored and shared), references well formed
and to variables a spec may read, header and cookie names and values that an HTTP
request can carry.

The ``login:`` is :mod:`.forms`; it uses :func:`env_refs` and :func:`literal_secret`.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlsplit

from framework.redact import is_secret_key, is_secret_param
from framework.spec.checks.kinds import key_path, kind_paths
from framework.spec.checks.report import Path_, Report, strings
from framework.spec.template import SPEC_ENV_PREFIX, env_names, env_problems, env_refused

__all__ = [
    "HEADER_NAME",
    "cookies",
    "credentials",
    "env_refs",
    "headers",
    "literal_secret",
    "url_secrets",
]

HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


def _literal(text: str) -> str:
    """What is left of a value once its references and placeholders are taken out."""
    return re.sub(r"\{[^{}]*\}", "", text)


def _session_cookie(name: str) -> bool:
    """A cookie name that carries a credential: a secret-looking key, or a session's
    under the names servers give it (``JSESSIONID``, ``PHPSESSID``,
    ``ASP.NET_SessionId``, ``connect.sid``, ``laravel_session``, ``sid``)."""
    norm = name.strip().lower().replace("-", "_")
    return is_secret_key(name) or "sess" in norm or norm.endswith("sid")


def credentials(r: Report) -> None:
    """Credentials enter a spec only as {env:NAME}: no literal userinfo, no literal
    secret query/form parameter or auth header, references only where resolved."""
    for i, url in enumerate(r.spec.start_urls):
        url_secrets(r, ("start_urls", i), url, "start URL")
    headers(r, ("headers",), dict(r.spec.headers), resolved=True)
    if "{env:" in r.spec.key.template:
        r.add(
            key_path(r),
            "an {env:...} reference in the key template (a dedupe key is stored as is)",
            "record fields only",
        )
    cookies(r, ("cookies",), dict(r.spec.cookies))
    paths = kind_paths(r.spec)
    for name, kind in r.spec.page_kinds().items():
        headers(r, (*paths[name], "headers"), dict(kind.headers), resolved=True)
        cookies(r, (*paths[name], "cookies"), dict(kind.cookies))
        for tname, tab in kind.subtabs.items():
            tpath: Path_ = (*paths[name], "subtabs", tname)
            url_secrets(r, (*tpath, "url"), tab.url, "sub-tab URL")
            if tab.body is not None and tab.body.form is not None:
                for k, v in tab.body.form.items():
                    literal_secret(r, (*tpath, "body", "form", k), str(k), v, "form field")
            elif tab.body is not None:
                for p, v in strings(tab.body.json_body, (*tpath, "body", "json")):
                    if isinstance(p[-1], str):
                        literal_secret(r, p, p[-1], v, "JSON body field")


def cookies(r: Report, path: Path_, cookies: dict[str, str]) -> None:
    for name, value in cookies.items():
        cpath: Path_ = (*path, name)
        if not HEADER_NAME.match(str(name)):
            r.add(cpath, f"cookie name {name!r}", "a cookie name such as consent", key=True)
            continue
        text = _literal(value)
        if any(c in text for c in ';,"\\\r\n') or text != text.strip():
            r.add(
                cpath,
                f"cookie {name!r} has a character a cookie value cannot carry",
                "no ';', ',', quote, backslash, line break or surrounding space",
            )
        env_refs(r, cpath, value)
        if _session_cookie(str(name)) and not env_names(value):
            r.add(
                cpath,
                f"a literal credential in cookie '{name}' (it would be stored and shared)",
                '{env:NAME} (`session: "{env:SITE_SESSION}"`)',
            )


def literal_secret(r: Report, path: Path_, name: str, value: str, what: str) -> None:
    if is_secret_param(name) and _literal(value).strip():
        r.add(
            path,
            f"a literal credential in {what} '{name}' (it would be stored and shared)",
            "{env:NAME}, an environment variable the crawl reads when it sends",
        )


def env_refs(r: Report, path: Path_, text: str) -> None:
    """The ``{env:NAME}`` references of ``text``: well formed, and to a variable a
    spec may read (:data:`SPEC_ENV_PREFIX`)."""
    for problem in env_problems(text):
        r.add(path, problem, "{env:NAME}")
    for name in env_names(text):
        why = env_refused(name)
        if why is not None:
            r.add(path, why, f"{{env:{SPEC_ENV_PREFIX}{name}}}, exported under that name")


def url_secrets(r: Report, path: Path_, url: str, what: str) -> None:
    env_refs(r, path, url)
    try:
        parts = urlsplit(url)
    except ValueError:
        return  # reported as a URL problem elsewhere
    if "@" in parts.netloc:
        r.add(
            path,
            f"{what} carries credentials (user:password@)",
            'no credentials in URLs; `headers: {Authorization: "Basic {env:NAME}"}`',
        )
    elif "{env:" in parts.scheme + parts.netloc:
        r.add(
            path,
            f"an {{env:...}} reference in the scheme or host of a {what}",
            "{env:NAME} in the path or query only",
        )
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        literal_secret(r, path, name, value, f"the {what}'s query parameter")


def headers(r: Report, path: Path_, headers: dict[str, str], *, resolved: bool) -> None:
    for name, value in headers.items():
        hpath: Path_ = (*path, name)
        if not HEADER_NAME.match(str(name)):
            r.add(hpath, f"header name {name!r}", "a header name such as X-Api-Key", key=True)
            continue
        if "\r" in value or "\n" in value:
            r.add(hpath, f"header {name!r} has a line break", "one line of text")
        env_refs(r, hpath, value)
        if "{env:" in value and not resolved:
            r.add(
                hpath,
                f"an {{env:...}} reference in DEFAULT_REQUEST_HEADERS '{name}' "
                "(settings are not resolved)",
                'the job-level `headers:` mapping (`Authorization: "Bearer {env:NAME}"`)',
            )
        elif is_secret_key(str(name)) and not env_names(value):
            r.add(
                hpath,
                f"a literal credential in header '{name}' (it would be stored and shared)",
                '{env:NAME} in the job-level `headers:` (`Authorization: "Bearer {env:NAME}"`)',
            )
