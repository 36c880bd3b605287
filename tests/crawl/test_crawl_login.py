"""A job's `login:` and session, through the real CLI against a members-only site
(tests/fixtures/login_site.py): a CSRF-protected form, a session that expires every
few pages mid-crawl, a kill -9 and a resume. The credentials, the CSRF tokens and the
session cookies are then searched for in every file the crawl left behind."""

from __future__ import annotations

import random
import re
import signal
import subprocess
import time
from collections.abc import Callable
from http.client import HTTPConnection
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

import pytest

from framework.workspace import Workspace
from tests.fixtures import procs
from tests.fixtures.crawl import CLI, events, url_log, workspace_items
from tests.fixtures.login_site import LoginSite

USER = "reader-7"
PASSWORD = "pa55 w0rd&secret"  # a space and an & exercise the form encoding
DETAIL_KEY = "detail-key-42xyz"
EXIT_USAGE = 2
EXIT_HALTED = 4

# the form login of SPEC; the JSON-login tests put another in its place
FORM_LOGIN = """\
  url: /login
  form: "form#login"
  fields:
    username: "{{env:FW_LOGIN_USER}}"
    password: "{{env:FW_LOGIN_PASSWORD}}"
  success: {{css: "a.logout", cookie: sessionid}}
"""
JSON_LOGIN = """\
  url: /api/login
  json: {{username: "{{env:FW_LOGIN_USER}}", password: "{{env:FW_LOGIN_PASSWORD}}"}}
"""
SPEC = (
    """\
name: members
source_type: members-demo
start_urls: ["{url}/records?page=1"]
login:
"""
    + FORM_LOGIN
    + """\
cookies: {{consent: "all-ok"}}
list:
  each: "ul.records li"
  follow: "a::attr(href)"
  next: "a.next::attr(href)"
  cookies: {{view: compact}}
detail:
  id: {{css: ".record-id::text", required: true}}
  headers: {{X-Detail-Key: "{{env:FW_DETAIL_KEY}}"}}
  fields:
    title: {{css: "h1::text", required: true}}
    category: ".category::text"
    amount: {{css: ".amount::text", type: number}}
"""
)


def json_login_spec(rest: str) -> str:
    """SPEC with a JSON login posted to /api/login; ``rest`` is the rest of `login:`."""
    return SPEC.replace(FORM_LOGIN, JSON_LOGIN + rest)


@pytest.fixture
def creds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FW_LOGIN_USER", USER)
    monkeypatch.setenv("FW_LOGIN_PASSWORD", PASSWORD)
    monkeypatch.setenv("FW_DETAIL_KEY", DETAIL_KEY)


def write_spec(tmp_path: Path, site: LoginSite, text: str = SPEC) -> Path:
    spec = tmp_path / "members.yaml"
    spec.write_text(text.format(url=site.url), encoding="utf-8")
    return spec


Members = tuple[LoginSite, Path, Path]


@pytest.fixture
def members(
    login_site: Callable[..., LoginSite], tmp_path: Path, creds: None
) -> Callable[..., Members]:
    """A factory: a login site (``USER`` and ``PASSWORD`` unless given), its spec
    (``text``, SPEC by default) and the workspace path for a crawl of it."""

    def make(text: str = SPEC, **options: Any) -> Members:
        site = login_site(**{"username": USER, "password": PASSWORD, **options})
        return site, write_spec(tmp_path, site, text), tmp_path / "ws"

    return make


def assert_truth(ws: Path, site: LoginSite) -> None:
    items = workspace_items(ws)
    got = {i["source_id"]: i for i in items.values()}
    assert sorted(got) == sorted(site.truth)
    for rid, want in site.truth.items():
        item = got[rid]
        assert item["dedupe_key"] == f"members-demo:{rid}"
        assert item["title"] == want["title"], rid
        assert item["category"] == want["category"], rid
        assert item["amount"] == want["amount"], rid


def rows_by_status(ws: Path) -> dict[str, int]:
    with Workspace.open(ws, create=False, readonly=True) as w:
        out: dict[str, int] = {}
        for by in w.store.row_counts().values():
            for st, n in by.items():
                out[str(st)] = out.get(str(st), 0) + n
        return out


def secrets_seen(site: LoginSite) -> list[str]:
    """The password, every CSRF token the site handed out, every session id it set."""
    found = [PASSWORD, USER, DETAIL_KEY]
    for r in site.requests_to("/login", "POST"):
        form = parse_qs(r.body.decode())
        found.extend(form.get("csrfmiddlewaretoken", []))
    for r in site.received:
        found.extend(re.findall(r"sessionid=([^;\s]+)", r.headers.get("cookie", "")))
    return sorted(set(found))


def assert_nowhere(values: list[str], ws: Path, *texts: str) -> None:
    """No form of any value in a file of the workspace, in a stored page (they are
    compressed in the file: read back whole) or in the crawl's output."""
    files = [p for p in ws.rglob("*") if p.is_file()]
    assert {"state.sqlite", "events.jsonl"} <= {p.name for p in files}
    blobs = [(p.name, p.read_bytes()) for p in files]
    with Workspace.open(ws, create=False, readonly=True) as w:
        blobs += [(f"stored {r.url}", s.body) for r, s in w.store.iter_responses()]
    blobs += [(f"output {i}", t.encode()) for i, t in enumerate(texts)]
    for value in values:
        forms = {value, urlencode({"x": value})[2:]}
        for form in forms:
            for name, blob in blobs:
                assert form.encode() not in blob, (form, name)


def crawl(crawl_cli: Callable[..., Any], spec: Path, ws: Path, *extra: str, exits: int = 0) -> Any:
    """``framework crawl`` in a child process, which must exit with ``exits``."""
    r = crawl_cli("crawl", str(spec), "--workspace", str(ws), *extra)
    assert r.returncode == exits, r.stderr[-3000:]
    return r


def start_crawl(spec: Path, ws: Path, *extra: str) -> subprocess.Popen[str]:
    """``framework crawl`` left running, for a test that signals it."""
    return procs.popen(
        [*CLI, "crawl", str(spec), "--workspace", str(ws), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_until(done: Callable[[], bool], seconds: float = 60) -> None:
    """Poll ``done`` until it holds or ``seconds`` have passed (the caller asserts)."""
    deadline = time.monotonic() + seconds
    while not done() and time.monotonic() < deadline:
        time.sleep(0.02)


def stored_pages(ws: Path) -> list[bytes]:
    """The bodies of the pages the workspace keeps for reparse."""
    with Workspace.open(ws, create=False, readonly=True) as w:
        return [s.body for _, s in w.store.iter_responses()]


@pytest.mark.process
def test_the_spec_alone_logs_in_and_crawls_every_record_while_the_session_expires(
    members: Callable[..., Members],
    crawl_cli: Callable[..., Any],
) -> None:
    site, spec, ws = members(records=80, expire_after=15)
    # DEBUG: Scrapy's own lines (requests, redirects, cookies) are searched too
    r = crawl(crawl_cli, spec, ws, "-L", "DEBUG")
    assert_truth(ws, site)
    # 88 pages at 15 a session: the session expired mid-crawl several times, and each
    # time the crawl logged in again instead of failing the rows
    logins = [e for e in events(ws) if e["event"] == "login"]
    assert site.logins == len(logins) >= 6
    assert [e["why"] for e in logins][:1] == ["start"]
    assert {e["why"] for e in logins[1:]} == {"expired"}
    assert rows_by_status(ws) == {"ok": 88}
    log = url_log(ws)
    assert len(log) == 88
    assert {line["outcome"] for line in log} == {"ok"}
    assert all(line["attempt"] == 1 for line in log)  # an expired page is no attempt
    assert not any("/login" in line["url"] or "/login" in (line["final_url"] or "") for line in log)
    # the login came first; every protected page was asked for with a session
    first_protected = next(i for i, q in enumerate(site.received) if q.path.startswith("/records"))
    assert site.received[0].path.startswith("/login") or site.received[0].path == "/robots.txt"
    assert any(q.path == "/login" and q.method == "POST" for q in site.received[:first_protected])
    for q in site.requests_to("/records"):
        assert "sessionid=" in q.headers.get("cookie", ""), q.path
        assert "consent=all-ok" in q.headers["cookie"]
        detail = q.path.startswith("/records/")
        assert (q.headers.get("x-detail-key") == DETAIL_KEY) is detail, q.path
        assert ("view=compact" in q.headers["cookie"]) is not detail, q.path
    posts = site.requests_to("/login", "POST")
    assert all(parse_qs(p.body.decode())["password"] == [PASSWORD] for p in posts)
    assert_nowhere(secrets_seen(site), ws, r.stdout, r.stderr)
    # the pages kept for reparse had the token and the session id: masked, not dropped
    stored = stored_pages(ws)
    assert len(stored) == 88
    for body in stored:
        assert b'value="{login:csrfmiddlewaretoken}"' in body
        assert b'data-session="{cookie:sessionid}"' in body


@pytest.mark.process
def test_a_session_of_fewer_pages_than_requests_in_flight_drains_at_default_concurrency(
    members: Callable[..., Members],
    crawl_cli: Callable[..., Any],
) -> None:
    """A session that serves 7 pages, 16 requests at a time (Scrapy's default): the
    requests that waited at the gate through a login go back behind the ones that found
    the session spent, so the new session's pages go to those first. Before, the waiting
    ones spent it and the re-sent ones found it spent again, until `max_relogins` turned
    them into error rows (exit 4)."""
    site, spec, ws = members(records=80, expire_after=7, delay=0.01)
    crawl(crawl_cli, spec, ws, "-L", "WARNING")
    assert_truth(ws, site)
    assert rows_by_status(ws) == {"ok": 88}
    # and no session was wasted: 88 pages at 7 a session need 13 logins (13 here in
    # every run tried; 13 to 16 allow for a page that finds a fresh session spent
    # because it raced the one before it)
    assert -(-88 // 7) <= site.logins <= 16, site.logins


def _lines(ws: Path) -> int:
    try:
        return (ws / "urls.jsonl").read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def wait_fetched(proc: subprocess.Popen[str], ws: Path, lines: int) -> None:
    """Wait until the URL log has ``lines`` lines or the crawl has ended."""
    wait_until(lambda: proc.poll() is not None or _lines(ws) >= lines)


@pytest.mark.kill
@pytest.mark.slow
def test_kill_9_mid_crawl_and_resume_logs_in_again_and_reaches_the_truth(
    members: Callable[..., Members],
    crawl_cli: Callable[..., Any],
) -> None:
    site, spec, ws = members(records=80, expire_after=12, delay=0.03)
    rng = random.Random(20261130)
    outputs: list[str] = []
    landed = 0
    for _ in range(6):
        if landed == 2:
            break
        before = _lines(ws)
        proc = start_crawl(spec, ws, "-L", "INFO")
        wait_fetched(proc, ws, before + 10)
        time.sleep(rng.uniform(0.0, 0.5))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            landed += 1
        out, err = proc.communicate(timeout=60)
        outputs += [out, err]
    assert landed == 2
    assert 0 < len({line["row"] for line in url_log(ws) if line["outcome"] == "ok"}) < 88
    site.expire_all()  # the old session is gone too: a resume must log in again
    logins_before = site.logins
    r = crawl(crawl_cli, spec, ws, "-L", "DEBUG")
    assert_truth(ws, site)
    assert rows_by_status(ws) == {"ok": 88}
    starts = [e for e in events(ws) if e["event"] == "login" and e["why"] == "start"]
    assert len(starts) == 3  # each run logged in first, the resume too
    assert site.logins > logins_before
    # rows in flight at a kill went back to pending, not to error; none fetched twice ok
    ok_rows = [line["row"] for line in url_log(ws) if line["outcome"] == "ok"]
    assert len(ok_rows) == len(set(ok_rows)) == 88
    assert_nowhere(secrets_seen(site), ws, r.stdout, r.stderr, *outputs)


@pytest.mark.process
def test_a_wrong_password_stops_before_any_page_with_one_clear_line(
    members: Callable[..., Members],
    crawl_cli: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    site, spec, ws = members(password="the-right-one")
    r = crawl(crawl_cli, spec, ws, exits=EXIT_HALTED)
    errors = [ln for ln in r.stderr.splitlines() if "ERROR: login failed" in ln]
    assert len(errors) == 1, r.stderr[-3000:]
    assert "nothing matches 'a.logout'" in errors[0]
    assert "wrong credentials?" in errors[0]
    assert r.stderr.strip().splitlines()[-1] == (
        "error: members: the login failed (the error above says why) (a human must look)"
    )
    assert "Traceback" not in r.stderr
    assert site.requests_to("/records") == []  # no page was asked for
    assert rows_by_status(ws) == {}  # and no row made or touched
    assert [e["event"] for e in events(ws)][:1] == ["login_failed"]
    assert_nowhere([PASSWORD], ws, r.stdout, r.stderr)

    # a resume with the right password logs in and finishes
    monkeypatch.setenv("FW_LOGIN_PASSWORD", "the-right-one")
    crawl(crawl_cli, spec, ws)
    assert_truth(ws, site)


@pytest.mark.process
def test_a_missing_variable_is_a_clear_error_before_any_request(
    members: Callable[..., Members],
    crawl_cli: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    site, spec, ws = members()
    monkeypatch.delenv("FW_LOGIN_PASSWORD")
    r = crawl(crawl_cli, spec, ws, exits=EXIT_USAGE)
    assert "environment variable FW_LOGIN_PASSWORD is not set" in r.stderr
    assert "Traceback" not in r.stderr
    assert site.received == []


@pytest.mark.process
def test_logins_that_keep_expiring_stop_the_run_instead_of_looping(
    members: Callable[..., Members],
    crawl_cli: Callable[..., Any],
) -> None:
    site, spec, ws = members(
        SPEC.replace("  url: /login\n", "  url: /login\n  max_relogins: 2\n"),
        expire_after=0,  # dead on arrival
    )
    r = crawl(crawl_cli, spec, ws, exits=EXIT_HALTED)
    assert "session_lost: the session expired 2 times in a row right after a login" in r.stderr
    assert "the session kept expiring right after each login" in r.stderr.splitlines()[-1]
    assert site.logins == 3  # the first login and two more, then it stopped
    assert rows_by_status(ws) == {"pending": 1}  # the start page waits for the next run
    assert _lines(ws) == 0  # no page was fetched: nothing in the URL log


@pytest.mark.process
def test_a_json_login(
    members: Callable[..., Members],
    crawl_cli: Callable[..., Any],
) -> None:
    text = json_login_spec("  success: {{status: 200, cookie: sessionid}}\n")
    assert "/api/login" in text
    site, spec, ws = members(text, records=30, expire_after=None)
    r = crawl(crawl_cli, spec, ws)
    assert_truth(ws, site)
    assert site.logins == 1
    assert_nowhere(secrets_seen(site), ws, r.stdout, r.stderr)


def test_the_fixture_refuses_a_wrong_csrf_token_and_a_wrong_password(
    login_site: Callable[..., LoginSite],
) -> None:
    """The site's checks are real (else the crawl tests could not fail)."""
    site = login_site(username=USER, password=PASSWORD)

    host, port = site.url.removeprefix("http://").split(":")

    def ask(method: str, body: str = "", cookie: str = "") -> tuple[int, str]:
        conn = HTTPConnection(host, int(port), timeout=10)
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
        if cookie:
            headers["Cookie"] = f"csrftoken={cookie}"
        try:
            conn.request(method, "/login", body=body, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.read().decode()
        finally:
            conn.close()

    def post(token: str, cookie: str, password: str) -> tuple[int, str]:
        form = {"csrfmiddlewaretoken": token, "username": USER, "password": password}
        return ask("POST", urlencode(form), cookie)

    token = re.search(r'name="csrfmiddlewaretoken" value="(\w+)"', ask("GET")[1])
    assert token is not None
    assert post("0" * 32, "0" * 32, PASSWORD)[0] == 403  # a token the site never gave
    assert post(token[1], "f" * 32, PASSWORD)[0] == 403  # not the cookie's
    status, page = post(token[1], token[1], "wrong")
    assert status == 200
    assert "wrong username or password" in page
    assert site.logins == 0
    assert post(token[1], token[1], PASSWORD)[0] == 302  # to the account page
    assert site.logins == 1


@pytest.mark.process
def test_the_login_form_template_crawls_the_members_site(
    login_site: Callable[..., LoginSite],
    tmp_path: Path,
    crawl_cli: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`framework new --template login-form` as written, only the start URL given."""
    site = login_site(username=USER, password=PASSWORD, records=20, expire_after=8)
    (tmp_path / "projects").mkdir()
    r = crawl_cli(
        "new",
        "members",
        "--template",
        "login-form",
        "--start-url",
        site.url + "/records",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    monkeypatch.setenv("FW_SITE_USER", USER)
    monkeypatch.setenv("FW_SITE_PASSWORD", PASSWORD)
    ws = tmp_path / "ws"
    job = tmp_path / "projects" / "members" / "job.yaml"
    r = crawl(crawl_cli, job, ws, "-s", "DOWNLOAD_DELAY=0")
    items = {i["source_id"]: i for i in workspace_items(ws).values()}
    assert {k: (v["title"], v["amount"]) for k, v in items.items()} == {
        k: (v["title"], v["amount"]) for k, v in site.truth.items()
    }
    assert site.logins >= 3  # 22 pages at 8 a session
    assert_nowhere(secrets_seen(site), ws, r.stdout, r.stderr)


def test_validate_refuses_what_a_login_cannot_run_with(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(
        """\
name: x
source_type: x
start_urls: ["http://a.example/records"]
cookies: {consent: "ok; admin=1", session: abc123}
login:
  url: http://elsewhere.example/login
  form: "form#login["
  fields: {username: "{env:FW_SITE_USER}", password: hunter22}
  success: {css: "a.logout"}
  expired: {url: "("}
list:
  each: li
  follow: "a::attr(href)"
  headers: {X-Api-Key: literal-key}
detail:
  id: ".id::text"
  cookies: {"bad name": x}
settings: {COOKIES_ENABLED: false}
""",
        encoding="utf-8",
    )
    from framework.errors import SpecError
    from framework.spec import load_spec

    with pytest.raises(SpecError) as err:
        load_spec(spec)
    got = [f"{p.line}: {p.what}" for p in err.value.problems]
    assert got == [
        "4: cookie 'consent' has a character a cookie value cannot carry",
        "4: a literal credential in cookie 'session' (it would be stored and shared)",
        "6: login URL host 'elsewhere.example' is not one the job may request",
        "7: invalid CSS selector 'form#login[': Expected ident or '*', got <EOF at 11>",
        "8: a literal credential in login field 'password' (it would be stored and shared)",
        "10: invalid regex '(': missing ), unterminated subpattern at position 0",
        "14: a literal credential in header 'X-Api-Key' (it would be stored and shared)",
        "17: cookie name 'bad name'",
        "18: COOKIES_ENABLED: false with a `login:` (the session is a cookie)",
    ]
    # both ways at once, or neither
    spec.write_text(
        "name: x\nsource_type: x\nstart_urls: ['http://a.example/']\n"
        "login: {url: /login, form: form, json: {a: b}}\ndetail: {id: h1}\n",
        encoding="utf-8",
    )
    with pytest.raises(SpecError) as err:
        load_spec(spec)
    assert "exactly one of `form` (a selector) or `json`" in str(err.value)


@pytest.mark.parametrize(
    ("name", "refused"),
    [
        ("JSESSIONID", True),
        ("PHPSESSID", True),
        ("ASP.NET_SessionId", True),
        ("connect.sid", True),
        ("laravel_session", True),
        ("sid", True),
        ("auth_token", True),
        ("consent", False),
        ("lang", False),
        ("cookie_banner_seen", False),
    ],
)
def test_a_literal_session_cookie_is_refused_under_the_names_servers_give_it(
    tmp_path: Path, name: str, refused: bool
) -> None:
    """A session pasted from a browser is a credential whatever the server calls it:
    `JSESSIONID`, `PHPSESSID` and `connect.sid` passed the check that `session` and
    `sessionid` met. A cookie that is not one (a consent, a language) is left alone."""
    from framework.errors import SpecError
    from framework.spec import load_spec

    spec = tmp_path / "job.yaml"
    spec.write_text(
        "name: x\nsource_type: x\nstart_urls: ['http://a.example/']\n"
        f"cookies: {{'{name}': 4f9c2e71a0b3}}\ndetail: {{id: h1}}\n",
        encoding="utf-8",
    )
    if not refused:
        load_spec(spec)
        return
    with pytest.raises(SpecError) as err:
        load_spec(spec)
    assert f"a literal credential in cookie '{name}'" in str(err.value)
    # the same cookie from the environment is how it is given
    spec.write_text(
        spec.read_text(encoding="utf-8").replace("4f9c2e71a0b3", '"{env:FW_SITE_SESSION}"'),
        encoding="utf-8",
    )
    load_spec(spec)


@pytest.mark.process
def test_a_login_refused_mid_crawl_stops_with_the_unfetched_rows_pending(
    members: Callable[..., Members],
    crawl_cli: Callable[..., Any],
) -> None:
    # the account is locked after two logins: the third (a re-login) is refused
    site, spec, ws = members(expire_after=10, max_logins=2)
    r = crawl(crawl_cli, spec, ws, exits=EXIT_HALTED)
    assert "ERROR: login failed: nothing matches 'a.logout'" in r.stderr
    assert (
        r.stderr.strip()
        .splitlines()[-1]
        .endswith("the login failed (the error above says why) (a human must look)")
    )
    rows = rows_by_status(ws)
    assert "error" not in rows  # the pages that met the expired session are not errors
    assert rows["pending"] > 0
    assert 0 < rows["ok"] <= 20  # two sessions of ten pages
    assert {line["outcome"] for line in url_log(ws)} == {"ok"}
    assert [e["event"] for e in events(ws)].count("login_failed") == 1
    # the account unlocked: the next run logs in and finishes the rest
    site.max_logins = None
    crawl(crawl_cli, spec, ws)
    assert_truth(ws, site)


@pytest.mark.process
def test_preview_logs_in_first_and_shows_a_protected_page(
    members: Callable[..., Members],
    crawl_cli: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    site, spec, _ = members()
    r = crawl_cli("preview", str(spec), site.url + "/records/R007", "--kind", "detail", "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    assert '"Record number 7"' in r.stdout
    assert site.logins == 1
    for value in secrets_seen(site):
        assert value not in r.stdout + r.stderr
    # a wrong password: one line saying so, no page shown
    monkeypatch.setenv("FW_LOGIN_PASSWORD", "not-the-password")
    r = crawl_cli("preview", str(spec), site.url + "/records/R007", "--kind", "detail")
    assert r.returncode != 0
    assert "login failed: nothing matches 'a.logout'" in r.stderr
    assert "Record number 7" not in r.stdout
    assert site.logins == 1


@pytest.mark.kill
def test_sigterm_while_logging_in_is_an_interruption_not_a_failed_login(
    members: Callable[..., Members],
) -> None:
    site, spec, ws = members(delay=3.0)  # a slow login page
    proc = start_crawl(spec, ws)
    wait_until(lambda: bool(site.requests_to("/login")))
    assert site.requests_to("/login")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 3, err[-3000:]  # a checkpoint: run again
    assert "login failed" not in err
    assert "login_failed" not in [e["event"] for e in events(ws)]
    assert site.requests_to("/records") == []


@pytest.mark.process
def test_a_json_login_whose_session_is_a_token_in_the_answer(
    members: Callable[..., Members],
    crawl_cli: Callable[..., Any],
) -> None:
    text = json_login_spec(
        '  token: {{json: "$.data.token", header: Authorization, value: "Bearer {{token}}"}}\n'
        '  expired: {{url: "/login"}}  # pages redirect to the login form, not to /api/login\n'
    )
    assert "$.data.token" in text
    # no cookie at all: the session is the token, sent as a header; it expires too
    site, spec, ws = members(text, records=30, expire_after=12, api_cookie=False)
    r = crawl(crawl_cli, spec, ws, "-L", "DEBUG")
    assert_truth(ws, site)
    assert site.logins >= 3  # 33 pages at 12 a session
    pages = site.requests_to("/records")
    assert all(q.headers.get("authorization", "").startswith("Bearer ") for q in pages)
    assert not any("sessionid=" in q.headers.get("cookie", "") for q in pages)
    assert all(b'data-session="{session:token}"' in body for body in stored_pages(ws))
    assert_nowhere(secrets_seen(site), ws, r.stdout, r.stderr)


def test_an_expired_url_pattern_runs_within_the_time_limit(caplog):
    """`login.expired.url` runs on the bounded engine under FRAMEWORK_EXTRACT_TIMEOUT: a
    pattern that backtracks on a long URL is taken as not matching and said, where
    Python's `re` held the crawl (and ignored Ctrl-C) until it finished."""
    from framework.crawl.secrets import Secrets
    from framework.crawl.session import Session
    from framework.extract.patterns import Limits
    from framework.spec.models import JobSpec

    spec = JobSpec.model_validate(
        {
            "name": "members",
            "source_type": "m",
            "start_urls": ["http://h/records"],
            "login": {
                "url": "/login",
                "form": "form#login",
                "fields": {"username": "u"},
                "expired": {"url": "(a|aa)+$"},
            },
            "pages": {"records": {"id": "h1::text"}},
        }
    )
    assert spec.login is not None
    session = Session(
        spec.login,
        start_url="http://h/records",
        secrets=Secrets.from_spec(spec, environ={}),
        headers={},
        crawler=None,  # type: ignore[arg-type]  # not reached by what is tested here
        event=lambda *a, **k: None,
        stop=lambda reason: None,
        limits=Limits(timeout=0.2),
    )
    started = time.process_time()
    assert not session._login_like("http://h/" + "a" * 60 + "!")
    assert time.process_time() - started < 5
    assert "login.expired.url: extraction ran over FRAMEWORK_EXTRACT_TIMEOUT" in caplog.text
    assert session._login_like("http://h/aaaa")  # where it matches, it still does
