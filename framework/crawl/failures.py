"""What a failed download was, as a typed note: the one place a download exception
becomes an :class:`~framework.workspace.ErrorKind`.

The kind decides what the failure costs, so the typing must not let a crawl loop:

* ``connect`` and ``dns`` (:data:`HOST_FAILURES`) say the host could not be reached at
  all: only they count toward the down-host stop, whose attempts are given back
  (:meth:`framework.crawl.runtime.CrawlRuntime.on_failure`). A refused connection, a
  name that does not resolve, a connection dropped before any answer.
* ``invalid_response``: the host answered, but not with HTTP the client reads (too many
  headers, a header line over 16 KiB, a bad status line, a body cut short of its
  ``Content-Length``). A host that answers is not down, so these spend the row's
  attempts like a 5xx and end in error after ``max_attempts``: a page that always
  answers that way cannot hold a crawl at "come back later" for ever.
* ``redirect_loop``: more redirects than ``REDIRECT_MAX_TIMES`` (Scrapy's redirect
  middlewares end with ``IgnoreRequest("max redirections reached")``); final.

Both HTTP clients are read: the aiohttp handler (framework/crawl/http.py, the default)
chains the parser's ``HttpProcessingError`` under Scrapy's ``DownloadFailedError``;
Twisted's wraps its ``ParseError``/``BadHeaders`` in a ``ResponseFailed`` (its
``reasons``), which Scrapy wraps in turn. It names exceptions only: no request
headers, no bytes of the answer. It knows nothing of rows, hosts or the workspace.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from functools import cache
from typing import TYPE_CHECKING

from scrapy.utils._compression import _DecompressionMaxSizeExceeded

from framework.workspace import ErrorKind

if TYPE_CHECKING:
    from twisted.python.failure import Failure

# Failures that say the host cannot be reached at all, whatever the URL: they count
# toward the down-host stop and a stopped outage gives their attempts back.
HOST_FAILURES = frozenset({ErrorKind.CONNECT, ErrorKind.DNS})
# Scrapy's RedirectMiddleware and MetaRefreshMiddleware (BaseRedirectMiddleware) past
# REDIRECT_MAX_TIMES; Scrapy has no exception class of its own for it
MAX_REDIRECTIONS = "max redirections reached"
INVALID_ANSWER = "invalid HTTP response"  # how framework/crawl/http.py's notes begin
REDIRECT_LOOP_NOTE = (
    "redirect loop: more redirects than REDIRECT_MAX_TIMES allows (max redirections reached)"
)


def classify_failure(failure: Failure) -> tuple[ErrorKind, str]:
    """A download failure as a typed note. Names only: no request headers.

    Scrapy 2.19's HTTP download handlers wrap Twisted's errors in Scrapy's own
    (``scrapy.utils._download_handlers.wrap_twisted_exceptions``: a refusal becomes
    ``DownloadConnectionRefusedError``, a failed lookup ``CannotResolveHostError``, a
    dropped connection ``DownloadFailedError``...), while other connect errors still
    arrive bare; both families are in :func:`_failure_kinds`.
    """
    exc = failure.value
    if exc is None:  # an errback always has one; typed for the checker
        return ErrorKind.OTHER, "unknown failure"
    # The crawl's own refusals (schemes, off-site, sizes) say what they are.
    own = getattr(exc, "error_kind", None)
    if isinstance(own, ErrorKind):
        return own, str(exc)
    name = type(exc).__name__
    if isinstance(exc.__cause__, _DecompressionMaxSizeExceeded):
        # HttpCompressionMiddleware's IgnoreRequest for a Content-Encoding (gzip...) body
        # over DOWNLOAD_MAXSIZE once decoded: a bomb, typed like a body over the size
        # said as the other size refusals say it (safety.py), not in Scrapy's words
        cap = getattr(exc.__cause__, "max_size", None)
        return ErrorKind.PARSE, (
            f"response larger than DOWNLOAD_MAXSIZE ({cap} bytes) once decompressed "
            "(its Content-Encoding): page not read"
        )
    if _tls_failed(exc):
        # not a host that is down: a certificate or protocol problem a human must see
        return ErrorKind.OTHER, f"TLS handshake failed: {_describe(exc)}"
    bad = _unreadable(exc)
    if bad is not None:
        # before the table: these arrive as DownloadFailedError, a `connect` there
        return ErrorKind.INVALID_RESPONSE, _describe_unreadable(exc, bad)
    if _redirect_loop(exc):
        return ErrorKind.REDIRECT_LOOP, REDIRECT_LOOP_NOTE
    for types, kind in _failure_kinds():
        if isinstance(exc, types):
            return kind, _describe(exc)
    if "Timeout" in name:
        return ErrorKind.TIMEOUT, name
    return ErrorKind.OTHER, _describe(exc)


@cache
def _failure_kinds() -> tuple[tuple[tuple[type[BaseException], ...], ErrorKind], ...]:
    """Download exceptions and their kinds, most specific first (a TCP timeout is a
    ConnectError too, a refusal is a ConnectError too)."""
    from scrapy import exceptions as sx
    from scrapy.core.downloader.handlers.http11 import TunnelError
    from twisted.internet import error as terr
    from twisted.web.client import ResponseFailed

    return (
        ((sx.IgnoreRequest,), ErrorKind.HTTP_4XX),
        ((sx.UnsupportedURLSchemeError,), ErrorKind.SCHEME),
        ((sx.CannotResolveHostError, terr.DNSLookupError, terr.UnknownHostError), ErrorKind.DNS),
        (
            (sx.DownloadTimeoutError, terr.TimeoutError, terr.TCPTimedOutError),
            ErrorKind.TIMEOUT,
        ),
        # the status line and headers came, then the body was cut short: the host
        # answered, so it is not down (a down host refuses the next connection)
        ((sx.ResponseDataLossError,), ErrorKind.INVALID_RESPONSE),
        (
            (
                sx.DownloadConnectionRefusedError,
                sx.DownloadFailedError,  # the connection broke before the answer
                terr.ConnectError,
                terr.ConnectionLost,
                terr.ConnectionDone,
                ResponseFailed,
                TunnelError,  # a proxy could not reach the host
            ),
            ErrorKind.CONNECT,
        ),
    )


@cache
def _parser_errors() -> tuple[type[BaseException], ...]:
    """What the HTTP clients' response parsers raise for an answer they cannot read:
    aiohttp's (``BadHttpMessage`` for too many headers, ``LineTooLong``,
    ``BadStatusLine``, ``InvalidHeader``... all ``HttpProcessingError``) and Twisted's
    (``ParseError``, ``BadHeaders``)."""
    from aiohttp.http_exceptions import HttpProcessingError
    from twisted.web._newclient import BadHeaders, ParseError

    return (HttpProcessingError, ParseError, BadHeaders)


def _unreadable(exc: BaseException) -> BaseException | None:
    """The parser's error in the chain of ``exc``, if the answer could not be read; or
    Twisted's ``ResponseFailed`` that is not a ``ResponseNeverReceived``: bytes of the
    answer came before the connection closed (its client hangs up on a header line over
    16 KiB, where aiohttp's says ``LineTooLong``), so the host is up."""
    from twisted.web._newclient import ResponseFailed, ResponseNeverReceived

    chain = list(_causes(exc))
    errors = _parser_errors()
    parsed = next((c for c in chain if isinstance(c, errors)), None)
    if parsed is not None:  # the parser's word first: it says what was wrong
        return parsed
    return next(
        (
            c
            for c in chain
            if isinstance(c, ResponseFailed) and not isinstance(c, ResponseNeverReceived)
        ),
        None,
    )


def _describe_unreadable(exc: BaseException, bad: BaseException) -> str:
    """The note of an unreadable answer. A parser's message may quote the bytes it
    choked on (a header line: a ``Set-Cookie``, maybe), and no note carries a cookie:
    the aiohttp handler's message already says what was wrong without them
    (framework/crawl/http.py); otherwise the parser's error is named, not quoted."""
    if str(exc).startswith(INVALID_ANSWER):
        return f"{type(exc).__name__}: {exc}"
    if not isinstance(bad, _parser_errors()):  # a ResponseFailed: what closed it
        why = [type(c).__name__ for c in _causes(bad) if c is not bad]
        return f"{type(exc).__name__}: {INVALID_ANSWER}: cut short ({', '.join(why[:2])})"
    return f"{type(exc).__name__}: {INVALID_ANSWER}: {type(bad).__name__}"


def _redirect_loop(exc: BaseException) -> bool:
    from scrapy.exceptions import IgnoreRequest

    return isinstance(exc, IgnoreRequest) and str(exc) == MAX_REDIRECTIONS


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """The exception, what it wraps (``raise ... from``) and the reasons of a Twisted
    ``ResponseFailed`` (a list of Failures)."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        cur = todo.pop(0)
        if id(cur) in seen:
            continue
        seen.add(id(cur))
        yield cur
        if cur.__cause__ is not None:
            todo.append(cur.__cause__)
        for reason in getattr(cur, "reasons", None) or ():
            value = getattr(reason, "value", None)
            if isinstance(value, BaseException):
                todo.append(value)


def _tls_failed(exc: BaseException) -> bool:
    """A TLS error anywhere in the chain: Python's ``ssl`` (the aiohttp client,
    framework/crawl/http.py) or pyOpenSSL's (Twisted's client, one setting away)."""
    try:
        from OpenSSL.SSL import Error as OpenSSLError
    except ImportError:  # pragma: no cover - pyOpenSSL comes with Scrapy
        return any(isinstance(c, ssl.SSLError) for c in _causes(exc))
    return any(isinstance(c, (ssl.SSLError, OpenSSLError)) for c in _causes(exc))


def _describe(exc: BaseException) -> str:
    """``Name: message``; for a wrapped ``ResponseFailed`` (whose str is a list of Failure
    reprs) the names and messages of its reasons instead."""
    reasons = [c for c in _causes(exc) if c is not exc and not getattr(c, "reasons", None)]
    text = str(exc)
    if reasons and (not text or text.startswith("[<")):
        text = "; ".join(f"{type(r).__name__}: {r}".rstrip(": ") for r in reasons[:3])
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


__all__ = ["HOST_FAILURES", "classify_failure"]
