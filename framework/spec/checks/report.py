"""What every check of :mod:`framework.spec.checks` writes to: the spec, its document
and the problems found so far, each located to ``file:line:col``.

Owns locating a problem (:meth:`Report.add`) and reading the raw YAML data beside the
model (:meth:`Report.raw`: a path that is a list in the YAML is indexed, a single item
is not). It checks nothing itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from framework.errors import SpecProblem
from framework.spec.load import Document, Path_
from framework.spec.models import JobSpec

__all__ = ["Path_", "Report", "strings"]


class Report:
    """The problems of one spec. ``spec`` is None-like for :func:`check_raw`, whose
    checks read only the raw data (framework/spec/validate.py)."""

    def __init__(self, spec: JobSpec, doc: Document) -> None:
        self.spec = spec
        self.doc = doc
        self.problems: list[SpecProblem] = []

    def add(self, path: Path_, what: str, expected: str = "", *, key: bool = False) -> None:
        self.problems.append(self.doc.problem(path, what, expected, key=key))

    def raw(self, path: Path_) -> Any:
        node = self.doc.data
        for part in path:
            if isinstance(node, dict):
                if part not in node:
                    return None
                node = node[part]
            elif isinstance(node, list) and isinstance(part, int) and part < len(node):
                node = node[part]
            else:
                return None
        return node

    def item(self, path: Path_, i: int) -> Path_:
        """Where the ``i``-th item of a list-or-one value is: ``path[i]`` when the YAML
        wrote a list there, ``path`` itself when it wrote the one item."""
        return (*path, i) if isinstance(self.raw(path), list) else path


def strings(value: Any, path: Path_) -> Iterable[tuple[Path_, str]]:
    """Every text in a JSON-like value (a body, a login document), with its path."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from strings(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from strings(v, (*path, i))
