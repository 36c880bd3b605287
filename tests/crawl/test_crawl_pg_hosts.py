"""The hosts' Retry-After deadlines a PostgreSQL crawl follows
(``SharedHosts.follow``): kept between the changes the database announces, so a request
costs no round trip, and never kept past one (a ``NOTIFY`` in the changing transaction).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from framework.workspace import Workspace
from tests.fixtures.workspace_backends import Backend

pytestmark = pytest.mark.pg


def test_a_followed_deadline_is_kept_until_the_database_says_it_moved(
    make_workspace_backend: Callable[[str], Backend], monkeypatch: pytest.MonkeyPatch
) -> None:
    from framework.workspace import pg_workspace

    monkeypatch.setattr(pg_workspace, "KEEP_SECONDS", 3600.0)  # only notifications count
    pg_url = make_workspace_backend("postgres").where
    with Workspace.open(pg_url) as ws, Workspace.open(pg_url) as other:
        assert ws.hosts is not None
        assert other.hosts is not None
        other.hosts.follow()
        assert other.hosts.wait("f:1") == 0.0
        real = other.store._conn

        def no_round_trip() -> Any:
            raise AssertionError("a kept deadline was read again")

        other.store._conn = no_round_trip  # type: ignore[method-assign]
        try:
            assert other.hosts.wait("f:1") == 0.0  # kept: no query
        finally:
            other.store._conn = real  # type: ignore[method-assign]
        ws.hosts.defer("f:1", 30.0)  # another worker is told Retry-After
        # the notification arrives as the change commits; give the socket a moment
        for _ in range(200):
            if other.hosts.wait("f:1") > 0:
                break
            time.sleep(0.01)
        assert 25.0 < other.hosts.wait("f:1") <= 30.0
        ws.hosts.clear()  # requeue --clear-deferrals
        for _ in range(200):
            if other.hosts.wait("f:1") == 0:
                break
            time.sleep(0.01)
        assert other.hosts.wait("f:1") == 0.0


def test_a_kept_deadline_is_read_again_when_no_notification_comes(
    make_workspace_backend: Callable[[str], Backend], monkeypatch: pytest.MonkeyPatch
) -> None:
    from framework.workspace import pg_workspace

    pg_url = make_workspace_backend("postgres").where
    monkeypatch.setattr(pg_workspace, "KEEP_SECONDS", 3600.0)
    with Workspace.open(pg_url) as ws:
        assert ws.hosts is not None
        ws.hosts.follow()
        assert ws.hosts.wait("g:1") == 0.0
        # a change that announces nothing (as behind a pooler that drops LISTEN)
        ws.store._conn().execute(
            "INSERT INTO host_politeness (host, not_before) "
            "VALUES ('g:1', extract(epoch FROM clock_timestamp()) + 30)"
        )
        assert ws.hosts.wait("g:1") == 0.0  # kept, within KEEP_SECONDS
        monkeypatch.setattr(pg_workspace, "KEEP_SECONDS", 0.0)
        assert 25.0 < ws.hosts.wait("g:1") <= 30.0
