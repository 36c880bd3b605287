"""The playwright plugin's parts that need no browser: finding Chromium, the page pool,
the settings and request meta it gives the spider, and the spider's use of them."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from framework.crawl.spider import spider_class
from framework.spec import load_spec
from tests.plugins.playwright.test_render_spec import SHORT, write

browser = pytest.importorskip("framework_playwright.browser")
pool_mod = pytest.importorskip("framework_playwright.pool")
renderer_mod = pytest.importorskip("framework_playwright.renderer")


def _exe(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_chromium_is_found_by_setting_then_env_then_usual_paths(tmp_path):
    setting, env, usual = (_exe(tmp_path / n / "chromium") for n in ("s", "e", "u"))
    other = tmp_path / "missing"
    env_map = {"FRAMEWORK_CHROMIUM": str(env)}
    assert browser.find_chromium(str(setting), env_map, [str(usual)]) == setting
    assert browser.find_chromium(None, env_map, [str(usual)]) == env
    assert browser.find_chromium(None, {}, [str(other), str(usual)]) == usual


def test_a_named_path_that_is_not_a_program_is_refused_without_fallback(tmp_path):
    usual = _exe(tmp_path / "u" / "chromium")
    data = tmp_path / "data.txt"
    data.write_text("not a program")
    with pytest.raises(browser.BrowserNotFound, match="the FRAMEWORK_CHROMIUM setting names"):
        browser.find_chromium(str(data), {}, [str(usual)])
    with pytest.raises(browser.BrowserNotFound, match=r"\$FRAMEWORK_CHROMIUM names"):
        browser.find_chromium(None, {"FRAMEWORK_CHROMIUM": str(tmp_path)}, [str(usual)])


def test_no_chromium_says_where_it_looked_and_what_to_install(tmp_path):
    with pytest.raises(browser.BrowserNotFound) as exc:
        browser.find_chromium(None, {}, [str(tmp_path / "a"), str(tmp_path / "b")])
    text = str(exc.value)
    assert str(tmp_path / "a") in text
    assert str(tmp_path / "b") in text
    assert "apt-get install chromium" in text
    assert exc.value.exit_code == 2  # a usage error: a human installs something


class FakePage:
    def __init__(self, n: int) -> None:
        self.n = n
        self.closed = False

    def is_closed(self) -> bool:
        return self.closed

    async def close(self) -> None:
        self.closed = True


def test_the_pool_reuses_pages_and_never_holds_more_than_its_size():
    async def scenario() -> None:
        made: list[FakePage] = []

        async def create() -> FakePage:
            made.append(FakePage(len(made)))
            return made[-1]

        pool = pool_mod.PagePool(2)
        a = await pool.acquire(create)
        b = await pool.acquire(create)
        third = asyncio.ensure_future(pool.acquire(create))
        await asyncio.sleep(0.01)
        assert not third.done()  # both slots taken: the third waits
        await pool.release(a, healthy=True)
        assert await asyncio.wait_for(third, 5) is a  # reused, not a new page
        await pool.release(b, healthy=False)  # a failed request: closed, slot freed
        assert b.closed
        c = await pool.acquire(create)
        assert c is made[2]
        assert (pool.created, pool.reused, pool.discarded) == (3, 1, 1)
        await pool.release(a, healthy=True)
        await pool.release(c, healthy=True)
        await pool.close()
        assert a.closed
        assert c.closed
        assert pool.idle == 0

    asyncio.run(scenario())


def test_a_page_that_fails_to_open_frees_its_slot():
    async def scenario() -> None:
        async def broken() -> FakePage:
            raise RuntimeError("browser gone")

        async def create() -> FakePage:
            return FakePage(0)

        pool = pool_mod.PagePool(1)
        with pytest.raises(RuntimeError):
            await pool.acquire(broken)
        page = await asyncio.wait_for(pool.acquire(create), 5)
        assert page.n == 0

    asyncio.run(scenario())


def test_a_closed_idle_page_is_not_handed_out():
    async def scenario() -> None:
        pages = iter([FakePage(0), FakePage(1)])

        async def create() -> FakePage:
            return next(pages)

        pool = pool_mod.PagePool(1)
        first = await pool.acquire(create)
        await pool.release(first, healthy=True)
        first.closed = True  # the browser closed it meanwhile (a crash)
        second = await pool.acquire(create)
        assert second.n == 1

    asyncio.run(scenario())


@pytest.fixture
def chromium(tmp_path, monkeypatch):
    monkeypatch.setenv("FRAMEWORK_CHROMIUM", str(_exe(tmp_path / "bin" / "chromium")))


def test_the_spider_of_a_rendering_job_marks_only_rendered_kinds(tmp_path, chromium):
    path = write(tmp_path, SHORT)
    cls = spider_class(load_spec(path), path, tmp_path / "var")
    settings = cls.custom_settings
    assert settings["DOWNLOAD_HANDLERS"]["http"] == renderer_mod.HANDLER
    assert settings["DOWNLOAD_HANDLERS"]["https"] == renderer_mod.HANDLER
    plain = spider_class(load_spec(write(tmp_path, 'detail:\n  id: "#id::text"\n')), path, tmp_path)
    for scheme, handler in plain.custom_settings.get("DOWNLOAD_HANDLERS", {}).items():
        if scheme not in ("http", "https"):
            assert settings["DOWNLOAD_HANDLERS"][scheme] == handler  # e.g. file: stays refused
    assert settings["TWISTED_REACTOR"] == renderer_mod.REACTOR
    meta = cls.render_meta
    assert meta is not None
    assert meta("detail.rulings") == {}  # JSON: plain HTTP
    assert meta("detail.documents") == {}  # render: http
    listing = meta("list")
    assert listing["playwright"] is True
    assert listing["playwright_page_goto_kwargs"] == {"wait_until": "networkidle"}
    (method,) = listing["playwright_page_methods"]
    assert method.args[0].scroll.times == 5
    again = meta("list")  # the handler mutates what it gets: new objects per request
    assert again["playwright_page_goto_kwargs"] is not listing["playwright_page_goto_kwargs"]
    assert again["playwright_page_methods"][0] is not method


def test_a_job_that_renders_nothing_keeps_the_frameworks_handlers(tmp_path):
    path = write(tmp_path, 'detail:\n  id: "#id::text"\n')
    cls = spider_class(load_spec(path), path, tmp_path / "var")
    assert cls.render_meta is None
    handlers = cls.custom_settings["DOWNLOAD_HANDLERS"]
    assert handlers["http"] == handlers["https"] == "framework.crawl.http.HttpHandler"
    assert "TWISTED_REACTOR" not in cls.custom_settings


def test_a_kind_without_browser_options_gets_no_page_methods(tmp_path, chromium):
    body = 'render: playwright\ndetail:\n  id: "#id::text"\n'
    path = write(tmp_path, body)
    meta = spider_class(load_spec(path), path, tmp_path / "var").render_meta
    assert meta is not None
    assert meta("detail") == {
        "playwright": True,
        "playwright_page_goto_kwargs": {"wait_until": "load"},
    }


def test_a_page_is_retired_after_its_uses():
    async def scenario() -> None:
        made: list[FakePage] = []

        async def create() -> FakePage:
            made.append(FakePage(len(made)))
            return made[-1]

        pool = pool_mod.PagePool(1, max_uses=2)
        first = await pool.acquire(create)
        await pool.release(first, healthy=True)
        assert await pool.acquire(create) is first  # its second request
        await pool.release(first, healthy=True)
        assert first.closed  # served two: replaced
        second = await pool.acquire(create)
        assert second is made[1]
        assert (pool.created, pool.reused, pool.retired, pool.discarded) == (2, 1, 1, 0)

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        ("Page.goto: net::ERR_CONNECTION_REFUSED at http://127.0.0.1:9/", "connect"),
        ("Page.goto: net::ERR_NAME_NOT_RESOLVED at http://nowhere.invalid/", "dns"),
        ("Page.goto: net::ERR_TIMED_OUT at http://10.255.255.1/", "timeout"),
    ],
)
def test_browser_network_errors_are_typed_like_plain_ones(message, kind):
    actions = pytest.importorskip("framework_playwright.actions")
    failure = actions.navigation_failure(message)
    assert failure is not None
    assert failure.error_kind.value == kind
    assert str(failure).startswith("net::ERR_")


def test_other_browser_errors_stay_as_they_are():
    actions = pytest.importorskip("framework_playwright.actions")
    assert actions.navigation_failure("Target page, context or browser has been closed") is None
