"""Change limits: how much a field may change between two crawls of the same key.

Owns the comparison of a candidate record with the last accepted version of its key
(the stored item): ``max_change`` (``"50%"`` of the old value, or an absolute amount) on
numbers and prices, ``frozen: true`` on any field, and a value that vanished (the old
one had a value, the candidate has none) on every field with a limit. A price whose
currency changed is beyond any ``max_change`` (``$10`` -> ``€10`` is no move of 0 %):
its rule is ``currency``. A candidate over
a limit is held as ``review_required`` by the crawl (framework/workspace/holds.py) until
``framework review`` accepts or rejects it. Pure: no I/O, no workspace.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from framework.spec.models import FieldSpec

__all__ = ["ChangeLimits"]

_EMPTY: tuple[Any, ...] = (None, "", [], {})


def _number(value: Any) -> float | None:
    if isinstance(value, dict):  # a price: its amount
        value = value.get("amount")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


class _Limit:
    __slots__ = ("absolute", "frozen", "ratio")

    def __init__(self, spec: FieldSpec) -> None:
        self.frozen = spec.frozen
        self.ratio: float | None = None
        self.absolute: float | None = None
        if isinstance(spec.max_change, str):
            self.ratio = float(spec.max_change.rstrip("%")) / 100
        elif spec.max_change is not None:
            self.absolute = float(spec.max_change)

    def broken(self, old: Any, new: Any) -> str | None:
        if old in _EMPTY:
            return None  # a value appearing is no change of one
        if new in _EMPTY:
            return "vanished"
        if old == new:
            return None
        if self.frozen:
            return "frozen"
        if (
            isinstance(old, dict)
            and isinstance(new, dict)
            and old.get("currency") != new.get("currency")
        ):
            return "currency"  # amounts in two currencies say nothing of each other
        a, b = _number(old), _number(new)
        if a is None or b is None:
            return None
        if self.absolute is not None and abs(b - a) > self.absolute:
            return "max_change"
        # from zero every change is infinitely large
        if self.ratio is not None and (a == 0 or abs(b - a) / abs(a) > self.ratio):
            return "max_change"
        return None


class ChangeLimits:
    """The change limits of one record kind's fields, built once per kind."""

    __slots__ = ("_limits",)

    def __init__(self, fields: Mapping[str, FieldSpec]) -> None:
        self._limits = {
            name: _Limit(spec)
            for name, spec in fields.items()
            if spec.frozen or spec.max_change is not None
        }

    def __bool__(self) -> bool:
        return bool(self._limits)

    def breaches(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Every limit ``new`` breaks against ``old``, in field order: ``{"rule":
        "max_change" | "currency" | "frozen" | "vanished", "field", "value": new, "was":
        old}``; a ``currency`` breach says which in ``reason``."""
        out: list[dict[str, Any]] = []
        for name, limit in self._limits.items():
            was, value = old.get(name), new.get(name)
            rule = limit.broken(was, value)
            if rule is not None:
                breach = {"rule": rule, "field": name, "value": value, "was": was}
                if rule == "currency":
                    old_cur, new_cur = (
                        v.get("currency") if isinstance(v, dict) else None for v in (was, value)
                    )
                    breach["reason"] = f"the currency changed from {old_cur!r} to {new_cur!r}"
                out.append(breach)
        return out
