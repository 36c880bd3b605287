"""The ship section of `framework status`: delivery progress read from the workspace.

Owns the ``framework.status`` entry point ``ship``: counts of the latest outcome per
dedupe key (from the ship log, through the read-only side index), items waiting to
ship, the last run's summary, the Retry-After deadline and whether a shipper runs now.
It never writes and never touches the network.
"""

from __future__ import annotations

import time
from typing import Any

from framework.workspace import Workspace
from framework_ship.deadline import read_deadline
from framework_ship.index import ShipIndex
from framework_ship.pg_db import ShipDb
from framework_ship.pg_deadline import read_pg_deadline
from framework_ship.pg_index import PgShipIndex


def status_section(ws: Workspace) -> dict[str, Any] | None:
    """None when nothing was ever shipped from this workspace."""
    if getattr(ws, "is_database", False):
        return _pg_section(ws)
    log_exists = ws.ship_log_path.exists()
    deadline = read_deadline(ws.path)
    if not log_exists and deadline is None:
        return None
    with ShipIndex.open(ws.path, ws.ship_log_path, readonly=True) as index:
        latest = index.outcome_counts()
        last_run = index.last_run()
    delivered = sum(latest.get(k, 0) for k in ("accepted", "updated", "duplicate"))
    complete = ws.store.item_counts().get("complete", 0)
    section: dict[str, Any] = {
        "latest_outcomes": latest,
        "keys_delivered": delivered,
        "complete_items": complete,
        "shipping_now": ws.lock_holder("ship") is not None,
        "last_run": last_run,
    }
    if deadline is not None:
        until = float(str(deadline.get("until", 0)))
        section["deadline"] = {
            "host": deadline.get("host"),
            "until": deadline.get("until_iso"),
            "active": until > time.time(),
            "reason": deadline.get("reason"),
        }
    return section


def _pg_section(ws: Workspace) -> dict[str, Any] | None:
    """The same section from the ship tables of a PostgreSQL workspace, plus the
    shippers running now (many may: each holds the shared ``ship`` lock)."""
    with ShipDb(ws.store.url, readonly=True) as db:  # type: ignore[attr-defined]
        if not db.has_ship_tables():
            return None
        index = PgShipIndex(db)
        latest = index.outcome_counts()
        last_run = index.last_run()
        deadline = read_pg_deadline(db)
        running = [
            {"shipper": int(sid), "host": host, "pid": int(pid), "claims": int(claims)}
            for sid, host, pid, claims in db._conn().execute(
                "SELECT s.id, s.host, s.pid, "
                "(SELECT count(*) FROM ship_claims c WHERE c.owner = s.id) "
                "FROM shippers s WHERE s.stopped_at IS NULL ORDER BY s.id"
            )
        ]
    delivered = sum(latest.get(k, 0) for k in ("accepted", "updated", "duplicate"))
    holder = ws.lock_holder("ship")
    section: dict[str, Any] = {
        "latest_outcomes": latest,
        "keys_delivered": delivered,
        "complete_items": ws.store.item_counts().get("complete", 0),
        "shipping_now": holder is not None,
        # not stopped: running, or killed without a word (their claims expire)
        "shippers_not_stopped": running,
        "last_run": last_run,
    }
    if deadline is not None:
        section["deadline"] = {
            "host": deadline["host"],
            "until": _iso(float(str(deadline["until"]))),
            "active": bool(deadline["active"]),
            "reason": deadline["reason"],
        }
    return section


def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
