"""The storage seam: URLs, migrations applied once (also when two servers start together)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from framework_ingest.db import migrations, open_backend
from framework_ingest.errors import IngestConfigError

from framework.errors import UsageError


def test_migrations_apply_once_and_are_recorded(
    make_ingest_db_url: Callable[[str], str], ingest_backend: str
) -> None:
    url = make_ingest_db_url(ingest_backend)
    errors: list[BaseException] = []
    barrier = threading.Barrier(3)

    def start() -> None:  # three servers starting on one empty database at once
        try:
            barrier.wait()
            open_backend(url).close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    backend = open_backend(url)
    try:
        assert backend.migrate() == []  # nothing left to apply
        with backend.transaction(write=False) as tx:
            applied = tx.execute("SELECT version, name FROM schema_migrations ORDER BY version")
        expected = [(v, n) for v, n, _ in migrations(backend.dialect)]
        assert [(int(v), n) for v, n in applied] == expected
        assert expected[0] == (1, "0001_init.sql")
    finally:
        backend.close()


def test_both_dialects_ship_the_same_migration_versions() -> None:
    sqlite = [(v, n) for v, n, _ in migrations("sqlite")]
    assert sqlite == [(v, n) for v, n, _ in migrations("postgresql")]


@pytest.mark.parametrize(
    "url", ["mysql://root:pw@localhost/x", "sqlite:///", "ingest.db", "postgres"]
)
def test_unsupported_urls_are_usage_errors(url: str) -> None:
    with pytest.raises(IngestConfigError) as caught:
        open_backend(url)
    assert isinstance(caught.value, UsageError)
    assert "pw" not in str(caught.value)


def test_sqlite_folder_must_exist(tmp_path: Path) -> None:
    with pytest.raises(IngestConfigError, match="does not exist"):
        open_backend(f"sqlite:///{tmp_path}/missing/ingest.db")


def test_database_urls_in_messages_hide_their_password(tmp_path: Path) -> None:
    # the core's redact_url serves the plugin too: userinfo and password= are masked
    for url in ("postgresql://app:hunter2@db:5432/x", "postgresql://app@db/x?password=hunter2"):
        with pytest.raises(IngestConfigError) as caught:
            open_backend(url.replace("postgresql", "mysql"))
        assert "hunter2" not in str(caught.value)
