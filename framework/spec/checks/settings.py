"""How far a spec's ``settings:`` may go: the ceilings over the floors.

:mod:`framework.spec.validate` owns which settings a spec may set, their types and
their floors (a zero time budget would refuse every page). This module owns the other
side: a spec is data that people share, copy from a ticket and generate, so it must
not lift the limits that keep one crawl from holding a machine or a site for ever: a
time limit of three years on a regex (deaf to Ctrl-C while it runs), a body cap of a
petabyte, a billion matches, ten thousand requests in flight, a redirect limit that
turns a redirect loop into a crawl that never ends. Each ceiling is generous for a real
job; only the operator goes past one: ``-s NAME=VALUE``, or the project's Scrapy
settings module (code they trust), which this module never sees.

It reads no files and knows no YAML positions: it says what is wrong with one value
and the caller puts it at ``file:line:col``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["CEILINGS", "UNCAPPED", "Ceiling", "over_ceiling"]

MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Ceiling:
    """The most a spec may set, and the unit it is said in."""

    value: float
    unit: str = ""

    def said(self) -> str:
        value = f"{self.value:,.0f}" if float(self.value).is_integer() else f"{self.value:g}"
        return f"{value} {self.unit}".strip()


#: Setting -> the most a spec may set. Numbers a spec may set and that are not here are
#: in :data:`UNCAPPED`, with the reason (a test holds every numeric spec setting to one).
CEILINGS: dict[str, Ceiling] = {
    # delays: a delay of days is a crawl that never ends, whatever the site wants
    "DOWNLOAD_DELAY": Ceiling(600, "seconds"),
    "AUTOTHROTTLE_START_DELAY": Ceiling(600, "seconds"),
    "AUTOTHROTTLE_MAX_DELAY": Ceiling(600, "seconds"),
    # concurrency: politeness towards somebody else's server, and this machine's sockets
    "AUTOTHROTTLE_TARGET_CONCURRENCY": Ceiling(32),
    "CONCURRENT_REQUESTS": Ceiling(64),
    "CONCURRENT_REQUESTS_PER_DOMAIN": Ceiling(32),
    "CONCURRENT_ITEMS": Ceiling(1000),
    "PLAYWRIGHT_MAX_CONTEXTS": Ceiling(16),
    "PLAYWRIGHT_MAX_PAGES_PER_CONTEXT": Ceiling(32),
    # time limits: each holds a request (or, the extract time, the crawl itself) that long
    "DOWNLOAD_TIMEOUT": Ceiling(600, "seconds"),
    "DNS_TIMEOUT": Ceiling(120, "seconds"),
    "PLAYWRIGHT_DEFAULT_NAVIGATION_TIMEOUT": Ceiling(600_000, "milliseconds"),
    # A page's regexes run on the crawl's thread and SIGINT/SIGTERM wait for them: a
    # stop is acted on only once the pages already downloaded are parsed, each within
    # this budget (measured: 6 such pages at 3 s each ran 44-54 s past a Ctrl-C), so a
    # spec may lower the default, never make a crawl deafer; the operator may (-s).
    "FRAMEWORK_EXTRACT_TIMEOUT": Ceiling(10, "seconds of CPU per page"),
    # sizes
    "DOWNLOAD_MAXSIZE": Ceiling(256 * MiB, "bytes"),
    "DOWNLOAD_WARNSIZE": Ceiling(256 * MiB, "bytes"),
    "FRAMEWORK_MAX_MATCHES": Ceiling(1_000_000, "matches"),
    "FRAMEWORK_MAX_MATCH_CHARS": Ceiling(32 * MiB, "characters"),
    "FRAMEWORK_MAX_ITEM_BYTES": Ceiling(16 * MiB, "bytes"),
    # a redirect loop costs this many requests per attempt of its row
    "REDIRECT_MAX_TIMES": Ceiling(50, "redirects"),
    # attempts and waits: how long a page that keeps failing may keep the crawl going
    "FRAMEWORK_MAX_ATTEMPTS": Ceiling(100, "attempts"),  # as the spec's max_attempts
    "FRAMEWORK_RETRY_BACKOFF_BASE": Ceiling(600, "seconds"),
    "FRAMEWORK_RETRY_BACKOFF_MAX": Ceiling(3600, "seconds"),
    "FRAMEWORK_RETRY_AFTER_CAP": Ceiling(3600, "seconds"),
    "FRAMEWORK_RETRY_AFTER_DEFAULT": Ceiling(3600, "seconds"),
    # the clamp of what a server may ask: a spec may lower it, not lift it
    "FRAMEWORK_RETRY_AFTER_MAX": Ceiling(86400, "seconds"),
    "FRAMEWORK_DOWN_HOST_AFTER": Ceiling(100, "failures"),
    # breakers: a rate over 1 or a window of millions is a breaker that never trips
    "FRAMEWORK_ERROR_RATE_MAX": Ceiling(1),
    "FRAMEWORK_ERROR_RATE_WINDOW": Ceiling(10_000, "attempts"),
    # what a kill may lose: the outcomes that wait for one group commit
    "FRAMEWORK_COMMIT_WINDOW_MS": Ceiling(1000, "milliseconds"),
    "FRAMEWORK_COMMIT_BATCH": Ceiling(10_000, "outcomes"),
}

#: Numbers a spec may set with no ceiling, and why none is needed.
UNCAPPED: dict[str, str] = {
    # a cap a spec sets to stop sooner; its default, 0, is already "no cap"
    "FRAMEWORK_MAX_REQUESTS": "a spec sets it to stop sooner; 0, the default, is no cap",
}

_OPERATOR = (
    "past that only the operator: pass `-s {name}=...` on the command line or set it in "
    "the project's Scrapy settings module"
)


def over_ceiling(name: str, value: Any) -> tuple[str, str] | None:
    """``(what is wrong, what was expected)`` when ``value`` of setting ``name`` is over
    what a spec may set, else None. ``value`` has passed the type check: a number (any
    other value, and a setting without a ceiling, is not this module's to judge)."""
    ceiling = CEILINGS.get(name)
    if ceiling is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if not (math.isfinite(value) and value > ceiling.value):
        return None  # infinities and NaN are the type check's
    return (
        f"setting '{name}': {value!r} is over the most a spec may set",
        f"at most {ceiling.said()}; " + _OPERATOR.format(name=name),
    )
