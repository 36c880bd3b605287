"""What happens in a rendered page before it is read, from the spec's ``browser:``.

Runs as one scrapy-playwright page method after the navigation: ``wait_for``, then the
clicks in order, then the scrolling (see :class:`~framework.spec.render.RenderOptions`).
Every wait is bounded; a wait that runs out raises :class:`RenderTimeout`, which the
crawl records as the row's typed error ``timeout``. A page that answered an HTTP error
is left alone, so its row records that status (``http_4xx``/``http_5xx``) instead of a
timeout of a selector that could never appear.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from playwright.async_api import TimeoutError as PlaywrightTimeout

from framework.errors import PageLevelError
from framework.spec.render import Click, RenderOptions, Scroll, WaitFor, browser_selector
from framework.workspace import ErrorKind

if TYPE_CHECKING:
    from playwright.async_api import Page

__all__ = [
    "CHANGE_TIMEOUT",
    "NavigationFailed",
    "RenderTimeout",
    "navigation_failure",
    "run_actions",
]

CHANGE_TIMEOUT = 10.0  # seconds a click without `wait_for` waits for the page to change

# The main document's HTTP status as the page saw it (Chromium's navigation timing).
_STATUS_JS = """() => {
  const nav = performance.getEntriesByType("navigation")[0];
  return nav && nav.responseStatus ? nav.responseStatus : 0;
}"""
# Arm a flag that the next added/removed node or changed text sets.
_WATCH_JS = """() => {
  window.__fwChanged = false;
  const seen = new MutationObserver(() => { window.__fwChanged = true; seen.disconnect(); });
  seen.observe(document.documentElement, {childList: true, subtree: true, characterData: true});
}"""
_HEIGHT_JS = "() => document.documentElement.scrollHeight"


class RenderTimeout(PageLevelError):
    """A bounded wait in the page ran out. ``error_kind`` types the row's error (and
    "Timeout" in the name is how the crawl's classifier reads it without that)."""

    error_kind = ErrorKind.TIMEOUT


class NavigationFailed(PageLevelError):
    """The browser could not load the page; ``error_kind`` says how, as for plain pages."""

    def __init__(self, error_kind: ErrorKind, note: str) -> None:
        super().__init__(note)
        self.error_kind = error_kind


# Chromium's net:: errors, as the crawl types the same failures of plain requests.
_NET_ERRORS = (
    ("ERR_NAME_NOT_RESOLVED", ErrorKind.DNS),
    ("ERR_NAME_RESOLUTION_FAILED", ErrorKind.DNS),
    ("ERR_CONNECTION_REFUSED", ErrorKind.CONNECT),
    ("ERR_CONNECTION_RESET", ErrorKind.CONNECT),
    ("ERR_CONNECTION_CLOSED", ErrorKind.CONNECT),
    ("ERR_EMPTY_RESPONSE", ErrorKind.CONNECT),
    ("ERR_ADDRESS_UNREACHABLE", ErrorKind.CONNECT),
    ("ERR_CONNECTION_TIMED_OUT", ErrorKind.TIMEOUT),
    ("ERR_TIMED_OUT", ErrorKind.TIMEOUT),
)


def navigation_failure(message: str) -> NavigationFailed | None:
    """A typed failure for a Playwright error message naming a net:: error, else None."""
    for code, kind in _NET_ERRORS:
        if f"net::{code}" in message:
            return NavigationFailed(kind, f"net::{code}")
    return None


async def run_actions(page: Page, options: RenderOptions) -> None:
    """Bring the page to the state the spec reads (a scrapy-playwright page method)."""
    status = await page.evaluate(_STATUS_JS)
    if status >= 400:
        return
    if options.wait_for is not None:
        await _wait_for(page, options.wait_for, "wait_for")
    for click in options.click:
        await _click(page, click)
    if options.scroll is not None:
        await _scroll(page, options.scroll)


async def _wait_for(page: Page, wait: WaitFor, what: str) -> None:
    try:
        await page.wait_for_selector(
            browser_selector(wait.selector), state="attached", timeout=wait.timeout * 1000
        )
    except PlaywrightTimeout:
        raise RenderTimeout(
            f"{what} {wait.selector!r}: not in the page after {wait.timeout:g} s"
        ) from None


async def _click(page: Page, click: Click) -> None:
    target = page.locator(browser_selector(click.selector)).first
    first_wait = click.wait_for.timeout if click.wait_for is not None else CHANGE_TIMEOUT
    for n in range(click.times):
        if n == 0:
            try:
                await target.wait_for(state="visible", timeout=first_wait * 1000)
            except PlaywrightTimeout:
                raise RenderTimeout(
                    f"click {click.selector!r}: no visible element after {first_wait:g} s"
                ) from None
        elif not await target.is_visible():
            return  # a "load more" button that is gone: everything is loaded
        await page.evaluate(_WATCH_JS)
        try:
            await target.click(timeout=first_wait * 1000)
        except PlaywrightTimeout:
            raise RenderTimeout(f"click {click.selector!r}: not clickable") from None
        if click.wait_for is not None:
            await _wait_for(page, click.wait_for, f"click {click.selector!r}: wait_for")
            continue
        try:
            await page.wait_for_function(
                "() => window.__fwChanged === true", timeout=CHANGE_TIMEOUT * 1000
            )
        except PlaywrightTimeout:
            raise RenderTimeout(
                f"click {click.selector!r}: the page did not change within {CHANGE_TIMEOUT:g} s"
            ) from None


async def _scroll(page: Page, scroll: Scroll) -> None:
    for _ in range(scroll.times):
        height = await page.evaluate(_HEIGHT_JS)
        await page.evaluate("() => window.scrollTo(0, document.documentElement.scrollHeight)")
        try:
            await page.wait_for_function(
                "(h) => document.documentElement.scrollHeight > h",
                arg=height,
                timeout=scroll.pause * 1000,
            )
        except PlaywrightTimeout:
            return  # it stopped growing: the end of the list
