"""Which ingest endpoint a ship run sends to, and whether it may send there.

Owns the choice among ``--endpoint``, the job spec's ``ship.endpoint`` and
``$FRAMEWORK_SHIP_ENDPOINT`` (a flag wins over the spec, which wins over the
environment), and one rule on top: a job spec is a file that travels (copied from a
colleague, a repository, an example), so the endpoint it names is used as it is only
on this machine (a loopback host). Anywhere else it is used only when the operator
confirmed it: ``--endpoint`` (which then replaces it anyway), or
``$FRAMEWORK_SHIP_ENDPOINT`` naming the same origin (scheme, host, port). Else the
run is refused with :class:`EndpointNotConfirmed` (exit 2). It also says when a token
would cross the network in clear (:func:`plain_http_warning`), and how a run names its
endpoint without credentials (:func:`shown_endpoint`, :func:`safe_endpoint`). It never
sends anything and never reads the token itself.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

from framework.errors import UsageError
from framework.terminal import printable
from framework_ship.client import items_url

ENV_ENDPOINT = "FRAMEWORK_SHIP_ENDPOINT"
FROM_FLAG = "--endpoint"
FROM_SPEC = "the job spec's ship.endpoint"
FROM_ENV = f"${ENV_ENDPOINT}"


class EndpointNotConfirmed(UsageError):
    """A job spec's endpoint on another host, which the operator did not confirm."""


@dataclass(frozen=True)
class Endpoint:
    """The chosen endpoint (None: none given), where it came from, and, when the run
    may not use it, why (one line)."""

    url: str | None
    source: str = ""
    refused: str | None = None


def is_loopback(url: str) -> bool:
    """Whether ``url`` points at this machine: ``localhost`` or a loopback address
    (``127.0.0.0/8``, ``::1``, ``::ffff:127.x.y.z``). Any other name may resolve
    anywhere, so it is not."""
    host = (urlsplit(url).hostname or "").lower()
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return bool(address.is_loopback or (mapped is not None and mapped.is_loopback))


def origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) of ``url``, the port filled in for http and https."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None:
        port = {"http": 80, "https": 443}.get(scheme)
    return scheme, (parts.hostname or "").lower(), port


def choose_endpoint(flag: str | None, spec: str | None, env: str | None) -> Endpoint:
    """The endpoint of a run from its three sources (empty strings count as unset)."""
    if flag:
        return Endpoint(flag, FROM_FLAG)
    if spec:
        if is_loopback(spec) or (env and origin(env) == origin(spec)):
            return Endpoint(spec, FROM_SPEC)
        other = ""
        if env:
            shown = printable(origin(env)[1] or env, keep="")
            other = f" ({FROM_ENV} names another one, {shown})"
        host = printable(urlsplit(spec).hostname or spec, keep="")
        return Endpoint(
            spec,
            FROM_SPEC,
            refused=(
                f"{FROM_SPEC} sends to {host}, not to this machine, and nothing confirms "
                f"it{other}: a job spec copied from elsewhere must not choose where the "
                f"harvest goes; pass --endpoint URL, or set {ENV_ENDPOINT} to that "
                "endpoint"
            ),
        )
    if env:
        return Endpoint(env, FROM_ENV)
    return Endpoint(None)


def plain_http_warning(url: str, token: str | None) -> str | None:
    """A warning when a bearer token would go over plain http to another machine
    (anyone on the way reads it, and can replay it), else None."""
    if not token or urlsplit(url).scheme.lower() != "http" or is_loopback(url):
        return None
    host = printable(urlsplit(url).hostname or url, keep="")
    return (
        f"the bearer token goes to {host} over plain http: anyone on the way can read "
        "it (and the items); use https"
    )


def shown_endpoint(endpoint: str) -> str:
    """Where a run would send, as a dry run names it: the items URL, no credentials."""
    if not endpoint:
        return (
            "(none: a real run needs --endpoint, ship.endpoint in the job spec or "
            "$FRAMEWORK_SHIP_ENDPOINT)"
        )
    try:
        return items_url(endpoint)
    except ValueError:
        return safe_endpoint(endpoint)


def safe_endpoint(endpoint: str) -> str:
    """The endpoint as events.jsonl keeps it: no user, password, query or fragment."""
    parts = urlsplit(endpoint)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return f"{parts.scheme}://{host}{parts.path}"


__all__ = [
    "ENV_ENDPOINT",
    "Endpoint",
    "EndpointNotConfirmed",
    "choose_endpoint",
    "is_loopback",
    "origin",
    "plain_http_warning",
    "safe_endpoint",
    "shown_endpoint",
]
