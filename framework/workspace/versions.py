"""The schema versions a workspace keeps in its ``meta`` table, read and checked once.

Each set of tables in a workspace keeps its own version under its own key: the SQLite
file's (``schema_version``), the PostgreSQL store's (``schema_version``, counted apart)
and the ship plugin's on PostgreSQL (``ship_schema_version``, through
:meth:`framework.workspace.postgres_base.PgBase._meta_version`). A framework refuses
tables that a newer one wrote instead of guessing at them. Reads only.
"""

from __future__ import annotations

from typing import Any

from framework.errors import WorkspaceError


def meta_version(conn: Any, key: str, newest: int, where: str, schema: str) -> int:
    """The version kept under meta ``key`` (0: none yet) on ``conn`` (sqlite3 or
    psycopg: the SQL is the same on both), refused when above ``newest``, the version
    this framework reads up to. ``where`` and ``schema`` name the place and the tables
    in the refusal."""
    got = conn.execute(f"SELECT value FROM meta WHERE key = '{key}'").fetchone()
    version = int(got[0]) if got else 0
    if version > newest:
        raise WorkspaceError(
            f"{where}: written by a newer framework ({schema} {version}, "
            f"this one reads up to {newest}); upgrade framework"
        )
    return version
