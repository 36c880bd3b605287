"""Bearer-token authentication of the ``/v1`` routes.

No ``Authorization`` header (or not a Bearer one) -> 401 with ``WWW-Authenticate: Bearer``;
a Bearer token that is not the configured one -> 403. The comparison is constant-time
(``hmac.compare_digest``). This module owns that check; it never logs, echoes or stores
the presented or the configured token.
"""

from __future__ import annotations

import hmac

from framework_ingest.problems import ProblemError


class BearerAuth:
    """Checks ``Authorization`` headers against one token (``None`` disables the check)."""

    def __init__(self, token: str | None) -> None:
        self._token = token.encode("utf-8") if token else None

    @property
    def enabled(self) -> bool:
        return self._token is not None

    def __repr__(self) -> str:  # never show the token, even in a debugger or a traceback
        return f"BearerAuth(enabled={self.enabled})"

    def check(self, authorization: str | None) -> None:
        """Raise a 401/403 :class:`ProblemError` unless ``authorization`` carries the token."""
        if self._token is None:
            return
        scheme, _, presented = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not presented.strip():
            raise ProblemError(
                401,
                "unauthorized",
                "send 'Authorization: Bearer <token>'",
                headers={"WWW-Authenticate": 'Bearer realm="ingest"'},
            )
        # latin-1 is how the header arrived; encoding back gives the bytes that were sent.
        given = presented.strip().encode("latin-1", errors="replace")
        if not hmac.compare_digest(given, self._token):
            raise ProblemError(403, "forbidden", "the bearer token was not accepted")
