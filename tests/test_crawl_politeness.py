"""Retry-After parsing (both RFC 9110 forms) and the per-host deadline."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
from scrapy.http import HtmlResponse, Request

from framework.crawl.politeness import RetryAfterMiddleware, parse_retry_after


def test_delta_seconds() -> None:
    assert parse_retry_after("120") == 120.0
    assert parse_retry_after(b" 7 ") == 7.0


def test_http_date_in_the_future() -> None:
    now = time.time()
    when = datetime.fromtimestamp(now, UTC) + timedelta(seconds=90)
    got = parse_retry_after(format_datetime(when, usegmt=True), now=now)
    assert got is not None
    assert 89.0 <= got <= 90.0


def test_http_date_in_the_past_means_now() -> None:
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0


@pytest.mark.parametrize("value", [None, "", "soon", "-5", "1.5e3", "Wed, 99 Foo 2015"])
def test_unreadable_values_are_none(value: str | None) -> None:
    assert parse_retry_after(value) is None


def _response(status: int, retry_after: str | None) -> HtmlResponse:
    # As the downloader hands it over: not yet bound to its request.
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return HtmlResponse("http://127.0.0.1:1/x", status=status, headers=headers, body=b"")


def test_429_moves_the_host_deadline_later_only() -> None:
    mw = RetryAfterMiddleware(cap=60, default=5)
    req = Request("http://127.0.0.1:1/x")
    mw.process_response(req, _response(429, "30"))
    first = mw.not_before["127.0.0.1:1"]
    mw.process_response(req, _response(429, "1"))
    assert mw.not_before["127.0.0.1:1"] == first  # a shorter demand never shortens it


def test_over_the_cap_is_marked_not_slept() -> None:
    mw = RetryAfterMiddleware(cap=60, default=5)
    req = Request("http://127.0.0.1:1/x")
    mw.process_response(req, _response(503, "3600"))
    assert req.meta["fw_retry_after_over_cap"] is True
    assert "127.0.0.1:1" not in mw.not_before


def test_503_without_retry_after_is_an_outage_not_a_rate_limit() -> None:
    mw = RetryAfterMiddleware(cap=60, default=5)
    req = Request("http://127.0.0.1:1/x")
    mw.process_response(req, _response(503, None))
    assert "fw_retry_after" not in req.meta
    assert mw.not_before == {}


def test_429_without_retry_after_waits_the_default() -> None:
    mw = RetryAfterMiddleware(cap=60, default=5)
    req = Request("http://127.0.0.1:1/x")
    mw.process_response(req, _response(429, None))
    assert req.meta["fw_retry_after"] == 5


def test_a_stopping_crawl_abandons_requests_instead_of_waiting() -> None:
    import asyncio

    from framework.crawl.politeness import Abandoned

    mw = RetryAfterMiddleware(cap=60, default=5, is_closing=lambda: True)
    req = Request("http://127.0.0.1:1/x")
    mw.process_response(req, _response(429, "30"))
    with pytest.raises(Abandoned):
        asyncio.run(mw.process_request(Request("http://127.0.0.1:1/y")))
    # a host that asked nothing is not held back, closing or not
    asyncio.run(mw.process_request(Request("http://127.0.0.2:1/z")))


def test_a_deadline_from_an_earlier_run_rides_on_the_request() -> None:
    mw = RetryAfterMiddleware(cap=60, default=5)
    req = Request("http://127.0.0.1:1/x", meta={"fw_not_before": time.time() + 30})
    assert 0 < mw._wait(req) <= 30
    assert mw._wait(Request("http://127.0.0.1:1/x")) <= 0
