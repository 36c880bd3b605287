"""Values a page carries into the rows it finds, refreshed by a reparse.

A list page's ``fields`` are carried into the detail rows it links to (the row's context
``carry``), and the detail page's record takes them. A row keeps the context it was found
with: when the same page finds it again, the insert is a no-op. For a crawl that is right
(a page is read once); for ``framework reparse`` it is not: after a fix of a carried
field, the list pages read again find their detail rows with new carried values, and a
fresh crawl would give those. So a reparse's commit refreshes the carried values of the
rows the page itself found first (``parent_id``: when two pages link one row, the first
one's values are the row's, as in a crawl), and says which rows changed: the reparse
reads them again with their new context (framework/crawl/reparse.py).

Only ``carry`` is refreshed; a row's other context (a sub-tab's item key, a page counter)
stays as it was found.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from framework.workspace.records import NewRow, canonical_json


def wanted(found: Sequence[NewRow]) -> dict[str, Mapping[str, Any]]:
    """The carried values of each row a page found, by fingerprint (the first time a
    row is named wins, as in the insert)."""
    out: dict[str, Mapping[str, Any]] = {}
    for new in found:
        out.setdefault(new.fingerprint, new.context.get("carry") or {})
    return out


def refreshed(
    existing: Iterable[tuple[int, str, str]], carry: Mapping[str, Mapping[str, Any]]
) -> list[tuple[str, int]]:
    """``(new context text, row id)`` for each ``(id, fingerprint, context text)`` of
    ``existing`` whose carried values differ from ``carry[fingerprint]``."""
    out: list[tuple[str, int]] = []
    for row_id, fp, text in existing:
        old = json.loads(text) if text else {}
        new = {k: v for k, v in old.items() if k != "carry"}
        values = carry.get(fp) or {}
        if values:
            new["carry"] = dict(values)
        new_text = canonical_json(new) if new else "{}"
        if new_text != (canonical_json(old) if old else "{}"):
            out.append((new_text, int(row_id)))
    return out


__all__ = ["refreshed", "wanted"]
