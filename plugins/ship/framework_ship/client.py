"""HTTP side of shipping: one ingest endpoint, its fallback path, and the batch route.

Owns the requests: the URL (``--endpoint`` is either a base URL, to which the contract
path ``/v1/items`` is added, or the full items URL), the body bytes, the headers
(``Content-Type``, ``Idempotency-Key: <dedupe_key>@<content_hash>``, and
``Authorization: Bearer <token>`` set on each request only, never on the session, never
returned; ``X-Framework-Signature`` when a signing secret is given, computed over the
exact body bytes on every attempt), the route state (primary -> fallback path after a
404/405; batch route -> one by one when the batch route is missing), the bounds of one
exchange (``timeout`` covers all of it, through :mod:`framework_ship.watchdog`; an
answer is read up to :data:`MAX_ANSWER_BYTES`, an error's up to :data:`MAX_ERROR_BYTES`),
and turning a response or a transport error into a :class:`Reply`. It does not retry,
sleep, classify outcomes or log: a ``Reply`` carries what :mod:`framework_ship.deliver`
needs to do those.

One ``requests.Session`` per thread: a session is not safe to share across threads.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import requests

from framework.errors import Halted
from framework_ship.classify import classify_exception
from framework_ship.watchdog import ABANDONED, Watch, Watchdog, watched_session

CONTRACT_PATH = "/v1/items"
BATCH_SUFFIX = "/batch"
USER_AGENT = "framework-ship/0.1"
SIGNATURE_HEADER = "X-Framework-Signature"
# Recently signed bodies remembered (a retry or redelivery comes soon after its first try).
_SIGNED_MEMORY = 4096
MAX_IDEMPOTENCY_KEY = 255
# What one answer may take in memory. A contract answer is small (a batch of 250 is
# about 40 KB); an error's body is only quoted (300 characters) and parsed for its
# problem type. Past these the rest is not read and the connection is dropped.
MAX_ANSWER_BYTES = 16 << 20
MAX_ERROR_BYTES = 64 << 10
_CHUNK = 64 << 10
_KEY_SAFE = "!#$&'()*+,-./:;=?@[]^_`{|}~"


_TRANSPORT_ERRORS = (
    requests.exceptions.Timeout,
    requests.exceptions.ConnectionError,
    requests.exceptions.ChunkedEncodingError,
)


class RequestRefused(Halted):
    """requests refused to build or send the request at all (not a network error)."""


@dataclass(frozen=True)
class Reply:
    """One HTTP exchange (or a transport failure: ``status`` None, ``error_class`` set)."""

    status: int | None
    body: Any
    retry_after: str | None
    latency_ms: float
    route: str
    error_class: str | None = None
    detail: str | None = None


def items_url(endpoint: str) -> str:
    """The items URL of an endpoint: a bare base URL gets the contract path."""
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"not an http(s) URL: {endpoint!r}")
    if parts.username or parts.password or parts.query:
        # A secret there would reach error texts (and so the ship log), and requests
        # would send user:password as Basic auth instead of the bearer token.
        raise ValueError(
            "the endpoint must not carry credentials or a query string; "
            "pass the token with --token-env"
        )
    path = parts.path.rstrip("/")
    if not path:
        path = CONTRACT_PATH
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


class BearerAuth(requests.auth.AuthBase):
    """The bearer token as requests' ``auth``: set on each request only, never on the
    session, and explicit, so a ``~/.netrc`` entry cannot replace it."""

    def __init__(self, token: str) -> None:
        self._token = token

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        header = ("Authorization", f"Bearer {self._token}")
        # Auth runs after requests checks the headers: check this one the same way, so a
        # token no header can carry is refused as requests' InvalidHeader (whose text the
        # client never keeps), not later by http.client quoting it.
        requests.utils.check_header_validity(header)
        request.headers[header[0]] = header[1]
        return request

    def __repr__(self) -> str:
        return "BearerAuth(<redacted>)"


def sign(key: bytes, body: bytes, now: float) -> str:
    """The ``X-Framework-Signature`` value of ``body`` sent at ``now``:
    ``t=<unix seconds>,v1=<hex HMAC-SHA256(key, b"<t>." + body)>`` (the scheme of
    docs/ingest-contract.md; Stripe and GitHub sign webhooks the same way)."""
    t = int(now)
    mac = hmac.new(key, b"%d." % t + body, hashlib.sha256).hexdigest()
    return f"t={t},v1={mac}"


def _header_safe(text: str) -> bool:
    """Printable ASCII without spaces (C-speed checks: this runs once per item)."""
    return text.isascii() and text.isprintable() and " " not in text


def with_path(url: str, path: str) -> str:
    parts = urlsplit(url)
    if not path.startswith("/"):
        path = "/" + path
    return urlunsplit((parts.scheme, parts.netloc, path.rstrip("/") or "/", "", ""))


def redelivery_key(body: Mapping[str, Any]) -> str:
    """The key of a *second* delivery of a version the server already saw under
    ``<dedupe_key>@<content_hash>`` with another payload: the content went A -> B -> A,
    and the crawl stamped the returning A with a new ``scraped_at``. Reusing the first
    key for a different payload is what the Idempotency-Key draft forbids (the server
    answers 422); this key adds the scrape time, so it too is stable across replays."""
    stamp = "".join(ch for ch in str(body.get("scraped_at", "")) if ch.isalnum())
    return idempotency_key({**body, "content_hash": f"{body['content_hash']}@{stamp}"})


def idempotency_key(body: Mapping[str, Any]) -> str:
    """``<dedupe_key>@<content_hash>``: one delivery of one version of a datum.

    A header value must be printable ASCII without spaces (at most 255 characters at
    the reference server), so a key outside that is percent-encoded, and a still too
    long one is replaced by its sha256: stable either way, so a replay reuses it."""
    raw = f"{body['dedupe_key']}@{body['content_hash']}"
    if len(raw) <= MAX_IDEMPOTENCY_KEY and _header_safe(raw):
        return raw
    encoded = f"{quote(str(body['dedupe_key']), safe=_KEY_SAFE)}@{body['content_hash']}"
    if len(encoded) <= MAX_IDEMPOTENCY_KEY:
        return encoded
    return "sha256:" + hashlib.sha256(raw.encode("utf-8")).hexdigest()


class IngestClient:
    def __init__(
        self,
        endpoint: str,
        token: str | None = None,
        fallback_path: str | None = None,
        timeout: float = 30.0,
        notice: Callable[[str], None] = lambda message: None,
        session_factory: Callable[[], requests.Session] = watched_session,
        signing_secret: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        primary = items_url(endpoint)
        self.routes = [primary]
        if fallback_path:
            fallback = with_path(primary, fallback_path)
            if fallback != primary:
                self.routes.append(fallback)
        self._route = 0
        self._batch_ok = [True] * len(self.routes)
        self._token = token
        self._auth = BearerAuth(token) if token else None
        self._signing_key = signing_secret.encode() if signing_secret else None
        self._clock = clock
        self._signed: OrderedDict[int, int] = OrderedDict()  # body fingerprint -> last t
        self._static_headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": USER_AGENT,
        }
        self.timeout = timeout
        self._watchdog = Watchdog()
        self._notice = notice
        self._session_factory = session_factory
        self._local = threading.local()
        # thread -> (URL, started, items) of the request it waits on (what Ctrl-C names)
        self._in_flight: dict[int, tuple[str, float, int]] = {}
        self._lock = threading.Lock()
        self._sessions: list[requests.Session] = []

    def __repr__(self) -> str:  # never shows the token or the signing secret
        return (
            f"IngestClient(route={self.route!r}, auth={'yes' if self._token else 'no'}, "
            f"signed={'yes' if self._signing_key else 'no'})"
        )

    # route state ----------------------------------------------------------------
    @property
    def route(self) -> str:
        return self.routes[self._route]

    @property
    def batch_available(self) -> bool:
        return self._batch_ok[self._route]

    def moved(self, failed_route: str, status: int) -> bool:
        """The endpoint answered 404/405 on ``failed_route``: switch to the fallback
        path. Returns whether there is a route left to try."""
        with self._lock:
            index = self.routes.index(failed_route) if failed_route in self.routes else -1
            if index < self._route:
                return True  # another thread already moved on
            if index + 1 >= len(self.routes):
                return False
            self._route = index + 1
            self._notice(
                f"endpoint moved: POST {urlsplit(failed_route).path} answered {status}; "
                f"using the fallback path {urlsplit(self.route).path}"
            )
            return True

    def batch_missing(self, failed_route: str, status: int) -> None:
        """The batch route of ``failed_route`` answered 404/405: ship one by one there."""
        with self._lock:
            if failed_route not in self.routes:
                return
            index = self.routes.index(failed_route)
            if self._batch_ok[index]:
                self._batch_ok[index] = False
                self._notice(
                    f"the batch route POST {urlsplit(failed_route).path}{BATCH_SUFFIX} "
                    f"answered {status}: shipping one by one"
                )

    # requests -----------------------------------------------------------------
    def _session(self) -> requests.Session:
        session: requests.Session | None = getattr(self._local, "session", None)
        if session is None:
            session = self._session_factory()
            _read_environment_once(session, self.routes[0])
            self._local.session = session
            with self._lock:
                self._sessions.append(session)
        return session

    def _headers(self, idem: str | None) -> dict[str, str]:
        if idem is None:
            return self._static_headers
        return {**self._static_headers, "Idempotency-Key": idem}

    def _sign(self, data: bytes) -> str:
        """The signature of one attempt. The server accepts each signature once, and
        the same body signed twice in one second (a retry, a redelivery under another
        Idempotency-Key, which is a header the signature does not cover) would repeat
        it: such an attempt takes the next second instead (well inside the skew)."""
        assert self._signing_key is not None
        now = int(self._clock())
        fingerprint = hash(data)  # collisions only move a t by a second: harmless
        with self._lock:
            last = self._signed.get(fingerprint)
            t = now if last is None or last < now else last + 1
            self._signed[fingerprint] = t
            self._signed.move_to_end(fingerprint)
            if len(self._signed) > _SIGNED_MEMORY:
                self._signed.popitem(last=False)
        return sign(self._signing_key, data, t)

    def post_item(self, body: Mapping[str, Any], idem: str | None = None) -> Reply:
        route = self.route
        return self._post(route, route, body, idem or idempotency_key(body))

    def post_batch(
        self, bodies: Sequence[Mapping[str, Any]], idems: Sequence[str | None] | None = None
    ) -> Reply:
        route = self.route
        keys = list(idems) if idems is not None else [None] * len(bodies)
        # Each element names its own delivery, as the single route's header does.
        elements = [
            {**b, "idempotency_key": k or idempotency_key(b)}
            for b, k in zip(bodies, keys, strict=True)
        ]
        return self._post(route, route + BATCH_SUFFIX, elements, None)

    def _post(self, route: str, url: str, payload: Any, idem: str | None) -> Reply:
        data = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
        headers = self._headers(idem)
        if self._signing_key is not None:
            # Signed per attempt (a fresh t each time): a retry after a long backoff must
            # not arrive with a signature the server's skew window already refuses.
            headers = {**headers, SIGNATURE_HEADER: self._sign(data)}
        started = time.perf_counter()
        me = threading.get_ident()
        self._in_flight[me] = (url, started, len(payload) if isinstance(payload, list) else 1)
        watch = self._watchdog.watch(self.timeout)
        try:
            with watch:
                response = self._session().post(
                    url,
                    data=data,
                    headers=headers,
                    auth=self._auth,
                    timeout=self.timeout,  # each connect and read; the watch bounds the sum
                    allow_redirects=False,
                    stream=True,  # read below, up to a cap
                )
                content, cut = _read_capped(response)
        except (requests.RequestException, OSError, http.client.HTTPException) as exc:
            latency = (time.perf_counter() - started) * 1000
            if watch.why is not None:
                # The watchdog shut the socket: whatever error that caused, the cause
                # is the deadline (or the stop), not the network.
                return Reply(None, None, None, latency, route, watch.why, self._ended(watch))
            if isinstance(exc, requests.RequestException) and not isinstance(
                exc, _TRANSPORT_ERRORS
            ):
                # Not the network: a bad URL or header, a bug. Retrying cannot help and
                # marking the item done would lie, so the run halts. Only the class name
                # is kept: the message of an invalid header quotes its value (the token).
                raise RequestRefused(
                    f"the request could not be made ({type(exc).__name__}); check "
                    "--endpoint and the token"
                ) from None
            if isinstance(exc, requests.RequestException):
                _, error_class = classify_exception(exc)
            elif isinstance(exc, ConnectionError):
                error_class = "reset"  # a reset while reading the body
            else:
                raise
            return Reply(None, None, None, latency, route, error_class, _short(exc))
        finally:
            # Also when a second Ctrl-C aborts the wait (raised from the signal handler).
            self._in_flight.pop(me, None)
        latency = (time.perf_counter() - started) * 1000
        if watch.why is not None:
            # Ended by the watchdog, yet no error: a socket shut mid-headers reads as
            # their end, and an answer without a length ends at EOF. Nothing says the
            # answer was whole; a retry is safe (the Idempotency-Key replays it).
            return Reply(None, None, None, latency, route, watch.why, self._ended(watch))
        body: Any = None
        if content and not cut:
            try:
                body = json.loads(content)
            except ValueError:
                body = None
        detail = None
        if response.status_code >= 300 or not isinstance(body, Mapping):
            # Also a 2xx that is no JSON object: it is not the contract's answer, and
            # the log must say what came instead.
            detail = _detail(body, content)
            if cut:
                detail = f"(an answer over {cut} bytes, not read further) {detail}"[:300]
        return Reply(
            response.status_code,
            body,
            response.headers.get("Retry-After"),
            latency,
            route,
            None,
            detail,
        )

    def _ended(self, watch: Watch) -> str:
        if watch.why == ABANDONED:
            return "abandoned at the stop: no complete answer within the stop grace"
        return (
            f"no complete answer within --timeout {self.timeout:g} s (it bounds the whole exchange)"
        )

    def stop_within(self, grace: float) -> None:
        """A stop: every request in flight (and any started later) is abandoned if it
        has no complete answer within ``grace`` seconds."""
        self._watchdog.stop_within(grace)

    def waiting(self) -> list[tuple[str, float, int]]:
        """The requests waiting for an answer now: (URL path, seconds so far, items)."""
        now = time.perf_counter()
        return [
            (urlsplit(url).path, now - started, n)
            for url, started, n in list(self._in_flight.values())
        ]

    def close(self) -> None:
        with self._lock:
            for session in self._sessions:
                session.close()
            self._sessions.clear()
        self._watchdog.close()


def _read_environment_once(session: requests.Session, url: str) -> None:
    """What requests reads from the environment on every request (proxies honouring
    NO_PROXY, a CA bundle), read once for the run instead, and ``trust_env`` off.

    Per request, requests scans the whole environment twice for proxy variables and
    stats ``~/.netrc``: one by one that was a tenth of the shipper's own CPU time per
    item. Turning it off also keeps ``~/.netrc`` out for good: the only credential
    sent is the token of ``--token-env``. Proxy settings apply to every route alike:
    the fallback path lives on the same host."""
    if not session.trust_env:
        return
    proxies = requests.utils.get_environ_proxies(url)
    for scheme, proxy in proxies.items():
        session.proxies.setdefault(scheme, proxy)
    bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
    if bundle and session.verify is True:
        session.verify = bundle
    session.trust_env = False


def _read_capped(response: requests.Response) -> tuple[bytes, int]:
    """The body of ``response``, read up to its cap: (bytes, 0), or (the first bytes,
    the cap) when the answer is longer; then the rest is never read, and the connection
    is closed rather than pooled."""
    if response.raw is None:  # built in memory (a stub, a replay): nothing to stream
        return response.content, 0
    cap = MAX_ANSWER_BYTES if response.status_code < 300 else MAX_ERROR_BYTES
    chunks: list[bytes] = []
    size = 0
    try:
        for chunk in response.iter_content(_CHUNK):
            chunks.append(chunk)
            size += len(chunk)
            if size > cap:
                return b"".join(chunks)[:cap], cap
    finally:
        response.close()  # back to the pool when read to the end, else closed
    return b"".join(chunks), 0


def _short(exc: BaseException) -> str:
    """The failure in at most 200 characters, by its innermost cause: requests wraps
    urllib3, which wraps the socket's error, and each wrapper's text (pool, host, URL:
    the log line has the route) comes first; cut at 200, the part that said what
    happened (refused, name unknown, timed out) was lost."""
    cause = _root_cause(exc)
    shown = cause if cause is not exc and str(cause) else exc
    return f"{type(exc).__name__}: {shown}"[:200]


def _root_cause(exc: BaseException) -> BaseException:
    """The innermost error behind ``exc``: urllib3's ``reason``, then the explicit or
    implicit cause, as deep as they go (a few levels; a cycle ends the walk)."""
    seen = {id(exc)}
    while True:
        inner = getattr(exc, "reason", None)
        if not isinstance(inner, BaseException):
            inner = next((a for a in exc.args if isinstance(a, BaseException)), None)
        if inner is None:
            inner = exc.__cause__ or exc.__context__
        if inner is None or id(inner) in seen:
            return exc
        seen.add(id(inner))
        exc = inner


def _detail(body: Any, content: bytes) -> str:
    if isinstance(body, Mapping):
        for name in ("detail", "error", "message"):
            if name in body:
                value = body[name]
                return (value if isinstance(value, str) else json.dumps(value))[:300]
    if not content:
        return "(an empty body)"
    return content[:300].decode("utf-8", "replace")
