"""A rendered page is as hostile as a plain one: the browser's own requests obey the
crawl's rule (http(s) only, the job's allowed_domains), through the real CLI, the real
engine and Debian's Chromium.

The job's host is ``127.0.0.1``; the off-site host is a second server reached as
``localhost`` (the same machine under another name), so every request that reached it
is counted there. The rendered list page tries everything a script can: off-site
images, stylesheets, scripts, frames, fetch(), a WebSocket, an on-site fetch redirected
off-site, a file: fetch and navigations to ``file:`` and off-site; a detail page
redirects the browser's own navigation off-site. On-site subresources must still load.

Skips without the plugin or Chromium unless ``FRAMEWORK_REQUIRE_BROWSER=1`` / CI.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.crawl import events, run_cli, url_log, workspace_items
from tests.fixtures.hostile import HostileServer

EXIT_OK = 0
EXIT_HALTED = 4  # a row in error (the refused redirect) needs a look
PASSWD = Path("/etc/passwd")


def _require_browser() -> None:
    required = os.environ.get("CI") == "true" or os.environ.get("FRAMEWORK_REQUIRE_BROWSER") == "1"
    try:
        from framework_playwright.browser import find_chromium

        find_chromium()
    except Exception as exc:  # the plugin missing (ImportError) or no Chromium
        if required:
            pytest.fail(f"a browser is required here (CI): {exc}")
        pytest.skip(f"no playwright plugin or Chromium: {exc}")


SPEC = """\
name: hostile-js
source_type: hostile
start_urls: ["{base}/"]
render: playwright
list:
  follow: "a.go::attr(href)"
  browser:
    wait_for: {{selector: "#done", timeout: 20}}
detail:
  id: {{url: '([^/]+)$'}}
  fields:
    text: "p.text::text"
"""


def _page(body: str, head: str = "") -> str:
    return f"<html><head>{head}</head><body>{body}</body></html>"


def _rows(ws: Path) -> dict[str, dict[str, Any]]:
    con = sqlite3.connect(f"file:{ws / 'state.sqlite'}?mode=ro", uri=True)
    try:
        cur = con.execute("SELECT url, status, last_error_kind, last_error FROM rows")
        return {u: {"status": s, "error_kind": k, "error": e} for u, s, k, e in cur}
    finally:
        con.close()


def _workspace_bytes(ws: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(ws.rglob("*")) if p.is_file())


@pytest.mark.browser
@pytest.mark.timeout(300)
def test_a_rendered_pages_own_requests_never_leave_the_allowed_hosts(
    hostile_server: Callable[[], HostileServer], tmp_path: Path
) -> None:
    _require_browser()
    site = hostile_server()
    elsewhere = hostile_server()
    other = f"http://localhost:{elsewhere.port}"
    for path in ("/img.png", "/style.css", "/script.js", "/frame", "/xhr", "/ws", "/hijack"):
        elsewhere.route(path, "off-site content", headers={"Content-Type": "text/plain"})
    elsewhere.route("/landing", _page("<p class='text'>off-site landing</p>"))
    elsewhere.route("/robots.txt", "User-agent: *\nAllow: /\n")
    secret_line = PASSWD.read_text(encoding="utf-8").splitlines()[0]

    script = f"""
      fetch("{other}/xhr").catch(() => 0);
      fetch("/bounce").catch(() => 0);
      fetch("file:///etc/passwd").then(r => r.text())
        .then(t => document.body.insertAdjacentHTML("beforeend", "<pre>" + t + "</pre>"))
        .catch(() => 0);
      try {{ new WebSocket("ws://localhost:{elsewhere.port}/ws"); }} catch (e) {{}}
      location = "file:///etc/passwd";
      fetch("/data.txt").then(r => r.text()).then(t => setTimeout(() => {{
        document.body.insertAdjacentHTML("beforeend", "<p id='done'>" + t + "</p>");
      }}, 300));
    """
    site.route(
        "/",
        _page(
            f'<img src="{other}/img.png"><img src="/pic.png">'
            f'<iframe src="{other}/frame"></iframe>'
            f'<a class="go" href="/fine">fine</a>'
            f'<a class="go" href="/nav-bounce">redirected off-site</a>'
            f'<a class="go" href="/hijack-nav">navigates off-site</a>'
            f"<script>{script}</script>",
            head=f'<link rel="stylesheet" href="{other}/style.css">'
            f'<script src="{other}/script.js"></script>',
        ),
    )
    site.route("/pic.png", b"GIF89a", headers={"Content-Type": "image/gif"})
    site.route("/data.txt", "on-site data", headers={"Content-Type": "text/plain"})
    site.route("/bounce", status=302, headers={"Location": f"{other}/landing"})
    site.route("/fine", _page("<p class='text'>fine text</p>"))
    site.route("/nav-bounce", status=302, headers={"Location": f"{other}/landing?token=s3cr3t"})
    site.route(
        "/hijack-nav",
        _page(
            "<p class='text'>stays here</p>", head=f'<script>location = "{other}/hijack";</script>'
        ),
    )
    site.route("/robots.txt", "User-agent: *\nAllow: /\n", headers={"Content-Type": "text/plain"})
    spec = tmp_path / "projects" / "hostile-js" / "job.yaml"
    spec.parent.mkdir(parents=True)
    spec.write_text(SPEC.format(base=site.url), encoding="utf-8")
    ws = tmp_path / "ws"

    r = run_cli("crawl", str(spec), "--workspace", str(ws), "-L", "INFO", cwd=tmp_path, timeout=240)
    assert r.returncode == EXIT_HALTED, r.stderr[-3000:]
    assert "Traceback" not in r.stderr

    # not one request reached the off-site host: subresources, fetch, WebSocket,
    # the redirect hops of a fetch and of a navigation, a script's navigation
    assert elsewhere.total_hits() == 0, {p: elsewhere.hits(p) for p in elsewhere.routes}
    # the page's on-site requests were not caught up in it
    assert site.hits("/pic.png") == 1
    assert site.hits("/data.txt") == 1
    assert site.hits("/bounce") == 1  # on-site: sent; its hop off-site was not

    rows = _rows(ws)
    assert rows[site.url + "/"]["status"] == "ok"
    assert rows[site.url + "/fine"]["status"] == "ok"
    # a script sent the page elsewhere: what is left is Chromium's error page, so the
    # row is an error naming the target, as a plain page's meta refresh there would be
    hijacked = rows[site.url + "/hijack-nav"]
    assert (hijacked["status"], hijacked["error_kind"]) == ("error", "offsite"), hijacked
    assert f"browser navigation from {site.url}/hijack-nav to {other}/hijack" in hijacked["error"]
    bounced = rows[site.url + "/nav-bounce"]
    assert (bounced["status"], bounced["error_kind"]) == ("error", "offsite"), bounced
    assert f"localhost:{elsewhere.port}/landing" in bounced["error"]
    assert f"browser redirect from {site.url}/nav-bounce to" in bounced["error"]
    assert "s3cr3t" not in bounced["error"]
    items = workspace_items(ws)
    assert sorted(i["text"] for i in items.values()) == ["fine text"]

    # nothing refused is silent: said once per scheme or host, as refused links are
    refused = [e for e in events(ws) if e["event"] == "browser_request_refused"]
    told = {(e["why"], e["target"]) for e in refused}
    assert ("offsite", "localhost") in told, refused
    assert ("scheme", "file") in told, refused
    assert len(refused) == len(told)  # once each
    assert "refused a rendered page's requests to off-site host 'localhost'" in r.stderr

    everything = _workspace_bytes(ws)
    assert secret_line.encode() not in everything
    assert b"off-site" not in everything
    assert b"s3cr3t" not in everything
    # every request the crawl itself logged was on-site http
    assert all(line["url"].startswith(site.url) for line in url_log(ws))


@pytest.mark.browser
@pytest.mark.timeout(300)
def test_an_empty_allowed_domains_lets_the_browser_go_anywhere_http(
    hostile_server: Callable[[], HostileServer], tmp_path: Path
) -> None:
    """The rule is the spec's: ``allowed_domains: []`` allows every host (never another
    scheme), so the same off-site image loads. The control of the test above."""
    _require_browser()
    site = hostile_server()
    elsewhere = hostile_server()
    elsewhere.route("/img.png", b"GIF89a", headers={"Content-Type": "image/gif"})
    site.route(
        "/",
        _page(
            f'<img src="http://localhost:{elsewhere.port}/img.png"><a class="go" href="/fine">f</a>'
            '<script>location = "file:///etc/passwd";'
            "setTimeout(() => document.body.insertAdjacentHTML("
            '"beforeend", "<p id=\'done\'>x</p>"), 300);</script>'
        ),
    )
    site.route("/fine", _page("<p class='text'>fine text</p>"))
    spec = tmp_path / "projects" / "hostile-js" / "job.yaml"
    spec.parent.mkdir(parents=True)
    spec.write_text(SPEC.format(base=site.url) + "allowed_domains: []\n", encoding="utf-8")
    r = run_cli(
        "crawl",
        str(spec),
        "--workspace",
        str(tmp_path / "ws"),
        "-L",
        "INFO",
        cwd=tmp_path,
        timeout=240,
    )
    assert r.returncode == EXIT_OK, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    assert elsewhere.hits("/img.png") == 1
    refused = [e for e in events(tmp_path / "ws") if e["event"] == "browser_request_refused"]
    assert {(e["why"], e["target"]) for e in refused} == {("scheme", "file")}


@pytest.mark.browser
@pytest.mark.timeout(300)
def test_an_off_site_ip_address_is_refused_by_the_routes_alone(
    hostile_server: Callable[[], HostileServer], tmp_path: Path
) -> None:
    """The job's host is ``localhost`` and the off-site host the address ``127.0.0.1``:
    no resolver rule can hide an address, so what keeps the page's requests home here
    is the routes (and the WebSocket route) alone."""
    _require_browser()
    site = hostile_server()
    elsewhere = hostile_server()
    home = f"http://localhost:{site.port}"
    other = f"http://127.0.0.1:{elsewhere.port}"
    for path in ("/img.png", "/style.css", "/script.js", "/frame", "/xhr", "/ws", "/beacon"):
        elsewhere.route(path, "off-site content", headers={"Content-Type": "text/plain"})
    script = f"""
      fetch("{other}/xhr", {{mode: "no-cors"}}).catch(() => 0);
      navigator.sendBeacon("{other}/beacon", "x");
      try {{ new WebSocket("ws://127.0.0.1:{elsewhere.port}/ws"); }} catch (e) {{}}
      fetch("/data.txt").then(r => r.text()).then(t => setTimeout(() => {{
        document.body.insertAdjacentHTML("beforeend", "<p id='done'>" + t + "</p>");
      }}, 300));
    """
    site.route(
        "/",
        _page(
            f'<img src="{other}/img.png"><iframe src="{other}/frame"></iframe>'
            f'<a class="go" href="/fine">fine</a><script>{script}</script>',
            head=f'<link rel="stylesheet" href="{other}/style.css">'
            f'<script src="{other}/script.js"></script>',
        ),
    )
    site.route("/data.txt", "on-site data", headers={"Content-Type": "text/plain"})
    site.route("/fine", _page("<p class='text'>fine text</p>"))
    spec = tmp_path / "projects" / "hostile-js" / "job.yaml"
    spec.parent.mkdir(parents=True)
    spec.write_text(SPEC.format(base=home), encoding="utf-8")
    ws = tmp_path / "ws"

    r = run_cli("crawl", str(spec), "--workspace", str(ws), "-L", "INFO", cwd=tmp_path, timeout=240)
    assert r.returncode == EXIT_OK, r.stderr[-3000:]
    assert elsewhere.total_hits() == 0, {p: elsewhere.hits(p) for p in elsewhere.routes}
    assert site.hits("/data.txt") == 1
    assert sorted(i["text"] for i in workspace_items(ws).values()) == ["fine text"]
    refused = [e for e in events(ws) if e["event"] == "browser_request_refused"]
    assert [(e["why"], e["target"]) for e in refused] == [("offsite", "127.0.0.1")], refused


# ------------------------------------------------------------------ the rule, in parts
def test_the_browser_rule_is_the_crawls_rule() -> None:
    guard_mod = pytest.importorskip("framework_playwright.guard")
    guard = guard_mod.BrowserGuard(frozenset({"example.org"}))
    assert guard.why("http://example.org/a") is None
    assert guard.why("https://www.example.org:8443/a") is None  # subdomain, any port
    assert guard.why("wss://live.example.org/feed") is None  # a WebSocket, as https
    assert guard.why("ws://evil.test/feed") == "offsite"
    assert guard.why("http://example.org.evil.test/") == "offsite"
    assert guard.why("http://10.0.0.1/") == "offsite"
    assert guard.why("file:///etc/passwd") == "scheme"
    assert guard.why("ftp://example.org/x") == "scheme"
    assert guard.why("chrome-error://chromewebdata/") == "scheme"
    # not requests: nothing leaves the browser, nothing is read from the disk
    for local in ("data:image/png;base64,AAAA", "blob:http://example.org/1", "about:blank"):
        assert guard.why(local) is None
    # an empty allowed_domains allows every host, never another scheme
    anywhere = guard_mod.BrowserGuard(frozenset())
    assert anywhere.why("http://evil.test/") is None
    assert anywhere.why("file:///etc/passwd") == "scheme"


def test_the_browser_refuses_the_addresses_the_crawl_refuses() -> None:
    """A job started on a public host: a page's request, a WebSocket or a navigation to
    a loopback, private or link-local IP literal is refused in the browser too."""
    guard_mod = pytest.importorskip("framework_playwright.guard")
    from framework.crawl.addresses import AddressPolicy

    guard = guard_mod.BrowserGuard(frozenset())
    assert guard.why("http://169.254.169.254/latest/meta-data/") is None  # no rule yet
    guard.policy = AddressPolicy.for_job(["http://93.184.215.14/"])  # a public start host
    for url in (
        "http://169.254.169.254/latest/meta-data/",
        "http://127.0.0.1:5432/",
        "ws://10.0.0.5/feed",
        "http://[::ffff:127.0.0.1]/",
    ):
        assert guard.why(url) == "private_target", url
    assert "169.254.169.254, a link-local address" in guard.detail(
        "private_target", "http://169.254.169.254/x"
    )
    assert guard.why("http://93.184.215.14/other") is None
    # a job started on loopback keeps loopback, and nothing else private
    local = guard_mod.BrowserGuard(frozenset())
    local.policy = AddressPolicy.for_job(["http://127.0.0.1:8800/"])
    assert local.why("http://127.0.0.1:9/") is None
    assert local.why("http://192.168.1.1/") == "private_target"


def test_refusals_are_counted_always_and_told_once_per_target() -> None:
    guard_mod = pytest.importorskip("framework_playwright.guard")
    counted: list[str] = []
    told: list[dict[str, Any]] = []

    def event(name: str, **data: Any) -> None:
        told.append({"event": name, **data})

    guard = guard_mod.BrowserGuard(
        frozenset({"site.test"}), event=lambda: event, count=counted.append
    )
    for path in ("/a.png", "/b.js?token=s3cr3t", "/c.css"):
        guard.refused("offsite", f"http://cdn.test{path}", "http://site.test/", "image")
    guard.refused("scheme", "file:///etc/passwd", "http://site.test/", "navigation")
    guard.refused("offsite", "http://other.test/", "http://site.test/", "fetch")
    assert counted == ["framework/render/refused/offsite"] * 3 + [
        "framework/render/refused/scheme",
        "framework/render/refused/offsite",
    ]
    assert [(e["why"], e["target"]) for e in told] == [
        ("offsite", "cdn.test"),
        ("scheme", "file"),
        ("offsite", "other.test"),
    ]
    assert {e["event"] for e in told} == {"browser_request_refused"}
    assert told[0]["url"] == "http://cdn.test/a.png"
    assert told[0]["page"] == "http://site.test/"


def test_the_resolver_rule_leaves_only_the_jobs_hosts() -> None:
    guard_mod = pytest.importorskip("framework_playwright.guard")
    assert guard_mod.resolver_rule(frozenset({"example.org", "127.0.0.1"})) == (
        "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1, EXCLUDE *.127.0.0.1, "
        "EXCLUDE example.org, EXCLUDE *.example.org"
    )
    assert guard_mod.resolver_rule(frozenset()) is None  # every host allowed
    assert guard_mod.resolver_rule(frozenset({"::1"})) is None  # cannot be written
