"""The door's limits against hostile or broken clients, as plain values with their
defaults: what ``framework ingest serve`` offers as options and docs/ingest-contract.md
documents ("Limits"). This module owns the numbers only; :mod:`framework_ingest.guard`
enforces the connection ones, :mod:`framework_ingest.app` the body ones.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass

DEFAULT_LIMIT_CONCURRENCY = 256
DEFAULT_TIMEOUT_HEADER = 10.0  # seconds to send a complete request line and headers
DEFAULT_TIMEOUT_KEEP_ALIVE = 5.0  # seconds an idle connection stays open after a response
DEFAULT_TIMEOUT_BODY = 60.0  # seconds from the end of a request's head to the end of its body
MAX_AUTO_CONNECTIONS = 1024
# The largest body of a write that carries one record (an item, a consumer cursor) and
# the largest batch element, in bytes: twice the crawler's default record size
# (FRAMEWORK_MAX_ITEM_BYTES, 1 MiB, counted as stored JSON), so such a record fits with
# its envelope (keys, hash, URL) and its JSON escapes. A batch's body has its own,
# larger cap (``--max-body``).
DEFAULT_MAX_ITEM_BYTES = 2 * 1024 * 1024
DEFAULT_MAX_BATCH = 500  # items in one batch
DEFAULT_MAX_BODY = 16 * 1024 * 1024  # bytes of a batch's whole body


def auto_connection_limit() -> int:
    """Half the soft ``RLIMIT_NOFILE`` (at most 1024): the other half stays for the
    database connections of the worker threads (SQLite: two descriptors per thread),
    logs and the listener."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_AUTO_CONNECTIONS
    return max(8, min(MAX_AUTO_CONNECTIONS, soft // 2))


@dataclass(frozen=True)
class ServerLimits:
    """Connection-level limits of one server; ``limit_connections=None`` derives the
    cap from the process's descriptor limit (:func:`auto_connection_limit`)."""

    limit_connections: int | None = None
    limit_concurrency: int = DEFAULT_LIMIT_CONCURRENCY
    timeout_header: float = DEFAULT_TIMEOUT_HEADER
    timeout_keep_alive: float = DEFAULT_TIMEOUT_KEEP_ALIVE

    def connections(self) -> int:
        return self.limit_connections or auto_connection_limit()


@dataclass(frozen=True)
class BodyLimits:
    """What a write's body may be: a batch's items and bytes, the bytes of one record
    (an item, a consumer cursor, each batch element), and the seconds the body may take
    to arrive after the request's head."""

    max_batch: int = DEFAULT_MAX_BATCH
    max_body: int = DEFAULT_MAX_BODY
    max_item: int = DEFAULT_MAX_ITEM_BYTES
    timeout: float = DEFAULT_TIMEOUT_BODY

    @property
    def max_record_body(self) -> int:
        """The cap of a body that carries one record: an item is never bigger alone
        than it may be inside a batch."""
        return min(self.max_item, self.max_body)


#: The door's body limits when none are given (``framework ingest serve``'s defaults).
DEFAULT_BODIES = BodyLimits()
