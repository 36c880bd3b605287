"""What a spec's ``settings:`` may set: which settings, their types, their floors and
their ceilings.

A spec is data that people share, copy from a ticket and generate. It may tune how
politely and how fast the job fetches, never load code, open a port or write files
(:data:`SPEC_SETTINGS`), and never lift the limits that keep one crawl from holding a
machine or a site for ever (:data:`CEILINGS`): a time limit of three years on a regex
(deaf to Ctrl-C while it runs), a body cap of a petabyte, a billion matches, ten
thousand requests in flight, a redirect limit that turns a redirect loop into a crawl
that never ends. Each ceiling is generous for a real job; only the operator goes past
one: ``-s NAME=VALUE``, or the project's Scrapy settings module (code they trust),
which this module never sees.

:func:`over_ceiling` says what is wrong with one value and knows no YAML positions;
:func:`check_settings` puts every problem of ``settings:`` at ``file:line:col``.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from typing import Any

from framework.spec.checks.report import Path_, Report
from framework.spec.checks.secrets import headers

__all__ = [
    "CEILINGS",
    "SPEC_SETTINGS",
    "UNCAPPED",
    "Ceiling",
    "check_settings",
    "over_ceiling",
    "spec_settings",
]


@dataclass(frozen=True, slots=True)
class Ceiling:
    """The most a spec may set, and the unit it is said in."""

    value: float
    unit: str = ""

    def said(self) -> str:
        value = f"{self.value:,.0f}" if float(self.value).is_integer() else f"{self.value:g}"
        return f"{value} {self.unit}".strip()


MiB = 1024 * 1024

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


# What a spec's `settings:` may set, with the type (and lower bound) of its value.
# A spec is data that people share and copy: it may tune how politely and how fast the
# job fetches, never load code (EXTENSIONS, ITEM_PIPELINES, SCHEDULER, any class
# path), open a port (TELNETCONSOLE_*), or write files (LOG_FILE, FEEDS, HTTPCACHE_*).
# Those belong to the trusted side: `-s NAME=VALUE` or the project's settings module.
# No value here is ever imported: every one is a number, a flag or text sent as is.
SPEC_SETTINGS: dict[str, tuple[str, float | None]] = {
    # politeness
    "DOWNLOAD_DELAY": ("number", 0),
    "RANDOMIZE_DOWNLOAD_DELAY": ("bool", None),
    "AUTOTHROTTLE_ENABLED": ("bool", None),
    "AUTOTHROTTLE_START_DELAY": ("number", 0),
    "AUTOTHROTTLE_MAX_DELAY": ("number", 0),
    "AUTOTHROTTLE_TARGET_CONCURRENCY": ("number", 0.01),
    "AUTOTHROTTLE_DEBUG": ("bool", None),
    "ROBOTSTXT_OBEY": ("bool", None),
    # concurrency
    "CONCURRENT_REQUESTS": ("int", 1),
    "CONCURRENT_REQUESTS_PER_DOMAIN": ("int", 1),
    "CONCURRENT_ITEMS": ("int", 1),
    # timeouts and download limits (a spec may not lift the size cap: 0 means none)
    "DOWNLOAD_TIMEOUT": ("number", 0.001),
    "DNS_TIMEOUT": ("number", 0.001),
    "DOWNLOAD_MAXSIZE": ("int", 1),
    "DOWNLOAD_WARNSIZE": ("int", 0),
    # what is sent
    "USER_AGENT": ("text", None),
    "DEFAULT_REQUEST_HEADERS": ("headers", None),
    "COOKIES_ENABLED": ("bool", None),
    "REDIRECT_ENABLED": ("bool", None),
    "REDIRECT_MAX_TIMES": ("int", 0),
    # the playwright plugin's numbers (its launch options name a binary: not here)
    "PLAYWRIGHT_DEFAULT_NAVIGATION_TIMEOUT": ("number", 0),
    "PLAYWRIGHT_MAX_CONTEXTS": ("int", 1),
    "PLAYWRIGHT_MAX_PAGES_PER_CONTEXT": ("int", 1),
}
# The framework's own settings, typed by their defaults; FRAMEWORK_FRESH is a decision
# of one run (`--fresh`), never of a spec that every run reads.
_NOT_IN_SPECS = frozenset({"FRAMEWORK_FRESH"})
_AT_LEAST_ONE = {
    "FRAMEWORK_MAX_ATTEMPTS": 1,
    "FRAMEWORK_ERROR_RATE_WINDOW": 1,
    # extraction limits (framework.extract.patterns): zero would refuse every page
    "FRAMEWORK_MAX_MATCHES": 1,
    "FRAMEWORK_MAX_MATCH_CHARS": 1,
    "FRAMEWORK_MAX_ITEM_BYTES": 1,
}
# numbers that must be above zero: a zero time budget would refuse every page
_ABOVE_ZERO = frozenset({"FRAMEWORK_EXTRACT_TIMEOUT"})
_TRUSTED_HINT = (
    "put it in the project's Scrapy settings module or pass `-s {name}=...` on the "
    "command line (both are code you trust)"
)


def spec_settings() -> dict[str, tuple[str, float | None]]:
    """Every setting a spec may set: :data:`SPEC_SETTINGS` and the framework's own."""
    from framework.settings import FRAMEWORK_SETTINGS  # read now: later additions count

    out = dict(SPEC_SETTINGS)
    for name, default in FRAMEWORK_SETTINGS.items():
        if name in _NOT_IN_SPECS:
            continue
        if isinstance(default, bool):
            out[name] = ("bool", None)
        elif isinstance(default, int):
            out[name] = ("int", _AT_LEAST_ONE.get(name, 0))
        elif isinstance(default, str):
            out[name] = ("text", None)
        elif name in _ABOVE_ZERO:
            out[name] = ("positive", 0)
        else:  # float, or None for "no limit": a number
            out[name] = ("number", 0)
    return out


def _type_problem(kind: str, low: float | None, value: Any) -> str | None:
    """What ``value`` should have been, or None when it fits."""
    if kind == "bool":
        return None if isinstance(value, bool) else "true or false"
    # .inf and .nan are YAML floats: a timeout or delay of infinity waits for ever (or
    # fails every request in the HTTP client), and NaN compares false with any bound
    finite = isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))
    if kind == "positive":
        ok = not isinstance(value, bool) and finite and value > 0
        return None if ok else "a number > 0"
    if kind in ("int", "number"):
        ok = not isinstance(value, bool) and (
            isinstance(value, int) or (kind == "number" and isinstance(value, float) and finite)
        )
        bound = "" if low is None else f" >= {low:g}"
        what = ("an integer" if kind == "int" else "a number") + bound
        if not ok or (low is not None and value < low):
            return what
        return None
    if kind == "text":
        if not isinstance(value, str) or not value.strip():
            return "a text"
        # USER_AGENT goes into a header: a line break would start another one
        return "a text on one line" if any(c in value for c in "\r\n\x00") else None
    if kind == "headers":
        if isinstance(value, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            return None
        return "a mapping of header names to texts"
    return None


def _is_scrapy_setting(name: str) -> bool:
    from scrapy.settings import default_settings  # only when a spec sets one we refuse

    return name in vars(default_settings) or name.startswith(("FRAMEWORK_", "PLAYWRIGHT_"))


def check_settings(r: Report, values: dict[str, Any]) -> None:
    """The spec's ``settings:`` (also read from the raw data, :func:`check_raw`): known
    spec settings of the right type only, none that loads code."""
    allowed = spec_settings()
    for key, value in values.items():
        path: Path_ = ("settings", key)
        hint = _TRUSTED_HINT.format(name=key)
        if key not in allowed:
            upper = str(key).upper()
            close = (
                [upper]
                if upper in allowed
                else difflib.get_close_matches(str(key), list(allowed), n=1, cutoff=0.85)
            )
            if close:
                what = f"unknown spec setting '{key}' (did you mean '{close[0]}'?)"
            elif _is_scrapy_setting(str(key)):
                what = (
                    f"setting '{key}' is not allowed in a spec (a spec is data: settings "
                    "that load code, open ports or write files are not)"
                )
            else:
                what = f"unknown spec setting '{key}'"
            r.add(
                path,
                what,
                f"'{close[0]}'" if close else f"a spec setting (docs/spec-reference.md); {hint}",
                key=True,
            )
            continue
        kind, low = allowed[key]
        expected = _type_problem(kind, low, value)
        if expected is not None:
            r.add(path, f"wrong value for setting '{key}': {value!r}", expected)
            continue
        over = over_ceiling(key, value)  # the floors are _type_problem, the ceilings CEILINGS
        if over is not None:
            r.add(path, *over)
            continue
        if kind == "headers":
            headers(r, path, value, resolved=False)
        elif isinstance(value, str) and "{env:" in value:
            r.add(
                path,
                f"an {{env:...}} reference in setting '{key}' (settings are not resolved)",
                "{env:NAME} only in start_urls, sub-tab url/body or `headers:`",
            )
