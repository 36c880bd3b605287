"""A bounded pool of open browser pages, handed out per request and taken back.

Opening a page costs about 0.22 s of Chromium's time (measured, docs/benchmarks.md);
a page that was just read can load the next URL instead. A page goes back to the pool
only after its response was read whole and nothing failed; a page whose request failed
is closed (its state is unknown), and its slot opens for a fresh page. A page is also
retired after ``max_uses`` requests: a renderer process that has loaded many documents
holds more memory than a fresh one (measured, docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from playwright.async_api import Page

__all__ = ["PagePool", "close_page"]


class PagePool:
    """At most ``size`` pages exist at once; idle ones are reused, newest first."""

    def __init__(self, size: int, max_uses: int = 0) -> None:
        if size < 1:
            raise ValueError("a page pool needs at least one page")
        self.size = size
        self.max_uses = max_uses  # 0: no limit
        self._uses: dict[int, int] = {}  # id(page) -> requests it served
        self._slots = asyncio.Semaphore(size)
        self._idle: list[Page] = []
        self.created = 0
        self.reused = 0
        self.discarded = 0
        self.retired = 0

    async def acquire(self, create: Callable[[], Awaitable[Page]]) -> Page:
        """An open page: an idle one, else a new one from ``create``. Waits for a slot."""
        await self._slots.acquire()
        try:
            while self._idle:
                page = self._idle.pop()
                if not page.is_closed():
                    self.reused += 1
                    return page
            page = await create()
        except BaseException:
            self._slots.release()
            raise
        self.created += 1
        return page

    async def release(self, page: Page, *, healthy: bool) -> None:
        """Take a page back: idle for the next request, or closed when ``healthy`` is false."""
        uses = self._uses.get(id(page), 0) + 1
        try:
            if not healthy or page.is_closed():
                self.discarded += 1
            elif self.max_uses and uses >= self.max_uses:
                self.retired += 1
            else:
                self._uses[id(page)] = uses
                self._idle.append(page)
                return
            self._uses.pop(id(page), None)
            await close_page(page)
        finally:
            self._slots.release()

    async def close(self) -> None:
        """Close every idle page (pages in use are closed by their requests)."""
        idle, self._idle = self._idle, []
        self._uses.clear()
        for page in idle:
            await close_page(page)

    @property
    def idle(self) -> int:
        return len(self._idle)


async def close_page(page: Page) -> None:
    # A page of a crashed or already closed browser: nothing left to free.
    with contextlib.suppress(Exception):
        if not page.is_closed():
            await page.close()
