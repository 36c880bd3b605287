"""The framework's default Scrapy settings for every generated job.

Precedence, lowest first: Scrapy's defaults and the defaults of this module's table
(:data:`UNDER_PROJECT`: the limits and knobs a spec may also set), the project's Scrapy
settings module (``scrapy crawl``), the job's own machinery (scheduler, middlewares,
handlers) and the spec's ``settings:``, then ``-s NAME=VALUE`` on the command line. So
the operator, with ``-s`` or the settings module, may set any limit (past a spec's
ceiling too) that the spec leaves out. Values chosen by measurement are explained in
docs/benchmarks.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from framework import __version__

__all__ = [
    "FRAMEWORK_SETTINGS",
    "SCRAPYS",
    "SETTINGS",
    "UNDER_PROJECT",
    "UNDER_PROJECT_PRIORITY",
    "Ceiling",
    "Setting",
    "default",
    "default_settings",
]


@dataclass(frozen=True, slots=True)
class Ceiling:
    """The most a spec may set, and the unit it is said in."""

    value: float
    unit: str = ""

    def said(self) -> str:
        value = f"{self.value:,.0f}" if float(self.value).is_integer() else f"{self.value:g}"
        return f"{value} {self.unit}".strip()


class _Scrapys:
    """The default of a Scrapy setting the framework leaves alone: Scrapy's own."""

    def __repr__(self) -> str:
        return "SCRAPYS"


SCRAPYS: Final = _Scrapys()


@dataclass(frozen=True, slots=True)
class Setting:
    """One row of :data:`SETTINGS`.

    ``kind`` and ``low`` are the type and floor a spec's value must have (``positive``:
    a number above zero); ``ceiling`` the most a spec may set, or ``uncapped`` why a
    number needs none (a test holds every numeric spec setting to one of the two);
    ``spec``: whether a spec's ``settings:`` may set it at all; ``job``: whether
    :func:`default_settings` puts the default in every job's settings (else the reader
    falls back to it: a knob of one command, or the renderer's)."""

    name: str
    default: Any
    kind: str
    low: float | None = None
    ceiling: Ceiling | None = None
    uncapped: str = ""
    spec: bool = True
    job: bool = True

    @property
    def own(self) -> bool:
        """The framework's own setting, not Scrapy's (nor a plugin's Scrapy setting)."""
        return self.name.startswith("FRAMEWORK_")


MiB = 1024 * 1024
_S = Setting

# The one table of settings: every framework setting, and every Scrapy setting a spec
# may set. Each reader takes its default from here (:func:`default`), so no default is
# written twice. A spec is data that people share, copy from a ticket and generate
# (framework.spec.checks.settings says why it is an allow-list): a setting here with
# ``spec=False`` is the trusted side's, `-s NAME=VALUE` or the project's settings
# module. The ceilings keep one crawl from holding a machine or a site for ever; each
# is generous for a real job. Values chosen by measurement: docs/benchmarks.md.
_TABLE: tuple[Setting, ...] = (
    # ---- the framework's own, read each in one place (the crawl's from_crawler)
    # per row, across runs; set from the spec's max_attempts
    _S("FRAMEWORK_MAX_ATTEMPTS", 3, "int", 1, Ceiling(100, "attempts")),
    # 0: no cap; else stop (checkpoint) after that many
    _S(
        "FRAMEWORK_MAX_REQUESTS",
        0,
        "int",
        0,
        uncapped="a spec sets it to stop sooner; 0, the default, is no cap",
    ),
    _S("FRAMEWORK_STOP_ON_429", False, "bool"),  # stop (checkpoint) at the first 429
    _S("FRAMEWORK_HALT_ON_DRIFT", False, "bool"),  # stop (exit 4) before storing a drift
    # attempts and waits: how long a page that keeps failing may keep the crawl going
    # seconds; a longer Retry-After stops the run
    _S("FRAMEWORK_RETRY_AFTER_CAP", 120.0, "number", 0, Ceiling(3600, "seconds")),
    # 429/503 without a usable Retry-After
    _S("FRAMEWORK_RETRY_AFTER_DEFAULT", 5.0, "number", 0, Ceiling(3600, "seconds")),
    # seconds; a longer Retry-After counts as this: a spec may lower it, not lift it
    _S("FRAMEWORK_RETRY_AFTER_MAX", 86400.0, "number", 0, Ceiling(86400, "seconds")),
    # seconds before a row's retry, doubling per failed attempt in the run, up to MAX
    _S("FRAMEWORK_RETRY_BACKOFF_BASE", 1.0, "number", 0, Ceiling(600, "seconds")),
    _S("FRAMEWORK_RETRY_BACKOFF_MAX", 30.0, "number", 0, Ceiling(3600, "seconds")),
    # connect/dns failures in a row: stop (checkpoint)
    _S("FRAMEWORK_DOWN_HOST_AFTER", 3, "int", 0, Ceiling(100, "failures")),
    # breaker: failed share of the last window of attempts (idle until the window
    # fills); a rate over 1 or a window of millions is a breaker that never trips
    _S("FRAMEWORK_ERROR_RATE_MAX", 0.5, "number", 0, Ceiling(1)),
    _S("FRAMEWORK_ERROR_RATE_WINDOW", 50, "int", 1, Ceiling(10_000, "attempts")),
    # forget rows (items stay) and start over: a decision of one run (`--fresh`), never
    # of a spec that every run reads
    _S("FRAMEWORK_FRESH", False, "bool", spec=False),
    # Group commit (framework.crawl.group): the outcomes of the responses that arrive
    # within this many ms, or this many of them, share one transaction; 0 (either):
    # one transaction per response. A kill loses only outcomes still waiting (hence the
    # ceilings). The window's default (None) is the workspace's: 5 ms on SQLite, 50 on
    # PostgreSQL, where each commit is several round trips (docs/benchmarks.md).
    _S("FRAMEWORK_COMMIT_WINDOW_MS", None, "number", 0, Ceiling(1000, "milliseconds")),
    _S("FRAMEWORK_COMMIT_BATCH", 32, "int", 0, Ceiling(10_000, "outcomes")),
    # What one page may cost (framework.extract.patterns; docs/operations.md).
    # CPU seconds of regex work per page, then parse error. A page's regexes run on the
    # crawl's thread and SIGINT/SIGTERM wait for them: a stop is acted on only once the
    # pages already downloaded are parsed, each within this budget (measured: 6 such
    # pages at 3 s each ran 44-54 s past a Ctrl-C), so a spec may lower the default,
    # never make a crawl deafer; the operator may (-s). Zero would refuse every page.
    _S("FRAMEWORK_EXTRACT_TIMEOUT", 10.0, "positive", 0, Ceiling(10, "seconds of CPU per page")),
    # extraction limits: zero would refuse every page
    _S("FRAMEWORK_MAX_MATCHES", 100_000, "int", 1, Ceiling(1_000_000, "matches")),
    _S("FRAMEWORK_MAX_MATCH_CHARS", MiB, "int", 1, Ceiling(32 * MiB, "characters")),
    _S("FRAMEWORK_MAX_ITEM_BYTES", MiB, "int", 1, Ceiling(16 * MiB, "bytes")),
    # ---- the framework's own that only the trusted side sets, not in a job's settings
    # what requests in flight get at a stop, in seconds (framework.crawl.stopping; the
    # shipper's --stop-grace too)
    _S("FRAMEWORK_STOP_GRACE", 5.0, "number", 0, spec=False, job=False),
    # progress (framework.crawl.output): seconds between two shows, None: the mode's
    # (framework.progress); seconds between two reads of the counts from the store
    _S("FRAMEWORK_PROGRESS_INTERVAL", None, "number", 0, spec=False, job=False),
    _S("FRAMEWORK_PROGRESS_RESYNC", 10.0, "number", 0, spec=False, job=False),
    # set by `scrapy parse` and in each worker of `--processes` (framework.crawl.workers)
    _S("FRAMEWORK_PARSE_ONLY", False, "bool", spec=False, job=False),
    _S("FRAMEWORK_WORKER", False, "bool", spec=False, job=False),
    # the playwright plugin's page pool: reuse pages, each for this many requests
    _S("FRAMEWORK_RENDER_REUSE", True, "bool", spec=False, job=False),
    _S("FRAMEWORK_RENDER_PAGE_USES", 20, "int", 1, spec=False, job=False),
    # ---- the framework's own that its readers default themselves (a constant of their
    # module, or unset): here for the reference; tests/test_docs_reference.py holds
    # these defaults equal to the readers'. None of them in a spec, nor in a job's
    # settings. Stored responses: `--no-store-responses` sets the first (else the
    # spec's store_responses); the budget in MB, 0: none (framework.crawl.limits)
    _S("FRAMEWORK_STORE_RESPONSES", None, "bool", spec=False, job=False),
    _S("FRAMEWORK_RESPONSES_BUDGET_MB", 1024.0, "number", 0, spec=False, job=False),
    # what the crawl shows (framework.crawl.output: `framework crawl` sets live or
    # lines) and its Prometheus port (framework.crawl.metrics: `--metrics-port`)
    _S("FRAMEWORK_PROGRESS", None, "text", spec=False, job=False),
    _S("FRAMEWORK_METRICS_PORT", None, "int", 0, spec=False, job=False),
    # networks a crawl may reach besides the start hosts' class (framework.crawl.addresses)
    _S("FRAMEWORK_ALLOW_PRIVATE", None, "text", spec=False, job=False),
    # workers (framework.crawl.claimer): a claim's lease in seconds, the rows held
    _S("FRAMEWORK_LEASE_SECONDS", 30.0, "positive", spec=False, job=False),
    _S("FRAMEWORK_LEASE_BATCH", 0, "int", 0, spec=False, job=False),
    # where the jobs and workspaces are, for Scrapyd (framework.crawl.loader)
    _S("FRAMEWORK_ROOT", None, "text", spec=False, job=False),
    _S("FRAMEWORK_WORKSPACES", None, "text", spec=False, job=False),
    _S("FRAMEWORK_SPECS_PACKAGE", None, "text", spec=False, job=False),
    # the playwright plugin's browser: a program to run, so never a spec's
    # (framework_playwright.browser)
    _S("FRAMEWORK_CHROMIUM", None, "text", spec=False, job=False),
    # ---- Scrapy's that a spec may set. A spec may tune how politely and how fast the
    # job fetches, never load code (EXTENSIONS, ITEM_PIPELINES, SCHEDULER, any class
    # path), open a port (TELNETCONSOLE_*), or write files (LOG_FILE, FEEDS,
    # HTTPCACHE_*): those are not here. No value here is ever imported: every one is a
    # number, a flag or text sent as is.
    # politeness; a delay of days is a crawl that never ends, whatever the site wants
    _S("DOWNLOAD_DELAY", SCRAPYS, "number", 0, Ceiling(600, "seconds")),
    _S("RANDOMIZE_DOWNLOAD_DELAY", SCRAPYS, "bool"),
    _S("AUTOTHROTTLE_ENABLED", SCRAPYS, "bool"),
    _S("AUTOTHROTTLE_START_DELAY", SCRAPYS, "number", 0, Ceiling(600, "seconds")),
    _S("AUTOTHROTTLE_MAX_DELAY", SCRAPYS, "number", 0, Ceiling(600, "seconds")),
    # concurrency: politeness towards somebody else's server, and this machine's sockets
    _S("AUTOTHROTTLE_TARGET_CONCURRENCY", SCRAPYS, "number", 0.01, Ceiling(32)),
    _S("AUTOTHROTTLE_DEBUG", SCRAPYS, "bool"),
    _S("ROBOTSTXT_OBEY", True, "bool"),
    _S("CONCURRENT_REQUESTS", SCRAPYS, "int", 1, Ceiling(64)),
    _S("CONCURRENT_REQUESTS_PER_DOMAIN", SCRAPYS, "int", 1, Ceiling(32)),
    # Measured: Scrapy's default of 100 starts that many tasks per response; see
    # docs/benchmarks.md.
    _S("CONCURRENT_ITEMS", 10, "int", 1, Ceiling(1000)),
    # time limits: each holds a request that long
    _S("DOWNLOAD_TIMEOUT", SCRAPYS, "number", 0.001, Ceiling(600, "seconds")),
    _S("DNS_TIMEOUT", SCRAPYS, "number", 0.001, Ceiling(120, "seconds")),
    # Scrapy's 1 GiB default lets a few endless bodies take gigabytes; a bigger page is
    # a typed parse error on its row (raise it per job when needed). A spec may not
    # lift the size cap: 0 means none.
    _S("DOWNLOAD_MAXSIZE", 32 * MiB, "int", 1, Ceiling(256 * MiB, "bytes")),
    _S("DOWNLOAD_WARNSIZE", 8 * MiB, "int", 0, Ceiling(256 * MiB, "bytes")),
    # what is sent (USER_AGENT's default names the job: default_settings)
    _S("USER_AGENT", SCRAPYS, "text"),
    _S("DEFAULT_REQUEST_HEADERS", SCRAPYS, "headers"),
    _S("COOKIES_ENABLED", SCRAPYS, "bool"),
    _S("REDIRECT_ENABLED", SCRAPYS, "bool"),
    # a redirect loop costs this many requests per attempt of its row
    _S("REDIRECT_MAX_TIMES", SCRAPYS, "int", 0, Ceiling(50, "redirects")),
    # the playwright plugin's numbers (its launch options name a binary: not here); the
    # defaults are the renderer's, set only when a job renders (framework_playwright)
    _S(
        "PLAYWRIGHT_DEFAULT_NAVIGATION_TIMEOUT",
        30_000,
        "number",
        0,
        Ceiling(600_000, "milliseconds"),
        job=False,
    ),
    _S("PLAYWRIGHT_MAX_CONTEXTS", 1, "int", 1, Ceiling(16), job=False),
    _S("PLAYWRIGHT_MAX_PAGES_PER_CONTEXT", 4, "int", 1, Ceiling(32), job=False),
)

#: Name -> :class:`Setting`: the one settings table.
SETTINGS: dict[str, Setting] = {s.name: s for s in _TABLE}

#: The framework's own settings every job gets, with their defaults.
FRAMEWORK_SETTINGS: dict[str, Any] = {s.name: s.default for s in _TABLE if s.own and s.job}

#: The settings of :func:`default_settings` that are the table's (limits, politeness,
#: what is sent): a job's default for one of them ranks under the project's Scrapy
#: settings module (:data:`UNDER_PROJECT_PRIORITY`), so the operator's module sets what
#: a spec leaves out, past its ceiling too. The rest of a job's settings is its machinery
#: and keeps the spider's priority.
UNDER_PROJECT: frozenset[str] = frozenset(
    {s.name for s in _TABLE if s.job and s.default is not SCRAPYS} | {"USER_AGENT"}
)
#: The Scrapy priority of those defaults: Scrapy's "command" (10), over Scrapy's own
#: defaults (0), under add-ons (15), the project's settings module (20), the spider's
#: (30: the spec's values) and the command line (40). Not Scrapy's "default" itself:
#: ``scrapy crawl`` merges its runner's settings into the crawler's at the end, and an
#: equal priority would put Scrapy's defaults back.
UNDER_PROJECT_PRIORITY = 10


def default(name: str) -> Any:
    """The default of setting ``name``, from :data:`SETTINGS` (Scrapy's own where the
    framework leaves it alone). A name not in the table is a programming error."""
    value = SETTINGS[name].default
    if value is SCRAPYS:
        from scrapy.settings import default_settings as scrapy_defaults

        return getattr(scrapy_defaults, name)
    return value


def default_settings(job: str) -> dict[str, Any]:
    return {
        **FRAMEWORK_SETTINGS,
        # the Scrapy settings the framework sets a default for, with their reasons in
        # the table above (ROBOTSTXT_OBEY, CONCURRENT_ITEMS, DOWNLOAD_MAXSIZE ...)
        **{s.name: s.default for s in _TABLE if not s.own and s.job and s.default is not SCRAPYS},
        # Safety: Scrapy 2.19 starts a remote-control server that executes Python sent
        # to it and leaves its port and token in a job file after a kill; the telnet
        # console is the older door of the same kind. A scraping job needs neither.
        "REMOTE_CONTROL_ENABLED": False,
        "TELNETCONSOLE_ENABLED": False,
        # A page URL may carry a resolved {env:NAME} credential (?token=): another site
        # gets only the origin in Referer, never the path and query (browsers' default).
        "REFERRER_POLICY": "strict-origin-when-cross-origin",
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
        "LOG_LEVEL": "INFO",
    }
