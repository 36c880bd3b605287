"""Answers the HTTP client cannot read, redirect loops and spec settings over their
ceilings, through the real CLI and the real engine against a site on 127.0.0.1 port 0.

A page that answers with 5,000 ``Set-Cookie`` headers, or 200 headers of 8 KiB, comes
from a host that is up: its rows are ``invalid_response``, spend their attempts and end
in error (exit 4), where they used to be ``connect`` failures whose attempts were given
back, so that every run ended "a host refused every connection" (exit 3) and a cron loop
came back for ever. A redirect loop is ``redirect_loop``. A spec cannot lift a limit
past its ceiling (exit 2 at the value's ``file:line:col``); the operator can, with
``-s`` or (``scrapy crawl``) the project's Scrapy settings module, for a limit the spec
leaves out, whether its default is Scrapy's or the framework's.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.http_exceptions import BadHttpMessage
from scrapy.exceptions import (
    DownloadConnectionRefusedError,
    DownloadFailedError,
    IgnoreRequest,
    ResponseDataLossError,
)
from twisted.internet.error import ConnectionDone
from twisted.python.failure import Failure
from twisted.web._newclient import ParseError, ResponseFailed, ResponseNeverReceived

from framework.crawl.failures import HOST_FAILURES, REDIRECT_LOOP_NOTE, classify_failure
from framework.workspace import ErrorKind
from tests.fixtures import procs
from tests.fixtures.crawl import TWISTED_CLIENT, events, url_log
from tests.fixtures.server import Hits, QuietHandler, ServedSite, stop_at_end

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_CHECKPOINT = 3
EXIT_HALTED = 4
BACKOFF = "FRAMEWORK_RETRY_BACKOFF_BASE=0.05"  # the attempts of a run, close together
HOPS = 55  # a redirect chain longer than the ceiling of REDIRECT_MAX_TIMES (50)
ANNOUNCED = 300 * 1024 * 1024  # a length past the ceiling of DOWNLOAD_MAXSIZE (256 MiB)

Run = Callable[..., subprocess.CompletedProcess[str]]


class AnswerSite(ServedSite):
    """Pages that answer, each in its own way:

    * ``/`` links to the paths it is given (``links``);
    * ``/cookies``: 200 with 5,000 ``Set-Cookie`` headers;
    * ``/fat``: 200 with 200 headers of 8 KiB each;
    * ``/long``: 200 with one header line of 20 KiB (over both clients' 16 KiB);
    * ``/loop``: 302 to itself, for ever;
    * ``/hop/N``: 302 to ``/hop/N+1`` up to ``/hop/{HOPS}``, which is a page;
    * ``/announced``: 200 announcing ``ANNOUNCED`` bytes, then a small page and hanging
      up (a download is cancelled on the length when it is over DOWNLOAD_MAXSIZE);
    * anything else: a small page.
    """

    def __init__(self, links: list[str]) -> None:
        self.links = links
        self._hits: Hits[str] = Hits()

    def handler(self) -> type[BaseHTTPRequestHandler]:
        site = self

        class Handler(QuietHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                site._hits.add(path)
                body = f"<html><body><p>page {path}</p></body></html>".encode()
                if path == "/":
                    links = "".join(f'<a href="{p}">{p}</a>' for p in site.links)
                    body = f"<html><body>{links}</body></html>".encode()
                    self.send_response(200)
                elif path == "/cookies":
                    self.send_response(200)
                    for i in range(5000):
                        self.send_header("Set-Cookie", f"c{i}=v{i}; Path=/")
                elif path == "/fat":
                    self.send_response(200)
                    for i in range(200):
                        self.send_header(f"X-Fat-{i}", "x" * 8192)
                elif path == "/long":
                    self.send_response(200)
                    self.send_header("X-Long", "y" * 20_000)
                elif path == "/loop":
                    self.send_response(302)
                    self.send_header("Location", "/loop")
                elif path.startswith("/hop/") and int(path[5:]) < HOPS:
                    self.send_response(302)
                    self.send_header("Location", f"/hop/{int(path[5:]) + 1}")
                elif path == "/announced":
                    self.send_response(200)
                    self.send_header("Content-Length", str(ANNOUNCED))
                    self.end_headers()
                    self.wfile.write(body)
                    self.close_connection = True
                    return
                elif path == "/robots.txt":
                    self.send_response(404)
                else:
                    self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return Handler

    def hits(self, path: str) -> int:
        return self._hits.count(path)


@pytest.fixture
def answer_site() -> Iterator[Callable[[list[str]], AnswerSite]]:
    yield from stop_at_end(lambda links: AnswerSite(links).start())


SPEC = """\
name: answers
source_type: answers
start_urls: ["{base}/"]
max_attempts: 3
pages:
  list:
    follow: {{css: "a::attr(href)", to: detail}}
  detail:
    id: {{url: '([^/]+)$'}}
    fields:
      text: {{css: "p::text"}}
{settings}"""


def _spec(root: Path, base: str, settings: str = "") -> Path:
    path = root / "projects" / "answers" / "job.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(SPEC.format(base=base, settings=settings), encoding="utf-8")
    return path


def _rows(ws: Path) -> dict[str, dict[str, Any]]:
    con = sqlite3.connect(f"file:{ws / 'state.sqlite'}?mode=ro", uri=True)
    try:
        cur = con.execute("SELECT url, status, attempts, last_error_kind, last_error FROM rows")
        return {
            url: {"status": st, "attempts": n, "kind": kind, "error": err}
            for url, st, n, kind, err in cur
        }
    finally:
        con.close()


def _crawl(
    run: Run, spec: Path, ws: Path, *settings: str, client: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    extra = [arg for s in (BACKOFF, *settings) for arg in ("-s", s)]
    return run("crawl", str(spec), "--workspace", str(ws), *extra, *client, timeout=180)


@pytest.mark.process
@pytest.mark.timeout(240)
def test_a_header_flood_spends_its_attempts_and_the_crawl_ends_needing_a_human(
    answer_site: Callable[[list[str]], AnswerSite], tmp_path: Path, crawl_cli: Run
) -> None:
    site = answer_site(["/cookies", "/fat"])
    spec = _spec(tmp_path, site.url)
    ws = tmp_path / "ws"

    r = _crawl(crawl_cli, spec, ws)
    assert r.returncode == EXIT_HALTED, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    rows = _rows(ws)
    for path in ("/cookies", "/fat"):
        row = rows[site.url + path]
        # the host answered: an invalid answer, not a connection failure ...
        assert row["kind"] == ErrorKind.INVALID_RESPONSE, row
        assert row["error"] == (
            "DownloadFailedError: invalid HTTP response: BadHttpMessage (too many headers received)"
        ), row
        # ... so the row spent its budget and ended in error, and no cookie is in its note
        assert (row["status"], row["attempts"]) == ("error", 3), row
        assert site.hits(path) == 3
    assert "c1=v1" not in r.stderr
    assert [e for e in events(ws) if e["event"] == "host_down"] == []
    assert events(ws)[-1]["reason"] == "finished"

    # a cron loop that runs it again is not sent back to the site for ever
    again = _crawl(crawl_cli, spec, ws)
    assert again.returncode == EXIT_HALTED, again.stderr[-3000:]
    assert site.hits("/cookies") == 3
    assert site.hits("/fat") == 3


@pytest.mark.process
@pytest.mark.timeout(240)
def test_a_header_line_too_long_for_twisteds_client_is_an_invalid_answer_too(
    answer_site: Callable[[list[str]], AnswerSite], tmp_path: Path, crawl_cli: Run
) -> None:
    """Twisted's client hangs up on a header line over 16 KiB (no parser error): bytes of
    the answer had come, so the host is up and the row spends its attempts."""
    site = answer_site(["/long"])
    spec = _spec(tmp_path, site.url)
    ws = tmp_path / "ws"
    r = _crawl(crawl_cli, spec, ws, client=TWISTED_CLIENT)
    assert r.returncode == EXIT_HALTED, r.stderr[-3000:]
    row = _rows(ws)[site.url + "/long"]
    assert (row["status"], row["attempts"], row["kind"]) == ("error", 3, "invalid_response"), row
    assert row["error"].startswith("DownloadFailedError: invalid HTTP response: cut short ("), row
    assert [e for e in events(ws) if e["event"] == "host_down"] == []

    # the same page through the default client (aiohttp) says what was too long
    ws2 = tmp_path / "ws2"
    r = _crawl(crawl_cli, spec, ws2)
    assert r.returncode == EXIT_HALTED, r.stderr[-3000:]
    row = _rows(ws2)[site.url + "/long"]
    assert (row["status"], row["attempts"], row["kind"]) == ("error", 3, "invalid_response"), row
    assert "LineTooLong (over 16384 bytes)" in row["error"], row


@pytest.mark.process
@pytest.mark.timeout(240)
def test_a_redirect_loop_is_typed_redirect_loop_and_is_final(
    answer_site: Callable[[list[str]], AnswerSite], tmp_path: Path, crawl_cli: Run
) -> None:
    site = answer_site(["/loop", "/fine"])
    spec = _spec(tmp_path, site.url, "settings: {REDIRECT_MAX_TIMES: 5}\n")
    ws = tmp_path / "ws"
    r = _crawl(crawl_cli, spec, ws)
    assert r.returncode == EXIT_HALTED, r.stderr[-3000:]
    rows = _rows(ws)
    loop = rows[site.url + "/loop"]
    assert loop["kind"] == ErrorKind.REDIRECT_LOOP, loop
    assert "more redirects than REDIRECT_MAX_TIMES" in loop["error"], loop
    # final, as the http_4xx it used to be typed: asking again leads into the same loop
    assert (loop["status"], loop["attempts"]) == ("error", 1), loop
    assert site.hits("/loop") == 6  # the first request and its five redirects
    assert rows[site.url + "/fine"]["status"] == "ok"
    assert [u["outcome"] for u in url_log(ws) if u["url"].endswith("/loop")] == ["redirect_loop"]


@pytest.mark.process
@pytest.mark.timeout(300)
def test_a_spec_cannot_lift_a_limit_past_its_ceiling_and_the_operator_can(
    answer_site: Callable[[list[str]], AnswerSite], tmp_path: Path, crawl_cli: Run
) -> None:
    site = answer_site(["/hop/0"])
    final = f"{site.url}/hop/0"

    # the values that lifted every limit: refused at their value, before any request
    lifted = _spec(
        tmp_path,
        site.url,
        "settings:\n"
        "  FRAMEWORK_EXTRACT_TIMEOUT: 100000000\n"
        "  DOWNLOAD_MAXSIZE: 1000000000000000\n"
        f"  REDIRECT_MAX_TIMES: {HOPS + 5}\n",
    )
    r = crawl_cli("validate", str(lifted), timeout=60)
    assert r.returncode == EXIT_USAGE, r.stderr
    where = str(lifted)
    assert f"{where}:13:30: setting 'FRAMEWORK_EXTRACT_TIMEOUT': 100000000 is over" in r.stderr
    assert f"{where}:14:21: setting 'DOWNLOAD_MAXSIZE': 1000000000000000 is over" in r.stderr
    assert f"{where}:15:23: setting 'REDIRECT_MAX_TIMES': {HOPS + 5} is over" in r.stderr
    assert "pass `-s REDIRECT_MAX_TIMES=...` on the command line" in r.stderr
    r = _crawl(crawl_cli, lifted, tmp_path / "refused")
    assert r.returncode == EXIT_USAGE, r.stderr[-3000:]
    assert site.hits("/") == 0

    # without it, the chain is longer than Scrapy's default of 20 redirects ...
    plain = _spec(tmp_path, site.url)
    ws = tmp_path / "ws"
    r = _crawl(crawl_cli, plain, ws)
    assert r.returncode == EXIT_HALTED, r.stderr[-3000:]
    assert _rows(ws)[final]["kind"] == "redirect_loop"

    # ... and the operator lifts the limit past the spec's ceiling with -s
    ws = tmp_path / "ws-operator"
    r = _crawl(crawl_cli, plain, ws, f"REDIRECT_MAX_TIMES={HOPS + 5}")
    assert r.returncode == EXIT_OK, r.stderr[-3000:]
    assert _rows(ws)[final]["status"] == "ok"
    assert site.hits(f"/hop/{HOPS}") == 1


def _wrapped(outer: BaseException, inner: BaseException) -> Failure:
    """``outer`` raised ``from inner``, as Scrapy's handlers chain the client's error."""
    outer.__cause__ = inner
    return Failure(outer)


def test_each_clients_own_exceptions_are_typed_without_quoting_the_answer() -> None:
    # aiohttp's parser under the handler's DownloadFailedError (framework/crawl/http.py)
    flood = BadHttpMessage("Too many headers received")
    answer = aiohttp.ClientResponseError(None, (), status=400)  # type: ignore[arg-type]
    answer.__cause__ = flood
    note = "invalid HTTP response: BadHttpMessage (too many headers received)"
    assert classify_failure(_wrapped(DownloadFailedError(note), answer)) == (
        ErrorKind.INVALID_RESPONSE,
        f"DownloadFailedError: {note}",
    )
    # Twisted's parser, a reason of ResponseFailed: named, its bytes never quoted
    status_line = ParseError("wrong number of parts", b"HTTP/1.1 Set-Cookie: sid=SECRET")
    failed = ResponseFailed([Failure(status_line)])
    kind, note = classify_failure(_wrapped(DownloadFailedError(str(failed)), failed))
    assert (kind, note) == (
        ErrorKind.INVALID_RESPONSE,
        "DownloadFailedError: invalid HTTP response: ParseError",
    )
    # Twisted's client hung up after bytes of the answer came: the host is up ...
    cut = ResponseFailed([Failure(ConnectionDone())])
    assert classify_failure(_wrapped(DownloadFailedError(str(cut)), cut))[0] == (
        ErrorKind.INVALID_RESPONSE
    )
    # ... but not a byte came: a connection failure, toward a down host as before
    never = ResponseNeverReceived([Failure(ConnectionDone())])
    assert classify_failure(_wrapped(DownloadFailedError(str(never)), never))[0] == (
        ErrorKind.CONNECT
    )
    assert classify_failure(Failure(DownloadConnectionRefusedError("refused")))[0] == (
        ErrorKind.CONNECT
    )
    # a body cut short of its Content-Length came from a host that answered
    assert classify_failure(Failure(ResponseDataLossError("lost")))[0] == (
        ErrorKind.INVALID_RESPONSE
    )
    # Scrapy's redirect middlewares past REDIRECT_MAX_TIMES, and only those
    assert classify_failure(Failure(IgnoreRequest("max redirections reached"))) == (
        ErrorKind.REDIRECT_LOOP,
        REDIRECT_LOOP_NOTE,
    )
    assert classify_failure(Failure(IgnoreRequest("something else")))[0] == ErrorKind.HTTP_4XX
    assert ErrorKind.INVALID_RESPONSE.retryable
    assert not ErrorKind.REDIRECT_LOOP.retryable
    assert {ErrorKind.INVALID_RESPONSE, ErrorKind.REDIRECT_LOOP}.isdisjoint(HOST_FAILURES)


OPERATOR_SETTINGS = f"""\
from framework.scrapy_settings import *  # noqa: F403

# past the spec ceilings: REDIRECT_MAX_TIMES (Scrapy's default), DOWNLOAD_MAXSIZE (the
# framework's default)
REDIRECT_MAX_TIMES = {HOPS + 5}
DOWNLOAD_MAXSIZE = {2 * ANNOUNCED}
"""


@pytest.mark.process
@pytest.mark.timeout(300)
def test_the_operators_settings_module_lifts_a_limit_past_its_ceiling(
    answer_site: Callable[[list[str]], AnswerSite], tmp_path: Path
) -> None:
    """``scrapy crawl`` reads the project's settings module (scrapy.cfg, or
    $SCRAPY_SETTINGS_MODULE): what it sets for a limit the spec leaves out is taken,
    past the spec's ceiling, whether the limit's default is Scrapy's or the framework's.
    Scrapy settings given as environment variables (``SCRAPY_<NAME>``) are not read."""
    site = answer_site(["/hop/0", "/announced"])
    _spec(tmp_path, site.url)
    (tmp_path / "opsettings.py").write_text(OPERATOR_SETTINGS, encoding="utf-8")
    (tmp_path / "scrapy.cfg").write_text("[settings]\ndefault = opsettings\n", encoding="utf-8")
    chain, announced = f"{site.url}/hop/0", f"{site.url}/announced"

    def scrapy_crawl(ws: Path, **env: str) -> subprocess.CompletedProcess[str]:
        return procs.run(
            [
                sys.executable, "-m", "scrapy", "crawl", "answers", "-s", f"JOBDIR={ws}",
                "-s", BACKOFF, "-s", "LOG_LEVEL=WARNING",
            ],
            cwd=tmp_path, capture_output=True, text=True, timeout=180,
            env={**os.environ, **env},
        )  # fmt: skip

    # the module that scrapy.cfg names lifts both limits past their ceilings
    ws = tmp_path / "ws-module"
    r = scrapy_crawl(ws)
    rows = _rows(ws)
    assert rows[chain]["status"] == "ok", rows[chain]
    assert site.hits(f"/hop/{HOPS}") == 1
    # not cancelled on its announced length: read until the site hung up
    assert rows[announced]["kind"] == "invalid_response", rows[announced]
    assert rows[announced]["error"].startswith("ResponseDataLossError: "), rows[announced]
    assert r.returncode == EXIT_OK, r.stderr[-3000:]  # scrapy crawl's, whatever the rows

    # $SCRAPY_SETTINGS_MODULE names another module (the framework's, no lifts): the
    # limits are the spec's defaults again, and SCRAPY_<NAME> variables change nothing
    ws = tmp_path / "ws-env"
    r = scrapy_crawl(
        ws,
        SCRAPY_SETTINGS_MODULE="framework.scrapy_settings",
        SCRAPY_REDIRECT_MAX_TIMES=str(HOPS + 5),
        SCRAPY_DOWNLOAD_MAXSIZE=str(2 * ANNOUNCED),
    )
    assert r.returncode == EXIT_OK, r.stderr[-3000:]
    rows = _rows(ws)
    assert rows[chain]["kind"] == "redirect_loop", rows[chain]
    assert rows[announced]["error"] == (
        "response larger than DOWNLOAD_MAXSIZE (33554432 bytes): download cancelled, page not read"
    ), rows[announced]
    assert site.hits(f"/hop/{HOPS}") == 1
