"""A ship run on a PostgreSQL workspace: one of any number of shippers at once.

Owns what differs from :class:`~framework_ship.run.Shipper` on a folder workspace
(which allows one shipper, under ``ship.lock``):

* no exclusive lock: the shipper registers (``shippers``) and **claims** each key
  before delivering it (:mod:`framework_ship.pg_claims`); keys another live shipper
  holds are passed over and come back at the end of the stream, until they are
  delivered by their holder or their lease ends (or the holder is seen dead);
* after a claim, the key's latest record is read again: another shipper may have
  delivered it between the first decision and the claim, and then it is skipped;
* before a unit is sent its claims are confirmed (renewed while still this
  shipper's); a key whose lease ran out is not sent and counts as ``fenced``;
* the ship log and its index are tables (:mod:`framework_ship.pg_index`), recorded
  behind the claim fence; a refused recording counts as ``fenced`` (exit 3: the key's
  newer delivery stands, the next run decides again);
* the Retry-After deadline is a table row (:mod:`framework_ship.pg_deadline`), so one
  ``Retry-After`` holds back every shipper of the workspace;
* the run's summary is kept on its ``shippers`` row when it stops.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from framework.errors import Checkpoint, FrameworkError
from framework.workspace import StoredItem
from framework_ship.decide import DECIDE_CHUNK, chunked, decide
from framework_ship.deliver import Deliverer, UnitResult
from framework_ship.index import Latest
from framework_ship.pg_claims import LEASE_SECONDS, PgClaims
from framework_ship.pg_db import ShipDb
from framework_ship.pg_deadline import PgDeadline
from framework_ship.pg_index import PgShipIndex, PgShipLog
from framework_ship.run import Shipper
from framework_ship.summary import OUTCOME_ORDER, ShipSummary

FENCED = "fenced"
POLL_SECONDS = 0.2  # how often keys held by another shipper are tried again


class PgShipper(Shipper):
    """A :class:`Shipper` whose workspace store is a
    :class:`~framework.workspace.postgres.PostgresStore`; ``ws`` needs only ``.store``
    (and ``.events`` to append the run's events to, when it has one)."""

    outcome_order = (*OUTCOME_ORDER, FENCED)

    def __init__(
        self, ws: Any, options: Any, token: str | None = None, *,
        lease_seconds: float = LEASE_SECONDS, **kwargs: Any,
    ) -> None:  # fmt: skip
        super().__init__(ws, options, token, **kwargs)
        self.db = ShipDb.open_ship(ws.store.url, readonly=options.dry_run)
        self.claims = PgClaims(self.db, lease_seconds)
        self._log: PgShipLog | None = None
        self._deliverer: Deliverer | None = None

    def close(self) -> None:
        self.db.close()

    # the hooks of Shipper ---------------------------------------------------------
    def _open_index(self, readonly: bool) -> Any:
        return PgShipIndex(self.db)

    def _run_lock(self) -> contextlib.AbstractContextManager[Any]:
        # Shared: many shippers at once (the claims order them); held, it tells
        # `status` that shipping runs, and goes with the connection of a killed one.
        if getattr(self.ws, "is_database", False):
            return self.ws.lock("ship", shared=True)
        return contextlib.nullcontext()

    def _open_log_and_index(self, host: str) -> tuple[Any, Any]:
        self.claims.register(host)
        self.claims.start_heartbeat(
            lambda exc: self.notice(f"heartbeat failed ({type(exc).__name__}); retrying")
        )
        self._log = PgShipLog(self.db, self.claims, mask=self.mask)
        return self._log, PgShipIndex(self.db)

    def _deadline(self, host: str) -> Any:
        return PgDeadline(self.db, host, self.clock)

    def _log_place(self) -> str:
        return f"the ship_log table of {self.db.where}"

    def _stopped(self, summary: ShipSummary, index: Any, host: str) -> None:
        self.claims.stop({"shipper": self.claims.shipper_id, **summary.as_dict()})

    def _held_up(self, summary: ShipSummary) -> FrameworkError | None:
        if summary.counts.get(FENCED, 0):
            return Checkpoint(
                f"{summary.counts[FENCED]} deliveries fenced: another shipper took their "
                "keys over while this one was held up; the next run decides them again"
            )
        return None

    def _append_event(self, record: dict[str, Any]) -> None:
        events = getattr(self.ws, "events", None)
        if events is not None:
            events.append({**record, "shipper": self.claims.shipper_id})

    def _unit_runner(self, deliverer: Deliverer) -> Callable[[list[StoredItem]], UnitResult]:
        self._deliverer = deliverer

        def run(unit: list[StoredItem]) -> UnitResult:
            keys = [i.dedupe_key for i in unit]
            held = self.claims.confirm(keys)
            lost = [i for i in unit if i.dedupe_key not in held]
            send = [i for i in unit if i.dedupe_key in held]
            result = deliverer.deliver(send) if send else UnitResult()
            assert self._log is not None
            for key in self._log.take_fenced(keys) | {i.dedupe_key for i in lost}:
                result.final[key] = FENCED
            self.claims.release(keys)
            return result

        return run

    # the item stream, claimed -----------------------------------------------------
    def _decided(self, index: Any) -> Iterator[tuple[StoredItem, bool, str]]:
        if self.options.dry_run:
            yield from super()._decided(index)
            return
        size = max(1, min(DECIDE_CHUNK, self._batch_limit))
        later: list[str] = []  # keys another live shipper holds: tried again at the end
        wanted = set(self.options.only)
        for chunk in chunked(self._items_noting(wanted), size):
            yield from self._claimed(index, chunk, later)
        self._tell_unknown(wanted)
        while later and not self.stop.is_set():
            # held by another shipper: wait for its recording, its lease, or its death
            self.stop.wait(POLL_SECONDS)
            keys, later = sorted(set(later)), []
            items = self.ws.store.iter_items(
                complete_only=not self.options.include_incomplete, only=keys
            )
            for chunk in chunked(items, size):
                yield from self._claimed(index, chunk, later)

    def _claimed(
        self, index: Any, chunk: list[StoredItem], later: list[str]
    ) -> Iterator[tuple[StoredItem, bool, str]]:
        """Verdicts for a chunk: what is to ship is claimed first, and decided again on
        the record read after the claim; what another shipper holds goes to ``later``."""
        retry = self.options.retry_rejected
        latest = index.lookup_many([i.dedupe_key for i in chunk])
        verdicts = [(i, *decide(i, latest.get(i.dedupe_key), retry)) for i in chunk]
        wanted = [i.dedupe_key for i, ship, _ in verdicts if ship]
        got = self.claims.claim(wanted) if wanted else {}
        again: dict[str, Latest] = index.lookup_many(sorted(got)) if got else {}
        drop: list[str] = []
        for item, ship, why in verdicts:
            key = item.dedupe_key
            if ship:
                if key not in got:
                    later.append(key)
                    continue
                now = again.get(key)
                ship, why = decide(item, now, retry)
                if not ship:
                    drop.append(key)  # delivered by another shipper since the first look
                elif now is not None and now.outcome == FENCED and self._deliverer is not None:
                    # a fenced late delivery may have overwritten the key at the door;
                    # the plain key would only replay the server's earlier answer
                    self._deliverer.use_redelivery_key(item)
                    why = "a late delivery was fenced; sent again under the redelivery key"
            yield item, ship, why
        self.claims.release(drop)


__all__ = ["FENCED", "PgShipper"]
