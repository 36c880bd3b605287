"""The one-line meaning of every spec key and setting, for the generated reference.

Types, defaults, allowed values and ceilings come from the code
(:mod:`framework.docs_gen` reads them); only what the code cannot say is written here.
A key or setting the code gains without a line here stops the rendering, and so does a
line for one the code no longer has: the reference test then fails until this file
and the code agree.
"""

from __future__ import annotations

__all__ = ["ENVIRONMENT_MEANINGS", "SETTING_MEANINGS", "SPEC_MEANINGS", "SPEC_TITLES"]

#: Section title of each object of the schema (``JobSpec`` is the root), in the order
#: a reader meets them. An object of the models without a title here is undocumented.
SPEC_TITLES: dict[str, str] = {
    "JobSpec": "Job",
    "ListShort": "List page (short form)",
    "DetailShort": "Detail page (short form)",
    "PageKind": "Page kind",
    "FieldSpec": "Field",
    "TotalSpec": "Declared total",
    "Replace": "Replacement",
    "Records": "Records in the page",
    "Embedded": "Embedded data",
    "SubtabSpec": "Sub-tab",
    "Body": "Request body",
    "FollowRule": "Follow rule",
    "Pagination": "Pagination",
    "StopWhen": "Pagination stop",
    "SitemapOptions": "Sitemap options",
    "FormSpec": "Form",
    "FormField": "Form field",
    "RenderOptions": "Browser options",
    "WaitFor": "Wait for",
    "Click": "Click",
    "Scroll": "Scroll",
    "RateSpec": "Rate",
    "BlockRule": "Blocked rule",
    "LoginSpec": "Login",
    "LoginSuccess": "Login success",
    "SessionExpired": "Session expired",
    "LoginToken": "Login token",
    "KeySpec": "Dedupe key",
    "ShipSettings": "Ship defaults",
    "DriftSpec": "Drift",
}

_TOTAL = (
    "how many records the list says it has (a field of the page, an `integer`): each "
    "list is checked against it at the run's end (`total_mismatch`)"
)

# Keys every page kind takes, in the general and the short form alike.
_PAGE_COMMON = {
    "format": "how the page is read: `json` pages take JSON paths for selectors; a "
    "`sitemap` page only discovers URLs",
    "render": "`playwright` renders the page in a browser; unset: the job's (`json` and "
    "`sitemap` pages: `http`)",
    "browser": "what the browser does before the page is read (with `render: playwright`)",
    "each": "the records of the page (a selector, a JSON path, or records that are data "
    "in the page); unset: the page is one record",
    "id": "the record's id, its `source_id`: a kind with an `id` emits items",
    "fields": "the record's fields, by name",
    "required_any": "groups of fields of which at least one must have a value (else "
    "the record is invalid)",
    "rate": "this kind's own rate limit (else the job's)",
    "blocked": "soft-ban rules of this kind and its sub-tabs, besides the job's",
    "headers": "sent with this kind's requests and its sub-tabs', over the job's; "
    "`{env:NAME}` allowed",
    "cookies": "sent as cookies with this kind's requests and its sub-tabs', over the "
    "job's; `{env:NAME}` allowed",
}

#: Object title -> key -> what the key means, in one line. Types, defaults and allowed
#: values come from the schema; only the meaning is written here.
SPEC_MEANINGS: dict[str, dict[str, str]] = {
    "JobSpec": {
        "name": "the job's name: letters, digits, `_`, `-` (at most 64); unique across `projects/`",
        "source_type": "the first half of every dedupe key: lowercase letters, digits, "
        "`.`, `_`, `-`",
        "start_urls": "absolute http(s) URLs the crawl starts from",
        "start": "the page kind the start URLs are; unset: `list`, else the first kind",
        "allowed_domains": "the hosts the crawl may request; unset: the start URLs' hosts; "
        "`[]`: every host",
        "render": "how every page is fetched unless its kind says otherwise",
        "max_attempts": "tries per page before its row is an error",
        "store_responses": "keep each fetched page's body so `framework reparse` can "
        "apply a changed spec without fetching",
        "expect_empty": "a crawl that stores no item exits 0 instead of 4",
        "key": "how the dedupe key is built; a string is its template",
        "list": "the short form's list page",
        "detail": "the short form's detail page",
        "pages": "the general form: page kinds by name",
        "headers": "sent with every request of the job; `{env:NAME}` allowed",
        "cookies": "sent as cookies with every request of the job, after the session's; "
        "`{env:NAME}` allowed",
        "login": "a login before any other request of every run, and again when the "
        "session expires",
        "settings": "Scrapy and framework settings a spec may set (see [settings](settings.md))",
        "ship": "defaults for `framework ship` (its options win)",
        "description": "free text",
        "languages": "dateparser's language codes for every date field that names none",
        "drift": "when a field's fill rate has fallen enough to be reported as drift",
        "rate": "one rate limit shared by every request of a kind without its own",
        "blocked": "what a soft ban looks like: a page that matches stops the crawl as "
        "a checkpoint",
    },
    "ListShort": {
        **_PAGE_COMMON,
        "follow": "a selector of the link to the record's detail page, within the row",
        "total": _TOTAL,
        "next": "the next list page: a selector of its link, or a pagination",
        "id": "only when the list rows are themselves the items",
        "fields": "fields taken from the row, carried into the detail record",
    },
    "DetailShort": {
        **{k: v for k, v in _PAGE_COMMON.items() if k != "each"},  # one record per page
        "subtabs": "extra requests per record, by name",
    },
    "PageKind": {
        **_PAGE_COMMON,
        "follow": "links to pages of other kinds (one rule or a list)",
        "pagination": "the next pages of this kind (a string: the next link's selector)",
        "total": _TOTAL,
        "subtabs": "extra requests per record (AJAX tabs), by name; their data lands "
        "in the record under that name",
        "sitemap": "how a `format: sitemap` kind reads its sitemaps",
        "forms": "forms of the page to submit, each response a page of kind `to`",
    },
    "FieldSpec": {
        "type": "what the value is converted to",
        "many": "a list of every match instead of the first",
        "required": "a record without it is not an item (it is reported, with the URL)",
        "default": "the value when no source gives one (checked against `type`)",
        "strip": "trim whitespace",
        "collapse": "runs of whitespace (NBSP too) become one space",
        "lowercase": "lowercase the text",
        "replace": "regex substitutions, after the whitespace normalisation",
        "format": "the strptime format of a `date`/`datetime` (`%d.%m.%Y`)",
        "absolute": "`url`: resolve against the page URL",
        "languages": "`date`/`datetime`: dateparser's languages for this field; unset: the job's",
        "date_order": "`date`/`datetime`: the order of numeric dates (`03/04/2024`); unset: "
        "the languages' order, else day first",
        "magnitude": "`integer`/`number`/`price`: read `63K`, `1.2M`, `2bn`, `3 million` "
        "(else they fail)",
        "pick": "`integer`/`number`/`price`: which number of a range or a was/now text",
        "free": "`price`: the amount of a text that says free; unset, such a text fails",
        "min": "rule: the number (a price's amount) is at least this",
        "max": "rule: the number (a price's amount) is at most this",
        "pattern": "rule: the value's text contains a match of this regex",
        "enum": "rule: the value is one of these",
        "min_length": "rule: a text value is at least this long",
        "max_length": "rule: a text value is at most this long",
        "expected": "rule: the value is exactly this (an absent value breaks it too)",
        "max_change": "change limit on a re-crawl: `N%` of the accepted value, or an amount",
        "frozen": "change limit: once stored, the value never changes",
        "each": "with `fields`: a nested group, one row per matching element",
        "fields": "with `each`: the nested group's fields",
        "helper": "a value for templates only: never stored in the item nor hashed",
    },
    "Replace": {"pattern": "a regex", "to": "its replacement (`\\1` for a group)"},
    "Records": {
        "embedded": "the records are in JSON or a JavaScript literal in the page",
        "jsonld": "the JSON-LD objects of this type (`*`: every top-level object)",
        "microdata": "the microdata objects of this type (`*`: every top-level object)",
    },
    "Embedded": {
        "re": "a regex over the page's (or the script's) text; its group 1 or `json` "
        "is the literal",
        "script": "a selector of the `<script>` whose text holds the literal",
        "var": "the first assignment to this name in a script",
        "path": "a JSON path into the literal",
    },
    "SubtabSpec": {
        "url": "a template over the record, resolved against its page: `/cases/{id}/tab/rulings`",
        "method": "the HTTP method",
        "body": "with `method: POST`: the request body",
        "format": "how the tab's answer is read",
        "each": "the tab's rows (a selector, a JSON path, or records that are data in "
        "the page); unset: one mapping of `fields`",
        "fields": "the fields of each row (or of the tab)",
        "required": "the record is complete only when this tab succeeded",
        "render": "unset: the job's (`json` tabs: `http`)",
        "browser": "with `render: playwright`: as on page kinds",
        "rate": "this tab's own rate limit (else the job's)",
    },
    "Body": {
        "form": "a url-encoded form: names to value templates",
        "json": "a JSON document whose strings are templates",
    },
    "FollowRule": {
        "css": "a CSS selector of the links (usually `::attr(href)`)",
        "xpath": "an XPath of the links (usually `/@href`)",
        "pattern": "a regex over every link's absolute URL",
        "to": "the page kind the links lead to",
        "deny": "regexes over a link's absolute URL: a link matching one is not followed",
        "max_depth": "the farthest page, in links from a start URL, this rule leads to",
    },
    "Pagination": {
        "next": "a selector of the next page's link (a JSON path on json pages)",
        "param": "a query parameter carrying the page number or offset",
        "start": "the parameter's first value",
        "step": "its increment (50 for offsets of 50)",
        "max_pages": "the most pages this pagination reads",
        "stop": "when a `param` pagination stops",
    },
    "StopWhen": {
        "empty": "a page with no records ends it",
        "json": "on json pages: a JSON path whose value ...",
        "equals": "... equal to this ends it",
    },
    "SitemapOptions": {
        "follow": "regexes: only the sitemap index entries matching one are read",
        "alternate": 'also the `<xhtml:link rel="alternate">` URLs of an entry',
        "modified_since": "entries whose `<lastmod>` is before this day are skipped",
    },
    "FormSpec": {
        "css": "the form, or an element inside it (Scrapy's `formcss`)",
        "xpath": "the form, or an element inside it (`formxpath`)",
        "index": "the n-th `<form>` of the page (`formnumber`)",
        "to": "the page kind of the response",
        "fields": "fields set on top of the form's own inputs",
        "click": "attributes of the submit element to press (`clickdata`)",
        "dont_click": "press no submit element",
        "method": "unset: the form's own",
        "required": "a page without the form is an error of its row; false: no request",
        "max_requests": "the most requests this form may make on one page",
    },
    "FormField": {
        "value": "one value (a template)",
        "values": "one request per value",
        "options": "one request per `<option>` of the form's `<select>` of this name",
        "exclude": "with `options`: option values never submitted",
        "carry": "the submitted value reaches the next pages' records under this name",
        "carry_label": "with `options`: the chosen option's text, under this name",
    },
    "RenderOptions": {
        "wait_until": "the navigation event to wait for",
        "wait_for": "an element that must be in the page before it is read",
        "click": "elements to click, in order",
        "scroll": "scroll to the bottom, for lists that grow on scroll",
    },
    "WaitFor": {
        "selector": "CSS, or XPath when it starts with `/` or `(`",
        "timeout": "seconds; past them the row's error is `timeout`",
    },
    "Click": {
        "selector": "the element to click",
        "times": "the most clicks (later ones stop once the element is gone)",
        "wait_for": "an element that appears after each click",
    },
    "Scroll": {
        "times": "the most scrolls",
        "pause": "seconds the page may take to grow after a scroll before it is the end",
    },
    "RateSpec": {
        "per_second": "at most this many requests started per second (`0.5`: one every 2 s)",
        "concurrency": "at most this many requests in flight",
    },
    "BlockRule": {
        "name": "what the message and the event call the rule; unset: its conditions",
        "css": "the page has an element this CSS selector matches",
        "xpath": "the page has an element this XPath matches",
        "status": "the HTTP status is one of these",
        "url": "a regex searched in the URL the answer came from (after redirects)",
    },
    "LoginSpec": {
        "url": "the login page (`form`) or endpoint (`json`); a path joins the first start URL",
        "form": "a CSS selector of the login form on that page",
        "fields": "with `form`: the inputs to fill; `{env:NAME}` for anything secret",
        "json": "instead of `form`: POST this document",
        "success": "what a working login looks like",
        "expired": "what a page says when the session is gone",
        "token": "the session is a token in the login's JSON answer, not a cookie",
        "max_relogins": "logins in a row with no page fetched between them before the run stops",
    },
    "LoginSuccess": {
        "css": "matches on the page the login ends on",
        "cookie": "a cookie of this name is set",
        "status": "the final answer's HTTP status",
    },
    "SessionExpired": {
        "status": "the page's HTTP status is one of these",
        "url": "a regex searched in a redirect's target and the final URL; unset: the "
        "login page's URL",
        "css": "matches on a page only a logged-out visitor sees",
    },
    "LoginToken": {
        "json": "a JSON path to the token in the login's answer",
        "header": "the header that carries it",
        "value": "what the header says; `{token}` is the token",
    },
    "KeySpec": {
        "template": "a template over the record",
        "lowercase": "lowercase the id part (ids that are case-insensitive)",
        "shared": "other jobs with this `source_type` write the same keys on purpose",
    },
    "ShipSettings": {
        "endpoint": "the ingest endpoint's http(s) URL",
        "token_env": "the name of the environment variable that holds the token (an `FW_*` one)",
        "batch_size": "items per request",
        "fallback_path": "the endpoint's path for one item at a time (`/...`)",
    },
    "DriftSpec": {
        "fill_drop": "percentage points a field's fill rate may fall below the previous "
        "crawl's before it is drift",
        "min_records": "both crawls read at least this many records of the kind",
        "volume_drop": "the share of a kind's pages or records a crawl that read it whole "
        "may lose against the last such crawl before it is drift",
    },
}


#: Setting -> what it does, in one line: every framework setting and every Scrapy
#: setting a spec may set. Types, defaults and ceilings come from the code.
SETTING_MEANINGS: dict[str, str] = {
    "FRAMEWORK_MAX_ATTEMPTS": "tries per row, across runs (the spec's `max_attempts`)",
    "FRAMEWORK_MAX_REQUESTS": "stop (a checkpoint, exit 3) after this many requests; "
    "0: no cap (`--max-requests`)",
    "FRAMEWORK_STOP_ON_429": "stop (a checkpoint) at the first 429 (`--stop-on-429`)",
    "FRAMEWORK_HALT_ON_DRIFT": "stop (exit 4) before storing a page whose fields drifted "
    "(`--halt-on-drift`)",
    "FRAMEWORK_RETRY_AFTER_CAP": "seconds; a longer `Retry-After` stops the run "
    "(a checkpoint) instead of waiting",
    "FRAMEWORK_RETRY_AFTER_DEFAULT": "seconds to wait after a 429 or 503 without a usable "
    "`Retry-After`",
    "FRAMEWORK_RETRY_AFTER_MAX": "seconds; a longer `Retry-After` counts as this",
    "FRAMEWORK_RETRY_BACKOFF_BASE": "seconds before a row's retry, doubling per failed "
    "attempt in the run",
    "FRAMEWORK_RETRY_BACKOFF_MAX": "the longest wait before a row's retry, in seconds",
    "FRAMEWORK_DOWN_HOST_AFTER": "connection or DNS failures in a row after which the "
    "host is down and the run stops (a checkpoint)",
    "FRAMEWORK_ERROR_RATE_MAX": "the breaker: the share of failed attempts in the window "
    "that stops the run",
    "FRAMEWORK_ERROR_RATE_WINDOW": "the breaker's window, in attempts (idle until it fills)",
    "FRAMEWORK_FRESH": "forget the rows (items stay) and start over (`--fresh`)",
    "FRAMEWORK_COMMIT_WINDOW_MS": "outcomes arriving within this many milliseconds share "
    "one transaction; unset: 5 on SQLite, 50 on PostgreSQL",
    "FRAMEWORK_COMMIT_BATCH": "at most this many outcomes share one transaction",
    "FRAMEWORK_EXTRACT_TIMEOUT": "CPU seconds of regex work per page, then a parse error",
    "FRAMEWORK_MAX_MATCHES": "matches one selector or JSON path may make on a page",
    "FRAMEWORK_MAX_MATCH_CHARS": "characters one selector may return",
    "FRAMEWORK_MAX_ITEM_BYTES": "the size of one record as stored JSON",
    "FRAMEWORK_STOP_GRACE": "seconds requests in flight get at a stop (SIGINT, SIGTERM) "
    "before they are abandoned; `framework ship --stop-grace` defaults to it too",
    "FRAMEWORK_PROGRESS_INTERVAL": "seconds between two progress shows; unset: 0.5 on a "
    "terminal, 30 in a log (`$FRAMEWORK_PROGRESS_INTERVAL`)",
    "FRAMEWORK_PROGRESS_RESYNC": "seconds between two reads of the progress counts from "
    "the workspace",
    "FRAMEWORK_PARSE_ONLY": "the spider reads pages and hands back what they give, "
    "never opening the workspace (`scrapy parse` sets it)",
    "FRAMEWORK_WORKER": "this process is one worker of `--processes`: it claims rows by "
    "lease (the parent sets it)",
    "FRAMEWORK_RENDER_REUSE": "rendered jobs: reuse browser pages (false: a fresh page per "
    "request)",
    "FRAMEWORK_RENDER_PAGE_USES": "rendered jobs: requests one browser page serves before a "
    "fresh one replaces it",
    "FRAMEWORK_STORE_RESPONSES": "keep each fetched page's body for `framework reparse`; "
    "unset: the spec's `store_responses` (`--no-store-responses` sets it false)",
    "FRAMEWORK_RESPONSES_BUDGET_MB": "the stored (compressed) page bodies a workspace may "
    "hold, in MB; past it the crawl stores no more bodies and says so; 0: no budget",
    "FRAMEWORK_PROGRESS": "`live` (a line redrawn on a terminal) or `lines` (a log line "
    "now and then): the crawl's progress; `framework crawl` sets it unless `--quiet`; "
    "unset: none",
    "FRAMEWORK_METRICS_PORT": "serve this job's Prometheus `/metrics` on 127.0.0.1 at "
    "this port while the crawl runs (0: any free port, logged); needs the dashboard "
    "plugin (`--metrics-port`)",
    "FRAMEWORK_ALLOW_PRIVATE": "networks or addresses (comma-separated, `10.0.0.0/8`) a "
    "crawl may request although they are not public; unset: only the start hosts' kind "
    "of address",
    "FRAMEWORK_LEASE_SECONDS": "workers (`--processes`, a PostgreSQL workspace): how long "
    "a claim on a row holds without a heartbeat",
    "FRAMEWORK_LEASE_BATCH": "workers: the rows one holds at most; 0: twice the requests "
    "it may have in flight on one host",
    "FRAMEWORK_ROOT": "the project root whose `projects/` holds the jobs (Scrapyd); "
    "unset: found from the working directory",
    "FRAMEWORK_WORKSPACES": "the folder of the jobs' workspaces; unset: the root's `var/`",
    "FRAMEWORK_SPECS_PACKAGE": "the Python package the specs travel in (a Scrapyd egg); "
    "the workspaces are then under `var/` of the working directory",
    "FRAMEWORK_CHROMIUM": "rendered jobs: the Chromium to launch; unset: "
    "`$FRAMEWORK_CHROMIUM`, else `/usr/bin/chromium` or `/usr/bin/chromium-browser`",
    "DOWNLOAD_DELAY": "seconds between requests to one site",
    "RANDOMIZE_DOWNLOAD_DELAY": "vary the delay between 0.5 and 1.5 times itself",
    "AUTOTHROTTLE_ENABLED": "adapt the delay to the site's latency",
    "AUTOTHROTTLE_START_DELAY": "AutoThrottle's first delay, in seconds",
    "AUTOTHROTTLE_MAX_DELAY": "AutoThrottle's longest delay, in seconds",
    "AUTOTHROTTLE_TARGET_CONCURRENCY": "requests AutoThrottle aims to have in flight per site",
    "AUTOTHROTTLE_DEBUG": "log every AutoThrottle decision",
    "ROBOTSTXT_OBEY": "follow the site's robots.txt",
    "CONCURRENT_REQUESTS": "requests in flight, in all",
    "CONCURRENT_REQUESTS_PER_DOMAIN": "requests in flight to one domain",
    "CONCURRENT_ITEMS": "items processed at once per response",
    "DOWNLOAD_TIMEOUT": "seconds a request may take",
    "DNS_TIMEOUT": "seconds a DNS lookup may take",
    "DOWNLOAD_MAXSIZE": "the largest body, in bytes (after decompression); larger is a "
    "parse error of its row",
    "DOWNLOAD_WARNSIZE": "a body larger than this many bytes is logged",
    "USER_AGENT": "the `User-Agent` header",
    "DEFAULT_REQUEST_HEADERS": "headers of every request (credentials go in `headers:` "
    "with `{env:NAME}`)",
    "COOKIES_ENABLED": "keep and send the site's cookies",
    "REDIRECT_ENABLED": "follow redirects",
    "REDIRECT_MAX_TIMES": "redirect hops per request; more is a `redirect_loop` error",
    "PLAYWRIGHT_DEFAULT_NAVIGATION_TIMEOUT": "milliseconds a rendered page may take to load",
    "PLAYWRIGHT_MAX_CONTEXTS": "browser contexts open at once",
    "PLAYWRIGHT_MAX_PAGES_PER_CONTEXT": "browser pages open at once per context",
}

#: Environment variable -> what it does, in one line: every ``FRAMEWORK_*`` variable
#: the framework and its plugins read from the environment (the settings above are read
#: from Scrapy's settings instead). A test fails on a name the code reads that is in
#: neither.
ENVIRONMENT_MEANINGS: dict[str, str] = {
    "FRAMEWORK_HOME": "the project root (its `projects/` and `var/`); unset: the nearest "
    "folder up from the working directory with a `projects/` or a `scrapy.cfg`",
    "FRAMEWORK_WORKSPACE": "the workspace of every command that takes `--workspace`: a "
    "folder or a `postgresql://` URL; unset: `var/<job>`",
    "FRAMEWORK_PROGRESS_INTERVAL": "seconds between two progress shows of `framework "
    "reparse` and `framework ship` (a crawl reads the setting of the same name)",
    "FRAMEWORK_STOP_GRACE": "`framework ship --stop-grace`: seconds requests in flight get "
    "at a stop",
    "FRAMEWORK_CHROMIUM": "the Chromium rendered jobs launch, unless the setting of the "
    "same name says another",
    "FRAMEWORK_SHIP_ENDPOINT": "`framework ship --endpoint`; also confirms a spec's "
    "`ship.endpoint` on another machine when it names the same origin",
    "FRAMEWORK_SHIP_TOKEN_ENV": "`framework ship --token-env`: the name of the variable "
    "that holds the bearer token",
    "FRAMEWORK_SHIP_SIGNING_SECRET": "the secret `framework ship` signs each request with "
    "(`X-Framework-Signature`), unless `--signing-secret-env` names another variable",
    "FRAMEWORK_INGEST_DB": "the `--db` of the `framework ingest` commands: the ingest "
    "endpoint's database URL",
    "FRAMEWORK_INGEST_SIGNING_SECRETS": "`framework ingest serve`: the secrets a request's "
    "signature is checked against, comma-separated (two during a rotation)",
    "FRAMEWORK_REPARSE_BATCH": "for tests: pages per transaction of `framework reparse` "
    "(default 500)",
    "FRAMEWORK_TEST_SQLITE_MAX_PAGES": "for tests: a SQLite workspace may not grow past "
    "this many pages, as on a full disk",
}

# `total:` is a field read from the whole page, and how far a list may be from it
SPEC_MEANINGS["TotalSpec"] = {
    **SPEC_MEANINGS["FieldSpec"],
    "type": "what the total is converted to (`integer` unless said)",
    "tolerance": "how many records the list may miss or exceed: a count, or `N%` of the total",
}
