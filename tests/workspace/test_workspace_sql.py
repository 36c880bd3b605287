"""The workspace's SQL layer (framework/workspace/sql.py): SQL written once with ``?``
placeholders, translated per dialect."""

from __future__ import annotations

from framework.workspace.sql import POSTGRES, SQLITE, to_pyformat


def test_question_marks_become_pyformat_outside_quoted_literals_only() -> None:
    sql = "SELECT coalesce(kind, '?'), 'it''s ?' FROM rows WHERE id = ? AND n % 2 = ?"
    assert to_pyformat(sql) == (
        "SELECT coalesce(kind, '?'), 'it''s ?' FROM rows WHERE id = %s AND n %% 2 = %s"
    )
    assert to_pyformat("SELECT '%'") == "SELECT '%'"


def test_sqlite_runs_the_shared_text_as_written() -> None:
    sql = "UPDATE rows SET attempts = ? WHERE id = ?"
    assert SQLITE.q(sql) is sql
    assert POSTGRES.q(sql) == "UPDATE rows SET attempts = %s WHERE id = %s"


def test_a_value_list_is_bound_per_dialect() -> None:
    assert SQLITE.in_("id", [3, 4]) == ("id IN (?,?)", [3, 4])
    # one array parameter: the statement text stays the same whatever the count
    assert POSTGRES.in_("id", (3, 4)) == ("id = ANY(?)", [[3, 4]])
    assert SQLITE.index("rows_open") == " INDEXED BY rows_open"
    assert POSTGRES.index("rows_open") == ""
