"""A reparse that reads only the fields a spec edit changed (field by field).

After a selector fix, ``framework reparse`` reads every stored page of the kind again,
and most of a page's extraction is the fields the fix did not touch, whose values the
stored item already holds. For a kind whose section of the spec changed *only in some
fields' specs* since its stored pages were read (the workspace keeps the section each
digest was made of: :meth:`Workspace.read_section`), a page is read with its record's
fields taken from two places:

* extracted from the page: the changed fields; the fields that may fall back (more than
  one source, here or in a nested group), since which source gave a value is reported
  per page (a layout drift) and the stored item does not say; the helper fields (never
  part of an item); on a page whose item holds a null in a typed field, that field
  (a value that failed its type is stored as a null, and the run counts the failure
  as a whole read does: ``type_failed``);
* the stored item: every other field.

Everything else runs as in a whole read: the id and the dedupe key, the record's
checks (``required_any``, the size limit), sub-tab requests, follow and next links,
forms, change limits, findings and fill counts (:meth:`CompiledKind.parse` with
``fields``). The result is the whole read's (``tests/crawl/test_reparse_narrow.py`` compares
them), because an unchanged field's value depends only on the page, the field's spec and
what every kind's digest shares (the code, the job-level keys, the extraction limits:
checked by recomputing the old digest from the kept section), provided the stored item
is what the last read of the stored page gave. Which holds when

* every stored page of the kind was read with the one old digest (``read_with``),
* no field of the old section has a change limit (a review rejected under one keeps an
  item that its page no longer gives) and the workspace holds no candidate at all (an
  ``invalid`` hold keeps the last good item beside a page that gives another),
* the row is ok, exactly one item is linked to it, the record the page gives now has
  that item's key, the item has every field taken from it and no sub-tab part is named
  like a field.

A page that fails a per-page condition is read whole (:func:`narrowed`); a kind that
fails another is read whole; ``framework reparse --all`` reads every page whole.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from framework.crawl.fingerprint import kind_sections, section_digest, shared_part
from framework.crawl.page import CompiledJob, FieldsOf, PageResult
from framework.extract.fields import Extraction, FieldExtractor, Scope
from framework.spec.models import FieldSpec, ValueType

__all__ = [
    "FAILED_EVENTS",
    "Narrowing",
    "Plan",
    "StoredItemData",
    "failed_fields",
    "narrowed",
    "plan",
]

# how many crawls and reparses back the type failures are looked for (see failed_fields)
FAILED_LOOKBACK = 200
FAILED_EVENTS = ("found_nothing", "run_finished", "reparse_finished")

# (dedupe_key, data, parts) of the item linked to a row, data and parts as stored (JSON)
StoredItemData = tuple[str, str, str | None]


@dataclass(frozen=True)
class Narrowing:
    """How one kind's pages are read field by field."""

    kind: str
    changed: tuple[str, ...]  # the fields whose spec changed
    read: tuple[str, ...]  # the fields extracted from the page (changed ones included)
    names: tuple[str, ...]  # every field of the kind, in the spec's order
    extractor: FieldExtractor  # of `read`
    # the typed fields not in `read`, each alone: one whose stored value holds a null
    # may have failed its type when last read (a failure is stored as a null), which
    # the item does not say; read from the page, it is counted as a whole read counts
    # it (Findings.type_failures), and its value is the stored one again
    typed: Mapping[str, FieldExtractor] = field(default_factory=dict)

    def fields_of(self, stored: Mapping[str, Any]) -> FieldsOf:
        """The record's fields: those of ``read`` from the page, the others from
        ``stored`` (the item's data), in the spec's order, as a whole read has them."""
        again = [x for n, x in self.typed.items() if _holds_null(stored[n])]

        def fields(scope: Scope) -> Extraction:
            got = self.extractor.extract(scope)
            errors = got.errors
            values = dict(got.values)
            for extractor in again:
                more = extractor.extract(scope)
                values.update(more.values)
                errors = errors + more.errors
            values = {n: values[n] if n in values else stored[n] for n in self.names}
            # the other fields found their values and broke no rule when last read:
            # what they would add to these lists is nothing
            return Extraction(values, got.missing, got.fallbacks, errors, got.violations)

        return fields


class Plan(dict[str, Narrowing]):
    """The kinds read field by field, by kind; ``whole``: why each other kind whose
    spec changed is read whole (said in ``reparse_started`` and by the command: a
    reparse that takes ten times longer than the last one should say why)."""

    def __init__(self) -> None:
        super().__init__()
        self.whole: dict[str, str] = {}


def plan(
    job: CompiledJob,
    digests: Mapping[str, str],
    read_with: Mapping[str, set[str]],
    section_of: Callable[[str], str | None],
    holds: int,
    failing: Collection[tuple[str, str]] | None = None,
) -> Plan:
    """The kinds of ``job`` whose stored pages can be read field by field, by kind:
    ``digests`` are the kinds' digests now, ``read_with`` what their stored pages were
    read with, ``section_of`` the kept section of a digest, ``holds`` how many
    candidates the workspace holds, ``failing`` the (kind, field)s whose values failed
    their type in the runs that stored the items (:func:`failed_fields`; None: not
    known, so every typed field's nulls are read again)."""
    shared = shared_part(job)
    sections = kind_sections(job)
    out = Plan()
    for name in job.kinds:
        before = read_with.get(name, set())
        if not before or before == {digests[name]}:
            continue  # no page of it read (or none recorded), or unchanged: not read at all
        why = _narrowing(job, name, before, section_of, shared, sections[name], holds, failing)
        if isinstance(why, str):
            out.whole[name] = why
        else:
            out[name] = why
    return out


def _narrowing(
    job: CompiledJob,
    name: str,
    before: set[str],
    section_of: Callable[[str], str | None],
    shared: bytes,
    section: str,
    holds: int,
    failing: Collection[tuple[str, str]] | None = None,
) -> Narrowing | str:
    """How kind ``name``, changed since its pages were read with ``before``, is read
    field by field, or why it is read whole."""
    if holds:
        return (
            f"the workspace holds {holds} candidate item{'s' if holds != 1 else ''} for "
            "review (`framework review`): a held item need not be what its page gives"
        )
    if len(before) != 1:
        return f"its stored pages were read with {len(before)} different versions of the spec"
    (old_digest,) = before
    old_section = section_of(old_digest)
    if old_section is None:
        return "the spec its pages were read with is not kept (read before this version)"
    if section_digest(shared, old_section) != old_digest:
        return (
            "more than its section changed since its pages were read: the framework's "
            "code, the job-level keys, the helper fields or the extraction limits"
        )
    kind = job.kinds[name]
    spec = kind.spec
    if spec.each is not None or kind.sitemap is not None or kind.id is None or not spec.fields:
        # a record per page, with a key: one item per row
        return "its pages are not one record each with an id (each:, a sitemap or no id)"
    old = json.loads(old_section)["spec"]
    new = json.loads(section)["spec"]
    old_fields, new_fields = old.pop("fields", {}), new.pop("fields", {})
    if old != new:
        keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        return f"more than its fields changed ({', '.join(keys)})"
    if set(old_fields) != set(new_fields):  # (the section's keys are sorted: no order)
        names = sorted(set(old_fields) ^ set(new_fields))
        return f"fields were added or removed ({', '.join(names)})"
    limited = sorted(
        n for n, f in old_fields.items() if f.get("frozen") or f.get("max_change") is not None
    )
    if limited:
        return (
            f"a field had a change limit when its pages were read ({', '.join(limited)}): "
            "a rejected review keeps an item its page no longer gives"
        )
    changed = tuple(n for n in spec.fields if new_fields[n] != old_fields[n])
    if not changed:  # pragma: no cover - equal sections make equal digests
        return "its section changed in no field"
    read = tuple(n for n, f in spec.fields.items() if n in changed or f.helper or _may_fall_back(f))
    languages = job.spec.languages
    return Narrowing(
        kind=name,
        changed=changed,
        read=read,
        names=tuple(spec.fields),
        extractor=FieldExtractor(
            {n: spec.fields[n] for n in read}, json=kind.is_json, languages=languages
        ),
        typed={
            n: FieldExtractor({n: f}, json=kind.is_json, languages=languages)
            for n, f in spec.fields.items()
            if n not in read and _typed(f) and _may_have_failed(name, n, failing)
        },
    )


def _may_fall_back(spec: FieldSpec) -> bool:
    return len(spec.sources) > 1 or any(_may_fall_back(f) for f in (spec.fields or {}).values())


def _may_have_failed(kind: str, name: str, failing: Collection[tuple[str, str]] | None) -> bool:
    """Whether a stored null of field ``name`` may be a value that failed its type: a
    field no run failed on holds a null only where it found nothing, and reading it
    again (its selectors, on every page) would cost the most of a narrow read."""
    if failing is None:
        return True
    nested = name + "["  # a nested group's fields are counted as ``group[].field``
    return any(k == kind and (f == name or f.startswith(nested)) for k, f in failing)


def failed_fields(events: Iterable[Mapping[str, Any]]) -> set[tuple[str, str]] | None:
    """The (kind, field)s whose values failed their type in the runs of ``events``
    (:data:`FAILED_EVENTS`, newest first): each run's first failure of a field is a
    ``found_nothing`` event as it happens (a run killed later has it too), and each
    finished run lists them all in its ``type_failed``. None when that cannot be told:
    a finished run from before the count was kept, or more than ``FAILED_LOOKBACK``."""
    found: set[tuple[str, str]] = set()
    runs = 0
    for event in events:
        if event.get("event") == "found_nothing":
            if event.get("what") == "type_failed":
                found.add((str(event.get("kind")), str(event.get("field"))))
            continue
        runs += 1
        failed = event.get("type_failed")
        if runs > FAILED_LOOKBACK or not isinstance(failed, list):
            return None
        for entry in failed:
            if isinstance(entry, Mapping):
                found.add((str(entry.get("kind")), str(entry.get("field"))))
    return found


def _typed(spec: FieldSpec) -> bool:
    """Can a value of the field fail its type (a string never does)?"""
    return spec.type is not ValueType.STRING or any(_typed(f) for f in (spec.fields or {}).values())


def _holds_null(value: Any) -> bool:
    """A null anywhere in a stored value (a nested group's rows included)."""
    if value is None:
        return True
    if isinstance(value, list):
        return any(_holds_null(v) for v in value)
    if isinstance(value, dict):
        return any(_holds_null(v) for v in value.values())
    return False


def narrowed(
    narrowing: Narrowing, item: StoredItemData | None, parse: Callable[[FieldsOf], Any]
) -> PageResult | None:
    """The page read field by field (``parse``: the kind's parse with the fields given),
    or None where the stored item cannot stand for the fields not read: the caller then
    reads the page whole. Any failure of the narrow read is left to the whole read too,
    which fails the same way and says so."""
    if item is None:
        return None
    key, raw, parts = item
    try:
        data = json.loads(raw)
        if not isinstance(data, dict):
            return None
        if any(n not in data for n in narrowing.names if n not in narrowing.read):
            return None
        if parts and set(json.loads(parts)).intersection(narrowing.names):
            return None
        result = parse(narrowing.fields_of(data))
    except Exception:  # the whole read meets it again and reports it
        return None
    if not isinstance(result, PageResult) or len(result.records) != 1:
        return None
    if result.records[0].dedupe_key != key:
        return None  # the item is another page's record (or this one's lost its key)
    return result
