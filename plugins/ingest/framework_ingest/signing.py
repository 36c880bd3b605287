"""Signed deliveries: verify ``X-Framework-Signature`` on writes.

The header is ``t=<unix seconds>,v1=<hex>[,v1=<hex>...]`` where each hex is
``HMAC-SHA256(secret, f"{t}.".encode() + exact raw body)`` (the scheme Stripe and GitHub
use for webhooks). The server holds one or more secrets (two during a rotation) and
accepts a request when any ``v1`` matches any secret (constant-time compare), ``t`` is
within ``skew`` seconds of its clock, and none of the matching signatures was seen
before (the store remembers them until ``t`` leaves the window; see
:meth:`framework_ingest.store.IngestStore.remember_signatures`). Every refusal is a 401
problem; nothing is written. This module owns the header format and the check; it never
logs or echoes a secret or a presented signature.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Callable, Sequence

from framework_ingest.problems import ProblemError

HEADER = "X-Framework-Signature"
DEFAULT_SKEW = 300.0
_MAX_ENTRIES = 16  # more v1 entries than any rotation needs: refuse rather than loop


def sign(secret: str, body: bytes, t: int) -> str:
    """The ``v1`` hex for ``body`` at ``t`` (what a shipper sends; tests use it too)."""
    return sign_bytes(secret.encode("utf-8"), body, t)


def header_value(secret: str, body: bytes, t: int | None = None) -> str:
    t = int(time.time()) if t is None else t
    return f"t={t},v1={sign(secret, body, t)}"


def _refuse(slug: str, detail: str) -> ProblemError:
    return ProblemError(
        401,
        slug,
        detail,
        headers={"WWW-Authenticate": f'Signature realm="ingest", header="{HEADER}"'},
    )


class SignatureVerifier:
    """Checks signatures against ``secrets`` (none: signing is off, every request passes)."""

    def __init__(
        self,
        secrets: Sequence[str],
        *,
        skew: float = DEFAULT_SKEW,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._keys = [s.encode("utf-8") for s in secrets if s]
        self.skew = skew
        self._clock = clock

    @property
    def enabled(self) -> bool:
        return bool(self._keys)

    def __repr__(self) -> str:  # never show a secret, even in a traceback
        return f"SignatureVerifier(secrets={len(self._keys)}, skew={self.skew})"

    def verify(self, header: str | None, body: bytes) -> tuple[list[str], float]:
        """The matching ``v1`` signatures and the time until which they must be remembered,
        or a 401 :class:`ProblemError` (missing, malformed, no match, outside the skew)."""
        if header is None or not header.strip():
            raise _refuse("signature-required", f"send '{HEADER}: t=<unix seconds>,v1=<hex>'")
        t_text: str | None = None
        presented: list[str] = []
        for part in header.split(","):
            name, eq, value = part.strip().partition("=")
            if not eq:
                raise _refuse("signature-invalid", f"{HEADER}: expected name=value pairs")
            if name == "t":
                if t_text is not None:
                    raise _refuse("signature-invalid", f"{HEADER}: more than one t")
                t_text = value
            elif name == "v1":
                presented.append(value.lower())
            # other schemes (v0, a future v2) are ignored, as Stripe's verifiers do
        if t_text is None or not t_text.isascii() or not t_text.isdigit() or len(t_text) > 12:
            raise _refuse("signature-invalid", f"{HEADER}: t must be unix seconds")
        if not presented or len(presented) > _MAX_ENTRIES:
            raise _refuse("signature-invalid", f"{HEADER}: expected 1 to {_MAX_ENTRIES} v1 entries")
        t = int(t_text)
        if abs(self._clock() - t) > self.skew:
            raise _refuse(
                "signature-expired",
                f"the signature's time is more than {self.skew:g} s from the server's clock",
            )
        expected = [sign_bytes(key, body, t) for key in self._keys]
        matched: list[str] = []
        for candidate in presented:
            given = candidate.encode("ascii", errors="replace")
            # every expected value is compared (no early exit): timing says nothing
            hit = False
            for want in expected:
                hit |= hmac.compare_digest(given, want.encode("ascii"))
            if hit:
                matched.append(candidate)
        if not matched:
            raise _refuse("signature-invalid", "no v1 signature matches the body")
        return sorted(set(matched)), t + self.skew


def sign_bytes(key: bytes, body: bytes, t: int) -> str:
    return hmac.new(key, f"{t}.".encode() + body, hashlib.sha256).hexdigest()
