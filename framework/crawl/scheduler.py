"""A Scrapy scheduler that keeps no state of its own on disk.

The workspace rows are the crawl's memory. Scrapy's own JOBDIR persistence (a disk
queue written only on a clean close, and a seen-set that survives a hard kill) would
fight them: after a ``kill -9`` the seen-set remains while the queue is gone, and a
resumed crawl silently filters every pending request (scrapy issues 4106 and 2399).
So this scheduler is Scrapy's own with the disk queue switched off, and the framework
pairs it with the no-op dupefilter: rows are unique by fingerprint in the store, and
a request is only ever scheduled for a row that is not ok.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapy.core.scheduler import Scheduler
from scrapy.utils.misc import build_from_crawler, load_object

if TYPE_CHECKING:
    from typing import Self

    from scrapy.crawler import Crawler


class MemoryScheduler(Scheduler):
    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        settings = crawler.settings
        return cls(
            dupefilter=build_from_crawler(load_object(settings["DUPEFILTER_CLASS"]), crawler),
            jobdir=None,  # JOBDIR is the workspace; the rows there are the queue
            dqclass=load_object(settings["SCHEDULER_DISK_QUEUE"]),
            mqclass=load_object(settings["SCHEDULER_MEMORY_QUEUE"]),
            logunser=settings.getbool("SCHEDULER_DEBUG"),
            stats=crawler.stats,
            pqclass=load_object(settings["SCHEDULER_PRIORITY_QUEUE"]),
            crawler=crawler,
        )
