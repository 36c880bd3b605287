"""The claim loop of one of ``--processes N`` workers (or of any crawl on a database).

A :class:`Claimer` takes batches of rows by lease (framework/workspace/leases.py) as
room frees up, keeps the heartbeat that renews them, and leases the rows a committed
page found that this worker will fetch itself. Room is the batch less the rows it
holds that still need the downloader; a row whose response waits for its group's
commit keeps its lease (the fence) but no longer holds a request slot.

:func:`join` (called from the runtime's ``from_crawler``) reads the settings that say
whether this crawl is such a worker; the claimer commits nothing.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any

from framework.crawl.workers import (
    BATCH_SETTING,
    LEASE_SETTING,
    WORKER_SETTING,
    Heartbeat,
    shared_crawl_lock,
)
from framework.settings import default
from framework.workspace.leases import LEASE_SECONDS
from framework.workspace.leases import Leases as SqliteLeases

if TYPE_CHECKING:
    from contextlib import ExitStack

    from scrapy.settings import BaseSettings
    from twisted.internet.defer import Deferred

    from framework.crawl.group import GroupCommit
    from framework.crawl.page import CompiledJob
    from framework.workspace import Row, Workspace
    from framework.workspace.leases import Leases

logger = logging.getLogger("framework.crawl.runtime")  # the crawl runtime's voice (HINT_LOGGERS)


def join(ws: Workspace, s: BaseSettings, stack: ExitStack) -> tuple[bool, int, Leases]:
    """Take the workspace's crawl lock (into ``stack``) and this process's leases:
    whether it claims its rows (one of `--processes N`, or any crawl on a database),
    and how many rows it holds at most."""
    claiming, batch = False, 0
    if ws.is_database or s.getbool(WORKER_SETTING, default(WORKER_SETTING)):
        # one of `--processes N`: the parent holds the lock, shared (workers.py);
        # on a database every crawl is a worker, each with its share of the lock
        stack.enter_context(
            ws.lock("crawl", shared=True) if ws.is_database else shared_crawl_lock(ws)
        )
        claiming = True
        # rows held: what it can have in flight on one host, twice (in flight, and as
        # many waiting); more would leave the other workers idle while this one sits on
        # the rows it found
        in_flight = min(
            s.getint("CONCURRENT_REQUESTS", default("CONCURRENT_REQUESTS")),
            s.getint("CONCURRENT_REQUESTS_PER_DOMAIN", default("CONCURRENT_REQUESTS_PER_DOMAIN")),
        )
        batch = s.getint(BATCH_SETTING, 0) or 2 * max(1, in_flight)
    else:
        stack.enter_context(ws.lock("crawl"))
    lease_s = s.getfloat(LEASE_SETTING, LEASE_SECONDS)
    if ws.is_database:
        from framework.workspace.postgres_leases import PgLeases

        pg: Any = ws.store  # a PgWorkspace's store is a PostgresStore
        leases: Leases = PgLeases(pg, lease_s)  # type: ignore[assignment]
    else:
        leases = SqliteLeases(ws.store, lease_s)
    return claiming, batch, leases


class Claimer:
    def __init__(
        self,
        leases: Leases,
        group: GroupCommit[Any, Any],
        batch: int,
        job: CompiledJob,
        event: Callable[..., None],
    ) -> None:
        self.leases = leases
        self.group = group
        self.batch = batch  # rows it holds at most
        # kinds whose page finds the next page of its kind (pagination): taken first,
        # a chain being only as fast as its slowest link
        self.chain_kinds = tuple(n for n, k in job.kinds.items() if k.pagination is not None)
        self.event = event
        self._heartbeat: Heartbeat | None = None
        self._waiting: Deferred[None] | None = None  # the loop waits on it for room

    async def rows(self, max_attempts: int, running: Callable[[], bool]) -> AsyncIterator[Row]:
        """Batches claimed as room frees up, while ``running()``, until no row is open
        and no other live worker holds one (it may still find rows, or die and leave
        its rows to this one)."""
        leases = self.leases
        self._heartbeat = Heartbeat(leases, self.lost)
        self._heartbeat.start()
        # rows another worker finds appear at any moment: look again soon (a claim is one
        # short transaction); this worker's own commits wake it at once
        idle = min(0.05, leases.lease_seconds / 4)
        while running():
            room = self.room()
            if 2 * room < self.batch:  # most of the batch still in flight
                await self._room_freed(idle)
                continue
            rows = leases.claim(room, max_attempts, first=self.chain_kinds)
            for row in rows:
                yield row
            if rows:
                continue
            if not leases.tokens and not leases.others_working(max_attempts):
                # Look again before finishing: between the claim and that look, another
                # worker may have committed its last row and inserted the rows it found,
                # free until it leases some (measured: a worker finished with 11 rows
                # pending, exit 3). Those are claimed here, or held by it now.
                rows = leases.claim(room, max_attempts, first=self.chain_kinds)
                if not rows and not leases.others_working(max_attempts):
                    if leases.claim_passed_over(max_attempts):
                        # a free row another worker's claim holds locked this moment
                        # (PostgreSQL): leased by its commit, or free again; look again
                        await self._room_freed(idle)
                        continue
                    return  # nothing open is left to anyone: the engine closes when idle
                for row in rows:
                    yield row
                continue
            await self._room_freed(idle)

    async def _room_freed(self, timeout: float) -> None:
        """Until half the batch is free again (a commit woke it), or ``timeout``."""
        from scrapy.utils.defer import maybe_deferred_to_future
        from twisted.internet import reactor
        from twisted.internet.defer import Deferred
        from twisted.internet.task import deferLater

        waiting: Deferred[None] = Deferred()
        self._waiting = waiting
        later = deferLater(reactor, timeout, self.wake)
        later.addErrback(lambda _: None)  # cancelled below when a commit woke it first
        try:
            await maybe_deferred_to_future(waiting)
        finally:
            self._waiting = None
            later.cancel()

    def wake(self) -> None:
        waiting, self._waiting = self._waiting, None
        if waiting is not None and not waiting.called:
            waiting.callback(None)

    def room(self) -> int:
        """Rows it may still take: its batch, less the rows it holds that still need the
        downloader. A row whose response is in and waits for its group's commit keeps
        its lease (the fence) but no longer holds a request slot; counted as held, it
        left the downloader short while the group waited."""
        return self.batch - len(self.leases.tokens) + len(self.group)

    def wake_if_room(self) -> None:
        """Wake the loop once half the batch is free."""
        if 2 * self.room() >= self.batch:
            self.wake()

    def settled(self, row_id: int) -> None:
        """Done with a row (committed, refused or lost): its room is free, and the claim
        loop wakes once half the batch is."""
        self.leases.done(row_id)
        self.wake_if_room()

    def lost(self, ids: set[int]) -> None:
        """The heartbeat found rows of this worker taken over (it was paused past its
        lease): their outcomes will be refused; their room is free for new claims."""
        for rid in ids:
            self.settled(rid)
        self.event("leases_lost", worker=self.leases.worker_id, rows=sorted(ids)[:20], n=len(ids))
        logger.warning(
            "%d leased rows were taken over by another worker (this one was paused past "
            "its lease): their outcomes will not be committed",
            len(ids),
        )

    def adopt(self, inserted: Sequence[Row]) -> list[Row]:
        """Of the rows this worker just found, those it leases (the next pages of the
        chain, and as many others as it has room for, still free): the only ones it
        schedules; the rest are anyone's."""
        # a next page (its kind paginates) always, even with no room: the one row that
        # leads to more work, sent now (the spider gives it the first place) rather than
        # left to be claimed behind the rows found before it (docs/benchmarks.md,
        # "Several processes"); then as many others as there is room for
        chain = [r for r in inserted if r.kind in self.chain_kinds]
        rest = [r for r in inserted if r.kind not in self.chain_kinds]
        took = chain + rest[: max(0, self.room() - len(chain))]
        if not took:
            return []
        got = self.leases.claim_ids([r.id for r in took])
        return [r for r in took if r.id in got]

    def stop(self) -> None:
        """Stop the heartbeat (the leases are released by the runtime's close)."""
        if self._heartbeat is not None:
            self._heartbeat.stop()
