"""Fill counts read by scanning the stored items, as both engines read them.

Per page kind of the item's row: how many stored items, and per field how many hold a
value (not null, "", [] or {}); items whose row was reset count under kind "?". The
walk is the same on both engines; only the SQL that takes a JSON object apart is each
engine's own, so each reader passes that query in (:meth:`SqliteReader.fill_counts`,
and :meth:`PgReader.fill_counts` on a database older than its tallies). Reads only.
"""

from __future__ import annotations

from typing import Any

_RECORDS_BY_KIND = (
    "SELECT coalesce(r.kind, '?'), count(*) FROM items i "
    "LEFT JOIN rows r ON r.id = i.row_id GROUP BY 1"
)


def scanned_fill(conn: Any, filled_by_field: str) -> dict[str, dict[str, Any]]:
    """The fill counts on ``conn``; ``filled_by_field`` selects (kind, field, how many
    items hold a value in it), grouped by kind and field, in the engine's own JSON SQL."""
    out: dict[str, dict[str, Any]] = {}
    for kind, n in conn.execute(_RECORDS_BY_KIND):
        out[kind] = {"records": int(n), "fields": {}}
    for kind, key, filled in conn.execute(filled_by_field):
        out.setdefault(kind, {"records": 0, "fields": {}})["fields"][key] = int(filled)
    return out
