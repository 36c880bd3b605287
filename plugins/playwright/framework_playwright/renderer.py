"""The renderer the core finds through the ``framework.renderers`` entry point.

It answers the three questions of :class:`framework.plugins.Renderer`: can pages be
rendered here (Chromium found), which settings a job that renders needs (the download
handler, the asyncio reactor it requires), and the meta of each rendered request
(built from the spec's ``browser:`` options, per row kind, cheaply).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from scrapy_playwright.page import PageMethod

from framework.settings import default
from framework.spec.render import RenderOptions
from framework_playwright.actions import run_actions
from framework_playwright.browser import BrowserNotFound, find_chromium
from framework_playwright.handler import DEFAULT_PAGES

__all__ = ["HANDLER", "REACTOR", "PlaywrightRenderer"]

HANDLER = "framework_playwright.handler.RenderingHandler"
REACTOR = "twisted.internet.asyncioreactor.AsyncioSelectorReactor"


class PlaywrightRenderer:
    def unavailable(self, settings: Mapping[str, Any]) -> str | None:
        try:
            find_chromium(settings.get("FRAMEWORK_CHROMIUM"))
        except BrowserNotFound as exc:
            return str(exc)
        return None

    def scrapy_settings(self, settings: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "DOWNLOAD_HANDLERS": {"http": HANDLER, "https": HANDLER},
            "TWISTED_REACTOR": REACTOR,  # scrapy-playwright runs on asyncio
            "FRAMEWORK_RENDER_REUSE": default("FRAMEWORK_RENDER_REUSE"),
            "PLAYWRIGHT_BROWSER_TYPE": "chromium",
            "PLAYWRIGHT_MAX_PAGES_PER_CONTEXT": DEFAULT_PAGES,  # the page pool's size
            "PLAYWRIGHT_MAX_CONTEXTS": default("PLAYWRIGHT_MAX_CONTEXTS"),
            # ms; past it: error `timeout`
            "PLAYWRIGHT_DEFAULT_NAVIGATION_TIMEOUT": default(
                "PLAYWRIGHT_DEFAULT_NAVIGATION_TIMEOUT"
            ),
        }

    def request_meta(self, kinds: Mapping[str, RenderOptions]) -> Callable[[str], dict[str, Any]]:
        plans: dict[str, tuple[str, RenderOptions | None]] = {
            kind: (options.wait_until, options if _acts(options) else None)
            for kind, options in kinds.items()
        }

        def meta(kind: str) -> dict[str, Any]:
            plan = plans.get(kind)
            if plan is None:
                return {}
            wait_until, options = plan
            out: dict[str, Any] = {
                "playwright": True,
                "playwright_page_goto_kwargs": {"wait_until": wait_until},
            }
            if options is not None:
                out["playwright_page_methods"] = [PageMethod(run_actions, options)]
            return out

        return meta


def _acts(options: RenderOptions) -> bool:
    return options.wait_for is not None or bool(options.click) or options.scroll is not None
