"""The crawl's HTTP client: Scrapy's download handler on aiohttp, built on first use and
sending every URL as Scrapy encoded it.

Why not Scrapy's default (Twisted's HTTP/1.1 client): its response parser is pure
Python and was ~10% of a crawl's profile; aiohttp's is C. Measured with
``bench/bench_versions.py`` (docs/benchmarks.md, "The HTTP client"): the same crawl
took 0.875x the CPU. Everything around the client stays Scrapy's: the download
middlewares (safety, redirects, cookies, decompression), ``DOWNLOAD_TIMEOUT``,
``DOWNLOAD_MAXSIZE``/``WARNSIZE`` and data loss (``BaseStreamingDownloadHandler``),
proxies, TLS from Scrapy's settings (``DOWNLOAD_VERIFY_CERTIFICATES``, off by default as
in Scrapy), and aiohttp's pool holds ``CONCURRENT_REQUESTS`` and
``CONCURRENT_REQUESTS_PER_DOMAIN`` as well.

Scrapy 2.19 marks its class experimental. What this one changes:

* **Built on first use** (``lazy``). Scrapy builds a non-lazy handler with the
  downloader, which ``framework crawl`` reaches before the asyncio loop runs, and
  aiohttp's connector needs a running loop.
* **URLs sent verbatim.** Scrapy's handler gives aiohttp the URL as a string, which
  yarl re-normalises: ``?next=http%3A%2F%2Fo%2F`` went out as ``?next=http://o/``,
  ``%7E`` as ``~``, ``/a/../b`` as ``/b``; a signed URL would no longer match its
  signature. A Request's URL is already encoded (``safe_url_string``), so it goes out
  as it is, as Twisted's client sends it. (Scrapy's own switch for this, the
  ``verbatim_url`` meta key, also changes the request's fingerprint and stops a
  redirect's ``Location`` being encoded, so it is not used.)
* **Header lines up to 16 KiB**, as Twisted's client reads them, not aiohttp's 8.
* **An answer the parser refuses** (too many headers, a line over 16 KiB, a bad status
  line) is a ``DownloadFailedError`` whose note begins ``invalid HTTP response``: the
  crawl types it ``invalid_response`` (framework/crawl/failures.py), never a connection
  failure, since the host did answer.
* **Names checked once resolved**: the connector's resolver refuses an answer with an
  address the job may not reach (:mod:`framework.crawl.addresses`), before any
  connection; the download fails as a ``private_target`` refusal, not a DNS error.
* **Notes without what they should not carry**: aiohttp's parser quotes the bytes of a
  header it refuses (a ``Set-Cookie``, maybe), and its connect errors the repr of an SSL
  context (a new address each run); the messages keep the reason only.

Twisted's client is one setting away: ``DOWNLOAD_HANDLERS`` naming
``scrapy.core.downloader.handlers.http11.HTTP11DownloadHandler`` for http and https,
the other schemes still ``None`` (``-s`` replaces the whole mapping; docs/operations.md
gives the value, tests/fixtures/crawl.py ``TWISTED_CLIENT`` uses it). Scrapy is pinned
to 2.19.x; tests/crawl/test_crawl_http_client.py runs HTTPS, a refused certificate, an
encoded URL, a long header, a cookie too long to read, a body that trickles past
``DOWNLOAD_TIMEOUT`` and the typed download errors through this class, and every crawl
test runs on it. Host names are resolved by the system's resolver (aiohttp's), not
through Scrapy's DNS cache.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, ClassVar

import aiohttp
import yarl
from aiohttp.http_exceptions import HttpProcessingError, LineTooLong
from scrapy.core.downloader.handlers._aiohttp import AiohttpDownloadHandler, _ClientResponse
from scrapy.exceptions import (
    CannotResolveHostError,
    DownloadConnectionRefusedError,
    DownloadFailedError,
    DownloadTimeoutError,
    UnsupportedURLSchemeError,
)
from scrapy.utils.httpobj import urlparse_cached

from framework.crawl.addresses import TARGET_HOST, PrivateAddress, policy_of
from framework.crawl.resolver import guard_connector
from framework.crawl.safety import refused_error, via_of

if TYPE_CHECKING:
    from scrapy import Request
    from scrapy.crawler import Crawler


#: the longest response header line read, as Twisted's client (LineReceiver.MAX_LENGTH)
HEADER_LINE_MAX = 16384
# reasons aiohttp's parser gives in fixed words (others may quote what it choked on)
_FIXED_REASONS = frozenset({"Too many headers received"})


class HttpHandler(AiohttpDownloadHandler):
    lazy: ClassVar[bool] = True  # type: ignore[misc]  # see the module docstring
    # Scrapy logs a warning per crawl for an experimental handler; the framework has
    # chosen this one on purpose and tests it (the module docstring), so it says nothing
    experimental: ClassVar[bool] = False

    def __init__(self, crawler: Crawler) -> None:
        super().__init__(crawler)
        guard_connector(self._session.connector, policy_of(crawler))

    @asynccontextmanager
    async def _make_request(
        self, request: Request, timeout: float
    ) -> AsyncIterator[_ClientResponse]:
        # Scrapy 2.19's _make_request, line for line, but for the URL (encoded=True)
        # and the header sizes
        proxy = self._extract_proxy_url_with_creds(request)
        # whose name the resolver checks (resolver.GuardedResolver): this download's
        # task only, so it is not reset (each download runs in its own task)
        TARGET_HOST.set((urlparse_cached(request).hostname or "").rstrip(".").lower())
        headers = self._request_headers(request).to_tuple_list()
        url = yarl.URL(request.url, encoded=True)
        try:
            async with await self._session.request(
                request.method,
                url,
                data=request.body,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=timeout),
                ssl=self._ssl_context,
                allow_redirects=False,
                proxy=proxy,
                # Twisted's client reads header lines up to 16 KiB; aiohttp's default
                # of 8 KiB would refuse a long Set-Cookie or CSP that Scrapy accepts
                max_line_size=HEADER_LINE_MAX,
                max_field_size=HEADER_LINE_MAX,
            ) as response:
                yield response  # type: ignore[misc]  # response_class=_ClientResponse
        except TimeoutError as e:
            raise DownloadTimeoutError(
                f"Getting {request.url} took longer than {timeout} seconds."
            ) from e
        except (aiohttp.InvalidUrlClientError, aiohttp.NonHttpUrlClientError) as e:
            raise UnsupportedURLSchemeError(str(e)) from e
        except aiohttp.ClientConnectorDNSError as e:
            if isinstance(e.os_error, PrivateAddress):
                why = str(e.os_error)
                raise refused_error(
                    "private_target", request.url, frozenset(), via_of(request), why
                ) from None
            raise CannotResolveHostError(_connect_message(e)) from e
        except aiohttp.ClientConnectorError as e:
            raise DownloadConnectionRefusedError(_connect_message(e)) from e
        except aiohttp.ClientError as e:
            raise DownloadFailedError(_failed_message(e)) from e


def _connect_message(e: aiohttp.ClientConnectorError) -> str:
    """aiohttp's message without the repr of the SSL context it passed (``ssl:<ssl.
    SSLContext object at 0x7f...>``, a new address each run): a row's note is compared
    across rows and runs, so the same failure must read the same."""
    reason = e.os_error.strerror or e.os_error
    return f"Cannot connect to host {e.host}:{e.port} [{reason}]"


def _failed_message(e: aiohttp.ClientError) -> str:
    """aiohttp's message, but for a response its parser refused: that message quotes
    the bytes it choked on (up to 100 of a header line, which may be a ``Set-Cookie``),
    and no note or log line carries a cookie (docs/operations.md, "Secrets"). What was
    wrong is in the parser's error class (``LineTooLong``, ``InvalidHeader``,
    ``BadStatusLine``...), which Twisted's client would not have said at all."""
    if not isinstance(e, aiohttp.ClientResponseError):
        return str(e)
    cause: BaseException | None = e
    while cause is not None:
        if isinstance(cause, HttpProcessingError) and type(cause) is not HttpProcessingError:
            if isinstance(cause, LineTooLong):
                return f"invalid HTTP response: LineTooLong (over {cause.args[1]} bytes)"
            said = getattr(cause, "message", None)
            if said in _FIXED_REASONS:  # the parser's own words, no bytes of the answer
                return f"invalid HTTP response: {type(cause).__name__} ({said.lower()})"
            return f"invalid HTTP response: {type(cause).__name__}"
        cause = cause.__cause__
    return f"invalid HTTP response ({e.status})"
