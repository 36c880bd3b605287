"""``scrapy parse --spider JOB URL``: Scrapy's own command, in parse-only mode.

The only change is the ``FRAMEWORK_PARSE_ONLY`` setting (at the command's priority, as
Scrapy's commands set theirs): the generated spider then builds no crawl runtime, so
the job's workspace is never opened, no row or event is written and no run is
recorded; its ``parse`` callback extracts the page and hands back items and requests
(:meth:`framework.crawl.spider.JobSpider.parse`). Choose the page kind with
``-a kind=K`` (default: the job's start kind).
"""

from __future__ import annotations

from typing import Any, ClassVar

from scrapy.commands.parse import Command as ScrapyParse


class Command(ScrapyParse):
    default_settings: ClassVar[dict[str, Any]] = {
        **ScrapyParse.default_settings,
        "FRAMEWORK_PARSE_ONLY": True,
    }

    def short_desc(self) -> str:
        return "Parse URL with a job's spider and print the results (writes nothing)"
