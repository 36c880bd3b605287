"""Errors of the ingest plugin, derived from the project's one error tree.

    framework.errors.UsageError  (exit 2)
    +-- IngestConfigError        a bad ``--db`` URL, a missing token variable, bad options
    framework.errors.FrameworkError (exit 1)
    +-- BackendUnavailable       the database is locked past its timeout or unreachable;
                                 the HTTP layer answers 503 with ``Retry-After``
        +-- TransactionConflict  the database aborted a transaction to break a deadlock or a
                                 serialization conflict; the store retries it a few times
    +-- StaleClaim      (exit 5) ``done``/``failed`` presented a lease that is no longer
                                 the item's (reaped, re-claimed or updated): the outcome
                                 was refused; the worker must drop its result
    +-- ClientGone               the client hung up before its request body was complete;
                                 the app logs one INFO line and answers nobody

This module owns nothing else; the CLI turns these into exit codes.
"""

from __future__ import annotations

from framework.errors import FrameworkError, UsageError

# Not one of the core's codes (0-4): a leased-queue outcome only the handoff has.
EXIT_STALE = 5


class IngestConfigError(UsageError):
    """The ingest endpoint was called or configured wrongly: a human fixes the call."""


class BackendUnavailable(FrameworkError):
    """The database cannot serve right now (locked past the timeout, connection lost)."""


class StaleClaim(FrameworkError):
    """A finish was refused because its claim is no longer the item's current lease."""

    exit_code = EXIT_STALE


class ClientGone(FrameworkError):
    """A request's client disconnected mid-body: nothing to answer, nothing written."""


class TransactionConflict(BackendUnavailable):
    """The database rolled a transaction back to resolve a conflict; running it again works."""
