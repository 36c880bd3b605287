"""robots.txt requests wait at the spec's ``rate:`` gate like the pages do.

Through the real CLI and engine, on a local site reached under two host names
(``127.0.0.1`` and ``localhost``, both in the job's hosts), so the crawl needs two
robots.txt files and may fetch them while pages of the other host are in flight. The
site counts every request it is serving, robots.txt included, and answers robots.txt
slowly, which leaves room for an overlap if robots.txt bypassed the gate. Under
``rate: {concurrency: 1}`` the site must never serve two requests at once: an
assertion on counts, not on times (the counter goes down before the answer is sent,
so a request the gate lets in after it cannot be counted together with it).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.fixtures.crawl import run_cli
from tests.fixtures.server import LocalServer, QuietHandler

EXIT_OK = 0
DETAILS = 6
ROBOTS_HOLD_S = 0.3  # how long robots.txt is held: room for an overlap, not a measure


class CountingSite:
    """Every request counted while it is served; the largest number at once kept, for
    all requests and for robots.txt and the list pages together (the start kind's)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0
        self.start_kind_in_flight = 0  # robots.txt and /list
        self.start_kind_max = 0
        self.log: list[tuple[str, str]] = []  # (host, path) in arrival order
        self.robots_done = threading.Event()
        site = self

        class Handler(QuietHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                site.serve(self)

        self.server = LocalServer(Handler)
        self.port = self.server.port

    def serve(self, handler: QuietHandler) -> None:
        path = urlsplit(handler.path).path
        host = (handler.headers.get("Host") or "").rsplit(":", 1)[0]
        start_kind = path in ("/robots.txt", "/list")
        with self.lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            if start_kind:
                self.start_kind_in_flight += 1
                self.start_kind_max = max(self.start_kind_max, self.start_kind_in_flight)
            self.log.append((host, path))
        try:
            if path == "/robots.txt":
                # held: a request let through meanwhile is counted with this one
                self.robots_done.wait(ROBOTS_HOLD_S)
                status, ctype, body = 200, "text/plain", "User-agent: *\nAllow: /\n"
            elif path == "/list":
                links = "".join(f'<a href="/item/{n}">{n}</a>' for n in range(1, DETAILS + 1))
                status, ctype, body = 200, "text/html", f"<html><body>{links}</body></html>"
            elif path.startswith("/item/"):
                n = path.rsplit("/", 1)[1]
                status, ctype = 200, "text/html"
                body = f"<html><body><h1 data-id='{n}'>item {n}</h1></body></html>"
            else:
                status, ctype, body = 404, "text/plain", "no"
        finally:
            with self.lock:
                self.in_flight -= 1  # before the answer: the client cannot be faster
                self.start_kind_in_flight -= int(start_kind)
        data = body.encode()
        handler.send_response(status)
        handler.send_header("Content-Type", ctype)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)


@pytest.fixture
def site() -> Iterator[CountingSite]:
    s = CountingSite()
    s.server.start()
    try:
        yield s
    finally:
        s.server.stop()


def _spec(root: Path, port: int, job: str, list_kind: str) -> Path:
    text = f"""\
name: robots-rate
source_type: rr
start_urls: ["http://127.0.0.1:{port}/list", "http://localhost:{port}/list"]
list:
  follow: "a::attr(href)"
{list_kind}detail:
  id: {{css: "h1::attr(data-id)", required: true}}
  fields:
    title: "h1::text"
{job}"""
    path = root / "projects" / "robots-rate" / "job.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _crawl(site: CountingSite, tmp_path: Path, *, job: str = "", list_kind: str = "") -> None:
    spec = _spec(tmp_path, site.port, job, list_kind)
    r = run_cli("crawl", str(spec), "--workspace", str(tmp_path / "ws"), cwd=tmp_path, timeout=180)
    assert r.returncode == EXIT_OK, r.stderr[-3000:]
    robots = [host for host, path in site.log if path == "/robots.txt"]
    assert sorted(robots) == ["127.0.0.1", "localhost"], site.log  # one per host, both asked
    pages = [p for _, p in site.log if p != "/robots.txt"]
    assert len(pages) == 2 * (1 + DETAILS), site.log


@pytest.mark.process
@pytest.mark.timeout(240)
def test_robots_txt_waits_at_the_job_rate_gate(site: CountingSite, tmp_path: Path) -> None:
    _crawl(site, tmp_path, job="rate: {concurrency: 1}\n")
    # every request, robots.txt included, went through the one place of the job's gate
    assert site.max_in_flight == 1, site.log


@pytest.mark.process
@pytest.mark.timeout(240)
def test_robots_txt_waits_at_the_start_kinds_gate(site: CountingSite, tmp_path: Path) -> None:
    """No job rate: robots.txt counts as a request of the start kind (``list``)."""
    _crawl(site, tmp_path, list_kind="  rate: {concurrency: 1}\n")
    assert site.start_kind_max == 1, site.log
