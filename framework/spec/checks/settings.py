"""The checker of a spec's ``settings:``: which settings it may set, their types,
their floors and their ceilings, all read from the one table
(:data:`framework.settings.SETTINGS`).

A spec is data that people share, copy from a ticket and generate. It may tune how
politely and how fast the job fetches, never load code, open a port or write files
(a row's ``spec``), and never lift the limits that keep one crawl from holding a
machine or a site for ever (a row's ``ceiling``): a time limit of three years on a regex
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
from typing import Any

from framework.settings import SETTINGS, Ceiling
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


#: Setting -> the most a spec may set (the table's ceilings). Numbers a spec may set and
#: that are not here are in :data:`UNCAPPED`, with the reason (a test holds every numeric
#: spec setting to one).
CEILINGS: dict[str, Ceiling] = {
    s.name: s.ceiling for s in SETTINGS.values() if s.spec and s.ceiling is not None
}

#: Numbers a spec may set with no ceiling, and why none is needed.
UNCAPPED: dict[str, str] = {s.name: s.uncapped for s in SETTINGS.values() if s.spec and s.uncapped}

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


#: Scrapy's settings a spec may set: name -> (type, lower bound), from the table.
SPEC_SETTINGS: dict[str, tuple[str, float | None]] = {
    s.name: (s.kind, s.low) for s in SETTINGS.values() if s.spec and not s.own
}
_TRUSTED_HINT = (
    "put it in the project's Scrapy settings module or pass `-s {name}=...` on the "
    "command line (both are code you trust)"
)


def spec_settings() -> dict[str, tuple[str, float | None]]:
    """Every setting a spec may set, with its type and floor: :data:`SPEC_SETTINGS` and
    the framework's own (the table's rows with ``spec``)."""
    return {s.name: (s.kind, s.low) for s in SETTINGS.values() if s.spec}


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
