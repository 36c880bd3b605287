"""The dedupe key: the permanent upsert key of a datum, ``{source_type}:{source_id}``
by default, or the spec's template over the record.

Owns the normalisation that makes the same datum always get the same key: Unicode
NFC, surrounding whitespace stripped, inner runs of whitespace collapsed to one space,
the id part lowercased when the spec says ids are case-insensitive, and the canonical
``source_type:`` prefix. It must not decide *which* record is which (the spider does).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from typing import Any

from framework.spec.models import KeySpec
from framework.spec.template import Template, TemplateError

__all__ = ["make_dedupe_key", "normalise_source_id"]

_TEMPLATES: dict[str, Template] = {}


def normalise_source_id(value: Any) -> str:
    """The canonical text of an id: NFC, stripped, inner whitespace collapsed; whole
    floats lose their ``.0`` (a JSON ``12.0`` and an HTML ``12`` are the same id)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    text = value if isinstance(value, str) else str(value)
    return " ".join(unicodedata.normalize("NFC", text).split())


def _template(text: str) -> Template:
    tpl = _TEMPLATES.get(text)
    if tpl is None:
        tpl = _TEMPLATES[text] = Template(text)
    return tpl


def make_dedupe_key(
    key: KeySpec, source_type: str, source_id: str, record: Mapping[str, Any]
) -> str:
    """Render the key template over the record and normalise it.

    Raises :class:`~framework.spec.template.MissingValue` when the template names a
    field the record lacks, and :class:`TemplateError` when the id part is empty.
    """
    sid = normalise_source_id(source_id)
    template = _template(key.template)
    # Runs for every record: normalise only the values the template reads.
    context: dict[str, Any] = {
        k: (
            normalise_source_id(v)
            if isinstance(v, str | int | float) and not isinstance(v, bool)
            else v
        )
        for k in template.names
        if k in record
        for v in (record[k],)
    }
    context["source_type"] = source_type
    context["source_id"] = sid
    context.setdefault("id", sid)
    rendered = " ".join(template.render(context).split())
    prefix = f"{source_type}:"
    rest = rendered.removeprefix(prefix).strip()
    if key.lowercase:
        rest = rest.lower()
    if not rest:
        raise TemplateError(
            f"dedupe key template {key.template!r} gave an empty id for {source_type}"
        )
    return prefix + rest
