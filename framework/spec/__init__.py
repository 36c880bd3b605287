"""The job spec language: the one public door.

``load_spec(path)`` reads a ``job.yaml``, checks its shape (:mod:`.load`) and its
meaning (:mod:`.validate`) and returns a :class:`JobSpec`, or raises
:class:`~framework.errors.SpecError` carrying every problem as ``file:line:col``.
"""

from __future__ import annotations

from pathlib import Path

from framework.errors import SpecError, SpecProblem
from framework.spec.keys import make_dedupe_key, normalise_source_id
from framework.spec.load import Document, parse_document, read_document
from framework.spec.models import FieldSpec, JobSpec, KeySpec, PageKind, ShipSettings, SubtabSpec
from framework.spec.template import MissingValue, Template, TemplateError
from framework.spec.validate import check_raw, validate

__all__ = [
    "Document",
    "FieldSpec",
    "JobSpec",
    "KeySpec",
    "MissingValue",
    "PageKind",
    "ShipSettings",
    "SubtabSpec",
    "Template",
    "TemplateError",
    "load_spec",
    "load_spec_document",
    "make_dedupe_key",
    "normalise_source_id",
]


def load_spec_document(path: str | Path) -> tuple[JobSpec, Document]:
    """Load and validate; also return the document (data and marks) for callers that
    report their own located problems."""
    doc = read_document(path)
    try:
        spec = parse_document(doc)
    except SpecError as exc:
        # every problem in one run: the expressions too, not only once the shape is right
        raise SpecError(_merged(exc.problems, check_raw(doc))) from None
    return validate(spec, doc), doc


def _merged(shape: list[SpecProblem], raw: list[SpecProblem]) -> list[SpecProblem]:
    """Both lists by position; where the shape already has a problem, it is the one said."""
    taken = {(p.file, p.line, p.col) for p in shape}
    extra = [p for p in raw if (p.file, p.line, p.col) not in taken]
    return sorted([*shape, *dict.fromkeys(extra)], key=lambda p: (p.line, p.col))


def load_spec(path: str | Path) -> JobSpec:
    """Load and fully validate a spec file; raises SpecError with every problem."""
    return load_spec_document(path)[0]
