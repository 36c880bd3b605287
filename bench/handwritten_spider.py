"""The hand-written twin of bench/specs/bench.yaml: the same extraction, idiomatic Scrapy.

What a Scrapy user would write for the bench site: ``response.css``, ``response.follow``,
items as dicts. Every field is normalised and typed as the spec says (whitespace
collapsed, ``DD.MM.YYYY`` -> ISO date, ``Rp 1.234,50`` -> 1234.5, the amount's fallback
selector, the required title), so both spiders yield the same items.

    scrapy runspider bench/handwritten_spider.py -a base=http://127.0.0.1:PORT -o items.jsonl
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import scrapy
from parsel import Selector
from scrapy.http import Response

SOURCE_TYPE = "bench"
_NOT_AMOUNT = re.compile(r"[^0-9,]")


def clean(text: str | None) -> str | None:
    return " ".join(text.split()) if text is not None else None


class HandwrittenSpider(scrapy.Spider):
    name = "handwritten"

    def __init__(self, base: str = "http://127.0.0.1:8800", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_urls = [f"{base.rstrip('/')}/cases"]

    def parse(self, response: Response) -> Iterator[scrapy.Request]:
        for row in response.css("table.cases tbody tr"):
            href = row.css("a.detail::attr(href)").get()
            if href:
                yield response.follow(href, self.parse_case)
        next_page = response.css("a.next::attr(href)").get()
        if next_page:
            yield response.follow(next_page, self.parse)

    def parse_case(self, response: Response) -> Iterator[dict[str, Any]]:
        item = case_item(response)
        if item is None:
            self.logger.warning("missing required field on %s", response.url)
            self.crawler.stats.inc_value("handwritten/missing_required")
            return
        if item["amount"] is not None and item["amount"] < 0:
            self.logger.warning("amount below 0 on %s", response.url)
        yield item


def case_item(sel: Response | Selector) -> dict[str, Any] | None:
    """A case's detail page as its item; None when the case number or title is missing.
    (A function of the page, not of the spider: bench/crawlee_crawl.py builds its items
    with it too, so every crawler extracts alike.)"""
    case_id = clean(sel.css("#case-number::text").get())
    title = clean(sel.css("h1.title::text").get())
    if not case_id or not title:
        return None
    amount_text = sel.css(".amount::text").get() or sel.css("[data-field=amount]::text").get()
    amount = None
    if amount_text:
        amount = float(_NOT_AMOUNT.sub("", amount_text).replace(",", "."))
    filed = clean(sel.css(".filed::text").get())
    return {
        "dedupe_key": f"{SOURCE_TYPE}:{case_id}",
        "source_type": SOURCE_TYPE,
        "source_id": case_id,
        "title": title,
        "court": clean(sel.css(".court::text").get()),
        "filed": datetime.strptime(filed, "%d.%m.%Y").date().isoformat() if filed else None,
        "amount": amount,
        "room": clean(sel.css(".room::text").get()),
        "plaintiff": clean(sel.css(".plaintiff::text").get()),
        "defendant": clean(sel.css(".defendant::text").get()),
        "judges": [clean(j) for j in sel.css("ul.judges li::text").getall()],
    }
