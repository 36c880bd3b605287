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


def status_section(ws: Workspace) -> dict[str, Any] | None:
    """None when nothing was ever shipped from this workspace."""
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
