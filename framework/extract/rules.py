"""A field's rules on its converted value (min/max, lengths, pattern, enum, expected):
a value that breaks one is reported as a violation and kept, never changed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from framework.extract.patterns import SafeRegex
from framework.extract.sources import text_of

if TYPE_CHECKING:  # the models import nothing from here; avoid a package import cycle
    from framework.spec.models import FieldSpec

__all__ = ["Rules"]


class Rules:
    """A field's rules on its converted value; ``check`` names the first one broken."""

    __slots__ = ("enum", "expected", "max", "max_length", "min", "min_length", "pattern")

    def __init__(self, spec: FieldSpec) -> None:
        self.min, self.max = spec.min, spec.max
        self.min_length, self.max_length = spec.min_length, spec.max_length
        self.pattern = SafeRegex(spec.pattern) if spec.pattern is not None else None
        self.enum = spec.enum
        self.expected = spec.expected

    @classmethod
    def of(cls, spec: FieldSpec) -> Rules | None:
        given = (spec.min, spec.max, spec.min_length, spec.max_length, spec.pattern, spec.enum)
        if all(v is None for v in given) and spec.expected is None:
            return None  # most fields: no per-value work at all
        return cls(spec)

    def check(self, value: Any, many: bool) -> tuple[str, Any] | None:
        """(rule, value) of the first rule broken, or None. ``expected`` compares the whole
        value (a list for ``many``); the others each value of a list."""
        if self.expected is not None and value != self.expected:
            return "expected", value
        for one in value if many else (value,):
            broken = self._one(one)
            if broken is not None:
                return broken, one
        return None

    def _one(self, value: Any) -> str | None:
        if self.min is not None or self.max is not None:
            # a price is bounded by its amount
            n = value["amount"] if isinstance(value, dict) else value
            if isinstance(n, int | float) and not isinstance(n, bool):
                if self.min is not None and n < self.min:
                    return "min"
                if self.max is not None and n > self.max:
                    return "max"
        if isinstance(value, str):
            if self.min_length is not None and len(value) < self.min_length:
                return "min_length"
            if self.max_length is not None and len(value) > self.max_length:
                return "max_length"
        if self.pattern is not None and self.pattern.search(text_of(value)) is None:
            return "pattern"
        if self.enum is not None and value not in self.enum:
            return "enum"
        return None
