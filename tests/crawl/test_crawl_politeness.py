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


@pytest.mark.parametrize("value", ["\xb2", "\u0663", "12\x0034", "Mon, 01 Jan 99999 00:00:00 GMT"])
def test_what_no_server_means_is_unreadable_not_an_error(value: str) -> None:
    # str.isdigit() takes "²" and "٣", which float() then refuses
    assert parse_retry_after(value) is None
    assert parse_retry_after(value.encode("utf-8")) is None


def test_huge_delta_seconds_are_read_as_huge_for_the_caller_to_clamp() -> None:
    assert parse_retry_after("99999999999999999999") == 1e20
    assert parse_retry_after("9" * 400) == float("inf")


@pytest.mark.parametrize("value", ["99999999999999999999", "9" * 400, "999999999"])
def test_a_demand_is_clamped_to_the_maximum(value: str) -> None:
    mw = RetryAfterMiddleware(cap=60, default=5, maximum=3600)
    req = Request("http://127.0.0.1:1/x")
    mw.process_response(req, _response(429, value))
    assert req.meta["fw_retry_after"] == 3600
    assert req.meta["fw_retry_after_over_cap"] is True


def test_under_a_maximum_below_the_cap_the_crawl_waits_instead_of_stopping() -> None:
    mw = RetryAfterMiddleware(cap=60, default=5, maximum=30)
    req = Request("http://127.0.0.1:1/x")
    mw.process_response(req, _response(429, "999999999"))
    assert req.meta["fw_retry_after"] == 30
    assert "fw_retry_after_over_cap" not in req.meta
    assert 0 < mw._wait(Request("http://127.0.0.1:1/y")) <= 30


def test_backoff_doubles_with_jitter_within_its_bounds() -> None:
    import random

    from framework.crawl.politeness import backoff_delay

    rng = random.Random(1)
    for failures in range(1, 40):
        raw = 0.5 * 2 ** (failures - 1)
        for _ in range(20):
            got = backoff_delay(failures, base=0.5, maximum=10, rng=rng)
            assert min(raw, 10) <= got <= min(1.5 * raw, 10)
    # jitter: rows that failed together do not come back together
    assert len({backoff_delay(2, 1.0, 60, rng) for _ in range(10)}) > 1
    assert backoff_delay(1, 0.0, 60, rng) == 0.0


def test_an_unreachable_robots_txt_is_one_log_line(caplog: pytest.LogCaptureFixture) -> None:
    from scrapy.exceptions import DownloadConnectionRefusedError, IgnoreRequest
    from scrapy.http.request import NO_CALLBACK

    from framework.crawl.politeness import RobotsTxtFailures

    mw = RobotsTxtFailures()
    robots = Request(
        "http://user:secret@127.0.0.1:1/robots.txt",
        meta={"dont_obey_robotstxt": True},
        callback=NO_CALLBACK,
    )
    refused = DownloadConnectionRefusedError("Connection was refused by other side: 111")
    with caplog.at_level("WARNING"), pytest.raises(IgnoreRequest):
        mw.process_exception(robots, refused)
    [record] = caplog.records
    assert record.exc_info is None
    assert "robots.txt of" in record.getMessage()
    assert "could not be fetched" in record.getMessage()
    assert "secret" not in record.getMessage()
    # the spider's own requests, and robots.txt decisions, are not its business
    assert mw.process_exception(Request("http://127.0.0.1:1/robots.txt"), refused) is None
    assert mw.process_exception(robots, IgnoreRequest("x")) is None
