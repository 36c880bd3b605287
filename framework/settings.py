"""The framework's default Scrapy settings for every generated job.

Precedence, lowest first: Scrapy's defaults, these, the spec's ``settings:``, then
``-s NAME=VALUE`` on the command line. Values chosen by measurement are explained in
docs/benchmarks.md.
"""

from __future__ import annotations

from typing import Any

from framework import __version__

#: Framework-only settings (read in exactly one place each, in ``from_crawler``).
FRAMEWORK_SETTINGS: dict[str, Any] = {
    "FRAMEWORK_MAX_ATTEMPTS": 3,  # per row, across runs; set from the spec's max_attempts
    "FRAMEWORK_MAX_REQUESTS": 0,  # 0: no cap; else stop (checkpoint) after that many
    "FRAMEWORK_STOP_ON_429": False,  # stop (checkpoint) at the first 429
    "FRAMEWORK_HALT_ON_DRIFT": False,  # stop (exit 4) before storing a drifted page
    "FRAMEWORK_RETRY_AFTER_CAP": 120.0,  # seconds; a longer Retry-After stops the run
    "FRAMEWORK_RETRY_AFTER_DEFAULT": 5.0,  # 429/503 without a usable Retry-After
    "FRAMEWORK_RETRY_AFTER_MAX": 86400.0,  # seconds; a longer Retry-After counts as this
    "FRAMEWORK_RETRY_BACKOFF_BASE": 1.0,  # seconds before a row's retry, doubling per
    "FRAMEWORK_RETRY_BACKOFF_MAX": 30.0,  # ... failed attempt in the run, up to this
    "FRAMEWORK_DOWN_HOST_AFTER": 3,  # connect/dns failures in a row: stop (checkpoint)
    "FRAMEWORK_ERROR_RATE_MAX": 0.5,  # breaker: failed share of the last window ...
    "FRAMEWORK_ERROR_RATE_WINDOW": 50,  # ... attempts (breaker idle until the window fills)
    "FRAMEWORK_FRESH": False,  # forget rows (items stay) and start over
    # Group commit (framework.crawl.group): the outcomes of the responses that arrive
    # within this many ms, or this many of them, share one transaction; 0 (either):
    # one transaction per response. A kill loses only outcomes still waiting. The
    # window's default (None) is the workspace's: 5 ms on SQLite, 50 on PostgreSQL,
    # where each commit is several round trips (docs/benchmarks.md).
    "FRAMEWORK_COMMIT_WINDOW_MS": None,
    "FRAMEWORK_COMMIT_BATCH": 32,
    # What one page may cost (framework.extract.patterns; docs/operations.md)
    "FRAMEWORK_EXTRACT_TIMEOUT": 10.0,  # CPU seconds of regex work per page, then parse error
    "FRAMEWORK_MAX_MATCHES": 100_000,  # matches one selector or JSON path may make
    "FRAMEWORK_MAX_MATCH_CHARS": 1 << 20,  # characters one selector may return
    "FRAMEWORK_MAX_ITEM_BYTES": 1 << 20,  # one record as stored JSON
}


def default_settings(job: str) -> dict[str, Any]:
    return {
        **FRAMEWORK_SETTINGS,
        # Safety: Scrapy 2.19 starts a remote-control server that executes Python sent
        # to it and leaves its port and token in a job file after a kill; the telnet
        # console is the older door of the same kind. A scraping job needs neither.
        "REMOTE_CONTROL_ENABLED": False,
        "TELNETCONSOLE_ENABLED": False,
        # A page URL may carry a resolved {env:NAME} credential (?token=): another site
        # gets only the origin in Referer, never the path and query (browsers' default).
        "REFERRER_POLICY": "strict-origin-when-cross-origin",
        "ROBOTSTXT_OBEY": True,
        "USER_AGENT": f"framework/{__version__} (declarative Scrapy job {job!r})",
        # The rows are the queue and the dedupe: see framework.crawl.scheduler.
        "SCHEDULER": "framework.crawl.scheduler.MemoryScheduler",
        "DUPEFILTER_CLASS": "scrapy.dupefilters.BaseDupeFilter",
        # Scrapy 2.19's, with CONCURRENT_REQUESTS_PER_DOMAIN (and a slot's concurrency)
        # holding on the asyncio reactor: framework.crawl.downloader
        "DOWNLOADER": "framework.crawl.downloader.Downloader",
        # Scrapy writes spider.state into JOBDIR on close; the workspace replaces it.
        # SIGINT/SIGTERM: a bounded stop that leaves in-flight rows pending (stopping.py)
        "EXTENSIONS": {
            "scrapy.extensions.spiderstate.SpiderState": None,
            "framework.crawl.stopping.SignalStop": 0,
            # off unless FRAMEWORK_PROGRESS is set (framework crawl does): output.py
            "framework.crawl.output.Progress": 0,
        },
        # Lean jobs: what a YAML job never uses, each back with `-s` (docs/benchmarks.md).
        # Rows, not request depth, say how far a crawl goes (DEPTH_LIMIT is not a spec
        # setting; `-s SPIDER_MIDDLEWARES='{"scrapy.spidermiddlewares.depth.
        # DepthMiddleware": 900}'` brings it back); every status reaches the spider
        # (HTTPERROR_ALLOW_ALL below), so HttpErrorMiddleware would pass all; the
        # generated spider builds every request's meta itself, so there is no copied
        # meta for MetaCopyDetection to warn about.
        "SPIDER_MIDDLEWARES": {
            "scrapy.spidermiddlewares.depth.DepthMiddleware": None,
            "scrapy.spidermiddlewares.httperror.HttpErrorMiddleware": None,
            "scrapy.spidermiddlewares.metacopy.MetaCopyDetectionMiddleware": None,
        },
        # per-request byte and status counters in the final stats (`-s
        # DOWNLOADER_STATS=True`); the workspace's URL log has each request's status,
        # size and latency
        "DOWNLOADER_STATS": False,
        # Retries are row attempts (typed, counted, resumable), not Scrapy's in-memory
        # retries; every status reaches the spider so it becomes a typed row outcome.
        "RETRY_ENABLED": False,
        "HTTPERROR_ALLOW_ALL": True,
        "DOWNLOADER_MIDDLEWARES": {
            # http(s) and allowed_domains on every request and redirect hop; before
            # robots.txt (100), so an off-site host is not even asked for it
            "framework.crawl.safety.SafetyMiddleware": 40,
            "framework.crawl.politeness.RetryAfterMiddleware": 560,
            # one log line instead of a traceback for an unreachable robots.txt
            "framework.crawl.politeness.RobotsTxtFailures": 555,
            # Lean jobs (measured in docs/benchmarks.md, "Leaner generated jobs"): a
            # generated spider has no http_user/http_pass attributes for HttpAuth to
            # read, and every request is dont_filter with SafetyMiddleware above
            # checking allowed_domains, so Scrapy's offsite filter only adds a call.
            "scrapy.downloadermiddlewares.httpauth.HttpAuthMiddleware": None,
            "scrapy.downloadermiddlewares.offsite.OffsiteMiddleware": None,
            # the spec's `login:`: waits out a login in flight before the cookie
            # middleware (700) attaches the session, and sees a response after the
            # redirect (600) and decompression (590) middlewares: a redirect to the
            # login page is its final URL, a selector reads the plain body
            "framework.crawl.session.SessionMiddleware": 585,
            "framework.crawl.session.SessionRedirectMiddleware": 650,  # before 600
            # Scrapy's, with the bundled public-suffix list (no request to the internet)
            "scrapy.downloadermiddlewares.cookies.CookiesMiddleware": None,
            "framework.crawl.session.OfflineCookiesMiddleware": 700,
            # the spec's `cookies:`, after the jar's (the cookie middleware rebuilds
            # the header on every hop)
            "framework.crawl.session.ExtraCookiesMiddleware": 710,
        },
        # Safety: only http(s) is ever fetched. Scrapy's other handlers would read local
        # files (file:///etc/passwd, /dev/zero), data: URLs, FTP and S3 for any page
        # that links there; framework.crawl.safety refuses those first, this is the
        # second lock.
        # http(s) through aiohttp (its C parser), not Twisted's client: 0.875x the CPU
        # of a crawl (framework/crawl/http.py says why and how to switch back)
        "DOWNLOAD_HANDLERS": {
            "file": None,
            "data": None,
            "ftp": None,
            "s3": None,
            "http": "framework.crawl.http.HttpHandler",
            "https": "framework.crawl.http.HttpHandler",
        },
        # Scrapy's 1 GiB default lets a few endless bodies take gigabytes; a bigger
        # page is a typed parse error on its row (raise it per job when needed).
        "DOWNLOAD_MAXSIZE": 32 * 1024 * 1024,
        "DOWNLOAD_WARNSIZE": 8 * 1024 * 1024,
        # Measured: Scrapy's default of 100 starts that many tasks per response; see
        # docs/benchmarks.md.
        "CONCURRENT_ITEMS": 10,
        "LOG_LEVEL": "INFO",
    }
