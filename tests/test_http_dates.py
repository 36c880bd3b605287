"""framework.http_dates.parse_retry_after: the one Retry-After reader of the crawl
(framework.crawl.politeness) and the shipper (framework_ship.policy)."""

from __future__ import annotations

import pytest

from framework.http_dates import parse_retry_after

# 1_900_000_000 is Tue, 17 Mar 2030 17:46:40 GMT
NOW = 1_900_000_000.0


@pytest.mark.parametrize(
    "value",
    [
        "Sun, 17 Mar 2030 17:48:40 GMT",  # IMF-fixdate
        "Sunday, 17-Mar-30 17:48:40 GMT",  # RFC 850 (obsolete)
        "Sun Mar 17 17:48:40 2030",  # asctime (obsolete, no zone: GMT)
        "Sun Mar 17 17:48:40 2030".encode("latin-1"),  # as the header's bytes
    ],
)
def test_every_http_date_form_is_read_as_gmt(value: str | bytes) -> None:
    assert parse_retry_after(value, NOW) == pytest.approx(120.0)


def test_delta_seconds() -> None:
    assert parse_retry_after("120", NOW) == 120.0
    assert parse_retry_after(b" 7 ", NOW) == 7.0
    assert parse_retry_after("0", NOW) == 0.0


def test_a_date_in_the_past_means_now() -> None:
    assert parse_retry_after("Tue Mar 17 17:40:00 2030", NOW) == 0.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0


@pytest.mark.parametrize("value", [None, "", "soon", "-5", "1.5e3", "\u0663", "Wed, 99 Foo 2015"])
def test_unreadable_values_are_none(value: str | None) -> None:
    assert parse_retry_after(value, NOW) is None


def test_the_crawl_and_the_shipper_read_with_the_same_function() -> None:
    from framework_ship import policy

    from framework.crawl import politeness

    assert politeness.parse_retry_after is parse_retry_after
    assert policy.parse_retry_after is parse_retry_after
