"""The crawl's HTTP client (framework/crawl/http.py: Scrapy's aiohttp handler, built on
first use, URLs sent verbatim) through the real CLI: HTTPS to a local server with a
self-signed certificate, the same server refused once certificates are verified (a
typed TLS note, not a connection error), and a URL that reaches the server exactly as
the URL log recorded it. Every other crawl test runs on this client too; Twisted's is
one setting away (tests/fixtures/crawl.py ``TWISTED_CLIENT``), and
tests/crawl/test_crawl_politeness_slots.py runs it.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import socket
import ssl
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from aiohttp.abc import AbstractResolver
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from scrapy import Request
from scrapy.exceptions import CannotResolveHostError, DownloadConnectionRefusedError
from scrapy.utils.test import get_crawler
from twisted.python.failure import Failure

from framework.crawl.http import HttpHandler
from framework.crawl.runtime import classify_failure
from framework.crawl.workers import job_settings
from framework.workspace import ErrorKind, RowStatus, Workspace
from tests.crawl.test_crawl_fightback import EXIT_OK, SOURCE, crawl, write_spec
from tests.crawl.test_crawl_fightback import assert_only_truth as stored_only_truth
from tests.crawl.test_crawl_signals import DripServer
from tests.crawl.test_crawl_signals import _spec as drip_spec
from tests.fixtures.blocking_site import BlockingSite, truth
from tests.fixtures.crawl import TWISTED_CLIENT, url_log
from tests.fixtures.server import LocalServer, closed_port, stop_at_end

QUICK_RETRIES = ("-s", "FRAMEWORK_RETRY_BACKOFF_BASE=0.05")


def self_signed(into: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 signed by its own key: (cert, key) PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = into / "cert.pem", into / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


class TlsSite(BlockingSite):
    """The blocking site served over TLS (``https://127.0.0.1:port``)."""

    def __init__(self, cert: Path, key: Path) -> None:
        super().__init__()
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(cert, key)

    def start(self) -> TlsSite:
        server = LocalServer(self.handler())
        # a client that refuses the certificate fails the handshake inside accept():
        # an OSError, which socketserver drops before the next accept
        server.httpd.socket = self.context.wrap_socket(server.httpd.socket, server_side=True)
        self._server = server.start()
        self.port = server.port
        self.url = f"https://127.0.0.1:{server.port}"
        return self


class EncodedLinks(BlockingSite):
    """The blocking site whose product links carry an encoded query, recording every
    request target as it arrived (``targets``)."""

    QUERY = "next=http%3A%2F%2Fo.example%2Fa%2F..%2Fb&k=%7E&s=a%2Bb"

    def __init__(self) -> None:
        super().__init__()
        self.targets: list[str] = []

    def _serve(self, handler: Any) -> None:
        with self.lock:
            self.targets.append(handler.path)
        super()._serve(handler)

    def _answer(self, what: str, parts: Any, banned: bool) -> tuple[int, Any, bytes]:
        status, headers, body = super()._answer(what, parts, banned)
        if what == "list":
            body = body.replace(b"'>Product", f"?{self.QUERY}'>Product".encode())
        return status, headers, body


class LongHeaders(BlockingSite):
    """The blocking site whose pages carry a 12 kB header line (a long CSP or cookie),
    over aiohttp's default of 8 KiB and under Twisted's 16 KiB."""

    def _answer(self, what: str, parts: Any, banned: bool) -> tuple[int, Any, bytes]:
        status, headers, body = super()._answer(what, parts, banned)
        return status, [*headers, ("Content-Security-Policy", "x" * 12_000)], body


class CookieTooLong(BlockingSite):
    """Every page sets a cookie on a header line longer than any client reads."""

    def __init__(self, cookie: str) -> None:
        super().__init__()
        self.cookie = cookie

    def _answer(self, what: str, parts: Any, banned: bool) -> tuple[int, Any, bytes]:
        status, headers, body = super()._answer(what, parts, banned)
        return status, [*headers, ("Set-Cookie", self.cookie + "z" * 20_000)], body


@pytest.fixture
def serve() -> Iterator[Callable[[BlockingSite], BlockingSite]]:
    """``serve(site)`` starts the site; every one is stopped when the test ends."""
    yield from stop_at_end(lambda site: site.start())


def test_the_default_client_is_the_frameworks_and_twisted_is_one_setting_away(
    tmp_path: Path,
) -> None:
    spec = write_spec(tmp_path, "http://127.0.0.1:9")

    def handlers(*overrides: str) -> dict[str, Any]:
        pairs = dict(o.split("=", 1) for o in overrides[1::2])
        return dict(job_settings(spec, tmp_path, pairs).getwithbase("DOWNLOAD_HANDLERS"))

    default = handlers()
    assert default["http"] == default["https"] == "framework.crawl.http.HttpHandler"
    assert [default[s] for s in ("file", "data", "ftp", "s3")] == [None] * 4
    twisted = handlers(*TWISTED_CLIENT)
    assert twisted["http"] == twisted["https"]
    assert twisted["http"].endswith(".http11.HTTP11DownloadHandler")
    assert [twisted[s] for s in ("file", "data", "ftp", "s3")] == [None] * 4  # still refused


def crawled_whole(site: BlockingSite, tmp_path: Path) -> Path:
    """The workspace of a crawl of ``site`` that stored exactly its truth."""
    ws = tmp_path / "ws"
    result = crawl(write_spec(tmp_path, site.url), ws)
    assert result.returncode == EXIT_OK, result.stderr[-3000:]
    assert stored_only_truth(ws).keys() == truth(SOURCE).keys()
    return ws


@pytest.mark.process
def test_https_with_a_self_signed_certificate_is_crawled(tmp_path: Path, serve: Any) -> None:
    site = serve(TlsSite(*self_signed(tmp_path)))
    ws = crawled_whole(site, tmp_path)
    assert all(line["url"].startswith("https://") for line in url_log(ws))


@pytest.mark.process
def test_a_refused_certificate_is_a_tls_note_on_the_row(tmp_path: Path, serve: Any) -> None:
    site = serve(TlsSite(*self_signed(tmp_path)))
    spec = write_spec(tmp_path, site.url)
    ws = tmp_path / "ws"
    result = crawl(spec, ws, "-s", "DOWNLOAD_VERIFY_CERTIFICATES=True", *QUICK_RETRIES)
    assert result.returncode != EXIT_OK, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    with Workspace.open(ws, create=False, readonly=True) as w:
        rows = list(w.store.iter_rows())
    assert [r.status for r in rows] == [RowStatus.ERROR]
    (row,) = rows
    assert row.last_error_kind is not None
    assert row.last_error_kind.value == "other"
    assert row.last_error is not None
    assert row.last_error.startswith("TLS handshake failed: "), row.last_error
    assert "CERTIFICATE_VERIFY_FAILED" in row.last_error
    assert site.pages.requests == 0  # no request got through the handshake


@pytest.mark.process
def test_a_url_reaches_the_server_as_the_url_log_has_it(tmp_path: Path, serve: Any) -> None:
    site = serve(EncodedLinks())
    ws = crawled_whole(site, tmp_path)
    logged = []
    for line in url_log(ws):
        parts = urlsplit(line["url"])
        logged.append(f"{parts.path}?{parts.query}" if parts.query else parts.path)
    details = [t for t in logged if t.startswith("/item/")]
    assert details
    assert all(t.endswith("?" + EncodedLinks.QUERY) for t in details)
    # aiohttp given a string re-encodes it (yarl): %3A%2F -> ://, %7E -> ~, /a/../b -> /b
    assert set(logged) <= set(site.targets), sorted(set(logged) - set(site.targets))


@pytest.mark.process
def test_a_body_that_trickles_for_ever_is_cut_at_the_download_timeout(tmp_path: Path) -> None:
    """aiohttp's ``total`` timeout covers reading the body, not only the headers: a page
    that sends a byte every 0.2 s is a ``timeout`` row, not a crawl held for ever."""
    drip = DripServer().start()
    try:
        ws = tmp_path / "ws"
        result = crawl(
            drip_spec(tmp_path, drip.url), ws, "-s", "DOWNLOAD_TIMEOUT=1", *QUICK_RETRIES
        )
    finally:
        drip.stop()
    assert result.returncode != EXIT_OK, result.stderr[-3000:]
    with Workspace.open(ws, create=False, readonly=True) as w:
        (row,) = list(w.store.iter_rows())
        kinds = [a["error_kind"] for a in w.store.attempts(row.id)]
    assert row.status is RowStatus.ERROR
    assert kinds == ["timeout"] * 3
    assert row.last_error is not None
    assert "took longer than 1" in row.last_error, row.last_error


@pytest.mark.process
def test_a_header_line_twisteds_client_reads_is_read(tmp_path: Path, serve: Any) -> None:
    site = serve(LongHeaders())
    crawled_whole(site, tmp_path)


@pytest.mark.process
def test_a_header_the_client_refuses_is_not_quoted_in_a_note_or_a_log(
    tmp_path: Path, serve: Any
) -> None:
    """aiohttp's parser quotes the start of a line it refuses; that may be a cookie."""
    secret = "session=TOPSECRET-" + "y" * 20
    site = serve(CookieTooLong(secret))
    ws = tmp_path / "ws"
    result = crawl(write_spec(tmp_path, site.url), ws, "-L", "DEBUG", *QUICK_RETRIES)
    assert result.returncode != EXIT_OK, result.stderr[-3000:]
    with Workspace.open(ws, create=False, readonly=True) as w:
        (row,) = list(w.store.iter_rows())
    assert row.last_error == (
        "DownloadFailedError: invalid HTTP response: LineTooLong (over 16384 bytes)"
    )
    written = [result.stdout, result.stderr] + [
        p.read_text(errors="replace") for p in ws.rglob("*.jsonl")
    ]
    assert "LineTooLong" in result.stderr
    assert not [text for text in written if "TOPSECRET" in text]


class OfflineResolver(AbstractResolver):
    """Every name unknown, without a packet sent (as the resolver of a machine without
    DNS answers): the crawl tests' Twisted resolver of the same name, for aiohttp."""

    async def resolve(self, host: str, port: int = 0, family: int = socket.AF_INET) -> Any:
        raise OSError(socket.EAI_NONAME, f"no such name: {host}")

    async def close(self) -> None:
        pass


def test_download_errors_of_the_client_become_typed_notes(tmp_path: Path) -> None:
    async def failures() -> list[BaseException]:
        handler = HttpHandler.from_crawler(get_crawler())
        handler._session.connector._resolver = OfflineResolver()  # type: ignore[union-attr]
        out = []
        for url in ("http://nonexistent.invalid/", f"http://127.0.0.1:{closed_port()}/"):
            with pytest.raises((CannotResolveHostError, DownloadConnectionRefusedError)) as caught:
                await handler.download_request(Request(url, meta={"download_timeout": 5}))
            out.append(caught.value)
        await handler.close()
        return out

    unresolved, refused = asyncio.run(failures())
    assert classify_failure(Failure(unresolved)) == (
        ErrorKind.DNS,
        "CannotResolveHostError: Cannot connect to host nonexistent.invalid:80"
        " [no such name: nonexistent.invalid]",
    )
    kind, note = classify_failure(Failure(refused))
    assert kind is ErrorKind.CONNECT
    assert note.startswith("DownloadConnectionRefusedError: Cannot connect to host 127.0.0.1:")
    assert "SSLContext object" not in note  # no object address: one failure, one note
