"""A job's login and session: the spec's ``login:``, run before any other request of a
crawl (so on every resume too), and again whenever a page says the session expired.

The session lives in Scrapy's cookie jar (``CookiesMiddleware``, the default jar): the
login requests go through the downloader middlewares like every other request, so the
cookies the site sets are sent with every later request at any concurrency. A login is
never a workspace row: it is not committed, counted, stored or written to the URL log.

:class:`SessionMiddleware` (a downloader middleware, before the redirect and cookie
middlewares) does the rest:

* **gate**: while a login is in flight, every other request waits for it (its cookie
  is attached afterwards, by the cookie middleware), so none is sent with a session
  that is being replaced;
* **expiry**: a response that says the session is gone (a status, a redirect to the
  login page, a selector) never reaches the spider. One login runs however many
  responses say so at once (single flight; a request sent before the latest login only
  waits for it), and the request is sent again: its row is neither failed nor counted
  as an attempt. A page that stays "expired" after fresh logins becomes a row error,
  and logins in a row with no page fetched between them stop the run
  (``session_lost``) rather than loop;
* a login that fails stops the crawl at once (``login_failed``, exit 4) with one line
  saying why; the requests waiting for it are dropped unsent, their rows stay pending.

What a login sends comes from ``{env:NAME}`` references only (:mod:`.secrets`); the
session's cookie values and the login form's hidden tokens are masked in everything
the crawl writes from the moment they are known.

:class:`ExtraCookiesMiddleware` adds the spec's ``cookies:`` (the job's, then the page
kind's) to each request's ``Cookie`` header after the jar's, never into the jar.
"""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit

from scrapy.downloadermiddlewares.cookies import CookiesMiddleware
from scrapy.exceptions import IgnoreRequest, ScrapyDeprecationWarning
from scrapy.http import FormRequest, Request, TextResponse
from scrapy.http.request import NO_CALLBACK
from scrapy.utils.defer import maybe_deferred_to_future
from tldextract import TLDExtract
from twisted.internet.defer import Deferred

from framework.crawl.politeness import Abandoned, _engine_closing
from framework.crawl.safety import shown
from framework.errors import PageLevelError
from framework.extract.fields import compile_jsonpath
from framework.extract.patterns import LimitExceeded, Limits, SafeRegex, search_bounded
from framework.redact import redact_url
from framework.workspace import ErrorKind

if TYPE_CHECKING:
    from http.cookiejar import Cookie
    from typing import Self

    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.http.cookies import CookieJar

    from framework.crawl.secrets import Secrets
    from framework.spec.models import LoginSpec

logger = logging.getLogger(__name__)

REASON_LOGIN_FAILED = "login_failed"
REASON_SESSION_LOST = "session_lost"
LOGIN_META = "fw_login"  # a login request: never gated, never judged expired
LOGIN_JAR = "fw_login"  # the cookie jar a login runs in
_GENERATION = "fw_session"  # the login a request was sent under
_ORIGINAL = "fw_session_original"  # the request as the spider made it (before redirects)
_TRIES = "fw_session_tries"  # times this request met an expired session
RELOGIN_BOOST = 100  # added to the priority of a request sent again after a new login
# A hidden input of a login form this long is a token (CSRF, view state): masked.
TOKEN_CHARS = 16


class LoginFailed(PageLevelError):
    """What went wrong with a login, in one line that names no secret."""


class SessionRefused(IgnoreRequest):
    """A page that said "expired" again after fresh logins: an error on its row."""

    error_kind = ErrorKind.HTTP_4XX


class Session:
    """One job's login state. ``event`` records a workspace event, ``stop`` ends the
    crawl with a close reason; ``masks`` are the Secrets whose masking must learn the
    session's values (the spider's and the runtime's)."""

    def __init__(
        self,
        spec: LoginSpec,
        *,
        start_url: str,
        secrets: Secrets,
        headers: Mapping[str, str],
        crawler: Crawler,
        event: Callable[..., None],
        stop: Callable[[str], None],
        masks: Iterable[Secrets] = (),
        limits: Limits | None = None,
    ) -> None:
        """``limits``: the job's extraction limits (``login.expired.url`` runs within
        their time limit)."""
        self.spec = spec
        self.secrets = secrets
        self.crawler = crawler
        self._event = event
        self._stop = stop
        self._masks = [secrets, *masks]
        self.url = urljoin(start_url, secrets.resolve_text(spec.url, quote_as="url"))
        self.shown_url = shown(secrets.mask(self.url))  # for logs and events
        self._headers = {k: secrets.resolve_text(v) for k, v in headers.items()}
        self._login_page = _without_query(self.url)
        # on the bounded engine, as a field's regex: a pattern that backtracks on a long
        # URL must not hold the crawl (framework/extract/patterns.py)
        self._url_re = SafeRegex(spec.expired.url) if spec.expired.url else None
        self._limits = limits or Limits()
        self.generation = 0  # logins that succeeded in this run
        self.failed: str | None = None  # the close reason, once the session is lost
        self._busy = False
        self._waiters: list[Deferred[None]] = []
        self._fruitless = 0  # logins since a page was fetched under the current one
        # login.token: the header that carries the session (name, value); never logged
        self.token_header: tuple[str, str] | None = None

    # ------------------------------------------------------------------ login
    async def start(self) -> bool:
        """The first login of the run; False when it failed (said, recorded: then
        ``failed`` is set) or the crawl is stopping meanwhile (a signal: not a failure)."""
        try:
            await self._login("start")
        except LoginFailed as exc:
            if _engine_closing(self.crawler):
                return False
            self._fail(REASON_LOGIN_FAILED, str(exc), stop=False)
            return False
        return True

    async def _login(self, why: str) -> None:
        # A jar of its own, new each time: a page answered meanwhile cannot replace the
        # token cookie that must match the form's; the session joins the default jar
        # (every other request's) only once the login succeeded.
        jars = self._jars()
        jars.pop(LOGIN_JAR, None)
        meta = {LOGIN_META: True, "cookiejar": LOGIN_JAR}
        if self.spec.form is not None:
            page = await self._fetch(
                Request(
                    self.url,
                    headers=self._headers or None,
                    meta=meta,
                    dont_filter=True,
                    callback=NO_CALLBACK,
                ),
                "the login page",
            )
            if page.status >= 400:
                raise LoginFailed(f"the login page {self.shown_url} answered HTTP {page.status}")
            if not isinstance(page, TextResponse):
                raise LoginFailed(f"the login page {self.shown_url} is not a text page")
            self._mask_tokens(page)
            fields = {k: self.secrets.resolve_text(v) for k, v in self.spec.fields.items()}
            try:
                # Scrapy 2.19 points to the form2request package instead (not a
                # dependency); these are the semantics the spec reference promises
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", ScrapyDeprecationWarning)
                    request: Request = FormRequest.from_response(
                        page,
                        formcss=self.spec.form,
                        formdata=fields,
                        headers=self._headers or None,
                        meta=meta,
                        dont_filter=True,
                        callback=NO_CALLBACK,
                    )
            except ValueError:
                raise LoginFailed(
                    f"no form matches {self.spec.form!r} on the login page {self.shown_url}"
                ) from None
        else:
            body = json.dumps(self._resolved(self.spec.json_body))
            request = Request(
                self.url,
                method="POST",
                body=body,
                headers={**self._headers, "Content-Type": "application/json"},
                meta=meta,
                dont_filter=True,
                callback=NO_CALLBACK,
            )
        answer = await self._fetch(request, "the login")
        problem = self._judge(answer)
        if problem is not None:
            raise LoginFailed(problem)
        if self.spec.token is not None:
            self._take_token(answer)
        self.generation += 1
        login_jar = jars.get(LOGIN_JAR)
        if login_jar is not None:
            for cookie in login_jar:
                jars[None].set_cookie(cookie)
        self._mask_cookies()
        self._event("login", why=why, url=self.shown_url, status=answer.status)
        logger.info("logged in at %s (%s)", self.shown_url, why)

    async def _fetch(self, request: Request, what: str) -> Response:
        engine = self.crawler.engine
        assert engine is not None
        try:
            return await engine.download_async(request)
        except Exception as exc:  # refused, unreachable, off-site: the login failed
            raise LoginFailed(f"{what} at {self.shown_url} failed: {_describe(exc)}") from None

    def _resolved(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.secrets.resolve_text(value)
        if isinstance(value, Mapping):
            return {k: self._resolved(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self._resolved(v) for v in value]
        return value

    def _judge(self, response: Response) -> str | None:
        """Why ``response`` (the end of a login) is not a success, or None."""
        ok = self.spec.success
        where = f"after the login at {self.shown_url}"
        if ok.status is not None and response.status != ok.status:
            return f"HTTP {response.status} {where}, not {ok.status}"
        if ok.status is None and response.status >= 400:
            return f"HTTP {response.status} {where}"
        if ok.css is not None and not _matches(response, ok.css):
            return f"nothing matches {ok.css!r} on the page {where} (wrong credentials?)"
        if ok.cookie is not None and ok.cookie not in {c.name for c in self._jar(LOGIN_JAR)}:
            return f"no cookie {ok.cookie!r} was set {where} (wrong credentials?)"
        judged = ok.css is not None or ok.cookie is not None or ok.status is not None
        form = self.spec.form
        # (a JSON login answers at its own URL: only a form login is judged so)
        if (
            not judged
            and form is not None
            and (self._login_like(response.url) or _matches(response, form))
        ):
            return f"the login form came back {where} (wrong credentials?)"
        return None

    def _take_token(self, answer: Response) -> None:
        token = self.spec.token
        assert token is not None
        where = f"in the answer to the login at {self.shown_url}"
        try:
            found = compile_jsonpath(token.json_path).find(json.loads(answer.body))
        except ValueError:
            raise LoginFailed(f"the answer to the login at {self.shown_url} is not JSON") from None
        value = found[0] if found else None
        if not isinstance(value, str | int) or isinstance(value, bool) or not str(value):
            raise LoginFailed(f"no token at {token.json_path} {where}")
        for secrets in self._masks:
            secrets.add_mask("session:token", str(value))
        self.token_header = (token.header, token.value.replace("{token}", str(value)))

    def _jars(self) -> dict[Any, CookieJar]:
        """The cookie middleware's jars (none when COOKIES_ENABLED is off)."""
        engine = self.crawler.engine
        assert engine is not None
        for mw in engine.downloader.middleware.middlewares:
            if isinstance(mw, CookiesMiddleware):
                return mw.jars
        return {}

    def _jar(self, key: str | None = None) -> list[Cookie]:
        jar = self._jars().get(key)
        return list(jar) if jar is not None else []

    def _mask_cookies(self) -> None:
        for cookie in self._jar():
            if cookie.value:
                for secrets in self._masks:
                    secrets.add_mask(f"cookie:{cookie.name}", cookie.value)

    def _mask_tokens(self, page: TextResponse) -> None:
        form = self.spec.form or "form"
        try:
            hidden = page.css(form).css("input[type=hidden]")
        except Exception:  # a page that is not HTML: FormRequest says so next
            return
        for node in hidden:
            name = node.attrib.get("name", "")
            value = node.attrib.get("value", "")
            if len(value) >= TOKEN_CHARS:
                for secrets in self._masks:
                    secrets.add_mask(f"login:{name}", value)

    # ----------------------------------------------------------------- expiry
    def expired(self, request: Request, response: Response) -> bool:
        """Whether ``response`` says the session is gone."""
        rule = self.spec.expired
        if response.status in rule.status:
            return True
        location = response.headers.get(b"Location")
        if 300 <= response.status < 400 and location:
            target = urljoin(request.url, location.decode("latin-1"))
            if self._login_like(target):
                return True
        if request.meta.get("redirect_urls") and self._login_like(response.url):
            return True
        return rule.css is not None and response.status < 300 and _matches(response, rule.css)

    def _login_like(self, url: str) -> bool:
        if self._url_re is not None:
            try:
                return search_bounded(self._url_re, url, self._limits)
            except LimitExceeded as exc:
                logger.warning(
                    "login.expired.url: %s; taken as not matching %s", exc, redact_url(url)
                )
                return False
        return _without_query(url) == self._login_page

    def progress(self, generation: int | None) -> None:
        """A page was fetched under the current login: the session works."""
        if generation == self.generation:
            self._fruitless = 0

    async def ready(self) -> None:
        """Wait while a login is in flight; a request of a lost session is dropped. A
        run that did not log in first (``framework preview``, ``scrapy parse``) logs in
        with its first request."""
        if self.generation == 0 and not self._busy and self.failed is None:
            await self._only_login("start")
        while self._busy:
            await self._wait()
        if self.failed is not None:
            raise Abandoned("the session is lost: not sent")

    async def renew(self, seen: int, url: str) -> None:
        """A new login, unless one ran since the request was sent (``seen``) or is
        running (then wait for it). Raises :class:`Abandoned` when the session is lost."""
        await self.ready()
        if seen < self.generation:
            return
        if self._fruitless >= self.spec.max_relogins:
            self._fail(
                REASON_SESSION_LOST,
                f"the session expired {self._fruitless} times in a row right after a "
                f"login (last at {shown(self.secrets.mask(url))}); max_relogins is "
                f"{self.spec.max_relogins}",
            )
            raise Abandoned("the session is lost")
        self._fruitless += 1
        logger.info("session expired at %s: logging in again", shown(self.secrets.mask(url)))
        await self._only_login("expired")

    async def _only_login(self, why: str) -> None:
        """The one login in flight; the requests that meet it meanwhile wait for it."""
        self._busy = True
        try:
            await self._login(why)
        except LoginFailed as exc:
            self._fail(REASON_LOGIN_FAILED, str(exc))
            raise Abandoned("the login failed") from None
        finally:
            self._busy = False
            waiters, self._waiters = self._waiters, []
            for d in waiters:
                d.callback(None)

    async def retry(self, request: Request, response: Response) -> Request:
        """The request to send again after ``response`` said the session expired."""
        original: Request = request.meta.get(_ORIGINAL, request)
        tries = int(request.meta.get(_TRIES, 0)) + 1
        if tries > self.spec.max_relogins + 1:
            raise SessionRefused(
                f"the session expired at this page {tries} times in a row, each time "
                "after a new login"
            )
        await self.renew(int(request.meta.get(_GENERATION, self.generation)), response.url)
        # first after the new login: behind newer requests it could find the new
        # session's pages spent again (the site counts pages per session) and fail
        again = original.replace(dont_filter=True, priority=original.priority + RELOGIN_BOOST)
        for key in (_GENERATION, "redirect_urls", "redirect_times", "redirect_ttl"):
            again.meta.pop(key, None)
        again.meta[_TRIES] = tries
        again.meta[_ORIGINAL] = again
        return again

    async def _wait(self) -> None:
        d: Deferred[None] = Deferred()
        self._waiters.append(d)
        await maybe_deferred_to_future(d)

    def _fail(self, reason: str, detail: str, *, stop: bool = True) -> None:
        if self.failed is not None:
            return
        self.failed = reason
        text = self.secrets.mask(detail)
        logger.error("%s: %s", "login failed" if reason == REASON_LOGIN_FAILED else reason, text)
        self._event(reason, url=self.shown_url, error=text)
        if stop:
            self._stop(reason)


class SessionMiddleware:
    """The gate and the expiry check of a job's session (see the module docstring);
    does nothing for a job without ``login:``."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    def _session(self, request: Request) -> Session | None:
        # the job's pages only (a row's, a preview's): not a login, not robots.txt (the
        # robots middleware fetches it for the login request itself)
        if request.meta.get(LOGIN_META) or not (
            "fw_row" in request.meta or "fw_kind" in request.meta
        ):
            return None
        return getattr(self.crawler.spider, "session", None)

    async def process_request(self, request: Request) -> Request | None:
        session = self._session(request)
        if session is None:
            return None
        before = session.generation
        await session.ready()
        fresh = _GENERATION not in request.meta and _TRIES not in request.meta
        if fresh and 0 < before < session.generation:
            # It waited at the gate through a login that a spent session caused: the
            # pages that found it spent go first on the new one (a site that allows a
            # session so many pages would spend it on the requests that waited here,
            # and the ones sent again would find it spent too). Back to the scheduler,
            # behind them (RELOGIN_BOOST); a hop of a redirect keeps its place.
            return request.replace(dont_filter=True)
        if session.token_header is not None:  # the current login's, on a retry too
            name, value = session.token_header
            request.headers[name] = value
        # a redirect hop keeps the login its first request was sent under
        request.meta.setdefault(_ORIGINAL, request)
        request.meta.setdefault(_GENERATION, session.generation)
        return None

    async def process_response(self, request: Request, response: Response) -> Response | Request:
        session = self._session(request)
        if session is None:
            return response
        if not session.expired(request, response):
            session.progress(request.meta.get(_GENERATION))
            return response
        return await session.retry(request, response)


class SessionRedirectMiddleware(SessionMiddleware):
    """A redirect to the login page, seen before the redirect middleware follows it:
    the login page is not fetched for each expired request."""

    async def process_request(self, request: Request) -> None:
        return None

    async def process_response(self, request: Request, response: Response) -> Response | Request:
        session = self._session(request)
        if session is None or not 300 <= response.status < 400:
            return response
        if not session.expired(request, response):
            return response
        return await session.retry(request, response)


class ExtraCookiesMiddleware:
    """The spec's ``cookies:`` (job, then page kind), after the jar's cookies (so after
    ``CookiesMiddleware``, which rebuilds the header from the jar on every hop)."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    def process_request(self, request: Request) -> None:
        secrets: Secrets | None = getattr(self.crawler.spider, "secrets", None)
        if secrets is None:
            return
        row = request.meta.get("fw_row")
        kind = (
            None
            if request.meta.get(LOGIN_META)
            else (row.kind if row is not None else request.meta.get("fw_kind"))
        )
        cookies = secrets.cookies_for(kind)
        if not cookies:
            return
        extra = "; ".join(f"{k}={v}" for k, v in cookies.items()).encode("utf-8")
        have = request.headers.get(b"Cookie")
        if have and extra in have:
            return  # a redirect hop without the cookie middleware: already there
        request.headers[b"Cookie"] = have + b"; " + extra if have else extra


class OfflineCookiesMiddleware(CookiesMiddleware):
    """Scrapy's cookie middleware, but its public-suffix check reads the suffix list
    bundled with tldextract: Scrapy's fetches it from the internet on the first cookie
    (a request to a host the job never named, and a traceback where it cannot)."""

    def _process_cookies(
        self, cookies: Iterable[Cookie], *, jar: CookieJar, request: Request
    ) -> None:
        for cookie in cookies:
            domain = cookie.domain.removeprefix(".")
            host = urlsplit(request.url).hostname
            if host is None:
                continue
            if domain and not _SUFFIXES(domain).domain:  # a public suffix (co.uk)
                if domain != host.lower():
                    continue
                cookie.domain = host.lower()
            jar.set_cookie_if_ok(cookie, request)


_SUFFIXES = TLDExtract(suffix_list_urls=(), cache_dir=None, include_psl_private_domains=True)


def _matches(response: Response, css: str) -> bool:
    if not isinstance(response, TextResponse):
        return False
    try:
        return bool(response.css(css))
    except Exception:  # not markup (a JSON answer): nothing matches
        return False


def _without_query(url: str) -> str:
    parts = urlsplit(url)
    return parts._replace(query="", fragment="").geturl()


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


__all__ = [
    "LOGIN_META",
    "REASON_LOGIN_FAILED",
    "REASON_SESSION_LOST",
    "ExtraCookiesMiddleware",
    "LoginFailed",
    "OfflineCookiesMiddleware",
    "Session",
    "SessionMiddleware",
    "SessionRedirectMiddleware",
]
