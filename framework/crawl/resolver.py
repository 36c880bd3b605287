"""The HTTP client's name lookups checked against the job's address policy
(:mod:`framework.crawl.addresses`): a name once it is resolved, at connect time, so that
a name that resolves differently a second time (DNS rebinding) is checked on the answer
that is used.

Apart from addresses.py because it subclasses aiohttp's resolver: only the HTTP client
(framework/crawl/http.py) needs it, and the commands that never download (reparse,
preview, validate, status) import addresses.py without importing aiohttp (~40 ms of a
reparse's start).
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING, Any

from aiohttp.abc import AbstractResolver

from framework.crawl.addresses import CLASSES, TARGET_HOST, AddressPolicy, PrivateAddress, literal

if TYPE_CHECKING:
    from aiohttp.abc import ResolveResult

__all__ = ["GuardedResolver", "guard_connector"]


class GuardedResolver(AbstractResolver):
    """aiohttp's resolver, with the answer checked before any connection is made.

    Every address of the answer must be allowed (a name that resolves to a public and a
    private address would otherwise connect to the private one when the public one
    fails). Only the target's own name is checked: a proxy's name (the operator's
    choice) is not, told apart by :data:`TARGET_HOST`. A lookup shared by concurrent
    downloads of one name runs in the first one's context, whose target is that name."""

    def __init__(self, inner: AbstractResolver, policy: AddressPolicy) -> None:
        self.inner = inner
        self.policy = policy

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        found = await self.inner.resolve(host, port, family)
        target = TARGET_HOST.get()
        if target is not None and host.rstrip(".").lower() != target:
            return found
        for entry in found:
            ip = literal(str(entry["host"]))
            kind = None if ip is None else self.policy.refused(ip)
            if ip is not None and kind is not None:
                raise PrivateAddress(host.rstrip("."), ip, kind)
        return found

    async def close(self) -> None:
        await self.inner.close()


def guard_connector(connector: Any, policy: AddressPolicy) -> None:
    """Put :class:`GuardedResolver` around an aiohttp ``TCPConnector``'s resolver.

    aiohttp takes a resolver only when the connector is built, and Scrapy's handler
    builds it; its ``_resolver`` is what every lookup goes through (aiohttp 3.x, the
    version Scrapy 2.19 needs; tests/crawl/test_crawl_private.py sees a name refused)."""
    if policy.allowed == CLASSES:
        return  # nothing to refuse: no wrapper on the lookups
    connector._resolver = GuardedResolver(connector._resolver, policy)
