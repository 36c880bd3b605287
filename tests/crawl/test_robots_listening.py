"""The robots.txt size cap listens to Scrapy's download signals only while a robots.txt
is on its way: every page of a crawl would otherwise pay for two receivers."""

from __future__ import annotations

from scrapy import signals
from scrapy.exceptions import IgnoreRequest, StopDownload
from scrapy.http import Headers, Request, Response
from scrapy.http.request import NO_CALLBACK
from scrapy.signalmanager import SignalManager

from framework.crawl.politeness import ROBOTS_MAX_BYTES, RobotsTxtFailures


def _robots(url: str = "http://example.org/robots.txt") -> Request:
    # as Scrapy's RobotsTxtMiddleware builds it
    return Request(url, priority=10000, meta={"dont_obey_robotstxt": True}, callback=NO_CALLBACK)


def _listening(sm: SignalManager) -> int:
    return len(sm.send_catch_log(signals.bytes_received, data=b"x", request=Request("http://a/")))


def test_it_listens_from_a_robots_request_to_its_answer() -> None:
    sm = SignalManager()
    mw = RobotsTxtFailures(signal_manager=sm)
    page = Request("http://example.org/page")
    mw.process_request(page)
    assert _listening(sm) == 0  # a page alone: no receiver
    first, second = _robots(), _robots("http://example.net/robots.txt")
    mw.process_request(first)
    mw.process_request(second)
    assert _listening(sm) == 1
    mw.process_response(first, Response(first.url, body=b"User-agent: *\n"))
    assert _listening(sm) == 1  # the second is still on its way
    mw.process_exception(second, IgnoreRequest("gone"))
    assert _listening(sm) == 0
    mw.process_response(page, Response(page.url))
    assert _listening(sm) == 0


def test_a_redirect_of_a_robots_request_is_the_same_one() -> None:
    sm = SignalManager()
    mw = RobotsTxtFailures(signal_manager=sm)
    first = _robots("http://example.org/robots.txt")
    mw.process_request(first)
    # RedirectMiddleware answers the 301 with a copy; the 301 never reaches this one
    moved = first.replace(url="https://example.org/robots.txt")
    mw.process_request(moved)
    assert _listening(sm) == 1
    mw.process_response(moved, Response(moved.url, body=b""))
    assert _listening(sm) == 0


def test_while_listening_a_robots_download_stops_past_the_cap() -> None:
    sm = SignalManager()
    mw = RobotsTxtFailures(signal_manager=sm, maxsize=1000)
    robots = _robots()
    mw.process_request(robots)
    assert robots.meta["download_maxsize"] == 0  # never cancelled for its size
    sm.send_catch_log(signals.headers_received, headers=Headers(), request=robots)
    assert robots.meta["download_maxsize"] == 1000  # what it may inflate to
    chunk = b"x" * (ROBOTS_MAX_BYTES // 2)
    results = [
        sm.send_catch_log(signals.bytes_received, data=chunk, request=robots) for _ in range(3)
    ]
    stopped = [r for rs in results for _, r in rs if getattr(r, "value", None) is not None]
    assert len(stopped) == 1
    assert isinstance(stopped[0].value, StopDownload)
