"""Problem details (RFC 9457, ``application/problem+json``): every error the endpoint answers.

Each kind of problem has a stable ``type`` URI (``urn:framework:ingest:<slug>``) that
clients may switch on; ``errors`` names the offending fields. This module owns the
problem vocabulary (plain dicts, no HTTP framework; the app renders them); it must never
put request headers (and so never a token) into a problem.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

PROBLEM_MEDIA_TYPE = "application/problem+json"

TITLES = {
    "malformed-json": "Malformed JSON",
    "validation": "Invalid item",
    "too-large": "Payload too large",
    "request-timeout": "Request body too slow",
    "batch-too-large": "Too many items in the batch",
    "unauthorized": "Authentication required",
    "signature-required": "Signed request required",
    "signature-invalid": "Signature refused",
    "signature-expired": "Signature outside the allowed clock skew",
    "signature-replayed": "Signature already used",
    "unsupported-media-type": "Unsupported Content-Type",
    "events-purged": "Events already purged",
    "forbidden": "Token refused",
    "not-found": "Not found",
    "method-not-allowed": "Method not allowed",
    "idempotency-key-reused": "Idempotency-Key reused with a different body",
    "idempotency-key-in-flight": "A request with this Idempotency-Key is still in flight",
    "unavailable": "Storage unavailable, retry later",
    "internal": "Internal server error",
}


def problem(
    status: int,
    slug: str,
    detail: str | None = None,
    errors: Sequence[Mapping[str, str]] | None = None,
) -> dict[str, Any]:
    """One problem as a plain dict (what the batch route embeds per element)."""
    body: dict[str, Any] = {
        "type": f"urn:framework:ingest:{slug}",
        "title": TITLES[slug],
        "status": status,
    }
    if detail is not None:
        body["detail"] = detail
    if errors:
        body["errors"] = [dict(e) for e in errors]
    return body


class ProblemError(Exception):
    """Raised by a route to answer with a problem; the app turns it into a response."""

    def __init__(
        self,
        status: int,
        slug: str,
        detail: str | None = None,
        errors: Sequence[Mapping[str, str]] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(detail or TITLES[slug])
        self.body = problem(status, slug, detail, errors)
        self.headers = dict(headers or {})

    @classmethod
    def from_body(
        cls, body: dict[str, Any], headers: Mapping[str, str] | None = None
    ) -> ProblemError:
        """A problem built with :func:`problem` and extended with members of its own."""
        slug = str(body["type"]).rsplit(":", 1)[-1]
        error = cls(int(body["status"]), slug, body.get("detail"), headers=headers)
        error.body = body
        return error
