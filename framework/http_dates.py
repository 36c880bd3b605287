"""``Retry-After`` as a server sends it, read once for the crawl and the shipper.

RFC 9110 10.2.3: delta-seconds or an HTTP-date, and 5.6.7: a recipient must accept all
three date forms: IMF-fixdate (``Sun, 06 Nov 1994 08:49:37 GMT``), the obsolete RFC 850
(``Sunday, 06-Nov-94 08:49:37 GMT``) and asctime (``Sun Nov  6 08:49:37 1994``).
asctime carries no zone; every HTTP-date is GMT, so it is read as UTC (the crawl once
refused it as naive while the shipper read it as UTC: one server, two answers).
"""

from __future__ import annotations

import re
import time
from datetime import UTC
from email.utils import parsedate_to_datetime

__all__ = ["parse_retry_after"]

_DELTA_SECONDS = re.compile(r"[0-9]+")  # ASCII only: str.isdigit() also takes "²"


def parse_retry_after(value: str | bytes | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After value, or None when absent or unreadable; a
    date in the past is 0 (now). ``now`` is epoch seconds (default: the clock).

    Never raises on what a server sends. Any run of digits is read, however long
    (``99999999999999999999`` is 1e20 s, a longer one infinity): the caller clamps.
    """
    if value is None:
        return None
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    text = text.strip()
    if not text:
        return None
    if _DELTA_SECONDS.fullmatch(text):
        return float(text)  # a digit string too long for a float reads as inf, not an error
    try:
        when = parsedate_to_datetime(text)
        if when.tzinfo is None:  # asctime (or a -0000 zone): HTTP-dates are GMT
            when = when.replace(tzinfo=UTC)
        at = when.timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return max(0.0, at - (time.time() if now is None else now))
