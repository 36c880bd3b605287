"""Where a job may go: start URLs are absolute http(s) URLs, allowed domains are host
names that let the start URLs through, and the ship endpoint is an http(s) URL whose
token a spec names only among the variables it may read.

The start URLs and domains are read from the raw data too (:func:`check_raw` of
:mod:`framework.spec.validate`), so they are checked when the models refuse the spec.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from framework.spec.checks.report import Report
from framework.spec.template import ENV_REF, SPEC_ENV_PREFIX, env_refused

__all__ = ["check_places", "check_ship", "http_url", "is_start_url", "without_env"]


def without_env(text: str) -> str:
    """``text`` with each ``{env:NAME}`` replaced by a neutral word (for URL checks)."""
    return ENV_REF.sub("env", text)


def _host_name(domain: str) -> bool:
    """A host name or IPv4 address, as ``allowed_domains`` takes one (a leading or
    trailing dot is dropped): labels of letters, digits, ``-`` and ``_``; no ``*``."""
    labels = domain.strip(".").split(".")
    return all(label and all(c.isalnum() or c in "-_" for c in label) for label in labels)


def http_url(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        parts = urlsplit(value)
        return parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:  # e.g. "http://[oops/": not a URL, a spec problem, not a crash
        return False


def is_start_url(url: str) -> bool:
    """Whether ``url`` may be a start URL: absolute http(s), ``{env:NAME}`` references
    taken as words (what ``start_urls`` is checked with, and ``framework new``)."""
    return http_url(without_env(url))


def check_places(r: Report, urls: Any, domains: Any) -> None:
    """Start URLs are absolute http(s) URLs and allowed domains host names. Read
    from the raw data too (:func:`check_raw`): lists of strings, else nothing."""
    for i, url in enumerate(urls if isinstance(urls, list | tuple) else ()):
        if isinstance(url, str) and not is_start_url(url):
            r.add(
                ("start_urls", i),
                f"start URL {url!r} is not an absolute http(s) URL",
                "http://host/path",
            )
    hosts: list[str] = []
    for i, domain in enumerate(domains if isinstance(domains, list | tuple) else ()):
        if not isinstance(domain, str):
            continue
        if not _host_name(domain):
            wild = domain.lstrip("*.")
            r.add(
                ("allowed_domains", i),
                f"allowed domain {domain!r} is not a host name",
                f"{wild} (its subdomains are allowed with it)"
                if domain.startswith("*") and _host_name(wild)
                else "example.org",
            )
        else:
            hosts.append(domain.strip(".").lower())
    if not hosts:  # none given (every host of the start URLs), or none readable
        return
    for i, url in enumerate(urls if isinstance(urls, list | tuple) else ()):
        if not isinstance(url, str) or not is_start_url(url):
            continue
        host = (urlsplit(without_env(url)).hostname or "").lower()
        if host and not any(host == d or host.endswith("." + d) for d in hosts):
            r.add(
                ("start_urls", i),
                f"start URL host {host!r} is not in allowed_domains: the crawl would refuse it",
                f"one of {', '.join(hosts)} (or a subdomain), or add {host!r} to them",
            )


def check_ship(r: Report) -> None:
    """``ship:``: the endpoint, its fallback path and the variable of its token."""
    ship = r.spec.ship
    token_env = ship.token_env
    if token_env is not None and env_refused(token_env) is not None:
        # the spec names the endpoint too: any other variable could be sent there
        r.add(
            ("ship", "token_env"),
            f"ship token_env {token_env!r}: a spec names only variables {SPEC_ENV_PREFIX}* "
            "(with `--token-env` or FRAMEWORK_SHIP_TOKEN_ENV, the operator names any)",
            f"{SPEC_ENV_PREFIX}{token_env}",
        )
    if ship.endpoint is not None and not http_url(ship.endpoint):
        r.add(
            ("ship", "endpoint"),
            f"ship endpoint {ship.endpoint!r} is not an http(s) URL",
            "http://host/v1/items",
        )
    if ship.fallback_path is not None and not ship.fallback_path.startswith("/"):
        r.add(("ship", "fallback_path"), "fallback path does not start with '/'", "/v1/items")
