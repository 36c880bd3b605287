"""Which addresses a crawl may reach: loopback, private and link-local ones only where
the job started, or where the operator allows them.

A page is hostile, and ``allowed_domains`` names hosts, not addresses: a public site
whose subdomain points at ``127.0.0.1``, a redirect to ``http://169.254.169.254/`` (a
cloud's metadata service) in a job whose ``allowed_domains`` is empty, or a name that
resolves to ``10.0.0.5`` would have the crawler ask the machine's own services (a
database, the ingest endpoint's ``/v1/events``) and store their answers as items.

The rule, per job (:class:`AddressPolicy`):

* an address is **loopback** (``127.0.0.0/8``, ``::1``, and ``0.0.0.0``/``::``, which
  reach the local host too), **link-local** (``169.254.0.0/16``, ``fe80::/10``) or
  **private** (every other address that is not globally routable: RFC 1918, ``fc00::/7``,
  ``100.64.0.0/10``...), else public; an IPv4-mapped IPv6 address is its IPv4 address;
* the classes of the job's start hosts (their addresses, resolved once when the crawl
  opens) are allowed: a start URL on ``127.0.0.1`` is the author's visible choice, and
  its job may follow loopback addresses (``validate`` says so);
* the networks of ``FRAMEWORK_ALLOW_PRIVATE`` (the operator's ``-s``, never a spec's)
  are allowed, and a start host inside one of them counts as public: it lends its class
  to nothing else;
* every other non-public address is refused as ``private_target``.

Where it is checked, so that no hop escapes it: an address in the URL itself (an IP
literal) by :class:`framework.crawl.safety.SafetyMiddleware` before the request is sent
(every redirect and meta refresh hop comes back through it) and by the discovery guard
(no row is made); a name once it is resolved, at connect time, by
:class:`framework.crawl.resolver.GuardedResolver` inside the HTTP client (so a name
that resolves differently a second time, DNS rebinding, is checked on the answer that
is used); and, for clients that resolve names elsewhere (Twisted's, set through
``DOWNLOAD_HANDLERS``), the address a response came from, before it is read. A request
sent through a proxy is checked by its URL only: the proxy resolves the name.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit
from weakref import WeakKeyDictionary

from framework.errors import UsageError

if TYPE_CHECKING:
    from scrapy.crawler import Crawler

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

LOOPBACK = "loopback"
PRIVATE = "private"
LINK_LOCAL = "link-local"
CLASSES = frozenset({LOOPBACK, PRIVATE, LINK_LOCAL})
SETTING = "FRAMEWORK_ALLOW_PRIVATE"

# The target host of the download running in this task (set by the HTTP client), so
# the resolver checks the target's addresses and not a proxy's (resolver.GuardedResolver).
TARGET_HOST: ContextVar[str | None] = ContextVar("framework_target_host", default=None)


def address_class(ip: Address) -> str | None:
    """``"loopback"``, ``"link-local"``, ``"private"``, or None for a public address."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # ::ffff:127.0.0.1 connects to 127.0.0.1
    if ip.is_loopback or ip.is_unspecified:  # 0.0.0.0 reaches the local host as well
        return LOOPBACK
    if ip.is_link_local:
        return LINK_LOCAL
    if not ip.is_global:
        return PRIVATE
    return None


def literal(host: str | None) -> Address | None:
    """``host`` as an IP address when it is one (a URL's IP literal), else None."""
    if not host or not (host[0].isdigit() or ":" in host):
        return None  # a name: cheap to rule out, this runs for every new host
    try:
        return ipaddress.ip_address(host.strip("[]").partition("%")[0])
    except ValueError:
        return None


def address_class_of(host: str) -> str:
    """The class of an IP-literal host, as a refused link's line names it."""
    ip = literal(host)
    return (address_class(ip) if ip is not None else None) or "public"


def parse_networks(values: Iterable[str]) -> tuple[Network, ...]:
    """The networks of ``FRAMEWORK_ALLOW_PRIVATE`` (``10.0.0.0/8``, ``127.0.0.1``...)."""
    out: list[Network] = []
    for value in values:
        value = value.strip()
        if not value:
            continue
        try:
            out.append(ipaddress.ip_network(value, strict=False))
        except ValueError:
            raise UsageError(
                f"{SETTING}: {value!r} is not a network; expected addresses or networks "
                "such as 10.0.0.0/8,127.0.0.1,fd00::/8"
            ) from None
    return tuple(out)


def _resolve(host: str) -> list[Address]:
    try:
        found = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return []  # a start host that does not resolve lends no class: its rows fail as dns
    return [a for a in (literal(str(info[4][0])) for info in found) if a is not None]


@dataclass(frozen=True)
class AddressPolicy:
    """The classes a job's start hosts lend it and the operator's networks (module)."""

    allowed: frozenset[str] = CLASSES
    networks: tuple[Network, ...] = ()

    @classmethod
    def for_job(
        cls,
        start_urls: Sequence[str],
        networks: tuple[Network, ...] = (),
        resolve: Callable[[str], list[Address]] = _resolve,
    ) -> AddressPolicy:
        allowed: set[str] = set()
        for url in start_urls:
            try:
                host = urlsplit(url).hostname
            except ValueError:
                continue
            if not host:
                continue
            ip = literal(host)
            for address in [ip] if ip is not None else resolve(host):
                kind = address_class(address)
                if kind is not None and not _within(address, networks):
                    allowed.add(kind)
        return cls(frozenset(allowed), networks)

    def refused(self, ip: Address) -> str | None:
        """The class of ``ip`` when this job may not reach it, else None."""
        kind = address_class(ip)
        if kind is None or kind in self.allowed or _within(ip, self.networks):
            return None
        return kind

    def host_refused(self, host: str | None) -> tuple[Address, str] | None:
        """(address, class) when ``host`` is an IP literal this job may not reach."""
        ip = literal(host)
        if ip is None:
            return None
        kind = self.refused(ip)
        return None if kind is None else (ip, kind)

    def url_refused(self, url: str) -> bool:
        """Whether ``url`` names, as an IP literal, an address this job may not reach."""
        if self.allowed == CLASSES:
            return False  # a job that started on every class: nothing to look at
        try:
            host = urlsplit(url).hostname
        except ValueError:
            return False
        return self.host_refused(host) is not None


def why_refused(host: str, ip: Address, kind: str) -> str:
    """A refusal's reason, as row notes and the refused-link line say it."""
    where = f"address {ip}" if literal(host) is not None else f"host {host!r} resolves to {ip}"
    return (
        f"{where}, a {kind} address, which the job's start hosts do not lead to "
        f"({SETTING} names the networks a crawl may reach on purpose)"
    )


def _within(ip: Address, networks: tuple[Network, ...]) -> bool:
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return any(ip.version == n.version and ip in n for n in networks)


_POLICIES: WeakKeyDictionary[Crawler, AddressPolicy] = WeakKeyDictionary()


def policy_of(crawler: Crawler) -> AddressPolicy:
    """The job's policy, made once per crawl: the spider's discovery guard, the safety
    middleware and the HTTP client share it (the start hosts are resolved once). A
    spider that is no framework job (no spec) is not limited."""
    policy = _POLICIES.get(crawler)
    if policy is None:
        spec = getattr(crawler.spidercls, "spec", None)
        networks = parse_networks(crawler.settings.getlist(SETTING))
        if spec is None:
            policy = AddressPolicy()
        else:
            policy = AddressPolicy.for_job(list(spec.start_urls), networks)
        _POLICIES[crawler] = policy
    return policy


class PrivateAddress(OSError):
    """A name resolved to an address the job may not reach (raised by the resolver, so
    that aiohttp hands it back inside its DNS error; the HTTP client types it)."""

    def __init__(self, host: str, ip: Address, kind: str) -> None:
        super().__init__(why_refused(host, ip, kind))
        self.host = host
        self.ip = ip
        self.kind = kind
