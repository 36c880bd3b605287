"""``--metrics-port``: the job's ``/metrics`` served while its crawl runs.

Owns when the server runs: a Scrapy extension, registered for every crawl, that starts
the ``framework.metrics`` plugin's server (:func:`framework.plugins.serve_metrics`) when
the spider opens and stops it when the spider closes. Without ``FRAMEWORK_METRICS_PORT``
(``framework crawl --metrics-port N``, ``scrapy crawl -s FRAMEWORK_METRICS_PORT=N``) it
raises NotConfigured before anything else: no plugin is looked up, no thread started, a
crawl pays one settings lookup. The setting is the operator's: a spec cannot set it
(it is not among the spec's settings, :mod:`framework.spec.checks.settings`).

The server reads the workspace as ``framework dashboard`` does, read-only and only when
scraped; it binds loopback only and logs the port it got (``0`` lets the system choose).
A missing plugin stops the crawl before it starts (exit 2); a port that cannot be bound
when the spider opens is logged as an error and the crawl goes on without it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from scrapy import signals
from scrapy.exceptions import NotConfigured

from framework.errors import UsageError
from framework.plugins import METRICS_HOST, metrics_server, serve_metrics
from framework.workspace.locate import is_database_url

if TYPE_CHECKING:
    from typing import Self

    from scrapy import Spider
    from scrapy.crawler import Crawler

    from framework.plugins import MetricsHandle

logger = logging.getLogger(__name__)

SETTING = "FRAMEWORK_METRICS_PORT"


def metrics_port(value: object) -> int:
    """``value`` (a flag's or ``-s``'s) as a port, or a one-line UsageError (exit 2)."""
    try:
        port = int(str(value).strip())
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise UsageError(f"{SETTING} expects a port number (0-65535; 0: any free), got {value!r}")
    return port


def announce(handle: MetricsHandle, job: str) -> None:
    """The line that says where the metrics are (tests and operators read the port)."""
    logger.info("metrics: http://%s:%d/metrics (job %s)", handle.host, handle.port, job)


class MetricsServer:
    def __init__(self, crawler: Crawler, port: int) -> None:
        self.crawler = crawler
        self.port = port
        self.handle: MetricsHandle | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        raw = crawler.settings.get(SETTING)
        if raw is None or raw == "":
            raise NotConfigured(f"{SETTING} is not set")
        ext = cls(crawler, metrics_port(raw))
        metrics_server()  # now: a missing plugin stops the crawl before it starts
        crawler.signals.connect(ext.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(ext.spider_closed, signal=signals.spider_closed)
        return ext

    def spider_opened(self, spider: Spider) -> None:
        jobdir = str(self.crawler.settings.get("JOBDIR"))
        where: Path | str = jobdir if is_database_url(jobdir) else Path(jobdir).resolve()
        try:
            self.handle = serve_metrics(spider.name, where, METRICS_HOST, self.port)
        except UsageError as exc:  # a port taken meanwhile: the crawl matters more
            logger.error("%s; the crawl goes on without /metrics", exc)
            return
        announce(self.handle, spider.name)

    def spider_closed(self, spider: Spider) -> None:
        if self.handle is not None:
            self.handle.stop()
            self.handle = None


__all__ = ["SETTING", "MetricsServer", "announce", "metrics_port"]
