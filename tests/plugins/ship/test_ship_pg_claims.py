"""The delivery claims of PostgreSQL shippers, step by step (in-process, real
PostgreSQL): claims never overlap, an expired claim (by the database clock) is taken
over with a newer token, the old owner's heartbeat names what it lost, its confirm
refuses to send and its recording is fenced; a dead shipper's claims are free at once;
the status section and the dry run read the ship tables. Skips without
FRAMEWORK_TEST_PG unless FRAMEWORK_REQUIRE_PG=1."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from framework_ship.index import digest
from framework_ship.pg_claims import PgClaims
from framework_ship.pg_db import ShipDb
from framework_ship.pg_index import PgShipIndex, PgShipLog
from framework_ship.pg_run import PgShipper
from framework_ship.run import ShipOptions
from framework_ship.shiplog import Attempt
from framework_ship.status import status_section

from framework.workspace import Workspace
from tests.fixtures import procs
from tests.fixtures.ship import FaultEndpoint, item_data, put_items
from tests.fixtures.workspace_backends import Backend

pytestmark = pytest.mark.pg

KEYS = [f"test:{i:06d}" for i in range(6)]


@pytest.fixture
def pg(make_workspace_backend: Callable[[str], Backend]) -> Backend:
    backend = make_workspace_backend("postgres")
    put_items(
        SimpleNamespace(store=backend.open()),  # type: ignore[arg-type]
        {f"{i:06d}": item_data(i) for i in range(len(KEYS))},
    )
    return backend


def _sql(backend: Backend, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    import psycopg  # the postgres extra; imported only when PostgreSQL is used

    with psycopg.connect(backend.where, autocommit=True) as conn:
        cur = conn.execute(sql, params)
        return list(cur.fetchall()) if cur.description else []


def _shipper(backend: Backend, lease: float = 30.0) -> tuple[ShipDb, PgClaims]:
    db = ShipDb.open_ship(backend.where)
    claims = PgClaims(db, lease)
    claims.register("ingest.test:80")
    return db, claims


def _success(key: str, content_hash: str) -> Attempt:
    return Attempt(key, content_hash, 1, 201, "accepted", 1.0)


def test_claims_never_overlap_and_tokens_grow(pg: Backend) -> None:
    db_a, a = _shipper(pg)
    db_b, b = _shipper(pg)
    try:
        got_a = a.claim(KEYS[:4])
        got_b = b.claim(KEYS)
        assert set(got_a) == set(KEYS[:4])
        assert set(got_b) == set(KEYS[4:])  # held by a live shipper: passed over
        assert min(got_b.values()) > max(got_a.values())
        assert b.claim(KEYS[:4]) == {}
        a.release(KEYS[:2])  # recorded: free for anyone
        assert set(b.claim(KEYS[:4])) == set(KEYS[:2])
    finally:
        a.stop()
        b.stop()
        db_a.close()
        db_b.close()


def test_an_expired_claim_is_taken_over_and_the_old_owner_is_fenced(pg: Backend) -> None:
    db_a, a = _shipper(pg)
    db_b, b = _shipper(pg)
    try:
        key = KEYS[0]
        (token_a,) = a.claim([key]).values()
        # A is held up past its lease: expiry is the database clock's
        _sql(pg, "UPDATE ship_claims SET expires_at = extract(epoch FROM now()) - 1")
        (token_b,) = b.claim([key]).values()
        assert token_b > token_a
        assert a.heartbeat() == {key}  # A learns what it lost
        assert a.confirm([key]) == set()  # and would not send it
        assert b.confirm([key]) == {key}

        log_a, log_b = PgShipLog(db_a, a), PgShipLog(db_b, b)
        log_b.write([_success(key, "sha256:" + "b" * 64)])
        log_a.write([_success(key, "sha256:" + "a" * 64)])  # A's late answer
        assert log_a.take_fenced([key]) == {key}
        assert log_b.take_fenced([key]) == set()
        rows = _sql(pg, "SELECT shipper, token, fenced FROM ship_log ORDER BY id")
        assert rows == [(b.shipper_id, token_b, False), (a.shipper_id, token_a, True)]
        # A's other content may be at the door now: the key is marked to ship again
        latest = PgShipIndex(db_b).lookup(key)
        assert latest is not None
        assert (latest.outcome, latest.ok_hash) == ("fenced", None)

        # a late success of the SAME content as the recorded one changes nothing
        key2 = KEYS[1]
        a.claim([key2])
        _sql(pg, "UPDATE ship_claims SET expires_at = extract(epoch FROM now()) - 1")
        b.claim([key2])
        same = "sha256:" + "c" * 64
        log_b.write([_success(key2, same)])
        log_a.write([_success(key2, same)])
        latest2 = PgShipIndex(db_b).lookup(key2)
        assert latest2 is not None
        assert (latest2.outcome, latest2.ok_hash) == ("accepted", digest(same))
    finally:
        a.stop()
        b.stop()
        db_a.close()
        db_b.close()


def test_a_dead_shippers_claims_are_free_at_once(pg: Backend) -> None:
    db_a, a = _shipper(pg)
    db_b, b = _shipper(pg)
    try:
        a.claim(KEYS[:3])
        gone = procs.popen(["true"])
        gone.wait()
        _sql(pg, "UPDATE shippers SET pid = %s WHERE id = %s", (gone.pid, a.shipper_id))
        # unexpired, but its owner's pid is gone on this host: taken without waiting
        assert set(b.claim(KEYS[:3])) == set(KEYS[:3])
        stopped = _sql(pg, "SELECT stopped_at IS NOT NULL FROM shippers WHERE id = %s",
                       (a.shipper_id,))  # fmt: skip
        assert stopped == [(True,)]
    finally:
        b.stop()
        db_a.close()
        db_b.close()


def test_status_and_dry_run_read_the_ship_tables(
    pg: Backend, fault_endpoint: FaultEndpoint
) -> None:
    with Workspace.open(pg.where, create=False, readonly=True) as ws:
        lines: list[str] = []
        dry = PgShipper(ws, ShipOptions(endpoint="", dry_run=True), echo=lines.append, quiet=True)
        try:
            summary = dry.run()
        finally:
            dry.close()
        assert sum(line.startswith("ship ") for line in lines) == len(KEYS)
        assert summary.counts["skipped"] == 0
        assert status_section(ws) is None  # nothing shipped: no ship tables yet

    with Workspace.open(pg.where, create=False) as ws:
        shipper = PgShipper(
            ws, ShipOptions(endpoint=fault_endpoint.url, batch_size=4), echo=lines.append,
            quiet=True,
        )  # fmt: skip
        try:
            summary = shipper.run()
        finally:
            shipper.close()
        assert summary.counts["accepted"] == len(KEYS)
        section = status_section(ws)
    assert section is not None
    assert section["keys_delivered"] == len(KEYS) == section["complete_items"]
    assert section["latest_outcomes"] == {"accepted": len(KEYS)}
    assert section["last_run"]["counts"]["accepted"] == len(KEYS)
    assert section["shippers_not_stopped"] == []
    assert section["shipping_now"] is False
